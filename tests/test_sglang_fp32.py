"""SGLang's DeepSeek-V4 parameters kept whole in fp32 (calc/analysis/memory/sglang_fp32.py) and its complex64 freqs_cis
tables (calc/analysis/memory/rope_cache.py sglang_freqs_cis). Every expected figure is
recomputed here from DeepSeek-V4-Flash's config.json (tests/configs/model_types/deepseek_v4.json, from
https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash) and what SGLang's files allocate:

- models/deepseek_v4.py at 000328a8cd54 MQALayer: attn_sink = nn.Parameter(torch.empty(self.n_heads, dtype=torch.float32))
  on every layer, all heads on every GPU; hc_attn_fn / hc_ffn_fn ((2 + hc_mult) x hc_mult rows of hc_mult x hidden),
  their _base ((2 + hc_mult) x hc_mult) and _scale (3), and the model's hc_head_fn (hc_mult x hc_mult x hidden), _base
  (hc_mult) and _scale (1), all fp32;
- layers/attention/dsv4/compressor.py (00bc152d26d3) Compressor, one per compressed layer and one more in each C4
  indexer (indexer.py at 00509fc37435): ape torch.empty(ratio, coff x head_dim, dtype=torch.float32), coff 2 at ratio 4,
  and norm RMSNorm(head_dim, weight_dtype=torch.float32).

The checkpoint's share the weights table counts is what a bf16 or the fp8-fp4 scheme stores (the scheme keeps the
hyper-connections, sinks and position biases in fp32, the norms in bf16), the sinks split tp ways; the term checked is
the difference, which the budget's "model weights" line names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calc.analysis.count import count
from calc.analysis.memory.parallel import Layout
from calc.analysis.memory.rope_cache import sglang_freqs_cis
from calc.analysis.memory.schemes import find_scheme
from calc.analysis.memory.sglang_draft import draft_weights
from calc.analysis.memory.weights import weights
from calc.spec.load import load_spec
from tests.cli_checks import check_run

CONFIG = json.loads((Path(__file__).parent / "configs" / "model_types" / "deepseek_v4.json").read_text())
LAYERS, HEADS, D = CONFIG["num_hidden_layers"], CONFIG["num_attention_heads"], CONFIG["hidden_size"]
C, I, HC = CONFIG["head_dim"], CONFIG["index_head_dim"], CONFIG["hc_mult"]
RATIOS = CONFIG["compress_ratios"][:LAYERS]  # DeepseekV4Config reads the first num_hidden_layers
CSA, HCA = RATIOS.count(4), RATIOS.count(128)


def extra_term(tp: int, *args: str) -> str:
    """The budget's model-weights line, whose source names what SGLang holds beyond the checkpoint's share."""
    result = check_run(["memory", "deepseek-v4-flash", "--engine", "sglang", "--budget", "8xH200", "--tp", str(tp),
                        "--seq", "32k", *args, "--json"])
    assert result.exit_code == 0, result.output
    terms = json.loads(result.stdout)["engine_budget"]["terms"]
    return next(term["source"] for term in terms if term["key"] == "weights")


def norms() -> int:
    """The compressors' norm weights: head_dim on each compressed layer, index_head_dim on each C4 indexer."""
    return (CSA + HCA) * C + CSA * I


def test_config_shapes() -> None:
    """DeepSeek-V4-Flash: 43 layers, 21 CSA (ratio 4) and 20 HCA (ratio 128) among them, 64 heads of 512."""
    assert (LAYERS, CSA, HCA, HEADS, C, I) == (43, 21, 20, 64, 512, 128)


def test_fp8_fp4_at_tp8() -> None:
    """The scheme's share: sinks 64 / 8 per layer at 4 B, the norms at 2 B. SGLang holds all 64 sinks and 4 B norms."""
    sinks = LAYERS * HEADS * 4 - LAYERS * HEADS // 8 * 4
    assert sinks == 9_632 and norms() * 2 == 47_360
    assert f"{sinks + norms() * 2:,} B of fp32 parameters kept whole" in extra_term(8)  # 56,992 B


def test_dp_attention_keeps_every_sink_already() -> None:
    """--dp-size 8: an attention group of one GPU, so the share of the sinks is every head; the norms remain."""
    term = extra_term(8, "--enable-dp-attention", "--dp-size", "8")
    assert f"{norms() * 2:,} B of fp32 parameters kept whole" in term


def test_bf16_weights_widen_every_fp32_parameter() -> None:
    """--dtype bf16 counts every one at 2 B: SGLang's fp32 doubles the hyper-connections, position biases and norms,
    and holds the sinks' other 7 / 8 besides."""
    mix = (2 + HC) * HC
    hc = 2 * LAYERS * (mix * HC * D + mix + 3) + HC * HC * D + HC + 1
    bias = CSA * 4 * 2 * C + HCA * 128 * C + CSA * 4 * 2 * I  # ape: ratio x coff x head_dim, and the indexer's
    sinks = LAYERS * HEADS * 4 - LAYERS * HEADS // 8 * 2
    assert f"{(hc + bias + norms()) * 2 + sinks:,} B of fp32 parameters kept whole" in extra_term(8, "--dtype", "bf16")


