"""`gptcalc shapes`: the tutorials' shape walk-throughs pinned, invariants over random specs, the CLI.

Golden shapes come from public tutorials (Life of a tensor: GPT-2 small with a 5-token prompt; the LLM
Transformer book, ch. 12: the teaching model with d_model 512, 4 heads, batch 4, T 16; 邹佳旭's GPT
article: Qwen2-72B's 64 query heads against 8 KV heads of 128) and from the models' published
config.json values. The torch cross-check is in
tests/test_shapes_torch.py.
"""

from __future__ import annotations

import json
import re
from math import prod

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from flat_presets import FLAT_PRESETS
from calc.spec.flat import flat_view
from calc.analysis.count import count
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from calc.analysis.shapes import Journey, journey
from calc.spec.model import spec_from_dict
from calc.render.shapes import human_flops



def by_id(j: Journey) -> dict[str, list[int]]:
    return {step.id: list(step.output.sizes) for step in j.steps}


def weights(j: Journey) -> dict[str, list[int]]:
    return {step.id: list(step.weight.sizes) for step in j.steps if step.weight}


# --- the tutorials' examples -----------------------------------------------------------------------

def test_gpt2_small_prompt_of_five_tokens() -> None:
    # source: Life of a tensor, https://jinspire.dev/2025/02/12/life-of-a-tensor.html ("The capital of France is" = 5 ids; [5, 768]; 12 heads of [5, 64]; QKᵀ [5, 5];
    # MLP [5, 768] -> [5, 3072] -> [5, 768]; the last row [768]), vocab 50,257 from GPT-2's config.json.
    j = journey(load_spec("gpt2-small"), seq=5)
    shapes = by_id(j)
    assert shapes["token_ids"] == [1, 5]
    assert shapes["token_embedding"] == shapes["embeddings"] == [1, 5, 768]
    assert shapes["q"] == shapes["k"] == shapes["v"] == [1, 5, 768]
    assert shapes["q_heads"] == shapes["k_heads"] == shapes["v_heads"] == [1, 12, 5, 64]
    assert shapes["scores"] == shapes["attn_weights"] == [1, 12, 5, 5]
    assert shapes["attn_heads_out"] == [1, 12, 5, 64]
    assert shapes["attn_concat"] == shapes["attn_out"] == [1, 5, 768]
    assert shapes["mlp_up"] == shapes["mlp_act"] == [1, 5, 3072]
    assert shapes["mlp_down"] == shapes["mlp_residual"] == [1, 5, 768]
    assert shapes["last_position"] == [1, 768]
    assert shapes["logits"] == [1, 50257]
    assert shapes["next_token"] == [1]
    w = weights(j)
    # source: Life of a tensor, https://jinspire.dev/2025/02/12/life-of-a-tensor.html: the embedding table [50000(.257), 768]; Q, K, V, output projection [768, 768];
    # MLP [768 x 3072] and [3072 x 768].
    assert w["token_embedding"] == [50257, 768]
    assert w["q"] == w["k"] == w["v"] == w["attn_out"] == [768, 768]
    assert w["mlp_up"] == [768, 3072] and w["mlp_down"] == [3072, 768]
    assert w["position_embedding"] == [1024, 768]
    assert "mlp_gate" not in shapes and "kv_groups" not in shapes


def test_gpt2_small_flops_written_out() -> None:
    # source: independent computation, 2·m·n·k per matmul, T = 5, B = 1:
    # Q, K, V, W_O: 4 x 2·5·768·768; QKᵀ and weights·V: 2 x 2·12·5·5·64; MLP: 2 x 2·5·768·3072;
    # LM head on the last row only: 2·768·50257.
    per_layer = 4 * 2 * 5 * 768 * 768 + 2 * 2 * 12 * 5 * 5 * 64 + 2 * 2 * 5 * 768 * 3072
    j = journey(load_spec("gpt2-small"), seq=5)
    assert j.flops_per_layer == per_layer == 70_855_680
    assert j.flops == 12 * per_layer + 2 * 768 * 50257 == 927_462_912
    assert {s.id: s.flops for s in j.steps}["scores"] == 38_400


