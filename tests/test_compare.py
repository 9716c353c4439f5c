"""`compare` and `count` with several models: one table, a column per model, components aligned."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from calc.analysis.compare import column_names, compare_models
from calc.cli import main
from calc.spec.load import load_spec

# source: tests/test_count.py GOLDEN (HF num_parameters), written out as arithmetic there
LLAMA2_7B = 2 * 32000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096
MISTRAL_7B = 2 * 32000 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 4096
# source: independent arithmetic, 2 (K and V) x 32 layers x KV heads x 128 head_dim x 2 B (fp16); the KV heads
# (32 and 8) are in the Llama-2-7b-hf and Mistral-7B-v0.1 config.json files
LLAMA2_7B_KV = 2 * 32 * 32 * 128 * 2
MISTRAL_7B_KV = 2 * 32 * 8 * 128 * 2


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def table_columns(out: str, n: int) -> dict[str, list[str]]:
    """Row label -> the n model cells of every table row."""
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == n + 1 and cells[0]:
            rows[cells[0]] = cells[1:]
    return rows


def number(cell: str) -> int:
    return int(cell.split(" ")[0].replace(",", "")) if re.match(r"[\d,]+", cell) else 0


def test_compare_json_numbers() -> None:
    code, out = run("compare", "llama-2-7b", "mistral-7b", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["seq"] == 4096  # the shorter context: Llama 2's 4,096 (Mistral's is 32,768)
    llama, mistral = data["models"]
    assert (llama["total"], mistral["total"]) == (LLAMA2_7B, MISTRAL_7B)
    assert (llama["kv_bytes_per_token"], mistral["kv_bytes_per_token"]) == (LLAMA2_7B_KV, MISTRAL_7B_KV)
    assert llama["weights_bytes"] == 2 * LLAMA2_7B and mistral["kv_cache_bytes"] == 4096 * MISTRAL_7B_KV
    assert mistral["memory_bytes"] == 2 * MISTRAL_7B + 4096 * MISTRAL_7B_KV
    assert llama["active"] == llama["total"] and llama["layers"] == {"block": 32}


def test_compare_table_columns_add_up_and_align() -> None:
    code, out = run("compare", "llama-2-7b", "mistral-7b", "mixtral-8x7b", "--seq", "8k", "--dtype", "int8",
                    "--kv-dtype", "int8")
    assert code == 0
    rows = table_columns(out, 3)
    labels = list(rows)
    params = labels[labels.index("token embedding"):labels.index("total")]
    for i, total in enumerate((LLAMA2_7B, MISTRAL_7B, 46_702_792_704)):  # source: tests/test_count.py GOLDEN
        assert sum(number(rows[label][i]) for label in params) == number(rows["total"][i]) == total
    assert rows["K weight"][:2] == [f"{32 * 4096 * 4096:,}", f"{32 * 4096 * 1024:,}"]  # one row, both models
    assert rows["MLP up"][2] == "-" and rows["experts up"][0] == "-"  # mixtral's MLP is its experts
    assert number(rows["KV bytes per token (int8)"][1]) == MISTRAL_7B_KV // 2
    assert number(rows["KV cache (8,192 tokens)"][0]) == 8192 * LLAMA2_7B_KV // 2
    # Mistral-7B-v0.1 attends over a sliding window of 4,096 tokens (its config.json: "sliding_window": 4096), so
    # its cache stops growing there: 4,096 tokens of K and V, not 8,192
    assert number(rows["weights + KV cache"][1]) == MISTRAL_7B + 4096 * MISTRAL_7B_KV // 2
    assert rows["attention"] == ["MHA", "GQA", "GQA"]


def test_compare_layer_kinds_and_tied_head() -> None:
    code, out = run("compare", "deepseek-v3", "gpt2-small", "--kv-dtype", "fp8")
    rows = table_columns(out, 2)
    assert code == 0
    assert rows["layers"] == ["3 dense + 58 moe", "12"]
    assert rows["LM head"][1] == "tied"
    assert number(rows["active per token"][0]) == 37_552_282_624  # source: tests/test_count.py (DeepSeek-V3 active)


def test_column_names_are_unique() -> None:
    spec = load_spec("gpt2-small")
    assert column_names([spec, spec, spec]) == ["gpt2-small", "gpt2-small (2)", "gpt2-small (3)"]
    comparison = compare_models([spec, spec], seq=10)
    assert comparison.params.totals == {"gpt2-small": 124_439_808, "gpt2-small (2)": 124_439_808}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["x", "x (2)", "x (3)", "x (2) (3)", "y"]), min_size=1, max_size=5))
def test_column_names_never_collide_whatever_the_models_are_called(names: list[str]) -> None:
    """The rows of `params` are keyed by column name: two columns of one name would show one model twice."""
    columns = column_names([SimpleNamespace(name=name) for name in names])  # type: ignore[misc]
    assert len(set(columns)) == len(columns)
    assert columns[0] == names[0] and all(column.startswith(name) for column, name in zip(columns, names))


def _named(tmp_path, name: str, d_model: int):  # type: ignore[no-untyped-def]
    path = tmp_path / f"{d_model}.yaml"
    path.write_text(f"name: {json.dumps(name)}\nvocab_size: 10\nn_positions: 16\nd_model: {d_model}\nn_layers: 1\n"
                    "n_heads: 2\n")
    return str(path)


@pytest.mark.parametrize("command", ["compare", "count"])
def test_each_column_shows_its_own_model_whatever_the_names(tmp_path, command: str) -> None:
    """Models named `x (2)` and `x`: each column headed by its own name, holding its own rows."""
    first, second = _named(tmp_path, "x (2)", 8), _named(tmp_path, "x", 16)
    totals = [json.loads(run("count", path, "--json")[1])["total"] for path in (first, second)]
    assert totals[0] != totals[1]
    code, out = run(command, first, second)
    assert code == 0 and re.search(r"┃\s+┃\s+x \(2\) ┃\s+x ┃", out), out
    rows = table_columns(out, 2)
    assert [number(cell) for cell in rows["total"]] == totals
    assert rows["d_model"] == ["8", "16"]
    code, out = run(command, first, second, "--json")
    models = json.loads(out)["models"] if command == "compare" else json.loads(out)
    assert [m["total"] for m in models] == totals and [m["model"] for m in models] == ["x (2)", "x"]


def test_count_with_several_models_compares_them() -> None:
    code, out = run("count", "llama-2-7b", "mistral-7b")
    rows = table_columns(out, 2)
    assert code == 0 and "unexpected extra argument" not in out
    assert [number(cell) for cell in rows["total"]] == [LLAMA2_7B, MISTRAL_7B]
    assert "weights + KV cache" not in rows and "gptcalc compare llama-2-7b mistral-7b" in out
    code, out = run("count", "llama-2-7b", "mistral-7b", "--json")
    assert [row["total"] for row in json.loads(out)] == [LLAMA2_7B, MISTRAL_7B]


@pytest.mark.parametrize("command", [["memory"], ["shapes", "--seq", "4"]])
def test_one_model_commands_point_to_compare(command: list[str]) -> None:
    code, out = run(command[0], "llama-2-7b", "mistral-7b", *command[1:])
    assert code == 2
    assert "Error: one MODEL at a time; for several side by side: gptcalc compare llama-2-7b mistral-7b" in out


@pytest.mark.parametrize(("args", "message"), [
    (["compare", "llama-2-7b", "mistrall-7b"], "Error: unknown model 'mistrall-7b' (did you mean mistral-7b?)"),
    (["compare", "llama-2-7b", "mistral-7b", "--seq", "4q"], "'4q' is not a positive token count (examples: 4096, 32k, 128k = 131,072)"),
    (["compare", "llama-2-7b", "--seq", "0"], "'0' is not a positive token count"),
    (["compare"], "Missing argument 'MODEL...'"),
    (["count", "gpt2-small", "nope"], "Error: unknown model 'nope'"),
])
def test_compare_bad_input_exits_2(args: list[str], message: str) -> None:
    code, out = run(*args)
    assert code == 2 and message in out and "Traceback" not in out


