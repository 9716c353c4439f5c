"""gptcalc: exact parameter counts, shapes and memory for decoder-only transformers.

Importing the package does no work and pulls in no heavy module: the names below are imported on
first use (so `gptcalc --help` loads no spec machinery, and a preset's count not even pydantic), and torch, transformers and
safetensors only inside the functions that need them.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["Breakdown", "Diff", "GptcalcError", "ModelSpec", "compare", "count", "spec_from_dict"]
__version__ = "0.1.0"

_HOMES = {
    "Breakdown": "calc.analysis.breakdown", "Diff": "calc.analysis.breakdown", "compare": "calc.analysis.breakdown",
    "count": "calc.analysis.count", "GptcalcError": "calc.errors", "ModelSpec": "calc.spec.model",
    "spec_from_dict": "calc.spec.model",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'calc' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
