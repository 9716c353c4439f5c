"""2-D ("axial") rotary of a vision encoder: each patch's row turns some of a head's frequencies and
its column the others, over the whole head, rotate-half, as transformers' Qwen-VL and Pixtral vision
rotary embeddings compute it (no scaling, cos and sin in float32).

    Qwen-VL   d_head / 4 frequencies 1 / θ^(2i / (d_head / 2)) for the row, the same for the column
              (Qwen2_5_VLVisionRotaryEmbedding, Qwen3VLVisionRotaryEmbedding)
    Pixtral   the d_head / 2 frequencies 1 / θ^(2i / d_head): the even ones for the row, the odd ones for
              the column (PixtralVisionRotaryEmbedding)
    Llama 4   Qwen's frequencies, the column + 1 first and the row + 1 second, the class token at 0, on
              interleaved channel pairs (Llama4VisionRotaryEmbedding, vision_apply_rotary_emb)
    Gemma 4   Qwen's frequencies, the column turning the head's first half and the row its second, each
              half rotated by halves of its own (Gemma4VisionRotaryEmbedding, apply_multidimensional_rope)
    MoonViT   Qwen's frequencies, column and row alternating frequency by frequency, over the whole
              head, rotate-half (Kimi_K25VisionRotaryEmbedding.recomposition_frequencies)

An `AxialRotary` stands in for the decoder attention's `Rotary` (cos_sin, apply, query_scale): its
tables hold every patch of one image, and an encoder layer given some of the patches (a window) reads
their rows by the positions in its context.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["AxialRotary", "pixtral_frequencies", "qwen_frequencies"]


def qwen_frequencies(head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) inverse frequencies of the Qwen vision towers."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim // 2, 2, dtype=torch.float32) / (head_dim // 2))
    return inv, inv


def pixtral_frequencies(head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) inverse frequencies of Pixtral: the head's frequencies, even and odd."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    return inv[0::2], inv[1::2]


class AxialRotary:
    """cos and sin [patches, d_head] of one image's patches at coordinates (first, second): the
    first turns the first set of frequencies, the second the other; `layout` says which channels
    pair up: "whole" rotates the head by halves (the first coordinate's angles, then the second's),
    "alternating" too (their angles frequency by frequency, one and the other), "interleaved" turns
    channel pairs (2i, 2i+1), and "split" gives each coordinate a half of the head, rotated by halves
    of its own."""

    def __init__(self, first: torch.Tensor, second: torch.Tensor, frequencies: tuple[torch.Tensor, torch.Tensor],
                 layout: Literal["whole", "alternating", "interleaved", "split"] = "whole") -> None:
        one, other = torch.outer(first.float(), frequencies[0]), torch.outer(second.float(), frequencies[1])
        if layout == "split":
            angles = torch.cat((one, one, other, other), dim=-1)
        elif layout == "interleaved":
            angles = torch.cat((one, other), dim=-1).repeat_interleave(2, dim=-1)
        else:  # each frequency of one coordinate beside the other's (alternating), or all of one first
            half = torch.stack((one, other), dim=-1).flatten(-2) if layout == "alternating" else torch.cat((one, other), -1)
            angles = torch.cat((half, half), dim=-1)
        self.cos, self.sin, self.layout = angles.cos(), angles.sin(), layout

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[positions].to(dtype), self.sin[positions].to(dtype)

    @staticmethod
    def query_scale(positions: torch.Tensor) -> None:
        """No per-position query factor (the decoder's Rotary has one for Ministral-3)."""
        return None

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.layout == "interleaved":  # pair (2i, 2i+1) as one complex number, times e^(i·angle)
            turned = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        else:  # rotate-half over the whole head, or over each of its two halves
            parts = x.chunk(2, dim=-1) if self.layout == "split" else (x,)
            turned = torch.cat([torch.cat((-second, first), dim=-1) for first, second in
                                (part.chunk(2, dim=-1) for part in parts)], dim=-1)
        return x * cos + turned * sin
