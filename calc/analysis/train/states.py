"""Model states per GPU: weights, gradients, fp32 master weights and optimizer states, under ZeRO.

Mixed-precision training (Rajbhandari et al., "ZeRO", arXiv 1910.02054, §3.1) keeps for Ψ trained
parameters: 16-bit weights (2Ψ bytes) and gradients (2Ψ), and in fp32 a master copy (4Ψ) plus the
optimizer's states (AdamW: m and v, 8Ψ) — K = 12 bytes per parameter beside the 16-bit copies.
ZeRO partitions them across the N_d data-parallel GPUs: stage 1 the optimizer states and master
weights (K·Ψ / N_d), stage 2 also the gradients, stage 3 (= FSDP's full sharding) also the weights.

Optimizer states per trained parameter:
  adamw         m, v in fp32: 8 bytes
  adamw8bit     m, v in uint8 (bitsandbytes): 2 bytes, plus one fp32 absmax per block of 256 values
                per state; a tensor under 4,096 elements keeps fp32 m and v (min_8bit_size)
  paged-adamw8bit  the same, the uint8 states of tensors of 100,000 elements or more in CUDA unified
                memory (bitsandbytes' paged optimizers allocate them with cudaMallocManaged): torch's
                allocator never sees them, the driver pages them out to the host under pressure,
                nvidia-smi shows them while resident. The absmax vectors and the smaller tensors'
                states are ordinary torch tensors on the GPU (bnb_8bit_bytes)
  adamw8bit-torchao  torchao's AdamW8bit (torchao/optim/adam.py, OptimState8bit): uint8 codes, an fp32
                scale per 256 values and a 256-entry fp32 code map per state, for a parameter of 4,096
                elements or more that 256 divides; otherwise m and v as zeros_like(param). Its step,
                one torch.compile'd function per parameter, dequantises m and v to fp32 and keeps both
                while it requantises them: 8 bytes per element of the parameter being stepped
                (step_temporary_bytes), measured through torch's CPU allocator (torchao 0.18,
                inductor on the CPU: 8.03 bytes per element, the new scales included)
  sgd           none
  sgd-momentum  one fp32 momentum buffer: 4 bytes
  adafactor     factored second moment (Shazeer & Stern, arXiv 1804.04235), no first moment: a
                [rows, cols] matrix keeps rows + cols fp32 numbers, a vector keeps one per element
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

__all__ = ["OPTIMIZERS", "StateRow", "Tensor", "bnb_8bit_bytes", "model_states", "optimizer_bytes",
           "step_temporary_bytes"]

OPTIMIZERS = ("adamw", "adamw8bit", "paged-adamw8bit", "adamw8bit-torchao", "sgd", "sgd-momentum", "adafactor")
PAGED = ("paged-adamw8bit",)
# bitsandbytes >= 0.44.0, bitsandbytes/optim/optimizer.py (Optimizer2State.init_state): `blocks = n // 256` fp32
# absmax per state (#1365, aa57bd89, changed it from 2048); `if p.numel() < config["min_8bit_size"]: dtype =
# torch.float32` (min_8bit_size 4096); get_state_buffer pages a state only `if ... p.numel() >= 1e5`
_BLOCK_8BIT = 256
_MIN_8BIT = 4096
_MIN_PAGED = 100_000
_TORCHAO_BLOCK = 256  # torchao's AdamW8bit(block_size=256)


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
        return sum(bnb_8bit_bytes(tensors))
    if optimizer == "adamw8bit-torchao":
        return sum(t.copies * (2 * (each + 4 * each // _TORCHAO_BLOCK + 4 * 256) if _torchao_8bit(each)
                               else 2 * state_bytes * each) for t in tensors for each in [t.elements // t.copies])
    if optimizer == "sgd":
        return 0
    if optimizer == "sgd-momentum":
        return state_bytes * n
    if optimizer == "adafactor":
        return state_bytes * sum(t.copies * (t.rows + t.cols if t.cols else t.rows) for t in tensors)
    raise ValueError(f"unknown optimizer {optimizer!r}")


def _torchao_8bit(each: int) -> bool:
    """torchao's AdamW8bit quantises a parameter's states when `p.numel() >= 4096 and p.numel() %
    self.block_size == 0` (block_size 256: optim/adam.py, _AdamBase._new_buffer)."""
    return each >= _MIN_8BIT and each % _TORCHAO_BLOCK == 0


def step_temporary_bytes(optimizer: str, tensors: Iterable[Tensor]) -> int:
    """The largest temporary of a step that goes parameter by parameter: torchao's 8-bit AdamW holds
    its m and v dequantised to fp32 for the parameter it steps (8 bytes an element; the module's
    docstring); 0 for the others (the foreach AdamW's temporary is peak.py's)."""
    if optimizer != "adamw8bit-torchao":
        return 0
    return max((8 * (t.elements // t.copies) for t in tensors if _torchao_8bit(t.elements // t.copies)), default=0)


def bnb_8bit_bytes(tensors: Iterable[Tensor]) -> tuple[int, int]:
    """bitsandbytes' 8-bit AdamW states as (what a paged optimizer puts in unified memory, what stays a
    torch tensor on the GPU): per parameter (each of a Tensor's copies), uint8 m and v and an fp32
    absmax per 256 values of each, or fp32 m and v under 4,096 elements; only uint8 states of 100,000
    elements or more are paged."""
    paged = kept = 0
    for t in tensors:
        each = t.elements // t.copies
        if each < _MIN_8BIT:
            kept += t.copies * 8 * each
            continue
        codes, absmax = t.copies * 2 * each, t.copies * 8 * -(-each // _BLOCK_8BIT)
        paged, kept = (paged + codes, kept + absmax) if each >= _MIN_PAGED else (paged, kept + codes + absmax)
    return paged, kept


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
