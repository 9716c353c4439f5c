"""`gptcalc inspect` as a user meets it: tables that add up, --json, --model, and every error path."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main
from checkpoint_files import gpt2_small_layout, write_raw, write_safetensors, write_sharded

REPO = Path(__file__).resolve().parent.parent
GPT2_PARAMS = 124_439_808  # source: published parameter count of openai-community/gpt2


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    layout = {**gpt2_small_layout(), "v_head.summary.weight": ("F32", (1, 768))}  # one name no map knows
    return write_safetensors(tmp_path_factory.mktemp("gpt2") / "model.safetensors", layout)


def table_rows(out: str, columns: int) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == columns:
            rows[cells[0]] = cells[1:]
    return rows


def number(cell: str) -> int:
    return int(cell.split(" ")[0].replace(",", ""))


def test_inspect_gpt2_small_table_adds_up(gpt2_file: Path) -> None:
    code, out, _ = run("inspect", str(gpt2_file), "--model", "gpt2-small")
    assert code == 1  # v_head.summary.weight is no tensor of gpt2-small: a disagreement, as verify would say
    rows = table_rows(out.split("by dtype")[0], 5)
    components = [number(cells[1]) for name, cells in rows.items()
                  if name not in ("component", "total parameters", "buffers (not parameters)", "unrecognised",
                                  "all stored elements", "LM head")]
    assert sum(components) == number(rows["total parameters"][1]) == GPT2_PARAMS
    assert rows["LM head"][1] == "0 (tied to token embedding)"
    assert number(rows["buffers (not parameters)"][1]) == 12 * 1024 * 1024
    assert number(rows["all stored elements"][1]) == GPT2_PARAMS + 12 * 1024 * 1024 + 768
    assert "h.{}.attn.bias x 12: [1, 1, 1024, 1024] F32" in out
    assert "v_head.summary.weight [1, 768] F32" in out  # reported by name, not dropped
    assert re.search(r"bytes read: [\d,]+ B .* from 1 file \(headers only\)", out)


def test_inspect_dtype_table_adds_up(gpt2_file: Path) -> None:
    code, out, _ = run("inspect", str(gpt2_file))
    rows = table_rows(out.split("by dtype")[1], 5)
    # source: (124,439,808 parameters + 12 masks of 1024 x 1024 + 768 unknown) x 4 bytes of F32
    assert number(rows["F32"][1]) == number(rows["total"][1]) == 4 * (GPT2_PARAMS + 12 * 1024 * 1024 + 768)


def test_inspect_json(gpt2_file: Path) -> None:
    code, out, _ = run("inspect", str(gpt2_file), "--json")
    data = json.loads(out)
    assert code == 0
    assert data["tensors"] == 161 and data["parameters"] == GPT2_PARAMS
    assert sum(c["parameters"] for c in data["components"]) == data["parameters"]
    assert sum(data["breakdown"]["components"].values()) == data["parameters"]
    assert [t["name"] for t in data["unknown"]] == ["v_head.summary.weight"]
    assert len(data["buffers"]) == 12 and data["tied_embeddings"] is True
    assert data["spec"]["d_model"] == 768 and data["spec_origin"].startswith("tensor shapes")
    assert data["bytes_read"] == data["files"][0]["bytes_read"] < 20_000


def test_inspect_against_another_model_names_mismatches(gpt2_file: Path) -> None:
    code, out, _ = run("inspect", str(gpt2_file), "--model", "gpt2-medium")
    assert code == 1  # checked against the spec the user named, and it disagrees: exit 1, like verify
    assert run("inspect", str(gpt2_file), "--model", "gpt2-medium", "--json")[0] == 1
    assert "wte.weight: shape [50257, 768], spec expects [50257, 1024]" in out
    assert "(--json lists all)" in out


def test_inspect_a_sharded_directory(tmp_path: Path) -> None:
    layer = {"model.layers.0.input_layernorm.weight": ("BF16", (8,)), "model.layers.0.self_attn.q_proj.weight": ("BF16", (8, 8)),
             "model.layers.0.self_attn.k_proj.weight": ("BF16", (4, 8)), "model.layers.0.self_attn.v_proj.weight": ("BF16", (4, 8)),
             "model.layers.0.self_attn.o_proj.weight": ("BF16", (8, 8)), "model.layers.0.post_attention_layernorm.weight": ("BF16", (8,)),
             "model.layers.0.mlp.gate_proj.weight": ("BF16", (12, 8)), "model.layers.0.mlp.up_proj.weight": ("BF16", (12, 8)),
             "model.layers.0.mlp.down_proj.weight": ("BF16", (8, 12))}
    write_sharded(tmp_path, [{"model.embed_tokens.weight": ("BF16", (10, 8)), **layer}, {"model.norm.weight": ("BF16", (8,))}])
    code, out, _ = run("inspect", str(tmp_path))
    assert code == 0
    assert "sharded safetensors (2 files)" in out and "from 3 files (headers only)" in out
    # source: embed 80 + block (norms 16, q/o 2*64, k/v 2*32, gate/up/down 3*96) 496 + norm 8 = 584 BF16 x 2 B
    assert "index total_size: 1,168 B = the tensors' bytes" in out
    assert "assumed:" in out  # no config.json: the spec was read off the shapes, and says so


def test_model_given_ignores_an_unsupported_config_beside_the_weights(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model.safetensors", gpt2_small_layout())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    code, out, err = run("inspect", str(tmp_path), "--model", "gpt2-small")
    assert code == 0, err
    assert "spec: gpt2-small from the MODEL argument" in out
    code, out, err = run("inspect", str(tmp_path))  # without --model the config.json is the spec, and is refused
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("Error: ") and "model_type: 'bert' is not supported" in err


def test_a_source_name_with_brackets_is_shown_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The path is the user's text, not rich markup: `[bold]` is printed, not obeyed (nor dropped)."""
    monkeypatch.chdir(tmp_path)
    write_safetensors(tmp_path / "[bold]m.safetensors", gpt2_small_layout())
    code, out, _ = run("inspect", "[bold]m.safetensors")
    assert code == 0
    assert "[bold]m.safetensors: 124,439,808 parameters" in out


