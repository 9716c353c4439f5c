"""What the token mixers without attention (Mamba2, gated DeltaNet, KDA, LFM2's short conv) share: the
depthwise causal convolution each runs, with the window it keeps between decoding steps; how a
mixer's fixed-size states are read from and kept in the cache; and, for the two with a gated
RMSNorm, how that norm is made (`GatedNormMixer`).

Each channel c of x [B, T, C] is convolved with its own kernel w[c, 0, :] of K taps over its last K
inputs, zeros before the first token: what transformers' causal_conv1d_fn (conv1d with K - 1
padding, the first T outputs) and causal_conv1d_update (the cached window, then the new inputs)
both compute. With a cache the layer keeps the last K - 1 inputs [B, C, K - 1] ("conv" state,
zeros until K - 1 tokens have been seen): the conv window `CacheSpec` counts, whatever T.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.base import Part

__all__ = ["GatedNormMixer", "cached", "causal_conv", "keep_states"]


def causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, ctx: Any) -> tuple[
        torch.Tensor, torch.Tensor]:
    """(y [B, T, C], the window to keep [B, C, K - 1]) for inputs x [B, T, C] and a [C, 1, K] kernel;
    the window before x is the layer's cached one (zeros at the start of a sequence)."""
    B, T, C = x.shape
    K = weight.shape[-1]
    past = cached(ctx, "conv", (B, C, K - 1), x)
    window = torch.cat((past, x.transpose(1, 2)), dim=-1)  # (B, C, K - 1 + T)
    y = F.conv1d(window, weight, bias, groups=C)  # (B, C, T): every output sees K inputs
    return y.transpose(1, 2), window[:, :, window.shape[-1] - (K - 1):].clone()


def cached(ctx: Any, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """The layer's state `name` as its last step left it, in `like`'s dtype; zeros of `shape` at the
    start of a sequence (no cache, or this layer's first step)."""
    kept = ctx.cache.state(ctx.layer, name) if ctx.cache is not None else None
    return like.new_zeros(shape) if kept is None else kept.to(like.dtype)


def keep_states(ctx: Any, positions: int, conv: torch.Tensor | None, recurrent: torch.Tensor | None = None,
                state_dtype: str = "model", model_dtype: torch.dtype | None = None) -> None:
    """Keep a mixer's states after a step of `positions` tokens, when there is a cache: the conv window
    (none for lightning attention) in the model's dtype, the recurrent state in float32 where the spec
    says so (`state_dtype` "fp32": Nemotron-H's mamba_ssm_cache_dtype, Qwen3.5's), else in the model's
    dtype too (the conv window's, or `model_dtype`)."""
    if ctx.cache is None:
        return
    states = {"conv": conv} if conv is not None else {}
    if recurrent is not None:
        model_dtype = conv.dtype if conv is not None else model_dtype
        states["recurrent"] = recurrent.to(torch.float32 if state_dtype == "fp32" else model_dtype)
    ctx.cache.keep(ctx.layer, positions, **states)


class GatedNormMixer(Part):
    """Mamba2 and the gated DeltaNet: a mixer whose output goes through a gated RMSNorm
    (`calc.reference.parts.norm.gated_rms_norm`). The spec gives the norm no epsilon of its own:
    transformers builds it from the one the config names for every norm (rms_norm_eps,
    layer_norm_epsilon), which is the layer norms' here, unless the mixer states its own (`norm_eps`:
    OLMo-Hybrid's 1e-5). Its weight is applied as stored, even
    where the model's other norms are zero-centred (Qwen3-Next's RMSNormGated, unlike its RMSNorm)."""

    def __init__(self, spec: Any, eps: float) -> None:
        super().__init__()
        self.spec, self.eps = spec, eps

    @classmethod
    def of(cls, block: Any, n_positions: int, lay: dict[str, Any]) -> "GatedNormMixer":
        return cls(block.attention, getattr(block.attention, "norm_eps", None) or block.norm.eps)

    def norm_spec(self, role: str) -> NormSpec:
        return NormSpec.model_construct(kind="rmsnorm", bias=False, eps=self.eps)
