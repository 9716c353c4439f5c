"""Activation memory: the tensors autograd keeps for backward, per layer and for the whole model.

Counted for the forward written with plain torch ops, the way transformers' models and our torch
test write it (tests/training_forward.py), in the activation dtype (`act`, bytes per element):

  RMSNorm  x·rsqrt(mean(x²)+ε)·w      keeps x, the per-token rsqrt and the normed x: 2·n·w + n
  LayerNorm (F.layer_norm)            keeps x and the per-token mean and rstd: n·w + 2n
  a linear layer x·W                  keeps its input x (one copy when Q, K and V read the same x)
  QKᵀ and P·V                         keep Q, K, P and V; K and V at all h heads (GQA expanded:
                                      selective recomputation keeps them at the kv heads)
  softmax                             keeps its output P: B·h·T·T (a sliding window or a chunk
                                      is a mask on it: transformers' eager_attention_forward)
  SiLU / GELU                         keep their input; gate × up keeps both factors
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
parallelism. MoE layers and MLA follow the same rules but are not measured by the torch test, nor
are the recurrent mixers (Mamba2, gated DeltaNet, KDA, lightning): their terms list what the ops
around each recurrence keep, read off transformers' torch paths. Zamba2's shared blocks are: each
application's terms equal what autograd saves in transformers' own model (tests/test_zamba2.py), and
so do whole layers of Qwen3, OLMo-2/3, EXAONE-4, Mistral, Gemma-1/2/3 and LFM2 (tests/test_train_torch.py) and
DeepSeek-V4's layers but for their MoE block: hyper-connections, norms and the sliding, CSA and
HCA attentions (tests/test_deepseek_v4.py, fp32).
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Any

from calc.analysis.train.loss import LOSSES, Loss
from calc.errors import GptcalcError
from calc.parts import (MLA, MLP, Attention, CompressedAttention, GatedDeltaNet, HyperConnections, KimiDeltaAttention,
                        LightningAttention, Mamba, Mamba2, MoE, Norm, ShortConv)
from calc.parts.shared import Shared
from calc.spec.model import Block, ModelSpec

__all__ = ["RECOMPUTE", "Term", "activation_terms", "korthikanti", "layer_terms", "shared_terms"]

RECOMPUTE = ("none", "selective", "op", "full")
INT64 = 8


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

    def bytes(self, tp: int, sp: bool, gathered: bool = False) -> int:
        """Bytes on one GPU; `gathered`: the column-parallel linears keep their all-gathered input (DTensor)."""
        divide = tp if self.split == "tp" or (sp and (self.split == "sp" or (self.split == "input" and not gathered))) \
            else 1
        return -(-self.elements // divide) * self.bytes_per


def _norm(norm: Norm, n: int, width: int, act: int, label: str) -> list[Term]:
    if norm.kind == "layernorm":
        return [Term(f"{label}: input, mean, rstd", n * width + 2 * n, act, "sp")]
    return [Term(f"{label}: input, rsqrt, normed", 2 * n * width + n, act, "sp"),
            *_unit_offset(norm, width, act, label)]


def _unit_offset(norm: Norm, width: int, act: int, label: str) -> list[Term]:
    """Gemma's scale (1 + w) is a new tensor each call, kept by the multiply it feeds (Gemma3RMSNorm)."""
    return [Term(f"{label}: its scale 1 + w", width, act, "")] if norm.unit_offset else []


