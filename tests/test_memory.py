"""Weights bytes, GPUs, budgets and `gptcalc memory`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from calc import cli
from calc.analysis.count import count
from calc.errors import GptcalcError
from calc.analysis.memory import (
    FORMATS, GPUS, Weights, find_gpu, inference, kv_cache, parse_budget, solve_budget, weights,
)
from calc.spec.load import load_spec, preset_names

LLAMA2_7B_PARAMS = 6_738_415_616  # source: tests/test_count.py GOLDEN (HF num_parameters, written out)


def run(*args: str) -> Result:
    return CliRunner().invoke(cli.main, list(args))


DTYPES = ("fp32", "fp16", "bf16", "fp8_e4m3", "int8", "int4")


@pytest.mark.parametrize("dtype, total", [
    # source: 6,738,415,616 parameters x bytes per parameter (4, 2, 2, 1, 1, 0.5)
    ("fp32", LLAMA2_7B_PARAMS * 4),
    ("fp16", 13_476_831_232),
    ("bf16", LLAMA2_7B_PARAMS * 2),
    ("fp8", LLAMA2_7B_PARAMS),
    ("int8", LLAMA2_7B_PARAMS),
    ("int4", 3_369_207_808),
])
def test_llama_2_7b_weights(dtype: str, total: int) -> None:
    assert weights(count(load_spec("llama-2-7b")), dtype).total_bytes == total


def test_int4_group_scales() -> None:
    # source: every llama-2-7b component is a multiple of 128 parameters, so the scales are exactly
    # 6,738,415,616 / 128 = 52,643,872 groups x 2 B = 105,287,744 B on top of 3,369,207,808 B.
    w = weights(count(load_spec("llama-2-7b")), "int4", group_size=128)
    assert w.total_bytes == 3_369_207_808 + 105_287_744 == 3_474_495_552
    # 4 + 16/128 = 4.125 bits per weight
    assert w.total_bytes * 8 == LLAMA2_7B_PARAMS * 4.125


def test_rounding_is_up_to_whole_bytes_per_component() -> None:
    w = Weights("m", FORMATS["int4"], {"odd": 3, "even": 4})
    assert w.components == {"odd": 2, "even": 2}
    assert Weights("m", FORMATS["int4"], {"x": 3}, group_size=2).components == {"x": (3 * 4 + 2 * 16 + 7) // 8}


@pytest.mark.parametrize("name", preset_names())
@pytest.mark.parametrize("dtype", ["fp16", "int4"])
def test_weight_rows_add_up_and_a_tied_head_costs_nothing(name: str, dtype: str) -> None:
    b = count(load_spec(name))
    w = weights(b, dtype)
    assert sum(w.components.values()) == w.total_bytes
    assert w.total_params == b.total
    if b.tied:
        assert w.components["lm_head"] == 0


def test_group_size_needs_a_quantized_dtype() -> None:
    with pytest.raises(GptcalcError, match="--group-size"):
        weights(count(load_spec("gpt2-small")), "fp16", group_size=128)


# --- GPUs and budgets ------------------------------------------------------------------------


def test_gpu_memory_is_what_nvidia_smi_reports() -> None:
    by_name = {g.name: g for g in GPUS}
    # source: modal-labs/modal-client PR 2797: "H100: 81559MiB", "85520809984 bytes ... on H100"
    assert by_name["H100-80GB"].bytes == 85_520_809_984
    # source: same PR, "A100 80GB: 81920MiB" = 80 x 2^30
    assert by_name["A100-80GB"].bytes == 80 * 2**30
    # source: the "80 GB" of an A100 is binary: 80 GiB = 85.9e9 B > 80e9 B
    assert by_name["A100-80GB"].bytes > 80 * 10**9
    assert [g.marketed for g in GPUS] == ["24 GB", "40 GB", "48 GB", "80 GB", "80 GB", "141 GB"]


@pytest.mark.parametrize("text, name", [("H100", "H100-80GB"), ("a100-80gb", "A100-80GB"), ("RTX 4090", "RTX 4090"),
                                        ("4090", "RTX 4090"), ("l40s", "L40S"), ("h200", "H200")])
def test_find_gpu(text: str, name: str) -> None:
    assert find_gpu(text).name == name


def test_parse_budget() -> None:
    assert parse_budget("80GB") == (80 * 10**9, "80GB")
    assert parse_budget("75GiB")[0] == 75 * 2**30
    assert parse_budget("H100-80GB")[0] == 81559 * 2**20
    with pytest.raises(GptcalcError, match="--budget: .*H200"):
        parse_budget("A100")  # ambiguous: 40 or 80 GB, so not a name


def test_budget_longest_context_and_largest_batch() -> None:
    spec = load_spec("llama-2-7b")
    w = 13_476_831_232  # fp16 weights, above
    # source: (80e9 - 13,476,831,232) // 524,288 = 126,882 tokens; the model's context is 4,096
    seq = solve_budget(spec, 80 * 10**9, w, "fp16", "seq", 1)
    assert (seq.by_memory, seq.answer, seq.limited_by) == (126_882, 4096, "context")
    # source: 66,523,168,768 // (524,288 x 4,096 = 2,147,483,648) = 30
    batch = solve_budget(spec, 80 * 10**9, w, "fp16", "batch", 4096)
    assert (batch.answer, batch.limited_by) == (30, "memory")


def test_budget_smaller_than_the_weights() -> None:
    spec = load_spec("llama-70b")
    w = weights(count(spec), "fp16").total_bytes
    b = solve_budget(spec, find_gpu("4090").bytes, w, "fp16", "seq", 1)
    assert (b.answer, b.limited_by) == (0, "weights") and b.free_bytes < 0


@settings(max_examples=50, deadline=None)
@given(budget=st.integers(10**9, 2 * 10**11), batch=st.integers(1, 64),
       dtype=st.sampled_from(DTYPES), name=st.sampled_from(["llama-3-8b", "qwen2-0.5b", "mistral-7b"]))
def test_the_answer_fits_and_one_more_does_not(budget: int, batch: int, dtype: str, name: str) -> None:
    spec = load_spec(name)
    w = weights(count(spec), dtype).total_bytes
    b = solve_budget(spec, budget, w, dtype, "seq", batch)
    if b.by_memory is None:  # every layer windowed: the whole window fits, so any length does
        assert w + kv_cache(spec, spec.n_positions, batch, dtype).total_bytes <= budget
        return
    if b.by_memory:
        assert w + kv_cache(spec, b.by_memory, batch, dtype).total_bytes <= budget
    assert w + kv_cache(spec, b.by_memory + 1, batch, dtype).total_bytes > budget
    assert b.answer == min(b.by_memory, spec.n_positions)


def test_inference_total_and_logits_estimate() -> None:
    spec = load_spec("llama-2-7b")
    result = inference(spec, count(spec), 4096, 1, "int4", kv_dtype="fp16")
    assert result.total_bytes == 3_369_207_808 + 2_147_483_648
    assert result.kv.dtype == "fp16"
    # source: 1 x 4,096 positions x 32,000 vocab x 4 B
    assert result.logits_bytes == 524_288_000
    # the cache stays 16-bit whatever the weights are (servers do not quantise it unless told to)
    assert inference(spec, count(spec), 10, 1, "int4").kv.dtype == "fp16"


# --- the command ---------------------------------------------------------------------------


def test_cli_memory_json() -> None:
    result = run("memory", "llama-2-7b", "--seq", "4096", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["weights"]["total_bytes"] == 13_476_831_232
    assert data["kv_cache"]["total_bytes"] == 2_147_483_648
    assert data["total_bytes"] == 13_476_831_232 + 2_147_483_648
    assert sum(data["weights"]["components"].values()) == data["weights"]["total_bytes"]
    fits = {g["gpu"]: g["fits"] for g in data["gpus"]}
    assert fits == {"RTX 4090": True, "A100-40GB": True, "L40S": True, "A100-80GB": True, "H100-80GB": True, "H200": True}
    assert "activations" in data["not_included"]


def test_cli_memory_budget_json() -> None:
    result = run("memory", "llama-2-7b", "--budget", "80GB", "--seq", "4096", "--json")
    budget = json.loads(result.output)["budget"]
    assert (budget["solve_for"], budget["max_batch"], budget["seq"]) == ("batch", 30, 4096)


def test_cli_memory_tables_add_up() -> None:
    result = run("memory", "gpt2-small", "--dtype", "fp32")
    assert result.exit_code == 0, result.output
    rows = [line.split("│") for line in result.output.splitlines() if line.count("│") == 6]
    byte_cells = {cells[1].strip(): int(cells[3].strip().removesuffix(" B").replace(",", "")) for cells in rows}
    total = byte_cells.pop("weights total")
    assert total == 124_439_808 * 4 == sum(byte_cells.values())
    assert "GiB" in result.output and "GB = 10^9 B" in result.output
    assert "not included: activations" in result.output


def test_cli_memory_says_when_the_weights_alone_do_not_fit() -> None:
    result = run("memory", "llama-70b", "--budget", "rtx 4090")
    assert result.exit_code == 0, result.output
    assert "exceed the budget" in result.output and "nothing fits" in result.output
    rows = {line.split("│")[1].strip(): line.split("│")[6].strip() for line in result.output.splitlines()
            if line.count("│") == 8}
    # 137,953,296,384 B of weights + 1,342,177,280 B of cache: only the H200 (150,754,820,096 B) holds it
    assert rows == {"RTX 4090": "no", "A100-40GB": "no", "L40S": "no", "A100-80GB": "no", "H100-80GB": "no", "H200": "yes"}


@pytest.mark.parametrize("args, message", [
    (["memory", "gpt2-small", "--budget", "lots"], "--budget"),
    (["memory", "gpt2-small", "--budget", "80GB", "--seq", "10", "--batch", "2"], "not both"),
    (["memory", "gpt2-small", "--group-size", "128"], "--group-size"),
    (["memory", "gpt2-small", "--dtype", "int4", "--group-size", "0"], "--group-size"),
    (["memory", "gpt2-small", "--kv-dtype", "fp64"], "--kv-dtype"),
    (["memory", "gpt2-small", "--batch", "0"], "--batch"),
    (["memory", "nope"], "unknown model"),
])
def test_cli_memory_bad_input_exits_2(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert "Error:" in result.output and message in result.output
    assert "Traceback" not in result.output


def test_memory_help_has_an_example() -> None:
    assert "gptcalc memory llama-7b --seq 4096" in run("memory", "--help").output
