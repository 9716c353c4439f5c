"""Human units for exact integers, used only when rendering.

Counts of parameters use decimal prefixes (124.44 M = 124.44 x 10^6). Bytes always say which
system they are in: binary units (KiB, MiB, GiB = 1024^n) or decimal ones (kB, MB, GB = 1000^n),
because "70 G" is 70 GB or 65.2 GiB depending on who wrote it.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

__all__ = ["human_count", "count_with_units", "human_bytes", "bytes_with_units", "parse_bytes"]

_COUNT_UNITS = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K"))
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_DECIMAL = ("B", "kB", "MB", "GB", "TB", "PB")


def human_count(n: int) -> str:
    """124439808 -> '124.44 M'; below a thousand the number itself."""
    for size, suffix in _COUNT_UNITS:
        if abs(n) >= size:
            return f"{Decimal(n) / size:.2f} {suffix}"
    return str(n)


def count_with_units(n: int) -> str:
    """124439808 -> '124,439,808 (124.44 M)'."""
    return f"{n:,}" if abs(n) < 1000 else f"{n:,} ({human_count(n)})"


def human_bytes(n: int, binary: bool = True) -> str:
    """37748736 -> '36.0 MiB' (binary) or '37.7 MB' (decimal). Decimal division: no float
    overflow, however large the int."""
    base, names = (1024, _BINARY) if binary else (1000, _DECIMAL)
    unit = 0
    while abs(n) >= base ** (unit + 1) and unit < len(names) - 1:
        unit += 1
    if unit == 0:
        return f"{n} B"
    value = Decimal(n) / base**unit
    return f"{value:.2f} {names[unit]}" if abs(value) < 10 else f"{value:.1f} {names[unit]}"


def bytes_with_units(n: int) -> str:
    """37748736 -> '37,748,736 B (36.0 MiB, 37.7 MB)': exact, then binary and decimal units."""
    units = [u for u in (human_bytes(n), human_bytes(n, binary=False)) if not u.endswith(" B")]
    return f"{n:,} B ({', '.join(units)})" if units else f"{n:,} B"


_SUFFIXES = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


_MAX_SIZE_DIGITS = 30  # 10^30 B: a million times all the storage on Earth


def parse_bytes(text: str) -> int:
    """'80GB' -> 80_000_000_000, '24GiB' -> 25_769_803_776; a bare number is bytes.

    Decimal arithmetic keeps large sizes exact (a float loses bytes above 2^53) and refuses
    'inf' and 'nan', which are not sizes.
    """
    cleaned = text.strip().lower().replace(" ", "").replace("_", "")
    number = cleaned.rstrip("kmgtib")
    suffix = cleaned[len(number):]
    try:
        value = Decimal(number) if suffix in _SUFFIXES and number else None
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite():
        raise ValueError(f"{text!r} is not a size (examples: 80GB, 24GiB, 1e9)")
    if value < 0:
        raise ValueError(f"{text!r} is negative")
    if value.adjusted() >= _MAX_SIZE_DIGITS:  # before multiplying: 1e999999999 would overflow Decimal
        raise ValueError(f"{text!r} is larger than any memory")
    return int((value * _SUFFIXES[suffix]).to_integral_value())
