"""The command line as a user meets it: count, presets, help, version, errors, and start-up cost."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main
from calc.spec.load import preset_names

REPO = Path(__file__).resolve().parent.parent


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_count_table_rows_add_up_to_the_printed_total() -> None:
    code, out, _ = run("count", "gpt2-small")
    assert code == 0
    assert "gpt2-small: 124,439,808 parameters (124.44 M)" in out
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == 5 and re.fullmatch(r"[\d,]+( \(.*\))?", cells[2]):
            rows[cells[0]] = int(cells[2].split(" ")[0].replace(",", ""))
    blocks = next(value for key, value in rows.items() if key.startswith("12 blocks"))
    layer_rows = [value for key, value in rows.items() if key.startswith(("attention", "Q", "K", "V", "MLP"))]
    assert sum(layer_rows) == blocks == 85_054_464
    outside = rows["token embedding"] + rows["position embedding"] + rows["final norm"] + rows["LM head"]
    assert outside + blocks == rows["total"] == 124_439_808
    assert "0 (tied to token embedding)" in out and "tying saves 38,597,376" in out


def test_count_json() -> None:
    code, out, _ = run("count", "llama-70b", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["model"] == "llama-2-70b" and data["total"] == 68_976_648_192
    assert sum(data["components"].values()) == data["total"]
    assert data["components"]["k"] == 80 * 8192 * 1024  # 8 KV heads of 128
    assert data["spec"]["blocks"]["block"]["attention"]["n_kv_heads"] == 8
    assert data["blocks"] == [{**data["blocks"][0], "name": "block", "layers": 80}]


def test_count_with_set() -> None:
    code, out, _ = run("count", "gpt2-small", "--set", "qkv_bias=false", "--json")
    assert code == 0 and json.loads(out)["total"] == 124_412_160  # source: hironori-maruoka, "Understanding LLM Mechanisms from GPT-2 small (124M)", https://developer.mamezou-tech.com/en/blogs/2025/09/03/attention


def test_presets_table_and_alias() -> None:
    code, out, _ = run("list")
    assert code == 0
    for name in preset_names():
        assert name in out
    assert "124,439,808" in out and "72,706,203,648" in out


def test_presets_json() -> None:
    code, out, _ = run("presets", "--json")
    data = {row["name"]: row for row in json.loads(out)}
    assert code == 0 and set(data) == set(preset_names())
    assert data["qwen2-72b"]["total"] == 72_706_203_648 and data["qwen2-72b"]["blocks"]["block"]["attention"]["n_kv_heads"] == 8


@pytest.mark.parametrize(("args", "message"), [
    (["count", "gpt2-smal"], "Error: unknown model 'gpt2-smal' (did you mean gpt2-small?)"),
    (["count", "gpt2-small", "--set", "n_layer=3"], "Error: --set n_layer: unknown field (did you mean n_layers?)"),
    (["count", "gpt2-small", "--set", "d_model=770"],
     "Error: gpt2-small.yaml (with --set): d_model=770 is not divisible by n_heads=12"),
    (["count", "missing.yaml"], "Error: missing.yaml: no such file"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    code, out, err = run(*args)
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(message)
    assert "Traceback" not in out + err


def test_bad_yaml_file_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("d_model: 768\nn_layers: twelve\n")
    code, _, err = run("count", str(path))
    assert code == 2 and err.strip() == f"Error: {path}: vocab_size, n_positions, n_heads: missing (required) (+1 more)"


def test_version() -> None:
    code, out, _ = run("--version")
    assert code == 0 and "gptcalc" in out


def test_every_command_is_documented_with_an_example() -> None:
    for name in main.list_commands(None):
        command = main.get_command(None, name)
        code, out, _ = run(name, "--help")
        assert code == 0, name
        assert (command.help or "").strip(), f"{name} has no docstring"
        assert "Example" in out and "gptcalc " + name in out, f"{name} --help shows no example"
        assert "-h, --help" in out


CALCULATORS = [
    ["count", "gpt2-small"], ["presets"], ["kvcache", "--gqa"],
    ["memory", "llama-70b", "--budget", "H100-80GB", "--json"],
    ["shapes", "llama-3-8b", "--seq", "16", "--decode"], ["flops", "deepseek-v3", "--seq", "64", "--json"],
    ["train", "mixtral-8x7b", "--seq", "512", "--micro-batch", "1", "--lora-rank", "8", "--qlora"],
    ["compare", "llama-2-7b", "mistral-7b"], ["count", "gpt2-small", "gpt2-medium"],
]


def test_calculator_commands_do_not_import_torch() -> None:
    """A calculator answers instantly: none of these may load torch, transformers or safetensors, nor
    matplotlib (that is `plot`'s). One fresh interpreter runs them in turn and looks after each: a module
    loaded stays loaded, so the first command to load one is the one named (an interpreter a command took
    a third of a second of CPU to start)."""
    code = (
        "import sys; from click.testing import CliRunner; from calc.cli import main\n"
        f"for command in {CALCULATORS!r}:\n"
        "    r = CliRunner().invoke(main, command); assert r.exit_code == 0, (command, r.output)\n"
        "    heavy = [m for m in ('torch', 'transformers', 'safetensors', 'matplotlib') if m in sys.modules]\n"
        "    assert not heavy, (command, heavy)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_python_dash_m() -> None:
    done = subprocess.run([sys.executable, "-m", "calc", "count", "gpt2", "--json"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["total"] == 124_439_808


@pytest.mark.parametrize("command", [["count"], ["memory"], ["kvcache"], ["kvcache", "--gqa"],
                                     ["shapes", "--seq", "3"], ["memory", "--seq", "64"], ["flops", "--seq", "3"],
                                     ["train", "--seq", "3", "--micro-batch", "1", "--layers"]])
def test_names_are_text_not_markup(tmp_path: Path, command: list[str]) -> None:
    """A model called `a[/]b` is printed as such; rich must not read it as a closing tag."""
    path = tmp_path / "spec.yaml"
    path.write_text("name: 'a[/]b [bold]'\nvocab_size: 10\nn_positions: 16\nd_model: 8\nn_layers: 1\nn_heads: 2\n")
    code, out, err = run(command[0], str(path), *command[1:])
    assert code == 0, err
    assert "a[/]b [bold]" in out


@pytest.mark.parametrize("budget", ["inf", "nan", "1e400x", "-80GB"])
def test_impossible_budgets_are_input_errors(budget: str) -> None:
    code, _, err = run("memory", "gpt2-small", "--budget", budget)
    assert code == 2 and err.startswith("Error: --budget: ") and "Traceback" not in err


def test_memory_warns_when_seq_exceeds_context() -> None:
    code, out, _ = run("memory", "gpt2-small", "--seq", "2048")
    assert code == 0 and "note: seq 2,048 is longer than gpt2-small's context (1,024)" in out


def test_unknown_model_type_is_counted_by_transformers_and_labelled(tmp_path) -> None:
    pytest.importorskip("transformers")
    # xglm has no adapter; transformers builds it. Expected total, independently: the token embedding
    # 1000*64 (the head is tied, the positions sinusoidal), per layer q, k, v, out 4*(64*64 + 64), fc1
    # 64*128 + 128, fc2 128*64 + 64, two LayerNorms 2*2*64, two layers, the final LayerNorm 2*64.
    config = {"model_type": "xglm", "vocab_size": 1000, "d_model": 64, "ffn_dim": 128, "num_layers": 2,
              "attention_heads": 4, "max_position_embeddings": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    expected = 1000 * 64 + 2 * (4 * (64 * 64 + 64) + 64 * 128 + 128 + 128 * 64 + 64 + 2 * 2 * 64) + 2 * 64
    code, out, _ = run("count", str(tmp_path), "--json")
    data = json.loads(out)
    assert code == 0 and data["total"] == expected and "not analytic" in data["source"]
    code, out, _ = run("count", str(tmp_path))
    assert code == 0 and "not analytic" in out and f"{expected:,}" in out


def test_model_type_nobody_knows_is_one_error_line(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "nonesuch"}')
    code, _, err = run("count", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "model_type: 'nonesuch' is not supported (supported: " in err


def test_a_reader_that_stops_reading_gets_no_error_line() -> None:
    """`gptcalc presets --json | head -1`: the reader goes away mid-output. No `Error:` line and no
    traceback on stderr; exit 141, as any Unix tool killed by SIGPIPE (`set -o pipefail` sees it)."""
    process = subprocess.Popen([sys.executable, "-m", "calc", "presets", "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline().strip() == b"["
    process.stdout.close()  # the output (~100 kB) is larger than a pipe holds: the writer hits the closed end
    _, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr) == (141, b"")
