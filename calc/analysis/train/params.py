"""Which parameters a GPU holds and which it trains: pipeline stages, tensor parallelism, LoRA, QLoRA.

Every parameter is taken from the shapes journey's steps (each step owns its weight, of a known
shape, and its bias), so the tensors here add up to `gptcalc count`'s total. Pipeline parallelism
over p stages gives each stage consecutive layers as the split says (pipeline.stage_sizes: ⌈L/p⌉ by
default; the first stage also the embeddings, the last the final norm and the head); the busiest stage
is reported. Tensor parallelism over t GPUs
splits every matrix t ways (heads, d_ff, vocab: Megatron-LM's column and row splits) and copies
vectors (norms, biases) to every GPU.

LoRA (Hu et al., arXiv 2106.09685) trains, beside each frozen target matrix [in, out], an adapter
A [in, r] and B [r, out]: r·(in + out) parameters (alpha only scales them). Targets by name: q, k,
v, o (the attention output), gate, up, down (a MoE's experts and shared expert too), head. QLoRA
(Dettmers et al., arXiv 2305.14314) stores the frozen matrices of the layers as 4-bit NF4 with
double quantisation: 4 bits per weight, an 8-bit absmax per block of 64 and an fp32 constant per 256
absmaxes; embeddings, norms, biases and the head stay 16-bit.

A MoE's experts stored as one parameter per stack (transformers 5: gate_up_proj [E, 2·f, d], down_proj
[E, d, f]) are no linears a module target reaches: PEFT adapts them through `target_parameters`
(ParamWrapper), one adapter per stack, A [r·E, in] and B [out, r·E]: r·E·(in + out) parameters, gate and
up sharing one (targets experts_gate_up and experts_down, STACKS). With a stack targeted, gate, up and
down adapt only the dense MLPs and shared experts, the linears a module target still reaches.

A checkpoint that fuses Q, K and V into one linear (Phi-3's qkv_proj, GPT-NeoX's query_key_value, GPT-2's c_attn) or
gate and up (Phi-3's and GLM-4's gate_up_proj) gives PEFT one module, so one adapter, A [in, r] and B [r, the fused
output]: r·(in + out) for the whole, not an adapter per part (measured: tests/peft_fused.py). PEFT cannot adapt a part
alone, so a target naming some parts of a fused linear and not the others is refused. litgpt's and torchtune's own
models adapt each part (`per_part`): litgpt's LoRAQKVLinear gives its fused qkv per-part adapters (lora_A
[r·enabled parts, in], litgpt/lora.py), torchtune splits Phi-3's fused weights into q, k, v, w1 and w3 on load.

Megatron-core's own layers fuse q|k|v into linear_qkv and gate|up into linear_fc1 on every model, whatever the
checkpoint holds, and Megatron-Bridge's LoRA puts one ParallelLinearAdapter on each (`megatron`; Megatron-Bridge
2afd2d3 src/megatron/bridge/peft/lora.py, LoRA.transform: ParallelLinearAdapter(attrs.in_features,
attrs.out_features, dim), the fused output widths: peft/utils.py, get_adapter_attributes_from_linear,
`out_features = m.out_features * tp_size`). Under tensor parallelism both its matrices are split: A (linear_in) is
a ColumnParallelLinear(in, r) on a column-parallel base (r/t rows each, megatron.core's divide() asserting t divides
r) and a RowParallelLinear(in, r) on a row-parallel one (in/t each), B (linear_out) a ColumnParallelLinear(r, out):
r·(in + out)/t per GPU. Its targets are the module names linear_qkv, linear_proj, linear_fc1 and linear_fc2
(MEGATRON_TARGETS), accepted beside q, k, v, o, gate, up, down. A MoE layer's routed experts are one grouped linear
each in megatron-core (Megatron-Bridge's MoE bridges set moe_grouped_gemm=True, e.g. qwen3_moe_bridge.py @ 4d3dd37,
mapping every expert's gate|up onto `mlp.experts.linear_fc1.weight*`): TEGroupedMLP's linear_fc1 and linear_fc2,
which the target names match, so LoRA.transform gives each one ParallelLinearAdapter, A [d, r] and B [r, 2·f] (fc1)
or A [f, r] and B [r, d] (fc2), shared by all its experts (peft/lora.py, LoRAMerge: the else branch "TE Grouped
Linear" merges the one adapter into every weight{i}); `is_expert` splits it over the expert tensor-parallel size,
the tensor-parallel size unless given (utils.py, get_adapter_attributes_from_linear; megatron-core's
parallel_state.initialize_model_parallel). Multi-latent attention is megatron-core's MLASelfAttention, with
linear_q_proj or linear_q_down_proj and linear_q_up_proj, linear_kv_down_proj, linear_kv_up_proj and linear_proj and
no linear_qkv (its gpt_layer_specs MLA spec), so those names are its targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING

from calc.analysis.memory.parallel import MAX_STAGES
from calc.analysis.shapes import Step, journey
from calc.analysis.train.pipeline import stage_bounds
from calc.analysis.train.float8 import gathered_matrix_bytes
from calc.analysis.train.states import Tensor
from calc.checkpoint.layouts import layout
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

if TYPE_CHECKING:
    from calc.analysis.train import Setup

__all__ = ["LAYER_TARGETS", "LORA_TARGETS", "STACKS", "Held", "Linear", "adapted", "check_targets", "gathered_bytes",
           "held", "layer_params", "linear_out", "merged_gradient", "nf4_bytes", "stack_shape", "stack_targets"]

LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "q": ("q", "q_b"), "k": ("k",), "v": ("v",), "o": ("attn_out",),
    "gate": ("mlp_gate", "experts_gate", "shared_mlp_gate"), "up": ("mlp_up", "experts_up", "shared_mlp_up"),
    "down": ("mlp_down", "experts_down", "shared_mlp_down"),
    "head": ("logits",),  # the output projection (litgpt's lora_head, torchtune's apply_lora_to_output)
}
# PEFT's target_parameters on transformers 5's fused expert stacks (peft 0.21.2, tuners/lora/layer.py ParamWrapper)
STACKS: dict[str, tuple[str, ...]] = {"experts_gate_up": ("experts_gate", "experts_up"), "experts_down": ("experts_down",)}
LAYER_TARGETS = tuple(t for t in LORA_TARGETS if t != "head")  # the default: every layer matrix, not the head
LORA_NAME = {i: t for t, ids in LORA_TARGETS.items() for i in ids}  # a step's target name (mlp_gate: gate)
LORA_TARGETS.update(STACKS)
# megatron-core's module names (Megatron-Bridge's LoRA target_modules), each the steps of one of its linears
MEGATRON_TARGETS: dict[str, tuple[str, ...]] = {
    "linear_qkv": ("q", "k", "v"), "linear_proj": ("attn_out",),
    "linear_fc1": ("mlp_gate", "mlp_up", "shared_mlp_gate", "shared_mlp_up", "experts_gate", "experts_up"),
    "linear_fc2": ("mlp_down", "shared_mlp_down", "experts_down"),
    # MLASelfAttention's (multi-latent attention: DeepSeek-V2/V3, Kimi-K2): q whole without a q LoRA rank, else q
    # down and up, the kv down (latent and rope key) and up projections
    "linear_q_proj": ("q",), "linear_q_down_proj": ("q_a",), "linear_q_up_proj": ("q_b",),
    "linear_kv_down_proj": ("kv_a",), "linear_kv_up_proj": ("kv_b",),
}
LORA_TARGETS.update(MEGATRON_TARGETS)
# the linear megatron-core fuses a step into on every model (its linear_qkv, linear_fc1; a shared expert's own)
MEGATRON_FUSED = {"q": "qkv", "k": "qkv", "v": "qkv", "mlp_gate": "gate_up", "mlp_up": "gate_up",
                  "shared_mlp_gate": "shared_gate_up", "shared_mlp_up": "shared_gate_up",
                  "experts_gate": "experts_gate_up", "experts_up": "experts_gate_up"}


@dataclass(frozen=True)
class Held:
    """The parameters one GPU (the busiest pipeline stage) holds: all of them as tensors, and
    LoRA's adapters, the matrices they adapt (frozen, quantised under QLoRA) among them."""

    tensors: tuple[Tensor, ...]
    layer_matrices: int  # elements of the layers' matrices (what QLoRA quantises)
    adapters: tuple[Tensor, ...] = field(default=())
    stage_layers: int = 0

    @property
    def params(self) -> int:
        return sum(t.elements for t in self.tensors)

    @property
    def adapter_params(self) -> int:
        return sum(t.elements for t in self.adapters)


