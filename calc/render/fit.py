"""`gptcalc fit`: one line per layout that serves, best first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from calc.units import human_bytes

if TYPE_CHECKING:
    from calc.analysis.fit import Candidate

__all__ = ["candidate_line", "header"]


def header(model: str, seq: int, concurrency: int, engine: str) -> str:
    return (f"{model}: layouts that serve {concurrency:,} request{'s' * (concurrency > 1)} of {seq:,} tokens "
            f"under {engine}'s start-up budget, fewest GPUs first")


def candidate_line(rank: int, c: Candidate) -> str:
    """GPUs, layout, weights per GPU, the pool, the tokens it holds, the requests at seq, and the pool
    left over once the asked-for requests hold theirs."""
    layout = f"tp {c.layout.tp} pp {c.layout.pp}" + (f" ep {c.layout.ep}" if c.layout.ep > 1 else "") + (
        f" dp {c.groups}" if c.groups > 1 else "")
    pool = c.pool
    groups = f" in each of {c.groups} DP groups" if c.groups > 1 else ""
    return (f"{rank:>2}. {c.layout.gpus:>2} x {c.gpu.name:<10} {layout:<16} weights {human_bytes(c.weights_bytes):>9}/GPU  "
            f"KV pool {human_bytes(c.budget.kv_memory):>9}  {pool.printed_tokens if pool else 0:>11,} tokens  "
            f"max concurrency {pool.concurrency if pool else '0.00'}x{groups}  headroom {human_bytes(c.headroom)}")
