"""gptcalc: exact parameter counts, shapes and memory for decoder-only transformers.

Importing the package does no work and pulls in no heavy module: the names below are imported on
first use (so `gptcalc --help` loads no spec machinery, and a preset's count not even pydantic), and torch, transformers and
safetensors only inside the functions that need them.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["Breakdown", "Diff", "DpAttention", "GptcalcError", "ModelSpec", "PoolSettings", "Result", "compare", "count",
           "flops", "kvcache", "load", "memory", "spec_from_dict", "train"]
__version__ = "0.1.0"

# The API (docs/python.md): each command as a function of a loaded spec, returning a result whose
# to_dict() is the command's --json (calc/api.py).
_HOMES = {
    **{name: "calc.api" for name in ("Result", "compare", "count", "flops", "kvcache", "load", "memory", "train")},
    "Breakdown": "calc.analysis.breakdown", "Diff": "calc.analysis.breakdown", "GptcalcError": "calc.errors",
    "ModelSpec": "calc.spec.model", "spec_from_dict": "calc.spec.model",
    "PoolSettings": "calc.analysis.memory.pool_settings",  # memory's pool_settings
    "DpAttention": "calc.analysis.memory.sglang_dp",  # memory's dp_attention (SGLang's DP attention)
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'calc' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
