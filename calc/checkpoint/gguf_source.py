"""A GGUF file (or a split set, `-00001-of-0000N.gguf`) as a `RawCheckpoint`: config from its metadata,
tensors under the Hugging Face names the rest of gptcalc reads.

Two translations, both tables:

- metadata -> config.json: `ARCHS` maps llama.cpp's `general.architecture` to a model_type, and
  `KEYS` its hyperparameter keys (`{arch}.embedding_length`, ... as src/llama-arch.cpp's LLM_KV
  names them) to the config's; what GGUF keeps only in tensors (vocabulary size, tied head, biases)
  is read off the tensor list; the recurrent and hybrid architectures' own keys and layer kinds are
  calc/checkpoint/gguf_recurrent.py's.
- tensor names: llama.cpp's converter renames every Hugging Face tensor with gguf-py's
  `TensorNameMap` (the architecture's table, src/llama-arch.cpp's LLM_TENSOR_NAMES). We run it on
  every name the spec implies (`calc.checkpoint.names`) and invert it, so a GGUF name is recognised
  exactly when llama.cpp's table gives it to a tensor of the spec. Two tensors the converter splits
  are joined back: routed experts' `ffn_gate_exps` + `ffn_up_exps` (transformers 5 fuses them as
  `gate_up_proj`) and MLA's `attn_k_b` + `attn_v_b` (`kv_b_proj`, split for the absorbed attention).
  An architecture gguf-py's tables lack (`deepseek4`, `laguna`) brings both tables of its own (`OWN`).

Shapes are ggml's `ne` reversed (ggml's row is its first dimension); ggml drops or adds unit
dimensions (a depthwise conv1d's middle 1), so a shape equal to the spec's but for 1s is the spec's.
Bytes are exact per ggml type (blocks of `GGML_QUANT_SIZES`), and the dtype column is the ggml type.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any, Callable

from calc.checkpoint import (gguf_deepseek4, gguf_gemma4, gguf_laguna, gguf_minimax01, gguf_minimax_m3, gguf_mimo2,
                             gguf_step35)
from calc.checkpoint.gguf_header import GGUFArray, GGUFHeader, GGUFTensor, read_gguf
from calc.checkpoint.gguf_own_names import gguf_name_in
from calc.checkpoint.gguf_tables import tables
from calc.checkpoint.tensors import FileRead, RawCheckpoint, TensorColumns
from calc.errors import GptcalcError
from calc.spec import hf

__all__ = ["ARCHS", "config_of", "from_gguf", "gguf_config", "names_for", "read_split", "uniform"]

# general.architecture -> model_type (and, for deepseek2, which of two by its gating function).
ARCHS = {
    "llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe",
    "gemma3": "gemma3_text", "gemma2": "gemma2", "deepseek2": "deepseek_v2", "mistral3": "ministral3",
    "olmo2": "olmo2", "phi3": "phi3", "starcoder2": "starcoder2", "smollm3": "smollm3",
    "lfm2": "lfm2", "gemma": "gemma", "glm4": "glm4", "exaone4": "exaone4", "stablelm": "stablelm", "phi2": "phi",
    "granite": "granite", "gpt-oss": "gpt_oss", "olmoe": "olmoe", "phimoe": "phimoe", "cohere2": "cohere2",
    "glm4moe": "glm4_moe", "olmo": "olmo", "command-r": "cohere", "hunyuan-dense": "hunyuan_v1_dense",
    "arcee": "arcee", "seed_oss": "seed_oss", "ernie4_5": "ernie4_5", "gpt2": "gpt2", "gptneox": "gpt_neox",
    "falcon": "falcon", "starcoder": "gpt_bigcode", "bloom": "bloom", "llama4": "llama4_text", "dots1": "dots1",
    "minimax-m2": "minimax_m2", "exaone-moe": "exaone_moe", "granitemoe": "granitemoe", "apertus": "apertus",
    "dbrx": "dbrx", "ernie4_5-moe": "ernie4_5_moe", "hunyuan-moe": "hunyuan_v1_moe", "afmoe": "afmoe", "mpt": "mpt",
    "glm-dsa": "glm_moe_dsa", "deepseek32": "deepseek_v32",
    "lfm2": "lfm2", "mamba": "mamba", "mamba2": "mamba2", "granitehybrid": "granitemoehybrid",
    "nemotron_h": "nemotron_h", "nemotron_h_moe": "nemotron_h", "qwen3next": "qwen3_next", "qwen35": "qwen3_5_text",
    "qwen35moe": "qwen3_5_moe_text", "lfm2moe": "lfm2_moe", "jamba": "jamba",
    "falcon-h1": "falcon_h1", "kimi-linear": "kimi_linear",
    "gemma3n": "gemma3n_text", "gemma4": "gemma4_text", gguf_mimo2.ARCH: "mimo_v2_flash", gguf_step35.ARCH: "step3p5",
    # Qwen3-VL's (-MoE's) text model, whose layers are Qwen3's (-MoE's) (calc/arch/config.py TEXT_AS), with M-RoPE
    # and deepstack inputs (conversion/qwen3vl.py Qwen3VLTextModel, Qwen3VLMoeTextModel: gguf_own_keys.py)
    "qwen3vl": "qwen3", "qwen3vlmoe": "qwen3_moe",
}
# One architecture, two model_types, told apart by a key only one of them writes: Olmo3ForCausalLM converts as
# olmo2 with a sliding window (conversion/olmo.py:49-66), MixtralForCausalLM as llama with experts (llama.py:17-30).
VARIANTS = {"olmo2": ("attention.sliding_window", "olmo3"), "llama": ("expert_count", "mixtral")}
# Hybrids: the converter marks the layers without attention by head_count_kv 0 (conversion/lfm2.py
# set_gguf_parameters); config.json names them in layer_types: (no attention, attention).
LAYER_TYPES = {"lfm2": ("conv", "full_attention"), "lfm2moe": ("conv", "full_attention"),
               "granitehybrid": ("linear_attention", "full_attention"),
               "kimi-linear": ("linear_attention", "full_attention")}
# config.json flags GGUF keeps only as tensors: set when any layer stores the bias.
BIASES = {"attention_bias": (".attn_q.bias", ".attn_qkv.bias"), "use_qkv_bias": (".attn_q.bias",),
          "mlp_bias": (".ffn_up.bias",), "conv_bias": (".shortconv.conv.bias",), "lm_head_bias": ("output.bias",),
          "use_qk_norm": (".attn_q_norm.weight",)}
# The expert count under each name config.json gives it (Qwen's, Mixtral's and PhiMoE's, DeepSeek's and GLM's).
EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")
SIGMOID = 2  # LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID: DeepSeek-V3's router
# Architectures whose attention is MLA as DeepseekV2Model writes it (GLM-5's DSA: conversion/glm.py:318)
MLA = ("deepseek2", "glm-dsa", "deepseek32")
# An architecture gguf-py 0.19.0 lacks whose tensors another's table names: DeepSeek-V3.2's, named as GLM-5 DSA's
# (the same MLA, MoE and indexer tensors: llama.cpp's one name per tensor kind, LLM_TENSOR_NAMES in
# src/llama-arch.cpp:444-709, and the llama.cpp tree's gguf-py/gguf/constants.py:3984, MODEL_ARCH.DEEPSEEK32's list)
NAMED_AS = {"deepseek32": "glm-dsa"}
# {arch}.KEY -> config.json key (src/llama-arch.cpp LLM_KV_NAMES).
KEYS = {
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.layer_norm_epsilon": "layer_norm_eps",
    "attention.sliding_window": "sliding_window",
    "rope.freq_base": "rope_theta",
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_shared_feed_forward_length": "shared_expert_intermediate_size",
    "expert_shared_count": "n_shared_experts",
    "leading_dense_block_count": "first_k_dense_replace",
    "expert_weights_scale": "routed_scaling_factor",
    "expert_weights_norm": "norm_topk_prob",
    "attention.q_lora_rank": "q_lora_rank",
    "attention.kv_lora_rank": "kv_lora_rank",
    "attention.value_length_mla": "v_head_dim",
    "shortconv.l_cache": "conv_L_cache",
}
# Keys an architecture's converter writes from other config.json keys: Llama4Model's widths swapped
# (conversion/llama.py:383-395).
ARCH_KEYS = {"llama4": {"feed_forward_length": "intermediate_size_mlp", "expert_feed_forward_length": "intermediate_size",
                        "interleave_moe_layer_step": "interleave_moe_layer_step"}}
# What llama.cpp assumes of an architecture whatever its file says, unless the file's sliding_window is 0: llama4's
# chunked attention over 8192 tokens (src/models/llama4.cpp:8-19).
ASSUMED = {"llama4": {"attention_chunk_size": 8192},
           # afmoe's every 4th layer global, the others sliding (src/models/afmoe.cpp:13-17: load_swa_pattern(ml, 4))
           "afmoe": {"global_attn_every_n_layers": 4}}
# The converter's renames before its name table (conversion/base.py:593; conversion/mamba.py Mamba2Model.filter_tensors;
# conversion/lfm2.py LFM2MoeModel.filter_tensors; conversion/nemotron.py:494, Nemotron-H's experts stacked under
# Mixtral's name), as regular expressions
RENAMES = ((r"e_score_correction_bias", "e_score_correction.bias"), (r"\.dt_bias$", ".dt_proj.bias"),
           (r"\.expert_bias$", ".expert_bias.bias"),
           (r"^backbone\.layers\.(\d+)\.mixer\.experts\.(\w+)$", r"model.layers.\1.mlp.experts.\2.weight"))
# Tensors the converter reshapes, their values unchanged: Mamba2's gated norm as (n_groups, d_inner / n_groups)
# (Mamba2Model.modify_tensors)
RESHAPED = (".ssm_norm.weight",)
# and an architecture's: DBRX's experts, (experts x width, n_embd) in its checkpoint, viewed as (experts, width,
# n_embd), the down projection's last two dimensions swapped (conversion/dbrx.py DbrxModel.modify_tensors)
ARCH_RESHAPED = {"dbrx": ("_exps.weight",)}
# Tensors a converter class splits itself, by their checkpoint (Hub) names: Granite's fused gate and up, of the
# routed experts and of the shared MLP, or of the MLP without experts (conversion/granite.py GraniteMoeModel,
# whose shared_mlp.output_linear is ffn_down without experts); Qwen3-Next's DeltaNet q, k, v and z projection
# (conversion/qwen.py:405-433: q, k, v reordered into attn_qkv, z into attn_gate)
CONVERTER_SPLITS = {"linear_attn.in_proj_qkvz.weight": ("attn_qkv.weight", "attn_gate.weight"),
                    "block_sparse_moe.input_linear.weight": ("ffn_gate_exps.weight", "ffn_up_exps.weight"),
                    "shared_mlp.input_linear.weight": ("ffn_gate_shexp.weight", "ffn_up_shexp.weight",
                                                       "ffn_gate.weight", "ffn_up.weight"),
                    "shared_mlp.output_linear.weight": ("ffn_down.weight",)}
# The converter's splits: a Hugging Face tensor -> the parts it writes instead (conversion/qwen.py,
# llama.py: fused experts; conversion/deepseek.py:433: MLA's kv_b, for the absorbed attention).
SPLITS = {"gate_up_proj": ("gate_proj", "up_proj"), "kv_b_proj": ("k_b_proj", "v_b_proj")}
# Architectures whose per-layer metadata (head counts, window pattern, widths) and router tensors give config.json's
# layer lists, read before `KEYS` (the value a list's layers would not agree on)
LAYERS = {gguf_mimo2.ARCH: gguf_mimo2.layers, gguf_step35.ARCH: gguf_step35.layers, gguf_gemma4.ARCH: gguf_gemma4.layers}
# Architectures gguf-py's tables do not cover (calc/checkpoint/gguf_deepseek4.py, gguf_laguna.py, gguf_minimax_m3.py,
# gguf_minimax01.py):
# their config and tensor names.
OWN = {gguf_deepseek4.ARCH: (gguf_deepseek4.read_config, gguf_deepseek4.gguf_name),
       gguf_laguna.ARCH: (gguf_laguna.read_config, gguf_laguna.gguf_name),
       gguf_minimax_m3.ARCH: (gguf_minimax_m3.read_config, gguf_minimax_m3.gguf_name),
       gguf_minimax01.ARCH: (gguf_minimax01.read_config, gguf_minimax01.gguf_name)}
OWN_TYPES = {own.ARCH: own.MODEL_TYPE for own in (gguf_deepseek4, gguf_laguna, gguf_minimax_m3, gguf_minimax01)}
# A model_type llama.cpp's converter writes as another's architecture, whose .gguf reads back as that one's
# model_type (so not in `ARCHS` or `OWN_TYPES`): MiniMax-M1's own config.json (MiniMaxM1ForCausalLM, registered with
# MiniMaxText01ForCausalLM: conversion/minimax.py:13-14) as minimax-01, which reads back as MiniMax; BambaForCausalLM
# as granitehybrid (conversion/granite.py GraniteHybridModel), FalconMambaForCausalLM as mamba (conversion/mamba.py
# MambaModel)
CONVERTED_AS = {"minimax_m1": gguf_minimax01.ARCH, "bamba": "granitehybrid", "falcon_mamba": "mamba"}
# Tensors a converter stores transposed (the last two dimensions swapped): gpt-oss's and Llama 4's routed experts'
# down projection, (experts, in, out) in transformers (conversion/gpt_oss.py modify_tensors).
TRANSPOSED = {"gpt-oss": (".experts.down_proj",), "llama4": (".experts.down_proj",),  # llama.py:411-413
              # and GPT-2's Conv1D weights, (in, out) (gpt2.py:32-33)
              "gpt2": (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")}
# Per-layer weights a converter writes as metadata arrays, not tensors: Apertus's xIELU activation's alpha_p and
# alpha_n (parameters of shape (1,)) and beta and eps (buffers of shape ()): conversion/llama.py:442-466
# ApertusModel.modify_tensors; llama.cpp reads them as hyperparameters (src/llama-model.cpp LLM_KV_XIELU_*)
_XIELU = "model.layers.{}.mlp.act_fn."
IN_METADATA = {"apertus": {"xielu.alpha_p": (_XIELU + "alpha_p", (1,)), "xielu.alpha_n": (_XIELU + "alpha_n", (1,)),
                           "xielu.beta": (_XIELU + "beta", ()), "xielu.eps": (_XIELU + "eps", ())}}
# Tensors a converter stacks along a new last ggml dimension, and the transformers tensors they are, one a slice:
# Gemma 3n's AltUp projections (conversion/gemma.py Gemma3NModel._stack_matrices)
STACKED = {"gemma3n": {"altup_proj.weight": "model.altup_projections.{}.weight",
                       "altup_unembd_proj.weight": "model.altup_unembed_projections.{}.weight"}}
# Tensors a converter class names itself, past its architecture's table (after `model.layers.{i}.`, without
# .weight): Gemma 4's router scales (conversion/gemma.py:800-806)
ARCH_NAMES = {"gemma4": {"router.scale": "ffn_gate_inp.scale", "router.per_expert_scale": "ffn_down_exps.scale"}}
# A prefix a converter drops from every name before the architecture's table (conversion/bloom.py:40).
DROPPED = {"bloom": "transformer."}
SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def from_gguf(path: Path, source: str) -> RawCheckpoint:
    """One GGUF file, or every file of its split set; tensors under Hugging Face names."""
    headers, config = _read(path)
    from calc.checkpoint.names import tensor_table
    from calc.spec.load import spec_from_config

    spec = spec_from_config(config)
    arch = headers[0].architecture
    table = tensor_table(spec)
    shapes = table.expected_shapes(buffers=True, mtp=True)
    names = _hf_names(table, shapes, arch, spec.n_layers + (spec.mtp.n_layers if spec.mtp else 0))
    stored = [(piece, h.path) for h in headers for t in h.tensors for piece in _unstacked(t, arch, names, shapes)]
    columns = _columns(stored, names, TRANSPOSED.get(arch, ()), RESHAPED + ARCH_RESHAPED.get(arch, ()))
    columns.extend(_in_metadata(headers[0], spec.n_layers))
    files = tuple(FileRead(h.path, h.file_size, h.bytes_read) for h in headers)
    return RawCheckpoint(source, _kind(headers), columns, files, config, loads_buffers=True)


def names_for(spec: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    """GGUF name -> (transformers name, shape) of every tensor llama.cpp's converter would write for this spec, by the table
    this reader recognises a .gguf's tensors with, under the first architecture whose model_type is the spec's
    (`ARCHS`, then the ones with tables of their own, `OWN`; `CONVERTED_AS` the spec's where it converts as
    another's); {} where none is; a tensor the converter stacks (`STACKED`) under its first slice, the slices'
    count first in its shape. What gguf_table.py names a config's tensors by, so the two never disagree."""
    from calc.checkpoint.names import tensor_table

    arch = CONVERTED_AS.get(spec.model_type) or next((a for a, t in {**ARCHS, **OWN_TYPES}.items()
                                                      if t == spec.model_type), None)
    if arch is None:
        return {}
    table = tensor_table(spec)
    shapes = table.expected_shapes(buffers=True)
    found = _hf_names(table, shapes, arch, spec.n_layers)
    for gguf, template in STACKED.get(arch, {}).items():
        count = next(i for i in range(len(shapes) + 1) if template.format(i) not in shapes)
        if count:
            found[gguf] = (template.format(0), (count, *shapes[template.format(0)]))
    return found


def config_of(path: Path) -> hf.HFConfig:
    """The config.json of a GGUF file (or split set): MODEL given as FILE.gguf."""
    return _read(path)[1]


def _read(path: Path) -> tuple[list[GGUFHeader], hf.HFConfig]:
    headers = read_split(path)
    return headers, gguf_config(headers[0], [t for h in headers for t in h.tensors])


def read_split(path: Path) -> list[GGUFHeader]:
    """The file, or all N files of a split set named as llama.cpp's gguf-split names them
    (`PREFIX-00001-of-0000N.gguf`, llama_split_path), each checked against the first's split.* keys."""
    match = SPLIT.match(path.name)
    if not match:
        return [read_gguf(path)]
    count = int(match["count"])
    if not 1 <= count <= 99_999 or not 1 <= int(match["no"]) <= count:
        raise GptcalcError(f"{path}: split {match['no']} of {match['count']} is not a valid split name")
    headers = []
    for no in range(1, count + 1):
        part = path.with_name(f"{match['stem']}-{no:05d}-of-{count:05d}.gguf")
        if not part.is_file():
            raise GptcalcError(f"{part}: missing: {path.name} is one of {count} splits")
        header = read_gguf(part)
        for key, want in (("split.no", no - 1), ("split.count", count)):
            if header.metadata.get(key) != want:
                raise GptcalcError(f"{part}: {key}: {header.metadata.get(key)!r}, expected {want} from the file name")
        headers.append(header)
    listed = headers[0].metadata.get("split.tensors.count")
    stored = sum(len(h.tensors) for h in headers)
    if listed != stored:
        raise GptcalcError(f"{headers[0].path}: split.tensors.count: {listed!r}, but the {count} splits hold {stored:,} tensors")
    seen: dict[str, str] = {}
    for header in headers:
        for tensor in header.tensors:
            if tensor.name in seen:
                raise GptcalcError(f"{header.path}: tensor {tensor.name!r} is also stored in {seen[tensor.name]}")
            seen[tensor.name] = header.path
    return headers


def gguf_config(header: GGUFHeader, tensors: list[GGUFTensor]) -> hf.HFConfig:
    """The config.json a GGUF's metadata and tensor list imply (for its architecture's model_type)."""
    from calc.checkpoint import gguf_own_keys, gguf_recurrent

    arch, meta = header.architecture, header.metadata
    if arch not in ARCHS and arch not in OWN:
        raise GptcalcError(f"{header.path}: general.architecture: {arch!r} is not one gptcalc reads from GGUF "
                           f"(known: {', '.join(sorted((*ARCHS, *OWN)))})")
    by_name = {t.name: t for t in tensors}
    data = OWN[arch][0](meta, header.path) if arch in OWN else _from_keys(meta, arch, by_name, header.path)
    embedding = by_name.get("token_embd.weight")
    if embedding is None or len(embedding.ne) != 2:
        raise GptcalcError(f"{header.path}: token_embd.weight: missing or not 2-D (the vocabulary is read off it)")
    data["vocab_size"] = meta.get(f"{arch}.vocab_size", embedding.ne[1])
    data["pad_token_id"] = _pad_token(meta, data["vocab_size"])
    data["tie_word_embeddings"] = "output.weight" not in by_name
    for key, suffixes in BIASES.items():
        data[key] = any(name.endswith(suffixes) for name in by_name)
    if "num_experts" in data:
        data.update(dict.fromkeys(EXPERT_COUNTS, data["num_experts"]))
    if arch in MLA:
        _mla(data, meta, arch)
    _nextn(data, meta, arch, header.path)  # before the architectures' own keys, whose per-layer flags it bounds
    gguf_recurrent.keys(data, meta, arch, by_name, header.path)
    gguf_own_keys.keys(data, meta, arch)
    gguf_own_keys.shaped(data, arch, {t.name: t.ne for t in tensors}, header.path)
    if arch == gguf_step35.ARCH:
        gguf_step35.keys(data)
    name = meta.get("general.name") if isinstance(meta.get("general.name"), str) else None
    return hf.HFConfig(data, f"{header.path} (GGUF metadata)", name or Path(header.path).stem)


def _nextn(data: dict[str, Any], meta: dict[str, Any], arch: str, path: str) -> None:
    """A converter that writes the multi-token-prediction block (GLM-4.5's, DeepSeek-V3.2's) puts it after the
    layers and counts it in `block_count`; llama.cpp reads `nextn_predict_layers` and builds n_layer = block_count
    minus it (src/llama-model.cpp, n_layer_all), skipping those tensors unless asked to load MTP: the config's
    layers are the others, its `num_nextn_predict_layers` the block. Read and checked here alone: a per-layer array
    the converter writes for the block too (Qwen3-Next's recurrent flags) is cut to the layers it leaves."""
    nextn = meta.get(f"{arch}.nextn_predict_layers", 0)
    if nextn == 0:
        return
    if not isinstance(nextn, int) or not 0 < nextn < data.get("num_hidden_layers", 0):
        raise GptcalcError(f"{path}: {arch}.nextn_predict_layers: {nextn!r} is not a count below block_count")
    data["num_hidden_layers"] -= nextn
    data["num_nextn_predict_layers"] = nextn


def nextn_layers(header: GGUFHeader) -> int:
    """The multi-token-prediction layers a GGUF holds after its layers (`nextn_predict_layers`; checked by
    gguf_config when the file was read)."""
    return header.metadata.get(f"{header.architecture}.nextn_predict_layers", 0)


def _pad_token(meta: dict[str, Any], vocab: int) -> int | None:
    """The padding token llama.cpp reads (`tokenizer.ggml.padding_token_id`), where the vocabulary holds it; else
    none. Never the config class's default: Phi-3's 32000 (SmolLM3's, GLM-4's likewise) lies beyond a smaller
    vocabulary, and transformers' embedding refuses a padding index outside its rows."""
    pad = meta.get("tokenizer.ggml.padding_token_id")
    return pad if isinstance(pad, int) and 0 <= pad < vocab else None


def _from_keys(meta: dict[str, Any], arch: str, by_name: dict[str, GGUFTensor], path: str) -> dict[str, Any]:
    """The config keys `KEYS` names, each one value (a per-layer array whose layers agree), after what the
    architecture itself and a hybrid's layers say."""
    from calc.checkpoint import gguf_recurrent

    data = _architecture(meta, arch)
    if arch in LAYER_TYPES:
        _layer_types(data, meta, arch, path)
    gguf_recurrent.layers(data, meta, arch, by_name, path)
    if arch in LAYERS:
        LAYERS[arch](data, meta, by_name, path)
    for key, target in {**KEYS, **ARCH_KEYS.get(arch, {})}.items():
        if target in data:
            continue
        value = meta.get(f"{arch}.{key}")
        if isinstance(value, GGUFArray):
            raise GptcalcError(f"{path}: {arch}.{key}: an array of {value.count:,} values; expected one per layer")
        if isinstance(value, list):
            value = uniform(value, f"{path}: {arch}.{key}")
        if value is not None and not (key == "attention.sliding_window" and value == 0):
            data[target] = value  # a window of 0 is none: Phi-3's converter writes 0 for none (conversion/phi.py:170-173)
    return data


def _architecture(meta: dict[str, Any], arch: str) -> dict[str, Any]:
    """What the architecture itself says: its model_type (or the variant a key marks), the layers a
    sliding_window_pattern array slides, what llama.cpp assumes of it."""
    data: dict[str, Any] = {"model_type": ARCHS[arch]}
    if arch in VARIANTS and f"{arch}.{VARIANTS[arch][0]}" in meta:
        data["model_type"] = VARIANTS[arch][1]
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and all(type(p) is bool for p in pattern):  # per layer: true where it slides
        data["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
    if meta.get(f"{arch}.attention.sliding_window") != 0:
        data.update(ASSUMED.get(arch, {}))
    return data


def _layer_types(data: dict[str, Any], meta: dict[str, Any], arch: str, path: str) -> None:
    """A hybrid's layer_types from its per-layer KV head counts (0: no attention in that layer); the
    feed-forward width GGUF stores is the one the model uses (lfm2's adjustment already applied)."""
    counts = meta.get(f"{arch}.attention.head_count_kv")
    if not isinstance(counts, list) or not all(type(c) is int for c in counts):
        raise GptcalcError(f"{path}: {arch}.attention.head_count_kv: expected one count per layer (0: no attention)")
    other, attention = LAYER_TYPES[arch]
    data["layer_types"] = [attention if c else other for c in counts]
    data["num_key_value_heads"] = uniform([c for c in counts if c], f"{path}: {arch}.attention.head_count_kv")
    if arch == "lfm2":
        data["block_auto_adjust_ff_dim"] = False


def _mla(data: dict[str, Any], meta: dict[str, Any], arch: str) -> None:
    """DeepSeek-V2/V3 in llama.cpp's terms: key_length_mla is qk_nope + qk_rope (key_length, when the
    file predates the absorbed MLA), the rope part is rope.dimension_count; sigmoid gating is V3."""
    rope = meta.get(f"{arch}.rope.dimension_count")
    key = meta.get(f"{arch}.attention.key_length_mla", meta.get(f"{arch}.attention.key_length"))
    if isinstance(rope, int) and isinstance(key, int):
        data.update(qk_rope_head_dim=rope, qk_nope_head_dim=key - rope)
    data.pop("head_dim", None)
    data["v_head_dim"] = meta.get(f"{arch}.attention.value_length_mla", meta.get(f"{arch}.attention.value_length"))
    data["n_routed_experts"] = data.pop("num_experts", None)
    data.pop("num_local_experts", None)
    data.setdefault("q_lora_rank", None)  # no key: queries without a latent (DeepSeek-V2-Lite, deepseek.py:344-345)
    if arch == "deepseek2" and meta.get(f"{arch}.expert_gating_func") == SIGMOID:
        data["model_type"] = "deepseek_v3"
    data["moe_layer_freq"] = 1


def uniform(values: list[Any], where: str) -> Any:
    """A per-layer array whose layers all agree is one value; gptcalc reads no GGUF with varying ones yet."""
    if len(set(values)) > 1:
        raise GptcalcError(f"{where}: differs between layers ({values[:8]}...); not read from GGUF yet")
    return values[0] if values else None


def _in_metadata(header: GGUFHeader, n_layers: int) -> TensorColumns:
    """Weights a converter moves into metadata, one value a layer (`IN_METADATA`), as tensors of the layers that
    hold no tensor data (4 bytes each: a GGUF F32 array's): Apertus's xIELU scalars, which llama.cpp reads as
    hyperparameters, so that no model buffer holds them."""
    columns = TensorColumns()
    for key, (template, shape) in IN_METADATA.get(header.architecture, {}).items():
        values = header.metadata.get(key)
        if not isinstance(values, list) or len(values) != n_layers:
            raise GptcalcError(f"{header.path}: {key}: expected one value per layer ({n_layers})")
        for il in range(n_layers):
            columns.extend(TensorColumns([template.format(il)], ["F32 (metadata)"], [shape], [4], [header.path]))
    return columns


def _hf_names(table: Any, shapes: dict[str, tuple[int, ...]], arch: str,
              n_layers: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """GGUF name -> (Hugging Face name, shape) for every tensor of the spec, by llama.cpp's own table: from
    transformers' names (the converter's renames first; the parts of a tensor it splits, `SPLITS`, map to the
    whole one), then from the checkpoint's own names, which the converter reads (`CONVERTER_SPLITS`), for what
    the first did not find, each under its transformers name. `table` is the spec's tensor table, `shapes` its
    expected shapes with buffers."""
    names_of = _namer(arch, n_layers)
    found = {}
    for name, shape in shapes.items():
        renamed = _renamed(name).removeprefix(DROPPED.get(arch, ""))
        whole = next((w for w in SPLITS if f".{w}" in renamed), None)
        for candidate in (renamed, *(renamed.replace(whole, part) for part in SPLITS.get(whole, ()))):
            # transformers 5 names fused experts' biases `_bias`; the converter writes `.bias` (conversion/gpt_oss.py
            # modify_tensors)
            for gguf in names_of(re.sub(r"(_proj)_bias$", r"\1.bias", candidate)):
                found[gguf] = (name, shape)
    for hub, hub_shape in table.expected_shapes(hub=True, buffers=True, mtp=True).items():
        if _LATER_EXPERT.search(hub):
            continue  # llama.cpp stacks a layer's experts in one tensor (`_exps`): expert 0 has named it already
        name = _in_memory(table, hub)
        layer = re.search(r"\.(\d+)\.", hub)
        parts = next((parts for whole, parts in CONVERTER_SPLITS.items() if hub.endswith(whole)), ())
        for gguf in (*names_of(hub), *names_of(_renamed(hub)),
                     *(f"blk.{layer.group(1) if layer else ''}.{p}" for p in parts)):
            found.setdefault(gguf, (name, shapes.get(name, hub_shape)))
    return found


_LATER_EXPERT = re.compile(r"\.experts\.[1-9]\d*\.")


def _namer(arch: str, n_layers: int) -> Callable[[str], list[str]]:
    """What the converter renames a Hugging Face tensor to: gptcalc's own table for an architecture gguf-py lacks
    (`OWN`), else gguf-py's TensorNameMap of the architecture."""
    if arch in OWN:
        own = OWN[arch][1]
        return lambda name: [n for n in (own(name if name.endswith((".weight", ".bias")) else name + ".weight"),)
                             if n is not None]
    g = tables()
    enum = next((a for a, n in g.constants.MODEL_ARCH_NAMES.items() if n == NAMED_AS.get(arch, arch)), None)
    if enum is None:
        raise GptcalcError(f"general.architecture {arch!r}: not in gguf-py's MODEL_ARCH_NAMES (upgrade gguf)")
    mapper, own = _name_map(enum, n_layers), ARCH_NAMES.get(arch, {})
    return lambda name: [n for n in (gguf_name_in(name, own, {}),) if n] or _gguf_names(mapper, name)


@cache
def _name_map(arch: Any, n_layers: int) -> Any:
    """gguf-py's TensorNameMap of an architecture and layer count, built once: it spells out every name of every
    layer (~10 ms), it is only read, and a memory table or a GGUF read asks for the same one again and again."""
    return tables().mapping.TensorNameMap(arch, n_layers)


def _unstacked(tensor: GGUFTensor, arch: str, names: dict[str, tuple[str, tuple[int, ...]]],
               shapes: dict[str, tuple[int, ...]]) -> list[GGUFTensor]:
    """The tensor, or the slices of one the converter stacked (`STACKED`), each named `NAME.i` and added to `names`
    under its transformers tensor; a slice's bytes are the stack's share (whole rows of ggml blocks). A stack of
    another count than the spec's tensors (`shapes`) stays whole, an unknown tensor in the report."""
    template = STACKED.get(arch, {}).get(tensor.name)
    count = tensor.ne[-1] if template and len(tensor.ne) > 1 else 0
    if not count or template.format(count - 1) not in shapes or template.format(count) in shapes:
        return [tensor]
    slices = []
    for i in range(count):
        hf_name = template.format(i)
        names[f"{tensor.name}.{i}"] = (hf_name, shapes[hf_name])
        slices.append(dataclasses.replace(tensor, name=f"{tensor.name}.{i}", ne=tensor.ne[:-1],
                                          nbytes=tensor.nbytes // count))
    return slices


def _renamed(name: str) -> str:
    """The name after the converter's renames (`RENAMES`)."""
    for before, after in RENAMES:
        name = re.sub(before, after, name)
    return name


def _in_memory(table: Any, hub: str) -> str:
    """A Hub tensor's name in transformers 5: its renamed slot (Kimi-Linear's router), or the tensor it is one
    piece of (Kimi-Linear's q, k and v convs, concatenated on load); a per-expert one as it is."""
    piece = table.piece(hub)
    if piece is not None:
        return piece[0]
    meaning = table.classify(hub)
    if meaning is None or meaning.layer is None or meaning.expert is not None:
        return hub
    return meaning.template.format(layer=meaning.layer)


def _gguf_names(mapper: Any, name: str) -> list[str]:
    """The GGUF name(s) a Hugging Face tensor may be stored under. A name without `.weight` / `.bias`: as it is
    (Mamba's A_log and D: `blk.N.ssm_a`, `blk.N.ssm_d`) and with `.weight` (transformers 5 names fused experts
    without it; the converter writes them with it)."""
    if name.endswith((".weight", ".bias")):
        return [n for n in (mapper.get_name(name, try_suffixes=(".weight", ".bias")),) if n is not None]
    return [n for n in (mapper.get_name(name), mapper.get_name(name + ".weight", try_suffixes=(".weight",)))
            if n is not None]


def _columns(stored: list[tuple[GGUFTensor, str]], names: dict[str, tuple[str, tuple[int, ...]]],
             transposed: tuple[str, ...] = (), reshaped: tuple[str, ...] = RESHAPED) -> TensorColumns:
    """Every file's tensors under Hugging Face names; converter splits joined (wherever each part is
    stored: a split set may cut between them), unknown names kept as they are; those named in `transposed`
    (suffixes) under the shape before the converter swapped their last two dimensions, those in `reshaped` under
    the spec's shape where their size is its."""
    grouped: dict[str, list[tuple[GGUFTensor, str]]] = defaultdict(list)
    for tensor, file in stored:
        grouped[names[tensor.name][0] if tensor.name in names else tensor.name].append((tensor, file))
    columns = TensorColumns()
    for hf_name, pieces in grouped.items():
        first = pieces[0][0]
        expected = names[first.name][1] if first.name in names else None
        numel = sum(p.numel for p, _ in pieces)
        found = first.shape if len(pieces) == 1 else (numel,)
        if hf_name.endswith(transposed) and len(found) > 1:
            found = (*found[:-2], found[-1], found[-2])
        columns.names.append(hf_name)
        columns.dtypes.append("+".join(sorted({p.type_name for p, _ in pieces})))
        columns.shapes.append(_shape(found, numel, expected, first.name.endswith(reshaped)))
        columns.nbytes.append(sum(p.nbytes for p, _ in pieces))
        columns.files.append(pieces[0][1])
    return columns


def _shape(found: tuple[int, ...], numel: int, expected: tuple[int, ...] | None,
           reshaped: bool = False) -> tuple[int, ...]:
    """The spec's shape when the stored one is it but for unit dimensions (or a joined split of its size, or a
    tensor the converter reshapes, of its size)."""
    if expected is None:
        return found
    squeeze = tuple(d for d in found if d != 1)
    same_size = numel == math.prod(expected) and found != expected
    if squeeze == tuple(d for d in expected if d != 1) or (same_size and (len(found) == 1 or reshaped)):
        return expected
    return found


def _kind(headers: list[GGUFHeader]) -> str:
    """"GGUF file (Q4_K_M)": llama.cpp's file type name, as llama_model_ftype_name prints it."""
    ftype = headers[0].metadata.get("general.file_type")
    names = {int(t): t.name.removeprefix("MOSTLY_") for t in tables().constants.LlamaFileType}
    label = f" ({names[ftype]})" if ftype in names else ""
    return f"GGUF file{label}" if len(headers) == 1 else f"split GGUF ({len(headers)} files){label}"
