"""One layer: its norms where the block puts them, its token mixer and its MLP (either may be absent).

Sequential pre-norm: x + mixer(norm(x)), then x + mlp(norm(x)); an `attn_out` / `mlp_out` norm
normalises the sublayer's output before the add (Gemma-2/3's sandwich, OLMo-2); `post_ln` moves
the two input norms after each add (OPT-350m); `parallel`: x + attn(norm(x)) + mlp(norm'(x)), with
one shared norm or two (GPT-J, NeoX, Falcon, Phi-2, Cohere); `residual_scale` multiplies each
sublayer's output (Granite). A layer without a mixer or without an MLP (Mamba2's, Nemotron-H's)
skips that half, its residual add included.

The token mixer's module comes from `MIXERS`, by the part's kind; each class says which tensor
roles are its own (`ROLES`), which sorts a layer's tensors between the mixer and the MLP.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from calc.checkpoint.names import Slot
from calc.errors import GptcalcError
from calc.reference.parts.attention import Attention
from calc.reference.parts.base import Part, build_weights, place
from calc.reference.parts.gated_deltanet import GatedDeltaNet
from calc.reference.parts.mamba import Mamba
from calc.reference.parts.mamba2 import Mamba2
from calc.reference.parts.mla import MLA
from calc.reference.parts.mlp import MLP
from calc.reference.parts.moe import MoE
from calc.reference.parts.norm import Norm
from calc.reference.parts.parallel import Parallel
from calc.reference.parts.short_conv import ShortConv
from calc.spec.model import NORM_COMPONENTS, Block

__all__ = ["MIXERS", "Layer", "make_norm"]

# Each token mixer's torch module, by the part's kind (`Block.attention.kind`).
MIXERS: dict[str, type[Part]] = {"attention": Attention, "mla": MLA, "mamba": Mamba, "mamba2": Mamba2,
                                 "gated_deltanet": GatedDeltaNet, "short_conv": ShortConv, "parallel": Parallel}
MIXER_ROLES = frozenset().union(*(mixer.ROLES for mixer in MIXERS.values()))
NORM_ROLES = {"attn_in", "attn_out", "mlp_in", "mlp_out"}


def make_norm(spec: Any) -> Any:
    """A factory for build_weights: each norm slot's module, shaped as its tensor."""
    return lambda role, slot, bias: Norm(spec(role), slot.shape)


def _base(role: str) -> str:
    return role.rsplit(".", 1)[0] if role.endswith((".weight", ".bias")) else role


def _home(slots: dict[str, Slot]) -> str:
    """The longest module path above every tensor of a part ("" when they share none: OPT's fc1, fc2)."""
    paths = []
    for slot in slots.values():
        holder = slot.name.rpartition(".")[0]
        paths.append(holder if slot.kind in ("param", "buffer") else holder.rpartition(".")[0])
    common = paths[0].split(".") if paths else []
    for path in paths[1:]:
        parts = path.split(".")
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return ".".join(p for p in common if p)


# Options counted, cached and shaped, not yet computed by the reference (Gemma-3n, Gemma-4), by name.
_UNBUILT = (("attention", "v_norm", "a V-norm"), ("attention", "kv_shared", "K and V shared between layers"),
            ("attention", "k_eq_v", "values equal to keys"), ("attention", "augment", "AltUp, LAuReL or per-layer inputs"),
            ("mlp", "sparsity", "activation sparsity"), ("mlp", "shared_norms", "a MoE beside its MLP"),
            ("mlp", "router_scale", "a scaled router"))


def _refuse_unbuilt(block: Block) -> None:
    for part, field, what in _UNBUILT:
        if getattr(getattr(block, part), field, None):
            raise GptcalcError(f"the torch reference does not implement {what} ({part} {field}) yet")


class Layer(nn.Module):
    def __init__(self, block: Block, slots: dict[str, Slot], lay: dict[str, Any], n_positions: int) -> None:
        super().__init__()
        if block.pairs > 1 or block.shortcut is not None:  # LongCat-Flash: counted, cached, shaped; no module yet
            raise GptcalcError("the torch reference does not implement layers of several mixer + MLP pairs "
                               "or a shortcut MoE yet")
        self.block = block
        norms = {r: s for r, s in slots.items() if _base(r) in NORM_ROLES}
        mixer = {r: s for r, s in slots.items() if _base(r) in MIXER_ROLES}
        by_part = {"attn": mixer, "mlp": {r: s for r, s in slots.items() if r not in mixer and r not in norms}}
        self.parts: dict[str, Part] = {}
        if block.attention is not None:
            if block.attention.kind not in MIXERS:  # KDA, lightning: counted, cached, shaped; no torch module yet
                raise GptcalcError(f"the torch reference does not implement the {block.attention.kind} mixer yet")
            _refuse_unbuilt(block)
            self.parts["attn"] = MIXERS[block.attention.kind].of(block, n_positions, lay)
        if block.mlp is not None:
            self.parts["mlp"] = MoE(block.mlp, lay.get("experts_order", "out_in")) if block.mlp.kind == "moe" \
                else MLP(block.mlp)
        for name, part in self.parts.items():
            home = _home(by_part[name])
            place(self, home or name, part)
            relative = {r: replace(s, name=s.name[len(home) + 1:]) for r, s in by_part[name].items()} if home \
                else by_part[name]
            part.weights.update(build_weights(part if home else self, relative,
                                              make_norm(lambda role, part=part: part.norm_spec(role)),
                                              lay.get("conv1d", False)))
        self.norms = build_weights(self, norms, make_norm(lambda role: block.norm), lay.get("conv1d", False))
        for position in block.norms:  # a norm with no parameters (OLMo-1's) still normalises
            self.norms.setdefault(position, Norm(block.norm, ()))
        self.roles = {"attn_norm": "attn_in", "mlp_norm": "mlp_in"}

    def part(self, role: str) -> nn.Module:
        return self.parts.get(role) or self.norms[self.roles.get(role, role)]

    def _norm(self, position: str, x: torch.Tensor, trace: Any) -> torch.Tensor:
        """The norm at `position` (traced under its `shapes` step id), or x when the block has none there."""
        norm = self.norms.get(position)
        if norm is None:
            return x
        y = norm(x)
        trace(NORM_COMPONENTS[position], y)
        return y

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        b, trace = self.block, ctx.trace
        scale = b.residual_scale if b.residual_scale is not None else 1.0
        if b.parallel:  # the spec gives a parallel block both sublayers
            attn, mlp = self.parts["attn"], self.parts["mlp"]
            h = self._norm("attn_in", x, trace)  # (B, T, d)
            a = self._norm("attn_out", attn(h, ctx), trace) * scale
            m = mlp(self._norm("mlp_in", x, trace) if "mlp_in" in self.norms else h, ctx)
            x = x + a + self._norm("mlp_out", m, trace) * scale
            trace("residual", x)
            return x
        for name, first, last in (("attn", "attn_in", "attn_out"), ("mlp", "mlp_in", "mlp_out")):
            part = self.parts.get(name)
            if part is None:  # a mixer-only or MLP-only layer
                continue
            if b.post_ln:
                x = x + part(x, ctx)
                trace(f"{name}_residual", x)
                x = self._norm(first, x, trace)
                continue
            x = x + self._norm(last, part(self._norm(first, x, trace), ctx), trace) * scale  # (B, T, d)
            trace(f"{name}_residual", x)
        return x
