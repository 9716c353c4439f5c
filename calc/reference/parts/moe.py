"""Mixture of experts: the router's choice, the routed experts, the shared expert.

Routing, as the MoE part describes it (a pick past the routed experts is a zero-computation expert,
LongCat-Flash's, which gives back its rows times their weights): scores are the softmax (Mixtral, Qwen-MoE, OLMoE, gpt-oss,
DeepSeek-V2), the sigmoid (DeepSeek-V3, GLM-4.5) or sqrt(softplus) (DeepSeek-V4) of the router's logits, computed in float32;
DeepSeek-V4's hash-routed layers take their experts from a token-id table (tid2eid) and weigh them by those scores;
Laguna's router logits may be soft-capped first. DeepSeek-V3's e_score_correction_bias (a buffer;
Laguna's, a frozen parameter) shifts which experts are chosen but not their
weights; with n_group > 1 only experts of the topk_group best groups (scored by their best expert,
or their best two) can be chosen; the top_k weights are renormalised if `norm_topk` (gpt-oss's
softmax over the top_k logits is the same thing) and scaled by `routed_scale`; Llama-4 weighs
the expert's input instead of its output. Phi-3.5-MoE's sparsemixer picks its two experts one after
the other, each weighted by a softmax over the experts close to it (see `sparsemixer`).

Experts are transformers 5's fused tensors: gate_up [E, 2f, d] (gate rows first) and down [E, d, f],
or [E, d, 2f] and [E, f, d] ("in_out": Llama-4, gpt-oss, whose gate and up columns alternate), or
DBRX's gate, up and down as three [E·f, d] matrices ("stacked_rows").
gpt-oss's expert (and MiniMax-M3's, gate and up rows apart) is a clamped SwiGLU: gate clamped above at the
limit, up to ±limit, gate · sigmoid(1.702 · gate) · (up + 1); it, Step-3.7's and DeepSeek-V4's clamps are the
dense MLP's (`gated`).
Qwen2-MoE's shared expert is gated by sigmoid(shared_expert_gate x).

Gemma-4's MoE beside its dense MLP (`shared_norms`, `router_scale`; Gemma4TextDecoderLayer): the
dense MLP (the shared expert) reads the layer's normed input, but the router and the experts read
the residual stream before that norm (`ctx.residual`): the router an RMSNorm of it without a scale,
times router.scale and d^-1/2, each picked expert's weight times its per_expert_scale; the experts
their own norm of it (pre_feedforward_layernorm_2); the two outputs are normed apart and summed.
"""

from __future__ import annotations

from typing import Any

import torch

from calc.errors import GptcalcError
from calc.parts.moe import MoE as MoESpec
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.base import Part
from calc.reference.parts.mlp import ACTIVATIONS, MLP, gated
from calc.reference.parts.norm import Norm

__all__ = ["MoE"]

# Each scoring's scores from the router's float32 logits; sqrt(softplus) is DeepSeek-V4's
SCORES = {"softmax": lambda logits: logits.softmax(dim=-1), "sigmoid": torch.sigmoid,
          "sqrtsoftplus": lambda logits: torch.nn.functional.softplus(logits).sqrt()}


