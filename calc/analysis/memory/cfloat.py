"""C's `float` (IEEE binary32), for engines whose arithmetic gptcalc replays in their own precision: llama.cpp's
device split and MiB lines, TensorRT-LLM's pool-group ratios."""

from __future__ import annotations

import struct

__all__ = ["f32"]


def f32(value: float) -> float:
    """`value` rounded to a C float (one operation on floats, computed in double, rounds the same)."""
    return struct.unpack("f", struct.pack("f", value))[0]
