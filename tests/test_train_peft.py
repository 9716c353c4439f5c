"""LoRA on fused expert stacks (PEFT's target_parameters): `train --lora-targets experts_gate_up,experts_down`
against what PEFT trained and kept on transformers' tiny MoE models (tests/peft_experts.py, recorded in
tests/data/peft_experts.json; measured again here where peft is installed).

What the record shows: one adapter per stack, r·E·(in + out) parameters (gate and up share one); each later
layer keeps what full training keeps of the experts — the routed rows for the gate-and-up stack's merged
weight, the product for down's — plus each adapted stack merged (W + BA, a new tensor of the stack's size,
saved by the grouped matmul) and, with fp32 adapters on a bf16 base, B and A cast to bf16 (baddbmm's saved
factors). Layer 0's input needs no gradient (the embedding is frozen), so it keeps less and is left out; the
activations are checked for the MoE forms frozen.py counts (gpt-oss's clamped experts and biases, and
DeepSeek-V3's MLA as CPU SDPA runs it, keep their full-training count, checked for parameters only). Beside
adapters on q and v (PEFT's target_modules, bf16 adapters) the stacks' terms add to theirs. In backward each merged
stack gets a gradient of its own size before it flows into A and B: a transient of the layer's backward, beside what
is kept (the gate-and-up stack's arrives after down's merged stack is freed, so with both adapted it adds down's size).
"""

from __future__ import annotations

import json

import pytest

from calc.analysis.train import Setup, train
from calc.errors import GptcalcError
from oracle import spec_of
from peft_experts import BATCH, FROZEN_FORMS, RANK, RECORD, SEQ, TARGETS, key, measure, runs
from peft_linears import PRECISION, RECORD as LINEARS_RECORD, TARGETS as LINEAR_TARGETS, key as linear_key
from peft_linears import measure as linear_measure, runs as linear_runs
from tiny_models import tiny_config

MEASURED = json.loads(RECORD.read_text())
RUNS = runs()


def _train(model_type: str, targets: tuple[str, ...], fp32_adapters: bool):  # noqa: ANN202
    """PEFT's fp32 adapters are mixed precision's adapter width, its bf16 ones pure bf16's (precision.py)."""
    spec = spec_of(tiny_config(model_type))
    return spec, train(spec, Setup(SEQ, BATCH, lora_rank=RANK, lora_targets=targets, norm_upcast=True,
                                   precision="mixed" if fp32_adapters else "bf16"))


@pytest.mark.parametrize(("model_type", "targets", "fp32"), RUNS)
def test_a_stack_adapter_trains_what_peft_trains(model_type: str, targets: tuple[str, ...], fp32: bool) -> None:
    assert _train(model_type, targets, fp32)[1].held.adapter_params == MEASURED[model_type][key(targets, fp32)]["trained"]


@pytest.mark.parametrize(("model_type", "targets", "fp32"), [r for r in RUNS if r[0] in FROZEN_FORMS])
def test_a_layer_keeps_what_peft_keeps(model_type: str, targets: tuple[str, ...], fp32: bool) -> None:
    spec, t = _train(model_type, targets, fp32)
    per_kind = {kind: t.layer_bytes(terms) for kind, _, terms in t.layers}
    assert MEASURED[model_type][key(targets, fp32)]["kept"][1:] == [per_kind[spec.block_at(i)]
                                                                     for i in range(1, spec.n_layers)]


MERGED = "LoRA: a merged expert stack's gradient (W + BA's, the stack's size)"


@pytest.mark.parametrize(("model_type", "targets", "fp32"), RUNS)
def test_a_layer_backward_holds_a_merged_stack_gradient(model_type: str, targets: tuple[str, ...], fp32: bool) -> None:
    """Backward's gradient of a merged stack, as large as the stack, beside what is kept: down's first; the
    gate-and-up stack's after down's merged stack is freed (Qwen3-MoE's tiny layer, both stacks: 4·32·16·2 B =
    4,096, the gate-and-up one alone 8,192)."""
    moments = {m.name: dict(m.parts) for m in _train(model_type, targets, fp32)[1].moments}
    assert moments["backward, the last layer"][MERGED] == MEASURED[model_type][key(targets, fp32)]["merged_gradient"]


