"""Gemma-3n and Gemma-4's text decoders (gemma3n_text, gemma4_text) against transformers itself.

For each tiny config (tests/tiny_models.py: AltUp, LAuReL, per-layer inputs, KV shared by the last
two layers, Gemma-4's wide global heads with V = K and a MoE beside every MLP): our count equals
transformers' model; our cache equals the K and V tensors transformers' cache object holds after a
forward pass at two lengths (below the window, where transformers' rolling buffer keeps window - 1
and gptcalc the window), so the KV-shared layers are seen to keep nothing; and the header check
recognises every tensor transformers writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from calc.analysis.count import count
from calc.analysis.memory.kv import kv_cache
from calc.spec.load import load_spec
from oracle import spec_of, transformers_count
from test_hybrids import BATCH, _transformers_cache, _transformers_tiny
from tiny_models import tiny_config

CONFIGS = Path(__file__).resolve().parent / "configs" / "model_types"
TYPES = ["gemma3n_text", "gemma4_text"]


@pytest.mark.parametrize("model_type", TYPES)
def test_tiny_total_equals_transformers(model_type: str) -> None:
    assert count(spec_of(tiny_config(model_type))).total == transformers_count(tiny_config(model_type))


@pytest.mark.parametrize("model_type", TYPES)
@pytest.mark.parametrize("seq", [3, 4])
def test_cache_equals_transformers_cache_objects(model_type: str, seq: int) -> None:
    spec = spec_of(tiny_config(model_type))
    ours = kv_cache(spec, seq, BATCH, "fp32")
    rows, states = _transformers_cache(model_type, seq)
    assert ours.state_bytes == states == 0
    assert ours.total_bytes // 4 == rows


@pytest.mark.parametrize("model_type", TYPES)
def test_kv_shared_layers_keep_no_cache(model_type: str) -> None:
    """Layers 2 and 3 read the K and V of layers 0 and 1: only two layers' rows per token."""
    spec = spec_of(tiny_config(model_type))
    kv = kv_cache(spec, 4, 1, "fp32")
    assert sum(kind.n_layers for kind in kv.layers) == 2
    assert {kind.block for kind in kv.layers} == {name for name in spec.blocks if "shared" not in name}


@pytest.mark.parametrize("model_type", TYPES)
def test_header_check_recognises_every_tensor(model_type: str, tmp_path: Path) -> None:
    from calc.checkpoint.report import read_checkpoint

    _transformers_tiny(model_type).save_pretrained(tmp_path)
    report = read_checkpoint(str(tmp_path))
    assert report.ok, (report.unknown, report.mismatches)
    assert report.breakdown.total == transformers_count(tiny_config(model_type))


def test_gemma4_26b_a4b_published_total() -> None:
    """The text decoder of google/gemma-4-26B-A4B, counted as transformers 5.24 builds it."""
    # source: https://vast.ai/model/gemma-4-26b-a4b-it ("25.2B total parameters but only 3.8B active per token")
    b = count(load_spec(str(CONFIGS / "gemma4-26b-a4b.json")))
    assert b.decoder_total == 25_233_141_760 and b.active == 3_822_530_560
    assert round(b.decoder_total / 1e8) == 252 and round(b.active / 1e8) == 38


def test_gemma3n_e2b_shares_a_third_of_its_caches() -> None:
    """Gemma-3n E2B: 20 of 30 layers keep K and V (2 KV heads x 256, 4 of 20 global), 10 reuse them."""
    spec = load_spec(str(CONFIGS / "gemma3n_text-e2b.json"))
    kv = kv_cache(spec, 100, 1, "bf16")
    # source: the config (num_kv_shared_layers 10, every 5th layer global): 20 caching layers x 2 x 512 x 2 B
    assert sum(kind.n_layers for kind in kv.layers) == 20
    assert kv.total_bytes == 20 * 2 * 2 * 256 * 2 * 100
