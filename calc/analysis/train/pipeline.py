"""Pipeline parallelism as torch's pipelining runs a 1F1B step (torchtitan's): each stage holds its own
layers, its own micro-batches in flight and its own buffers, and a run's peak is the largest stage's.

A step runs n micro-batches (`Setup.pp_microbatches`, `--pp-microbatches`): a real run sets it (torchtitan's
`pipeline_parallel_microbatches`, Megatron-LM's num_micro_batches = global batch ÷ (micro-batch × dp):
megatron/core/num_microbatches_calculator.py, DeepSpeed's gradient_accumulation_steps under its pipeline engine:
deepspeed/runtime/pipe/engine.py, `self.micro_batches = self.gradient_accumulation_steps()`); unset it is p, torchtitan's default at 9dec370, the 405B
runs' commit (pipelining_utils.build_pipeline_schedule, `n_microbatches = pipeline_parallel_degree` when
`pipeline_parallel_microbatches` is unset; p × V, every stage, from 90567fc98, 2025-01-07). torch's Schedule1F1B
refuses n < p (torch 2.13, its __init__) and runs w = `min(n_microbatches, num_stages - stage_index)`
forwards on stage i before its first backward, then alternates a backward and a forward while forwards
remain (n − w times), then runs the remaining backwards: when the j-th backward (from 0) starts,
min(w, n − j) micro-batches are in flight (n = p: p − max(i, j)). Gradients accumulate over the
micro-batches, so every backward after the first runs beside the stage's whole gradients; the largest of
those is counted (peak._pipelined), the (n − w)-th where a micro-batch's activations outweigh the one or two
residuals a backward adds to the buffers (n = p: the i-th; stage 0's at n = p: the one after the first), the
last with w in flight, where the in flight, the earlier micro-batches' buffers and the gradients are all at
their most.

torch's PipelineStage (torch/distributed/pipelining/stage.py) keeps, per micro-batch:

- its stage output: `forward_one_chunk` appends it to `output_chunks`, which only the next step's
  `clear_runtime_states` empties. Until torch 2.8 every stage did this (pytorch#153383, May 2025, "we
  should not keep the outputs of each stage in memory", keeps the last stage's only); the 405B runs
  used torch 1963fc8 (December 2024). The last stage's output is the model's, the logits (the hidden
  state where the loss applies the head itself), and `step()` ends by concatenating every micro-batch's
  (`_merge_outputs`), a second copy for a moment, beside the whole gradients;
- on every stage but the last, a receive buffer for its output gradient (`_create_grad_recv_info`, a
  `torch.empty` of the output's shape, made at the first step and kept);
- on every stage but the first, a receive buffer for its input (`_create_act_recv_info`, made once,
  kept): the received tensor itself becomes the stage's input (`_retrieve_recv_activations`:
  `info.buffer.requires_grad_()`), so for a micro-batch in flight it is the first layer's kept input,
  counted there; and that input's gradient, which backward left in the buffer's `.grad` until the next
  step's `clear_runtime_states` (`a.buffer.grad = None`) in that torch (pytorch#164329, October 2025,
  drops it once it is handed to the send).

Each is the residual stream between two layers, micro-batch × tokens × d_model in bf16, ÷ tp under
sequence parallelism (the layers' RowwiseParallel outputs are Shard(1), handed on as local tensors).
Measured on three gloo ranks (tests/pipeline_1f1b.py): every stage, every backward, less what the torch
there (2.13) no longer keeps of the two later changes named above.

Which layers a stage holds (`stage_sizes`) is the framework's rule, `--pp-split`:

- `even`, gptcalc's default: ⌈L/p⌉ consecutive layers a stage, the last the rest, refused where that
  leaves a stage empty (12 layers over 5 stages: 3, 3, 3, 3, 0). Megatron-LM's default split is this one
  where it runs at all: it asserts that p divides L (megatron/core/transformer/
  transformer_block.py @ d98e8a6, get_num_layers_to_build) and takes an uneven split only as given
  (num_layers_in_first/last_pipeline_stage: a `--pp-split` list). torchtune has no pipeline parallelism
  (no torch.distributed.pipelining in torchtune/ or recipes/ @ bd2a0fc).
- `torchtitan`, its `generate_split_points` when no `pipeline_parallel_split_points` are given
  (torchtitan/parallelisms/pipelining_utils.py @ 9dec370, the 405B runs' commit, 1F1B's one stage a rank):
  ⌊L/p⌋ on the first stage, one more on each middle stage while L mod p lasts, the rest on the last —
  126 layers over 8: 15, 16 × 6, 15. The embedding and the head weigh nothing there; torchtitan counts each
  as one layer only from April 2025 (f64cf3c, input_weight and output_weight), not modelled: give its
  split as a list.
- a list, each stage's layers (`15,16,16,16,16,16,16,15`), or torchtitan's split points, the first layer of
  every stage after the first (`layers.15,layers.31,...`, its pipeline_parallel_split_points).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING

from calc.errors import GptcalcError

if TYPE_CHECKING:
    from calc.analysis.train import Setup

__all__ = ["BF16", "SPLITS", "Stage", "held_buffers", "residual_bytes", "stage_bounds", "stage_buffers",
           "stage_outputs", "stage_sizes"]

BF16 = 2
SPLITS = ("even", "torchtitan")
POINT = "layers."  # torchtitan's split points name the first layer of a stage: layers.15


def residual_bytes(s: "Setup", d_model: int) -> int:
    """One micro-batch's residual stream on one GPU, what a stage sends on or receives."""
    return -(-s.micro_batch * s.local_seq * d_model // (s.tp if s.sp else 1)) * BF16


@dataclass(frozen=True)
class Stage:
    """Stage `index` of `stages` in a 1F1B step of `n` micro-batches (see the module's docstring)."""

    index: int
    stages: int
    microbatches: int | None = None  # a step's; None: as many as stages (torchtitan's default at 9dec370)

    @property
    def n(self) -> int:
        """The micro-batches of a step."""
        return self.microbatches or self.stages

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.stages - 1

    @property
    def warmup(self) -> int:
        """Forwards before the first backward: min(n, p − i)."""
        return min(self.n, self.stages - self.index)

    def in_flight(self, backward: int) -> int:
        """Micro-batches whose activations the stage holds when its `backward`-th backward starts."""
        return min(self.warmup, self.n - backward)

    def name(self) -> str:
        where = "first" if self.first else "last" if self.last else "middle"
        return f"stage {self.index} of {self.stages} ({where})"


def stage_buffers(s: "Setup", d_model: int, stage: Stage, backward: int | None) -> tuple[tuple[str, int], ...]:
    """The pipelining buffers a non-last stage holds when its `backward`-th backward starts (None: at the
    step's end, every micro-batch's); the last stage's outputs are the loss's business (peak.py)."""
    if s.pp == 1:
        return ()
    n = stage.n
    done = n if backward is None else backward  # backwards run
    forwards = n if backward is None else done + stage.in_flight(backward)
    return held_buffers(s, d_model, stage.first, stage.last, n, forwards, done)


def held_buffers(s: "Setup", d_model: int, first: bool, last: bool, microbatches: int, forwards: int,
                 backwards: int) -> tuple[tuple[str, int], ...]:
    """The pipelining buffers of one stage of a step of `microbatches` that has run `forwards` forwards and
    `backwards` backwards there (see the module's docstring): every forward's output, every backward's input
    gradient, a receive buffer per micro-batch each way (the input's counted with the activations while its
    micro-batch is in flight). One schedule's or another's, the order only sets the two counts
    (interleaved.py)."""
    r, k = residual_bytes(s, d_model), forwards - backwards
    out = []
    if not last:
        out += [stage_outputs(forwards, r),
                ("pipeline: output-gradient receive buffers", microbatches * r)]
    if not first:
        out += [("pipeline: input receive buffers not in flight", (microbatches - k) * r),
                ("pipeline: input gradients (.grad)", backwards * r)]
    return tuple((what, size) for what, size in out if size)


def stage_outputs(count: int, each: int) -> tuple[str, int]:
    """`count` micro-batches' outputs of `each` bytes, which PipelineStage appends to `output_chunks` and keeps
    until the next step (see the module's docstring): one entry, whichever stage and schedule hold them."""
    return "pipeline: stage outputs (output_chunks)", count * each


def stage_sizes(n_layers: int, pp: int, split: str, stages: str = "--pp is") -> tuple[int, ...]:
    """The layers of each of `pp` stages under `split`, a rule of SPLITS or a list (see the module's docstring);
    `stages` names where the count of stages comes from, for an error."""
    if split == "even":
        return _even(n_layers, pp)
    if split == "torchtitan":
        base, extra = divmod(n_layers, pp)
        middle = [base + (i <= extra) for i in range(1, pp - 1)]
        return (base, *middle, n_layers - base - sum(middle))[:pp]
    return _given(split.split(","), n_layers, pp, stages)


def _even(n_layers: int, pp: int) -> tuple[int, ...]:
    """⌈L/p⌉ layers a stage, the last the rest; refused where that leaves a stage without a layer (12 over 5:
    3, 3, 3, 3 and none), a stage no framework builds. Refused rather than rebalanced: `even` stays the one
    rule Megatron-LM's default takes wherever p divides L (and it refuses the rest), and the balanced split
    is torchtitan's, named in the error."""
    per = -(-n_layers // pp)
    filled = -(-n_layers // per)
    if filled < pp:
        empty = f"stage {filled}" if filled == pp - 1 else f"stages {filled}-{pp - 1}"
        titan = ",".join(map(str, stage_sizes(n_layers, pp, "torchtitan")))
        raise GptcalcError(f"--pp-split even: {n_layers} layers at ⌈{n_layers}/{pp}⌉ = {per} a stage fill {filled} "
                           f"of the {pp} stages and leave {empty} without a layer; give --pp-split torchtitan "
                           f"({titan}) or a list of each stage's layers")
    return tuple(min(per, n_layers - i * per) for i in range(pp))


def stage_bounds(n_layers: int, pp: int, split: str, index: int) -> tuple[int, int]:
    """Stage `index`'s layers, [first, last)."""
    ends = (0, *accumulate(stage_sizes(n_layers, pp, split)))
    return ends[index], ends[index + 1]


def _given(items: list[str], n_layers: int, pp: int, stages: str) -> tuple[int, ...]:
    """A list of layers a stage, or of torchtitan's split points (`layers.N`, one fewer than the stages)."""
    points = all(item.strip().startswith(POINT) for item in items)
    numbers = [item.strip().removeprefix(POINT) if points else item.strip() for item in items]
    if not all(n.isdigit() for n in numbers):
        raise GptcalcError(f"--pp-split: {','.join(items)!r} is not {', '.join(SPLITS)}, a list of layers per stage "
                           f"(15,16,...) or torchtitan's split points (layers.15,layers.31,...)")
    sizes = [b - a for a, b in zip([0, *map(int, numbers)], [*map(int, numbers), n_layers])] if points \
        else [int(n) for n in numbers]
    if len(sizes) != pp:
        raise GptcalcError(f"--pp-split: {len(sizes)} stages given, {stages} {pp}")
    if min(sizes) < 1:
        raise GptcalcError(f"--pp-split: every stage needs a layer or more (got {','.join(map(str, sizes))})")
    if sum(sizes) != n_layers:
        raise GptcalcError(f"--pp-split: the stages hold {sum(sizes)} layers, the model has {n_layers}")
    return tuple(sizes)
