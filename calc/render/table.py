"""The tables every command prints: drawn by hand when that is certain to match rich, by rich otherwise.

A renderer builds a `Table` as it would a rich one (title, columns, rows, sections). Its cells are
text unless they are `Markup` (`calc.render.markup`): a name is escaped here, where it enters.
On a terminal, or whenever the layout needs rich's judgement — a table wider than the console,
a title wider than its table, a character that may take two cells — the table becomes a rich
`Table` and rich draws it. For the common case, a table printed to a pipe or a file that fits,
`lines` draws it here, character for character as rich 15 would (its heavy-head box, one space of
padding, titles centred): `gptcalc count | less` then never loads rich's console, which costs
more than the whole count. `tests/test_plain_output.py` holds every command's output drawn both
ways to be identical.
"""

from __future__ import annotations

from typing import Any, Literal

from calc.render.markup import as_markup, text_of
from calc.render.text import shown, width

__all__ = ["Table", "as_rich", "plain_text"]

Justify = Literal["left", "right", "center"]


class Table:
    """A title, columns (header, justification), rows of cells; `add_section` draws a rule. Each is
    text, or `Markup`, and kept as markup (text escaped)."""

    def __init__(self, title: str = "") -> None:
        self.title = as_markup(title)
        self.columns: list[tuple[str, Justify, bool]] = []
        self.rows: list[tuple[tuple[str, ...], str | None]] = []
        self.sections: set[int] = set()  # rows followed by a rule

    def add_column(self, header: str = "", justify: Justify = "left", no_wrap: bool = False) -> None:
        self.columns.append((as_markup(header), justify, no_wrap))

    def add_row(self, *cells: str, style: str | None = None) -> None:
        markup = tuple(map(as_markup, cells))
        self.rows.append((markup + ("",) * (len(self.columns) - len(cells)), style))

    def add_section(self) -> None:
        """End the current section: a rule under the last row (none after the table's last row)."""
        if self.rows:
            self.sections.add(len(self.rows) - 1)

    def lines(self, max_width: int) -> list[str] | None:
        """The table as rich draws it in `max_width` columns, or None when rich must decide."""
        if not self.columns:
            return None
        headers = [plain_text(header) for header, _, _ in self.columns]
        body = [[plain_text(cell) for cell in cells] for cells, _ in self.rows]
        sizes = [[width(cell) for cell in row] for row in [headers, *body]]
        title = plain_text(self.title).rstrip()
        if any(None in row for row in sizes) or width(title) is None:
            return None
        widths = [2 + max(column) for column in zip(*sizes)]  # type: ignore[type-var]
        total = sum(widths) + len(widths) + 1
        if total > max_width or len(title) > total:
            return None
        justify = [column[1] for column in self.columns]
        out = [_centred(title, total)] if title else []
        out += [_rule("┏━┳┓", widths), _row("┃", headers, widths, justify), _rule("┡━╇┩", widths)]
        for index, row in enumerate(body):
            out.append(_row("│", row, widths, justify))
            if index in self.sections and index != len(body) - 1:
                out.append(_rule("├─┼┤", widths))
        return [*out, _rule("└─┴┘", widths)]

    def to_rich(self) -> Any:
        """The same table as a rich `Table` (imported here: only a terminal or a hard layout needs it)."""
        from rich.table import Table as RichTable

        table = RichTable(title=self.title or None)
        for header, justify, no_wrap in self.columns:
            table.add_column(header, justify=justify, no_wrap=no_wrap)
        for index, (cells, style) in enumerate(self.rows):
            table.add_row(*cells, style=style, end_section=index in self.sections)
        return table


def as_rich(item: Table | str) -> Any:
    """What rich prints for `item`: our `Table` as a rich one, a line as markup (text escaped)."""
    return item.to_rich() if isinstance(item, Table) else as_markup(item)


def plain_text(markup: str) -> str:
    """What a cell shows: control characters escaped (as the console does), markup read out."""
    return text_of(shown(markup))


def _centred(text: str, size: int) -> str:
    left = (size - len(text)) // 2
    return " " * left + text + " " * (size - len(text) - left)


def _rule(box: str, widths: list[int]) -> str:
    left, line, cross, right = box
    return left + cross.join(line * size for size in widths) + right


def _row(edge: str, cells: list[str], widths: list[int], justify: list[Justify]) -> str:
    return edge + edge.join(" " + _fit(cell, size - 2, how) + " " for cell, size, how in zip(cells, widths, justify)) + edge


def _fit(text: str, size: int, how: Justify) -> str:
    """A cell's text in `size` columns; right and centred cells lose trailing spaces first, as in rich."""
    if how == "left":
        return text + " " * (size - len(text))
    text = text.rstrip()
    if how == "right":
        return " " * (size - len(text)) + text
    return _centred(text, size)
