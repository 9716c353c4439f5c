"""`verify`: the headline and the exit code always agree, for every combination of failures, and
transformers' own model as a further column."""

from __future__ import annotations

import itertools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.breakdown import compare
from calc.analysis.count import count
from calc.cli import main
from calc.render.verify import verify_lines, verify_table
from calc.spec.load import load_spec
from calc.verify import Verification
from checkpoint_files import gpt2_file, gpt2_small_layout, tiny, write_safetensors  # noqa: F401  (fixtures)
from oracle import preset_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["verify", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout


def title(out: str) -> str:
    """The table's title, however rich wrapped it (everything above the table's top border)."""
    return " ".join(out.split("┏")[0].split())


@dataclass
class Stub:
    """A checkpoint report, load result or transformers source reduced to what the verdict reads."""

    ok: bool
    mismatches: tuple = ()
    unknown: tuple = ()
    message: str = "stub"
    transformers: object = None
    note: str = "stub"
    report: object = None
    total: int | None = None

    def to_json(self) -> dict[str, bool]:
        return {"ok": self.ok}


@pytest.mark.parametrize("counts, transformers_ok, checkpoint_ok, load_ok",
                         list(itertools.product([True, False], repeat=4)))
def test_every_combination_headline_agrees_with_ok(counts: bool, transformers_ok: bool, checkpoint_ok: bool,
                                                   load_ok: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import calc.render.verify as render_verify

    monkeypatch.setattr(render_verify, "verify_checkpoint_lines", lambda r: [])
    analytic = count(load_spec("gpt2-small"))
    other = analytic if counts else type(analytic)("x", 12, {**analytic.components, "q": 1}, source="torch")
    checkpoint = Stub(checkpoint_ok, mismatches=() if checkpoint_ok else ("m",))
    result = Verification(load_spec("gpt2-small"), {"analytic": analytic, "torch": other},
                          compare({"analytic": analytic, "torch": other}), checkpoint, Stub(load_ok), Stub(transformers_ok))
    everything_ok = counts and transformers_ok and checkpoint_ok and load_ok
    assert result.ok is everything_ok and (result.problems() == []) is everything_ok
    assert ("all agree" in result.verdict) is everything_ok
    assert result.to_json()["ok"] is everything_ok and result.to_json()["verdict"] == result.verdict
    assert verify_table("gpt2-small", result.diff, result.verdict).title.endswith(f"({result.verdict})")
    verify_lines(result)  # every combination renders
    if counts and not everything_ok:
        assert result.verdict.startswith("counts agree; ")


def headline_case(name: str, gpt2_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The verify arguments of one real failure (or none)."""
    if name == "counts":  # the analytic counter forgets the LM head, the classic LLaMA-7B mistake
        from calc.parts import Head

        monkeypatch.setattr(Head, "params", lambda self, vocab, d, proj_dim=None: {"lm_head": 0})
        return ["llama-7b"]
    if name == "checkpoint shapes":
        return ["gpt2-medium", "--checkpoint", str(gpt2_file)]
    if name == "unknown tensor":
        layout = {**gpt2_small_layout(), "score.weight": ("F32", (2, 768))}
        return ["gpt2-small", "--checkpoint", str(write_safetensors(tmp_path / "m.safetensors", layout))]
    return ["gpt2-small", "--checkpoint", str(gpt2_file)]


@pytest.mark.parametrize("name, verdict", [
    ("none", "(all agree)"),
    ("counts", "(1 of 12 components disagree)"),
    ("checkpoint shapes", "components disagree; "),
    ("unknown tensor", "(counts agree; 1 checkpoint tensor unrecognised or misshapen)"),
])
def test_cli_headline_and_exit_code(name: str, verdict: str, gpt2_file: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    args = headline_case(name, gpt2_file, tmp_path, monkeypatch)
    code, out = run(*args)
    assert verdict in title(out)
    assert code == (0 if name == "none" else 1)
    assert ("(all agree)" in title(out)) is (code == 0)
    code, out = run(*args, "--json")
    data = json.loads(out)
    assert data["ok"] is (code == 0) and verdict.strip("(); ") in data["verdict"]


def test_a_failed_load_is_in_the_headline(tiny, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    state = {name: tensor.clone() for name, tensor in tiny["llama"].model.state_dict().items()}
    state["model.norm.weight"][0] = float("nan")
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((tiny["llama"].root / "single" / "config.json").read_text())
    code, out = run("--checkpoint", str(tmp_path), "--load")
    assert code == 1 and "(counts agree; --load failed)" in title(out)


# --- transformers' own model as a column ------------------------------------------------------------

def test_a_preset_with_a_config_gets_a_transformers_column() -> None:
    code, out = run("llama-3.1-8b")
    assert code == 0 and "analytic vs torch vs transformers (all agree)" in title(out)
    assert "transformers − analytic" in out
    # source: Meta-Llama-3.1-8B num_parameters() = 8,030,261,248 (keras-hub llama3.1_8b preset)
    assert re.search(r"│ total\s*│ 8,030,261,248 │ 8,030,261,248 │ 8,030,261,248 │", out)
    assert "✓ every transformers parameter has the name and shape the spec implies" in out


def test_a_config_json_gets_the_column_and_json_says_so(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(preset_config("qwen2.5-0.5b")))
    code, out = run(str(tmp_path), "--json")
    data = json.loads(out)
    assert code == 0 and data["sources"] == ["analytic", "torch", "transformers"]
    assert data["transformers"]["ok"] is True and data["transformers"]["by_component"] is True
    assert data["tied"]["transformers"] is True  # Qwen2.5-0.5B ties its head (tie_word_embeddings: true)
    assert data["totals"]["transformers"] == data["totals"]["analytic"]


def test_a_spec_of_gptcalc_fields_skips_transformers_and_says_so() -> None:
    code, out = run("gpt2-small")
    assert code == 0 and "analytic vs torch (all agree)" in title(out)
    assert "transformers' model not compared: gpt2-small is written as gptcalc spec fields, not a config.json" in out


def test_without_transformers_the_column_is_left_out_and_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    code, out = run("llama-3.1-8b")
    assert code == 0 and "analytic vs torch (all agree)" in title(out)
    assert "transformers' model not compared: transformers (and torch) are not installed" in out


def test_a_library_the_model_needs_is_named_not_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers installed, its model needing another library it lacks (Gemma 3n's TimmWrapperModel without timm,
    transformers' own message): the model is named as unbuilt, with why, not transformers as missing."""
    import calc.arch.fallback as fallback

    def needs_timm(config: dict, *_: object, **__: object) -> None:
        raise ImportError("TimmWrapperModel requires the timm library but it was not found in your environment.")

    monkeypatch.setattr(fallback, "transformers_model", needs_timm)
    code, out = run("llama-3.2-1b")
    assert code == 0 and "transformers cannot build model_type 'llama': TimmWrapperModel requires the timm library" in out
    assert "are not installed" not in out


def wider_mlp(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers builds a model whose MLP is 8 wider than the config says: the column must catch it."""
    import calc.arch.fallback as fallback

    real = fallback.transformers_model
    monkeypatch.setattr(fallback, "transformers_model", lambda config, device="meta", text_only=False, **options: real(
        {**config, "intermediate_size": config["intermediate_size"] + 8}, device, text_only, **options))


def test_a_transformers_model_that_disagrees_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    wider_mlp(monkeypatch)
    code, out = run("llama-3.2-1b")
    assert code == 1
    assert "components disagree; transformers' model disagrees" in title(out)
    assert "model.layers.0.mlp.up_proj.weight: shape [8200, 2048], spec expects [8192, 2048]" in out  # 8192 + 8


@pytest.mark.parametrize("wider", [False, True])
def test_when_names_do_not_map_the_totals_are_compared(wider: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import calc.checkpoint.transformers_source as source
    from calc.errors import GptcalcError

    def refuse(*_: object, **__: object) -> None:
        raise GptcalcError("the name maps cannot map this spec")

    monkeypatch.setattr(source, "analyze", refuse)
    if wider:
        wider_mlp(monkeypatch)
    code, out = run("llama-3.2-1b")
    assert "transformers' LlamaForCausalLM: total only (the name maps cannot map this spec)" in out
    assert "analytic vs torch (" in title(out)  # no column: the rows are not our components
    assert code == (1 if wider else 0)
    assert ("✗" if wider else "✓") + " transformers' total" in out
