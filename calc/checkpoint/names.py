"""Hugging Face tensor names -> our components, derived from a spec's parts and its model_type's layout.

`tensor_table(spec)` lists every tensor a Hugging Face checkpoint of the spec holds — its name
(model-level in full, layer-level relative to `layers.{layer}`), shape, the component(s) it
counts toward and how to start it (`init`). The names come from `calc.checkpoint.layouts` (paths per
model_type, data); which tensors exist and their shapes come from the spec's parts. The torch
reference model creates its parameters from this same table, and the checkpoint reader
classifies stored names with it, so the two sources cannot disagree about what a tensor is.

A fused tensor (GPT-2's `c_attn`, Phi-3's `gate_up_proj`, transformers 5's `experts.gate_up_proj`)
has a tuple of components and the widths they split in. Buffers — rotary frequency tables, causal
masks, Gemma's embed_scale, DeepSeek-V3's `e_score_correction_bias` — are stored in some files but
are no parameters: `classify` marks them (`is_buffer`), and they count toward nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from calc.checkpoint.layouts import ROTARY_BUFFERS, layout, layout_name, with_base
from calc.checkpoint.slots import Slot, Target, block_slots, model_slots, mtp_slots
from calc.checkpoint.tower_slots import canonical_prefix, renames_of, tower_slots
from calc.spec.model import ModelSpec

__all__ = ["Slot", "TensorName", "TensorTable", "classify", "component_counts", "expected_shapes", "tensor_table"]

# A layer or expert index as transformers writes it: ASCII digits, no leading zero (`h.01.` and `h.١.`,
# which `\d` would take, are not layer 1).
INDEX = r"(0|[1-9][0-9]*)"
_EXPERT = re.compile(rf"\.{INDEX}\.")  # the first index in a name: its layer, or in a layer-relative one its expert

@dataclass(frozen=True, slots=True)  # one per stored tensor: no per-instance dict
class TensorName:
    """What one stored tensor name means: its template, layer (None outside the stack) and target."""

    template: str
    layer: int | None
    target: Target
    widths: tuple[int, ...] = ()
    expert: int | None = None

    @property
    def is_buffer(self) -> bool:
        return self.target is None

    @property
    def name(self) -> str:
        """The canonical name (as transformers' save_pretrained writes it)."""
        return self.template.format(layer=self.layer, expert=self.expert)


_BELOW_STACK = ("embed", "positions", "project_in", "embed_norm")


class TensorTable:
    """Every tensor name of one spec, with its meaning; built once per spec."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec, self.lay, self.layout = spec, layout(spec), layout_name(spec)
        self.model = model_slots(spec, self.lay)
        self.blocks = {name: block_slots(self.lay, block, spec.d_model) for name, block in spec.blocks.items()}
        self.hub = {name: block_slots(self.lay, block, spec.d_model, hub=True) for name, block in spec.blocks.items()}
        self.layers = self.lay["layers"]
        # A multimodal model's towers: every tensor by its full name (calc.checkpoint.tower_slots), and the
        # stored prefixes its checkpoints use for them and for the decoder.
        self.towers = {full: slot for name, tower in spec.towers.items() for full, slot in tower_slots(name, tower).items()}
        # ... and as their Hub files name them where those differ (Kimi-K2.5's fused `wqkv`): the shapes a Hub
        # checkpoint is held to, as for the decoder's experts (`hub`)
        self.towers_hub = {full: slot for name, tower in spec.towers.items()
                           for full, slot in tower_slots(name, tower, hub=True).items()}
        self.tower_hub_only = self.towers_hub.keys() - self.towers.keys()
        self.renames = renames_of(spec.towers)
        self._model_names = {**{slot.name: slot for slot in self.model.values()}, **self.towers_hub, **self.towers}
        self._relative = {name: {slot.name: slot for slot in (*self.blocks[name].values(), *self.hub[name].values())}
                          for name in spec.blocks}
        # A Hub-layout name of a tensor transformers 5 keeps under another name (Mixtral's router, GraniteMoE's experts).
        self.renamed = {name: {h.name: self.blocks[name][role].name for role, h in self.hub[name].items()
                               if role in self.blocks[name] and h.name != self.blocks[name][role].name}
                        for name in spec.blocks}
        # A Hub tensor that is one piece of a tensor transformers concatenates on load (`<role>_split` in the
        # layout's hub table: Kimi Linear's and OLMo-Hybrid's q, k, v convs): its in-memory name, its place.
        self._pieces = {f"{path}.weight": (f"{self.lay[key[:-len('_split')]]}.weight", index)
                        for key, paths in (self.lay.get("hub") or {}).items() if key.endswith("_split")
                        for index, path in enumerate(paths)}
        # Multi-token-prediction layers above the stack (checkpoint only), in either expert layout.
        self.mtp = {slot.name: slot for hub in (False, True) for slot in mtp_slots(spec, self.lay, hub).values()} \
            if spec.mtp else {}
        self._layer = re.compile(rf"^{re.escape(self.layers)}\.{INDEX}\.(.+)$")
        # The layout's buffer names as one pattern (one match per tensor, not one per buffer name).
        self._buffers = re.compile("^(?:" + "|".join(re.escape(t).replace(r"\{layer\}", INDEX)
                                                     for t in self.lay.get("buffers", ())) + ")$"
                                   if self.lay.get("buffers") else "(?!)")
        self._aliases = self.lay.get("aliases", {})
        self._mtp_prefix = self.lay.get("mtp_prefix") if spec.mtp else None
        self._mtp_block = self.lay.get("mtp_block", "")
        # What an MTP layer adds to its block, stored outside `mtp_prefix` (Qwen3-Next's mtp.fc): the first MTP layer's
        self._mtp_outside = {f"{path}.weight": f"{self.layers}.{spec.n_layers}.{role}.weight"
                             for role, path in self.lay.get("mtp_outside", {}).items()} if spec.mtp else {}
        # Per-tensor work is dict look-ups: the stack's depth, each layer's kind and each layer-relative
        # name's meaning are worked out once, not once per tensor (a checkpoint repeats them per layer).
        self.n_layers = spec.n_layers
        self._stored_layers = self.n_layers + (spec.mtp.n_layers if spec.mtp else 0)
        self._kinds: dict[int, str] = {}
        self._keys: dict[str, tuple[str, int | None]] = {}
        self.hub_only = {name: {s.name for s in self.hub[name].values()} - {s.name for s in self.blocks[name].values()}
                         for name in spec.blocks}  # per block kind: names only the Hub's expert layout has

    def canonical(self, name: str) -> str:
        """The name as save_pretrained writes it: an older alias renamed, a base model's prefix added,
        an MTP layer kept apart (DeepSeek-V4's mtp.0.*) named as the layer above the stack; a
        multimodal checkpoint's decoder tensor as its text model names it, its tower's as transformers 5
        holds it (`calc.checkpoint.tower_slots`)."""
        if self.renames:  # a multimodal checkpoint: its decoder under the text model's names, its towers in-memory
            name = canonical_prefix(name, self.renames)
        if name in self._mtp_outside:
            return self._mtp_outside[name]
        if self._mtp_prefix and name.startswith(self._mtp_prefix):
            index, _, rest = name[len(self._mtp_prefix):].partition(".")
            if index.isdigit():
                return f"{self.layers}.{self.n_layers + int(index)}.{rest.removeprefix(self._mtp_block)}"
        return with_base(self._aliases.get(name, name), self.lay, self._model_names)

    def piece(self, name: str) -> tuple[str, int] | None:
        """(the in-memory tensor, this piece's place among those concatenated into it) for a Hub name
        that is one piece of a tensor (`_pieces`), else None."""
        match = self._layer.match(self.canonical(name))
        found = self._pieces.get(match.group(2)) if match else None
        return None if found is None else (f"{self.layers}.{match.group(1)}.{found[0]}", found[1])

    def classify(self, name: str) -> TensorName | None:
        """The meaning of a stored tensor name, or None when the spec has no such tensor."""
        return self.classify_canonical(self.canonical(name))

    def classify_canonical(self, name: str) -> TensorName | None:
        """`classify` of a name already made canonical (`canonical`)."""
        slot = self._model_names.get(name)
        if slot is not None:
            return TensorName(name, None, slot.target, slot.widths)
        if name.endswith(ROTARY_BUFFERS) or self._buffers.match(name):
            return TensorName(_EXPERT.sub(".{layer}.", name, count=1), _layer_of(name), None)
        found = self._in_layer(name)
        if found is None:
            return None
        layer, kind, key, expert = found
        table = self._relative[kind] if layer < self.n_layers else self.mtp
        slot = table.get(key)
        if slot is None:
            return None
        renamed = self.renamed[kind] if layer < self.n_layers else {}
        template = f"{self.layers}.{{layer}}.{renamed.get(slot.name, slot.name)}"
        return TensorName(template, layer, slot.target, slot.widths, expert)

    def _in_layer(self, name: str) -> tuple[int, str, str, int | None] | None:
        """(layer, its block kind, the layer-relative name with `{expert}` for an expert index, the
        expert) of a name inside the stack (or the MTP layers above it); None for any other name."""
        match = self._layer.match(name)
        if not match:
            return None
        layer = int(match.group(1))
        if layer >= self._stored_layers:
            return None
        kind = self._kinds.get(layer)
        if kind is None:
            kind = self._kinds[layer] = self.spec.block_at(min(layer, self.n_layers - 1))
        rest = match.group(2)
        keyed = self._keys.get(rest)
        if keyed is None:  # a slot's own index (LongCat-Flash's self_attn.1) is no expert's
            expert = None if rest in self._relative[kind] else _EXPERT.search(rest)
            keyed = (rest, None) if expert is None else \
                (rest[:expert.start()] + ".{expert}." + rest[expert.end():], int(expert.group(1)))
            if len(self._keys) < 65_536:  # layer-relative names repeat per layer; expert indices multiply them
                self._keys[rest] = keyed
        return layer, kind, *keyed

    def is_hub(self, names: list[str]) -> bool:
        """Whether stored names follow the Hub's expert layout (one tensor per expert, or GraniteMoE's
        input_linear) rather than transformers 5's in-memory one: the shapes the checkpoint is held to."""
        if not any(self.hub_only.values()) and not self.tower_hub_only:  # nothing the two layouts name apart
            return False
        for name in names:
            if self.canonical(name) in self.tower_hub_only:
                return True
            found = self._in_layer(self.canonical(name))
            if found is not None and found[0] < self.n_layers and found[2] in self.hub_only[found[1]]:
                return True
        return False

    def expected_shapes(self, hub: bool = False, buffers: bool = False, mtp: bool = False) -> dict[str, tuple[int, ...]]:
        """Every tensor name of the spec with its shape; `hub`: routed experts one tensor each; `mtp`:
        with the multi-token-prediction layers a checkpoint may store above the stack."""
        shapes = {s.name: s.shape for role, s in self.model.items() if role.split(".")[0] in _BELOW_STACK}
        above = {s.name: s.shape for role, s in self.model.items() if role.split(".")[0] not in _BELOW_STACK}
        tables = self.hub if hub else self.blocks
        n_experts = {name: block.moe.n_experts if block.moe else 0 for name, block in self.spec.blocks.items()}
        for layer in range(self.spec.n_layers):
            kind = self.spec.block_at(layer)
            for slot in tables[kind].values():
                if slot.kind == "buffer" and not buffers:
                    continue
                name = f"{self.layers}.{layer}.{slot.name}"
                for expert in range(n_experts[kind]) if "{expert}" in name else (None,):
                    shapes[name.format(expert=expert) if expert is not None else name] = slot.shape
        if mtp and self.spec.mtp:
            experts = n_experts[self.spec.mtp.block]
            for layer in range(self.spec.n_layers, self.spec.n_layers + self.spec.mtp.n_layers):
                for slot in mtp_slots(self.spec, self.lay, hub).values():
                    name = f"{self.layers}.{layer}.{slot.name}"
                    for expert in range(experts) if "{expert}" in name else (None,):
                        shapes[name.format(expert=expert) if expert is not None else name] = slot.shape
        towers = {name: slot.shape for name, slot in (self.towers_hub if hub else self.towers).items()
                  if buffers or slot.kind != "buffer"}
        return {**shapes, **above, **towers}


def _layer_of(name: str) -> int | None:
    match = _EXPERT.search(name)
    return int(match.group(1)) if match else None


_TABLES: dict[int, tuple[ModelSpec, TensorTable]] = {}


def tensor_table(spec: ModelSpec) -> TensorTable:
    """The spec's table (kept for the last few specs: classifying a checkpoint asks for it per tensor)."""
    cached = _TABLES.get(id(spec))
    if cached is None or cached[0] is not spec:
        if len(_TABLES) > 16:
            _TABLES.clear()
        cached = _TABLES[id(spec)] = (spec, TensorTable(spec))
    return cached[1]


def classify(name: str, spec: ModelSpec) -> TensorName | None:
    return tensor_table(spec).classify(name)


def expected_shapes(spec: ModelSpec, hub: bool = False) -> dict[str, tuple[int, ...]]:
    """Every parameter tensor a Hugging Face checkpoint of this spec holds, with its shape, in the
    order transformers lists them (embeddings, layers, final norm, head)."""
    return tensor_table(spec).expected_shapes(hub)


def component_counts(meaning: TensorName, shape: tuple[int, ...], spec: ModelSpec | None = None) -> dict[str, int]:
    """How many elements of a tensor of `shape` go to which component.

    A fused tensor is split along its fused axis in the widths its slot gives (Q/K/V as
    q_dim : kv_dim : kv_dim, gate_up as f : f); elements that do not divide that way are refused.
    A buffer contributes nothing.
    """
    elements = math.prod(shape)
    if meaning.target is None:
        return {}
    if isinstance(meaning.target, str):
        return {meaning.target: elements}
    rows, remainder = divmod(elements, sum(meaning.widths))
    if remainder:
        raise ValueError(f"fused tensor of shape {list(shape)} does not split as {list(meaning.widths)}")
    return {component: rows * width for component, width in zip(meaning.target, meaning.widths)}