def test_qwen2_72b_keys_are_8_heads_of_128_against_64_query_heads() -> None:
    # source: 邹佳旭, "一文彻底讲透GPT架构及推理原理", https://mp.weixin.qq.com/s/moVLtn0_necwuyxdIlosSg, and the Qwen2 technical report: hidden 8192, 64 Q heads, 8 KV heads of 128.
    j = journey(load_spec("qwen2-72b"), seq=10)
    shapes, w = by_id(j), weights(j)
    assert shapes["q"] == [1, 10, 8192] and shapes["k"] == shapes["v"] == [1, 10, 1024]
    assert shapes["q_heads"] == [1, 64, 10, 128]
    assert shapes["k_heads"] == shapes["v_heads"] == [1, 8, 10, 128]
    assert shapes["kv_groups"] == [1, 64, 10, 128]
    assert shapes["scores"] == [1, 64, 10, 10]
    assert w["q"] == [8192, 8192] and w["k"] == w["v"] == [8192, 1024]
    # source: Qwen2-72B config.json: intermediate_size 29568, vocab_size 152064, gated MLP.
    assert shapes["mlp_gate"] == shapes["mlp_up"] == [1, 10, 29568]
    assert shapes["logits"] == [1, 152064]
    groups = next(s for s in j.steps if s.id == "kv_groups")
    assert not groups.traced and "8 query heads" in groups.note
    # Parameters each step owns, written out from the same config (weights + Q/K/V biases, no
    # bias on o_proj or the MLP, RMSNorm scale only, untied head): independent of calc.analysis.count.
    params = {s.id: s.params for s in j.steps}
    assert params["q"] == 8192 * 8192 + 8192
    assert params["k"] == params["v"] == 8192 * 1024 + 1024
    assert params["attn_out"] == 8192 * 8192
    assert params["mlp_gate"] == params["mlp_up"] == params["mlp_down"] == 8192 * 29568
    assert params["attn_norm"] == params["mlp_norm"] == params["final_norm"] == 8192
    assert params["token_embedding"] == params["logits"] == 152064 * 8192


def teaching_model():
    # source: the LLM Transformer book, ch. 12, https://www.waylandz.com/llm-transformer-book/%E7%AC%AC12%E7%AB%A0-QKV%E8%BE%93%E5%87%BA%E7%9A%84%E6%9C%AC%E8%B4%A8: d_model 512 split into 4 heads of 128 (vocab and depth are not given there;
    # any value serves, the shapes below do not depend on them).
    return spec_from_dict({"name": "book-ch12", "vocab_size": 1000, "n_positions": 64, "d_model": 512,
                           "n_layers": 2, "n_heads": 4}, origin="test")


def test_seed_002_teaching_model() -> None:
    # source: the LLM Transformer book, ch. 12, https://www.waylandz.com/llm-transformer-book/%E7%AC%AC12%E7%AB%A0-QKV%E8%BE%93%E5%87%BA%E7%9A%84%E6%9C%AC%E8%B4%A8: A = [4, 4, 16, 128] (batch, heads, seq_len, d_head); concatenated [4, 16, 512];
    # W_O 512 x 512; per head Q·K is a 16 x 16 square.
    j = journey(teaching_model(), seq=16, batch=4)
    shapes = by_id(j)
    assert shapes["attn_heads_out"] == [4, 4, 16, 128]
    assert shapes["attn_concat"] == [4, 16, 512]
    assert weights(j)["attn_out"] == [512, 512]
    assert shapes["scores"] == [4, 4, 16, 16]


def test_decode_one_token_against_the_cache() -> None:
    # source: the decode stage of 邹佳旭, "一文彻底讲透GPT架构及推理原理", https://mp.weixin.qq.com/s/moVLtn0_necwuyxdIlosSg: Q [B, h, 1, dh], cache K/V [B, kv, T+1, dh],
    # scores [B, h, 1, T+1]; GPT-2 small, T = 5 cached.
    j = journey(load_spec("gpt2-small"), seq=5, decode=True)
    shapes = by_id(j)
    assert shapes["token_ids"] == [1, 1] and shapes["position_embedding"] == [1, 1, 768]
    assert shapes["q_heads"] == shapes["k_heads"] == [1, 12, 1, 64]
    assert shapes["k_cache"] == shapes["v_cache"] == [1, 12, 6, 64]
    assert shapes["scores"] == [1, 12, 1, 6]
    assert shapes["attn_heads_out"] == [1, 12, 1, 64]
    assert shapes["logits"] == [1, 50257]
    cache = next(s for s in j.steps if s.id == "k_cache")
    assert [list(shape.sizes) for shape in cache.inputs] == [[1, 12, 5, 64], [1, 12, 1, 64]]
    assert (j.new_tokens, j.keys) == (1, 6)
    assert "k_cache" not in by_id(journey(load_spec("gpt2-small"), seq=5))


# --- the contract with the torch reference model's trace -----------------------------------------

