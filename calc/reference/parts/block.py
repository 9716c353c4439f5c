"""One layer: its norms where the block puts them, its attention part and its MLP part.

Sequential pre-norm: x + attn(norm(x)), then x + mlp(norm(x)); an `attn_out` / `mlp_out` norm
normalises the sublayer's output before the add (Gemma-2/3's sandwich, OLMo-2); `post_ln` moves
the two input norms after each add (OPT-350m); `parallel`: x + attn(norm(x)) + mlp(norm'(x)), with
one shared norm or two (GPT-J, NeoX, Falcon, Phi-2, Cohere); `residual_scale` multiplies each
sublayer's output (Granite).
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
from calc.reference.parts.mla import MLA
from calc.reference.parts.mlp import MLP
from calc.reference.parts.moe import MoE
from calc.reference.parts.norm import Norm
from calc.spec.model import NORM_COMPONENTS, Block

__all__ = ["Layer", "make_norm"]

ATTENTION_ROLES = {"q", "k", "v", "qkv", "o", "q_norm", "k_norm", "sinks", "attn_gate", "q_a", "q_a_norm", "q_b",
                   "kv_a", "kv_a_norm", "kv_b"}
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


class Layer(nn.Module):
    def __init__(self, block: Block, slots: dict[str, Slot], lay: dict[str, Any], n_positions: int) -> None:
        super().__init__()
        self.block = block
        attention = {r: s for r, s in slots.items() if _base(r) in ATTENTION_ROLES}
        norms = {r: s for r, s in slots.items() if _base(r) in NORM_ROLES}
        mlp = {r: s for r, s in slots.items() if r not in attention and r not in norms}
        a = block.attention
        gate_in_q = getattr(a, "output_gate", False) and lay.get("q_gate")  # Qwen3-Next's W_G inside q_proj
        if a is None or a.kind not in ("attention", "mla") or block.mlp is None or gate_in_q:
            what = "a layer without attention or without an MLP" if a is None or block.mlp is None else (
                "an attention output gate stored inside q_proj" if a.kind == "attention" else f"the {a.kind} mixer")
            raise GptcalcError(f"the torch reference does not implement {what} yet")
        self.parts: dict[str, Part] = {
            "attn": MLA(a, n_positions) if a.kind == "mla" else Attention(a, n_positions, lay.get("qkv_order", "concat")),
            "mlp": MoE(block.mlp, lay.get("experts_order", "out_in")) if block.mlp.kind == "moe" else MLP(block.mlp),
        }
        for (name, part), part_slots in zip(self.parts.items(), (attention, mlp)):
            home = _home(part_slots)
            place(self, home or name, part)
            relative = {r: replace(s, name=s.name[len(home) + 1:]) for r, s in part_slots.items()} if home else part_slots
            part.weights.update(build_weights(part if home else self, relative,
                                              make_norm(self._qk_norm), lay.get("conv1d", False)))
        self.norms = build_weights(self, norms, make_norm(lambda role: block.norm), lay.get("conv1d", False))
        for position in block.norms:  # a norm with no parameters (OLMo-1's) still normalises
            self.norms.setdefault(position, Norm(block.norm, ()))
        self.roles = {"attn_norm": "attn_in", "mlp_norm": "mlp_in"}

    def _qk_norm(self, role: str) -> Any:
        a = self.block.attention
        return a.norm if a.kind == "mla" else a.qk_norm.norm

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
        b, trace, attn, mlp = self.block, ctx.trace, self.parts["attn"], self.parts["mlp"]
        scale = b.residual_scale if b.residual_scale is not None else 1.0
        if b.post_ln:
            x = x + attn(x, ctx)
            trace("attn_residual", x)
            x = self._norm("attn_in", x, trace)
            x = x + mlp(x, ctx)
            trace("mlp_residual", x)
            return self._norm("mlp_in", x, trace)
        h = self._norm("attn_in", x, trace)  # (B, T, d)
        a = self._norm("attn_out", attn(h, ctx), trace) * scale
        if b.parallel:
            m = mlp(self._norm("mlp_in", x, trace) if "mlp_in" in self.norms else h, ctx)
            x = x + a + self._norm("mlp_out", m, trace) * scale
            trace("residual", x)
            return x
        x = x + a
        trace("attn_residual", x)
        h = self._norm("mlp_in", x, trace)
        x = x + self._norm("mlp_out", mlp(h, ctx), trace) * scale
        trace("mlp_residual", x)
        return x
