"""The reference decoder is a real model: it loads transformers checkpoints strictly and gives
transformers' logits, decodes with a KV cache, counts like the analytic counter, costs nothing on meta.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from calc.spec.flat import flat_view
from calc.spec.presets import preset_names
from calc.analysis.breakdown import compare
from calc.analysis.count import count
from calc.checkpoint.names import expected_shapes, tensor_table
from calc.spec.load import load_spec
from calc.spec.model import spec_from_dict
from calc.reference.count import breakdown, torch_breakdown
from calc.reference.model import KVCache, build

transformers = pytest.importorskip("transformers")

TINY = {"n_positions": 32, "d_model": 32, "n_layers": 2, "n_heads": 4}


def hf_checkpoint(kind: str, path: Path) -> torch.nn.Module:
    """A tiny random transformers model of `kind`, written by save_pretrained to `path`."""
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
    else:
        common = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                      rms_norm_eps=1e-6, rope_theta=5000.0, bos_token_id=0, eos_token_id=0, pad_token_id=0)
        if kind == "llama":  # GQA: 2 query heads per KV head; untied head
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common, tie_word_embeddings=False))
        else:  # Qwen2: Q/K/V biases; tied head as in Qwen2-0.5B
            model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common, tie_word_embeddings=True))
    model.eval()
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module", params=["gpt2", "llama", "qwen2"])
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(transformers model, our model loaded strictly from its save_pretrained directory)."""
    path = tmp_path_factory.mktemp(request.param)
    hf = hf_checkpoint(request.param, path)
    spec = load_spec(str(path))  # the spec comes from the config.json transformers wrote
    ours = build(spec)
    result = ours.load_state_dict(load_file(path / "model.safetensors"), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    return hf, ours


def test_same_logits_as_transformers(saved: tuple) -> None:
    hf, ours = saved
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
        got = ours(ids)
    assert got.shape == (2, 9, 97)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_kv_cache_decode_equals_full_forward(saved: tuple) -> None:
    _, ours = saved
    s = ours.spec
    ids = torch.randint(0, 97, (3, 8), generator=torch.Generator().manual_seed(2))
    cache = ours.new_cache()
    with torch.no_grad():
        full = ours(ids)
        prefill = ours(ids[:, :3], cache=cache)  # a prompt, then one token at a time
        steps = [ours(ids[:, t:t + 1], cache=cache) for t in range(3, 8)]
    torch.testing.assert_close(torch.cat([prefill, *steps], dim=1), full, rtol=1e-4, atol=1e-5)
    assert cache.length == 8
    kept = (*cache.keys.values(), *cache.values.values())  # per layer, by layer index
    assert len(kept) == 2 * s.n_layers and all(k.shape == (3, flat_view(s).n_kv_heads, 8, flat_view(s).head_dim)
                                                for k in kept)
    # 2 (K and V) * layers * KV heads * head_dim * positions * batch * 4 bytes (float32)
    assert cache.nbytes == 2 * s.n_layers * flat_view(s).n_kv_heads * flat_view(s).head_dim * 8 * 3 * 4


def test_hf_state_dict_with_tied_head_and_old_buffers_loads(tmp_path: Path) -> None:
    """state_dict() of a tied GPT2LMHeadModel repeats lm_head.weight; old files hold attn.bias masks."""
    hf = hf_checkpoint("gpt2", tmp_path)
    state = dict(hf.state_dict())
    assert "lm_head.weight" in state
    state["transformer.h.0.attn.bias"] = torch.ones(1, 1, 32, 32).tril()
    state["transformer.h.1.attn.masked_bias"] = torch.tensor(-1e4)
    ours = build(load_spec(str(tmp_path)))
    ours.load_state_dict(state, strict=True)
    assert torch.equal(ours.transformer.wte.weight, hf.transformer.wte.weight)


def test_gpt2model_names_without_prefix_load(tmp_path: Path) -> None:
    hf_checkpoint("gpt2", tmp_path)
    state = {k.removeprefix("transformer."): v for k, v in load_file(tmp_path / "model.safetensors").items()}
    assert "wte.weight" in state and "h.0.attn.c_attn.weight" in state
    build(load_spec(str(tmp_path))).load_state_dict(state, strict=True)


def test_strict_loading_still_rejects_wrong_names(tmp_path: Path) -> None:
    hf_checkpoint("llama", tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    ours = build(load_spec(str(tmp_path)))
    with pytest.raises(RuntimeError, match="model.layers.0.extra.weight"):
        ours.load_state_dict({**state, "model.layers.0.extra.weight": torch.zeros(1)}, strict=True)
    del state["lm_head.weight"]  # untied: the head is required
    with pytest.raises(RuntimeError, match="lm_head.weight"):
        ours.load_state_dict(state, strict=True)


@pytest.mark.parametrize("name", preset_names())
def test_preset_on_meta_matches_analytic_and_hf_shapes(name: str) -> None:
    """Every preset (DeepSeek-V3's 671B included) builds on the meta device and counts like the formulas."""
    spec = load_spec(name)
    model = build(spec, device="meta")
    assert all(p.is_meta for p in model.parameters())
    params = {k: tuple(v.shape) for k, v in model.named_parameters()}
    towers = tensor_table(spec).towers  # a multimodal checkpoint's tower tensors: calc.reference.tower builds them
    assert params == {name: shape for name, shape in expected_shapes(spec).items() if name not in towers}
    diff = compare({"analytic": count(spec), "torch": breakdown(model)})
    assert diff.ok, diff.mismatches


def test_gpt2_small_counts_once_with_a_tied_head() -> None:
    b = torch_breakdown(load_spec("gpt2-small"))
    # source: openai-community/gpt2 num_parameters() = 124,439,808 (not 163M: the head is tied)
    assert b.total == 124_439_808
    assert b.source == "torch" and b.tied and b.get("lm_head") == 0
    assert b.tied_saving == 50257 * 768


def test_rotary_tables_are_not_stored() -> None:
    """Rotary frequencies are computed on first use, never a buffer: a meta build holds none."""
    model = build(load_spec("llama-3-8b"), device="meta")
    assert not list(model.named_buffers())
    assert not any("inv_freq" in k for k in model.state_dict())


def test_score_correction_bias_is_a_buffer() -> None:
    """DeepSeek-V3's e_score_correction_bias is stored (state_dict) but is no parameter."""
    model = build(load_spec("deepseek-v3"), device="meta")
    buffers = dict(model.named_buffers())
    assert len(buffers) == 58 and all(k.endswith("mlp.gate.e_score_correction_bias") for k in buffers)
    assert not any(k.endswith("e_score_correction_bias") for k, _ in model.named_parameters())


def test_dtype_applies_to_parameters_not_rotary_frequencies() -> None:
    spec = spec_from_dict({"family": "llama", "vocab_size": 50, **TINY}, "tiny")
    model = build(spec, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    rotary = model.part("blocks")[0].part("attn").rotary
    model(torch.zeros(1, 4, dtype=torch.long))
    assert {inv.dtype for inv, _ in rotary._tables.values()} == {torch.float32}
    assert torch.get_default_dtype() == torch.float32
    assert model(torch.zeros(1, 4, dtype=torch.long)).dtype == torch.bfloat16


def test_trace_names_order_and_shapes_gqa_cached() -> None:
    spec = spec_from_dict({"family": "llama", "vocab_size": 50, **TINY, "n_kv_heads": 2, "head_dim": 6,
                           "d_ff": 40, "n_layers": 1}, "tiny")
    model = build(spec, device="meta")
    cache = KVCache()
    model(torch.zeros(2, 3, dtype=torch.long, device="meta"), cache=cache)
    seen: list[tuple[str, tuple[int, ...]]] = []
    model(torch.zeros(2, 1, dtype=torch.long, device="meta"), cache=cache,
          trace=lambda name, t: seen.append((name, tuple(t.shape))))
    B, T, N, d, h, kv, dh, ff, V = 2, 1, 4, 32, 4, 2, 6, 40, 50  # N: positions after this step
    assert seen == [
        ("token_ids", (B, T)), ("token_embedding", (B, T, d)), ("embeddings", (B, T, d)),
        ("attn_norm", (B, T, d)), ("q", (B, T, h * dh)), ("k", (B, T, kv * dh)), ("v", (B, T, kv * dh)),
        ("q_heads", (B, h, T, dh)), ("k_heads", (B, kv, T, dh)), ("v_heads", (B, kv, T, dh)),
        ("k_cache", (B, kv, N, dh)), ("v_cache", (B, kv, N, dh)), ("kv_groups", (B, h, N, dh)),
        ("scores", (B, h, T, N)), ("attn_weights", (B, h, T, N)), ("attn_heads_out", (B, h, T, dh)),
        ("attn_concat", (B, T, h * dh)), ("attn_out", (B, T, d)), ("attn_residual", (B, T, d)),
        ("mlp_norm", (B, T, d)), ("mlp_gate", (B, T, ff)), ("mlp_up", (B, T, ff)), ("mlp_act", (B, T, ff)),
        ("mlp_down", (B, T, d)), ("mlp_residual", (B, T, d)),
        ("final_norm", (B, T, d)), ("last_position", (B, d)), ("logits", (B, V)), ("next_token", (B,)),
    ]


def test_attention_is_causal_and_sums_to_one() -> None:
    spec = spec_from_dict({"family": "gpt2", "vocab_size": 50, **TINY}, "tiny")
    weights: list[torch.Tensor] = []
    build(spec)(torch.arange(5)[None], trace=lambda n, t: weights.append(t) if n == "attn_weights" else None)
    w = weights[0][0, 0]  # (T, T)
    assert torch.all(w.triu(diagonal=1) == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(5))


def test_positions_beyond_the_context_are_refused() -> None:
    spec = spec_from_dict({"family": "gpt2", "vocab_size": 50, **TINY}, "tiny")
    with pytest.raises(ValueError, match="n_positions=32"):
        build(spec)(torch.zeros(1, 33, dtype=torch.long))
