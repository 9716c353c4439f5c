"""A block stored once and applied at several depths: Zamba2's shared transformer blocks, as
transformers' Zamba2HybridLayer computes one application (modeling_zamba2).

    h = norm([x, embedding])                                    (B, T, 2·d): the stream and the token embedding
    y = attention(h), Q/K/V = h·W + adapter_i(h)                W_O writes d; the softmax scale the spec's
    y = mlp(norm(y)), gate|up = y·W + adapter_i(y)              no residual add inside the block
    x + y·W_i                                                   what the layer's Mamba2 norm reads

`adapter_i(h) = (h·A_i)·B_i` is application i's own rank-r adapter (i: its index among the layers
applying any copy, transformers' `layer_dic`), W_i its own d × d linear (the layer's `linear`); the
rest is the copy's, one set of tensors for every application. Each application is its own
attention over its own keys: it caches them under its layer's index, beside that layer's Mamba2
states, as transformers' cache keeps one entry per hybrid layer.

The copy's computation is the reference's Attention and MLP, unchanged: at each call an application
hands them the copy's weights with each adapted projection replaced by `_Adapted` (the projection
plus this application's adapter output, computed first so that the trace follows `shapes`' order:
the Q, K and V adapters, then the attention's steps; the MLP's adapter, then the MLP's).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from calc.checkpoint.names import Slot
from calc.errors import GptcalcError
from calc.parts.shared import Shared as SharedSpec, SharedBlock as SharedBlockSpec
from calc.reference.parts.attention import Attention
from calc.reference.parts.base import Part, Weights, build_weights
from calc.reference.parts.block import make_norm
from calc.reference.parts.mlp import MLP

__all__ = ["ROLE", "Application", "Copy", "attach"]

ROLE = "shared."  # the model-level roles of the copies' tensors: shared.{copy}.{role} (calc.checkpoint.slots)
_ATTENTION = ("q", "k", "v", "o")


class _Adapted:
    """A projection whose output this application's adapter adds to: W x + `extra`."""

    def __init__(self, base: nn.Module, extra: torch.Tensor) -> None:
        self.base, self.extra = base, extra

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.extra


class Copy(Part):
    """One stored copy's weights (norms, Q, K, V, W_O, the MLP and every application's adapters) and
    the computation they share; not a module of the state dict, whose names are the checkpoint's."""

    def __init__(self, spec: SharedBlockSpec, weights: Weights, layer: int) -> None:
        super().__init__()
        self.spec, self.layer = spec, layer  # the first layer applying it: where its tensors are named
        self.weights.update(weights)
        self.mlp = MLP(spec.mlp)

    def adapter(self, key: str, index: int, x: torch.Tensor, trace: Any) -> torch.Tensor:
        """Application `index`'s adapter beside projection `key` (q, k, v, mlp): (x·A)·B, each traced."""
        low = self.weights[f"{key}_adapter.{index}.0"](x)  # (B, T, r)
        trace(f"shared_{key}_adapter_down", low)
        out = self.weights[f"{key}_adapter.{index}.1"](low)  # (B, T, out)
        trace(f"shared_{key}_adapter_up", out)
        return out


class Application:
    """One layer's application of a copy: its adapters' index, its attention (the copy's weights,
    its own keys) and its d × d linear (the layer's own module). Not a module itself: every tensor it
    reads is registered once, where the checkpoint names it."""

    def __init__(self, spec: SharedSpec, copy: Copy, index: int, proj: nn.Module | None, n_positions: int) -> None:
        self.spec, self.copy, self.index, self.proj = spec, copy, index, proj
        self.attention = Attention(copy.spec.attention, n_positions, "concat")

    def __call__(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        """x plus what the block writes (after this layer's linear): the input of the Mamba2's norm."""
        copy, attention, trace, w = self.copy, self.attention, ctx.trace, self.copy.weights
        h = torch.cat((x, ctx.embeddings), dim=-1)  # (B, T, 2·d)
        trace("shared_concat", h)
        h = w["attn_in"](h)
        trace("shared_norm", h)
        adapted = {key: _Adapted(w[key], copy.adapter(key, self.index, h, trace))
                   for key in self.spec.adapters if key != "mlp"}
        attention.weights = Weights({key: w[key] for key in _ATTENTION}, **adapted)
        y = attention(h, ctx)  # (B, T, d)
        y = w["mlp_in"](y)
        trace("shared_mlp_norm", y)
        mlp = Weights(gate_up=w["gate_up"], down=w["down"])
        if "mlp" in self.spec.adapters:
            mlp["gate_up"] = _Adapted(w["gate_up"], copy.adapter("mlp", self.index, y, trace))
        y = copy.mlp.compute(mlp, y, trace)  # (B, T, d)
        if self.proj is not None:
            y = self.proj(y)
            trace("shared_proj", y)
        x = x + y
        trace("shared_add", x)
        return x


def attach(root: nn.Module, slots: dict[str, Slot], layers: list[Any], path: str, n_positions: int) -> dict[str, str]:
    """Build each copy's tensors at their checkpoint paths under `root` (`slots`: the table's model-level
    `shared.*` roles, under the first layer applying the copy; the layers, at `path`, must be placed
    first, since the paths run through them) and give every layer that applies a copy its
    `Application`, numbered in layer order as transformers numbers them. Returns the names under which
    transformers' in-memory state dict lists each copy again, once per later layer applying it (its
    tied modules), with the name each stands for."""
    by_copy: dict[str, dict[str, Slot]] = {}
    for role, slot in slots.items():
        name, _, rest = role[len(ROLE):].partition(".")
        by_copy.setdefault(name, {})[rest] = slot
    copies: dict[str, Copy] = {}
    tied: dict[str, str] = {}
    applications = 0
    for at, layer in enumerate(layers):
        applied, block = layer.block.shared, layer.block
        if applied is None:
            continue
        if block.attention is None or block.parallel or block.post_ln or block.pairs > 1 or block.shortcut is not None:
            raise GptcalcError("the torch reference applies a shared block before the mixer of a sequential pre-norm "
                               "layer with one (Zamba2's hybrid layer), not in this layer's form")
        copy = copies.get(applied.name)
        if copy is None:
            weights = build_weights(root, by_copy[applied.name], make_norm(lambda role, spec=applied.block: spec.norm),
                                    conv1d=False)
            copy = copies[applied.name] = Copy(applied.block, weights, at)
        else:
            first = f"{path}.{copy.layer}."
            tied.update({s.name.replace(first, f"{path}.{at}.", 1): s.name for s in by_copy[applied.name].values()})
        layer.shared = Application(applied, copy, applications, layer.own.get("shared_proj"), n_positions)
        applications += 1
    return tied
