"""2-D ("axial") rotary of a vision encoder: each patch's row turns some of a head's frequencies and
its column the others, over the whole head, rotate-half, as transformers' Qwen-VL and Pixtral vision
rotary embeddings compute it (no scaling, cos and sin in float32).

    Qwen-VL   d_head / 4 frequencies 1 / θ^(2i / (d_head / 2)) for the row, the same for the column
              (Qwen2_5_VLVisionRotaryEmbedding, Qwen3VLVisionRotaryEmbedding)
    Pixtral   the d_head / 2 frequencies 1 / θ^(2i / d_head): the even ones for the row, the odd ones for
              the column (PixtralVisionRotaryEmbedding)

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
    """cos and sin [patches, d_head] of one image's patches at (rows, columns)."""

    def __init__(self, rows: torch.Tensor, columns: torch.Tensor, frequencies: tuple[torch.Tensor, torch.Tensor]) -> None:
        row, column = frequencies
        angles = torch.cat((torch.outer(rows.float(), row), torch.outer(columns.float(), column)), dim=-1)
        angles = torch.cat((angles, angles), dim=-1)
        self.cos, self.sin = angles.cos(), angles.sin()

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[positions].to(dtype), self.sin[positions].to(dtype)

    @staticmethod
    def query_scale(positions: torch.Tensor) -> None:
        """No per-position query factor (the decoder's Rotary has one for Ministral-3)."""
        return None

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-second, first), dim=-1) * sin
