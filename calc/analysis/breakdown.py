"""`Breakdown`, the one result type every parameter source returns, and `compare`.

The analytic counter, the torch reference model and a checkpoint reader each produce a
`Breakdown` keyed by the same component names (the parts' keys: `q`, `mlp_up`, `experts_down`,
...), so verifying one against another is a single `compare()` over dictionaries.

Component counts are totals over the whole model: a per-layer component (e.g. `q`) holds the sum
over every layer that has it. `blocks` says how those totals split by layer kind (DeepSeek-V3: 3
dense layers, 58 MoE layers), each with its per-layer rows; `shared` lists the blocks stored once
and applied by several layers (Zamba2's), each copy's rows counted once. A tied LM head is stored as
0 with `tied=True`: its matrix *is* the token embedding, so counting it again is the classic "GPT-2
has 163M parameters" mistake. `extra` holds what a checkpoint stores beyond the model itself
(DeepSeek-V3's multi-token-prediction layers, its routers' score-correction buffers): shown, never
added to the total.

A multimodal model's towers (vision and audio encoders with their projectors) are `towers`, one
`TowerCount` each with its own rows: `total` is the whole model's (what the checkpoint holds),
`decoder_total` the language model's. `uncounted` names what a source knows the checkpoint holds but
did not count (a tower of a kind not read yet): `partial` is then true, and every output says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from calc.parts import LABELS as PART_LABELS
from calc.towers import LABELS as TOWER_LABELS

__all__ = ["COMPONENT_LABELS", "MODEL_COMPONENTS", "ORDER", "BlockCount", "Breakdown", "Diff", "DiffRow", "TowerCount",
           "compare"]

# Outside the stack of blocks.
MODEL_COMPONENTS: tuple[str, ...] = (
    "token_embedding", "position_embedding", "embedding_norm", "project_in", "per_layer_embedding",
    "per_layer_projection", "per_layer_projection_norm", "altup_in", "altup_out", "hc_head", "final_norm", "project_out", "lm_head",
    "lm_head_bias")
# Lookup tables and the head: Gemma-3n's per-layer embedding is a table too (Google's "effective" sizes leave it out).
EMBEDDING_COMPONENTS: tuple[str, ...] = ("token_embedding", "position_embedding", "per_layer_embedding", "lm_head")

COMPONENT_LABELS: dict[str, str] = {
    **PART_LABELS,
    # a checkpoint's fused Q/K/V tensor that does not split in the spec's proportions
    "qkv_fused": "fused Q/K/V (unsplittable)",
    "mtp_layers": "multi-token prediction layers",
    "mtp_embedding_copies": "MTP copies of embedding and head",
    **TOWER_LABELS,
}

# Table order: embeddings, a block as a token meets it, then what follows the stack.
ORDER: tuple[str, ...] = tuple(COMPONENT_LABELS)


def label(component: str) -> str:
    """A component's words; a tower's component (`vision.q`, as a checkpoint counts it) under its tower's name."""
    tower, dot, own = component.partition(".")
    if dot and own in COMPONENT_LABELS:
        return f"{tower} tower: {COMPONENT_LABELS[own]}"
    return COMPONENT_LABELS.get(component, component)


@dataclass(frozen=True)
class BlockCount:
    """One kind of layer: how many layers have it and one layer's components."""

    name: str
    layers: int
    per_layer: Mapping[str, int]
    description: str = ""

    @property
    def per_layer_total(self) -> int:
        return sum(self.per_layer.values())

    @property
    def total(self) -> int:
        return self.layers * self.per_layer_total

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "layers": self.layers, "per_layer": dict(self.per_layer),
                "per_layer_total": self.per_layer_total, "total": self.total, "description": self.description}


@dataclass(frozen=True)
class TowerCount:
    """One tower (an encoder and its projectors): its components, and one encoder layer's."""

    name: str  # "vision", "audio"
    kind: str  # which tower (calc/towers module): "siglip", "qwen3_vl", ...
    components: Mapping[str, int]
    layers: int = 0
    per_layer: Mapping[str, int] = field(default_factory=dict)
    description: str = ""

    @property
    def total(self) -> int:
        return sum(self.components.values())

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "total": self.total, "layers": self.layers,
                "components": dict(self.components), "per_layer": dict(self.per_layer),
                "description": self.description}


