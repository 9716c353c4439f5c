"""Pipeline parallelism as torch's pipelining runs a 1F1B stage: what `train --pp` counts beside the layers
(calc/analysis/train/pipeline.py), against the first stage of a real run on two gloo ranks
(tests/pipeline_1f1b.py). The run is recorded in tests/data/pipeline_1f1b.json; `pytest --distributed`
runs it again (spawned gloo ranks, under a minute) and checks the record."""

from __future__ import annotations

import json

import pytest

from calc.analysis.train import Setup, train
from calc.analysis.train.pipeline import in_flight, stage_buffers
from calc.spec.load import load_spec
from pipeline_1f1b import DIMS, RECORD, STAGES, measure

FP32, BF16 = 4, 2
RESIDUAL = DIMS["micro_batch"] * DIMS["seq"] * DIMS["d"]  # one micro-batch's residual stream, elements
PER_MICRO_BATCH = (DIMS["layers"] + 1) * RESIDUAL * FP32  # its blocks' inputs (the embedding's output first), its output
SETUP = Setup(DIMS["seq"], DIMS["micro_batch"], gpus=STAGES, pp=STAGES)


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text())


def _buffers(setup: Setup, d_model: int) -> dict[str, int]:
    return dict(stage_buffers(setup, d_model))


def test_the_first_stage_keeps_a_gradient_receive_buffer_per_micro_batch(record) -> None:
    receive = _buffers(SETUP, DIMS["d"])["pipeline: a receive buffer for every micro-batch's output gradient"]
    assert record["residual"] == RESIDUAL * FP32
    assert record["grad_recv_buffers"] == receive // BF16 * FP32 == STAGES * RESIDUAL * FP32


def test_the_first_backward_starts_with_every_micro_batch_in_flight(record) -> None:
    assert record["at_backward"][0] == in_flight(SETUP, accumulating=False) * PER_MICRO_BATCH \
        + record["grad_recv_buffers"]


def test_the_second_backward_has_one_fewer_beside_the_first_ones_gradients(record) -> None:
    # the stage's parameters: an embedding of 16 × 32 and 3 blocks of Linear(32, 64) and Linear(64, 32), fp32
    params = 16 * 32 + 3 * (32 * 64 + 64 + 64 * 32 + 32)
    assert record["gradients"] == params * FP32
    assert record["at_backward"][1] == in_flight(SETUP, accumulating=True) * PER_MICRO_BATCH \
        + record["grad_recv_buffers"] + record["gradients"]


def test_fsdp_under_pp_counts_one_micro_batch_fewer_beside_its_fp32_gradients_and_the_stage_buffers() -> None:
    """Llama 3.1 8B over 2 stages, 2,048 tokens a micro-batch: the first stage's 16 layers keep their input
    (2,048 × 4,096 bf16, 16 MiB) for the one micro-batch still in flight beside the fp32 gradients, and the
    stage keeps both micro-batches' outputs and gradient receive buffers (16 MiB each). Llama 3.1 8B's
    d_model 4,096 and 32 layers: its config.json (calc's llama-3.1-8b preset)."""
    t = train(load_spec("llama-3.1-8b"), Setup(2048, 1, gpus=4, pp=2, zero=3, recompute="full", precision="fsdp-mixed"))
    residual = 2048 * 4096 * BF16
    recomputed = dict(next(m for m in t.moments if m.name == "backward, the last layer recomputed").parts)
    assert recomputed["activations kept"] == 16 * residual + 2048 * 8  # and the token ids (int64)
    assert recomputed["pipeline: every micro-batch's stage output, kept until the next step (output_chunks)"] \
        == recomputed["pipeline: a receive buffer for every micro-batch's output gradient"] == 2 * residual
    optimizer_step = dict(next(m for m in t.moments if m.name == "optimizer step").parts)
    assert optimizer_step["pipeline: a receive buffer for every micro-batch's output gradient"] == 2 * residual


def test_without_pipeline_parallelism_nothing_is_added() -> None:
    assert stage_buffers(Setup(2048, 1), 4096) == () and in_flight(Setup(2048, 1), accumulating=True) == 1


def test_the_record_is_what_torch_keeps_now(request) -> None:  # noqa: ANN001
    """Runs the measurement (two spawned gloo ranks) and compares it with the record."""
    if not request.config.getoption("--distributed"):
        pytest.skip("opt-in: pytest --distributed (spawns gloo ranks)")
    assert measure() == json.loads(RECORD.read_text())
