"""Named quantisation schemes: every byte of each quantised matrix as its library lays it out, and
what each scheme keeps in 16 bits. Expected values are written out from the layouts' sources."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from calc.analysis.count import count
from calc.analysis.memory import SCHEMES, find_scheme
from calc.analysis.memory.weights import weights
from calc.cli import main
from calc.errors import GptcalcError
from calc.spec.load import load_spec

D, F, KV, VOCAB, LAYERS = 4096, 14336, 1024, 128256, 32  # llama-3-8b (Meta-Llama-3-8B config.json)
# (in, out) of each quantised matrix of one llama-3-8b layer
MATRICES = {"q": (D, D), "k": (D, KV), "v": (D, KV), "attn_out": (D, D),
            "mlp_gate": (D, F), "mlp_up": (D, F), "mlp_down": (F, D)}
KEPT = 2 * VOCAB * D + LAYERS * 2 * D + D  # embedding, LM head, two norms per layer, final norm: 16-bit


def _llama(scheme: str) -> int:
    spec = load_spec("llama-3-8b")
    return weights(count(spec), scheme=find_scheme(scheme), spec=spec).total_bytes


@pytest.mark.parametrize("scheme, matrix_bits", [
    # source: AutoGPTQ QuantLinear buffers: qweight int32 (in/8, out), qzeros int32 (in/128, out/8),
    # scales fp16 (in/128, out), g_idx int32 (in)
    ("gptq-int4", lambda i, o: i * o * 4 + (i // 128) * (o // 8) * 32 + (i // 128) * o * 16 + i * 32),
    # source: AutoAWQ WQLinear_GEMM: qweight int32 (in, out/8), qzeros int32 (in/128, out/8), scales fp16 (in/128, out)
    ("awq-int4", lambda i, o: i * o * 4 + (i // 128) * (o // 8) * 32 + (i // 128) * o * 16),
    # source: bitsandbytes quantize_4bit: packed nibbles, fp32 absmax per 64 values, 16-entry fp32 NF4 code
    ("bnb-nf4", lambda i, o: i * o // 2 * 8 + i * o // 64 * 32 + 16 * 32),
    # source: bitsandbytes Int8Params: int8 CB and one fp32 SCB per output row
    ("bnb-int8", lambda i, o: i * o * 8 + o * 32),
    ("fp8", lambda i, o: i * o * 8 + 32),  # one fp32 weight_scale per tensor
    ("fp8-channel", lambda i, o: i * o * 8 + o * 32),  # weight_scale [out, 1]
    ("fp8-block", lambda i, o: i * o * 8 + (o // 128) * (i // 128) * 32),  # weight_scale_inv per 128x128
    ("nvfp4", lambda i, o: i * o * 4 + (i // 16) * o * 8 + 2 * 32),  # FP8 scale per 16, two fp32 scalars
])
def test_llama_3_8b_layouts(scheme: str, matrix_bits) -> None:  # type: ignore[no-untyped-def]
    quantised = LAYERS * sum(matrix_bits(i, o) for i, o in MATRICES.values())
    assert _llama(scheme) * 8 == quantised + KEPT * 16


def test_awq_is_not_int4_everywhere() -> None:
    # the issue: --dtype int4 also quantised the embeddings and LM head, which AWQ keeps in 16 bits
    spec = load_spec("qwen2-72b")
    b = count(spec)
    awq = weights(b, scheme=find_scheme("awq-int4"), spec=spec).total_bytes
    naive = weights(b, "int4").total_bytes
    assert awq > naive * 1.09
    assert weights(b, scheme=find_scheme("awq-int4"), spec=spec).components["token_embedding"] == b.get("token_embedding") * 2


def test_mxfp4_quantises_only_the_experts() -> None:
    # source: gpt-oss config.json quantization_config: mxfp4, modules_to_not_convert self_attn, router,
    # embed_tokens, lm_head. One E8M0 byte per 32 FP4 values: 4.25 bits.
    spec = load_spec("gpt-oss-20b")
    b = count(spec)
    w = weights(b, scheme=find_scheme("mxfp4"), spec=spec)
    for name in ("experts_gate", "experts_up", "experts_down"):
        assert w.components[name] * 8 == b.get(name) * 17 // 4
    for name in ("q", "router", "token_embedding", "lm_head", "experts_up_bias"):
        assert w.components[name] == b.get(name) * 2


def test_fp8_block_scales_of_deepseek_kv_b() -> None:
    # kv_b: 512 -> 128 x (128 + 128) = 32,768 rows: 256 x 4 blocks of 128 x 128, one fp32 scale each
    spec = load_spec("deepseek-v3")
    w = weights(count(spec), scheme=find_scheme("fp8-block"), spec=spec)
    assert w.components["kv_b"] == 61 * (512 * 32768 + 256 * 4 * 4)
    assert w.components["router"] == count(spec).get("router") * 2  # the gate stays 16-bit


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_every_scheme_beats_16_bit_and_keeps_the_head(name: str) -> None:
    spec = load_spec("qwen3-30b-a3b")
    b = count(spec)
    w = weights(b, scheme=find_scheme(name), spec=spec)
    assert w.total_bytes < 2 * b.total and sum(w.components.values()) == w.total_bytes
    # the LM head stays 16-bit, except in GGUF files (llama-quant.cpp:489-510): Q6_K (210 bytes per 256), Q8_0 in a
    # Q8_0 or MXFP4_MOE file, Q5_K (176 per 256) in the IQ1 / IQ2 / IQ3_XXS mixes
    n = b.get("lm_head")
    q5k = ("iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq2_m", "iq3_xxs")
    head = {"q8_0": n * 34 // 32, "mxfp4_moe": n * 34 // 32, **dict.fromkeys(q5k, n * 176 // 256)}.get(
        name, n * 210 // 256 if w.scheme.gguf else 2 * n)
    assert w.components["lm_head"] == head


def test_cli_quant() -> None:
    run = CliRunner().invoke
    data = json.loads(run(main, ["memory", "llama-3-8b", "--quant", "AWQ_INT4", "--seq", "16", "--json"]).output)
    assert data["weights"]["scheme"] == "awq-int4" and data["weights"]["total_bytes"] == _llama("awq-int4")
    for args, message in ((["--quant", "gguf"], "--quant 'gguf'"), (["--quant", "fp8", "--dtype", "int4"], "drop --dtype"),
                          (["--quant", "fp8", "--group-size", "64"], "--group-size")):
        result = run(main, ["memory", "llama-3-8b", *args])
        assert result.exit_code == 2 and message in result.output, result.output
    with pytest.raises(GptcalcError):
        find_scheme("int3")


# --- llama.cpp's GGUF mixes -------------------------------------------------------------------

@pytest.mark.parametrize("name, printed", [
    # source: https://github.com/ollama/ollama/issues/8509, Qwen2.5 Coder 7B Instruct Q4_K_M:
    # "model params = 7.62 B", "model size = 4.36 GiB (4.91 BPW)"
    ("qwen2.5-7b", "4.36 GiB (4.91 BPW)"),
    # source: https://github.com/Jeffser/Alpaca/issues/572, DeepSeek R1 Distill Qwen 14B Q4_K_M:
    # "model params = 14.77 B", "model size = 8.37 GiB (4.87 BPW)"
    ("qwen2.5-14b", "8.37 GiB (4.87 BPW)"),
    # source: https://github.com/utilityai/llama-cpp-rs/pull/400, Meta Llama 3.1 8B Instruct (file_type 15 = Q4_K_M):
    # "model size = 4.58 GiB (4.89 BPW)"
    ("llama-3.1-8b", "4.58 GiB (4.89 BPW)"),
])
def test_q4_k_m_matches_llama_cpp_model_size(name: str, printed: str) -> None:
    spec = load_spec(name)
    b = count(spec)
    size = weights(b, scheme=find_scheme("Q4_K_M"), spec=spec).total_bytes
    assert f"{size / 2**30:.2f} GiB ({size * 8 / b.total:.2f} BPW)" == printed


def test_q4_k_m_per_tensor_rules_written_out() -> None:
    # llama-3-8b, 32 layers: use_more_bits picks layers 0-3, 28-31 and every third from 4 (6, 9, ..., 27): 16 layers
    from calc.analysis.memory.gguf_rules import more_bits

    more = [i for i in range(32) if more_bits(i, 32)]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    q4k, q6k = 144 * 8, 210 * 8  # bits per 256-value block (ggml-common.h)
    spec = load_spec("llama-3-8b")
    w = weights(count(spec), scheme=find_scheme("q4_k_m"), spec=spec)
    rows_v, rows_down = 1024, 4096  # v: 4096 -> 1024; down: 14336 -> 4096
    assert w.components["v"] * 8 == rows_v * 16 * (16 * q6k + 16 * q4k)
    assert w.components["mlp_down"] * 8 == rows_down * 56 * (16 * q6k + 16 * q4k)
    assert w.components["q"] * 8 == 32 * 4096 * 16 * q4k
    assert w.components["lm_head"] * 8 == VOCAB * 16 * q6k and w.components["token_embedding"] * 8 == VOCAB * 16 * q4k
    assert w.components["attn_norm"] == 32 * 4096 * 4  # F32


def test_gguf_falls_back_when_rows_do_not_fill_a_super_block() -> None:
    # gpt-oss-20b's 2,880-wide rows are not a multiple of 256: q4_K falls back to q5_0 (22 bytes per 32)
    spec = load_spec("gpt-oss-20b")
    w = weights(count(spec), scheme=find_scheme("q4_k_m"), spec=spec)
    assert w.components["q"] == 24 * 4096 * (2880 // 32) * 22
