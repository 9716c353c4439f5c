"""`verify`: line up every source of truth for one spec and decide whether they agree.

The sources are the analytic formulas (the reference), the torch model built from the same spec,
and, when asked, a checkpoint's tensors (headers only) and a real load of its weights. Each
source yields a `Breakdown`, so agreement is one `compare()`; the checkpoint adds its own
per-tensor checks (names, shapes) and `--load` its forward pass. torch is imported only here,
lazily, so the CLI module stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from calc.analysis.breakdown import Breakdown, Diff, compare
from calc.checkpoint.sources import needs_torch
from calc.analysis.count import count
from calc.errors import GptcalcError
from calc.inputs import MAX_TORCH_DIM, MAX_TORCH_LAYERS
from calc.spec.load import load_spec, parse_overrides
from calc.spec.model import ModelSpec

__all__ = ["Verification", "check_buildable", "torch_source", "verify"]


@dataclass(frozen=True)
class Verification:
    """The sources compared, their per-component diff, and the checkpoint's own findings."""

    spec: ModelSpec
    sources: dict[str, Breakdown]
    diff: Diff
    checkpoint: Any = None  # calc.checkpoint.report.CheckpointReport
    loaded: Any = None  # calc.checkpoint.load result of --load

    @property
    def ok(self) -> bool:
        return (self.diff.ok and (self.checkpoint is None or self.checkpoint.ok)
                and (self.loaded is None or self.loaded.ok))

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "model": self.spec.name,
            **self.diff.to_json(),
            "mismatches": [row.component for row in self.diff.mismatches],
            "tied": {name: b.tied for name, b in self.sources.items()},
        }
        if self.checkpoint is not None:
            result["checkpoint"] = self.checkpoint.to_json()
        if self.loaded is not None:
            result["load"] = self.loaded.to_json()
        return {**result, "ok": self.ok}


def torch_source(spec: ModelSpec) -> Breakdown:
    """The torch reference model's breakdown (built on the meta device: no memory for weights)."""
    check_buildable(spec)
    try:
        from calc.reference.count import torch_breakdown
    except ImportError as exc:
        raise needs_torch("verify", exc) from None
    return torch_breakdown(spec)


def check_buildable(spec: ModelSpec) -> None:
    """Refuse, before torch is imported, a spec whose torch model cannot be built in seconds: one
    module per layer, dimensions that make CPU-side tables (rotary frequencies) huge, or a tensor
    of more elements than torch's int64 sizes hold. The arithmetic commands take any size."""
    if spec.n_layers > MAX_TORCH_LAYERS:
        raise GptcalcError(f"verify: {spec.name} has {spec.n_layers:,} layers; the torch model is one module per "
                           f"layer and verify builds at most {MAX_TORCH_LAYERS:,} (count, memory and shapes take any size)")
    for where, value in _ints(spec.model_dump(exclude={"n_positions", "layers"})):
        if value > MAX_TORCH_DIM:
            raise GptcalcError(f"verify: {spec.name}: {where} = {value:,} is over the {MAX_TORCH_DIM:,} a torch "
                               "model is built with (count, memory and shapes take any size)")
    if (total := count(spec).total) >= 2**63:
        raise GptcalcError(f"verify: {spec.name}: {total:,} parameters overflow torch's int64 sizes")


def _ints(data: Any, where: str = "") -> Any:
    """(dotted.path, value) for every int in a nested spec dump."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _ints(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            yield from _ints(value, f"{where}[{i}]")
    elif isinstance(data, int) and not isinstance(data, bool):
        yield where, data


def verify(model: str | None, overrides: tuple[str, ...] = (), checkpoint: str | None = None,
           load: bool = False) -> Verification:
    """Analytic vs torch, plus the checkpoint (and a real load) when one is given."""
    if load and checkpoint is None:
        raise GptcalcError("--load: needs --checkpoint PATH|REPO_ID (the weights to load)")
    changes = parse_overrides(overrides)
    spec = load_spec(model, changes) if model else None
    report = loaded = None
    if checkpoint is not None:
        from calc.checkpoint.report import read_for_verify

        report = read_for_verify(checkpoint, spec, changes)
        spec = report.spec
    if spec is None:
        raise GptcalcError("verify: give MODEL, or --checkpoint PATH|REPO_ID holding a config.json")
    sources = {"analytic": count(spec), "torch": torch_source(spec)}
    if report is not None:
        sources["checkpoint"] = report.breakdown
    if load:
        loaded = _load(report)
    return Verification(spec, sources, compare(sources), report, loaded)


def _load(report: Any) -> Any:
    """Load the weights for real, unless the headers already disagree with the spec: building the
    model of a spec the checkpoint contradicts and reading every weight could only fail, slowly."""
    from calc.checkpoint.report import LoadResult

    if not report.ok:
        return LoadResult(False, "skipped: header check failed (the tensor names or shapes above disagree with the spec)")
    try:
        from calc.checkpoint.load import load_and_run
    except ImportError as exc:
        raise needs_torch("--load", exc) from None
    return load_and_run(report)
