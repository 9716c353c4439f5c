"""FSDP2 on each pipeline stage, as torchtitan runs its 405B pipelines, measured under torch 2.6.0 (the release of
those runs' December 2024 nightly): tests/pipeline_fsdp.py, recorded in tests/data/pipeline_fsdp.json.

gptcalc counts a pipeline rank under FSDP as torchtitan runs it (calc/analysis/train/peak.py, pipeline.py): its
stages stay gathered in bf16 through the step (reshard_after_forward=False) and, once a stage has run a backward,
its unsharded gradients accumulate in fp32 (MixedPrecisionPolicy's reduce_dtype; no sync until the last
backward) — nothing more a micro-batch, under Schedule1F1B or ScheduleInterleaved1F1B. The record's two runs of
each schedule, one with FSDP2 and one without (the same model in bf16), differ at every backward by exactly that.

After a stage's last backward FSDP2 reduce-scatters and reshards it (`post_backward`); on the record's one-rank
data-parallel mesh that is not what eight ranks do, so the moments after it are not compared."""

from __future__ import annotations

import json

import pytest

from pipeline_fsdp import D, FF, MICROBATCHES, RANKS, RECORD, VOCAB

BF16, FP32 = 2, 4
BLOCK = 2 * D * D + 3 * D * FF  # wq, wo (D × D), w1, w3 (D × FF), w2 (FF × D), no biases
EDGE = VOCAB * D  # the first stage's embedding, the last stage's head
PARAMETERS = {"1f1b": {0: 4 * BLOCK + EDGE, 1: 4 * BLOCK + EDGE},  # a stage a rank, 4 layers each
              "interleaved-1f1b": {0: 2 * BLOCK + EDGE, 1: 2 * BLOCK, 2: 2 * BLOCK, 3: 2 * BLOCK + EDGE}}
CHECKED = {"1f1b": MICROBATCHES, "interleaved-1f1b": 6}  # backwards before a stage of the rank has run its last


@pytest.fixture(scope="module")
def record() -> list[dict]:
    return json.loads(RECORD.read_text())


def test_the_record_is_torch_2_6(record) -> None:
    assert [r["torch"] for r in record] == ["2.6.0"] * RANKS


@pytest.mark.parametrize("schedule", sorted(PARAMETERS))
def test_fsdp2_adds_the_gathered_stages_and_fp32_gradients_only(record, schedule: str) -> None:
    for rank, report in enumerate(record):
        run, plain = report[schedule]["fsdp2"], report[schedule]["plain"]
        stages = {int(i) for i in run["parameters"]}
        assert run["parameters"] == plain["parameters"] == {str(i): PARAMETERS[schedule][i] for i in stages}
        assert [at[:2] for at in run["at_backward"]] == [at[:2] for at in plain["at_backward"]]
        left, checked = dict.fromkeys(stages, MICROBATCHES), 0
        for (stage, _, alive), (_, _, alive_plain) in zip(run["at_backward"], plain["at_backward"], strict=True):
            if 0 in left.values():
                break
            gathered = BF16 * sum(PARAMETERS[schedule][i] for i in stages)
            upcast = (FP32 - BF16) * sum(PARAMETERS[schedule][i] for i in stages if left[i] < MICROBATCHES)
            assert alive - alive_plain == gathered + upcast, (rank, stage)
            left[stage] -= 1
            checked += 1
        assert checked == CHECKED[schedule]
