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
from calc.arch.common import KEYS, decoder, gated_mlp, norm, rope, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import deepseek_moe, dense_then_moe, grouped_sigmoid, mlp_typed_stack, mtp

__all__ = ["DEFAULTS", "spec_dict"]

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
    "glm4_moe_lite": {**_COMMON, "vocab_size": 154880, "hidden_size": 2048, "intermediate_size": 10240,
                      "moe_intermediate_size": 1536, "num_hidden_layers": 47, "num_attention_heads": 20,
                      "n_shared_experts": 1, "n_routed_experts": 64, "routed_scaling_factor": 1.8, "q_lora_rank": 768,
                      "v_head_dim": 256, "qk_nope_head_dim": 192, "n_group": 1, "topk_group": 1,
                      "num_experts_per_tok": 4, "norm_topk_prob": True, "max_position_embeddings": 202752,
                      "rms_norm_eps": 1e-5},
}
# What each model's MLPs hard-code (DeepseekV3MLP, Glm4MoeLiteMLP: no biases, whatever mlp_bias says).
FIXED = {"deepseek_v3": {"mlp_bias": False}, "glm4_moe_lite": {"mlp_bias": False}}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    arch = transformers_type(cfg.data, cfg.origin)  # kimi_k2 -> deepseek_v3
    cfg = with_defaults(cfg, DEFAULTS[arch])
    cfg = cfg.replace({**cfg.data, **FIXED.get(arch, {})})
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    attn, bias, v2 = _mla(cfg), cfg.bool("mlp_bias"), arch == "deepseek_v2"
    mlps = {"dense": gated_mlp(cfg, bias=bias),
            "moe": deepseek_moe(cfg, score_bias=not v2, bias=bias, **_routing(cfg, arch))}
    blocks = {name: {"attention": attn, "mlp": mlp, "norm": rms} for name, mlp in mlps.items()}
    multi_token = mtp(cfg) if not v2 and cfg.has("num_nextn_predict_layers") else None
    stack = mlp_typed_stack(cfg, blocks, multi_token) if arch == "glm4_moe_lite" else dense_then_moe(cfg, blocks, multi_token)
    notes = (*_notes(cfg), *([_alias_note(model_type, arch)] if arch != model_type else []))
    return decoder(cfg, model_type, final_norm=rms, tied=cfg.bool("tie_word_embeddings"), notes=notes, **stack)


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


def _mla(cfg: Config) -> dict[str, Any]:
    """DeepseekV3Attention: the latent norms are RMSNorms at their default eps of 1e-6."""
    rope_dim = cfg.int("qk_rope_head_dim")
    return {"kind": "mla", "n_heads": cfg.int(*KEYS["n_heads"]), "q_lora_rank": cfg.int("q_lora_rank", default=None),
            "kv_lora_rank": cfg.int("kv_lora_rank"), "qk_nope_head_dim": cfg.int("qk_nope_head_dim"),
            "qk_rope_head_dim": rope_dim, "v_head_dim": cfg.int("v_head_dim"),
            "bias": cfg.bool("attention_bias"), "norm": norm("rmsnorm", 1e-6),
            "rope": {**rope(cfg, rope_dim), "interleaved": cfg.bool("rope_interleave", default=True)}}


def _notes(cfg: Config) -> tuple[str, ...]:
    freq = cfg.int("moe_layer_freq", default=1)
    if freq == 1:
        return ()
    return (f"moe_layer_freq {freq} is ignored, as transformers ignores it: every layer from "
            f"first_k_dense_replace on is counted as a MoE layer",)
