"""Text from strangers, made safe to print: the one place control characters are escaped.

Tensor names, `_name_or_path`, a YAML `name`, file paths and arguments reach the terminal in
tables, notes and error lines. An ESC byte among them would clear the screen or recolour the
output, a newline would split a one-line error, and a lone surrogate (a file name that is not
UTF-8) would make the write itself fail. `shown` escapes every character Python's `repr` would
(control and format characters, line and paragraph separators, surrogates, unassigned code
points) as `\\x1b` / `\\u202e`, and leaves all other text, non-ASCII letters included, as it is.
The console of `calc.render.base` passes every string it draws through it, and the CLI's error
line too, so no renderer has to remember.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["one_line", "shown", "width", "wrapped"]

_WORD = re.compile(r"\s*\S+\s*")  # a word and the spaces around it, as rich's word wrap reads them


def shown(text: str) -> str:
    """`text` with every non-printable character escaped (`'a\\x1b[2Jb'` -> `'a\\\\x1b[2Jb'`)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def one_line(text: str, limit: int = 2000) -> str:
    """`shown(text)` cut to `limit` characters: a message that fits on one line of stderr."""
    safe = shown(text)
    return safe if len(safe) <= limit else safe[: limit - 3] + "..."


def width(text: str) -> int | None:
    """Terminal cells `text` takes when every character takes one (as it does in our tables); None
    when some may take two or none (East Asian wide, combining), which only rich measures exactly."""
    if text.isascii():
        return len(text)
    for ch in text:
        if unicodedata.east_asian_width(ch) in "WF" or unicodedata.category(ch) in ("Mn", "Me", "Cf", "Cc"):
            return None
    return len(text)


def wrapped(text: str, size: int) -> list[str] | None:
    """`text` word-wrapped into lines of `size` columns exactly as rich wraps it (rich/_wrap.py's
    `divide_line`, then `Text.rstrip_end`): a line keeps its trailing spaces up to `size`. None when
    only rich can say: a character that may take two cells, or a word longer than a line (rich folds it).
    `text` is as `shown` leaves it, so its only whitespace is the space."""
    if width(text) is None:
        return None
    breaks, offset = [], 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group()
        length = len(word.rstrip())
        if length > size:
            return None
        if size - offset >= length:
            offset += len(word)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    lines = [text[start:end] for start, end in zip([0, *breaks], [*breaks, len(text)])]
    return [line[:max(size, len(line.rstrip(" ")))] for line in lines]


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
