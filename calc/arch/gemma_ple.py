"""Gemma-3n and Gemma-4 (text decoders: gemma3n_text, gemma4_text), as transformers'
Gemma3nForCausalLM and Gemma4ForCausalLM build them: Gemma-3's sandwich-normed layers (local
sliding-window and global layers, per-head QK-norm, a scale-free V-norm, scores not scaled, √d
embeddings, a tied soft-capped head) with what the two add.

Both share K and V between layers: the last `num_kv_shared_layers` layers reuse the K and V of the
last earlier layer of their type (transformers' `kv_sharing_modes`), so they have no K or V
projection nor K-norm and keep no cache. Both may give each layer its own slice of a per-layer
embedding (`hidden_size_per_layer_input` p > 0): a V_p x (L·p) table and a d -> L·p projection at
the bottom, and in each layer a gated d -> p -> d sublayer after the MLP. Their RMSNorms scale by
w, not 1 + w (Gemma3nRMSNorm, Gemma4RMSNorm).

Gemma-3n adds AltUp (`altup_num_inputs` copies of the residual stream; (n - 1)·d² projections in
and out of the stack, n² + n³ coefficients, a d·n router and its norm, an output scale per layer),
LAuReL (`laurel_rank`: a low-rank residual beside attention), per-layer MLP widths
(`intermediate_size` may be a list) and activation sparsity (the first layers' gate activations
cut at a Gaussian quantile: no parameter). Gemma-4's global layers have their own head_dim
(`global_head_dim`) and, with `attention_k_eq_v`, their own KV head count
(`num_global_key_value_heads`) and values equal to the keys' projection (no v_proj); with
`enable_moe_block` every layer runs a MoE beside its dense MLP (calc/parts/moe.py: shared_norms,
router_scale); `use_double_wide_mlp` doubles the MLP of the KV-shared layers. Each Gemma-4 layer
also stores a one-element `layer_scalar` buffer (not a parameter). Local layers rotate with the
sliding type's rope parameters, global ones with the full type's (Gemma-4: on a quarter of each
head, its "proportional" rope).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, decoder, kind_stack, layer_kinds, mlp_activation, norm, rope, with_defaults
from calc.arch.config import Config
from calc.arch.gemma import _gemma3_rope

__all__ = ["DEFAULTS", "spec_dict"]

_SHARED = {"head_dim": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False,
           "hidden_activation": "gelu_pytorch_tanh", "vocab_size_per_layer_input": 262144,
           "hidden_size_per_layer_input": 256}
# transformers' config-class defaults (configuration_gemma3n.py, configuration_gemma4.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3n_text": {**_SHARED, "vocab_size": 262400, "hidden_size": 2048, "intermediate_size": 16384,
                     "num_hidden_layers": 35, "num_attention_heads": 8, "num_key_value_heads": 2,
                     "max_position_embeddings": 32768, "sliding_window": 512, "final_logit_softcapping": 30.0,
                     "altup_num_inputs": 4, "num_kv_shared_layers": 15, "laurel_rank": 64,
                     "rope_theta": 1_000_000.0, "rope_local_base_freq": 10000.0},
    "gemma4_text": {**_SHARED, "vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216,
                    "num_hidden_layers": 30, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "max_position_embeddings": 131072, "sliding_window": 512, "attention_k_eq_v": False,
                    "num_kv_shared_layers": 0, "enable_moe_block": False, "use_double_wide_mlp": False,
                    "global_head_dim": 512,
                    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                           "rope_theta": 1_000_000.0}}},
}
# Each layer's attention type when the config has no layer_types: a global layer every 5th (Gemma-3n)
# or 6th (Gemma-4) layer.
PATTERN = {"gemma3n_text": 5, "gemma4_text": 6}
# llama.cpp's gemma3n caches the first 20 layers whatever num_kv_shared_layers says (n_layer_kv_from_start,
# src/models/gemma3n.cpp:7); its gemma4 reads the key (src/models/gemma4.cpp:9-11), as the spec does
LLAMACPP_KV_LAYERS = 20
# ollama 0.30 quantizes a gemma3n file's per_layer_token_embd to F16 in Q4_K_M / Q4_K_S (server/quantization.go at
# 0e93ccc2, llamaQuantizeArgs :296-305)
OLLAMA_TYPES = {"per_layer_embedding": "fp16"}
SHORT = {"sliding_attention": "local", "full_attention": "global"}
# How llama.cpp's gemma4 builds the graph: the token rows scaled by an input (build_inp_embd with a scale), the output
# rows taken after the final norm, kept as an output (src/models/gemma4.cpp:163, 404-419; embeddings_nextn_masked is
# false by default), the experts' gate and up one tensor
LLAMACPP_GEMMA4 = {"scale_rows": True, "rows_after_norm": True, "fused_experts": True}
# gemma3n's: the 20 cached layers, ollama's types, the token rows scaled by an input, the output rows taken of the
# merged stream before the final norm (src/models/gemma3n.cpp:100, 293-296)
LLAMACPP_GEMMA3N = {"kv_from_start": LLAMACPP_KV_LAYERS, "ollama_tensor_types": OLLAMA_TYPES, "scale_rows": True,
                    "rows_before_norm": True}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"), pow_rsqrt=True)  # x · pow(mean(x²) + ε, −0.5)
    n_layers = cfg.int(*KEYS["n_layers"])
    kinds, shared = _kinds(cfg, model_type), _shared_layers(cfg, n_layers)
    widths, sparse = _mlp_widths(cfg, n_layers, model_type, shared), _sparsity(cfg, n_layers, model_type)
    keys = list(zip(kinds, shared, widths, sparse, _heads(cfg, model_type, kinds)))
    names = _names(keys, len(set(widths)) > 1)
    blocks, layers = kind_stack(keys, names, lambda key: _block(cfg, model_type, rms, key))
    embedding: dict[str, Any] = {"scale": True}
    if cfg.int("hidden_size_per_layer_input"):
        embedding["per_layer"] = {"vocab_size": cfg.int("vocab_size_per_layer_input"),
                                  "width": cfg.int("hidden_size_per_layer_input"), "n_layers": n_layers}
    if model_type == "gemma3n_text":
        embedding["altup_inputs"] = cfg.int("altup_num_inputs")
    head = {"tied": cfg.bool("tie_word_embeddings"), "softcap": cfg.float("final_logit_softcapping", default=None)}
    llamacpp = {"llamacpp": LLAMACPP_GEMMA3N if model_type == "gemma3n_text" else LLAMACPP_GEMMA4}
    return decoder(cfg, model_type, blocks, layers, rms, head["tied"], embedding=embedding, head=head, **llamacpp)


def _kinds(cfg: Config, model_type: str) -> list[str]:
    """Each layer's attention type; Gemma-4 makes the last layer global whatever layer_types says."""
    pattern = PATTERN[model_type]
    kinds = layer_kinds(cfg, lambda i: "full_attention" if (i + 1) % pattern == 0 else "sliding_attention")
    unknown = sorted(set(kinds) - set(SHORT))
    if unknown:
        raise cfg.error("layer_types", f"unknown layer type {unknown[0]!r} (expected {', '.join(SHORT)})")
    return [*kinds[:-1], "full_attention"] if model_type == "gemma4_text" else kinds


