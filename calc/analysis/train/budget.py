"""`train --budget`: does a run fit on a GPU, and if not, what would.

The verdict compares the nvidia-smi figure (the peak allocated plus the stated allocator slack and
CUDA context, `peak.Overheads`) with the GPU's memory as nvidia-smi reports it (calc's GPU catalog).
The inverse answers hold everything else fixed:

  largest micro-batch   the peak grows with the batch, so the largest b that fits is found by
                        doubling, then bisection
  longest sequence      the same over 1 … n_positions (in steps of 2·cp under context parallelism)
  setting               the first of a ladder of memory savers that fits at the given b and T:
                        recompute selective, full, then offloading activations, the optimizer,
                        both, and finally the parameters too (each costs time: recomputation ~⅓ more
                        compute for full, offload PCIe traffic)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from calc.analysis.memory.budget import parse_budget
from calc.analysis.train import Setup, train
from calc.spec.model import ModelSpec

__all__ = ["Answer", "solve"]

LADDER: tuple[tuple[str, dict[str, object]], ...] = (
    ("--recompute selective", {"recompute": "selective"}),
    ("--recompute full", {"recompute": "full", "checkpoint_every": 1}),
    ("--recompute full --offload activations", {"recompute": "full", "checkpoint_every": 1, "offload": ("activations",)}),
    ("--recompute full --offload optimizer", {"recompute": "full", "checkpoint_every": 1, "offload": ("optimizer",)}),
    ("--recompute full --offload optimizer,activations",
     {"recompute": "full", "checkpoint_every": 1, "offload": ("optimizer", "activations")}),
    ("--recompute full --offload params,activations",
     {"recompute": "full", "checkpoint_every": 1, "offload": ("params", "activations")}),
)
MAX_BATCH = 2**20


@dataclass(frozen=True)
class Answer:
    label: str
    capacity: int  # bytes per GPU
    needed: int  # the nvidia-smi figure of the run as given
    max_micro_batch: int  # 0: not even one sample fits
    max_seq: int  # 0: not even one token fits
    setting: str | None  # the first memory saver that fits; None when none does or none is needed

    @property
    def fits(self) -> bool:
        return self.needed <= self.capacity

    def to_json(self) -> dict[str, object]:
        return {"budget": self.label, "bytes_per_gpu": self.capacity, "nvidia_smi": self.needed, "fits": self.fits,
                "headroom": self.capacity - self.needed, "max_micro_batch": self.max_micro_batch,
                "max_seq": self.max_seq, "setting_that_fits": self.setting}


def _largest(fits: Callable[[int], bool], high: int) -> int:
    """The largest x in 1 … high with fits(x), fits being monotone (true then false); 0 if none."""
    if not fits(1):
        return 0
    low, step = 1, 2
    while step <= high and fits(step):
        low, step = step, step * 2
    top = min(step, high + 1)  # fits(top) is false or top is past high
    while top - low > 1:
        mid = (low + top) // 2
        low, top = (mid, top) if fits(mid) else (low, mid)
    return low


def solve(spec: ModelSpec, s: Setup, budget: str) -> Answer:
    b = parse_budget(budget)

    def smi(setup: Setup) -> int:
        return train(spec, setup).nvidia_smi

    needed = smi(s)
    batch = _largest(lambda x: smi(replace(s, micro_batch=x)) <= b.bytes_per_gpu, MAX_BATCH)
    unit = 2 * s.cp if s.cp > 1 else 1  # context parallelism splits a sequence into 2·cp chunks
    seq = unit * _largest(lambda x: smi(replace(s, seq=x * unit)) <= b.bytes_per_gpu, spec.n_positions // unit)
    setting = None
    if needed > b.bytes_per_gpu:
        setting = next((name for name, change in LADDER
                        if smi(replace(s, **change)) <= b.bytes_per_gpu), None)
    return Answer(b.label, b.bytes_per_gpu, needed, batch, seq, setting)
