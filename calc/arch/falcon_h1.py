"""Falcon-H1: every layer runs attention and a Mamba2 mixer in parallel on the same normed input,
then a SwiGLU MLP (FalconH1DecoderLayer).

    h = input_layernorm(x)
    x = x + mamba(h · ssm_in_multiplier) · ssm_out_multiplier + self_attn(h · attention_in_multiplier) · attention_out_multiplier
    x = x + feed_forward(pre_ff_layernorm(x))

The two mixers are one parallel group (calc.parts.parallel), so the layer is the ordinary
two-sublayer block. Falcon-H1's muP multipliers are data on the parts they scale and cost no
parameter: the embedding times embedding_multiplier, the keys times key_multiplier, in_proj's five
sections (z, x, B, C, dt) times ssm_multipliers (transformers' mup_vector, a non-persistent
buffer), the MLP's gate pre-activation and output times mlp_multipliers, the logits times
lm_head_multiplier. The Mamba2 inner width is `mamba_d_ssm` (or mamba_expand × hidden_size), its
head width `mamba_d_head` ("auto": inner / heads); in_proj's bias is `mamba_proj_bias`, out_proj's
`projectors_bias`; the gated RMSNorm is there only with `mamba_rms_norm`, in the order
`mamba_norm_before_gate` says. Not modelled: a finite `time_step_limit` (transformers clamps dt to
it in a prefill only; the default (0, inf) clamps nothing), which is refused.
"""

from __future__ import annotations

import math
from typing import Any

from calc.arch.common import KEYS, attention, decoder, gated_mlp, norm, sglang_ssm_dtype, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' FalconH1Config defaults (configuration_falcon_h1.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "falcon_h1": {"vocab_size": 128000, "tie_word_embeddings": False, "hidden_size": 4096, "intermediate_size": 14336,
                  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
                  "rms_norm_eps": 1e-5, "max_position_embeddings": 8192, "mamba_d_ssm": 1024, "mamba_n_heads": 128,
                  "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
                  "mamba_expand": 2, "mamba_conv_bias": True, "mamba_proj_bias": False,
                  "mamba_norm_before_gate": True, "mamba_rms_norm": False, "projectors_bias": False,
                  "lm_head_multiplier": 1.0, "embedding_multiplier": 1.0, "key_multiplier": 1.0,
                  "attention_out_multiplier": 1.0, "attention_in_multiplier": 1.0, "ssm_in_multiplier": 1.0,
                  "ssm_out_multiplier": 1.0, "attention_bias": False, "mlp_bias": False},
}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS["falcon_h1"])
    if cfg.raw("hidden_act") != "silu":
        raise cfg.error("hidden_act", f"{cfg.raw('hidden_act')!r}: Falcon-H1's conv and MLP are modelled with silu")
    limit = cfg.list("time_step_limit")
    if limit is not None and limit != [0.0, {"__float__": "Infinity"}]:  # how calc.inputs reads transformers' inf
        raise cfg.error("time_step_limit", f"{limit!r}: a dt clamp other than [0.0, Infinity] is not modelled")
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    gate, down = _scales(cfg, "mlp_multipliers", 2)
    mlp = gated_mlp(cfg, **({"gate_scale": gate} if gate != 1 else {}), **({"down_scale": down} if down != 1 else {}))
    key = cfg.float("key_multiplier")
    group = {"kind": "parallel", "mixers": [_mamba(cfg), attention(cfg, **({"key_scale": key} if key != 1 else {}))],
             "in_scales": [cfg.float("ssm_in_multiplier"), cfg.float("attention_in_multiplier")],
             "out_scales": [cfg.float("ssm_out_multiplier"), cfg.float("attention_out_multiplier")]}
    # llama.cpp builds the group's attention (member 1) before its Mamba2 (member 0), each on its own norm, and takes
    # the last layer's output rows after the stream's add (src/models/falcon-h1.cpp:135-172)
    spec = decoder(cfg, "falcon_h1", {"hybrid": {"attention": group, "mlp": mlp, "norm": rms}},
                   [(cfg.int(*KEYS["n_layers"]), "hybrid")], rms, cfg.bool("tie_word_embeddings"),
                   **sglang_ssm_dtype(cfg), llamacpp={"parallel_order": [1, 0], "rows_after_add": True})
    return {**spec, "embedding": {"multiplier": cfg.float("embedding_multiplier")},
            "head": {**spec["head"], "logit_scale": cfg.float("lm_head_multiplier")}}


def _mamba(cfg: Config) -> dict[str, Any]:
    """FalconH1Mixer: Mamba2 of `mamba_d_ssm` inner channels (or expand × hidden_size)."""
    heads = cfg.int("mamba_n_heads")
    inner = cfg.int("mamba_d_ssm", default=None) or cfg.int("mamba_expand") * cfg.int(*KEYS["d_model"])
    head_dim = inner // heads if cfg.raw("mamba_d_head") == "auto" else cfg.int("mamba_d_head")
    if head_dim * heads != inner:
        raise cfg.error("mamba_n_heads", f"{heads} heads x mamba_d_head {head_dim} must equal the inner width {inner}")
    z, x, b, c, dt = _scales(cfg, "ssm_multipliers", 5)
    return {"kind": "mamba2", "n_heads": heads, "head_dim": head_dim, "d_state": cfg.int("mamba_d_state"),
            "n_groups": cfg.int("mamba_n_groups"), "conv_kernel": cfg.int("mamba_d_conv"),
            "proj_bias": cfg.bool("mamba_proj_bias"), "out_bias": cfg.bool("projectors_bias"),
            "conv_bias": cfg.bool("mamba_conv_bias"), "gated_norm": cfg.bool("mamba_rms_norm"),
            "norm_before_gate": cfg.bool("mamba_norm_before_gate"),
            **({"proj_scales": [z, x, b, c, dt]} if (z, x, b, c, dt) != (1, 1, 1, 1, 1) else {})}


def _scales(cfg: Config, key: str, n: int) -> list[float]:
    """A list of `n` multipliers (all 1 when the config has none, as FalconH1Config fills them)."""
    values = cfg.list(key)
    if values is None:
        return [1.0] * n
    if len(values) != n or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                   for v in values):
        raise cfg.error(key, f"expected {n} finite numbers, got {values!r}")
    return [float(v) for v in values]
