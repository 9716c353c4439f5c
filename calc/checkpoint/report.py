"""What a checkpoint really stores, as a `Breakdown` (source="checkpoint") and a report.

`read_checkpoint(source, spec)` opens any source (`calc.checkpoint.sources`), then maps every
tensor name through `calc.checkpoint.names` — the same tables the torch reference model uses — to a
component. Parameters are counted by component (GPT-2's fused `c_attn` split into Q, K, V in
the spec's proportions); known buffers (causal masks, rotary `inv_freq`) are listed apart and
never counted; a name no table knows is reported by name, never dropped. Every tensor's shape is
checked against the one the spec implies (`expected_shapes`), so a checkpoint can disagree with
a spec even when the totals happen to match.

The spec is the one given (MODEL), else the checkpoint's config.json, else one inferred from the
tensor shapes (`calc.checkpoint.infer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from calc.analysis.breakdown import ORDER, Breakdown, TowerCount
from calc.checkpoint.infer import infer_spec
from calc.checkpoint.quant import Companion
from calc.checkpoint.sources import FileRead, RawCheckpoint, TensorRecord, open_checkpoint
from calc.checkpoint.tally import Tally, found_shapes, share_bytes, tally
from calc.errors import GptcalcError
from calc.inputs import many_objects
from calc.checkpoint.names import tensor_table
from calc.spec.hf import HFConfig
from calc.spec.load import config_with_overrides, spec_from_config
from calc.spec.model import ModelSpec

__all__ = ["CheckpointReport", "ComponentTensors", "LoadResult", "ShapeMismatch", "analyze", "read_checkpoint", "read_for_verify",
           "share_bytes"]

# Multi-token-prediction layers: stored beside the model, shown beside its total (as the analytic count does).
MTP = ("mtp_layers", "mtp_embedding_copies")


@dataclass(frozen=True)
class ShapeMismatch:
    """One tensor whose presence or shape disagrees with the spec."""

    name: str
    expected: tuple[int, ...] | None  # None: the spec implies no such tensor
    found: tuple[int, ...] | None  # None: the checkpoint does not store it

    def describe(self) -> str:
        if self.found is None:
            return f"{self.name}: missing (spec expects {list(self.expected or ())})"
        if self.expected is None:
            return f"{self.name}: {list(self.found)} stored, but the spec has no such tensor"
        return f"{self.name}: shape {list(self.found)}, spec expects {list(self.expected)}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "expected": _listed(self.expected), "found": _listed(self.found)}


@dataclass(frozen=True)
class ComponentTensors:
    """The stored tensors that make up one component."""

    component: str
    tensors: int
    parameters: int
    dtypes: tuple[str, ...]


@dataclass(frozen=True)
class CheckpointReport:
    source: str
    kind: str
    spec: ModelSpec
    spec_origin: str
    layout: str  # whose tensor names: a model_type of calc.checkpoint.layouts
    breakdown: Breakdown
    components: tuple[ComponentTensors, ...]
    buffers: tuple[TensorRecord, ...]
    unknown: tuple[TensorRecord, ...]
    mismatches: tuple[ShapeMismatch, ...]
    params_by_dtype: dict[str, int]
    bytes_by_dtype: dict[str, int]  # every stored tensor, buffers and unknown ones included
    files: tuple[FileRead, ...]
    bytes_read: int | None
    tensor_count: int
    index_total_size: int | None = None
    aliases: dict[str, str] = field(default_factory=dict)
    spec_notes: tuple[str, ...] = ()
    companions: tuple[Companion, ...] = ()  # quantisation scales: stored, not parameters (calc.checkpoint.quant)
    stored_bytes: dict[str, int] = field(default_factory=dict)  # bytes of the parameter tensors, by component
    loads_buffers: bool = False  # RawCheckpoint.loads_buffers: a GGUF's buffers are weights llama.cpp loads
    untied_variant: bool = False  # read against its config's untied variant: it stores the head apart (_or_untied)

    @property
    def buffer_elements(self) -> int:
        return sum(t.numel for t in self.buffers)

    @property
    def stored_elements(self) -> int:
        """Everything in the file: the Hub's "137M" for GPT-2 is this, masks included."""
        return (self.breakdown.total + self.buffer_elements + sum(t.numel for t in self.unknown)
                + sum(c.tensor.numel for c in self.companions))

    @property
    def tensor_bytes(self) -> int:
        return sum(self.bytes_by_dtype.values())

    @property
    def ok(self) -> bool:
        """Every tensor recognised and shaped as the spec says."""
        return not self.mismatches and not self.unknown

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": self.kind,
            "ok": self.ok,
            "spec_origin": self.spec_origin,
            "spec_notes": list(self.spec_notes),
            "spec": self.spec.model_dump(),
            "tensors": self.tensor_count,
            "parameters": self.breakdown.total,
            "stored_elements": self.stored_elements,
            "tied_embeddings": self.breakdown.tied,
            "untied_variant": self.untied_variant,
            "breakdown": self.breakdown.to_json(),
            "components": [c.__dict__ | {"dtypes": list(c.dtypes)} for c in self.components],
            "buffers": [_record_json(t) for t in self.buffers],
            "unknown": [_record_json(t) for t in self.unknown],
            "quantisation_companions": [c.to_json() for c in self.companions],
            "aliases": self.aliases,
            "shape_mismatches": [m.to_json() for m in self.mismatches],
            "parameters_by_dtype": self.params_by_dtype,
            "bytes_by_dtype": self.bytes_by_dtype,
            "tensor_bytes": self.tensor_bytes,
            "index_total_size": self.index_total_size,
            "files": [f.__dict__ for f in self.files],
            "bytes_read": self.bytes_read,
        }


