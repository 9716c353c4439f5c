"""Hostile input, class by class (issue 10), part 2: values inside files and arguments.

2. terminal control sequences (`calc.render.text.shown`, in the console and the error line);
4. silently wrong answers (repeated keys, strict booleans and layer indices);
5. tracebacks (the strict readers, and the CLI boundary for whatever escapes them);
6. errors of more than one line (click's usage errors, library warnings, an unreachable Hub).

Part 1, what is on disk, is tests/test_hostile_files.py; both run every command through
`cli_checks.check_run` and generate variants with hypothesis (`--fuzz-long`: 20x more).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from calc.cli import main
from checkpoint_files import write_safetensors
from cli_checks import CASES, check_run
from hostile_files import CONFIG, LAYOUT, TINY_PARAMS, cache_snapshot, write_checkpoint


# --- 2. control characters ---------------------------------------------------------------------

hostile_text = st.text(st.one_of(st.characters(categories=["Cc", "Cf", "Zl", "Zp"]), st.sampled_from("ab[]/\\é中")),
                       min_size=1, max_size=12).map(lambda s: "\x1b[2J" + s)


@CASES
@given(text=hostile_text)
def test_names_from_files_are_printed_with_control_characters_escaped(tmp_path_factory, text: str) -> None:
    root = tmp_path_factory.mktemp("names")
    spec = root / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": text, "family": "gpt2", "vocab_size": 11, "d_model": 4, "n_layers": 1,
                                "n_heads": 1, "n_positions": 8}))
    for args in (["count"], ["shapes", "--seq", "4"], ["memory"], ["kvcache"]):
        assert check_run([*args, str(spec)]).exit_code == 0
    checkpoint = write_checkpoint(root / "ckpt", config={**CONFIG, "_name_or_path": text})
    write_safetensors(checkpoint / "model.safetensors", {**LAYOUT, f"h.0.{text}.weight": ("F32", (1,))})
    assert check_run(["inspect", str(checkpoint)]).exit_code == 0
    assert check_run(["verify", "--checkpoint", str(checkpoint)]).exit_code == 1  # the extra tensor
    assert check_run(["count", str(checkpoint)]).exit_code == 0


@CASES
@given(text=hostile_text.filter(lambda s: "/" not in s and "\x00" not in s and not any(0xD800 <= ord(c) < 0xE000 for c in s)))
def test_paths_and_arguments_in_error_lines_are_escaped(tmp_path_factory, text: str) -> None:
    root = tmp_path_factory.mktemp("paths")
    directory = root / text
    directory.mkdir()
    for args in (["inspect", str(directory)], ["count", str(directory / "x.yaml")], ["count", text],
                 ["memory", "gpt2", "--budget", text], ["memory", "gpt2", "--dtype", text], ["count", "gpt2", "--set", text]):
        assert check_run(args).exit_code == 2



# --- 4. silently wrong answers -------------------------------------------------------------------

@CASES
@given(key=st.sampled_from(sorted(CONFIG)), value=st.one_of(st.integers(1, 64), st.booleans(),
                                                            st.text("abcxyz_-.", max_size=5)))
def test_a_key_given_twice_is_an_error_in_json_and_yaml(tmp_path_factory, key: str, value: object) -> None:
    root = tmp_path_factory.mktemp("dup")
    body = json.dumps(CONFIG)[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}"
    (root / "config.json").write_text(body)
    spec = {"family": "gpt2", "vocab_size": 11, "d_model": 4, "n_layers": 1, "n_heads": 1, "n_positions": 8}
    yaml_key = sorted(spec)[len(key) % len(spec)]
    (root / "spec.yaml").write_text(json.dumps(spec)[:-1] + f", {json.dumps(yaml_key)}: {json.dumps(value)}}}")
    for path, name in ((root / "config.json", key), (root / "spec.yaml", yaml_key)):
        result = check_run(["count", str(path)])
        assert result.exit_code == 2 and f"{name!r} is given twice" in result.stderr


@pytest.mark.parametrize("key", ["qkv_bias", "tie_embeddings", "mlp_bias"])
@pytest.mark.parametrize("text", ["false", "False", "no", "0"])
def test_booleans_are_booleans(tmp_path: Path, key: str, text: str) -> None:
    """`"false"` (a string in JSON, quoted in YAML) is not False, and never True either."""
    spec = {"family": "gpt2", "vocab_size": 11, "d_model": 4, "n_layers": 1, "n_heads": 1, "n_positions": 8, key: text}
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    assert check_run(["count", str(tmp_path / "spec.yaml")]).exit_code == 2
    checkpoint = write_checkpoint(tmp_path / "ckpt", config={**CONFIG, "tie_word_embeddings": text})
    assert check_run(["count", str(checkpoint)]).exit_code == 2


@CASES
@given(index=st.one_of(
    st.integers(0, 99).map(lambda i: "0" + str(i)),  # leading zero: 00, 01, 099
    st.text(st.characters(categories=["Nd"]).filter(lambda c: not c.isascii()), min_size=1, max_size=3),
))
def test_only_plain_ascii_layer_indices_name_a_layer(tmp_path_factory, index: str) -> None:
    path = write_safetensors(tmp_path_factory.mktemp("index") / "m.safetensors",
                             {**LAYOUT, f"h.{index}.ln_1.weight": ("F32", (4,))})
    result = check_run(["inspect", str(path), "--json"])
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert [t["name"] for t in report["unknown"]] == [f"h.{index}.ln_1.weight"] and report["parameters"] == TINY_PARAMS



# --- 5. tracebacks ---------------------------------------------------------------------------------

BROKEN_YAML = {
    "a digit-limit integer": "d_model: " + "9" * 5000,
    "a 31-digit integer": "d_model: " + "9" * 31,
    "an int tag on text": "d_model: !!int abc",
    "an impossible date": "name: 2024-02-30",
    "a python tag": "name: !!python/object/apply:os.system [ls]",
    "nesting": "name: " + "[" * 10_000 + "]" * 10_000,
    "an alias bomb": "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
    "binary": "name: !!binary '@@@'",
    "not a mapping": "- 1\n- 2",
    "tabs": "a:\n\t- 1",
}


@pytest.mark.parametrize("case", sorted(BROKEN_YAML))
def test_broken_yaml_is_one_error_line(tmp_path: Path, case: str) -> None:
    (tmp_path / "spec.yaml").write_text(BROKEN_YAML[case])
    result = check_run(["count", str(tmp_path / "spec.yaml")])
    assert result.exit_code == 2 and "spec.yaml" in result.stderr


BROKEN_JSON = {
    "a digit-limit integer": '{"model_type": "gpt2", "n_embd": %s}' % ("9" * 5000),
    "nested 100,000 deep": '{"model_type": "gpt2", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "nested 70 deep": '{"model_type": "gpt2", "x": ' + "[" * 70 + "]" * 70 + "}",
    "not UTF-8": b'{"model_type": "\xff"}',
    "NaN sizes": '{"model_type": "gpt2", "n_embd": NaN}',
    "a list": "[1, 2]",
}


@pytest.mark.parametrize("case", sorted(BROKEN_JSON))
def test_broken_config_json_is_one_error_line(tmp_path: Path, case: str) -> None:
    content = BROKEN_JSON[case]
    (tmp_path / "config.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    for args in (["count", str(tmp_path / "config.json")], ["count", str(tmp_path)]):
        assert check_run(args).exit_code == 2


@CASES
@given(value=st.one_of(st.integers(10**29, 10**4000).map(str), st.sampled_from(
    ["!!int abc", "2024-02-30", "[[[[", "{a: 1, a: 2}", "!!binary x", "1e999999999", "&a [*a]", "*nowhere"])))
def test_set_values_never_escape_as_tracebacks(value: str) -> None:
    for command in ("count", "memory", "shapes"):
        assert check_run([command, "gpt2", "--set", f"d_model={value}"]).exit_code == 2


@pytest.mark.parametrize("budget", ["", " ", "1e999999999", "-1", "nan", "inf", "1e30", "80XB", "80 G B s"])
def test_budgets_that_are_not_sizes(budget: str) -> None:
    result = check_run(["memory", "gpt2", "--budget", budget])
    assert result.exit_code == 2 and "--budget" in result.stderr


def test_an_unexpected_error_is_one_line_naming_itself_as_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    import calc.analysis.count

    def broken(spec):
        raise KeyError("x\n\x1b[2Jsecond line")

    monkeypatch.setattr(calc.analysis.count, "count", broken)
    result = check_run(["count", "gpt2"])
    assert result.exit_code == 2 and "unexpected KeyError" in result.stderr and "bug in gptcalc" in result.stderr
    monkeypatch.setenv("GPTCALC_DEBUG", "1")
    assert isinstance(CliRunner().invoke(main, ["count", "gpt2"]).exception, KeyError)  # the traceback, when asked


# --- 6. one line ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["memory", "gpt2", "--seq", "0"], ["memory", "gpt2", "--dtype", "fp12"], ["memory", "gpt2", "--seq", "abc"],
    ["count"], ["nosuchcommand"], ["--nosuchoption"], ["kvcache", "--batch", "x"], ["shapes", "gpt2", "--seq", "-1"],
    ["memory", "gpt2", "--group-size", "0"], ["inspect"], ["count", "gpt2", "--set"],
])
def test_click_usage_errors_are_one_line(args: list[str]) -> None:
    """click's own three lines (Usage:, Try, Error:) as one, which says where to look."""
    result = check_run(args)
    assert result.exit_code == 2 and ("--help" in result.stderr or "gptcalc compare" in result.stderr)


