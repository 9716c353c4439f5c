"""A checkpoint's tensors tallied by component: in bulk per template, one by one for the rest.

A stored tensor whose name is in the spec's `NameIndex` and whose shape is its template's is
tallied in bulk: the tensors are counted per (template, dtype, byte size), in C, and each count
is added once, so a 100,000-tensor Llama checkpoint costs about a dozen additions per sum instead
of 100,000. Quantisation companions (DeepSeek-V3's 45,000 scales) are found in bulk too
(`quant.companions`). Every other tensor (a packed weight, an alias, a name no template spells, a
wrong shape) goes through `_one`, the per-tensor path, exactly as before.

Nothing of the report depends on which path a tensor took: contributions are applied in stored
order (a bulk count at the position of its first tensor), so every dict keeps the insertion order
the per-tensor loop gave it, and the lists of buffers and unknown tensors are in stored order. The
shape check is proven empty in bulk (every tensor tallied in bulk, every template where the spec
expects it, as many names as the spec lists); otherwise the per-name comparison runs as before.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import compress, filterfalse, repeat
from operator import add, attrgetter, eq, itemgetter, not_
from typing import Sequence

from calc.checkpoint.name_index import Group, NameIndex, name_index, split
from calc.checkpoint.names import TensorTable
from calc.checkpoint.quant import PACKED_DTYPES, QUANTISED_SUFFIXES, Companion, companions, split_quantised
from calc.checkpoint.tensors import RawCheckpoint, rows_of

__all__ = ["Tally", "found_shapes", "share_bytes", "tally"]


class _Any:
    """A buffer template's shape: equal to any stored shape."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


_MISS = Group(None, object(), {}, (None, None), False, False, 0, [])  # the group of a name the index does not have: no shape equals it