def test_the_merged_stacks_dwarf_the_adapters() -> None:
    """Qwen3-MoE's tiny layer (4 experts, d 32, f 16): the merged gate-and-up stack is 4·32·32 bf16 elements,
    the down stack 4·16·32, whatever the rank; the fp32 adapters' bf16 factors 4·4·(32 + 32) and 4·4·(16 + 32)."""
    _, t = _train("qwen3_moe", TARGETS[0], True)
    (_, _, terms), = t.layers
    stacks = {x.label: x.elements for x in terms if x.label.startswith("LoRA on the experts'")}
    assert sorted(stacks.values()) == sorted([4 * 32 * 32, 4 * 16 * 32, 4 * 4 * (32 + 32), 4 * 4 * (16 + 32)])


@pytest.mark.parametrize("option", [{"lora_dropout": True}, {"qlora": True}])
def test_stack_adapters_refuse_dropout_and_a_4_bit_base(option: dict) -> None:
    with pytest.raises(GptcalcError, match="expert stacks"):
        train(spec_of(tiny_config("qwen3_moe")), Setup(SEQ, BATCH, lora_rank=RANK, lora_targets=TARGETS[0], **option))


@pytest.mark.parametrize(("model_type", "targets", "fp32"), [r for r in RUNS if r[0] == "qwen3_moe"])
def test_peft_still_keeps_the_record(model_type: str, targets: tuple[str, ...], fp32: bool) -> None:
    """The live measurement, where peft is installed (not a project dependency)."""
    pytest.importorskip("peft")
    assert measure(model_type, targets, fp32) == MEASURED[model_type][key(targets, fp32)]


LINEARS = json.loads(LINEARS_RECORD.read_text())


@pytest.mark.parametrize(("targets", "dropout", "run"), linear_runs())
def test_a_layer_keeps_what_peft_keeps_beside_its_linears(targets: tuple[str, ...], dropout: bool, run: str) -> None:
    """PEFT's linear adapters on tiny bf16 Llama (tests/peft_linears.py): fp32 adapters without autocast keep an
    fp32 copy of each target's input, under autocast its bf16 recast, A's bf16 output and autocast's bf16
    copies of A and B; bf16 adapters read the input itself. Layer 0's input needs no gradient (the embedding
    is frozen) and is left out."""
    spec = spec_of(tiny_config("llama"))
    t = train(spec, Setup(SEQ, BATCH, lora_rank=RANK, lora_targets=targets, lora_dropout=dropout, norm_upcast=True,
                          precision=PRECISION[run]))
    (_, _, terms), = t.layers
    assert LINEARS[linear_key(targets, dropout, run)][1:] == [t.layer_bytes(terms)] * (spec.n_layers - 1)


def test_the_fp32_copies_outweigh_the_inputs_they_replace() -> None:
    """All seven targets, fp32 adapters, no dropout: q, k and v each copy the 32-wide normed input, gate and up
    the MLP's, o the 32-wide heads' output and down the 48-wide product, 4 B an element over 3 · 7 rows; the
    bf16 inputs no adapter reads now (the two normed inputs and the product: the fused attention keeps W_O's)
    go. The record's fp32 and bf16 runs differ by that and by A's seven outputs at 4 B, not 2."""
    rows, d, f = BATCH * SEQ, 32, 48  # tests/tiny_models.py's Llama: hidden 32, intermediate 48
    copies = rows * (6 * d + f) * 4
    freed = rows * (d + d + f) * 2
    wider_outputs = rows * RANK * 7 * 2
    fp32, bf16 = (LINEARS[linear_key(LINEAR_TARGETS[-1], False, run)][1] for run in ("fp32", "bf16"))
    assert fp32 - bf16 == copies - freed + wider_outputs


@pytest.mark.parametrize(("targets", "dropout", "run"), [r for r in linear_runs() if r[0] == LINEAR_TARGETS[-1]])
def test_peft_still_keeps_the_linears_record(targets: tuple[str, ...], dropout: bool, run: str) -> None:
    """The live measurement, where peft is installed (not a project dependency)."""
    pytest.importorskip("peft")
    assert linear_measure(targets, dropout, run) == LINEARS[linear_key(targets, dropout, run)]
