"""Pipeline parallelism as torch's pipelining runs a 1F1B stage (torchtitan's): what the stage holds
beside its layers' activations, and how many micro-batches are in flight at its peak.

torchtitan runs p micro-batches a step unless told otherwise (9dec370, the 405B runs' commit:
pipelining_utils.build_pipeline_schedule, `n_microbatches = pipeline_parallel_degree` when
`pipeline_parallel_microbatches` is unset), and torch's Schedule1F1B runs `min(n_microbatches,
num_stages - stage_index)` forwards before a stage's first backward: all p on the first stage, the one
counted here. torch's PipelineStage (torch/distributed/pipelining/stage.py) also keeps, on that stage:

- every micro-batch's stage output: `forward_one_chunk` appends it to `output_chunks`, which only the
  next step's `clear_runtime_states` empties. Until torch 2.8 every stage did this (pytorch#153383,
  May 2025, "we should not keep the outputs of each stage in memory", keeps the last stage's only);
  the 405B runs used torch 1963fc8 (December 2024);
- a receive buffer for every micro-batch's output gradient: `_prepare_backward_infra` calls
  `_create_grad_recv_info` once per micro-batch, each a `torch.empty` of the output's shape, made at
  the first step and kept.

Both are the residual stream between two layers, micro-batch × tokens × d_model in bf16, ÷ tp under
sequence parallelism (the layers' RowwiseParallel outputs are Shard(1), handed on as local tensors).

FSDP under pipeline parallelism accumulates the stage's unsharded gradients in fp32 from the first
micro-batch's backward on (pipelining's backward_maybe_with_nosync turns gradient sync off; FSDP2's
post_backward, to_accumulated_grad_if_needed), and that backward frees the first micro-batch's
activations: so where those gradients are counted in full, p − 1 micro-batches are in flight beside
them (the first stage's peak: its second micro-batch's backward).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from calc.analysis.train import Setup

__all__ = ["in_flight", "stage_buffers"]

BF16 = 2


def _residual_bytes(s: "Setup", d_model: int) -> int:
    """One micro-batch's residual stream on one GPU, what a stage sends on or receives."""
    return -(-s.micro_batch * s.local_seq * d_model // (s.tp if s.sp else 1)) * BF16


def stage_buffers(s: "Setup", d_model: int) -> tuple[tuple[str, int], ...]:
    """The first stage's pipelining buffers, held through the step (see the module's docstring)."""
    if s.pp == 1:
        return ()
    each = s.pp * _residual_bytes(s, d_model)
    return (("pipeline: every micro-batch's stage output, kept until the next step (output_chunks)", each),
            ("pipeline: a receive buffer for every micro-batch's output gradient", each))


def in_flight(s: "Setup", accumulating: bool) -> int:
    """Micro-batches whose activations the first stage holds at its peak: p, or p − 1 beside gradients
    accumulated in full (`accumulating`), which exist only once the first micro-batch's backward is done."""
    return s.pp - 1 if accumulating and s.pp > 1 else s.pp
