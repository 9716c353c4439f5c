"""Weights at a storage format: bytes per component of the `count()` breakdown.

    component bytes = ceil((format.row_bits(params) + scales) / 8)
    scales          = ceil(params / group_size) x 16       # --group-size: GPTQ/AWQ-style fp16 scales

A tied LM head costs 0 bytes: it *is* the token embedding's matrix, counted once.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.formats import Format, bits_to_bytes, weight_format
from calc.errors import GptcalcError

__all__ = ["SCALE_BITS", "Weights", "weights"]

SCALE_BITS = 16  # one fp16 scale per group in group quantization (GPTQ/AWQ style)


@dataclass(frozen=True)
class Weights:
    """Parameter bytes per component at one format, plus group-quantization scales if any."""

    model: str
    format: Format
    params: dict[str, int]
    group_size: int | None = None  # weights sharing one 16-bit scale; None: no scales counted

    @property
    def dtype(self) -> str:
        return self.format.name

    def component_bytes(self, name: str) -> int:
        """ceil((bits of the values + one 16-bit scale per started group) / 8)."""
        n = self.params[name]
        scales = -(-n // self.group_size) * SCALE_BITS if self.group_size else 0
        return bits_to_bytes(self.format.row_bits(n) + scales)

    @property
    def components(self) -> dict[str, int]:
        return {name: self.component_bytes(name) for name in self.params}

    @property
    def total_params(self) -> int:
        return sum(self.params.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.components.values())

    def to_json(self) -> dict[str, object]:
        return {
            "dtype": self.dtype,
            "bits_per_weight": str(self.format.bits_per_value),
            "group_size": self.group_size,
            "scale_bits": SCALE_BITS if self.group_size else 0,
            "params": self.total_params,
            "total_bytes": self.total_bytes,
            "components": self.components,
        }


def weights(breakdown: Breakdown, dtype: str | Format = "fp16", group_size: int | None = None) -> Weights:
    """Every parameter stored at `dtype` (a tied head is stored once, as the breakdown counts it)."""
    fmt = dtype if isinstance(dtype, Format) else weight_format(dtype)
    if group_size is not None:
        if fmt.bits_per_value >= 16 or fmt.block > 1:
            raise GptcalcError(f"--group-size: only for plain 8- and 4-bit dtypes (fp8, int8, int4), not {fmt.name}")
        if group_size < 1:
            raise GptcalcError(f"--group-size: must be at least 1, got {group_size}")
    return Weights(breakdown.model, fmt, dict(breakdown.components), group_size)
