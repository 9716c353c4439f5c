"""TensorRT-LLM's KVCacheManagerV2 pool (calc/analysis/memory/trtllm_v2.py), worked by hand from its source.

Sources (NVIDIA/TensorRT-LLM; each file at the commit it was read at):
- tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at 0004396720, KVCacheManagerV2.__init__:
  quota = int(max_gpu_total_bytes);
  logger.info(f"max_gpu_total_bytes is provided. New quota is {quota / (1 << 30)}GiB");
  with mapping.world_size > 1: resumable = int(quota * max_util_for_resume), T = _get_max_tokens_from_quota(resumable)
  (full attention: max_num_tokens + (q - max_num_tokens * k) / k above max_num_tokens * k), allreduce MIN,
  quota = min(quota, ceil(_get_quota_from_max_tokens(T) / max_util_for_resume)) (int(T * k));
  logger.info(f"KV cache manager v2 device quota set to {quota / (1 << 30)}GiB"); _build_base_config: BufferConfig
  KEY (and VALUE unless SELFKONLY) of the role's bytes a token x tokens_per_block, no typical step or constraints
  with avg_seq_len and pool_ratio unset; _log_kv_cache_pool_lifecycle_mapping's lines.
- tensorrt_llm/_torch/pyexecutor/_util.py at 0004396720, configure_kv_cache_capacity: logger.info(f"Estimated max
  memory in KV cache : {kv_cache_max_memory / (GB):.2f} GiB"), then max_gpu_total_bytes = that budget.
- cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/storage/config.cpp at 1148a82f66, createStorageConfig: one pool
  per buffer size within a life cycle, its slot = size x buffers.
- cpp/.../storageManager.cpp at 04b00fece3, cacheTierGranularity: (2 << 20) << min(4, max(0, int(log2(quota /
  (2 MiB x 512))))), quota an integer (size_t) division; computeSlotCountForLevel: roundUp(quota, grain);
  storage/core.cpp grainsToSlots: the most n whose pools, each ceil(n x slot / grain) grains, fit the grains.
- KvCacheConfig.max_util_for_resume default 0.95 (tensorrt_llm/llmapi/llm_args.py, "Default is 95%").
Model shapes: Llama-3.1-8B 32 layers x 8 KV heads x 128 (its config.json); ALLaM-7B (tests/configs/model_types/
llama.json) 32 layers x 32 KV heads x 128; Kimi-K2 (kimi_k2.json) 61 layers of a 512 + 64 MLA latent.
"""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from calc.analysis.memory.trtllm_v2 import V2Pool
from calc.cli import main

CONFIGS = "tests/configs/model_types"
GIB = 2**30
MIB = 2**20


def _run(*args: str) -> str:
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _memory(*args: str) -> dict:
    return json.loads(_run("memory", *args, "--engine", "trtllm", "--json"))


