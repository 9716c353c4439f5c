"""`gptcalc verify --checkpoint` and `--load`: the checkpoint as the third source of truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.checkpoint.report import read_for_verify
from calc.cli import main
from checkpoint_files import (  # noqa: F401  (gpt2_file, tiny: fixtures)
    TINY,
    gpt2_file,
    gpt2_small_layout,
    llama2_70b_shards,
    tiny,
    write_safetensors,
    write_sharded,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

GPT2_PARAMS = 124_439_808  # source: published parameter count of openai-community/gpt2


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["verify", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_gpt2_small_real_layout_agrees_three_ways(gpt2_file: Path) -> None:
    code, out, _ = run("gpt2-small", "--checkpoint", str(gpt2_file))
    assert code == 0, out
    assert "analytic vs torch vs checkpoint (all agree)" in out
    assert "checkpoint − analytic" in out
    assert "h.{}.attn.bias x 12: [1, 1, 1024, 1024] F32" in out
    assert "every checkpoint tensor has the name and shape gpt2-small implies" in out


def test_gpt2_medium_against_a_gpt2_small_file_exits_1_naming_tensors(gpt2_file: Path) -> None:
    code, out, _ = run("gpt2-medium", "--checkpoint", str(gpt2_file))
    assert code == 1
    assert "wte.weight: shape [50257, 768], spec expects [50257, 1024]" in out
    assert "✗ mismatch: token embedding (token_embedding)" in out


def test_counts_that_agree_but_a_missing_head_exits_1(gpt2_file: Path) -> None:
    code, out, _ = run("gpt2-small", "--set", "tie_embeddings=false", "--checkpoint", str(gpt2_file), "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False
    assert data["checkpoint"]["shape_mismatches"] == [{"name": "lm_head.weight", "expected": [50257, 768], "found": None}]
    assert "lm_head" in data["mismatches"]


def test_an_unrecognised_tensor_fails_verification(tmp_path: Path) -> None:
    layout = {**gpt2_small_layout(), "score.weight": ("F32", (2, 768))}
    code, out, _ = run("gpt2-small", "--checkpoint", str(write_safetensors(tmp_path / "m.safetensors", layout)))
    assert code == 1
    assert "(counts agree; 1 checkpoint tensor unrecognised or misshapen)" in out  # the counts agree ...
    assert "all agree" not in out  # ... the headline says what fails, as the exit code does
    assert "score.weight [2, 768] F32" in out  # ... a tensor no map knows is named, and fails


def test_model_given_ignores_an_unsupported_config_beside_the_weights(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model.safetensors", gpt2_small_layout())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    code, out, err = run("gpt2-small", "--checkpoint", str(tmp_path))
    assert code == 0, err
    assert "every checkpoint tensor has the name and shape gpt2-small implies" in out
    code, out, err = run("--checkpoint", str(tmp_path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("Error: ") and "model_type: 'bert' is not supported" in err


def test_json_carries_the_checkpoint_report(gpt2_file: Path) -> None:
    code, out, _ = run("gpt2-small", "--checkpoint", str(gpt2_file), "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True and data["sources"] == ["analytic", "torch", "checkpoint"]
    assert data["totals"] == {"analytic": GPT2_PARAMS, "torch": GPT2_PARAMS, "checkpoint": GPT2_PARAMS}
    assert data["checkpoint"]["stored_elements"] == GPT2_PARAMS + 12 * 1024 * 1024
    assert data["checkpoint"]["bytes_read"] < 20_000


@pytest.mark.parametrize("family", sorted(TINY))
@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_model_comes_from_the_checkpoints_config(tiny, family: str, layout: str) -> None:
    root = tiny[family].root
    code, out, _ = run("--checkpoint", str(root / layout))
    assert code == 0, out
    assert "(all agree)" in out


@pytest.mark.parametrize("family", sorted(TINY))
def test_load_strict_and_forward(tiny, family: str) -> None:
    root = tiny[family].root
    code, out, _ = run("--checkpoint", str(root / "sharded"), "--load")
    assert code == 0, out
    assert "✓ --load: loaded" in out and "with strict=True" in out and "[1, 8, 97]" in out


@pytest.mark.parametrize("family", sorted(TINY))
def test_loaded_weights_give_transformers_logits(tiny, family: str) -> None:
    """The literal check: the reference model holding the checkpoint computes what transformers does."""
    from calc.checkpoint.load import load_weights

    root, model = tiny[family].root, tiny[family].model
    for source in (root / "single", root / "state.bin"):
        spec = read_for_verify(str(root / "single"), None).spec
        loaded = load_weights(read_for_verify(str(source), spec))
        ids = torch.tensor([[5, 17, 3, 96, 0, 42]])
        with torch.no_grad():
            expected = model(ids).logits
            assert torch.allclose(loaded(ids), expected, atol=1e-5), source


def test_load_is_skipped_when_the_header_check_failed(tiny, tmp_path: Path) -> None:
    """A spec the headers already contradict is not built and loaded: that would read every weight for nothing."""
    root = tiny["llama"].root
    config = json.loads((root / "single" / "config.json").read_text())
    spec = tmp_path / "wrong.yaml"  # the tiny Llama with a wider MLP than its checkpoint holds
    spec.write_text(f"family: llama\nvocab_size: 97\nn_positions: 64\nd_model: 32\nn_layers: 2\nn_heads: 4\n"
                    f"n_kv_heads: 2\nd_ff: {config['intermediate_size'] + 8}\n")
    code, out, _ = run(str(spec), "--checkpoint", str(root / "single"), "--load")
    assert code == 1
    assert "model.layers.0.mlp.up_proj.weight: shape [40, 32], spec expects [48, 32]" in out
    assert "✗ --load: skipped: header check failed" in out and "load_state_dict" not in out
    code, out, _ = run(str(spec), "--checkpoint", str(root / "single"), "--load", "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False
    assert data["load"]["ok"] is False and data["load"]["tensors"] == 0
    assert data["load"]["message"].startswith("skipped: header check failed")


def test_load_failure_is_a_verification_failure(tiny, tmp_path: Path) -> None:
    """Names and shapes right, weights broken: only the real load and forward pass can see it."""
    from safetensors.torch import save_file

    root, model = tiny["llama"].root, tiny["llama"].model
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    state["model.layers.0.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((root / "single" / "config.json").read_text())
    code, out, _ = run("--checkpoint", str(tmp_path), "--load")
    assert code == 1
    assert "every checkpoint tensor has the name and shape" in out  # the header check passes ...
    assert "✗ --load: tensor check failed: model.layers.0.mlp.up_proj.weight: 1 non-finite value(s)" in out  # ... the load does not


def test_torch_state_dict_with_model(tiny, tmp_path: Path) -> None:
    root = tiny["gpt2"].root
    code, out, _ = run(str(root / "single"), "--checkpoint", str(root / "state.bin"), "--load")
    assert code == 0, out
    assert "lm_head.weight: the same memory as transformer.wte.weight (counted once)" in out


def test_load_refuses_a_model_that_does_not_fit(tmp_path: Path) -> None:
    write_sharded(tmp_path, llama2_70b_shards())
    code, out, err = run("llama-2-70b", "--checkpoint", str(tmp_path), "--load")
    assert code == 2 and out == ""
    assert err.startswith("Error: --load: ") and "of memory to load" in err and "without --load needs none" in err


def test_memory_guard_uses_memavailable_not_memfree(tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MemFree leaves out the page cache the kernel gives back on demand; MemAvailable is what a load can use."""
    import calc.checkpoint.load

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemFree:        15000000 kB\nMemAvailable:          1 kB\n")
    monkeypatch.setattr(calc.checkpoint.load, "MEMINFO", meminfo)
    root = tiny["gpt2"].root
    code, out, err = run("--checkpoint", str(root / "single"), "--load")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("Error: --load: ") and "and 1.00 KiB is available" in err


