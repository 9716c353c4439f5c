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
- Sliding windows (storageManager.cpp, storage/config.cpp, storage/core.cpp at 1148a82f66, lifeCycleRegistry.h):
  the StorageManager constructor's fallback batch KVCacheDesc{2049, 2048}, ratioFromBatch / slotsToBytes /
  toPoolGroupRatio in float32, computePoolGroupMinSlotsFromConstraints' window floors, ratioToSlotCountList;
  createStorageConfig's pool groups keyed by slot-size list (std::map order); AttnLifeCycle::getStaleRange.
- KvCacheConfig.max_util_for_resume default 0.95 (tensorrt_llm/llmapi/llm_args.py, "Default is 95%"); at 0004396720
  BaseLlmArgs.max_batch_size Field(default=2048), max_num_tokens Field(default=8192) (llm_args.py).
- Windows: _util.py at 0004396720 _derive_layer_type_attention_windows (None without layer_types or with fewer than
  two clamped window sizes), resource_manager.py _clamp_max_attention_window_vec (None -> [max_seq_len]).
- max_seq_len = --seq + 1: tensorrt_llm/_torch/pyexecutor/py_executor_creator.py create_py_executor (000429d57d and
  bab0f2e6ee: "if not llm_args.disable_overlap_scheduler: model_engine_max_seq_len = model_engine.max_seq_len + 1",
  then KvCacheCreator(max_seq_len=...) and, for the final managers, kv_cache_creator._max_seq_len =
  model_engine_max_seq_len); disable_overlap_scheduler Field(default=False) (llm_args.py).
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


def _synced(quota: int, full: int, swa: int, request: int) -> int:
    """KVCacheManagerV2.__init__'s rank sync at 0004396720 (kv_cache_manager_v2.py), written out from its source:
    resumable = int(quota x 0.95); _get_max_tokens_from_quota_impl with size_per_batch = max_batch_size x the sliding
    layers' ceil(window / 32) x 32 tokens' bytes, context tokens at full + swa bytes up to max_num_tokens, later ones
    at full; _get_quota_from_max_tokens_impl back: int(T x full + 0 + batch + min(T, 8,192) x swa); then
    min(quota, ceil(that / 0.95)). max_batch_size 2,048 and max_num_tokens 8,192: BaseLlmArgs' defaults
    (tensorrt_llm/llmapi/llm_args.py at 0004396720)."""
    batch, resumable, context = 2048 * request, int(quota * 0.95), full + swa
    limit = 8192 * context + batch
    if resumable < batch:
        tokens = 0.0
    elif resumable <= limit:
        tokens = (resumable - batch) / context
    else:
        tokens = 8192 + (resumable - limit) / full
    generation_quota = tokens * full + (tokens - min(tokens, 8192)) * 0 + batch
    return min(quota, math.ceil(int(generation_quota + min(tokens, 8192) * swa) / 0.95))


@pytest.mark.parametrize("tp, quota, synced", [(2, 46_010_227_914, 46_010_227_913), (4, 43_390_475_277, 43_390_475_276),
                                              (8, 10_240_100_581, 10_240_100_580)])
