"""Rotary position embedding with every scaling a supported config can carry, as transformers computes it.

The inverse frequencies follow transformers' `modeling_rope_utils` (default, linear, dynamic NTK,
YaRN, Llama-3, LongRoPE/"su", Gemma-4's proportional); YaRN and LongRoPE also scale cos and sin by an attention factor
(Phi-3.5-MoE: its short_mscale, or long_mscale past the original context, with the short factors,
as PhimoeRotaryEmbedding does).
Tables are computed lazily, on the CPU in float32, the first time a forward pass needs them, so a
model built on the meta device (any size) does no tensor work for them at all. A scaling type or
a key this module does not implement is an error naming it, never ignored.

Rotation acts on the first `rotary_dim` channels of each head: by halves (x1, x2) -> (-x2, x1), or
on interleaved channel pairs (GPT-J, Cohere, DeepSeek's MLA), which rotates pair i by frequency i.
Dynamic NTK changes nothing below the configured context and the model refuses positions beyond
it, so it computes the default table.
"""

from __future__ import annotations

import math

import torch

from calc.errors import GptcalcError
from calc.parts.attention import Rope

__all__ = ["Rotary", "scaling_type"]

# What each scaling type reads from its mapping, beyond its name and theta.
KEYS = {
    "default": set(),
    "linear": {"factor"},
    "dynamic": {"factor", "original_max_position_embeddings"},
    "yarn": {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
             "original_max_position_embeddings", "truncate"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
    "longrope": {"factor", "attention_factor", "long_factor", "short_factor", "original_max_position_embeddings",
                 "short_mscale", "long_mscale"},
    "proportional": {"factor"},
}
# Read by every type: Ministral-3's llama_4_scaling_beta scales queries by 1 + beta·ln(1 + ⌊p / original⌋);
# max_position_embeddings is a copy of the context length (transformers 5 writes it there) that no rope reads.
ALWAYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "llama_4_scaling_beta", "max_position_embeddings"}


def scaling_type(rope: Rope) -> str:
    """The scaling's type (`su` is LongRoPE's old name), or an error naming what is not implemented."""
    scaling = rope.scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    kind = {"su": "longrope"}.get(kind, kind)
    if kind not in KEYS:
        raise GptcalcError(f"rope scaling type {kind!r} is not implemented by the torch reference "
                           f"(it implements {', '.join(KEYS)})")
    unknown = sorted(set(scaling) - KEYS[kind] - ALWAYS)
    if unknown:
        raise GptcalcError(f"rope scaling {kind}: {unknown[0]!r} is not implemented by the torch reference")
    return kind


