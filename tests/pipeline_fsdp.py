"""torch's pipelining with FSDP2 on each stage, run for real on the CPU: what FSDP2 adds to a pipeline rank.

torchtitan runs its 405B pipelines (Table 5/6 of its paper) with FSDP2 on each stage as parallelize_llama.py @
9dec370 wraps it: every layer and then the stage's root `fully_shard`ed with `reshard_after_forward=False`
(under PP "to avoid per-microbatch all-gathers"), bf16 parameters and fp32 gradient reduction
(MixedPrecisionPolicy), each layer fully checkpointed (checkpoint_wrapper, non-reentrant); the schedules run the
stage's backwards with no gradient sync until the last (PipelineStage.backward_maybe_with_nosync). Two gloo ranks
run Schedule1F1B (a stage each) and ScheduleInterleaved1F1B (two stages each), each once with FSDP2 on a one-rank
data-parallel mesh and once without it (the same model cast to bf16), with MICROBATCHES micro-batches a step.

For each, every rank reports the bytes alive (torch's CPU allocator as the profiler records it: blocks allocated
during the measured step, the second, and not yet freed) as each backward starts, [stage, micro-batch, bytes],
and the number of parameters of each of its stages. The difference between the two runs at each backward is what
FSDP2 adds: tests/test_train_pipeline.py checks it is the rank's stages gathered in bf16 and, for a stage that has
run a backward, its unsharded gradients in fp32 instead of bf16 — nothing a micro-batch, in either schedule.

The record (tests/data/pipeline_fsdp.json) is torch 2.6.0's, the release of the 405B runs' December 2024 nightly:
`python tests/pipeline_fsdp.py` under that torch (a venv with `pip install torch==2.6.0`). On the CPU that torch's
FSDP2 needs a stream with `record_event` and its pipelining waits only the last of a batch of gloo sends and
receives (which hangs gloo); `_cpu_shims` supplies the first and waits them all (neither allocates).
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from dtensor_tp import allocations  # noqa: E402
from pipeline_1f1b import record, spawned  # noqa: E402

RECORD = Path(__file__).parent / "data" / "pipeline_fsdp.json"
D, FF, VOCAB, LAYERS, MICRO_BATCH, SEQ = 64, 192, 96, 4, 2, 16  # LAYERS a rank
RANKS, MICROBATCHES = 2, 4
MARK = 1001  # an allocation of this many bytes marks each backward's start


class Block(nn.Module):
    """Attention's projections and a SwiGLU MLP, residual: a Llama layer's linear shapes without attention."""

    def __init__(self) -> None:
        super().__init__()
        self.wq, self.wo = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)
        self.w1, self.w3 = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.wo(torch.tanh(self.wq(x)))
        return h + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Stage(nn.Module):
    def __init__(self, layers: int, first: bool, last: bool) -> None:
        super().__init__()
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        self.tok_embeddings = nn.Embedding(VOCAB, D) if first else None
        self.layers = nn.ModuleDict({str(i): checkpoint_wrapper(Block(), preserve_rng_state=False)
                                     for i in range(layers)})
        self.output = nn.Linear(D, VOCAB, bias=False) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h)
        return self.output(h).float() if self.output is not None else h


class _Done:
    def wait(self, *args) -> None:  # noqa: ANN002
        pass


class _All:
    def __init__(self, works: list) -> None:
        self.works = works

    def wait(self) -> None:
        for work in self.works:
            work.wait()


def _cpu_shims() -> None:
    """What torch 2.6 lacks on the CPU (see the module's docstring); nothing here allocates."""
    import torch.distributed.pipelining.schedules as schedules

    if not hasattr(torch.cpu.Stream, "record_event"):
        torch.cpu.Stream.record_event = lambda self, event=None: _Done()
        torch.cpu.Stream.wait_event = lambda self, event: None
    if not hasattr(schedules, "_wait_batch_p2p"):  # later torch waits every work of the batch itself
        schedules._batch_p2p = lambda ops, desc=None: _All(dist.batch_isend_irecv(ops)) if ops else None


def _alive_at_marks(profile) -> list[int]:  # noqa: ANN001
    """Bytes alive at each MARK allocation, of the blocks allocated inside the profile."""
    live, now, marks = {}, 0, []
    for event in (node.typed[1] for node in allocations(profile)):
        if abs(event.alloc_size) == MARK:
            marks += [now] if event.alloc_size > 0 else []
        elif event.alloc_size > 0:
            live[event.ptr] = event.alloc_size
            now += event.alloc_size
        elif live.pop(event.ptr, None) is not None:
            now += event.alloc_size
    return marks


def _models(rank: int, virtual: int, fsdp: bool) -> dict[int, Stage]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (RANKS, 1), mesh_dim_names=("pp", "dp"))["dp"]
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    models = {}
    for index in (rank + v * RANKS for v in range(virtual)):
        model = Stage(LAYERS // virtual, index == 0, index == RANKS * virtual - 1)
        if not fsdp:
            models[index] = model.to(torch.bfloat16)
            continue
        for layer in model.layers.values():
            fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
        models[index] = fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    return models


def _run(rank: int, virtual: int, fsdp: bool) -> dict:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

    torch.manual_seed(rank)
    models, total = _models(rank, virtual, fsdp), RANKS * virtual
    stages = []
    for index, model in models.items():
        into = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ)) if index == 0 else \
            torch.zeros(MICRO_BATCH, SEQ, D, dtype=torch.bfloat16)
        out = torch.zeros(MICRO_BATCH, SEQ, VOCAB if index == total - 1 else D,
                          dtype=torch.float32 if index == total - 1 else torch.bfloat16)
        stages.append(PipelineStage(model, index, total, torch.device("cpu"), input_args=(into,), output_args=(out,)))
    loss = lambda output, _: output.sum()  # noqa: E731
    schedule = Schedule1F1B(stages[0], MICROBATCHES, loss_fn=loss) if virtual == 1 else \
        ScheduleInterleaved1F1B(stages, MICROBATCHES, loss_fn=loss)
    x = torch.randint(0, VOCAB, (MICROBATCHES * MICRO_BATCH, SEQ))

    def step() -> None:
        schedule.step(x) if rank == 0 else schedule.step(target=torch.zeros(len(x)), losses=[])

    step()  # the first step builds the receive buffers and FSDP2's state; the second is measured
    for model in models.values():
        model.zero_grad(set_to_none=True)
    order = []
    for stage in stages:
        def backward_one_chunk(mb, *args, _run=stage.backward_one_chunk, _index=stage.stage_index, **kwargs):
            order.append([_index, mb])
            torch.empty(MARK, dtype=torch.uint8)
            return _run(mb, *args, **kwargs)
        stage.backward_one_chunk = backward_one_chunk
    from torch.profiler import ProfilerActivity, profile

    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as run:
        step()
    return {"at_backward": [[*at, alive] for at, alive in zip(order, _alive_at_marks(run), strict=True)],
            "parameters": {str(i): sum(p.numel() for p in m.parameters()) for i, m in models.items()}}


def _worker(rank: int, path: str) -> None:
    import json

    _cpu_shims()
    dist.init_process_group("gloo", init_method=f"file://{path}.store", rank=rank, world_size=RANKS)
    report = {"torch": torch.__version__.split("+")[0]}
    for name, virtual in (("1f1b", 1), ("interleaved-1f1b", 2)):
        report[name] = {"fsdp2": _run(rank, virtual, True), "plain": _run(rank, virtual, False)}
    Path(f"{path}.{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


def measure() -> list[dict]:
    """Every rank's report (see the module's docstring), from spawned gloo processes."""
    return spawned(_worker, RANKS)


if __name__ == "__main__":  # record: python tests/pipeline_fsdp.py (under torch 2.6.0)
    record(Path(os.environ.get("GPTCALC_RECORD", RECORD)), measure())
