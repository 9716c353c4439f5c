"""Figures the docs state in prose are what the commands print today.

Generated blocks (`<!-- output: gptcalc ... -->`) are checked by tests/test_docs.py; a figure quoted in a
sentence is not, and goes stale when a rule changes. Such a sentence carries an inline marker, never at the
start of a line (there it would begin an HTML block and split the paragraph) nor inside a code span (there it
would show as text); markdown then shows nothing of it:

    ... gives 2 × H200 3,392,512 tokens, 3.24x; ... <!-- prose-check: fit deepseek-v4-flash --seq 1m
    --engine sglang --gpus H200 => 3,392,512; 3.24x -->     (one line in the document)

Each figure must appear both in the marker's paragraph (the prose, outside the marker) and in the
command's output, compared without thousands separators so that prose's `327,680` matches an engine's
`#tokens: 327680` or a `--json` integer. Only commands that import no torch are allowed, to keep this fast.
docs/training.md's table of published runs is checked the same way: its gptcalc column and gap are what
`train` prints for the row's options.
"""

from __future__ import annotations

import json
import re
import shlex
from decimal import Decimal
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main

REPO = Path(__file__).resolve().parent.parent
MARKER = re.compile(r" ?<!-- prose-check: (?P<args>.+?) => (?P<figures>.+?) -->")
FAST = {"count", "presets", "kvcache", "memory", "shapes", "fit", "flops", "train", "compare"}


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks, a list item starting a block of its own."""
    return [block for chunk in text.split("\n\n") for block in re.split(r"\n(?=\s*- )", chunk)]


def _checks() -> list[tuple[str, str, str, str]]:
    """(document, paragraph, command, figure) for every marked figure."""
    found = []
    for path in _documents():
        for paragraph in _paragraphs(path.read_text(encoding="utf-8")):
            for m in MARKER.finditer(paragraph):
                figures = [figure.strip() for figure in m.group("figures").split(";")]
                found += [(path.name, paragraph, m.group("args"), figure) for figure in figures]
    return found


CHECKS = _checks()


@cache
def _output(args: str) -> str:
    """What the command prints; a refusal (exit 2, its one `Error:` line) is an answer the docs quote too."""
    result = CliRunner(env={"COLUMNS": None}).invoke(main, shlex.split(args), terminal_width=160)
    assert result.exit_code in (0, 2), f"gptcalc {args}: exit {result.exit_code}\n{result.output}"
    return result.stdout + result.stderr


def _plain(text: str) -> str:
    """Whitespace collapsed (prose wraps, tables pad) and thousands separators dropped."""
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", " ".join(text.split()))


def _holds(text: str, figure: str) -> bool:
    """`figure` stands in `text` as a whole number: 4,096 is not found inside 14,096 or 4,096.5."""
    return re.search(rf"(?<![\d.]){re.escape(_plain(figure))}(?![\d]|[.,]\d)", _plain(text)) is not None


def test_markers_are_found_fast_and_hidden() -> None:
    assert len(CHECKS) >= 100
    assert {args.split()[0] for _, _, args, _ in CHECKS} <= FAST
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*<!-- prose-check:", text, re.M), f"{path.name}: a marker starts a line"
        for paragraph in _paragraphs(text):
            for m in MARKER.finditer(paragraph):
                assert paragraph[:m.start()].count("`") % 2 == 0, f"{path.name}: a marker inside a code span"


@pytest.mark.parametrize("document, paragraph, args, figure", CHECKS,
                         ids=[f"{doc}:{args}:{figure}" for doc, _, args, figure in CHECKS])
def test_prose_figure_is_printed(document: str, paragraph: str, args: str, figure: str) -> None:
    prose = MARKER.sub("", paragraph)
    assert _holds(prose, figure), f"{document}: the marker names {figure}, which its paragraph does not state"
    assert _holds(_output(args), figure), f"{document} says {figure} for `gptcalc {args}`, which prints otherwise"


def _published_rows() -> list[list[str]]:
    """docs/training.md's published-runs table: run, train's options, published, gptcalc, statistic, gap, ..."""
    rows = []
    for line in (REPO / "docs" / "training.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[1].startswith("`") and cells[3].endswith(("GB", "GiB")):
            rows.append(cells)
    return rows


def test_published_runs_table_shows_what_train_prints() -> None:
    """Each row's gptcalc figure, in its statistic and unit, its gap and its peak moment, from `train --json`."""
    rows = _published_rows()
    assert len(rows) >= 50
    for run, options, published, figure, statistic, gap, moment, _ in rows:
        peak = json.loads(_output(f"train {options.strip('`')} --json"))["peak"]
        number, unit = figure.split()
        value = Decimal(peak["reserved" if statistic.startswith("reserved") else "allocated"]) / \
            (10**9 if unit == "GB" else 2**30)
        assert f"{value:.{len(number.partition('.')[2])}f}" == number, run
        assert f"{(value / Decimal(published.split()[0]) - 1) * 100:+.1f}%" == gap, run
        # a pipeline run names the stage its peak is on, as the table writes it: "stage S of P: moment"; an
        # interleaved one its rank: "rank R of P: moment"
        stage = rf"rank {peak['rank']} of \d+: " if "rank" in peak else \
            "" if peak.get("stage") is None else rf"stage {peak['stage']} of \d+: "
        assert re.fullmatch(stage + re.escape(peak["moment"]), moment), run
