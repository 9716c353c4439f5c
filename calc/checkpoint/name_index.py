"""Every tensor name a spec's checkpoint may store, spelt out once: name -> position -> group.

Classifying 100,000 stored names one by one (`TensorTable.classify`: a regex, an alias, a prefix,
a few look-ups) costs microseconds each. Instead the names the spec implies are written out once
per template and layer (`f"{layers}.{layer}.{slot}"`, experts expanded) into one dict, and a stored
name is classified by a look-up in it, in C (`map(index.get, names)`). A *group* is one template:
a model-level slot, one layer-relative slot of one block kind (its names in every layer of that
kind), one multi-token-prediction slot, one layout buffer; a Llama checkpoint has about a dozen.

What a look-up says must be what `classify` says, name by name. Within a group, every name is
classified the same way: the same layer-relative name (or the same full name), layers of the same
block kind on the same side of the stack's top, which is all `TensorTable.classify_canonical` reads
besides the layer number; so one name per group is classified for real when the index is built, and
a group whose name `classify` reads otherwise (an alias, a name not canonical, a quantised-looking
name, a buffer pattern catching a slot) is left out. A name outside the index is classified one by
one, as before (`calc.checkpoint.tally`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, compress, cycle, repeat
from operator import add, eq
from typing import Iterator

from calc.checkpoint.names import TensorName, TensorTable, component_counts
from calc.checkpoint.quant import NEVER_PARAMETERS
from calc.checkpoint.slots import Slot, Target, mtp_slots

__all__ = ["Group", "NameIndex", "UNSPLIT_QKV", "name_index", "split"]

UNSPLIT_QKV = "qkv_fused"  # a fused Q/K/V tensor whose size the spec cannot split (shape mismatch)


@dataclass(frozen=True)
class Group:
    """One template: what each of its tensors counts toward, and where the spec expects it."""

    target: Target  # None: a buffer
    shape: tuple[int, ...] | None  # a member of another shape is tallied one by one; None: any (a buffer)
    parts: dict[str, int]  # elements per component of one tensor of `shape`
    expected: tuple[tuple[int, ...] | None, tuple[int, ...] | None]  # its shape in (transformers 5's, the Hub's) layout
    hub_only: bool  # a name only the Hub's expert layout has
    mtp: bool  # in a multi-token-prediction layer above the stack
    size: int  # how many names
    layers: list[int | None]  # the layers they are in ([None]: a model-level name)


@dataclass(frozen=True)
class NameIndex:
    positions: dict[str, int]  # name -> position
    group_of: list[int]  # position -> group number
    groups: list[Group]
    templates: list[tuple[tuple, bool, int]]  # (expected shapes, MTP?, names) of every template, indexed or not
    batches: list[_Batch]  # how the names were spelt, in position order

    @cached_property
    def layer_of(self) -> list[int | None]:
        """Position -> layer (None outside the stack); only asked for when a group is stored in part."""
        return list(chain.from_iterable(batch.layer_of() for batch in self.batches))

    def expected_count(self, hub: bool, mtp: bool) -> int:
        """How many parameter tensors `TensorTable.expected_shapes(hub=hub, mtp=mtp)` lists."""
        return sum(size for expected, in_mtp, size in self.templates if expected[hub] is not None and (mtp or not in_mtp))


def name_index(table: TensorTable, limit: int) -> NameIndex | None:
    """The spec's names (None when there would be more than `limit`: a spec far larger than the checkpoint)."""
    templates = list(_templates(table))
    if sum(len(layers) * max(1, experts) for *_, layers, experts in templates) > limit:
        return None
    groups: list[Group] = []
    counted = []
    batches: dict[tuple[str, tuple], _Batch] = {}
    same: dict[int, tuple] = {}  # id of a list of layers -> its layers, as a key (a kind's and its buffers' lists are equal)
    for template, slot, expected, mtp, hub_only, layers, experts in templates:
        head, ends = _pieces(template, layers, experts)
        counted.append((expected, mtp, len(layers) * len(ends)))
        first = head.format() if layers == [None] else f"{head}{layers[0]}{ends[0]}"
        group = _group(table, first, layers, slot, expected, (mtp, hub_only), len(layers) * len(ends))
        if group is not None:
            key = (head, same.setdefault(id(layers), tuple(layers)))
            batches.setdefault(key, _Batch(head, layers)).add(len(groups), ends)
            groups.append(group)
    names, group_of = [], []
    for batch in batches.values():
        batch.spell(names, group_of)
    positions = dict(zip(names, range(len(names))))
    index = NameIndex(positions, group_of, groups, counted, list(batches.values()))
    return index if len(positions) == len(group_of) else None


Template = tuple[str, Slot, tuple, bool, bool, list, int]


def _pieces(template: str, layers: list[int | None], experts: int) -> tuple[str, list[str]]:
    """A template's text before its layer number, and every text after it (one per expert); a
    model-level template (no layer) whole, as a format string."""
    if layers == [None]:
        return template, [""]
    head, tail = template.split("{layer}")
    if not experts:
        return head, [tail]
    middle, end = tail.split("{expert}")
    return head, [f"{middle}{expert}{end}" for expert in range(experts)]


