"""Active parameters per token under every convention, the vendor's own marked and matching its figure."""

from __future__ import annotations

import pytest

import calc
from calc.analysis.active import VENDOR, active_counts


@pytest.mark.parametrize("model, published, digits", [
    # source: https://openai.com/index/gpt-oss-model-card/ (5.13B and 3.61B active; unembedding counted)
    ("gpt-oss-120b", 5.13, 2), ("gpt-oss-20b", 3.61, 2),
    # source: https://mistral.ai/news/mixtral-of-experts ("uses only 12.9B parameters per token")
    ("mixtral-8x7b", 12.9, 1),
])
def test_the_vendors_convention_gives_the_vendors_figure(model: str, published: float, digits: int) -> None:
    spec = calc.load(model)
    counts = active_counts(calc.count(spec).value, spec.model_type)
    (vendor,) = [c for c in counts if c.vendor]
    assert round(vendor.params / 1e9, digits) == published
    # and no other convention gives that figure at the vendor's precision
    assert [round(c.params / 1e9, digits) for c in counts].count(published) == 1


def test_every_convention_is_listed_and_in_count_json() -> None:
    spec = calc.load("gpt-oss-120b")
    data = calc.count(spec).to_dict()["active_conventions"]
    assert [c["convention"] for c in data] == ["all", "without_embedding", "without_embedding_and_head"]
    assert [c["vendor"] for c in data] == [False, True, False]
    b = calc.count(spec).value
    assert data[0]["params"] == b.active and data[0]["params"] - data[1]["params"] == b.get("token_embedding")
    assert "active_conventions" not in calc.count(calc.load("llama-3-8b")).to_dict()  # dense: all active
    assert set(VENDOR) == {"gpt_oss", "mixtral"}  # each tested above against its published figure
