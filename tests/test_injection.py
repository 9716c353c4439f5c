"""Names from files are text, never markup, in every table, line and page (issue 25).

A layered YAML spec whose model and block names are rich markup (`[link=javascript:...]`) and HTML
(`<script>`) goes through every command that prints names, on both output paths (drawn by hand for
a pipe, by rich for a terminal), and through `report`'s page: each name must come out as written,
as text, with no link and no element made of it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from calc.cli import main
from calc.render import output
from calc.render.markup import Markup, as_markup, styled, text_of
from cli_checks import check_run

LINK = "[link=javascript:alert(1)]x[/link]"
SCRIPT = "<script>alert(2)</script>"
BREAKOUT = '[link="><script>alert(3)</script>]y[/link]'  # a link whose URL would close the tag in the page
NAME = f"{LINK} {SCRIPT}"
BLOCKS = (LINK, SCRIPT, BREAKOUT)


def _block() -> dict:
    return {"attention": {"n_heads": 2, "head_dim": 4}, "mlp": {"d_ff": 16}, "norm": {"kind": "layernorm"}}


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """Three kinds of layer, each named by an attack, in a model named by two."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "name": NAME, "vocab_size": 32, "d_model": 8, "n_positions": 16,
        "blocks": {name: _block() for name in BLOCKS}, "layers": [[1, LINK], [2, SCRIPT], [1, BREAKOUT]],
        "final_norm": {"kind": "layernorm"}, "head": {"tied": True}}))
    return path


COMMANDS = [["count"], ["count", "gpt2"], ["compare", "gpt2"], ["memory"], ["kvcache"], ["shapes", "--seq", "4"],
            ["flops", "--seq", "4"], ["train", "--seq", "4", "--micro-batch", "1", "--layers"]]


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "rich"])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_markup_in_names_is_printed_as_written(spec: Path, command: list[str], terminal: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The model name and every block name the command shows appear verbatim: no tag eaten (the
    tables are given room enough that rich neither wraps nor truncates a name)."""
    monkeypatch.setattr(output, "_styled", lambda stream: terminal)
    monkeypatch.setattr(output, "PIPE_WIDTH", 1000)
    args = [command[0], str(spec), *command[1:]]
    out = check_run(args).stdout
    assert NAME in out or (command[0] == "shapes" and LINK in out), out  # shapes names the blocks
    if command[0] in ("count", "compare", "shapes", "flops", "train") and command != ["count", "gpt2"]:
        assert all(name in out for name in BLOCKS), out


def own_scripts_removed(page: str) -> str:
    """The page without its two scripts, each checked to be the report's own: the controls' code as
    calc/render/interactive.py holds it, and the JSON data block, which holds no `<` at all."""
    from calc.render.interactive import SCRIPT

    assert page.count(f"<script>{SCRIPT}</script>") == 1
    page = page.replace(f"<script>{SCRIPT}</script>", "")
    page, blocks = re.subn(r"<script type='application/json' id='sizing-data'>[^<]*</script>", "", page)
    assert blocks == 1
    return page


def test_report_page_holds_names_as_text_only(spec: Path, tmp_path: Path) -> None:
    """No link, no element made of a name: every `<` of one is `&lt;` in the page."""
    page = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(spec), "gpt2", "-o", str(page)])
    assert result.exit_code == 0, result.output
    text = own_scripts_removed(page.read_text(encoding="utf-8"))
    assert not re.search(r"<script|<a\b|javascript:alert\(1\)\"", text, re.I)
    assert "[link=javascript:alert(1)]x[/link] &lt;script&gt;alert(2)&lt;/script&gt;" in text  # the h1 and tables
    assert '[link=&quot;&gt;&lt;script&gt;alert(3)&lt;/script&gt;]y[/link]' in text  # the side-by-side `layers` row


def test_only_markup_is_read_as_markup() -> None:
    """The one rule: a `str` reads back as itself; `Markup` and what is joined to it keep their tags."""
    for text in BLOCKS:
        assert text_of(as_markup(text)) == text
        assert text_of(styled("bold", text)) == text
        assert text_of(Markup("[dim]x[/] ") + text) == "x " + text and text_of(text + styled("dim", "y")) == text + "y"
    assert text_of(Markup("[bold]{}[/]").format(LINK)) == LINK
    assert as_markup(Markup("[bold]x[/]")) == "[bold]x[/]"


# --- what reaches a terminal -----------------------------------------------------------------------

SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours and bold: the only escape sequences a terminal may get
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
OSC_TITLE = "\x1b]0;pwned\x07"


@pytest.mark.parametrize("command", [["count"], ["compare", "gpt2"], ["kvcache"], ["shapes", "--seq", "4"]], ids=" ".join)
def test_a_styled_terminal_gets_rich_colours_and_nothing_from_a_file(tmp_path: Path, command: list[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """rich writing for a terminal (TTY_COMPATIBLE=1): names with markup links (which rich would turn
    into OSC 8 hyperlinks), an OSC title sequence and a newline reach it as escaped text."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping inside the escaped sequence
    hostile = (LINK, f"a{OSC_TITLE}b\nc")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "name": " ".join(hostile), "vocab_size": 32, "d_model": 8, "n_positions": 16,
        "blocks": {name: _block() for name in hostile}, "layers": [[1, hostile[0]], [2, hostile[1]]],
        "final_norm": {"kind": "layernorm"}, "head": {"tied": True}}))
    result = CliRunner().invoke(main, [command[0], str(path), *command[1:]])
    assert result.exit_code == 0, result.output
    assert SGR.search(result.stdout), "rich did not write for a terminal: the test tests nothing"
    assert not CONTROL.search(SGR.sub("", result.stdout)), repr(result.stdout)
    assert "\\x1b]0;pwned\\x07" in result.stdout


