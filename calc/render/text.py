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

import unicodedata

__all__ = ["one_line", "shown", "width"]


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


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
