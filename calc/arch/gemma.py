"""Gemma, Gemma-2 and Gemma-3 (text): one family, three generations of the same layout.

All three: RMSNorm storing one weight per channel (applied as 1 + w), embeddings multiplied by
sqrt(d_model) (no parameter), head_dim 256 unless set, whatever d_model / n_heads is (Gemma-7B: 16
heads of 256 in a 3,072-wide model), a GeGLU MLP (transformers runs a config's legacy "gelu" as
the tanh approximation), head tied to the embedding.

Gemma-2 adds sandwich norms (before and after both attention and MLP: four per block), a sliding
window on every other layer (layer 0 local), and soft-capped attention and final logits.
Gemma-3 keeps the sandwich, adds QK-norm (one head_dim-wide RMSNorm for queries, one for keys),
drops soft-capping, and has 5 local layers per global one (`sliding_window_pattern`, or
`layer_types`); local layers rotate with rope_local_base_freq, global ones with rope_theta and
rope_scaling (transformers 5 writes both as `rope_parameters` nested by layer type). Multimodal
Gemma-3 configs nest all this under `text_config`, unwrapped before this adapter sees it.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, attention, attention_kinds, decoder, gated_mlp, kind_stack, norm, rope, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

_SHARED = {"head_dim": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False}

# transformers' config-class defaults (models/gemma*/configuration_gemma*.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {**_SHARED, "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576,
              "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
              "max_position_embeddings": 8192, "rope_theta": 10000.0},
    "gemma2": {**_SHARED, "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
               "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
               "max_position_embeddings": 8192, "rope_theta": 10000.0, "sliding_window": 4096,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256},
    "gemma3_text": {**_SHARED, "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "max_position_embeddings": 131072, "rope_theta": 1_000_000.0, "rope_local_base_freq": 10000.0,
                    "sliding_window": 4096, "sliding_window_pattern": 6, "query_pre_attn_scalar": 256},
}

# Block names when a stack mixes both kinds; a uniform stack (Gemma-1) is just "decoder".
BLOCK_NAMES = {"sliding_attention": "local", "full_attention": "global"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"), unit_offset=True)  # GemmaRMSNorm: x * (1 + w)
    blocks, layers = kind_stack(_kinds(cfg, model_type), BLOCK_NAMES, lambda kind: _block(cfg, model_type, rms, kind))
    head = {"tied": cfg.bool("tie_word_embeddings"), "softcap": cfg.float("final_logit_softcapping", default=None)}
    llamacpp = {"llamacpp": {"scale_rows": True}} if model_type == "gemma3_text" else {}
    return decoder(cfg, model_type, blocks, layers, rms, head["tied"], embedding={"scale": True}, head=head, **llamacpp)


def _kinds(cfg: Config, model_type: str) -> list[str]:
    """Each layer's attention type; Gemma-1 has only global layers."""
    if model_type == "gemma":
        return ["full_attention"] * cfg.int(*KEYS["n_layers"])
    # Layer i is local unless (i + 1) is a multiple of the pattern: every other layer for Gemma-2 (whose
    # config class has no pattern key), `sliding_window_pattern` for Gemma-3.
    pattern = cfg.int("sliding_window_pattern") if model_type == "gemma3_text" else 2
    return attention_kinds(cfg, lambda i: "sliding_attention" if (i + 1) % pattern else "full_attention")


def _block(cfg: Config, model_type: str, rms: dict[str, Any], kind: str) -> dict[str, Any]:
    attn = attention(cfg, softcap=cfg.float("attn_logit_softcapping", default=None))
    if model_type != "gemma":  # Gemma-2/3 scale scores by query_pre_attn_scalar^-0.5, not head_dim^-0.5
        attn["scale"] = cfg.float("query_pre_attn_scalar") ** -0.5
    if kind == "sliding_attention":
        attn["window"] = cfg.int("sliding_window", default=None)
    if model_type == "gemma3_text":
        attn.update(qk_norm={"norm": rms, "scope": "head"}, rope=_gemma3_rope(cfg, attn["head_dim"], kind))
    sandwich = ("attn_in", "attn_out", "mlp_in", "mlp_out")
    return {"attention": attn, "mlp": gated_mlp(cfg, activation="gelu_tanh"), "norm": rms,
            "norms": ("attn_in", "mlp_in") if model_type == "gemma" else sandwich}


def _gemma3_rope(cfg: Config, head_dim: int, kind: str) -> dict[str, Any]:
    """Global layers: rope_theta and rope_scaling; local layers: rope_local_base_freq, unscaled
    (unless transformers-5's nested rope_parameters say otherwise for either)."""
    if kind == "full_attention":
        return rope(cfg, head_dim, layer_type=kind)
    local = {"rope_theta": cfg.float("rope_local_base_freq"),
             "rope_parameters": cfg.raw("rope_parameters", default=None)}
    return rope(Config(local, cfg.origin), head_dim, layer_type=kind)
