"""Weights as a checkpoint stores them: bytes per component read from its headers, not from a dtype.

`memory --checkpoint PATH|REPO` reads the tensor list only (calc.checkpoint.report.read_checkpoint)
and takes every tensor's stored bytes, so whatever the format on disk the figure is exact: bf16,
FP8 with its scale tensors, GPTQ's packed int32 qweight/qzeros with fp16 scales and g_idx,
bitsandbytes' packed uint8 with its absmax, MXFP4 blocks and scales.

    component bytes = the component's parameter tensors (a fused Q/K/V split by its rows)
                    + the tensors stored beside them (scales, zero points, g_idx, absmax)

A tensor beside a weight belongs to that weight's component: a companion the reader names
(calc.checkpoint.quant: FP8 `weight_scale`, MXFP4 `_scales`), and any other unrecognised tensor
whose module holds a known weight (`...q_proj.qweight`, `...q_proj.weight.absmax` -> `q_proj`).
Buffers (causal masks, rotary inv_freq) are not weights a server loads; they are left out, as
is anything no weight owns, and both are listed. A GGUF is the exception: llama.cpp loads every
tensor the file stores, so its buffers (DeepSeek-V3's router bias `exp_probs_b`, transformers'
e_score_correction_bias buffer) are weights of the component that owns them (the router).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Mapping

from calc.errors import GptcalcError

if TYPE_CHECKING:  # the checkpoint reader is imported only when a checkpoint is read
    from calc.checkpoint.report import CheckpointReport
    from calc.checkpoint.names import TensorTable
    from calc.checkpoint.sources import TensorRecord

__all__ = ["StoredWeights", "stored_weights"]


@dataclass(frozen=True)
class StoredWeights:
    """A checkpoint's bytes by component, and what it stores that no component owns."""

    source: str
    bytes: dict[str, int]
    not_placed: tuple[TensorRecord, ...]  # stored tensors no weight owns (counted nowhere)
    buffer_bytes: int  # causal masks, rotary inv_freq: stored, never loaded as weights
    dtypes: tuple[str, ...]  # every dtype stored, e.g. ('BF16', 'F32', 'F8_E4M3')

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    def bits_per_param(self, params: Mapping[str, int]) -> dict[str, Fraction]:
        """Exact bits per parameter of each component (what a per-GPU share scales by); a component
        the checkpoint has and the spec has not, or the other way round, is a mismatch."""
        extra = [name for name, size in self.bytes.items() if size and not params.get(name)]
        missing = [name for name, n in params.items() if n and not self.bytes.get(name)]
        if extra or missing:
            what = "; ".join(filter(None, (extra and f"stores {', '.join(extra)}, which the model has not",
                                           missing and f"stores nothing for {', '.join(missing)}")))
            raise GptcalcError(f"--checkpoint {self.source}: {what} (is MODEL the checkpoint's model?)")
        return {name: Fraction(self.bytes.get(name, 0) * 8, n) for name, n in params.items() if n}

    def to_json(self) -> dict[str, object]:
        return {"source": self.source, "dtypes": list(self.dtypes), "total_bytes": self.total_bytes,
                "buffer_bytes": self.buffer_bytes,
                "not_placed": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "nbytes": t.nbytes}
                               for t in self.not_placed]}


def stored_weights(report: CheckpointReport) -> StoredWeights:
    """Bytes by component: the reader's parameter tensors, plus every companion and unrecognised
    tensor placed with the weight it belongs to."""
    from calc.checkpoint.names import tensor_table
    from calc.checkpoint.report import MTP, share_bytes

    table = tensor_table(report.spec)
    stored = dict(report.stored_bytes)
    not_placed = []
    beside = [(c.tensor, (c.base,)) for c in report.companions] + [(t, ()) for t in report.unknown]
    loaded = report.buffers if report.loads_buffers else ()
    beside += [(t, ()) for t in loaded]
    for tensor, bases in beside:
        parts = _owner(tensor.name, bases, table)
        if parts is None:
            not_placed.append(tensor)
            continue
        for component, size in share_bytes(parts, tensor.nbytes).items():
            stored[component] = stored.get(component, 0) + size
    # The multi-token-prediction layers a checkpoint stores are in no total, and no engine loads them as the model's
    # weights: llama.cpp skips them unless asked to load MTP (TENSOR_SKIP, src/llama-model-loader.cpp:1178-1185),
    # vLLM and SGLang load them only as a draft model.
    for component in MTP:
        stored.pop(component, None)
    return StoredWeights(report.source, _rows(stored, report.spec.towers), tuple(not_placed),
                         sum(t.nbytes for t in report.buffers if t not in loaded), tuple(sorted(report.bytes_by_dtype)))


def _rows(stored: dict[str, int], towers: Mapping[str, object]) -> dict[str, int]:
    """Bytes keyed as the weights' rows: a tower's components (the reader's `vision.q`) as tower_row names them."""
    from calc.analysis.memory.towers import tower_row

    def row(name: str) -> str:
        tower, _, component = name.partition(".")
        return tower_row(tower, component) if tower in towers else name

    return {row(name): size for name, size in stored.items()}


def _owner(name: str, bases: tuple[str, ...], table: TensorTable) -> dict[str, int] | None:
    """The components (in the proportions a fused tensor splits) of the weight a tensor sits beside:
    its named base, else the nearest enclosing module holding a known weight."""
    from calc.checkpoint.names import component_counts

    stems, stem = [], name
    while "." in stem:
        stem = stem.rsplit(".", 1)[0]
        stems += [stem + ".weight", stem]
    for candidate in (*bases, *stems):
        meaning = table.classify(candidate)
        if meaning is not None and not meaning.is_buffer:
            return component_counts(meaning, (sum(meaning.widths) or 1,))
    return None