class _Batch:
    """The templates in the same layers under the same prefix (`model.layers.`), spelt together
    layer by layer: a checkpoint stores its tensors so, and its names are then looked up in the
    order they sit in memory (a quarter faster than template by template, measured)."""

    def __init__(self, head: str, layers: list[int | None]) -> None:
        self.head, self.layers = head, layers
        self.ends: list[str] = []  # per layer, in order
        self.gids: list[int] = []  # the group of each

    def add(self, gid: int, ends: list[str]) -> None:
        self.ends += ends
        self.gids += [gid] * len(ends)

    def spell(self, names: list[str], group_of: list[int]) -> None:
        """Append every name and its group."""
        if self.layers == [None]:
            names.append(self.head.format())
        else:
            prefixes = [f"{self.head}{layer}" for layer in self.layers]
            names += map(add, chain.from_iterable(map(repeat, prefixes, repeat(len(self.ends)))), cycle(self.ends))
        group_of += self.gids * len(self.layers)

    def layer_of(self) -> Iterator[int | None]:
        """The layer of every name, in the order `spell` spells them."""
        return chain.from_iterable(map(repeat, self.layers, repeat(len(self.ends))))


def _templates(table: TensorTable) -> Iterator[Template]:
    """(name template, the slot `classify` finds, expected shapes, MTP?, Hub layout only?, layers, experts)
    of every group."""
    spec, layers_path = table.spec, table.layers
    for slot in table.model.values():
        yield slot.name.replace("{", "{{").replace("}", "}}"), slot, (slot.shape, slot.shape), False, False, [None], 0
    for name, slot in {**table.towers_hub, **table.towers}.items():  # a tower's, in either layout
        expected = tuple(_expected(found.get(name)) for found in (table.towers, table.towers_hub))
        yield name.replace("{", "{{").replace("}", "}}"), slot, expected, False, name in table.tower_hub_only, [None], 0
    n_experts = {name: block.moe.n_experts if block.moe else 0 for name, block in spec.blocks.items()}
    kinds = list(chain.from_iterable(repeat(run.block, run.repeat) for run in spec.layers))
    for kind in spec.blocks:
        layers = list(compress(range(len(kinds)), map(eq, kinds, repeat(kind))))
        if not layers:
            continue
        blocks = {s.name: s for s in table.blocks[kind].values()}
        hub = {s.name: s for s in table.hub[kind].values()}
        for name, slot in {**blocks, **hub}.items():
            expected = tuple(_expected(found.get(name)) for found in (blocks, hub))
            yield (_template(layers_path, name), slot, expected, False, name in table.hub_only[kind], layers,
                   n_experts[kind] * ("{expert}" in name))
    if spec.mtp:
        layers = list(range(spec.n_layers, spec.n_layers + spec.mtp.n_layers))
        shapes = [{s.name: s.shape for s in mtp_slots(spec, table.lay, hub).values()} for hub in (False, True)]
        for name, slot in table.mtp.items():
            expected = (shapes[0].get(name), shapes[1].get(name))
            yield _template(layers_path, name), slot, expected, True, False, layers, n_experts[spec.mtp.block] * ("{expert}" in name)
    for buffer in table.lay.get("buffers", ()):
        layered = "{layer}" in buffer
        yield buffer, Slot(buffer, (), None), (None, None), False, False, list(range(spec.n_layers)) if layered else [None], 0


def _template(layers: str, name: str) -> str:
    return f"{layers}.{{layer}}.{name}"


def _expected(slot: Slot | None) -> tuple[int, ...] | None:
    return slot.shape if slot is not None and slot.kind != "buffer" else None


def _group(table: TensorTable, name: str, layers: list[int | None], slot: Slot, expected: tuple, flags: tuple[bool, bool],
           size: int) -> Group | None:
    """The group of `name`'s template, if `classify` reads `name` as the slot says; else None."""
    if name.endswith(NEVER_PARAMETERS) or table.canonical(name) != name:
        return None
    meaning = table.classify_canonical(name)
    if meaning is None or meaning.layer != layers[0] or (meaning.target, meaning.widths) != (slot.target, slot.widths):
        return None
    if slot.target is None:  # a buffer: any shape, counted toward nothing
        return Group(None, None, {}, expected, False, flags[0], size, layers)
    shape = next((s for s in (*expected, slot.shape) if s is not None))
    return Group(slot.target, shape, split(meaning, shape), expected, flags[1], flags[0], size, layers)


def split(meaning: TensorName, shape: tuple[int, ...]) -> dict[str, int]:
    """Elements per component of a tensor of `shape` with this meaning."""
    try:
        return component_counts(meaning, shape)
    except ValueError:  # a fused tensor of another model's size: counted whole, flagged by the shape check
        return {UNSPLIT_QKV: math.prod(shape)}