def _attention(a: Attention | MLA, b: int, s: int, d: int, act: int, recompute: str, flash: bool) -> list[Term]:
    n, h = b * s, a.n_heads
    if isinstance(a, MLA):
        latents = [Term("Q latent: norm and up-projection input", 3 * n * a.q_lora_rank + n, act, "sp")] \
            if a.q_lora_rank else []
        latents.append(Term("KV latent: norm and up-projection input", 3 * n * a.kv_lora_rank + n, act, "sp"))
        inner = [*latents, Term("Q and K (every head)", 2 * n * h * a.qk_head_dim, act, "tp"),
                 Term("V and the heads' output (W_O's input)", 2 * n * h * a.v_head_dim, act, "tp")]
    else:
        # explicit QKᵀ and P·V keep K and V expanded to all h heads; a fused kernel, or a checkpoint
        # around attention, keeps them at the kv heads
        expanded = recompute == "none" and not flash
        k, v = (a.q_dim, a.o_dim) if expanded else (a.kv_dim, a.v_dim)
        heads = "" if a.kv_dim == a.q_dim else f" (K and V at {'all h' if expanded else 'the kv'} heads)"
        inner = [Term(f"Q, K, V{heads}",
                      n * (a.q_dim + k + v), act, "tp"),
                 Term("heads' output (W_O's input)", n * a.o_dim, act, "tp")]
    if recompute == "selective":
        core = []
    elif flash:  # instead of P, one log-sum-exp per row; its output, laid out [B, T, h, d], is W_O's input
        core = [Term("fused attention: log-sum-exp (fp32)", b * h * s, 4, "tp")]
    else:
        core = [Term("softmax output P", b * h * s * s, act, "tp")]  # every key scored, a window masked
        if getattr(a, "softcap", None):  # Gemma-2: softcap·tanh(logits/softcap), tanh keeping its output
            core.append(Term("soft-capped logits: tanh output", b * h * s * s, act, "tp"))
    return [Term("attention input (normed x)", n * d, act, "input"), *inner, *_qk_norm(a, n, act), *core,
            *_augment(a, n, d, act)]


def _qk_norm(a: Attention | MLA, n: int, act: int) -> list[Term]:
    """The Q and K norms (Qwen3, OLMo-2, LFM2 ...), each as a norm over its rows: one row per head, or
    one per token over the full width; a layer reading an earlier layer's K has no K norm."""
    qk = getattr(a, "qk_norm", None)
    if qk is None:
        return []
    widths = [(a.n_heads, a.q_dim)] + ([] if a.kv_shared else [(a.n_kv_heads, a.kv_dim)])
    terms = []
    for which, (heads, width) in zip("QK", widths):
        rows = n * heads if qk.scope == "head" else n
        kept = n * width + 2 * rows if qk.norm.kind == "layernorm" else 2 * n * width + rows
        terms.append(Term(f"{which} norm: input, {'mean, rstd' if qk.norm.kind == 'layernorm' else 'rsqrt, normed'}",
                          kept, act, "tp"))
        terms += _unit_offset(qk.norm, a.head_dim if qk.scope == "head" else width, act, f"{which} norm")
    return terms


def _augment(a: Attention | MLA, n: int, d: int, act: int) -> list[Term]:
    """Gemma-3n's AltUp (the n streams the prediction and the correction read, the router's input and
    scores), LAuReL (its rank-r middle and its normed output) and the per-layer input sublayer (the
    gate's input, its activation and the product, the projection's output). Not yet checked with
    saved-tensor hooks: the torch reference does not build these."""
    g = getattr(a, "augment", None)
    if g is None:
        return []
    terms = []
    if g.altup_inputs:
        k = g.altup_inputs
        terms.append(Term("AltUp: the streams, predicted and corrected; the router's input and scores",
                          2 * k * n * d + n * d + 2 * n * k, act, "sp"))
    if g.laurel_rank:
        terms.append(Term("LAuReL: the rank-r middle, the output and its norm", n * g.laurel_rank + 2 * n * d, act, "sp"))
    if g.per_layer_input:
        p = g.per_layer_input
        terms.append(Term("per-layer input: gate input, gate, activation, product, projection and norm",
                          2 * n * d + 3 * n * p + n * d, act, "sp"))
    return terms


def _mamba2(m: Mamba2, n: int, d: int, act: int) -> list[Term]:
    """in_proj's input and output, the conv's output and SiLU, the scan's output, the gate and the
    gated norm's input, and out_proj's input. The scan's own per-chunk states are the kernel's
    business (a fused kernel recomputes them); these are what the ops around it keep."""
    proj = m.d_inner + m.conv_dim + m.n_heads
    return [Term("mixer input (normed x)", n * d, act, "sp"),
            Term("in_proj output (z, x·B·C, dt)", n * proj, act, "tp"),
            Term("conv output and its SiLU", 2 * n * m.conv_dim, act, "tp"),
            Term("scan output, gate SiLU(z), gated norm (input, normed)", 4 * n * m.d_inner + n * m.n_groups, act, "tp")]