@dataclass(frozen=True)
class Breakdown:
    """Parameter counts by component for one model, from one source."""

    model: str
    n_layers: int
    components: Mapping[str, int]
    tied: bool = False
    tied_saving: int = 0  # parameters an untied head would add (vocab_size * d_model)
    source: str = "analytic"
    blocks: tuple[BlockCount, ...] = ()  # by layer kind; the analytic source knows them
    shared: tuple[BlockCount, ...] = ()  # blocks stored once and applied by several layers (Zamba2), one copy each
    active: int | None = None  # parameters one token uses (MoE: top_k experts only); None: all of them
    extra: Mapping[str, int] = field(default_factory=dict)  # stored beside the model, not in its total
    # declared by the config but not in its released checkpoint (MTP layers a drafter loads from elsewhere)
    unstored: Mapping[str, int] = field(default_factory=dict)
    towers: tuple[TowerCount, ...] = ()  # a multimodal model's encoders, in its total
    uncounted: tuple[str, ...] = ()  # what the checkpoint holds that no row counts: the total is partial

    def get(self, name: str) -> int:
        return self.components.get(name, 0)

    @property
    def decoder_total(self) -> int:
        """The language model alone: every component but the towers'."""
        return sum(self.components.values())

    @property
    def towers_total(self) -> int:
        return sum(tower.total for tower in self.towers)

    @property
    def total(self) -> int:
        """The whole model: the decoder and its towers (partial when `uncounted` names anything)."""
        return self.decoder_total + self.towers_total

    @property
    def partial(self) -> bool:
        return bool(self.uncounted)

    @property
    def per_layer(self) -> dict[str, int]:
        """One layer's components when every layer is the same kind; empty otherwise."""
        return dict(self.blocks[0].per_layer) if len(self.blocks) == 1 else {}

    @property
    def layers_total(self) -> int:
        return sum(count for name, count in self.components.items() if name not in MODEL_COMPONENTS)

    @property
    def embeddings(self) -> int:
        """Token and position embeddings plus an untied LM head."""
        return sum(self.get(name) for name in EMBEDDING_COMPONENTS)

    @property
    def non_embedding(self) -> int:
        """Kaplan et al.'s N: everything except the vocabulary and position embeddings."""
        return self.total - self.embeddings

    @property
    def stored_total(self) -> int:
        """The model plus what its checkpoint stores beside it (MTP layers)."""
        return self.total + sum(self.extra.values())

    def to_json(self) -> dict[str, object]:
        result: dict[str, object] = {
            "model": self.model,
            "source": self.source,
            "total": self.total,
            "partial": self.partial,
            "decoder_total": self.decoder_total,
            "non_embedding": self.non_embedding,
            "n_layers": self.n_layers,
            "tied_embeddings": self.tied,
            "tied_saving": self.tied_saving,
            "components": dict(self.components),
            "blocks": [block.to_json() for block in self.blocks],
        }
        if self.per_layer:
            result["per_layer"] = self.per_layer
            result["per_layer_total"] = self.blocks[0].per_layer_total
        if self.active is not None:
            result["active"] = self.active
            result["active_non_embedding"] = self.active - self.embeddings
        if self.shared:
            result["shared_blocks"] = [copy.to_json() for copy in self.shared]
        if self.towers:
            result["towers"] = [tower.to_json() for tower in self.towers]
        if self.uncounted:
            result["not_counted"] = list(self.uncounted)
        if self.extra:
            result["not_in_total"] = dict(self.extra)
            result["stored_total"] = self.stored_total
        if self.unstored:
            result["declared_not_stored"] = dict(self.unstored)
        return result


@dataclass(frozen=True)
class DiffRow:
    component: str
    values: dict[str, int]  # source name -> count

    @property
    def ok(self) -> bool:
        return len(set(self.values.values())) <= 1


@dataclass(frozen=True)
class Diff:
    """Per-component agreement between named sources, plus the totals."""

    sources: tuple[str, ...]
    rows: tuple[DiffRow, ...]
    totals: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows) and len(set(self.totals.values())) <= 1

    @property
    def mismatches(self) -> tuple[DiffRow, ...]:
        return tuple(row for row in self.rows if not row.ok)

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "sources": list(self.sources),
            "totals": self.totals,
            "components": [
                {"component": row.component, "ok": row.ok, **row.values} for row in self.rows
            ],
        }


def compare(breakdowns: Mapping[str, Breakdown], towers: bool = False) -> Diff:
    """Line up several sources component by component (the decoder's components); a component
    absent from one counts 0. `towers`: each tower's components too, as rows of their own (verify's
    sources are one model; `compare`'s columns are different models)."""
    names = [name for name in ORDER if any(b.get(name) for b in breakdowns.values())]
    extra = sorted({n for b in breakdowns.values() for n in b.components} - set(ORDER))
    rows = tuple(
        DiffRow(name, {source: b.get(name) for source, b in breakdowns.items()})
        for name in [*names, *extra]
    )
    # A multimodal model's towers are compared row by row among the sources that count them (the
    # formulas and a checkpoint), and in the totals only where every source does (the torch
    # reference and a text model of transformers build the decoder alone): else the decoders' totals.
    whole = all(b.towers for b in breakdowns.values())
    totals = {source: b.total if whole else b.decoder_total for source, b in breakdowns.items()}
    return Diff(tuple(breakdowns), rows + (_tower_rows(breakdowns) if towers else ()), totals)


def _tower_rows(breakdowns: Mapping[str, Breakdown]) -> tuple[DiffRow, ...]:
    """One row per tower component (`vision.q`), holding only the sources that count towers; none
    unless two sources do (nothing to compare)."""
    counted = {source: {t.name: t.components for t in b.towers} for source, b in breakdowns.items() if b.towers}
    if len(counted) < 2:
        return ()
    keys = dict.fromkeys((tower, c) for towers in counted.values() for tower, rows in towers.items() for c in rows)
    return tuple(DiffRow(f"{tower}.{c}", {source: towers.get(tower, {}).get(c, 0) for source, towers in counted.items()})
                 for tower, c in keys)
