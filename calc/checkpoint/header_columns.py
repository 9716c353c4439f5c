"""A safetensors header as columns (names, dtypes, shapes, byte ranges), checked in bulk.

`plain_columns(text, data_size)` is the fast path of `calc.checkpoint.safetensors_header`: one parse
of the header's bytes by pydantic_core's `from_json` (Rust; 10-30 % faster than `json.loads`, as
strict about JSON and stricter about text: invalid UTF-8 and lone surrogates are refused) and a few
passes over whole lists (`map`, `set`, list comparison: loops in C), no Python code per tensor. It
accepts only a header that is what every real one is, and returns None for anything else, whatever
the reason: the strict path then parses the text again, entry by entry, and its error names what is
wrong. So the fast path never has to say why, only to never accept what the strict path refuses.

The strict path refuses a key given twice (`calc.inputs.load_json`), which a plain parse (this one
as `json.loads`) silently resolves to the last one. Here one count proves there is none, anywhere in
the header:

    text.count(b":") == top-level keys + metadata keys + 3 x tensor entries

In valid JSON every key is followed by exactly one colon, and every other colon is inside a string
(a name, a value; escaped or not). So the text holds at least as many colons as key tokens. The
parsed header holds at most as many keys as there are key tokens, and strictly fewer when any
object, at any depth, gives a key twice: the later value replaces the earlier one, which vanishes
with every key inside it. Each entry is checked to be an object holding dtype, shape and
data_offsets, whose values are a string and two lists of integers (no object inside), and the
metadata an object of strings; so the parsed header has at least the right-hand side's keys.
Equality therefore leaves no room: no duplicate key in any object, no entry with a fourth key, no
colon inside a string, however keys are spelt (`"\\u0064type"` is `"dtype"` once parsed, and a
second spelling is a second key token). A name or metadata value with a colon in it only costs the
slow path.

Numbers: `from_json` parses an integer of any length up to about 4,300 digits (beyond it a
ValueError: None here, and the strict path's one-line "integer of N digits" error). Every dimension
and offset must be an `int` (`type`, so not a bool). Negative dimensions (two make a positive size)
are looked for when the text has a `-` at all. A dimension is at most its tensor's element count,
which is at most 8 x the data buffer: bounded, except beside a 0 (`[10**40, 0]` holds no bytes),
which is checked. The offsets tile the buffer from 0 to its size, which bounds them. Sizes and
tiling are checked as `safetensors_header._check_size` and `_check_layout` check them.
"""

from __future__ import annotations

import math
from itertools import chain, compress, repeat
from operator import itemgetter, lshift, mul, not_, sub
from typing import Any, NamedTuple

from pydantic_core import from_json

from calc.checkpoint.dtypes import BYTE_WIDTHS, DTYPE_BITS, DTYPE_NAMES
from calc.inputs import INT_LIMIT, MAX_VALUES

__all__ = ["HeaderColumns", "as_columns", "plain_columns"]

_DTYPE, _SHAPE, _OFFSETS = itemgetter("dtype"), itemgetter("shape"), itemgetter("data_offsets")
_STR, _INT, _LIST, _PAIR = {str}, {int}, {list}, {2}


class HeaderColumns(NamedTuple):
    """A header's tensors in file order, one list per field."""

    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]
    nbytes: list[int]


def plain_columns(text: bytes, data_size: int | None) -> tuple[HeaderColumns, dict[str, str]] | None:
    """The columns and metadata of a plain header (see the module docstring), else None."""
    if data_size is None or data_size >= INT_LIMIT // 8:
        return None
    try:
        header = from_json(text)
    except ValueError:  # not JSON, not UTF-8, nested too deeply, a number too long: the strict path says which
        return None
    if type(header) is not dict:
        return None
    given = "__metadata__" in header
    metadata = header.pop("__metadata__") if given else {}
    if type(metadata) is not dict or not set(map(type, metadata.values())) <= _STR:
        return None
    names, infos = list(header), list(header.values())
    n = len(names)
    try:  # only an object can be indexed by a string: anything else is a TypeError, a missing field or unknown dtype a KeyError
        dtypes = list(map(DTYPE_NAMES.__getitem__, map(_DTYPE, infos)))  # the shared spellings (calc.checkpoint.dtypes)
        shapes, offsets = list(map(_SHAPE, infos)), list(map(_OFFSETS, infos))
        if (text.count(b":") != given + len(metadata) + 4 * n or not set(map(type, shapes)) <= _LIST
                or not set(map(len, offsets)) <= _PAIR):
            return None
        spans, dims = list(chain.from_iterable(offsets)), list(chain.from_iterable(shapes))  # begin, end, begin, ...
    except (TypeError, KeyError):  # also: an unhashable dtype
        return None
    if not set(map(type, chain(spans, dims))) <= _INT:
        return None  # ints, not bools, floats, strings, lists, objects or nulls
    begins, ends = spans[0::2], spans[1::2]
    elements, nbytes = list(map(math.prod, shapes)), list(map(sub, ends, begins))
    if b"-" in text and min(dims, default=0) < 0:
        return None  # a negative dimension (two make a positive size)
    if 0 in elements and max(chain.from_iterable(compress(shapes, map(not_, elements)))) >= INT_LIMIT:
        return None  # a huge dimension beside a 0; any other is at most the size, at most the buffer (checked below)
    if not _sized(elements, dtypes, nbytes):
        return None
    if 1 + (1 + len(metadata)) * given + 7 * n + len(dims) > MAX_VALUES:
        return None
    in_order = n and spans[0] == 0 and spans[2::2] == spans[1:-1:2] and spans[-1] == data_size  # as written: no sort
    if not in_order and not _tiles(list(zip(begins, ends)), data_size):  # begins from 0, so no offset is negative
        return None
    shared: dict[int, int] = {}  # one int per distinct size, kept; the parser's own are freed with it (see calc.checkpoint.dtypes)
    return HeaderColumns(names, dtypes, list(map(tuple, shapes)), begins, ends, list(map(shared.setdefault, nbytes, nbytes))), metadata


def _sized(elements: list[int], dtypes: list[str], nbytes: list[int]) -> bool:
    """bytes == elements x width, whole bytes: the right size, hence 0 <= begin <= end."""
    try:
        return list(map(mul, elements, map(BYTE_WIDTHS.__getitem__, dtypes))) == nbytes
    except KeyError:  # a dtype narrower than a byte (F4, F6): 8 x bytes == elements x bits
        return list(map(lshift, nbytes, repeat(3))) == list(map(mul, elements, map(DTYPE_BITS.__getitem__, dtypes)))


def _tiles(spans: list[tuple[int, int]], data_size: int | None) -> bool:
    """Whether [begin, end) ranges tile the buffer from 0 (to `data_size` when known), as `_check_layout` requires."""
    if not spans:
        return not data_size
    spans.sort()
    begins, ends = zip(*spans)
    return begins[0] == 0 and begins[1:] == ends[:-1] and (data_size is None or ends[-1] == data_size)


def as_columns(entries: Any) -> HeaderColumns:
    """Columns of checked `TensorEntry`s (the strict path's result)."""
    return HeaderColumns([e.name for e in entries], [e.dtype for e in entries], [e.shape for e in entries],
                         [e.begin for e in entries], [e.end for e in entries], [e.nbytes for e in entries])
