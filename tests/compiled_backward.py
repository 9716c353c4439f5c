"""What a compiled Llama layer's backward holds at its peak, measured with the CPU allocator.

The layers, forms and shapes are tests/compiled_block.py's (torchtitan's, torchtune's and the GQA form;
recompute none, full or per-op), plus two shapes whose token count differs from every width. Each layer
is compiled and run once (so that the backward graph is compiled too), then run again, and its
backward is recorded with the profiler's record of torch's CPU allocator (as tests/dtensor_tp.py's
`Allocated` reads it). Of the blocks allocated in backward three kinds are set aside:

- a kernel's own scratch, allocated and freed inside one aten op (the CPU's matmul packing buffers,
  the CPU flash-attention backward's per-thread buffers): what a GPU kernel uses instead differs;
- the gradients, the blocks still alive when backward returns (the weights' and the layer input's):
  the model counts those separately;
- nothing else: what is left is the layer's working set, the rebuilt forward's saved tensors and the
  backward graph's temporaries, and its largest total over the backward is recorded, with the size of
  every block alive then.

Inductor reuses a dead buffer for a new one of the same size, so where a gradient has an activation's
size (the layer input's always; a weight's when the tokens equal the width: d64 at 64 tokens) the block
may be one the allocator saw as an activation, and counts as a gradient: the record is then less than
what was alive. The loss here is `out.float().sum()`: its scalar gradient (4 B) is in every record.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import asdict

import torch

from compiled_block import DTYPE, FORMS, SHAPES, Checkpointed, Layer, Shape, tables
from dtensor_tp import allocations

# tokens unlike any width (n 192 and 160), so that no gradient can take over an activation's buffer
EXTRA = (Shape(256, 8, 4, 704, 2, 96), Shape(192, 6, 2, 512, 1, 160))


def _outer_op(node):  # noqa: ANN001, ANN202
    """The outermost aten op the allocation was made in, or None (the compiled graph's own buffers)."""
    op, parent = None, node.parent
    while parent is not None:
        op = parent if parent.name.startswith("aten::") else op
        parent = parent.parent
    return op


def working_set(events: list) -> list[int]:
    """The sizes of the blocks alive at the working set's peak (see the module's docstring)."""
    allocated, freed = {}, {}
    for node in events:
        fields = node.typed[1]
        if fields.alloc_size > 0:
            allocated[fields.ptr] = node
        elif fields.ptr in allocated:
            freed[id(allocated.pop(fields.ptr))] = node.start_time_ns
    kept = [node for node in events if node.typed[1].alloc_size > 0 and id(node) in freed
            and not ((op := _outer_op(node)) and freed[id(node)] <= op.end_time_ns)]
    counted = {id(node) for node in kept}
    live: dict[int, int] = {}
    now, best = 0, []
    for node in events:
        fields = node.typed[1]
        if fields.alloc_size > 0 and id(node) in counted:
            live[fields.ptr] = fields.alloc_size
        elif fields.alloc_size > 0 or live.pop(fields.ptr, None) is None:
            continue
        now += fields.alloc_size
        if now > sum(best):
            best = sorted(live.values(), reverse=True)
    return best


def alive_in_backward(shape: Shape, layer: Callable[[], torch.nn.Module], recompute: str) -> list[int]:
    """The blocks alive at the working set's peak of the layer `layer()` makes (seeded first), compiled and
    checkpointed as `recompute` says, run once to compile its backward and then recorded."""
    from torch.profiler import ProfilerActivity, profile

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.compile(Checkpointed(layer().to(DTYPE), recompute), fullgraph=True)
    cos, sin = tables(shape)
    x = torch.randn(shape.batch, shape.seq, shape.d_model, dtype=DTYPE, requires_grad=True)
    model(x, cos, sin).float().sum().backward()  # compiles the backward graph
    x.grad = None
    model.zero_grad(set_to_none=True)
    out = model(x, cos, sin).float().sum()
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as record:
        out.backward()
    return working_set(allocations(record))


def measure(shape: Shape, form: str, recompute: str) -> dict:
    """One compiled layer's backward working set: every block alive at its peak, and their total."""
    alive = alive_in_backward(shape, lambda: Layer(shape, form), recompute)
    return {"form": form, "recompute": recompute, "shape": asdict(shape), "alive": alive, "total": sum(alive)}


def measure_all() -> list[dict]:
    return [measure(shape, form, recompute) for shape in SHAPES + EXTRA for form, modes in FORMS.items()
            for recompute in modes]


if __name__ == "__main__":  # re-record tests/data/compiled_backward.json
    import json
    import sys
    from pathlib import Path

    out = Path(__file__).parent / "data" / "compiled_backward.json"
    entries = measure_all()
    out.write_text(json.dumps({"torch": torch.__version__, "entries": entries}) + "\n")
    sys.stdout.write(f"{len(entries)} entries to {out}\n")
