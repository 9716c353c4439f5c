"""Step-3.5 and Step-3.7 (StepFun's Step-3.7-Flash: a `step3p7` config whose language model is
`text_config`, model_type `step3p5`), as transformers' Step3p7TextModel builds it, with an untied
LM head (Step3p7ForConditionalGeneration's).

Pre-norm blocks whose RMSNorms scale by 1 + w (Step3p7RMSNorm, zeros stored), per-head QK-norm of
the same kind, and a sigmoid gate per head on attention's output (`g_proj`, d_model -> heads: the
config class fixes `gating` to per head). Layers are full or sliding-window attention
(`layer_types`); sliding layers may have their own query-head count (`num_sliding_attention_heads`,
or the Hub config's `attention_other_setting`), the KV heads are shared. Each layer type rotates with
the `rope_theta` and `partial_rotary_factors` of its first layer (the Hub config lists one per
layer); `rope_scaling` applies to the full layers. `mlp_layer_types` (or the Hub's
`moe_layers_enum`; default: layers 3 and up) picks a dense SwiGLU of `intermediate_size` or a MoE:
`n_routed_experts` SwiGLU experts of `moe_intermediate_size` under a sigmoid router with a
score-correction buffer, the top `num_experts_per_tok` renormalised and scaled by
`moe_router_scaling_factor`, plus a shared SwiGLU of `share_expert_dim`. `swiglu_limits` clamps the
routed experts of a layer, `swiglu_limits_shared` its shared expert or dense MLP (clamped SwiGLU:
SiLU(gate) at most c, up within ±c; 0 or null: none). `minimax_m3_sparse` layers (a lightning
indexer) are refused by name.

The checkpoint holds `num_nextn_predict_layers` multi-token-prediction layers above the stack
(model.layers.45-47 of Step-3.7-Flash), which transformers' Step3p7TextModel skips on load: counted
as MTP rows (calc.spec.model.MTP), beside the decoder's total, each a decoder layer of the kind the
Hub config's padded per-layer lists give it (or `mtp_layer_types` / `mtp_mlp_layer_types`, as
transformers' config class splits them off; MoE only where `moe_layers_enum` names its index), with
enorm, hnorm, eh_proj, its output norm and its own head (vLLM's step3p5_mtp.py). Where the config
types its attention layers without typing the MTP ones, they are left out with a note, as
transformers' get_mtp_config refuses them.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, decoder, gated_mlp, layer_runs, norm, rope, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import MLP_LAYER_TYPES, experts

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Step3p7TextConfig defaults (models/step3p7/configuration_step3p7.py) for the keys read here.
DEFAULTS = {"vocab_size": 128815, "hidden_size": 4096, "intermediate_size": 11264, "num_hidden_layers": 45,
            "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 128000,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "num_experts_per_tok": 8, "moe_intermediate_size": 1280,
            "n_routed_experts": 288, "share_expert_dim": 1280, "attention_bias": False, "moe_router_scaling_factor": 1.0,
            "mlp_bias": False, "num_nextn_predict_layers": 0}
# The Hub config's names for the same quantities (Step3p7TextConfig.attribute_map).
ALIASES = {"num_local_experts": "n_routed_experts", "moe_num_experts": "n_routed_experts",
           "num_attention_groups": "num_key_value_heads", "moe_top_k": "num_experts_per_tok",
           "share_expert_dims": "share_expert_dim", "num_mtp_layers": "num_nextn_predict_layers"}
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}
PER_LAYER = ("layer_types", "mlp_layer_types", "swiglu_limits", "swiglu_limits_shared", "rope_theta",
             "partial_rotary_factors")


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(_renamed(cfg), DEFAULTS)
    stack, extra = _split(cfg)
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"), unit_offset=True)
    keys, mtp_keys = _keys(stack), _keys(extra) if extra else []
    kinds = [key[0] for key in keys]
    ropes = {kind: _rope(stack, kinds, kind) for kind in set(kinds)}
    ropes.update({key[0]: _rope(extra, [k[0] for k in mtp_keys], key[0]) for key in mtp_keys if key[0] not in ropes})
    names = _names(keys + mtp_keys)
    blocks = {names[key]: _block(cfg, key, rms, ropes[key[0]]) for key in dict.fromkeys(keys + mtp_keys)}
    # llama.cpp's step35 takes the output rows of the stream after the last layer, before the final norm
    # (src/models/step35.cpp:290-293 and 349-354; embeddings_nextn_masked is false by default)
    return decoder(cfg, "step3p5", blocks, layer_runs([names[key] for key in keys]), rms,
                   cfg.bool("tie_word_embeddings"), **_mtp(cfg, extra, mtp_keys, names),
                   llamacpp={"rows_before_norm": True})


def _renamed(cfg: Config) -> Config:
    """The Hub config's aliases under the names the config class stores them (an alias wins, as
    attribute_map sets the same attribute)."""
    data = dict(cfg.data)
    for alias, name in ALIASES.items():
        if data.get(alias) is not None:
            data[name] = data.pop(alias)
    return cfg.replace(data)


def _split(cfg: Config) -> tuple[Config, Config | None]:
    """The stack's config, its per-layer lists cut to num_hidden_layers where the Hub config pads them
    with its MTP layers' entries, and the MTP layers' as transformers' get_mtp_config builds it (their
    attention and MLP types, the padded lists' tails; a list left unpadded is read from its start, as
    there); None without MTP layers or where the config leaves their attention types unsaid."""
    n, extra = cfg.int(*KEYS["n_layers"]), cfg.int("num_nextn_predict_layers")
    if extra < 0:
        raise cfg.error("num_nextn_predict_layers", f"expected 0 or more MTP layers, got {extra}")
    head, tail = {}, {}
    for key, value in cfg.data.items():
        if key in PER_LAYER and isinstance(value, list) and len(value) == n + extra:
            head[key], tail[key] = value[:n], value[n:]
    stack = cfg.replace({**cfg.data, **head})
    kinds = cfg.list("mtp_layer_types") or tail.get("layer_types") or (
        None if cfg.list("layer_types") else ["full_attention"] * extra)
    if not extra or kinds is None:
        return stack, None
    mlps = cfg.list("mtp_mlp_layer_types") or tail.get("mlp_layer_types") or _mlp_types(cfg, n, n + extra)[n:]
    return stack, cfg.replace({**cfg.data, **tail, "num_hidden_layers": extra, "layer_types": kinds,
                               "mlp_layer_types": mlps})


def _keys(cfg: Config) -> list[tuple]:
    """Each layer's (attention type, MLP type, routed experts' clamp, shared expert's or dense MLP's clamp)."""
    n_layers = cfg.int(*KEYS["n_layers"])
    kinds, mlps = _layer_types(cfg, n_layers), _mlp_types(cfg, n_layers)
    routed, shared = _limits(cfg, "swiglu_limits", n_layers), _limits(cfg, "swiglu_limits_shared", n_layers)
    return [(k, m, r if m == "sparse" else None, s) for k, m, r, s in zip(kinds, mlps, routed, shared)]


def _mtp(cfg: Config, extra: Config | None, keys: list[tuple], names: dict[tuple, str]) -> dict[str, Any]:
    """The MTP layers (one block kind: ModelSpec's MTP holds one), each with its own head and no
    embedding copy; or the note that they are left out."""
    count = cfg.int("num_nextn_predict_layers")
    if extra is None:
        return {"notes": (f"its {count} multi-token-prediction layers are not counted: layer_types gives "
                          "no entries for them",)} if count else {}
    if len(set(keys)) > 1:
        kinds = ", ".join(names[key] for key in dict.fromkeys(keys))
        raise cfg.error("layer_types", f"its MTP layers are of several kinds ({kinds}); one kind is supported")
    return {"mtp": {"n_layers": count, "block": names[keys[0]], "copies": ("head",)}}


def _layer_types(cfg: Config, n_layers: int) -> list[str]:
    kinds = cfg.list("layer_types") or ["full_attention"] * n_layers
    if len(kinds) != n_layers:
        raise cfg.error("layer_types", f"expected {n_layers} layer types (one per layer), got {len(kinds)}")
    unknown = sorted({kind for kind in kinds if kind not in LAYER_TYPES}, key=str)
    if unknown:
        raise cfg.error("layer_types", f"{unknown[0]!r} is not supported (sparse attention with a lightning "
                                       f"indexer is not built yet; supported: {', '.join(LAYER_TYPES)})")
    return kinds


def _mlp_types(cfg: Config, n_layers: int, stored: int | None = None) -> list[str]:
    """mlp_layer_types, or the Hub's moe_layers_enum (MoE layer indices, a comma-separated string or a
    list), or layers 3 and up sparse; read over the `stored` layers (the MTP layers' too) where given."""
    kinds = cfg.list("mlp_layer_types") if stored is None else None
    if kinds is None:
        enum = cfg.raw("moe_layers_enum", default=None)
        items = enum.split(",") if isinstance(enum, str) else enum if isinstance(enum, list) else None
        try:
            sparse = {int(i) for i in items if str(i).strip()} if items is not None else set(range(3, n_layers))
        except ValueError:
            raise cfg.error("moe_layers_enum", f"expected layer indices, got {enum!r}") from None
        kinds = ["sparse" if i in sparse else "dense" for i in range(stored or n_layers)]
    if len(kinds) != (stored or n_layers) or any(kind not in MLP_LAYER_TYPES for kind in kinds):
        raise cfg.error("mlp_layer_types", f"expected {n_layers} of dense, sparse (one per layer), got {kinds!r}")
    return kinds


def _limits(cfg: Config, key: str, n_layers: int) -> list[float | None]:
    """A per-layer SwiGLU clamp list: 0 or null (or no list) means no clamp."""
    values = cfg.list(key)
    if values is None:
        return [None] * n_layers
    if len(values) < n_layers or not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                       and v >= 0) for v in values):
        raise cfg.error(key, f"expected {n_layers} clamps of 0 or more (or null), got {values!r}")
    return [float(v) if v else None for v in values[:n_layers]]


