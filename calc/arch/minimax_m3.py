"""MiniMax-M3's language model (model_type minimax_m3_vl_text, the text_config of minimax_m3_vl).

Read off transformers 5.24 (models/minimax_m3_vl/modular_minimax_m3_vl.py):
- every layer: Gemma-style RMSNorms (scale stored as w, applied as 1 + w) before attention and MLP;
  GQA attention without biases, a per-head Gemma RMSNorm on queries and keys, rotary on
  partial_rotary_factor of each head;
- "minimax_m3_sparse" layers add a lightning indexer (calc.parts.block_indexer) that picks the key
  blocks each head group reads; the released config says which in its sparse_attention_config
  (sparse_attention_freq, and index sizes under sparse_* names), read here as
  MiniMaxM3VLTextConfig.__post_init__ reads it into layer_types and index_*;
- "dense" layers: one SwiGLU-OAI MLP of dense_intermediate_size (fused gate_up); "sparse" layers: a
  sigmoid router with a score-correction buffer over num_local_experts experts of intermediate_size,
  top num_experts_per_tok renormalised and scaled by routed_scaling_factor, plus one shared expert of
  shared_intermediate_size; moe_layer_freq (1 MoE, 0 dense) is read into mlp_layer_types the same way.
  The SwiGLU-OAI gate (gate·sigmoid(alpha·gate)·(up + 1), both clamped at swiglu_limit) changes the
  computation, not the weights.
The config's num_mtp_modules multi-token-prediction modules, which transformers does not build
(_keys_to_ignore_on_load_unexpected "mtp.*"), are counted as MTP rows (calc.spec.model.MTP) as vLLM's
minimax_m3_mtp drafter builds them (vllm/models/minimax_m3/nvidia/mtp.py): enorm, hnorm, a bias-free
2d -> d eh_proj, a decoder layer forced to sparse attention and MoE (`transformer_layer`) and a
final_layernorm, the embedding and head shared with the model (no copies). The released checkpoints hold
none of them (MiniMaxAI/MiniMax-M3's tensor list: 427,040,140,160 parameters, the model and its router
biases; tests/configs/model_types/SOURCES.yaml), so they are `stored: False`: shown apart, in no total;
a checkpoint that bundles them (language_model.model.mtp.layers.N.*) is still read whole.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, attention, decoder, layer_runs, norm, with_defaults
from calc.arch.config import Config
from calc.arch.moe_common import experts, mlp_layer_types

__all__ = ["DEFAULTS", "spec_dict"]

# MiniMaxM3VLTextConfig's defaults (models/minimax_m3_vl/configuration_minimax_m3_vl.py) for the keys read here.
DEFAULTS = {"vocab_size": 200064, "hidden_size": 6144, "intermediate_size": 3072, "num_hidden_layers": 60,
            "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "max_position_embeddings": 524288,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "num_local_experts": 128, "num_experts_per_tok": 4,
            "dense_intermediate_size": 12288, "shared_intermediate_size": 3072, "routed_scaling_factor": 2.0,
            "swiglu_limit": 7.0, "index_n_heads": 4, "index_head_dim": 128, "index_block_size": 128,
            "index_topk_blocks": 16, "index_local_blocks": 1, "rope_theta": 5_000_000.0}
# sparse_attention_config's names for the index_* keys (MiniMaxM3VLTextConfig.__post_init__).
SPARSE_KEYS = {"index_n_heads": "sparse_num_index_heads", "index_head_dim": "sparse_index_dim",
               "index_block_size": "sparse_block_size", "index_topk_blocks": "sparse_topk_blocks",
               "index_local_blocks": "sparse_local_block"}
SWIGLU_ALPHA = 1.702
ATTENTION_TYPES = ("full_attention", "minimax_m3_sparse")
BLOCK_NAMES = {"full_attention": "attention", "minimax_m3_sparse": "indexed"}  # + "_dense" / "_sparse" (the MLP)
MTP_KIND = ("minimax_m3_sparse", "sparse")  # vLLM builds each MTP layer with force_sparse_attn and force_moe


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(_flattened(cfg), DEFAULTS)
    gemma = norm("rmsnorm", cfg.float("rms_norm_eps"), unit_offset=True)
    attn = attention(cfg, q_bias=False, k_bias=False, v_bias=False, o_bias=False,
                     qk_norm={"norm": gemma, "scope": "head"})
    indexer = {"n_heads": cfg.int("index_n_heads"), "head_dim": cfg.int("index_head_dim"),
               "block_size": cfg.int("index_block_size"), "topk_blocks": cfg.int("index_topk_blocks"),
               "local_blocks": cfg.int("index_local_blocks"), "norm": gemma}
    attentions = {"full_attention": attn, "minimax_m3_sparse": {**attn, "indexer": indexer}}
    limit = _swiglu_limit(cfg)
    shared = {"d_ff": cfg.int("shared_intermediate_size"), "gated": True, "fused_gate_up": True, "swiglu_limit": limit}
    mlps = {"dense": {**shared, "d_ff": cfg.int("dense_intermediate_size")},
            "sparse": experts(cfg, ("num_local_experts",), "intermediate_size", scoring="sigmoid", score_bias=True,
                              routed_scale=cfg.float("routed_scaling_factor"), swiglu_limit=limit,
                              shared=shared, n_shared=1)}
    kinds = list(zip(_attention_types(cfg), mlp_layer_types(cfg, dense=0), strict=True))
    modules = _mtp_modules(cfg)
    blocks = {_name(kind): {"attention": attentions[kind[0]], "mlp": mlps[kind[1]], "norm": gemma}
              for kind in kinds + [MTP_KIND] * bool(modules)}
    mtp = {"n_layers": modules, "block": _name(MTP_KIND), "copies": (), "stored": False} if modules else None
    return decoder(cfg, "minimax_m3_vl_text", blocks, layer_runs([_name(kind) for kind in kinds]), gemma,
                   cfg.bool("tie_word_embeddings"), mtp=mtp)


def _name(kind: tuple[str, str]) -> str:
    """A block's name: its attention's, then its MLP's (indexed_sparse, attention_dense, ...)."""
    return f"{BLOCK_NAMES[kind[0]]}_{kind[1]}"


