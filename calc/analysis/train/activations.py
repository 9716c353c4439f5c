"""Activation memory: the tensors autograd keeps for backward, per layer and for the whole model.

Counted for the forward written with plain torch ops, the way transformers' models and our torch
test write it (tests/training_forward.py), in the activation dtype (`act`, bytes per element):

  RMSNorm  x·rsqrt(mean(x²)+ε)·w      keeps x, the per-token rsqrt and the normed x: 2·n·w + n
  LayerNorm (F.layer_norm)            keeps x and the per-token mean and rstd: n·w + 2n
  a linear layer x·W                  keeps its input x (one copy when Q, K and V read the same x)
  QKᵀ and P·V                         keep Q, K, P and V; K and V at all h heads (GQA expanded:
                                      selective recomputation keeps them at the kv heads)
  softmax                             keeps its output P: B·h·T·T (a sliding window or a chunk
                                      is a mask on it: transformers' eager_attention_forward); one that
                                      upcasts 16-bit logits keeps it in fp32, P·V the cast copy
  SiLU / GELU                         keep their input; gate × up keeps both factors; a GELU written out
                                      in python ops (transformers' gelu_new, gelu_fast, gelu_python,
                                      quick_gelu) keeps its intermediates too: 1 to 6 more of the MLP's
                                      width (GELU_KEPT)
  dropout (only where the config's p > 0)   keeps its mask, 1 byte an element (a GPU's bool); the
                                      dropout masks of GPT-2, GPT-BigCode, Phi, StarCoder2, OPT, GPT-NeoX,
                                      GPT-J, BLOOM, Phi-3, DBRX, StableLM, Falcon, MLA, Falcon-H1 and
                                      Zamba2 are measured against transformers' models with their rates
                                      at 0 (tests/test_train_torch.py)
  residual adds, scaling, an additive causal mask, rotary's multiplies   keep nothing per layer
                                      (rotary keeps its cos and sin tables, T·rotary_dim each, once)

so a pre-norm layer of n = B·T tokens keeps
  attention: n·d (normed x) + 4·n·h·d_head (Q, K, V, the heads' concatenation) + B·h·T·T (P)
  gated MLP: n·d + 4·n·d_ff (gate, SiLU(gate), up, their product);  plain MLP: n·d + 2·n·d_ff
  two norms as above.
Outside the layers: the token ids (int64, and the position ids with a learned table), the final
norm, the head's input n·d and what the loss keeps (calc/analysis/train/loss.py: by default the
fp32 log-softmax n·vocab, as transformers upcasts the logits) with its fp32 total-weight scalar.

A fused attention kernel (FlashAttention, torch's scaled_dot_product_attention) never stores P: it
keeps Q, K and V (at the kv heads), its output (laid out [B, T, h, d_head], so it is W_O's input
itself, no copy) and one fp32 log-sum-exp per query row and head.

Recomputation: `selective` drops P (Korthikanti et al., arXiv 2205.05198: recompute QKᵀ, softmax and
P·V, keep Q, K, V); `op` is torchtitan's per-op policy (the layer's input, the fused attention's
output and every other matmul's output, `_op_sac`); `full` keeps only each layer's input, n·d, and
recomputes the layer in backward.

Tensor parallelism over t GPUs splits the heads and d_ff, so every term h- or d_ff-wide (and P) is ÷ t;
the d-wide ones (norms, the inputs of Q/K/V and the MLP, a layer's input) are ÷ t only with sequence
parallelism. The recurrent mixers (Mamba, Mamba2, gated DeltaNet, KDA, short conv) keep what the fused
kernels a GPU run calls keep (mamba_ssm, fla, causal-conv1d; each term cites its kernel), not what
transformers' torch fallback keeps, which is more (docs/training.md says how much); lightning
attention, which has no kernel in transformers, keeps what its torch ops keep block by block.
Measured with saved-tensor hooks on transformers' own tiny models (tests/test_train_torch.py,
tests/test_zamba2.py, tests/test_deepseek_v4.py, fp32): Zamba2's shared blocks, whole layers of
Qwen3, OLMo-2/3, EXAONE-4, Mistral, Gemma-1/2/3, Gemma-3n and Gemma-4 (text), GLM-4, ERNIE-4.5, Cohere-2, Apertus,
GPT-2 (its GELU in each of transformers' forms and QuickGELU), GPT-J, Phi-2, GPT-NeoX, Falcon (its four
attention layouts), the MoE models
Mixtral, Qwen2/3-MoE, OLMoE, FlexOlmo, AFMoE, Llama-4 (every expert over every token), Cohere,
Phi-3.5-MoE, Laguna, gpt-oss, Seed-OSS (its dropout masks) and DeepSeek-V4 (hyper-connections, the sliding, CSA and
HCA attentions and the MoE block), MiniMax (lightning and softmax layers), the softmax layers of
Qwen3-Next, Qwen3.5 and LFM2-MoE, and the
recurrent layers of Mamba, Falcon-Mamba, Jamba, Nemotron-H, Bamba, Qwen3-Next, Qwen3.5, OLMo-Hybrid,
Kimi-Linear and LFM2 with
the kernels stood in by what they save (tests/kernel_saves.py); MLA in DeepSeek-V3, V3.2, GLM-5 and
Kimi-Linear.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Any

from calc.analysis.train.loss import LOSSES, Loss
from calc.errors import GptcalcError
from calc.parts import (MLA, MLP, Attention, CompressedAttention, GatedDeltaNet, HyperConnections, KimiDeltaAttention,
                        LightningAttention, Mamba, Mamba2, MoE, Norm, ShortConv)
from calc.parts.augment import Augment
from calc.parts.mlp import ActivationForm
from calc.parts.shared import Shared
from calc.spec.model import Block, ModelSpec

__all__ = ["ACT_BYTES", "RECOMPUTE", "Term", "WRITTEN_GELU", "activation_terms", "korthikanti", "layer_terms",
           "log_sum_exp", "qkv_terms", "shared_terms"]

ACT_BYTES = 2  # bf16 activations
RECOMPUTE = ("none", "selective", "op", "full")
INT64 = 8


ATTENTION_INPUT, W_O_INPUT, MLP_INPUT, HEAD_INPUT = ("attention input (normed x)", "heads' output (W_O's input)",
                                                    "MLP input (normed x)", "LM head input")
GATED_KEPT, PLAIN_KEPT = " (gate, SiLU, up, product)", " (before and after the activation)"  # a hidden term's ending
CLAMPED_KEPT = " (gate and up, both clamped, SiLU, product)"  # DeepSeek-V4's clamped SwiGLU's
ROUTED_ROWS = "routed rows (experts' input)"
Q_LATENT, KV_LATENT = "Q latent: q_b's input (the norm's output)", "KV latent: kv_b's input (the norm's output)"


@dataclass(frozen=True)
class Term:
    """One kept tensor (or a group of equal ones): elements, bytes per element, how TP splits it.

    A column-parallel linear's d-wide input (attention's, the MLP's, the head's: split "input") is ÷ t
    under Megatron's sequence parallelism, which saves its shard and all-gathers it again in backward;
    DTensor's plan (torchtitan's) saves the all-gathered input, n·d (measured on gloo ranks:
    tests/test_train_tp_dtensor.py)."""

    label: str
    elements: int
    bytes_per: int
    split: str  # "tp": split by tensor parallelism; "sp": only with sequence parallelism; "input": a column-
    # parallel linear's input, split by sequence parallelism unless kept all-gathered; "": never
    head: bool = False  # kept for the head and the loss: freed once backward has passed them
    weight_grad: bool = False  # kept only for the gradient of a weight no LoRA adapter reads around (a recurrent
    # mixer's linears and norms, exp(A_log)'s output; DeepSeek-V4's hyper-connections, latent norms and grouped
    # output): none under LoRA (frozen.py)

    def bytes(self, tp: int, sp: bool, gathered: bool = False) -> int:
        """Bytes on one GPU; `gathered`: the column-parallel linears keep their all-gathered input (DTensor)."""
        divide = tp if self.split == "tp" or (sp and (self.split == "sp" or (self.split == "input" and not gathered))) \
            else 1
        return -(-self.elements // divide) * self.bytes_per


def _norm_kept(norm: Norm, rows: int, width: int, frozen: bool = False) -> tuple[str, int]:
    """What a norm over `rows` rows of `width` keeps: F.layer_norm its input and each row's mean and
    rstd; a LayerNorm written out (CohereLayerNorm) x − mean twice (the variance's and the product's
    own subtraction), the rsqrt and the normed x; an RMSNorm its input, the rsqrt and the normed x, which
    only the weight's gradient reads (`frozen`: a frozen weight's, under LoRA, keeps none)."""
    if norm.kind == "rmsnorm":
        return _rms_kept(rows, width, norm.pow_rsqrt, norm.weight and not frozen)
    if norm.written_out:
        return "x − mean (twice), rsqrt, normed", 3 * rows * width + rows
    return "input, mean, rstd", rows * width + 2 * rows


def _rms_kept(rows: int, width: int, pow_rsqrt: bool, scaled: bool) -> tuple[str, int]:
    """An RMSNorm keeps its input and the per-row rsqrt (taken as a pow: its input and output), and the
    normed x where a scale multiplies it (a weightless norm's output is kept by whatever reads it)."""
    what = "input, " + ("mean square and its pow" if pow_rsqrt else "rsqrt") + (", normed" if scaled else "")
    return what, rows * width + rows * (1 + pow_rsqrt) + rows * width * scaled


def _norm(norm: Norm, n: int, width: int, act: int, label: str, norms: str = "act", split: str = "sp") -> list[Term]:
    """A norm's kept tensors at the activation width ("act", as the fp32 torch tests measure them), or
    as an eager RMSNorm that upcasts a 16-bit input keeps them ("upcast": transformers' LlamaRMSNorm,
    litgpt's and torchtune's RMSNorm all compute x.float() · rsqrt(mean(x²) + ε) before casting back,
    so the input and the rsqrt are kept in fp32, the cast-back normed x at the activation width for
    the weight's gradient; "upcast-frozen" and "act-frozen": a frozen weight's multiply keeps no normed
    x, as under LoRA). `split`: how TP splits it (a Q or K norm's rows are heads)."""
    if _upcasts(norm, norms):
        trained = norms == "upcast" and norm.weight
        normed = [Term(f"{label}: normed (cast back)", n * width, act, split)] if trained else []
        return [Term(f"{label}: input and rsqrt (fp32, upcast)", n * width + n, 4, split), *normed,
                *_unit_offset(norm, width, act, label)]
    what, kept = _norm_kept(norm, n, width, norms.endswith("frozen"))
    return [Term(f"{label}: {what}", kept, act, split), *_unit_offset(norm, width, act, label)]


def _unit_offset(norm: Norm, width: int, act: int, label: str) -> list[Term]:
    """Gemma's scale (1 + w) is a new tensor each call, kept by the multiply it feeds (Gemma3RMSNorm)."""
    return [Term(f"{label}: its scale 1 + w", width, act, "")] if norm.unit_offset else []


def _attention(a: Attention | MLA, b: int, s: int, d: int, act: int, recompute: str, flash: bool,
               repeat_kv: bool = False, norms: str = "act") -> list[Term]:
    n, h = b * s, a.n_heads
    if isinstance(a, MLA):
        inner = [*_mla_latents(a, n, act, norms), Term("Q and K (every head)", 2 * n * h * a.qk_head_dim, act, "tp"),
                 Term("V (every head)", n * h * a.v_head_dim, act, "tp"),
                 Term(W_O_INPUT, n * h * a.v_head_dim, act, "tp")]
    else:
        # explicit QKᵀ and P·V keep K and V expanded to all h heads; a fused kernel, or a checkpoint
        # around attention, keeps them at the kv heads, unless a mask goes with them (_masked) or the
        # model repeats them itself (repeat_kv)
        expanded = recompute == "none" and (not flash or _masked(a, s) or repeat_kv)
        inner = [*qkv_terms(a, n, act, expanded, recompute == "none" and not flash),
                 Term(W_O_INPUT, n * a.o_dim, act, "tp")]
    if recompute == "selective":
        core = []
    elif flash:  # instead of P, one log-sum-exp per row; its output, laid out [B, T, h, d], is W_O's input
        core = [log_sum_exp(b, h, s)]
        core += [Term("sliding window's mask, as SDPA's additive bias", b * s * s, act, "")] if _masked(a, s) else []
    else:
        dropout = bool(getattr(a, "dropout", 0))
        # every key scored, a window masked
        core = _softmax(getattr(a, "sinks", False), b, h, s, s, act, getattr(a, "softmax_fp32", True), dropout)
        core += _dropped(b * h * s * s, act, "P's dropout") if dropout else []
        if getattr(a, "softcap", None):  # Gemma-2: softcap·tanh(logits/softcap), tanh keeping its output
            core.append(Term("soft-capped logits: tanh output", b * h * s * s, act, "tp"))
    return [Term(ATTENTION_INPUT, n * d, act, "input"), *inner, *_qk_norm(a, n, act, norms), *core,
            *_tables(a, s, act), *_temperature(a, s), *_output_gate(a, n, act), *_augment(a, n, d, act),
            *_list_indices(a)]


def log_sum_exp(b: int, heads: int, s: int, split: str = "tp") -> Term:
    """A fused attention kernel's one fp32 log-sum-exp per query row and head, which its backward reads
    instead of the probabilities: one term wherever a flash kernel's output is kept, eager or compiled."""
    return Term("fused attention: log-sum-exp (fp32)", b * heads * s, 4, split)


def _list_indices(a: Attention | MLA) -> list[Term]:
    """K and V picked by one-element list indices (Falcon's _split_heads): indexing with a list keeps the
    index, an int64 tensor, for backward, one for K and one for V (measured: tests/test_train_torch.py)."""
    return [Term("K and V picked by list indices: the two indices (int64)", 2, INT64, "")] \
        if getattr(a, "kv_list_index", False) else []


def qkv_terms(a: Attention, n: int, act: int, expanded: bool, explicit: bool = False) -> list[Term]:
    """Q, K and V as the attention keeps them, K and V at every query head where they are `expanded` (repeated to
    them before the kernel) and at the kv heads otherwise: the eager layer's rule and the compiled one's
    (compiled.py). An explicit QKᵀ on Q and K cast to fp32 (`qk_fp32`: GPT-J's eager_attention_forward,
    `torch.matmul(query.to(torch.float32), key.to(torch.float32)...)`) keeps those fp32 copies instead of a
    16-bit Q and K, which nothing else keeps (measured on a bf16 GPT-J)."""
    k, v = (a.q_dim, a.o_dim) if expanded else (a.kv_dim, a.v_dim)
    heads = "" if a.kv_dim == a.q_dim else f" (K and V at {'all h' if expanded else 'the kv'} heads)"
    if explicit and a.qk_fp32 and act < 4:
        return [Term(f"Q and K, the fp32 copies QKᵀ multiplies{heads.replace('K and V', 'K')}", n * (a.q_dim + k), 4,
                     "tp"), Term("V", n * v, act, "tp")]
    return [Term(f"Q, K, V{heads}", n * (a.q_dim + k + v), act, "tp")]


def _upcasts(norm: Norm, norms: str) -> bool:
    """Whether `norm` runs as an eager RMSNorm that upcasts its input (`norms` "upcast…"), keeping it in fp32."""
    return norms.startswith("upcast") and norm.kind == "rmsnorm" and not norm.pow_rsqrt


def _mla_latents(a: MLA, n: int, act: int, norms: str) -> list[Term]:
    """MLA's latents: each norm (counted as the block's are, `norms`) and its output, the up-projection's
    input (q_b's, kv_b's). The KV norm reads a slice of kv_a's output, whose storage holds the rotary key
    beside the latent: kept with it where the norm keeps its input as it is (not upcast)."""
    q = [*_norm(a.norm, n, a.q_lora_rank, act, "Q latent norm", norms), Term(Q_LATENT, n * a.q_lora_rank, act, "sp")] \
        if a.q_lora_rank else []
    rotary = [] if _upcasts(a.norm, norms) else [
        Term("KV latent norm: the rotary key in its input's storage", n * a.qk_rope_head_dim, act, "sp")]
    return [*q, *_norm(a.norm, n, a.kv_lora_rank, act, "KV latent norm", norms), *rotary,
            Term(KV_LATENT, n * a.kv_lora_rank, act, "sp")]


def _masked(a: Attention | MLA, s: int) -> bool:
    """Whether transformers' sdpa path hands SDPA a mask: a sliding layer whose window is shorter than
    the sequence (sdpa_mask skips it otherwise). With a mask it repeats K and V to all h heads itself
    (use_gqa_in_sdpa: GQA only without a mask), and SDPA turns the [B, 1, T, T] bool mask into a new
    additive bias in the query's dtype, which it keeps for backward (convert_boolean_attn_mask)."""
    window = getattr(a, "window", None)
    return window is not None and s > window


def _temperature(a: Attention | MLA, s: int) -> list[Term]:
    """Llama-4's query temperature (Llama4TextAttention): the per-position scales, made in fp32 from the
    positions and expanded over the batch as a view, are what the multiply keeps (the queries' own
    gradient needs only them)."""
    return [Term("query temperature: per-position scales (fp32)", s, 4, "")] if getattr(a, "temperature", None) else []


def _dropped(elements: int, act: int, label: str) -> list[Term]:
    """A dropout in training (p > 0 only: at p = 0 F.dropout returns its input) keeps its mask, one
    byte an element as CUDA's fused native_dropout keeps it (at::dropout takes that path on a GPU), and
    its output is a new tensor the next op keeps. FlashAttention's own dropout keeps no mask (it
    regenerates it from the RNG state in backward)."""
    return [Term(f"{label}: the dropped-out tensor", elements, act, "tp"),
            Term(f"{label}: its mask (bool)", elements, 1, "tp")]


def _softmax(sinks: bool, b: int, h: int, s: int, keys: int, act: int, upcast: bool = False,
             dropout: bool = False) -> list[Term]:
    """The eager softmax's output P; with sinks (gpt-oss's and DeepSeek-V4's eager attention) a softmax
    over the logits and the sink column, less their row max, whose indices (int64) the max keeps; P is
    a view of it. Sinks aside, an `upcast` softmax of 16-bit logits (softmax(..., dtype=float32).to(dtype))
    keeps its fp32 output for its own backward, and P·V keeps the 16-bit copy, unless a dropout reads
    that copy (the dropout's output is kept instead, _dropped). The sink softmax computes in the logits'
    dtype (F.softmax(combined_logits, dtype=combined_logits.dtype))."""
    if sinks:
        return [Term("softmax output P (with the sink column)", b * h * s * (keys + 1), act, "tp"),
                Term("the logits' row max: its indices (int64)", b * h * s, INT64, "tp")]
    p = b * h * s * keys
    if upcast and act < 4:
        cast = [] if dropout else [Term("softmax output P, cast back (P·V's input)", p, act, "tp")]
        return [Term("softmax output P (fp32: the softmax upcasts)", p, 4, "tp"), *cast]
    return [Term("softmax output P", p, act, "tp")]


def _output_gate(a: Attention | MLA, n: int, act: int) -> list[Term]:
    """An output gate (Qwen3-Next, AFMoE, Laguna): the heads' output times act(x·W_G) keeps both factors,
    the gate as its activation keeps it (sigmoid its output; softplus its input, the product its
    output), and the product is W_O's input; with W_G inside q_proj the Q norm's input is a view of the
    whole projection, so its storage holds the gate's n·width too."""
    if not getattr(a, "output_gate", False):
        return []
    width, softplus = a.gate_width, a.gate_activation == "softplus"
    shared = n * width if a.gate_in_q and a.qk_norm is not None else 0
    return [Term(f"output gate: {a.gate_activation}{' (input and output)' if softplus else ''}, the gated heads' output"
                 f"{' and the gate in q_proj' if shared else ''}", (2 if softplus else 1) * n * width + n * a.o_dim
                 + shared, act, "tp")]


def _tables(a: Attention | MLA, s: int, act: int) -> list[Term]:
    """A rotation that re-lays cos and sin at each call keeps its own copies of both in every layer: GLM's
    and ERNIE's repeat_interleave once for Q and K together, GPT-J's apply_rotary_pos_emb once for each
    (measured: tests/test_train_torch.py); the model's shared tables are counted once, outside the layers."""
    rope = getattr(a, "rope", None)
    copies = rope.tables_per_call if rope is not None else 0
    return [Term("rotary cos and sin, re-laid at this layer's call" + (f" ({copies} times)" if copies > 1 else ""),
                 copies * 2 * s * rope.rotary_dim, act, "")] if copies else []


def _qk_norm(a: Attention | MLA, n: int, act: int, norms: str) -> list[Term]:
    """The Q and K norms (Qwen3, OLMo-2, LFM2 ...), each as a norm over its rows: one row per head, or
    one per token over the full width, counted as the block's norms are (`norms`: upcast, frozen; _norm);
    a layer reading an earlier layer's K has no K norm. A scale 1 + w is head_dim wide per head."""
    qk = getattr(a, "qk_norm", None)
    if qk is None:
        return []
    widths = [(a.n_heads, a.q_dim)] + ([] if a.kv_shared else [(a.n_kv_heads, a.kv_dim)])
    terms = []
    if getattr(a, "v_norm", False) and not a.kv_shared:  # Gemma-3n's and Gemma-4's weightless norm of V per head
        what, kept = _rms_kept(n * a.n_kv_heads, a.value_head_dim, qk.norm.pow_rsqrt, False)
        shared = n * a.v_dim if a.k_eq_v else 0  # V is K's projection: its input is the K norm's, kept once
        terms.append(Term(f"V norm: {what}{' (its input is the K norm input)' if shared else ''}", kept - shared, act, "tp"))
    for which, (heads, width) in zip("QK", widths):
        rows = n * heads if qk.scope == "head" or qk.per_head else n
        terms += _norm(qk.norm, rows, width * n // rows, act, f"{which} norm", norms, "tp")
    return terms


def _augment(a: Attention | MLA, n: int, d: int, act: int) -> list[Term]:
    """Gemma-3n's AltUp and LAuReL and the per-layer input sublayer of Gemma-3n and Gemma-4, as
    transformers' Gemma3nTextDecoderLayer and Gemma4TextDecoderLayer keep them; their norms take the
    form of the Q norm (Gemma3nRMSNorm, Gemma4RMSNorm)."""
    g = getattr(a, "augment", None)
    if g is None:
        return []
    norm, terms = a.qk_norm.norm, []
    if g.altup_inputs:
        terms.append(_altup(g, norm, n, d, act))
    if g.laurel_rank:
        what, normed = _norm_kept(norm, n, d)
        terms.append(Term(f"LAuReL: the rank-r middle, its norm ({what})", n * g.laurel_rank + normed, act, "sp"))
    if g.per_layer_input:
        p, (what, normed) = g.per_layer_input, _norm_kept(norm, n, d)
        terms.append(Term(f"per-layer input: gate input, activation (input, output), product; norm ({what})",
                          n * d + 3 * n * p + normed, act, "sp"))
    if g.layer_scalar:
        terms.append(Term("layer scalar (a buffer the output's multiply keeps)", 1, act, ""))
    return terms


def _altup(g: Augment, norm: Norm, n: int, d: int, act: int) -> Term:
    """AltUp over k streams (Gemma3nTextAltUp): predicting, the router's norm reads the active stream
    as a view of all k (their storage kept), its scaled output (the scale a buffer) and the router's
    tanh, and the k × k coefficients per token; the layer's input norm reads the active prediction, a
    view of all k predictions ((k − 1)·n·d beyond the norm's own n·d); correcting, the router again on
    the layer's output, the coefficients (k per token, and the clamped k × k weight), the innovation
    repeated k times, and the active stream's scaled copy."""
    k = g.altup_inputs
    router = 2 * _norm_kept(norm, n, d)[1] + 2 * n * d + 2 * n * k + 1  # two norms, their scaled outputs, tanh
    predict = (k - 1) * n * d + n * k * k + (k - 1) * n * d
    correct = k * n + (k * k if g.altup_clip else 0) + k * n * d + (n * d if g.altup_scale_output else 0)
    return Term(f"AltUp over {k} streams: router norms and tanh, prediction and correction coefficients, the "
                "streams and the innovation", router + predict + correct, act, "sp")


def _mamba2(m: Mamba2, n: int, d: int, act: int) -> list[Term]:
    """mamba_ssm's fused training kernel, which transformers calls whenever it is installed
    (MambaSplitConv1dScanCombinedFn, state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py: conv,
    scan, gated norm and out_proj in one autograd Function): in_proj's input, its output zxbcdt, the
    scan's output before the gated norm and the norm's rstd (fp32, one per row and group); A = −exp(A_log)
    (fp32) with exp's output. Everything else (the conv's output, the per-chunk states, out_proj's input)
    is recomputed in backward."""
    proj = m.d_inner + m.conv_dim + m.n_heads
    return [_mixer_input(n, d, act),
            Term("in_proj output (z, x·B·C, dt)", n * proj, act, "tp"),
            Term("scan output (before the gated norm)", n * m.d_inner, act, "tp"),
            Term("gated norm: rstd (fp32); A = −exp(A_log) (fp32)", n * m.n_groups * m.gated_norm + m.n_heads, 4, "tp"),
            _exp_a_log(m.n_heads)]


def _mixer_input(n: int, d: int, act: int) -> Term:
    """in_proj's input (the normed x), which only in_proj's weight gradient reads."""
    return Term("mixer input (normed x)", n * d, act, "sp", weight_grad=True)


def _exp_a_log(elements: int) -> Term:
    """exp(A_log)'s output (fp32: one per head, Mamba's one per channel and state), which exp keeps for A_log's
    gradient."""
    return Term("exp(A_log)'s output (fp32)", elements, 4, "tp", weight_grad=True)


def _mamba(m: Mamba, b: int, s: int, d: int, act: int, norms: str) -> list[Term]:
    """mamba_ssm's fused training Function, which transformers' Mamba and Falcon-Mamba call whenever it is
    installed (mamba_inner_fn; mamba_ssm 2.3.2.post1, ops/selective_scan_interface.py, MambaInnerFn.forward,
    lines 184-280: conv, x_proj, dt_proj, scan and out_proj in one autograd Function, the conv's output and
    delta recomputed in backward, checkpoint_lvl 1): its `ctx.save_for_backward` (lines 275-277) keeps xz
    (in_proj's output, made contiguous), x_dbl (x_proj's output: dt, B, C), B and C made contiguous
    (Falcon-Mamba's normed), the scan's output before the gate and its intermediates (_scan); around it
    in_proj keeps its input. transformers' CPU fallback keeps far more (the sequential scan's every state).
    Jamba's mixer calls the kernels one by one (_mamba_unfused)."""
    if m.dt_norms:
        return _mamba_unfused(m, b, s, d, act, norms)
    n, i = b * s, m.d_inner
    return [_mixer_input(n, d, act),
            Term("in_proj output (x, z), made contiguous", 2 * n * i, act, "tp"),
            Term("x_proj output (dt, B, C), and B and C made contiguous", n * (m.dt_rank + 4 * m.d_state), act, "tp"),
            Term("scan output (before the gate)", n * i, act, "tp"), *_scan(m, b, s)]


def _scan(m: Mamba, b: int, s: int) -> list[Term]:
    """The selective scan's intermediates, [b, d_inner, ⌈s / 2048⌉, 2·d_state] in A's dtype, fp32
    (mamba_ssm's csrc/selective_scan/selective_scan.cpp, lines 307-313), and A = −exp(A_log) (fp32), which it
    keeps, with exp's output (A_log's gradient)."""
    i, state = m.d_inner, m.d_state
    return [Term("scan intermediates, 2·d_state every 2,048 tokens (fp32); A = −exp(A_log) (fp32)",
                 b * i * -(-s // 2048) * 2 * state + i * state, 4, "tp"), _exp_a_log(i * state)]


DT_NORM = Norm.model_construct(kind="rmsnorm", weight=True, bias=False)  # Jamba's dt, B and C norms (JambaRMSNorm)


def _mamba_unfused(m: Mamba, b: int, s: int, d: int, act: int, norms: str) -> list[Term]:
    """Jamba's mixer (transformers' JambaMambaMixer.forward) calls the kernels one by one: causal-conv1d's
    keeps its input, a view of in_proj's output; x_proj's input, the conv's output transposed, is a copy
    (the linear flattens it); the dt, B and C RMSNorms read x_proj's output (its storage their inputs, counted
    as the block's norms are, `norms`); dt_proj's matmul keeps the normed dt, flattened; mamba_ssm's
    SelectiveScanFn (ops/selective_scan_interface.py, lines 23-57) keeps u (the conv's output), delta
    (dt_proj's output), B, C and z (the gate) made contiguous, the output before the gate and _scan's; out_proj's
    input, the gated output transposed, is a copy. Measured with the kernels stood in (tests/kernel_saves.py)."""
    n, i, state = b * s, m.d_inner, m.d_state
    return [_mixer_input(n, d, act),
            Term("in_proj output (x, z): the conv's input is a view of it", 2 * n * i, act, "tp"),
            Term("conv output (the scan's u)", n * i, act, "tp"),
            Term("conv output transposed: x_proj's input, a copy", n * i, act, "tp", weight_grad=True),
            *[t for width, name in ((m.dt_rank, "dt"), (state, "B"), (state, "C"))
              for t in _norm(DT_NORM, n, width, act, f"{name} norm", norms, "tp")],
            Term("normed dt, flattened: dt_proj's input", n * m.dt_rank, act, "tp", weight_grad=True),
            Term("dt_proj output (delta), B, C and the gate made contiguous, scan output", 3 * n * i + 2 * n * state,
                 act, "tp"),
            *_scan(m, b, s),
            Term("gated output transposed: out_proj's input, a copy", n * i, act, "tp", weight_grad=True)]


CHUNK = 64  # fla's chunk size: its kernels keep a [B, T, heads, 64] block per chunked matrix


def _deltanet(g: GatedDeltaNet, n: int, d: int, act: int) -> list[Term]:
    """The gated DeltaNet as a GPU run keeps it: causal-conv1d's kernel keeps its input (the SiLU is
    fused); fla's chunk_gated_delta_rule (fla/ops/gated_delta_rule/chunk.py, ChunkGatedDeltaRuleFunction)
    keeps q and k l2-normed with their rstd (fp32), v, the decay's chunk cumsum (fp32), beta and A, one
    [64]-wide row per token and value head; around them transformers' torch ops keep beta's sigmoid,
    the decay's softplus input and output (fp32, with exp(A_log)), the gated RMSNorm (input, rsqrt,
    normed, scaled, the gate and its SiLU) and out_proj's input."""
    heads = g.n_v_heads
    return [_mixer_input(n, d, act),
            Term("conv input (q, k, v) and beta (its sigmoid, and 2·sigmoid with negative eigenvalues)",
                 n * (g.conv_dim + (1 + g.neg_eigval) * heads), act, "tp"),
            Term("decay: softplus input, −exp(A_log) (fp32)", n * heads + heads, 4, "tp"),
            Term("decay: softplus output (fp32), for A_log's gradient", n * heads, 4, "tp", weight_grad=True),
            _exp_a_log(heads),
            Term("chunked delta rule: q and k normed, v, A (64 per token and head)",
                 n * (2 * g.key_dim + g.value_dim + CHUNK * heads), act, "tp"),
            Term("chunked delta rule: q and k rstd, the decay's cumsum (fp32)", n * (2 * g.n_k_heads + heads), 4, "tp"),
            Term("gated norm (input, rsqrt, scaled, gate, SiLU)", 4 * n * g.value_dim + n * heads, act, "tp"),
            _norm_and_out(n * g.value_dim, act, "out_proj")]


def _norm_and_out(elements: int, act: int, out: str) -> Term:
    """A gated norm's normed x (its weight's gradient) and the output projection's input (its weight's)."""
    return Term(f"gated norm: normed x; {out}'s input", 2 * elements, act, "tp", weight_grad=True)


def _kda(k: KimiDeltaAttention, n: int, d: int, act: int) -> list[Term]:
    """Kimi Delta Attention as a GPU run keeps it: causal-conv1d's input (q, k, v); fla's chunk_kda
    (fla/ops/kda/chunk.py, ChunkKDAFunction, recomputing its intermediates) keeps q and k l2-normed with
    their rstd (fp32), v, the per-channel decay and its chunk cumsum (fp32), beta and two [64]-wide
    blocks (Aqk, Akk) per token and head; around it transformers' torch ops keep the two gates'
    bottlenecks (f_b's and g_b's inputs), the decay's softplus as written (exp's output, log's input,
    the > 20 mask, the result; exp(A_log) and its negation), beta's sigmoid, the gated RMSNorm (input,
    rsqrt, normed, scaled, the sigmoid gate) and o_proj's input."""
    w, heads, rank = k.width, k.n_heads, k.head_dim
    return [_mixer_input(n, d, act),
            Term("conv input (q, k, v), beta", n * (3 * w + heads), act, "tp"),
            Term("the gates' bottlenecks (f_b's and g_b's inputs)", 2 * n * rank, act, "tp", weight_grad=True),
            Term("decay: softplus as written (exp, log's input), −exp(A_log) (fp32)", 2 * n * w + heads, 4, "tp"),
            Term("decay: softplus's result (fp32), for A_log's gradient", n * w, 4, "tp", weight_grad=True),
            _exp_a_log(heads),
            Term("decay: softplus's > 20 mask (bool)", n * w, 1, "tp"),
            Term("chunked KDA: q and k normed, v, Aqk and Akk (64 per token and head each)",
                 n * (3 * w + 2 * CHUNK * heads), act, "tp"),
            Term("chunked KDA: q and k rstd, the decay and its cumsum (fp32)", n * (2 * heads + 2 * w), 4, "tp"),
            Term("gated norm (input, rsqrt, scaled, sigmoid gate)", 3 * n * w + n * heads, act, "tp"),
            _norm_and_out(n * w, act, "o_proj")]


def _lightning(a: LightningAttention, b: int, s: int, d: int, act: int) -> list[Term]:
    """Lightning attention as transformers' MiniMaxLightningAttention runs it (no fused kernel there):
    qkv_proj's input and SiLU's input, then block by block (`block` tokens, the last one shorter)
    copies of Q, Kᵀ and V for the intra-block products and the decayed scores, the running K⊗V state
    each block reads (hd × hd per head; the first one zeros) and, from the second block on, the decayed
    queries; every block but the last also keeps (K·decay)ᵀ and V for the next state and, between the
    first and the last, that state's decay (one per head); the decay buffers once; then the RMSNorm,
    its output, the gate's sigmoid and the gated output (out_proj's input)."""
    w, e, bh, n = a.width, a.head_dim, b * a.n_heads, b * s
    sizes = [min(a.block, s - start) for start in range(0, s, a.block)]
    last = len(sizes) - 1
    blocks = sum(3 * bh * c * e + bh * c * c + bh * e * e + (i > 0) * bh * c * e + (i < last) * 2 * bh * c * e
                 + (0 < i < last) * a.n_heads for i, c in enumerate(sizes))
    buffers = a.n_heads * a.block * (a.block + 1 + (last > 0))
    return [_mixer_input(n, d, act),
            Term("qkv output (SiLU's input)", 3 * n * w, act, "tp"),
            Term(f"blocks of {a.block}: Q, Kᵀ, V copies, decayed scores and queries, K⊗V states, decay buffers",
                 blocks + buffers, act, "tp"),
            Term("norm (input, rsqrt), its output, the gate's sigmoid", 3 * n * w + n, act, "tp"),
            _norm_and_out(n * w, act, "out_proj")]


def _short_conv(_: ShortConv, n: int, d: int, act: int) -> list[Term]:
    """in_proj's input and output (B, C, x), B·x (the conv's input, which causal-conv1d's kernel keeps),
    the conv's output (C·conv keeps it) and C·conv (out_proj's input). transformers' CPU fallback
    (F.conv1d padded kernel − 1 on both sides, then sliced) keeps the conv's output at s + kernel − 1."""
    return [_mixer_input(n, d, act),
            Term("in_proj output, B·x, conv output", 5 * n * d, act, "sp"),
            Term("C·conv (out_proj's input)", n * d, act, "sp", weight_grad=True)]


def _compressed(a: CompressedAttention, b: int, s: int, d: int, act: int, recompute: str, flash: bool) -> list[Term]:
    """DeepSeek-V4's attention, as transformers' eager DeepseekV4Attention keeps it (modeling_deepseek_v4.py,
    checked with saved-tensor hooks in tests/test_deepseek_v4.py): the Q latent (as MLA's), Q's weightless
    norm (input, rsqrt) and Q roped, the one K = V head's norm, K and V expanded to every head over all
    s keys and every compressed entry (the eager path masks the window and the indexer's choice rather
    than gathering), cos and sin repeated for each of the three rotations (Q, K, the output's inverse),
    the compressor's terms, P with the sink column and the max's indices, and the grouped output's two
    inputs. The lightning indexer keeps nothing: its scores end in top-k indices, which carry no
    gradient, so autograd frees its whole branch (its compressor, queries and scores) after forward.
    q_a, kv and the grouped output take no LoRA adapter (only q_b does, as "q"), so their inputs and the
    norms' normed x are kept only for frozen weights' gradients under LoRA (weight_grad)."""
    n, h, c, r = b * s, a.n_heads, a.head_dim, a.q_lora_rank
    entries = s // a.ratio if a.ratio else 0
    keys, rope = s + entries, a.rope.rotary_dim if a.rope else 0
    expanded = recompute == "none" and not flash
    terms = [Term(ATTENTION_INPUT, n * d, act, "sp"),
             Term("Q latent: its norm's input and rsqrt", n * r + n, act, "sp"),
             Term("Q latent: its norm's normed x", n * r, act, "sp", weight_grad=True),
             Term(Q_LATENT, n * r, act, "sp"),
             Term("Q (every head): its weightless norm's input and rsqrt, Q roped", 2 * n * h * c + n * h, act, "tp"),
             Term("K = V (one head): its norm's input and rsqrt", n * c + n, act, ""),
             Term("K = V (one head): its norm's normed x", n * c, act, "", weight_grad=True),
             Term(f"K and V over every key and entry ({'expanded to every head' if expanded else 'once'})",
                  (2 * h if expanded else 1) * b * keys * c, act, "tp" if expanded else ""),
             Term("cos and sin repeated for Q, K and the output's inverse rotation", 6 * s * rope, act, "")]
    terms += _compressor(a, b, s, act) if a.ratio else []
    if recompute == "selective":
        core = []
    elif flash:
        core = [log_sum_exp(b, h, s)]
    else:
        core = _softmax(True, b, h, s, keys, act)
    return [*terms, *core, Term("heads' output and the grouped output's middle (W_o_a's and W_o_b's inputs)",
                                n * h * c + n * a.o_groups * a.o_lora_rank, act, "tp", weight_grad=True)]


def _compressor(a: CompressedAttention, b: int, s: int, act: int) -> list[Term]:
    """The compressor (DeepseekV4HCACompressor or CSACompressor): the gate's softmax over the full
    windows and the kv it weighs (an overlapping one copies both series into 2·ratio slots per entry; a
    plain one weighs a slice of kv, whose whole n × head_dim storage stays), the pooled entries' norm
    (input, rsqrt, output), and cos and sin repeated at the entries."""
    entries, n, width = s // a.ratio, b * s, a.head_dim
    slots = b * entries * a.ratio * a.series * width
    rope = a.rope.rotary_dim if a.rope else 0
    return [Term("compressor: gate softmax and the kv it weighs", slots + (slots if a.overlap else n * width),
                 act, ""),
            Term("compressor: pooled entries' norm (input, rsqrt) and their cos and sin",
                 b * entries * (width + 1 + 2 * rope), act, ""),
            Term("compressor: pooled entries' normed x", b * entries * width, act, "", weight_grad=True)]


def _hyper(hyper: HyperConnections, n: int, d: int, act: int) -> list[Term]:
    """Each sublayer's mix, as transformers' DeepseekV4HyperConnection and DecoderLayer keep it
    (modeling_deepseek_v4.py): in fp32, the copies flattened (a copy only when the model is not fp32
    already), the weightless norm's rsqrt and output, the mixing projection's output, the sigmoids of
    pre and post, comb's softmax, each of Sinkhorn's 2·iters − 1 divisions' numerator (k × k) and
    denominator (k), and pre + eps read by the collapse; in the model's dtype, the copies (read by
    the collapse and the write-back), the sublayer's output, post and comb as the write-back reads them.
    The normed copies (fn's input) and the projection's output (which pre, post and comb multiply by their
    scales) are kept only for those weights' gradients: none under LoRA, which adapts neither."""
    k, mixes, divisions = hyper.streams, (2 + hyper.streams) * hyper.streams, 2 * hyper.sinkhorn_iters - 1
    upcast = 0 if act == 4 else n * k * d
    weights = n * (1 + 2 * k + k * k + divisions * (k * k + k) + k)
    return [Term("hyper-connections: fp32 copies' rsqrt, mixing weights' sigmoids and softmax, Sinkhorn (two "
                 "sublayers)", 2 * (upcast + weights), 4, "sp"),
            Term("hyper-connections: the normed copies and the mixing projection's output (fp32; fn's and the scales' "
                 "gradients, two sublayers)", 2 * (n * k * d + n * mixes), 4, "sp", weight_grad=True),
            Term("hyper-connections: the copies, the sublayer's output, post and comb (two sublayers)",
                 2 * (n * k * d + n * d + n * k + n * k * k), act, "sp")]


def _mixer(a: Any, b: int, s: int, d: int, act: int, recompute: str, flash: bool, repeat_kv: bool = False,
           norms: str = "act") -> list[Term]:
    """What one layer's token mixer keeps, by the part's kind (attention and MLA share one rule)."""
    if a is None:
        return []
    recurrent = {"mamba2": _mamba2, "gated_deltanet": _deltanet, "kda": _kda, "short_conv": _short_conv}.get(a.kind)
    if recurrent:
        return recurrent(a, b * s, d, act)
    if a.kind == "lightning":  # runs block by block: its terms need the batch and the length apart
        return _lightning(a, b, s, d, act)
    if a.kind == "mamba":  # its scan's intermediates too
        return _mamba(a, b, s, d, act, norms)
    if a.kind == "compressed_attention":
        return _compressed(a, b, s, d, act, recompute, flash)
    return _attention(a, b, s, d, act, recompute, flash, repeat_kv, norms)


def _mlp(m: MLP | MoE, n: int, d: int, act: int, norm: Norm | None = None) -> list[Term]:
    """A dense MLP or a MoE block; `norm` is the block's (the form a MoE's own norms take)."""
    terms = [Term(MLP_INPUT, n * d, act, "input")]
    if isinstance(m, MoE):
        return terms + _moe(m, n, d, act) + _gemma4_moe(m, n, d, act, norm)
    if m.activation == "xielu":
        return terms + _xielu(n * m.d_ff, act)
    sparse = [Term("the gate's Gaussian top-k: the gate, its std and multiplier (the cut gate is SiLU's input)",
                   n * m.d_ff + n + 1, act, "tp")] if m.sparsity else []  # Gemma3nTextMLP._gaussian_topk
    return terms + [_hidden("MLP hidden", m, n * m.d_ff, act), *_written_gelu(m, n * m.d_ff, act), *sparse]


# What a GELU keeps for backward beyond the one tensor F.gelu keeps (its input), by the form the model runs it
# in (MLP.activation_form), measured with saved-tensor hooks on transformers' ACT2FN (tests/test_train_torch.py):
# NewGELUActivation keeps x, tanh's output, 0.5·x and 1 + tanh; FastGELUActivation x, 0.7978845608·x, 0.044715·x,
# 1 + 0.044715·x², tanh's output, 0.5·x and 1 + tanh; GELUActivation's python form x/√2, 0.5·x and 1 + erf;
# QuickGELUActivation's x·σ(1.702·x) x and the sigmoid (the product by 1.702 keeps nothing).
GELU_KEPT: dict[ActivationForm, int] = {"fused": 1, "gelu_new": 4, "gelu_fast": 7, "gelu_python": 3, "quick_gelu": 2}
WRITTEN_GELU = "GELU written out"  # its term's label starts so


def _written_gelu(m: MLP, elements: int, act: int) -> list[Term]:
    """The tensors a GELU written out in python ops keeps beyond the fused one's input."""
    extra = GELU_KEPT[m.activation_form] - 1
    return [Term(f"{WRITTEN_GELU} ({m.activation_form}): its intermediates", extra * elements, act, "tp")] \
        if extra else []


def _hidden(label: str, part: MLP | MoE, elements: int, act: int) -> Term:
    """A gated MLP keeps the gate (SiLU's input), SiLU's output, up and their product (down's input); one
    clamped as DeepSeek-V4's is (gate at most c, up within ±c) keeps gate and up before and after the
    clamp: six; gpt-oss's (GptOssExperts._apply_gate: gate·σ(α·gate)·(up + 1), both clamped) keeps the
    projection's whole output (the clamps' input), the clamped gate, the sigmoid, up + 1, the gated
    value and the product: seven; a plain MLP its activation's input and output."""
    if not part.gated:
        return Term(label + PLAIN_KEPT, 2 * elements, act, "tp")
    if part.gate_clamp:
        return Term(label + CLAMPED_KEPT, 6 * elements, act, "tp")
    if getattr(part, "swiglu_limit", None):
        return Term(f"{label} (gate and up, the clamped gate, sigmoid, up + 1, gated value, product)",
                    7 * elements, act, "tp")
    return Term(label + GATED_KEPT, 4 * elements, act, "tp")


def _gemma4_moe(m: MoE, n: int, d: int, act: int, norm: Norm | None) -> list[Term]:
    """Gemma-4's router norms its input without a scale (its input is the residual, kept already), scales
    it (the product keeps the normed x, the router reads the scaled one) and each picked weight by its
    expert's scale (both factors kept); its shared norms are the experts' input norm (reading the
    residual too) and the two output norms."""
    terms = []
    rows = n * (1 + bool(norm and norm.pow_rsqrt))  # a weightless norm's per-row values, the input aside
    if m.router_scale:
        terms.append(Term("router: its norm, the normed and the scaled input, picked weights and their scales",
                          rows + 2 * n * d + 2 * n * m.top_k, act, ""))
    if m.shared_norms and norm is not None:
        outputs = 2 * _norm_kept(norm, n, d)[1]
        terms.append(Term("the experts' input norm and the two output norms", rows + n * d + outputs, act, "sp"))
    return terms


def _moe(m: MoE, n: int, d: int, act: int) -> list[Term]:
    """A MoE block as transformers runs it (integrations/moe.py, grouped_mm_experts_forward, the default
    experts implementation on a GPU as on the CPU): the router's terms (_router); the rows sorted by
    expert — the permutation, its row indices and its inverse (int64) and each expert's offset (int32)
    — their input, hidden and output and the weights gathered for them; a shared expert, and the
    sigmoid gate on its output."""
    if m.all_experts:
        return _moe_all_experts(m, n, d, act)
    rows = n * m.top_k
    terms = [*_router(m, n, act),
             Term("experts: sort permutation, its row indices and inverse (int64)", 3 * rows, INT64, ""),
             Term("experts: offsets (int32)", m.n_experts, 4, ""),
             # the expert biases are gathered per row by its expert's id (grouped_mm_experts_forward)
             *([Term("experts: each row's expert id, for its biases (int64)", rows, INT64, "")]
               if m.expert_bias else []),
             Term(ROUTED_ROWS, rows * d, act, "sp"),
             _hidden("experts' hidden", m, rows * m.d_ff, act),
             Term("experts' outputs", rows * d, act, "sp"),
             Term("routing weights" + (" (fp32)" if m.router_fp32 == "kept" else ""), rows,
                  4 if m.router_fp32 == "kept" else act, "sp")]
    if m.shared is not None:
        terms.append(_hidden("shared expert hidden", m.shared, n * m.shared.d_ff, act))
    if m.shared_gate:
        terms.append(Term("shared expert: its output and the sigmoid gate", n * d + n, act, "sp"))
    return terms


def _router(m: MoE, n: int, act: int) -> list[Term]:
    """The router's scores, the top-k indices (int64), the picked weights and their sum when renormalised; a
    router computing in fp32 (`router_fp32`) keeps its scores and weights in fp32 whatever the activations'
    width (measured in bf16: tests/test_train_torch.py)."""
    if m.scoring == "sparsemixer":
        return _sparsemixer(m, n, act)
    rows = n * m.top_k
    # sqrt(softplus(l)) keeps l and its output; Laguna's soft cap c·tanh(l/c) keeps tanh's output
    scores = 1 + (m.scoring == "sqrtsoftplus") + bool(m.router_softcap)
    renormalised = m.norm_topk and not m.topk_first  # a softmax over the picked logits needs no renormalising
    capped = ", soft-capped" if m.router_softcap else ""
    kept = 4 if m.router_fp32 != "none" else act  # an fp32 router's scores and weights
    return [Term("router: softmax over the top-k logits" if m.topk_first else f"router: scores ({m.scoring}{capped})",
                 rows if m.topk_first else scores * n * m.choices, kept, ""),
            Term("router: top-k indices (int64)", rows, INT64, ""),
            # DeepSeek-V2's group-limited greedy: masked_fill keeps the experts' mask of the groups kept
            *([Term("router: the kept groups' mask (bool)", n * m.choices, 1, "")]
              if m.n_group > 1 and m.scoring == "softmax" else []),
            *([Term("router: picked weights and their sum (renormalised)", rows + n * (1 + m.clamped_sum), kept, "")]
              if renormalised else [])]


def _sparsemixer(m: MoE, n: int, act: int) -> list[Term]:
    """Phi-3.5-MoE's sparsemixer in training (modeling_phimoe.py, sparsemixer): each of its top-k picks
    masks the scores outside 2·jitter_eps of the best (the mask kept, bool), softmaxes them, gathers the
    pick's weight by its index (int64) and passes it through PhimoeMultiplier, which keeps its output."""
    picks = m.top_k
    return [Term("sparsemixer: each pick's masked softmax and multiplier", picks * (n * m.choices + n), act, ""),
            Term("sparsemixer: each pick's mask (bool)", picks * n * m.choices, 1, ""),
            Term("sparsemixer: each pick's index (int64)", picks * n, INT64, "")]


def _moe_all_experts(m: MoE, n: int, d: int, act: int) -> list[Term]:
    """Llama-4's MoE as transformers' Llama4TextMoe runs it: the router's top-k indices (int64) and its
    sigmoid over every expert (the unpicked logits −inf, so scores 0) with their [E·n, 1] copy; the
    input repeated once per expert and its scaled copy (bmm's input), each expert's hidden over all n
    tokens; the shared expert reads the MoE's input."""
    rows = n * m.n_experts
    terms = [Term("router: top-k indices (int64)", n * m.top_k, INT64, ""),
             Term("router: sigmoid scores over every expert and their per-row copy", 2 * rows, act, ""),
             Term("every expert's rows: the input repeated and scaled by its score", 2 * rows * d, act, "sp"),
             _hidden("experts' hidden (every expert, every token)", m, rows * m.d_ff, act)]
    return terms + [_hidden("shared expert hidden", m.shared, n * m.shared.d_ff, act)] \
        if m.shared is not None else terms


def _xielu(elements: int, act: int) -> list[Term]:
    """xIELU as transformers' XIELUActivation._xielu_python writes it (activations.py; its CUDA kernel is
    an optional wheel): where(x > 0, α_p·x·x + β·x, (expm1(min(x, ε)) − x)·α_n + β·x) keeps x, α_p·x,
    expm1's output, expm1 − x, the x > 0 mask (bool) and the scalars α_p, α_n, β and ε; down's input
    is its output."""
    return [Term("xIELU: input, α_p·x, expm1, expm1 − x, output (down's input)", 5 * elements, act, "tp"),
            Term("xIELU: the x > 0 mask (bool)", elements, 1, "tp"),
            Term("xIELU: α_p, α_n, β and ε", 4, act, "")]


def _op_sac(block: Block, d: int, b: int, s: int, act: int) -> list[Term]:
    """torchtitan's per-op selective checkpointing (parallelize_llama.py, `_save_list` and
    `_custom_policy`): of a layer only its input (the checkpoint's), the fused attention's output and
    log-sum-exp, and every other matmul's output are saved. The policy counts matmuls per layer across
    steps, and a Llama layer has seven (wq, wk, wv, wo, w1, w3, w2), so one step saves wq, wv, w1, w2
    and the next wk, wo, w3: the larger set is counted."""
    a, m, n = block.attention, block.mlp, b * s
    if len(block.mixers()) != 1 or not isinstance(a, Attention) or not isinstance(m, MLP) or block.shortcut:
        raise GptcalcError("--recompute op: torchtitan's per-op policy is counted for a layer of attention and a "
                           "dense MLP (Llama's); use none, selective or full")
    outputs = [a.q_dim, a.kv_dim, a.v_dim, d, *([m.d_ff] if m.gated else []), m.d_ff, d]
    # an odd count alternates between the two sets step by step; an even one saves the same every step
    saved = max(sum(outputs[0::2]), sum(outputs[1::2])) if len(outputs) % 2 else sum(outputs[0::2])
    return [Term("layer input (the checkpoint)", n * d, act, ""),
            Term("every other matmul's output (the larger set of two steps)", n * saved, act, ""),
            Term("fused attention: output", n * a.o_dim, act, ""),
            log_sum_exp(b, a.n_heads, s, "")]


def shared_terms(applied: Shared, b: int, s: int, d: int, act: int, recompute: str, flash: bool,
                 norms: str = "act") -> list[Term]:
    """One application of a shared block (Zamba2's): its norm over the d_in-wide [x, embedding], its
    attention reading d_in, each adapter's rank-r middle (its first matrix reads an input the
    projection beside it keeps already), its second norm and MLP, and the linear's input; its norms
    counted as the block's are (`norms`: Zamba2RMSNorm upcasts as LlamaRMSNorm does). The middles and
    the linear's input are kept only for the built-in adapters' and the linear's weights, which no LoRA
    target names (weight_grad; measured frozen: tests/test_train_torch.py)."""
    n, copy = b * s, applied.block
    return [*_norm(copy.norm, n, copy.in_width, act, "shared block norm (over d_in)", norms),
            *_attention(copy.attention, b, s, copy.in_width, act, recompute, flash),
            Term("adapters' rank-r middles", n * applied.adapter_rank * len(applied.adapters), act, "",
                 weight_grad=True),
            *_norm(copy.norm, n, d, act, "shared block norm", norms), *_mlp(copy.mlp, n, d, act),
            *([Term("shared block output (its linear's input)", n * d, act, "sp", weight_grad=True)]
              if applied.proj else [])]


def _block_norms(block: Block, n: int, d: int, act: int, norms: str) -> list[Term]:
    """Each of the block's norms; in a parallel block with two LayerNorms both read the block's input
    (GPT-NeoX's parallel residual), which F.layer_norm keeps as it is: one tensor, held once."""
    terms = [t for position in block.norms for t in _norm(block.norm, n, d, act, f"norm ({position})", norms)]
    if block.parallel and len(block.norms) == 2 and block.norm.kind == "layernorm" and not block.norm.written_out:
        terms[-1] = Term("norm (mlp_in): mean, rstd (its input is the attention norm's)", 2 * n, act, "sp")
    return terms


def layer_terms(block: Block, d: int, b: int, s: int, act: int, recompute: str, flash: bool = False,
                norms: str = "act", repeat_kv: bool = False) -> list[Term]:
    """What one layer of `block` keeps for backward under `recompute`, attention explicit or fused (`flash`),
    its pre-norms counted as `norms` says (_norm); `repeat_kv`: the model repeats K and V to every query head
    before the kernel (torchtitan's Llama), which then keeps them so."""
    n = b * s
    if recompute == "full":
        return [Term("layer input (the checkpoint)", n * d, act, "sp")]
    if recompute == "op":
        return _op_sac(block, d, b, s, act)
    kept_norms = _block_norms(block, n, d, act, norms)
    mlp = _mlp(block.mlp, n, d, act, block.norm) if block.mlp is not None else []
    if block.parallel and len(block.norms) == 1:  # one norm feeds both: the MLP reads the attention's input
        mlp = mlp[1:]
    # a parallel group's each
    mixers = [t for part in block.mixers() for t in _mixer(part, b, s, d, act, recompute, flash, repeat_kv, norms)]
    shortcut = _mlp(block.shortcut, n, d, act)[1:] if block.shortcut is not None else []  # reads the MLP's saved input
    applied = shared_terms(block.shared, b, s, d, act, recompute, flash, norms) if block.shared else []
    hyper = _hyper(block.hyper, n, d, act) if block.hyper is not None else []
    # each sublayer's output dropped out before its add (Seed-OSS, GPT-2), or the MLP's alone, the mixer's then
    # perhaps at a rate of its own (a sequential Falcon's): the mask is all the multiply keeps
    outputs = 1 if block.residual_dropout_on == "mlp" else len(block.mixers()) + (block.mlp is not None)
    dropout = [Term("residual dropout: each sublayer's output mask (bool)", outputs * n * d, 1, "sp")] \
        if block.residual_dropout else []
    if block.mixer_dropout:
        dropout.append(Term("mixer output dropout: its mask (bool)", len(block.mixers()) * n * d, 1, "sp"))
    return applied + [*hyper, *kept_norms, *mixers, *mlp, *dropout] * block.pairs + shortcut


def activation_terms(spec: ModelSpec, b: int, s: int, act: int, recompute: str, loss: Loss = LOSSES["fp32"],
                     norms: str = "act") -> list[Term]:
    """Outside the layers: ids, rotary tables, the final norm (counted as `norms` says), the head's
    input, what the loss keeps."""
    n, d = b * s, spec.d_model
    terms = [Term("token ids (int64)", n, INT64, "")]
    if spec.embedding.positions == "learned":
        terms.append(Term("position ids (int64)", s, INT64, ""))
    if spec.embedding.dropout:  # GPT-2's embd_pdrop: its output is the first norm's input, kept there
        terms.append(Term("embedding dropout: its mask (bool)", n * d, 1, "sp"))
    rotary = {a.rope.rotary_dim for _, a in spec.attention_parts() if getattr(a, "rope", None)}
    per_layer = {a.augment.per_layer_input for _, a in spec.attention_parts() if getattr(a, "augment", None)} - {None}
    # Gemma-3n's and Gemma-4's per-layer inputs: one [B, T, L, p] tensor, every layer's product keeping a slice of it
    terms += [Term("per-layer inputs (all layers' slices)", n * spec.n_layers * p, act, "sp") for p in per_layer]
    if recompute != "full":  # the tables are read inside the layers, so a checkpointed layer keeps none
        terms += [Term(f"rotary cos and sin ({width} wide)", 2 * s * width, act, "") for width in sorted(rotary)]
    head = _norm(spec.final_norm, n, d, act, "final norm", norms) if spec.final_norm is not None else []
    head.append(Term(HEAD_INPUT, n * d, act, "input"))
    if loss.held:
        head.append(Term("log-softmax of the logits (fp32)" if loss is LOSSES["fp32"] else
                         f"loss: {loss.held} B per token and vocabulary entry", n * spec.vocab_size, loss.held, "tp"))
    else:  # a fused loss computes the head input's gradient in forward and keeps it instead
        head.append(Term("loss: the head input's gradient, computed in forward", n * d, act, "sp"))
    head.append(Term("loss: total weight (fp32 scalar)", 1, 4, ""))
    return terms + [Term(t.label, t.elements, t.bytes_per, t.split, head=True) for t in head]


def korthikanti(s: int, b: int, h: int, a: int, layers: int, tp: int = 1, sp: bool = False,
                recompute: str = "none") -> int:
    """Korthikanti et al. (arXiv 2205.05198, eqs. 1-6) in bytes, 16-bit activations and 1-byte dropout
    masks, GPT-3's layer: 34·s·b·h + 5·a·s²·b per layer; with TP t: s·b·h·(10 + 24/t) + 5·a·s²·b/t;
    with SP: both terms ÷ t; selective recomputation drops the 5·a·s²·b term; full keeps 2·s·b·h."""
    if recompute == "full":
        per_layer = 2 * s * b * h
    elif sp:
        per_layer = (34 * s * b * h + (0 if recompute == "selective" else 5 * a * s * s * b)) // tp
    else:
        per_layer = s * b * h * 10 + 24 * s * b * h // tp + (0 if recompute == "selective" else 5 * a * s * s * b // tp)
    return layers * per_layer
