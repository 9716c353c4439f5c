"""Llama-4's language model (model_type llama4_text; llama4 configs nest it in `text_config`).

Pre-norm RMSNorm blocks with GQA (head_dim 128 by default). The feed-forward is a MoE on the
layers `moe_layers` lists (by default every `interleave_moe_layer_step`-th: Scout all 48, Maverick
every other one), the rest a dense SwiGLU of `intermediate_size_mlp`. A MoE is a bias-free router,
`num_local_experts` SwiGLU experts stored fused (gate_up_proj), and one always-on shared expert, all
of `intermediate_size`. Layers `no_rope_layers` marks 0 (by default every 4th) have no rotary and
attend to everything; the others use rotary, chunked attention (`attention_chunk_size`, not a
sliding window, so the cache is not bounded here; vLLM pages those layers apart, engines.Chunked)
and, with `use_qk_norm`, an L2 norm of queries and keys that has no parameters. Head untied by default.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (KEYS, LLAMA_CLASS, attention, decoder, gated_mlp, layer_runs, norm, rotary_layers,
                              with_defaults)
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Llama4TextConfig defaults (models/llama4/configuration_llama4.py) for the keys read here.
DEFAULTS = {"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
            "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
            "num_experts_per_tok": 1, "num_local_experts": 16, "interleave_moe_layer_step": 1,
            "use_qk_norm": True, "no_rope_layer_interval": 4, "attention_bias": False, "rope_theta": 500000.0,
            "attn_temperature_tuning": True, "attn_scale": 0.1, "floor_scale": 8192}
# llama.cpp's llama4 caches the chunked layers as a sliding window of 8192 tokens (src/models/llama4.cpp:13-14)
LLAMACPP_CHUNK = 8192


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    n_layers = cfg.int(*KEYS["n_layers"])
    moe, rotary = _moe_layers(cfg, n_layers), rotary_layers(cfg, n_layers)
    kinds = [(i in moe, rotary[i]) for i in range(n_layers)]
    names = {kind: ("moe" if kind[0] else "dense") + ("" if kind[1] else "_nope") for kind in dict.fromkeys(kinds)}
    blocks = {name: _block(cfg, rms, *kind) for kind, name in names.items()}
    return decoder(cfg, "llama4_text", blocks, layer_runs([names[kind] for kind in kinds]), rms,
                   cfg.bool("tie_word_embeddings"), llamacpp={"chunk": LLAMACPP_CHUNK, **LLAMA_CLASS["llamacpp"]})


def _moe_layers(cfg: Config, n_layers: int) -> set[int]:
    listed = cfg.list("moe_layers")
    if listed is None:
        step = cfg.int("interleave_moe_layer_step")
        return set(range(step - 1, n_layers, step))
    if not all(isinstance(i, int) and 0 <= i < n_layers for i in listed):
        raise cfg.error("moe_layers", f"expected layer indices below {n_layers}, got {listed!r}")
    return set(listed)


def _block(cfg: Config, rms: dict[str, Any], is_moe: bool, rotary: bool) -> dict[str, Any]:
    """Llama4TextAttention: rotary on interleaved channel pairs (complex), chunked attention and an L2
    norm of the rotated queries and keys on rotary layers; a query temperature on the others."""
    attn = attention(cfg, softmax_fp32=False)  # its eager_attention_forward: softmax(attn_weights, dim=-1), no upcast
    if not rotary:
        attn["rope"] = None
        if cfg.bool("attn_temperature_tuning"):
            attn["temperature"] = {"scale": cfg.float("attn_scale"), "floor": cfg.float("floor_scale")}
    else:
        attn["rope"]["interleaved"] = True
        attn["chunk"] = cfg.int("attention_chunk_size", default=None)
        if cfg.bool("use_qk_norm"):
            attn["qk_norm"] = {"norm": norm("rmsnorm", cfg.float("rms_norm_eps"), weight=False), "after_rope": True}
    mlp = gated_mlp(cfg, "intermediate_size_mlp", bias=False)
    if is_moe:
        shared = gated_mlp(cfg, bias=False)
        mlp = {"kind": "moe", "n_experts": cfg.int("num_local_experts"), "top_k": cfg.int("num_experts_per_tok"),
               "d_ff": shared["d_ff"], "fused_gate_up": True, "shared": shared, "n_shared": 1,
               "scoring": "sigmoid", "norm_topk": False, "weight_input": True,
               "all_experts": True}  # Llama4Router, Llama4TextMoe
    return {"attention": attn, "mlp": mlp, "norm": rms}
