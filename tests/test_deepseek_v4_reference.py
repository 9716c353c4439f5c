"""DeepSeek-V4's torch reference past what tests/test_reference_equivalence.py's 12 tokens reach.

The tiny model (tests/tiny_models.py: a 16-token window, CSA one entry per 4 tokens with the
indexer keeping 2, HCA one per 8) run over 40 tokens: the window rolls, HCA closes five entries and
the indexer chooses 2 of up to 10. transformers' model (DeepseekV4ForCausalLM, random weights)
is the oracle, with what its initialisation leaves at constants made random: the compressors'
position biases (zeros) and the hash layer's token-id table (zeros: every token to expert 0).
Ours is built from the config as written (legacy keys: rope_scaling, qk_rope_head_dim,
num_hash_layers), not from transformers' rewrite of it.
"""

from __future__ import annotations

import pytest

from oracle import spec_of
from tiny_models import VOCAB, tiny_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calc.analysis.memory import kv_cache  # noqa: E402
from calc.reference.model import build  # noqa: E402
from test_reference_equivalence import ATOL, random_model  # noqa: E402

IDS = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(4))


@pytest.fixture(scope="module")
def models() -> tuple:
    """(ours, transformers') on the same weights."""
    hf = random_model(tiny_config("deepseek_v4"))
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, tensor in hf.state_dict(keep_vars=True).items():
            if name.endswith("position_bias"):
                tensor.copy_(torch.randn(tensor.shape, generator=generator))
            elif name.endswith("tid2eid"):
                tensor.copy_(torch.randint(0, 4, tensor.shape, generator=generator))
    ours = build(spec_of(tiny_config("deepseek_v4")))
    ours.load_state_dict(hf.state_dict(), strict=True)
    return ours, hf


def test_forty_token_prefill_equals_transformers(models: tuple) -> None:
    ours, hf = models
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS), hf(IDS).logits, rtol=0, atol=ATOL)


def test_chunks_and_steps_equal_transformers(models: tuple) -> None:
    """Prefill 5, single steps, a 9-token chunk and a 14-token one: each call continues the window,
    the tokens waiting for their compressor window and the overlapping series where the last left
    them, in ours as in transformers' own cache (DeepseekV4CSACache, DeepseekV4HCACache)."""
    ours, hf = models
    bounds = (0, 5, 6, 7, 16, 17, 18, 32, 33, 40)
    cache, out, ours_logits, hf_logits = ours.new_cache(), None, [], []
    with torch.no_grad():
        for start, end in zip(bounds, bounds[1:]):
            ours_logits.append(ours(IDS[:, start:end], cache=cache))
            out = hf(IDS[:, start:end], cache=None if out is None else out.cache, use_cache=True)
            hf_logits.append(out.logits)
    torch.testing.assert_close(torch.cat(ours_logits, dim=1), torch.cat(hf_logits, dim=1), rtol=0, atol=ATOL)
    assert cache.length == 40


@pytest.mark.parametrize("length", [3, 7, 12, 15, 20, 23])
def test_cache_holds_at_most_the_formula_and_all_of_it_one_short_of_a_window(length: int) -> None:
    """A prefill of `length` tokens in bf16 (past the window of 16 from 17 on): the reference's cache
    (the window's K = V rows, the compressed entries and indexer keys, the tokens waiting for their
    window, the overlap, its gate in fp32) never exceeds what `kvcache` counts, and equals it when
    both compressors hold their most, one token short of a window of 8 (HCA's; CSA's 4 divides it)."""
    spec = spec_of(tiny_config("deepseek_v4"))
    torch.manual_seed(0)
    model = build(spec, dtype=torch.bfloat16)
    cache = model.new_cache()
    with torch.no_grad():
        model(IDS[:1, :length], cache=cache)
    formula = kv_cache(spec, length, 1, "bf16").total_bytes
    assert cache.nbytes == formula if length % 8 == 7 else cache.nbytes < formula