def _mamba(m: Mamba, n: int, d: int, act: int) -> list[Term]:
    """in_proj's input and output, the conv's output and SiLU, x_proj's and dt_proj's outputs, the
    scan's output, the gate and out_proj's input."""
    i = m.d_inner
    return [Term("mixer input (normed x)", n * d, act, "sp"),
            Term("in_proj output (x, z), conv output and its SiLU", 4 * n * i, act, "tp"),
            Term("x_proj output (dt, B, C) and dt_proj output", n * (m.dt_rank + 2 * m.d_state) + n * i, act, "tp"),
            Term("scan output, SiLU(z), gated output", 3 * n * i, act, "tp")]


def _deltanet(g: GatedDeltaNet, n: int, d: int, act: int) -> list[Term]:
    """The projections' outputs, the conv's output and SiLU, normalised q and k, the delta rule's
    output, and the gated norm's input and output (out_proj's input)."""
    return [Term("mixer input (normed x)", n * d, act, "sp"),
            Term("q, k, v, z, beta, a projections", n * (g.conv_dim + g.value_dim + 2 * g.n_v_heads), act, "tp"),
            Term("conv output and its SiLU", 2 * n * g.conv_dim, act, "tp"),
            Term("normalised q and k", 2 * n * g.key_dim, act, "tp"),
            Term("delta-rule output, gated norm (input, normed, gate)", 4 * n * g.value_dim + n * g.n_v_heads, act, "tp")]


def _kda(k: KimiDeltaAttention, n: int, d: int, act: int) -> list[Term]:
    """As the gated DeltaNet's: the projections' outputs (q, k, v, the two gates' bottlenecks and
    outputs, beta), the conv's output and SiLU, normalised q and k, the delta rule's output and the
    gated norm's input and output (o_proj's input)."""
    w = k.width
    return [Term("mixer input (normed x)", n * d, act, "sp"),
            Term("q, k, v, forget and output gates, beta projections", n * (5 * w + 2 * k.head_dim + k.n_heads), act, "tp"),
            Term("conv output and its SiLU", 6 * n * w, act, "tp"),
            Term("normalised q and k", 2 * n * w, act, "tp"),
            Term("delta-rule output, gated norm (input, normed)", 3 * n * w, act, "tp")]


def _lightning(a: LightningAttention, n: int, d: int, act: int) -> list[Term]:
    """qkv_proj's output and its SiLU, the attention output, the norm's output, the gate's output and
    its sigmoid, the gated output (out_proj's input)."""
    w = a.width
    return [Term("mixer input (normed x)", n * d, act, "sp"),
            Term("qkv output and its SiLU", 6 * n * w, act, "tp"),
            Term("attention output, norm, gate (linear, sigmoid), gated output", 5 * n * w, act, "tp")]


def _short_conv(c: ShortConv, b: int, s: int, d: int, act: int) -> list[Term]:
    """in_proj's output (B, C, x), B·x (the conv's input), the conv's output, C·conv (out_proj's input).
    transformers' causal_conv1d_fn (modeling_lfm2.py) pads kernel − 1 on both sides and slices the
    first s outputs: the storage C·conv keeps holds s + kernel − 1 per channel."""
    n = b * s
    return [Term("mixer input (normed x)", n * d, act, "sp"),
            Term("in_proj output, B·x, C·conv", 5 * n * d, act, "sp"),
            Term("conv output (its padded length)", b * d * (s + c.kernel - 1), act, "sp")]


