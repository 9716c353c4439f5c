"""Shell completion (click's, documented in the README) and `python -m calc`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main

REPO = Path(__file__).resolve().parent.parent


def complete(words: str) -> list[str]:
    """What bash completion offers after `words` (the last word is the one being completed)."""
    env = {"_GPTCALC_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    result = CliRunner().invoke(main, [], prog_name="gptcalc", env=env)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_the_readme_line_prints_a_bash_completion_script() -> None:
    result = CliRunner().invoke(main, [], prog_name="gptcalc", env={"_GPTCALC_COMPLETE": "bash_source"})
    assert result.exit_code == 0 and "_gptcalc_completion()" in result.output
    assert '_GPTCALC_COMPLETE=bash_source gptcalc' in (REPO / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("words", "expected"), [
    ("gptcalc co", ["plain,compare", "plain,count"]),
    ("gptcalc compare llama-2-7b mistral", ["plain,mistral-7b", "plain,mistral-nemo"]),
    ("gptcalc memory qwen2.5-14", ["plain,qwen2.5-14b"]),
    ("gptcalc shapes ./my-spe", ["file,./my-spe"]),  # not a preset: the shell completes a path
])
def test_commands_and_preset_names_complete(words: str, expected: list[str]) -> None:
    assert complete(words) == expected


def test_python_dash_m_is_gptcalc() -> None:
    done = subprocess.run([sys.executable, "-m", "calc", "--help"], cwd=REPO, capture_output=True, text=True, check=True)
    assert "Usage: python -m calc [OPTIONS] COMMAND [ARGS]..." in done.stdout and "compare" in done.stdout


def test_help_loads_only_click() -> None:
    """`gptcalc --help` (and completion) list commands: no spec library, no table library, no number types."""
    code = ("import sys; from click.testing import CliRunner; from calc.cli import main; "
            "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0, r.output; "
            "loaded = [m for m in ('pydantic', 'rich', 'yaml', 'decimal', 'fractions', 'matplotlib') if m in sys.modules]; "
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
