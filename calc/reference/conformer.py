"""The reference audio tower: Gemma 4's Conformer encoder and its projector, runnable, built from a
`Conformer` (calc/towers/conformer.py).

Every tensor comes from `calc.checkpoint.conformer_slots.conformer_roles`, under transformers 5's
names, so a checkpoint's audio tower loads with `load_state_dict(strict=True)`. Computed as
transformers' Gemma4Model.get_audio_features does (models/gemma4/modeling_gemma4.py), for one clip
of log-mel frames [1, frames, mel bins], every frame valid:

    subsampling  per convolution: 3 x 3, stride 2, padding 1, no bias (Gemma4AudioSubSampleConvProjectionLayer),
                 a LayerNorm over the channels (a scale, no bias), ReLU; then each frame's frequencies x
                 channels (channels fastest) times input_proj
    n_layers ×   half-step FFN: x + residual_weight · norm(W2 act(W1 norm(x)))
                 attention: x + norm(attend(norm(x))), each frame seeing itself and the context_left - 2
                   frames before it (and context_right - 1 after); queries times d_head^-½ / ln 2 and
                   softplus(per_dim_scale), keys times ln(1 + e) / ln 2; scores q·k plus q·R_p, R the
                   relative_k projection of a sinusoidal table whose row p stands for key - query =
                   p - (context_left - 1) (the blocked rel-shift of Transformer-XL, written out), then
                   soft-capped at logit_cap, the unseen ones set to -1e9
                 light conv: x + W_end(act(norm(causal depthwise conv(GLU(W_start(norm(x)))))))
                 half-step FFN, then the output norm
    output       output_proj (biased), then embed_audio: a scale-free RMSNorm and the bias-free matrix into
                 the text width

Each Gemma4ClippableLinear clamps its input and output to the bounds it stores (±inf: none). The
±gradient_clipping (1e10) clamps between the steps change nothing a float32 activation reaches and are
left out. Gemma 3n's encoder (its own subsampling norms and relative positions) is counted and checked
in checkpoints, not run.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from calc.checkpoint.conformer_slots import conformer_roles
from calc.checkpoint.tower_slots import layout_of
from calc.errors import GptcalcError
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.base import build_weights
from calc.reference.parts.mlp import ACTIVATIONS
from calc.reference.parts.norm import Norm
from calc.towers import Conformer

__all__ = ["AudioTower", "buildable"]

INVALID = -1.0e9  # Gemma4AudioConfig.attention_invalid_logits_value: an unseen key's score


def buildable(tower: Conformer) -> str | None:
    """Why the reference cannot run `tower` (None: it can)."""
    if tower.names != "gemma4_audio":
        return "the torch reference runs Gemma 4's Conformer audio tower only; Gemma 3n's is counted and " \
               "checked in checkpoints, not run"
    return None


class AudioTower(nn.Module):
    """One Conformer audio encoder and its projector, its tensors at their Hugging Face paths: built
    empty, to hold a checkpoint's (loaded strictly)."""

    def __init__(self, name: str, tower: Conformer, device: str | torch.device = "cpu") -> None:
        super().__init__()
        if (why := buildable(tower)) is not None:
            raise GptcalcError(why)
        self.tower = tower
        with torch.device(device):
            self.weights = build_weights(self, conformer_roles(name, tower, layout_of(tower)), self._norm, conv1d=False)

    def _norm(self, role: str, slot: object, bias: object) -> Norm:
        """The subsampling's LayerNorms (a scale, no bias), every other an RMSNorm with a scale."""
        kind = "layernorm" if role.startswith("conv.") else "rmsnorm"
        return Norm(NormSpec.model_construct(kind=kind, weight=True, bias=False, eps=self.tower.eps,
                                             unit_offset=False), slot.shape)

    @property
    def mel_bins(self) -> int:
        """Log-mel bins a frame holds: what the subsampling leaves (the input projection's width over the
        last convolution's channels), times 4 (two stride-2 convolutions); 128 for the released configs."""
        return self.tower.subsample_width // self.tower.convs[-1][1] * 2 ** len(self.tower.convs)

    @staticmethod
    def transformers_inputs(frames: torch.Tensor) -> dict[str, torch.Tensor]:
        """get_audio_features' inputs: the frames, every one valid."""
        return {"input_features": frames, "input_features_mask": torch.ones(frames.shape[:2], dtype=torch.bool)}

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """Audio features [1, frames / 4, text width] of log-mel frames [1, frames, mel bins]."""
        t, w = self.tower, self.weights
        x = frames[:, None]  # (1, 1, frames, mel)
        for j in range(len(t.convs)):
            x = F.conv2d(x, w.tensor(f"conv.{j}"), stride=2, padding=1)
            x = F.relu(w[f"conv.{j}.norm"](x.permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        x = x.permute(0, 2, 3, 1).flatten(2) @ w.tensor("input_projection").T  # (1, frames', d)
        positions = _relative_table(t)
        for i in range(t.n_layers):
            x = self._layer(x, f"layer.{i}", positions)
        x = x @ w.tensor("output_projection").T + w.tensor("output_projection.bias")
        unscaled = Norm(NormSpec.model_construct(kind="rmsnorm", weight=False, bias=False, eps=t.eps), ())
        return unscaled(x) @ w.tensor("projector").T

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
        seen = ((ahead <= 0) & (-ahead < t.context_left - 1)) | ((ahead > 0) & (ahead < t.context_right))
        scores = scores.masked_fill(~seen, INVALID)
        y = scores.softmax(dim=-1, dtype=torch.float32) @ v  # (1, heads, T, hd)
        return self._linear(f"{r}.attn_out", y.transpose(1, 2).reshape(1, T, -1))


def _relative_table(t: Conformer) -> torch.Tensor:
    """Gemma4AudioRelPositionalEncoding: [sin, cos] rows for positions context / 2, ..., 1, 0 (context =
    chunk + context_left - 1 + context_right), d / 2 timescales from 1 to 10,000."""
    context = t.chunk + t.context_left - 1 + t.context_right
    count = t.d_model // 2
    inverse = torch.exp(torch.arange(count) * -(math.log(10_000.0) / max(count - 1, 1)))
    scaled = torch.arange(context // 2, -1, -1)[:, None] * inverse[None, :]
    return torch.cat((scaled.sin(), scaled.cos()), dim=-1)
