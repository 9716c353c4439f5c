"""Cold-process wall time of `gptcalc count gpt2-small` against a bare import of its libraries.

Goal (issue 2): at most 1.6x the time of `python -c "import click, rich, pydantic, yaml"`, i.e.
gptcalc itself adds little beyond the libraries it cannot avoid. Prints the median of N runs of
each, fresh processes every time. Run: python benchmarks/bench_count.py [N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {
    "bare import click+rich+pydantic+yaml": [sys.executable, "-c", "import click, rich, pydantic, yaml"],
    "gptcalc count gpt2-small": [sys.executable, "-m", "calc", "count", "gpt2-small"],
    "gptcalc presets": [sys.executable, "-m", "calc", "presets"],
}


def wall_time(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(runs: int) -> None:
    medians = {}
    for label, command in COMMANDS.items():
        wall_time(command)  # warm the OS file cache; every measured run is still a new process
        medians[label] = statistics.median(wall_time(command) for _ in range(runs))
    base = medians["bare import click+rich+pydantic+yaml"]
    for label, seconds in medians.items():
        print(f"{label:40s} {seconds * 1000:7.1f} ms  {seconds / base:4.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
