"""Model states per GPU: weights, gradients, fp32 master weights and optimizer states, under ZeRO.

Mixed-precision training (Rajbhandari et al., "ZeRO", arXiv 1910.02054, §3.1) keeps for Ψ trained
parameters: 16-bit weights (2Ψ bytes) and gradients (2Ψ), and in fp32 a master copy (4Ψ) plus the
optimizer's states (AdamW: m and v, 8Ψ) — K = 12 bytes per parameter beside the 16-bit copies.
ZeRO partitions them across the N_d data-parallel GPUs: stage 1 the optimizer states and master
weights (K·Ψ / N_d), stage 2 also the gradients, stage 3 (= FSDP's full sharding) also the weights.

Optimizer states per trained parameter:
  adamw         m, v in fp32: 8 bytes
  adamw8bit     m, v in int8 (bitsandbytes): 2 bytes, plus one fp32 absmax per block of 2,048 values
                per state
  paged-adamw8bit  the same states in CUDA unified memory (bitsandbytes' paged optimizers allocate
                them with cudaMallocManaged): torch's allocator never sees them, the driver pages
                them out to the host under pressure, nvidia-smi shows them while resident
  sgd           none
  sgd-momentum  one fp32 momentum buffer: 4 bytes
  adafactor     factored second moment (Shazeer & Stern, arXiv 1804.04235), no first moment: a
                [rows, cols] matrix keeps rows + cols fp32 numbers, a vector keeps one per element
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

__all__ = ["OPTIMIZERS", "StateRow", "Tensor", "model_states", "optimizer_bytes"]

OPTIMIZERS = ("adamw", "adamw8bit", "paged-adamw8bit", "sgd", "sgd-momentum", "adafactor")
PAGED = ("paged-adamw8bit",)
_BLOCK_8BIT = 2048  # bitsandbytes' block size for 8-bit optimizer states


@dataclass(frozen=True)
class Tensor:
    """A trained tensor's shape as (copies, rows, cols) — cols 0 for a vector of `rows` elements —
    so that Adafactor can factor it; `copies` stacks layers and experts."""

    copies: int
    rows: int
    cols: int = 0

    @property
    def elements(self) -> int:
        return self.copies * self.rows * (self.cols or 1)


def optimizer_bytes(optimizer: str, tensors: Iterable[Tensor], state_bytes: int = 4) -> int:
    """Bytes of `optimizer`'s states for these trained tensors (not partitioned)."""
    tensors = list(tensors)
    n = sum(t.elements for t in tensors)
    if optimizer == "adamw":
        return 2 * state_bytes * n
    if optimizer in ("adamw8bit", "paged-adamw8bit"):
        return 2 * (n + 4 * -(-n // _BLOCK_8BIT))
    if optimizer == "sgd":
        return 0
    if optimizer == "sgd-momentum":
        return state_bytes * n
    if optimizer == "adafactor":
        return state_bytes * sum(t.copies * (t.rows + t.cols if t.cols else t.rows) for t in tensors)
    raise ValueError(f"unknown optimizer {optimizer!r}")


@dataclass(frozen=True)
class StateRow:
    """One kind of model state: its bytes on every GPU before ZeRO and what ZeRO divides it by."""

    key: str
    label: str
    full: int  # bytes before partitioning
    shards: int  # 1, or N_d when this ZeRO stage partitions it
    where: str = "gpu"  # "gpu"; "cpu" when offloaded; "managed": CUDA unified memory (paged optimizers)

    @property
    def per_gpu(self) -> int:
        return -(-self.full // self.shards)


def model_states(trained: int, optimizer_states: int, zero: int, dp: int, weight_bytes: int = 2,
                 grad_bytes: int = 2, master_bytes: int = 4, frozen_weights: int = 0) -> list[StateRow]:
    """Rows for `trained` parameters (16-bit weights and gradients, fp32 master copy) whose optimizer
    keeps `optimizer_states` bytes, plus `frozen_weights` bytes of weights no one trains (LoRA's base),
    under ZeRO stage `zero` over `dp` data-parallel GPUs."""
    def over(stage: int) -> int:
        return dp if zero >= stage else 1

    rows = [StateRow("weights", "weights (trained)" if frozen_weights else "weights", trained * weight_bytes, over(3))]
    if frozen_weights:
        rows.append(StateRow("frozen_weights", "frozen base weights", frozen_weights, over(3)))
    rows += [
        StateRow("gradients", "gradients", trained * grad_bytes, over(2)),
        StateRow("master_weights", "fp32 master weights", trained * master_bytes, over(1)),
        StateRow("optimizer", "optimizer states", optimizer_states, over(1)),
    ]
    return [row for row in rows if row.full]
