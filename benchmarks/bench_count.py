"""Cold-process wall time of the calculator commands against the floor of their own dependencies.

Goal (issues 14 and 26): `count`, `presets`, `kvcache`, `memory` and `shapes` — of presets and of the
2026 models' config.json files — within 1.3x of the import
floor `import click, yaml, rich; from pydantic import BaseModel` (what they cannot avoid), and
`gptcalc --help` within 3x of `python -c pass`. Every run is a fresh process; the commands are
run in turns (one of each, N times) so that a load spike on a shared machine hits all of them
alike. Prints min / median / max and three ratios: of medians to the floor and to `python -c pass`,
and of minimums to the floor (on a shared machine the minimum is the run other work disturbed least).
A preset's command imports no pydantic at all (calc/parts/base.py), so it can run under the floor.

Run: python benchmarks/bench_count.py [N]. Compile the tree first when PYTHONDONTWRITEBYTECODE
is set (`python -m compileall -q calc`), or every run also pays for compiling every module.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PASS, FLOOR = "python -c pass", "floor: click+yaml+rich+BaseModel"
GPTCALC = [sys.executable, "-m", "calc"]
CONFIGS = REPO / "tests" / "configs" / "model_types"
COMMANDS = {
    PASS: [sys.executable, "-c", "pass"],
    FLOOR: [sys.executable, "-c", "import click, yaml, rich; from pydantic import BaseModel"],
    "gptcalc --help": [*GPTCALC, "--help"],
    "gptcalc count gpt2-small": [*GPTCALC, "count", "gpt2-small"],
    "gptcalc presets": [*GPTCALC, "presets"],
    "gptcalc kvcache llama-70b": [*GPTCALC, "kvcache", "llama-70b", "--seq", "4096"],
    "gptcalc memory llama-3-8b": [*GPTCALC, "memory", "llama-3-8b"],
    "gptcalc shapes gpt2-small": [*GPTCALC, "shapes", "gpt2-small", "--seq", "5"],
    # config.json files of the 2026 kinds (issue 26: no transformers, within 1.3x the floor): hybrids of
    # attention with gated DeltaNet, Mamba2, KDA, short convolutions and lightning attention, MLA with
    # DSA's indexer, a parallel attention + Mamba2 group, a quantised (fp8) MoE
    "gptcalc count qwen3_next.json": [*GPTCALC, "count", str(CONFIGS / "qwen3_next.json")],
    "gptcalc kvcache nemotron_h-nano3.json": [*GPTCALC, "kvcache", str(CONFIGS / "nemotron_h-nano3.json"), "--seq", "1M"],
    "gptcalc memory deepseek_v32.json": [*GPTCALC, "memory", str(CONFIGS / "deepseek_v32.json"), "--seq", "32k"],
    "gptcalc count falcon_h1.json": [*GPTCALC, "count", str(CONFIGS / "falcon_h1.json")],
    "gptcalc kvcache kimi_linear.json": [*GPTCALC, "kvcache", str(CONFIGS / "kimi_linear.json"), "--seq", "128k"],
    "gptcalc memory lfm2.json": [*GPTCALC, "memory", str(CONFIGS / "lfm2.json"), "--seq", "32k"],
    "gptcalc kvcache minimax_m1.json": [*GPTCALC, "kvcache", str(CONFIGS / "minimax_m1.json"), "--seq", "1M"],
}


def wall_time(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(runs: int) -> None:
    times: dict[str, list[float]] = {label: [] for label in COMMANDS}
    for command in COMMANDS.values():
        wall_time(command)  # warm the OS file cache; every measured run is still a new process
    for _ in range(runs):
        for label, command in COMMANDS.items():
            times[label].append(wall_time(command))
    medians = {label: statistics.median(ts) for label, ts in times.items()}
    mins = {label: min(ts) for label, ts in times.items()}
    print(f"{'':38s} {'min':>7s} {'median':>7s} {'max':>7s}   {'/floor':>6s} {'/pass':>6s}   {'min/floor':>9s}"
          f"   ({runs} runs, ms)")
    for label, ts in times.items():
        print(f"{label:38s} {mins[label] * 1e3:7.1f} {medians[label] * 1e3:7.1f} {max(ts) * 1e3:7.1f}   "
              f"{medians[label] / medians[FLOOR]:5.2f}x {medians[label] / medians[PASS]:5.2f}x   "
              f"{mins[label] / mins[FLOOR]:8.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