@dataclass(frozen=True)
class LoadResult:
    """What `verify --load` found (`calc.checkpoint.load`); here, beside the report, so that a
    load skipped because the header check failed needs no torch."""

    ok: bool
    message: str
    tensors: int = 0
    logits_shape: tuple[int, ...] = ()
    transformers: Any = None  # calc.checkpoint.crosscheck.LogitsComparison, once our forward pass ran

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "message": self.message, "tensors": self.tensors, "logits_shape": list(self.logits_shape),
                "transformers": self.transformers.to_json() if self.transformers is not None else None}


@many_objects()  # the tensor columns are freed as this returns, before the collector resumes and would walk them
def read_checkpoint(source: str, spec: ModelSpec | None = None, config: HFConfig | None = None) -> CheckpointReport:
    """Open a checkpoint (header only) and account for every tensor in it against a spec: MODEL's
    (`config`: the config.json it comes from, as `_against_model` reads it), else the checkpoint's own."""
    raw = open_checkpoint(source, with_config=spec is None)
    if spec is not None:
        return _against_model(raw, spec, config)
    if raw.config is not None:
        return _from_config(raw, raw.config)
    inferred, notes = infer_spec(raw)
    return analyze(raw, inferred, "tensor shapes (no config.json)", notes)


@many_objects()
def read_for_verify(source: str, spec: ModelSpec | None, overrides: dict[str, Any] | None = None,
                    config: HFConfig | None = None) -> CheckpointReport:
    """`verify --checkpoint`: against MODEL (`config`: the config.json it comes from, None for gptcalc's own
    fields), else the checkpoint's own config.json (with --set); either config's untied variant as _from_config.

    Never against a spec inferred from the very shapes being checked: that would always agree.
    """
    raw = open_checkpoint(source, with_config=spec is None)
    if spec is not None:
        return _against_model(raw, spec, config)
    if raw.config is None:
        raise GptcalcError(f"{source}: no config.json beside the weights, so MODEL is needed to verify against")
    return _from_config(raw, config_with_overrides(raw.config, overrides) if overrides else raw.config)


def _against_model(raw: RawCheckpoint, spec: ModelSpec, config: HFConfig | None) -> CheckpointReport:
    """Against MODEL's spec, or its config's untied variant as _from_config (`config` None: gptcalc's own
    fields, which declare no text_config to untie)."""
    return _or_untied(raw, analyze(raw, spec, "the MODEL argument"), config)


def _from_config(raw: RawCheckpoint, config: HFConfig) -> CheckpointReport:
    """Against the config's spec, or its untied variant where that accounts for more (_or_untied)."""
    return _or_untied(raw, analyze(raw, spec_from_config(config), config.origin), config)


def _or_untied(raw: RawCheckpoint, report: CheckpointReport, config: HFConfig | None) -> CheckpointReport:
    """`report`, or where its config ties a head its language model declares untied (HFConfig.untied_variant:
    InternVL-hf's outer tie_word_embeddings over its text_config's) and the checkpoint stores the head apart,
    the report against the untied variant, which accounts for that tensor."""
    variant = None if report.ok or config is None else config.untied_variant()
    if variant is None:
        return report
    untied = analyze(raw, spec_from_config(variant), variant.origin)
    return replace(untied, untied_variant=True) if _wrong(untied) < _wrong(report) else report


def _wrong(report: CheckpointReport) -> int:
    """Tensors the spec did not account for."""
    return len(report.unknown) + len(report.mismatches)


