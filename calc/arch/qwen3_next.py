"""Qwen3-Next and Qwen3.5: gated DeltaNet layers with a gated attention layer every few.

`layer_types` names each layer `linear_attention` (a gated DeltaNet, calc.parts.gated_deltanet)
or `full_attention`; without it, every `full_attention_interval`-th layer (4) is attention
(Qwen3NextConfig.__post_init__). The attention is Qwen3's with a sigmoid output gate (q_proj twice
as wide), a head_dim-wide QK-norm, rotary on a quarter of each 256-wide head
(partial_rotary_factor 0.25) and no biases unless `attention_bias`. Every RMSNorm is zero-centred
(weight stored as w, applied as 1 + w). The MLP:
- qwen3_next, qwen3_5_moe_text: Qwen2-MoE's experts with one shared expert behind a sigmoid gate
  (qwen3_next keeps Qwen2-MoE's `mlp_only_layers` / `decoder_sparse_step` rule; Qwen3.5-MoE has
  every layer sparse);
- qwen3_5_text: a dense SwiGLU of `intermediate_size` in every layer.
Qwen3.5 splits the DeltaNet's input projection four ways (in_proj_qkv, _z, _b, _a) where
Qwen3-Next fuses two (in_proj_qkvz, in_proj_ba): the same matrices, other names.
The checkpoint's multi-token-prediction layers (mtp.*, which transformers builds none of): Qwen3.5's config counts
them (`mtp_num_hidden_layers`), Qwen3-Next's does not and its checkpoint holds one (Qwen3-Next-80B-A3B's mtp.layers.0:
vLLM's qwen3_next_mtp.py defaults num_mtp_layers to 1; llama.cpp's converter counts them from the tensors,
conversion/qwen.py:278-352). Each is a full-attention layer with the model's MLP, its input norms
(pre_fc_norm_embedding, pre_fc_norm_hidden), the 2d -> d `fc` and an output `norm`, outside `mtp.layers.N`; no
embedding or head copies (`mtp_use_dedicated_embeddings` false).
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import (KEYS, attention, decoder, gated_mlp, kind_stack, layer_kinds, norm, renamed,
                              sglang_ssm_dtype, with_defaults)
from calc.arch.config import Config
from calc.arch.moe_common import experts
from calc.arch.qwen_moe import _moe_layers

__all__ = ["DEFAULTS", "spec_dict"]

_COMMON = {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2, "max_position_embeddings": 32768,
           "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False, "head_dim": 256,
           "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
           "linear_num_key_heads": 16, "linear_num_value_heads": 32, "full_attention_interval": 4,
           "partial_rotary_factor": 0.25, "rope_theta": 10000.0}
# transformers' config-class defaults (models/<type>/configuration_<type>.py) for the keys read here.
DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_next": {**_COMMON, "vocab_size": 151936, "intermediate_size": 5632, "num_hidden_layers": 48,
                   "decoder_sparse_step": 1, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
                   "num_experts_per_tok": 10, "num_experts": 512, "norm_topk_prob": True},
    "qwen3_5_text": {**_COMMON, "vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288,
                     "num_hidden_layers": 32, "num_key_value_heads": 4},
    "qwen3_5_moe_text": {**_COMMON, "vocab_size": 248320, "num_hidden_layers": 40, "moe_intermediate_size": 512,
                         "shared_expert_intermediate_size": 512, "num_experts_per_tok": 8, "num_experts": 256,
                         "norm_topk_prob": True},
}
KINDS = ("linear_attention", "full_attention")
# vLLM's Qwen3.5 attention layers get_rope with mrope_positions_factor 1, 4 only when video pruning is on
# (vllm/model_executor/models/qwen3_5.py L165, qwen3_vl.py mrope_positions_factor L1818-1825); Qwen3-Next has no M-RoPE.
QWEN3_5 = {"vllm": {"mrope_positions": 1}}
VLLM = {"qwen3_5_text": QWEN3_5, "qwen3_5_moe_text": QWEN3_5}
# How llama.cpp's qwen3next and qwen35 / qwen35moe graphs are built (calc/spec/llamacpp.py): every layer's norm
# expanded first, the output rows taken after the final norm (embeddings_nextn_masked is false by default,
# src/llama-context.cpp:122; src/models/qwen3next.cpp:203-211); Qwen3-Next's fused beta / alpha projection and
# its q and k repeated to the value heads; Qwen3.5's interleaved M-RoPE, 4 positions per token; the MTP layers
# written after the layers unless --no-mtp (conversion/qwen.py:278-352, _QwenMtpMixin)
LLAMACPP = {"ollama_linear_table": True, "gate_in_q": True, "expand_norm": True, "rows_after_norm": True,
            "mtp_written": True}
# The checkpoint's MTP layers where the config does not count them (module docstring)
MTP_LAYERS = {"qwen3_next": 1}
LLAMACPP_BY_TYPE = {"qwen3_next": {**LLAMACPP, "deltanet_ba_fused": True, "deltanet_repeat_qk": True},
                    "qwen3_5_text": {**LLAMACPP, "positions_per_token": 4},
                    "qwen3_5_moe_text": {**LLAMACPP, "positions_per_token": 4}}


def spec_dict(cfg: Config) -> dict[str, Any]:
    model_type = cfg.raw("model_type")
    cfg = with_defaults(renamed(cfg, {"num_local_experts": "num_experts"}), DEFAULTS[model_type])
    rms = norm("rmsnorm", cfg.float("rms_norm_eps"), unit_offset=True)
    mixers = layer_kinds(cfg, lambda i: KINDS[(i + 1) % cfg.int("full_attention_interval") == 0])
    unknown = sorted(set(mixers) - set(KINDS))
    if unknown:
        raise cfg.error("layer_types", f"unknown layer type {unknown[0]!r} (expected {', '.join(KINDS)})")
    sparse = _sparse_layers(cfg, model_type)
    kinds = [f"{mixer}+{'moe' if moe else 'dense'}" for mixer, moe in zip(mixers, sparse)]
    names = {kind: _name(kind, any(sparse)) for kind in kinds}
    blocks, layers = kind_stack(kinds, names, lambda kind: _block(cfg, rms, *kind.split("+")))
    # a GGUF's nextn_predict_layers as its reader states it (calc/checkpoint/gguf_source.py _nextn)
    n_mtp = cfg.int("mtp_num_hidden_layers", "num_nextn_predict_layers", default=MTP_LAYERS.get(model_type, 0))
    mtp_kind = f"full_attention+{'dense' if model_type == 'qwen3_5_text' else 'moe'}"
    mtp_block = names.get(mtp_kind) or _name(mtp_kind, any(sparse))
    if n_mtp:
        blocks.setdefault(mtp_block, _block(cfg, rms, *mtp_kind.split("+")))
    return decoder(cfg, model_type, blocks, layers, rms, cfg.bool("tie_word_embeddings"), **VLLM.get(model_type, {}),
                   **sglang_ssm_dtype(cfg), llamacpp=LLAMACPP_BY_TYPE[model_type],
                   mtp={"n_layers": n_mtp, "block": mtp_block, "copies": ()} if n_mtp else None)


def _sparse_layers(cfg: Config, model_type: str) -> list[bool]:
    """Which layers hold experts: Qwen2-MoE's rule for qwen3_next, all for Qwen3.5-MoE, none for Qwen3.5."""
    if model_type == "qwen3_next":
        return _moe_layers(cfg)
    return [model_type == "qwen3_5_moe_text"] * cfg.int(*KEYS["n_layers"])


