"""Storage formats: how many bits a run of n values occupies, scales included.

A format stores values in blocks: `block` values in `block_bits` bits. Plain dtypes are blocks of
one value (fp16: 1 value in 16 bits; int4: 1 value in 4 bits, packed two to a byte). llama.cpp's
quantised types carry their scales inside the block, so q8_0 is 32 int8 values plus one fp16
scale: 34 bytes per 32 values, 8.5 bits per value, not 8. A row of n values occupies
ceil(n / block) blocks (ggml_row_size: ggml only makes rows of whole blocks), rounded up to bytes.

Every block size below is from ggml's block structs with their static_asserts:
GGML = https://github.com/ggml-org/llama.cpp/blob/01243c587feceaa5d6a6c2305535ef2f549c48b8/ggml/src/ggml-common.h
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from calc.errors import GptcalcError

__all__ = ["FORMATS", "KV_FORMATS", "WEIGHT_FORMATS", "Format", "bits_to_bytes", "find_format", "kv_format",
           "weight_format"]

GGML = "https://github.com/ggml-org/llama.cpp/blob/01243c587feceaa5d6a6c2305535ef2f549c48b8/ggml/src/ggml-common.h"
IEEE = "IEEE 754-2008 binary32 / binary16"
BF16 = "bfloat16: https://cloud.google.com/tpu/docs/bfloat16 (8 exponent, 7 mantissa bits)"
OCP_FP8 = "OCP 8-bit Floating Point Specification (OFP8) rev 1.0: https://www.opencompute.org/documents/ocp-8-bit-floating-point-specification-ofp8-revision-1-0-2023-12-01-pdf-1"
QK_K = 256  # GGML: super-block size of the k-quants
K_SCALE_SIZE = 12  # GGML: bytes of 6-bit scales and mins in q4_K / q5_K


def bits_to_bytes(bits: int) -> int:
    """Whole bytes that hold `bits` (rounded up: half a byte still occupies a byte)."""
    return -(-bits // 8)


@dataclass(frozen=True)
class Format:
    """`block` values stored in `block_bits` bits, scales included."""

    name: str
    block: int
    block_bits: int
    layout: str  # what one block holds, in words
    source: str

    @property
    def bits_per_value(self) -> Fraction:
        """Exact average width: Fraction(17, 2) for q8_0."""
        return Fraction(self.block_bits, self.block)

    def row_bits(self, n: int) -> int:
        """Bits for a row of n values: whole blocks (a partial block still takes a whole one)."""
        return -(-n // self.block) * self.block_bits

    def row_bytes(self, n: int) -> int:
        return bits_to_bytes(self.row_bits(n))

    def describe(self) -> str:
        bits = self.bits_per_value
        width = f"{bits.numerator / bits.denominator:g} bits per value"
        if self.block == 1:
            return f"{self.name}: {width}"
        return f"{self.name}: {self.block_bits // 8} bytes per {self.block} values = {width} ({self.layout})"


def _ggml(name: str, block: int, nbytes: int, layout: str) -> Format:
    return Format(name, block, nbytes * 8, layout, f"{GGML} (block_{name})")


_PLAIN = (
    Format("fp32", 1, 32, "IEEE binary32", IEEE),
    Format("fp16", 1, 16, "IEEE binary16", IEEE),
    Format("bf16", 1, 16, "bfloat16", BF16),
    Format("fp8_e4m3", 1, 8, "FP8 E4M3", OCP_FP8),
    Format("fp8_e5m2", 1, 8, "FP8 E5M2", OCP_FP8),
    Format("int8", 1, 8, "8-bit integer, no scales", "8 bits"),
    Format("int4", 1, 4, "4-bit integer, two per byte, no scales", "4 bits"),
)
# llama.cpp's block types: 32 values with an fp16 scale (d) and, for the _1 types, an fp16 min (m).
_GGML_32 = (
    _ggml("q8_0", 32, 2 + 32, "fp16 scale + 32 int8"),
    _ggml("q5_1", 32, 2 + 2 + 4 + 16, "fp16 scale and min + 32 fifth bits + 32 nibbles"),
    _ggml("q5_0", 32, 2 + 4 + 16, "fp16 scale + 32 fifth bits + 32 nibbles"),
    _ggml("q4_1", 32, 2 + 2 + 16, "fp16 scale and min + 32 nibbles"),
    _ggml("q4_0", 32, 2 + 16, "fp16 scale + 32 nibbles"),
    _ggml("iq4_nl", 32, 2 + 16, "fp16 scale + 32 non-linear nibbles"),
)
# The k-quants: super-blocks of QK_K = 256 values (weights only: llama.cpp's KV cache takes the above).
_GGML_K = (
    _ggml("q6_K", QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2, "4+2-bit quants, 16 int8 scales, fp16 super-scale"),
    _ggml("q5_K", QK_K, 2 + 2 + K_SCALE_SIZE + QK_K // 2 + QK_K // 8, "fp16 scale and min, 6-bit scales, 5-bit quants"),
    _ggml("q4_K", QK_K, 2 + 2 + K_SCALE_SIZE + QK_K // 2, "fp16 scale and min, 6-bit scales, 4-bit quants"),
    _ggml("q3_K", QK_K, QK_K // 8 + QK_K // 4 + 12 + 2, "3-bit quants, 6-bit scales, fp16 super-scale"),
    _ggml("q2_K", QK_K, QK_K // 16 + QK_K // 4 + 2 + 2, "2-bit quants, 4-bit scales and mins, fp16 scale and min"),
    _ggml("iq4_xs", QK_K, 2 + 2 + QK_K // 64 + QK_K // 2, "fp16 scale, 6-bit sub-block scales, 4-bit non-linear quants"),
    # one E8M0 exponent per 32 FP4 (E2M1) values: OCP Microscaling Formats (MX) v1.0
    _ggml("mxfp4", 32, 1 + 16, "E8M0 scale + 32 FP4 E2M1"),
    # the i-quants below 4 bits and the ternary types (ggml/src/ggml-common.h static_asserts of each block)
    _ggml("iq3_s", QK_K, 2 + 13 * (QK_K // 32) + QK_K // 64, "fp16 scale, 3-bit grid indices, signs, 4-bit scales"),
    _ggml("iq3_xxs", QK_K, 2 + 3 * (QK_K // 8), "fp16 scale, 3-bit grid indices with signs and scales"),
    _ggml("iq2_s", QK_K, 2 + QK_K // 4 + QK_K // 16, "fp16 scale, 2-bit grid indices, signs, 4-bit scales"),
    _ggml("iq2_xs", QK_K, 2 + 2 * (QK_K // 8) + QK_K // 32, "fp16 scale, 9-bit grid indices with signs, 4-bit scales"),
    _ggml("iq2_xxs", QK_K, 2 + 2 * (QK_K // 8), "fp16 scale, 8-bit grid indices with signs and scales"),
    _ggml("iq1_m", QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32, "1.75-bit grid indices, 3-bit scales (fp16 split over them)"),
    _ggml("iq1_s", QK_K, 2 + QK_K // 8 + QK_K // 16, "fp16 scale, 1.5-bit grid indices, 3-bit scales"),
    _ggml("tq2_0", QK_K, QK_K // 4 + 2, "2-bit ternary values, fp16 scale"),
    _ggml("tq1_0", QK_K, (QK_K - 4 * QK_K // 64) // 5 + QK_K // 64 + 2, "ternary values 5 per byte (and 4), fp16 scale"),
)

FORMATS: dict[str, Format] = {f.name: f for f in (*_PLAIN, *_GGML_32, *_GGML_K)}
# What each knob accepts: llama.cpp's --cache-type-k/v takes f32, f16, bf16, q8_0, q4_0, q4_1,
# iq4_nl, q5_0 and q5_1 (kv_cache_types in https://github.com/ggml-org/llama.cpp/blob/master/common/arg.cpp);
# vLLM's --kv-cache-dtype fp8_e4m3 / fp8_e5m2.
KV_FORMATS = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int4", *(f.name for f in _GGML_32))
WEIGHT_FORMATS = tuple(FORMATS)

# Names as people write them (torch, numpy, vLLM, llama.cpp), after lower-casing and dropping "torch.".
ALIASES = {
    "float32": "fp32", "float": "fp32", "f32": "fp32",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bfloat16": "bf16",
    "fp8": "fp8_e4m3", "e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "float8_e4m3": "fp8_e4m3",
    "fp8e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2", "fp8e5m2": "fp8_e5m2",
    "q4k": "q4_K", "q5k": "q5_K", "q6k": "q6_K", "q3k": "q3_K", "q2k": "q2_K",
}


def find_format(text: str, allowed: tuple[str, ...] = WEIGHT_FORMATS) -> Format | None:
    """A format by any common spelling ('bfloat16', 'FP16', 'torch.float8_e4m3fn', 'Q8_0'), or None."""
    key = text.strip().lower().removeprefix("torch.").replace("-", "_")
    by_lower = {name.lower(): name for name in allowed}
    name = by_lower.get(key) or ALIASES.get(key) or ALIASES.get(key.replace("_", ""))
    return FORMATS[name] if name in allowed else None


def _lookup(text: str, allowed: tuple[str, ...], what: str) -> Format:
    found = find_format(text, allowed)
    if found is None:
        raise GptcalcError(f"{what} {text!r}: unknown (choose from {', '.join(allowed)})")
    return found


def kv_format(text: str) -> Format:
    """A KV-cache element format; an unknown name is bad input."""
    return _lookup(text, KV_FORMATS, "--kv-dtype")


def weight_format(text: str) -> Format:
    """A weight storage format; an unknown name is bad input."""
    return _lookup(text, WEIGHT_FORMATS, "--dtype")
