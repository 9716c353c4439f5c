"""MiniMax-Text-01 and MiniMax-M1: lightning attention layers with a softmax attention layer every few, Mixtral's MoE.

- minimax (transformers' MiniMaxForCausalLM, the "-hf" checkpoints): `layer_types` names each layer
  `linear_attention` (lightning attention, calc.parts.lightning) or `full_attention` (Mixtral's GQA
  attention, no biases, `head_dim` wide heads); left out, every other layer from the first is full
  (MiniMaxConfig.__post_init__). The MLP is Mixtral's MoE (softmax router, top `num_experts_per_tok`
  of `num_local_experts` SwiGLU experts, renormalised). Each sublayer's residual is scaled
  (residual·alpha + output·beta, `*_alpha_factor` / `*_beta_factor`) and taken after its norm (the
  block's `normed_residual`): scalars that change no count and no cache.
- minimax_m1 (the original release's config.json for its own code, MiniMaxM1ForCausalLM): the same
  model written in that code's keys, read here as transformers reads the converted checkpoints:
  `attn_type_list` (1 softmax, 0 lightning) for layer_types, `rotary_dim` for
  partial_rotary_factor = rotary_dim / head_dim. Its `shared_intermediate_size` must be 0 (the
  released models'): transformers' MiniMax has no shared expert.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (KEYS, TRANSFORMERS_BACKEND, attention, decoder, kind_stack, layer_kinds, norm,
                               with_defaults)
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict", "transformers_data"]

_MINIMAX = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": None, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "sliding_window": None, "num_experts_per_tok": 2,
            "num_local_experts": 8, "rope_theta": 1_000_000.0}
# transformers' config-class defaults (models/minimax/configuration_minimax.py) for the keys read here; the
# original code's MiniMaxM1Config is not in transformers, so a minimax_m1 config is read with the same ones.
DEFAULTS: dict[str, dict[str, Any]] = {"minimax": _MINIMAX, "minimax_m1": {**_MINIMAX, "shared_intermediate_size": 0}}
KINDS = ("linear_attention", "full_attention")
# vLLM 0.32 has no MiniMax text model of its own any more (vllm/model_executor/models/registry.py L819-821, until
# 0.23.0): MiniMaxForCausalLM falls back to the Transformers backend (transformers' class supports it);
# MiniMaxM1ForCausalLM has no transformers class, and its remote code (modeling_minimax_m1.py:
# MiniMaxM1LightningAttention(nn.Module), no attention interface) fails the backend's check, so vLLM refuses it.
VLLM = {"minimax": TRANSFORMERS_BACKEND, "minimax_m1": {"vllm": {"implementation": "none"}}}
M1_TYPES = {0: "linear_attention", 1: "full_attention"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    if model_type == "minimax_m1":
        cfg = cfg.replace(transformers_data(cfg.data, cfg.error))
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    mixers = layer_kinds(cfg, lambda i: KINDS[(i + 1) % 2 == 0])
    unknown = sorted(set(mixers) - set(KINDS))
    if unknown:
        raise cfg.error("layer_types", f"unknown layer type {unknown[0]!r} (expected {', '.join(KINDS)})")
    heads = cfg.int(*KEYS["n_heads"])
    head_dim = cfg.int("head_dim", default=None) or cfg.int(*KEYS["d_model"]) // heads
    parts = {"linear_attention": {"kind": "lightning", "n_heads": heads, "head_dim": head_dim,
                                  "block": cfg.int("block_size", default=256)},
             "full_attention": attention(cfg, head_dim=head_dim, window=cfg.int("sliding_window", default=None),
                                         q_bias=False, k_bias=False, v_bias=False, o_bias=False)}
    moe = experts(cfg, ("num_local_experts", "num_experts"), "intermediate_size")
    names = {"linear_attention": "lightning", "full_attention": "attention"}
    blocks, layers = kind_stack(mixers, names, lambda kind: {"attention": parts[kind], "mlp": moe, "norm": rms,
                                                             "normed_residual": _residual(cfg, kind)})
    return decoder(cfg, model_type, blocks, layers, rms, cfg.bool("tie_word_embeddings"), **VLLM[model_type],
                   llamacpp={"reserve_one_sequence": True})


def _residual(cfg: Config, kind: str) -> dict[str, Any]:
    """MiniMaxDecoderLayer's residual adds: from the normed input, times the layer kind's (alpha, beta)
    around the mixer and the MLP's around the MLP (MiniMaxConfig's defaults: 1)."""
    mixer = "linear_attn" if kind == "linear_attention" else "full_attn"
    return {part: tuple(cfg.float(f"{prefix}_{factor}_factor", default=1.0) for factor in ("alpha", "beta"))
            for part, prefix in (("mixer", mixer), ("mlp", "mlp"))}


def transformers_data(data: dict[str, Any], error: Any = None) -> dict[str, Any]:
    """A minimax_m1 config's keys as transformers' MiniMaxConfig names them (layer_types, the
    residual factors, partial_rotary_factor), the original keys dropped; `error(key, message)` refuses
    what MiniMax cannot build."""
    def refuse(key: str, message: str) -> Exception:
        from calc.errors import GptcalcError
        return error(key, message) if error else GptcalcError(f"{key}: {message}")

    data = dict(data)
    types = data.pop("attn_type_list", None)
    if types is not None:
        if not isinstance(types, list) or any(t not in M1_TYPES or isinstance(t, bool) for t in types):
            raise refuse("attn_type_list", f"expected a list of 0 (lightning) and 1 (softmax), got {types!r}")
        data["layer_types"] = [M1_TYPES[t] for t in types]
    shared = data.pop("shared_intermediate_size", 0)
    if shared:
        raise refuse("shared_intermediate_size", f"{shared!r}: a shared expert, which transformers' MiniMax does not build")
    for old, new in (("full_attention", "full_attn"), ("linear_attention", "linear_attn"), ("mlp", "mlp")):
        for factor in ("alpha", "beta"):
            value = data.pop(f"layernorm_{old}_{factor}", None)
            if value is not None:
                data[f"{new}_{factor}_factor"] = value
    rotary_dim, head_dim = data.pop("rotary_dim", None), data.get("head_dim")
    if rotary_dim is not None and head_dim:
        data["partial_rotary_factor"] = rotary_dim / head_dim
    for key in ("postnorm", "shared_moe_mode", "auto_map", "architectures"):
        data.pop(key, None)
    data["model_type"] = "minimax"
    return data
