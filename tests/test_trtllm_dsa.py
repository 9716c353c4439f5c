"""DSACacheManagerV2's pool (calc/analysis/memory/trtllm_dsa.py on trtllm_v2.py), worked by hand from its source.

Sources (NVIDIA/TensorRT-LLM; each file at the commit it was read at):
- tensorrt_llm/_torch/attention_backend/sparse/dsa/cache_manager.py at 0bbb76d22e, DSACacheManagerV2:
  _extra_buffers_per_layer: BufferConfig(role=Role.INDEX_KEY, size=get_layer_bytes_per_token(layer, INDEX_KEY) x
  tokens_per_block) on every layer owning indexer keys; _get_indexer_k_cache_bytes_per_token(128, 128, False) =
  128 + 128 // 128 x 4 = 132 B; get_layer_bytes_per_token(layer, Role.ALL) = the latent's bytes + 132.
- tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at 0004396720: _build_base_config's KEY buffer
  (SELFKONLY: no VALUE) of 1 x 576 values at the cache dtype x tokens_per_block, plus the extra buffers; the quota
  sync on several ranks through _get_max_tokens_from_quota_impl (max_num_tokens 8,192, k = the sum of Role.ALL
  bytes); _log_kv_cache_pool_lifecycle_mapping: "{type(self).__name__} role-to-pool/lifecycle mapping:", then
  "role={role!s}, pool_group_id=…, layer_group_id=…" (Role.INDEX_KEY = DataRole("index_key")).
- cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2 at 1148a82f66: storage/config.cpp createStorageConfig (a life
  cycle's buffers of one size coalesce into one pool of size x buffers), storageManager.cpp cacheTierGranularity
  (2 MiB << min(4, int(log2(quota // 1 GiB)))), storage/core.cpp grainsToSlots (the most slots n whose pools, each
  ceil(n x slot / grain) grains, fit the grains; then bumped while one more slot takes no more grains).
- KvCacheConfig: tokens_per_block 32, max_util_for_resume 0.95 (tensorrt_llm/llmapi/llm_args.py).
Shapes: the config.json files under tests/configs/model_types (SOURCES.yaml): DeepSeek-V3.2 61 layers, GLM-5 78,
both kv_lora_rank 512 + qk_rope_head_dim 64 = 576, index_head_dim 128.
"""

from __future__ import annotations

import json
import math

from click.testing import CliRunner

from calc.cli import main

CONFIGS = "tests/configs/model_types"
GIB, MIB = 2**30, 2**20
BLOCK, INDEX_KEY_BYTES = 32, 128 + 128 // 128 * 4


