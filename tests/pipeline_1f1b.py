"""torch's pipelining run for real on the CPU: what the first stage of a 1F1B pipeline holds, and when.

Two gloo ranks run torch.distributed.pipelining's PipelineStage under Schedule1F1B with as many
micro-batches as stages (torchtitan's default: pipelining_utils.build_pipeline_schedule @ 9dec370). The
first stage is an embedding (token ids in, as torchtitan's first stage takes) and LAYERS residual blocks
(x + W2·gelu(W1·x)), each fully checkpointed (non-reentrant torch.utils.checkpoint: a block keeps only
its input), in fp32; the second is LAYERS such blocks and a sum loss.

Rank 0, the first stage, reports for its first step, everything it allocates counted (the live-storage
tracker, tests/live_memory.py):
- `at_backward`: the bytes alive when each micro-batch's backward starts: at the first, every
  micro-batch's block inputs and stage output (all in flight) and a receive buffer per micro-batch for
  its output gradient; at the second, one micro-batch fewer in flight, beside the gradients the first
  backward made and the same buffers;
- `grad_recv_buffers`: the bytes of those receive buffers (stage.grad_recv_info) after the step;
- `residual`: one micro-batch's residual stream; `gradients`: the stage's parameters' gradients.

The torch here (2.13) keeps a non-last stage's output only until its backward (pytorch#153383); the
torch of the 405B runs (December 2024) kept every micro-batch's in `output_chunks` until the next
step, one residual more at the second backward on this stage (calc/analysis/train/pipeline.py).

Run with `python tests/pipeline_1f1b.py` (or the opt-in test, pytest --distributed); the recorded result
is tests/data/pipeline_1f1b.json.
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
DIMS = dict(d=32, ff=64, vocab=16, layers=3, micro_batch=2, seq=8)
STAGES = 2  # also the micro-batches a step


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
    else:
        schedule.step(target=torch.zeros(len(x)), losses=[])


def _worker(rank: int, path: str) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    dist.init_process_group("gloo", init_method=f"file://{path}.store", rank=rank, world_size=STAGES)
    torch.manual_seed(rank)
    d, b, s = DIMS["d"], DIMS["micro_batch"], DIMS["seq"]
    blocks = [Block(d, DIMS["ff"]) for _ in range(DIMS["layers"])]
    model = nn.Sequential(*([nn.Embedding(DIMS["vocab"], d)] if rank == 0 else []), *blocks)
    stage = PipelineStage(model, rank, STAGES, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=STAGES, loss_fn=lambda out, _: out.sum())
    x = torch.randint(0, DIMS["vocab"], (STAGES * b, s))
    live, at_backward = Live(x, *model.parameters()), []
    run_backward = stage.backward_one_chunk

    def backward_one_chunk(*args, **kwargs):
        at_backward.append(live.now)
        return run_backward(*args, **kwargs)

    stage.backward_one_chunk = backward_one_chunk
    with live:
        _step(schedule, rank, x)
    result = {"residual": b * s * d * 4, "at_backward": at_backward,
              "grad_recv_buffers": sum(info.buffer.nbytes for infos in stage.grad_recv_info.values()
                                       for info in infos if info.buffer is not None),
              "gradients": sum(p.grad.nbytes for p in model.parameters())}
    Path(f"{path}.{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def measure() -> dict:
    """The first stage's report (see the module's docstring), from two spawned gloo processes."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="gptcalc-pipeline-") as folder:
        path = str(Path(folder) / "run")
        mp.spawn(_worker, args=(path,), nprocs=STAGES)
        return json.loads(Path(f"{path}.0.json").read_text())


if __name__ == "__main__":  # record: python tests/pipeline_1f1b.py
    RECORD.write_text(json.dumps(measure(), indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {RECORD}\n")
