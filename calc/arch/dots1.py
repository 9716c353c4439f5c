"""dots.llm1 (model_type dots1): DeepSeek-V3's MoE stack with Qwen-3's attention.

Pre-norm RMSNorm blocks. Attention is Qwen3Attention: GQA with `attention_bias` on Q, K, V and O and a
head_dim-wide RMSNorm on queries and keys; the layers `layer_types` marks sliding (by default those
from `max_window_layers` on, when there is a `sliding_window`) see the last `sliding_window` keys.
The first `first_k_dense_replace` layers have a dense SwiGLU of `intermediate_size`; the rest a MoE
of `n_routed_experts` experts of `moe_intermediate_size`, one shared MLP `n_shared_experts` times as
wide, and DeepSeek-V3's grouped sigmoid router with its e_score_correction_bias buffer (stored,
shown, not counted). The released config leaves n_group and topk_group null, which transformers'
router cannot run; they are read as 1 (no grouping), which is what that config means. No MTP layers.
Head untied unless `tie_word_embeddings`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (TRANSFORMERS_BACKEND, attention, attention_kinds, decoder, gated_mlp, layer_runs, norm,
                               with_defaults)
from calc.arch.config import Config
from calc.arch.moe_common import deepseek_moe, grouped_sigmoid

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Dots1Config defaults (models/dots1/configuration_dots1.py) for the keys read here.
DEFAULTS = {"vocab_size": 152064, "hidden_size": 4608, "intermediate_size": 10944, "moe_intermediate_size": 1408,
            "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 32, "n_group": 1,
            "topk_group": 1, "first_k_dense_replace": 0, "norm_topk_prob": False, "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False,
            "routed_scaling_factor": 1.0, "sliding_window": 4096, "max_window_layers": 62, "rope_theta": 10000.0}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    ungrouped = {key: 1 for key in ("n_group", "topk_group") if cfg.data.get(key) is None}
    cfg = cfg.replace({**cfg.data, **ungrouped})
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    mlps = {"dense": gated_mlp(cfg, bias=False), "moe": deepseek_moe(cfg, score_bias=True, **grouped_sigmoid(cfg))}
    window = cfg.int("sliding_window", default=None)
    dense = cfg.int("first_k_dense_replace")
    kinds = [("dense" if i < dense else "moe", kind) for i, kind in enumerate(_attention_kinds(cfg, window))]
    names = {kind: kind[0] + ("_sliding" if kind[1] == "sliding_attention" else "") for kind in kinds}
    blocks = {names[kind]: _block(cfg, rms, mlps[kind[0]], window if kind[1] == "sliding_attention" else None)
              for kind in dict.fromkeys(kinds)}
    # vLLM 0.32 has no Dots1ForCausalLM of its own any more (vllm/model_executor/models/registry.py L817, until 0.23.0):
    # resolve_model_cls falls back to the Transformers backend, whose check transformers' Dots1ForCausalLM
    # passes (_supports_attention_backend)
    return decoder(cfg, "dots1", blocks, layer_runs([names[kind] for kind in kinds]), rms,
                   cfg.bool("tie_word_embeddings"), **TRANSFORMERS_BACKEND)


def _attention_kinds(cfg: Config, window: int | None) -> list[str]:
    """`layer_types`, else Dots1Config's rule: sliding from max_window_layers on, when there is a window."""
    start = cfg.int("max_window_layers", default=None)
    return attention_kinds(cfg, lambda i: "sliding_attention" if window is not None and start is not None
                           and i >= start else "full_attention")


def _block(cfg: Config, rms: dict[str, Any], mlp: dict[str, Any], window: int | None) -> dict[str, Any]:
    attn = attention(cfg, qk_norm={"norm": rms, "scope": "head"}, window=window)
    return {"attention": attn, "mlp": mlp, "norm": rms}