class Rotary:
    """cos/sin tables for one rotary configuration, computed on first use. `width`: the channels each
    head rotates, rotary_dim; a proportional rope (Gemma-4's global layers) turns the whole head
    (`head_dim`), its channels past rotary_dim at frequency 0."""

    def __init__(self, rope: Rope, n_positions: int, head_dim: int | None = None) -> None:
        self.rope, self.n_positions, self.kind = rope, n_positions, scaling_type(rope)
        if self.kind == "proportional" and head_dim is None:
            raise GptcalcError("rope scaling proportional: the head's width is needed")
        self.width = head_dim if self.kind == "proportional" else rope.rotary_dim
        self._tables: dict[tuple[bool, str], tuple[torch.Tensor, float]] = {}

    def _get(self, key: str, default: float | None = None) -> float:
        value = (self.rope.scaling or {}).get(key, default)
        if value is None:
            raise GptcalcError(f"rope scaling {self.kind}: {key!r} is needed")
        return value

    def _inv_freq(self, long: bool) -> tuple[torch.Tensor, float]:
        dim, base, kind = self.rope.rotary_dim, self.rope.theta, self.kind
        exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
        inv = 1.0 / base ** exponents
        if kind == "linear":
            return inv / self._get("factor"), 1.0
        if kind == "llama3":
            return self._llama3(inv), 1.0
        if kind == "yarn":
            return self._yarn(exponents)
        if kind == "proportional":  # _compute_proportional_rope_parameters: exponents over the whole head
            inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / self.width)
            zeros = torch.zeros(self.width // 2 - dim // 2)  # the channels past rotary_dim: angle 0, not turned
            return torch.cat((inv, zeros)) / self._get("factor", 1.0), 1.0
        if kind == "longrope":
            original = self._get("original_max_position_embeddings")
            factor = self._get("factor", None) if "factor" in (self.rope.scaling or {}) else self.n_positions / original
            attention = (self.rope.scaling or {}).get("attention_factor")
            if attention is None:
                attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
            ext = torch.tensor(self._get("long_factor" if long else "short_factor"), dtype=torch.float32)
            return 1.0 / (ext * base ** exponents), attention
        return inv, 1.0

    def _llama3(self, inv: torch.Tensor) -> torch.Tensor:
        factor, low, high = self._get("factor"), self._get("low_freq_factor"), self._get("high_freq_factor")
        old = self._get("original_max_position_embeddings")
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) * ~(wavelen > old / low)
        return torch.where(medium, smoothed, scaled)

    def _yarn(self, exponents: torch.Tensor) -> tuple[torch.Tensor, float]:
        dim, base, scaling = self.rope.rotary_dim, self.rope.theta, self.rope.scaling or {}
        original = self._get("original_max_position_embeddings")
        factor = scaling.get("factor") or self.n_positions / original
        attention = scaling.get("attention_factor")
        if attention is None:
            mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
            attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all) if mscale and mscale_all \
                else yarn_mscale(factor)
        fast, slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

        def correction(rotations: float) -> float:
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = correction(fast), correction(slow)
        if scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / ((high + 0.001 if low == high else high) - low))
        extrapolation = 1 - ramp.clamp(0, 1)
        pos = base ** exponents
        inv = (1.0 / (factor * pos)) * (1 - extrapolation) + (1.0 / pos) * extrapolation
        return inv, float(attention)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [T, width] at `positions`, in the layout `apply` expects."""
        long = self.kind == "longrope" and int(positions.max()) + 1 > self._get("original_max_position_embeddings")
        mscale = (self.rope.scaling or {}).get("long_mscale" if long else "short_mscale")
        if mscale is not None:  # Phi-3.5-MoE: short factors always, cos and sin scaled by short/long_mscale
            long = False
        key = (long, str(positions.device))
        if key not in self._tables:
            inv, factor = self._inv_freq(long)
            self._tables[key] = (inv.to(positions.device), factor)
        inv, factor = self._tables[key]
        factor = factor if mscale is None else mscale
        freqs = torch.outer(positions.float(), inv)  # (T, rd/2)
        angles = freqs.repeat_interleave(2, dim=-1) if self.rope.interleaved else torch.cat((freqs, freqs), dim=-1)
        return (angles.cos() * factor).to(dtype), (angles.sin() * factor).to(dtype)

    def query_scale(self, positions: torch.Tensor) -> torch.Tensor | None:
        """[T, 1] per-position query factor (Ministral-3's llama_4_scaling_beta), or None."""
        beta = (self.rope.scaling or {}).get("llama_4_scaling_beta")
        if beta is None:
            return None
        original = self._get("original_max_position_embeddings")
        return (1 + beta * torch.log(1 + torch.floor(positions.float() / original)))[:, None]

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate the first `width` channels of x [..., T, head_dim]; the rest pass through."""
        rd = self.width
        rot, rest = x[..., :rd], x[..., rd:]
        if self.rope.interleaved:
            turned = torch.stack((-rot[..., 1::2], rot[..., ::2]), dim=-1).flatten(-2)
        else:
            first, second = rot.chunk(2, dim=-1)
            turned = torch.cat((-second, first), dim=-1)
        return torch.cat((rot * cos + turned * sin, rest), dim=-1)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature: 0.1 · mscale · ln(factor) + 1 (1 when not scaled up)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0
