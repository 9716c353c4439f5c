"""`--engine trtllm` prices a sliding-window model's V1 pool at every layer's bytes a token, and says why
(calc/analysis/memory/trtllm_windows.py).

Sources: tensorrt_llm/_torch/pyexecutor/_util.py _create_kv_cache_manager at NVIDIA/TensorRT-LLM 0004396720 (per-layer
windows are derived from layer_types for KVCacheManagerV2 only, "otherwise every layer lands in one full-context
pool"); tensorrt_llm/_torch/pyexecutor/resource_manager.py KVCacheManager.__init__ at 001541bad8 (an unset
max_attention_window is [max_seq_len]: one window, is_vswa false, the pool carved at every layer's bytes a token).
The layer counts are the configs' own (tests/configs/model_types, SOURCES.yaml): exaone4.json's layer_types list 48
sliding_attention of 64 layers, gemma3_multimodal.json's text_config 52 of 62; llama4.json (Llama-4-Scout) sets no
no_rope_layers, so transformers' Llama4TextConfig default (no_rope_layer_interval 4) leaves every fourth layer NoPE
and 36 of 48 chunked; gpt-oss-20b's config.json (huggingface.co/openai/gpt-oss-20b) alternates 12 sliding and 12
full layers.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from calc.analysis.memory.trtllm_windows import window_note, windowed_layers
from calc.cli import main
from calc.cli.options import load_model

CONFIGS = "tests/configs/model_types"
GIB = 2**30
TOKENS_PER_BLOCK = 32  # KvCacheConfig.tokens_per_block's default (tensorrt_llm/llmapi/llm_args.py)


def _run(*args: str) -> str:
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, list(args))  # one note, one line
    assert result.exit_code == 0, result.output
    return result.output


def _allocated(per_token: int, memory: int) -> str:
    """KVCacheManager::allocatePools' line for a pool of whole blocks of `per_token` bytes a token."""
    blocks = memory // (TOKENS_PER_BLOCK * per_token)
    tokens = blocks * TOKENS_PER_BLOCK
    return f"[MemUsageChange] Allocated {tokens * per_token / GIB:.2f} GiB for max tokens in paged KV cache ({tokens})."


def test_bounded_layers_are_counted_from_the_configs() -> None:
    assert windowed_layers(load_model(f"{CONFIGS}/exaone4.json", ())) == {"sliding-window": 48}
    assert windowed_layers(load_model(f"{CONFIGS}/gemma3_multimodal.json", ())) == {"sliding-window": 52}
    assert windowed_layers(load_model(f"{CONFIGS}/llama4.json", ())) == {"chunked-attention": 36}
    assert windowed_layers(load_model("gpt-oss-20b", ())) == {"sliding-window": 12}
    assert windowed_layers(load_model(f"{CONFIGS}/qwen2.json", ())) == {}  # use_sliding_window false
    assert window_note(load_model(f"{CONFIGS}/qwen2.json", ())) is None


def test_a_v1_sliding_model_is_priced_at_every_layer_and_told_why() -> None:
    """EXAONE-4.0 (exaone4.json, Exaone4ForCausalLM, V1 under "auto"): 64 layers x K and V x 8 KV heads x 128 x 2 B
    = 262,144 B a token, its 48 sliding layers (window 4,096) included: 8 GiB holds 1,024 blocks, 32,768 tokens. Were
    the sliding layers priced at their window, 16 full layers alone (65,536 B a token) would hold four times as many."""
    per_token = 64 * 2 * 8 * 128 * 2
    output = _run("memory", f"{CONFIGS}/exaone4.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "32k")
    assert _allocated(per_token, 8 * GIB) in output
    assert "[MemUsageChange] Allocated 8.00 GiB for max tokens in paged KV cache (32768)." in output
    assert ("V1 caches exaone4's 48 sliding-window layers for the whole context, a whole token each as for full "
            "attention") in output
    assert "_util.py _create_kv_cache_manager at 0004396720" in output
    assert "calculate_max_num_blocks_for_vswa at 001541bad8), which is not sized here" in output


def test_a_v2_preferring_sliding_model_set_to_v1_gets_the_window_note() -> None:
    """Gemma-3-27B (gemma3_multimodal.json) at TP 4 x PP 2 with V1 asked for (its default, V2, is sized under --pp
    too: tests/test_trtllm_v2_pp.py): 62 / 2 layers x K and V x 16 / 4 KV heads x 128 x 2 B = 63,488 B a token on one
    GPU; 8 GiB holds floor(2^33 / (32 x 63,488)) = 4,228 blocks."""
    per_token = 62 // 2 * 2 * (16 // 4) * 128 * 2
    output = _run("memory", f"{CONFIGS}/gemma3_multimodal.json", "--engine", "trtllm", "--kv-memory", "8GiB",
                  "--seq", "4k", "--tp", "4", "--pp", "2", "--use-kv-cache-manager-v2", "false")
    assert _allocated(per_token, 8 * GIB) in output and "(135296)." in output
    assert "use_kv_cache_manager_v2: false), as set" in output
    assert "V1 caches gemma3_multimodal's 52 sliding-window layers for the whole context" in output


def test_chunked_layers_are_named_as_such() -> None:
    """Llama 4 prefers V2 (#19004), whose one pool keeps the chunked layers as full attention (kvcache.md: "chunked
    attention does not partition the pools"); V1, set, caches them for the whole context too."""
    args = ("memory", f"{CONFIGS}/llama4.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "4k", "--tp", "8")
    assert "V2 keeps llama4's 36 chunked-attention layers in the one full-context pool" in _run(*args)
    output = _run(*args, "--use-kv-cache-manager-v2", "false")
    assert "V1 caches llama4's 36 chunked-attention layers for the whole context" in output
    assert "sliding-window layers" not in output


def test_a_model_without_windows_gets_no_window_note() -> None:
    output = _run("memory", f"{CONFIGS}/qwen2.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "4k")
    assert "V1 KV cache manager's" in output and "max_attention_window" not in output


def test_fit_json_carries_the_window_note() -> None:
    answer = json.loads(_run("fit", "gpt-oss-20b", "--engine", "trtllm", "--gpus", "H100", "--seq", "4k", "--top", "1",
                             "--use-kv-cache-manager-v2", "false", "--json"))
    assert "V1 caches gpt-oss-20b's 12 sliding-window layers for the whole context" in answer["engine_note"]