def test_inspect_help_has_an_example() -> None:
    code, out, _ = run("inspect", "--help")
    assert code == 0 and "Example:" in out and "gptcalc inspect" in out


class RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def _pickle(path: Path) -> Path:
    with open(path, "wb") as handle:
        pickle.dump({"x": RunsCode()}, handle, protocol=2)
    return path


def _bytes(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def _missing_shard(path: Path) -> Path:
    write_sharded(path, [{"model.norm.weight": ("F16", (8,))}, {"lm_head.weight": ("F16", (2, 8))}])
    (path / "model-00002-of-00002.safetensors").unlink()
    return path


BAD = {
    "empty file": (lambda p: _bytes(p / "e.safetensors", b""), "shorter than the 8-byte"),
    "3-byte file": (lambda p: _bytes(p / "s.safetensors", b"abc"), "shorter than the 8-byte"),
    "header past the end": (lambda p: write_raw(p / "t.safetensors", "{}", 0, 4096), "runs past the end"),
    "header over 100 MB": (lambda p: write_raw(p / "h.safetensors", "{}", 0, 10**9), "over the 100,000,000 B limit"),
    "not JSON": (lambda p: write_raw(p / "j.safetensors", "{nope"), "not valid JSON"),
    "unknown dtype": (lambda p: write_raw(p / "d.safetensors", '{"x": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}', 1), "unknown dtype"),
    "negative dimension": (lambda p: write_raw(p / "n.safetensors", '{"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}'), "negative dimension"),
    "offsets outside the file": (lambda p: write_raw(p / "o.safetensors", '{"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', 4), "past the end of the file"),
    "offsets not shape x width": (lambda p: write_raw(p / "w.safetensors", '{"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}', 12), "needs 16 B"),
    "overlapping tensors": (lambda p: write_raw(p / "v.safetensors", '{"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}', 6), "overlap"),
    "missing shard": (_missing_shard, "which is missing"),
    "embedding of the wrong rank": (lambda p: write_safetensors(p / "k.safetensors", {**gpt2_small_layout(), "wte.weight": ("F32", (4,))}),
                                    "wte.weight: shape [4], expected 2 dimensions"),
    "pickle that runs code": (lambda p: _pickle(p / "evil.bin"), "refused to unpickle"),
    "random bytes in a .bin": (lambda p: _bytes(p / "r.bin", bytes(range(256))), "r.bin: not a readable torch checkpoint"),
    "hub repo offline, not cached": (lambda p: "no-such-org/no-such-model", "not in the local Hugging Face cache"),
    "hub repo id with a dot, offline": (lambda p: "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B: config.json is not in the local Hugging Face cache"),
}


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_checkpoints_exit_2_with_one_error_line(tmp_path: Path, case: str) -> None:
    make, message = BAD[case]
    code, out, err = run("inspect", str(make(tmp_path)))
    assert code == 2
    assert out == ""
    assert err.startswith("Error: ") and err.count("\n") == 1 and message in err
    assert "Traceback" not in err


def test_inspect_of_safetensors_imports_no_torch(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", gpt2_small_layout())
    code = (
        "import sys; from click.testing import CliRunner; from calc.cli import main; "
        f"r = CliRunner().invoke(main, ['inspect', {str(path)!r}]); assert r.exit_code == 0, r.output; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)
