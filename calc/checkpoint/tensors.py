"""What every checkpoint source is reduced to: a `RawCheckpoint` of stored tensors, held as columns.

A 100,000-tensor checkpoint is read without one Python object per tensor: `TensorColumns` keeps
names, dtypes, shapes, byte sizes and files as parallel lists (as the header reader produces them,
`calc.checkpoint.header_columns`), and `RawCheckpoint.tensors` builds a `TensorRecord` per tensor
only when something asks for them all (spec inference, a torch or Hub source). The checkpoint
report reads the columns (`calc.checkpoint.tally`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from typing import TYPE_CHECKING, Iterable, Iterator, NamedTuple, TypeVar

if TYPE_CHECKING:
    from calc.spec import hf

__all__ = ["FileRead", "RawCheckpoint", "TensorColumns", "TensorRecord", "rows_of"]

T = TypeVar("T", bound=tuple)


class TensorRecord(NamedTuple):
    """One stored tensor: enough to count it and check its shape, nothing of its values.

    Not `safetensors_header.TensorEntry`: a torch state dict or a Hub header has no byte offsets
    to give, and a checkpoint needs to know which of its files holds each tensor. A named tuple,
    not a frozen dataclass: a checkpoint may need tens of thousands of them at once (DeepSeek-V3's
    quantisation scales), and a tuple can be built in C (`rows_of`).
    """

    name: str
    dtype: str  # safetensors spelling: F32, BF16, ...
    shape: tuple[int, ...]
    nbytes: int
    file: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def rows_of(cls: type[T], rows: Iterable[tuple]) -> Iterator[T]:
    """Named tuples of `cls` from plain ones, built in C: `tuple.__new__`, as `cls._make` calls it,
    without a Python call per row (tens of thousands of records or quantisation companions)."""
    return map(tuple.__new__, repeat(cls), rows)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TensorColumns:
    """Stored tensors in order, one list per `TensorRecord` field."""

    names: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, records: Iterable[TensorRecord]) -> TensorColumns:
        records = tuple(records)
        return cls([r.name for r in records], [r.dtype for r in records], [r.shape for r in records],
                   [r.nbytes for r in records], [r.file for r in records])

    @classmethod
    def of_file(cls, names: list[str], dtypes: list[str], shapes: list[tuple[int, ...]], nbytes: list[int],
                file: str) -> TensorColumns:
        """The tensors of one file."""
        return cls(names, dtypes, shapes, nbytes, list(repeat(file, len(names))))

    def extend(self, other: TensorColumns) -> None:
        for mine, theirs in zip(self.columns, other.columns):
            mine.extend(theirs)

    @property
    def columns(self) -> tuple[list, ...]:
        return self.names, self.dtypes, self.shapes, self.nbytes, self.files

    def __len__(self) -> int:
        return len(self.names)

    def record(self, i: int) -> TensorRecord:
        return TensorRecord(self.names[i], self.dtypes[i], self.shapes[i], self.nbytes[i], self.files[i])

    def records(self, positions: Iterable[int] | None = None) -> tuple[TensorRecord, ...]:
        """Records of every tensor, or of those at `positions`."""
        if positions is None:
            return tuple(rows_of(TensorRecord, zip(*self.columns)))
        positions = list(positions)
        return tuple(rows_of(TensorRecord, zip(*(map(column.__getitem__, positions) for column in self.columns))))


@dataclass(frozen=True)
class FileRead:
    path: str
    size: int | None
    bytes_read: int | None  # None: read by a library that does not say (torch mmap, HTTP)


@dataclass(frozen=True)
class RawCheckpoint:
    source: str
    kind: str
    columns: TensorColumns
    files: tuple[FileRead, ...]
    config: hf.HFConfig | None = None  # the config.json beside the weights
    index_total_size: int | None = None
    aliases: dict[str, str] = field(default_factory=dict)  # name -> the name whose memory it shares
    # the engine loads the buffers too: llama.cpp creates a tensor for every one a GGUF stores (it refuses a
    # file with one left over: done_getting_tensors, src/llama-model-loader.cpp:1392-1398)
    loads_buffers: bool = False

    @cached_property
    def tensors(self) -> tuple[TensorRecord, ...]:
        """One record per stored tensor, in order (built on first use)."""
        return self.columns.records()

    @property
    def bytes_read(self) -> int | None:
        counts = [f.bytes_read for f in self.files]
        return None if any(c is None for c in counts) else sum(counts)  # type: ignore[misc]
