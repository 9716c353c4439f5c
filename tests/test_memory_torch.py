"""The KV cache formula against a real decoder: the cache tensors' `nbytes` must equal it exactly.

The torch reference model (calc.reference.model) appends each step's keys and values to a `KVCache`
without preallocating, so after T positions it holds exactly what attention reads: all T of a full
layer, the last min(T, window) of a sliding-window layer (a rolling cache); a Mamba2, gated
DeltaNet or short-conv layer its fixed conv window and recurrent state. Tiny specs cover MHA, GQA
and MQA, both families (GPT-2's learned positions, Llama's rotary), a head_dim that is not
d_model / n_heads, every hybrid model_type, and the three float dtypes torch can run on CPU.
"""

from __future__ import annotations

import pytest
import torch

from calc.analysis.memory import kv_cache, kv_variants
from calc.spec.flat import flat_view
from calc.spec.model import ModelSpec, spec_from_dict
from calc.reference.model import build
from oracle import spec_of
from test_hybrids import HYBRIDS
from tiny_models import tiny_config

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

SPECS = {
    "llama-mha": dict(family="llama", n_heads=4, n_kv_heads=4),
    "llama-gqa": dict(family="llama", n_heads=4, n_kv_heads=2),
    "llama-mqa": dict(family="llama", n_heads=4, n_kv_heads=1),
    "gpt2-mha": dict(family="gpt2", n_heads=4),
    # head_dim 12 with d_model 32: a cache sized by d_model / n_heads = 8 would be wrong
    "llama-gqa-wide-heads": dict(family="llama", n_heads=4, n_kv_heads=2, head_dim=12),
}


def tiny(name: str) -> ModelSpec:
    return spec_from_dict(dict(name=name, vocab_size=50, n_positions=32, d_model=32, n_layers=3, d_ff=64, **SPECS[name]), name)


def run_cache(spec: ModelSpec, dtype: str, batch: int, prompt: int, steps: int) -> tuple[object, list[int]]:
    """Prefill `prompt` tokens, then decode `steps` more one at a time; nbytes after each call."""
    torch.manual_seed(0)
    model = build(spec, dtype=TORCH_DTYPES[dtype])
    cache = model.new_cache()
    sizes = []
    with torch.no_grad():
        model(torch.randint(0, spec.vocab_size, (batch, prompt)), cache=cache)
        sizes.append(cache.nbytes)
        for _ in range(steps):
            model(torch.randint(0, spec.vocab_size, (batch, 1)), cache=cache)
            sizes.append(cache.nbytes)
    return cache, sizes


@pytest.mark.parametrize("dtype", sorted(TORCH_DTYPES))
@pytest.mark.parametrize("name", sorted(SPECS))
def test_cache_nbytes_equal_the_formula(name: str, dtype: str) -> None:
    spec, batch, prompt, steps = tiny(name), 2, 5, 4
    cache, sizes = run_cache(spec, dtype, batch, prompt, steps)
    assert sizes == [kv_cache(spec, prompt + i, batch, dtype).total_bytes for i in range(steps + 1)]
    seq = prompt + steps
    assert len(cache.keys) == len(cache.values) == spec.n_layers
    for tensor in (*cache.keys.values(), *cache.values.values()):
        assert tuple(tensor.shape) == (batch, flat_view(spec).n_kv_heads, seq, flat_view(spec).head_dim)
        assert tensor.dtype == TORCH_DTYPES[dtype]
        assert tensor.untyped_storage().nbytes() == tensor.nbytes  # no hidden preallocated storage


@pytest.mark.parametrize("dtype", sorted(TORCH_DTYPES))
def test_mha_gqa_mqa_variants_match_real_models(dtype: str) -> None:
    spec = tiny("llama-gqa")
    for variant, kv in kv_variants(spec, 7, 3, dtype).items():
        real = spec.with_kv_heads(kv.n_kv_heads)
        _, sizes = run_cache(real, dtype, batch=3, prompt=7, steps=0)
        assert sizes == [kv.total_bytes], variant


# --- a rolling window and an MLA latent, as real tensors ---------------------------------------


