"""TensorRT-LLM's MTP layer in its KV pool (calc/analysis/memory/trtllm_spec.py), figures worked by hand.

Sources (NVIDIA/TensorRT-LLM): tensorrt_llm/_torch/speculative/utils.py at 011d0933dc get_num_spec_layers (1 for
MTP-Eagle one model, num_nextn_predict_layers for vanilla MTP), get_num_extra_kv_tokens (max_draft_len - 1);
tensorrt_llm/_torch/pyexecutor/resource_manager.py get_pp_layers (the spec layers appended after the target's, on
the last PP rank); _util.py at 0004396720 KvCacheCreator._get_kv_size_per_token (the manager's layers priced in).
DeepSeek-V3's config.json: 61 layers, kv_lora_rank 512 + qk_rope_head_dim 64 = 576 latent values a layer, one
num_nextn_predict_layers; the latent in bf16 is whole on every GPU. V2's quota sync and grains as in
tests/test_trtllm_v2.py (kv_cache_manager_v2.py at 0004396720, storageManager.cpp at 04b00fece3).
"""

from __future__ import annotations

import json
import math

import pytest

from cli_checks import check_run

GIB, MIB = 2**30, 2**20
LATENT = 576 * 2  # one layer's bf16 latent a token
DSV3 = ["deepseek-v3", "--tp", "8", "--kv-memory", "8GiB", "--seq", "4k", "--engine", "trtllm"]


def _memory(*args: str) -> dict:
    result = check_run(["memory", *args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("steps", ["1", "3"])
def test_v1_prices_the_mtp_layer_beside_the_61_target_layers(steps: str) -> None:
    """62 layers x 1,152 B = 71,424 B a token, 32-token blocks floored from 8 GiB: the draft length does not change
    the layer count (one MTP layer either way)."""
    per_token = 62 * LATENT
    answer = _memory(*DSV3, "--use-kv-cache-manager-v2", "false", "--speculative-num-steps", steps)
    assert answer["engine"]["bytes_per_token"] == per_token == 71_424
    assert answer["engine"]["tokens"] == 8 * GIB // (per_token * 32) * 32 == 120_256


def test_v2_syncs_its_quota_over_62_layers() -> None:
    """KVCacheManagerV2 (DeepSeek-V3's default) on 8 ranks: the quota goes through tokens and back at k = 62 x
    1,152 B (max_num_tokens 8,192, max_util_for_resume 0.95), 16 MiB grains, slots of k x 32 bytes."""
    quota, k = 8 * GIB, 62 * LATENT
    tokens = 8192 + (int(quota * 0.95) - 8192 * k) / k
    synced = min(quota, math.ceil(int(tokens * k) / 0.95))
    grains = -(-synced // (16 * MIB))
    slots = grains * 16 * MIB // (k * 32)
    while -(-(slots + 1) * k * 32 // (16 * MIB)) <= grains:
        slots += 1
    v2 = _memory(*DSV3, "--speculative-num-steps", "3")["engine"]["trtllm_kv_cache_manager_v2"]
    assert (v2["quota_bytes"], v2["slots"]) == (synced, slots) and sum(v2["pool_slot_bytes"]) == k * 32


@pytest.mark.parametrize("args, message", [
    (["llama-3-8b", "--speculative-num-steps", "1"], "has no MTP layers"),
    (["deepseek-v3", "--tp", "4", "--pp", "2", "--speculative-num-steps", "1"], "last pipeline rank"),
    (["deepseek-v3", "--speculative-num-steps", "1", "--speculative-draft-layers", "1"], "EAGLE3"),
    (["deepseek-v3.2", "--speculative-num-steps", "1"], "DSA indexer"),
])
def test_what_is_not_sized_is_one_error(args: list[str], message: str) -> None:
    result = check_run(["memory", *args, "--engine", "trtllm", "--kv-memory", "8GiB", "--seq", "4k"])
    assert result.exit_code == 2 and result.stderr.startswith("Error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1
