"""Human units: decimal counts, bytes that always say binary (MiB) or decimal (MB), sizes parsed."""

from __future__ import annotations

import pytest

from calc.units import bytes_with_units, count_with_units, human_bytes, human_count, parse_bytes


@pytest.mark.parametrize(("n", "text"), [
    (999, "999"), (786_432, "786.43 K"), (124_439_808, "124.44 M"), (68_976_648_192, "68.98 B"),
    (174_604_259_328, "174.60 B"), (1_000_000_000_000, "1.00 T"),
])
def test_human_count(n: int, text: str) -> None:
    assert human_count(n) == text


def test_count_with_units() -> None:
    assert count_with_units(124_439_808) == "124,439,808 (124.44 M)"
    assert count_with_units(768) == "768"


@pytest.mark.parametrize(("n", "binary", "text"), [
    (37_748_736, True, "36.0 MiB"),  # 36 * 2**20: gpt2-small's fp16 KV cache at 1,024 tokens
    (37_748_736, False, "37.7 MB"),
    (1_342_177_280, True, "1.25 GiB"), (1_342_177_280, False, "1.34 GB"),
    (10_737_418_240, True, "10.0 GiB"), (512, True, "512 B"),
])
def test_human_bytes_says_which_units(n: int, binary: bool, text: str) -> None:
    assert human_bytes(n, binary) == text


def test_huge_values_do_not_overflow() -> None:
    assert human_bytes(10**400).endswith(" PiB") and human_count(10**400).endswith(" T")


def test_bytes_with_units() -> None:
    assert bytes_with_units(37_748_736) == "37,748,736 B (36.0 MiB, 37.7 MB)"
    assert bytes_with_units(1000) == "1,000 B (1.00 kB)"  # not yet a KiB
    assert bytes_with_units(999) == "999 B"


@pytest.mark.parametrize(("text", "n"), [
    ("80GB", 80 * 10**9), ("80 GiB", 80 * 2**30), ("24gib", 24 * 2**30), ("1.5TB", 1_500_000_000_000),
    ("1e9", 10**9), ("4096", 4096), ("512MiB", 512 * 2**20), ("2kB", 2000),
    ("9007199254740993", 2**53 + 1),  # exact beyond a float's 53 bits
])
def test_parse_bytes(text: str, n: int) -> None:
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text", ["", "GB", "eighty GB", "80XB", "-5GB", "inf", "infGB", "nan", "1e400e"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)
