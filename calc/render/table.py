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
from calc.render.text import shown, width, wrapped

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

    def fit(self, max_width: int) -> list["Table"]:
        """The table in parts that fit `max_width` columns, so that no cell is ever cut: as it is when it
        fits; else its columns in groups, each part repeating the first (the row's name) under the same
        title; else, when even one column beside the names is too wide, one `label  value` table per row.
        A table whose cells may take two cells each (see `width`) is left to rich."""
        widths = self._widths()
        if widths is None or _outer(widths) <= max_width or len(widths) < 2:
            return [self]
        groups: list[list[int]] = [[0]]
        for index in range(1, len(widths)):
            if len(groups[-1]) > 1 and _outer([widths[i] for i in (*groups[-1], index)]) > max_width:
                groups.append([0])
            groups[-1].append(index)
        if any(_outer([widths[i] for i in group]) > max_width for group in groups) or \
                len(groups) > max(2, len(self.rows)):  # a few rows read better one by one than in many slices
            return self._stacked()
        return [self._only(group, first=number == 0) for number, group in enumerate(groups)]

    def _widths(self) -> list[int] | None:
        """Each column's width as drawn (its widest cell and one space each side); None when unsure
        (a character that may take two cells)."""
        rows = [[plain_text(header) for header, _, _ in self.columns],
                *([plain_text(cell) for cell in cells] for cells, _ in self.rows)]
        sizes = [[width(cell) for cell in row] for row in rows]
        if not self.columns or any(None in row for row in sizes):
            return None
        return [2 + max(column) for column in zip(*sizes)]  # type: ignore[type-var]

    def _only(self, indexes: list[int], first: bool) -> "Table":
        """These columns of the table (its title on the first part, 'continued' on the others)."""
        part = Table()
        part.title = self.title if first else as_markup("(continued)" if self.title else "")
        part.columns = [self.columns[i] for i in indexes]
        part.rows = [(tuple(cells[i] for i in indexes), style) for cells, style in self.rows]
        part.sections = set(self.sections)
        return part

    def _stacked(self) -> list["Table"]:
        """One two-column table per row: the headers down the left, that row's cells on the right."""
        headers = [header for header, _, _ in self.columns]
        parts = []
        for number, (cells, style) in enumerate(self.rows):
            part = Table()
            part.title = self.title if number == 0 else ""
            part.columns = [(headers[0], "left", False), (cells[0], "right", False)]  # already markup
            for header, cell in zip(headers[1:], cells[1:]):
                part.rows.append(((header, cell), style))
            parts.append(part)
        return parts

    def lines(self, max_width: int) -> list[str] | None:
        """The table as rich draws it in `max_width` columns, or None when rich must decide."""
        widths = self._widths()
        title = plain_text(self.title).rstrip()
        if widths is None or width(title) is None or (self.title and not title):
            return None  # (a title of spaces alone: rich prints it as a blank line)
        headers = [plain_text(header) for header, _, _ in self.columns]
        body = [[plain_text(cell) for cell in cells] for cells, _ in self.rows]
        total = _outer(widths)
        title_lines = wrapped(title, total) if title else []
        if total > max_width or title_lines is None:
            return None
        justify = [column[1] for column in self.columns]
        out = [_centred(line.rstrip(), total) for line in title_lines]  # rich centres each line of a long title
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


def _outer(widths: list[int]) -> int:
    """A table's drawn width: its columns and one border between and around them."""
    return sum(widths) + len(widths) + 1


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
