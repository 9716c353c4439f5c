"""A strict, header-only reader of GGUF files (llama.cpp's format): metadata and tensor list, never weights.

The format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md; the reader llama.cpp runs is
ggml/src/gguf.cpp, gguf_init_from_file_impl): "GGUF", a uint32 version, uint64 tensor and key counts,
the key/value pairs (typed values, arrays of one type), then per tensor its name, dimension count,
dimensions (ggml order: ne[0] is the row), ggml type and offset in the data section, which starts at
the next multiple of `general.alignment` (32 unless set).

Every check gguf.cpp makes is made here, with the same limits, before anything is allocated:
counts, names under GGML_MAX_NAME (64) bytes and unique, keys unique, at most 4 dimensions, element
counts representable, a known ggml type whose block divides the row, each tensor at the offset the
ones before it (padded to the alignment) put it, and the data inside the file. Anything else is
one `GptcalcError` line naming the file and the key or tensor.

gguf-py's own `GGUFReader` builds a numpy view per array element (a 200,000-token vocabulary took
30 s here), so the bytes are walked here with `struct`; the tables of types and names are gguf-py's
(`calc.checkpoint.gguf_tables`). Arrays of more than `KEEP_ARRAY` values (the vocabulary, its
scores and merges) are checked and counted but not kept: no figure gptcalc gives depends on them.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calc.checkpoint.gguf_tables import tables
from calc.errors import GptcalcError

__all__ = ["GGUFArray", "GGUFHeader", "GGUFTensor", "read_gguf"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 had 32-bit counts; gguf.cpp refuses it
MAX_NAME = 64  # GGML_MAX_NAME: a tensor name is shorter
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_COUNT = 1_000_000  # tensors or keys: real files hold a few thousand
MAX_ARRAY = 1 << 24  # elements of one metadata array (a vocabulary is ~10^5)
KEEP_ARRAY = 4096  # longer arrays are checked and counted, not kept
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT
INT64_MAX = (1 << 63) - 1

# gguf_type: the struct format of each scalar value type (8: string, 9: array).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array too long to keep (a vocabulary): its element type and length."""

    type: int
    count: int


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    """One tensor's entry: `ne` in ggml order (row first), `shape` as torch writes it (row last)."""

    name: str
    ggml_type: int
    type_name: str  # ggml's name: F32, Q4_K, IQ2_XXS, ...
    ne: tuple[int, ...]
    offset: int  # from the start of the data section
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.ne))

    @property
    def numel(self) -> int:
        return math.prod(self.ne)


@dataclass(frozen=True)
class GGUFHeader:
    path: str
    version: int
    metadata: dict[str, Any]
    tensors: tuple[GGUFTensor, ...]
    data_start: int  # the data section's offset in the file
    file_size: int

    @property
    def bytes_read(self) -> int:
        """All this reader looks at: everything before the data section."""
        return self.data_start

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise GptcalcError(f"{self.path}: general.architecture: missing (every llama.cpp model file names one)")
        return arch


def read_gguf(path: str | Path) -> GGUFHeader:
    """Read and check a GGUF file's header; tensor data is never read."""
    origin = str(path)
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            if size < 24:
                raise GptcalcError(f"{origin}: not a GGUF file: {size} B is shorter than its 24-byte preamble")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
                return _Reader(view, size, origin).header()
    except OSError as exc:
        raise GptcalcError(f"{origin}: cannot read: {exc.strerror or exc}") from None