@pytest.mark.parametrize(("text", "expected"), [
    ("MemTotal: 8 kB\nMemFree: 2 kB\nMemAvailable: 5 kB\n", 5 * 1024),  # source: /proc/meminfo counts KiB
    ("MemTotal: 8 kB\nMemFree: 2 kB\n", None),  # kernels before 3.14 have no MemAvailable: the fallback
    (None, None),  # no /proc (macOS): the fallback
])
def test_available_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None, expected: int | None) -> None:
    import os

    import calc.checkpoint.load

    meminfo = tmp_path / "meminfo"
    if text is not None:
        meminfo.write_text(text)
    monkeypatch.setattr(calc.checkpoint.load, "MEMINFO", meminfo)
    monkeypatch.setattr(os, "sysconf", {"SC_AVPHYS_PAGES": 3, "SC_PAGE_SIZE": 4096}.__getitem__)
    assert calc.checkpoint.load.available_memory() == (3 * 4096 if expected is None else expected)


def test_llama2_70b_sized_checkpoint_verifies_header_only(tmp_path: Path) -> None:
    write_sharded(tmp_path, llama2_70b_shards())
    code, out, _ = run("llama-2-70b", "--checkpoint", str(tmp_path), "--json")
    data = json.loads(out)
    assert code == 0 and data["totals"]["checkpoint"] == 68_976_648_192  # source: see test_checkpoint.py
    assert data["checkpoint"]["bytes_read"] < 2_000_000


@pytest.mark.parametrize(("args", "message"), [
    ([], "give MODEL, or --checkpoint"),
    (["gpt2-small", "--load"], "--load: needs --checkpoint"),
    (["--checkpoint", "GPT2_FILE"], "no config.json beside the weights, so MODEL is needed"),
    (["gpt2-small", "--checkpoint", "missing.safetensors"], "no such file or directory"),
    (["--checkpoint", "nobody/nothing"], "not in the local Hugging Face cache"),
])
def test_bad_input_exits_2(gpt2_file: Path, args: list[str], message: str) -> None:
    code, out, err = run(*[str(gpt2_file) if a == "GPT2_FILE" else a for a in args])
    assert code == 2 and out == ""
    assert err.startswith("Error: ") and message in err and err.count("\n") == 1
