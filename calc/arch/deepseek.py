"""DeepSeek-V2 and DeepSeek-V3 (model_types deepseek_v2, deepseek_v3; DeepSeek-R1 and Moonlight are
deepseek_v3 too), Kimi-K2 (kimi_k2: DeepSeek-V3's architecture, which its config.json names) and
GLM-4.7-Flash (glm4_moe_lite: DeepSeek-V3's layers under GLM's defaults).

Multi-head latent attention on every layer (`q_lora_rank` null: a full-rank Q, as V2-Lite), with
`attention_bias` on q_a, kv_a and the output projection. The first `first_k_dense_replace` layers
have a dense SwiGLU of `intermediate_size`, the rest a MoE of `n_routed_experts` SwiGLU experts of
`moe_intermediate_size` plus one shared MLP `n_shared_experts` times as wide. transformers ignores
`moe_layer_freq` (every layer from first_k_dense_replace on is a MoE), and so does this count.
- deepseek_v2: `mlp_bias` on the dense and shared MLPs (never on the routed experts).
- deepseek_v3: no MLP biases; the router keeps an e_score_correction_bias buffer (stored, shown,
  not counted); `num_nextn_predict_layers` (default 1) multi-token-prediction layers live only in
  the checkpoint, each a MoE layer plus enorm, hnorm, eh_proj, shared_head.norm and copies of the
  embedding and head (README_WEIGHTS.md: "685B" = 671B + the MTP module).
- kimi_k2: read as deepseek_v3 (transformers has no kimi_k2 config class; `calc.arch.TRANSFORMERS_ALIASES`).
- glm4_moe_lite: Glm4MoeLiteForCausalLM is DeepSeek-V3's model (MLA, grouped sigmoid routing with the
  score-correction buffer, no MLP biases) whose dense and MoE layers follow `mlp_layer_types`
  ("dense" / "sparse" per layer; default one dense layer, then MoE; first_k_dense_replace is not read);
  its config class has no num_nextn_predict_layers, but the checkpoint holds that many MTP layers
  (transformers skips model.layers.47.*), taken to be stored as DeepSeek-V3's are.
Heads untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch import transformers_type
from calc.arch.common import KEYS, decoder, gated_mlp, kind_stack, norm, rope, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import deepseek_moe, dense_then_moe, grouped_sigmoid, mlp_typed_stack, mtp

__all__ = ["DEFAULTS", "mla", "spec_dict"]

_COMMON = {"rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False, "kv_lora_rank": 512,
           "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "rope_theta": 10000.0}
# transformers' config-class defaults (models/<type>/configuration_<type>.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek_v2": {**_COMMON, "vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 11008,
                    "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 2048,
                    "mlp_bias": False, "first_k_dense_replace": 0, "n_routed_experts": 64, "n_shared_experts": 2,
                    "moe_intermediate_size": 1407, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
                    "routed_scaling_factor": 1.0},
    "deepseek_v3": {**_COMMON, "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
                    "num_hidden_layers": 61, "num_attention_heads": 128, "max_position_embeddings": 4096,
                    "first_k_dense_replace": 3, "n_routed_experts": 256, "n_shared_experts": 1,
                    "moe_intermediate_size": 2048, "num_experts_per_tok": 8, "num_nextn_predict_layers": 1,
                    "n_group": 8, "topk_group": 4, "norm_topk_prob": True, "routed_scaling_factor": 2.5},
    "deepseek_v32": {**_COMMON, "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
                     "num_hidden_layers": 61, "num_attention_heads": 128, "max_position_embeddings": 163840,
                     "first_k_dense_replace": 3, "n_routed_experts": 256, "n_shared_experts": 1,
                     "moe_intermediate_size": 2048, "num_experts_per_tok": 8, "num_nextn_predict_layers": 1,
                     "n_group": 8, "topk_group": 4, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
                     "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64},
    "glm_moe_dsa": {**_COMMON, "vocab_size": 154880, "hidden_size": 6144, "intermediate_size": 12288,
                    "moe_intermediate_size": 2048, "num_hidden_layers": 78, "num_attention_heads": 64,
                    "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5, "q_lora_rank": 2048,
                    "v_head_dim": 256, "qk_nope_head_dim": 192, "n_group": 1, "topk_group": 1, "num_experts_per_tok": 8,
                    "norm_topk_prob": True, "max_position_embeddings": 202752, "rms_norm_eps": 1e-5,
                    "first_k_dense_replace": 3, "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 32,
                    "index_topk_freq": 1, "index_skip_topk_offset": 2, "num_nextn_predict_layers": 1},
    "glm4_moe_lite": {**_COMMON, "vocab_size": 154880, "hidden_size": 2048, "intermediate_size": 10240,
                      "moe_intermediate_size": 1536, "num_hidden_layers": 47, "num_attention_heads": 20,
                      "n_shared_experts": 1, "n_routed_experts": 64, "routed_scaling_factor": 1.8, "q_lora_rank": 768,
                      "v_head_dim": 256, "qk_nope_head_dim": 192, "n_group": 1, "topk_group": 1,
                      "num_experts_per_tok": 4, "norm_topk_prob": True, "max_position_embeddings": 202752,
                      "rms_norm_eps": 1e-5},
}
# What each model's MLPs hard-code (DeepseekV3MLP, Glm4MoeLiteMLP: no biases, whatever mlp_bias says).
FIXED = {"deepseek_v3": {"mlp_bias": False}, "glm4_moe_lite": {"mlp_bias": False}, "deepseek_v32": {"mlp_bias": False},
         "glm_moe_dsa": {"mlp_bias": False}}
# DeepSeek-V3.2's sparse attention (DSA): MLA with a lightning indexer (calc.parts.mla.Indexer).
DSA = ("deepseek_v32", "glm_moe_dsa")
# The SGLang file that builds each, whose DP-attention layout calc.analysis.memory.sglang_dp reads: deepseek_v2.py's
# DeepseekV2ForCausalLM (Kimi-K2 reads as deepseek_v3; DeepseekV32ForCausalLM and GLM-5's GlmMoeDsaForCausalLM are its
# subclasses), and GLM-4.7-Flash's glm4_moe_lite.py, whose layers take deepseek_v2.py's DeepseekV2AttentionMLA.
SGLANG_DP = {"deepseek_v2": "deepseek_v2", "deepseek_v3": "deepseek_v2", "glm4_moe_lite": "glm4_moe_lite",
             **dict.fromkeys(DSA, "deepseek_v2")}
# the rest convert as llama.cpp's deepseek2, whose MLA tensors (attn_q_a, attn_q_b, attn_kv_a_mqa, attn_k_b, attn_v_b)
# ollama 0.30 pins to Q8_0 in Q4_K_M / Q4_K_S (server/quantization.go at 0e93ccc2, llamaQuantizeArgs :306-320)
OLLAMA_MLA = dict.fromkeys(("q_a", "q_b", "kv_a", "kv_b"), "q8_0")
# llama.cpp's converter writes the MTP layers of GLM-4.7-Flash, DeepSeek-V3.2 and GLM-5 after the layers unless given
# --no-mtp (Glm4MoeLiteModel, GlmMoeDsaModel: conversion/glm.py:247-300, 316-330; DeepseekV32Model:
# conversion/deepseek.py:466-517, skip_mtp False); DeepSeek-V3's and Kimi-K2's it skips (DeepseekV2Model.skip_mtp,
# conversion/deepseek.py:239-240, 397-401)
MTP_WRITTEN = ("glm4_moe_lite", "deepseek_v32", "glm_moe_dsa")
# ... of which llama.cpp's glm-dsa creates the router's score bias though it skips the rest (src/models/glm-dsa.cpp:155:
# ffn_exp_probs_b without the MTP layers' TENSOR_SKIP): it is mapped or allocated (calc/spec/llamacpp.py)
MTP_CREATED = {"glm_moe_dsa": ("exp_probs_b.bias",)}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    arch = transformers_type(cfg.data, cfg.origin)  # kimi_k2 -> deepseek_v3
    cfg = with_defaults(cfg, DEFAULTS[arch])
    cfg = cfg.replace({**cfg.data, **FIXED.get(arch, {})})
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    attn, bias, v2 = mla(cfg), cfg.bool("mlp_bias"), arch == "deepseek_v2"
    mlps = {"dense": gated_mlp(cfg, bias=bias),
            "moe": deepseek_moe(cfg, score_bias=not v2, bias=bias, **_routing(cfg, arch))}
    blocks = {name: {"attention": attn, "mlp": mlp, "norm": rms} for name, mlp in mlps.items()}
    multi_token = mtp(cfg) if not v2 and cfg.has("num_nextn_predict_layers") else None
    if arch in DSA:
        return _dsa(cfg, model_type, blocks, multi_token, rms)
    stack = mlp_typed_stack(cfg, blocks, multi_token) if arch == "glm4_moe_lite" else dense_then_moe(cfg, blocks, multi_token)
    notes = (*_notes(cfg), *([_alias_note(model_type, arch)] if arch != model_type else []))
    return decoder(cfg, model_type, final_norm=rms, tied=cfg.bool("tie_word_embeddings"), notes=notes,
                   llamacpp={"ollama_tensor_types": OLLAMA_MLA, "mtp_written": arch in MTP_WRITTEN},
                   sglang=_sglang(arch), **stack)


def _sglang(arch: str) -> dict[str, Any]:
    """What SGLang's code does with these models: its DP-attention layout where read (SGLANG_DP), and for every one
    the w_kc / w_vc copy of kv_b_proj that deepseek_v2.py's weight loader keeps (glm4_moe_lite.py reuses it)."""
    return {"dp_attention": SGLANG_DP.get(arch, ""), "mla_kv_b_copy": True}


