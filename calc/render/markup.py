"""Console markup (`[bold]total[/]`) without importing rich: escaping names, and reading the text out.

The renderers write rich's markup, so that a terminal shows bold totals and dim rows; the plain
output (`calc.render.output`) prints the same text without the tags. Both functions follow rich's
own rules (rich/markup.py, `RE_TAGS`, `escape` and `_parse`): a tag is `[` then a lowercase letter,
`#`, `/` or `@`, up to the next `]`; an odd number of backslashes before it makes it literal text.
`tests/test_plain_output.py` checks them against rich on hostile strings.
"""

from __future__ import annotations

import re

__all__ = ["escape", "text_of"]

_TAG = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")
_ESCAPABLE = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


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
