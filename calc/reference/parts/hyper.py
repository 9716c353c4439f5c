"""Manifold-constrained hyper-connections (DeepSeek-V4's mHC): the residual stream as n copies
[B, T, n, d], mixed before each sublayer (DeepseekV4HyperConnection) and collapsed once before the
final norm (DeepseekV4HyperHead), in float32 as transformers keeps them.

Before a sublayer the copies, flattened to n·d and RMS-normed without a scale, go through one
projection `fn` to (2 + n)·n mixing logits, each group times its `scale` plus its slice of `base`:
pre = sigmoid(.) + eps (the sublayer's input is the copies summed with these weights), post =
2·sigmoid(.) (how much of the sublayer's output each copy gets) and comb = softmax(.) + eps over
each row, made doubly stochastic by `sinkhorn_iters` column / row normalisations (how the copies
mix among themselves). After it: copy k = post_k · output + sum_j comb[j, k] · copy j.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["collapse", "expand", "head"]


def _mixes(fn: torch.Tensor, streams: torch.Tensor, norm_eps: float) -> torch.Tensor:
    """fn · RMS(the copies flattened), [B, T, rows], in float32."""
    flat = streams.flatten(2).float()
    flat = flat * torch.rsqrt(flat.square().mean(-1, keepdim=True) + norm_eps)
    return torch.nn.functional.linear(flat, fn.float())


def collapse(w: Any, role: str, spec: Any, streams: torch.Tensor, norm_eps: float, trace: Any) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor]:
    """(post [B, T, n], comb [B, T, n, n], the sublayer's input [B, T, d]) from the copies [B, T, n, d]
    and the mix `role` ("hc_attn", "hc_mlp") of `w`."""
    n, eps = spec.streams, spec.eps
    mixes = _mixes(w.tensor(f"{role}.fn"), streams, norm_eps)  # (B, T, (2 + n)·n)
    trace(role, mixes)
    pre, post, comb = mixes.split([n, n, n * n], dim=-1)
    pre_b, post_b, comb_b = w.tensor(f"{role}.base").float().split([n, n, n * n])
    pre_s, post_s, comb_s = w.tensor(f"{role}.scale").float().unbind(0)
    pre = torch.sigmoid(pre * pre_s + pre_b) + eps
    post = 2 * torch.sigmoid(post * post_s + post_b)
    comb = torch.softmax(comb.unflatten(-1, (n, n)) * comb_s + comb_b.view(n, n), dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(spec.sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    collapsed = (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype)
    trace(f"{role}_collapse", collapsed)
    return post, comb, collapsed


def expand(post: torch.Tensor, comb: torch.Tensor, output: torch.Tensor, streams: torch.Tensor) -> torch.Tensor:
    """The copies after a sublayer: its output [B, T, d] spread by post, plus the copies mixed by comb."""
    dtype = streams.dtype
    return post.to(dtype).unsqueeze(-1) * output.unsqueeze(-2) + comb.to(dtype).transpose(-1, -2) @ streams


def head(w: Any, spec: Any, streams: torch.Tensor, norm_eps: float) -> torch.Tensor:
    """The copies [B, T, n, d] summed into one [B, T, d], each weighted by sigmoid(mix · scale + base) + eps."""
    mixes = _mixes(w.tensor("hc_head.fn"), streams, norm_eps)
    pre = torch.sigmoid(mixes * w.tensor("hc_head.scale").float() + w.tensor("hc_head.base").float()) + spec.eps
    return (pre.unsqueeze(-1) * streams).sum(dim=2).to(streams.dtype)
