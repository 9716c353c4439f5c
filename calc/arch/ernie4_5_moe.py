"""ERNIE-4.5 MoE (model_type ernie4_5_moe): ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B.

Llama's pre-norm RMSNorm block and GQA attention, rotating interleaved channel pairs (ERNIE's
GLM-style rotary), with `use_bias` on Q, K, V, O, every MLP projection and the LM head (not on the
routed experts). Layer i is a MoE when (i + 1) % moe_layer_interval == 0 and moe_layer_start_index
<= i <= moe_layer_end_index (-1: the last layer), else a dense SwiGLU of `intermediate_size`. A MoE
is `moe_num_experts` SwiGLU experts of `moe_intermediate_size` (top `moe_k`) behind a bias-free
softmax router, plus one shared SwiGLU `moe_num_shared_experts` times as wide. The router's
e_score_correction_bias (moe_statics, [1, E]) shifts the choice, not the weights; transformers keeps
it as an nn.Parameter without gradient, so parameters() counts it, and so does gptcalc. The top_k
weights are renormalised (by their sum clamped at moe_norm_min). The checkpoints' MTP layers are
ignored on load (_keys_to_ignore_on_load_unexpected), and not counted. Head tied by default.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, attention, decoder, gated_mlp, layer_runs, norm, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Ernie4_5_MoeConfig defaults (models/ernie4_5_moe/configuration_ernie4_5_moe.py) for the keys read here.
DEFAULTS = {"vocab_size": 103424, "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
            "num_attention_heads": 20, "num_key_value_heads": 4, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "use_bias": False, "moe_intermediate_size": 1536,
            "moe_k": 6, "moe_num_experts": 64, "moe_num_shared_experts": 2, "moe_layer_start_index": 1,
            "moe_layer_end_index": -1, "moe_layer_interval": 1, "rope_theta": 500000.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    # attribute_map: num_experts and num_experts_per_tok stand for moe_num_experts and moe_k
    cfg = with_defaults(cfg, DEFAULTS)
    rms, bias = norm("rmsnorm", cfg.float("rms_norm_eps")), cfg.bool("use_bias")
    # dropout 0.0: Ernie4_5_MoeAttention sets attention_dropout = 0.0 whatever the config says
    attn = attention(cfg, q_bias=bias, k_bias=bias, v_bias=bias, o_bias=bias, dropout=0.0)
    attn["rope"].update(interleaved=True, tables_per_call=1)  # apply_rotary_pos_emb's repeat_interleave
    mlps = {"dense": gated_mlp(cfg, bias=bias), "moe": _moe(cfg, bias)}
    kinds = ["moe" if moe else "dense" for moe in _moe_layers(cfg)]
    blocks = {kind: {"attention": attn, "mlp": mlps[kind], "norm": rms} for kind in dict.fromkeys(kinds)}
    spec = decoder(cfg, "ernie4_5_moe", blocks, layer_runs(kinds), rms, cfg.bool("tie_word_embeddings"))
    spec["head"]["bias"] = bias
    return spec


def _moe(cfg: Config, bias: bool) -> dict[str, Any]:
    """Ernie4_5_MoeSparseMoeBlock: routed experts, the score bias, the shared experts (when there are any)."""
    moe = experts(cfg, ("moe_num_experts", "num_experts"), "moe_intermediate_size", ("moe_k", "num_experts_per_tok"),
                  score_bias=True, score_bias_param=True, clamped_sum=True)
    n_shared = cfg.int("moe_num_shared_experts")
    if n_shared:
        shared = gated_mlp(cfg, "moe_intermediate_size", bias=bias)
        moe.update(shared={**shared, "d_ff": shared["d_ff"] * n_shared}, n_shared=n_shared)
    return moe


def _moe_layers(cfg: Config) -> list[bool]:
    """Ernie4_5_MoeDecoderLayer's test, moe_layer_end_index -1 meaning the last layer (its config's __post_init__)."""
    n_layers = cfg.int(*KEYS["n_layers"])
    start, end, step = (cfg.int(key) for key in ("moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval"))
    end = n_layers - 1 if end == -1 else end
    return [(i + 1) % step == 0 and start <= i <= end for i in range(n_layers)]