def sparsemixer(logits: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Phi-3.5-MoE's top-2 choice at inference (transformers' sparsemixer, not training): the best
    expert, weighted by the softmax over the experts within 2·eps (relative) of it; then the best of
    the others, weighted likewise among the rest."""
    picks, weights, masked = [], [], logits
    for _ in range(2):
        best, index = masked.max(dim=-1, keepdim=True)
        far = (best - logits) / logits.abs().clamp(min=best) > 2 * eps
        weights.append(masked.masked_fill(far, float("-inf")).softmax(dim=-1).gather(-1, index))
        picks.append(index)
        masked = masked.scatter(-1, index, float("-inf"))
    return torch.cat(picks, dim=-1), torch.cat(weights, dim=-1)


class MoE(Part):
    def __init__(self, spec: MoESpec, experts_order: str, norm: NormSpec | None = None) -> None:
        super().__init__()
        self.norm = norm  # the layer's norm: Gemma-4's norms beside the experts
        if spec.scoring == "sparsemixer" and spec.top_k != 2:
            raise GptcalcError(f"MoE routing 'sparsemixer' with top_k {spec.top_k} is not implemented by the torch "
                               "reference (Phi-3.5-MoE's is top-2)")
        self.spec, self.order = spec, experts_order
        self.act = ACTIVATIONS[spec.activation]
        self.shared = MLP(spec.shared, "shared.", "shared_mlp") if spec.shared is not None else None
        self.roles = {"router": "router"}

    def norm_spec(self, role: str) -> NormSpec:
        return self.norm

    def _router_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the router reads: x, or Gemma-4's RMSNorm of it (no scale) times router.scale and d^-1/2."""
        scale = self.weights.tensor("router_scale")
        if scale is None:
            return x
        unit = NormSpec.model_construct(kind="rmsnorm", weight=False, bias=False, eps=self.norm.eps)
        return Norm(unit, ())(x) * scale * x.shape[-1] ** -0.5

    def route(self, x: torch.Tensor, trace: Any = None, ids: torch.Tensor | None = None) -> tuple[
            torch.Tensor, torch.Tensor]:
        """(top_k expert indices, their weights) for tokens x [B, T, d] (or [N, d]) with ids [B, T]."""
        s = self.spec
        logits = torch.nn.functional.linear(self._router_input(x).float(), self.weights["router"].weight.float(),
                                            None if self.weights["router"].bias is None else self.weights["router"].bias.float())
        if trace is not None:
            trace("router", logits)  # (B, T, E)
        logits = logits.reshape(-1, s.choices)
        if s.router_softcap is not None:  # Laguna: the logits soft-capped before the sigmoid
            logits = torch.tanh(logits / s.router_softcap) * s.router_softcap
        if s.scoring == "sparsemixer":
            return sparsemixer(logits, s.jitter_eps)
        scores = SCORES[s.scoring](logits)
        if s.hash_vocab is not None:  # DeepSeek-V4's first layers: the experts from the token-id table
            return self._weighted(scores, self.weights.tensor("hash_table")[ids.reshape(-1)].long())
        choice = scores
        bias = self.weights.tensor("score_bias")
        if bias is not None:
            choice = scores + bias.float()
        if s.n_group > 1:
            groups = choice.view(-1, s.n_group, s.n_experts // s.n_group)
            group_scores = groups.topk(2, dim=-1)[0].sum(-1) if s.group_score == "top2_sum" else groups.max(-1).values
            keep = torch.zeros_like(group_scores).scatter_(1, group_scores.topk(s.topk_group, dim=-1)[1], 1.0)
            mask = keep.unsqueeze(-1).expand_as(groups).reshape(-1, s.n_experts).bool()
            choice = choice.masked_fill(~mask, float("-inf"))
        return self._weighted(scores, choice.topk(s.top_k, dim=-1)[1])

    def _weighted(self, scores: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the picks [N, k], their weights): their scores, renormalised (`norm_topk`), scaled."""
        s = self.spec
        weights = scores.gather(1, index)
        if s.norm_topk:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + (0.0 if s.scoring == "softmax" else 1e-20))
        if (expert_scale := self.weights.tensor("router_expert_scale")) is not None:  # Gemma-4's per_expert_scale
            weights = weights * expert_scale.float()[index]
        return index, weights * s.routed_scale

    def matrices(self, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert e's gate_up and down matrices as its layout stores them; DBRX's stacked rows (w1, v1,
        w2, each [E·f, d]) as gate_up [2f, d] and down [d, f]."""
        w = self.weights
        if self.order != "stacked_rows":
            return w.tensor("experts.gate_up")[e], w.tensor("experts.down")[e]
        rows = slice(e * self.spec.d_ff, (e + 1) * self.spec.d_ff)
        gate_up = torch.cat((w.tensor("experts.gate")[rows], w.tensor("experts.up")[rows]))
        return gate_up, w.tensor("experts.down")[rows].T

    def expert(self, e: int, h: torch.Tensor, keep: dict[str, list[torch.Tensor]] | None = None) -> torch.Tensor:
        """Expert e on its rows h [n_e, d]; `keep` collects each step's tensor, for the trace."""
        s, w = self.spec, self.weights
        keep = keep if keep is not None else {}
        in_out = self.order.startswith("in_out")
        gate_up, down = self.matrices(e)
        y = h @ gate_up if in_out else torch.nn.functional.linear(h, gate_up)
        if (bias := w.tensor("experts.gate_up_bias")) is not None:
            y = y + bias[e]
        if not s.gated:
            keep.setdefault("experts_up", []).append(y)
            act = self.act(y)
        else:
            gate, up = (y[..., ::2], y[..., 1::2]) if self.order == "in_out_interleaved" else y.chunk(2, dim=-1)
            keep.setdefault("experts_gate", []).append(gate)
            keep.setdefault("experts_up", []).append(up)
            act = gated(self.act, gate, up, s)
        keep.setdefault("experts_act", []).append(act)
        out = act @ down if in_out else torch.nn.functional.linear(act, down)
        if (bias := w.tensor("experts.down_bias")) is not None:
            out = out + bias[e]
        keep.setdefault("experts_down", []).append(out)
        return out

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        B, T, d = x.shape
        trace, beside = ctx.trace, self.spec.shared_norms  # Gemma-4: router and experts read the un-normed stream
        index, weights = self.route(ctx.residual if beside else x, trace, ctx.ids)
        trace("router_topk", index.view(B, T, -1))  # (B, T, k)
        routed = x
        if beside:
            routed = self.weights["experts_norm"](ctx.residual)
            trace("experts_norm", routed)
        out = self._experts(routed.reshape(-1, d), index, weights, trace).view(B, T, d)
        trace("experts_combine", out)
        if self.shared is None:
            return out
        shared = self.shared.compute(self.weights, x, trace)
        if "shared_gate" in self.weights:
            gate = torch.sigmoid(self.weights["shared_gate"](x))  # (B, T, 1)
            trace("shared_expert_gate", gate)
            shared = gate * shared
        if beside:
            shared = self.weights["shared_post_norm"](shared)
            trace("shared_mlp_post_norm", shared)
            out = self.weights["experts_post_norm"](out)
            trace("experts_post_norm", out)
        out = out + shared
        trace("moe_out", out)
        return out

    def _experts(self, flat: torch.Tensor, index: torch.Tensor, weights: torch.Tensor, trace: Any) -> torch.Tensor:
        """The routed experts' weighted sum [N, d] for rows flat [N, d] and their picks."""
        out = torch.zeros_like(flat)
        if flat.is_meta:  # no values to route by: one expert's shapes stand for all
            out = out + self.expert(0, flat) * weights[:, :1]
        # Each expert runs on the rows of its own tokens; `keep` stacks them, expert after expert, into
        # the [B·T·k, ...] tensors `shapes` prints (Σ n_e = B·T·k rows, every routed row once).
        keep: dict[str, list[torch.Tensor]] = {}
        for e in [] if flat.is_meta else index.unique().tolist():
            token, slot = torch.where(index == e)
            weight = weights[token, slot, None]
            rows = (flat[token] * weight).to(flat.dtype) if self.spec.weight_input else flat[token]  # Llama-4: expert(w·x)
            keep.setdefault("experts_dispatch", []).append(rows)
            y = self.expert(e, rows, keep) if e < self.spec.n_experts else rows  # a zero-computation expert: identity
            out.index_add_(0, token, y if self.spec.weight_input else (y * weight).to(out.dtype))
        for name in ("experts_dispatch", "experts_gate", "experts_up", "experts_act", "experts_down"):
            if name in keep:
                trace(name, torch.cat(keep[name]))
        return out