class RollingCache:
    """What an engine with a rolling buffer keeps for one windowed layer: the last `window` K and V
    rows, projected by a real nn.Linear sized from the spec's attention part."""

    def __init__(self, d_model: int, width_k: int, width_v: int, window: int | None, dtype: torch.dtype) -> None:
        self.k_proj = torch.nn.Linear(d_model, width_k, bias=False, dtype=dtype)
        self.v_proj = torch.nn.Linear(d_model, width_v, bias=False, dtype=dtype) if width_v else None
        self.window, self.keys, self.values = window, [], []

    def append(self, x: torch.Tensor) -> None:
        self.keys.append(self.k_proj(x))
        if self.v_proj is not None:
            self.values.append(self.v_proj(x))
        if self.window:
            self.keys, self.values = self.keys[-self.window:], self.values[-self.window:]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (*self.keys, *self.values))


def _run_layers(spec: ModelSpec, seq: int, batch: int, dtype: str) -> int:
    """Decode `seq` tokens through one RollingCache per layer; the bytes all layers hold at the end."""
    torch.manual_seed(0)
    caches = []
    for repeat, block in spec.runs():
        part = block.attention
        k, v = part.kv_per_token()
        caches += [RollingCache(spec.d_model, k, v, part.window, TORCH_DTYPES[dtype]) for _ in range(repeat)]
    with torch.no_grad():
        for _ in range(seq):
            x = torch.randn(batch, spec.d_model, dtype=TORCH_DTYPES[dtype])
            for cache in caches:
                cache.append(x)
    return sum(cache.nbytes for cache in caches)



def _hybrid(window: int) -> ModelSpec:
    """A Gemma-2-like stack: local (windowed) and global layers alternating, 2 KV heads of 8."""
    attention = dict(kind="attention", n_heads=4, n_kv_heads=2, head_dim=8)
    block = lambda w: dict(attention={**attention, "window": w}, mlp=dict(kind="mlp", d_ff=64, gated=True),  # noqa: E731
                           norm=dict(kind="rmsnorm"))
    return spec_from_dict(dict(name="tiny-hybrid", vocab_size=50, d_model=32, n_positions=64,
                               blocks={"local": block(window), "global": block(None)},
                               layers=[[1, "local"], [1, "global"], [1, "local"], [1, "global"]],
                               final_norm=dict(kind="rmsnorm"), head=dict(tied=True)), "test")


@pytest.mark.parametrize("seq", [3, 5, 6, 11])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_rolling_window_cache_holds_the_formula(seq: int, dtype: str) -> None:
    spec = _hybrid(window=5)
    assert _run_layers(spec, seq, 2, dtype) == kv_cache(spec, seq, 2, dtype).total_bytes
    if seq > 5:  # an engine that does not roll holds every position on every layer
        assert kv_cache(spec, seq, 2, dtype).unrolled_bytes > kv_cache(spec, seq, 2, dtype).total_bytes


def test_mla_latent_cache_holds_the_formula() -> None:
    """The latent kv_a projection's output (kv_lora_rank + qk_rope_head_dim) is what is cached."""
    mla = dict(kind="mla", n_heads=4, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
               v_head_dim=6, norm=dict(kind="rmsnorm"))
    block = dict(attention=mla, mlp=dict(kind="mlp", d_ff=64, gated=True), norm=dict(kind="rmsnorm"))
    spec = spec_from_dict(dict(name="tiny-mla", vocab_size=50, d_model=32, n_positions=64, blocks={"block": block},
                               layers=[[3, "block"]], final_norm=dict(kind="rmsnorm"), head=dict(tied=True)), "test")
    assert _run_layers(spec, 7, 2, "fp16") == kv_cache(spec, 7, 2, "fp16").total_bytes == 3 * (12 + 4) * 2 * 7 * 2


# --- the reference's own rolling cache, layer kind by layer kind --------------------------------


