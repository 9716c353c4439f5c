"""Zamba2 (Zyphra's Zamba2-1.2B, -2.7B, -7B): Mamba2 layers, and shared transformer blocks applied
before the Mamba2 mixer of every `hybrid` layer (transformers' modeling_zamba2).

    mamba layer:   x = x + mamba(input_layernorm(x))
    hybrid layer:  t = linear(shared_block(x, embedding))        one of num_mem_blocks copies, in turn
                   x = x + mamba(input_layernorm(x + t))

A shared block (calc.parts.shared) normalises [x, embedding] (2·d wide), attends with head_dim
2·d / num_attention_heads and the softmax scale 1/√(head_dim / 2), normalises the attention's d-wide
output and runs a gated MLP (gate_up fused, `hidden_act`) — no residual add inside. Copy i of
num_mem_blocks serves the hybrid layers i, i + num_mem_blocks, ... (get_layers' cycle, counted over
hybrid layers). Each application has its own rank-`adapter_rank` adapter beside the MLP's gate_up
(always) and beside Q, K and V (`use_shared_attention_adapter`), and its own bias-free d × d linear.

Read as transformers' Zamba2Config reads the keys: the Mamba2 inner width is mamba_expand ×
hidden_size in n_mamba_heads heads (no parameter depends on how they split it, nor does a state: the
conv keeps every channel, the SSM state inner × mamba_d_state; a config whose own mamba_headdim
disagrees, as Zamba2-7B's early one does, gets a note: transformers builds its parameters as counted,
but its Mamba2 forward cannot reshape the inner width into those heads), the
conv has a bias whatever use_conv_bias says (Zamba2MambaMixer builds it with bias=True), the time
step has the floor time_step_min in a prefill (its time_step_limit; a cached one-token step has none),
add_bias_linear puts biases on in_proj, out_proj and the MLP, intermediate_size defaults to
4 × hidden_size, num_key_value_heads to num_attention_heads, rotary only with use_mem_rope, the
context 16,384 with use_long_context.
"""

from __future__ import annotations

import math
from typing import Any

from calc.arch.common import KEYS, NO_LLAMACPP, decoder, layer_runs, mlp_activation, norm, rope, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Zamba2Config defaults (configuration_zamba2.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "zamba2": {"vocab_size": 32000, "max_position_embeddings": 4096, "hidden_size": 2560, "num_hidden_layers": 54,
               "mamba_d_state": 64, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_ngroups": 1, "n_mamba_heads": 8,
               "add_bias_linear": False, "hidden_act": "gelu", "num_attention_heads": 32, "num_mem_blocks": 1,
               "use_shared_attention_adapter": False, "adapter_rank": 128, "use_mem_rope": False,
               "rms_norm_eps": 1e-5, "use_long_context": False, "tie_word_embeddings": True,
               "time_step_min": 0.001},
}
# Zamba2Config's layers_block_type when a config gives none: 54 layers, 9 of them hybrid.
DEFAULT_TYPES = ["mamba"] + (["mamba"] * 5 + ["hybrid"]) * 7 + ["mamba"] * 4 + ["hybrid"] + ["mamba"] * 3 \
    + ["hybrid"] + ["mamba"] * 2
MAMBA_TYPES = ("mamba", "linear_attention")  # the legacy name and the one remap_legacy_layer_types gives it
LONG_CONTEXT = 16384  # Zamba2Config.__post_init__: use_long_context sets max_position_embeddings


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS["zamba2"])
    d = cfg.int(*KEYS["d_model"])
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    mamba = {"attention": _mixer(cfg, d), "mlp": None, "norm": rms, "norms": ["attn_in"]}
    kinds = _kinds(cfg)
    copies = cfg.int("num_mem_blocks")
    if copies < 1 and "hybrid" in kinds:
        raise cfg.error("num_mem_blocks", f"{copies}: a hybrid layer needs at least one shared block")
    blocks, names, hybrid = {"mamba": mamba}, [], 0
    for kind in kinds:
        if kind == "hybrid":
            copy = chr(ord("A") + hybrid % copies) if copies <= 26 else str(hybrid % copies)
            blocks.setdefault(f"hybrid_{copy}", {**mamba, "shared": _applied(cfg, d, copy, rms)})
            names.append(f"hybrid_{copy}")
            hybrid += 1
        else:
            names.append("mamba")
    if "mamba" not in names:
        del blocks["mamba"]
    n_positions = LONG_CONTEXT if cfg.bool("use_long_context") else cfg.int(*KEYS["n_positions"])
    return decoder(cfg, "zamba2", blocks, layer_runs(names), rms, cfg.bool("tie_word_embeddings"),
                   n_positions=n_positions, notes=_split_note(cfg, mamba["attention"]), **NO_LLAMACPP)