def _compressed(a: CompressedAttention, b: int, s: int, d: int, act: int, recompute: str, flash: bool) -> list[Term]:
    """DeepSeek-V4's attention, as transformers' eager DeepseekV4Attention keeps it (modeling_deepseek_v4.py,
    checked with saved-tensor hooks in tests/test_deepseek_v4.py): the Q latent (as MLA's), Q's weightless
    norm (input, rsqrt) and Q roped, the one K = V head's norm, K and V expanded to every head over all
    s keys and every compressed entry (the eager path masks the window and the indexer's choice rather
    than gathering), cos and sin repeated for each of the three rotations (Q, K, the output's inverse),
    the compressor's terms, P with the sink column and the max's indices, and the grouped output's two
    inputs. The lightning indexer keeps nothing: its scores end in top-k indices, which carry no
    gradient, so autograd frees its whole branch (its compressor, queries and scores) after forward."""
    n, h, c, r = b * s, a.n_heads, a.head_dim, a.q_lora_rank
    entries = s // a.ratio if a.ratio else 0
    keys, rope = s + entries, a.rope.rotary_dim if a.rope else 0
    expanded = recompute == "none" and not flash
    terms = [Term("attention input (normed x)", n * d, act, "sp"),
             Term("Q latent: norm and up-projection input", 3 * n * r + n, act, "sp"),
             Term("Q (every head): its weightless norm's input and rsqrt, Q roped", 2 * n * h * c + n * h, act, "tp"),
             Term("K = V (one head): its norm's input, rsqrt and output", 2 * n * c + n, act, ""),
             Term(f"K and V over every key and entry ({'expanded to every head' if expanded else 'once'})",
                  (2 * h if expanded else 1) * b * keys * c, act, "tp" if expanded else ""),
             Term("cos and sin repeated for Q, K and the output's inverse rotation", 6 * s * rope, act, "")]
    terms += _compressor(a, b, s, act) if a.ratio else []
    if recompute == "selective":
        core = []
    elif flash:
        core = [Term("fused attention: log-sum-exp (fp32)", b * h * s, 4, "tp")]
    else:
        core = [Term("softmax output P (with the sink column)", b * h * s * (keys + 1), act, "tp"),
                Term("the logits' row max: its indices (int64)", b * h * s, INT64, "tp")]
    return [*terms, *core, Term("heads' output and the grouped output's middle (W_o_a's and W_o_b's inputs)",
                                n * h * c + n * a.o_groups * a.o_lora_rank, act, "tp")]


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
            Term("compressor: pooled entries' norm and their cos and sin",
                 b * entries * (2 * width + 1 + 2 * rope), act, "")]


def _hyper(hyper: HyperConnections, n: int, d: int, act: int) -> list[Term]:
    """Each sublayer's mix, as transformers' DeepseekV4HyperConnection and DecoderLayer keep it
    (modeling_deepseek_v4.py): in fp32, the copies flattened (a copy only when the model is not fp32
    already), the weightless norm's rsqrt and output, the mixing projection's output, the sigmoids of
    pre and post, comb's softmax, each of Sinkhorn's 2·iters − 1 divisions' numerator (k × k) and
    denominator (k), and pre + eps read by the collapse; in the model's dtype, the copies (read by
    the collapse and the write-back), the sublayer's output, post and comb as the write-back reads them."""
    k, mixes, divisions = hyper.streams, (2 + hyper.streams) * hyper.streams, 2 * hyper.sinkhorn_iters - 1
    upcast = 0 if act == 4 else n * k * d
    weights = n * (1 + mixes + 2 * k + k * k + divisions * (k * k + k) + k)
    return [Term("hyper-connections: fp32 norm of the flattened copies, mixing weights, Sinkhorn (two sublayers)",
                 2 * (upcast + n * k * d + weights), 4, "sp"),
            Term("hyper-connections: the copies, the sublayer's output, post and comb (two sublayers)",
                 2 * (n * k * d + n * d + n * k + n * k * k), act, "sp")]


def _mixer(a: Any, b: int, s: int, d: int, act: int, recompute: str, flash: bool) -> list[Term]:
    """What one layer's token mixer keeps, by the part's kind (attention and MLA share one rule)."""
    if a is None:
        return []
    if a.kind == "short_conv":
        return _short_conv(a, b, s, d, act)
    recurrent = {"mamba": _mamba, "mamba2": _mamba2, "gated_deltanet": _deltanet, "kda": _kda,
                 "lightning": _lightning}.get(a.kind)
    if recurrent:
        return recurrent(a, b * s, d, act)
    attention = _compressed if a.kind == "compressed_attention" else _attention
    return attention(a, b, s, d, act, recompute, flash)