EMBED = ["token_ids", "token_embedding", "position_embedding", "embeddings"]
ATTN = ["attn_norm", "q", "k", "v", "q_heads", "k_heads", "v_heads"]
CACHE = ["k_cache", "v_cache"]
SCORES = ["scores", "attn_weights", "attn_heads_out", "attn_concat", "attn_out", "attn_residual", "mlp_norm"]
HEAD = ["final_norm", "last_position", "logits", "next_token"]


@pytest.mark.parametrize("name, decode, expected", [
    ("gpt2-small", False, EMBED + ATTN + SCORES + ["mlp_up", "mlp_act", "mlp_down", "mlp_residual"] + HEAD),
    ("llama-3-8b", True, [n for n in EMBED if n != "position_embedding"] + ATTN + CACHE + SCORES
     + ["mlp_gate", "mlp_up", "mlp_act", "mlp_down", "mlp_residual"] + HEAD),
])
def test_traced_step_ids_follow_the_trace_contract(name: str, decode: bool, expected: list[str]) -> None:
    # source: the trace names agreed with calc/reference/model.py (issue 3), in call order.
    j = journey(load_spec(name), seq=4, decode=decode)
    assert [s.id for s in j.steps if s.traced] == expected
    assert {s.id for s in j.steps if not s.traced} <= {"kv_groups", "probs"}


# --- invariants ----------------------------------------------------------------------------------

@st.composite
def specs(draw: st.DrawFn):
    kv = draw(st.integers(1, 4))
    heads = kv * draw(st.integers(1, 4))
    head_dim = 2 * draw(st.integers(1, 8))
    family = draw(st.sampled_from(["gpt2", "llama"]))
    data = {
        "family": family, "vocab_size": draw(st.integers(2, 500)),
        "n_positions": draw(st.integers(8, 64)), "d_model": draw(st.integers(1, 64)),
        "n_layers": draw(st.integers(1, 4)), "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": draw(st.integers(1, 128)), "tie_embeddings": draw(st.booleans()),
        "qkv_bias": draw(st.booleans()),
        "mlp": draw(st.sampled_from(["gelu", "swiglu"] if family == "llama" else ["gelu"])),
        "position_embedding": draw(st.sampled_from(["learned", "rotary", "none"])),
    }
    return spec_from_dict(data, origin="hypothesis")


@settings(max_examples=150, deadline=None)
@given(spec=specs(), seq=st.integers(1, 7), batch=st.integers(1, 3), decode=st.booleans())
def test_invariants(spec, seq: int, batch: int, decode: bool) -> None:
    j = journey(spec, seq, batch, decode)
    # Every parameter is owned by exactly one step: the steps add up to the analytic count.
    assert j.params == count(spec).decoder_total
    assert len({s.id for s in j.steps}) == len(j.steps)
    for step in j.steps:
        assert step.output.sizes[0] == batch
        if step.weight is not None and step.flops:  # a matmul: shapes compose, FLOPs are 2·m·n·k
            (x,) = step.inputs
            assert x.sizes[-1] == step.weight.sizes[0] and step.output.sizes[-1] == step.weight.sizes[1]
            assert step.flops == 2 * prod(x.sizes) * step.weight.sizes[1]
    # A block maps [B, T, d_model] to itself; the head reads its last row.
    shapes = by_id(j)
    hidden = [batch, j.new_tokens, spec.d_model]
    assert shapes["embeddings"] == shapes["mlp_residual"] == shapes["final_norm"] == hidden
    assert shapes["scores"] == [batch, flat_view(spec).n_heads, j.new_tokens, j.keys]
    # FLOPs scale linearly with the batch.
    assert j.flops == batch * journey(spec, seq, 1, decode).flops


# The GPT-2/Llama-layout presets (calc.spec.flat.flat_view), whose fields this test reads through the
# flat view; every preset, MoE, MLA and sandwich norms included, is in tests/test_shapes_parts.py.
@pytest.mark.parametrize("name", FLAT_PRESETS)
def test_every_preset_adds_up(name: str) -> None:
    spec = load_spec(name)
    j = journey(spec, seq=8, decode=True)
    assert j.params == count(spec).decoder_total
    head = next(s for s in j.steps if s.id == "logits")
    assert head.params == (0 if flat_view(spec).tie_embeddings else spec.vocab_size * spec.d_model)
    assert ("kv_groups" in by_id(j)) == (flat_view(spec).n_kv_heads != flat_view(spec).n_heads)


def test_mqa_shares_one_kv_head() -> None:
    spec = teaching_model().with_kv_heads(1)
    shapes = by_id(journey(spec, seq=3))
    assert shapes["k_heads"] == [1, 1, 3, 128] and shapes["kv_groups"] == [1, 4, 3, 128]


