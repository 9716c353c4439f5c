"""What a layer keeps for backward under torch.compile (`--compile`), as measured on the CPU.

A compiled layer is one autograd Function whose forward saves what AOTAutograd's min-cut
partitioner chose: the pointwise ops are fused and recomputed in backward, so only the matmuls'
and the attention kernel's operands and a norm's per-token statistic are kept. Measured with
saved-tensor hooks on a compiled bf16 Llama layer (GQA, SwiGLU, RMSNorm) compiled as torchtitan and
torchtune compile theirs, over three shapes (tests/compiled_block.py, recorded in
tests/data/compiled_saves.json with torch 2.13's inductor); per layer of n = B·T tokens:

  recompute none   the layer's input and the residual after attention (each norm's input), each
                   norm's rsqrt (fp32, one per token) and its output (the next matmul's input),
                   Q, K, V (K and V at every head where the model repeats them), the attention's
                   output (W_O's input, no copy) and log-sum-exp (fp32), and the MLP's gate, up and
                   their product (the SiLU is recomputed): n·(4d + q + k + v + o + 3·d_ff) at the
                   activation width, 2n + B·h·T in fp32. The eager layer keeps besides each norm's
                   normed x (and, upcasting, fp32 copies) and SiLU's output.
  recompute op     torchtitan's per-op policy traced once per layer: the checkpoint's input, the
                   outputs of the odd-numbered matmuls (wq, wv, w1; w2's, the seventh, feeds only
                   the residual add, so the partitioner drops it though the policy marks it), the
                   attention's output and log-sum-exp. Eager, the policy's cache keeps w2's output
                   too and its count carries over steps (activations._op_sac).
  recompute full   only the layer's input, as eager (activations.layer_terms).

The eager RMSNorm's fp32 copies (`norm_upcast`) are fused away inside a compiled layer: torchtune's
upcasting norm saves what nn.RMSNorm does. Neither framework compiles the final norm.

A layer checkpointed in full rebuilds, in its backward, what it keeps without recompute; at the compiled
backward's peak, in the MLP's backward, those tensors are all alive with the gradient arriving at the layer
and the gate's, up's and product's gradients (`compiled_backward_terms`): measured with the CPU allocator's
record over the same forms and shapes (tests/compiled_backward.py, tests/data/compiled_backward.json).
"""

from __future__ import annotations

from calc.analysis.train.activations import ATTENTION_INPUT, MLP_INPUT, W_O_INPUT, Term
from calc.errors import GptcalcError
from calc.parts import MLP, Attention
from calc.spec.model import Block

__all__ = ["compiled_backward_terms", "compiled_layer_terms"]

MLP_EXTRAS = ("bias", "sparsity", "clamp", "gate_clamp", "swiglu_limit", "gate_scale", "down_scale")
ATTENTION = ("qk_norm", "window", "output_gate", "sinks", "softcap", "temperature", "augment", "dropout")


def compiled_layer_terms(block: Block, d: int, b: int, s: int, act: int, recompute: str,
                         repeat_kv: bool = False) -> list[Term]:
    """What one compiled layer keeps under `recompute` none or op (full: layer_terms' one input)."""
    a, m, n = _llama(block), block.mlp, b * s
    fused = [Term(W_O_INPUT + ": the fused attention's output", n * a.o_dim, act, "tp"),
             Term("fused attention: log-sum-exp (fp32)", b * a.n_heads * s, 4, "tp")]
    if recompute == "op":
        odd = (a.q_dim, a.v_dim, m.d_ff)  # wq, wv, w1 of wq wk wv wo w1 w3 w2 (w2's output is not needed)
        return [Term("layer input (the checkpoint)", n * d, act, ""),
                Term("the odd-numbered matmuls' outputs (wq, wv, w1)", n * sum(odd), act, ""), *fused]
    k, v = (a.q_dim, a.o_dim) if repeat_kv else (a.kv_dim, a.v_dim)
    heads = "" if a.kv_dim == a.q_dim else f" (K and V at {'all h' if repeat_kv else 'the kv'} heads)"
    return [Term("each norm's input: the layer's, the residual after attention", 2 * n * d, act, "sp"),
            Term("each norm's rsqrt (fp32)", 2 * n, 4, "sp"),
            Term(ATTENTION_INPUT, n * d, act, "input"), Term(f"Q, K, V{heads}", n * (a.q_dim + k + v), act, "tp"),
            *fused, Term(MLP_INPUT, n * d, act, "input"),
            Term("MLP hidden (gate, up, product; SiLU recomputed)", 3 * n * m.d_ff, act, "tp")]


def compiled_backward_terms(block: Block, d: int, b: int, s: int, act: int, repeat_kv: bool = False) -> list[Term]:
    """What a compiled layer checkpointed in full holds at its backward's peak beyond its kept input and the
    gradients: its forward rebuilt, as the layer keeps it without recompute, and the backward graph's
    temporaries then alive. The peak is in the MLP's backward: every rebuilt tensor is still there (the
    attention's are read later), with the gradient arriving at the layer (in the input's place: same size)
    and the gradients of the gate, the up projection and their product. Measured on the CPU's allocator
    (tests/compiled_backward.py, tests/data/compiled_backward.json)."""
    kept = compiled_layer_terms(block, d, b, s, act, "none", repeat_kv)
    m, n = block.mlp, b * s
    arriving = Term("the residual after attention; the gradient arriving at the layer", 2 * n * d, act, "sp")
    return [arriving, *kept[1:],
            Term("MLP backward: gradients of the gate, up and their product", 3 * n * m.d_ff, act, "tp")]


def _llama(block: Block) -> Attention:
    """The layer measured compiled: pre-norm RMSNorms, attention without extras, a SiLU-gated dense MLP,
    no biases. Another layer's partition is not measured, so it is refused rather than guessed."""
    a, m = block.attention, block.mlp
    plain = (type(a) is Attention and not any(getattr(a, f, None) for f in ATTENTION)
             and not (a.q_bias or a.k_bias or a.v_bias or a.o_bias))
    swiglu = isinstance(m, MLP) and m.gated and m.activation == "silu" and not any(getattr(m, f) for f in MLP_EXTRAS)
    norm = block.norm.kind == "rmsnorm" and block.norm.weight and not (block.norm.unit_offset or block.norm.pow_rsqrt)
    if not (plain and swiglu and norm and tuple(block.norms) == ("attn_in", "mlp_in")
            and not (block.parallel or block.post_ln or block.shortcut or block.shared or block.hyper)
            and block.pairs == 1 and block.residual_scale is None and not (block.residual_dropout or block.mixer_dropout)):
        raise GptcalcError("--compile: what inductor keeps is measured for a Llama layer (RMSNorm, attention, a "
                           "SiLU-gated MLP, no biases); use it without --compile for this model")
    return a
