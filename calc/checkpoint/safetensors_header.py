"""A strict, header-only reader of `.safetensors` files: what a file holds, never its weights.

The format (https://huggingface.co/docs/safetensors/index#format) is an 8-byte little-endian
length N, N bytes of JSON, then one flat byte buffer:

    {"__metadata__": {"format": "pt"},
     "wte.weight": {"dtype": "F32", "shape": [50257, 768], "data_offsets": [0, 154389504]}, ...}

`data_offsets` are [begin, end) inside the byte buffer, which starts right after the header. We
read the 8 bytes and the header, nothing more, so a 140 GB checkpoint is described by reading a
few megabytes. Nothing in the header is trusted before it is checked: the length against the
file size and a 100 MB cap (safetensors' own limit) before anything is allocated, then every
tensor's dtype, shape and offsets, then that the tensors tile the buffer exactly, with no
overlap and no hole, as the safetensors library itself requires. Every failure is one
`GptcalcError` line naming the file and the tensor.

A header as real ones are (every name once, every entry plain) is checked in bulk, as columns
(`calc.checkpoint.header_columns`: no Python code per tensor, 100,000 tensors in tens of ms); any
other is parsed again strictly and checked entry by entry here, so the error is the same either way.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from calc.checkpoint.dtypes import DTYPE_BITS, DTYPE_NAMES
from calc.checkpoint.header_columns import HeaderColumns, as_columns, plain_columns
from calc.inputs import MAX_VALUES
from calc.errors import GptcalcError
from calc.inputs import load_json

__all__ = ["DTYPE_BITS", "MAX_HEADER_BYTES", "SafetensorsHeader", "TensorEntry", "parse_header", "read_header", "validate_header"]

MAX_HEADER_BYTES = 100_000_000  # 100 MB, the limit the safetensors library enforces
LENGTH_BYTES = 8


@dataclass(frozen=True, slots=True)  # one per stored tensor: no per-instance dict
class TensorEntry:
    """One tensor as the header describes it; `begin`/`end` are offsets in the data buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    """A validated header: its tensors (in file order, as columns), `__metadata__`, and what reading cost."""

    path: str
    columns: HeaderColumns
    metadata: dict[str, str] = field(default_factory=dict)
    header_length: int = 0  # N, the JSON's length in bytes
    file_size: int = 0

    @cached_property
    def tensors(self) -> tuple[TensorEntry, ...]:
        """One `TensorEntry` per tensor, built when asked for (a checkpoint reader uses the columns)."""
        c = self.columns
        return tuple(map(TensorEntry, c.names, c.dtypes, c.shapes, c.begins, c.ends))

    @property
    def bytes_read(self) -> int:
        """The 8-byte length plus the JSON header: all this reader ever reads of a file."""
        return LENGTH_BYTES + self.header_length


