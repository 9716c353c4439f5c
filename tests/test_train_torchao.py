"""torchao's 8-bit AdamW measured where torchao is installed (skipped where it is not): its states
and the temporaries of its step, what `--optimizer adamw8bit-torchao` counts (calc/analysis/train/states.py).

The step is torch.compile'd per parameter (torchao/optim/adam.py, single_param_adam), so its buffers are
inductor's, which a dispatch-mode tracker cannot see: the step's peak is read from torch's CPU allocator
as the profiler records it (tests/dtensor_tp.py, Allocated). Measured with torchao 0.18 on the CPU
(inductor's C++ kernels, about 20 s to compile); a GPU's Triton kernels may fuse differently.
"""

from __future__ import annotations

import pytest
import torch

from calc.analysis.train.states import Tensor, optimizer_bytes, step_temporary_bytes
from dtensor_tp import Allocated

optim = pytest.importorskip("torchao.optim")


def test_states_and_step_temporaries() -> None:
    """A 1024 × 1024 bf16 parameter gets uint8 codes, an fp32 scale per 256 and a 256-entry fp32 code map
    per state; a 3,072-vector (under 4,096 elements) plain bf16 m and v. The second step allocates, at
    its peak, the parameter's m and v dequantised to fp32 and their new scales: 8 bytes an element and
    the scales (8/256), the new scales being freed again by the copy into the states."""
    big = torch.nn.Parameter(torch.randn(1024, 1024, dtype=torch.bfloat16))
    small = torch.nn.Parameter(torch.randn(3072, dtype=torch.bfloat16))
    optimizer = optim.AdamW8bit([big, small])
    for p in (big, small):
        p.grad = torch.randn_like(p)
    optimizer.step()  # compiles, and makes the states
    states = [optimizer.state[p][k] for p in (big, small) for k in ("exp_avg", "exp_avg_sq")]
    stored = sum(t.nbytes for s in states for t in ((s.codes, s.scale, s.qmap) if hasattr(s, "codes") else (s,)))
    tensors = [Tensor(1, 1024, 1024), Tensor(1, 3072)]
    assert stored == optimizer_bytes("adamw8bit-torchao", tensors, state_bytes=2)
    big.grad, small.grad = torch.randn_like(big), torch.randn_like(small)
    with Allocated() as step:
        optimizer.step()
    assert step.peak - 2 * 4 * big.numel() // 256 == step_temporary_bytes("adamw8bit-torchao", tensors)
