"""torch's interleaved 1F1B run for real on the CPU: what each rank of an interleaved pipeline holds at
each of its backwards, its two stages together.

Two gloo ranks, two stages each (four in all: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3, torch's
and torchtitan's "loop" placement), under ScheduleInterleaved1F1B with 4 micro-batches (two rounds of 2,
so the order's rounds matter), and again with 6 (MORE, a run's --pp-microbatches: three rounds of 2). Each stage is tests/pipeline_1f1b.py's: LAYERS fully checkpointed residual
blocks in fp32, the first stage an embedding before them, the last a head and a sum loss after them.

Every rank reports for its first step, everything it allocates counted (tests/live_memory.py):
- `at_backward`: [stage, micro-batch, bytes alive] as each backward starts, in the order they run;
- per stage (`stages`, by global index): its `gradients` (its parameters'), `output_chunks`,
  `grad_recv_buffers` and `act_recv_buffers` after the step;
- `after_step`, `residual` and `logits` as tests/pipeline_1f1b.py reports them.

Run with `python tests/pipeline_interleaved.py` (or the opt-in test, pytest --distributed); the recorded
results are tests/data/pipeline_interleaved.json (4 micro-batches) and pipeline_interleaved_6.json (6).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from live_memory import Live
from pipeline_1f1b import DIMS, Block, _nbytes, record, spawned

RECORD = Path(__file__).parent / "data" / "pipeline_interleaved.json"
RANKS, VIRTUAL, MICROBATCHES = 2, 2, 4
MORE = 6  # the micro-batches a step of RECORDS[MORE]'s run
RECORDS = {MICROBATCHES: RECORD, MORE: RECORD.with_name(f"pipeline_interleaved_{MORE}.json")}


def _stage_model(index: int) -> nn.Sequential:
    d = DIMS["d"]
    blocks = [Block(d, DIMS["ff"]) for _ in range(DIMS["layers"])]
    first = [nn.Embedding(DIMS["vocab"], d)] if index == 0 else []
    last = [nn.Linear(d, DIMS["vocab"], bias=False)] if index == RANKS * VIRTUAL - 1 else []
    return nn.Sequential(*first, *blocks, *last)


def _step(schedule, rank: int, x: torch.Tensor) -> None:
    if rank == 0:
        schedule.step(x)
    else:  # the last rank holds the last stage
        schedule.step(target=torch.zeros(len(x)), losses=[])


def _worker(rank: int, path: str, microbatches: int) -> None:
    from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B

    dist.init_process_group("gloo", init_method=f"file://{path}.store", rank=rank, world_size=RANKS)
    torch.manual_seed(rank)
    indices = [rank + v * RANKS for v in range(VIRTUAL)]
    models = {i: _stage_model(i) for i in indices}
    stages = [PipelineStage(models[i], i, RANKS * VIRTUAL, torch.device("cpu")) for i in indices]
    schedule = ScheduleInterleaved1F1B(stages, n_microbatches=microbatches, loss_fn=lambda out, _: out.sum())
    b, s = DIMS["micro_batch"], DIMS["seq"]
    x = torch.randint(0, DIMS["vocab"], (microbatches * b, s))
    live = Live(x, *(p for m in models.values() for p in m.parameters()))
    at_backward = []
    for stage in stages:
        def backward_one_chunk(mb, *args, _run=stage.backward_one_chunk, _index=stage.stage_index, **kwargs):
            at_backward.append([_index, mb, live.now])
            return _run(mb, *args, **kwargs)
        stage.backward_one_chunk = backward_one_chunk
    with live:
        _step(schedule, rank, x)
    per_stage = {}
    for stage in stages:
        recv = [info for infos in stage.args_recv_info.values() for info in infos if not info.is_root_arg]
        per_stage[stage.stage_index] = {
            "output_chunks": _nbytes(stage.output_chunks),
            "grad_recv_buffers": _nbytes(i.buffer for infos in stage.grad_recv_info.values() for i in infos),
            "act_recv_buffers": _nbytes(info.buffer for info in recv),
            "gradients": sum(p.grad.nbytes for p in models[stage.stage_index].parameters())}
    result = {"residual": b * s * DIMS["d"] * 4, "logits": b * s * DIMS["vocab"] * 4, "at_backward": at_backward,
              "after_step": live.now, "stages": per_stage}
    Path(f"{path}.{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def measure(microbatches: int = MICROBATCHES) -> list[dict]:
    """Every rank's report for a step of `microbatches` (see the module's docstring), from spawned gloo
    processes."""
    return spawned(_worker, RANKS, microbatches)


if __name__ == "__main__":  # record: python tests/pipeline_interleaved.py
    for n, path in RECORDS.items():
        record(path, measure(n))
