"""The feed-forward block: down(act(up x)), or gated down(act(gate x) * up x), gate and up stored
apart or fused side by side (Phi-3's gate_up_proj: gate first). Activations as transformers' ACT2FN
names them: gelu (exact erf), gelu_tanh (gelu_new, gelu_pytorch_tanh), relu, silu, relu2 (squared ReLU), quick_gelu
(x·σ(1.702x), CLIP's and Step-3.7's vision MLP),
and xielu, the one that reads weights of its own (`xielu`)."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from calc.reference.parts.base import Part

__all__ = ["ACTIVATIONS", "MLP", "SWIGLU_ALPHA", "gated", "gaussian_top", "xielu"]

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "relu2": lambda x: F.relu(x).square(),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),  # transformers' QuickGELUActivation (CLIP's)
}


def xielu(x: torch.Tensor, alpha_p: torch.Tensor, alpha_n: torch.Tensor, beta: torch.Tensor,
          eps: torch.Tensor) -> torch.Tensor:
    """xIELU as XIELUActivation._xielu_python computes it: a quadratic for positive inputs, an
    exponential for negative ones, both with a linear term beta·x; the stored alphas go through
    softplus (alpha_n offset by beta) so that each stays positive."""
    a_p, a_n = F.softplus(alpha_p), beta + F.softplus(alpha_n)
    return torch.where(x > 0, a_p * x * x + beta * x, (torch.expm1(torch.min(x, eps)) - x) * a_n + beta * x)


def gaussian_top(gate: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Gemma-3n's activation sparsity (Gemma3nTextMLP._gaussian_topk): each token's gate values less
    their cutoff, mean + std·Φ⁻¹(sparsity) over the channels (the share of a normal distribution below it),
    through ReLU: about `sparsity` of them become 0 before the activation."""
    quantile = torch.distributions.normal.Normal(0, 1).icdf(torch.tensor(sparsity, dtype=torch.float32)).to(gate.dtype)
    cutoff = gate.mean(dim=-1, keepdim=True) + gate.std(dim=-1, keepdim=True, unbiased=False) * quantile
    return F.relu(gate - cutoff)


SWIGLU_ALPHA = 1.702  # gpt-oss's swiglu_alpha (GptOssConfig), MiniMax-M3's too: fixed in their released models


def gated(act: Any, gate: torch.Tensor, up: torch.Tensor, spec: Any) -> torch.Tensor:
    """act(gate) · up, clamped as the spec says: Step-3.7's `clamp` after the activation, DeepSeek-V4's
    `gate_clamp` before it (up within ±c in both); gpt-oss's `swiglu_limit` (MiniMax-M3's too) replaces the
    activation: gate clamped above at the limit, up to ±limit, gate · sigmoid(1.702 · gate) · (up + 1)."""
    if getattr(spec, "swiglu_limit", None):
        c = spec.swiglu_limit
        gate, up = gate.clamp(max=c), up.clamp(-c, c)
        return gate * torch.sigmoid(gate * SWIGLU_ALPHA) * (up + 1)
    if getattr(spec, "gate_clamp", None):
        c = spec.gate_clamp
        return act(gate.clamp(max=c)) * up.clamp(-c, c)
    if getattr(spec, "clamp", None):
        c = spec.clamp
        return act(gate).clamp(max=c) * up.clamp(-c, c)
    return act(gate) * up


class MLP(Part):
    """A dense MLP; `prefix` picks a MoE's shared expert's roles ("shared.") within its part, `step`
    the `shapes` step ids it traces ("shared_mlp": shared_mlp_up, ...)."""

    def __init__(self, spec: Any, prefix: str = "", step: str = "mlp") -> None:
        super().__init__()
        self.spec, self.prefix, self.step = spec, prefix, step
        self.act = ACTIVATIONS.get(spec.activation)
        self.roles = {f"mlp_{r}": f"{prefix}{r}" for r in ("gate", "up", "down")}

    def _act(self, weights: Any, x: torch.Tensor) -> torch.Tensor:
        """The activation; xIELU with its scalars from `weights` (the MoE's, for a shared expert)."""
        if self.act is not None:
            return self.act(x)
        return xielu(x, *(weights.tensor(f"{self.prefix}act.{name}") for name in ("alpha_p", "alpha_n", "beta", "eps")))

    def compute(self, weights: Any, x: torch.Tensor, trace: Any) -> torch.Tensor:
        s, p = self.spec, self.prefix
        if s.gated and s.fused_gate_up:
            gate, up = weights[f"{p}gate_up"](x).chunk(2, dim=-1)
        else:
            up = weights[f"{p}up"](x)  # (B, T, d_ff)
            gate = weights[f"{p}gate"](x) if s.gated else None
        if gate is not None:
            trace(f"{self.step}_gate", gate)
            gate = gate * s.gate_scale if getattr(s, "gate_scale", None) is not None else gate  # Falcon-H1
            if getattr(s, "sparsity", 0.0):
                gate = gaussian_top(gate, s.sparsity)
                trace(f"{self.step}_sparsity", gate)
        trace(f"{self.step}_up", up)
        act = lambda t: self._act(weights, t)  # noqa: E731
        h = gated(act, gate, up, s) if gate is not None else act(up)
        trace(f"{self.step}_act", h)
        y = weights[f"{p}down"](h)  # (B, T, d)
        if getattr(s, "down_scale", None) is not None:  # Falcon-H1's mlp_multipliers[1]
            y = y * s.down_scale
        trace(f"{self.step}_down", y)
        return y

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        return self.compute(self.weights, x, ctx.trace)
