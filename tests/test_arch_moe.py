"""The mixture-of-experts and MLA adapters against published figures and against transformers.

Vendors publish rounded totals and "active" (per-token) counts, and they do not agree on what an
active count includes. gptcalc's `active` counts everything a token passes through: the token
embedding, attention, norms, the router, top_k routed experts, the shared experts and the LM head.
Each test says which convention the vendor's figure follows:
- "with embeddings": gptcalc's `active` as it is (Mistral, Qwen, AllenAI).
- "head, no embedding": `active` minus the token embedding, i.e. the unembedding matmul counts but the
  embedding lookup does not (OpenAI's gpt-oss model card; DeepSeek's README_WEIGHTS.md, which says
  its 36.6B includes "0.9B for the output Head").
Published figures are checked by rounding our exact count to the vendor's precision; where a
figure is only reached by truncation, the test says so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from calc.analysis.breakdown import Breakdown
from calc.analysis.count import count
from calc.analysis.memory import kv_cache
from calc.errors import GptcalcError
from calc.spec.hf import HFConfig, read_config
from calc.spec.load import spec_from_config
from oracle import CONFIG_DIR, preset_config, saved, spec_of, transformers_model


def breakdown(config: Path | dict[str, Any]) -> Breakdown:
    hf = read_config(config) if isinstance(config, Path) else HFConfig(config, config["model_type"])
    return count(spec_from_config(hf))


def billions(n: int, digits: int = 1) -> float:
    return round(n / 1e9, digits)


def no_embedding(b: Breakdown) -> int:
    """The "head, no embedding" active count."""
    assert b.active is not None
    return b.active - b.get("token_embedding")


def test_mixtral_8x7b() -> None:
    # https://mistral.ai/news/mixtral-of-experts: "46.7B total parameters but only uses 12.9B
    # parameters per token". With embeddings: 12.88B (without embedding and head it would be 12.62B).
    b = breakdown(preset_config("mixtral-8x7b"))
    assert billions(b.total) == 46.7
    assert billions(b.active) == 12.9


def test_mixtral_8x22b() -> None:
    # https://mistral.ai/news/mixtral-8x22b: "only 39B active parameters out of 141B". With
    # embeddings (39.15B).
    b = breakdown(preset_config("mixtral-8x22b"))
    assert billions(b.total, 0) == 141
    assert billions(b.active, 0) == 39


def test_qwen3_30b_a3b() -> None:
    # https://huggingface.co/Qwen/Qwen3-30B-A3B: "30.5B in total and 3.3B activated",
    # "Number of Parameters (Non-Embedding): 29.9B". Active with embeddings is 3.353B: the card's
    # 3.3B is that figure truncated (rounding gives 3.4B; no convention rounds to 3.3B).
    b = breakdown(preset_config("qwen3-30b-a3b"))
    assert billions(b.total) == 30.5
    assert billions(b.non_embedding) == 29.9
    assert b.active // 10**8 == 33


def test_qwen3_235b_a22b() -> None:
    # https://huggingface.co/Qwen/Qwen3-235B-A22B: "235B in total and 22B activated",
    # "Non-Embedding: 234B". With embeddings (22.19B).
    b = breakdown(preset_config("qwen3-235b-a22b"))
    assert billions(b.total, 0) == 235
    assert billions(b.non_embedding, 0) == 234
    assert billions(b.active, 0) == 22


def test_qwen1_5_moe_a2_7b() -> None:
    # https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B: "14.3B parameters in total and 2.7B activated
    # parameters during runtime". With embeddings (2.689B).
    b = breakdown(CONFIG_DIR / "model_types" / "qwen2_moe.json")
    assert billions(b.total) == 14.3
    assert billions(b.active) == 2.7


@pytest.mark.parametrize(("preset", "total", "active"), [("gpt-oss-120b", 116.83, 5.13), ("gpt-oss-20b", 20.91, 3.61)])
def test_gpt_oss(preset: str, total: float, active: float) -> None:
    # OpenAI's gpt-oss model card, https://arxiv.org/abs/2508.10925 (Table 1: 116.83B total, 5.13B
    # active; 20.91B, 3.61B; "Embed + Unembed" 1.16B), announced as "117B parameters with 5.1B active"
    # and "21B parameters with 3.6B active" (https://openai.com/index/introducing-gpt-oss/). Head, no
    # embedding: with the embedding it would be 5.71B and 4.19B, without the head too 4.55B and 3.03B.
    b = breakdown(preset_config(preset))
    assert billions(b.total, 2) == total
    assert billions(no_embedding(b), 2) == active
    assert billions(b.embeddings, 2) == 1.16


def test_deepseek_v3_main_model() -> None:
    # https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md: main model "Total
    # parameters: 671B", "Activation parameters: 36.6B (including 0.9B for the output Head)", i.e.
    # head, no embedding (36.63B); the README's "37B activated" rounds the same figure. With the
    # embedding as well it would be 37.55B.
    b = breakdown(preset_config("deepseek-v3"))
    assert billions(b.total, 0) == 671
    assert billions(no_embedding(b)) == 36.6
    assert billions(no_embedding(b), 0) == 37
    assert billions(b.get("lm_head")) == 0.9


def deepseek_v3_fp8_scales(c: dict[str, Any]) -> int:
    """Elements of the FP8 checkpoint's weight_scale_inv tensors: one float32 per 128x128 block of
    every FP8 Linear (quantization_config weight_block_size [128, 128]) in the 61 layers and the MTP
    layer; embeddings, heads, norms, routers and eh_proj are stored in BF16 without scales."""
    def blocks(rows: int, cols: int) -> int:
        return -(-rows // 128) * -(-cols // 128)

    def mlp(width: int) -> int:
        return 2 * blocks(width, d) + blocks(d, width)

    d, h, r_q, r_kv = c["hidden_size"], c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    attention = (blocks(r_q, d) + blocks(h * (nope + rope), r_q) + blocks(r_kv + rope, d)
                 + blocks(h * (nope + v), r_kv) + blocks(d, h * v))
    f = c["moe_intermediate_size"]
    moe = c["n_routed_experts"] * mlp(f) + mlp(f * c["n_shared_experts"])
    layers, dense = c["num_hidden_layers"] + c["num_nextn_predict_layers"], c["first_k_dense_replace"]
    return layers * attention + dense * mlp(c["intermediate_size"]) + (layers - dense) * moe


def test_deepseek_v3_checkpoint_holds_the_model_and_the_mtp_module() -> None:
    # The Hub's safetensors total for DeepSeek-V3's architecture (DeepSeek-R1, DeepSeek-V3-0324: same
    # config and tensor shapes) is 684,531,386,000 elements, the "685B" of the model page
    # (https://huggingface.co/api/models/deepseek-ai/DeepSeek-R1?expand=safetensors: F8_E4M3 680.6B,
    # BF16 3.9B, F32 41.6M). README_WEIGHTS.md: that is the 671B main model plus the MTP module
    # (model.layers.61: a full MoE layer, enorm, hnorm, eh_proj, shared_head.norm and its own copies
    # of embed_tokens and shared_head.head), and the routers' e_score_correction_bias are stored too.
    # What gptcalc shows beside the total, plus the FP8 scales, must be exactly that.
    config = preset_config("deepseek-v3")
    b = breakdown(config)
    assert set(b.extra) == {"router_score_bias", "mtp_layers", "mtp_embedding_copies"}
    scales = deepseek_v3_fp8_scales(config)
    assert b.stored_total + scales == 684_531_386_000


def test_deepseek_v3_mla_cache() -> None:
    # DeepSeek-V2 paper (https://arxiv.org/abs/2405.04434, Table 1): MLA caches (d_c + d_h^R) x l
    # elements per token, the compressed latent and the shared rotary key, here (512 + 64) x 61.
    spec = spec_from_config(HFConfig(preset_config("deepseek-v3"), "deepseek-v3"))
    assert kv_cache(spec, seq=1).elements_per_token == (512 + 64) * 61


def test_deepseek_v2_lite() -> None:
    # The card's "15.7B total parameters, of which 2.4B are activated"; the checkpoint's tensors sum
    # to 15,706,484,224, all BF16, no buffers or MTP stored (the Hub's safetensors total,
    # https://huggingface.co/api/models/deepseek-ai/DeepSeek-V2-Lite-Chat?expand=safetensors). Active,
    # head but no embedding as for V3, is 2.451B: the card's 2.4B is that truncated (rounding gives
    # 2.5B; with embeddings it is 2.66B, without embedding and head 2.24B).
    config = preset_config("deepseek-v2-lite")  # its config.json (presets/deepseek-v2-lite.yaml says whose copy)
    b = breakdown(config)
    assert b.total == 15_706_484_224 == sum(p.numel() for p in transformers_model(config).parameters())
    assert not b.extra
    assert no_embedding(b) // 10**8 == 24


def test_olmoe_1b_7b() -> None:
    # The OLMoE paper (https://arxiv.org/abs/2409.02060): "6.9B total parameters ... 1.3B active", counted on
    # OLMoE-1B-7B-0125-Instruct's config.json (tests/configs/model_types/olmoe.json, the same architecture):
    # with embeddings (1.28B active; 1.18B without).
    config = saved("olmoe.json")
    b = breakdown(config)
    assert b.total == sum(p.numel() for p in transformers_model(config).parameters())
    assert billions(b.total) == 6.9
    assert billions(b.active) == 1.3


def test_granite_3_0_1b_a400m() -> None:
    # ibm-granite/granite-3.0-1b-a400m-base's model card (https://huggingface.co/ibm-granite/granite-3.0-1b-a400m-base,
    # README line 275-276 as its commit cf1a1df shows them): "# Parameters 1.3B", "# Active Parameters 400M", counted on
    # its config.json (tests/configs/model_types/granitemoe.json): 32 experts of 512, top 8, on 24 layers of 1,024;
    # 0.43B active with the tied embedding, 0.38B without.
    config = saved("granitemoe.json")
    b = breakdown(config)
    assert b.total == sum(p.numel() for p in transformers_model(config).parameters())
    assert billions(b.total) == 1.3
    assert billions(b.active) == billions(no_embedding(b)) == 0.4


def test_glm_4_6_active_matches_the_glm_4_5_card() -> None:
    # GLM-4.5's model card (https://huggingface.co/zai-org/GLM-4.5): "355 billion total parameters and 32
    # billion active parameters"; GLM-4.6 keeps that architecture (tests/configs/model_types/glm4_moe.json).
    # 32B is the active count without the token embedding and the head (32.08B). The 355B is loose: the model
    # is 352.80B, 356.79B with its MTP layer (whose embedding and head copies GLM-4.6 leaves out).
    b = breakdown(saved("glm4_moe.json"))
    assert billions(no_embedding(b) - b.get("lm_head"), 0) == 32
    assert billions(b.total, 2) == 352.80 and billions(b.total + b.extra["mtp_layers"], 2) == 356.79


def test_glm_4_7_flash() -> None:
    # zai-org/GLM-4.7-Flash (tests/configs/model_types/glm4_moe_lite.json), model card
    # (https://huggingface.co/zai-org/GLM-4.7-Flash): "30B-A3B", the 3B active without the token embedding
    # and head (3.26B; 3.58B with the head). The checkpoint's tensor listing quoted beside the config copy
    # (SOURCES.yaml) sums to 31,221,488,576 elements: the model, its MTP layer model.layers.47 (a MoE layer,
    # enorm, hnorm, eh_proj, shared_head.norm, its own embed_tokens and shared_head.head) and the routers'
    # e_score_correction_bias; what gptcalc shows beside the total must add up to exactly that.
    b = breakdown(saved("glm4_moe_lite.json"))
    assert billions(b.total, 0) == 30
    assert billions(no_embedding(b) - b.get("lm_head"), 0) == 3
    assert set(b.extra) == {"router_score_bias", "mtp_layers", "mtp_embedding_copies"}
    assert b.stored_total == 31_221_488_576


def test_kimi_k2() -> None:
    # moonshotai/Kimi-K2-Instruct (tests/configs/model_types/kimi_k2.json), model card
    # (https://huggingface.co/moonshotai/Kimi-K2-Instruct): "Total Parameters 1T", "Activated Parameters 32B",
    # DeepSeek's convention (head, no embedding: 31.69B; 32.86B with the embedding as well). The checkpoint's
    # tensor listing quoted beside the config copy (SOURCES.yaml) sums to 1,026,470,731,056 elements: the model,
    # the routers' e_score_correction_bias, the FP8 weight_scale_inv tensors (blocks of 128 x 128, as
    # DeepSeek-V3's) and 61 stored self_attn.rotary_emb.inv_freq of 56 elements each.
    config = saved("kimi_k2.json")
    b = breakdown(config)
    assert round(b.total / 1e12) == 1
    assert billions(no_embedding(b), 0) == 32
    assert set(b.extra) == {"router_score_bias"}
    assert b.stored_total + deepseek_v3_fp8_scales(config) + 61 * 56 == 1_026_470_731_056


def test_mimo_v2_flash() -> None:
    # XiaomiMiMo/MiMo-V2-Flash model card (https://huggingface.co/XiaomiMiMo/MiMo-V2-Flash): "309B total
    # parameters and 15B active parameters", active with the embedding and head (15.45B; 14.20B without),
    # counted on the transcribed config (tests/configs/model_types/mimo_v2_flash.json).
    b = breakdown(saved("mimo_v2_flash.json"))
    assert billions(b.total, 0) == 309
    assert billions(b.active, 0) == 15


def test_laguna_xs2() -> None:
    # Laguna XS.2's model card (quoted at https://api-inference.hf-mirror.com/FenomAI/Laguna-XS.2-INT4): "33B
    # total parameter Mixture-of-Experts model with 3B activated parameters per token", 10 global and 30 sliding-
    # window layers; on the transcribed config (tests/configs/model_types/laguna.json), active with the embedding
    # and head (3.02B; 2.61B without). The routers' e_score_correction_bias are frozen parameters: counted.
    b = breakdown(saved("laguna.json"))
    assert billions(b.total, 0) == 33
    assert billions(b.active, 0) == 3
    assert b.get("router_score_bias_param") == 39 * 256 and not b.extra
    assert [block.layers for block in b.blocks if block.name.startswith("sliding")] == [30]


def test_kimi_k25_counts_the_language_model_and_moonvit() -> None:
    """Kimi-K2.5's config (tests/configs/model_types/kimi_k25.json) nests Kimi-K2 under text_config beside
    MoonViT under the keys Moonshot's code reads (vt_hidden_size, ...): both are counted, and the whole
    equals the checkpoint's tensor listing beside that config (SOURCES.yaml): the language model's bf16
    tensors plus its int4 experts unpacked (eight to an int32: weight_packed [2048, 896] holds 2048 x 7168,
    [7168, 256] 7168 x 2048; 60 layers x 384), and the vision tower and projector, summed by hand below. transformers' Kimi_K25ForConditionalGeneration
    gives the same (tests/test_arch.py)."""
    config = saved("kimi_k25.json")
    b = breakdown(config)
    assert b.decoder_total == breakdown(saved("kimi_k2.json")).total and not b.partial
    assert [t.kind for t in b.towers] == ["moonvit"]
    d, v = 1152, 4608  # vt_hidden_size; the projector's merged width, 2 x 2 patches of 1152
    block = 2 * 4304 * d + 4304 + d + 2 * 2 * d + d * d + d + 3 * d * d + 3 * d  # fc0, fc1, norm0/1, wo, wqkv
    tower = 27 * block + 2 * d + 64 * 64 * d + d * 3 * 14 * 14 + d  # final norm, pos_emb, patch conv
    projector = 2 * d + v * v + v + 7168 * v + 7168  # pre_norm, proj.0, proj.2
    assert b.towers_total == tower + projector == 471_143_920
    assert b.total == 1_026_879_353_328 and b.active == 32_861_477_888
    assert b.total + b.extra["router_score_bias"] == 1_026_879_376_368  # + 60 x 384 e_score_correction_bias


def test_kimi_k25_projector_keys_are_read_from_moonshots_vision_config() -> None:
    """Moonshot's config keeps the projector's norm width and epsilon in vision_config (mm_hidden_size,
    projector_ln_eps); gptcalc reads them, and hands them to transformers as Kimi_K25Config's
    projection_hidden_size and projection_layer_norm_eps (models/kimi_k25/configuration_kimi_k25.py)."""
    from calc.arch import transformers_view

    config = saved("kimi_k25.json")
    config["vision_config"]["projector_ln_eps"] = 1e-3
    assert spec_of(config).towers["vision"].projectors[0].norm.eps == 1e-3
    view = transformers_view(config)
    assert (view["projection_hidden_size"], view["projection_layer_norm_eps"]) == (1152, 1e-3)
    assert view["vision_config"]["hidden_size"] == 1152 and "vt_hidden_size" not in view["vision_config"]


def transformers_total_of(config: dict[str, Any]) -> int:
    return sum(p.numel() for p in transformers_model(config).parameters())
def test_minimax_m2() -> None:
    # https://huggingface.co/MiniMaxAI/MiniMax-M2 (and transformers' docs/source/en/model_doc/minimax_m2.md): "230
    # billion total parameters with 10 billion active parameters", counted on MiniMax-M2's config.json
    # (tests/configs/model_types/minimax_m2.json; M2.1 and M2.5 keep the architecture). The model is 228.69B, so
    # "230B" is rounded to tens of billions. 10B is the active count with the head but not the embedding
    # (10.42B; 9.80B without the head as well, 11.03B with both).
    config = saved("minimax_m2.json")
    b = breakdown(config)
    assert b.total == 228_689_748_992 == sum(p.numel() for p in transformers_model(config).parameters())
    assert round(b.total / 1e10) == 23
    assert billions(no_embedding(b), 0) == 10
    assert b.extra == {"router_score_bias": 62 * 256}  # e_score_correction_bias: a buffer, stored, not counted


# ERNIE-4.5-21B-A3B's architecture as its model card gives it (https://huggingface.co/baidu/ERNIE-4.5-21B-A3B-PT:
# 28 layers, 20 query and 4 KV heads, 64 text experts of which 6 are activated, 2 shared experts, 131072 context),
# with the widths the released config.json uses (no verbatim copy of it was found).
ERNIE_4_5_21B_A3B = {"model_type": "ernie4_5_moe", "hidden_size": 2560, "intermediate_size": 12288,
                     "max_position_embeddings": 131072, "num_attention_heads": 20, "num_key_value_heads": 4,
                     "num_hidden_layers": 28, "rms_norm_eps": 1e-05, "vocab_size": 103424, "rope_theta": 500000,
                     "use_bias": False, "tie_word_embeddings": True, "moe_num_experts": 64,
                     "moe_layer_start_index": 1, "moe_intermediate_size": 1536, "moe_k": 6, "moe_layer_interval": 1,
                     "moe_num_shared_experts": 2}


def test_ernie_4_5_21b_a3b() -> None:
    # The model card (https://huggingface.co/baidu/ERNIE-4.5-21B-A3B-PT): "21B total parameters and 3B activated
    # parameters for each token". The model is 21.83B (the card truncates; its name says A3B), 3.35B active with the
    # (tied) embedding, 3.09B without. The 28 routers' score correction biases ([1, 64] each) are parameters in
    # transformers (nn.Parameter, requires_grad=False), so they are in the total.
    b = breakdown(ERNIE_4_5_21B_A3B)
    assert b.total == sum(p.numel() for p in transformers_model(ERNIE_4_5_21B_A3B).parameters())
    assert b.total // 10**9 == 21
    assert billions(b.active, 0) == billions(no_embedding(b), 0) == 3
    assert b.get("router_score_bias_param") == 27 * 64 and not b.extra


# Hunyuan-A13B's architecture as its model card gives it (https://huggingface.co/tencent/Hunyuan-A13B-Instruct:
# 32 layers, 32 attention heads, 8 KV heads, hidden 4096, FFN 3072, 64 experts and 1 shared, top-8, NTK-alpha
# rotary); the vocabulary is its config.json's as other projects' tests copy it (no verbatim copy was found), the
# embedding tied as in the Hunyuan family's configs (untied: 80.92B and 13.27B active, which the card's round figures
# match as well).
HUNYUAN_A13B = {"model_type": "hunyuan_v1_moe", "vocab_size": 128167, "hidden_size": 4096, "intermediate_size": 3072,
                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                "num_experts": 64, "moe_topk": [8] * 32, "max_position_embeddings": 32768, "tie_word_embeddings": True,
                "rope_theta": 10000.0, "rope_scaling": {"alpha": 1000.0, "factor": 1.0, "type": "dynamic"}}


def test_hunyuan_a13b() -> None:
    # The model card (https://huggingface.co/tencent/Hunyuan-A13B-Instruct): "80 billion total parameters and 13
    # billion active parameters". With the (tied) embedding: 80.39B and 12.75B (12.22B without it).
    b = breakdown(HUNYUAN_A13B)
    assert b.total == sum(p.numel() for p in transformers_model(HUNYUAN_A13B).parameters())
    assert billions(b.total, 0) == 80
    assert billions(b.active, 0) == 13


# dots.llm1.inst's config.json as the mlx-lm dots1 loader's tests trim it (every size key kept).
DOTS_LLM1 = {"model_type": "dots1", "hidden_size": 4096, "num_hidden_layers": 62, "intermediate_size": 10944,
             "num_attention_heads": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-05, "vocab_size": 152064,
             "first_k_dense_replace": 1, "moe_intermediate_size": 1408, "n_routed_experts": 128,
             "n_shared_experts": 2, "num_experts_per_tok": 6, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
             "max_position_embeddings": 32768, "rope_theta": 10000000, "attention_bias": False,
             "tie_word_embeddings": False}


def test_dots_llm1() -> None:
    # The model card (https://huggingface.co/rednote-hilab/dots.llm1.inst): "a MoE model with 14B activated and
    # 142B total parameters". The model is 142.77B (the card truncates); 14.02B active with the embedding and the
    # head, the count the card rounds (13.39B without the embedding).
    b = breakdown(DOTS_LLM1)
    assert b.total == sum(p.numel() for p in transformers_model(DOTS_LLM1).parameters())
    assert b.total // 10**9 == 142
    assert billions(b.active, 0) == 14


# databricks/dbrx-instruct's config.json as its model card describes it (https://huggingface.co/databricks/dbrx-instruct:
# 16 experts, 4 per token, GQA, 32K context) with the widths the released file uses (no verbatim copy was found).
DBRX_INSTRUCT = {"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40, "max_seq_len": 32768,
                 "vocab_size": 100352, "tie_word_embeddings": False,
                 "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "model_type": "", "rope_theta": 500000},
                 "ffn_config": {"ffn_hidden_size": 10752, "model_type": "", "moe_jitter_eps": 0, "moe_loss_weight": 0.05,
                                "moe_num_experts": 16, "moe_top_k": 4}}


def test_dbrx() -> None:
    # https://www.databricks.com/blog/introducing-dbrx-new-state-art-open-llm: "132B total parameters of which 36B
    # parameters are active on any input". The model is 131.60B; active 36.47B with the embedding and the head,
    # 35.85B with the head only (35.24B with neither), so the 36B counts the head at least.
    b = breakdown(DBRX_INSTRUCT)
    assert b.total == sum(p.numel() for p in transformers_model(DBRX_INSTRUCT).parameters())
    assert billions(b.total, 0) == 132
    assert billions(b.active, 0) == billions(no_embedding(b), 0) == 36


def test_trinity_nano_and_mini() -> None:
    # Arcee's model cards: Trinity Nano (https://huggingface.co/arcee-ai/Trinity-Nano-Preview) "6B parameters, 1B
    # active", Trinity Mini (https://huggingface.co/arcee-ai/Trinity-Mini) "26B parameters, 3B active". Nano is
    # tests/configs/model_types/afmoe.json (6.12B; 1.02B active with the embedding and the head, 0.82B with the head
    # only); Mini is Nano with the widths and depth the same source lists for it (26.12B; 3.47B active with both,
    # 3.06B with the head only, the count the card rounds). expert_bias is a parameter in transformers
    # (nn.Parameter, requires_grad=False): counted, 128 per MoE layer.
    nano = saved("afmoe.json")
    b = breakdown(nano)
    assert b.total == 6_120_003_328 == sum(p.numel() for p in transformers_model(nano).parameters())
    assert billions(b.total, 0) == 6 and billions(b.active) == 1.0
    assert b.get("router_score_bias_param") == 54 * 128
    mini = {**nano, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 1024,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 4}
    b = breakdown(mini)
    assert b.total == sum(p.numel() for p in transformers_model(mini).parameters())
    assert billions(b.total, 0) == 26 and billions(no_embedding(b), 0) == 3


SMALL = {"vocab_size": 97, "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
         "max_position_embeddings": 128}
IDS = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}  # inside the small vocabulary
MLA = {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}
# Small configs that switch on what the real ones leave off: every branch of every adapter.
BRANCHES: dict[str, dict[str, Any]] = {
    "mixtral-window": {"model_type": "mixtral", "num_key_value_heads": 2, "intermediate_size": 40,
                       "num_local_experts": 4, "sliding_window": 16, "attention_bias": True},
    "mixtral-tied": {"model_type": "mixtral", "num_key_value_heads": 4, "intermediate_size": 40,
                     "tie_word_embeddings": True},
    "phimoe-biases": {"model_type": "phimoe", "num_key_value_heads": 2, "intermediate_size": 40, "num_local_experts": 4,
                      "attention_bias": True, "lm_head_bias": True},
    "granitemoe-bias": {"model_type": "granitemoe", "num_key_value_heads": 2, "intermediate_size": 40,
                        "num_local_experts": 4, "attention_bias": True},
    "olmoe-gqa": {"model_type": "olmoe", "num_key_value_heads": 2, "intermediate_size": 40, "num_experts": 4,
                  "num_experts_per_tok": 2, "attention_bias": True},
    "olmoe-alias": {"model_type": "olmoe", "intermediate_size": 40, "num_local_experts": 6, "num_experts_per_tok": 2},
    "qwen2_moe-windows": {"model_type": "qwen2_moe", "num_key_value_heads": 4, "intermediate_size": 48,
                          "moe_intermediate_size": 24, "shared_expert_intermediate_size": 32, "num_experts": 4,
                          "num_experts_per_tok": 2, "mlp_only_layers": [1], "use_sliding_window": True,
                          "max_window_layers": 3, "sliding_window": 8},
    "qwen2_moe-step": {"model_type": "qwen2_moe", "num_key_value_heads": 2, "intermediate_size": 48,
                       "moe_intermediate_size": 24, "shared_expert_intermediate_size": 32, "num_experts": 4,
                       "num_experts_per_tok": 2, "decoder_sparse_step": 2, "qkv_bias": False},
    "qwen3_moe-dense-layers": {"model_type": "qwen3_moe", "num_key_value_heads": 2, "head_dim": 32,
                               "intermediate_size": 48, "moe_intermediate_size": 24, "num_experts": 4,
                               "num_experts_per_tok": 2, "mlp_only_layers": [0, 3], "attention_bias": True},
    "qwen3_moe-no-experts": {"model_type": "qwen3_moe", "num_key_value_heads": 2, "intermediate_size": 48,
                             "moe_intermediate_size": 24, "num_experts": 0, "num_experts_per_tok": 2},
    "deepseek_v2-biases": {"model_type": "deepseek_v2", **MLA, "intermediate_size": 48, "moe_intermediate_size": 16,
                           "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 2,
                           "first_k_dense_replace": 1, "q_lora_rank": None, "mlp_bias": True, "attention_bias": True},
    "deepseek_v2-q-lora": {"model_type": "deepseek_v2", **MLA, "intermediate_size": 48, "moe_intermediate_size": 16,
                           "n_routed_experts": 8, "num_experts_per_tok": 2, "q_lora_rank": 24},
    "deepseek_v3-bias": {"model_type": "deepseek_v3", **MLA, "intermediate_size": 48, "moe_intermediate_size": 16,
                         "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 2, "q_lora_rank": 24,
                         "n_group": 2, "topk_group": 1, "attention_bias": True},
    "deepseek_v3-all-dense": {"model_type": "deepseek_v3", **MLA, "intermediate_size": 48, "moe_intermediate_size": 16,
                              "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 9,
                              "q_lora_rank": 24, "n_group": 2, "topk_group": 1},
    "glm4_moe_lite-layer-types": {"model_type": "glm4_moe_lite", **MLA, "intermediate_size": 48,
                                  "moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
                                  "q_lora_rank": None, "first_k_dense_replace": 3, "attention_bias": True,
                                  "mlp_layer_types": ["sparse", "dense", "sparse", "dense"], "n_shared_experts": 2},
    "kimi_k2-mtp-bias": {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], **MLA,
                         "intermediate_size": 48, "moe_intermediate_size": 16, "n_routed_experts": 8,
                         "num_experts_per_tok": 2, "first_k_dense_replace": 1, "q_lora_rank": 24, "n_group": 1,
                         "topk_group": 1, "attention_bias": True, "mlp_bias": True},
    "mimo_v2_flash-rope-window": {"model_type": "mimo_v2_flash", "num_key_value_heads": 2, "head_dim": 24,
                                  "v_head_dim": 16, "intermediate_size": 48, "moe_intermediate_size": 16,
                                  "n_routed_experts": 4, "num_experts_per_tok": 2, "attention_bias": True,
                                  "sliding_window": 9, "attention_value_scale": None,
                                  "mlp_layer_types": ["sparse", "dense", "sparse", "dense"],
                                  "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                                                  "sliding_attention"],
                                  "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 7.0e5},
                                                      "sliding_attention": {"rope_type": "default", "rope_theta": 1.0e4,
                                                                            "partial_rotary_factor": 0.5}}},
    "laguna-per-element-gate": {"model_type": "laguna", "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48,
                                "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24, "num_experts": 4,
                                "num_experts_per_tok": 2, "gating": "per-element", "attention_bias": True,
                                "num_attention_heads_per_layer": [4, 8, 4, 8], "moe_router_logit_softcapping": 30.0,
                                "layer_types": ["full_attention", "sliding_attention"] * 2,
                                "mlp_layer_types": ["sparse", "dense", "sparse", "sparse"]},
    "glm4_moe-qk-norm": {"model_type": "glm4_moe", "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 48,
                         "moe_intermediate_size": 16, "n_routed_experts": 8, "n_shared_experts": 2,
                         "num_experts_per_tok": 2, "use_qk_norm": True, "attention_bias": True},
    "minimax_m2-full-rotary": {"model_type": "minimax_m2", "num_key_value_heads": 2, "head_dim": 32,
                               "intermediate_size": 40, "num_local_experts": 4, "num_experts_per_tok": 2, **IDS},
    "minimax_m2-factor": {"model_type": "minimax_m2", "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 40,
                          "num_local_experts": 4, "num_experts_per_tok": 2, "rotary_dim": 4,
                          "partial_rotary_factor": 0.5, **IDS},
    "flex_olmo-gqa-bias": {"model_type": "flex_olmo", "num_key_value_heads": 2, "intermediate_size": 40, "num_experts": 4,
                           "num_experts_per_tok": 2, "attention_bias": True, "tie_word_embeddings": True, **IDS},
    "ernie4_5_moe-interval": {"model_type": "ernie4_5_moe", "num_key_value_heads": 2, "intermediate_size": 48,
                              "moe_intermediate_size": 16, "moe_num_experts": 4, "moe_k": 2, "moe_num_shared_experts": 0,
                              "moe_layer_start_index": 0, "moe_layer_end_index": 2, "moe_layer_interval": 2, **IDS},
    "ernie4_5_moe-bias": {"model_type": "ernie4_5_moe", "num_key_value_heads": 2, "intermediate_size": 48,
                          "moe_intermediate_size": 16, "moe_num_experts": 4, "moe_k": 2, "use_bias": True,
                          "tie_word_embeddings": False, **IDS},
    "hunyuan_v1_moe-bias": {"model_type": "hunyuan_v1_moe", "num_key_value_heads": 2, "head_dim": 16,
                            "intermediate_size": 40, "num_experts": 4, "moe_topk": 2, "attention_bias": True, **IDS},
    "dots1-layer-types": {"model_type": "dots1", "num_key_value_heads": 2, "intermediate_size": 48,
                          "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1,
                          "num_experts_per_tok": 2, "first_k_dense_replace": 2, "sliding_window": 8,
                          "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                          **IDS},
    "exaone_moe-mlp-types": {"model_type": "exaone_moe", "num_key_value_heads": 2, "intermediate_size": 48,
                             "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
                             "num_shared_experts": 2, "sliding_window": 8,
                             "layer_types": ["sliding_attention", "full_attention", "full_attention", "sliding_attention"],
                             "mlp_layer_types": ["sparse", "dense", "sparse", "dense"],
                             **IDS},
    "dbrx-unnormalised": {"model_type": "dbrx", "d_model": 64, "n_heads": 4, "n_layers": 2, **IDS,
                          "attn_config": {"kv_n_heads": 4, "rope_theta": 10000.0},
                          "ffn_config": {"ffn_hidden_size": 24, "moe_num_experts": 4, "moe_top_k": 2,
                                         "moe_normalize_expert_weights": None, "ffn_act_fn": {"name": "gelu"}}},
    "afmoe-plain": {"model_type": "afmoe", "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48,
                    "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2, "num_shared_experts": 0,
                    "num_dense_layers": 0, "tie_word_embeddings": True, "sliding_window": 8,
                    "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"], **IDS},
    "gpt_oss-layer-types": {"model_type": "gpt_oss", "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 40,
                            "num_local_experts": 4, "num_experts_per_tok": 2, "attention_bias": False,
                            "layer_types": ["full_attention", "full_attention", "sliding_attention", "full_attention"]},
}


@pytest.mark.parametrize("name", BRANCHES)
def test_branch_counts_as_transformers(name: str) -> None:
    config = {**SMALL, **BRANCHES[name]}
    assert breakdown(config).total == sum(p.numel() for p in transformers_model(config).parameters())


def test_qwen2_moe_layer_kinds() -> None:
    """mlp_only_layers makes layer 1 dense; windows on the even layers below max_window_layers."""
    spec = spec_from_config(HFConfig({**SMALL, **BRANCHES["qwen2_moe-windows"]}, "qwen2_moe"))
    assert [(run.repeat, run.block) for run in spec.layers] == [
        (1, "moe_sliding"), (1, "dense"), (1, "moe_sliding"), (1, "moe")]
    assert spec.blocks["moe_sliding"].attention.window == 8


def test_score_bias_is_a_buffer_not_a_parameter() -> None:
    # transformers registers DeepseekV3TopkRouter.e_score_correction_bias with nn.Buffer: it is
    # stored (checkpoint tensor model.layers.N.mlp.gate.e_score_correction_bias) but not counted.
    config = {**SMALL, **BRANCHES["deepseek_v3-bias"]}
    b = breakdown(config)
    moe_layers = config["num_hidden_layers"] - config["first_k_dense_replace"]
    assert "router_score_bias" not in b.components
    assert b.extra["router_score_bias"] == moe_layers * config["n_routed_experts"]
    model = transformers_model(config)
    assert sum(buf.numel() for name, buf in model.named_buffers() if "e_score_correction_bias" in name) == \
        b.extra["router_score_bias"]


@pytest.mark.parametrize(("config", "named"), [
    ({"model_type": "kimi_k2", "architectures": ["KimiLinearForCausalLM"]}, "architectures: .* only when it names"),
    ({"model_type": "glm4_moe_lite", "num_hidden_layers": 2, "mlp_layer_types": ["dense", "moe"]}, "mlp_layer_types"),
    ({"model_type": "mimo_v2_flash", "num_hidden_layers": 2, "mlp_layer_types": ["dense"]}, "mlp_layer_types"),
    ({"model_type": "laguna", "num_hidden_layers": 2, "num_attention_heads_per_layer": [8]}, "num_attention_heads_per_layer"),
    ({"model_type": "laguna", "num_hidden_layers": 2, "gating": "per-token"}, "gating"),
    ({"model_type": "laguna", "num_hidden_layers": 2, "rope_parameters": {"rope_theta": 1.0}}, "rope_parameters"),
])
def test_bad_layer_lists_are_refused_by_name(config: dict[str, Any], named: str) -> None:
    """A per-layer list of the wrong length or values, or an alias naming another architecture: one error naming the key."""
    with pytest.raises(GptcalcError, match=named):
        spec_of(config)
@pytest.mark.parametrize("model_type", ["minimax_m2", "flex_olmo", "ernie4_5_moe", "exaone_moe", "afmoe"])
def test_defaults_are_transformers_config_class_defaults(model_type: str) -> None:
    # Hunyuan's and dots1's config classes leave head_dim and the expert counts None, which their models cannot build;
    # DBRX's attention config has no rope_theta, which its attention reads.
    config = {"model_type": model_type, "num_hidden_layers": 2, **IDS}
    assert breakdown(config).total == sum(p.numel() for p in transformers_model(config).parameters())


@pytest.mark.parametrize(("config", "message"), [
    ({"model_type": "hunyuan_v1_moe", "num_hidden_layers": 2, "moe_topk": [8]},
     "moe_topk: expected 2 positive integers (one per layer), got [8]"),
    ({"model_type": "exaone_moe", "num_hidden_layers": 2, "mlp_layer_types": ["dense", "moe"]},
     "mlp_layer_types: unknown MLP type 'moe' (expected dense, sparse)"),
    ({"model_type": "dbrx", "ffn_config": {"moe_normalize_expert_weights": 2}},
     "ffn_config.moe_normalize_expert_weights: 2: only 1 (weights divided by their sum, as released) or null is "
     "supported"),
    ({"model_type": "dbrx", "tie_word_embeddings": True},
     "tie_word_embeddings: DBRX's head is never tied to the embedding (DbrxConfig refuses it)"),
    ({"model_type": "dbrx", "attn_config": {"kv_n_heads": "8"}}, "attn_config.kv_n_heads: expected an integer, got '8'"),
])
def test_bad_layer_lists_name_the_key(config: dict[str, Any], message: str) -> None:
    with pytest.raises(GptcalcError, match=f"^test: {re.escape(message)}$"):
        spec_from_config(HFConfig(config, "test"))