def _rope(cfg: Config, kinds: list[str], kind: str) -> dict[str, Any]:
    """A layer type's rotary: its rope_parameters entry (a config transformers wrote), else the
    rope_theta and partial_rotary_factors of the type's first layer, with rope_scaling on full layers."""
    head_dim = cfg.int("head_dim")
    nested = cfg.dict("rope_parameters")
    if isinstance(nested.get(kind), dict):
        return rope(cfg, head_dim, layer_type=kind)
    first = kinds.index(kind)
    theta, factors = cfg.raw("rope_theta", default=10000.0), cfg.raw("partial_rotary_factors", default=None)
    params: dict[str, Any] = {"rope_type": "default",
                              "rope_theta": theta[first] if isinstance(theta, list) else theta}
    if factors is not None:
        params["partial_rotary_factor"] = factors[first] if isinstance(factors, list) else factors
    if kind == "full_attention":
        params.update(cfg.dict("rope_scaling"))
    layer = Config({"rope_parameters": {kind: params}}, cfg.origin)
    return rope(layer, head_dim, layer_type=kind)


def _names(keys: list[tuple]) -> dict[tuple, str]:
    """full / sliding, then dense / moe, then the clamps where a layer has them."""
    names = {}
    for key in dict.fromkeys(keys):
        kind, mlp, routed, shared = key
        clamp = "".join(f"_{what}{limit:g}" for what, limit in (("clamp", routed), ("shared_clamp", shared)) if limit)
        names[key] = f"{LAYER_TYPES[kind]}_{MLP_LAYER_TYPES[mlp]}{clamp}"
    return names


