"""Wall time and peak RSS of `gptcalc verify` on the two largest presets, against a bare torch import.

Goals (issue 3): at most 2x the wall time of `python -c "import torch"` and at most 1.5 GB peak
resident memory: the torch models (69-73 billion parameters) are built on the meta device, so
they cost shapes, not weights. Every run is a fresh process; the figures are medians of N runs
(peak RSS from wait4's rusage of that one child). Run: python benchmarks/bench_verify.py [N]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BARE = 'python -c "import torch"'
COMMANDS = {
    BARE: [sys.executable, "-c", "import torch"],
    "gptcalc verify llama-70b": [sys.executable, "-m", "calc", "verify", "llama-70b"],
    "gptcalc verify qwen2-72b": [sys.executable, "-m", "calc", "verify", "qwen2-72b"],
}
GOAL_RATIO, GOAL_RSS = 2.0, 1.5e9


def measure(command: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS in bytes) of one fresh process; it must exit 0."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}")
    return seconds, usage.ru_maxrss * 1024  # Linux reports KiB


def main(runs: int) -> None:
    results = {}
    for label, command in COMMANDS.items():
        measure(command)  # warm the OS file cache; every measured run is still a new process
        samples = [measure(command) for _ in range(runs)]
        results[label] = (statistics.median(s for s, _ in samples), statistics.median(r for _, r in samples))
    base = results[BARE][0]
    print(f"{'command':28s} {'wall':>9s} {'vs import':>9s} {'peak RSS':>20s}")
    for label, (seconds, rss) in results.items():
        print(f"{label:28s} {seconds:7.2f} s {seconds / base:8.2f}x {rss:>11,} B ({rss / 2**20:.0f} MiB)")
    worst = max(results[label] for label in COMMANDS if label != BARE)
    ok = worst[0] / base <= GOAL_RATIO and max(r for _, r in results.values()) <= GOAL_RSS
    print(f"goal: <= {GOAL_RATIO}x the bare import and <= {GOAL_RSS / 1e9} GB peak: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
