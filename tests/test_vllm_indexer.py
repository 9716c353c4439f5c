"""vLLM's indexer_kv_dtype (calc/analysis/memory/vllm_indexer.py): which models take which value, and the
refusals. The pages it gives are checked against vLLM's own grouping code in tests/test_vllm_packed.py
(DeepSeek-V4's mxfp4 keys) and tests/test_vllm_minimax_m3.py (MiniMax-M3's fp8 keys)."""

from __future__ import annotations

import pytest

from calc.analysis.memory.vllm_indexer import block_indexer_bytes, indexer_key_bytes
from cli_checks import check_run
from oracle import CONFIG_DIR

V4 = str(CONFIG_DIR / "model_types" / "deepseek_v4.json")


def test_key_bytes() -> None:
    """index_head_dim 128: fp8 values and an fp32 scale per 128 = 132 B (models/deepseek_v32/attention.py:96,
    deepseek_v4/attention.py:1010-1014); mxfp4 two values a byte and a UE8M0 byte per 32 = 64 + 4 = 68 B
    (deepseek_v4/attention.py:1004-1009); MiniMax-M3's bf16 256 B, e4m3 128 B."""
    assert (indexer_key_bytes(128), indexer_key_bytes(128, "mxfp4")) == (132, 68)
    assert (block_indexer_bytes(128), block_indexer_bytes(128, "fp8")) == (256, 128)


@pytest.mark.parametrize("args, message", [
    ([V4, "--budget", "8xH200", "--indexer-kv-dtype", "mxfp4"], "SM10x cards only"),
    ([V4, "--budget", "8xB200", "--indexer-kv-dtype", "bf16"], "as fp8 or mxfp4 only"),
    (["deepseek-v3.2", "--budget", "8xB200", "--indexer-kv-dtype", "mxfp4"], "as fp8 only"),
    (["llama-3-8b", "--budget", "H100", "--indexer-kv-dtype", "fp8"], "no sparse-attention indexer"),
    (["llama-3-8b", "--budget", "H100", "--indexer-kv-dtype", "int4"], "choose from auto, bf16, fp8, mxfp4, nvfp4"),
])
def test_refusals(args: list[str], message: str) -> None:
    """vLLM refuses mxfp4 off SM10x and any value outside fp8 / mxfp4 for DeepSeek's indexer
    (v1/attention/backends/mla/indexer.py:56-96); DeepSeek-V3.2's keys are fp8 whatever the option
    (models/deepseek_v32/attention.py:94-99), so another value is not modelled."""
    refused(["memory", *args[:1], "--engine", "vllm", "--seq", "32k", *args[1:]], message)


def test_only_with_a_vllm_pool() -> None:
    refused(["memory", V4, "--seq", "32k", "--indexer-kv-dtype", "mxfp4"], "give --engine vllm")
    refused(["memory", "deepseek-v3.2", "--seq", "32k", "--engine", "sglang", "--kv-memory", "10GiB",
             "--indexer-kv-dtype", "mxfp4"], "is vLLM's")


@pytest.mark.parametrize("args", [
    ["fit", "llama-3-8b", "--seq", "8k", "--engine", "sglang"],
    ["fit", "llama-3-8b", "--seq", "8k", "--engine", "vllm"],
    ["memory", "llama-3-8b", "--seq", "8k", "--engine", "sglang", "--budget", "H100"],
    ["memory", "llama-3-8b", "--seq", "8k", "--engine", "trtllm", "--budget", "H100"],
    ["memory", "llama-3-8b", "--seq", "8k"],  # no pool at all
])
def test_a_value_vllm_does_not_name_is_refused_first_everywhere(args: list[str]) -> None:
    """int4 is none of vLLM's IndexerKVDType values (config/attention.py:13): memory and fit say so alike, whatever
    the engine or pool, before saying whose option it is."""
    result = check_run([*args, "--indexer-kv-dtype", "int4"])
    assert result.exit_code == 2 and result.stderr == (
        "Error: --indexer-kv-dtype 'int4': choose from auto, bf16, fp8, mxfp4, nvfp4\n"), result.stderr


def refused(args: list[str], message: str) -> None:
    result = check_run(args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr
