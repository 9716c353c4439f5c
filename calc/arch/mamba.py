"""Mamba2 and the hybrids built on its mixer: mamba2, nemotron_h, bamba, granitemoehybrid.

Every one uses transformers' Mamba2 mixer (calc.parts.mamba2): `n_heads` heads of `head_dim`,
`n_groups` groups of B and C of `d_state` each, a conv of `conv_kernel` taps; they differ in what
sits around it, as data:
- mamba2 (Mamba-Codestral, mamba2-*): every layer is one RMSNorm and the mixer, no MLP, no
  attention (Mamba2Block); tensors under `backbone.`.
- nemotron_h (Nemotron-H, Nemotron-Nano-2, Nemotron-3): each layer holds ONE sublayer behind one
  RMSNorm, as `layers_block_type` (or the older `hybrid_override_pattern`, M * - E) says: the Mamba2
  mixer, attention without rotary, a squared-ReLU MLP, or a MoE of squared-ReLU experts with a
  shared expert and DeepSeek-style sigmoid routing (NemotronHBlock). Its mixer floors dt at
  time_step_min (or mamba_dt_min) in a prefill, as Zamba2's does (modeling_nemotron_h.py,
  NemotronHMamba2Mixer.time_step_limit; the one-token recurrent update passes no limit).
- bamba (Bamba-9B): Llama's two-norm layers whose mixer is Mamba2 except at `attn_layer_indices`
  (attention with rotary on half of each head), a SwiGLU MLP in every layer.
- granitemoehybrid (Granite-4.0-H): the same, `layer_types` naming the mixers, and a MoE of
  `num_local_experts` SwiGLU experts with an always-on shared SwiGLU (`shared_intermediate_size`),
  or the shared SwiGLU alone when there are no experts; Granite's multipliers; rotary only when
  `position_embedding_type` is "rope".
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (KEYS, TRANSFORMERS_BACKEND, attention, current_kinds, decoder, gated_mlp,
                               granite_scalars, kind_stack, layer_kinds, mlp_activation, norm, sglang_ssm_dtype,
                               with_defaults)
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "NO_CONTEXT", "mixer_stack", "spec_dict"]

_MAMBA = {"mamba_n_heads": 128, "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
          "mamba_expand": 2, "mamba_conv_bias": True, "mamba_proj_bias": False}
# transformers' config-class defaults (models/<type>/configuration_<type>.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "mamba2": {"num_heads": 128, "head_dim": 64, "vocab_size": 32768, "hidden_size": 4096, "state_size": 128,
               "num_hidden_layers": 64, "layer_norm_epsilon": 1e-5, "expand": 2, "conv_kernel": 4, "n_groups": 8,
               "use_bias": False, "use_conv_bias": True, "tie_word_embeddings": False},
    "nemotron_h": {"vocab_size": 131072, "hidden_size": 4096, "tie_word_embeddings": False, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 4096, "attention_bias": False,
                   "intermediate_size": 21504, "mlp_hidden_act": "relu2", "mlp_bias": False, "ssm_state_size": 128,
                   "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4, "expand": 2,
                   "use_conv_bias": True, "use_bias": False, "n_routed_experts": 8, "n_shared_experts": 1,
                   "moe_intermediate_size": 7688, "moe_shared_expert_intermediate_size": 7688,
                   "num_experts_per_tok": 2, "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1,
                   "norm_topk_prob": True, "layer_norm_epsilon": 1e-5, "mamba_ssm_cache_dtype": "float32",
                   "time_step_min": 0.001},
    "bamba": {**_MAMBA, "vocab_size": 128000, "tie_word_embeddings": False, "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "rms_norm_eps": 1e-5, "max_position_embeddings": 262144,
              "attention_bias": False, "mlp_bias": False, "partial_rotary_factor": 0.5, "rope_theta": 10000.0},
    "granitemoehybrid": {**_MAMBA, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                         "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 2048,
                         "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
                         "embedding_multiplier": 1.0, "logits_scaling": 1.0, "residual_multiplier": 1.0,
                         "attention_multiplier": 1.0, "num_local_experts": 8, "num_experts_per_tok": 2,
                         "shared_intermediate_size": 1024, "position_embedding_type": None, "rope_theta": 10000.0},
}
# vLLM 0.32 has no BambaForCausalLM of its own any more (vllm/model_executor/models/registry.py L818, until 0.23.0):
# resolve_model_cls falls back to the Transformers backend, which takes transformers' class (it uses the
# attention interface).
VLLM = {"bamba": TRANSFORMERS_BACKEND}
# Nemotron-H's one-letter layer pattern (NemotronHConfig._pattern_to_list).
PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    return {"mamba2": _mamba2, "nemotron_h": _nemotron_h, "bamba": _two_norm,
            "granitemoehybrid": _two_norm}[model_type](cfg, model_type)


def mamba2_mixer(cfg: Config, heads: str, head: str, state: str, groups: str, conv: str, expand: str | None,
                 proj_bias: str, conv_bias: str, **changes: Any) -> dict[str, Any]:
    """The Mamba2 mixer from the keys a model_type names its fields with. With `expand`, head_dim "auto"
    (or absent) is expand x hidden_size / heads and heads x head_dim must equal expand x hidden_size
    (transformers' validate_architecture); Nemotron-H's inner width is heads x head_dim, whatever
    `expand` says (NemotronHMamba2Mixer), so it passes none."""
    n_heads = cfg.int(heads)
    if expand is None:
        head_dim = cfg.int(head)
    else:
        inner = cfg.int(expand) * cfg.int(*KEYS["d_model"])
        head_dim = inner // n_heads if cfg.raw(head, default="auto") == "auto" else cfg.int(head)
        if head_dim * n_heads != inner:
            raise cfg.error(heads, f"{n_heads} heads x head_dim {head_dim} must equal {expand} x hidden_size = {inner}")
    return {"kind": "mamba2", "n_heads": n_heads, "head_dim": head_dim, "d_state": cfg.int(state),
            "n_groups": cfg.int(groups), "conv_kernel": cfg.int(conv), "proj_bias": cfg.bool(proj_bias),
            "conv_bias": cfg.bool(conv_bias), **changes}


def _mamba2(cfg: Config, model_type: str) -> dict[str, Any]:
    mixer = mamba2_mixer(cfg, "num_heads", "head_dim", "state_size", "n_groups", "conv_kernel", "expand", "use_bias",
                         "use_conv_bias")
    return mixer_stack(cfg, model_type, mixer)


# A pure Mamba model has no position embeddings and no context limit in its config: the spec's context is nominal.
NO_CONTEXT = 1_048_576


def mixer_stack(cfg: Config, model_type: str, mixer: dict[str, Any]) -> dict[str, Any]:
    """A `backbone.` stack of layers that are one RMSNorm and `mixer` each (Mamba2Block, MambaBlock)."""
    rms = norm("rmsnorm", cfg.float("layer_norm_epsilon"))
    block = {"attention": mixer, "mlp": None, "norm": rms, "norms": ["attn_in"]}
    return decoder(cfg, model_type, {"mamba": block}, [(cfg.int(*KEYS["n_layers"]), "mamba")], rms,
                   cfg.bool("tie_word_embeddings"), n_positions=NO_CONTEXT,
                   notes=(f"{model_type}: no context limit (no position embeddings, a fixed state); "
                          f"{NO_CONTEXT:,} is nominal",))


def _nemotron_kinds(cfg: Config) -> list[str]:
    """`layers_block_type`, or the older `hybrid_override_pattern` string (M * - E)."""
    pattern = cfg.raw("hybrid_override_pattern", default=None)
    if cfg.list("layers_block_type") is None and isinstance(pattern, str):
        if set(pattern) - set(PATTERN):
            raise cfg.error("hybrid_override_pattern", f"{pattern!r}: letters other than {''.join(PATTERN)}")
        return [PATTERN[letter] for letter in pattern]
    kinds = current_kinds(cfg.list("layers_block_type") or cfg.list("layer_types")
                          or ["linear_attention", "moe", "full_attention", "mlp"])
    unknown = sorted(set(kinds) - set(PATTERN.values()))
    if unknown or not all(isinstance(kind, str) for kind in kinds):
        raise cfg.error("layers_block_type", f"unknown layer type {unknown[:1] or kinds!r} "
                                              f"(expected {', '.join(PATTERN.values())})")
    return kinds


def _nemotron_h(cfg: Config, model_type: str) -> dict[str, Any]:
    if cfg.raw("moe_latent_size", default=None) is not None:
        raise cfg.error("moe_latent_size", "latent MoE projections are not modelled yet")
    rms = norm("rmsnorm", cfg.float("layer_norm_epsilon"))
    state = "fp32" if cfg.raw("mamba_ssm_cache_dtype") == "float32" else "model"
    mlp = {"d_ff": cfg.int("intermediate_size"), "gated": False, **mlp_activation(cfg, "mlp_hidden_act"),
           "bias": cfg.bool("mlp_bias")}
    parts = {
        "linear_attention": ("attention", mamba2_mixer(cfg, "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                                                       "n_groups", "conv_kernel", None, "use_bias", "use_conv_bias",
                                                       state_dtype=state,
                                                       dt_min=cfg.float("mamba_dt_min", "time_step_min"))),
        "full_attention": ("attention", attention(cfg, rope=None, q_bias=False, k_bias=False, v_bias=False,
                                                  o_bias=False)),
        "mlp": ("mlp", mlp),
        "moe": ("mlp", _nemotron_moe(cfg, mlp)),
    }
    kinds = _nemotron_kinds(cfg)
    names = {"linear_attention": "mamba", "full_attention": "attention", "mlp": "mlp", "moe": "moe"}

    def build(kind: str) -> dict[str, Any]:
        slot, part = parts[kind]
        other = "mlp" if slot == "attention" else "attention"
        return {slot: part, other: None, "norm": rms, "norms": ["attn_in" if slot == "attention" else "mlp_in"]}

    blocks, layers = kind_stack(kinds, names, build)
    return decoder(cfg, model_type, blocks, layers, rms, cfg.bool("tie_word_embeddings"), **sglang_ssm_dtype(cfg),
                   llamacpp={"rows_after_norm": True})


def _nemotron_moe(cfg: Config, mlp: dict[str, Any]) -> dict[str, Any]:
    """NemotronHMoE: squared-ReLU experts (up, down) behind DeepSeek's sigmoid router with its score
    bias, and a shared squared-ReLU MLP of moe_shared_expert_intermediate_size."""
    shared = {**mlp, "d_ff": cfg.int("moe_shared_expert_intermediate_size")}
    return experts(cfg, ("n_routed_experts",), "moe_intermediate_size", gated=False, activation=mlp["activation"],
                   fused_gate_up=False, score_bias=True, shared=shared, n_shared=cfg.int("n_shared_experts"),
                   scoring="sigmoid", norm_topk=cfg.bool("norm_topk_prob"), n_group=cfg.int("n_group"),
                   topk_group=cfg.int("topk_group"), routed_scale=cfg.float("routed_scaling_factor"))


def _two_norm(cfg: Config, model_type: str) -> dict[str, Any]:
    """Bamba and Granite-4.0-H: input and post-mixer RMSNorms around a Mamba2 or attention mixer."""
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    kinds = _mixer_kinds(cfg, model_type)
    mamba = mamba2_mixer(cfg, "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
                         "mamba_expand", "mamba_proj_bias", "mamba_conv_bias")
    granite = model_type == "granitemoehybrid"
    attn = attention(cfg, **({"rope": None} if granite and cfg.raw("position_embedding_type", default=None) != "rope" else {}))
    mlp = _granite_mlp(cfg) if granite else gated_mlp(cfg)

    def build(kind: str) -> dict[str, Any]:
        return {"attention": mamba if kind == "linear_attention" else attn, "mlp": mlp, "norm": rms}

    blocks, layers = kind_stack(kinds, {"linear_attention": "mamba", "full_attention": "attention"}, build)
    spec = decoder(cfg, model_type, blocks, layers, rms, cfg.bool("tie_word_embeddings"), **VLLM.get(model_type, {}),
                   **sglang_ssm_dtype(cfg))
    return granite_scalars(cfg, spec) if granite else spec


def _mixer_kinds(cfg: Config, model_type: str) -> list[str]:
    """Bamba: attention at `attn_layer_indices`; Granite-4.0-H: `layer_types` (all Mamba by default)."""
    if model_type == "bamba":
        indices = cfg.list("attn_layer_indices") or []
        return ["full_attention" if i in indices else "linear_attention" for i in range(cfg.int(*KEYS["n_layers"]))]
    kinds = layer_kinds(cfg, lambda i: "linear_attention")
    unknown = sorted(set(kinds) - {"linear_attention", "full_attention"})
    if unknown:
        raise cfg.error("layer_types", f"unknown layer type {unknown[0]!r} (expected linear_attention, full_attention)")
    return kinds


def _granite_mlp(cfg: Config) -> dict[str, Any]:
    """GraniteMoeHybridMoE plus its always-on shared SwiGLU; the shared SwiGLU alone without experts."""
    shared = gated_mlp(cfg, "shared_intermediate_size", bias=False, fused_gate_up=True)
    if cfg.int("num_local_experts") == 0:
        return shared
    return experts(cfg, ("num_local_experts",), "intermediate_size", fused_gate_up=True, shared=shared, n_shared=1,
                   topk_first=True)  # GraniteMoeHybridTopKGating: top-k logits, then their softmax