def _shared_layers(cfg: Config, n_layers: int) -> list[bool]:
    """transformers' kv_sharing_modes: the last num_kv_shared_layers layers reuse an earlier layer's K and V."""
    n_shared = cfg.int("num_kv_shared_layers")
    if not 0 <= n_shared <= n_layers:
        raise cfg.error("num_kv_shared_layers", f"{n_shared}: expected 0 to num_hidden_layers={n_layers}")
    return [i >= n_layers - n_shared for i in range(n_layers)]


def _mlp_widths(cfg: Config, n_layers: int, model_type: str, shared: list[bool]) -> list[int]:
    """Each layer's MLP width: Gemma-3n's intermediate_size may list one per layer; Gemma-4's
    use_double_wide_mlp doubles the KV-shared layers'."""
    if model_type == "gemma3n_text" and isinstance(cfg.raw("intermediate_size"), list):
        widths = cfg.list("intermediate_size")
        if len(widths) != n_layers or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths):
            raise cfg.error("intermediate_size", f"expected one width or {n_layers} (one per layer), got {widths!r}")
        return widths
    width = cfg.int("intermediate_size")
    double = model_type == "gemma4_text" and cfg.bool("use_double_wide_mlp")
    return [width * (2 if double and s else 1) for s in shared]


def _sparsity(cfg: Config, n_layers: int, model_type: str) -> list[float]:
    """Gemma-3n's activation_sparsity_pattern (default: 0.95 on the first 10 layers of a model deeper than 10)."""
    if model_type != "gemma3n_text":
        return [0.0] * n_layers
    pattern = cfg.raw("activation_sparsity_pattern", default=None)
    if pattern is None:
        first = 10 if n_layers > 10 else 0
        return [0.95] * first + [0.0] * (n_layers - first)
    if isinstance(pattern, (int, float)) and not isinstance(pattern, bool):
        pattern = [pattern] * n_layers
    if not isinstance(pattern, list) or len(pattern) != n_layers or not all(
            isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 1 for p in pattern):
        raise cfg.error("activation_sparsity_pattern", f"expected {n_layers} fractions in [0, 1), got {pattern!r}")
    return [float(p) for p in pattern]


