"""Console markup (`[bold]total[/]`) without importing rich: what is markup, escaping, reading the text out.

The renderers write rich's markup, so that a terminal shows bold totals and dim rows; the plain
output (`calc.render.output`) prints the same text without the tags. Markup is opt-in: only a
`Markup` string (a renderer's own, `styled("bold", "total")`) is read as tags; every other string a
table or a printed line is given is text and is escaped where it enters (`as_markup`, called by
`Table` and `Output` alone), so a name from a file (`[link=javascript:...]x[/link]`) is printed as
written, in the terminal and in the report's HTML, without a renderer having to remember. Joining
keeps the difference: `Markup + str` and `Markup.format(str)` escape the `str`. An f-string drops
the type, and its tags then show as text: a visible slip, never an injection.

`escape` and `text_of` follow rich's own rules (rich/markup.py, `RE_TAGS`, `escape` and `_parse`): a tag is `[` then a lowercase letter,
`#`, `/` or `@`, up to the next `]`; an odd number of backslashes before it makes it literal text.
`tests/test_plain_output.py` checks them against rich on hostile strings.
"""

from __future__ import annotations

import re

__all__ = ["Markup", "as_markup", "escape", "styled", "text_of"]

_TAG = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")
_ESCAPABLE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


class Markup(str):
    """Console markup written on purpose; see the module docstring."""

    def __add__(self, other: str) -> Markup:
        return Markup(str.__add__(self, as_markup(other)))

    def __radd__(self, other: str) -> Markup:
        return Markup(str.__add__(as_markup(other), self))

    def format(self, *args: object, **kwargs: object) -> Markup:
        """`str.format` with every string argument that is not `Markup` escaped (numbers as they are)."""
        return Markup(str.format(self, *map(_quoted, args), **{key: _quoted(value) for key, value in kwargs.items()}))


def styled(style: str, text: str) -> Markup:
    """`text` in a rich style (`styled("bold", name)`), the text escaped unless it is markup itself."""
    return Markup(f"[{style}]{as_markup(text)}[/]")


def as_markup(text: str) -> str:
    """What rich is given for `text`: markup as written, any other string escaped to read as itself."""
    return text if isinstance(text, Markup) else escape(text)


def _quoted(value: object) -> object:
    return as_markup(value) if isinstance(value, str) else value


def escape(text: str) -> str:
    """`text` as markup that reads back as `text` (a model named `[bold]x` is printed as named)."""
    escaped = _ESCAPABLE.sub(lambda match: f"{match[1]}{match[1]}\\{match[2]}", text)
    if escaped.endswith("\\") and not escaped.endswith("\\\\"):
        return escaped + "\\"
    return escaped


def text_of(markup: str) -> str:
    """What `markup` shows: the tags dropped, escaped brackets and backslashes read back (rich's
    `render(markup).plain`, without building styled text)."""
    if "[" not in markup:
        return markup
    pieces, position = [], 0
    for match in _TAG.finditer(markup):
        full, escapes, start = match[1], match[2], match.start()
        pieces.append(markup[position:start])
        position = match.end()
        backslashes, escaped = divmod(len(escapes), 2)
        pieces.append("\\" * backslashes)
        if escaped:
            pieces.append(full[len(escapes):])
    pieces.append(markup[position:])
    return "".join(piece.replace("\\[", "[") for piece in pieces)  # a `\[` that opens no tag is a `[`