@pytest.mark.parametrize("seq, batch, decode, message", [
    (0, 1, False, "--seq: must be at least 1"),
    (1, 0, False, "--batch: must be at least 1"),
    (1025, 1, False, "1025 positions exceed gpt2-small's context length n_positions=1024"),
    (1024, 1, True, "1025 positions exceed"),
])
def test_bad_lengths(seq: int, batch: int, decode: bool, message: str) -> None:
    with pytest.raises(GptcalcError, match=re.escape(message)):
        journey(load_spec("gpt2-small"), seq, batch, decode)
    journey(load_spec("gpt2-small"), 1024 if not decode else 1023, 1, decode)  # the limit itself is fine


def test_human_flops() -> None:
    assert human_flops(927_462_912) == "927.46 MFLOP"
    assert human_flops(285_864_886_272) == "285.86 GFLOP"
    assert human_flops(999) == "999 FLOP"


# --- the command ---------------------------------------------------------------------------------

def run(*args: str) -> tuple[int, str]:
    from calc.cli import main

    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def table_rows(out: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]


def number(cell: str) -> int:
    return int(cell.replace(",", "")) if cell else 0


def test_table_adds_up() -> None:
    code, out = run("shapes", "gpt2-small", "--seq", "5")
    assert code == 0
    assert "gpt2-small: prefill of T=5 tokens, batch B=1" in out
    rows = table_rows(out)
    labels = [row[0] for row in rows]
    start, end = labels.index("block × 12 layers"), labels.index("one block")
    block = rows[start + 1:end]
    outside = rows[:start] + rows[end + 1:labels.index("total (block × 12)")]
    for column in (5, 6):  # params, FLOPs
        assert sum(number(row[column]) for row in block) == number(rows[end][column])
        total = sum(number(row[column]) for row in outside) + 12 * number(rows[end][column])
        assert total == number(rows[-1][column])
    assert number(rows[-1][5]) == 124_439_808 and number(rows[-1][6]) == 927_462_912
    q_heads = rows[labels.index("split Q into heads")]
    assert q_heads[1:5] == ["[1, 5, 768]", "", "[1, 12, 5, 64]", "[B, h, T, d_head]"]
    assert "weight [in, out]" in out and "FLOP convention: 2·m·n·k per [m, k] × [k, n] matmul" in out


def test_decode_and_explain() -> None:
    code, out = run("shapes", "qwen2-72b", "--seq", "100", "--batch", "2", "--decode", "--explain")
    assert code == 0
    assert "qwen2-72b: decode 1 new token after T=100 cached, batch B=2" in out
    rows = {row[0]: row for row in table_rows(out) if row[0]}
    assert rows["append K to the KV cache"][1:3] == ["[2, 8, 101, 128]", "[B, kv, T+1, d_head]"]
    assert "each KV head serves h/kv = 8 query heads" in rows["KV heads shared by groups ·"][3]
    assert "keys and values T+1 = 101" in out


def test_json() -> None:
    code, out = run("shapes", "gpt2-small", "-T", "5", "-B", "3", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["params"] == 124_439_808 and data["batch"] == 3 and data["decode"] is False
    steps = {step["id"]: step for step in data["steps"]}
    assert steps["q_heads"]["output"] == [3, 12, 5, 64]
    assert steps["q_heads"]["output_dims"] == ["B", "h", "T", "d_head"]
    assert steps["scores"]["inputs"] == [[3, 12, 5, 64], [3, 12, 64, 5]]
    assert steps["logits"]["weight"] == [768, 50257] and steps["probs"]["traced"] is False
    assert data["flops"] == 3 * 927_462_912


@pytest.mark.parametrize("args, message", [
    (["shapes", "gpt2-small"], "Missing option '--seq'"),
    (["shapes", "gpt2-small", "--seq", "0"], "Invalid value for '--seq'"),
    (["shapes", "gpt2-small", "--seq", "4", "--batch", "0"], "Invalid value for '--batch'"),
    (["shapes", "gpt2-small", "--seq", "2000"], "Error: --seq: 2000 positions exceed"),
    (["shapes", "no-such-model", "--seq", "4"], "Error: "),
    (["shapes", "gpt2-small", "--seq", "4", "--set", "n_heads=5"], "Error: "),
])
def test_errors_exit_2(args: list[str], message: str) -> None:
    code, out = run(*args)
    assert code == 2 and message in out and "Traceback" not in out


def test_help_has_an_example() -> None:
    code, out = run("shapes", "--help")
    assert code == 0 and "gptcalc shapes gpt2-small --seq 5" in out
