"""TensorRT-LLM's pool for DeepSeek's sparse attention (calc/analysis/memory/trtllm_cache.py), by hand from its source.

Sources: NVIDIA/TensorRT-LLM at 0bbb76d22e61bde633cc5f7733f5194881853501,
tensorrt_llm/_torch/attention_backend/sparse/dsa/cache_manager.py, DSACacheManager.get_cache_size_per_token:
layers x (kv_lora_rank + qk_rope_head_dim) x (1 B for an fp8 cache, else 2 B) + indexer layers x
(index_head_dim + index_head_dim / 128 x 4) B; cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp,
KVCacheManager::allocatePools: "Allocated {every primary pool's elements x the cache dtype's size / 2^30:.2f} GiB for
max tokens in paged KV cache ({blocks x tokens_per_block})", the indexer pool's uint8 elements included;
tokens_per_block 32 (KvCacheConfig's default). The shapes are the config.json files under tests/configs/model_types
(SOURCES.yaml): DeepSeek-V3.2 61 layers, GLM-5 78, both kv_lora_rank 512, qk_rope_head_dim 64, index_head_dim 128.
These are V1's (DSACacheManager's) lines, which TensorRT-LLM prints with use_kv_cache_manager_v2 false; the default
for these classes, DSACacheManagerV2, is tests/test_trtllm_dsa.py's.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from calc.cli import main

CONFIGS = "tests/configs/model_types"
GIB = 2**30
V1 = ("--use-kv-cache-manager-v2", "false")


def _lines(*args: str) -> str:
    result = CliRunner().invoke(main, ["memory", *args, "--engine", "trtllm"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("model_type, layers, kv_dtype, element", [
    ("deepseek_v32", 61, "bf16", 2), ("deepseek_v32", 61, "fp8", 1), ("glm_moe_dsa", 78, "bf16", 2),
])
def test_dsa_pool_prices_the_latent_at_the_cache_dtype_and_the_keys_at_a_byte(model_type: str, layers: int,
                                                                            kv_dtype: str, element: int) -> None:
    per_token = layers * 576 * element + layers * (128 + 128 // 128 * 4)
    blocks = 40 * GIB // (32 * per_token)
    logged = blocks * 32 * layers * (576 + 132) * element  # the indexer's bytes at the cache dtype's size
    output = _lines(f"{CONFIGS}/{model_type}.json", "--kv-memory", "40GiB", "--kv-dtype", kv_dtype, "--tp", "8", *V1)
    assert "Number of tokens per block: 32." in output
    assert (f"[MemUsageChange] Allocated {logged / GIB:.2f} GiB for max tokens in paged KV cache ({blocks * 32})."
            in output), output


def test_the_budget_line_names_trtllms_own_kv_size() -> None:
    """DeepSeek-V3.2 in bf16: 61 x 576 x 2 + 61 x 132 = 78,324 B, the figure its _cal_max_memory line prints
    (tensorrt_llm/_torch/pyexecutor/_util.py at 28295084972c: a CacheCost, "{slope} bytes/token")."""
    output = _lines(f"{CONFIGS}/deepseek_v32.json", "--budget", "8xH200", "--seq", "32k", "--tp", "8")
    assert "kv size per token is 78324 bytes/token." in output, output


def test_a_dsa_cache_trtllm_would_misprice_is_refused() -> None:
    result = CliRunner().invoke(main, ["memory", f"{CONFIGS}/deepseek_v32.json", "--engine", "trtllm", "--kv-memory",
                                       "40GiB", "--kv-dtype", "fp32", "--tp", "8"])
    assert result.exit_code == 2 and result.output.startswith(
        "Error: --engine trtllm: deepseek_v32's DSA cache in fp32: TensorRT-LLM prices the latent at 2 bytes"), \
        result.output


@pytest.mark.parametrize("model_type", ["nemotron_h", "qwen3_next", "qwen3_5", "kimi_linear"])
def test_a_hybrids_refusal_names_the_manager_trtllm_would_pick(model_type: str) -> None:
    """Hybrid Mamba / linear-attention pools are not sized yet: the refusal says where TensorRT-LLM keeps the states
    (tensorrt_llm/_torch/pyexecutor/_util.py get_kv_cache_manager_cls at 0004396720), what V2 is handed (the
    profiled budget as max_gpu_total_bytes: KvCacheCreator at 2829508497) and which links stay unpinned."""
    result = CliRunner().invoke(main, ["memory", f"{CONFIGS}/{model_type}.json", "--engine", "trtllm", "--kv-memory",
                                       "8GiB"])
    assert result.exit_code == 2 and "keeps conv and recurrent states" in result.output, result.output
    assert "MambaHybridCacheManagerV2" in result.output and "get_kv_cache_manager_cls at 0004396720" in result.output
    assert "C++ StorageManager splits the pool between attention pages and state slots" in result.output
    assert "quota is the profiled budget (max_gpu_total_bytes)" in result.output
    assert "max_batch_size default" in result.output and "another commit (04b00fece3)" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_fit_sizes_dsa_under_trtllm_as_memory_does() -> None:
    """`fit` used to stop at DSA's keys under trtllm; its 8 x H200 tp 8 row now holds the tokens `memory` prints."""
    memory = _lines(f"{CONFIGS}/deepseek_v32.json", "--budget", "8xH200", "--seq", "32k", "--tp", "8", *V1)
    tokens = memory.split("for max tokens in paged KV cache (")[1].split(")")[0]
    fit = CliRunner().invoke(main, ["fit", f"{CONFIGS}/deepseek_v32.json", "--engine", "trtllm", "--seq", "32k",
                                    "--gpus", "H200", *V1])
    assert fit.exit_code == 0, fit.output
    first = fit.output.splitlines()[1]
    assert "8 x H200" in first and "tp 8 pp 1" in first and f"{int(tokens):,} tokens" in first, fit.output


@pytest.mark.parametrize("block", [None, 64])
def test_dsa_pages_in_kvcacheconfigs_blocks(block: int | None) -> None:
    """DSA takes no block size of its own in TensorRT-LLM: DSACacheManager and DSACacheManagerV2 pass KvCacheConfig's
    tokens_per_block through (sparse/dsa/cache_manager.py at 0bbb76d22e; only the opt-in "fp8_ds_mla" dtype demands
    another, _resolve_fp8_ds_mla_head_dim), whose default is 32 (llmapi/llm_args.py, KvCacheConfig.tokens_per_block
    Field(default=32)); a log that shows 64 is given with --block-size 64. DeepSeek-V3.2 in fp8: 61 x (576 + 132) B."""
    per_token, tokens_per_block = 61 * (576 + 132), block or 32
    blocks = 40 * GIB // (tokens_per_block * per_token)
    output = _lines(f"{CONFIGS}/deepseek_v32.json", "--kv-memory", "40GiB", "--kv-dtype", "fp8", "--tp", "8", *V1,
                    *(["--block-size", str(block)] if block else []))
    assert f"Number of tokens per block: {tokens_per_block}." in output, output
    assert f"paged KV cache ({blocks * tokens_per_block})." in output, output
