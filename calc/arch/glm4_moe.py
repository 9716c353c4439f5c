"""GLM-4.5, GLM-4.5-Air, GLM-4.6 (model_type glm4_moe): DeepSeek-V3's MoE stack with GQA attention.

Pre-norm RMSNorm blocks. Attention is GQA with `attention_bias` on Q, K and V but never on O, a
head_dim-wide RMSNorm on queries and keys when `use_qk_norm`, and rotary on half of each head by
default (`partial_rotary_factor` 0.5). The first `first_k_dense_replace` layers (default 1) have a
dense SwiGLU of `intermediate_size`; the rest a MoE of `n_routed_experts` experts of
`moe_intermediate_size`, one shared MLP `n_shared_experts` times as wide, and the router's
e_score_correction_bias buffer (stored, shown, not counted). `num_nextn_predict_layers` (default 1)
multi-token-prediction layers are in the checkpoint only; GLM-4.5 stores them with copies of the
embedding and head (model.layers.92.embed_tokens, .shared_head.head), GLM-4.6 without (vLLM PR
#27597), which config.json does not tell apart: GLM-4.5's layout is assumed. Head untied by default.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import attention, decoder, gated_mlp, norm, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import deepseek_moe, dense_then_moe, grouped_sigmoid, mtp

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Glm4MoeConfig defaults (models/glm4_moe/configuration_glm4_moe.py) for the keys read here.
DEFAULTS = {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
            "num_attention_heads": 96, "num_key_value_heads": 8, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "attention_bias": False,
            "moe_intermediate_size": 1408, "num_experts_per_tok": 8, "n_shared_experts": 1, "n_routed_experts": 128,
            "first_k_dense_replace": 1, "use_qk_norm": False, "num_nextn_predict_layers": 1,
            "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "n_group": 1, "topk_group": 1,
            "norm_topk_prob": True, "routed_scaling_factor": 1.0}

MTP_NOTE = ("multi-token prediction layers as GLM-4.5's checkpoint stores them, with copies of the embedding and "
            "head; GLM-4.6's leaves the copies out")


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    attn = attention(cfg, o_bias=False)
    if cfg.bool("use_qk_norm"):
        attn["qk_norm"] = {"norm": rms, "scope": "head"}
    mlps = {"dense": gated_mlp(cfg, bias=False), "moe": deepseek_moe(cfg, score_bias=True, **grouped_sigmoid(cfg))}
    blocks = {name: {"attention": attn, "mlp": mlp, "norm": rms} for name, mlp in mlps.items()}
    stack = dense_then_moe(cfg, blocks, mtp(cfg))
    notes = (MTP_NOTE,) if stack["mtp"] else ()
    return decoder(cfg, "glm4_moe", final_norm=rms, tied=cfg.bool("tie_word_embeddings"), notes=notes,
                   llamacpp={"mtp_written": True}, sglang={"dp_attention": "glm4_moe"}, **stack)
