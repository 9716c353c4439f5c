"""`calc.analysis.memory.kv_cache` and `gptcalc kvcache` against published figures and written-out arithmetic."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from calc.cli import main
from calc.analysis.memory import FORMATS, kv_cache, kv_variants
from calc.spec.load import load_spec, preset_names
from calc.spec.model import spec_from_dict

# (model, seq, dtype) -> (bytes per token, total bytes at batch 1)
GOLDEN = {
    # source: independent arithmetic, 2 (K,V) x 12 layers x 12 heads x 64 head_dim x 2 B = 36,864 B/token;
    # x 1,024 tokens = 37,748,736 B (36 MiB).
    ("gpt2-small", 1024, "fp16"): (2 * 12 * 12 * 64 * 2, 37_748_736),
    # source: NVIDIA, "Mastering LLM Techniques: Inference Optimization" (developer.nvidia.com/blog/
    # mastering-llm-techniques-inference-optimization/): Llama 2 7B, 16-bit, batch 1:
    # "1 * 4096 * 2 * 32 * 4096 * 2 bytes, which is ~2 GB" -> 524,288 B per token.
    ("llama-7b", 4096, "fp16"): (2 * 32 * 4096 * 2, 1 * 4096 * 2 * 32 * 4096 * 2),
    ("llama-2-7b", 4096, "fp16"): (2 * 32 * 4096 * 2, 1 * 4096 * 2 * 32 * 4096 * 2),
    # source: Llama-2-70b-hf config.json (80 layers, 64 heads, 8 KV heads, hidden 8192 -> head_dim 128):
    # 2 x 80 x 8 x 128 x 2 B = 327,680 B/token; x 4,096 = 1,342,177,280 B (1.25 GiB).
    ("llama-70b", 4096, "fp16"): (327_680, 2 * 80 * 8 * 128 * 2 * 4096),
    # source: Qwen2-72B config.json (80 layers, 8 KV heads, head_dim 128), bf16 = 2 B:
    # 327,680 B/token x 32,768 = 10,737,418,240 B (exactly 10 GiB).
    ("qwen2-72b", 32768, "bf16"): (327_680, 10 * 2**30),
}


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_golden_numbers(key: tuple[str, int, str]) -> None:
    name, seq, dtype = key
    per_token, total = GOLDEN[key]
    kv = kv_cache(load_spec(name), seq, 1, dtype)
    assert (kv.bytes_per_token, kv.total_bytes) == (per_token, total)


def test_the_issues_golden_figures_as_printed() -> None:
    # source: the issue's figures, typed from the issue text
    assert kv_cache(load_spec("gpt2-small"), 1024).total_bytes == 37_748_736
    assert kv_cache(load_spec("llama-7b"), 4096).bytes_per_token == 524_288
    assert kv_cache(load_spec("llama-7b"), 4096).total_bytes == 2_147_483_648
    assert kv_cache(load_spec("llama-70b"), 4096).total_bytes == 1_342_177_280
    assert kv_cache(load_spec("qwen2-72b"), 32768, 1, "bf16").total_bytes == 10_737_418_240


def test_llama_70b_under_mha_is_eight_times_larger() -> None:
    # source: the issue: 10,737,418,240 B under MHA; = 2 x 80 x 64 x 128 x 2 x 4096
    variants = kv_variants(load_spec("llama-70b"), 4096)
    assert variants["MHA"].total_bytes == 10_737_418_240 == 2 * 80 * 64 * 128 * 2 * 4096
    assert variants["model"].total_bytes == 1_342_177_280
    assert variants["MQA"].total_bytes == 2 * 80 * 1 * 128 * 2 * 4096
    assert [v.attention_kind for v in variants.values()] == ["MHA", "GQA", "MQA"]


def test_head_dim_comes_from_the_spec_not_d_model_over_heads() -> None:
    # A config whose head_dim is not d_model / n_heads (as Gemma's is): the cache follows head_dim.
    spec = spec_from_dict(dict(vocab_size=10, n_positions=8, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                               head_dim=32, family="llama"), "test")
    assert kv_cache(spec, 8, 1, "fp32").bytes_per_token == 2 * 2 * 2 * 32 * 4  # not 2*2*2*16*4


def test_int4_is_exact_half_of_int8() -> None:
    spec = load_spec("llama-70b")
    assert kv_cache(spec, 4096, 1, "int4").total_bytes * 2 == kv_cache(spec, 4096, 1, "int8").total_bytes
    # source: 2 x 80 x 8 x 128 x 4 bits / 8 = 81,920 B per token
    assert kv_cache(spec, 1, 1, "int4").bytes_per_token == 81_920


@settings(max_examples=60, deadline=None)
@given(
    layers=st.integers(1, 96), kv_heads=st.integers(1, 16), group=st.integers(1, 8),
    head_dim=st.sampled_from([2, 8, 64, 80, 96, 128, 256]), seq=st.integers(1, 200_000),
    batch=st.integers(1, 64), dtype=st.sampled_from(["fp32", "fp16", "bf16", "fp8_e5m2", "int8", "int4"]),
)
def test_cache_is_linear_and_gqa_divides_it(layers: int, kv_heads: int, group: int, head_dim: int,
                                            seq: int, batch: int, dtype: str) -> None:
    heads = kv_heads * group
    spec = spec_from_dict(dict(vocab_size=10, n_positions=8, d_model=heads * head_dim, n_layers=layers,
                               n_heads=heads, n_kv_heads=kv_heads, family="llama"), "test")
    kv = kv_cache(spec, seq, batch, dtype)
    assert kv.total_bytes * 8 == 2 * layers * kv_heads * head_dim * seq * batch * FORMATS[dtype].block_bits
    assert kv.total_bytes == kv.bytes_per_token * seq * batch
    variants = kv_variants(spec, seq, batch, dtype)
    assert variants["MHA"].total_bytes == group * kv.total_bytes == heads * variants["MQA"].total_bytes


# --- the command ---------------------------------------------------------------------------


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_cli_json_per_model() -> None:
    result = run("kvcache", "gpt2-small", "llama-70b", "--seq", "4096", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["model"] for r in rows] == ["gpt2-small", "llama-2-70b"]
    assert rows[1]["total_bytes"] == 1_342_177_280
    assert rows[1]["bytes_per_token"] == 327_680
    assert {r["seq"] for r in rows} == {4096} and {r["batch"] for r in rows} == {1}
    assert {r["dtype"] for r in rows} == {"fp16"}


def test_cli_without_models_lists_every_preset_at_its_own_context() -> None:
    result = run("kvcache", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert sorted(r["model"] for r in rows) == sorted(load_spec(n).name for n in preset_names())
    assert all(r["seq"] == load_spec(r["model"]).n_positions for r in rows)


def test_kvcache_without_models_lists_presets_in_the_presets_order() -> None:
    kv = [row["model"] for row in json.loads(run("kvcache", "--json").output)]
    listed = [row["name"] for row in json.loads(run("presets", "--json").output)]
    assert kv == listed


def test_cli_gqa_json_has_three_variants_with_savings() -> None:
    result = run("kvcache", "qwen2-72b", "--seq", "32768", "--kv-dtype", "bf16", "--gqa", "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["total_bytes"] == 10_737_418_240
    assert {k: v["n_kv_heads"] for k, v in row["variants"].items()} == {"MHA": 64, "model": 8, "MQA": 1}
    assert {k: v["saving_vs_mha"] for k, v in row["variants"].items()} == {"MHA": 1, "model": 8, "MQA": 64}
    assert row["variants"]["MHA"]["total_bytes"] == 8 * 10_737_418_240


def test_cli_table_labels_units_and_gqa_rows() -> None:
    result = run("kvcache", "llama-70b", "--seq", "4096", "--batch", "2")
    assert result.exit_code == 0, result.output
    assert "2,684,354,560 B" in result.output  # 2 x 1,342,177,280
    assert "2.50 GiB" in result.output and "2.68 GB" in result.output
    table = run("kvcache", "llama-70b", "--seq", "4096", "--gqa").output
    assert "GQA (model's own)" in table and "64x" in table and "8x" in table


def test_cli_set_applies_to_every_model() -> None:
    result = run("kvcache", "llama-2-7b", "--seq", "10", "--set", "n_kv_heads=8", "--json")
    assert json.loads(result.output)[0]["bytes_per_token"] == 2 * 32 * 8 * 128 * 2


def test_cli_notes_a_seq_beyond_the_context() -> None:
    assert "longer than gpt2-small's context (1,024)" in run("kvcache", "gpt2-small", "--seq", "2048").output


@pytest.mark.parametrize("args, message", [
    (["kvcache", "no-such-model"], "unknown model"),
    (["kvcache", "gpt2-small", "--seq", "0"], "--seq"),
    (["kvcache", "gpt2-small", "--kv-dtype", "fp64"], "--kv-dtype"),
    (["kvcache", "gpt2-small", "--set", "n_kv_heads=5"], "n_kv_heads"),
    (["kvcache", "gpt2-small", "--set", "nope=1"], "unknown field"),
    (["kvcache", "llama-3-8b", "--tp", "3"], "--tp 3"),
    (["kvcache", "llama-3-8b", "--tp", "12"], "--tp 12"),
    (["kvcache", "gpt2-small", "--kv-dtype", "q4_K"], "--kv-dtype"),
    (["kvcache", "gpt2-small", "--seq", "12q"], "--seq"),
    (["kvcache", "gpt2-small", "--seq", "0k"], "--seq"),
    (["kvcache", "llama-3-8b", "--dtype", "fp8_e4m3"], "--kv-dtype"),  # the weights' type, only with --budget
    (["kvcache", "llama-3-8b", "--quant", "fp8"], "--budget"),
    (["kvcache", "llama-3-8b", "--gqa", "--tp", "2"], "--gqa with --tp"),
    (["kvcache", "llama-3-8b", "--gqa", "--engine", "vllm"], "--gqa with --engine"),
    (["kvcache", "llama-3-8b", "--pp", "33"], "--pp 33"),
    (["kvcache", "llama-3-8b", "--budget", "2xH100-80GB", "--tp", "4"], "--budget"),
])
def test_cli_bad_input_exits_2(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert "Error:" in result.output and message in result.output
    assert "Traceback" not in result.output


def test_kvcache_help_has_an_example() -> None:
    assert "gptcalc kvcache llama-7b --seq 4096" in run("kvcache", "--help").output



# --- layer kinds, formats, tensor parallelism --------------------------------------------------

MIB = 2**20


def test_deepseek_v3_caches_the_mla_latent() -> None:
    # source: llama.cpp's start-up line for DeepSeek-V3 at n_ctx 32,768, f16 (quoted in issue 12):
    # "KV self size = 2196.00 MiB, c^KV (f16): 2196.00 MiB" = 61 layers x (512 + 64) x 2 B x 32,768.
    kv = kv_cache(load_spec("deepseek-v3"), 32768)
    assert kv.total_bytes == 2196 * MIB == 61 * (512 + 64) * 2 * 32768
    # transformers' eager cache holds per-head K (128 x (128 + 64)) and V (128 x 128): 71x more
    assert kv.expanded_bytes == 61 * 128 * (192 + 128) * 2 * 32768
    assert kv_cache(load_spec("deepseek-v3"), 32768, expanded=True).total_bytes == kv.expanded_bytes
    assert kv.expanded_bytes // kv.total_bytes == 71


def test_deepseek_q8_0_latent_matches_ik_llama_cpp() -> None:
    # source: https://github.com/ikawrakow/ik_llama.cpp/pull/259 (DeepSeek, n_ctx_slot=32768):
    # "KV self size  = 1166.62 MiB, c^KV (q8_0): 1166.62 MiB": 576 values = 18 q8_0 blocks of 34 B.
    kv = kv_cache(load_spec("deepseek-v3"), 32768, 1, "q8_0")
    assert kv.total_bytes == 61 * 18 * 34 * 32768 == 1_223_294_976
    assert f"{kv.total_bytes / MIB:.2f}" == "1166.62"


def test_mistral_window_caps_the_cache() -> None:
    # source: Mistral-7B-v0.1 config.json, sliding_window 4096: a rolling buffer keeps 4,096 tokens
    kv = kv_cache(load_spec("mistral-7b"), 32768)
    assert kv.total_bytes == 32 * 8 * 128 * 2 * 2 * 4096 == 512 * MIB
    assert kv.unrolled_bytes == 4 * 2**30  # the 4.00 GiB of an engine that does not roll
    assert kv_cache(load_spec("mistral-7b"), 1000).total_bytes == 131_072 * 1000  # below the window: all kept


@pytest.mark.parametrize("name, seq, expected", [
    # gemma-3-1b: 22 local layers (window 512) + 4 global, 1 KV head x 256, 2 B
    ("gemma-3-1b", 32768, 22 * 2 * 256 * 2 * 512 + 4 * 2 * 256 * 2 * 32768),
    # gemma-2-9b: 21 local (window 4,096) + 21 global, 8 KV heads x 256
    ("gemma-2-9b", 8192, 21 * 2 * 8 * 256 * 2 * 4096 + 21 * 2 * 8 * 256 * 2 * 8192),
    # gpt-oss-20b: 12 sliding (window 128) + 12 full, 8 KV heads x 64
    ("gpt-oss-20b", 131072, 12 * 2 * 8 * 64 * 2 * 128 + 12 * 2 * 8 * 64 * 2 * 131072),
])
def test_local_global_stacks(name: str, seq: int, expected: int) -> None:
    # source: each preset's config.json (sliding_window, sliding_window_pattern / layer_types), arithmetic written out
    assert kv_cache(load_spec(name), seq).total_bytes == expected


@pytest.mark.parametrize("dtype, block_bytes, block", [
    # source: ggml-common.h block structs (https://github.com/ggml-org/llama.cpp/blob/01243c587feceaa5d6a6c2305535ef2f549c48b8/ggml/src/ggml-common.h)
    ("q8_0", 2 + 32, 32), ("q5_1", 2 + 2 + 4 + 16, 32), ("q5_0", 2 + 4 + 16, 32),
    ("q4_1", 2 + 2 + 16, 32), ("q4_0", 2 + 16, 32), ("iq4_nl", 2 + 16, 32),
    ("fp16", 2, 1), ("bf16", 2, 1), ("fp32", 4, 1), ("fp8_e4m3", 1, 1), ("fp8_e5m2", 1, 1),
])
def test_kv_block_formats_with_scales(dtype: str, block_bytes: int, block: int) -> None:
    kv = kv_cache(load_spec("llama-2-7b"), 4096, 1, dtype)
    assert kv.total_bytes == 2 * 32 * (4096 // block) * block_bytes * 4096
    assert FORMATS[dtype].bits_per_value * block == block_bytes * 8


def test_q8_0_is_eight_and_a_half_bits() -> None:
    assert str(FORMATS["q8_0"].bits_per_value) == "17/2"


@pytest.mark.parametrize("text, name", [("bfloat16", "bf16"), ("FP16", "fp16"), ("float8_e4m3fn", "fp8_e4m3"),
                                        ("torch.float16", "fp16"), ("Q8_0", "q8_0"), ("fp8", "fp8_e4m3"),
                                        ("e5m2", "fp8_e5m2"), ("float32", "fp32")])
def test_dtype_names_as_people_write_them(text: str, name: str) -> None:
    result = run("kvcache", "gpt2-small", "--seq", "8", "--kv-dtype", text, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["dtype"] == name


@pytest.mark.parametrize("tp, heads_per_gpu", [(1, 8), (2, 4), (8, 1), (16, 1), (64, 1)])
def test_tp_splits_kv_heads_and_replicates_past_them(tp: int, heads_per_gpu: int) -> None:
    # llama-3-8b: 8 KV heads x 128; TP=16 gives each GPU a replica of one head (vLLM, SGLang)
    kv = kv_cache(load_spec("llama-3-8b"), 1024, 1, "fp16", tp=tp)
    assert kv.layers[0].kv_heads_per_gpu == heads_per_gpu
    assert kv.total_bytes == 32 * 2 * heads_per_gpu * 128 * 2 * 1024


def test_tp_keeps_the_whole_mla_latent_on_every_gpu() -> None:
    spec = load_spec("deepseek-v3")
    assert kv_cache(spec, 4096, tp=8).total_bytes == kv_cache(spec, 4096).total_bytes
    assert kv_cache(spec, 4096, tp=8, expanded=True).total_bytes * 8 == kv_cache(spec, 4096, expanded=True).total_bytes



def test_cli_seq_with_k_says_what_it_read() -> None:
    result = run("kvcache", "mistral-7b", "--seq", "128k")
    assert result.exit_code == 0, result.output
    assert "seq 128k = 131,072 tokens" in result.output
    assert "rolling buffer" in result.output and "4,096" in result.output
    assert json.loads(run("kvcache", "mistral-7b", "--seq", "32K", "--json").output)[0]["seq"] == 32768


def test_cli_split_by_layer_kind_in_json() -> None:
    (row,) = json.loads(run("kvcache", "gpt-oss-20b", "--seq", "4096", "--json").output)
    by_block = {layer["block"]: layer for layer in row["layers"]}
    assert by_block["sliding"]["tokens_kept"] == 128 and by_block["full"]["tokens_kept"] == 4096
    assert sum(layer["total_bytes"] for layer in row["layers"]) == row["total_bytes"]
    assert "learned logit" in run("kvcache", "gpt-oss-20b", "--seq", "4096").output
