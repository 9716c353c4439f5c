"""docs/memory.md's counts of the recorded llama.cpp runs are the suites' own.

Its conformance table names every recorded run of the llama.cpp suites that check a GGUF's lines (the main,
converted and deepstack suites) by its model_type and llama.cpp architecture, and the sentence above it counts
them; the sentence above the quantised-table list counts QUANT_RUNS. A count is prose no command prints, so
tests/test_docs_prose.py's markers cannot hold it: here each is worked out from the suites, and a run added to a
suite fails until the table and the sentence say so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("gguf")  # the suites' modules write GGUFs
from tests.gguf_files import ARCH  # noqa: E402
from tests.test_llamacpp_conformance import RUNS as MAIN  # noqa: E402
from tests.test_llamacpp_conformance_converted import RUNS as CONVERTED  # noqa: E402
from tests.test_llamacpp_deepstack import CONVERTED_RUNS as DEEPSTACK, config_of  # noqa: E402
from tests.test_llamacpp_quant_table import QUANT_RUNS  # noqa: E402

MEMORY = (Path(__file__).resolve().parent.parent / "docs" / "memory.md").read_text(encoding="utf-8")
HEADER = "| llama.cpp architecture | model_type | recorded runs |"
RUN = re.compile(r"[a-z0-9_]+(?:-[a-z0-9_]+)+")  # a run's name: model_type and options joined by hyphens


def _rows() -> list[tuple[str, str, list[str]]]:
    """(architecture, model_type, runs) of each row of the conformance table; a cell's parenthesised notes and
    prose (Falcon-40B's "generation:") are not runs."""
    lines = MEMORY.split(HEADER + "\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0].splitlines()
    rows = []
    for line in lines:
        arch, model_type, runs = (cell.strip() for cell in line.strip().strip("|").split("|"))
        names = re.split(r"[,;:]", re.sub(r"\([^)]*\)", "", runs))
        rows.append((arch, model_type.split()[0], [n.strip() for n in names if RUN.fullmatch(n.strip())]))
    return rows


def _suite_model_types() -> dict[str, str]:
    """Every recorded run of the three suites -> the model_type of its config."""
    return {**{name: run[0] for name, run in MAIN.items()}, **{name: run.model_type for name, run in CONVERTED.items()},
            **{name: config_of(name)["model_type"] for name in DEEPSTACK}}


def test_conformance_table_names_every_run_by_its_model_type() -> None:
    suites = _suite_model_types()
    named = {run: model_type for _, model_type, runs in _rows() for run in runs}
    assert sum(len(runs) for _, _, runs in _rows()) == len(named)  # no run twice
    assert named == suites
    # the main suite's architecture: the one tests/gguf_files.py writes for its model_type
    assert all(ARCH[model_type] == arch for arch, model_type, runs in _rows() if set(runs) <= set(MAIN))


def test_conformance_counts_are_the_tables() -> None:
    rows = _rows()
    stated = re.search(r"(\d+) runs of (\d+) model_types \((\d+) llama\.cpp architectures\)", MEMORY)
    assert stated, "docs/memory.md no longer counts the conformance runs"
    counted = (sum(len(runs) for *_, runs in rows), len({m for _, m, _ in rows}), len({a for a, _, _ in rows}))
    assert tuple(map(int, stated.groups())) == counted


def test_quantised_table_count_is_quant_runs() -> None:
    stated = re.search(r"for (\d+) tiny configs and mixes", MEMORY)
    assert stated, "docs/memory.md no longer counts the quantised-table runs"
    assert int(stated.group(1)) == len(QUANT_RUNS)
