"""Interleaved pipeline schedules (calc/analysis/train/interleaved.py): each rank's order is torch's own
(ScheduleInterleaved1F1B's generator, torch 2.13, imported here as the oracle), and what each rank holds at
each backward, counted from that order with pipeline.held_buffers, is what a real run on two gloo ranks
keeps (tests/pipeline_interleaved.py, with 4 micro-batches and with 6, --pp-microbatches: recorded in
tests/data/pipeline_interleaved.json and pipeline_interleaved_6.json; `pytest --distributed` runs them again).

The run's torch (2.13) runs interleaved schedules through _PipelineScheduleRuntime, which holds every send
it starts until the step ends (`send_ops`, waited after the last action): each micro-batch's stage output
and input gradient stay alive until then, as the December 2024 torch kept them in `output_chunks` and the
receive buffers' `.grad` (pipeline.py). So, unlike the 1F1B run (tests/test_train_pipeline.py), nothing is
subtracted for the later torch."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from calc.analysis.train import Setup
from calc.analysis.train.interleaved import Interleaved
from calc.analysis.train.pipeline import held_buffers
from calc.errors import GptcalcError
from pipeline_1f1b import DIMS
from pipeline_interleaved import RANKS, RECORDS, VIRTUAL, measure

FP32, BF16 = 4, 2
RESIDUAL = DIMS["micro_batch"] * DIMS["seq"] * DIMS["d"] * FP32  # one micro-batch's residual stream, fp32
LOGITS = DIMS["micro_batch"] * DIMS["seq"] * DIMS["vocab"] * FP32
STAGES = RANKS * VIRTUAL
SETUP = Setup(DIMS["seq"], DIMS["micro_batch"], gpus=RANKS, pp=RANKS)


def _torch_order(rank: int, p: int, v: int, n: int) -> tuple[tuple[str, int], ...]:
    """torch's ScheduleInterleaved1F1B._calculate_single_rank_operations, its idle steps dropped."""
    from torch.distributed.pipelining.schedules import FORWARD, _get_1f1b_rank_ops, _get_warmup_ops

    per_round = n // max(1, n // p)
    warmup = _get_warmup_ops(rank, v, per_round, p, n, multiply_factor=2)
    ops = _get_1f1b_rank_ops(v, p, warmup, v * n - warmup, warmup, rank,
                             lambda k: ((k // per_round) % v) * p + rank,
                             lambda k: (v - 1 - ((k - warmup) // per_round) % v) * p + rank)
    return tuple(("F" if a.computation_type == FORWARD else "B", a.stage_index) for a in ops if a is not None)


@pytest.mark.parametrize(("p", "v"), list(itertools.product((2, 3, 4, 8), (1, 2, 3))))
def test_the_order_is_torchs(p: int, v: int) -> None:
    for n in range(1, 3 * p + 1):
        if n % max(1, n // p):
            continue
        schedule = Interleaved(p, v, n)
        for rank in range(p):
            assert schedule.order(rank) == _torch_order(rank, p, v, n), (p, v, n, rank)


def test_torchtitans_405b_schedule() -> None:
    """Table 5's interleaved run: 8 ranks of 2 stages, 8 micro-batches (torchtitan @ 9dec370's defaults). Rank 0
    runs every forward of its first stage (8) and 6 of its second before its first backward, (2 − 1)·8 + 2·7 = 22
    capped at 16 warmup forwards: at that backward stage 8 holds its 8 micro-batches in flight, stage 0 all 8.
    Rank 7 starts backward after (2 − 1)·8 forwards: 8 on stage 7, none on stage 15, then 1F1B."""
    schedule = Interleaved(8, 2, 8)
    first = schedule.held(0)[0]
    assert schedule.warmup(0) == 16 and (first.stage, first.microbatch) == (8, 0)
    assert (first.in_flight(0), first.in_flight(8)) == (8, 8)
    assert schedule.warmup(7) == 8 and schedule.order(7)[8:11] == (("F", 15), ("B", 15), ("F", 15))
    assert max(h.in_flight(0) + h.in_flight(8) for h in schedule.held(0)) == 16
    assert max(h.in_flight(7) + h.in_flight(15) for h in schedule.held(7)) == 9


def test_microbatches_not_a_multiple_of_the_rounds_are_refused() -> None:
    """torch raises for it: 10 micro-batches over 4 ranks run in 2 rounds; 11 cannot."""
    assert Interleaved(4, 2, 10).group == 5
    with pytest.raises(GptcalcError, match="11 micro-batches over 4 ranks in 2 rounds; 11 is not a multiple of 2"):
        Interleaved(4, 2, 11)


@pytest.fixture(scope="module", params=sorted(RECORDS))
def run(request) -> tuple[int, list[dict]]:  # noqa: ANN001
    """A recorded run: its micro-batches a step and every rank's report."""
    return request.param, json.loads(RECORDS[request.param].read_text())


def _stage_bytes(stage: int, forwards: int, backwards: int, microbatches: int) -> int:
    """What one stage of the run holds: its micro-batches in flight (each its blocks' inputs, the embedding's
    output or the input receive buffer first, and on the last stage the head's input), the pipelining buffers
    (gptcalc's, bf16, at the run's fp32 width), on the last stage every forward's logits (output_chunks) and
    4-byte loss."""
    first, last = stage == 0, stage == STAGES - 1
    in_flight = (forwards - backwards) * (DIMS["layers"] + last) * RESIDUAL
    buffers = sum(size for _, size in held_buffers(replace(SETUP, pp=STAGES), DIMS["d"], first, last,
                                                  microbatches, forwards, backwards))
    return in_flight + buffers // BF16 * FP32 + (forwards * (LOGITS + FP32) if last else 0)


@pytest.mark.parametrize("rank", range(RANKS))
def test_each_rank_at_every_backward(run, rank: int) -> None:
    """Both of the rank's stages together, at each backward in the order torch runs them, with the gradients of
    every stage that has run a backward (each stage's parameters' own, as recorded); on the last rank the target,
    fp32, one per sample of the step, made inside the tracked step."""
    n, record = run
    r, schedule = record[rank], Interleaved(RANKS, VIRTUAL, n)
    gradients = {int(stage): kept["gradients"] for stage, kept in r["stages"].items()}
    assert len(r["at_backward"]) == VIRTUAL * n
    target = FP32 * n * DIMS["micro_batch"] if rank == RANKS - 1 else 0
    for held, (stage, microbatch, measured) in zip(schedule.held(rank), r["at_backward"]):
        assert (held.stage, held.microbatch) == (stage, microbatch)
        ours = sum(_stage_bytes(s, held.forwards[s], held.backwards[s], n) + (gradients[s] if held.backwards[s] else 0)
                   for s in schedule.stages(rank))
        assert measured == ours + target, (stage, microbatch)


def test_after_the_step_each_rank_keeps_its_receive_buffers_and_gradients(run) -> None:
    """The sends are waited, the outputs and input gradients gone with them; the last stage keeps its logits."""
    n, record = run
    for rank, r in enumerate(record):
        kept = sum(v["gradients"] + v["act_recv_buffers"] + v["grad_recv_buffers"] + v["output_chunks"]
                   for v in r["stages"].values())
        assert r["after_step"] == kept
    assert record[-1]["stages"][str(STAGES - 1)]["output_chunks"] == n * LOGITS
    assert all(v["grad_recv_buffers"] == n * RESIDUAL for r in record for s, v in r["stages"].items()
               if int(s) != STAGES - 1)


@pytest.mark.parametrize("n", sorted(RECORDS))
def test_the_record_is_what_torch_keeps_now(request, n: int) -> None:  # noqa: ANN001
    """Runs the measurement (spawned gloo ranks) and compares it with the record."""
    if not request.config.getoption("--distributed"):
        pytest.skip("opt-in: pytest --distributed (spawns gloo ranks)")
    assert measure(n) == json.loads(RECORDS[n].read_text())


# Llama 3.1 405B (its config.json: 126 layers, d_model 16,384, vocabulary 128,256) as Table 5's interleaved row
# runs it: TP 8 with sequence parallelism, PP 8 of 2 stages a rank, 8 micro-batches of 4 × 8,192 tokens, FSDP,
# full recomputation (tests/test_train_published.py, TITAN_4D)
RUN_405B = ["train", "llama-3.1-405b", "--framework", "torchtitan", "--repeat-kv", "--seq", "8192", "--micro-batch",
            "4", "--gpus", "512", "--tp", "8", "--sp", "--pp", "8", "--zero", "3", "--recompute", "full",
            "--float8", "tensorwise-all-gather", "--pp-schedule", "interleaved-1f1b"]


def _run_405b():
    from calc.analysis.train import train
    from calc.analysis.train.frameworks import resolve
    from calc.spec.load import load_spec

    setup = Setup(8192, 4, gpus=512, tp=8, sp=True, pp=8, zero=3, float8="tensorwise-all-gather",
                  pp_schedule="interleaved-1f1b", **resolve("torchtitan", {"recompute": "full", "repeat_kv": True}))
    return train(load_spec("llama-3.1-405b"), setup)


def test_a_rank_holds_its_stages_together() -> None:
    """torchtitan's split of 126 layers over 16 stages: 7 first, 8 on each of the 14 middle stages, 7 last; rank r
    holds stages r and r + 8 (15 layers on ranks 0 and 7, 16 on the others). Rank 7 runs its 8 forwards of stage 7,
    then stage 15's forward and backward in turn, then stage 7's backwards: at stage 7's second backward it holds
    7 micro-batches there (8 layers' inputs each, fully recomputed: 4 × 8,192 × 16,384 × 2 B ÷ 8 a layer), beside
    both stages' unsharded fp32 gradients and every logits of stage 15 (8 × 4 × 8,192 × 128,256 ÷ 8 × 2 B)."""
    t = _run_405b()
    assert [(name.split(" (")[0], layers) for name, layers, _, _ in t.stage_peaks] == \
        [(f"rank {r} of 8", 15 if r in (0, 7) else 16) for r in range(8)]
    assert t.stage.name() == "rank 7 of 8 (stages 7 and 15 of 16)"
    assert t.peak.name == "backward of stage 7's micro-batch 2, the last layer recomputed"
    layer = 4 * 8192 * 16384 * 2 // 8
    parts = dict(t.peak.parts)
    assert parts["stage 7: activations kept (7 micro-batches in flight)"] == 7 * 8 * layer
    assert parts["stage 15: pipeline: stage outputs (output_chunks)"] == 8 * 4 * 8192 * 128256 // 8 * 2
    fp32 = parts["stage 7: FSDP under PP: unsharded fp32 gradients accumulated"] \
        + parts["stage 15: FSDP under PP: unsharded fp32 gradients accumulated"]
    assert fp32 == 4 * t.held.params
    # each row of the states is the two stages' together
    assert t.held.params == 15 * (2 * 16384 * 16384 // 8 + 2 * 16384 * 1024 // 8 + 3 * 16384 * 53248 // 8
                                  + 2 * 16384) + 16384 + 128256 * 16384 // 8


@pytest.mark.parametrize(("args", "message"), [
    (["--pp", "2", "--pp-virtual", "2"], "--pp-virtual: 2 stages a rank need --pp 2 or more and --pp-schedule "
                                         "interleaved-1f1b"),
    (["--pp-schedule", "interleaved-1f1b", "--pp-virtual", "2"], "--pp-virtual: 2 stages a rank need --pp 2 or more"),
    (["--pp", "2", "--pp-schedule", "interleaved-1f1b", "--grad-accumulation", "2"],
     "--grad-accumulation: gradients carried over from earlier steps are counted for --pp-schedule 1f1b only"),
    (["--pp", "2", "--pp-schedule", "interleaved-1f1b", "--pp-split", "6,6"],
     "--pp-split: 2 stages given, --pp 2 × --pp-virtual 2 is 4"),
    # gpt2-small has 12 layers: 8 ranks × 2 stages leave stages without one
    (["--pp", "8", "--pp-schedule", "interleaved-1f1b"], "--pp-split even: 12 layers at ⌈12/16⌉ = 1 a stage fill 12 "
                                                        "of the 16 stages"),
])
def test_an_interleaved_layout_that_cannot_run_is_one_error_line(args: list[str], message: str) -> None:
    from click.testing import CliRunner

    from calc.cli import main

    result = CliRunner().invoke(main, ["train", "gpt2-small", "--seq", "256", "--micro-batch", "1", "--gpus", "8",
                                       *args])
    assert result.exit_code == 2 and result.output.startswith(f"Error: {message}"), result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_the_notes_name_each_rank() -> None:
    from click.testing import CliRunner

    from calc.cli import main

    out = CliRunner().invoke(main, RUN_405B, terminal_width=200).output
    assert "pipeline (interleaved 1F1B, 2 stages a rank, 8 micro-batches a step)" in out
    assert "rank 0 of 8 (stages 0 and 8 of 16), 15 layers" in out


def test_the_schedule_takes_the_microbatches_given() -> None:
    """gpt2-small (12 layers, d_model 768) over 2 ranks of 2 stages with 6 micro-batches (--pp-microbatches 6, three
    rounds of 2): rank 0 holds stages 0 and 2, each with a receive buffer for every micro-batch's output gradient
    and, in the December 2024 torch, every micro-batch's output at the step's end: 6 residuals of 256 × 768 bf16
    each, on each stage."""
    from click.testing import CliRunner

    from calc.analysis.train import train_stages
    from calc.cli import main
    from calc.spec.load import load_spec

    setup = Setup(256, 1, gpus=2, pp=2, pp_schedule="interleaved-1f1b", pp_microbatches=6)
    rank0 = train_stages(load_spec("gpt2-small"), setup)[0]
    assert rank0.stage.index == 0 and rank0.stage.schedule == Interleaved(2, 2, 6)
    end = dict(next(m for m in rank0.moments if m.name == "backward ends").parts)
    residual = 256 * 768 * BF16
    for stage in (0, 2):
        assert end[f"stage {stage}: pipeline: output-gradient receive buffers"] == 6 * residual
        assert end[f"stage {stage}: pipeline: stage outputs (output_chunks)"] == 6 * residual
    out = CliRunner().invoke(main, ["train", "gpt2-small", "--seq", "256", "--micro-batch", "1", "--gpus", "2", "--pp",
                                    "2", "--pp-schedule", "interleaved-1f1b", "--pp-microbatches", "6"],
                             terminal_width=200).output
    assert "pipeline (interleaved 1F1B, 2 stages a rank, 6 micro-batches a step)" in out
