"""`verify --load`: every tensor checked as it is read, and our logits against transformers' on the same weights."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main
from checkpoint_files import TINY, tiny  # noqa: F401  (tiny: fixture)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.torch import save_file  # noqa: E402

VOCAB = TINY["llama"][2]["vocab_size"]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["verify", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def saved(tiny, tmp_path: Path, state: dict[str, torch.Tensor], family: str = "llama") -> Path:
    """The tiny model's config.json beside a safetensors file holding `state`."""
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((tiny[family].root / "single" / "config.json").read_text())
    return tmp_path


def state_of(tiny, family: str = "llama") -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in tiny[family].model.state_dict().items()}


def test_a_nan_in_a_row_the_forward_pass_never_reads_fails(tiny, tmp_path: Path) -> None:
    """The forward pass reads token ids 0..7; row VOCAB-1 of the embedding is never looked up."""
    state = state_of(tiny)
    state["model.embed_tokens.weight"][VOCAB - 1, 3] = float("nan")
    code, out, _ = run("--checkpoint", str(saved(tiny, tmp_path, state)), "--load")
    assert code == 1
    assert f"✗ --load: tensor check failed: model.embed_tokens.weight: 1 non-finite value(s) (NaN or inf), " \
           f"the first at [{VOCAB - 1}, 3]" in out
    assert "all agree" not in out


