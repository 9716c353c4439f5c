"""torchtitan's tensor and sequence parallelism run for real on the CPU: what each rank keeps.

A tiny Llama with torchtitan's module names and forward (torchtitan/models/llama/model.py @ 9dec370:
tok_embeddings, layers.N.{attention_norm, attention.{wq, wk, wv, wo}, ffn_norm, feed_forward.{w1, w2, w3}},
norm, output; RMSNorm on x.float(), complex rotary, F.scaled_dot_product_attention) is parallelized over
`world` gloo ranks exactly as torchtitan's apply_tp does (torchtitan/parallelisms/parallelize_llama.py
@ 9dec370, lines 129-199: SequenceParallel norms, PrepareModuleInput to Replicate() before attention
and the feed-forward, ColwiseParallel wq/wk/wv/w1/w3, RowwiseParallel(output_layouts=Shard(1)) wo/w2,
the output ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1)) under loss_parallel), and
trained as its train.py does (F.cross_entropy(pred.flatten(0, 1).float(), labels), `del pred`, backward).

Each rank reports:
- `saved`: per module, the bytes of every storage autograd saved in an fp32 forward (saved-tensor
  hooks, DTensors unwrapped to their local shard; parameters left out; a storage counts once, where
  it was first saved), and the local shapes saved by wq and w1 (the column-parallel linears' input);
- `checkpointed`: with torchtitan's full activation checkpointing (checkpoint_wrapper around each
  block, non-reentrant, which holds each block's arguments for the recomputation), the bytes of the
  blocks' inputs on this rank;
- `loss`: the output projection and loss in bf16 (FSDP's compute dtype): bytes kept after forward,
  and the peaks of forward and backward beyond them, from torch's CPU allocator as the profiler
  records it (`profile_memory`): every allocation made in the phase, those inside DTensor's dispatch
  included. gloo frees a collective's small buffers on its own thread, so the peaks vary by a few
  per-token scalars from run to run; the vocabulary-wide bytes do not.

Run with `python tests/dtensor_tp.py` (or the opt-in test, pytest --distributed); the recorded
result is tests/data/dtensor_tp.json.
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

RECORD = Path(__file__).parent / "data" / "dtensor_tp.json"
# width, heads (MHA: torchtitan repeats K and V before the kernel, which a GQA model would add), MLP, vocabulary,
# layers; batch and sequence (each rank holds SEQ / world tokens between the sublayers)
DIMS = dict(d=64, heads=4, ff=128, vocab=256, layers=2, batch=2, seq=16)
# the loss phase: wide enough that the vocabulary-wide tensors dwarf the per-token scalars
LOSS_DIMS = dict(d=32, vocab=2048, batch=2, seq=64)


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.eps, self.weight = 1e-5, nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # torchtitan/models/norms.py, RMSNorm
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotary(xq: torch.Tensor, xk: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torchtitan's apply_rotary_emb: complex multiplication by the cis table."""
    q = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    k = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs = freqs[: xq.shape[1]].view(1, xq.shape[1], 1, q.shape[-1])
    return torch.view_as_real(q * freqs).flatten(3).type_as(xq), torch.view_as_real(k * freqs).flatten(3).type_as(xk)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.head_dim = d // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, -1, self.head_dim) for w in (self.wq, self.wk, self.wv))
        q, k = rotary(q, k, freqs)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, d: int, ff: int) -> None:
        super().__init__()
        self.w1, self.w3 = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
        self.w2 = nn.Linear(ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.attention, self.feed_forward = Attention(d, heads), FeedForward(d, ff)
        self.attention_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, vocab: int, layers: int, seq: int, **_: int) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d)
        half = d // heads // 2
        angles = torch.outer(torch.arange(seq).float(), 1.0 / 10000 ** (torch.arange(half).float() / half))
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles))
        self.layers = nn.ModuleDict({str(i): Block(d, heads, ff) for i in range(layers)})
        self.norm, self.output = RMSNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h))


