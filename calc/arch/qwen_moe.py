"""Qwen-MoE: qwen2_moe (Qwen1.5-MoE, Qwen2-57B-A14B) and qwen3_moe (Qwen3-30B-A3B, Qwen3-235B-A22B).

Qwen2's or Qwen3's attention and pre-norm RMSNorm blocks. A layer is a MoE unless `mlp_only_layers`
lists it, the config has no experts, or it is not every `decoder_sparse_step`-th layer (the decoder
layers' own test); the others keep a dense SwiGLU of `intermediate_size`. A MoE is `num_experts`
SwiGLU experts of `moe_intermediate_size` behind a bias-free router; qwen2_moe adds one always-on
shared expert of `shared_expert_intermediate_size` and its sigmoid gate (shared_expert_gate, d -> 1).
- qwen2_moe: biases on Q, K and V if `qkv_bias` (by default), never on O; with `use_sliding_window`,
  the layers `layer_types` marks (by default the even ones below `max_window_layers`) are windowed.
- qwen3_moe: `attention_bias` on Q, K, V and O; a head_dim-wide RMSNorm on queries and on keys;
  with `use_sliding_window`, every layer is windowed.
Heads untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (KEYS, attention, decoder, gated_mlp, layer_kinds, layer_runs, norm, qwen3_vl_build,
                               renamed, with_defaults)
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict"]

_COMMON = {"vocab_size": 151936, "hidden_size": 2048, "num_hidden_layers": 24, "max_position_embeddings": 32768,
           "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 4096,
           "decoder_sparse_step": 1, "rope_theta": 10000.0, "norm_topk_prob": False}
# transformers' config-class defaults (models/<type>/configuration_<type>.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_moe": {**_COMMON, "intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 16,
                  "max_window_layers": 28, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                  "num_experts_per_tok": 4, "num_experts": 60, "qkv_bias": True},
    "qwen3_moe": {**_COMMON, "intermediate_size": 6144, "num_attention_heads": 32, "num_key_value_heads": 4,
                  "moe_intermediate_size": 768, "num_experts_per_tok": 8, "num_experts": 128,
                  "attention_bias": False},
}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    # transformers 5 writes num_experts as num_local_experts (its attribute_map) in the config.json it saves
    cfg = with_defaults(renamed(cfg, {"num_local_experts": "num_experts"}), DEFAULTS[model_type])
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    kinds = list(zip(_moe_layers(cfg), _windows(cfg, model_type)))
    names = {kind: "_".join(["moe" if kind[0] else "dense"] + ["sliding"] * bool(kind[1])) for kind in kinds}
    blocks = {names[kind]: _block(cfg, model_type, rms, *kind) for kind in names}
    vl = qwen3_vl_build(cfg, next(iter(blocks.values()))["attention"])
    # SGLang builds these with its qwen2_moe.py and qwen3_moe.py, whose DP-attention layout
    # calc.analysis.memory.sglang_dp reads; Qwen3-VL's language model (M-RoPE) with its qwen3_vl_moe.py, not read there
    return decoder(cfg, model_type, blocks, layer_runs([names[kind] for kind in kinds]), rms,
                   cfg.bool("tie_word_embeddings"), sglang={"dp_attention": "" if vl else model_type}, **vl)


def _moe_layers(cfg: Config) -> list[bool]:
    """Qwen2MoeDecoderLayer's test: not in mlp_only_layers, experts exist, (i + 1) % step == 0."""
    dense = cfg.list("mlp_only_layers") or []
    if not all(isinstance(i, int) for i in dense):
        raise cfg.error("mlp_only_layers", f"expected layer indices, got {dense!r}")
    step, n_experts = cfg.int("decoder_sparse_step"), cfg.int("num_experts")
    return [i not in dense and n_experts > 0 and (i + 1) % step == 0 for i in range(cfg.int(*KEYS["n_layers"]))]


def _windows(cfg: Config, model_type: str) -> list[int | None]:
    """Each layer's sliding window, or None: nothing unless `use_sliding_window`."""
    n_layers = cfg.int(*KEYS["n_layers"])
    if not cfg.bool("use_sliding_window"):
        return [None] * n_layers
    window = cfg.int("sliding_window", default=None)
    if model_type == "qwen3_moe":
        return [window] * n_layers
    start = cfg.int("max_window_layers")
    types = layer_kinds(cfg, lambda i: "sliding_attention" if (i + 1) % 2 and i < start else "full_attention")
    return [window if kind == "sliding_attention" else None for kind in types]


def _block(cfg: Config, model_type: str, rms: dict[str, Any], is_moe: bool, window: int | None) -> dict[str, Any]:
    attn = attention(cfg, window=window)
    if model_type == "qwen2_moe":
        bias = cfg.bool("qkv_bias")
        attn.update(q_bias=bias, k_bias=bias, v_bias=bias, o_bias=False)
    else:
        attn["qk_norm"] = {"norm": rms, "scope": "head"}
    mlp = gated_mlp(cfg, bias=False)
    if is_moe:
        # Qwen2MoeTopKRouter / Qwen3MoeTopKRouter: softmax(..., dtype=torch.float), then .to(router_logits.dtype)
        mlp = experts(cfg, ("num_experts",), "moe_intermediate_size", norm_topk=cfg.bool("norm_topk_prob"),
                      router_fp32="cast")
        if model_type == "qwen2_moe":
            mlp.update(shared=gated_mlp(cfg, "shared_expert_intermediate_size", bias=False), n_shared=1,
                       shared_gate=True)
    return {"attention": attn, "mlp": mlp, "norm": rms}
