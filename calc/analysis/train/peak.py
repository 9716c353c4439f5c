"""The moments of a training step and what is allocated at each: the peak is the largest.

A step's memory is not the sum of everything it ever holds. Gradients appear as backward frees the
activations; the loss's vocabulary-wide temporaries exist only while it runs. What is allocated:

  forward, computing the loss       states (no gradients: zero_grad(set_to_none) freed them)
                                    + activations kept + the loss's forward temporaries
  backward, through the loss        the same, with the loss's backward temporaries
  backward, the head's second       (a head applied in chunks, trained) the chunks' weight gradients
  chunk                             summed out of place: 3 × the head's gradient, beside the logits
                                    gradients the head has not reached (`_head_accumulated`)
  backward, the head's last chunk   (the head FSDP2's own unit) the sum and the chunk's gradient, the
                                    head gathered and the last layer's all-gather, prefetched
  backward, last layer recomputed   (full recomputation) the layers' activations (the head's and the
                                    loss's are freed by now) + the head's gradient + that layer's
                                    activations rebuilt in full (compiled: its backward's working set
                                    at its peak, compiled.py); with context parallelism also its
                                    ring attention's buffers (context_parallel.py), under Float8 its
                                    largest linear's fp8 operands (float8.py), under LoRA on expert
                                    stacks a merged stack's gradient (params.merged_gradient) — without
                                    full recomputation this moment ("backward, the last layer") holds those
                                    (and, compiled under per-op recompute, its backward's working set)
  backward, FSDP1's root gradient   (FSDP1) states + every gradient + the root unit gathered + its
  assembled                         parameters' gradients and the flat gradient assembled from them
  backward ends: FSDP2 reduce-      (FSDP2, the root holding the head) states + every gradient + the
  scatters the root's gradients     root's unsharded gradients and their reduce-scatter input (`_fsdp`)
  backward ends                     states + every gradient
  optimizer step                    states + every gradient + the step's temporaries: torch's
                                    foreach AdamW makes one state-sized tensor (sqrt of v) for all
                                    parameters at once; the fused kernel makes none; torchao's 8-bit
                                    AdamW, stepping one parameter at a time, that parameter's m and v
                                    in fp32 (with the step inside backward: at backward's end)
  forward ends: the logits' fp32     (a loop that holds the previous micro-batch's output: litgpt) the
  copy                              kept activations but the loss's, the previous fp32 logits, the new
                                    ones in bf16 and fp32; under bitsandbytes 0.42.0 the previous
                                    graph's 4-bit inputs (bnb.py); with an NF4 head also the head's
                                    last chunk (the head dequantised) and its backward

With gradient accumulation (`grad_accumulation` micro-batches a step) every micro-batch after the
first runs its forward and backward beside the gradients accumulated so far: each GPU's gradients
as ZeRO holds them (FSDP2, as torchtune and torchtitan run it, reduce-scatters every backward and
accumulates shards), or, under `no_sync` (torch FSDP's no_sync(), which litgpt enters through
Fabric's no_backward_sync for every micro-batch but the last), the unsharded gradients: FSDP's
docstring says "FSDP will accumulate the full model gradients (instead of gradient shards) until
the eventual sync".

FSDP / ZeRO-3 (and FSDP's CPU offload) add, in forward and backward, the layers it has gathered:
the one running, unsharded at 2 bytes a parameter (a matrix 1 byte under float8 all-gather, NF4
under QLoRA: params.gathered_bytes), and the next one's all-gather output, prefetched (FSDP2 copies
it out into the parameters when that layer starts, and frees it); in backward also the running
layer's unsharded gradient and the previous layer's reduce-scatter input, which FSDP2 keeps until
the next post-backward (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py:
`reduce_scatter_state(s)`; measured on the CPU: tests/test_train_fsdp2.py). Where only the layers are
wrapped (torchtitan, torchtune's LoRA recipes) the root unit holds the embedding, final norm and head:
FSDP2 never reshards the root after forward, and reshards it only in its final callback (the root's
post-backward hook sits on its inputs, the token ids, which need no gradient), so it stays gathered
until backward ends; the last layer stays gathered at the loss where the framework does not reshard
it after forward (`fsdp_keeps_last_layer`: torchtitan's apply_fsdp; torchtune reshards every layer);
in backward the projection's unsharded gradient. Where the head is its own unit, resharded after forward (`fsdp_head_unit`:
torchtune's custom_sharded_layers), nothing is gathered at the loss; the head is gathered again for
each chunk's backward, and FSDP2, which records a unit once per call in its post-forward order,
prefetches the last layer only at the head's last chunk (`_record_post_forward`,
`_backward_prefetch`): the moment "backward, the head's last chunk". With the optimizer step inside backward
(torchtune's optimizer_in_bwd) each gradient is freed as soon as its parameter is updated, so at
most the largest one exists. With activation offloading the layers' activations go to the host and
one layer's stay. torch's FSDP1
(`fsdp1`: litgpt, through Lightning's FSDPStrategy) keeps its root unit, what no wrapped layer owns
(the embedding, final norm and head), unsharded from forward to the end of backward, and gathers
straight into its flat parameter, with no copy-out (`_fsdp`). Its forward runs on views of the flat
parameter (`_get_unflat_views`: torch.split, then view), so autograd's split backward assembles the
flat gradient from the views' gradients once the last arrives: for the root, after the embedding's
backward, the head's gradient (held since the loss), the embedding's and the flat one exist together
(measured: tests/test_train_torch.py).

Under pipeline parallelism each stage has its own moments (`_pipelined`; pipeline.py): every stage
the start of its first backward (the most micro-batches in flight, no gradients yet) and of the
backward after the first where most is held (the gradients accumulated whole beside the micro-batches
still in flight: FSDP, as torchtitan runs it, keeps the stage gathered and accumulates unsharded fp32
gradients, `_fsdp`; without it each GPU's gradients), backward's end and the optimizer step, each
with torch's pipelining buffers; the last stage also its last micro-batch's loss, forward and backward,
beside the outputs of every earlier one (`output_chunks`), and the step's end, where they are merged.
An interleaved rank's stages are counted together at each of its backwards, each as the schedule's
order leaves it (`interleaved_moments`).

The statistic: `allocated` is what torch.cuda.max_memory_allocated reports (torchtune's
"active" is within the allocator's rounding of it). `reserved` is the largest of the moments'
allocated plus the blocks the caching allocator holds idle then (a moment's `cached`: the fp32
loss's bf16 logits, freed in forward and too small for backward's fp32 gradients), with the
allocator's slack; `nvidia_smi` adds the CUDA context; the slack and the context are stated
assumptions, settable (`Overheads`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from calc.analysis.train.activations import ACT_BYTES
from calc.analysis.train.bnb import dequantised_bytes, graph_inputs, quantised_head
from calc.analysis.train.compiled import compiled_backward_terms, compiled_op_backward_terms
from calc.analysis.train.context_parallel import ring_bytes
from calc.analysis.train.float8 import cast_bytes
from calc.analysis.train.frozen import frozen_layer
from calc.analysis.shapes import journey
from calc.analysis.train.params import gathered_bytes, merged_gradient
from calc.analysis.train.pipeline import held_buffers, residual_bytes, stage_buffers, stage_outputs
from calc.analysis.train.precision import Precision
from calc.analysis.train.states import step_temporary_bytes
from calc.spec.model import ModelSpec
from calc.units import parse_bytes

if TYPE_CHECKING:
    from calc.analysis.train import Training
    from calc.analysis.train.loss import Loss

__all__ = ["Moment", "Overheads", "interleaved_moments", "moments"]

MIB = 2**20
FP32 = 4  # Lightning Fabric returns the model's output in fp32 (its precision plugin's convert_output)


@dataclass(frozen=True)
class Overheads:
    """What separates torch's allocated bytes from the other statistics. Assumptions, settable:
    the caching allocator reserves `allocator_pct` percent more than it hands out (block rounding and
    fragmentation), and the CUDA context (driver, kernels, cuBLAS workspace) takes `cuda_context`."""

    allocator_pct: int = 5
    cuda_context: int = 512 * MIB

    def reserved(self, allocated: int) -> int:
        return allocated + -(-allocated * self.allocator_pct // 100)

    @classmethod
    def parse(cls, allocator_pct: int, cuda_context: str) -> "Overheads":
        return cls(allocator_pct, parse_bytes(cuda_context))


@dataclass(frozen=True)
class Moment:
    name: str
    parts: tuple[tuple[str, int], ...]  # (what, bytes) on this GPU at that moment
    cached: int = 0  # blocks freed earlier in the step that nothing at this moment can reuse: reserved, idle

    @property
    def allocated(self) -> int:
        return sum(b for _, b in self.parts)

    def to_json(self) -> dict[str, object]:
        return {"moment": self.name, "allocated": self.allocated, "parts": dict(self.parts),
                "cached_idle": self.cached}


def _loss_sizes(t: "Training", spec: ModelSpec) -> tuple[Loss, int, int]:
    """The loss as it runs, one micro-batch's tokens on this GPU and its vocabulary shard (the head's rows split
    over tp, the last rank's padded): what every loss and head figure of a moment is sized by."""
    s = t.setup
    return s.loss_run, s.micro_batch * s.local_seq, -(-spec.vocab_size // s.tp)


def _recomputed_layer(t: "Training", spec: ModelSpec) -> int:
    """A checkpointed layer's activations rebuilt in full during its backward, beyond its kept input
    (under LoRA without what its frozen linears do not keep). A compiled layer (not under LoRA, whose
    frozen backward is recorded but has no rule yet) counts its backward's working set at its peak instead:
    the rebuilt tensors with the gradient arriving and the MLP's gradient temporaries (compiled.py); under per-op
    recompute too, where the compiled backward rebuilds what the policy did not keep."""
    s = t.setup
    if s.compiled_backward:
        terms = compiled_backward_terms if s.recompute == "full" else compiled_op_backward_terms
        return max(sum(s.term_bytes(term) for term in terms(
            spec.blocks[kind], spec.d_model, s.micro_batch, s.local_seq, ACT_BYTES, s.repeat_kv))
            for kind in spec.layer_counts())
    if s.recompute != "full":
        return 0
    blocks = [spec.blocks[kind] for kind in spec.layer_counts()]
    rebuilt = [t.layer_bytes(tuple(frozen_layer(s.eager_layer(b, spec.d_model, "none"), b, s))) for b in blocks]
    return max(rebuilt) - residual_bytes(s, spec.d_model)


def _in_layer(t: "Training", spec: ModelSpec) -> tuple[tuple[str, int], ...]:
    """What a layer's backward makes beyond the kept activations: the layer rebuilt under full
    recomputation, ring attention's buffers, Float8's operands, a merged expert stack's gradient (LoRA on the
    stacks, params.merged_gradient; bf16, split as the stack)."""
    s = t.setup
    n = s.micro_batch * s.local_seq
    merged = merged_gradient(journey(spec, 1).steps, s.lora_targets) if s.lora_rank else 0
    return tuple((what, size) for what, size in (
        ("one compiled layer's backward working set (rebuilt)" if s.compiled_backward
         else "one layer's activations rebuilt", _recomputed_layer(t, spec)),
        ("CP: ring attention's gathered K, V and fp32 dQ, dK, dV", ring_bytes(spec, s.cp, n, s.tp, s.repeat_kv)),
        ("Float8: the largest linear's fp8 operands", cast_bytes(spec, s.float8, n, s.tp)),
        ("LoRA: a merged expert stack's gradient (W + BA's, the stack's size)", 2 * -(-merged // s.tp))) if size)


@dataclass(frozen=True)
class _Fsdp:
    """What FSDP holds beyond the sharded states, by kind of moment: (what, bytes) parts."""

    at_loss: tuple[tuple[str, int], ...] = ()  # forward and backward through the loss
    loss_backward: tuple[tuple[str, int], ...] = ()  # backward through the loss only
    in_layer: tuple[tuple[str, int], ...] = ()  # a layer's backward
    layer_grad: tuple[tuple[str, int], ...] = ()  # a layer's backward, and backward's end
    root: tuple[tuple[str, int], ...] = ()  # from the forward to the end of backward (FSDP1's root unit)
    root_grad: tuple[tuple[str, int], ...] = ()  # the root's gradients at backward's end, as `root_moment` names it
    root_moment: str = "backward, FSDP1's root gradient assembled"
    head_chunk: tuple[tuple[str, int], ...] | None = None  # the head's chunked backward; None: as at the loss
    last_chunk: tuple[tuple[str, int], ...] = ()  # the head's last chunk, where its own unit prefetches a layer


def _fsdp(t: "Training", p: Precision, gathered: tuple[int, int], head_params: int, tied: bool) -> _Fsdp:
    """In a layer's backward FSDP2 holds that layer gathered and the next one's all-gather output
    (prefetched), the layer's gradient and the previous layer's reduce-scatter input (see the module's
    docstring). From forward to the end of backward it holds the root unit (head and embedding), at the loss
    also the last layer where the framework keeps it, and in backward the projection's unsharded gradient;
    with the head its own unit (`fsdp_head_unit`), only
    while the head runs, the last layer's all-gather beside it at its last chunk. Under pipeline parallelism
    torchtitan does not reshard after forward (parallelize_llama.py: "to avoid per-microbatch
    all-gathers"), so the stage stays gathered through the step (the unsharded fp32 gradients it
    accumulates there: `_pipelined`). FSDP1 does not free the root's parameters after
    forward ("with the intention that they are immediately used for backward": _runtime_utils.py,
    _post_forward_reshard), so the head and an untied embedding stay gathered until the root's
    post-backward; its all-gather writes the flat parameter the layer's views read (no copy-out)."""
    s, (params, size) = t.setup, gathered
    if not params:
        return _Fsdp()
    flat = () if s.fsdp1 else (("FSDP: the all-gather's flat output buffer", size),)
    layer_grad = () if s.lora_rank else \
        (("FSDP: one layer's unsharded gradient and the previous layer's reduce-scatter input", 2 * params * p.grad),)
    if s.pp > 1:
        stage = (("FSDP under PP: the stage kept gathered",
                  gathered_bytes(s, t.held.params, t.held.layer_matrices)),)
        return _Fsdp(stage, (), stage + flat, layer_grad)
    head_grad = () if s.lora_rank else (("FSDP: the output projection's unsharded gradient", head_params * p.grad),)
    layers = (("FSDP: two gathered layers (running, prefetched)", 2 * size),)
    if s.fsdp1:
        root = (("FSDP1: the root unit (head" + ("" if tied else ", embedding") + ") unsharded through backward",
                 2 * head_params * (1 if tied else 2)),)
        root_grad = () if s.lora_rank else root + (
            ("FSDP1: the root's parameters' gradients and the flat gradient autograd assembles from them",
             2 * head_params * (1 if tied else 2) * p.grad),)
        return _Fsdp(root + (("FSDP: the last layer gathered", size),), head_grad, root + layers, layer_grad, root,
                     root_grad)
    if s.fsdp_head_unit:
        head = (("FSDP: the output projection gathered (its own unit)", 2 * head_params),)
        return _Fsdp((), head + head_grad, layers, layer_grad, head_chunk=head,
                     last_chunk=head + (("FSDP: the last layer's all-gather output (prefetched)", size),))
    root = (("FSDP2: the root unit (head" + ("" if tied else ", embedding") + ") gathered until backward ends",
             2 * head_params * (1 if tied else 2)),)
    last = (("FSDP: the last layer gathered (not resharded after forward)", size),) if s.fsdp_keeps_last_layer else ()
    # the final callback reshards the root, then copies its unsharded (bf16) gradients into one reduce-scatter
    # input in the reduce dtype, the sharded gradients' (foreach_reduce: allocate(dtype=reduce_dtype), copy-in,
    # and only then unsharded_grads.clear())
    root_grad = () if s.lora_rank else (("FSDP2: the root's unsharded gradients (head" + ("" if tied else ", embedding")
                                         + ") and their reduce-scatter input", head_params * (1 if tied else 2)
                                         * (2 + p.grad)),)
    return _Fsdp(root + last, head_grad, root + layers, layer_grad, root, root_grad,
                 "backward ends: FSDP2 reduce-scatters the root's gradients")


def _without_gradients(t: "Training") -> tuple[tuple[tuple[str, int], ...], int]:
    """This GPU's states split as the moments hold them: the rows but the gradients, there at every moment, and
    the gradients' bytes, which exist only from backward on (zero_grad(set_to_none) freed them)."""
    gpu = [r for r in t.states if r.where == "gpu"]
    return (tuple((r.label, r.per_gpu) for r in gpu if r.key != "gradients"),
            next((r.per_gpu for r in gpu if r.key == "gradients"), 0))


def _accumulated(t: "Training", grads: int) -> int:
    """The gradients a later micro-batch of an accumulating step runs beside (see the module's
    docstring): this GPU's, or under no_sync its unsharded ones; none without accumulation."""
    s = t.setup
    if s.grad_accumulation == 1:
        return 0
    whole = next((r.full for r in t.states if r.key == "gradients"), 0)
    return whole if s.no_sync else grads


def moments(t: "Training", spec: ModelSpec, p: Precision, gathered: tuple[int, int]) -> list[Moment]:
    """The moments of one step (see the module's docstring); `gathered`: the parameters of one layer
    that FSDP gathers and their bytes gathered, (0, 0) without it."""
    if t.stage is not None:
        return _pipelined(t, spec, p, gathered)
    s = t.setup
    base, grads = _without_gradients(t)
    if s.optimizer_in_backward:
        trained = t.held.adapters if s.lora_rank else t.held.tensors
        grads = min(grads, max((x.elements // x.copies for x in trained), default=0) * (p.adapter_grads if s.lora_rank else p.grad))
    per_layer = [t.layer_bytes(terms) for _, _, terms in t.layers]
    layers = max(per_layer, default=0) if "activations" in s.offload else \
        sum(n * t.layer_bytes(terms) for _, n, terms in t.layers)
    kept = (("activations kept (one layer's, the rest offloaded)" if "activations" in s.offload
             else "activations kept", layers + t.layer_bytes(t.outside)),)
    loss, n, vocab = _loss_sizes(t, spec)
    head_params = vocab * spec.d_model
    f = _fsdp(t, p, gathered, head_params, spec.head.tied)
    head_grad = 0 if s.lora_rank else head_params * p.grad
    earlier = _accumulated(t, grads)
    acc = (("gradients accumulated over the earlier micro-batches", earlier),) if earlier else ()
    out = [Moment("forward, computing the loss",
                  base + kept + acc + (("loss: forward temporaries", loss.transient("forward", n, vocab, spec.d_model)),)
                  + f.at_loss),
           Moment("backward, through the loss",
                  base + kept + acc + (("loss: backward temporaries", loss.transient("backward", n, vocab, spec.d_model)),)
                  + f.at_loss + f.loss_backward, cached=loss.cached * n * vocab)]
    for name, last, held in (("backward, the head's second chunk", False, f.at_loss if f.head_chunk is None
                              else f.head_chunk), ("backward, the head's last chunk", True, f.last_chunk)):
        through_head = _head_accumulated(loss, n, vocab, spec.d_model, head_grad, last)
        if through_head and (held or not last):
            freed, parts = through_head
            out.append(Moment(name, base + ((kept[0][0] + " (the loss's own freed by its backward)", kept[0][1] - freed),)
                              + acc + parts + held))
    if quantised_head(spec, s):  # each chunk's gradient through the head dequantises it again
        k = loss.chunk(n, vocab, spec.d_model)
        out.append(Moment("backward, through the NF4 head", base + kept + acc + (
            ("the chunk's logits gradient (bf16)", ACT_BYTES * k * vocab),
            ("the head dequantised", dequantised_bytes(s) * vocab * spec.d_model))))
    out += _next_forward(t, spec, base + acc + f.root, kept[0][1] - loss.held * n * vocab, n, vocab)
    in_layer = _in_layer(t, spec)
    if in_layer:  # the head's and the loss's kept tensors are freed by now
        below_head = ((kept[0][0], kept[0][1] - t.layer_bytes(tuple(x for x in t.outside if x.head))),)
        out.append(Moment("backward, the last layer" + (" recomputed" if s.recompute == "full" else ""),
                          base + below_head + (acc or (("the head's gradient", min(head_grad, grads)),)) + in_layer
                          + f.in_layer + f.layer_grad))
    stepped = _one_step(t)
    one = (("8-bit step: one parameter's m and v dequantised to fp32", stepped),) if stepped else ()
    if f.root_grad:
        out.append(Moment(f.root_moment, base + (("gradients", max(grads, earlier)),) + f.root_grad))
    out.append(Moment("backward ends", base + (("gradients", max(grads, earlier)),) + f.layer_grad
                      + (one if s.optimizer_in_backward else ())))
    if not s.optimizer_in_backward:
        out.append(Moment("optimizer step", base + (("gradients", grads), _foreach_step(t)) + one))
    return out


def _foreach_step(t: "Training") -> tuple[str, int]:
    """torch's foreach AdamW makes one state-sized tensor (sqrt of v) for every parameter on the GPU."""
    s = t.setup
    step = 0
    if s.optimizer_impl == "foreach" and s.optimizer == "adamw" and "optimizer" not in s.offload \
            and "params" not in s.offload:
        step = next((r.per_gpu for r in t.states if r.key == "optimizer" and r.where == "gpu"), 0) // 2
    return "foreach step: sqrt(v) for every parameter", step


@dataclass(frozen=True)
class _Kept:
    """What one pipeline stage's step keeps, by what it scales with (see `_pipelined`)."""

    base: tuple[tuple[str, int], ...]  # the states but the gradients
    grads: int  # this GPU's gradients
    whole: tuple[str, int]  # the gradients accumulated whole over the step's micro-batches
    fsdp: _Fsdp
    per_batch: int  # one micro-batch in flight: its layers' kept activations and, on the first stage, its ids'
    in_layer: tuple[tuple[str, int], ...]  # a layer's backward beyond the kept
    output: int  # the last stage's output, one micro-batch's (the logits, or the hidden state)
    hidden: bool  # the loss applies the head itself, or keeps no logits
    last: bool  # the pipeline's last stage: the one whose outputs `outputs` counts

    def outputs(self, count: int) -> tuple[tuple[str, int], ...]:
        """The last stage's outputs, `count` micro-batches' (the other stages' are pipeline.held_buffers')."""
        return (stage_outputs(count, self.output),) if self.last else ()


def _kept(t: "Training", spec: ModelSpec, p: Precision, gathered: tuple[int, int]) -> _Kept:
    """The kept activations are the in-flight micro-batches', each its layers' and, on the first stage, its ids;
    the gradients whole are FSDP's unsharded fp32 ones or this GPU's; the last stage's output (the logits, or the
    hidden state where the loss applies the head) is kept for every micro-batch run."""
    s = t.setup
    base, grads = _without_gradients(t)
    whole = ("FSDP under PP: unsharded fp32 gradients accumulated", t.held.params * 4) \
        if s.accumulates_fp32 else ("gradients accumulated over the earlier micro-batches", grads)
    f = _fsdp(t, p, gathered, 0, True)  # under PP the stage is gathered whole: no head unit of its own
    per_batch = sum(n * t.layer_bytes(terms) for _, n, terms in t.layers) // t.stage.in_flight(0) \
        + t.layer_bytes(tuple(x for x in t.outside if not x.head))
    loss, n, vocab = _loss_sizes(t, spec)
    hidden = loss.head_inside or not loss.held
    output = residual_bytes(s, spec.d_model) if hidden else ACT_BYTES * n * vocab
    return _Kept(base, grads, whole, f, per_batch, _in_layer(t, spec) + f.in_layer + f.layer_grad, output, hidden,
                 t.stage.last)


def _loss_parts(t: "Training", spec: ModelSpec, phase: str) -> tuple[tuple[str, int], ...]:
    """The last stage's loss, forward or backward, beside its micro-batch's head and loss activations."""
    loss, n, vocab = _loss_sizes(t, spec)
    return (("activations kept: the head's and the loss's", t.layer_bytes(tuple(x for x in t.outside if x.head))),
            (f"loss: {phase} temporaries", loss.transient(phase, n, vocab, spec.d_model)))


def _pipelined(t: "Training", spec: ModelSpec, p: Precision, gathered: tuple[int, int]) -> list[Moment]:
    """The moments of pipeline stage t.stage's step (see the module's docstring and pipeline.py), what it
    keeps as `_kept` gives it; the current micro-batch's output counted once where the loss keeps it itself."""
    s, stage = t.setup, t.stage
    k_ = _kept(t, spec, p, gathered)
    base, grads, whole, f, in_layer, output = k_.base, k_.grads, k_.whole, k_.fsdp, k_.in_layer, k_.output
    recomputed = ", the last layer recomputed" if s.recompute == "full" else ""

    def backward(j: int, *extra: tuple[str, int]) -> tuple[tuple[str, int], ...]:
        k = stage.in_flight(j)
        return base + stage_buffers(s, spec.d_model, stage, j) + (
            (f"activations kept ({k} micro-batch{'es' if k > 1 else ''} in flight)", k * k_.per_batch),) + extra

    out = []
    if stage.last:
        j = stage.n - 1
        current = 0 if k_.hidden or s.loss_run.keeps_logits else 1
        forward, back = _loss_parts(t, spec, "forward"), _loss_parts(t, spec, "backward")
        out += [Moment(f"forward of micro-batch {j + 1}, computing the loss",
                       backward(j, forward[0], whole, *k_.outputs(j), forward[1]) + f.at_loss),
                Moment(f"backward of micro-batch {j + 1}, through the loss",
                       backward(j, back[0], whole, *k_.outputs(j + current), back[1]) + f.at_loss),
                Moment(f"backward of micro-batch {j + 1}{recomputed or ', the last layer'}",
                       backward(j, whole, *k_.outputs(j + 1)) + in_layer)]
    else:
        earlier = _accumulated(t, grads)
        acc = (("gradients accumulated over the earlier steps' micro-batches", earlier),) if earlier else ()
        later = max(range(1, stage.n), key=lambda j: sum(size for _, size in backward(j, whole)))
        out += [Moment(f"backward of micro-batch 1{recomputed or ', the last layer'}", backward(0, *acc) + in_layer),
                Moment(f"backward of micro-batch {later + 1}{recomputed or ', the last layer'}, beside the "
                       "gradients", backward(later, whole) + in_layer)]
    end = base + stage_buffers(s, spec.d_model, stage, None) + k_.outputs(stage.n) + (("gradients", grads),)
    out.append(Moment("backward ends", end + f.layer_grad))
    if stage.last:
        out.append(Moment("the step ends: every micro-batch's output merged (_merge_outputs)",
                          end + (("the merged outputs (torch.cat)", stage.n * output),)))
    return out + [_optimizer_step(t, end)]


def _optimizer_step(t: "Training", end: tuple[tuple[str, int], ...]) -> Moment:
    """The step after a pipelined backward (the step inside backward is refused under PP: train._check)."""
    stepped = _one_step(t)
    return Moment("optimizer step", end + (_foreach_step(t),)
                  + ((("8-bit step: one parameter's m and v dequantised to fp32", stepped),) if stepped else ()))


def _head_accumulated(loss, n: int, vocab: int, d: int, head_grad: int, last: bool = False):
    """A head applied in c > 1 chunks (torchtune's chunked losses) gets c weight gradients, which autograd
    sums in the weight's input buffer: F.linear's weight gradient is a view, so the second chunk's is added
    out of place (`add`, not `add_`): the sum so far, the chunk's and the new sum exist together; from then
    on the buffer holds a tensor of its own and adds in place. The autograd engine runs ready nodes by
    sequence number, latest first, so where the model applies the head and the loss follows, every chunk's
    loss backward runs before the head's: at the second chunk the loss's kept tensors are freed, and the
    logits' gradients of the chunks the head has not reached are still there (bf16, 2 bytes an entry);
    where the loss applies the head itself (`head_inside`), chunk by chunk, only the two chunks' kept
    tensors are freed. The head input's gradient comes in pieces, two by then (bf16). `last`: the last
    chunk instead (where FSDP2 prefetches the last layer for a head of its own unit: `_fsdp`), the sum and
    the chunk's gradient beside the chunk's logits gradient and every piece. Measured with the live-storage
    tracker (tests/test_train_torch.py) and, under FSDP2, the CPU allocator's record
    (tests/test_train_fsdp2.py). Returns (the loss's kept bytes freed, the parts), or None without chunks
    or a trained head."""
    k = loss.chunk(n, vocab, d)
    if loss.chunks < 2 or not head_grad or k >= n:  # one chunk: one gradient, nothing summed
        return None
    if last:
        return loss.held * n * vocab, (
            ("the head's weight gradient: the sum so far and the last chunk's" + (
                ", and their sum (out of place at the second chunk)" if loss.chunks == 2 else " (added in place)"),
             (3 if loss.chunks == 2 else 2) * head_grad),
            ("the last chunk's logits gradient (bf16)", ACT_BYTES * k * vocab),
            ("the head input's gradient, every chunk's piece (bf16)", ACT_BYTES * n * d))
    reached = min(n, 2 * k)  # the tokens of the two chunks the head's backward has run (fewer tokens: all)
    freed = loss.held * (reached if loss.head_inside else n) * vocab
    pending = 0 if loss.head_inside else ACT_BYTES * (n - reached) * vocab
    return freed, (("the head's weight gradient summed out of place (the sum so far, the chunk's, the new sum)",
                    3 * head_grad),
                   ("the logits' gradients of the chunks the head has not reached (bf16)", pending),
                   ("the head input's gradient, two chunks' pieces (bf16)", ACT_BYTES * reached * d))


def _next_forward(t: "Training", spec: ModelSpec, held: tuple[tuple[str, int], ...], kept: int, n: int,
                  vocab: int) -> list[Moment]:
    """With `loop_holds_output` the training loop still holds the previous micro-batch's logits while
    the next forward runs (litgpt's fit loop reassigns `logits` only when model(...) returns; its
    `loss` is a float by then: log_interval 1), and with them that micro-batch's graph: under
    bitsandbytes 0.42.0 its quantised linears' inputs (bnb.graph_inputs). The forward ends in the head,
    chunk by chunk (an NF4 head dequantised for each), then Lightning Fabric's fp32 copy of every
    chunk (`convert_output`) beside the bf16 ones. `kept`: the activations kept, the loss's not yet."""
    s = t.setup
    if not s.loop_holds_output:
        return []
    graph = graph_inputs(spec, s)
    now = held + (("activations kept (the loss's not yet)", kept),
                  ("the previous micro-batch's logits (fp32), held by the training loop", FP32 * n * vocab)) \
        + ((("bitsandbytes 0.42.0: the previous micro-batch's 4-bit linears' inputs, kept by its graph", graph),)
           if graph else ())
    out = []
    if quantised_head(spec, s):
        k, head = s.loss_run.chunk(n, vocab, spec.d_model), vocab * spec.d_model
        out.append(Moment("forward, the NF4 head's last chunk (the previous micro-batch's logits held)", now + (
            ("the earlier chunks' bf16 logits", ACT_BYTES * (n - k) * vocab),
            ("the head dequantised (and the chunk's logits)", max(dequantised_bytes(s) * head, ACT_BYTES * (head + k * vocab))))))
    out.append(Moment("forward ends: the logits' fp32 copy (the previous micro-batch's held)",
                      now + (("this micro-batch's logits, bf16 and fp32", (ACT_BYTES + FP32) * n * vocab),)))
    return out


def _one_step(t: "Training") -> int:
    """A step that goes parameter by parameter keeps the largest one's temporaries for a moment
    (torchao's 8-bit AdamW: states.step_temporary_bytes), on the GPU and over its shard."""
    s = t.setup
    row = next((r for r in t.states if r.key == "optimizer" and r.where == "gpu"), None)
    if row is None:
        return 0
    return -(-step_temporary_bytes(s.optimizer, t.held.adapters if s.lora_rank else t.held.tensors) // row.shards)


def interleaved_moments(t: "Training", stages: list["Training"], spec: ModelSpec, p: Precision,
                        gathered: tuple[int, int]) -> list[Moment]:
    """The moments of an interleaved pipeline rank's step (interleaved.py): its stages' Trainings (`stages`,
    each counted as one stage of the p·V) keep what `_kept` gives them, as many micro-batches as the schedule's
    order has in flight on each at each of the rank's backwards. Of those backwards: the first, the largest
    through a layer and, on the rank with the last stage, the largest loss forward and loss backward; then
    backward's end and the optimizer step, with t's (the rank's) states."""
    schedule, index = t.stage.schedule, t.stage.index
    n, last = schedule.microbatches, schedule.ranks * schedule.virtual - 1
    kept = {u.stage.index: _kept(u, spec, p, gathered) for u in stages}
    by_stage = {u.stage.index: u for u in stages}
    base, grads = _without_gradients(t)
    recomputed = ", the last layer recomputed" if t.setup.recompute == "full" else ""

    def stage_parts(g: int, forwards: int, backwards: int, outputs: int) -> tuple[tuple[str, int], ...]:
        k_, k = kept[g], forwards - backwards
        parts = held_buffers(by_stage[g].setup, spec.d_model, g == 0, g == last, n, forwards, backwards) + (
            (f"activations kept ({k} micro-batch{'es' if k != 1 else ''} in flight)", k * k_.per_batch),) \
            + ((k_.whole,) if backwards else ()) + k_.fsdp.at_loss + k_.outputs(outputs)
        return tuple((f"stage {g}: {what}", size) for what, size in parts if size)

    def at(h, loss: str | None) -> Moment:
        """At backward `h`: through a layer (`loss` None), or the last stage's loss of that micro-batch, its
        forward (the output not yet kept, as `_pipelined` counts it) or its backward."""
        c, k_ = h.stage, kept[h.stage]
        current = 1 if loss == "backward" and not (k_.hidden or by_stage[c].setup.loss_run.keeps_logits) else 0
        held = tuple(x for g in schedule.stages(index) for x in stage_parts(
            g, h.forwards[g], h.backwards[g], h.forwards[g] - (loss is not None) + current))
        extra = _loss_parts(by_stage[c], spec, loss) if loss else \
            tuple(x for x in k_.in_layer if x not in k_.fsdp.at_loss)
        name = f"forward of stage {c}'s micro-batch {h.microbatch + 1}, computing the loss" if loss == "forward" \
            else f"backward of stage {c}'s micro-batch {h.microbatch + 1}" + (
                ", through the loss" if loss else recomputed or ", the last layer")
        return Moment(name, base + held + tuple((f"stage {c}: {what}", size) for what, size in extra))

    held = schedule.held(index)
    layer = [at(h, None) for h in held]
    out = [layer[0], max(layer[1:], key=lambda m: m.allocated)] if len(layer) > 1 else layer
    for phase in ("forward", "backward") if last in kept else ():
        out.append(max((at(h, phase) for h in held if h.stage == last), key=lambda m: m.allocated))
    end = base + tuple((f"stage {g}: {what}", size) for g in schedule.stages(index) for what, size in
                       held_buffers(by_stage[g].setup, spec.d_model, g == 0, g == last, n, n, n)
                       + kept[g].outputs(n)) + (("gradients", grads),)
    out.append(Moment("backward ends", end + kept[schedule.stages(index)[0]].fsdp.layer_grad))
    if last in kept:
        out.append(Moment("the step ends: every micro-batch's output merged (_merge_outputs)",
                          end + (("the merged outputs (torch.cat)", n * kept[last].output),)))
    return out + [_optimizer_step(t, end)]
