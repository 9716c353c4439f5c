"""`verify MODEL`'s fourth source: transformers' own model of the config, read like a checkpoint.

transformers builds the model of the config.json MODEL came from on the meta device (shapes, no
memory; `calc.arch.fallback.transformers_model`). Its parameter names are Hugging Face's, the ones
a checkpoint stores, so its `named_parameters()` (a tied head listed once) go through the very
reader that accounts for a checkpoint (`calc.checkpoint.report.analyze`): each name mapped to a
component by the same tables, each shape checked against the spec, a name no table knows listed.
That yields a `Breakdown` for the table's `transformers` column. Where the name tables cannot map
this spec, transformers' total alone is compared with the analytic total, and the output says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from calc.analysis.breakdown import Breakdown
from calc.checkpoint.report import CheckpointReport, analyze
from calc.checkpoint.sources import RawCheckpoint, TensorColumns, TensorRecord
from calc.errors import GptcalcError
from calc.spec.hf import HFConfig, first_line
from calc.spec.model import ModelSpec

__all__ = ["SOURCE", "TransformersSource", "transformers_source"]

SOURCE = "transformers"
F32_BYTES = 4  # what a float32 model of these shapes would hold


@dataclass(frozen=True)
class TransformersSource:
    """transformers' model of the config: by component (`breakdown`, a column of the table), or its
    total only (`total`, when the name tables cannot map it), or why it was not built (`note`)."""

    note: str
    breakdown: Breakdown | None = None
    report: CheckpointReport | None = None  # names and shapes, as a checkpoint's
    total: int | None = None
    analytic_total: int | None = None

    @property
    def ok(self) -> bool:
        if self.report is not None:
            return self.report.ok
        return self.total is None or self.total == self.analytic_total

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {"ok": self.ok, "note": self.note, "by_component": self.breakdown is not None}
        if self.report is not None:
            result["unknown"] = [t.name for t in self.report.unknown]
            result["shape_mismatches"] = [m.to_json() for m in self.report.mismatches]
        if self.total is not None:
            result["total"] = self.total
        return result


def transformers_source(spec: ModelSpec, config: HFConfig | None, analytic_total: int) -> TransformersSource:
    """transformers' model of `config` on the meta device, mapped to our components where it can be."""
    if config is None:
        return TransformersSource(f"transformers' model not compared: {spec.name} is written as gptcalc spec "
                                  "fields, not a config.json (a preset transcribing one, a file, a hub id)")
    try:
        from calc.arch.fallback import transformers_model

        # the whole multimodal model where the spec counts its towers (their names are mapped too), else its text model
        model = transformers_model(config.data, text_only=not spec.towers, origin=config.origin)
    except (ImportError, KeyError, ValueError, TypeError, AttributeError, RuntimeError) as exc:
        if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] in ("transformers", "torch"):
            return TransformersSource("transformers' model not compared: transformers (and torch) are not installed")
        # what the model needs besides (Gemma 3n's TimmWrapperModel: timm) is named as the model's
        return TransformersSource(f"transformers' model not compared: transformers cannot build model_type "
                                  f"{config.data.get('model_type')!r}: {first_line(exc)}")
    raw = _as_checkpoint(model, config.origin)
    name = type(model).__name__
    try:
        report = analyze(raw, spec, config.origin)
    except GptcalcError as exc:
        total = sum(t.numel for t in raw.tensors)
        return TransformersSource(f"transformers' {name}: total only ({exc})", total=total, analytic_total=analytic_total)
    breakdown = replace(report.breakdown, source=SOURCE)
    note = (f"transformers' {name}, built on the meta device from {config.origin}, counted by component "
            "through the checkpoint name maps")
    return TransformersSource(note, breakdown, report)


def _as_checkpoint(model: Any, origin: str) -> RawCheckpoint:
    """The meta model's parameters as the tensor list of a checkpoint (a tied tensor listed once)."""
    tensors = tuple(
        TensorRecord(name, "F32", tuple(param.shape), param.numel() * F32_BYTES, "transformers")
        for name, param in model.named_parameters()
    )
    return RawCheckpoint(f"transformers:{origin}", "transformers model (meta device)", TensorColumns.of(tensors), ())
