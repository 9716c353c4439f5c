"""Gemma-3n's AltUp and LAuReL (calc.parts.augment), as transformers computes them
(Gemma3nTextAltUp, Gemma3nTextLaurelBlock, Gemma3nTextModel), on a layer's own weights.

AltUp carries n streams [n, B, T, d]. Into the stack (`streams_in`), stream 0 is the embedding
and stream i its projection altup_projections[i - 1], rescaled to the embedding's RMS; out of it
(`streams_out`), streams 1.. go back through altup_unembed_projections, rescaled to stream 0's
RMS, and all n are averaged. In a layer, a router reads stream s (tanh of router(norm(s) / d)):
`predict` mixes the streams by n x n coefficients from it (plus the streams themselves), the layer
runs on prediction 0, and `correct` adds to each prediction its coefficient (+1) times the layer's
change to prediction 0 (router read on the layer's output). transformers' own defaults are taken
for what the spec does not state: the active stream 0 (altup_active_idx) and the corrected stream
0 scaled by correct_output_scale (altup_correct_scale), as every released config has them.

LAuReL: h + norm(right(left(h))) for the layer's normed input h, added to attention's output.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["correct", "laurel", "predict", "streams_in", "streams_out"]


def _rescaled(t: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """t scaled to the RMS `target` [.., 1] (its own RMS clamped at 1e-5 squared)."""
    return t * target / torch.sqrt(t.pow(2).mean(-1, keepdim=True).clamp(min=1e-5))


def streams_in(x: torch.Tensor, projections: list[Any]) -> torch.Tensor:
    """[n, B, T, d]: x, then each projection of x at x's RMS."""
    target = x.pow(2).mean(-1, keepdim=True) ** 0.5
    return torch.stack([x, *(_rescaled(p(x), target) for p in projections)])


def streams_out(streams: torch.Tensor, projections: list[Any]) -> torch.Tensor:
    """[B, T, d]: the mean of stream 0 and each other stream projected back at stream 0's RMS."""
    target = streams[0].pow(2).mean(-1, keepdim=True) ** 0.5
    return torch.stack([streams[0], *(_rescaled(p(s), target) for p, s in zip(projections, streams[1:]))]).mean(0)


def _router(w: Any, x: torch.Tensor) -> torch.Tensor:
    """[B, T, n]: tanh of the router's scores of x RMS-normed and divided by d (router_input_scale)."""
    return torch.tanh(w["altup.router"](w["altup.router_norm"](x) * x.shape[-1] ** -1.0).float()).type_as(x)


def predict(w: Any, streams: torch.Tensor, trace: Any) -> torch.Tensor:
    """Each stream as the mix of all n the router of stream 0 picks, plus itself: [n, B, T, d]."""
    n, B, T, _ = streams.shape
    modalities = _router(w, streams[0])
    trace("altup_router", modalities)
    coefs = w["altup.predict"](modalities).reshape(B, T, n, n).permute(0, 1, 3, 2)  # (B, T, n, n)
    mixed = (streams.permute(1, 2, 3, 0) @ coefs).permute(3, 0, 1, 2)
    predictions = (mixed + streams).type_as(streams)
    trace("altup_predict", predictions)
    return predictions


def correct(w: Any, predictions: torch.Tensor, output: torch.Tensor, trace: Any) -> torch.Tensor:
    """Each prediction plus (its coefficient + 1) times the layer's change to prediction 0: [n, B, T, d]."""
    coefs = w["altup.correct"](_router(w, output)) + 1.0  # (B, T, n)
    corrected = (output - predictions[0])[None] * coefs.permute(2, 0, 1)[..., None] + predictions
    trace("altup_correct", corrected)
    return corrected.type_as(output)


def laurel(w: Any, h: torch.Tensor, trace: Any) -> torch.Tensor:
    """h + norm(h·W_left·W_right): the low-rank residual beside attention."""
    low = w["laurel.left"](h)
    trace("laurel_left", low)
    up = w["laurel.right"](low)
    trace("laurel_right", up)
    return h + w["laurel.norm"](up)
