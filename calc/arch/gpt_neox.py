"""GPT-NeoX (Pythia, GPT-NeoX-20B; model_type gpt_neox).

Pre-norm LayerNorm blocks (with bias) whose two norms, input_layernorm and
post_attention_layernorm, both stay in the parallel form: with `use_parallel_residual` (the
default) attention and the MLP read their own norm of the same input and are added together,
x + attn(ln1(x)) + mlp(ln2(x)); without it the block is sequential. Q, K and V are fused in
query_key_value; `attention_bias` puts biases on it and on the output `dense`; the MLP
(dense_h_to_4h, dense_4h_to_h) always has biases. Rotary acts on the first `rotary_pct` of each
head (0.25 unless said; base `rotary_emb_base`). The head (embed_out in older checkpoints) is
untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import TRANSFORMERS_BACKEND, mha, mlp_activation, norm, renamed, rope, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' GPTNeoXConfig defaults (models/gpt_neox/configuration_gpt_neox.py) for the keys read
# here; rotary_pct and rotary_emb_base under the names convert_rope_params_to_dict gives them.
DEFAULTS = {"vocab_size": 50432, "hidden_size": 6144, "num_hidden_layers": 44, "num_attention_heads": 64,
            "intermediate_size": 24576, "hidden_act": "gelu", "max_position_embeddings": 2048, "layer_norm_eps": 1e-5,
            "tie_word_embeddings": False, "use_parallel_residual": True, "attention_bias": True,
            "partial_rotary_factor": 0.25, "rope_theta": 10000.0, "attention_dropout": 0.0, "hidden_dropout": 0.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = renamed(cfg, {"rotary_pct": "partial_rotary_factor", "rotary_emb_base": "rope_theta"})
    cfg = with_defaults(cfg, DEFAULTS)
    ln = norm("layernorm", cfg.float("layer_norm_eps"))
    attn = mha(cfg, cfg.bool("attention_bias"), fused_qkv=True, dropout=cfg.float("attention_dropout"))
    attn["rope"] = rope(cfg, attn["head_dim"])
    mlp = {"d_ff": cfg.int("intermediate_size"), **mlp_activation(cfg, "hidden_act"), "bias": True}
    # GPTNeoXLayer: hidden_dropout on the attention's and the MLP's outputs (post_*_dropout) and, in
    # GPTNeoXModel, on the embeddings (emb_dropout); attention_dropout on P
    block = {"attention": attn, "mlp": mlp, "norm": ln, "parallel": cfg.bool("use_parallel_residual"),
             "residual_dropout": cfg.float("hidden_dropout")}
    # vLLM 0.32: GPTNeoXForCausalLM through the Transformers backend (vllm/model_executor/models/registry.py L716)
    return uniform(cfg, "gpt_neox", block, ln, cfg.bool("tie_word_embeddings"),
                   embedding={"dropout": cfg.float("hidden_dropout")}, **TRANSFORMERS_BACKEND)
