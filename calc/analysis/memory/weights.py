"""Weights at a storage format: bytes per component of the `count()` breakdown.

    component bytes = ceil((format.row_bits(params) + scales) / 8)
    scales          = ceil(params / group_size) x 16       # --group-size: GPTQ/AWQ-style fp16 scales

A tied LM head costs 0 bytes: it *is* the token embedding's matrix, counted once. A multimodal
model's towers are rows of their own ("vision q", calc/analysis/memory/towers.py), 16-bit under a
scheme or a checkpoint (quantised checkpoints leave the tower unquantised). A named
scheme (`calc/analysis/memory/schemes.py`) gives each component its exact bits per parameter, and
so does a checkpoint's headers (`calc/analysis/memory/stored.py`): its bytes x 8 / parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from fractions import Fraction
from typing import Mapping

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.formats import Format, bits_to_bytes, weight_format
from calc.analysis.memory.schemes import Scheme, scheme_bits
from calc.analysis.memory.stored import StoredWeights
from calc.analysis.memory.towers import tower_params
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["SCALE_BITS", "Weights", "weights"]

SCALE_BITS = 16  # one fp16 scale per group in group quantization (GPTQ/AWQ style)


@dataclass(frozen=True)
class Weights:
    """Parameter bytes per component at one format, plus group-quantization scales if any."""

    model: str
    format: Format
    params: dict[str, int]
    group_size: int | None = None  # weights sharing one 16-bit scale; None: no scales counted
    scheme: Scheme | None = None  # a named quantisation scheme (then `format` is what it keeps: bf16)
    bits_per_param: Mapping[str, Fraction] | None = None  # the scheme's exact bits per parameter, by component
    stored: StoredWeights | None = None  # read from a checkpoint's headers (then bits_per_param are its own)

    @property
    def dtype(self) -> str:
        if self.stored is not None:
            return "checkpoint"
        return self.scheme.name if self.scheme else self.format.name

    def describe(self) -> str:
        """'fp16: 16 bits per value', or 'awq-int4: 4.27 bits per weight on average (16-bit: ...)'."""
        average = Fraction(self.total_bytes * 8, self.total_params or 1)
        if self.stored is not None:
            return (f"stored in {self.stored.source} ({', '.join(self.stored.dtypes)}): "
                    f"{float(average):.3f} bits per weight on average")
        if self.scheme is None:
            return self.format.describe()
        kept = "per tensor" if self.scheme.gguf else "kept 16-bit"
        return f"{self.scheme.name}: {float(average):.3f} bits per weight on average ({kept}: {self.scheme.keeps})"

    def component_bytes(self, name: str) -> int:
        """ceil((bits of the values + one 16-bit scale per started group) / 8)."""
        n = self.params[name]
        if self.bits_per_param is not None:
            bits = self.bits_per_param.get(name, Fraction(self.format.block_bits, self.format.block)) * n
            return -(-bits.numerator // (bits.denominator * 8))
        scales = -(-n // self.group_size) * SCALE_BITS if self.group_size else 0
        return bits_to_bytes(self.format.row_bits(n) + scales)

    @cached_property
    def components(self) -> dict[str, int]:
        """Bytes by component, computed once: a memory result's JSON asks each GPU's headroom of the total."""
        return {name: self.component_bytes(name) for name in self.params}

    @property
    def total_params(self) -> int:
        return sum(self.params.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.components.values())

    def to_json(self) -> dict[str, object]:
        return {
            "dtype": self.scheme.name if self.scheme else self.dtype,
            "checkpoint": self.stored.to_json() if self.stored else None,
            "scheme": self.scheme.name if self.scheme else None,
            "kept_16_bit": self.scheme.keeps if self.scheme else None,
            "bits_per_weight": str(self.format.bits_per_value if self.bits_per_param is None
                                   else Fraction(self.total_bytes * 8, self.total_params)),
            "group_size": self.group_size,
            "scale_bits": SCALE_BITS if self.group_size else 0,
            "params": self.total_params,
            "total_bytes": self.total_bytes,
            "components": dict(self.components),  # a copy: the cached mapping stays as computed
        }


def weights(breakdown: Breakdown, dtype: str | Format = "fp16", group_size: int | None = None,
            scheme: Scheme | None = None, spec: ModelSpec | None = None,
            stored: StoredWeights | None = None) -> Weights:
    """Every parameter stored at `dtype` (a tied head is stored once, as the breakdown counts it), as
    a named `scheme` lays out its quantised matrices (it needs the spec for their shapes), or as a
    checkpoint stores them."""
    if stored is not None:
        if scheme is not None or group_size is not None or dtype not in ("fp16", "bf16"):
            raise GptcalcError("--checkpoint: the checkpoint fixes how weights are stored; drop --dtype, --quant "
                               "and --group-size")
        params = _params(breakdown)
        return Weights(breakdown.model, weight_format("bf16"), params, bits_per_param=stored.bits_per_param(params),
                       stored=stored)
    if scheme is not None:
        if dtype not in ("fp16", "bf16"):
            raise GptcalcError(f"--quant {scheme.name} fixes how weights are stored; drop --dtype {dtype}")
        if spec is None or group_size is not None:
            raise GptcalcError("--quant: a scheme fixes its own groups and scales; --group-size does not apply")
        return Weights(breakdown.model, weight_format("bf16"), _params(breakdown), None, scheme,
                       scheme_bits(spec, breakdown, scheme))
    fmt = dtype if isinstance(dtype, Format) else weight_format(dtype)
    if group_size is not None:
        if fmt.bits_per_value >= 16 or fmt.block > 1:
            raise GptcalcError(f"--group-size: only for plain 8- and 4-bit dtypes (fp8, int8, int4), not {fmt.name}")
        if group_size < 1:
            raise GptcalcError(f"--group-size: must be at least 1, got {group_size}")
    return Weights(breakdown.model, fmt, _params(breakdown), group_size)


def _params(breakdown: Breakdown) -> dict[str, int]:
    """Every stored parameter by row: the decoder's components, then each tower's."""
    return {**breakdown.components, **tower_params(breakdown)}
