"""What bitsandbytes' 4-bit matmul holds beyond a bf16 linear's, by version (`--bnb`).

A QLoRA base runs every quantised linear through bitsandbytes' `MatMul4Bit`. Two of its versions
differ in what a step allocates:

- `0.42.0` (the version litgpt pins, `pyproject.toml` at 5895df10 and 03ffc55): forward stores its
  input as a plain attribute, `ctx.tensors = (A, B)` (bitsandbytes/autograd/_functions.py at tag
  0.42.0, line 523), not through save_for_backward, so backward never releases it: each quantised
  linear's input lives as long as the graph does — in a loop that keeps the previous micro-batch's
  output (litgpt's `logits`), through the next micro-batch's forward. Each matmul dequantises its
  weight with `F.dequantize_4bit(B, quant_state).to(A.dtype)` (line 516): in the dtype the weight
  was quantised from, fp16 under Lightning's BitsandbytesPrecision (`quantize`: `weight.to(...,
  dtype=torch.half)`), then a bf16 cast — 4 bytes per weight for a moment.
- `current` (0.43.2 on; measured at 0.50.2): `ctx.tensors = (None, B)` ("fix QLoRA mem bug: delete
  useless buffered activation", #1270, commit 9e75374), and the weight is dequantised straight
  into the input's dtype: 2 bytes per weight.

Measured on the CPU with 0.42.0's MatMul4Bit (its source, tests/data) over bitsandbytes 0.50.2's
kernels (tests/test_train_bnb.py): after backward it still holds every quantised linear's input,
and an fp16-quantised head's forward peaks at 4 bytes per head weight.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from calc.analysis.shapes import Step, journey
from calc.spec.model import ModelSpec

if TYPE_CHECKING:
    from calc.analysis.train import Setup

__all__ = ["BNB", "dequantised_bytes", "graph_inputs", "quantised_head"]

# version: (keeps its inputs on ctx past backward, bytes per weight a dequantisation holds at once)
BNB: dict[str, tuple[bool, int]] = {"0.42.0": (True, 4), "current": (False, 2)}


def dequantised_bytes(s: "Setup") -> int:
    """Bytes per weight while a 4-bit matmul dequantises it."""
    return BNB[s.bnb][1]


def quantised_head(spec: ModelSpec, s: "Setup") -> bool:
    """QLoRA quantises the head too where the framework says so and the head is a linear of its own
    (Lightning replaces nn.Linear modules, not the embedding a tied head shares)."""
    return s.qlora and s.qlora_head and not spec.head.tied


def _linear(step: Step) -> bool:
    return step.weight is not None and len(step.weight.sizes) >= 2


def _new_input(prev: Step | None, step: Step, parallel: bool) -> bool:
    """Linears in a row over one input share it (q, k, v; gate, up; a MoE's experts' gate and up). After
    the attention's output projection the MLP's first linears read a new input (the MLP's normed input),
    except in a parallel block, where they read the attention's normed input, counted already."""
    if prev is None or not _linear(prev):
        return True
    if prev.id == "attn_out":
        return not parallel
    return prev.inputs[0].sizes != step.inputs[0].sizes


def graph_inputs(spec: ModelSpec, s: "Setup") -> int:
    """Bytes of the distinct inputs of the quantised linears of one micro-batch — what a graph built by
    a version that keeps them on ctx holds after its backward: every layer's, and the head's if quantised.
    0.42.0 keeps an input only where it needs a gradient (`if any(ctx.needs_input_grad[:2])`), which
    the first layer's first linears' input, the frozen embedding's normed output, does not."""
    if not (s.qlora and BNB[s.bnb][0]):
        return 0
    steps = journey(spec, s.local_seq, s.micro_batch).steps
    first = next(st for st in steps if st.block and _linear(st))
    total = -prod(first.inputs[0].sizes)  # the first linears' input needs no gradient (a frozen embedding's)
    for kind, n in spec.layer_counts().items():
        prev = None
        for step in (st for st in steps if st.block == kind):
            if _linear(step) and _new_input(prev, step, spec.blocks[kind].parallel):
                total += n * prod(step.inputs[0].sizes)
            prev = step
    if quantised_head(spec, s):
        total += s.micro_batch * s.local_seq * spec.d_model
    return 2 * total
