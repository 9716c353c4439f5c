"""Phi-1, Phi-1.5 and Phi-2 (model_type phi): a parallel block with one norm, biases everywhere.

Attention and the MLP both read the block's single LayerNorm (input_layernorm). q/k/v_proj and the
output `dense` have biases, as do the GELU MLP's fc1 and fc2. Rotary acts on the first
`partial_rotary_factor` of each head (0.5 unless said; Phi-2 says 0.4). With `qk_layernorm`,
queries and keys each get one head_dim-wide LayerNorm (scale and bias) shared by all heads. Final
LayerNorm; the head is untied unless `tie_word_embeddings`, and has a bias either way.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import TRANSFORMERS_BACKEND, attention, mlp_activation, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' PhiConfig defaults (models/phi/configuration_phi.py) for the keys read here;
# partial_rotary_factor is the one its __post_init__ fills in.
DEFAULTS = {"vocab_size": 51200, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
            "num_attention_heads": 32, "hidden_act": "gelu_new", "max_position_embeddings": 2048,
            "layer_norm_eps": 1e-5, "tie_word_embeddings": False, "qk_layernorm": False, "partial_rotary_factor": 0.5,
            "rope_theta": 10000.0, "attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    ln = norm("layernorm", cfg.float("layer_norm_eps"))
    attn = attention(cfg, q_bias=True, k_bias=True, v_bias=True, o_bias=True)
    if cfg.bool("qk_layernorm"):
        attn["qk_norm"] = {"norm": ln, "scope": "head"}
    mlp = {"d_ff": cfg.int("intermediate_size"), **mlp_activation(cfg, "hidden_act"), "bias": True}
    # PhiDecoderLayer: resid_pdrop on the attention's and the MLP's outputs, each before the sum;
    # PhiModel: embd_pdrop on the embeddings
    block = {"attention": attn, "mlp": mlp, "norm": ln, "norms": ("attn_in",), "parallel": True,
             "residual_dropout": cfg.float("resid_pdrop")}
    # vLLM 0.32: PhiForCausalLM through the Transformers backend (vllm/model_executor/models/registry.py L725)
    spec = uniform(cfg, "phi", block, ln, cfg.bool("tie_word_embeddings"),
                   embedding={"dropout": cfg.float("embd_pdrop")}, llamacpp={"outputs_summed_first": True},
                   **TRANSFORMERS_BACKEND)
    return {**spec, "head": {**spec["head"], "bias": True}}
