"""Exact parameter counts from a spec: a generic loop over layers x parts (and over a multimodal
model's towers), Python ints throughout.

Every formula lives with its part (`calc.parts.*`: one home per part kind); this module only adds
them up — the embedding, each run of identical layers (its per-layer rows times its repeat), the
final norm and the head — so a 10,000-layer spec costs one multiplication per run. Nothing here
knows about torch or checkpoints: those are separate sources that must agree with these formulas
(see `calc.analysis.breakdown.compare`).
"""

from __future__ import annotations

from typing import Iterable

from calc.analysis.breakdown import BlockCount, Breakdown, TowerCount
from calc.spec.model import ModelSpec

__all__ = ["active_params", "by_family", "count", "shared_counts", "stored_buffers", "tower_counts"]


def count(spec: ModelSpec) -> Breakdown:
    """The analytic breakdown: every present component; the LM head always (0 when tied)."""
    d = spec.d_model
    components = spec.embedding.params(spec.vocab_size, d, spec.n_positions)
    for repeat, block in spec.runs():
        _add(components, block.params(d), repeat)
    shared = shared_counts(spec)
    for copy in shared:  # stored once, however many layers apply it
        _add(components, copy.per_layer, 1)
    if spec.final_norm is not None and (final := spec.final_norm.params(d)):
        components["final_norm"] = final
    components.update(spec.head.params(spec.vocab_size, d, spec.embedding.proj_dim))
    blocks = tuple(BlockCount(name, layers, spec.blocks[name].params(d), spec.blocks[name].describe())
                   for name, layers in spec.layer_counts().items())
    return Breakdown(
        model=spec.name,
        n_layers=spec.n_layers,
        components=components,
        tied=spec.head.tied,
        tied_saving=spec.vocab_size * spec.embedding.width(d) if spec.head.tied else 0,
        blocks=blocks,
        shared=shared,
        active=active_params(spec),
        extra={**stored_buffers(spec), **(spec.mtp.params(spec) if spec.mtp and spec.mtp.stored else {})},
        unstored=spec.mtp.params(spec) if spec.mtp and not spec.mtp.stored else {},
        towers=tower_counts(spec),
        uncounted=spec.uncounted,
    )


def _add(totals: dict[str, int], rows: dict[str, int], times: int) -> None:
    for name, n in rows.items():
        totals[name] = totals.get(name, 0) + times * n


def shared_counts(spec: ModelSpec) -> tuple[BlockCount, ...]:
    """Each stored copy of a shared block (Zamba2's), its rows once: `layers` is 1, the one copy."""
    return tuple(BlockCount(name, 1, block.params(spec.d_model), f"applied by {uses} layers; {block.describe()}")
                 for name, (block, uses) in spec.shared_blocks().items())


def tower_counts(spec: ModelSpec) -> tuple[TowerCount, ...]:
    """Each tower's rows (its formulas live in calc/towers), in the order the spec lists them."""
    return tuple(TowerCount(name, tower.kind, tower.params(), tower.n_layers, tower.layer_params(), tower.describe())
                 for name, tower in spec.towers.items())


def by_family(specs: Iterable[ModelSpec]) -> list[tuple[ModelSpec, Breakdown]]:
    """Models counted and ordered as `presets` lists them (by model_type, then size), so every
    command that lists all presets lists them in one order."""
    rows = [(spec, count(spec)) for spec in specs]
    return sorted(rows, key=lambda row: (row[0].model_type, row[1].total))


def stored_buffers(spec: ModelSpec) -> dict[str, int]:
    """Buffers the checkpoint stores with the layers (DeepSeek-V3's router score correction bias):
    shown beside the total, never in it, as transformers does not count them as parameters."""
    totals: dict[str, int] = {}
    for repeat, block in spec.runs():
        _add(totals, block.buffers(), repeat)
    return totals


def active_params(spec: ModelSpec) -> int | None:
    """Parameters one token passes through: for a MoE, top_k routed experts (plus shared ones, the
    router, attention, norms, embeddings and head) instead of every expert. None for a dense model,
    where it is simply the total."""
    if not any(block.is_moe for block in spec.blocks.values()):
        return None
    d = spec.d_model
    layers = sum(repeat * sum(block.active_params(d).values()) for repeat, block in spec.runs())
    outside = spec.embedding.params(spec.vocab_size, d, spec.n_positions)
    head = spec.head.params(spec.vocab_size, d, spec.embedding.proj_dim)
    final = spec.final_norm.params(d) if spec.final_norm else 0
    return layers + sum(outside.values()) + sum(head.values()) + final
