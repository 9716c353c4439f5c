"""A config that names its own modelling code (`auto_map`) never gets it run, nor asked about (issue 25).

Each route by which a config reaches transformers plants an `evil.py` that would write a file when
imported, next to a config whose model_type transformers knows but cannot build as a causal LM
(`t5`: no class of its own, so transformers would offer to run the directory's code and read the
answer from stdin). stdin says "y", the working directory is the planted one (`_name_or_path: "."`),
and every route must end in one `Error:` line naming `auto_map` (exit 2), with nothing asked and no
file written.
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from calc.cli import main

T5 = {"model_type": "t5", "_name_or_path": ".", "d_model": 8, "num_layers": 1, "num_heads": 2, "d_kv": 4,
      "d_ff": 16, "vocab_size": 32}
LLAMA = {"model_type": "llama", "_name_or_path": ".", "hidden_size": 8, "num_hidden_layers": 1,
         "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 32}


def _plant(directory: Path, marker: Path) -> None:
    """evil.py: importing it writes `marker`; what transformers would import from `auto_map`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
                                       "from transformers import PreTrainedModel\n"
                                       "class Evil(PreTrainedModel):\n    pass\n")


def _auto_map(directory: Path, form: str) -> dict[str, str]:
    """A module in the model's own directory, or `repo--module.Class` (code from another repo)."""
    ref = "evil.Evil" if form == "local" else f"{directory}--evil.Evil"
    return {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": ref}


def _route(route: str, root: Path, auto_map: dict[str, str]) -> list[str]:
    """Write the files of one route and return the command that follows it."""
    evil = root / "evil"
    if route == "config.json":
        (evil / "config.json").write_text(json.dumps({**T5, "auto_map": auto_map}))
        return ["count", str(evil)]
    if route == "yaml config:":
        (root / "spec.yaml").write_text(yaml.safe_dump({"name": "evil", "config": {**T5, "auto_map": auto_map}}))
        return ["count", str(root / "spec.yaml")]
    if route == "--set":  # counted analytically as a llama, sent to transformers by the override
        (evil / "config.json").write_text(json.dumps({**LLAMA, "auto_map": auto_map}))
        return ["count", str(evil), "--set", "model_type=t5"]
    if route == "text_config":  # the code named by the multimodal wrapper, the language model nested
        (evil / "config.json").write_text(json.dumps({"model_type": "evil_vl", "auto_map": auto_map,
                                                      "_name_or_path": ".", "text_config": T5}))
        return ["count", str(evil)]
    raise AssertionError(route)


def _run(args: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[object, list[str]]:
    """The CLI with "y" on stdin; every prompt `input()` would show is recorded (and answered "y")."""
    asked: list[str] = []
    real_input = builtins.input

    def recording_input(prompt: str = "") -> str:
        asked.append(prompt)
        return real_input(prompt)

    monkeypatch.setattr(builtins, "input", recording_input)
    return CliRunner().invoke(main, args, input="y\ny\n"), asked


def _assert_refused(result, asked: list[str], marker: Path) -> None:
    output = result.stdout + result.stderr
    assert not marker.exists(), "the planted code ran"
    assert not asked and "custom code" not in output and "[y/N]" not in output, asked
    assert result.exit_code == 2, output
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, output
    assert "auto_map" in result.stderr and "never runs" in result.stderr


@pytest.mark.parametrize("form", ["local", "other repo"])
@pytest.mark.parametrize("route", ["config.json", "yaml config:", "--set", "text_config"])
def test_planted_code_is_never_run_nor_offered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str,
                                               form: str) -> None:
    marker = tmp_path / "PWNED"
    _plant(tmp_path / "evil", marker)
    args = _route(route, tmp_path, _auto_map(tmp_path / "evil", form))
    monkeypatch.chdir(tmp_path / "evil")  # `_name_or_path: "."` names the planted directory
    _assert_refused(*_run(args, monkeypatch), marker)


def test_planted_code_in_a_cached_hub_repo_is_never_run_nor_offered(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1 (tests/conftest.py): the config and evil.py come from the Hugging Face cache."""
    from hostile_files import cache_snapshot

    marker = tmp_path / "PWNED"
    snapshot = cache_snapshot("evil-org/remote-code")
    _plant(snapshot, marker)
    (snapshot / "config.json").unlink()  # a link into blobs/: replaced by the planted config
    (snapshot / "config.json").write_text(json.dumps({**T5, "_name_or_path": "evil-org/remote-code",
                                                      "auto_map": _auto_map(snapshot, "local")}))
    monkeypatch.chdir(snapshot)
    _assert_refused(*_run(["count", "evil-org/remote-code"], monkeypatch), marker)


def test_transformers_is_never_given_auto_map_nor_asked_to_trust_code(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The one door to transformers (`verify` and `verify --load` use it for configs gptcalc counts
    itself): a model_type with no class of its own is "unrecognized", never code to offer."""
    pytest.importorskip("transformers")
    from calc.arch.fallback import transformers_model

    marker = tmp_path / "PWNED"
    _plant(tmp_path, marker)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(builtins, "input", lambda prompt="": pytest.fail(f"transformers asked: {prompt}"))
    with pytest.raises(ValueError, match="Unrecognized configuration class"):
        transformers_model({**T5, "auto_map": _auto_map(tmp_path, "local")})
    assert not marker.exists()


def test_a_config_with_auto_map_that_gptcalc_counts_itself_is_counted(tmp_path: Path) -> None:
    """auto_map is refused only where it would be the model: Phi-3's hub config keeps the auto_map of
    the days before transformers had Phi-3, and is counted analytically as before."""
    result = CliRunner().invoke(main, ["count", "tests/configs/model_types/phi3.json"])
    assert result.exit_code == 0 and "auto_map" in Path("tests/configs/model_types/phi3.json").read_text()
