"""Exact coefficients from which a page recomputes `memory`'s figures for any context and batch.

Per GPU under tensor parallelism over `tp` cards, `memory` says
    weights(format, tp) + (sum over layer kinds of bytes_per_token x min(seq, window) + state) x batch
(calc/analysis/memory/kv.py `bytes_at`), so a model is, for each tp and format, one weights integer
and a few (bytes_per_token, window) pairs: the report embeds them as decimal strings and the page
multiplies them as BigInt, so its integers are the CLI's own.
"""

from __future__ import annotations

from typing import Any

from calc.analysis.count import count
from calc.analysis.memory import Layout, inference, kv_cache, weight_choice
from calc.analysis.memory.parallel import check_tp
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["KV_CHOICES", "TP_CHOICES", "WEIGHT_CHOICES", "coefficients"]

# label -> (--dtype, --quant) as `memory` takes them; "as stored" is neither
WEIGHT_CHOICES: dict[str, tuple[str | None, str | None]] = {
    "as stored": (None, None), "fp16": ("fp16", None), "fp8": ("fp8_e4m3", None), "int8": ("int8", None),
    "int4": ("int4", None), "awq-int4": (None, "awq-int4"), "mxfp4": (None, "mxfp4"), "q4_k_m": (None, "q4_k_m"),
}
KV_CHOICES = ("fp16", "fp8_e4m3", "q8_0", "q4_0")
TP_CHOICES = (1, 2, 4, 8)


def coefficients(spec: ModelSpec) -> dict[str, Any]:
    """The model's coefficients for every tp the model allows (it must divide the query heads)."""
    breakdown = count(spec)
    per_tp: dict[str, Any] = {}
    for tp in TP_CHOICES:
        try:
            check_tp(spec, tp)
        except GptcalcError:
            continue
        weights = {}
        for label, (dtype, quant) in WEIGHT_CHOICES.items():
            fmt, scheme = weight_choice(spec, dtype, quant)
            weights[label] = str(inference(spec, breakdown, 1, 1, fmt, "fp16", layout=Layout(tp),
                                           scheme=scheme).weights.total_bytes)
        per_tp[str(tp)] = {"weights": weights, "kv": {fmt: _kv(spec, fmt, tp) for fmt in KV_CHOICES}}
    stored = spec.quant or "16-bit"
    return {"name": spec.name, "context": spec.n_positions, "stored": stored, "tp": per_tp,
            "llamacpp": spec.llamacpp.converts}  # false: the page refuses it under llama.cpp, as `memory` does


def _kv(spec: ModelSpec, fmt: str, tp: int) -> dict[str, Any]:
    cache = kv_cache(spec, 1, 1, fmt, tp)
    return {"rows": [[str(kind.bytes_per_token(cache.format)), kind.window or 0] for kind in cache.layers],
            "state": str(cache.state_bytes_per_sequence)}

