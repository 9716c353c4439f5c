"""Pipeline parallelism as torch's pipelining runs a 1F1B step: what `train --pp` counts on each stage
(calc/analysis/train/pipeline.py, peak._pipelined), against every stage of a real run on three gloo ranks
(tests/pipeline_1f1b.py). The run is recorded in tests/data/pipeline_1f1b.json; `pytest --distributed`
runs it again (spawned gloo ranks, under a minute) and checks the record.

The run's torch (2.13) differs from the 405B runs' (December 2024) in two ways, each a later change,
subtracted here from what gptcalc counts for the December 2024 torch: a non-last stage no longer keeps its
outputs once backward has run (pytorch#153383, May 2025), and a stage's input gradient is dropped from the
receive buffer's `.grad` at once (pytorch#164329, October 2025), so of those only the last one backward
made is alive, its send pending, when the next backward starts."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from calc.analysis.train import Setup, train, train_stages
from calc.analysis.train.pipeline import Stage, stage_buffers
from calc.cli import main
from calc.spec.load import load_spec
from pipeline_1f1b import DIMS, RECORD, STAGES, measure

FP32, BF16 = 4, 2
RESIDUAL = DIMS["micro_batch"] * DIMS["seq"] * DIMS["d"] * FP32  # one micro-batch's residual stream
SETUP = Setup(DIMS["seq"], DIMS["micro_batch"], gpus=STAGES, pp=STAGES)
# each stage's parameters, fp32: 3 blocks of Linear(32, 64) and Linear(64, 32); the first an embedding of
# 48 × 32, the last a head of 32 × 48 without bias
BLOCKS = 3 * (32 * 64 + 64 + 64 * 32 + 32)
GRADIENTS = [(48 * 32 + BLOCKS) * FP32, BLOCKS * FP32, (BLOCKS + 32 * 48) * FP32]
SCALARS = 4 * STAGES * DIMS["micro_batch"]  # the last rank's target, fp32, made inside the tracked step


@pytest.fixture(scope="module")
def record() -> list[dict]:
    return json.loads(RECORD.read_text())


def _buffers(stage: Stage, backward: int | None) -> int:
    """gptcalc's pipelining buffers (bf16) at the run's fp32 width."""
    return sum(size for _, size in stage_buffers(SETUP, DIMS["d"], stage, backward)) // BF16 * FP32


def _later_torch(stage: Stage, backward: int | None) -> int:
    """What the run's torch no longer keeps of what gptcalc counts (see the module's docstring)."""
    done = STAGES if backward is None else backward
    outputs = 0 if stage.last else done
    input_grads = 0 if stage.first else (done if backward is None else max(done - 1, 0))
    return (outputs + input_grads) * RESIDUAL


def test_the_buffers_are_what_each_stage_keeps(record) -> None:
    first, middle, last = record
    assert all(r["residual"] == RESIDUAL for r in record)
    assert first["grad_recv_buffers"] == middle["grad_recv_buffers"] == STAGES * RESIDUAL
    assert middle["act_recv_buffers"] == last["act_recv_buffers"] == STAGES * RESIDUAL
    assert first["act_recv_buffers"] == last["grad_recv_buffers"] == 0
    assert [r["gradients"] for r in record] == GRADIENTS
    assert last["output_chunks"] == STAGES * last["logits"]  # the last stage's outputs, the logits, kept


@pytest.mark.parametrize("index", range(STAGES - 1))
def test_a_non_last_stage_at_every_backward(record, index: int) -> None:
    """At its j-th backward stage i holds p − max(i, j) micro-batches in flight, each its 3 blocks' inputs (the
    embedding's output or the input receive buffer first) and its output, the buffers, and from the second
    backward on its whole gradients. The middle stage's second backward holds one residual more in this
    torch: mb 0's output, which its forward send still references (a transient of the run's schedule)."""
    stage = Stage(index, STAGES)
    for j, measured in enumerate(record[index]["at_backward"]):
        in_flight = stage.in_flight(j) * DIMS["layers"] * RESIDUAL
        ours = in_flight + _buffers(stage, j) + (GRADIENTS[index] if j else 0) - _later_torch(stage, j)
        transient = RESIDUAL if (index, j) == (1, 1) else 0
        assert measured == ours + transient, (index, j)


def test_the_last_stage_at_every_backward_and_at_the_merge(record) -> None:
    """The last stage runs one micro-batch at a time: its blocks' inputs (the receive buffer first), the head's
    input and the logits, beside the other receive buffers, the earlier micro-batches' logits (output_chunks),
    the input gradients and, from the second backward, the gradients; each loss a 4-byte scalar. At the merge,
    every logits twice beside the gradients."""
    stage, last = Stage(STAGES - 1, STAGES), record[-1]
    for j, measured in enumerate(last["at_backward"]):
        ours = (DIMS["layers"] + 1) * RESIDUAL + (j + 1) * last["logits"] + _buffers(stage, j) \
            + (GRADIENTS[-1] if j else 0) - _later_torch(stage, j)
        assert measured == ours + 4 * (j + 1) + SCALARS, j
    merged = _buffers(stage, None) + 2 * STAGES * last["logits"] + GRADIENTS[-1] - _later_torch(stage, None)
    assert last["at_merge"] == [merged + 4 * STAGES + SCALARS]


def test_after_the_step_each_stage_keeps_its_buffers_and_gradients(record) -> None:
    """Until the next step: the receive buffers, the gradients, the last stage's outputs (its losses and the
    target are gone with the step)."""
    for index, r in enumerate(record):
        stage = Stage(index, STAGES)
        outputs = STAGES * r["logits"] if stage.last else 0
        assert r["after_step"] == _buffers(stage, None) - _later_torch(stage, None) + outputs + GRADIENTS[index], index


def test_every_stage_is_counted_on_its_own() -> None:
    """Llama 3.1 8B over 2 stages under FSDP (torchtitan's), 2,048 tokens a micro-batch: the first stage holds
    the embedding and 16 layers, no head and no loss; its second backward holds 1 micro-batch in flight (16 layer
    inputs of 2,048 × 4,096 bf16) beside its fp32 gradients, with both micro-batches' outputs and gradient
    receive buffers. The last holds 16 layers, the final norm and the head, and the run's peak is its last
    micro-batch's loss backward, beside the first micro-batch's logits (2,048 × 128,256 bf16). Llama 3.1 8B's
    shapes: its config.json (calc's llama-3.1-8b preset)."""
    t = train(load_spec("llama-3.1-8b"), Setup(2048, 1, gpus=4, pp=2, zero=3, recompute="full", precision="fsdp-mixed"))
    residual, layer = 2048 * 4096 * BF16, 218_112_000  # 4096² · 2 + 4096 · 1024 · 2 + 3 · 4096 · 14336 + 2 · 4096
    assert [name for name, _, _ in t.stage_peaks] == ["stage 0 of 2 (first)", "stage 1 of 2 (last)"]
    assert t.stage == Stage(1, 2) and t.peak.name == "backward of micro-batch 2, through the loss"
    assert t.held.params == 16 * layer + 4096 + 128256 * 4096
    peak = dict(t.peak.parts)
    assert peak["pipeline: stage outputs (output_chunks)"] == 2 * 2048 * 128256 * 2
    assert peak["FSDP under PP: unsharded fp32 gradients accumulated"] == 4 * t.held.params
    first = train_stages(load_spec("llama-3.1-8b"), Setup(2048, 1, gpus=4, pp=2, zero=3, recompute="full",
                                                          precision="fsdp-mixed"))[0]
    second = dict(next(m for m in first.moments if m.name.startswith("backward of micro-batch 2")).parts)
    assert second["activations kept (1 micro-batch in flight)"] == 16 * residual + 2048 * 8  # and the ids (int64)
    assert second["pipeline: stage outputs (output_chunks)"] \
        == second["pipeline: output-gradient receive buffers"] == 2 * residual
    assert "loss: backward temporaries" not in dict(p for m in first.moments for p in m.parts)


def test_without_fsdp_the_gradients_accumulate_from_the_first_backward() -> None:
    """Plain data parallelism (ZeRO-1) over 2 stages, no recomputation: the first stage's first backward starts
    with both micro-batches in flight and no gradients, its second with one beside the bf16 gradients of its
    4,015,132,672 parameters (the 128,256 × 4,096 embedding and 16 layers of 218,112,000: Llama 3.1 8B, as
    above); the gradients are the larger, so that is the stage's backward peak."""
    first = train_stages(load_spec("llama-3.1-8b"), Setup(2048, 1, gpus=2, pp=2, zero=1))[0]
    assert first.stage == Stage(0, 2) and first.held.params == 128256 * 4096 + 16 * 218_112_000
    one, two = (dict(m.parts) for m in first.moments[:2])
    per_batch = one["activations kept (2 micro-batches in flight)"] // 2
    assert two["activations kept (1 micro-batch in flight)"] == per_batch
    assert "gradients accumulated over the earlier micro-batches" not in one
    assert two["gradients accumulated over the earlier micro-batches"] == 2 * first.held.params > per_batch
    assert first.moments[1].allocated > first.moments[0].allocated


def test_the_optimizer_step_inside_backward_is_refused_under_pipeline_parallelism() -> None:
    result = CliRunner().invoke(main, ["train", "llama-3.1-8b", "--seq", "2048", "--micro-batch", "1", "--gpus", "2",
                                       "--pp", "2", "--optimizer-in-backward"])
    assert result.exit_code == 2 and "Error: --optimizer-in-backward: " in result.output
    assert "Traceback" not in result.output


def test_the_record_is_what_torch_keeps_now(request) -> None:  # noqa: ANN001
    """Runs the measurement (spawned gloo ranks) and compares it with the record."""
    if not request.config.getoption("--distributed"):
        pytest.skip("opt-in: pytest --distributed (spawns gloo ranks)")
    assert measure() == json.loads(RECORD.read_text())
