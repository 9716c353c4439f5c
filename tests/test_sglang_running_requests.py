"""SGLang's default running-request cap (init_memory_pool, model_runner_kv_cache_mixin.py at
sgl-project/sglang@226149ac): max_num_reqs = min(max(int(max_total_num_tokens / context_len x 512), 2048), 4096),
and beside a Mamba pool no more than max_mamba_cache_size // 3. Figures worked by hand."""

from __future__ import annotations

import json

import pytest

from calc.analysis.memory.engines import kv_pool, sglang_max_running_requests
from calc.analysis.memory.kv import kv_cache
from calc.spec.load import load_spec
from cli_checks import check_run

GIB = 2**30
LLAMA_TOKEN = 32 * 2 * 8 * 128 * 2  # Llama-3.1-8B's fp16 K and V per token: 131,072 B


@pytest.mark.parametrize(("tokens", "context", "cap"), [
    (444_500, 131_072, 2048),  # int(444,500 / 131,072 x 512) = 1,736: the floor of 2,048
    (1_048_576, 131_072, 4096),  # 4,096 exactly
    (3_000_000, 131_072, 4096),  # 11,718: the ceiling of 4,096
    (655_360, 131_072, 2560),  # 5 contexts: 2,560
])
def test_default_cap(tokens: int, context: int, cap: int) -> None:
    assert sglang_max_running_requests(tokens, context) == cap


@pytest.mark.parametrize(("seq", "whole", "requests"), [(64, 5120, 4096), (128, 2560, 2560)])
def test_the_cap_binds_only_on_short_contexts(seq: int, whole: int, requests: int) -> None:
    """40 GiB of Llama-3.1-8B slots: 40 x 2^30 / 131,072 = 327,680 tokens; at --seq 64 that is 5,120 requests,
    of which SGLang runs 4,096; at --seq 128, 2,560 under a cap of 4,096."""
    pool = kv_pool(kv_cache(load_spec("llama-3.1-8b"), seq), "sglang", 40 * GIB, seq)
    assert pool.tokens == 40 * GIB // LLAMA_TOKEN == 327_680 and pool.tokens // seq == whole
    assert pool.requests == requests


def test_cli_prints_the_cap() -> None:
    result = check_run(["memory", "llama-3.1-8b", "--engine", "sglang", "--kv-memory", "40GiB", "--seq", "64", "--json"])
    engine = json.loads(result.stdout)["engine"]
    assert (engine["requests"], engine["max_running_requests"]) == (4096, 4096)
