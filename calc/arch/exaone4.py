"""EXAONE 4.0 (model_type exaone4) and K-EXAONE (exaone_moe): Qwen-3's QK-norm, hybrid attention.

Exaone4DecoderLayer normalises outputs, not inputs: an RMSNorm on attention's and the MLP's outputs
before each residual add (post_attention_layernorm, post_feedforward_layernorm). Attention is GQA
without biases, with a head_dim-wide RMSNorm on queries and one on keys (q_norm, k_norm). Layers
are local (sliding window, rotary) or global (full attention and, when the model has a window at
all, no rotary: "global NoPE"), as `layer_types` says or, without it, every `sliding_window_pattern`-th
layer global. The MLP is SwiGLU without biases; the head is untied unless `tie_word_embeddings`.

exaone_moe keeps that attention but normalises inputs (input_layernorm, post_attention_layernorm,
OLMoE's decoder layer), and each layer's MLP is dense or sparse as `mlp_layer_types` says (by default
the first `first_k_dense_replace` dense): a sparse one is `num_experts` SwiGLU experts of
`moe_intermediate_size`, a shared SwiGLU `num_shared_experts` times as wide and DeepSeek-V3's grouped
sigmoid router with its e_score_correction_bias buffer (stored, not counted). The checkpoints' MTP
layers are ignored on load (_keys_to_ignore_on_load_unexpected), and not counted.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (LLAMA_CLASS, LLAMA_CLASS_NO_WINDOW, attention, attention_kinds, decoder, gated_mlp,
                              kind_stack, layer_kinds, layer_runs, norm, renamed, with_defaults)
from calc.arch.config import Config
from calc.arch.moe_common import deepseek_moe, grouped_sigmoid

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' Exaone4Config defaults (models/exaone4/configuration_exaone4.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "exaone4": {"vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 2048,
                "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "sliding_window": 4096,
                "sliding_window_pattern": 4, "rope_theta": 10000.0},
}
# ExaoneMoeConfig: Exaone4Config's keys and defaults, and its MoE's.
DEFAULTS["exaone_moe"] = {**DEFAULTS["exaone4"], "first_k_dense_replace": 1, "moe_intermediate_size": 1024,
                          "num_experts": 64, "num_experts_per_tok": 8, "num_shared_experts": 1, "norm_topk_prob": True,
                          "routed_scaling_factor": 2.5, "n_group": 1, "topk_group": 1}
BLOCK_NAMES = {"sliding_attention": "local", "full_attention": "global"}
# llama.cpp's converter writes a Llama-3 rope's factors as rope_freqs.weight, as LlamaModel does, so both model types
# are built as LLAMA_CLASS says (Exaone4Model.generate_extra_tensors, conversion/exaone.py:98-125; ExaoneMoEModel is
# its subclass)
MLP_KINDS = ("dense", "sparse")


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(cfg, DEFAULTS[model_type])
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"))
    window = cfg.int("sliding_window", default=None)
    attn_kinds = _kinds(cfg, window)
    if model_type == "exaone4":
        blocks, layers = kind_stack(attn_kinds, BLOCK_NAMES, lambda kind: _block(cfg, rms, kind, window))
        # llama.cpp slides a window only in the 64-layer model (EXAONE-4.0-32B); others keep every cell in every
        # layer, whatever their GGUF says (src/models/exaone4.cpp:3-14)
        return decoder(cfg, model_type, blocks, layers, rms, cfg.bool("tie_word_embeddings"),
                       **(LLAMA_CLASS if cfg.int("num_hidden_layers") == 64 else LLAMA_CLASS_NO_WINDOW))
    kinds = list(zip(attn_kinds, _mlp_kinds(cfg)))
    names = {kind: f"{BLOCK_NAMES[kind[0]]}_{'moe' if kind[1] == 'sparse' else 'dense'}" for kind in kinds}
    blocks = {names[kind]: _moe_block(cfg, rms, kind, window) for kind in dict.fromkeys(kinds)}
    return decoder(cfg, model_type, blocks, layer_runs([names[kind] for kind in kinds]), rms,
                   cfg.bool("tie_word_embeddings"), **LLAMA_CLASS)


def _kinds(cfg: Config, window: int | None) -> list[str]:
    """`layer_types`, else what Exaone4Config fills in: no window, every layer global; else every
    `sliding_window_pattern`-th layer global. A string pattern ("LLLG") it cannot expand without
    `layer_types` (it raises a TypeError), so neither do we."""
    if window is None or cfg.has("layer_types"):
        return attention_kinds(cfg, lambda i: "full_attention")
    pattern = cfg.raw("sliding_window_pattern")
    if isinstance(pattern, str):
        raise cfg.error("sliding_window_pattern", f"{pattern!r} needs layer_types beside it "
                        "(transformers' Exaone4Config cannot expand a string pattern)")
    period = cfg.int("sliding_window_pattern")
    return attention_kinds(cfg, lambda i: "sliding_attention" if (i + 1) % period else "full_attention")


def _block(cfg: Config, rms: dict[str, Any], kind: str, window: int | None) -> dict[str, Any]:
    attn = attention(cfg, q_bias=False, k_bias=False, v_bias=False, o_bias=False,
                     qk_norm={"norm": rms, "scope": "head"})
    if kind == "sliding_attention":
        attn["window"] = window
    elif window is not None:
        attn["rope"] = None  # global NoPE: Exaone4Attention rotates only local layers of a hybrid model
    return {"attention": attn, "mlp": gated_mlp(cfg, bias=False), "norm": rms, "norms": ("attn_out", "mlp_out")}


def _mlp_kinds(cfg: Config) -> list[str]:
    """`mlp_layer_types`, else ExaoneMoeConfig's: the first `first_k_dense_replace` layers dense, then sparse."""
    dense = cfg.int("first_k_dense_replace")
    kinds = layer_kinds(cfg.replace({**cfg.data, "layer_types": cfg.list("mlp_layer_types")}),
                        lambda i: "dense" if i < dense else "sparse")
    unknown = sorted(set(kinds) - set(MLP_KINDS))
    if unknown:
        raise cfg.error("mlp_layer_types", f"unknown MLP type {unknown[0]!r} (expected {', '.join(MLP_KINDS)})")
    return kinds


def _moe_block(cfg: Config, rms: dict[str, Any], kind: tuple[str, str], window: int | None) -> dict[str, Any]:
    """ExaoneMoeDecoderLayer: Exaone-4's attention, pre-norm, a dense or sparse MLP."""
    block = {**_block(cfg, rms, kind[0], window), "norms": ("attn_in", "mlp_in")}
    if kind[1] == "sparse":
        moe_cfg = renamed(cfg, {"num_experts": "n_routed_experts", "num_shared_experts": "n_shared_experts"})
        block["mlp"] = deepseek_moe(moe_cfg, score_bias=True, **grouped_sigmoid(moe_cfg))
    return block
