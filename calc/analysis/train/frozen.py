"""What a layer keeps when its base is frozen (LoRA, QLoRA): a linear's input only where something reads it.

Autograd saves a tensor for the gradients it will compute: a linear keeps its input for its weight's
gradient, so a frozen linear (weight requires_grad False) keeps none. Its input is still kept where
another reader saves it: a LoRA adapter that reads it as it is (A's matmul keeps it for A's gradient;
with LoRA dropout A reads the dropped-out copy instead, and with PEFT's fp32 adapters on a 16-bit base a
cast copy, Setup.adapter_copies, both counted with the adapter; dropout keeps only its mask), or a 4-bit
matmul that stores its input itself (bitsandbytes 0.42.0, bnb.py). So under LoRA:

- the attention's normed input is kept where q, k or v has an adapter without dropout (in a parallel
  block, which feeds the MLP the same input, also gate or up);
- the heads' output, W_O's input, where o has one; a fused attention keeps that tensor as its own
  output anyway (the output laid out [B, T, h, d] is W_O's input, no copy), so only explicit attention
  (its transposed copy) drops it;
- the MLP's normed input where gate or up has one; the product a gated MLP hands down (plain: the
  activation's output) where down has one;
- the head's input where the head has one.

A MoE block's frozen router keeps no input, and its experts' grouped matmuls, frozen, keep neither the
routed rows (read by gate and up) nor the product (read by down): the dense MLP's rule, row by row; a
shared expert is a dense MLP. PEFT's adapters on the expert stacks (target_parameters, params.STACKS)
make the stacks' merged weights require gradients, so the grouped matmuls keep the routed rows (an
adapter on gate and up) and the product (one on down) as full training does; gate, up and down then
adapt the shared expert only. MLA's q_a and kv_a take no adapter, so its normed input goes (but for a
plain q projection's adapter), q_b's input (the Q latent) stays for an adapter on q, kv_b's never. The
norms' frozen weights, the Q and K norms' and MLA's latent norms' too, keep no normed x (`Setup.norms`,
activations._norm). The recurrent and lightning mixers take no adapter: each of their terms kept only for a
weight's gradient (Term.weight_grad: in_proj's and out_proj's inputs, a gated norm's normed x, exp(A_log)'s
output ...) goes; so do DeepSeek-V4's (only q_b takes an adapter): the hyper-connections' normed copies and
mixing output, the latent norms' normed x, W_o_a's and W_o_b's inputs. Counted for layers of those mixers
(MEASURED: Mamba v1's too, its in_proj's input and exp(A_log)'s output, Jamba's also its copies of x_proj's
and out_proj's inputs, its dt, B and C norms' normed x and dt_proj's input) and a dense MLP or a top-k MoE
(_plain, DeepSeek-V4's clamped experts too); other MoE forms keep their full-training count (not measured
frozen). Zamba2's shared blocks' terms follow the attention and MLP rules by their labels; their built-in
adapters' middles and output linear's input are weight_grad (measured: tests/test_train_torch.py).
Measured with saved-tensor hooks on transformers' tiny Llama with LoRA adapters on every
combination of targets, with and without dropout, on tiny Qwen3-MoE, Qwen2-MoE, Mixtral and OLMoE with
adapters on the attention, on tiny DeepSeek-V3, DeepSeek-V2 and GLM-4.7-Flash (MLA) with adapters on q
and o, and on the tiny hybrids' Mamba, Mamba2, gated DeltaNet, KDA, short-conv and lightning layers, frozen, with
the GPU kernels' saves stood in (tests/test_train_torch.py), and on tiny DeepSeek-V4 (tests/test_deepseek_v4.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from calc.analysis.train.activations import (ATTENTION_INPUT, CLAMPED_KEPT, GATED_KEPT, HEAD_INPUT, KV_LATENT,
                                             MLP_INPUT, PLAIN_KEPT, Q_LATENT, ROUTED_ROWS, W_O_INPUT, Term)
from calc.analysis.train.bnb import BNB, quantised_head
from calc.analysis.train.params import STACKS, stack_targets
from calc.parts import (MLA, MLP, Attention, CompressedAttention, GatedDeltaNet, KimiDeltaAttention, LightningAttention,
                        Mamba, Mamba2, MoE, ShortConv)
from calc.spec.model import Block, ModelSpec

if TYPE_CHECKING:
    from calc.analysis.train import Setup

__all__ = ["frozen_layer", "frozen_outside"]

# The mixers whose frozen layers are measured: attention and MLA by their labels (the adapters they take), the
# recurrent and lightning mixers, whose projections take none, and DeepSeek-V4's compressed attention (q_b's alone
# takes one) by their terms' weight_grad
MEASURED = (Attention, MLA, Mamba, Mamba2, GatedDeltaNet, KimiDeltaAttention, ShortConv, LightningAttention,
            CompressedAttention)
# A hidden term's ending -> how many tensors of its width it keeps; the last of them is the product, down's input
HIDDEN_KEPT = {GATED_KEPT: 4, PLAIN_KEPT: 2, CLAMPED_KEPT: 6}


def _read(s: "Setup", *targets: str) -> bool:
    """An adapter on one of `targets` reads its input as it is: no LoRA dropout between, and no cast copy
    (Setup.adapter_copies; an expert stack's adapter is folded into the weight, so its matmul reads the rows)."""
    return not s.lora_dropout and any(t in s.lora_targets and (t in STACKS or not s.adapter_copies) for t in targets)


def _plain(m: MLP | MoE | None) -> bool:
    """An MLP, or a MoE's experts and shared expert, whose kept tensors are the ones measured frozen: a
    plain or SwiGLU MLP, or DeepSeek-V4's clamped one; top-k experts through transformers' grouped matmuls
    without biases, gpt-oss's or Llama-4's clamps or Gemma-4's scaled router and norms."""
    if isinstance(m, MoE):
        return not (m.all_experts or m.expert_bias or m.clamp or m.swiglu_limit or m.router_scale
                    or m.shared_norms) and m.gated and m.activation != "xielu" and _plain(m.shared)
    return m is None or (type(m) is MLP and m.activation != "xielu" and not (m.clamp or m.sparsity or m.swiglu_limit))


def _input_readers(block: Block) -> tuple[str, ...]:
    """The targets whose adapters read the attention's normed input: q, k and v; MLA's q_a and kv_a take
    none (its "q" adapts q_b, which reads the Q latent), unless it has a plain q projection; nor do
    DeepSeek-V4's q_a, kv and compressors."""
    a = block.attention
    if isinstance(a, CompressedAttention):
        return ()
    return ("q",) if isinstance(a, MLA) and not a.q_lora_rank else () if isinstance(a, MLA) else ("q", "k", "v")


def frozen_layer(terms: list[Term], block: Block, s: "Setup") -> list[Term]:
    """A layer's full-training terms less the inputs that only frozen linears would have kept; without LoRA
    nothing is frozen and the terms stay as they are."""
    if not s.lora_rank or (s.qlora and BNB[s.bnb][0]) or not _plain(block.mlp) \
            or not all(type(a) in MEASURED for a in block.mixers()):
        return terms
    mlp_readers = ("gate", "up")
    stacked = bool(stack_targets(s.lora_targets))  # PEFT's stack adapters, not gate, up, down, read the rows
    experts = ("experts_gate_up",) if stacked else mlp_readers
    shared = block.parallel and len(block.norms) == 1  # one norm feeds the attention and the MLP
    dropped = {ATTENTION_INPUT: not _read(s, *_input_readers(block), *(mlp_readers if shared else ())),
               W_O_INPUT: s.attention != "flash" and not _read(s, "o"),
               MLP_INPUT: not _read(s, *mlp_readers), ROUTED_ROWS: not _read(s, *experts),
               Q_LATENT: not _read(s, "q"), KV_LATENT: True}  # kv_b takes no adapter
    out = []
    for t in terms:
        if dropped.get(t.label) or t.weight_grad:
            continue
        down = ("experts_down",) if stacked and t.label.startswith("experts'") else ("down",)
        per = next((k for end, k in HIDDEN_KEPT.items() if t.label.endswith(end)), 0)
        if per and not _read(s, *down):  # down's input: the last of them
            t = Term(t.label + (", down frozen: before only" if per == 2 else ", down frozen: no product kept"),
                     t.elements * (per - 1) // per, t.bytes_per, t.split, t.head)
        out.append(t)
    return out


def frozen_outside(terms: list[Term], spec: ModelSpec, s: "Setup") -> list[Term]:
    """Outside the layers: the head's input goes where the head is frozen and nothing else reads it."""
    if _read(s, "head") or (quantised_head(spec, s) and BNB[s.bnb][0]):
        return terms
    return [t for t in terms if t.label != HEAD_INPUT]