def _split_note(cfg: Config, mixer: dict[str, Any]) -> tuple[str, ...]:
    """A note when the config's mamba_headdim does not split the inner width into n_mamba_heads."""
    stated = cfg.raw("mamba_headdim", default=None)
    if stated is None or stated == mixer["head_dim"]:
        return ()
    inner = mixer["n_heads"] * mixer["head_dim"]
    return (f"zamba2: mamba_headdim {stated!r} × n_mamba_heads {mixer['n_heads']} is not mamba_expand × hidden_size = "
            f"{inner:,}: transformers builds these parameters, but its Mamba2 forward cannot split {inner:,} channels "
            f"so; the states are counted as {inner:,} channels × mamba_d_state, whatever the split",)


def _kinds(cfg: Config) -> list[str]:
    """`layers_block_type` (or `layer_types`): hybrid, or mamba / linear_attention; its length is the
    layer count transformers builds."""
    kinds = cfg.list("layers_block_type", "layer_types")
    if kinds is None:
        return DEFAULT_TYPES
    unknown = sorted({str(kind) for kind in kinds} - {"hybrid", *MAMBA_TYPES})
    if unknown or not kinds:
        raise cfg.error("layers_block_type", f"unknown layer type {unknown[0]!r} (expected hybrid, mamba)" if unknown
                        else "empty: a model needs at least one layer")
    return kinds


def _mixer(cfg: Config, d: int) -> dict[str, Any]:
    """Zamba2MambaMixer: mamba_expand × d inner channels in n_mamba_heads heads; a conv bias always."""
    heads, inner = cfg.int("n_mamba_heads"), cfg.int("mamba_expand") * d
    if heads < 1 or inner % heads:
        raise cfg.error("n_mamba_heads", f"{heads} heads do not divide mamba_expand × hidden_size = {inner}")
    return {"kind": "mamba2", "n_heads": heads, "head_dim": inner // heads, "d_state": cfg.int("mamba_d_state"),
            "n_groups": cfg.int("mamba_ngroups"), "conv_kernel": cfg.int("mamba_d_conv"),
            "proj_bias": cfg.bool("add_bias_linear"), "conv_bias": True, "dt_min": cfg.float("time_step_min")}


def _applied(cfg: Config, d: int, copy: str, rms: dict[str, Any]) -> dict[str, Any]:
    """One hybrid layer's application of shared copy `copy`, with its adapters and output linear."""
    heads = cfg.int(*KEYS["n_heads"])
    if (2 * d) % heads:
        raise cfg.error("num_attention_heads", f"{heads} heads do not divide the shared attention's width 2 × {d}")
    head_dim, kv_heads = 2 * d // heads, cfg.int("num_key_value_heads", default=heads)
    if kv_heads != heads and cfg.bool("use_shared_attention_adapter"):
        raise cfg.error("num_key_value_heads", f"{kv_heads} of {heads} heads: with use_shared_attention_adapter the K and "
                                               "V adapters write 2 × hidden_size (Zamba2Attention), so K and V must be "
                                               "as wide as Q")
    attention = {"kind": "attention", "n_heads": heads, "n_kv_heads": kv_heads,
                 "head_dim": head_dim, "scale": 1 / math.sqrt(head_dim / 2),
                 "rope": rope(cfg, head_dim) if cfg.bool("use_mem_rope") else None,
                 "dropout": cfg.float("attention_dropout", default=0.0)}  # Zamba2Attention: on P in training
    mlp = {"kind": "mlp", "d_ff": cfg.int("intermediate_size", default=4 * d), "gated": True,
           **mlp_activation(cfg, "hidden_act"), "bias": cfg.bool("add_bias_linear"), "fused_gate_up": True}
    adapted = ["q", "k", "v"] if cfg.bool("use_shared_attention_adapter") else []
    if cfg.int("adapter_rank") < 1:
        raise cfg.error("adapter_rank", f"{cfg.raw('adapter_rank')}: every application's adapters have rank 1 or more")
    return {"name": copy, "block": {"attention": attention, "mlp": mlp, "norm": rms, "in_width": 2 * d},
            "adapter_rank": cfg.int("adapter_rank"), "adapters": [*adapted, "mlp"]}
