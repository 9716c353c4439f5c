"""`gptcalc shapes` for every spec: invariants over random layered specs mixing every part option,
golden shapes and FLOPs for DeepSeek-V3 (MLA + MoE), Mixtral-8x7B (MoE), Gemma-2-9B (sliding window,
sandwich norms, soft-capping) and gpt-oss-20B (sinks, sliding window, biased experts), and the
table and JSON for stacks of several block kinds.

Expected numbers are written out from each model's config.json values (URLs below; the presets
hold the configs verbatim) with 2·m·n·k per matmul, independently of calc/analysis/shapes.
"""

from __future__ import annotations

import json
import re
from math import prod
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calc.analysis.count import count
from calc.analysis.shapes import Journey, Step, journey
from calc.spec.load import load_spec, preset_names
from calc.spec.model import ModelSpec, spec_from_dict
from cli_checks import fuzz_examples


def steps(j: Journey, block: str = "") -> dict[str, Step]:
    """The steps of one block kind ("" for the embedding and head), by id."""
    return {s.id: s for s in j.steps if s.block == block}


def row(step: Step) -> tuple[list[list[int]], list[int] | None, list[int], int, int]:
    """(inputs, weight, output, params, FLOPs) as plain lists, for golden comparisons."""
    weight = list(step.weight.sizes) if step.weight else None
    return [list(s.sizes) for s in step.inputs], weight, list(step.output.sizes), step.params, step.flops


def io(step: Step) -> tuple[list[list[int]], list[int]]:
    """(inputs, output) as plain lists."""
    return [list(s.sizes) for s in step.inputs], list(step.output.sizes)


# --- random layered specs ------------------------------------------------------------------------

ACTIVATIONS = ["gelu", "gelu_tanh", "relu", "silu", "relu2"]


@st.composite
def norms(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"kind": "rmsnorm", "weight": draw(st.booleans())}
    return {"kind": "layernorm", "weight": draw(st.booleans()), "bias": draw(st.booleans())}