def _memory(*args: str) -> dict:
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, ["memory", *args, "--engine", "trtllm", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _synced(quota: int, k: int) -> int:
    """KVCacheManagerV2.__init__ on several ranks, full attention only: quota -> tokens -> quota, in floats."""
    resumable = int(quota * 0.95)
    tokens = resumable / k if resumable <= 8192 * k else 8192 + (resumable - 8192 * k) / k
    return min(quota, math.ceil(int(tokens * k) / 0.95))


def _slots(quota: int, pools: list[int]) -> tuple[int, int, int]:
    """The grain, the grains and the slots of one pool group of `pools` (slot bytes), counted up one slot at a time."""
    grain = (2 * MIB) << min(4, int(math.log2(quota // GIB)))
    grains = -(-quota // grain)
    slots = 0
    while sum(-(-(slots + 1) * pool // grain) for pool in pools) <= grains:
        slots += 1
    return grain, grains, slots


def test_deepseek_v32_fp8_on_eight_ranks_pools_latent_and_index_keys_apart() -> None:
    """61 layers: a latent pool of 61 x 576 x 1 B x 32 = 1,124,352 B a slot and an index-key pool of
    61 x 132 x 32 = 257,664 B, one life cycle; k = 61 x (576 + 132) = 43,188 B for the quota sync."""
    latent, keys = 61 * 576 * BLOCK, 61 * INDEX_KEY_BYTES * BLOCK
    quota = _synced(40 * GIB, 61 * (576 + INDEX_KEY_BYTES))
    grain, grains, slots = _slots(quota, [latent, keys])
    answer = _memory(f"{CONFIGS}/deepseek_v32.json", "--kv-memory", "40GiB", "--kv-dtype", "fp8", "--tp", "8",
                     "--seq", "32k")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert (v2["quota_bytes"], v2["grain_bytes"], v2["grains"]) == (quota, grain, grains) == (40 * GIB, 32 * MIB, 1280)
    assert (v2["pool_slot_bytes"], v2["slots"]) == ([1_124_352, 257_664], slots) == ([latent, keys], 31_066)
    assert answer["engine"]["tokens"] == slots * BLOCK == 994_112
    assert answer["server_says"][-3:] == ["DSACacheManagerV2 role-to-pool/lifecycle mapping:",
                                          "role=key, pool_group_id=0, layer_group_id=0",
                                          "role=index_key, pool_group_id=0, layer_group_id=0"]
    assert f"KV cache manager v2 device quota set to {quota / GIB}GiB" in answer["server_says"]
    assert "for DSA it is DSACacheManagerV2" in answer["engine_note"]
    # V1 floors the same bytes by whole blocks of both pools: 40 GiB // (32 x 43,188) = 31,077 blocks
    v1 = _memory(f"{CONFIGS}/deepseek_v32.json", "--kv-memory", "40GiB", "--kv-dtype", "fp8", "--tp", "8",
                 "--seq", "32k", "--use-kv-cache-manager-v2", "false")
    assert v1["engine"]["tokens"] == 40 * GIB // (BLOCK * 61 * (576 + INDEX_KEY_BYTES)) * BLOCK == 994_464


def test_glm5_bf16_on_one_rank_keeps_its_quota() -> None:
    """78 layers in bf16: latent slots of 78 x 1,152 x 32 = 2,875,392 B, index keys 78 x 132 x 32 = 329,472 B (one
    byte a value whatever the cache dtype); one rank, so the quota is the budget; 20 GiB: int(log2 20) = 4, 32 MiB
    grains."""
    latent, keys = 78 * 576 * 2 * BLOCK, 78 * INDEX_KEY_BYTES * BLOCK
    grain, grains, slots = _slots(20 * GIB, [latent, keys])
    answer = _memory(f"{CONFIGS}/glm_moe_dsa.json", "--kv-memory", "20GiB", "--seq", "32k")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert (v2["grain_bytes"], v2["grains"]) == (grain, grains) == (32 * MIB, 640) and v2["quota_bytes"] == 20 * GIB
    assert (v2["pool_slot_bytes"], v2["slots"]) == ([latent, keys], slots) == ([2_875_392, 329_472], 6_698)
    assert answer["engine"]["tokens"] == 6_698 * BLOCK == 214_336


def test_deepseek_v32_on_8_h200s_from_the_profiled_budget() -> None:
    """--budget 8xH200 --tp 8 in bf16: the budget test_trtllm_cache.py's V1 pool is carved from (57,155,512,449 B,
    "Estimated max memory in KV cache : 53.23 GiB"), synced on 8 ranks with k = 61 x (1,152 + 132) = 78,324 B."""
    answer = _memory(f"{CONFIGS}/deepseek_v32.json", "--budget", "8xH200", "--seq", "32k", "--tp", "8")
    budget = answer["engine"]["kv_memory_bytes"]
    quota = _synced(budget, 61 * (1152 + INDEX_KEY_BYTES))
    grain, grains, slots = _slots(quota, [61 * 1152 * BLOCK, 61 * INDEX_KEY_BYTES * BLOCK])
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert budget == 57_155_512_449 and (v2["quota_bytes"], v2["grain_bytes"], v2["slots"]) == (quota, grain, slots)
    assert answer["engine"]["tokens"] == slots * BLOCK == 729_600
    assert "Estimated max memory in KV cache : 53.23 GiB" in answer["server_says"]
    fit = CliRunner().invoke(main, ["fit", f"{CONFIGS}/deepseek_v32.json", "--engine", "trtllm", "--seq", "32k",
                                    "--gpus", "H200", "--json"])
    row = next(c for c in json.loads(fit.output)["candidates"] if c["gpus"] == 8 and c["tp"] == 8)
    assert row["tokens"] == 729_600
