"""StableLM (StableLM-3B-4E1T, StableLM-2; model_type stablelm): Llama's SwiGLU MLP with LayerNorms.

LayerNorms with scale and bias (eps `layer_norm_eps`); `use_qkv_bias` puts biases on Q, K and V,
never on o_proj; the MLP has none. Rotary acts on the first `partial_rotary_factor` of each head
(0.25 unless said). `qk_layernorm` (StableLM-2-12B) adds a LayerNorm per head, scale only, for
queries (n_heads of them) and keys (n_kv_heads): full-width counts, per-head statistics. `use_parallel_residual` makes
the block parallel with its one input_layernorm (no post_attention_layernorm). Head untied unless
`tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import attention, gated_mlp, mlp_activation, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' StableLmConfig defaults (models/stablelm/configuration_stablelm.py) for the keys read
# here; partial_rotary_factor is the one its __post_init__ fills in.
DEFAULTS = {"vocab_size": 50304, "intermediate_size": 6912, "hidden_size": 2560, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu", "max_position_embeddings": 4096,
            "layer_norm_eps": 1e-5, "tie_word_embeddings": False, "use_qkv_bias": False, "qk_layernorm": False,
            "use_parallel_residual": False, "partial_rotary_factor": 0.25, "rope_theta": 10000.0, "hidden_dropout": 0.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    ln = norm("layernorm", cfg.float("layer_norm_eps"))
    qkv_bias = cfg.bool("use_qkv_bias")
    attn = attention(cfg, q_bias=qkv_bias, k_bias=qkv_bias, v_bias=qkv_bias, o_bias=False)
    if cfg.bool("qk_layernorm"):
        # StableLmLayerNormPerHead: a LayerNorm of its own per head, each normalising its head's slice
        attn["qk_norm"] = {"norm": {**ln, "bias": False}, "scope": "full", "per_head": True}
    # StableLmDecoderLayer: hidden_dropout on the MLP's output only (attention_dropout on P, read by attention())
    block = {"attention": attn, "mlp": gated_mlp(cfg, **mlp_activation(cfg, "hidden_act"), bias=False),
             "norm": ln, "residual_dropout": cfg.float("hidden_dropout"), "residual_dropout_on": "mlp"}
    if cfg.bool("use_parallel_residual"):
        block.update(norms=("attn_in",), parallel=True)
    return uniform(cfg, "stablelm", block, ln, cfg.bool("tie_word_embeddings"))