@pytest.mark.parametrize("model_type", ["gemma2", "gemma3_text", "gpt_oss", "gemma3n_text", "gemma4_text"])
def test_reference_cache_rolls_as_the_formula_counts(model_type: str) -> None:
    """Tiny stacks mixing sliding-window (5) and full layers, decoded to T = 9 > window: the reference's
    own cache tensors hold, per layer kind, exactly the formula's bytes (fp32 = torch.float32), the
    windowed layers min(T, window) positions, the full ones all T; no hidden storage behind them.
    Gemma-3n's and Gemma-4's KV-shared layers (their last two) keep nothing: the whole cache is the formula's total."""
    spec, batch, prompt, steps = spec_of(tiny_config(model_type)), 2, 3, 6
    seq = prompt + steps
    cache, _ = run_cache(spec, "fp32", batch, prompt, steps)
    assert cache.length == seq
    formula = kv_cache(spec, seq, batch, "fp32")
    windows = {kind.window for kind in formula.layers}
    assert None in windows and any(w is not None and w < seq for w in windows)  # both kinds, a window that rolls
    for kind in formula.layers:
        layers = [i for i in range(spec.n_layers) if spec.block_at(i) == kind.block]
        assert sum(cache.layer_nbytes(i) for i in layers) == formula.kind_bytes(kind), kind.block
        for i in layers:
            assert cache.keys[i].shape[2] == cache.values[i].shape[2] == kind.tokens(seq)
            for tensor in (cache.keys[i], cache.values[i]):
                assert tensor.untyped_storage().nbytes() == tensor.nbytes
    assert cache.nbytes == formula.total_bytes < formula.unrolled_bytes


@pytest.mark.parametrize("model_type", ["gemma2", "gpt_oss", "gemma3n_text", "gemma4_text"])
def test_chunks_after_the_cache_rolled_equal_one_full_pass(model_type: str) -> None:
    """A 7-token prompt (the window, 5, already rolled), then chunks of 3 and 1 tokens: each chunk's
    queries read the rolled keys from their own window on (Gemma-3n's and Gemma-4's KV-shared layers
    the keys their source layer kept), and the logits equal one 11-token pass."""
    spec = spec_of(tiny_config(model_type))
    cache = _chunks_equal_one_pass(spec, ((0, 7), (7, 10), (10, 11)))
    assert cache.nbytes == kv_cache(spec, 11, 2, "fp32").total_bytes


def _chunks_equal_one_pass(spec, bounds: tuple[tuple[int, int], ...]):  # noqa: ANN202 - the reference's cache
    """The reference's logits for 11 tokens fed as the chunks `bounds` into one cache equal one full
    pass; the cache, holding all 11, is returned."""
    torch.manual_seed(0)
    model = build(spec)
    ids = torch.randint(0, spec.vocab_size, (2, 11))
    cache = model.new_cache()
    with torch.no_grad():
        full = model(ids)
        chunks = [model(ids[:, a:b], cache=cache) for a, b in bounds]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, rtol=1e-5, atol=1e-5)
    assert cache.length == 11
    return cache


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("model_type", HYBRIDS)
def test_mixer_states_hold_the_formula(model_type: str, dtype: str) -> None:
    """A 3-token prompt (shorter than every conv window) then 4 one-token steps: after each call the
    reference's cache holds exactly what `kvcache` counts, its mixers' conv windows and recurrent
    states (Nemotron-H's in float32 whatever the weights) and its attention layers' K and V; and each
    mixer layer keeps the states its part's CacheSpec lists, whatever the length."""
    spec, batch, prompt, steps = spec_of(tiny_config(model_type)), 2, 3, 4
    cache, sizes = run_cache(spec, dtype, batch, prompt, steps)
    assert sizes == [kv_cache(spec, prompt + i, batch, dtype).total_bytes for i in range(steps + 1)]
    assert cache.states  # every hybrid has mixer layers
    for layer, states in cache.states.items():
        expected = spec.blocks[spec.block_at(layer)].cache(spec.d_model).states
        assert {name: t.numel() // batch for name, t in states.items()} == {s.name: s.elements for s in expected}


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_mixer_chunks_equal_one_full_pass(model_type: str) -> None:
    """A 2-token prompt (shorter than the conv windows: the kept window starts with zeros), then
    chunks of 3, 1 and 5 tokens: each chunk continues the conv window and the recurrent state where
    the last one left them, and the logits equal one 11-token pass."""
    _chunks_equal_one_pass(spec_of(tiny_config(model_type)), ((0, 2), (2, 5), (5, 6), (6, 11)))
