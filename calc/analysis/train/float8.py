"""Float8 training (torchao's Float8Linear, torchtitan's float8 converter): what it changes in memory.

torchao swaps the layers' nn.Linear for Float8Linear (torchtitan leaves the output projection in
bf16: `filter_fqns=["output"]`). What it stores, from torchao's source
(pytorch/ao @ 36027d82, torchao/float8/float8_linear.py):

- saved for backward: the high-precision input and weight, `ctx.save_for_backward(input_hp,
  weight_hp_t)` (line 45), exactly what a bf16 linear saves, so the kept activations do not change;
- the fp8 casts are transient: each matmul casts its two operands to float8 (1 byte an element) in
  forward, and backward casts grad_output and again the saved input and weight for its two matmuls;
  rowwise scaling casts each operand along both axes (one scale per row for each gemm), tensorwise
  once (a transposed view serves the other gemm);
- the scales: dynamic scaling computes one fp32 scale per cast (tensorwise) or per row (rowwise) on
  every call and keeps no amax history (delayed scaling, with its history buffers, was removed);
- `enable_fsdp_float8_all_gather` (tensorwise only, torchao/float8/config.py:225 and :271): FSDP
  all-gathers the weights already cast to fp8 (WeightWithDynamicFloat8CastTensor, fsdp_utils.py),
  so a gathered layer's matrices take 1 byte a parameter instead of 2.

torchtitan's published runs agree that little changes: Llama 3.1 8B on 8 H100s with FSDP and
torch.compile reserved 77.0 GiB in bf16 and 76.8 GiB with Float8
(benchmarks/llama3_h100_202412_torchtitan.md, Table 1).
"""

from __future__ import annotations

from calc.analysis.shapes import journey
from calc.spec.model import ModelSpec

__all__ = ["FLOAT8", "cast_bytes", "gathered_matrix_bytes"]

FLOAT8 = ("none", "tensorwise", "tensorwise-all-gather", "rowwise")


def gathered_matrix_bytes(float8: str) -> int:
    """Bytes per matrix parameter FSDP gathers: fp8 under float8 all-gather, else bf16."""
    return 1 if float8 == "tensorwise-all-gather" else 2


def cast_bytes(spec: ModelSpec, float8: str, tokens: int, tp: int) -> int:
    """The fp8 operands of the largest layer linear's backward (grad_output, input, weight: 1 byte
    an element each; rowwise casts each along both axes). 0 without float8."""
    if float8 == "none":
        return 0
    largest = 0
    for step in journey(spec, 1).steps:
        if step.block and step.weight is not None and len(step.weight.sizes) == 2:
            inputs, outputs = step.weight.sizes[0], -(-step.weight.sizes[1] // tp)
            largest = max(largest, tokens * inputs + inputs * outputs + tokens * outputs)
    return largest * (2 if float8 == "rowwise" else 1)
