"""Interleaved pipeline schedules: each of p ranks holds V stages (its "virtual" stages) of p·V, and runs
their forwards and backwards in the order the schedule itself generates; what a rank holds at each of its
backwards follows from that order alone (`Interleaved.held`), so it is derived from it, not guessed.

torch's ScheduleInterleaved1F1B (torch/distributed/pipelining/schedules.py, torch 2.13:
`_calculate_single_rank_operations`, `_get_warmup_ops`, `_get_1f1b_rank_ops`) on rank r of p, V local
stages (global stages r, r + p, …), n micro-batches in rounds of g = n ÷ max(1, ⌊n/p⌋) (n must be a
multiple of the rounds):

- warmup: min((V − 1)·g + 2·(p − 1 − r), n·V) forwards, the k-th on local stage ⌊k/g⌋ mod V;
- then one forward and one backward a step while forwards remain, the j-th backward (from 0) on local
  stage V − 1 − (⌊j/g⌋ mod V);
- then the remaining backwards; each stage runs its micro-batches in order.

The idle steps the schedule pads with (`None`) move no micro-batch, and are left out. Megatron-LM's
interleaved schedule (megatron/core/pipeline_parallel/schedules.py @ d98e8a6, get_pp_rank_microbatches,
get_schedule_table, get_model_chunk_id) has the same warmup, 2·(p − 1 − r) + (V − 1)·g, and the same
chunk order with g its microbatch_group_size_per_vp_stage (p by default) where g divides n: one order
for both. torch of late 2024 (its "Flexible Interleaved 1F1B", with the rounds already in the stage
order) counted the warmup with p in place of g, `(n_local_stages - 1) * pp_group_size`; the 405B runs'
torch (1963fc8, December 2024) is not read here, but where n is a multiple of p (torchtitan's default
n = p) g = p, and either warmup gives the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.errors import GptcalcError

__all__ = ["PP_SCHEDULES", "AtBackward", "Interleaved", "Rank"]

PP_SCHEDULES = ("1f1b", "interleaved-1f1b")  # torch's Schedule1F1B (pipeline.py), ScheduleInterleaved1F1B


@dataclass(frozen=True)
class AtBackward:
    """A rank's state when one of its backwards starts: the stage and micro-batch of that backward, and for
    each of the rank's stages (global index) the forwards and backwards it has run so far."""

    stage: int
    microbatch: int
    forwards: dict[int, int]
    backwards: dict[int, int]

    def in_flight(self, stage: int) -> int:
        """Micro-batches whose activations `stage` keeps: run forward, not yet backward."""
        return self.forwards[stage] - self.backwards[stage]


@dataclass(frozen=True)
class Interleaved:
    """The interleaved 1F1B schedule of `ranks` ranks, `virtual` stages each, `microbatches` a step."""

    ranks: int
    virtual: int
    microbatches: int

    def __post_init__(self) -> None:
        rounds = max(1, self.microbatches // self.ranks)
        if self.microbatches % rounds:
            raise GptcalcError(f"--pp-microbatches: interleaved 1F1B runs {self.microbatches} micro-batches over "
                               f"{self.ranks} ranks in {rounds} rounds; {self.microbatches} is not a multiple of "
                               f"{rounds} (torch's ScheduleInterleaved1F1B refuses it)")

    @property
    def group(self) -> int:
        """Micro-batches a round: a stage's forwards (and backwards) run g at a time before the next stage's."""
        return self.microbatches // max(1, self.microbatches // self.ranks)

    def stages(self, rank: int) -> tuple[int, ...]:
        """The global stages on `rank`: rank, rank + p, … (torch's and torchtitan's "loop" placement)."""
        return tuple(rank + v * self.ranks for v in range(self.virtual))

    def warmup(self, rank: int) -> int:
        return min((self.virtual - 1) * self.group + 2 * (self.ranks - 1 - rank), self.microbatches * self.virtual)

    def order(self, rank: int) -> tuple[tuple[str, int], ...]:
        """`rank`'s compute actions in order: ("F" or "B", global stage)."""
        g, v, warm, total = self.group, self.virtual, self.warmup(rank), self.microbatches * self.virtual
        out = [("F", self.stages(rank)[(k // g) % v]) for k in range(warm)]
        for k in range(warm, total + warm):
            if k < total:
                out.append(("F", self.stages(rank)[(k // g) % v]))
            out.append(("B", self.stages(rank)[v - 1 - ((k - warm) // g) % v]))
        return tuple(out)

    def held(self, rank: int) -> tuple[AtBackward, ...]:
        """What `rank` holds as each of its backwards starts, in the order they run."""
        forwards = dict.fromkeys(self.stages(rank), 0)
        backwards = dict(forwards)
        out = []
        for kind, stage in self.order(rank):
            if kind == "F":
                forwards[stage] += 1
                continue
            out.append(AtBackward(stage, backwards[stage], dict(forwards), dict(backwards)))
            backwards[stage] += 1
        return tuple(out)


@dataclass(frozen=True)
class Rank:
    """One rank of an interleaved pipeline: its stages are counted together (peak.interleaved_moments)."""

    index: int
    schedule: Interleaved

    def name(self) -> str:
        s, stages = self.schedule, self.schedule.stages(self.index)
        listed = ", ".join(map(str, stages[:-1])) + f" and {stages[-1]}"
        return f"rank {self.index} of {s.ranks} (stages {listed} of {s.ranks * s.virtual})"