def read_header(path: str | Path) -> SafetensorsHeader:
    """Read and validate the header of one safetensors file, without touching tensor data."""
    origin = str(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            length = _read_length(handle.read(LENGTH_BYTES), size, origin)
            raw = handle.read(length)
    except OSError as exc:
        raise GptcalcError(f"{origin}: cannot read: {exc.strerror or exc}") from None
    if len(raw) != length:
        raise GptcalcError(f"{origin}: truncated: the header needs {length:,} B but only {len(raw):,} B follow")
    columns, metadata = parse_header(raw, size - LENGTH_BYTES - length, origin)
    return SafetensorsHeader(origin, columns, metadata, length, size)


def _read_length(prefix: bytes, size: int, origin: str) -> int:
    """The header length N, checked against the cap and the file size before anything is read."""
    if len(prefix) < LENGTH_BYTES:
        raise GptcalcError(
            f"{origin}: not a safetensors file: {size} B is shorter than the 8-byte header length"
        )
    length = int.from_bytes(prefix, "little")
    if length > MAX_HEADER_BYTES:
        raise GptcalcError(
            f"{origin}: header length {length:,} B is over the {MAX_HEADER_BYTES:,} B limit "
            "(not a safetensors file, or a corrupt one)"
        )
    if LENGTH_BYTES + length > size:
        raise GptcalcError(
            f"{origin}: header length {length:,} B runs past the end of the {size:,} B file (truncated?)"
        )
    return length


def parse_header(raw: bytes, data_size: int | None, origin: str) -> tuple[HeaderColumns, dict[str, str]]:
    """Validate header JSON; `data_size` is the byte buffer's length (None when unknown).

    A plain header (`calc.checkpoint.header_columns`: every real one) is checked in bulk, as columns;
    any other is parsed the strict way and checked entry by entry, for the error to name."""
    _refuse_many_tensors(raw, origin)
    plain = plain_columns(raw, data_size)
    if plain is not None:
        return plain
    tensors, metadata = validate_header(_load_json(_text(raw, origin), origin), data_size, origin)
    return as_columns(tensors), metadata


def _refuse_many_tensors(raw: bytes, origin: str) -> None:
    """A header of more tensors than `MAX_VALUES` allows (each is at least 7 values: its dtype, shape
    and two offsets) is refused before JSON parsing builds them: 1.39M entries in a 98 MB header took
    1.7 GB and 24 s to parse before the values were counted. Every entry holds one "data_offsets"
    key, so its occurrences bound the entries from above without parsing."""
    entries = raw.count(b'"data_offsets"')
    if 7 * entries > MAX_VALUES:
        raise GptcalcError(f"{origin}: header: {entries:,} tensor entries hold more than {MAX_VALUES:,} values "
                           f"(at most {MAX_VALUES // 7:,} tensors in one file); refused before parsing it")


def validate_header(header: dict[str, Any], data_size: int | None, origin: str) -> tuple[tuple[TensorEntry, ...], dict[str, str]]:
    """Check an already parsed header (e.g. one huggingface_hub fetched) as strictly as a file's."""
    header = dict(header)
    metadata = _metadata(header.pop("__metadata__", {}), origin)
    tensors = tuple(_entry(name, info, origin) for name, info in header.items())
    _check_layout(tensors, data_size, origin)
    return tensors, metadata


def _text(raw: bytes, origin: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GptcalcError(f"{origin}: header is not UTF-8 text (byte {exc.start})") from None


def _load_json(text: str, origin: str) -> dict[str, Any]:
    """The header's JSON, read as strictly as every JSON file (`calc.inputs.load_json`): a tensor
    named twice would silently hide one of them."""
    header = load_json(text, f"{origin}: header")
    if not isinstance(header, dict):
        raise GptcalcError(f"{origin}: header is JSON {type(header).__name__}, expected an object")
    return header


_INT = {int}


def _metadata(value: Any, origin: str) -> dict[str, str]:
    """`__metadata__` is a flat string -> string map (e.g. {"format": "pt"})."""
    if not isinstance(value, dict):
        raise GptcalcError(f"{origin}: __metadata__: expected an object, got {_kind(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise GptcalcError(f"{origin}: __metadata__: {key!r}: expected a string, got {_kind(item)}")
    return value


def _entry(name: str, info: Any, origin: str) -> TensorEntry:
    if not isinstance(info, dict):
        raise GptcalcError(f"{_where(origin, name)}: expected an object with dtype, shape, data_offsets, got {_kind(info)}")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            raise GptcalcError(f"{_where(origin, name)}: {key}: missing")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise GptcalcError(f"{_where(origin, name)}: dtype: unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)})")
    if not isinstance(shape, list) or not _ints(shape):
        raise GptcalcError(f"{_where(origin, name)}: shape: expected a list of integers, got {_short(shape)}")
    if shape and min(shape) < 0:
        raise GptcalcError(f"{_where(origin, name)}: shape: negative dimension in {shape}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and _ints(offsets)):
        raise GptcalcError(f"{_where(origin, name)}: data_offsets: expected [begin, end] integers, got {_short(offsets)}")
    begin, end = offsets
    if begin < 0 or end < begin:
        raise GptcalcError(f"{_where(origin, name)}: data_offsets: [{begin}, {end}] is not a valid byte range")
    entry = TensorEntry(name, DTYPE_NAMES[dtype], tuple(shape), begin, end)
    _check_size(entry, origin)
    return entry


def _where(origin: str, name: str) -> str:
    """How an error names a tensor: written only when there is an error to report."""
    return f"{origin}: tensor {name!r}"


def _ints(values: list[Any]) -> bool:
    """Every item an integer (not a bool): one pass in C for the usual list of ints."""
    return set(map(type, values)) <= _INT or all(_is_int(value) for value in values)


def _check_size(entry: TensorEntry, origin: str) -> None:
    """The byte range must hold exactly shape x dtype width (sub-byte dtypes pack to whole bytes)."""
    bits = math.prod(entry.shape) * DTYPE_BITS[entry.dtype]
    if bits % 8:
        raise GptcalcError(f"{_where(origin, entry.name)}: {entry.numel:,} x {entry.dtype} is {bits} bits, "
                           "not a whole number of bytes")
    if entry.end - entry.begin != bits // 8:
        raise GptcalcError(
            f"{_where(origin, entry.name)}: data_offsets: [{entry.begin}, {entry.end}] holds {entry.nbytes:,} B but shape "
            f"{list(entry.shape)} of {entry.dtype} needs {bits // 8:,} B"
        )


def _check_layout(tensors: tuple[TensorEntry, ...], data_size: int | None, origin: str) -> None:
    """Tensors must tile the data buffer: inside it, no two overlapping, no gap between them."""
    position, previous = 0, None
    for entry in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if entry.begin < position:
            raise GptcalcError(
                f"{origin}: tensors {previous!r} and {entry.name!r} overlap (bytes {entry.begin:,}..{position:,})"
            )
        if entry.begin > position:
            raise GptcalcError(f"{origin}: bytes {position:,}..{entry.begin:,} of the data belong to no tensor")
        position, previous = entry.end, entry.name
    if data_size is None:
        return
    if position > data_size:
        raise GptcalcError(
            f"{origin}: tensor {previous!r} ends at data byte {position:,}, past the end of the file "
            f"({data_size:,} B of data; truncated?)"
        )
    if position < data_size:
        raise GptcalcError(f"{origin}: {data_size - position:,} B after the last tensor belong to no tensor")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    """A flat list of scalars as JSON, anything else by its kind (never a huge or deep dump)."""
    if isinstance(value, list) and len(value) <= 8 and all(not isinstance(v, (list, dict)) for v in value):
        return json.dumps(value)
    return _kind(value)
