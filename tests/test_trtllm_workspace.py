"""TensorRT-LLM's context-MLA attention-workspace reserve (calc/analysis/memory/trtllm_workspace.py).

Source: NVIDIA/TensorRT-LLM at 0004396720054fd8e205cbf616f21f0b57c6b412, tensorrt_llm/_torch/pyexecutor/_util.py:
KvCacheCreator._cal_max_memory gives budget = (total - peak + temporary KV) x free_gpu_memory_fraction, and
configure_kv_cache_capacity then takes reserve = min(w x L_cap, budget x w / (k + w)) out of it when the attention
backend declares w > 0 bytes a token (get_attention_workspace_bytes_per_token) and block reuse is on with chunked
prefill off (get_mla_context_workspace_kv_len_cap), TensorRT-LLM's defaults. The default TRTLLM backend declares
w only for its fp8 context-MLA K/V dequant buffer and the NVFP4 DSA gather (its ATTENTION_DEVELOPER_GUIDE.md 2.3), so
a 16-bit cache keeps the whole budget and an fp8 MLA cache loses a share gptcalc cannot size (w not pinned).
"""

from __future__ import annotations

import json

import pytest

from cli_checks import check_run

GIB = 2**30
DSA_MODEL = "tests/configs/model_types/glm_moe_dsa.json"  # GLM-5: MLA latent and DSA indexer keys


def test_a_16_bit_cache_keeps_the_whole_budget() -> None:
    """w = 0: the pool is _cal_max_memory's budget, (total - peak) x 0.9 with the temporary KV cache added back, and
    V1's max tokens are whole blocks of it (here DeepSeek-V3 at tp 8: 61 latents of 576 bf16 values a token; its class
    prefers KVCacheManagerV2, so V1 is set: tests/test_trtllm_v2.py sizes V2's)."""
    result = check_run(["memory", "deepseek-v3", "--engine", "trtllm", "--budget", "8xH200", "--tp", "8", "--seq",
                        "32k", "--json", "--use-kv-cache-manager-v2", "false"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    budget = data["engine_budget"]
    peak = sum(t["bytes"] for t in budget["terms"] if t["key"] in ("weights", "activation", "non_torch"))
    assert budget["kv_memory_bytes"] == int((budget["total_bytes"] - peak) * 0.9)
    assert data["engine"]["tokens"] == budget["kv_memory_bytes"] // (32 * 61 * 576 * 2) * 32


@pytest.mark.parametrize("command", [
    ["memory", "deepseek-v3", "--budget", "8xH200", "--tp", "8", "--seq", "32k"],
    ["fit", "deepseek-v3", "--seq", "32k", "--gpus", "H200"],
    ["fit", DSA_MODEL, "--seq", "32k", "--gpus", "B200"],
])
def test_an_fp8_mla_cache_is_refused_from_the_start_up_budget(command: list[str]) -> None:
    result = check_run([*command, "--engine", "trtllm", "--kv-dtype", "fp8"])
    assert result.exit_code == 2, result.stdout
    assert "fp8 context-MLA attention workspace" in result.stderr and "--kv-memory" in result.stderr, result.stderr


def test_the_logged_pool_and_other_fp8_caches_are_still_answered() -> None:
    """With --kv-memory the pool is the log's, reserve already out; a GQA cache in fp8 stages no MLA workspace."""
    logged = check_run(["memory", "deepseek-v3", "--engine", "trtllm", "--kv-memory", "40GiB", "--tp", "8", "--seq",
                        "32k", "--kv-dtype", "fp8", "--json"])
    assert logged.exit_code == 0, logged.stderr
    assert json.loads(logged.stdout)["engine"]["tokens"] == 40 * GIB // (32 * 61 * 576) * 32  # 1 B a value
    gqa = check_run(["memory", "llama-3.1-8b", "--engine", "trtllm", "--budget", "H100-80GB", "--seq", "8192",
                     "--kv-dtype", "fp8"])
    assert gqa.exit_code == 0, gqa.stderr