class _Reader:
    """A cursor over the mapped file; every read is checked against the end first."""

    def __init__(self, view: mmap.mmap, size: int, origin: str) -> None:
        self.view, self.size, self.origin, self.pos = view, size, origin, 0
        self.where = "header"

    def fail(self, what: str) -> GptcalcError:
        return GptcalcError(f"{self.origin}: {self.where}: {what}")

    def unpack(self, fmt: str) -> Any:
        width = struct.calcsize("<" + fmt)
        if self.pos + width > self.size:
            raise self.fail(f"truncated: needs {width} B at byte {self.pos:,} of a {self.size:,} B file")
        value = struct.unpack_from("<" + fmt, self.view, self.pos)[0]
        self.pos += width
        return value

    def string(self, limit: int | None = None) -> str:
        length = self.unpack("Q")
        if limit is not None and length >= limit:
            raise self.fail(f"a {length:,}-byte name, over llama.cpp's limit of {limit - 1}")
        raw = self.skip(length)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"not UTF-8 text (byte {exc.start})") from None

    def skip(self, length: int) -> bytes:
        if length > self.size - self.pos:
            raise self.fail(f"truncated: a {length:,} B string at byte {self.pos:,} runs past the end of the "
                            f"{self.size:,} B file")
        raw = self.view[self.pos:self.pos + length]
        self.pos += length
        return raw

    def skip_strings(self, count: int) -> None:
        """Step over `count` strings reading only their lengths (a vocabulary: ~10^5 of them)."""
        view, size, pos, length = self.view, self.size, self.pos, struct.Struct("<Q").unpack_from
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                raise self.fail(f"truncated: an array of {count:,} strings runs past the end of the {size:,} B file")
            pos += 8 + length(view, pos)[0]
        if pos > size:
            raise self.fail(f"truncated: an array of {count:,} strings runs past the end of the {size:,} B file")
        self.pos = pos

    def header(self) -> GGUFHeader:
        if self.view[:4] != MAGIC:
            raise GptcalcError(f"{self.origin}: not a GGUF file (it starts {bytes(self.view[:4])!r}, not {MAGIC!r})")
        self.pos = 4
        version = self.unpack("I")
        if version not in VERSIONS:
            raise self.fail(f"GGUF version {version}; llama.cpp reads versions {', '.join(map(str, VERSIONS))}")
        n_tensors, n_kv = self.unpack("q"), self.unpack("q")
        for what, n in (("tensor count", n_tensors), ("key count", n_kv)):
            if not 0 <= n <= MAX_COUNT:
                raise self.fail(f"{what} {n:,} is outside 0..{MAX_COUNT:,} (a real file holds a few thousand)")
        metadata = self.metadata(n_kv)
        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
            raise GptcalcError(f"{self.origin}: general.alignment: {alignment!r} is not a power of two")
        infos = [self.tensor_info(i) for i in range(n_tensors)]
        data_start = -(-self.pos // alignment) * alignment if n_tensors else self.pos
        return GGUFHeader(self.origin, version, metadata, self.placed(infos, data_start, alignment), data_start, self.size)

    def metadata(self, n_kv: int) -> dict[str, Any]:
        metadata: dict[str, Any] = {}
        for i in range(n_kv):
            self.where = f"key {i}"
            key = self.string()
            self.where = key
            if key in metadata:
                raise self.fail("key given twice (llama.cpp refuses duplicate keys)")
            metadata[key] = self.value(self.unpack("I"))
        return metadata

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind != ARRAY:
            raise self.fail(f"unknown value type {kind}")
        item, count = self.unpack("I"), self.unpack("q")
        if not 0 <= count <= MAX_ARRAY:
            raise self.fail(f"an array of {count:,} values, outside 0..{MAX_ARRAY:,}")
        if item == STRING:
            if count > KEEP_ARRAY:
                self.skip_strings(count)
                return GGUFArray(item, count)
            return [self.string() for _ in range(count)]
        if item not in _SCALARS:
            raise self.fail(f"an array of value type {item} (nested arrays and unknown types are refused, as llama.cpp does)")
        fmt = f"<{count}{_SCALARS[item]}"
        width = struct.calcsize(fmt)
        if width > self.size - self.pos:
            raise self.fail(f"truncated: an array of {count:,} values needs {width:,} B at byte {self.pos:,}")
        values = list(struct.unpack_from(fmt, self.view, self.pos)) if count <= KEEP_ARRAY else GGUFArray(item, count)
        self.pos += width
        return values

    def tensor_info(self, i: int) -> tuple[str, tuple[int, ...], int, int]:
        self.where = f"tensor {i}"
        name = self.string(MAX_NAME)
        self.where = f"tensor {name!r}"
        n_dims = self.unpack("I")
        if n_dims > MAX_DIMS:
            raise self.fail(f"{n_dims} dimensions, over ggml's {MAX_DIMS}")
        ne = tuple(self.unpack("q") for _ in range(n_dims))
        if any(n < 0 for n in ne):
            raise self.fail(f"negative dimension in {list(ne)}")
        if math.prod(ne) > INT64_MAX:
            raise self.fail(f"{list(ne)} has more elements than int64 holds")
        return name, ne, self.unpack("I"), self.unpack("Q")

    def placed(self, infos: list[tuple[str, tuple[int, ...], int, int]], data_start: int, alignment: int) -> tuple[GGUFTensor, ...]:
        """Each tensor where gguf.cpp expects it: right after the one before, padded to the alignment."""
        c = tables().constants
        sizes, seen, tensors, expected = c.GGML_QUANT_SIZES, set(), [], 0
        for name, ne, kind, offset in infos:
            self.where = f"tensor {name!r}"
            if name in seen:
                raise self.fail("named twice (llama.cpp refuses duplicate tensor names)")
            seen.add(name)
            if kind not in c.GGMLQuantizationType._value2member_map_:
                raise self.fail(f"unknown ggml type {kind}")
            qtype = c.GGMLQuantizationType(kind)
            block, type_size = sizes[qtype]
            row = ne[0] if ne else 1
            if row % block:
                raise self.fail(f"rows of {row:,} values are not a multiple of {qtype.name}'s block of {block}")
            nbytes = math.prod(ne) // block * type_size
            if offset != expected:
                raise self.fail(f"data offset {offset:,}, expected {expected:,} (tensors are stored in order, "
                                f"each padded to {alignment} B)")
            if data_start + offset + nbytes > self.size:
                raise self.fail(f"its {nbytes:,} B at data offset {offset:,} run past the end of the {self.size:,} B "
                                "file (truncated?)")
            tensors.append(GGUFTensor(name, kind, qtype.name, ne, offset, nbytes))
            expected = offset + -(-nbytes // alignment) * alignment
        return tuple(tensors)
