"""One layer: its norms where the block puts them, its token mixer and its MLP (either may be absent).

Sequential pre-norm: x + mixer(norm(x)), then x + mlp(norm(x)); an `attn_out` / `mlp_out` norm
normalises the sublayer's output before the add (Gemma-2/3's sandwich, OLMo-2); `post_ln` moves
the two input norms after each add (OPT-350m); `parallel`: x + attn(norm(x)) + mlp(norm'(x)), with
one shared norm or two (GPT-J, NeoX, Falcon, Phi-2, Cohere); `residual_scale` multiplies each
sublayer's output (Granite); `normed_residual` (MiniMax) adds alpha·norm(x) + beta·f(norm(x)), the
residual taken after the norm. A layer without a mixer or without an MLP (Mamba2's, Nemotron-H's)
skips that half, its residual add included. A layer of several pairs (LongCat-Flash) runs them in
sequence, each pair's modules at its own paths; its shortcut reads the first MLP's normed input and
is added at the end. DeepSeek-V4's layer runs on n copies of the residual stream: each sublayer reads
their hyper-connection collapse and writes its output back into all of them (`hyper`).

The token mixer's module comes from `MIXERS`, by the part's kind; each class says which tensor
roles are its own (`ROLES`), which sorts a layer's tensors between the mixer and the MLP.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from calc.checkpoint.names import Slot
from calc.errors import GptcalcError
from calc.reference.parts import augment, hyper
from calc.reference.parts.attention import Attention
from calc.reference.parts.base import Part, build_weights, place
from calc.reference.parts.compressed import CompressedAttention
from calc.reference.parts.gated_deltanet import GatedDeltaNet
from calc.reference.parts.kda import KimiDeltaAttention
from calc.reference.parts.lightning import Lightning
from calc.reference.parts.mamba import Mamba
from calc.reference.parts.mamba2 import Mamba2
from calc.reference.parts.mla import MLA
from calc.reference.parts.mlp import ACTIVATIONS, MLP
from calc.reference.parts.moe import MoE
from calc.reference.parts.norm import Norm
from calc.reference.parts.parallel import Parallel
from calc.reference.parts.short_conv import ShortConv
from calc.spec.model import NORM_COMPONENTS, Block

__all__ = ["MIXERS", "Layer", "make_norm"]

# Each token mixer's torch module, by the part's kind (`Block.attention.kind`).
MIXERS: dict[str, type[Part]] = {"attention": Attention, "mla": MLA, "compressed_attention": CompressedAttention,
                                 "mamba": Mamba, "mamba2": Mamba2,
                                 "gated_deltanet": GatedDeltaNet, "kda": KimiDeltaAttention, "lightning": Lightning,
                                 "short_conv": ShortConv, "parallel": Parallel}
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


# What a layer holds itself, beside its sublayers: the per-layer input sublayer after the MLP (Gemma-3n,
# Gemma-4), Gemma-4's layer_scalar (a buffer its output is multiplied by), Zamba2's linear after the shared
# block it applies and, by prefix, Gemma-3n's AltUp and LAuReL and DeepSeek-V4's hyper-connection mixes.
LAYER_ROLES = {"ple_gate", "ple_proj", "ple_norm", "layer_scalar", "shared_proj"}
LAYER_PREFIXES = ("altup.", "laurel.", "hc_attn.", "hc_mlp.")


class Layer(nn.Module):
    def __init__(self, block: Block, slots: dict[str, Slot], lay: dict[str, Any], n_positions: int) -> None:
        super().__init__()
        self.block = block
        own = {r: s for r, s in slots.items() if _base(r) in LAYER_ROLES or r.startswith(LAYER_PREFIXES)}
        pairs, shortcut = _groups(block, {r: s for r, s in slots.items() if r not in own})
        # each pair's parts and norms; the first pair's are `parts` and `norms`, what tests look up
        self.pairs = [self._pair(block, group, lay, n_positions, f"{i}" if len(pairs) > 1 else "")
                      for i, group in enumerate(pairs)]
        self.parts, self.norms = self.pairs[0]
        if block.shortcut is not None:  # with the first pair, whose MLP input it reads
            self.parts["shortcut"] = self._attach(_mlp_part(block.shortcut, lay), shortcut, lay, "shortcut")
        self.roles = {"attn_norm": "attn_in", "mlp_norm": "mlp_in"}
        self.own = build_weights(self, own, make_norm(lambda role: block.norm), False)
        if "laurel.left" in self.own and "altup.predict" not in self.own:
            raise GptcalcError("the torch reference computes LAuReL (laurel_rank) only in Gemma-3n's AltUp layer "
                               "(altup_inputs), as transformers builds it")
        # the per-layer input's activation: the config's hidden_activation, the MLP's (the spec has no other)
        self.ple_act = ACTIVATIONS[block.mlp.activation] if "ple_gate" in self.own else None
        self.shared: Any = None  # the shared block it applies (Zamba2): set by calc.reference.parts.shared.attach

    def _pair(self, block: Block, slots: dict[str, Slot], lay: dict[str, Any], n_positions: int,
              tag: str) -> tuple[dict[str, Part], dict[str, Any]]:
        """One mixer + MLP pair's modules, each at the common path of its tensors, and its norms."""
        norms = {r: s for r, s in slots.items() if _base(r) in NORM_ROLES}
        mixer = {r: s for r, s in slots.items() if _base(r) in MIXER_ROLES}
        by_part = {"attn": mixer, "mlp": {r: s for r, s in slots.items() if r not in mixer and r not in norms}}
        parts: dict[str, Part] = {}
        if block.attention is not None:
            parts["attn"] = MIXERS[block.attention.kind].of(block, n_positions, lay)
        if block.mlp is not None:
            parts["mlp"] = _mlp_part(block.mlp, lay, block.norm)
        for name, part in parts.items():
            self._attach(part, by_part[name], lay, name + tag)
        built = build_weights(self, norms, make_norm(lambda role: block.norm), lay.get("conv1d", False))
        for position in block.norms:  # a norm with no parameters (OLMo-1's) still normalises
            built.setdefault(position, Norm(block.norm, ()))
        return parts, built

    def _attach(self, part: Part, slots: dict[str, Slot], lay: dict[str, Any], name: str) -> Part:
        """Place `part` at the common path of its tensors (or at `name`) and build its weights there."""
        home = _home(slots)
        place(self, home or name, part)
        relative = {r: replace(s, name=s.name[len(home) + 1:]) for r, s in slots.items()} if home else slots
        part.weights.update(build_weights(part if home else self, relative,
                                          make_norm(lambda role, part=part: part.norm_spec(role)),
                                          lay.get("conv1d", False)))
        return part

    def part(self, role: str) -> nn.Module:
        return self.parts.get(role) or self.norms[self.roles.get(role, role)]

    def _norm(self, position: str, x: torch.Tensor, trace: Any, norms: dict[str, Any] | None = None) -> torch.Tensor:
        """The norm at `position` (traced under its `shapes` step id), or x when the block has none there."""
        norm = (self.norms if norms is None else norms).get(position)
        if norm is None:
            return x
        y = norm(x)
        trace(NORM_COMPONENTS[position], y)
        return y

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        if "altup.predict" in self.own:
            return self._alternating(x, ctx)
        if self.block.hyper is not None:
            return self._hyper(x, ctx)
        x = self._sublayers(x, ctx)
        if "ple_gate" in self.own:
            x = x + self._per_layer_input(x, ctx)
        scalar = self.own.tensor("layer_scalar")
        return x if scalar is None else x * scalar

    def _per_layer_input(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Gemma's per-layer input sublayer: norm(W_proj(act(W_gate x) · this layer's slice)), [B, T, d]."""
        h = self.ple_act(self.own["ple_gate"](x)) * ctx.per_layer[:, :, ctx.layer]  # (B, T, p)
        ctx.trace("ple_gate", h)
        h = self.own["ple_proj"](h)
        ctx.trace("ple_proj", h)
        return self.own["ple_norm"](h)

    def _alternating(self, streams: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Gemma-3n's layer (Gemma3nTextDecoderLayer) on AltUp's streams [n, B, T, d]: the sandwich-normed
        attention and MLP run on prediction 0, LAuReL beside attention ((a + attn + laurel) / √2 is
        the residual), the correction spreads the change to every stream, and the per-layer input of
        the corrected stream 0 (times correct_output_scale) is added to the other streams."""
        w, trace = self.own, ctx.trace
        predictions = augment.predict(w, streams, trace)
        a = predictions[0]
        h = self._norm("attn_in", a, trace)
        beside = augment.laurel(w, h, trace) if "laurel.left" in w else None
        x = a + self._norm("attn_out", self.parts["attn"](h, ctx), trace)
        x = x if beside is None else (x + beside) / math.sqrt(2)
        trace("attn_residual", x)
        x = x + self._norm("mlp_out", self.parts["mlp"](self._norm("mlp_in", x, trace), ctx), trace)
        trace("mlp_residual", x)
        corrected = augment.correct(w, predictions, x, trace)
        if "ple_gate" not in w:
            return corrected
        scale = w.tensor("altup.scale")
        first = (corrected[0].type_as(scale) * scale).type_as(corrected)
        return torch.cat((corrected[:1], corrected[1:] + self._per_layer_input(first, ctx)))

    def _hyper(self, streams: torch.Tensor, ctx: Any) -> torch.Tensor:
        """DeepSeek-V4's layer (DeepseekV4DecoderLayer) on the residual copies [B, T, n, d]: before each
        pre-normed sublayer its mix collapses the copies into its input, after it spreads its output
        back into them (calc.reference.parts.hyper)."""
        spec, eps = self.block.hyper, self.block.norm.eps
        for name, first, mix in (("attn", "attn_in", "hc_attn"), ("mlp", "mlp_in", "hc_mlp")):
            post, comb, h = hyper.collapse(self.own, mix, spec, streams, eps, ctx.trace)
            streams = hyper.expand(post, comb, self.parts[name](self._norm(first, h, ctx.trace), ctx), streams)
            ctx.trace(f"{mix}_write", streams)
        return streams

    def _sublayers(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        b, trace = self.block, ctx.trace
        # a shared block's output joins what the mixer's norm reads, not the residual stream (Zamba2)
        inputs = {"attn": self.shared(x, ctx)} if self.shared is not None else {}
        if len(self.pairs) > 1 or "shortcut" in self.parts:
            return self._sequence(x, ctx)
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
            ctx.residual = x  # Gemma-4's router and experts read the stream before the MLP's norm
            h = self._norm(first, inputs.get(name, x), trace)
            if b.normed_residual is not None:  # MiniMax: alpha·norm(x) + beta·f(norm(x))
                alpha, beta = b.normed_residual.mixer if name == "attn" else b.normed_residual.mlp
                x = h * alpha + part(h, ctx) * beta
            else:
                x = x + self._norm(last, part(h, ctx), trace) * scale  # (B, T, d)
            trace(f"{name}_residual", x)
        return x

    def _sequence(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Pre-norm pairs in sequence, each attention keeping its own cache entry (layer, pair); the
        shortcut reads the first MLP's normed input and joins the residual stream at the end."""
        layer, trace, carried = ctx.layer, ctx.trace, None
        scale = self.block.residual_scale if self.block.residual_scale is not None else 1.0
        for i, (parts, norms) in enumerate(self.pairs):
            ctx.layer = (layer, i) if len(self.pairs) > 1 else layer
            h = parts["attn"](self._norm("attn_in", x, trace, norms), ctx)
            x = x + self._norm("attn_out", h, trace, norms) * scale  # (B, T, d)
            trace("attn_residual", x)
            h = self._norm("mlp_in", x, trace, norms)
            if "shortcut" in parts:
                carried = parts["shortcut"](h, ctx)
            x = x + self._norm("mlp_out", parts["mlp"](h, ctx), trace, norms) * scale
            trace("mlp_residual", x)
        ctx.layer = layer
        if carried is not None:
            x = x + carried * scale
            trace("shortcut_residual", x)
        return x


def _mlp_part(spec: Any, lay: dict[str, Any], norm: Any = None) -> Part:
    return MoE(spec, lay.get("experts_order", "out_in"), norm) if spec.kind == "moe" else MLP(spec)


def _groups(block: Block, slots: dict[str, Slot]) -> tuple[list[dict[str, Slot]], dict[str, Slot]]:
    """Each pair's slots and the shortcut's, their roles without the `0.` / `shortcut.` prefix
    (calc.checkpoint.slots.block_slots); one group of every slot for a plain layer."""
    if block.pairs == 1 and block.shortcut is None:
        return [slots], {}

    def under(prefix: str) -> dict[str, Slot]:
        return {r[len(prefix):]: s for r, s in slots.items() if r.startswith(prefix)}

    return [under(f"{i}.") for i in range(block.pairs)], under("shortcut.")
