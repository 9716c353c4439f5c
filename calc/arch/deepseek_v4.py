"""DeepSeek-V4 (model_type deepseek_v4: V4-Flash, V4-Pro), as transformers' DeepseekV4ForCausalLM builds it.

Every layer's attention is shared-KV MQA over a sliding window (calc.parts.compressed); its
`layer_types` add compressed blocks: "compressed_sparse_attention" (CSA: one entry per 4 tokens,
overlapping windows, a lightning indexer), "heavily_compressed_attention" (HCA: one per 128) or
nothing ("sliding_attention"). Released configs give the schedule as `compress_ratios` (0, 4, 128
per layer, one more entry than layers for the MTP layer: DeepseekV4Config reads the first
num_hidden_layers) and the rates as the CSA and HCA defaults (`compress_rates`). Sliding layers
rotate with rope_theta, compressed ones with compress_rope_theta and the YaRN `rope_scaling`.

Every layer is a MoE: `n_routed_experts` SwiGLU experts of `moe_intermediate_size` and one shared
expert of the same width (DeepseekV4MLP reads intermediate_size = moe_intermediate_size whatever
n_shared_experts says); the first `num_hash_layers` (mlp_layer_types "hash_moe") pick experts from
a token-id table (a buffer), the others by sqrt(softplus) scores plus the score-correction buffer.
Experts and the shared expert clamp their SwiGLU at `swiglu_limit` (the gate from above before the
activation, up on both sides). The residual is `hc_mult` copies mixed by hyper-connections (calc.parts.hyper). Norms are RMSNorms.
The checkpoint's `num_nextn_predict_layers` MTP layer (mtp.0.*, with its own hyper-connection head
and e_proj / h_proj) is not built by transformers: shown beside the total. Head untied.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, decoder, kind_stack, norm, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import experts

__all__ = ["DEFAULTS", "spec_dict"]

CSA, HCA, SLIDING = "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"
# DeepseekV4Config's defaults (configuration_deepseek_v4.py) for the keys read here.
DEFAULTS: dict[str, Any] = {
    "vocab_size": 129280, "hidden_size": 4096, "moe_intermediate_size": 2048, "num_hidden_layers": 43,
    "num_attention_heads": 64, "head_dim": 512, "q_lora_rank": 1024, "num_experts_per_tok": 6, "n_routed_experts": 256,
    "scoring_func": "sqrtsoftplus", "norm_topk_prob": True, "routed_scaling_factor": 1.5,
    "max_position_embeddings": 1048576, "rope_theta": 10000.0, "compress_rope_theta": 160000.0, "hc_mult": 4,
    "swiglu_limit": 10.0, "sliding_window": 128, "o_groups": 8, "o_lora_rank": 1024, "index_n_heads": 64,
    "index_head_dim": 128, "index_topk": 512, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "num_hash_layers": 3, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
}
RATES = {CSA: 4, HCA: 128}  # default_compress_rates
RATIO_TYPES = {0: SLIDING, 4: CSA, 128: HCA}  # _COMPRESS_RATIO_TO_LAYER_TYPE
SHORT = {SLIDING: "swa", CSA: "csa", HCA: "hca"}
# What SGLang allocates in fp32 and whole on every GPU (models/deepseek_v4.py at 000328a8: attn_sink of n_heads, the
# hyper-connections; layers/attention/dsv4/compressor.py: ape and the norm's weight_dtype), and the router's tables it
# holds as parameters (noaux_tc's score bias in fp32, the hash layers' tid2eid in int32): calc.analysis.memory.sglang_fp32
SGLANG_FP32 = ("attn_sinks", "hc_attn", "hc_mlp", "hc_head", "comp_bias", "comp_norm", "idx_bias", "idx_norm",
               "router_hash_table")
# DeepseekV4Config.attribute_map: intermediate_size and num_local_experts name the same sizes, and win
# when both are given (set after the dataclass fields)
WIDTH, EXPERTS = ("intermediate_size", "moe_intermediate_size"), ("num_local_experts", "n_routed_experts")


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    n_layers = cfg.int(*KEYS["n_layers"])
    attention, mlps = _attention_types(cfg, n_layers), _mlp_types(cfg, n_layers)
    rms, hyper = norm("rmsnorm", cfg.float("rms_norm_eps")), _hyper(cfg)

    def build(kind: str) -> dict[str, Any]:
        attn, mlp = kind.split("+")
        return {"attention": _attention(cfg, attn, rms), "mlp": _moe(cfg, mlp == "hash_moe"), "norm": rms,
                "hyper": hyper}

    kinds = [f"{attn}+{mlp}" for attn, mlp in zip(attention, mlps)]
    names = {kind: SHORT[kind.split("+")[0]] + ("_hash" if kind.endswith("hash_moe") else "") for kind in kinds}
    blocks, layers = kind_stack(kinds, names, build)
    mtp = _mtp(cfg, n_layers, blocks, build)
    # vLLM's DeepseekV4ScalingRotaryEmbedding keeps its cos/sin table in fp32 ("cos_sin_cache stored as fp32 for
    # higher precision RoPE": layers/rotary_embedding/deepseek_scaling_rope.py L237-242)
    spec = decoder(cfg, "deepseek_v4", blocks, layers, rms, cfg.bool("tie_word_embeddings"), **mtp,
                   vllm={"rope_dtype": "float32"}, llamacpp={"kept_types": {"router": "bf16"}},
                   sglang={"dp_attention": "deepseek_v4", "fp32_whole": SGLANG_FP32 + _sglang_score_bias(cfg),
                           "freqs_cis": True})
    spec["head"] = {**spec["head"], "hyper": hyper}
    return spec


def _sglang_score_bias(cfg: Config) -> tuple[str, ...]:
    """SGLang's MoEGate builds the score-correction bias only for `topk_method` "noaux_tc" (DeepSeek-V4-Flash's and
    -Pro's configs), whatever transformers registers."""
    return ("router_score_bias",) if cfg.has("topk_method") and cfg.raw("topk_method") == "noaux_tc" else ()


