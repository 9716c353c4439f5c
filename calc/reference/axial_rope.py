"""2-D ("axial") rotary of a vision encoder: each patch's row turns some of a head's frequencies and
its column the others, over the whole head, rotate-half, as transformers' Qwen-VL and Pixtral vision
rotary embeddings compute it (no scaling, cos and sin in float32).

    Qwen-VL   d_head / 4 frequencies 1 / θ^(2i / (d_head / 2)) for the row, the same for the column
              (Qwen2_5_VLVisionRotaryEmbedding, Qwen3VLVisionRotaryEmbedding)
    Pixtral   the d_head / 2 frequencies 1 / θ^(2i / d_head): the even ones for the row, the odd ones for
              the column (PixtralVisionRotaryEmbedding)
    Llama 4   Qwen's frequencies, the column + 1 first and the row + 1 second, the class token at 0, on
              interleaved channel pairs (Llama4VisionRotaryEmbedding, vision_apply_rotary_emb)

An `AxialRotary` stands in for the decoder attention's `Rotary` (cos_sin, apply, query_scale): its
tables hold every patch of one image, and an encoder layer given some of the patches (a window) reads
their rows by the positions in its context.
"""

from __future__ import annotations

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
    first turns the first set of frequencies, the second the other; by halves, or on interleaved
    channel pairs."""

    def __init__(self, first: torch.Tensor, second: torch.Tensor, frequencies: tuple[torch.Tensor, torch.Tensor],
                 interleaved: bool = False) -> None:
        one, other = frequencies
        angles = torch.cat((torch.outer(first.float(), one), torch.outer(second.float(), other)), dim=-1)
        angles = angles.repeat_interleave(2, dim=-1) if interleaved else torch.cat((angles, angles), dim=-1)
        self.cos, self.sin, self.interleaved = angles.cos(), angles.sin(), interleaved

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[positions].to(dtype), self.sin[positions].to(dtype)

    @staticmethod
    def query_scale(positions: torch.Tensor) -> None:
        """No per-position query factor (the decoder's Rotary has one for Ministral-3)."""
        return None

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.interleaved:  # pair (2i, 2i+1) as one complex number, times e^(i·angle)
            turned = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        else:
            first, second = x.chunk(2, dim=-1)
            turned = torch.cat((-second, first), dim=-1)
        return x * cos + turned * sin