def _mtp_modules(cfg: Config) -> int:
    """num_mtp_modules (left out: none; transformers' config class has no such key)."""
    modules = cfg.int("num_mtp_modules", default=0)
    if modules < 0:
        raise cfg.error("num_mtp_modules", f"expected 0 or more MTP modules, got {modules}")
    return modules


def _swiglu_limit(cfg: Config) -> float:
    """The SwiGLU-OAI clamp; its sigmoid gain is the released 1.702 (gpt-oss's), the only one modelled."""
    alpha = cfg.float("swiglu_alpha", default=SWIGLU_ALPHA)
    if alpha != SWIGLU_ALPHA:
        raise cfg.error("swiglu_alpha", f"{alpha:g}: only the released {SWIGLU_ALPHA} is modelled")
    return cfg.float("swiglu_limit")


def _flattened(cfg: Config) -> Config:
    """The released config's sparse_attention_config and moe_layer_freq as the flat keys transformers
    reads (layer_types, mlp_layer_types, index_*), where the config does not give those itself."""
    sparse = cfg.dict("sparse_attention_config")
    data = dict(cfg.data)
    for flat, legacy in SPARSE_KEYS.items():
        if legacy in sparse:
            data[flat] = sparse[legacy]
    for key, flags, kinds in (("layer_types", sparse.get("sparse_attention_freq"), ATTENTION_TYPES),
                              ("mlp_layer_types", data.get("moe_layer_freq"), ("dense", "sparse"))):
        if data.get(key) is None and flags is not None:
            if not isinstance(flags, list) or any(f not in (0, 1) or isinstance(f, bool) for f in flags):
                raise cfg.error(key, f"expected a list of 0 and 1 (one per layer) to read it from, got {flags!r}")
            data[key] = [kinds[f] for f in flags]
    return cfg.replace(data)


def _attention_types(cfg: Config) -> list[str]:
    """Each layer's attention: `layer_types` (full_attention or minimax_m3_sparse), all full when left out."""
    n_layers = cfg.int(*KEYS["n_layers"])
    kinds = cfg.list("layer_types") or ["full_attention"] * n_layers
    if len(kinds) != n_layers or not set(kinds) <= set(ATTENTION_TYPES):
        raise cfg.error("layer_types", f"expected {n_layers} of {', '.join(ATTENTION_TYPES)}, got {kinds!r}")
    return kinds
