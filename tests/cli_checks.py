"""The contract every run of the CLI keeps, whatever it is given (used by the hostile-input tests).

- exit code 0, 1 or 2; exit 2 prints exactly one line on stderr, and it starts with `Error: `;
- no traceback, and no exception left in the runner (only SystemExit);
- no control character in stdout or stderr but the newline: nothing from a file or an argument
  reaches the terminal raw (CliRunner is not a terminal, so rich adds no colour codes of its own);
- no file under `area` (a test's temporary directory) that resolves outside `allowed` (the
  checkpoint or spec named) is opened while the command runs: checked with a Python audit hook,
  which sees every `open()`, torch.load's and zipfile's included.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, settings

from calc.cli import main

__all__ = ["CASES", "SECONDS", "check_run", "full_sweep", "fuzz_examples"]

SECONDS = 20.0  # the wall-clock bound of one command: a hang, not a slow first import of transformers on a busy machine
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_watch: dict[str, Any] = {"root": None, "opened": []}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _watch["root"] is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        _watch["opened"].append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


def fuzz_examples(default: int) -> int:
    """Examples per fuzz test: `default`, or 20 times as many with GPTCALC_FUZZ_LONG=1 (`--fuzz-long`)."""
    return default * 20 if os.environ.get("GPTCALC_FUZZ_LONG") else default


def full_sweep(case: Any) -> Any:
    """A case of a sweep that the default run samples: skipped, saying so, unless `--fuzz-long` asks for all."""
    return pytest.param(*case if isinstance(case, tuple) else (case,), marks=pytest.mark.skipif(
        not os.environ.get("GPTCALC_FUZZ_LONG"), reason="one of a sweep the default run samples: pytest --fuzz-long"))


# The hypothesis settings of the hostile-input tests: a dozen variants per class by default.
CASES = settings(max_examples=fuzz_examples(12), deadline=None, suppress_health_check=list(HealthCheck))


def check_run(args: list[str], area: Path | None = None, allowed: Path | None = None, input: str | None = None) -> Result:
    """Run the CLI in-process and assert the contract; with `area` and `allowed`, every file opened
    under `area` must resolve under `allowed`. `input`: what stdin holds."""
    _watch.update(root=area, opened=[])
    start = time.monotonic()
    try:
        result = CliRunner().invoke(main, args, input=input)
    finally:
        opened, _watch["root"] = list(_watch["opened"]), None
    elapsed = time.monotonic() - start
    where = f"gptcalc {args!r}: exit {result.exit_code}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr}"
    assert elapsed < SECONDS, f"{where}\ntook {elapsed:.1f} s"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{where}\n{type(result.exception).__name__}: {result.exception}")
    assert result.exit_code in (0, 1, 2), where
    assert "Traceback" not in result.stdout + result.stderr, where
    assert not _CONTROL.search(result.stdout + result.stderr), where
    if result.exit_code == 2:
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, where
    if area is not None and allowed is not None:
        for name in opened:
            if Path(name).absolute().is_relative_to(area):
                assert Path(name).resolve().is_relative_to(allowed.resolve()), f"{where}\nopened {name}, outside {allowed}"
    return result