def _heads(cfg: Config, model_type: str, kinds: list[str]) -> list[tuple[int, int]]:
    """Each layer's (head_dim, KV heads). Gemma-4's global layers take global_head_dim and, with
    attention_k_eq_v, num_global_key_value_heads; a config transformers wrote holds the result as
    `per_layer_config` (layer index -> overrides), which replaces both keys."""
    base = (cfg.int("head_dim"), cfg.int("num_key_value_heads"))
    if model_type != "gemma4_text":
        return [base] * len(kinds)
    overrides = cfg.dict("per_layer_config")
    if overrides:
        return [_override(cfg, overrides.get(str(i)) or overrides.get(i) or {}, base) for i in range(len(kinds))]
    k_eq_v = cfg.bool("attention_k_eq_v")
    wide = (cfg.int("global_head_dim"),
            cfg.int("num_global_key_value_heads", default=base[1]) if k_eq_v else base[1])
    return [wide if kind == "full_attention" else base for kind in kinds]


def _override(cfg: Config, changes: Any, base: tuple[int, int]) -> tuple[int, int]:
    """One layer's head_dim and num_key_value_heads from its per_layer_config entry."""
    if not isinstance(changes, dict) or set(changes) - {"head_dim", "num_key_value_heads"}:
        raise cfg.error("per_layer_config", f"{changes!r}: only head_dim and num_key_value_heads may change per layer")
    layer = Config({"head_dim": base[0], "num_key_value_heads": base[1], **changes}, cfg.origin)
    return layer.int("head_dim"), layer.int("num_key_value_heads")


def _names(keys: list[tuple], varied: bool) -> dict[tuple, str]:
    """local / global, _shared for a KV-shared layer, the MLP width where widths differ, _sparse;
    a number after a name two kinds of layer would share."""
    names: dict[tuple, str] = {}
    for key in dict.fromkeys(keys):
        kind, shared, width, sparsity, _ = key
        name = (f"{SHORT[kind]}{'_shared' if shared else ''}{f'_{width}' if varied else ''}"
                f"{'_sparse' if sparsity else ''}")
        taken = sum(other.startswith(name) for other in names.values())
        names[key] = f"{name}_{taken + 1}" if taken else name
    return names


def _block(cfg: Config, model_type: str, rms: dict[str, Any], key: tuple) -> dict[str, Any]:
    kind, shared, width, sparsity, heads = key
    mlp = {"d_ff": width, "gated": True, **mlp_activation(cfg, "hidden_activation"), "sparsity": sparsity}
    attn = _attention(cfg, model_type, rms, kind, shared, heads)
    if model_type == "gemma4_text" and cfg.bool("enable_moe_block"):
        mlp = {"kind": "moe", "n_experts": cfg.int("num_experts"), "top_k": cfg.int("top_k_experts"),
               "d_ff": cfg.int("moe_intermediate_size"), "gated": True, "activation": mlp["activation"],
               "shared": {k: v for k, v in mlp.items() if k != "sparsity"}, "n_shared": 1, "shared_norms": True,
               "router_scale": True}
    return {"attention": attn, "mlp": mlp, "norm": rms, "norms": ("attn_in", "attn_out", "mlp_in", "mlp_out")}


def _attention(cfg: Config, model_type: str, rms: dict[str, Any], kind: str, shared: bool,
               widths: tuple[int, int]) -> dict[str, Any]:
    """Query heads of the layer's head_dim, per-head QK-norm, scores not scaled (scaling 1.0: the
    norms set the scale), the window on local layers; Gemma-4's global layers' values are their keys
    with attention_k_eq_v."""
    heads, (head_dim, kv_heads) = cfg.int(*KEYS["n_heads"]), widths
    k_eq_v = model_type == "gemma4_text" and kind == "full_attention" and cfg.bool("attention_k_eq_v")
    bias = cfg.bool("attention_bias")
    attn: dict[str, Any] = {
        "n_heads": heads, "n_kv_heads": kv_heads, "head_dim": head_dim, "q_bias": bias, "k_bias": bias,
        "v_bias": bias and not k_eq_v, "o_bias": bias, "qk_norm": {"norm": rms, "scope": "head"}, "v_norm": True, "scale": 1.0,
        "kv_shared": shared, "k_eq_v": k_eq_v, "rope": _rope(cfg, model_type, head_dim, kind),
    }
    if kind == "sliding_attention":
        attn["window"] = cfg.int("sliding_window")
    augment = {"per_layer_input": cfg.int("hidden_size_per_layer_input") or None}
    if model_type == "gemma3n_text":
        augment.update(laurel_rank=cfg.int("laurel_rank"), altup_inputs=cfg.int("altup_num_inputs"),
                       altup_clip=cfg.float("altup_coef_clip", default=120.0) is not None,
                       altup_scale_output=cfg.bool("altup_correct_scale", default=True))
    else:
        augment["layer_scalar"] = True  # Gemma4TextDecoderLayer's layer_scalar buffer
    if any(augment.values()):
        attn["augment"] = augment
    return attn


def _rope(cfg: Config, model_type: str, head_dim: int, kind: str) -> dict[str, Any]:
    """Gemma-3n reads Gemma-3's keys (rope_theta, rope_local_base_freq, or rope_parameters by layer
    type); Gemma-4 only rope_parameters by layer type."""
    if model_type == "gemma3n_text":
        return _gemma3_rope(cfg, head_dim, kind)
    return rope(cfg, head_dim, layer_type=kind)