def _hyper(cfg: Config) -> dict[str, Any]:
    """The residual copies and what mixing them reads (DeepseekV4HyperConnection)."""
    return {"streams": cfg.int("hc_mult"), "sinkhorn_iters": cfg.int("hc_sinkhorn_iters"), "eps": cfg.float("hc_eps")}


def _mtp(cfg: Config, n_layers: int, blocks: dict[str, Any], build: Any) -> dict[str, Any]:
    """The checkpoint's `num_nextn_predict_layers` MTP layers (mtp.0.*: not built by transformers, so
    beside the total): a scored MoE layer with the attention `compress_ratios` gives after the stack's
    (sliding: DeepSeek-V4-Flash's 0), with no copies of the embedding and the head."""
    count = cfg.int("num_nextn_predict_layers", default=0)
    if not count:
        return {}
    ratios = cfg.list("compress_ratios") or []
    attention = RATIO_TYPES.get(ratios[n_layers], SLIDING) if len(ratios) > n_layers else SLIDING
    name = SHORT[attention]
    blocks.setdefault(name, build(f"{attention}+moe"))
    return {"mtp": {"n_layers": count, "block": name, "copies": ()}}


def _attention_types(cfg: Config, n_layers: int) -> list[str]:
    """`layer_types`, else the legacy per-layer `compress_ratios`, else DeepseekV4Config's V4-Pro
    default (two HCA layers, then HCA and CSA alternating); the first num_hidden_layers of them."""
    kinds = cfg.list("layer_types")
    ratios = cfg.list("compress_ratios")
    if kinds is None and ratios is not None:
        if any(ratio not in RATIO_TYPES for ratio in ratios):
            raise cfg.error("compress_ratios", f"expected 0, 4 or 128 per layer, got {ratios!r}")
        kinds = [RATIO_TYPES[ratio] for ratio in ratios]
    if kinds is None:
        kinds = [HCA] * min(n_layers, 2) + [CSA if i % 2 else HCA for i in range(max(n_layers - 2, 0))]
    kinds = kinds[:n_layers]
    if len(kinds) != n_layers or set(kinds) - set(SHORT):
        raise cfg.error("layer_types", f"expected {n_layers} of {', '.join(SHORT)} (one per layer), got {kinds!r}")
    return kinds