def test_an_unreachable_hub_fails_in_seconds_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network and no HF_HUB_OFFLINE: huggingface_hub alone retries for 24 s, printing as it goes."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: connection refused
    for args in (["count", "unreachable-org/model"], ["inspect", "unreachable-org/model"]):
        start = time.monotonic()
        result = check_run(args)
        assert result.exit_code == 2 and "cannot be reached" in result.stderr and time.monotonic() - start < 8


def test_a_cached_config_is_used_when_the_hub_cannot_be_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    cache_snapshot("cache-org/offline")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    assert "328 parameters" in check_run(["count", "cache-org/offline"]).stdout


def test_torch_warnings_do_not_precede_the_error_line(tmp_path: Path) -> None:
    """A protocol-5 pickle makes torch warn before it fails; only the `Error:` line is printed."""
    pytest.importorskip("torch")
    import pickle

    (tmp_path / "x.bin").write_bytes(pickle.dumps({"x": 1}, protocol=5))
    result = check_run(["inspect", str(tmp_path / "x.bin")])
    assert result.exit_code == 2 and result.stderr.startswith("Error: ")


def test_library_log_lines_do_not_reach_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub logs "Retrying in 8s" at WARNING; no library's log line reaches a user's stderr."""
    import logging

    import calc.analysis.count

    real = calc.analysis.count.count

    def logging_count(spec):
        logging.getLogger("huggingface_hub").warning("Retrying in 8s [Retry 4/5].")
        logging.getLogger("transformers").error("a library's error log")
        return real(spec)

    monkeypatch.setattr(calc.analysis.count, "count", logging_count)
    result = check_run(["count", "gpt2"])
    assert result.exit_code == 0 and result.stderr == ""
    assert not logging.root.manager.disable  # logging is itself again after the command


FIRST_LOG = """
import sys
import calc.analysis.count
from calc.cli import main

real = calc.analysis.count.count


def logging_count(spec):
    import logging  # a library that logs, loaded inside the command: the first import of logging
    logging.getLogger("huggingface_hub").warning("Retrying in 8s [Retry 4/5].")
    return real(spec)


assert "logging" not in sys.modules, "gptcalc itself imported logging"
calc.analysis.count.count = logging_count
sys.argv = ["gptcalc", "count", "gpt2"]
try:
    main()
finally:
    import logging
    assert not logging.root.manager.disable, "logging stayed disabled after the command"
"""


def test_a_library_importing_logging_mid_command_is_quiet_too() -> None:
    """A count does not load `logging` (start-up time), so a library that logs usually imports it
    during the command: it is quietened on import, and itself again afterwards."""
    result = subprocess.run([sys.executable, "-c", FIRST_LOG], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and "124,439,808" in result.stdout