@pytest.mark.parametrize("model", ["deepseek-v3", "gpt-oss-120b"])
def test_other_models_keep_none(model: str) -> None:
    """Only a model whose adapter names SGLang's fp32 parameters (`SglangBuild.fp32_whole`) gets the term."""
    result = check_run(["memory", model, "--engine", "sglang", "--budget", "8xH200", "--tp", "8", "--json"])
    assert result.exit_code == 0, result.output
    assert "fp32 parameters kept whole" not in result.stdout


def test_the_mtp_draft_keeps_its_sinks_whole() -> None:
    """The draft worker's MTP layer is an MQALayer too (models/deepseek_v4_nextn.py builds DeepseekV4DecoderLayer): its
    attn_sink holds all 64 heads in fp32 on each of 8 GPUs, 64 x 4 - 64 / 8 x 4 = 224 B beyond the share. The layer
    after Flash's 43 is sliding (compress_ratios[43] = 0), so no compressor norm comes with it. It does not hash
    (DeepseekV2MoE: is_hash = layer_id < num_hash_layers and not (is_deepseek_v4 and is_nextn)), so its MoEGate holds
    the fp32 score bias, 256 x 4 B."""
    assert CONFIG["compress_ratios"][LAYERS] == 0
    spec = load_spec("deepseek-v4-flash")
    stored = weights(count(spec), "bf16", scheme=find_scheme("fp8-fp4"), spec=spec)
    without = spec.replaced(sglang=spec.sglang.replaced(fp32_whole=()))
    held, bare = (draft_weights(s, stored, Layout(tp=8), None).own for s in (spec, without))
    assert held - bare == HEADS * 4 - HEADS // 8 * 4 + CONFIG["n_routed_experts"] * 4 == 224 + 1_024


def test_router_tables_are_parameters_in_sglang() -> None:
    """SGLang's DeepseekV2MoE (built by models/deepseek_v4.py at 000328a8 with is_deepseek_v4=True) holds as
    parameters what transformers registers as buffers: MoEGate's e_score_correction_bias, fp32 n_routed_experts, on
    each layer past the num_hash_layers (topk_method noaux_tc in the config), and on each hash layer HashTopK's tid2eid,
    int32 vocab_size x num_experts_per_tok (layers/moe/hash_topk.py at 02b3581d12d4; shared-expert fusion is off for
    V4). Whole on every GPU: at tp 8 and with DP attention alike."""
    assert CONFIG["topk_method"] == "noaux_tc" and CONFIG["num_hash_layers"] == 3
    scored = (LAYERS - CONFIG["num_hash_layers"]) * CONFIG["n_routed_experts"] * 4
    table = CONFIG["num_hash_layers"] * CONFIG["vocab_size"] * CONFIG["num_experts_per_tok"] * 4
    assert (scored, table) == (40_960, 9_308_160)
    for args in ((), ("--enable-dp-attention", "--dp-size", "8")):
        assert f"{scored + table:,} B of router tables held as parameters" in extra_term(8, *args)


def test_a_pipeline_stage_holds_its_own_layers_tables() -> None:
    """--pp 2 puts layers 0-21 on the busiest GPU (vLLM's split, which the weights line follows): the three hash
    layers' tables and 19 scored layers' biases."""
    scored = 19 * CONFIG["n_routed_experts"] * 4
    table = 3 * CONFIG["vocab_size"] * CONFIG["num_experts_per_tok"] * 4
    result = check_run(["memory", "deepseek-v4-flash", "--engine", "sglang", "--budget", "8xH200", "--tp", "4",
                        "--pp", "2", "--seq", "32k", "--json"])
    assert result.exit_code == 0, result.output
    terms = json.loads(result.stdout)["engine_budget"]["terms"]
    source = next(term["source"] for term in terms if term["key"] == "weights")
    assert f"{scored + table:,} B of router tables held as parameters" in source


def test_freqs_cis_tables_beside_the_cos_sin_ones() -> None:
    """MQALayer registers precompute_freqs_cis(qk_rope_head_dim, max_position_embeddings, ...) (models/deepseek_v4.py at
    000328a8), complex64 [positions, dim / 2], and layers/deepseek_v4_rope.py (130a40708e1d) caches it lru_cache(2): one
    tensor for the sliding layers (rope_theta, no YaRN) and one for the compressed layers (compress_rope_theta, YaRN),
    1,048,576 x 32 x 8 B each. A model without the fact keeps none."""
    table = CONFIG["max_position_embeddings"] * CONFIG["qk_rope_head_dim"] // 2 * 8
    assert CONFIG["rope_theta"] != CONFIG["compress_rope_theta"] and table == 268_435_456
    assert sglang_freqs_cis(load_spec("deepseek-v4-flash")) == 2 * table
    assert f"{2 * table:,} B of complex64 rotary freqs_cis" in extra_term(8)
    assert sglang_freqs_cis(load_spec("deepseek-v3")) == 0