def _mlp_types(cfg: Config, n_layers: int) -> list[str]:
    """`mlp_layer_types` ("hash_moe" / "moe"), else the first `num_hash_layers` hashed."""
    kinds = cfg.list("mlp_layer_types")
    if kinds is None:
        hashed = min(cfg.int("num_hash_layers"), n_layers)
        kinds = ["hash_moe"] * hashed + ["moe"] * (n_layers - hashed)
    kinds = kinds[:n_layers]
    if len(kinds) != n_layers or set(kinds) - {"hash_moe", "moe"}:
        raise cfg.error("mlp_layer_types", f"expected {n_layers} of hash_moe, moe (one per layer), got {kinds!r}")
    return kinds


def _rates(cfg: Config) -> dict[str, int]:
    """compress_rates, with the legacy compress_rate_csa / compress_rate_hca folded in (__post_init__)."""
    rates = {**RATES, **cfg.dict("compress_rates")}
    for kind, key in ((CSA, "compress_rate_csa"), (HCA, "compress_rate_hca")):
        if cfg.has(key):
            rates[kind] = cfg.int(key)
    return rates


def _rope(cfg: Config, compressed: bool) -> dict[str, Any]:
    """Interleaved rotary on the last qk_rope_head_dim channels: rope_theta on sliding layers;
    compress_rope_theta and the YaRN rope_scaling on compressed ones (a transformers-written
    config nests the two as rope_parameters' "main" and "compress")."""
    head = cfg.int("head_dim")
    factor = cfg.float("partial_rotary_factor", default=None)
    rotary = cfg.int("qk_rope_head_dim") if cfg.has("qk_rope_head_dim") else int(head * (factor or 64 / 512))
    nested = cfg.dict("rope_parameters").get("compress" if compressed else "main")
    nested = nested if isinstance(nested, dict) else {}
    theta = nested.get("rope_theta") or cfg.float("compress_rope_theta" if compressed else "rope_theta")
    scaling = {k: v for k, v in nested.items() if k not in ("rope_theta", "partial_rotary_factor")} or \
        (cfg.dict("rope_scaling") if compressed else {})
    yarn = scaling.get("rope_type", scaling.get("type")) not in (None, "default")
    if yarn:  # DeepseekV4Config.__post_init__: V4 does not scale cos and sin by YaRN's mscale
        scaling = {**scaling, "attention_factor": scaling.get("attention_factor", 1.0)}
    return {"theta": float(theta), "rotary_dim": rotary, "interleaved": True, "scaling": scaling if yarn else None}


def _attention(cfg: Config, kind: str, rms: dict[str, Any]) -> dict[str, Any]:
    compressed = kind != SLIDING
    part = {"kind": "compressed_attention", "n_heads": cfg.int(*KEYS["n_heads"]), "head_dim": cfg.int("head_dim"),
            "q_lora_rank": cfg.int("q_lora_rank"), "o_groups": cfg.int("o_groups"), "o_lora_rank": cfg.int("o_lora_rank"),
            "window": cfg.int("sliding_window"), "norm": rms, "rope": _rope(cfg, compressed)}
    if not compressed:
        return part
    part.update(ratio=_rates(cfg)[kind], overlap=kind == CSA)
    if kind == CSA:
        part["indexer"] = {"n_heads": cfg.int("index_n_heads"), "head_dim": cfg.int("index_head_dim"),
                           "topk": cfg.int("index_topk")}
    return part


def _moe(cfg: Config, hashed: bool) -> dict[str, Any]:
    """DeepseekV4SparseMoeBlock: routed experts, one shared expert as wide, sqrt(softplus) scores
    renormalised and scaled; a token-id table (hash) or the score-correction bias (the rest)."""
    width, limit = cfg.int(*WIDTH), cfg.float("swiglu_limit")
    shared = {"kind": "mlp", "d_ff": width, "gated": True, "activation": "silu", "gate_clamp": limit}
    routing = {"scoring": cfg.raw("scoring_func"), "norm_topk": cfg.bool("norm_topk_prob"),
               "routed_scale": cfg.float("routed_scaling_factor")}
    table = {"hash_vocab": cfg.int("vocab_size")} if hashed else {"score_bias": True}
    return {**experts(cfg, EXPERTS, WIDTH[1], shared=shared, n_shared=1, gate_clamp=limit, **routing, **table),
            "d_ff": width}
