"""gpt-oss (model_type gpt_oss): gpt-oss-20b and gpt-oss-120b.

Pre-norm RMSNorm blocks. Attention is GQA (head_dim 64 by default) with `attention_bias` (on by
default) on Q, K, V and O and one learned sink logit per head (sinks), on every layer; `layer_types`
alternates sliding-window (`sliding_window`, 128 by default) and full attention, starting with a
sliding layer. Every layer's MLP is a MoE of `num_local_experts` experts of `intermediate_size`
(gate_up_proj and down_proj with their biases: gate_up_proj_bias, down_proj_bias) behind a router
with a bias. Rotary is YaRN-scaled by default. Head untied by default.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import attention, attention_kinds, decoder, layer_runs, norm, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' GptOssConfig defaults (models/gpt_oss/configuration_gpt_oss.py) for the keys read here.
DEFAULTS = {"num_hidden_layers": 36, "num_local_experts": 128, "vocab_size": 201088, "hidden_size": 2880,
            "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
            "sliding_window": 128, "tie_word_embeddings": False, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "num_experts_per_tok": 4, "swiglu_limit": 7.0, "attention_bias": True, "rope_theta": 150000.0,
            "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                "truncate": False, "original_max_position_embeddings": 4096}}
BLOCK_NAMES = {"sliding_attention": "sliding", "full_attention": "full"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    kinds = attention_kinds(cfg, lambda i: "sliding_attention" if (i + 1) % 2 else "full_attention")
    moe = experts(cfg, ("num_experts", "num_local_experts"), "intermediate_size", expert_bias=True, router_bias=True,
                  swiglu_limit=cfg.float("swiglu_limit"), topk_first=True)  # GptOssTopKRouter: softmax of the top-k
    windows = {"sliding_attention": cfg.int("sliding_window"), "full_attention": None}
    blocks = {BLOCK_NAMES[kind]: {"attention": attention(cfg, sinks=True, window=windows[kind]), "mlp": moe, "norm": rms}
              for kind in dict.fromkeys(kinds)}
    # vLLM asks get_rope for an fp32 table whatever the model's dtype (models/gpt_oss.py L113: dtype=torch.float32)
    return decoder(cfg, "gpt_oss", blocks, layer_runs([BLOCK_NAMES[kind] for kind in kinds]), rms,
                   cfg.bool("tie_word_embeddings"), vllm={"rope_dtype": "float32"},
                   llamacpp={"rows_before_norm": True, "softmax_weight": True},
                   sglang={"dp_attention": "gpt_oss"})
