"""`verify --load`'s reading of the weights: every tensor read once, one at a time, and checked.

The forward pass of a few tokens touches a few embedding rows; a NaN in any other row, or an
integer matrix where a float one belongs, would pass it. So every stored tensor is checked as it
is read, before anything is built: a parameter must have a float dtype the torch model computes
in (F32, F16, BF16, F64: complex, bool, integer and quantised dtypes are refused by name), and
every floating parameter must be finite; a buffer may hold ±inf, never NaN (Gemma 4's
Gemma4ClippableLinear stores its clipping bounds as buffers, ±inf where it does not clip). safetensors files are read through
`safe_open`, one tensor at a time, so checking needs memory for one tensor beside the state dict
being filled, never a second copy of the checkpoint. A dtype the installed safetensors cannot
hand to torch (F6_E2M3, ...) is one `GptcalcError` line naming the file and the tensor.
Imports torch: only `calc.checkpoint.load` imports this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from calc.checkpoint.report import CheckpointReport
from calc.checkpoint.sources import as_state_dict, load_torch_file
from calc.errors import GptcalcError
from calc.spec import hf

__all__ = ["MODEL_DTYPES", "Rejected", "read_checked"]

# The dtypes a parameter may be stored in: the torch model computes in them (or upcasts them exactly).
MODEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class Rejected(Exception):
    """A tensor whose dtype or values make the checkpoint fail verification (exit 1, not bad input)."""


def read_checked(report: CheckpointReport) -> dict[str, torch.Tensor]:
    """Every tensor of every weight file (index files skipped), each checked as it is read."""
    not_parameters = {t.name for t in (*report.buffers, *report.unknown)}
    state: dict[str, torch.Tensor] = {}
    for read in report.files:
        path = _local(report.source, read.path)
        if path.name.endswith(".json"):
            continue
        for name, tensor in _tensors(path):
            check(name, tensor, is_parameter=name not in not_parameters)
            state[name] = tensor
    return state


def check(name: str, tensor: torch.Tensor, is_parameter: bool = True) -> None:
    """A parameter's dtype must be one the model uses; every floating parameter must be finite, every
    floating buffer free of NaN (an infinite bound means no bound)."""
    if is_parameter and tensor.dtype not in MODEL_DTYPES:
        raise Rejected(f"{name}: dtype {_dtype(tensor)} is {_kind(tensor.dtype)}, not a float dtype the model "
                       f"computes in (F32, F16, BF16, F64)")
    if tensor.dtype in MODEL_DTYPES:
        bad = ~torch.isfinite(tensor) if is_parameter else torch.isnan(tensor)  # one byte per element
        if bool(bad.any()):
            first = [int(i) for i in bad.nonzero()[0]]
            raise Rejected(f"{name}: {int(bad.sum()):,} non-finite value(s) (NaN or inf), the first at {first}")


def _kind(dtype: torch.dtype) -> str:
    if dtype.is_complex:
        return "complex"
    if dtype == torch.bool:
        return "boolean"
    if dtype.is_floating_point:
        return "a quantised float (its scales are not applied: --load does not dequantise)"
    return "an integer dtype"


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of one weight file, read one at a time where the format allows."""
    if path.suffix != ".safetensors":
        yield from as_state_dict(load_torch_file(path), path).items()
        return
    from safetensors import SafetensorError, safe_open

    with safe_open(path, framework="pt") as handle:
        for name in handle.keys():
            try:
                tensor = handle.get_tensor(name)
            except (SafetensorError, TypeError, ValueError) as exc:
                raise GptcalcError(f"{path}: tensor {name!r}: {_unreadable(exc)}") from None
            yield name, tensor


def _unreadable(exc: Exception) -> str:
    """safetensors' reason, and what it means: a dtype this torch + safetensors cannot hold."""
    import safetensors

    return (f"cannot be read into torch ({hf.first_line(exc)}; safetensors {safetensors.__version__}, "
            f"torch {torch.__version__}); --load needs a dtype torch can hold, the header check does not")


def _local(source: str, path: str) -> Path:
    """A weight file on disk; a Hub file read over HTTP is downloaded (into the cache) first."""
    local = Path(path)
    if local.is_file():
        return local
    return hf.download(source, path.removeprefix(f"{source}/"))