def _dsa(cfg: Config, model_type: str, blocks: dict[str, Any], multi_token: dict[str, Any] | None,
         rms: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek-V3.2 and GLM-5: every layer's MLA gets the lightning indexer, except GLM-5's "shared"
    layers, which reuse the last full layer's selection and have no indexer of their own
    (GlmMoeDsaAttention: `indexer_types`); dense and MoE layers as `mlp_layer_types` says, else
    `first_k_dense_replace` dense ones first (DeepseekV32Config.__post_init__)."""
    n_layers = cfg.int(*KEYS["n_layers"])
    dense = min(cfg.int("first_k_dense_replace"), n_layers)
    mlps = cfg.list("mlp_layer_types") or ["dense"] * dense + ["sparse"] * (n_layers - dense)
    if len(mlps) != n_layers or set(mlps) - {"dense", "sparse"}:
        raise cfg.error("mlp_layer_types", f"expected {n_layers} of dense, sparse (one per layer), got {mlps!r}")
    indexed = _indexer_types(cfg, n_layers)
    # DeepSeek-V3.2's indexer rotates halves, GLM-5's interleaved pairs (apply_rotary_pos_emb vs _interleave)
    indexer = {"n_heads": cfg.int("index_n_heads"), "head_dim": cfg.int("index_head_dim"), "topk": cfg.int("index_topk"),
               "interleaved": cfg.raw("model_type") == "glm_moe_dsa"}

    def build(kind: str) -> dict[str, Any]:
        mlp, full = kind.split("+")
        block = blocks["moe" if mlp == "sparse" else "dense"]
        return {**block, "attention": {**block["attention"], "indexer": indexer if full == "full" else None,
                                       "reuse_selection": full == "shared"}}

    kinds = [f"{mlp}+{full}" for mlp, full in zip(mlps, indexed)]
    names = {kind: ("moe" if kind.startswith("sparse") else "dense") + ("_shared" if kind.endswith("shared") else "")
             for kind in kinds}
    built, layers = kind_stack(kinds, names, build)
    if multi_token is not None:  # the MTP layer is a MoE layer with its own indexer
        built.setdefault("moe", build("sparse+full"))
    return decoder(cfg, model_type, built, layers, rms, cfg.bool("tie_word_embeddings"), mtp=multi_token,
                   notes=_notes(cfg), llamacpp={"mtp_written": True, "mtp_created": MTP_CREATED.get(model_type, ())},
                   sglang=_sglang(model_type))


def _indexer_types(cfg: Config, n_layers: int) -> list[str]:
    """GLM-5's `indexer_types` ("full" / "shared"), else its index_topk_pattern (F / S), else the
    freq/offset schedule of GlmMoeDsaConfig.__post_init__; DeepSeek-V3.2 has an indexer in every layer."""
    if cfg.raw("model_type") != "glm_moe_dsa":
        return ["full"] * n_layers
    kinds = cfg.list("indexer_types")
    pattern = cfg.raw("index_topk_pattern", default=None)
    if kinds is None and isinstance(pattern, str):
        kinds = [{"F": "full", "S": "shared"}.get(letter, letter) for letter in pattern]
    if kinds is None:
        freq, offset = max(cfg.int("index_topk_freq"), 1), cfg.int("index_skip_topk_offset")
        kinds = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n_layers)]
    if len(kinds) != n_layers or set(kinds) - {"full", "shared"}:
        raise cfg.error("indexer_types", f"expected {n_layers} of full, shared (one per layer), got {kinds!r}")
    return kinds


def _alias_note(model_type: str, arch: str) -> str:
    return (f"{model_type}: read as {arch}, the architecture its config.json names (transformers has no "
            f"{model_type} config class)")


def _routing(cfg: Config, model_type: str) -> dict[str, Any]:
    """DeepseekV3TopkRouter's grouped sigmoid choice; DeepseekV2's softmax over all experts, top_k of them
    (within the topk_group best groups by their best expert with topk_method group_limited_greedy),
    never renormalised, times routed_scaling_factor."""
    if model_type != "deepseek_v2":
        return grouped_sigmoid(cfg)
    grouped = cfg.raw("topk_method") == "group_limited_greedy"
    return {"scoring": "softmax", "norm_topk": False, "n_group": cfg.int("n_group") if grouped else 1,
            "topk_group": cfg.int("topk_group") if grouped else 1, "routed_scale": cfg.float("routed_scaling_factor")}


def mla(cfg: Config) -> dict[str, Any]:
    """DeepseekV3Attention (also LongCat-Flash's, Kimi-Linear's, GLM-5's): the latent norms are RMSNorms at
    their default eps of 1e-6; `attention_dropout` (0.0 in each config class) on P in training."""
    rope_dim = cfg.int("qk_rope_head_dim")
    return {"kind": "mla", "n_heads": cfg.int(*KEYS["n_heads"]), "q_lora_rank": cfg.int("q_lora_rank", default=None),
            "kv_lora_rank": cfg.int("kv_lora_rank"), "qk_nope_head_dim": cfg.int("qk_nope_head_dim"),
            "qk_rope_head_dim": rope_dim, "v_head_dim": cfg.int("v_head_dim"),
            "bias": cfg.bool("attention_bias"), "norm": norm("rmsnorm", 1e-6),
            "dropout": cfg.float("attention_dropout", default=0.0),
            "rope": {**rope(cfg, rope_dim), "interleaved": cfg.bool("rope_interleave", default=True)}}


def _notes(cfg: Config) -> tuple[str, ...]:
    freq = cfg.int("moe_layer_freq", default=1)
    if freq == 1:
        return ()
    return (f"moe_layer_freq {freq} is ignored, as transformers ignores it: every layer from "
            f"first_k_dense_replace on is counted as a MoE layer",)
