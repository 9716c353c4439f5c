"""Training memory per GPU: model states, activations, the loss — and the peak of a training step.

`train(spec, Setup(...))` returns a `Training`:

- model states (`states`: weights, gradients, fp32 master weights, optimizer states, in the bytes
  the precision gives them, `precision.py`; ZeRO 0-3 over the data-parallel GPUs, gpus ÷ (tp·pp);
  FSDP's full sharding is ZeRO-3; offloaded rows live on the host);
- activations kept for backward (`activations`: per layer × the layers; then what lies outside
  the layers, the loss's kept tensors among them, `loss.py`), with Korthikanti et al.'s formula beside
  ours where its GPT-3 layer applies;
- the moments of a step (`moments`, `peak.py`): what is allocated when forward computes the loss,
  when backward starts through it, when a checkpointed layer is recomputed, when backward ends and
  during the optimizer step; with gradient accumulation the later micro-batches run beside the
  gradients accumulated so far (unsharded under `no_sync`). The peak is the largest: the figure
  torch.cuda.max_memory_allocated reports. `reserved` and `nvidia_smi` add the stated, settable
  overheads.

Under pipeline parallelism every stage is counted on its own (pipeline.py): its parameters, its layers
(as `pp_split` splits them: gptcalc's even split, torchtitan's, or a list) × the micro-batches a 1F1B
step keeps in flight there, its buffers; the first stage's token ids, the last stage's final norm, head
and loss. A run's peak is its largest stage's, the Training returned (`stage`),
each stage's peak beside it (`stage_peaks`). Under an interleaved schedule (`pp_schedule`, interleaved.py)
a rank holds `virtual` stages of pp·virtual and is counted as one: its stages together at each of its
backwards, in the schedule's order (`_rank`); the peak is then the largest rank's.

Tensor parallelism (`tp_impl`) is Megatron's (default: a column-parallel linear under sequence
parallelism saves its input's shard) or DTensor's, as torchtitan runs it (it saves the all-gathered
input, and the loss runs under loss_parallel: `loss.py`, LOSS_PARALLEL).

Context parallelism (`cp`) gives each GPU seq/cp tokens of every sample and shards the states over
dp × cp (`context_parallel.py`); Float8 training (`float8`) changes what is gathered and what a
layer's backward casts, not what is kept (`float8.py`). Under torch.compile (`compile`) a layer keeps
what inductor's partitioner saves (`compiled.py`, measured on the CPU).

The model runs as the framework runs it (`executed.py`): a MoE in its reference form or as grouped
matmuls (`moe_form`), the config's dropout on or off (`dropout`), a tied head kept tied or not (`tied`),
the config's GELU as transformers writes it or torch's fused op (`fused_gelu`).

Under LoRA the trained parameters are the adapters, at the precision's adapter width (fp32 as PEFT
keeps them, bf16 under pure bf16) with no master copy; the base is frozen at 16 bits (QLoRA: its
layers' matrices in NF4) and has no gradients or optimizer states.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.analysis.memory.parallel import Layout, validate_layout
from calc.analysis.shapes import journey
from calc.analysis.train.activations import ACT_BYTES, RECOMPUTE, Term, activation_terms, korthikanti, layer_terms
from calc.analysis.train.compiled import compiled_layer_terms
from calc.analysis.train.bnb import BNB, quantised_head
from calc.analysis.train.executed import MOE_FORMS, as_run
from calc.analysis.train.float8 import FLOAT8
from calc.analysis.train.frameworks import FRAMEWORKS
from calc.analysis.train.interleaved import PP_SCHEDULES, Interleaved, Rank
from calc.analysis.train.loss import LOSS_PARALLEL, LOSSES, Loss
from calc.analysis.train.frozen import frozen_layer, frozen_outside
from calc.analysis.train.params import (LAYER_TARGETS, Held, Linear, adapted, gathered_bytes, held, layer_params,
                                        linear_out, nf4_bytes, stack_shape, stack_targets)
from calc.analysis.train.peak import Moment, Overheads, interleaved_moments, moments
from calc.analysis.train.pipeline import SPLITS, Stage, stage_bounds, stage_sizes
from calc.analysis.train.precision import PRECISIONS, Precision
from calc.analysis.train.states import OPTIMIZERS, PAGED, StateRow, Tensor, bnb_8bit_bytes, model_states, optimizer_bytes
from calc.errors import GptcalcError
from calc.parts import MoE
from calc.spec.model import Block, ModelSpec

__all__ = ["FLOAT8", "FRAMEWORKS", "LOSSES", "MOE_FORMS", "OFFLOAD", "OPTIMIZERS", "PRECISIONS", "RECOMPUTE", "SPLITS",
           "TP_IMPL", "Setup",
           "Training", "train", "train_stages"]

OFFLOAD = ("optimizer", "params", "activations")
TP_IMPL = ("megatron", "dtensor")


@dataclass(frozen=True)
class Setup:
    seq: int
    micro_batch: int
    gpus: int = 1
    zero: int = 0
    tp: int = 1
    pp: int = 1
    sp: bool = False
    pp_split: str = "even"  # which layers each stage holds: a rule of SPLITS or a list (pipeline.stage_sizes)
    pp_schedule: str = "1f1b"  # torch's Schedule1F1B (pipeline.py) or ScheduleInterleaved1F1B (interleaved.py)
    pp_virtual: int | None = None  # stages a rank holds; None: 2 under interleaved-1f1b (torchtitan's), else 1
    pp_microbatches: int | None = None  # micro-batches a pipeline step; None: pp (torchtitan's default at 9dec370)
    recompute: str = "none"
    optimizer: str = "adamw"
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] = LAYER_TARGETS
    qlora: bool = False
    attention: str = "flash"  # "flash": a fused kernel keeps no P; "eager": explicit QKᵀ, softmax, P·V
    precision: str = "mixed"
    loss: str = "fp32"
    optimizer_impl: str = "foreach"  # torch's default on CUDA; "fused" keeps no full-size temporary
    optimizer_in_backward: bool = False
    checkpoint_every: int = 1  # with recompute "full": checkpoint every k-th layer (torchtune's ac_option k)
    grad_accumulation: int = 1  # micro-batches per optimizer step: after the first, each runs beside the gradients
    no_sync: bool = False  # accumulate unreduced until the last micro-batch (FSDP's no_sync): unsharded gradients
    fsdp1: bool = False  # torch FSDP1: its root unit (embedding, final norm, head) stays unsharded, no copy-out
    fsdp_head_unit: bool = False  # FSDP2 wraps the head as its own unit, resharded after forward (torchtune's
    # custom_sharded_layers: ['tok_embeddings', 'output'])
    fsdp_keeps_last_layer: bool = True  # FSDP2 does not reshard the last layer after forward (torchtitan)
    offload: tuple[str, ...] = ()
    lora_dropout: bool = False
    lora_fused_qkv: bool = False  # q, k and v adapters share one dropout of their input (litgpt's LoRAQKVLinear)
    lora_per_part: bool = False  # a fused linear's parts take an adapter each (litgpt's, torchtune's own models),
    # not one for the whole module (PEFT on the checkpoint's modules: params.py)
    lora_megatron: bool = False  # adapters as Megatron-Bridge's LoRA puts them: one on each of megatron-core's fused
    # linear_qkv and linear_fc1 on every model, A and B both split under TP (params.py)
    double_quant: bool = True  # QLoRA's NF4 with double quantisation (bnb_4bit_use_double_quant)
    cp: int = 1  # context-parallel GPUs: each holds seq / cp tokens of every sample
    float8: str = "none"  # torchao Float8Linear on the layers' linears (float8.py)
    tp_impl: str = "megatron"  # "dtensor": torch's DTensor plan (torchtitan), gathered linear inputs, loss_parallel
    moe_form: str = "reference"  # "grouped": a MoE run as top-k rows through grouped matmuls (executed.py)
    dropout: bool = True  # the config's dropout runs (False: the framework's model code has none)
    tied: bool = True  # the config's tied head holds (False: the framework's model has its own head, litgpt)
    fused_gelu: bool = False  # the model's GELU is torch's fused F.gelu whatever the config names (litgpt's own model)
    norm_upcast: bool = False  # eager 16-bit RMSNorms upcast to fp32 and keep fp32 copies (activations._norm)
    repeat_kv: bool = False  # the model repeats K and V to every query head before attention (torchtitan's Llama
    # until torchtitan#2259, 2026-01-27: models/llama/model.py @ 9dec370, `keys = repeat_kv(xk, self.n_rep)`)
    compile: bool = False  # the layers run under torch.compile: they keep what inductor saves (compiled.py)
    bnb: str = "current"  # the bitsandbytes QLoRA runs under: what its 4-bit matmul keeps and dequantises (bnb.py)
    qlora_head: bool = False  # QLoRA quantises the LM head too (Lightning's plugin replaces every nn.Linear)
    loop_holds_output: bool = False  # the training loop holds the last micro-batch's logits through the next forward
    framework: str | None = None  # the profile that set the defaults, for the title
    overheads: Overheads = Overheads()

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def virtual(self) -> int:
        """Stages a pipeline rank holds: torchtitan's generate_split_points makes 2 a rank for a multi-stage
        schedule when no split points are given (pipelining_utils.py @ 9dec370), 1 under Schedule1F1B."""
        return self.pp_virtual or (2 if self.pp_schedule == "interleaved-1f1b" else 1)

    @property
    def microbatches(self) -> int:
        """Micro-batches a pipeline step runs: as given (torchtitan's pipeline_parallel_microbatches, Megatron-LM's
        num_microbatches, DeepSpeed's gradient_accumulation_steps under its pipeline engine), else pp, torchtitan's
        default at 9dec370 (pipeline.py). Under --grad-accumulation a step runs that many pipeline steps."""
        return self.pp_microbatches or self.pp

    @property
    def shards(self) -> int:
        """The GPUs ZeRO / FSDP shards over: data-parallel and context-parallel ranks together."""
        return self.dp * self.cp

    @property
    def local_seq(self) -> int:
        """Tokens of each sample on this GPU."""
        return self.seq // self.cp

    @property
    def norms(self) -> str:
        """How the RMSNorms are counted (activations._norm): upcast where the run upcasts, their weights
        frozen under LoRA."""
        return ("upcast" if self.norm_upcast else "act") + ("-frozen" if self.lora_rank else "")

    @property
    def adapter_copies(self) -> bool:
        """Each linear adapter reads a copy of its input, not the input itself: PEFT casts it to the adapters'
        dtype (peft 0.21.2, tuners/lora/layer.py, Linear.forward: `x = self._cast_input_dtype(x,
        lora_A.weight.dtype)`), a new tensor per target where fp32 adapters sit on 16-bit activations (not where
        FSDP2 hands forward their bf16 copies, Precision.gathered_bf16); a QLoRA layer casts only outside
        autocast (tuners/lora/bnb.py, Linear4bit.forward: `requires_conversion = not torch.is_autocast_enabled()`)."""
        p = PRECISIONS[self.precision]
        return p.adapter != ACT_BYTES and not p.gathered_bf16 and not (self.qlora and p.autocast_copies)

    @property
    def compiled_backward(self) -> bool:
        """A compiled layer rebuilt in its backward, in full or what the per-op policy did not keep, counted as
        measured (compiled_backward_terms, compiled_op_backward_terms); under LoRA its frozen backward, recorded
        (tests/compiled_lora.py) but with no rule yet, is not counted, and the eager rebuilt layer stands in."""
        return self.compile and self.recompute in ("full", "op") and not self.lora_rank

    @property
    def fsdp(self) -> bool:
        """Parameters are gathered to run each layer: FSDP's full sharding (ZeRO-3) over several GPUs, or its
        CPU offload."""
        return (self.zero == 3 and self.shards > 1) or "params" in self.offload

    @property
    def accumulates_fp32(self) -> bool:
        """FSDP under pipeline parallelism accumulates the stage's unsharded gradients in fp32 (peak._pipelined);
        under LoRA they are the adapters' only."""
        return self.pp > 1 and self.fsdp and not self.lora_rank

    @property
    def gathered(self) -> bool:
        """The column-parallel linears keep their all-gathered input (DTensor's sequence parallelism)."""
        return self.tp > 1 and self.tp_impl == "dtensor"

    @property
    def loss_run(self) -> Loss:
        """The loss as it runs: under DTensor's tensor parallelism, torchtitan's loss_parallel."""
        return LOSS_PARALLEL.get(self.loss, LOSSES[self.loss]) if self.gathered else LOSSES[self.loss]

    def term_bytes(self, term: Term) -> int:
        return term.bytes(self.tp, self.sp, self.gathered)

    def eager_layer(self, block: Block, d: int, recompute: str) -> list[Term]:
        """What one layer of `block` keeps under `recompute`, run eagerly as this setup runs it (its micro-batch,
        its tokens, its attention kernel, norms and K/V repeat): one call for the layers kept (`_layer`) and
        the layer rebuilt in a checkpointed backward (peak._recomputed_layer), so the two cannot differ."""
        return layer_terms(block, d, self.micro_batch, self.local_seq, ACT_BYTES, recompute, self.attention == "flash",
                           self.norms, self.repeat_kv)


@dataclass(frozen=True)
class Training:
    model: str
    setup: Setup
    held: Held
    states: tuple[StateRow, ...]
    layers: tuple[tuple[str, int, tuple[Term, ...]], ...]  # block kind, layers kept (× in flight), its terms
    outside: tuple[Term, ...]
    moments: tuple[Moment, ...]
    korthikanti: int | None  # bytes, GPT-3-shaped layers only
    dropout: bool = False  # the layers drop out P and each sublayer's output, as Korthikanti's layer does
    all_experts: bool = False  # a MoE runs every expert over every token (transformers' Llama-4, moe_form "reference")
    stage: Stage | Rank | None = None  # the pipeline stage (or interleaved rank) counted, the one with the
    # largest peak; None without PP
    stage_peaks: tuple[tuple[str, int, str, int], ...] = ()  # every stage counted: (stage, its layers, its peak's
    # moment, allocated)

    def layer_bytes(self, terms: tuple[Term, ...]) -> int:
        return sum(self.setup.term_bytes(t) for t in terms)

    @property
    def activations(self) -> int:
        return sum(n * self.layer_bytes(terms) for _, n, terms in self.layers) + self.layer_bytes(self.outside)

    @property
    def model_states(self) -> int:
        """The states on this GPU (offloaded and unified-memory rows are elsewhere)."""
        return sum(row.per_gpu for row in self.states if row.where == "gpu")

    @property
    def peak(self) -> Moment:
        return max(self.moments, key=lambda m: m.allocated)

    @property
    def allocated(self) -> int:
        return self.peak.allocated

    @property
    def reserved(self) -> int:
        """The caching allocator's peak: a moment's allocated bytes and the blocks it holds idle then."""
        return self.setup.overheads.reserved(max(m.allocated + m.cached for m in self.moments))

    @property
    def nvidia_smi(self) -> int:
        managed = sum(r.per_gpu for r in self.states if r.where == "managed")
        return self.reserved + self.setup.overheads.cuda_context + managed

    def to_json(self) -> dict[str, object]:
        s = self.setup
        setup = {**s.__dict__, "lora_targets": list(s.lora_targets), "offload": list(s.offload), "dp": s.dp,
                 "overheads": s.overheads.__dict__}
        return {
            "model": self.model, "setup": setup,
            "params_on_gpu": self.held.params, "trained_params": self.held.adapter_params or self.held.params,
            "states": [{"key": r.key, "label": r.label, "bytes_unsharded": r.full, "shards": r.shards,
                        "bytes": r.per_gpu, "where": r.where} for r in self.states],
            "activations": {"layers": [{"block": kind, "layers": n, "per_layer": self.layer_bytes(terms),
                                        "terms": {t.label: s.term_bytes(t) for t in terms}}
                                       for kind, n, terms in self.layers],
                            "outside": {t.label: s.term_bytes(t) for t in self.outside},
                            "total": self.activations},
            "moments": [m.to_json() for m in self.moments],
            "peak": {"moment": self.peak.name, "allocated": self.allocated, "reserved": self.reserved,
                     "nvidia_smi": self.nvidia_smi,
                     "stage": self.stage.index if isinstance(self.stage, Stage) else None,
                     **({"rank": self.stage.index} if isinstance(self.stage, Rank) else {})},
            "stages": [{"stage": name, "layers": layers, "moment": moment, "allocated": size}
                       for name, layers, moment, size in self.stage_peaks],
            "korthikanti": self.korthikanti,
        }


def _check(spec: ModelSpec, s: Setup) -> None:
    if s.zero not in (0, 1, 2, 3):
        raise GptcalcError(f"--zero: {s.zero} is not a ZeRO stage (0, 1, 2, 3)")
    if s.gpus % (s.tp * s.pp * s.cp):
        raise GptcalcError(f"--gpus: {s.gpus} GPUs do not split into tp={s.tp} × pp={s.pp} × cp={s.cp} groups")
    if s.cp > 1 and (s.seq % (2 * s.cp) or s.attention != "flash"):
        raise GptcalcError(f"--cp: ring attention needs --attention flash and a sequence that splits into 2·cp = "
                           f"{2 * s.cp} chunks (torch's causal load balancing); --seq {s.seq}")
    if s.float8 != "none" and s.lora_rank:
        raise GptcalcError("--float8: trains the full model's linears in float8 (torchao); not with --lora-rank")
    validate_layout(spec, Layout(s.tp, s.pp), kv_heads=True)
    if s.pp_schedule not in PP_SCHEDULES:
        raise GptcalcError(f"--pp-schedule: unknown {s.pp_schedule!r} (choose from {', '.join(PP_SCHEDULES)})")
    if s.virtual > 1 and (s.pp == 1 or s.pp_schedule == "1f1b"):
        raise GptcalcError(f"--pp-virtual: {s.virtual} stages a rank need --pp 2 or more and --pp-schedule "
                           "interleaved-1f1b (Schedule1F1B runs one stage a rank)")
    if s.pp_microbatches is not None and s.pp == 1:
        raise GptcalcError("--pp-microbatches: the micro-batches of a pipeline step need --pp 2 or more (without "
                           "pipeline parallelism use --grad-accumulation)")
    if s.pp_schedule == "1f1b" and s.microbatches < s.pp:
        raise GptcalcError(f"--pp-microbatches: {s.microbatches} micro-batches over {s.pp} stages; torch's "
                           "Schedule1F1B needs as many micro-batches as stages or more")
    if s.pp_schedule == "interleaved-1f1b" and s.grad_accumulation > 1:
        raise GptcalcError("--grad-accumulation: gradients carried over from earlier steps are counted for "
                           "--pp-schedule 1f1b only")
    stages = f"--pp {s.pp} × --pp-virtual {s.virtual} is" if s.virtual > 1 else "--pp is"
    stage_sizes(spec.n_layers, s.pp * s.virtual, s.pp_split, stages)  # refuses a list not a split of the layers, an
    # empty stage
    for option, value, choices in (("--optimizer", s.optimizer, OPTIMIZERS), ("--recompute", s.recompute, RECOMPUTE),
                                   ("--attention", s.attention, ("flash", "eager")),
                                   ("--precision", s.precision, tuple(PRECISIONS)), ("--loss", s.loss, tuple(LOSSES)),
                                   ("--optimizer-impl", s.optimizer_impl, ("foreach", "fused")),
                                   ("--float8", s.float8, FLOAT8), ("--tp-impl", s.tp_impl, TP_IMPL),
                                   ("--moe-form", s.moe_form, MOE_FORMS), ("--bnb", s.bnb, tuple(BNB))):
        if value not in choices:
            raise GptcalcError(f"{option}: unknown {value!r} (choose from {', '.join(choices)})")
    unknown = [o for o in s.offload if o not in OFFLOAD]
    if unknown:
        raise GptcalcError(f"--offload: unknown {', '.join(o or repr(o) for o in unknown)} (choose from {', '.join(OFFLOAD)})")
    if s.qlora and not s.lora_rank:
        raise GptcalcError("--qlora: needs --lora-rank (QLoRA trains LoRA adapters on a 4-bit base)")
    stacked = stack_targets(s.lora_targets)
    if s.lora_rank and stacked and (s.lora_dropout or s.qlora):
        raise GptcalcError(f"--lora-targets {','.join(stacked)}: PEFT's adapters on the expert stacks take no LoRA "
                           "dropout (ParamWrapper refuses lora_dropout) and are counted on a 16-bit base, not "
                           "--qlora; drop --lora-dropout / --qlora")
    if s.qlora and BNB[s.bnb][0] and (s.tp > 1 or s.pp > 1):
        raise GptcalcError(f"--bnb {s.bnb}: its kept inputs are counted for a whole model on each GPU "
                           "(litgpt's QLoRA has no tensor or pipeline parallelism); use --tp 1 --pp 1")
    if s.recompute == "op" and (s.attention != "flash" or s.tp > 1):
        raise GptcalcError("--recompute op: torchtitan's per-op policy is counted for fused attention without "
                           "tensor parallelism (--attention flash, --tp 1)")
    if s.compile and (s.recompute == "selective" or s.attention != "flash"
                      or (s.lora_rank and (s.recompute != "full" or s.checkpoint_every > 1))):
        raise GptcalcError("--compile: what inductor keeps is measured with fused attention under --recompute none, op "
                           "or full, and with LoRA only under full on every layer (each layer keeps its input alone)")
    if s.grad_accumulation > 1 and s.optimizer_in_backward:
        raise GptcalcError("--grad-accumulation: the optimizer step inside backward frees each gradient as it is "
                           "made, so there is nothing to accumulate (torchtune refuses optimizer_in_bwd with it)")
    if s.pp > 1 and s.optimizer_in_backward:
        raise GptcalcError("--optimizer-in-backward: a pipeline's micro-batches accumulate gradients over the step "
                           "(pipeline.py), which a step inside backward would free as they are made; not with --pp")
    if s.fsdp_head_unit and (s.fsdp1 or s.pp > 1 or not (s.zero == 3 or "params" in s.offload)):
        raise GptcalcError("--fsdp-head-unit: FSDP2's own unit for the head needs FSDP (--zero 3 or --offload params), "
                           "--fsdp2 and no pipeline parallelism (--pp 1)")
    if s.checkpoint_every > 1 and s.recompute != "full":
        raise GptcalcError("--checkpoint-every: needs --recompute full (it checkpoints every k-th layer)")
    if s.seq > spec.n_positions:
        raise GptcalcError(f"--seq: {s.seq} exceeds {spec.name}'s context length n_positions={spec.n_positions}")


def _states(h: Held, s: Setup, p: Precision, head: int) -> list[StateRow]:
    """`head`: the LM head's elements when QLoRA quantises it (an untied head: Lightning replaces
    nn.Linear modules, not the embedding a tied head shares)."""
    if not s.lora_rank:
        rows = model_states(h.params, optimizer_bytes(s.optimizer, h.tensors, p.state), s.zero, s.shards,
                            weight_bytes=p.weight, grad_bytes=p.grad, master_bytes=p.master)
    else:
        quantised = h.layer_matrices + head
        base = (nf4_bytes(quantised, s.double_quant) + 2 * (h.params - quantised)) if s.qlora else 2 * h.params
        rows = model_states(h.adapter_params, optimizer_bytes(s.optimizer, h.adapters, p.state), s.zero, s.shards,
                            weight_bytes=p.adapter, grad_bytes=p.adapter_grads, master_bytes=p.adapter_master,
                            frozen_weights=base)
    return [placed for row in rows for placed in _place(row, s, h.adapters if s.lora_rank else h.tensors)]


def _place(row: StateRow, s: Setup, trained: tuple[Tensor, ...]) -> list[StateRow]:
    """Where a state lives: the host when offloaded (optimizer: master and states, as ZeRO-Offload;
    params: everything, as FSDP's CPU offload); a paged optimizer's large uint8 states in unified
    memory, its absmax and small tensors' states on the GPU (states.bnb_8bit_bytes)."""
    if "params" in s.offload or ("optimizer" in s.offload and row.key in ("master_weights", "optimizer")):
        return [StateRow(row.key, row.label, row.full, row.shards, "cpu")]
    if row.key == "optimizer" and s.optimizer in PAGED:
        paged, kept = bnb_8bit_bytes(trained)
        return [StateRow(row.key, row.label, paged, row.shards, "managed"),
                StateRow("optimizer_gpu", "optimizer states kept on the GPU", kept, row.shards)]
    return [row]


def _lora_terms(spec: ModelSpec, kind: str, s: Setup, p: Precision) -> list[Term]:
    """Each adapter keeps A's output, r wide, for B's backward, in the dtype A runs in (bf16 under autocast,
    which also makes and keeps a bf16 copy of each adapter's weights, and under FSDP2's bf16 gathering); A's
    input is the frozen layer's, kept already, unless the adapter reads a copy (Setup.adapter_copies): A keeps
    that copy, one per target (fp32; under autocast its bf16 recast). With LoRA dropout A keeps the
    dropped-out input instead (its own copy, in that dtype) and the dropout its mask — one for q, k and v
    together where they share it (`lora_fused_qkv`). A fused linear's one adapter (params.py) keeps one A output
    and one copy of the input for all its parts. `kind` "" is the head. An expert stack's adapter (PEFT's
    target_parameters) runs no A on the rows: `_stack_terms`."""
    linears, stacks = adapted(journey(spec, 1).steps, s.lora_targets, s.lora_per_part, s.lora_megatron)
    adapted_here = [linear for linear in linears if linear[0].block == kind]
    stacks_here = [group for group in stacks if group[0].block == kind]
    if not adapted_here:
        return _stack_terms(stacks_here, s, p)
    rows, width = s.micro_batch * s.local_seq, ACT_BYTES if p.autocast_copies or p.gathered_bf16 else p.adapter

    def routed(linear: Linear) -> int:
        return spec.blocks[kind].moe.top_k if linear[0].id.startswith("experts") else 1

    terms = [Term("LoRA: A's outputs", rows * s.lora_rank * sum(routed(li) for li in adapted_here), width, "")]
    reads = [(s.lora_fused_qkv and li[0].id in ("q", "k", "v"), routed(li) * li[0].weight.sizes[-2])
             for li in adapted_here]
    if s.lora_dropout:
        inputs = rows * (sum(w for shared, w in reads if not shared)
                         + max((w for shared, w in reads if shared), default=0))
        terms += [Term("LoRA dropout: dropped-out inputs", inputs, width if s.adapter_copies else ACT_BYTES, ""),
                  Term("LoRA dropout: masks (bool)", inputs, 1, "")]
    elif s.adapter_copies:
        terms.append(Term("LoRA: each adapter's input, cast to the adapters' dtype (PEFT)",
                          rows * sum(w for _, w in reads), width, ""))
    if p.autocast_copies:
        weights = sum(s.lora_rank * (li[0].weight.sizes[-2] + -(-linear_out(li) // s.tp)) for li in adapted_here)
        terms.append(Term("LoRA: autocast's bf16 copies of the adapters' weights", weights, ACT_BYTES, ""))
    return terms + _stack_terms(stacks_here, s, p)


def _stack_terms(stacks: list, s: Setup, p: Precision) -> list[Term]:
    """PEFT's adapter on an expert stack W [E, in, out] folds itself into the weight each forward
    (nn.utils.parametrize, _LoraFactorsProxy: baddbmm(W, lhs, rhs)): the grouped matmuls keep that
    merged stack, a new tensor of the stack's size, for the rows' gradient; baddbmm keeps its two factors,
    B as [E, out, r] and A as [E, r, in], cast to the weight's dtype — new tensors where the adapters are
    wider (fp32) than the weight, views of them otherwise (measured: tests/test_train_peft.py)."""
    terms = []
    for group in stacks:
        experts, d_in, out = stack_shape(group)
        name = " and ".join(st.id.removeprefix("experts_") for st in group)
        terms.append(Term(f"LoRA on the experts' {name} stack: the merged stack W + BA", experts * d_in * out,
                          ACT_BYTES, "tp"))
        if p.adapter != ACT_BYTES:
            terms.append(Term(f"LoRA on the experts' {name} stack: B and A cast to the weight's dtype",
                              experts * s.lora_rank * (d_in + out), ACT_BYTES, "tp"))
    return terms


def _stage_layers(spec: ModelSpec, s: Setup, index: int) -> dict[str, int]:
    """The layers of each kind on pipeline stage `index`, as s.pp_split splits them (pipeline.stage_sizes)."""
    return spec.layer_counts(*stage_bounds(spec.n_layers, s.pp, s.pp_split, index))


def _layers(spec: ModelSpec, s: Setup, p: Precision, stage: Stage | None,
            in_flight: int | None = None) -> list[tuple[str, int, tuple[Term, ...]]]:
    """(kind, layers kept, terms) per block kind, on `stage` × the micro-batches it has in flight at its
    first backward (or `in_flight`); every-k checkpointing splits a kind into its checkpointed layers (every
    k-th) and the rest, which keep everything."""
    here = _stage_layers(spec, s, stage.index) if stage else spec.layer_counts()
    if in_flight is None:
        in_flight = stage.in_flight(0) if stage else 1
    out = []
    for kind in spec.layer_counts():
        n = here.get(kind, 0) * in_flight
        if not n:
            continue
        checkpointed = n // s.checkpoint_every if s.recompute == "full" else 0
        for recompute, count in (("full", checkpointed), ("none" if s.recompute == "full" else s.recompute,
                                                          n - checkpointed)):
            if count:
                terms = _layer(spec.blocks[kind], spec.d_model, s, recompute)
                if s.lora_rank and recompute != "full":
                    terms = frozen_layer(terms, spec.blocks[kind], s) + _lora_terms(spec, kind, s, p)
                out.append((kind if recompute == s.recompute or s.checkpoint_every == 1 else
                            f"{kind} ({'checkpointed' if recompute == 'full' else 'not checkpointed'})",
                            count, tuple(terms)))
    return out


def _layer(block: Block, d: int, s: Setup, recompute: str) -> list[Term]:
    """What one layer keeps: as inductor's partition saves it under --compile (full: the input, as eager)."""
    if s.compile and recompute != "full":
        return compiled_layer_terms(block, d, s.micro_batch, s.local_seq, ACT_BYTES, recompute, s.repeat_kv)
    return s.eager_layer(block, d, recompute)


def train(spec: ModelSpec, s: Setup) -> Training:
    """One GPU's training step; under pipeline parallelism the stage with the largest peak (the first of
    equals), with every counted stage's peak beside it."""
    stages = train_stages(spec, s)
    worst = max(stages, key=lambda t: t.allocated)
    if s.pp == 1:
        return worst
    return replace(worst, stage_peaks=tuple((t.stage.name(), t.held.stage_layers, t.peak.name, t.allocated)
                                            for t in stages))


def train_stages(spec: ModelSpec, s: Setup) -> list[Training]:
    """Each pipeline stage's step, of the stages whose peak can be the largest (`_distinct_stages`); one
    step, the whole model's, without pipeline parallelism."""
    _check(spec, s)
    spec = as_run(spec, s.moe_form, s.dropout, s.tied, s.fused_gelu)
    if s.pp == 1:
        return [_train(spec, s, None)]
    if s.pp_schedule == "interleaved-1f1b":
        schedule = Interleaved(s.pp, s.virtual, s.microbatches)
        return [_rank(spec, s, Rank(index, schedule)) for index in range(s.pp)]
    return [_train(spec, s, Stage(index, s.pp, s.microbatches)) for index in _distinct_stages(spec, s)]


def _rank(spec: ModelSpec, s: Setup, rank: Rank) -> Training:
    """An interleaved pipeline rank's step: each of its stages counted as one of the p·V (its parameters, its
    layers as pp_split splits p·V stages, its buffers), together at each of the rank's backwards, as many
    micro-batches in flight on each as the schedule's order gives (peak.interleaved_moments). Its tables show
    each stage's layers with the micro-batches in flight at the rank's first backward."""
    p, stages = PRECISIONS[s.precision], rank.schedule.stages(rank.index)
    each = replace(s, pp=s.pp * s.virtual, gpus=s.gpus * s.virtual, pp_schedule="1f1b", pp_virtual=None)
    parts = [_train(spec, each, Stage(g, each.pp, s.microbatches)) for g in stages]
    first = rank.schedule.held(rank.index)[0]
    h = Held(tuple(x for u in parts for x in u.held.tensors), sum(u.held.layer_matrices for u in parts),
             tuple(x for u in parts for x in u.held.adapters), sum(u.held.stage_layers for u in parts))
    layers = tuple((f"stage {g}: {kind}", n, terms) for g in stages for kind, n, terms in
                   _layers(spec, each, p, Stage(g, each.pp, s.microbatches), first.in_flight(g)))
    outside = tuple(x for u in parts for x in u.outside)
    t = Training(spec.name, s, h, _summed(parts), layers, outside, (), None, _drops(spec),
                 parts[0].all_experts, rank)
    return replace(t, moments=tuple(interleaved_moments(t, parts, spec, p, _gathered(spec, s))))


def _summed(parts: list[Training]) -> tuple[StateRow, ...]:
    """The states of a rank's stages together, row by row (every stage has the same rows)."""
    return tuple(replace(rows[0], full=sum(r.full for r in rows)) for rows in zip(*(u.states for u in parts)))


def _distinct_stages(spec: ModelSpec, s: Setup) -> list[int]:
    """The stages whose peak can be the largest: of stages with the same layers (and the same place, first,
    middle or last) the earliest and the latest, as every moment's bytes are linear in the stage's index
    there (pipeline.py: the in flight fall by one a stage, the input buffers and gradients rise)."""
    ends: dict[tuple, list[int]] = {}
    for index in range(s.pp):
        key = (tuple(_stage_layers(spec, s, index).items()), index == 0, index == s.pp - 1)
        ends.setdefault(key, []).append(index)
    return sorted({i for indices in ends.values() for i in (indices[0], indices[-1])})


def _outside(spec: ModelSpec, s: Setup, p: Precision, h: Held, stage: Stage | None) -> list[Term]:
    """What is kept outside the layers on `stage` (None: the whole model): the ids and what else the embedding
    makes on the first, the final norm, the head and the loss's (`head` terms) on the last; autocast's copies
    of the stage's own matrices."""
    outside = activation_terms(spec, s.micro_batch, s.local_seq, ACT_BYTES, s.recompute, LOSSES[s.loss], s.norms)
    if s.lora_rank:  # an adapter on the head keeps its tensors until backward has passed the head
        outside = frozen_outside(outside, spec, s)
        outside += [Term(t.label + " (head)", t.elements, t.bytes_per, t.split, head=True)
                    for t in _lora_terms(spec, "", s, p)]
    if stage is not None:
        outside = [t for t in outside if (stage.last if t.head else stage.first)]
    if p.autocast_copies and not s.lora_rank:
        head = spec.vocab_size * spec.d_model // s.tp if stage is None or stage.last else 0
        outside.append(Term("autocast's bf16 weight copies, saved by each linear", h.layer_matrices + head, 2, ""))
    return outside


def _train(spec: ModelSpec, s: Setup, stage: Stage | None) -> Training:
    """One GPU's training step: of pipeline stage `stage`, or of the whole model without PP."""
    p = PRECISIONS[s.precision]
    h = held(spec, s.tp, s.pp, s.lora_rank, s.lora_targets if s.lora_rank else (), stage.index if stage else None,
             s.pp_split, s.lora_per_part, s.lora_megatron)
    layers = _layers(spec, s, p, stage)
    outside = _outside(spec, s, p, h, stage)
    head = spec.vocab_size * spec.d_model // s.tp if quantised_head(spec, s) and (stage is None or stage.last) else 0
    states = tuple(_states(h, s, p, head))
    gathered = _gathered(spec, s)
    every = any(isinstance(b.mlp, MoE) and b.mlp.all_experts for b in spec.blocks.values())
    kept = sum(n for _, n, _ in layers)
    t = Training(spec.name, s, h, states, tuple(layers), tuple(outside), (), _korthikanti(spec, s, kept), _drops(spec),
                 every, stage)
    return replace(t, moments=tuple(moments(t, spec, p, gathered)))


def _gathered(spec: ModelSpec, s: Setup) -> tuple[int, int]:
    """The parameters of one layer FSDP gathers and their bytes gathered; (0, 0) without FSDP."""
    if not s.fsdp:
        return 0, 0
    params, matrices = layer_params(spec, s.tp)
    return params, gathered_bytes(s, params, matrices)


def _drops(spec: ModelSpec) -> bool:
    """Every layer drops out P and each sublayer's output (the dropout Korthikanti et al.'s layer has)."""
    return all(b.residual_dropout and getattr(b.attention, "dropout", 0) for b in spec.blocks.values())


def _korthikanti(spec: ModelSpec, s: Setup, kept: int) -> int | None:
    """The formula for the layer it describes, GPT-3's, with whole sequences on each GPU and no per-op
    policy: MHA with h·d_head = d_model, a plain 4·d_model MLP; for the `kept` layers ours counts (under PP
    the stage's layers × its micro-batches in flight: L on the first stage of an even split, as theirs)."""
    if len(spec.blocks) != 1 or s.cp > 1 or s.recompute == "op":
        return None
    (block,) = spec.blocks.values()
    a, m = block.attention, block.mlp
    if a is None or a.kind != "attention" or a.q_dim != spec.d_model or a.n_kv_heads != a.n_heads:
        return None
    if m is None or m.kind != "mlp" or m.gated or m.d_ff != 4 * spec.d_model:
        return None
    return korthikanti(s.seq, s.micro_batch, spec.d_model, a.n_heads, kept, s.tp, s.sp, s.recompute)
