"""The reference audio tower: a Conformer encoder and its projector (Gemma 4's, Gemma 3n's), runnable,
built from a `Conformer` (calc/towers/conformer.py).

Every tensor comes from `calc.checkpoint.conformer_slots.conformer_roles`, under transformers 5's
names, so a checkpoint's audio tower loads with `load_state_dict(strict=True)`. Computed as
transformers' Gemma4Model.get_audio_features and Gemma3nModel.get_audio_features do
(models/gemma4/modeling_gemma4.py, models/gemma3n/modeling_gemma3n.py), for one clip of log-mel
frames [1, frames, mel bins], every frame valid; where the two differ the spec says which:

    subsampling  per convolution: no bias, its (time, frequency) stride, frequencies padded one each side
                 and time one each side (Gemma 4) or kernel - 1 at the end (Gemma 3n); a LayerNorm over
                 the channels (a scale, no bias: Gemma 4) or Gemma 3n's cumulative group norm (mean and
                 variance over the channels and frequencies of every frame so far); ReLU; then each
                 frame's frequencies x channels (channels fastest) times input_proj
    n_layers ×   half-step FFN: x + residual_weight · norm(W2 act(W1 norm(x)))
                 attention: x + norm(W_o attend(norm(x))), each frame seeing itself and the horizon (Gemma
                   3n: context_left - 1 frames before, context_right after; Gemma 4: one fewer each side);
                   queries times d_head^-½ / ln 2 and softplus(per_dim_scale), Gemma 4's keys times
                   ln(1 + e) / ln 2; scores q·k plus q·R_p, R the relative_k projection of a sinusoidal
                   table whose row p stands for key - query = p - (context_left - 1) (the blocked
                   rel-shift of Transformer-XL, written out), soft-capped at logit_cap, the unseen ones
                   set to -1e9 (Gemma 3n: float32's lowest; either weighs nothing)
                 light conv: x + W_end(act(norm(causal depthwise conv(GLU(W_start(norm(x)))))))
                 half-step FFN, then the output norm
    output       Gemma 4: output_proj (biased), then embed_audio: a scale-free RMSNorm and the bias-free
                 matrix into the text width; Gemma 3n: every `reduction`-th frame, then embed_audio: its
                 soft-embedding RMSNorm, the matrix, a scale-free RMSNorm

Each Gemma4ClippableLinear clamps its input and output to the bounds it stores (±inf: none). The
±gradient_clipping (1e10) clamps between the steps change nothing a float32 activation reaches and are
left out.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from calc.checkpoint.conformer_slots import conformer_roles
from calc.checkpoint.tower_slots import layout_of
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.base import build_weights
from calc.reference.parts.mlp import ACTIVATIONS
from calc.reference.parts.norm import Norm
from calc.towers import Conformer

__all__ = ["AudioTower"]

INVALID = -1.0e9  # Gemma4AudioConfig.attention_invalid_logits_value: an unseen key's score


class AudioTower(nn.Module):
    """One Conformer audio encoder and its projector, its tensors at their Hugging Face paths: built
    empty, to hold a checkpoint's (loaded strictly)."""

    def __init__(self, name: str, tower: Conformer, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.tower = tower
        with torch.device(device):
            self.weights = build_weights(self, conformer_roles(name, tower, layout_of(tower)), self._norm, conv1d=False)

    def _norm(self, role: str, slot: object, bias: object) -> Norm:
        """The subsampling's LayerNorms (a scale, no bias; Gemma 3n's cumulative norms hold their scale
        here too), every other an RMSNorm with a scale."""
        subsampling = role.startswith("conv.")
        return Norm(NormSpec.model_construct(kind="layernorm" if subsampling else "rmsnorm", weight=True, bias=False,
                                             eps=self.tower.subsample_eps if subsampling else self.tower.eps,
                                             unit_offset=False), slot.shape)

    @property
    def mel_bins(self) -> int:
        """Log-mel bins a frame holds: what the subsampling leaves (the input projection's width over the
        last convolution's channels) times the convolutions' frequency strides; 128 for the released
        configs."""
        t = self.tower
        return t.subsample_width // t.convs[-1][1] * math.prod(stride for _, stride in t.strides)

    def transformers_inputs(self, frames: torch.Tensor) -> dict[str, torch.Tensor]:
        """get_audio_features' inputs: the frames, every one valid (the mask as the model reads it)."""
        valid = torch.ones(frames.shape[:2], dtype=torch.bool)
        return {"input_features": frames,
                "input_features_mask": valid if layout_of(self.tower)["mask_marks"] == "valid" else ~valid}

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """Audio features [1, frames / 4, text width] of log-mel frames [1, frames, mel bins]."""
        t, w = self.tower, self.weights
        x = frames[:, None]  # (1, 1, frames, mel)
        for j, ((_, _, kernel, _), stride) in enumerate(zip(t.convs, t.strides)):
            time = (0, kernel - 1) if t.causal_subsampling else (1, 1)
            x = F.conv2d(F.pad(x, (1, 1, *time)), w.tensor(f"conv.{j}"), stride=stride).permute(0, 2, 3, 1)
            norm = w[f"conv.{j}.norm"]
            x = F.relu(_cumulative(x, norm.weight, t.subsample_eps) if t.cumulative_norm else norm(x))
            x = x.permute(0, 3, 1, 2)  # (1, channels, frames', frequencies')
        x = x.permute(0, 2, 3, 1).flatten(2) @ w.tensor("input_projection").T  # (1, frames', d)
        positions = _relative_table(t)
        for i in range(t.n_layers):
            x = self._layer(x, f"layer.{i}", positions)
        unscaled = Norm(NormSpec.model_construct(kind="rmsnorm", weight=False, bias=False, eps=t.eps), ())
        if t.vocab:  # Gemma 3n's embedder: the soft-embedding norm before the matrix, a scale-free one after
            return unscaled(w["audio_embedding.norm.1"](x[:, ::t.reduction]) @ w.tensor("projector").T)
        x = x @ w.tensor("output_projection").T + w.tensor("output_projection.bias")
        return unscaled(x[:, ::t.reduction]) @ w.tensor("projector").T

    def _linear(self, role: str, x: torch.Tensor) -> torch.Tensor:
        """x times the role's matrix, input and output clamped to its stored bounds where it has them."""
        w = self.weights
        bounded = f"{role}.input_min" in w
        if bounded:
            x = x.clamp(w.tensor(f"{role}.input_min"), w.tensor(f"{role}.input_max"))
        y = x @ w.tensor(role).T
        return y.clamp(w.tensor(f"{role}.output_min"), w.tensor(f"{role}.output_max")) if bounded else y

    def _layer(self, x: torch.Tensor, r: str, positions: torch.Tensor) -> torch.Tensor:
        w = self.weights
        x = self._ffn(x, f"{r}.ffn.0")
        x = x + w[f"{r}.attn_norm.1"](self._attention(w[f"{r}.attn_norm.0"](x), r, positions))
        x = self._light_conv(x, r)
        return w[f"{r}.out_norm"](self._ffn(x, f"{r}.ffn.1"))

    def _ffn(self, x: torch.Tensor, r: str) -> torch.Tensor:
        """Half-step FFN (Gemma4AudioFeedForward)."""
        w, act = self.weights, ACTIVATIONS[self.tower.activation]
        h = self._linear(f"{r}.down", act(self._linear(f"{r}.up", w[f"{r}.norm.0"](x))))
        return x + self.tower.residual_weight * w[f"{r}.norm.1"](h)

    def _light_conv(self, x: torch.Tensor, r: str) -> torch.Tensor:
        """Gemma4AudioLightConv1d: GLU, a causal depthwise conv (padded kernel - 1 frames on the left)."""
        w, act = self.weights, ACTIVATIONS[self.tower.activation]
        h = F.glu(self._linear(f"{r}.conv_in", w[f"{r}.conv_norm.0"](x)), dim=-1).transpose(1, 2)
        kernel = w.tensor(f"{r}.depthwise_conv")
        h = F.conv1d(F.pad(h, (kernel.shape[-1] - 1, 0)), kernel, groups=h.shape[1]).transpose(1, 2)
        return x + self._linear(f"{r}.conv_out", act(w[f"{r}.conv_norm.1"](h)))

    def _attention(self, h: torch.Tensor, r: str, positions: torch.Tensor) -> torch.Tensor:
        """Gemma4AudioAttention over the whole clip at once (the module docstring)."""
        t, w = self.tower, self.weights
        heads, T = t.n_heads, h.shape[1]
        hd = t.d_model // heads
        q, k, v = (self._linear(f"{r}.{key}", h).view(1, T, heads, hd).transpose(1, 2) for key in "qkv")
        q = q * (hd ** -0.5 / math.log(2)) * F.softplus(w.tensor(f"{r}.per_dim_scale"))
        if t.key_scale:
            k = k * (math.log(1 + math.e) / math.log(2))
        relative = (positions @ w.tensor(f"{r}.relative_k").T).view(-1, heads, hd)  # (rows, heads, hd)
        table = torch.einsum("bhtd,phd->bhtp", q, relative)  # (1, heads, T, rows)
        frame = torch.arange(T)
        row = frame[None, :] - frame[:, None] + t.context_left - 1  # key - query + the past horizon
        known = (row >= 0) & (row < table.shape[-1])
        bias = table.gather(-1, row.clamp(0, table.shape[-1] - 1).expand(1, heads, T, T)) * known
        scores = q @ k.transpose(-1, -2) + bias
        scores = torch.tanh(scores / t.logit_cap) * t.logit_cap
        ahead = frame[None, :] - frame[:, None]  # key - query
        edge = 0 if t.whole_horizon else 1  # Gemma 4's mask stops one frame short of each horizon
        seen = (ahead >= edge - (t.context_left - 1)) & (ahead <= max(0, t.context_right - edge))
        scores = scores.masked_fill(~seen, INVALID)
        y = scores.softmax(dim=-1, dtype=torch.float32) @ v  # (1, heads, T, hd)
        return self._linear(f"{r}.attn_out", y.transpose(1, 2).reshape(1, T, -1))


def _relative_table(t: Conformer) -> torch.Tensor:
    """[sin, cos] rows, d / 2 timescales from 1 to 10,000, for positions context_left - 1, ..., down to
    -context_right (Gemma3nAudioRelativePositionEmbedding), or context / 2, ..., 1, 0 (context = chunk +
    context_left - 1 + context_right: Gemma4AudioRelPositionalEncoding)."""
    top, last = (t.context_left - 1, -t.context_right) if t.horizon_table else \
        ((t.chunk + t.context_left - 1 + t.context_right) // 2, 0)
    count = t.d_model // 2
    inverse = torch.exp(torch.arange(count) * -(math.log(10_000.0) / max(count - 1, 1)))
    scaled = torch.arange(top, last - 1, -1)[:, None] * inverse[None, :]
    return torch.cat((scaled.sin(), scaled.cos()), dim=-1)


def _cumulative(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma3nAudioCumulativeGroupNorm of x [1, frames, frequencies, channels], every frame valid: each
    frame normalised by the mean of all values up to it and the mean of their squared distances from
    the running mean each was taken with, in float32, times the per-channel scale."""
    x = x.float()
    count = torch.arange(1, x.shape[1] + 1, dtype=torch.float32)[None, :, None, None] * x[0, 0].numel()
    mean = x.sum(dim=(2, 3), keepdim=True).cumsum(dim=1) / count
    variance = ((x - mean) ** 2).sum(dim=(2, 3), keepdim=True).cumsum(dim=1) / count
    return (x - mean) * torch.rsqrt(variance + eps) * weight.float()
