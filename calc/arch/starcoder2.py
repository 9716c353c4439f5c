"""StarCoder2 (model_type starcoder2): Llama's attention with LayerNorms and a GELU MLP.

GQA with rotary on the whole head, optionally a `sliding_window` on every layer; `use_bias`
(default true) puts biases on q/k/v/o_proj and on the non-gated MLP (c_fc, c_proj; the activation
is `hidden_act`, gelu_pytorch_tanh). LayerNorms with scale and bias (eps `norm_epsilon`), pre-norm,
and a final one. Head tied unless `tie_word_embeddings` is false.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (LLAMACPP_NO_WINDOW, TRANSFORMERS_BACKEND, attention, mlp_activation, norm, uniform,
                               with_defaults)
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Starcoder2Config defaults (models/starcoder2/configuration_starcoder2.py) for the keys read here.
DEFAULTS = {"vocab_size": 49152, "hidden_size": 3072, "intermediate_size": 12288, "num_hidden_layers": 30,
            "num_attention_heads": 24, "num_key_value_heads": 2, "hidden_act": "gelu_pytorch_tanh",
            "max_position_embeddings": 4096, "norm_epsilon": 1e-5, "use_bias": True, "tie_word_embeddings": True,
            "rope_theta": 10000.0, "attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    ln = norm("layernorm", cfg.float("norm_epsilon"))
    bias = cfg.bool("use_bias")
    attn = attention(cfg, q_bias=bias, k_bias=bias, v_bias=bias, o_bias=bias,
                     window=cfg.int("sliding_window", default=None))
    mlp = {"d_ff": cfg.int("intermediate_size"), **mlp_activation(cfg, "hidden_act"), "bias": bias}
    # vLLM 0.32: Starcoder2ForCausalLM through the Transformers backend (vllm/model_executor/models/registry.py L728)
    # Starcoder2Attention and Starcoder2MLP drop out their outputs (residual_dropout); the model its embeddings
    block = {"attention": attn, "mlp": mlp, "norm": ln, "residual_dropout": cfg.float("residual_dropout")}
    # llama.cpp's StarCoder2Model converter writes no window (conversion/starcoder.py:22-25) and its starcoder2
    # graph has none (src/models/starcoder2.cpp): every layer keeps every cell there
    return uniform(cfg, "starcoder2", block, ln, cfg.bool("tie_word_embeddings"),
                   embedding={"dropout": cfg.float("embedding_dropout")}, **TRANSFORMERS_BACKEND, **LLAMACPP_NO_WINDOW)