def _mlp(m: MLP | MoE, n: int, d: int, act: int) -> list[Term]:
    terms = [Term("MLP input (normed x)", n * d, act, "input")]
    if isinstance(m, MoE):
        rows = n * m.top_k
        terms += [Term("router: softmax over experts", n * m.choices, act, ""),
                  Term("routed rows (experts' input)", rows * d, act, "sp"),
                  Term("experts' hidden", (4 if m.gated else 2) * rows * m.d_ff, act, "tp"),
                  Term("experts' outputs and routing weights", rows * d + rows, act, "sp")]
        if m.shared is not None:
            terms.append(Term("shared expert hidden", (4 if m.shared.gated else 2) * n * m.shared.d_ff, act, "tp"))
        return terms
    hidden = " (gate, SiLU, up, product)" if m.gated else " (before and after the activation)"
    return terms + [Term("MLP hidden" + hidden, (4 if m.gated else 2) * n * m.d_ff, act, "tp")]


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
            Term("fused attention: log-sum-exp (fp32)", b * a.n_heads * s, 4, "")]


def shared_terms(applied: Shared, b: int, s: int, d: int, act: int, recompute: str, flash: bool) -> list[Term]:
    """One application of a shared block (Zamba2's): its norm over the d_in-wide [x, embedding], its
    attention reading d_in, each adapter's rank-r middle (its first matrix reads an input the
    projection beside it keeps already), its second norm and MLP, and the linear's input."""
    n, copy = b * s, applied.block
    return [*_norm(copy.norm, n, copy.in_width, act, "shared block norm (over d_in)"),
            *_attention(copy.attention, b, s, copy.in_width, act, recompute, flash),
            Term("adapters' rank-r middles", n * applied.adapter_rank * len(applied.adapters), act, ""),
            *_norm(copy.norm, n, d, act, "shared block norm"), *_mlp(copy.mlp, n, d, act),
            *([Term("shared block output (its linear's input)", n * d, act, "sp")] if applied.proj else [])]


def layer_terms(block: Block, d: int, b: int, s: int, act: int, recompute: str, flash: bool = False) -> list[Term]:
    """What one layer of `block` keeps for backward under `recompute`, attention explicit or fused (`flash`)."""
    n = b * s
    if recompute == "full":
        return [Term("layer input (the checkpoint)", n * d, act, "sp")]
    if recompute == "op":
        return _op_sac(block, d, b, s, act)
    norms = [t for position in block.norms for t in _norm(block.norm, n, d, act, f"norm ({position})")]
    mlp = _mlp(block.mlp, n, d, act) if block.mlp is not None else []
    mixers = [t for part in block.mixers() for t in _mixer(part, b, s, d, act, recompute, flash)]  # a parallel group's each
    shortcut = _mlp(block.shortcut, n, d, act)[1:] if block.shortcut is not None else []  # reads the MLP's saved input
    applied = shared_terms(block.shared, b, s, d, act, recompute, flash) if block.shared else []
    hyper = _hyper(block.hyper, n, d, act) if block.hyper is not None else []
    return applied + [*hyper, *norms, *mixers, *mlp] * block.pairs + shortcut


def activation_terms(spec: ModelSpec, b: int, s: int, act: int, recompute: str, loss: Loss = LOSSES["fp32"]) -> list[Term]:
    """Outside the layers: ids, rotary tables, the final norm, the head's input, what the loss keeps."""
    n, d = b * s, spec.d_model
    terms = [Term("token ids (int64)", n, INT64, "")]
    if spec.embedding.positions == "learned":
        terms.append(Term("position ids (int64)", s, INT64, ""))
    rotary = {a.rope.rotary_dim for _, a in spec.attention_parts() if getattr(a, "rope", None)}
    if recompute != "full":  # the tables are read inside the layers, so a checkpointed layer keeps none
        terms += [Term(f"rotary cos and sin ({width} wide)", 2 * s * width, act, "") for width in sorted(rotary)]
    head = _norm(spec.final_norm, n, d, act, "final norm") if spec.final_norm is not None else []
    head.append(Term("LM head input", n * d, act, "input"))
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