def test_llama_31_8b_pool_is_every_grain_of_its_quota() -> None:
    """The budget gptcalc prints for Llama-3.1-8B on an H100 (61,000,978,194 B) as max_gpu_total_bytes: 56 whole GiB,
    int(log2 56) = 5, capped at 4: a grain of 32 MiB; ceil(quota / 32 MiB) = 1,818 grains; one pool of 32 layers x K
    and V x 8 x 128 x 2 B x 32 tokens = 4 MiB a slot, 8 a grain: 14,544 slots, 465,408 tokens, 61,001,957,376 B
    allocated. V1 floors the same bytes to 61,000,978,194 // 4 MiB = 14,543 blocks (465,376 tokens)."""
    quota = 61_000_978_194
    slot = 32 * 2 * 8 * 128 * 2 * 32
    grain = (2 * MIB) << 4
    grains = -(-quota // grain)
    slots = grains * grain // slot
    answer = _memory("llama-3.1-8b", "--kv-memory", str(quota), "--seq", "8192")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert (v2["grain_bytes"], v2["grains"], v2["pool_slot_bytes"], v2["slots"]) == (grain, 1818, [slot], 14544)
    assert answer["engine"]["tokens"] == slots * 32 == 465_408 and v2["allocated_bytes"] == 61_001_957_376
    assert answer["server_says"] == [
        f"Estimated max memory in KV cache : {quota / GIB:.2f} GiB",
        f"max_gpu_total_bytes is provided. New quota is {quota / GIB}GiB",
        f"KV cache manager v2 device quota set to {quota / GIB}GiB",
        "KVCacheManagerV2 role-to-pool/lifecycle mapping:",
        "role=key, pool_group_id=0, layer_group_id=0", "role=value, pool_group_id=0, layer_group_id=0"]
    v1 = _memory("llama-3.1-8b", "--kv-memory", str(quota), "--seq", "8192", "--use-kv-cache-manager-v2", "false")
    assert v1["engine"]["tokens"] == quota // slot * 32 == 465_376 and "trtllm_kv_cache_manager_v2" not in v1["engine"]


@pytest.mark.parametrize("quota, grain", [(1000 * MIB, 2 * MIB), (GIB, 2 * MIB), (3 * GIB, 4 * MIB),
                                          (8 * GIB, 16 * MIB), (16 * GIB, 32 * MIB), (200 * GIB, 32 * MIB)])
def test_the_grain_doubles_with_the_whole_gib_up_to_32_mib(quota: int, grain: int) -> None:
    """quota // 1 GiB = 0, 1, 3, 8, 16, 200: log2 undefined (0), 0, 1.58, 3, 4, 7.6 -> shifts 0, 0, 1, 3, 4, 4."""
    pool = V2Pool(quota, ((4 * MIB,),), 32)
    assert pool.grain == grain and pool.grains == -(-quota // grain)


def test_slots_fill_the_grains_of_several_pools() -> None:
    """Two pools of 3 MiB and 1 MiB slots in 2 MiB grains, 10 grains: n = 5 needs ceil(15 / 2) + ceil(5 / 2) = 8 + 3
    = 11 grains, n = 4 needs 6 + 2 = 8: 4 slots (ratioToSlotCountList's bump then adds none: 5 would take 11)."""
    pool = V2Pool(20 * MIB, ((3 * MIB,), (MIB,)), 32)
    assert (pool.grain, pool.grains, pool.pool_slots, pool.slots) == (2 * MIB, 10, (3 * MIB, MIB), 4)


def test_a_grain_aligned_quota_gives_v1s_tokens() -> None:
    """ALLaM-7B: 32 x 2 x 32 x 128 x 2 B x 32 = 16 MiB a slot; 8 GiB is 512 grains of 16 MiB, so 512 slots and
    16,384 tokens, V1's 8 GiB // 16 MiB = 512 blocks too; Python prints 8 GiB / 2^30 as 8.0."""
    answer = _memory(f"{CONFIGS}/llama.json", "--kv-memory", "8GiB", "--seq", "4k")
    assert answer["engine"]["tokens"] == 16_384 and answer["engine"]["blocks"] == 512
    assert "KV cache manager v2 device quota set to 8.0GiB" in answer["server_says"]


def test_an_mla_cache_on_eight_ranks_keeps_only_keys_and_syncs_its_quota() -> None:
    """Kimi-K2 at tp 8: the latent is SELFKONLY, one KEY buffer of 61 x 576 x 2 B x 32 = 2,248,704 B a slot. On 8
    ranks the quota goes through tokens and back in floats (max_num_tokens 8,192, max_util_for_resume 0.95), then
    8 GiB // 1 GiB = 8: 16 MiB grains."""
    quota, k = 8 * GIB, 61 * 576 * 2
    resumable = int(quota * 0.95)
    tokens = 8192 + (resumable - 8192 * k) / k
    synced = min(quota, math.ceil(int(tokens * k) / 0.95))
    grain = 16 * MIB
    grains = -(-synced // grain)
    slots = grains * grain // (k * 32)
    while -(-(slots + 1) * k * 32 // grain) <= grains:
        slots += 1
    answer = _memory(f"{CONFIGS}/kimi_k2.json", "--kv-memory", "8GiB", "--seq", "4k", "--tp", "8")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert (v2["quota_bytes"], v2["pool_slot_bytes"], v2["slots"]) == (synced, [k * 32], slots)
    assert f"KV cache manager v2 device quota set to {synced / GIB}GiB" in answer["server_says"]
    assert "role=key, pool_group_id=0, layer_group_id=0" in answer["server_says"]
    assert not any(line.startswith("role=value") for line in answer["server_says"])
    assert "KVCacheManagerV2's" in answer["engine_note"]


def test_true_on_a_class_without_a_preference_sizes_v2() -> None:
    output = _run("memory", f"{CONFIGS}/qwen2.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "4k",
                  "--use-kv-cache-manager-v2", "true")
    assert "KV cache manager v2 device quota set to 8.0GiB" in output and "(use_kv_cache_manager_v2: true)" in output


def test_v2_defaults_it_does_not_size_show_v1_and_say_why() -> None:
    """gpt-oss prefers V2 (#16942) but its sliding layers make two life cycles; DeepSeek-V3.2's DSA is
    DSACacheManagerV2's. Both keep V1's lines, with the reason."""
    gpt_oss = _run("memory", "gpt-oss-20b", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "4k")
    assert "Number of tokens per block: 32." in gpt_oss and "not sized here for sliding-window layers" in gpt_oss
    dsa = _run("memory", f"{CONFIGS}/deepseek_v32.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "4k",
               "--tp", "8")
    assert "Number of tokens per block: 32." in dsa and "not sized here for DSA" in dsa


def test_a_context_within_the_window_is_one_pool() -> None:
    """Gemma 3's sliding window is 1,024 (gemma3_multimodal.json): at --seq 1024 every window clamps to max_seq_len,
    _derive_layer_type_attention_windows derives none, and V2 keeps one pool of all 62 layers; at 1,025 the sliding
    layers' 1,024 is a window of its own."""
    args = ("memory", f"{CONFIGS}/gemma3_multimodal.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--seq")
    assert "KV cache manager v2 device quota set to 8.0GiB" in _run(*args, "1024")
    assert "not sized here for sliding-window layers" in _run(*args, "1025")


@pytest.mark.parametrize("args, message", [
    (["gpt-oss-20b", "--engine", "trtllm", "--kv-memory", "8GiB", "--use-kv-cache-manager-v2", "true"],
     "gpt-oss-20b's KVCacheManagerV2 pool is not sized here for sliding-window layers"),
    (["llama-3.1-8b", "--engine", "trtllm", "--kv-memory", "8GiB", "--pp", "2", "--use-kv-cache-manager-v2", "true"],
     "not sized here under pipeline parallelism"),
    (["llama-3.1-8b", "--engine", "vllm", "--kv-memory", "8GiB", "--use-kv-cache-manager-v2", "false"],
     "--use-kv-cache-manager-v2 picks TensorRT-LLM's KV cache manager"),
    (["llama-3.1-8b", "--use-kv-cache-manager-v2", "true"], "--use-kv-cache-manager-v2 picks TensorRT-LLM's")])
def test_what_v2_is_not_sized_for_is_refused_when_asked_for(args: list[str], message: str) -> None:
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, ["memory", *args, "--seq", "4k"])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


def test_fit_sizes_v2_where_memory_does_and_says_a_pipeline_layout_is_v1s() -> None:
    """One H100 gets memory's budget (the first test's 61,000,978,194 B), so the V2 tokens of that test."""
    answer = json.loads(_run("fit", "llama-3.1-8b", "--engine", "trtllm", "--gpus", "H100", "--seq", "8k",
                             "--json"))
    one = [c for c in answer["candidates"] if c["gpus"] == 1]
    assert one and one[0]["kv_memory_bytes"] == 61_000_978_194 and one[0]["tokens"] == 465_408
    assert "KVCacheManagerV2's" in answer["engine_note"]
    assert "a layout with pipeline parallelism shows V1's pool" in answer["engine_note"]
