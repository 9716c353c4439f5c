"""The dtypes a safetensors header may name, with their widths, each spelt by one shared string.

A parser may hand back a new string per tensor for its dtype ("BF16" 100,000 times over; pydantic_core
shares short strings, but only while its cache holds them). Kept as a column while the parser's other
objects are freed, such strings leave the allocator's memory riddled with holes that the next
shard's objects are then scattered into: reading a 100,000-tensor checkpoint of 10 shards took about
a quarter longer for it (measured: `benchmarks/bench_inspect.py`, with `json.loads`). Mapping each
through `DTYPE_NAMES` keeps this module's one string per dtype instead, which also makes later
look-ups by dtype compare by identity. Byte sizes are shared the same way
(`calc.checkpoint.header_columns`).
"""

from __future__ import annotations

__all__ = ["BYTE_WIDTHS", "DTYPE_BITS", "DTYPE_NAMES"]

# Every dtype the safetensors format defines, with its width in bits (F4 and F6 pack below a byte).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}
DTYPE_NAMES: dict[str, str] = {name: name for name in DTYPE_BITS}
BYTE_WIDTHS: dict[str, int] = {name: bits // 8 for name, bits in DTYPE_BITS.items() if bits % 8 == 0}