@dataclass
class Tally:
    """Sums over the stored tensors, by component and by dtype, in the per-tensor loop's key order."""

    components: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    tensors: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # tensors per component
    dtypes: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    params_by_dtype: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes_by_dtype: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    stored_bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    buffers: list[int] = field(default_factory=list)  # positions in the checkpoint
    unknown: list[int] = field(default_factory=list)
    companions: list[Companion] = field(default_factory=list)
    layers: set[int | None] = field(default_factory=set)
    found: dict[int, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # per-tensor path: position -> (name, shape)
    bulk: Sequence[int] = field(default_factory=list)  # positions of the parameter tensors tallied in bulk
    hub: bool = False  # the shapes the checkpoint is held to: the Hub's expert layout
    mtp: bool = False  # it stores multi-token-prediction layers
    shapes_checked: bool = False  # proven in bulk: no shape mismatch

    def add(self, parts: dict[str, int], dtype: str, nbytes: int, count: int = 1) -> None:
        """`count` parameter tensors of `nbytes` each, split over components as `parts` says."""
        self.params_by_dtype[dtype] += sum(parts.values()) * count  # the tensor's elements, however split
        for component, elements in parts.items():
            self.components[component] += elements * count
            self.tensors[component] += count
            self.dtypes[component].add(dtype)
        for component, size in share_bytes(parts, nbytes).items():
            self.stored_bytes[component] += size * count


def tally(raw: RawCheckpoint, table: TensorTable) -> Tally:
    """Tally every stored tensor of `raw` against the spec's `table`."""
    result, n = Tally(), len(raw.columns)
    index = name_index(table, 4 * n + 1024) if n else None
    bulk = _Bulk(raw, index) if index else None
    counts = bulk.counts if bulk else Counter()
    rest = list(range(n)) if not bulk else [] if bulk.every else list(compress(range(n), map(not_, bulk.mask)))
    rest, scales = _companions(result, raw, rest)
    events = [(bulk.first[key], key, 0) for key in counts] + scales + [(i, _ONE, 0) for i in rest]
    for position, key, scale_bytes in sorted(events):  # in stored order: positions are distinct
        if key == _SCALES:  # the first companion of its dtype, with the bytes of all of them
            result.bytes_by_dtype[raw.columns.dtypes[position]] += scale_bytes
        elif key == _ONE:
            _one(result, raw, table, position)
        else:
            (gid, dtype), nbytes = bulk.decode(key), raw.columns.nbytes[position]
            group = bulk.groups[gid]
            result.bytes_by_dtype[dtype] += nbytes * counts[key]
            if group.target is not None:
                result.add(group.parts, dtype, nbytes, counts[key])
    if not bulk:
        _shape_check(result, table, None, set(), 0)
        return result
    param = {key: bulk.groups[bulk.decode(key)[0]].target is not None for key in counts}
    is_param = None if all(param.values()) else list(map(param.__getitem__, bulk.keys))
    if is_param:  # buffers among them (rotary tables): set apart
        result.buffers = sorted([*result.buffers, *compress(bulk.tensors, map(not_, is_param))])
    present = Counter()  # parameter group number -> its tensors
    for key in counts:
        if param[key]:
            present[bulk.decode(key)[0]] += counts[key]
    _shape_check(result, table, index, set(present), _distinct(result, bulk, index, present, is_param))
    if not result.shapes_checked:  # the parameters tallied in bulk, for the per-name comparison
        result.bulk = list(compress(bulk.tensors, is_param)) if is_param else bulk.tensors
    return result


def _distinct(result: Tally, bulk: _Bulk, index: NameIndex, present: Counter, is_param: list[bool] | None) -> int:
    """How many distinct names the parameters tallied in bulk have, adding their layers to `result`.

    With no name twice among all of them, every tensor is a name; a group with all its names present
    is in all its layers (the common case: a layer set per kind of block, not per tensor)."""
    if len(set(bulk.positions)) == len(bulk.positions) and all(present[g] == bulk.groups[g].size for g in present):
        for layers in {id(bulk.groups[g].layers): bulk.groups[g].layers for g in present}.values():
            result.layers.update(layers)
        return sum(present.values())
    names = set(compress(bulk.positions, is_param) if is_param else bulk.positions)  # the index's positions: names
    result.layers.update(map(index.layer_of.__getitem__, names))
    return len(names)


_ONE, _SCALES = -1, -2  # event keys beside the bulk ones (>= 0): a tensor one by one, the companions of a dtype


def _companions(result: Tally, raw: RawCheckpoint, rest: list[int]) -> tuple[list[int], list[tuple[int, int, int]]]:
    """Set aside the quantisation companions among `rest` (`quant.companions`, in bulk), as `_one` would:
    the tensors left, and one event per dtype adding their bytes at the first one's position."""
    found = companions(raw.columns.names, raw.columns.dtypes, rest, raw.aliases)
    if not found:
        return rest, []
    positions, kinds = list(map(itemgetter(0), found)), list(map(itemgetter(1), found))
    records = raw.columns.records(positions)
    bases = map(add, map(str.removesuffix, map(attrgetter("name"), records), map(attrgetter("suffix"), kinds)),
                map(attrgetter("base_suffix"), kinds))  # the weight each qualifies, as `split_quantised` names it
    result.companions = list(rows_of(Companion, zip(records, bases, map(attrgetter("scheme"), kinds))))
    dtypes, sizes = list(map(attrgetter("dtype"), records)), list(map(attrgetter("nbytes"), records))
    events = [(positions[dtypes.index(dtype)], _SCALES, sum(compress(sizes, map(eq, dtypes, repeat(dtype)))))
              for dtype in dict.fromkeys(dtypes)]  # per dtype: its first companion, and the bytes of all of them
    return list(filterfalse(set(positions).__contains__, rest)), events


class _Bulk:
    """The tensors tallied in bulk: named as the index spells them, shaped as their template says,
    of the same byte size as the first of their (template, dtype); each with a key numbering that
    pair (the group's number plus the dtype's times the number of groups). When every tensor is
    taken (a checkpoint of the spec's model, as it should be), the columns are used as they are."""

    def __init__(self, raw: RawCheckpoint, index: NameIndex) -> None:
        columns, n = raw.columns, len(raw.columns)
        self.groups = [*index.groups, _MISS]
        positions = list(map(index.positions.get, columns.names, repeat(len(index.group_of))))
        group_of = [*index.group_of, len(self.groups) - 1]
        gids = list(map(group_of.__getitem__, positions))
        shape_of = [_Any() if g.target is None and g is not _MISS else g.shape for g in self.groups]
        mask = list(map(eq, columns.shapes, map(shape_of.__getitem__, gids)))
        if raw.aliases:  # an alias is skipped, by the per-tensor path
            for i in [i for i in compress(range(n), mask) if columns.names[i] in raw.aliases]:
                mask[i] = False
        self.dtypes = list(set(columns.dtypes))
        code = {dtype: i * len(self.groups) for i, dtype in enumerate(self.dtypes)}
        every = all(mask)
        gids, dtypes, nbytes = (column if every else list(compress(column, mask)) for column in (gids, columns.dtypes, columns.nbytes))
        keys = gids if len(self.dtypes) == 1 else list(map(add, gids, map(code.__getitem__, dtypes)))
        tensors: Sequence[int] = range(n) if every else list(compress(range(n), mask))
        self.first = dict(zip(reversed(keys), reversed(tensors)))  # key -> the position of its first tensor
        size = {key: columns.nbytes[i] for key, i in self.first.items()}
        if list(map(size.__getitem__, keys)) != nbytes:  # a tensor of another byte size than its first: one by one
            same = list(map(eq, nbytes, map(size.__getitem__, keys)))
            for i in compress(tensors, map(not_, same)):
                mask[i] = False
            keys, tensors, every = list(compress(keys, same)), list(compress(tensors, same)), False
        self.mask, self.every, self.keys, self.tensors = mask, every, keys, tensors
        self.counts = Counter(keys)
        self.positions = positions if every else list(compress(positions, mask))

    def decode(self, key: int) -> tuple[int, str]:
        """The group number and dtype a key numbers."""
        dtype, gid = divmod(key, len(self.groups))
        return gid, self.dtypes[dtype]


def _shape_check(result: Tally, table: TensorTable, index: NameIndex | None, present: set[int], distinct: int) -> None:
    """Which layout the shapes are held to, and whether they are proven right in bulk."""
    groups = index.groups if index else []
    result.hub = any(groups[g].hub_only for g in present) or table.is_hub([name for name, _ in result.found.values()])
    result.mtp = max(result.layers - {None}, default=-1) >= table.n_layers  # a layer above the stack
    result.shapes_checked = bool(index) and not result.found and distinct == index.expected_count(result.hub, result.mtp) \
        and all(groups[g].expected[result.hub] == groups[g].shape and (result.mtp or not groups[g].mtp) for g in present)


def found_shapes(raw: RawCheckpoint, result: Tally) -> dict[str, tuple[int, ...]]:
    """Every parameter tensor's (canonical) name and shape, in stored order: what the spec is compared with."""
    names, shapes = raw.columns.names, raw.columns.shapes
    return dict(result.found.get(i) or (names[i], shapes[i]) for i in sorted([*result.bulk, *result.found]))


def _one(result: Tally, raw: RawCheckpoint, table: TensorTable, position: int) -> None:
    """One tensor the bulk path does not take, as the per-tensor loop always did."""
    tensor = raw.columns.record(position)
    if tensor.name in raw.aliases:
        return  # the same memory under a second name (a tied head in a torch state dict)
    result.bytes_by_dtype[tensor.dtype] += tensor.nbytes
    if tensor.name.endswith(QUANTISED_SUFFIXES) or tensor.dtype in PACKED_DTYPES:  # nearly every tensor is neither
        tensor, companion = split_quantised(tensor)  # calc.checkpoint.quant: a packed weight unpacked, scales aside
        if companion is not None:
            result.companions.append(companion)
            return
    name = table.canonical(tensor.name)
    meaning = table.classify_canonical(name)
    if meaning is None:
        result.unknown.append(position)
    elif meaning.target is None:  # a buffer
        result.buffers.append(position)
    else:
        result.found[position] = (name, tensor.shape)
        result.layers.add(meaning.layer)
        result.add(split(meaning, tensor.shape), tensor.dtype, tensor.nbytes)


def share_bytes(parts: dict[str, int], nbytes: int) -> dict[str, int]:
    """A tensor's stored bytes split over its components in proportion to their elements (a fused
    Q/K/V), cumulatively rounded so the shares add up to `nbytes` exactly."""
    if len(parts) == 1:  # one component (nearly every tensor): all its bytes
        return {component: nbytes for component in parts}
    total, seen, done, shares = sum(parts.values()), 0, 0, {}
    for component, count in parts.items():
        seen += count
        shares[component] = nbytes * seen // (total or 1) - done
        done += shares[component]
    return shares
