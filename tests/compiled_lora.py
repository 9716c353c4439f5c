"""What a compiled Llama layer under LoRA holds in its checkpointed backward, measured with the CPU allocator.

tests/compiled_backward.py's measurement (the profiler's record of torch's CPU allocator, kernels' own scratch
and the gradients left when backward returns set aside) on torchtitan's compiled layer (tests/compiled_block.py)
checkpointed in full, its weights and norms frozen, bf16 LoRA adapters of rank 8 on the `targets` it names
(torchtune's LoRALinear: base(x) + scale · B(A(x))), on the two shapes whose token count differs from every
width (compiled_backward.EXTRA: no gradient can take over an activation's buffer; the adapters' [n, r] outputs
and B's [out, r] gradients differ too).

gptcalc counts the eager frozen layer rebuilt in its place (the output says so): the record shows what a
compiled one holds, for a rule to come. Inductor's partition of a frozen layer depends on which linears carry
adapters: the n·d_ff and n·r blocks follow the targets one by one, the n·d blocks do not (docs/training.md), so
the record is kept, not counted.
`python tests/compiled_lora.py` re-records tests/data/compiled_lora.json (torch 2.13.0's inductor).
"""

from __future__ import annotations

from dataclasses import asdict

import torch
from torch import nn

from compiled_backward import EXTRA, alive_in_backward
from compiled_block import Layer, Shape

RANK = 8
LINEARS = {"q": "wq", "k": "wk", "v": "wv", "o": "wo", "gate": "w1", "up": "w3", "down": "w2"}
TARGETS = ((), *((t,) for t in LINEARS), ("gate", "up"), ("gate", "down"), ("up", "down"), ("gate", "up", "down"),
           ("q", "v"), ("q", "k", "v", "o"), ("q", "v", "o", "gate", "up", "down"), tuple(LINEARS))


class LoRALinear(nn.Module):
    """A frozen linear and its adapter, as torchtune's LoRALinear adds them (no dropout)."""

    def __init__(self, base: nn.Linear) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.a = nn.Linear(base.in_features, RANK, bias=False)
        self.b = nn.Linear(RANK, base.out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + 2.0 * self.b(self.a(x))


def _adapted(shape: Shape, targets: tuple[str, ...]) -> Layer:
    """torchtitan's layer, frozen, with an adapter on each of `targets`."""
    layer = Layer(shape, "torchtitan").requires_grad_(False)
    for target in targets:
        setattr(layer, LINEARS[target], LoRALinear(getattr(layer, LINEARS[target])))
    return layer


def measure(shape: Shape, targets: tuple[str, ...]) -> dict:
    """One compiled LoRA layer's backward working set: every block alive at its peak, and their total."""
    alive = alive_in_backward(shape, lambda: _adapted(shape, targets), "full")
    return {"targets": list(targets), "shape": asdict(shape), "alive": alive, "total": sum(alive)}


def measure_all() -> list[dict]:
    return [measure(shape, targets) for shape in EXTRA for targets in TARGETS]


if __name__ == "__main__":  # re-record tests/data/compiled_lora.json
    import json
    import sys
    from pathlib import Path

    out = Path(__file__).parent / "data" / "compiled_lora.json"
    entries = measure_all()
    out.write_text(json.dumps({"torch": torch.__version__, "entries": entries}) + "\n")
    sys.stdout.write(f"{len(entries)} entries to {out}\n")
