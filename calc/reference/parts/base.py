"""Weight holders placed at their Hugging Face paths, and the compute modules that read them by role.

Every tensor of a spec comes from `calc.checkpoint.names.tensor_table` (name, shape, kind): a linear
layer becomes a `Linear` (GPT-2: `Conv1D`), a norm a `Norm`, an embedding an `Embedding`, anything
else a bare parameter or buffer on the module at its path. A part's compute module (`Part`) sits
at the common path of its tensors (`self_attn`, `mlp`) when there is one, so a state dict holds
exactly the checkpoint's names; it reaches its tensors through `self.weights[role]`, a plain dict,
so they are registered (and named) once, where the checkpoint has them.

Construction does no tensor work beyond allocating: no initialisation on the meta device (torch's
init functions would pull in its Python decompositions there, +1.5 s for nothing).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from calc.checkpoint.names import Slot

__all__ = ["Conv1D", "Embedding", "Linear", "Part", "Trace", "Weights", "container", "no_trace", "place"]

Trace = Callable[[str, torch.Tensor], None]


def no_trace(name: str, tensor: torch.Tensor) -> None:
    """The default trace: record nothing."""


class Linear(nn.Linear):
    """nn.Linear, weight [out, in], without the constructor's initialisation."""

    def reset_parameters(self) -> None:
        pass


class Conv1D(nn.Module):
    """GPT-2's linear layer: y = x @ W + b with W stored [in, out] (transposed vs nn.Linear)."""

    def __init__(self, n_in: int, n_out: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight
        return y if self.bias is None else y + self.bias


class Embedding(nn.Module):
    """A [rows, width] lookup table (nn.Embedding without its constructor-time init)."""

    def __init__(self, rows: int, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, width))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


def container(root: nn.Module, path: str) -> nn.Module:
    """The module at `path` under `root`, creating empty containers on the way."""
    module = root
    for name in filter(None, path.split(".")):
        if name not in module._modules:
            module.add_module(name, nn.Module())
        module = module._modules[name]
    return module


def place(root: nn.Module, path: str, module: nn.Module) -> nn.Module:
    """Register `module` at `path` under `root` (its parents created if needed)."""
    parent, _, leaf = path.rpartition(".")
    container(root, parent).add_module(leaf, module)
    return module


class Weights(dict):
    """role -> weight holder (Linear, Conv1D, Norm, Embedding) or (module, attribute) of a bare tensor."""

    def tensor(self, role: str) -> torch.Tensor | None:
        held = self.get(role)
        if held is None:
            return None
        return getattr(*held) if isinstance(held, tuple) else held.weight


def build_weights(root: nn.Module, slots: dict[str, Slot], norm_factory: Callable[[str, Slot, Slot | None], nn.Module],
                  conv1d: bool) -> Weights:
    """Create every slot's holder under `root` at its path; return them by role (without .weight/.bias).
    A "linear" slot whose weight is no matrix (a convolution's [out, in, k, k]: Step-3.7's downsamplers)
    is held as bare tensors, which the tower's own forward convolves with."""
    weights = Weights()
    for role, slot in slots.items():
        base, _, part = role.rpartition(".") if role.endswith((".weight", ".bias")) else (role, "", "")
        path, _, leaf = slot.name.rpartition(".")
        matrix = f"{base}.weight" in slots and len(slots[f"{base}.weight"].shape) == 2
        if slot.kind == "linear" and part == "weight" and matrix:
            n_out, n_in = slot.shape[::-1] if conv1d else slot.shape
            bias = f"{base}.bias" in slots
            weights[base] = place(root, path, Conv1D(n_in, n_out, bias) if conv1d else Linear(n_in, n_out, bias))
        elif slot.kind == "embedding":
            weights[base] = place(root, path, Embedding(*slot.shape))
        elif slot.kind == "norm" and (part == "weight" or f"{base}.weight" not in slots):
            weights[base] = place(root, path, norm_factory(base, slot, slots.get(f"{base}.bias")))
        elif slot.kind in ("param", "buffer") or slot.kind == "linear" and not matrix:
            holder = container(root, path)
            tensor = torch.empty(slot.shape)
            if slot.kind == "buffer":
                holder.register_buffer(leaf, tensor)
            else:
                holder.register_parameter(leaf, nn.Parameter(tensor))
            weights[role] = (holder, leaf)
    return weights


def initialise(root: nn.Module, slots: dict[str, Slot]) -> None:
    """Random weights for a model built for real (not from a checkpoint): N(0, 0.02) matrices and
    embeddings, norm scales at their neutral value, zero biases and buffers."""
    with torch.no_grad():
        for slot in slots.values():
            tensor = root.get_parameter(slot.name) if slot.kind != "buffer" else root.get_buffer(slot.name)
            if slot.init == "normal":
                nn.init.normal_(tensor, mean=0.0, std=0.02)
            else:
                tensor.fill_(1.0 if slot.init == "ones" else 0.0)


class Part(nn.Module):
    """A part's compute module: its weights by role, and `part(role)` for what tests look up."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = Weights()
        self.roles: dict[str, str] = {}  # a test's role name -> our role

    def part(self, role: str) -> Any:
        return self.weights[self.roles.get(role, role)]