def test_an_inf_in_a_norm_fails(tiny, tmp_path: Path) -> None:
    state = state_of(tiny)
    state["model.norm.weight"][5] = float("-inf")
    code, out, _ = run("--checkpoint", str(saved(tiny, tmp_path, state)), "--load", "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False and "--load failed" in data["problems"]
    assert data["load"]["message"].startswith("tensor check failed: model.norm.weight: 1 non-finite")


@pytest.mark.parametrize("dtype, words", [
    (torch.int32, "dtype int32 is an integer dtype"),
    (torch.bool, "dtype bool is boolean"),
    (torch.complex64, "dtype complex64 is complex"),
    (torch.float8_e4m3fn, "dtype float8_e4m3fn is a quantised float"),
])
def test_a_weight_in_a_dtype_the_model_does_not_compute_in_is_rejected_by_name(
        tiny, tmp_path: Path, dtype: torch.dtype, words: str) -> None:
    state = state_of(tiny)
    state["model.layers.1.mlp.down_proj.weight"] = state["model.layers.1.mlp.down_proj.weight"].to(dtype)
    code, out, _ = run("--checkpoint", str(saved(tiny, tmp_path, state)), "--load")
    assert code == 1
    [line] = [line for line in out.splitlines() if "✗ --load" in line]
    assert f"model.layers.1.mlp.down_proj.weight: {words}" in line and "F32, F16, BF16, F64" in line


def test_a_bfloat16_checkpoint_loads_and_matches_transformers(tiny, tmp_path: Path) -> None:
    state = {name: tensor.to(torch.bfloat16) for name, tensor in state_of(tiny).items()}
    code, out, _ = run("--checkpoint", str(saved(tiny, tmp_path, state)), "--load", "--json")
    data = json.loads(out)
    assert code == 0, data["load"]
    assert "parameters in bfloat16" in data["load"]["message"]
    assert data["load"]["transformers"]["compared"] is True


def write_with_raw_dtype(path: Path, state: dict[str, torch.Tensor], name: str, dtype: str, nbytes: int) -> Path:
    """A safetensors file (written by hand, per the format) whose tensor `name` has a dtype torch cannot hold.
    # source: https://huggingface.co/docs/safetensors/index#format (F6_E2M3 is one of its dtypes)
    """
    header: dict[str, object] = {}
    blobs, offset = [], 0
    for key, tensor in state.items():
        blob = bytes(nbytes) if key == name else tensor.contiguous().view(torch.uint8).numpy().tobytes()
        header[key] = {"dtype": dtype if key == name else "F32", "shape": list(tensor.shape),
                       "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    return path


def test_a_safetensors_dtype_torch_cannot_hold_is_one_error_line(tiny, tmp_path: Path) -> None:
    state = state_of(tiny)
    width = state["model.norm.weight"].numel()  # 32 elements x 6 bits = 24 bytes
    write_with_raw_dtype(tmp_path / "model.safetensors", state, "model.norm.weight", "F6_E2M3", width * 6 // 8)
    (tmp_path / "config.json").write_text((tiny["llama"].root / "single" / "config.json").read_text())
    code, out, _ = run("--checkpoint", str(tmp_path))  # the header check reads no data: it passes
    assert code == 0, out
    code, out, err = run("--checkpoint", str(tmp_path), "--load")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"Error: {tmp_path / 'model.safetensors'}: tensor 'model.norm.weight': cannot be read into torch")
    assert "F6_E2M3" in err


def test_tensors_are_read_one_at_a_time(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded memory: never the whole file at once through safetensors' load_file."""
    import safetensors.torch

    def whole_file(*_: object, **__: object) -> None:
        raise AssertionError("load_file reads every tensor at once")

    monkeypatch.setattr(safetensors.torch, "load_file", whole_file)
    code, out, _ = run("--checkpoint", str(tiny["llama"].root / "single"), "--load")
    assert code == 0, out


@pytest.mark.parametrize("family", sorted(TINY))
def test_our_logits_equal_transformers_on_the_same_weights(tiny, family: str) -> None:
    code, out, _ = run("--checkpoint", str(tiny[family].root / "sharded"), "--load", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True, data["load"]
    comparison = data["load"]["transformers"]
    assert comparison["compared"] is True and comparison["ok"] is True
    assert comparison["max_difference"] < 1e-5 <= comparison["tolerance"]  # float32 rounding, far below


def llama3_rope_checkpoint(directory: Path) -> Path:
    """A tiny Llama with Llama-3.1's rope_scaling, written by transformers itself.
    # source: https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json (rope_scaling, rope_type llama3)
    """
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        **TINY["llama"][2], rope_theta=10000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16})
    transformers.LlamaForCausalLM(config).eval().save_pretrained(directory)
    return directory


def test_llama3_rope_scaling_is_never_a_silent_pass(tmp_path: Path) -> None:
    """The motivating bug: the scaling changes no tensor, so only the logits can tell. A reference that
    ignores it differs from transformers by ~1e-3 (exit 1); one that refuses the option exits 2; ✓ (exit 0)
    only when transformers' logits were compared and agree."""
    root = str(llama3_rope_checkpoint(tmp_path / "llama31"))
    code, out, err = run("--checkpoint", root, "--load", "--json")
    if code == 2:
        assert "rope" in err and err.count("\n") == 1
        return
    comparison = json.loads(out)["load"]["transformers"]
    assert comparison["compared"] is True
    assert (code == 0) is (comparison["max_difference"] <= comparison["tolerance"])
    if code == 1:
        code, out, _ = run("--checkpoint", root, "--load")
        assert code == 1 and "all agree" not in out
        assert "✗ --load: transformers' LlamaForCausalLM on the same weights" in out and "above the tolerance" in out


def test_without_a_config_the_logits_are_not_compared_and_it_says_so(tiny, tmp_path: Path) -> None:
    spec = tmp_path / "tiny.yaml"
    cfg = TINY["llama"][2]
    spec.write_text(f"family: llama\nvocab_size: {cfg['vocab_size']}\nn_positions: {cfg['max_position_embeddings']}\n"
                    f"d_model: {cfg['hidden_size']}\nn_layers: {cfg['num_hidden_layers']}\n"
                    f"n_heads: {cfg['num_attention_heads']}\nn_kv_heads: {cfg['num_key_value_heads']}\n"
                    f"d_ff: {cfg['intermediate_size']}\nnorm_eps: 1.0e-6\n")
    code, out, _ = run(str(spec), "--checkpoint", str(tiny["llama"].root / "single"), "--load")
    assert code == 0, out
    assert "• --load: transformers' logits not compared: the spec did not come from a config.json" in out


def test_without_transformers_the_logits_are_not_compared_and_it_says_so(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now raises ImportError
    code, out, _ = run("--checkpoint", str(tiny["llama"].root / "single"), "--load")
    assert code == 0, out
    assert "• --load: transformers' logits not compared: transformers is not installed" in out
