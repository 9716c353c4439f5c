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
Under the per-op policy the backward rebuilds what the policy did not keep, and peaks in the MLP's backward
or, where inductor leaves the MLP weights' gradients to the end, in the attention's
(`compiled_op_backward_terms`, the larger of the two, measured the same way).
"""

from __future__ import annotations

from calc.analysis.train.activations import ATTENTION_INPUT, MLP_INPUT, W_O_INPUT, Term, log_sum_exp, qkv_terms
from calc.errors import GptcalcError
from calc.parts import MLP, Attention
from calc.spec.model import Block

__all__ = ["compiled_backward_terms", "compiled_layer_terms", "compiled_op_backward_terms"]

MLP_EXTRAS = ("bias", "sparsity", "clamp", "gate_clamp", "swiglu_limit", "gate_scale", "down_scale")
ATTENTION = ("qk_norm", "window", "output_gate", "sinks", "softcap", "temperature", "augment", "dropout")


def compiled_layer_terms(block: Block, d: int, b: int, s: int, act: int, recompute: str,
                         repeat_kv: bool = False) -> list[Term]:
    """What one compiled layer keeps under `recompute` none or op (full: layer_terms' one input)."""
    a, m, n = _llama(block), block.mlp, b * s
    fused = [Term(W_O_INPUT + ": the fused attention's output", n * a.o_dim, act, "tp"),
             log_sum_exp(b, a.n_heads, s)]
    if recompute == "op":
        odd = (a.q_dim, a.v_dim, m.d_ff)  # wq, wv, w1 of wq wk wv wo w1 w3 w2 (w2's output is not needed)
        return [Term("layer input (the checkpoint)", n * d, act, ""),
                Term("the odd-numbered matmuls' outputs (wq, wv, w1)", n * sum(odd), act, ""), *fused]
    return [Term("each norm's input: the layer's, the residual after attention", 2 * n * d, act, "sp"),
            Term("each norm's rsqrt (fp32)", 2 * n, 4, "sp"),
            Term(ATTENTION_INPUT, n * d, act, "input"), *qkv_terms(a, n, act, repeat_kv),
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


def compiled_op_backward_terms(block: Block, d: int, b: int, s: int, act: int, repeat_kv: bool = False) -> list[Term]:
    """What a compiled layer under torchtitan's per-op policy holds at its backward's peak beyond what it keeps
    (compiled_layer_terms "op") and the gradients: the larger of two moments, each what the CPU allocator held
    (tests/compiled_backward.py). Inductor picks the order of the backward's kernels per shape, and the order
    decides which moment is larger: where it computes the MLP weights' gradients last (torchtitan's form at
    d96, both forms at d128) the tensors they read live through the attention's backward, which then peaks;
    where it computes them at once (d256, d192, the GQA form at d96) the MLP's backward peaks. Both are counted
    and the larger taken, so the rule is the recorded peak where the later order was chosen and an upper
    bound where it was not (docs/training.md)."""
    mlp, attention = _op_mlp_moment(block, d, b * s, act), _op_attention_moment(block, d, b, s, act, repeat_kv)
    return max(mlp, attention, key=lambda terms: sum(t.bytes(1, False) for t in terms))


def _op_shared(d: int, n: int, act: int) -> list[Term]:
    """Alive at both moments: the gradient arriving at the layer, W_O's output rebuilt (the residual after
    attention is its sum with the kept input), the MLP norm's output rebuilt (w1's and w3's input) and its
    rsqrt (fp32)."""
    return [Term("the gradient arriving at the layer", n * d, act, "sp"),
            Term("rebuilt: W_O's output, the MLP norm's output", 2 * n * d, act, "sp"),
            Term("rebuilt: the MLP norm's rsqrt (fp32)", n, 4, "sp")]


def _op_mlp_moment(block: Block, d: int, n: int, act: int) -> list[Term]:
    """In the MLP's fused SiLU backward: w3's output rebuilt (w1's is kept), w2's input gradient, and the
    kernel's outputs, the product (w2's weight gradient reads it) and the gate's and up's gradients."""
    return [*_op_shared(d, n, act),
            Term("MLP backward: up rebuilt, the product, its gradient, the gate's and up's", 5 * n * block.mlp.d_ff,
                 act, "tp")]


def _op_attention_moment(block: Block, d: int, b: int, s: int, act: int, repeat_kv: bool) -> list[Term]:
    """In the attention kernel's backward, where inductor leaves the MLP weights' gradients to the end: the
    product and the gate's and up's gradients still alive for them, the MLP input's two gradients (through
    w1 and w3) and two fp32 per token (the attention norm's rsqrt rebuilt, the MLP norm's backward sum), the
    attention norm's output rebuilt, the attention output's gradient, K rebuilt and rotated (at the kv
    heads), K and V copied to every head where the model repeats them, the log-sum-exp's copy (fp32) and the
    kernel's dQ, dK, dV (dK, dV at the heads K and V were given at)."""
    a, n = _llama(block), b * s
    repeated = repeat_kv and a.kv_dim < a.q_dim
    kv_in = a.q_dim if repeated else a.kv_dim
    copies = [Term("K and V copied to every head", 2 * n * a.q_dim, act, "tp")] if repeated else []
    return [*_op_shared(d, n, act),
            Term("the product, the gate's and up's gradients (for the MLP weights' gradients)",
                 3 * n * block.mlp.d_ff, act, "tp"),
            Term("the MLP input's gradients through w1 and w3", 2 * n * d, act, "sp"),
            Term("the attention norm's rsqrt, the MLP norm's backward sum (fp32)", 2 * n, 4, "sp"),
            Term("rebuilt: the attention norm's output", n * d, act, "input"),
            Term("the attention output's gradient", n * a.o_dim, act, "tp"),
            Term("rebuilt: K, and K rotated", 2 * n * a.kv_dim, act, "tp"), *copies,
            Term("the log-sum-exp's copy (fp32)", b * a.n_heads * s, 4, "tp"),
            Term("the attention's dQ, dK, dV", n * (a.q_dim + 2 * kv_in), act, "tp")]


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