@st.composite
def attentions(draw: st.DrawFn) -> dict[str, Any]:
    kv = draw(st.integers(1, 3))
    head_dim = 2 * draw(st.integers(1, 5))
    position = draw(st.sampled_from(["rope", "alibi", "none"]))
    fused, qkv_bias = draw(st.booleans()), draw(st.booleans())  # a fused Q/K/V has one bias for all three or none
    return {
        "kind": "attention", "n_heads": kv * draw(st.integers(1, 3)), "n_kv_heads": kv, "head_dim": head_dim,
        "q_bias": qkv_bias if fused else draw(st.booleans()), "k_bias": qkv_bias if fused else draw(st.booleans()),
        "v_bias": qkv_bias if fused else draw(st.booleans()), "o_bias": draw(st.booleans()), "fused_qkv": fused,
        "qk_norm": draw(st.none() | st.fixed_dictionaries({"norm": norms(),
                                                           "scope": st.sampled_from(["head", "full"])})),
        "rope": {"rotary_dim": 2 * draw(st.integers(1, head_dim // 2))} if position == "rope" else None,
        "alibi": position == "alibi", "window": draw(st.none() | st.integers(1, 9)), "sinks": draw(st.booleans()),
        "softcap": draw(st.none() | st.floats(1, 100)),
    }


@st.composite
def mlas(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "kind": "mla", "n_heads": draw(st.integers(1, 4)), "q_lora_rank": draw(st.none() | st.integers(1, 12)),
        "kv_lora_rank": draw(st.integers(1, 12)), "qk_nope_head_dim": draw(st.integers(0, 6)),
        "qk_rope_head_dim": 2 * draw(st.integers(1, 3)), "v_head_dim": draw(st.integers(1, 6)),
        "bias": draw(st.booleans()), "norm": draw(norms()), "rope": draw(st.none() | st.just({"theta": 10000.0})),
        "window": draw(st.none() | st.integers(1, 9)), "softcap": draw(st.none() | st.floats(1, 100)),
    }


@st.composite
def mlps(draw: st.DrawFn) -> dict[str, Any]:
    gated = draw(st.booleans())
    return {"kind": "mlp", "d_ff": draw(st.integers(1, 24)), "gated": gated,
            "activation": draw(st.sampled_from(ACTIVATIONS)), "bias": draw(st.booleans()),
            "fused_gate_up": gated and draw(st.booleans())}


@st.composite
def moes(draw: st.DrawFn) -> dict[str, Any]:
    experts = draw(st.integers(1, 6))
    shared = draw(st.none() | mlps())
    return {
        "kind": "moe", "n_experts": experts, "top_k": draw(st.integers(1, experts)), "d_ff": draw(st.integers(1, 16)),
        "gated": draw(st.booleans()), "activation": draw(st.sampled_from(ACTIVATIONS)),
        "expert_bias": draw(st.booleans()), "router_bias": draw(st.booleans()), "score_bias": draw(st.booleans()),
        "shared": shared, "n_shared": draw(st.integers(0, 2)) if shared else 0,
        "shared_gate": shared is not None and draw(st.booleans()),
    }


@st.composite
def blocks(draw: st.DrawFn) -> dict[str, Any]:
    layout = draw(st.sampled_from(["pre", "parallel", "post_ln"]))
    positions = ["attn_in", "mlp_in"] if layout == "post_ln" else ["attn_in", "attn_out", "mlp_in", "mlp_out"]
    return {
        "attention": draw(attentions() | mlas()), "mlp": draw(mlps() | moes()), "norm": draw(norms()),
        "norms": draw(st.lists(st.sampled_from(positions), unique=True)),
        "parallel": layout == "parallel", "post_ln": layout == "post_ln",
    }


@st.composite
def layered_specs(draw: st.DrawFn) -> ModelSpec:
    kinds = [f"kind{i}" for i in range(draw(st.integers(1, 3)))]
    order = kinds + draw(st.lists(st.sampled_from(kinds), max_size=3))
    learned = draw(st.booleans())
    data = {
        "name": "hypothesis", "vocab_size": draw(st.integers(2, 60)), "d_model": draw(st.integers(1, 24)),
        "n_positions": 16,
        "embedding": {"positions": "learned" if learned else "none",
                      "position_offset": draw(st.integers(0, 3)) if learned else 0,
                      "norm": draw(st.none() | norms()), "scale": draw(st.booleans()),
                      "proj_dim": draw(st.none() | st.integers(1, 12))},
        "blocks": {name: draw(blocks()) for name in kinds},
        "layers": [[draw(st.integers(1, 3)), name] for name in order],
        "final_norm": draw(st.none() | norms()),
        "head": {"tied": draw(st.booleans()), "bias": draw(st.booleans()),
                 "softcap": draw(st.none() | st.floats(1, 50))},
    }
    return spec_from_dict(data, origin="hypothesis")


def assert_matmul(step: Step) -> None:
    """A step with FLOPs is a matmul whose shapes compose: x [..., k] · W [(E,) k, n] -> [..., n], or
    a [..., m, k] · b [..., k, n] -> [..., m, n]; its FLOPs are 2·m·n·k over every leading index."""
    if step.weight is not None:
        (x,), w = step.inputs, step.weight.sizes
        assert x.sizes[-1] == w[-2] and step.output.sizes == (*x.sizes[:-1], w[-1]), step.id
        assert step.flops == 2 * prod(x.sizes) * w[-1], step.id
    else:
        a, b = (s.sizes for s in step.inputs)
        assert a[-1] == b[-2] and a[:-2] == b[:-2] and step.output.sizes == (*a[:-1], b[-1]), step.id
        assert step.flops == 2 * prod(a) * b[-1], step.id


def assert_inputs_were_written(j: Journey, spec: ModelSpec) -> None:
    """Every input that is not a weight's is an earlier step's output (Kᵀ: transposed), the cache's past,
    or, in a sliding window's prefill, the band of keys one query sees."""
    seen: set[tuple[int, ...]] = set()
    for step in j.steps:
        window = spec.blocks[step.block].attention.window if step.block else None
        for i, shape in enumerate(step.inputs):
            sizes = shape.sizes
            if step.weight is None and not (step.id.endswith("_cache") and i == 0) and "window" not in shape.names:
                assert sizes in seen or (*sizes[:-2], *sizes[-2:][::-1]) in seen, (step.block, step.id, sizes)
            if "window" in shape.names:
                assert window is not None and shape.sizes[shape.names.index("window")] == window
        seen.add(step.output.sizes)


@settings(max_examples=fuzz_examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=layered_specs(), seq=st.integers(1, 12), batch=st.integers(1, 3), decode=st.booleans())
def test_invariants_over_random_layered_specs(spec: ModelSpec, seq: int, batch: int, decode: bool) -> None:
    seq = min(seq, spec.n_positions - decode)
    j = journey(spec, seq, batch, decode)
    # Every parameter is owned by exactly one step: the column adds up to the analytic count.
    assert j.params == count(spec).decoder_total
    assert dict(j.layers) == spec.layer_counts() and j.n_layers == spec.n_layers
    assert len({(s.block, s.id) for s in j.steps}) == len(j.steps)
    for step in j.steps:
        if step.flops:
            assert_matmul(step)
    assert_inputs_were_written(j, spec)
    hidden = (batch, j.new_tokens, spec.d_model)
    for name, block in spec.blocks.items():
        own = [s for s in j.steps if s.block == name]
        assert own[-1].output.sizes == hidden  # each block maps the residual stream to itself
        scores = steps(j, name)["scores"].output.sizes
        a = block.attention
        keys = min(j.keys, a.window or j.keys)
        assert scores == (batch, a.n_heads, j.new_tokens, keys)
        if decode:
            cache = [s for s in own if s.id.endswith("_cache")]
            assert cache and all(s.output.sizes[-2] == keys for s in cache)
    # FLOPs are linear in the batch, step by step.
    single = journey(spec, seq, 1, decode)
    assert [s.flops for s in j.steps] == [batch * s.flops for s in single.steps]
    assert j.flops == batch * single.flops


# --- golden rows from real configs ---------------------------------------------------------------

def test_deepseek_v3_dense_and_moe_blocks_with_mla() -> None:
    # source: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (presets/deepseek-v3.yaml):
    # hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128 + qk_rope 64, v_head 128,
    # intermediate 18432 (first_k_dense_replace 3 dense layers), 256 routed experts of 2048, top-8,
    # 1 shared expert of 2048, 61 layers, vocab 129280. Prefill of T = 8, B = 1.
    j = journey(load_spec("deepseek-v3"), seq=8)
    assert dict(j.layers) == {"dense": 3, "moe": 58} and j.n_layers == 61
    moe, dense = steps(j, "moe"), steps(j, "dense")
    assert row(moe["q_a"]) == ([[1, 8, 7168]], [7168, 1536], [1, 8, 1536], 7168 * 1536, 2 * 8 * 7168 * 1536)
    assert row(moe["q_a_norm"])[1:4] == ([1536], [1, 8, 1536], 1536)
    assert row(moe["q_b"]) == ([[1, 8, 1536]], [1536, 128 * 192], [1, 8, 24576], 1536 * 24576, 2 * 8 * 1536 * 24576)
    assert row(moe["q_heads"])[2] == [1, 128, 8, 192]
    assert row(moe["q_nope"])[2] == [1, 128, 8, 128] and row(moe["q_rope"])[2] == [1, 128, 8, 64]
    # kv_a: 512 latent + 64 rotary key = 576 wide
    assert row(moe["kv_a"]) == ([[1, 8, 7168]], [7168, 576], [1, 8, 576], 7168 * 576, 2 * 8 * 7168 * 576)
    assert row(moe["kv_latent"])[2] == [1, 8, 512] and row(moe["k_rope"])[2] == [1, 1, 8, 64]
    assert row(moe["kv_a_norm"])[1:4] == ([512], [1, 8, 512], 512)
    # kv_b: 512 -> 128 heads x (128 K-nope + 128 V)
    assert row(moe["kv_b"]) == ([[1, 8, 512]], [512, 32768], [1, 8, 32768], 512 * 32768, 2 * 8 * 512 * 32768)
    assert row(moe["k_nope"])[2] == row(moe["v_heads"])[2] == [1, 128, 8, 128]
    assert row(moe["key"])[2] == row(moe["query"])[2] == [1, 128, 8, 192]
    assert row(moe["scores"]) == ([[1, 128, 8, 192], [1, 128, 192, 8]], None, [1, 128, 8, 8], 0, 2 * 128 * 8 * 192 * 8)
    assert row(moe["attn_heads_out"])[2:] == ([1, 128, 8, 128], 0, 2 * 128 * 8 * 8 * 128)
    assert row(moe["attn_out"])[1:] == ([16384, 7168], [1, 8, 7168], 16384 * 7168, 2 * 8 * 16384 * 7168)
    # the router, top-8 of 256, and the experts over 8 tokens x 8 picks = 64 routed rows
    assert row(moe["router"])[1:] == ([7168, 256], [1, 8, 256], 7168 * 256, 2 * 8 * 7168 * 256)
    assert row(moe["router_topk"])[2] == [1, 8, 8]
    assert row(moe["experts_gate"]) == ([[64, 7168]], [256, 7168, 2048], [64, 2048], 256 * 7168 * 2048,
                                        2 * 64 * 7168 * 2048)
    assert row(moe["experts_down"])[1:] == ([256, 2048, 7168], [64, 7168], 256 * 2048 * 7168, 2 * 64 * 2048 * 7168)
    assert row(moe["experts_combine"])[2] == [1, 8, 7168]
    assert row(moe["shared_mlp_up"])[1:] == ([7168, 2048], [1, 8, 2048], 7168 * 2048, 2 * 8 * 7168 * 2048)
    assert "router" not in dense and row(dense["mlp_up"])[1:] == ([7168, 18432], [1, 8, 18432], 7168 * 18432,
                                                                   2 * 8 * 7168 * 18432)
    # source: transformers 5.23 builds 671,026,404,352 parameters from this config (presets/deepseek-v3.yaml,
    # tests/test_arch.py); published: 671B total.
    assert j.params == 671_026_404_352


def test_deepseek_v3_decode_caches_the_latent_and_the_rotary_key() -> None:
    # Same config; decode after T = 8: the cache holds 512 latent + 64 rotary-key numbers per token
    # (transformers' DeepseekV3Attention updates the cache with the compressed kv and k_rot), and
    # kv_b expands all 9 cached latents.
    moe = steps(journey(load_spec("deepseek-v3"), seq=8, decode=True), "moe")
    assert io(moe["latent_cache"]) == ([[1, 8, 512], [1, 1, 512]], [1, 9, 512])
    assert io(moe["k_rope_cache"]) == ([[1, 1, 8, 64], [1, 1, 1, 64]], [1, 1, 9, 64])
    assert io(moe["kv_b"]) == ([[1, 9, 512]], [1, 9, 32768]) and moe["kv_b"].flops == 2 * 9 * 512 * 32768
    assert row(moe["scores"])[2:] == ([1, 128, 1, 9], 0, 2 * 128 * 1 * 192 * 9)
    assert row(moe["experts_up"])[0] == [[8, 7168]]  # 1 token x top-8


def test_mixtral_8x7b_routes_each_token_to_2_of_8_experts() -> None:
    # source: https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json (presets/mixtral-8x7b.yaml):
    # hidden 4096, 32 heads, 8 KV heads (head_dim 128), 8 experts of 14336, top-2, 32 layers, vocab 32000.
    j = journey(load_spec("mixtral-8x7b"), seq=8)
    s = steps(j, "decoder")
    assert row(s["k"])[1:] == ([4096, 1024], [1, 8, 1024], 4096 * 1024, 2 * 8 * 4096 * 1024)
    assert row(s["kv_groups"])[2] == [1, 32, 8, 128]
    assert row(s["router"])[1:] == ([4096, 8], [1, 8, 8], 4096 * 8, 2 * 8 * 4096 * 8)
    assert row(s["router_topk"])[2] == [1, 8, 2]
    assert row(s["experts_dispatch"])[2] == [16, 4096]  # 8 tokens x 2 experts
    assert row(s["experts_up"]) == ([[16, 4096]], [8, 4096, 14336], [16, 14336], 8 * 4096 * 14336,
                                    2 * 16 * 4096 * 14336)
    per_layer = (2 * 8 * 4096 * 4096 * 2          # Q and W_O
                 + 2 * 8 * 4096 * 1024 * 2        # K and V
                 + 2 * 32 * 8 * 128 * 8 * 2       # scores and weights·V
                 + 2 * 8 * 4096 * 8               # router
                 + 3 * 2 * 16 * 4096 * 14336)     # gate, up, down over 16 routed rows
    assert j.flops_per_layer == per_layer == 6_309_806_080
    assert j.flops == 32 * per_layer + 2 * 4096 * 32000
    # source: keras-hub mixtral_8_7b_en params 46,702,792,704 (presets/mixtral-8x7b.yaml), written out:
    # embed + head 2·32000·4096, per layer Q,O 2·4096² + K,V 2·4096·1024 + router 4096·8
    # + experts 8·3·4096·14336 + 2 norms, final norm 4096.
    assert j.params == 2 * 32000 * 4096 + 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 8
                                                + 8 * 3 * 4096 * 14336 + 2 * 4096) + 4096 == 46_702_792_704


def test_gemma_2_9b_local_and_global_layers() -> None:
    # source: https://huggingface.co/google/gemma-2-9b-it/blob/main/config.json (presets/gemma-2-9b.yaml):
    # hidden 3584, 16 heads, 8 KV heads of 256, sliding_window 4096 on every other layer (21 + 21 of 42),
    # attn_logit_softcapping 50, final_logit_softcapping 30, intermediate 14336, vocab 256000, tied.
    # T = 5000 > the window: a local layer's query sees at most 4096 keys.
    spec = load_spec("gemma-2-9b")
    j = journey(spec, seq=5000)
    assert dict(j.layers) == {"local": 21, "global": 21}
    local, glob, outside = steps(j, "local"), steps(j, "global"), steps(j)
    assert row(local["k_heads"])[2] == [1, 8, 5000, 256]  # every key is computed in prefill
    assert row(local["scores"])[2:] == ([1, 16, 5000, 4096], 0, 2 * 16 * 5000 * 256 * 4096)
    assert row(glob["scores"])[2:] == ([1, 16, 5000, 5000], 0, 2 * 16 * 5000 * 256 * 5000)
    assert row(local["attn_heads_out"])[0] == [[1, 16, 5000, 4096], [1, 16, 4096, 256]]
    for block in (local, glob):  # sandwich norms, soft-capped scores
        assert [block[n].params for n in ("attn_norm", "attn_post_norm", "mlp_norm", "mlp_post_norm")] == [3584] * 4
        assert "50·tanh" in block["attn_softcap"].note
        assert row(block["mlp_gate"])[1] == [3584, 14336] and block["mlp_act"].label.startswith("GeGLU")
    assert "30·tanh" in outside["logit_softcap"].note and outside["logits"].params == 0
    assert "√d_model" in outside["embeddings"].note
    # source: keras-hub gemma2_9b_en params 9,241,705,984 (presets/gemma-2-9b.yaml)
    assert j.params == 9_241_705_984


def test_gemma_2_9b_decode_rolling_cache() -> None:
    # Same config; decode after T = 5000 cached: the local layers' rolling cache holds 4096 keys,
    # the global layers' all 5001.
    j = journey(load_spec("gemma-2-9b"), seq=5000, decode=True)
    local, glob = steps(j, "local"), steps(j, "global")
    assert io(local["k_cache"]) == ([[1, 8, 4096, 256], [1, 8, 1, 256]], [1, 8, 4096, 256])
    assert row(local["scores"])[2:] == ([1, 16, 1, 4096], 0, 2 * 16 * 256 * 4096)
    assert io(glob["k_cache"]) == ([[1, 8, 5000, 256], [1, 8, 1, 256]], [1, 8, 5001, 256])
    assert row(glob["scores"])[2:] == ([1, 16, 1, 5001], 0, 2 * 16 * 256 * 5001)


def test_gpt_oss_20b_sinks_window_and_biased_experts() -> None:
    # source: https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json (presets/gpt-oss-20b.yaml):
    # hidden 2880, 64 heads, 8 KV heads of 64, sliding_window 128 on alternate layers (12 + 12 of 24),
    # one sink per head, 32 experts of 2880 with biases, top-4, router bias, vocab 201088.
    # Decode after T = 200 cached tokens.
    j = journey(load_spec("gpt-oss-20b"), seq=200, decode=True)
    assert dict(j.layers) == {"sliding": 12, "full": 12}
    sliding, full = steps(j, "sliding"), steps(j, "full")
    assert row(sliding["k_cache"])[2] == [1, 8, 128, 64] and row(full["k_cache"])[2] == [1, 8, 201, 64]
    assert row(sliding["attn_sinks"])[1:4] == ([64], [1, 64, 1, 129], 64)
    assert row(full["attn_sinks"])[2] == [1, 64, 1, 202]
    assert io(sliding["attn_weights"]) == ([[1, 64, 1, 129]], [1, 64, 1, 128])
    assert row(full["q"])[1:4] == ([2880, 4096], [1, 1, 4096], 2880 * 4096 + 4096)  # with its bias
    assert row(full["router"])[3:] == (2880 * 32 + 32, 2 * 2880 * 32)
    assert row(full["experts_gate"]) == ([[4, 2880]], [32, 2880, 2880], [4, 2880], 32 * (2880 * 2880 + 2880),
                                         2 * 4 * 2880 * 2880)  # 1 token x top-4 = 4 routed rows
    # source: keras-hub gpt_oss_20b_en params 20,914,757,184 (presets/gpt-oss-20b.yaml)
    assert j.params == 20_914_757_184


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_adds_up(name: str) -> None:
    spec = load_spec(name)
    for decode in (False, True):
        j = journey(spec, seq=8, batch=2, decode=decode)
        assert j.params == count(spec).decoder_total
        assert dict(j.layers) == spec.layer_counts()


# --- the command for several block kinds ---------------------------------------------------------

def run(*args: str) -> tuple[int, str]:
    """The command's output in one piece: at 1,000 columns no table is cut into parts (calc.render.table)."""
    from calc.cli import main

    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, list(args))
    return result.exit_code, result.output


def sections(out: str) -> list[list[list[str]]]:
    """The table's body, split at its section rules, each line's cells stripped."""
    found: list[list[list[str]]] = [[]]
    for line in out.splitlines():
        if line.startswith("├"):
            found.append([])
        elif line.startswith("│"):
            found[-1].append([cell.strip() for cell in line.split("│")[1:-1]])
    return found


def number(cell: str) -> int:
    return int(cell.replace(",", "")) if cell else 0


@pytest.mark.parametrize("name, kinds", [
    ("deepseek-v3", {"dense": 3, "moe": 58}), ("mixtral-8x7b", {"block": 32}),
    ("gemma-2-9b", {"local": 21, "global": 21}), ("gpt-oss-20b", {"sliding": 12, "full": 12}),
])
@pytest.mark.parametrize("decode", [False, True])
def test_table_has_a_section_per_block_kind_and_adds_up(name: str, kinds: dict[str, int], decode: bool) -> None:
    code, out = run("shapes", name, "--seq", "8", *(["--decode"] if decode else []))
    assert code == 0 and "Traceback" not in out
    *body, total = sections(out)
    blocks = [s for s in body if s[0][0].startswith("block")]
    headers = [re.match(r"block ?(\S*) × (\d+)", s[0][0]) for s in blocks]
    assert {(m.group(1) or "block"): int(m.group(2)) for m in headers} == kinds
    grand = [0, 0]
    for section in body:
        lines = [line for line in section if line[0]]
        if section in blocks:  # its step rows add up to the "one block" row, which repeats × its layers
            one = next(line for line in lines if line[0].startswith("one "))
            layers = int(re.search(r"× (\d+)", section[0][0]).group(1))
            for c, column in enumerate((5, 6)):
                assert sum(number(line[column]) for line in section if line is not one) == number(one[column])
                grand[c] += layers * number(one[column])
        else:
            for c, column in enumerate((5, 6)):
                grand[c] += sum(number(line[column]) for line in section)
    assert [number(total[0][5]), number(total[0][6])] == grand
    assert grand[0] == count(load_spec(name)).total


def test_json_says_each_steps_block_kind() -> None:
    code, out = run("shapes", "deepseek-v3", "--seq", "4", "--json")
    data = json.loads(out)
    assert code == 0 and data["n_layers"] == 61 and data["params_per_layer"] is None
    assert [(b["name"], b["layers"]) for b in data["blocks"]] == [("dense", 3), ("moe", 58)]
    assert data["params"] == sum(b["layers"] * b["params_per_layer"] for b in data["blocks"]) + sum(
        s["params"] for s in data["steps"] if s["block"] is None)
    kinds = {s["block"] for s in data["steps"]}
    assert kinds == {None, "dense", "moe"}
    assert any("MLA caches" in note for note in data["notes"]) and any("MoE" in note for note in data["notes"])


@pytest.mark.parametrize(("model_type", "where"), [
    ("cohere", "over each head's d_head channels, a scale per head and channel"),
    ("olmo2", "over each token's full width")])
def test_a_full_width_qk_norm_says_where_its_statistics_come_from(model_type: str, where: str) -> None:
    """Cohere's q_norm and k_norm hold [heads, head_dim] weights, yet CohereLayerNorm normalises each
    head's channels on its own (transformers' modeling_cohere.py: the norm runs on the [B, T, heads,
    head_dim] view); OLMo-2's RMSNorm runs over the token's whole h·head_dim width (modeling_olmo2.py)."""
    from oracle import spec_of
    from tiny_models import tiny_config

    layer = {s.id: s.note for s in journey(spec_of(tiny_config(model_type)), 4).steps if s.block}
    assert where in layer["q_norm"] and where in layer["k_norm"]