def test_gpt_oss_120b_on_several_ranks_syncs_a_quota_that_counts_its_windows(tp: int, quota: int,
                                                                                 synced: int) -> None:
    """gpt-oss-120b (36 layers, every other one sliding with window 128, 8 KV heads x 64) at --tp 2/4/8 and --seq 32k:
    a layer's token is 2 x 8 / tp x 64 x 2 B; 18 full and 18 sliding layers; a request's windows are 18 x 128 tokens.
    At these quotas the floats of the round trip drop a byte (with max_batch_size 1 instead of 2,048 they would not,
    or would drop another). The two life cycles' slots (18 layers x K and V each) are one size, so one pool group; a
    request, max_seq_len 32,769 (--seq + 1), holds 1,025 full blocks and 5 sliding ones (1,025 less
    (32,770 - 128) // 32 = 1,020 stale)."""
    layer = 2 * 8 // tp * 64 * 2
    assert _synced(quota, 18 * layer, 18 * layer, 18 * 128 * layer) == synced < quota
    grain = (2 * MIB) << min(4, int(math.log2(synced // GIB)))
    grains, slot = -(-synced // grain), 18 * layer * 32
    slots = grains * grain // slot
    while -(-(slots + 1) * slot // grain) <= grains:
        slots += 1
    answer = _memory("gpt-oss-120b", "--kv-memory", str(quota), "--seq", "32k", "--tp", str(tp))
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert (v2["quota_bytes"], v2["pool_slot_bytes"], v2["slots"]) == (synced, [slot], slots)
    assert [g["request_slots"] for g in v2["pool_groups"]] == [1025 + 5]
    assert answer["engine"]["tokens"] == slots * 32768 // 1030
    assert f"KV cache manager v2 device quota set to {synced / GIB}GiB" in answer["server_says"]


def test_gemma_3_on_two_ranks_keeps_a_quota_the_round_trip_returns_whole() -> None:
    """Gemma 3 27B (gemma3_multimodal.json) at --tp 2: 10 full and 52 sliding layers (window 1,024) of 2 x 8 x 128 x
    2 B a token. At 21,805,423,161 B the round trip returns the quota whole (with max_batch_size 1 it would lose a
    byte); the grains (32 MiB) are then split as on one rank. A request (max_seq_len 8,193) holds 257 full slots and
    257 - (8,194 - 1,024) // 32 = 33 sliding ones."""
    layer, quota = 2 * 8 * 128 * 2, 21_805_423_161
    assert _synced(quota, 10 * layer, 52 * layer, 52 * 1024 * layer) == quota
    full, sliding, grain = 10 * layer * 32, 52 * layer * 32, 32 * MIB
    expected = _fallback_split(-(-quota // grain) * grain, [full, sliding], [None, 1024], grain)
    answer = _memory(f"{CONFIGS}/gemma3_multimodal.json", "--kv-memory", str(quota), "--seq", "8192", "--tp", "2")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert v2["quota_bytes"] == quota and [g["pool_slot_bytes"] for g in v2["pool_groups"]] == [[full], [sliding]]
    assert [g["slots"] for g in v2["pool_groups"]] == expected
    assert answer["engine"]["tokens"] == min(expected[0] * 8192 // 257, expected[1] * 8192 // 33)


def test_phi_3_whose_every_layer_slides_is_one_full_attention_pool() -> None:
    """Phi-3-mini (32 layers x 32 KV heads x 96, window 2,047 on every layer, its preset) at --seq 4k: its config has
    no layer_types, so _derive_layer_type_attention_windows (_util.py at 0004396720) returns None and
    _create_kv_cache_manager leaves max_attention_window unset; _clamp_max_attention_window_vec (resource_manager.py)
    makes that [max_seq_len] and _resolve_v2_max_attention_window_vec None: one full-attention life cycle. A slot is
    32 x K and V x 32 x 96 x 2 B x 32 tokens = 12,582,912 B; 8 GiB is 512 grains of 16 MiB, each 4/3 of a slot."""
    slot, grain = 32 * 2 * 32 * 96 * 2 * 32, 16 * MIB
    slots = 512 * grain // slot
    assert -(-slots * slot // grain) <= 512 < -(-(slots + 1) * slot // grain)
    answer = _memory("phi-3-mini", "--kv-memory", "8GiB", "--seq", "4k", "--use-kv-cache-manager-v2", "true")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert [g["life_cycle_windows"] for g in v2["pool_groups"]] == [[None]]
    assert (v2["pool_slot_bytes"], v2["slots"], answer["engine"]["tokens"]) == ([slot], slots, slots * 32)
    assert (slots, slots * 32) == (682, 21_824)
    assert answer["server_says"][-2:] == ["role=key, pool_group_id=0, layer_group_id=0",
                                          "role=value, pool_group_id=0, layer_group_id=0"]
    assert "V2 derives no windows for phi-3-mini, whose every layer slides" in answer["engine_note"]


def test_mistral_7b_on_two_ranks_syncs_its_quota_as_full_attention() -> None:
    """Mistral-7B (32 layers x 8 KV heads x 128, window 4,096 on every layer) at --seq 8k --tp 2: no windows derived
    (as Phi-3), so every layer is full attention and the rank sync has no window terms (_get_max_tokens_from_quota_impl
    at 0004396720 with no sliding layer: max_num_tokens + (q - max_num_tokens x k) / k, k = 32 x 2 x 4 x 128 x 2 B)."""
    quota, k = 8 * GIB, 32 * 2 * 4 * 128 * 2
    tokens = 8192 + (int(quota * 0.95) - 8192 * k) / k
    synced = min(quota, math.ceil(int(tokens * k) / 0.95))
    grain = 16 * MIB
    grains = -(-synced // grain)
    slots = grains * grain // (k * 32)
    answer = _memory("mistral-7b", "--kv-memory", "8GiB", "--seq", "8k", "--tp", "2",
                     "--use-kv-cache-manager-v2", "true")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert (v2["quota_bytes"], v2["pool_slot_bytes"], v2["slots"]) == (synced, [k * 32], slots)
    assert answer["engine"]["tokens"] == slots * 32


def test_a_context_within_the_window_is_one_pool() -> None:
    """Gemma 3's sliding window is 1,024 (gemma3_multimodal.json). The manager's max_seq_len is --seq + 1, so at
    --seq 1023 (max_seq_len 1,024) every window clamps to it, _derive_layer_type_attention_windows derives none, and
    V2 keeps one pool of all 62 layers (one life cycle); at --seq 1024 (max_seq_len 1,025) the sliding layers' 1,024
    is a life cycle of its own in a second pool group, whose request holds as many blocks as a full one's:
    ceil(1,025 / 32) = 33, less (1,026 - 1,024) // 32 = 0 stale."""
    args = (f"{CONFIGS}/gemma3_multimodal.json", "--kv-memory", "8GiB", "--seq")
    one = _memory(*args, "1023")["engine"]["trtllm_kv_cache_manager_v2"]
    two = _memory(*args, "1024")["engine"]["trtllm_kv_cache_manager_v2"]
    assert len(one["pool_groups"]) == 1 and one["pool_slot_bytes"] == [62 * 2 * 16 * 128 * 2 * 32]
    assert [g["life_cycle_windows"] for g in two["pool_groups"]] == [[None], [1024]]
    assert [g["request_slots"] for g in two["pool_groups"]] == [33, 33]


def test_without_the_overlap_scheduler_max_seq_len_is_seq() -> None:
    """disable_overlap_scheduler: true leaves model_engine_max_seq_len at model_engine.max_seq_len
    (py_executor_creator.py at 000429d57d), so Gemma 3 at --seq 1024 clamps both windows to 1,024: one pool; and a
    gpt-oss-20b request of 8,192 tokens holds 256 full blocks and 256 - (8,193 - 128) // 32 = 4 sliding ones, so its
    10,922 slots (as in the test below) hold 10,922 x 8,192 // 260 = 344,127 tokens."""
    gemma = _memory(f"{CONFIGS}/gemma3_multimodal.json", "--kv-memory", "8GiB", "--seq", "1024",
                    "--disable-overlap-scheduler")["engine"]["trtllm_kv_cache_manager_v2"]
    assert [g["life_cycle_windows"] for g in gemma["pool_groups"]] == [[None]]
    answer = _memory("gpt-oss-20b", "--kv-memory", "8GiB", "--seq", "8192", "--disable-overlap-scheduler")
    request = _request_slots(8192, None) + _request_slots(8192, 128)
    assert answer["engine"]["trtllm_kv_cache_manager_v2"]["pool_groups"][0]["request_slots"] == request == 260
    assert answer["engine"]["tokens"] == 10_922 * 8192 // 260 == 344_127


# A request's slots in a life cycle of window w at history h and capacity c (AttnLifeCycle::getStaleRange,
# lifeCycleRegistry.h, no sink blocks; StorageManager::computeSlotsForBatch): ceil(c / 32) blocks less the
# (h + 1 - w) // 32 stale ones before the window.
def _request_slots(h: int, window: int | None, capacity: int | None = None) -> int:
    return -(-(capacity or h) // 32) - (0 if window is None else max(0, h + 1 - window) // 32)


def test_gpt_oss_merges_its_two_life_cycles_into_one_pool_group() -> None:
    """gpt-oss-20b (its config.json: 24 layers alternating sliding (window 128) and full, 8 KV heads x 64): both life
    cycles' slots are 12 layers x K and V x 8 x 64 x 2 B x 32 = 786,432 B, so createStorageConfig (config.cpp at
    1148a82f66) keys them to one pool group, whose slots either takes, and which takes every grain
    (ratioToSlotCountList: its share is 1): 8 GiB is 512 grains of 16 MiB, 10,922 slots. A request of 8,192 tokens
    (max_seq_len 8,193) holds 257 full-attention blocks and 257 - (8,194 - 128) // 32 = 5 sliding ones: 262 slots, so
    10,922 x 8,192 // 262 = 341,500 tokens of such requests (V1: every layer a whole token, 8 GiB // (24 x 2,048 B x
    32) blocks x 32)."""
    slot, grain = 12 * 2 * 8 * 64 * 2 * 32, 16 * MIB
    slots = 512 * grain // slot
    assert -(-(slots + 1) * slot // grain) > 512
    request = _request_slots(8193, None) + _request_slots(8193, 128)
    answer = _memory("gpt-oss-20b", "--kv-memory", "8GiB", "--seq", "8192")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert (v2["pool_slot_bytes"], v2["slots"], request) == ([slot], 10_922, 262)
    assert v2["pool_groups"][0]["life_cycle_windows"] == [128, None] and v2["pool_groups"][0]["min_slots"] == 2 * 5
    assert answer["engine"]["tokens"] == slots * 8192 // request == 341_500
    assert answer["server_says"][-4:] == [
        "role=key, pool_group_id=0, layer_group_id=0", "role=value, pool_group_id=0, layer_group_id=0",
        "role=key, pool_group_id=0, layer_group_id=1", "role=value, pool_group_id=0, layer_group_id=1"]
    v1 = _memory("gpt-oss-20b", "--kv-memory", "8GiB", "--seq", "8192", "--use-kv-cache-manager-v2", "false")
    assert v1["engine"]["tokens"] == 8 * GIB // (24 * 2048 * 32) * 32 == 174_752


def _fallback_split(quota: int, slots: list[int], windows: list[int | None], grain: int) -> list[int]:
    """StorageManager's constructor at 1148a82f66 with no typical step, constraint or pool_ratio, worked with numpy's
    float32: the fallback request (capacity 2,049, history 2,048) takes ceil(2,049 / 32) - stale slots in each life
    cycle (one a pool group here), as grain-rounded bytes (slotsToBytes), normalised (normalizeToRatio), summed per
    pool group and normalised again (toPoolGroupRatio); ratioToSlotCountList (storage/core.cpp) deals the grains,
    smallest share first, nearbyint(budget x share / shares left) each, a pool group's slots the most that fit."""
    import numpy as np

    spent = [-(-_request_slots(2048, w, 2049) * s // grain) * grain for s, w in zip(slots, windows)]
    ratio = [np.float32(b) / np.float32(sum(spent)) for b in spent]
    ratio = [r / np.float32(sum(ratio, np.float32(0))) for r in ratio]
    budget, dealt = quota // grain, {}
    order = sorted(range(len(slots)), key=lambda g: ratio[g])
    for i, g in enumerate(order):
        grains = round(budget * (float(ratio[g]) / sum(float(ratio[j]) for j in order[i:])))
        dealt[g] = grains * grain // slots[g]
        budget -= -(-dealt[g] * slots[g] // grain)
    return [dealt[g] for g in range(len(slots))]


def test_gemma_3_splits_the_grains_between_two_pool_groups() -> None:
    """Gemma 3 27B (gemma3_multimodal.json: 62 layers, every sixth full, 52 sliding with window 1,024, 16 KV heads x
    128): the full life cycle's slot is 10 x 2 x 16 x 128 x 2 B x 32 = 2,621,440 B, the sliding one's 52 x ... =
    13,631,488 B; pool groups in the order of their slot lists, so the full one first (its lines pool_group_id=0,
    layer_group_id=1: layer 0 slides, life cycle 0). 8 GiB: 512 grains of 16 MiB, split by the fallback batch:
    65 full-attention and 65 - (2,049 - 1,024) // 32 = 33 sliding slots, 11 and 27 grains: 947 and 448 slots. A request
    of 8,192 tokens (max_seq_len 8,193) holds 257 full and 257 - (8,194 - 1,024) // 32 = 33 sliding slots, so the
    full pool group binds: 947 x 8,192 // 257 tokens."""
    full, sliding, grain = 10 * 2 * 16 * 128 * 2 * 32, 52 * 2 * 16 * 128 * 2 * 32, 16 * MIB
    expected = _fallback_split(8 * GIB, [full, sliding], [None, 1024], grain)
    answer = _memory(f"{CONFIGS}/gemma3_multimodal.json", "--kv-memory", "8GiB", "--seq", "8192")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert [g["pool_slot_bytes"] for g in v2["pool_groups"]] == [[full], [sliding]]
    assert [g["slots"] for g in v2["pool_groups"]] == expected == [947, 448]
    assert answer["engine"]["tokens"] == min(947 * 8192 // 257, 448 * 8192 // 33) == 30_186
    assert answer["server_says"][-4:] == [
        "role=key, pool_group_id=1, layer_group_id=0", "role=value, pool_group_id=1, layer_group_id=0",
        "role=key, pool_group_id=0, layer_group_id=1", "role=value, pool_group_id=0, layer_group_id=1"]


@pytest.mark.parametrize("quota", [3 * GIB + 12345, 20 * GIB, 61_000_978_194])
def test_gemma_3_split_at_other_quotas(quota: int) -> None:
    """The same split worked independently at quotas of other grains (4 MiB at 3 GiB, 32 MiB from 16 GiB)."""
    full, sliding = 10 * 2 * 16 * 128 * 2 * 32, 52 * 2 * 16 * 128 * 2 * 32
    grain = (2 * MIB) << min(4, int(math.log2(quota // GIB)))
    rounded = -(-quota // grain) * grain
    answer = _memory(f"{CONFIGS}/gemma3_multimodal.json", "--kv-memory", str(quota), "--seq", "8192")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert [g["slots"] for g in v2["pool_groups"]] == _fallback_split(rounded, [full, sliding], [None, 1024], grain)


@pytest.mark.parametrize("args, message", [
    ([f"{CONFIGS}/qwen3_next.json", "--engine", "trtllm", "--kv-memory", "8GiB", "--use-kv-cache-manager-v2",
      "true"],
     "not sized here for this cache's layer kinds"),
    (["llama-3.1-8b", "--engine", "vllm", "--kv-memory", "8GiB", "--use-kv-cache-manager-v2", "false"],
     "--disable-overlap-scheduler set TensorRT-LLM's KV cache manager"),
    (["llama-3.1-8b", "--use-kv-cache-manager-v2", "true"], "--disable-overlap-scheduler set TensorRT-LLM's"),
    (["llama-3.1-8b", "--engine", "vllm", "--kv-memory", "8GiB", "--disable-overlap-scheduler"],
     "--disable-overlap-scheduler set TensorRT-LLM's KV cache manager"),
    (["llama-3.1-8b", "--disable-overlap-scheduler"], "--disable-overlap-scheduler set TensorRT-LLM's")])
def test_what_v2_is_not_sized_for_is_refused_when_asked_for(args: list[str], message: str) -> None:
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, ["memory", *args, "--seq", "4k"])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


def test_fit_sizes_v2_where_memory_does_and_says_a_pipeline_layout_is_each_ranks() -> None:
    """One H100 gets memory's budget (the first test's 61,000,978,194 B), so the V2 tokens of that test; a layout
    with pipeline parallelism gets each rank's V2 pools (tests/test_trtllm_v2_pp.py)."""
    answer = json.loads(_run("fit", "llama-3.1-8b", "--engine", "trtllm", "--gpus", "H100", "--seq", "8k",
                             "--json"))
    one = [c for c in answer["candidates"] if c["gpus"] == 1]
    assert one and one[0]["kv_memory_bytes"] == 61_000_978_194 and one[0]["tokens"] == 465_408
    assert "KVCacheManagerV2's" in answer["engine_note"]
    assert "a layout with pipeline parallelism has each rank's V2 pools" in answer["engine_note"]