def _name(kind: str, sparse: bool) -> str:
    """"deltanet" or "attention", and "_dense" for a dense layer among MoE ones."""
    mixer, mlp = kind.split("+")
    return ("deltanet" if mixer == "linear_attention" else "attention") + ("_dense" if sparse and mlp == "dense" else "")


def _block(cfg: Config, rms: dict[str, Any], mixer: str, mlp: str) -> dict[str, Any]:
    return {"attention": _deltanet(cfg) if mixer == "linear_attention" else _attention(cfg, rms),
            "mlp": _moe(cfg) if mlp == "moe" else gated_mlp(cfg, bias=False), "norm": rms}


def _attention(cfg: Config, rms: dict[str, Any]) -> dict[str, Any]:
    """Qwen3's attention with the output gate q_proj also emits (its bias, if any, covers the gate too)."""
    return attention(cfg, output_gate=True, gate_in_q=True, gate_bias=cfg.bool("attention_bias"),
                     qk_norm={"norm": rms, "scope": "head"})


def _deltanet(cfg: Config) -> dict[str, Any]:
    """Qwen3.5's configs keep the recurrent state in `mamba_ssm_dtype` (float32); Qwen3-Next's say nothing."""
    fp32 = cfg.raw("mamba_ssm_dtype", default=None) == "float32"
    return {"kind": "gated_deltanet", "state_dtype": "fp32" if fp32 else "model", "n_k_heads": cfg.int("linear_num_key_heads"),
            "n_v_heads": cfg.int("linear_num_value_heads"), "k_head_dim": cfg.int("linear_key_head_dim"),
            "v_head_dim": cfg.int("linear_value_head_dim"), "conv_kernel": cfg.int("linear_conv_kernel_dim")}


def _moe(cfg: Config) -> dict[str, Any]:
    return experts(cfg, ("num_experts",), "moe_intermediate_size", norm_topk=cfg.bool("norm_topk_prob"),
                   shared=gated_mlp(cfg, "shared_expert_intermediate_size", bias=False), n_shared=1,
                   shared_gate=True)