def apply_tp(model: Transformer, mesh) -> None:  # noqa: ANN001
    """torchtitan's apply_tp without Float8 or async TP (parallelize_llama.py @ 9dec370, lines 129-199)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    parallelize_module(model, mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)})
    for block in model.layers.values():
        parallelize_module(block, mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel()})


def local(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor holding a rank's bytes: a DTensor's shard, a pending collective's result."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.tensor import DTensor

    t = t._local_tensor if isinstance(t, DTensor) else t
    while isinstance(t, AsyncCollectiveTensor):
        t = t.elem
    return t


def allocations(profile) -> list:  # noqa: ANN001
    """The CPU allocator's allocation and free events a torch profile (profile_memory=True) recorded, as its event
    tree's nodes in time order (each node's `typed[1]` holds `ptr` and `alloc_size`, negative for a free)."""
    found, stack = [], list(profile.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if type(node.typed[1]).__name__ == "_ExtraFields_Allocation":
            found.append(node)
        stack += node.children
    return sorted(found, key=lambda node: node.start_time_ns)


class Allocated:
    """torch's CPU allocator as the profiler records it: of the blocks allocated since entering, the bytes
    alive at the end and at their peak (what torch.cuda's max_memory_allocated adds on a GPU); frees of
    older blocks are left out, as gloo's thread frees a finished collective's buffers when it gets to
    them. Garbage is collected on both sides: DTensor's pending collectives sit in reference cycles.
    `phases`: the peak of each stretch between allocations of `mark` bytes (a test's marks of its moments)."""

    def __init__(self, mark: int = 0) -> None:
        self.mark = mark

    def __enter__(self) -> "Allocated":
        from torch.profiler import ProfilerActivity, profile

        gc.collect()
        self._profile = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._profile.__enter__()
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        gc.collect()
        self._profile.__exit__(*exc)
        live: dict[int, int] = {}  # address: bytes, of the blocks allocated inside and not yet freed
        self.now = self.peak = 0
        self.phases = [0]
        for event in (node.typed[1] for node in allocations(self._profile)):
            if self.mark and event.alloc_size == self.mark:
                self.phases.append(0)
            if event.alloc_size > 0:
                live[event.ptr] = event.alloc_size
            elif live.pop(event.ptr, None) is None:  # a block from before: its free says nothing of this phase
                continue
            self.now += event.alloc_size
            self.peak = max(self.peak, self.now)
            self.phases[-1] = max(self.phases[-1], self.now)


def _saved(model: Transformer, ids: torch.Tensor, context) -> dict:  # noqa: ANN001
    """Bytes each module saved for backward (fp32 forward), and the local shapes wq and w1 saved."""
    params = {local(p).untyped_storage().data_ptr() for p in model.parameters()}
    params.add(model.freqs_cis.untyped_storage().data_ptr())
    stack, saved = ["loss"], []
    for name, module in model.named_modules():
        if name:
            module.register_forward_pre_hook(lambda m, a, name=name: stack.append(name) and None)
            module.register_forward_hook(lambda m, a, o: stack.pop() and None)

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = local(t).untyped_storage()
        if storage.data_ptr() not in params:
            saved.append((stack[-1], storage.data_ptr(), storage.nbytes(), list(local(t).shape)))
        return t

    with context(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(ids).flatten(0, 1).float(), ids.flatten(0, 1))
    with context():
        loss.backward()
    per_module, shapes, seen = {}, {}, set()
    for where, ptr, size, shape in saved:
        if ptr not in seen:
            seen.add(ptr)
            per_module[where] = per_module.get(where, 0) + size
            if where.endswith((".wq", ".w1")):
                shapes[where] = shape
    return {"per_module": per_module, "linear_input_shapes": shapes}


def _checkpointed(model: Transformer, ids: torch.Tensor, context) -> int:  # noqa: ANN001
    """With every block checkpointed as torchtitan's full AC does (checkpoint_wrapper, non-reentrant),
    what the checkpoints keep: their arguments, held for the recomputation; the bytes of each block's
    input on this rank, summed (the rotary table, the model's buffer, left out)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    kept = []
    model.layers = nn.ModuleDict({k: checkpoint_wrapper(b, preserve_rng_state=False) for k, b in model.layers.items()})
    for block in model.layers.values():
        block.register_forward_pre_hook(lambda m, args: kept.append(local(args[0]).untyped_storage().nbytes()) and None)
    with context():
        F.cross_entropy(model(ids).flatten(0, 1).float(), ids.flatten(0, 1)).backward()
    return sum(kept)


def _loss(world: int, mesh, context) -> dict:  # noqa: ANN001
    """The bf16 output projection and the loss, as torchtitan's train.py runs them: bytes kept after
    forward (the head's gathered input among them) and each phase's peak beyond what it started with."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    d, vocab, b, s = (LOSS_DIMS[k] for k in ("d", "vocab", "batch", "seq"))
    head = nn.Linear(d, vocab, bias=False).to(torch.bfloat16)
    if world > 1:
        parallelize_module(head, mesh, ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                                       use_local_output=False))
    torch.manual_seed(dist.get_rank())
    h = torch.randn(b, s // world, d, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (b, s))
    with context():
        with Allocated() as forward:
            pred = head(h)
            loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
            del pred
        with Allocated() as backward:
            loss.backward()
    grads = local(head.weight.grad).nbytes + h.grad.nbytes  # made in backward, not the loss's
    return {"kept": forward.now, "forward_peak": forward.peak - forward.now, "backward_peak": backward.peak,
            "gradients": grads}


def _worker(rank: int, world: int, path: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    dist.init_process_group("gloo", init_method=f"file://{path}.store", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    context = loss_parallel if world > 1 else torch.enable_grad
    torch.manual_seed(0)
    model = Transformer(**DIMS)
    if world > 1:
        apply_tp(model, mesh)
    ids = torch.randint(0, DIMS["vocab"], (DIMS["batch"], DIMS["seq"]))
    result = {"saved": _saved(model, ids, context), "checkpointed": _checkpointed(model, ids, context),
              "loss": _loss(world, mesh, context)}
    Path(f"{path}.{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def measure(world: int) -> list[dict]:
    """Each rank's report (see the module's docstring), from `world` spawned gloo processes."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="gptcalc-dtensor-") as folder:
        path = str(Path(folder) / "run")
        mp.spawn(_worker, args=(world, path), nprocs=world)
        return [json.loads(Path(f"{path}.{rank}.json").read_text()) for rank in range(world)]


if __name__ == "__main__":  # record: python tests/dtensor_tp.py
    RECORD.write_text(json.dumps({str(w): measure(w) for w in (1, 2)}, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {RECORD}\n")
