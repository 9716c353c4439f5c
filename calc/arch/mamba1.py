"""Mamba (version 1) and the hybrids built on its mixer: mamba, falcon_mamba, jamba.

The mixer (calc.parts.mamba) has `intermediate_size` = expand x hidden_size channels, a state of
`state_size` per channel and a rank-`time_step_rank` dt ("auto": ceil(hidden_size / 16)).
- mamba (state-spaces/mamba-*-hf) and falcon_mamba (Falcon-Mamba-7B): every layer one RMSNorm and the
  mixer, tensors under `backbone.`; Falcon-Mamba's extra RMS normalisations of dt, B and C have no
  weights (FalconMambaMixer, eps `mixer_rms_eps`), so its count is Mamba's. Heads tied unless the config says otherwise.
- jamba (AI21's Jamba): Llama's two-norm layers; the mixer is attention (GQA without rotary) on every
  `attn_layer_period`-th layer from `attn_layer_offset`, Mamba elsewhere, with RMSNorms on dt, B and
  C; the MLP is a MoE of `num_experts` SwiGLU experts on every `expert_layer_period`-th layer from
  `expert_layer_offset`, a SwiGLU elsewhere (JambaModel); its router keeps the top-k softmax weights
  as they are, not renormalised (JambaTopKRouter).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, attention, decoder, gated_mlp, kind_stack, norm, with_defaults
from calc.arch.config import Config
from calc.arch.mamba import mixer_stack
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict"]

_MAMBA = {"vocab_size": 50280, "hidden_size": 768, "state_size": 16, "num_hidden_layers": 32, "layer_norm_epsilon": 1e-5,
          "expand": 2, "conv_kernel": 4, "use_bias": False, "use_conv_bias": True, "time_step_rank": "auto",
          "tie_word_embeddings": True}
# transformers' config-class defaults (models/<type>/configuration_<type>.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "mamba": _MAMBA,
    "falcon_mamba": {**_MAMBA, "vocab_size": 50280, "hidden_size": 768, "num_hidden_layers": 32, "mixer_rms_eps": 1e-6},
    "jamba": {"vocab_size": 65536, "tie_word_embeddings": False, "hidden_size": 4096, "intermediate_size": 14336,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-6,
              "max_position_embeddings": 262144, "num_experts_per_tok": 2, "num_experts": 16,
              "expert_layer_period": 2, "expert_layer_offset": 1, "attn_layer_period": 8, "attn_layer_offset": 4,
              "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": "auto",
              "mamba_conv_bias": True, "mamba_proj_bias": False},
}
def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    return _jamba(cfg) if model_type == "jamba" else _mamba(cfg, model_type)


def _mixer(cfg: Config, state: str, conv: str, expand: str, rank: str, proj_bias: str, conv_bias: str,
           **changes: Any) -> dict[str, Any]:
    """The Mamba mixer from the keys a model_type names its fields with; dt rank "auto" is ceil(d / 16)."""
    d = cfg.int(*KEYS["d_model"])
    dt_rank = -(-d // 16) if cfg.raw(rank, default="auto") == "auto" else cfg.int(rank)
    return {"kind": "mamba", "d_inner": cfg.int(expand) * d, "d_state": cfg.int(state), "dt_rank": dt_rank,
            "conv_kernel": cfg.int(conv), "proj_bias": cfg.bool(proj_bias), "conv_bias": cfg.bool(conv_bias), **changes}


def _mamba(cfg: Config, model_type: str) -> dict[str, Any]:
    rms = {"dt_rms_eps": cfg.float("mixer_rms_eps")} if model_type == "falcon_mamba" else {}
    mixer = _mixer(cfg, "state_size", "conv_kernel", "expand", "time_step_rank", "use_bias", "use_conv_bias", **rms)
    return mixer_stack(cfg, model_type, mixer)


def _jamba(cfg: Config) -> dict[str, Any]:
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    n_layers = cfg.int(*KEYS["n_layers"])
    mixers = ["attention" if _every(cfg, "attn_layer", i) else "mamba" for i in range(n_layers)]
    mlps = ["moe" if cfg.int("num_experts") > 1 and _every(cfg, "expert_layer", i) else "dense" for i in range(n_layers)]
    parts = {"mamba": _mixer(cfg, "mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_dt_rank", "mamba_proj_bias",
                             "mamba_conv_bias", dt_norms=True),
             "attention": attention(cfg, rope=None, q_bias=False, k_bias=False, v_bias=False, o_bias=False),
             "moe": experts(cfg, ("num_experts",), "intermediate_size", norm_topk=False),  # JambaTopKRouter
             "dense": gated_mlp(cfg, bias=False)}
    kinds = [f"{mixer}_{mlp}" for mixer, mlp in zip(mixers, mlps)]
    blocks, layers = kind_stack(kinds, {kind: kind for kind in kinds}, lambda kind: {
        "attention": parts[kind.split("_")[0]], "mlp": parts[kind.split("_")[1]], "norm": rms})
    return decoder(cfg, "jamba", blocks, layers, rms, cfg.bool("tie_word_embeddings"), llamacpp={"stream_first": True})


def _every(cfg: Config, what: str, layer: int) -> bool:
    """Jamba's layer placement: every `<what>_period`-th layer from `<what>_offset`."""
    return layer % cfg.int(f"{what}_period") == cfg.int(f"{what}_offset")
