"""Llama and the model_types that share its layout and tensor names: mistral, ministral3 (the
language model of Mistral-3 / Devstral-2 configs), qwen2, qwen3, granite, smollm3, internlm3.

Pre-norm RMSNorm blocks, rotary attention (GQA when num_key_value_heads < num_attention_heads),
a SwiGLU MLP, untied head unless `tie_word_embeddings`. What the others change, as data:
- qwen2 puts biases on Q, K and V but not on O (Qwen2Attention: bias=True on q/k/v_proj, False on
  o_proj); mistral and ministral3 have no biases whatever `attention_bias` says; none of these reads
  `mlp_bias`, nor does qwen3.
- qwen3 adds QK-norm: one head_dim-wide RMSNorm for queries, one for keys (q_norm, k_norm), and
  defaults head_dim to 128.
- qwen2/qwen3 with `use_sliding_window`: layers from `max_window_layers` on are windowed (or as
  `layer_types` says); mistral and ministral3 may set a window on every layer.
- granite scales embeddings, residuals, attention and logits by multipliers: scalars, no parameters.
- internlm3 is built by transformers as a Llama: its `qkv_bias` and `bias` keys are `attention_bias`
  and `mlp_bias` (InternLM3Config's attribute_map), and head_dim defaults to 128.
- smollm3 leaves rotary out of the layers `no_rope_layers` marks 0 (by default every 4th): a second
  block kind, "nope".
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (KEYS, LLAMA_CLASS, LLAMA_CLASS_NO_WINDOW, TRANSFORMERS_BACKEND, attention, decoder,
                               gated_mlp, granite_scalars, layer_kinds, layer_runs, norm, qwen3_vl_build, renamed,
                               rotary_layers, with_defaults)
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

_QWEN = {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 4096,
         "max_window_layers": 28, "rope_theta": 10000.0}
_LLAMA = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
          "num_attention_heads": 32, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
          "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "rope_theta": 10000.0}

# transformers' config-class defaults (models/<type>/configuration_<type>.py) for the keys read here:
# a key a config leaves out means what transformers builds without it (and the output says so).
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": _LLAMA,
    "granite": _LLAMA,
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
                "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "sliding_window": 4096, "rope_theta": 10000.0},
    "qwen2": _QWEN,
    "ministral3": {"vocab_size": 131072, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 34,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                   "max_position_embeddings": 262144, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                   "rope_parameters": {"rope_type": "yarn", "rope_theta": 1_000_000.0, "factor": 16.0,
                                       "original_max_position_embeddings": 16384, "beta_fast": 32.0, "beta_slow": 1.0,
                                       "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1}},
    "qwen3": {**_QWEN, "head_dim": 128, "attention_bias": False},
    "smollm3": {"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                "num_attention_heads": 16, "num_key_value_heads": 4, "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False,
                "use_sliding_window": False, "no_rope_layer_interval": 4, "rope_theta": 2_000_000.0},
    "internlm3": {"vocab_size": 128512, "hidden_size": 4096, "intermediate_size": 10240, "num_hidden_layers": 48,
                  "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
                  "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                  "attention_bias": False, "mlp_bias": False, "rope_theta": 10000.0},
}
# How llama.cpp builds each (calc/spec/llamacpp.py): LlamaForCausalLM, MistralForCausalLM (its llama architecture, no
# window) and SmolLM3ForCausalLM by LlamaModel's class
LLAMACPP = {"llama": LLAMA_CLASS, "smollm3": LLAMA_CLASS, "mistral": LLAMA_CLASS_NO_WINDOW}
# Older names of a key, as the model_type's config class maps them (its attribute_map).
RENAMED: dict[str, dict[str, str]] = {"internlm3": {"qkv_bias": "attention_bias", "bias": "mlp_bias"}}
# What the modelling code hard-codes, whatever the config says.
FIXED: dict[str, dict[str, Any]] = {
    "mistral": {"attention_bias": False, "mlp_bias": False},
    "ministral3": {"attention_bias": False, "mlp_bias": False},
    "qwen2": {"mlp_bias": False},
    "qwen3": {"mlp_bias": False},
}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(renamed(cfg, RENAMED.get(model_type, {})), DEFAULTS[model_type])
    cfg = cfg.replace({**cfg.data, **FIXED.get(model_type, {})})
    rms = norm("rmsnorm", cfg.float("rms_norm_eps", default=1e-6))
    block = _block(cfg, model_type, rms)
    kinds = _layers(cfg, model_type)
    names = _names(kinds)
    blocks = {name: _variant(block, *kind) for kind, name in names.items()}
    spec = decoder(cfg, model_type, blocks, layer_runs([names[kind] for kind in kinds]), rms,
                   cfg.bool("tie_word_embeddings", default=False), **_vllm(cfg, model_type, block["attention"]),
                   **LLAMACPP.get(model_type, {}))
    return granite_scalars(cfg, spec) if model_type == "granite" else spec


def _vllm(cfg: Config, model_type: str, attention: dict[str, Any]) -> dict[str, Any]:
    """How vLLM 0.32 builds it: SmolLM3ForCausalLM through its Transformers backend
    (vllm/model_executor/models/registry.py L727); Qwen3 layers with M-RoPE as Qwen3-VL's; the rest its own
    (Qwen2.5-VL's Qwen2 layers with get_rope's M-RoPE factor of 4: models/qwen2.py L179-184, qwen2_5_vl.py L1447)."""
    if model_type == "smollm3":
        return TRANSFORMERS_BACKEND
    return qwen3_vl_build(cfg, attention) if model_type == "qwen3" else {}


def _layers(cfg: Config, model_type: str) -> list[tuple[int | None, bool]]:
    """(sliding window or None, rotary or not) for each layer, as the model_type's config class decides."""
    n_layers = cfg.int(*KEYS["n_layers"])
    if model_type in ("mistral", "ministral3"):
        return [(cfg.int("sliding_window", default=None), True)] * n_layers
    window = cfg.int("sliding_window", default=None) if cfg.bool("use_sliding_window", default=False) else None
    rotary = [True] * n_layers
    if model_type == "smollm3":
        rotary = rotary_layers(cfg, n_layers)
        types = layer_kinds(cfg, lambda i: "sliding_attention" if window and not rotary[i] else "full_attention")
    elif model_type in ("qwen2", "qwen3"):
        types = layer_kinds(cfg, lambda i: "sliding_attention" if window and i >= cfg.int("max_window_layers")
                            else "full_attention")
    else:
        types = ["full_attention"] * n_layers
    return [(window if kind == "sliding_attention" else None, rope) for kind, rope in zip(types, rotary)]


def _names(kinds: list[tuple[int | None, bool]]) -> dict[tuple[int | None, bool], str]:
    """One block name per distinct layer kind: "decoder" for a uniform stack, else by what differs."""
    distinct = list(dict.fromkeys(kinds))
    if len(distinct) == 1:
        return {distinct[0]: "decoder"}
    return {(window, rope): "_".join(["sliding"] * bool(window) + ["nope"] * (not rope)) or "decoder"
            for window, rope in distinct}


def _block(cfg: Config, model_type: str, rms: dict[str, Any]) -> dict[str, Any]:
    attn = attention(cfg)
    if model_type == "qwen2":
        attn.update(q_bias=True, k_bias=True, v_bias=True, o_bias=False)
    if model_type == "qwen3":
        attn["qk_norm"] = {"norm": rms, "scope": "head"}
    return {"attention": attn, "mlp": gated_mlp(cfg), "norm": rms}


def _variant(block: dict[str, Any], window: int | None, rotary: bool) -> dict[str, Any]:
    """The block of one layer kind: its window, and no rotary where the layer has none."""
    attn = {**block["attention"], "window": window}
    if not rotary:
        attn["rope"] = None
    return {**block, "attention": attn}
