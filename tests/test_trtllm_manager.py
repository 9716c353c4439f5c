"""`--engine trtllm` says whose pool and lines it shows: KVCacheManagerV2's where the model class's default ("auto")
picks it and gptcalc sizes it (calc/analysis/memory/trtllm_v2.py), else the V1 KV cache manager's, with why
(calc/analysis/memory/trtllm_manager.py).

Sources: tensorrt_llm/llmapi/llm_utils.py _resolve_kv_cache_manager_v2_auto at NVIDIA/TensorRT-LLM 0066b2a569 ("auto"
takes the class's get_preferred_kv_cache_manager_version, V1 where it states none); the classes preferring V2 from
NVIDIA/TensorRT-LLM#19004 (LlamaForCausalLM, Llama4ForConditionalGeneration), #16942 (GptOssForCausalLM), #17396
(Gemma3/Gemma4), #16060 (DeepseekV3ForCausalLM, DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM, MistralLarge3ForCausalLM),
#17125 (KimiK25ForConditionalGeneration), all merged, and docs/source/features/kvcache.md at 0076e9390e. The configs'
architectures[0] are those of the files under tests/configs/model_types (SOURCES.yaml).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from calc.analysis.memory.kv import kv_cache
from calc.analysis.memory.trtllm_manager import TRTLLM_V2_DEFAULT, manager_note
from calc.analysis.memory.trtllm_models import TRTLLM_ARCHITECTURES
from calc.cli import main
from calc.cli.options import load_model
from calc.spec.model import spec_from_dict

CONFIGS = "tests/configs/model_types"
GIB = 2**30
V1 = "the TensorRT-LLM pool and lines shown are its V1 KV cache manager's"
V2 = 'the default, "auto", picks KVCacheManagerV2'
V2_SHOWN = "the TensorRT-LLM pool and lines shown are its KVCacheManagerV2's"


def _run(*args: str) -> str:
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, list(args))  # one note, one line
    assert result.exit_code == 0, result.output
    return result.output


def test_every_class_said_to_prefer_v2_is_one_tensorrt_llm_builds() -> None:
    assert set(TRTLLM_V2_DEFAULT) <= TRTLLM_ARCHITECTURES


def test_a_llama_config_gets_v2s_pool_by_default_and_v1s_lines_when_set_false() -> None:
    """ALLaM-7B (llama.json, LlamaForCausalLM): 32 layers x K and V x 32 KV heads x 128 x 2 B = 524,288 B a token;
    8 GiB holds 8 x 2^30 / (32 x 524,288) = 512 blocks of 32 tokens, 16,384 tokens, all 8 GiB of them allocated
    (V1); V2's 16 MiB grains hold the same 512 slots (tests/test_trtllm_v2.py)."""
    per_token = 32 * 2 * 32 * 128 * 2
    blocks = 8 * GIB // (32 * per_token)
    args = ("memory", f"{CONFIGS}/llama.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "4k")
    v2 = _run(*args)
    assert "KV cache manager v2 device quota set to 8.0GiB" in v2 and "Allocated" not in v2
    assert f"{V2_SHOWN} (the default, \"auto\", picks it for LlamaForCausalLM: " \
           "https://github.com/NVIDIA/TensorRT-LLM/pull/19004" in v2
    output = _run(*args, "--use-kv-cache-manager-v2", "false")
    assert f"[MemUsageChange] Allocated {blocks * 32 * per_token / GIB:.2f} GiB for max tokens in paged KV cache " \
           f"({blocks * 32})." in output
    assert f"{V1} (kv_cache_config.use_kv_cache_manager_v2: false), as set" in output


@pytest.mark.parametrize("config, arch", [("kimi_k2", "DeepseekV3ForCausalLM"),
                                          ("kimi_k25", "KimiK25ForConditionalGeneration")])
def test_mla_classes_preferring_v2_get_it(config: str, arch: str) -> None:
    output = _run("memory", f"{CONFIGS}/{config}.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "4k",
                  "--tp", "8")
    assert f'{V2_SHOWN} (the default, "auto", picks it for {arch}' in output, output


def test_a_class_preferring_v2_is_sized_under_pipeline_parallelism_too() -> None:
    """Gemma 3 under --pp 2: V2's pools are each rank's (trtllm_v2_pp), not V1's with a reason."""
    output = _run("memory", f"{CONFIGS}/gemma3_multimodal.json", "--engine", "trtllm", "--kv-memory", "8GiB",
                  "--seq", "4k", "--pp", "2")
    assert f'{V2_SHOWN} (the default, "auto", picks it for Gemma3ForConditionalGeneration' in output, output
    assert "under --pp 2 each rank builds its own pools" in output and V1 not in output


def test_a_class_preferring_v2_whose_pool_is_not_sized_is_named() -> None:
    """Qwen3-Next's linear-attention states are not a V2 pool gptcalc sizes (trtllm_v2.v2_unsized): were its class
    one that prefers V2, the note names the preference and why V1's lines are shown instead."""
    spec = spec_from_dict({**load_model(f"{CONFIGS}/qwen3_next.json").model_dump(),
                           "architecture": "LlamaForCausalLM"}, "qwen3_next")
    note = manager_note(spec, kv_cache(spec, 4096, 1, "fp16"))
    assert f"{V1} (kv_cache_config.use_kv_cache_manager_v2: false); for LlamaForCausalLM {V2}" in note
    assert "whose pool is not sized here for this cache's layer kinds" in note


def test_a_class_without_a_preference_keeps_v1() -> None:
    output = _run("memory", f"{CONFIGS}/qwen2.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "4k")
    assert f'{V1} (kv_cache_config.use_kv_cache_manager_v2: false), which the default, "auto", keeps for ' \
           "Qwen2ForCausalLM" in output
    assert "KVCacheManagerV2" not in output


def test_a_spec_naming_no_class_is_not_guessed() -> None:
    """GPT-3 175B's source is a paper: its preset names no architecture, so TensorRT-LLM's class is unknown."""
    output = _run("memory", "gpt3-175b", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "2k", "--tp", "8")
    assert "gpt3-175b names no architecture" in output and "KVCacheManagerV2" not in output


def test_kvcache_and_fit_say_it_too_and_json_carries_it() -> None:
    kvcache = _run("kvcache", f"{CONFIGS}/llama.json", "--engine", "trtllm", "--budget", "H100", "--seq", "4k")
    assert V2_SHOWN in kvcache
    fit = _run("fit", f"{CONFIGS}/llama.json", "--engine", "trtllm", "--gpus", "H100", "--seq", "4k", "--top", "1")
    assert V2_SHOWN in fit
    for args in (["memory", f"{CONFIGS}/llama.json", "--budget", "H100"], ["fit", f"{CONFIGS}/llama.json", "--gpus",
                                                                           "H100", "--top", "1"]):
        answer = json.loads(_run(*args, "--engine", "trtllm", "--seq", "4k", "--json"))
        assert V2_SHOWN in answer["engine_note"]


def test_other_engines_and_a_run_without_a_pool_get_no_note() -> None:
    vllm = json.loads(_run("memory", f"{CONFIGS}/llama.json", "--engine", "vllm", "--budget", "H100", "--seq", "4k",
                           "--json"))
    assert "engine_note" not in vllm
    assert "V1 KV cache manager" not in _run("memory", f"{CONFIGS}/llama.json", "--engine", "trtllm", "--seq", "4k")


@pytest.mark.parametrize("command", [["memory", "gemma-4-26b-a4b", "--kv-memory", "8GiB"],
                                     ["fit", f"{CONFIGS}/gemma4-26b-a4b.json", "--gpus", "H100"],
                                     ["compare", "gemma-4-26b-a4b", "llama-3-8b"],
                                     ["report", "llama-3-8b", "gemma-4-26b-a4b", "-o", "-"]])
def test_a_model_whose_layers_differ_in_head_dim_is_refused(command: list[str]) -> None:
    """Gemma-4-26B-A4B's config: head_dim 256 on its sliding layers, global_head_dim 512 on its full ones, which
    TensorRT-LLM serves from KVCacheManagerV2 whatever the setting (_util.py _non_hybrid_kv_cache_manager_cls at
    0004396720, is_gemma4_hybrid)."""
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, [*command, "--engine", "trtllm", "--seq", "4k"])
    assert result.exit_code == 2 and "differ in head_dim (256, 512)" in result.output \
        and "KVCacheManagerV2 whatever use_kv_cache_manager_v2 says" in result.output, result.output


def test_a_gemma3_whose_layers_share_a_head_dim_is_served() -> None:
    """Gemma-3 (gemma3_multimodal.json): every layer 128 wide, sliding or not, so V1 holds it (and its class
    prefers V2, #17396: V1 as set)."""
    output = _run("memory", f"{CONFIGS}/gemma3_multimodal.json", "--engine", "trtllm", "--kv-memory", "8GiB",
                  "--seq", "4k", "--use-kv-cache-manager-v2", "false")
    assert "Number of tokens per block: 32." in output
