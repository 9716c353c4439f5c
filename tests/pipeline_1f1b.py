"""torch's pipelining run for real on the CPU: what each stage of a 1F1B pipeline holds, and when.

Three gloo ranks run torch.distributed.pipelining's PipelineStage under Schedule1F1B with as many
micro-batches as stages (torchtitan's default: pipelining_utils.build_pipeline_schedule @ 9dec370), and again
with twice as many (MORE, a run's --pp-microbatches: each stage then holds its warmup's micro-batches in
flight for longer, and a buffer more of each kind per micro-batch). Each
stage is LAYERS residual blocks (x + W2·gelu(W1·x)), each fully checkpointed (non-reentrant
torch.utils.checkpoint: a block keeps only its input), in fp32; the first stage has an embedding before
them (token ids in, as torchtitan's first stage takes), the last a head to VOCAB logits after them
(its output, the logits, what output_chunks keeps) and a sum loss.

Every rank reports for its first step, everything it allocates counted (the live-storage tracker,
tests/live_memory.py):
- `at_backward`: the bytes alive when each micro-batch's backward starts;
- after the step: `output_chunks` (the stage outputs torch keeps until the next step), `grad_recv_buffers`
  (a receive buffer per micro-batch for its output gradient), `act_recv_buffers` (one per micro-batch for
  its input), `input_grads` (the gradients backward left in those buffers' `.grad`), `gradients` (the
  stage's parameters'), `losses` (the schedule's `_internal_losses`, a scalar per micro-batch), and
  `after_step` (all that is still alive);
- `at_merge`: the bytes alive when the last stage's `_merge_outputs` has concatenated the outputs;
- `residual`: one micro-batch's residual stream, `logits`: one micro-batch's logits.

The torch here (2.13) keeps a non-last stage's output only until its backward (pytorch#153383); the
torch of the 405B runs (December 2024) kept every micro-batch's in `output_chunks` until the next
step (calc/analysis/train/pipeline.py counts that).

Run with `python tests/pipeline_1f1b.py` (or the opt-in test, pytest --distributed); the recorded results
are tests/data/pipeline_1f1b.json (3 micro-batches) and pipeline_1f1b_6.json (6).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from live_memory import Live

RECORD = Path(__file__).parent / "data" / "pipeline_1f1b.json"
DIMS = dict(d=32, ff=64, vocab=48, layers=3, micro_batch=2, seq=8)
STAGES = 3  # also the micro-batches a step of RECORD's run
MORE = 6  # the micro-batches a step of RECORDS[MORE]'s run
RECORDS = {STAGES: RECORD, MORE: RECORD.with_name(f"pipeline_1f1b_{MORE}.json")}


class Block(nn.Module):
    def __init__(self, d: int, ff: int) -> None:
        super().__init__()
        self.w1, self.w2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def _body(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.w2(F.gelu(self.w1(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self._body, x, use_reentrant=False)


def _step(schedule, rank: int, x: torch.Tensor) -> None:
    if rank == 0:
        schedule.step(x)
    elif rank == STAGES - 1:
        schedule.step(target=torch.zeros(len(x)), losses=[])
    else:
        schedule.step()


def _stage_model(rank: int) -> nn.Sequential:
    d = DIMS["d"]
    blocks = [Block(d, DIMS["ff"]) for _ in range(DIMS["layers"])]
    first = [nn.Embedding(DIMS["vocab"], d)] if rank == 0 else []
    last = [nn.Linear(d, DIMS["vocab"], bias=False)] if rank == STAGES - 1 else []
    return nn.Sequential(*first, *blocks, *last)


def _nbytes(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors if t is not None)


def _worker(rank: int, path: str, microbatches: int) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    dist.init_process_group("gloo", init_method=f"file://{path}.store", rank=rank, world_size=STAGES)
    torch.manual_seed(rank)
    b, s = DIMS["micro_batch"], DIMS["seq"]
    model = _stage_model(rank)
    stage = PipelineStage(model, rank, STAGES, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=microbatches, loss_fn=lambda out, _: out.sum())
    x = torch.randint(0, DIMS["vocab"], (microbatches * b, s))
    live, at_backward, at_merge = Live(x, *model.parameters()), [], []
    run_backward, merge = stage.backward_one_chunk, schedule._merge_outputs

    def backward_one_chunk(*args, **kwargs):
        at_backward.append(live.now)
        return run_backward(*args, **kwargs)

    def merge_outputs(chunks):
        merged = merge(chunks)
        at_merge.append(live.now)
        return merged

    stage.backward_one_chunk, schedule._merge_outputs = backward_one_chunk, merge_outputs
    with live:
        _step(schedule, rank, x)
    recv = [info for infos in stage.args_recv_info.values() for info in infos if not info.is_root_arg]
    result = {"residual": b * s * DIMS["d"] * 4, "logits": b * s * DIMS["vocab"] * 4,
              "at_backward": at_backward, "at_merge": at_merge, "after_step": live.now,
              "output_chunks": _nbytes(stage.output_chunks),
              "grad_recv_buffers": _nbytes(info.buffer for infos in stage.grad_recv_info.values() for info in infos),
              "act_recv_buffers": _nbytes(info.buffer for info in recv),
              "input_grads": _nbytes(info.buffer.grad for info in recv),
              "losses": _nbytes(schedule._internal_losses),
              "gradients": sum(p.grad.nbytes for p in model.parameters())}
    Path(f"{path}.{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def spawned(worker, ranks: int, *args: object) -> list[dict]:  # noqa: ANN001
    """Each rank's report, from `worker(rank, path, *args)` run on `ranks` spawned gloo processes (it writes
    path.RANK.json)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="gptcalc-pipeline-") as folder:
        path = str(Path(folder) / "run")
        mp.spawn(worker, args=(path, *args), nprocs=ranks)
        return [json.loads(Path(f"{path}.{rank}.json").read_text()) for rank in range(ranks)]


def record(path: Path, reports: list[dict]) -> None:
    path.write_text(json.dumps(reports, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {path}\n")


def measure(microbatches: int = STAGES) -> list[dict]:
    """Every stage's report for a step of `microbatches` (see the module's docstring), from spawned gloo
    processes."""
    return spawned(_worker, STAGES, microbatches)


if __name__ == "__main__":  # record: python tests/pipeline_1f1b.py
    for n, path in RECORDS.items():
        record(path, measure(n))
