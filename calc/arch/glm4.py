"""GLM-4-0414 (model_type glm4: GLM-4-9B-0414, GLM-4-32B-0414, GLM-Z1): four norms per block.

Glm4DecoderLayer normalises each sublayer's input and its output: input_layernorm before attention,
post_self_attn_layernorm on its output, post_attention_layernorm before the MLP (the name is GLM's,
the position is a pre-norm) and post_mlp_layernorm on the MLP's output, all RMSNorm: Gemma-2's
sandwich, with GLM's names. Attention is GQA with `attention_bias` on Q, K and V but never on O,
head_dim 128 unless set, rotary on the first half of each head (`partial_rotary_factor` 0.5 by
default) by interleaved channel pairs (apply_rotary_pos_emb repeats each frequency twice and
rotates pairs). The SwiGLU MLP stores gate and up as one `gate_up_proj` (gate first), no biases.
Head untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import attention, gated_mlp, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Glm4Config defaults (models/glm4/configuration_glm4.py) for the keys read here;
# partial_rotary_factor is the one its __post_init__ sets.
DEFAULTS = {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
            "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "max_position_embeddings": 131072,
            "rms_norm_eps": 1.5625e-07, "tie_word_embeddings": False, "attention_bias": True,
            "partial_rotary_factor": 0.5, "rope_theta": 10000.0}


# ollama 0.30 keeps a glm4 file's token_embd and output F16 in Q4_K_M / Q4_K_S (server/quantization.go at 0e93ccc2,
# llamaQuantizeArgs :321-333)
OLLAMA_TYPES = {"token_embedding": "fp16", "lm_head": "fp16"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    attn = attention(cfg, o_bias=False)
    attn["rope"].update(interleaved=True, tables_per_call=1)  # apply_rotary_pos_emb's repeat_interleave
    block = {"attention": attn, "mlp": gated_mlp(cfg, bias=False, fused_gate_up=True), "norm": rms,
             "norms": ("attn_in", "attn_out", "mlp_in", "mlp_out")}
    return uniform(cfg, "glm4", block, rms, cfg.bool("tie_word_embeddings"),
                   llamacpp={"ollama_tensor_types": OLLAMA_TYPES, "fused_up": True})