@pytest.mark.parametrize("args", [["plot", "params", "gpt2"], ["report", "gpt2"]], ids=" ".join)
def test_the_path_of_a_written_file_is_printed_escaped_on_one_line(tmp_path: Path, args: list[str]) -> None:
    """An OSC sequence in `-o` would retitle the terminal, a newline split the `wrote` line."""
    pytest.importorskip("matplotlib")
    path = tmp_path / f"a{OSC_TITLE}b\nc.svg"
    result = check_run([*args, "-o", str(path)])
    assert result.exit_code == 0 and path.is_file()
    assert result.stdout.startswith("wrote ") and result.stdout.count("\n") == 1
    assert "a\\x1b]0;pwned\\x07b\\x0ac.svg" in result.stdout


# --- pictures and pages ----------------------------------------------------------------------------

PICTURE_NAMES = ("cost $5 or $6", "_hidden", "esc\x1b]0;t\x07 nul\x00 rtl\u202e")


def _flat_spec(path: Path, name: str) -> str:
    path.write_text(yaml.safe_dump({"name": name, "vocab_size": 10, "d_model": 8, "n_layers": 1, "n_heads": 2,
                                    "n_positions": 16}))
    return str(path)


@pytest.mark.parametrize("kind", ["memory", "params"])
def test_pictures_draw_names_as_written(tmp_path: Path, kind: str) -> None:
    """Not mathtext (`$5 or $6` was drawn `5or6`), a legend label starting with `_` kept (matplotlib
    hid it), control and bidi characters escaped (they made the SVG ill-formed XML)."""
    pytest.importorskip("matplotlib")
    from xml.etree import ElementTree

    specs = [_flat_spec(tmp_path / f"{i}.yaml", name) for i, name in enumerate(PICTURE_NAMES)]
    svg = tmp_path / "p.svg"
    assert check_run(["plot", kind, *specs, "-o", str(svg)]).exit_code == 0
    texts = " ".join(" ".join(e.itertext()) for e in ElementTree.parse(svg).iter("{http://www.w3.org/2000/svg}text"))
    for shown_name in ("cost $5 or $6", "_hidden", "esc\\x1b]0;t\\x07 nul\\x00 rtl\\u202e"):
        assert shown_name in texts, texts


def test_report_pages_hold_no_control_characters(tmp_path: Path) -> None:
    specs = [_flat_spec(tmp_path / f"{i}.yaml", name) for i, name in enumerate(PICTURE_NAMES)]
    page = tmp_path / "r.html"
    assert check_run(["report", *specs, "-o", str(page)]).exit_code == 0
    text = page.read_text(encoding="utf-8")
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e]", text)
    assert "esc\\x1b]0;t\\x07 nul\\x00 rtl\\u202e" in text


def test_pictures_ignore_a_matplotlibrc_and_mplbackend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gptcalc's style only: a ./matplotlibrc asking for LaTeX (text.usetex runs `latex` on the names)
    or an unknown backend, or MPLBACKEND naming one, neither stops the picture nor changes it.
    matplotlib reads both when it is imported: the import runs in a fresh process."""
    pytest.importorskip("matplotlib")
    import subprocess
    import sys

    (tmp_path / "matplotlibrc").write_text("backend: nope\ntext.usetex: True\nsvg.fonttype: path\n")
    code = ("import sys; from click.testing import CliRunner; from calc.cli import main; "
            "r = CliRunner().invoke(main, ['plot', 'params', 'gpt2-small', '-o', 'p.svg']); "
            "sys.exit(r.exit_code or ('<text' not in open('p.svg').read()))")
    env = {**os.environ, "MPLBACKEND": "nope", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    assert subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env).returncode == 0
