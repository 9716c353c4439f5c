"""Kimi Linear (kimi_linear): Kimi Delta Attention layers with an MLA layer every few, DeepSeek-V3's MoE.

Each layer is `linear_attention` (Kimi Delta Attention, calc.parts.kda) or `full_attention` (MLA
without rotary: KimiLinearModel has no rotary embedding, so the qk_rope_head_dim channels of the
shared key carry no position; scores scaled by qk_head_dim^-0.5). The order, as
KimiLinearConfig.__post_init__ reads it: `layer_types`, else `linear_attn_config`'s 1-indexed
`full_attn_layers` and `kda_layers`, else every 4th layer from the 5th is MLA. The KDA's heads,
head width and conv kernel come from `linear_attn_config` (num_heads, head_dim,
short_conv_kernel_size) over linear_num_heads, linear_head_dim, linear_conv_kernel_dim; its
recurrent state is kept in float32 (cache.update_recurrent_state(... .to(torch.float32))).
The MLP follows `mlp_layer_types` ("dense" / "sparse"), else `first_k_dense_replace` (1) dense
layers first: a SwiGLU of `intermediate_size`, or DeepSeek-V3's MoE (grouped sigmoid routing with
the score-correction buffer, shared experts `num_shared_experts` times `moe_intermediate_size`).
The config's names are transformers' attribute_map targets (num_experts, num_experts_per_token,
num_shared_experts, moe_renormalize, num_expert_group, model_max_length); their DeepSeek names
(num_local_experts, num_experts_per_tok, ...) are read too. Heads untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, decoder, gated_mlp, kind_stack, layer_kinds, norm, renamed, with_defaults
from calc.arch.config import Config
from calc.arch.deepseek import mla
from calc.arch.moe_common import deepseek_moe, grouped_sigmoid, mlp_layer_types

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' attribute_map: a config may name these either way; both are read as the builders' names.
NAMES = {"num_experts": "n_routed_experts", "num_local_experts": "n_routed_experts",
         "num_experts_per_token": "num_experts_per_tok", "num_shared_experts": "n_shared_experts",
         "moe_renormalize": "norm_topk_prob", "num_expert_group": "n_group", "model_max_length": "max_position_embeddings"}
# transformers' config-class defaults (models/kimi_linear/configuration_kimi_linear.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "kimi_linear": {"vocab_size": 163840, "hidden_size": 2304, "intermediate_size": 9216, "moe_intermediate_size": 1024,
                    "num_hidden_layers": 27, "num_attention_heads": 32, "n_shared_experts": 1,
                    "routed_scaling_factor": 2.446, "kv_lora_rank": 512, "q_lora_rank": None, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 1, "topk_group": 1,
                    "num_experts_per_tok": 8, "norm_topk_prob": True, "max_position_embeddings": 1048576,
                    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "attention_bias": False,
                    "n_routed_experts": 256, "linear_head_dim": 128, "linear_num_heads": 32,
                    "linear_conv_kernel_dim": 4, "first_k_dense_replace": 1},
}
KINDS = ("linear_attention", "full_attention")
# linear_attn_config's keys over the top-level ones they replace (KimiLinearConfig.__post_init__).
LINEAR = {"num_heads": "linear_num_heads", "head_dim": "linear_head_dim", "short_conv_kernel_size": "linear_conv_kernel_dim"}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(_linear_keys(renamed(cfg, NAMES)), DEFAULTS["kimi_linear"])
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    mixers = _mixers(cfg)
    mlps = mlp_layer_types(cfg, cfg.int("first_k_dense_replace"))
    parts = {"linear_attention": _kda(cfg), "full_attention": {**mla(cfg), "rope": None},
             "dense": gated_mlp(cfg, bias=False), "sparse": deepseek_moe(cfg, score_bias=True, **grouped_sigmoid(cfg))}
    kinds = [f"{mixer}+{mlp}" for mixer, mlp in zip(mixers, mlps)]
    names = {kind: ("kda" if kind.startswith("linear") else "mla") + ("_dense" if kind.endswith("dense") else "")
             for kind in kinds}
    blocks, layers = kind_stack(kinds, names, lambda kind: {
        "attention": parts[kind.split("+")[0]], "mlp": parts[kind.split("+")[1]], "norm": rms})
    # llama.cpp expands each layer's input norm before its mixer (src/models/kimi-linear.cpp:50-53), and reserves its
    # graph again with the ubatch as one sequence (src/llama-context.cpp:716-722)
    return decoder(cfg, "kimi_linear", blocks, layers, rms, cfg.bool("tie_word_embeddings"), **_sglang(cfg),
                   llamacpp={"expand_norm": True, "reserve_one_sequence": True})


def _sglang(cfg: Config) -> dict[str, Any]:
    """SGLang's KimiLinearConfig builds its states' params without the config (mamba2_state_dtype(None): float32,
    whatever mamba_ssm_dtype says); on SM100 it defaults --mamba-ssm-dtype to bfloat16 where the KDA heads are
    128 wide and the TP size divides them (arg_groups/kimi_k3_hook.py in a version newer than
    sgl-project/sglang@9aab5589). Its post_load_weights copies each MLA layer's kv_b_proj weight, as loaded, into
    w_kc and w_vc (models/kimi_linear.py at sgl-project/sglang@0220422f: calc.analysis.memory.sglang_mla)."""
    heads = cfg.int("linear_num_heads")
    copy = {"mla_kv_b_copy": True, "mla_kv_b_as_stored": True}
    return {"sglang": {**copy, "sm100_bf16_ssm_heads": heads} if cfg.int("linear_head_dim") == 128 else copy}


def _linear_keys(cfg: Config) -> Config:
    """`linear_attn_config`'s num_heads, head_dim and short_conv_kernel_size as the top-level keys they win over."""
    nested = cfg.dict("linear_attn_config")
    return cfg.replace({**cfg.data, **{top: nested[key] for key, top in LINEAR.items() if key in nested}})


def _mixers(cfg: Config) -> list[str]:
    """Each layer's mixer: `layer_types`, else linear_attn_config's 1-indexed lists, else MLA on every 4th from the 5th."""
    n_layers = cfg.int(*KEYS["n_layers"])
    nested = cfg.dict("linear_attn_config")
    if cfg.list("layer_types") is None and "full_attn_layers" in nested and "kda_layers" in nested:
        kinds: list[Any] = [None] * n_layers
        for key, kind in (("full_attn_layers", "full_attention"), ("kda_layers", "linear_attention")):
            for layer in nested[key]:
                if not isinstance(layer, int) or isinstance(layer, bool) or not 1 <= layer <= n_layers:
                    raise cfg.error("linear_attn_config", f"{key}: {layer!r} is not a layer number from 1 to {n_layers}")
                kinds[layer - 1] = kind
    else:
        kinds = layer_kinds(cfg, lambda i: KINDS[bool(i) and i % 4 == 0])
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise cfg.error("layer_types", f"layer type {unknown[0]!r} is not one of {', '.join(KINDS)} (every layer needs one)")
    return kinds


def _kda(cfg: Config) -> dict[str, Any]:
    return {"kind": "kda", "n_heads": cfg.int("linear_num_heads"), "head_dim": cfg.int("linear_head_dim"),
            "conv_kernel": cfg.int("linear_conv_kernel_dim"), "state_dtype": "fp32"}
