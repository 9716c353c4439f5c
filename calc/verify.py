"""`verify`: line up every source of truth for one spec and decide whether they agree.

The sources are the analytic formulas (the reference), the torch model built from the same spec,
transformers' own model of the config.json the spec came from (when transformers is installed),
and, when asked, a checkpoint's tensors (headers only) and a real load of its weights. Each
source yields a `Breakdown`, so agreement is one `compare()`; the checkpoint adds its own
per-tensor checks (names, shapes) and `--load` its tensor checks, forward pass and logits against
transformers'. `Verification.problems` is the one list both the headline and the exit code are
read from, so they cannot disagree. torch is imported only here, lazily, so the CLI module stays
light.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calc.analysis.breakdown import Breakdown, Diff, compare
from calc.analysis.count import count
from calc.checkpoint.sources import TORCH_HINT, needs_torch
from calc.errors import GptcalcError
from calc.inputs import MAX_TORCH_DIM, MAX_TORCH_LAYERS
from calc.spec import hf
from calc.spec.load import config_with_overrides, load_spec_and_config, parse_overrides
from calc.spec.model import ModelSpec

__all__ = ["WITHOUT_TORCH", "Verification", "check_buildable", "diff_verdict", "torch_source", "verify"]

WITHOUT_TORCH = ("torch is not installed, so this compared the formulas with the checkpoint's headers only; with "
                 "torch, verify also counts a torch model built from the spec (a torch column) and --load loads "
                 f"the weights into it (strict) and runs a forward pass: {TORCH_HINT}")


@dataclass(frozen=True)
class Verification:
    """The sources compared, their per-component diff, and the checkpoint's own findings."""

    spec: ModelSpec
    sources: dict[str, Breakdown]
    diff: Diff
    checkpoint: Any = None  # calc.checkpoint.report.CheckpointReport
    loaded: Any = None  # calc.checkpoint.report.LoadResult of --load
    transformers: Any = None  # calc.checkpoint.transformers_source.TransformersSource

    def problems(self) -> list[str]:
        """Every reason verification fails, in words; empty when it passes."""
        found = [] if self.diff.ok else [diff_verdict(self.diff)]
        if self.transformers is not None and not self.transformers.ok:
            found.append("transformers' model disagrees")
        if self.checkpoint is not None and not self.checkpoint.ok:
            bad = len(self.checkpoint.mismatches) + len(self.checkpoint.unknown)
            found.append(f"{bad} checkpoint tensor{'s' if bad != 1 else ''} unrecognised or misshapen")
        if self.loaded is not None and not self.loaded.ok:
            found.append("--load failed")
        return found

    @property
    def ok(self) -> bool:
        return not self.problems()

    @property
    def verdict(self) -> str:
        """The headline: "all agree", or every failure (counts that agree said first)."""
        problems = self.problems()
        if not problems:
            return "all agree"
        return "; ".join(["counts agree", *problems] if self.diff.ok else problems)

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "model": self.spec.name,
            **self.diff.to_json(),
            "mismatches": [row.component for row in self.diff.mismatches],
            "tied": {name: b.tied for name, b in self.sources.items()},
        }
        if self.transformers is not None:
            result["transformers"] = self.transformers.to_json()
        if self.checkpoint is not None:
            result["checkpoint"] = self.checkpoint.to_json()
        if self.loaded is not None:
            result["load"] = self.loaded.to_json()
        if self.without_torch:
            result["not_compared"] = WITHOUT_TORCH
        analytic = self.sources.get("analytic")
        if analytic is not None and (analytic.towers or analytic.partial):  # the totals above are the decoder's
            result["towers_not_compared"] = {"towers_total": analytic.towers_total, "partial": analytic.partial,
                                             "decoder_total": analytic.decoder_total}
        return {**result, "ok": self.ok, "verdict": self.verdict, "problems": self.problems()}

    @property
    def without_torch(self) -> bool:
        """torch is missing: the formulas were compared with the checkpoint's headers only."""
        return "torch" not in self.sources


