"""llama.cpp's GGUF quantisation mixes (Q4_K_M, Q5_K_M, Q4_K_S, Q6_K, Q8_0): the type of every tensor.

A mix is a base type plus per-tensor rules, llama_tensor_get_type in
https://github.com/ggml-org/llama.cpp/blob/007dbbf3fd17eefe9b47fee45f48f7ba5e62b714/src/llama-quant.cpp
as they apply to the non-Falcon models here:

- 1-D tensors (norms, biases, sinks) are F32 (convert_hf_to_gguf.py), the MoE router and learned
  positions are not quantised (F16);
- the LM head (and a tied token embedding) is Q6_K, or Q8_0 in a Q8_0 file;
- attn_v (and MLA's attn_kv_b, and a fused attn_qkv): Q4_K_M / Q5_K_M take Q6_K on "more bits"
  layers (the first and last eighth, and every third in between), Q4_K_S takes Q5_K on the first 4;
  a model llama.cpp types as 70B (80 layers) takes Q5_K for Q4_K; 8-expert models take Q8_0 for
  attn_v and attn_k and Q5_K for attn_output;
- ffn_down: Q4_K_M / Q5_K_M take Q6_K on "more bits" layers, Q4_K_S takes Q5_K on the first eighth;
  in MoE files the layer comes from the tensor's name and the count is every ffn_down tensor;
- a fused attn_qkv is Q5_K in Q4_K_M, Q6_K in Q5_K_M;
- a row whose width is not a multiple of the type's block falls back (Q4_K -> Q5_0, Q5_K -> Q5_1,
  Q6_K -> Q8_0; F16 if that does not divide either).
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.formats import FORMATS, Format
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["MAX_GGUF_LAYERS", "MIXES", "gguf_bits"]

MAX_GGUF_LAYERS = 65_536

SOURCE = "https://github.com/ggml-org/llama.cpp/blob/007dbbf3fd17eefe9b47fee45f48f7ba5e62b714/src/llama-quant.cpp"
MIXES = {"q4_k_m": "q4_K", "q4_k_s": "q4_K", "q5_k_m": "q5_K", "q6_k": "q6_K", "q8_0": "q8_0"}
FALLBACK = {"q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0", "q3_K": "q4_0", "q2_K": "q4_0"}
F32, F16 = 32, 16
UNQUANTISED = ("router", "shared_expert_gate", "position_embedding")


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def fitted(name: str, ncols: int) -> str:
    """The type a row of `ncols` values can take: the wanted one, or its fallback, or f16."""
    for candidate in (name, FALLBACK.get(name, name)):
        if ncols % FORMATS[candidate].block == 0:
            return candidate
    return "fp16"


@dataclass
class _Counters:
    """The running tensor indices llama.cpp keeps while it walks the file in order."""

    n_v: int
    n_down: int
    i_v: int = 0
    i_down: int = 0


def _category(name: str, fused_qkv: bool) -> str:
    if name in ("q", "k", "v") and fused_qkv:
        return "qkv"
    if name in ("v", "kv_b"):
        return "v"
    return {"k": "k", "attn_out": "out"}.get(name, "down" if name.endswith("down") else "other")


def _pick(mix: str, base: str, category: str, layer: int, c: _Counters, n_expert: int, seventy: bool) -> str:
    """llama_tensor_get_type_impl for one tensor of one layer (counters advance as llama.cpp's do)."""
    t = base
    if category == "qkv":
        t = {"q4_k_m": "q5_K", "q5_k_m": "q6_K"}.get(mix, base)
    elif category == "v":
        if mix in ("q4_k_m", "q5_k_m") and more_bits(c.i_v, c.n_v):
            t = "q6_K"
        elif mix == "q4_k_s" and c.i_v < 4:
            t = "q5_K"
        if seventy and t == "q4_K":
            t = "q5_K"
        if n_expert == 8:
            t = "q8_0"
        c.i_v += 1
    elif category == "k" and n_expert == 8:
        t = "q8_0"
    elif category == "out" and n_expert == 8 and mix in ("q4_k_m", "q4_k_s"):
        t = "q5_K"
    elif category == "down":
        i, n = (layer, c.n_down) if n_expert > 1 else (c.i_down, c.n_down)
        if mix in ("q4_k_m", "q5_k_m") and more_bits(i, n):
            t = "q6_K"
        elif mix == "q4_k_s" and i < n // 8:
            t = "q5_K"
        c.i_down += 1
    return t


def gguf_bits(spec: ModelSpec, breakdown: Breakdown, mix: str) -> dict[str, int]:
    """Total bits of every component in a GGUF file of this mix."""
    base = MIXES[mix]
    d = spec.d_model
    per_layer = {block.name: block.per_layer for block in breakdown.blocks}
    n_expert = max((b.moe.n_experts for b in spec.blocks.values() if b.moe), default=1)
    if spec.n_layers > MAX_GGUF_LAYERS:  # llama.cpp picks a type layer by layer, and so do we
        raise GptcalcError(f"--quant {mix}: {spec.n_layers:,} layers; a GGUF mix is worked out layer by layer, "
                           f"for at most {MAX_GGUF_LAYERS:,}")
    layers = [spec.block_at(i) for i in range(spec.n_layers)]
    mats = {name: spec.blocks[name].matrices(d) for name in per_layer}
    fused = {name: getattr(spec.blocks[name].attention, "fused_qkv", False) for name in per_layer}
    counters = _Counters(sum(1 for b in layers for m in mats[b] if _category(m, fused[b]) == "v"),
                         sum(1 for b in layers for m in mats[b] if m.endswith("down")))
    bits = {name: (F16 if name in UNQUANTISED else F32) * n for name, n in breakdown.components.items()}
    for layer, block in enumerate(layers):
        for name, (ncols, count) in mats[block].items():
            if name in UNQUANTISED:
                continue
            rows = per_layer[block][name] // ncols
            t = fitted(_pick(mix, base, _category(name, fused[block]), layer, counters, n_expert,
                             spec.n_layers == 80), ncols)
            bits[name] += FORMATS[t].row_bits(ncols) * rows - F32 * per_layer[block][name]
    head = "q8_0" if base == "q8_0" else "q6_K"
    width = spec.embedding.width(d)
    for name in ("token_embedding", "lm_head"):
        n = breakdown.components.get(name, 0)
        if n:
            tied_or_head = name == "lm_head" or breakdown.tied
            bits[name] = FORMATS[fitted(head if tied_or_head else base, width)].row_bits(width) * (n // width)
    return bits


def mix_format(mix: str) -> Format:
    return FORMATS[MIXES[mix]]
