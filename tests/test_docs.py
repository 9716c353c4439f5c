"""The output shown in README.md and docs/*.md is what the commands print today."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _regenerate():  # noqa: ANN202 - the docs/regenerate.py module
    spec = importlib.util.spec_from_file_location("regenerate", DOCS / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REGENERATE = _regenerate()


@pytest.mark.parametrize("path", REGENERATE.documents(), ids=lambda p: p.name)
def test_shown_output_is_current(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert REGENERATE.refreshed(text) == text, f"run: python docs/regenerate.py ({path.name} is stale)"


def test_every_command_appears_in_the_readme() -> None:
    from calc.cli import main

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    for name in main.commands:
        assert f"gptcalc {name}" in readme, name
