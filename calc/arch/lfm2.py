"""LFM2 and LFM2-MoE (Liquid AI): gated short convolutions with a GQA attention layer every few.

`layer_types` names each layer `conv` (calc.parts.short_conv) or `full_attention` (without it,
lfm2 takes `full_attn_idxs`, all attention when absent: Lfm2Config.__post_init__). Attention is
bias-free GQA with a head_dim-wide QK-norm and rotary. Each layer has two RMSNorms (operator_norm,
ffn_norm) and a SwiGLU (w1, w3, w2); the model's last norm is called `embedding_norm`. What differs:
- lfm2: the SwiGLU's width is adjusted from `intermediate_size` when `block_auto_adjust_ff_dim`:
  2/3 of it, times `block_ffn_dim_multiplier`, rounded up to `block_multiple_of` (Lfm2MLP);
  `tie_embedding` (an older key) wins over tie_word_embeddings.
- lfm2_moe: the first `num_dense_layers` keep a SwiGLU of `intermediate_size`; the others route each
  token to `num_experts_per_tok` of `num_experts` SwiGLU experts with sigmoid scores, an expert-bias
  buffer when `use_expert_bias` (as DeepSeek's score correction), and `routed_scaling_factor`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, attention, decoder, gated_mlp, kind_stack, layer_kinds, norm, renamed, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict"]

_COMMON = {"vocab_size": 65536, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "max_position_embeddings": 128_000, "norm_eps": 1e-5, "tie_word_embeddings": True, "conv_bias": False,
           "conv_L_cache": 3, "rope_theta": 1_000_000.0}
# transformers' config-class defaults (models/<type>/configuration_<type>.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "lfm2": {**_COMMON, "hidden_size": 2560, "intermediate_size": 12288, "block_multiple_of": 256,
             "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True},
    "lfm2_moe": {**_COMMON, "hidden_size": 2048, "intermediate_size": 7168, "moe_intermediate_size": 1792,
                 "num_dense_layers": 2, "num_experts_per_tok": 4, "num_experts": 32, "use_expert_bias": True,
                 "routed_scaling_factor": 1.0, "norm_topk_prob": True},
}
KINDS = ("conv", "full_attention")


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(renamed(cfg, {"tie_embedding": "tie_word_embeddings", "block_ff_dim": "intermediate_size"}),
                        DEFAULTS[model_type])
    rms = norm("rmsnorm", cfg.float("norm_eps"))
    mixers = _mixers(cfg)
    dense = cfg.int("num_dense_layers") if model_type == "lfm2_moe" else len(mixers)
    kinds = [f"{mixer}+{'dense' if i < dense else 'moe'}" for i, mixer in enumerate(mixers)]
    names = {kind: ("conv" if kind.startswith("conv") else "attention") + ("_moe" if kind.endswith("moe") else "")
             for kind in kinds}
    blocks, layers = kind_stack(kinds, names, lambda kind: _block(cfg, model_type, rms, *kind.split("+")))
    # llama.cpp's lfm2 adds the stream first to each sublayer's output (calc/spec/llamacpp.py stream_first)
    return decoder(cfg, model_type, blocks, layers, rms, cfg.bool("tie_word_embeddings"), llamacpp={"stream_first": True})


def _mixers(cfg: Config) -> list[str]:
    """`layer_types`, else attention at `full_attn_idxs` (every layer when that is absent too)."""
    n_layers = cfg.int(*KEYS["n_layers"])
    indices = cfg.list("full_attn_idxs")
    kinds = layer_kinds(cfg, lambda i: "full_attention" if indices is None or i in indices else "conv")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise cfg.error("layer_types", f"unknown layer type {unknown[0]!r} (expected {', '.join(KINDS)})")
    return kinds[:n_layers]


def _block(cfg: Config, model_type: str, rms: dict[str, Any], mixer: str, mlp: str) -> dict[str, Any]:
    part = ({"kind": "short_conv", "kernel": cfg.int("conv_L_cache"), "bias": cfg.bool("conv_bias")}
            if mixer == "conv" else attention(cfg, qk_norm={"norm": rms, "scope": "head"}, q_bias=False, k_bias=False,
                                              v_bias=False, o_bias=False, dropout=0.0))  # Lfm2Attention: dropout=0.0
    return {"attention": part, "mlp": _moe(cfg) if mlp == "moe" else _swiglu(cfg, model_type), "norm": rms}


def _swiglu(cfg: Config, model_type: str) -> dict[str, Any]:
    """Lfm2MLP's width: 2/3 of intermediate_size, times the multiplier, rounded up to a multiple."""
    width = cfg.int("intermediate_size")
    if model_type == "lfm2" and cfg.bool("block_auto_adjust_ff_dim"):
        width = int(2 * width / 3)
        multiplier = cfg.raw("block_ffn_dim_multiplier", default=None)
        if multiplier is not None:
            step = cfg.int("block_multiple_of")
            width = step * ((int(cfg.float("block_ffn_dim_multiplier") * width) + step - 1) // step)
    return {**gated_mlp(cfg, bias=False), "d_ff": width}


def _moe(cfg: Config) -> dict[str, Any]:
    return experts(cfg, ("num_experts",), "moe_intermediate_size", scoring="sigmoid",
                   norm_topk=cfg.bool("norm_topk_prob"), score_bias=cfg.bool("use_expert_bias"),
                   routed_scale=cfg.float("routed_scaling_factor"))
