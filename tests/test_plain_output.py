"""Plain output (tables and lines drawn by `calc.render.table` / `calc.render.output`) is rich's, to the byte.

Pipes and files get tables drawn without rich, for start-up time (issue 14). Every documented command
(docs/*.md and README.md mark them) and `count` of every preset is run twice — once as the program
runs, once with every table and line handed to rich — and the two outputs must be identical,
trailing spaces included. Hostile names (markup, backslashes, control characters, wide characters)
go through both paths too, and the markup reader is checked against rich's own parser.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st
from rich.errors import MarkupError
from rich.markup import escape as rich_escape, render

from calc.cli import main as cli
from calc.render import output
from calc.render.markup import escape, text_of
from calc.spec.presets import preset_names

REPO = Path(__file__).resolve().parent.parent
DOCUMENTED = sorted({m[1] for path in [REPO / "README.md", *(REPO / "docs").glob("*.md")]
                     for m in re.finditer(r"<!-- output: gptcalc (.+?) -->", path.read_text(encoding="utf-8"))
                     if not m[1].startswith("verify")})  # verify builds torch models: one below is enough


def both_ways(args: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """(plain output, rich output) of one command; the rich path is forced as a terminal would."""
    monkeypatch.chdir(REPO)
    plain = CliRunner().invoke(cli, args)
    with monkeypatch.context() as patched:
        patched.setattr(output, "_styled", lambda stream: True)
        styled = CliRunner().invoke(cli, args)
    assert plain.exit_code == styled.exit_code, (plain.output, styled.output)
    return plain.output, styled.output


@pytest.mark.parametrize("command", DOCUMENTED)
def test_documented_commands_print_as_rich_does(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, styled = both_ways(shlex.split(command), monkeypatch)
    assert plain == styled
    assert plain.strip()


def test_verify_prints_as_rich_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """One `verify` (it builds a torch model, so one is enough): its table and verdict lines."""
    plain, styled = both_ways(["verify", "gpt2-small"], monkeypatch)
    assert plain == styled and "✓" in plain


@pytest.mark.parametrize("name", preset_names())
def test_count_of_every_preset_prints_as_rich_does(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, styled = both_ways(["count", name], monkeypatch)
    assert plain == styled


HOSTILE_NAMES = ["[bold]x[/]", "a\\", "a\\\\[b]", "\\[dim]c", "[/]", "tab\there", "esc\x1b[2J", "名前-模型",
                 "e\u0301", "[link=http://x]y", "x" * 150]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_model_names_print_as_rich_does(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "spec.yaml"  # JSON's quoted string is YAML's: every character written as an escape-safe literal
    spec.write_text(f"name: {json.dumps(name)}\nvocab_size: 100\nd_model: 64\nn_layers: 2\nn_heads: 4\n"
                    "n_positions: 32\n", encoding="utf-8")
    for command in (["count", str(spec)], ["kvcache", str(spec), "--seq", "8"], ["compare", str(spec), "gpt2-small"]):
        plain, styled = both_ways(command, monkeypatch)
        assert plain == styled, command


def test_wide_characters_and_long_lines_are_left_to_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the hand-drawn path cannot be sure of, it does not draw: rich measures wide
    characters and wraps lines longer than the pipe's 160 columns."""
    table = output.Table("名前")
    table.add_column("a")
    table.add_row("x")
    assert table.lines(160) is None
    assert output._line("x" * 161, False, output.PIPE_WIDTH) is None
    assert output._line("x" * 161, True, output.PIPE_WIDTH) == ["x" * 161]  # soft_wrap: one line however long


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="[]/\\abz =#@\x1b", max_size=24))
def test_markup_reads_as_rich_reads_it(markup: str) -> None:
    try:
        expected = render(markup).plain
    except MarkupError:  # rich refuses it (a closing tag with nothing to close): never written by a renderer
        return
    assert text_of(markup) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="[]/\\abz =#@", max_size=24))
def test_escape_is_rich_escape_and_reads_back(text: str) -> None:
    """As the renderers use it: an escaped name inside markup reads as rich reads it."""
    assert escape(text) == rich_escape(text)
    markup = f"[bold]{escape(text)}[/]"
    assert text_of(markup) == render(markup).plain


def rich_printed(item: output.Table | str, columns: int) -> str:
    """What rich itself prints for `item` on a pipe `columns` wide."""
    from io import StringIO

    stream = StringIO()
    output.rich_console(file=stream, width=columns).print(output.as_rich(item))
    return stream.getvalue()


def hand_printed(lines: list[str] | None) -> str | None:
    return None if lines is None else "".join(line + "\n" for line in lines)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab .", min_size=1, max_size=90), st.integers(min_value=4, max_value=30))
def test_long_lines_wrap_as_rich_wraps_them(text: str, columns: int) -> None:
    """A line wider than the pipe is wrapped by hand exactly as rich wraps it, or left to rich."""
    drawn = hand_printed(output._line(text, False, columns))
    assert drawn is None or drawn == rich_printed(text, columns)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab .", min_size=1, max_size=90), st.lists(st.text(alphabet="xy", max_size=12), min_size=1, max_size=3))
def test_long_titles_wrap_as_rich_wraps_them(title: str, headers: list[str]) -> None:
    """A title wider than its table: rich wraps it to the table's width and centres each line."""
    table = output.Table(title)
    for header in headers:
        table.add_column(header)
    table.add_row(*("1" for _ in headers))
    drawn = hand_printed(table.lines(160))
    assert drawn is None or drawn == rich_printed(table, 160)


def test_the_long_lines_and_titles_of_the_commands_are_drawn_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvcache and memory of these configs have a title wider than its table and a note wider than
    the pipe: drawn without rich, as rich draws them."""
    configs = REPO / "tests" / "configs" / "model_types"
    for command in (["kvcache", str(configs / "nemotron_h-nano3.json"), "--seq", "1M"],
                    ["memory", str(configs / "deepseek_v32.json"), "--seq", "32k"]):
        plain, styled = both_ways(command, monkeypatch)
        assert plain == styled
        drawn_by_rich: list[object] = []
        with monkeypatch.context() as patched:
            patched.setattr(output.Output, "rich", lambda self: drawn_by_rich.append(self) or output.rich_console())
            assert CliRunner().invoke(cli, command).output == plain
        assert not drawn_by_rich, command