def diff_verdict(diff: Diff) -> str:
    return "all agree" if diff.ok else f"{len(diff.mismatches)} of {len(diff.rows)} components disagree"


def torch_source(spec: ModelSpec, optional: bool = False) -> Breakdown | None:
    """The torch reference model's breakdown (built on the meta device: any size, no memory).
    Without torch: None when `optional` (a checkpoint's headers still have something to say),
    else the install hint."""
    try:
        from calc.reference.count import torch_breakdown
    except ImportError as exc:
        if optional:
            return None
        raise needs_torch("verify", exc) from None
    check_buildable(spec)
    try:
        return torch_breakdown(spec)
    except GptcalcError as exc:  # an option the torch reference does not implement, named
        raise GptcalcError(f"{spec.name}: {exc}; count, kvcache, memory and shapes work for every spec") from None


def check_buildable(spec: ModelSpec) -> None:
    """Refuse, before torch builds anything, a spec whose torch model cannot be built in seconds: one
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
    """Analytic vs torch (and transformers), plus the checkpoint (and a real load) when one is given."""
    if load and checkpoint is None:
        raise GptcalcError("--load: needs --checkpoint PATH|REPO_ID (the weights to load)")
    if load and checkpoint.endswith(".gguf"):
        raise GptcalcError(f"--load: {checkpoint}: a GGUF stores ggml blocks (Q4_K, ...) that the torch reference "
                           "does not dequantise; its header check runs without --load")
    changes = parse_overrides(overrides)
    spec, config = load_spec_and_config(model, changes) if model else (None, None)
    report = loaded = None
    if checkpoint is not None:
        from calc.checkpoint.report import read_for_verify

        report = read_for_verify(checkpoint, spec, changes, config)
        if spec is None:
            config = _checkpoint_config(checkpoint, changes)
        config = config.untied_variant() if report.untied_variant else config  # transformers' model too
        spec = report.spec
    if spec is None:
        raise GptcalcError("verify: give MODEL, or --checkpoint PATH|REPO_ID holding a config.json")
    sources = {"analytic": count(spec)}
    if (reference := torch_source(spec, optional=report is not None)) is not None:
        sources["torch"] = reference
    transformers = _transformers(spec, config, sources["analytic"].decoder_total)  # its text model: the decoder
    if transformers.breakdown is not None:
        sources["transformers"] = transformers.breakdown
    if report is not None:
        sources["checkpoint"] = report.breakdown
    if load:
        loaded = _load(report, config)
    return Verification(spec, sources, compare(sources, towers=True), report, loaded, transformers)


def _transformers(spec: ModelSpec, config: hf.HFConfig | None, analytic_total: int) -> Any:
    from calc.checkpoint.transformers_source import transformers_source

    return transformers_source(spec, config, analytic_total)


def _checkpoint_config(checkpoint: str, changes: dict[str, Any]) -> hf.HFConfig:
    """The config.json the checkpoint's spec was read from (its directory's, or its Hub repo's)."""
    path = Path(checkpoint).expanduser()
    config = hf.read_config(path / "config.json") if path.is_dir() else hf.config_from_hub(checkpoint)
    return config_with_overrides(config, changes) if changes else config


def _load(report: Any, config: hf.HFConfig | None) -> Any:
    """Load the weights for real, unless the headers already disagree with the spec: building the
    model of a spec the checkpoint contradicts and reading every weight could only fail, slowly."""
    from calc.checkpoint.report import LoadResult

    if not report.ok:
        return LoadResult(False, "skipped: header check failed (the tensor names or shapes above disagree with the spec)")
    try:
        from calc.checkpoint.load import load_and_run
    except ImportError as exc:
        raise needs_torch("--load", exc) from None
    return load_and_run(report, config.data if config is not None else None)