def _tensors(step: Step, copies: int, tp: int) -> list[Tensor]:
    """A step's weight as a matrix (÷ tp along its output) or a vector, and its bias as a vector."""
    if not step.params:
        return []
    w = step.weight.sizes if step.weight is not None else ()
    out: list[Tensor] = []
    if len(w) >= 2:
        stack = w[0] if len(w) == 3 else 1
        rows, cols = w[-2], w[-1]
        out.append(Tensor(copies * stack, rows, -(-cols // tp)))
        rest = step.params - stack * rows * cols
    else:
        rest = step.params
    if rest:
        out.append(Tensor(copies, rest))
    return out


def stack_targets(targets: tuple[str, ...]) -> tuple[str, ...]:
    """The targets that are fused expert stacks (STACKS): PEFT adapts them as parameters, not modules, so they
    change which linears gate, up and down reach (`adapted`), what a frozen MoE keeps (frozen.py) and which
    options apply (train._check)."""
    return tuple(t for t in targets if t in STACKS)


def _linear_ids(target: str, stacked: tuple[str, ...]) -> set[str]:
    """The steps a module target adapts as linears: with an expert stack targeted, gate, up and down reach only
    the dense MLPs and shared experts (the stacks are PEFT's parameters, no module)."""
    return {i for i in LORA_TARGETS[target] if not (stacked and i.startswith("experts"))} if target not in STACKS else set()


Linear = tuple[Step, ...]  # the steps whose weights one adapted linear holds: one step, or a fused linear's parts


def _linears(steps: tuple[Step, ...], per_part: bool, megatron: bool = False) -> list[Linear]:
    """The model's linears (steps with a matrix), a fused linear's parts as one unless adapted per part: the
    checkpoint's fused linears, or under `megatron` megatron-core's own (MEGATRON_FUSED)."""
    groups: dict[tuple[str, str], list[Step]] = {}
    for index, step in enumerate(steps):
        if step.weight is not None:
            fused = "" if per_part else MEGATRON_FUSED.get(step.id, step.fused) if megatron else step.fused
            groups.setdefault((step.block, fused or str(index)), []).append(step)
    return [tuple(group) for group in groups.values()]


def adapted(steps: tuple[Step, ...], targets: tuple[str, ...], per_part: bool = False,
            megatron: bool = False) -> tuple[list[Linear], list[tuple[Step, ...]]]:
    """The linears LoRA adapts (an adapter each; a fused linear whole, `check_targets` having refused a part of
    one) and the expert stacks PEFT's target_parameters adapts (one adapter over each block kind's stack: its
    steps, gate and up together)."""
    stacked = stack_targets(targets)
    ids = {i for t in targets for i in _linear_ids(t, stacked)}
    linears = [group for group in _linears(steps, per_part, megatron) if any(step.id in ids for step in group)]
    kinds = dict.fromkeys(step.block for step in steps if step.block)
    stacks = [group for t in stacked for kind in kinds
              for group in [tuple(st for st in steps if st.block == kind and st.id in STACKS[t])] if group]
    return linears, stacks


def _reaches(steps: tuple[Step, ...], target: str, stacked: tuple[str, ...]) -> bool:
    """Some layer (or the head) of the model has a matrix `target` adapts, beside the stacks `stacked`."""
    if target in STACKS:
        return any(step.block and step.id in STACKS[target] for step in steps)
    ids = _linear_ids(target, stacked)
    return any(step.id in ids and step.weight is not None for step in steps)


def check_targets(spec: ModelSpec, steps: tuple[Step, ...], targets: tuple[str, ...], per_part: bool = False,
                  megatron: bool = False) -> None:
    """Refuse a target name gptcalc does not know, and one that adapts nothing in this model: a target no layer
    has would be counted as trained and keeping nothing. PEFT refuses only when no target matches at all
    (peft 0.21.2 tuners_utils.py, NoMatchingPeftModuleError "Target modules ... not found in the base model";
    an unmatched target_parameters beside matched modules gets a warning), so a mistyped or misplaced target is
    easy to miss there; a target only some layers have (q on a hybrid's attention layers) is valid. The default,
    every layer matrix, takes those the model has, and is refused only where it has none. A part of a fused linear
    without its other parts is refused unless the parts are adapted apart (`per_part`). The refusal lists the
    model's targets, megatron-core's module names only for a Megatron run."""
    model = spec.name
    unknown = [t for t in targets if t not in LORA_TARGETS]
    if unknown:
        raise GptcalcError(f"--lora-targets: unknown {', '.join(t or repr(t) for t in unknown)} "
                           f"(choose from {', '.join(LORA_TARGETS)})")
    stacked = stack_targets(targets)
    missing = [t for t in targets if not _reaches(steps, t, stacked)]
    if missing and not (targets == LAYER_TARGETS and len(missing) < len(targets)):
        foreign = _foreign(steps) if megatron else tuple(MEGATRON_TARGETS)
        has = [t for t in LORA_TARGETS if t not in foreign and _reaches(steps, t, stacked)]
        why = "; with an expert stack targeted, gate, up and down adapt only dense MLPs and shared experts" \
            if stacked and set(missing) & {"gate", "up", "down"} else ""
        raise GptcalcError(f"--lora-targets: {model} has {'none of' if len(missing) > 1 else 'no'} "
                           f"{', '.join(missing)} to adapt (its targets: {', '.join(has)}{why})")
    if megatron:
        _check_megatron(steps, targets, per_part)
    elif not per_part:
        _check_whole(spec, steps, targets)


def _check_megatron(steps: tuple[Step, ...], targets: tuple[str, ...], per_part: bool) -> None:
    """Refuse, on megatron-core's fused linear_qkv or linear_fc1 (a dense, shared or grouped expert one), a part
    without the others: Megatron-Bridge's LoRA adapts the module whole. Refuse too a name the attention lacks:
    MLASelfAttention has no linear_qkv (its q is linear_q_proj, or linear_q_up_proj after linear_q_down_proj), and
    SelfAttention no linear_q_proj, whose q step would otherwise be counted as the other's."""
    foreign = [t for t in targets if t in _foreign(steps)]
    if foreign and "linear_qkv" in _foreign(steps):
        raise GptcalcError(f"--lora-targets: {', '.join(foreign)}: megatron-core runs this model's attention as "
                           "MLASelfAttention, which has no linear_qkv (Megatron-Bridge's default targets reach its "
                           "linear_proj alone): name linear_q_proj or linear_q_up_proj, linear_q_down_proj, "
                           "linear_kv_down_proj, linear_kv_up_proj, linear_proj")
    if foreign:
        raise GptcalcError("--lora-targets: linear_q_proj is megatron-core's multi-latent attention's q; this "
                           "model's q, k and v are its linear_qkv")
    alone = None if per_part else _part_alone(steps, targets, True)
    if alone:
        _, parts, named = alone
        raise GptcalcError(f"--lora-targets: megatron-core fuses {', '.join(parts)} into one linear, which "
                           f"Megatron-Bridge's LoRA adapts whole: target {', '.join(parts)} together (or its "
                           f"name), not {', '.join(named)} alone (an adapter per part: --lora-per-part)")


def _foreign(steps: tuple[Step, ...]) -> tuple[str, ...]:
    """The attention target names megatron-core's layers lack: MLASelfAttention (a model with MLA's kv down
    projection) has no linear_qkv, so q, k and v name no module of it; SelfAttention has no linear_q_proj."""
    latent = any(step.id == "kv_a" for step in steps)
    return ("q", "k", "v", "linear_qkv") if latent else ("linear_q_proj",)


def _check_whole(spec: ModelSpec, steps: tuple[Step, ...], targets: tuple[str, ...]) -> None:
    """Refuse a target that names some parts of a fused linear and not the others: PEFT adapts the module whole."""
    alone = _part_alone(steps, targets, False)
    if alone:
        group, parts, named = alone
        module = layout(spec)[group[0].fused].rpartition(".")[2]  # the checkpoint's name (qkv_proj, c_attn)
        raise GptcalcError(f"--lora-targets: {spec.name} fuses {', '.join(parts)} into one linear ({module}), "
                           f"which PEFT adapts whole: target {', '.join(parts)} together, not {', '.join(named)} "
                           "alone (litgpt's and torchtune's own models adapt each part: --lora-per-part)")


def _part_alone(steps: tuple[Step, ...], targets: tuple[str, ...],
                megatron: bool) -> tuple[Linear, list[str], list[str]] | None:
    """The first fused linear `targets` name some parts of and not the others: (it, its parts, those named)."""
    ids = {i for t in targets for i in _linear_ids(t, stack_targets(targets))}
    for group in _linears(steps, False, megatron):
        if len(group) < 2:  # not fused: nothing to name apart (MLA's kv_a has no short target name)
            continue
        named = [LORA_NAME[step.id] for step in group if step.id in ids]
        if 0 < len(named) < len(group):
            return group, [LORA_NAME[step.id] for step in group], named
    return None


def _adapters(linear: Linear, copies: int, rank: int, tp: int, megatron: bool = False) -> list[Tensor]:
    """A [in, r] and B [r, out] (out: a fused linear's parts side by side), one pair per expert of a stack, but one
    for the whole stack under `megatron` (its grouped linear's one adapter), A split t ways too there
    (Megatron-Bridge's ParallelLinearAdapter: in·r/t either way it splits)."""
    w = linear[0].weight.sizes
    stack = w[0] if len(w) == 3 and not megatron else 1
    return [Tensor(copies * stack, w[-2], rank // tp if megatron else rank),
            Tensor(copies * stack, rank, -(-linear_out(linear) // tp))]


def linear_out(linear: Linear) -> int:
    """A linear's output width: its parts' together."""
    return sum(step.weight.sizes[-1] for step in linear)


def stack_shape(group: tuple[Step, ...]) -> tuple[int, int, int]:
    """An expert stack's (experts, in, out): gate's and up's outputs side by side, as gate_up_proj holds them."""
    return group[0].weight.sizes[0], group[0].weight.sizes[-2], sum(st.weight.sizes[-1] for st in group)


def merged_gradient(steps: tuple[Step, ...], targets: tuple[str, ...]) -> int:
    """Elements of the most a merged expert stack's gradient adds to a layer's backward: autograd makes the
    gradient of W + BA, as large as the stack, before it flows into A and B. Backward reaches down's stack first,
    beside everything kept; the gate-and-up stack's gradient arrives after down's backward has freed down's merged
    stack, so it adds its size less down's (measured with PEFT: tests/peft_experts.py, "merged_gradient")."""
    _, stacks = adapted(steps, targets)
    worst = 0
    for kind in dict.fromkeys(group[0].block for group in stacks):
        size = {"down" if group[0].id == "experts_down" else "gate_up": prod(stack_shape(group))
                for group in stacks if group[0].block == kind}
        down = size.get("down", 0)
        worst = max(worst, down, size.get("gate_up", 0) - down)
    return worst


def _stack_adapter(group: tuple[Step, ...], copies: int, rank: int, tp: int) -> list[Tensor]:
    """PEFT's adapter on an expert stack [E, in, out]: A [r·E, in], B [out, r·E]."""
    experts, d_in, out = stack_shape(group)
    return [Tensor(copies, rank * experts, d_in), Tensor(copies, -(-out // tp), rank * experts)]


def held(spec: ModelSpec, tp: int = 1, pp: int = 1, lora_rank: int | None = None,
         lora_targets: tuple[str, ...] = (), stage: int | None = None, split: str = "even",
         per_part: bool = False, megatron: bool = False) -> Held:
    """The parameters of pipeline stage `stage` (None: the busiest stage) on one of its tp GPUs, and its
    LoRA adapters, a fused linear's parts adapted apart where `per_part`, as Megatron-Bridge adapts
    megatron-core's linears where `megatron` (the layout and `split` are valid: train checks them first)."""
    if pp > MAX_STAGES:
        raise GptcalcError(f"--pp: {pp} stages; at most {MAX_STAGES:,} (each is listed)")
    if megatron and lora_rank and lora_rank % tp:
        raise GptcalcError(f"--lora-rank: {lora_rank} does not divide by --tp {tp}: Megatron-Bridge's adapter A is "
                           "column-parallel on linear_qkv and linear_fc1, r/t rows per GPU (megatron.core's divide)")
    steps = journey(spec, 1).steps
    check_targets(spec, steps, lora_targets, per_part, megatron)
    wanted = adapted(steps, lora_targets, per_part, megatron)
    if stage is not None:
        return _stage(spec, steps, stage, pp, tp, lora_rank, wanted, split, megatron)
    stages = [_stage(spec, steps, index, pp, tp, lora_rank, wanted, split, megatron) for index in range(pp)]
    return max(stages, key=lambda h: (h.params, -h.stage_layers))


def _stage(spec: ModelSpec, steps: tuple[Step, ...], stage: int, pp: int, tp: int, rank: int | None,
           wanted: tuple[list[Linear], list[tuple[Step, ...]]], split: str, megatron: bool = False) -> Held:
    first, last = stage_bounds(spec.n_layers, pp, split, stage)
    linears, stacks = wanted
    linear_of = {group[0]: group for group in linears}  # by the linear's first step
    stack_of = {(group[0].id, group[0].block): group for group in stacks}  # by the stack's first step
    kinds = spec.layer_counts(first, last)
    last_block = max(i for i, step in enumerate(steps) if step.block)
    tensors, adapters, matrices = [], [], 0
    for index, step in enumerate(steps):
        if step.block:  # a shared block's weights (Zamba2's): one copy on a stage with a layer applying it
            copies = min(kinds.get(step.block, 0), 1) if step.once else kinds.get(step.block, 0)
        else:
            copies = int(stage == 0) if index < last_block else int(stage == pp - 1)
        if not copies:
            continue
        found = _tensors(step, copies, tp)
        tensors += found
        if step.block and step.weight is not None and len(step.weight.sizes) >= 2:
            matrices += found[0].elements
        # a shared block's linear takes an adapter per layer applying it: transformers 5 builds Zamba2's shared block
        # as a module per hybrid layer, tying the weights of the layers that apply one block (its tiny model's layers
        # 1 and 4 hold one gate_up_proj weight), and PEFT adapts each module (tests/peft_fused.py: 3 adapters, not 2)
        if rank and step in linear_of:
            adapters += _adapters(linear_of[step], kinds.get(step.block, 0) if step.once else copies, rank, tp,
                                  megatron)
        if rank and (step.id, step.block) in stack_of:
            adapters += _stack_adapter(stack_of[step.id, step.block], copies, rank, tp)
    return Held(tuple(tensors), matrices, tuple(adapters), last - first)


def nf4_bytes(elements: int, double_quant: bool = True) -> int:
    """NF4: ½ byte per weight and an absmax per block of 64 — with double quantisation an 8-bit one and
    an fp32 constant per 256 of them, without it (bitsandbytes' default, litgpt's bnb.nf4) an fp32 one."""
    if not double_quant:
        return -(-elements // 2) + 4 * -(-elements // 64)
    return -(-elements // 2) + -(-elements // 64) + 4 * -(-elements // (64 * 256))


def layer_params(spec: ModelSpec, tp: int = 1) -> tuple[int, int]:
    """The largest layer on one of tp GPUs, what FSDP gathers to run it: (parameters, of them in matrices)."""
    per_kind: dict[str, tuple[int, int]] = {}
    for step in journey(spec, 1).steps:
        if step.block:
            params, matrices = per_kind.get(step.block, (0, 0))
            for t in _tensors(step, 1, tp):
                params, matrices = params + t.elements, matrices + (t.elements if t.cols else 0)
            per_kind[step.block] = (params, matrices)
    return max(per_kind.values(), default=(0, 0))


def gathered_bytes(s: "Setup", params: int, matrices: int) -> int:
    """Bytes FSDP all-gathers for `params` parameters, `matrices` of them in layer matrices: those as
    stored for compute — NF4 under QLoRA (torchao's NF4Tensor.fsdp_pre_all_gather sends its 4-bit data
    and scalers), fp8 under float8 all-gather, else bf16 — and the rest at 2 bytes."""
    if s.qlora:
        stored = nf4_bytes(matrices, s.double_quant)
    else:
        stored = matrices * gathered_matrix_bytes(s.float8)
    return stored + 2 * (params - matrices)