def analyze(raw: RawCheckpoint, spec: ModelSpec, spec_origin: str, spec_notes: tuple[str, ...] = ()) -> CheckpointReport:
    """Count parameters by component, set buffers and unknown names apart, check every shape."""
    if spec.n_layers > len(raw.columns):  # every layer stores at least one tensor; and listing them would never end
        raise GptcalcError(f"{raw.source}: the spec from {spec_origin} has {spec.n_layers:,} layers, but the checkpoint "
                           f"stores only {len(raw.columns):,} tensors; they cannot be the same model")
    table = tensor_table(spec)
    sums = tally(raw, table)  # calc.checkpoint.tally: in bulk per template, one by one for the rest
    mismatches = () if sums.shapes_checked else _as_stored(raw, table, shape_mismatches(
        table.expected_shapes(hub=sums.hub, mtp=sums.mtp), found_shapes(raw, sums)))
    return CheckpointReport(
        source=raw.source, kind=raw.kind, spec=spec, spec_origin=spec_origin, layout=table.layout,
        breakdown=_breakdown(raw, spec, sums.components, sums.layers),
        components=_component_rows(sums),
        buffers=raw.columns.records(sums.buffers), unknown=raw.columns.records(sums.unknown),
        mismatches=mismatches,
        params_by_dtype=dict(sums.params_by_dtype), bytes_by_dtype=dict(sums.bytes_by_dtype),
        files=raw.files, bytes_read=raw.bytes_read, tensor_count=len(raw.columns),
        index_total_size=raw.index_total_size, aliases=dict(raw.aliases), spec_notes=spec_notes,
        companions=tuple(sums.companions), stored_bytes=dict(sums.stored_bytes), loads_buffers=raw.loads_buffers,
    )


def _as_stored(raw: RawCheckpoint, table: Any, mismatches: tuple[ShapeMismatch, ...]) -> tuple[ShapeMismatch, ...]:
    """Mismatches named as the checkpoint names its tensors: without the `transformer.` / `model.`
    prefix when none of its names has it (a base model's file, as GPT-2's own); a multimodal
    checkpoint's under its own prefixes (a stored tensor's name, a missing one's canonical name)."""
    if table.renames:
        stored = {table.canonical(name): name for name in raw.columns.names}
        return tuple(replace(m, name=stored.get(m.name, m.name)) for m in mismatches)
    base = table.lay.get("base", "")
    if not base or any(name.startswith(base) for name in raw.columns.names):
        return mismatches
    return tuple(replace(m, name=m.name.removeprefix(base)) for m in mismatches)


def _breakdown(raw: RawCheckpoint, spec: ModelSpec, components: dict[str, int], layers: set[int | None]) -> Breakdown:
    """The checkpoint's counts; a head that is absent (or shares the embedding's memory) is tied."""
    depth = spec.n_layers
    stored_layers = [layer for layer in layers if layer is not None and layer < depth]  # not the MTP ones
    tied = "lm_head" not in components and (spec.head.tied or any(
        name.endswith("lm_head.weight") for name in raw.aliases))
    towers = _towers(spec, components)
    ordered = {name: components[name] for name in ORDER if name in components and name not in MTP}
    ordered.update({name: count for name, count in components.items()
                    if name not in ordered and name not in MTP and name.partition(".")[0] not in spec.towers})
    ordered.setdefault("lm_head", 0)  # as the analytic and torch sources: present, 0 when absent
    return Breakdown(
        model=raw.source,
        n_layers=max(stored_layers) + 1 if stored_layers else spec.n_layers,
        components=ordered,
        tied=tied,
        tied_saving=components.get("token_embedding", 0) if tied else 0,
        source="checkpoint",
        extra={name: components[name] for name in MTP if name in components},
        towers=towers, uncounted=spec.uncounted,
    )


def _towers(spec: ModelSpec, components: dict[str, int]) -> tuple[TowerCount, ...]:
    """The towers' components as stored (`vision.q` -> the vision tower's `q`), in the formulas' order."""
    towers = []
    for name, tower in spec.towers.items():
        stored = {key.partition(".")[2]: n for key, n in components.items() if key.partition(".")[0] == name}
        order = [*tower.params(), *stored]
        towers.append(TowerCount(name, tower.kind, {key: stored[key] for key in dict.fromkeys(order) if key in stored},
                                 tower.n_layers, description=tower.describe()))
    return tuple(towers)


def _component_rows(sums: Tally) -> tuple[ComponentTensors, ...]:
    components = sums.components
    names = [n for n in ORDER if n in components] + [n for n in components if n not in ORDER]
    return tuple(ComponentTensors(name, sums.tensors[name], components[name], tuple(sorted(sums.dtypes[name])))
                 for name in names)


def shape_mismatches(expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]]) -> tuple[ShapeMismatch, ...]:
    """Missing tensors and wrong shapes in the spec's order, then tensors the spec does not have."""
    rows = [ShapeMismatch(name, shape, found.get(name)) for name, shape in expected.items() if found.get(name) != shape]
    rows += [ShapeMismatch(name, None, shape) for name, shape in found.items() if name not in expected]
    return tuple(rows)


def _listed(shape: tuple[int, ...] | None) -> list[int] | None:
    return list(shape) if shape is not None else None


def _record_json(tensor: TensorRecord) -> dict[str, Any]:
    return {"name": tensor.name, "dtype": tensor.dtype, "shape": list(tensor.shape), "nbytes": tensor.nbytes}