def _block(cfg: Config, key: tuple, rms: dict[str, Any], rotary: dict[str, Any]) -> dict[str, Any]:
    kind, mlp, routed, shared = key
    heads = cfg.int(*KEYS["n_heads"])
    if kind == "sliding_attention":
        other = cfg.dict("attention_other_setting")
        heads = cfg.int("num_sliding_attention_heads", default=None) or other.get("num_attention_heads") or heads
    head_dim, bias = cfg.int("head_dim"), cfg.bool("attention_bias")
    scalar = cfg.float("query_pre_attn_scalar", default=None)
    attn = {"n_heads": heads, "n_kv_heads": cfg.int("num_key_value_heads"), "head_dim": head_dim,
            "q_bias": bias, "k_bias": bias, "v_bias": bias, "o_bias": bias, "rope": rotary,
            "qk_norm": {"norm": rms, "scope": "head"}, "output_gate": True, "gate_scope": "head",
            "window": cfg.int("sliding_window") if kind == "sliding_attention" else None,
            "scale": scalar ** -0.5 if scalar and scalar != head_dim else None}
    dense = gated_mlp(cfg, bias=cfg.bool("mlp_bias"), clamp=shared)
    if mlp == "dense":
        return {"attention": attn, "mlp": dense, "norm": rms}
    moe = experts(cfg, ("n_routed_experts",), "moe_intermediate_size", score_bias=True, scoring="sigmoid",
                  norm_topk=True, routed_scale=cfg.float("moe_router_scaling_factor"), clamp=routed, n_shared=1,
                  shared=gated_mlp(cfg, "share_expert_dim", bias=cfg.bool("mlp_bias"), clamp=shared))
    return {"attention": attn, "mlp": moe, "norm": rms}
