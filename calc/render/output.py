"""Where every command prints: plain text to pipes and files, rich on a terminal.

Output to a pipe is what scripts, `grep` and the tests read; there rich adds nothing but its
import and layout time, more than a count itself. `Output.print` writes a table or a line itself
when it can be sure of drawing exactly what rich would (`calc.render.table`), and hands anything
else to a rich console built on first use: a terminal (colour, its own width), a table or line
wider than the 160 columns a pipe gets, `FORCE_COLOR` and friends, a stdout that is not UTF-8.
Every string passes through `calc.render.text.shown` on both paths, so control characters that
came from a file are never printed raw, and only `Markup` is read as markup (`calc.render.markup`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from calc.render.markup import as_markup
from calc.render.table import Table, as_rich, plain_text
from calc.render.text import shown, width, wrapped

__all__ = ["PIPE_WIDTH", "Output", "console"]

PIPE_WIDTH = 160  # wide enough that tables never wrap their numbers
# Variables that make rich colour or size its output even when stdout is not a terminal.
_RICH_SETTINGS = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES")


class Output:
    """`print(table_or_line)`, as rich's `Console.print` with the options the commands use; a line
    is text unless it is `Markup`."""

    def __init__(self) -> None:
        self._rich: Any = None
        self.plain = not _styled(sys.stdout)

    def print(self, item: Table | str = "", soft_wrap: bool = False) -> None:
        if isinstance(item, Table):
            for part in item.fit(self.width()):
                self._print(part, soft_wrap)
        else:
            self._print(item, soft_wrap)

    def width(self) -> int:
        """The columns this output has: a pipe's (COLUMNS, else 160), a terminal's own."""
        return (columns() or PIPE_WIDTH) if self.plain else self.rich().width

    def _print(self, item: Table | str, soft_wrap: bool) -> None:
        if self.plain:
            width = self.width()
            lines = item.lines(width) if isinstance(item, Table) else _line(item, soft_wrap, width)
            if lines is not None:
                sys.stdout.write("".join(line + "\n" for line in lines))
                return
        self.rich().print(as_rich(item), soft_wrap=soft_wrap)

    def rich(self) -> Any:
        """The rich console, made on first use."""
        if self._rich is None:
            self._rich = rich_console()
        return self._rich


def console() -> Output:
    return Output()


def rich_console(**options: Any) -> Any:
    """A rich console that escapes control characters in every string it draws (table cells,
    titles, lines all pass through `render_str`), sized 160 wide for pipes, without emoji codes
    (a model named `:fire:` is printed as named, and rich's emoji table is never loaded)."""
    from rich.console import Console

    class SafeConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Any:
            return super().render_str(shown(text), **kwargs)

    out = SafeConsole(highlight=False, emoji=False, **options)
    if not out.is_terminal and "width" not in options:
        out.width = columns() or PIPE_WIDTH
    return out


def columns() -> int | None:
    """COLUMNS from the environment, when it is a sensible width (a shell exports it on request,
    a test sets it): what a pipe is drawn for instead of 160."""
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isascii() and text.isdigit() and 20 <= int(text) <= 1000 else None


def _styled(stream: Any) -> bool:
    """Whether rich could add colour or its own layout: a terminal, a forcing variable, an encoding
    other than UTF-8 (rich then draws ASCII boxes)."""
    isatty = getattr(stream, "isatty", None)
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    return bool(isatty and isatty()) or any(os.environ.get(name) for name in _RICH_SETTINGS) or encoding != "utf8"


def _line(text: str, soft_wrap: bool, columns: int) -> list[str] | None:
    """A printed line as rich writes it to a pipe (wrapped at `columns` unless `soft_wrap`), or None
    when only rich can say."""
    plain = plain_text(as_markup(text))
    size = width(plain)
    if size is None or size <= columns or soft_wrap:
        return None if size is None else [plain]
    return wrapped(plain, columns)
