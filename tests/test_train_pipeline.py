"""Pipeline parallelism as torch's pipelining runs a 1F1B step: what `train --pp` counts on each stage
(calc/analysis/train/pipeline.py, peak._pipelined), against every stage of a real run on three gloo ranks
(tests/pipeline_1f1b.py), once with as many micro-batches as stages and once with twice as many
(--pp-microbatches). The runs are recorded in tests/data/pipeline_1f1b.json and pipeline_1f1b_6.json;
`pytest --distributed` runs them again (spawned gloo ranks, a minute or two) and checks the records.

The run's torch (2.13) differs from the 405B runs' (December 2024) in two ways, each a later change,
subtracted here from what gptcalc counts for the December 2024 torch: a non-last stage no longer keeps its
outputs once backward has run (pytorch#153383, May 2025), and a stage's input gradient is dropped from the
receive buffer's `.grad` at once (pytorch#164329, October 2025), so of those only the last one backward
made is alive, its send pending, when the next backward starts."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from calc.analysis.train import Setup, train, train_stages
from calc.analysis.train.frameworks import resolve
from calc.analysis.train.pipeline import Stage, stage_buffers, stage_sizes
from calc.cli import main
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from pipeline_1f1b import DIMS, RECORDS, STAGES, measure

FP32, BF16 = 4, 2
RESIDUAL = DIMS["micro_batch"] * DIMS["seq"] * DIMS["d"] * FP32  # one micro-batch's residual stream
SETUP = Setup(DIMS["seq"], DIMS["micro_batch"], gpus=STAGES, pp=STAGES)
# each stage's parameters, fp32: 3 blocks of Linear(32, 64) and Linear(64, 32); the first an embedding of
# 48 × 32, the last a head of 32 × 48 without bias
BLOCKS = 3 * (32 * 64 + 64 + 64 * 32 + 32)
GRADIENTS = [(48 * 32 + BLOCKS) * FP32, BLOCKS * FP32, (BLOCKS + 32 * 48) * FP32]


@pytest.fixture(scope="module", params=sorted(RECORDS))
def run(request) -> tuple[int, list[dict]]:  # noqa: ANN001
    """A recorded run: its micro-batches a step and every stage's report."""
    return request.param, json.loads(RECORDS[request.param].read_text())


def _buffers(stage: Stage, backward: int | None) -> int:
    """gptcalc's pipelining buffers (bf16) at the run's fp32 width."""
    return sum(size for _, size in stage_buffers(SETUP, DIMS["d"], stage, backward)) // BF16 * FP32


def _later_torch(stage: Stage, backward: int | None) -> int:
    """What the run's torch no longer keeps of what gptcalc counts (see the module's docstring)."""
    done = stage.n if backward is None else backward
    outputs = 0 if stage.last else done
    input_grads = 0 if stage.first else (done if backward is None else max(done - 1, 0))
    return (outputs + input_grads) * RESIDUAL


def _held_by_a_send(stage: Stage, j: int) -> int:
    """The run's Schedule1F1B (torch 2.13, _step_microbatches) waits its warmup's forward sends but keeps the last
    one it fired, micro-batch w − 2's, in `send_work` until the 1B1F loop ends (the loop's backwards are the first
    n − w + 1): that micro-batch's output outlives its backward, the j = w − 2 one. The torch of December 2024
    kept every output until the next step anyway (`output_chunks`, counted)."""
    w = stage.warmup
    return RESIDUAL if not stage.last and w - 2 < j <= stage.n - w else 0


def test_the_buffers_are_what_each_stage_keeps(run) -> None:
    n, (first, middle, last) = run[0], run[1]
    assert all(r["residual"] == RESIDUAL for r in run[1])
    assert first["grad_recv_buffers"] == middle["grad_recv_buffers"] == n * RESIDUAL
    assert middle["act_recv_buffers"] == last["act_recv_buffers"] == n * RESIDUAL
    assert first["act_recv_buffers"] == last["grad_recv_buffers"] == 0
    assert [r["gradients"] for r in run[1]] == GRADIENTS
    assert last["output_chunks"] == n * last["logits"]  # the last stage's outputs, the logits, kept


@pytest.mark.parametrize("index", range(STAGES - 1))
def test_a_non_last_stage_at_every_backward(run, index: int) -> None:
    """At its j-th backward stage i holds min(w, n − j) micro-batches in flight, w = min(n, p − i) (n = p:
    p − max(i, j)), each its 3 blocks' inputs (the embedding's output or the input receive buffer first) and its
    output, the buffers, and from the second backward on its whole gradients; in the run's torch one output more
    while a send holds it (`_held_by_a_send`)."""
    n, record = run
    stage = Stage(index, STAGES, n)
    assert len(record[index]["at_backward"]) == n
    for j, measured in enumerate(record[index]["at_backward"]):
        in_flight = stage.in_flight(j) * DIMS["layers"] * RESIDUAL
        ours = in_flight + _buffers(stage, j) + (GRADIENTS[index] if j else 0) - _later_torch(stage, j)
        assert measured == ours + _held_by_a_send(stage, j), (index, j)


def test_the_last_stage_at_every_backward_and_at_the_merge(run) -> None:
    """The last stage runs one micro-batch at a time: its blocks' inputs (the receive buffer first), the head's
    input and the logits, beside the other receive buffers, the earlier micro-batches' logits (output_chunks),
    the input gradients and, from the second backward, the gradients; each loss a 4-byte scalar, the target
    (`scalars`) made inside the step. At the merge, every logits twice beside the gradients."""
    n, record = run
    stage, last, scalars = Stage(STAGES - 1, STAGES, n), record[-1], FP32 * n * DIMS["micro_batch"]
    for j, measured in enumerate(last["at_backward"]):
        ours = (DIMS["layers"] + 1) * RESIDUAL + (j + 1) * last["logits"] + _buffers(stage, j) \
            + (GRADIENTS[-1] if j else 0) - _later_torch(stage, j)
        assert measured == ours + 4 * (j + 1) + scalars, j
    merged = _buffers(stage, None) + 2 * n * last["logits"] + GRADIENTS[-1] - _later_torch(stage, None)
    assert last["at_merge"] == [merged + 4 * n + scalars]


def test_after_the_step_each_stage_keeps_its_buffers_and_gradients(run) -> None:
    """Until the next step: the receive buffers, the gradients, the last stage's outputs (its losses and the
    target are gone with the step)."""
    n, record = run
    for index, r in enumerate(record):
        stage = Stage(index, STAGES, n)
        outputs = n * r["logits"] if stage.last else 0
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
    assert [(name, layers) for name, layers, _, _ in t.stage_peaks] == [("stage 0 of 2 (first)", 16),
                                                                          ("stage 1 of 2 (last)", 16)]
    assert t.stage == Stage(1, 2, 2) and t.peak.name == "backward of micro-batch 2, through the loss"
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
    assert first.stage == Stage(0, 2, 2) and first.held.params == 128256 * 4096 + 16 * 218_112_000
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


@pytest.mark.parametrize("n", sorted(RECORDS))
def test_the_record_is_what_torch_keeps_now(request, n: int) -> None:  # noqa: ANN001
    """Runs the measurement (spawned gloo ranks) and compares it with the record."""
    if not request.config.getoption("--distributed"):
        pytest.skip("opt-in: pytest --distributed (spawns gloo ranks)")
    assert measure(n) == json.loads(RECORDS[n].read_text())


# torchtitan/parallelisms/pipelining_utils.py @ 9dec370, generate_split_points (1F1B: one stage a rank): the first
# stage ⌊L/p⌋ layers, each middle stage one more while L mod p lasts, the last the rest
@pytest.mark.parametrize(("layers", "pp", "split", "sizes"), [
    (126, 8, "torchtitan", (15, 16, 16, 16, 16, 16, 16, 15)),  # 126 = 8·15 + 6: stages 1-6 get the 6
    (127, 8, "torchtitan", (15, 16, 16, 16, 16, 16, 16, 16)),  # 7 left over, 6 middle stages: the last the rest
    (32, 2, "torchtitan", (16, 16)),
    (30, 4, "torchtitan", (7, 8, 8, 7)),  # 30 = 4·7 + 2
    (126, 8, "even", (16, 16, 16, 16, 16, 16, 16, 14)),  # ⌈126/8⌉ = 16 a stage, the last 126 − 7·16
    (126, 8, "15,16,16,16,16,16,16,15", (15, 16, 16, 16, 16, 16, 16, 15)),
    # torchtitan's pipeline_parallel_split_points: each names the first layer of the next stage
    (126, 8, "layers.15,layers.31,layers.47,layers.63,layers.79,layers.95,layers.111",
     (15, 16, 16, 16, 16, 16, 16, 15)),
    (126, 2, " 60 , 66 ", (60, 66)),
    (12, 5, "torchtitan", (2, 3, 3, 2, 2)),  # 12 = 5·2 + 2
    (13, 5, "even", (3, 3, 3, 3, 1)),  # ⌈13/5⌉ = 3 a stage, the last 13 − 4·3
])
def test_the_stage_split(layers: int, pp: int, split: str, sizes: tuple[int, ...]) -> None:
    assert stage_sizes(layers, pp, split) == sizes


def test_torchtitans_split_of_the_405b_model() -> None:
    """Llama 3.1 405B (its config.json: 126 layers, d_model 16,384, 128 heads of 128, 8 kv heads, d_ff 53,248,
    vocabulary 128,256, an untied head) on TP 8 × PP 8 as torchtitan splits it: 15 layers on the first and the last
    stage, 16 on the others. One layer on one of 8 GPUs: q and o 16,384²/8, k and v 16,384·1,024/8, gate, up and
    down 16,384·53,248/8, and its two norms whole; the embedding and the head 128,256·16,384/8 each."""
    layer = 2 * 16384 * 16384 // 8 + 2 * 16384 * 1024 // 8 + 3 * 16384 * 53248 // 8 + 2 * 16384
    table = 128256 * 16384 // 8
    spec, setup = load_spec("llama-3.1-405b"), Setup(1024, 1, gpus=64, tp=8, sp=True, pp=8, recompute="full")
    split = train_stages(spec, replace(setup, pp_split="torchtitan"))
    assert [(t.stage.index, t.held.stage_layers) for t in split] == [(0, 15), (1, 16), (6, 16), (7, 15)]
    assert [t.held.params for t in split] == [15 * layer + table, 16 * layer, 16 * layer, 15 * layer + 16384 + table]
    even = train_stages(spec, setup)
    assert [(t.stage.index, t.held.stage_layers) for t in even] == [(0, 16), (1, 16), (6, 16), (7, 14)]
    assert even[0].held.params == 16 * layer + table
    # the profile sets the split, an option beside it wins
    assert resolve("torchtitan", {})["pp_split"] == "torchtitan"
    assert resolve("torchtitan", {"pp_split": "even"})["pp_split"] == "even"
    assert resolve("megatron", {})["pp_split"] == "even"


@pytest.mark.parametrize(("split", "message"), [
    ("16,16", "--pp-split: 2 stages given, --pp is 4"),
    ("0,16,8,8", "--pp-split: every stage needs a layer or more (got 0,16,8,8)"),
    ("8,8,8,9", "--pp-split: the stages hold 33 layers, the model has 32"),
    ("layers.8,layers.16", "--pp-split: 3 stages given, --pp is 4"),
    ("8,8,x,8", "--pp-split: '8,8,x,8' is not even, torchtitan, a list of layers per stage"),
])
def test_a_split_that_does_not_fit_is_refused(split: str, message: str) -> None:
    """llama-2-7b has 32 layers."""
    result = CliRunner().invoke(main, ["train", "llama-2-7b", "--seq", "256", "--micro-batch", "1", "--gpus", "4",
                                       "--pp", "4", "--pp-split", split])
    assert result.exit_code == 2 and result.output.startswith(f"Error: {message}")
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_the_notes_name_each_stages_layers() -> None:
    """gpt2-small (12 layers) over 5 stages: torchtitan's profile splits 2, 3, 3, 2, 2; --pp-split beside it wins."""
    args = ["train", "gpt2-small", "--seq", "256", "--micro-batch", "1", "--gpus", "5", "--pp", "5", "--framework",
            "torchtitan"]
    titan = CliRunner().invoke(main, args, terminal_width=200).output
    assert "layers split as torchtitan's generate_split_points" in titan
    for line in ("stage 0 of 5 (first), 2 layers", "stage 1 of 5 (middle), 3 layers", "stage 4 of 5 (last), 2 layers"):
        assert line in titan
    given = CliRunner().invoke(main, [*args, "--pp-split", "3,3,2,2,2"], terminal_width=200).output
    assert "stage 0 of 5 (first), 3 layers" in given and "stage 4 of 5 (last), 2 layers" in given


@pytest.mark.parametrize(("layers", "pp", "message"), [
    # ⌈12/5⌉ = 3: 3, 3, 3, 3 and nothing for the fifth stage; torchtitan's split above: 2, 3, 3, 2, 2
    (12, 5, "--pp-split even: 12 layers at ⌈12/5⌉ = 3 a stage fill 4 of the 5 stages and leave stage 4 without a "
            "layer; give --pp-split torchtitan (2,3,3,2,2) or a list of each stage's layers"),
    # ⌈10/8⌉ = 2: five stages hold the 10; 10 = 8·1 + 2, torchtitan's two extra go to stages 1 and 2
    (10, 8, "--pp-split even: 10 layers at ⌈10/8⌉ = 2 a stage fill 5 of the 8 stages and leave stages 5-7 without a "
            "layer; give --pp-split torchtitan (1,2,2,1,1,1,1,1) or a list of each stage's layers"),
])
def test_an_even_split_that_leaves_a_stage_empty_is_refused(layers: int, pp: int, message: str) -> None:
    with pytest.raises(GptcalcError) as refused:
        stage_sizes(layers, pp, "even")
    assert str(refused.value) == message


def test_gpt2_small_over_five_stages_split_evenly_is_one_error_line() -> None:
    """gpt2-small has 12 layers; Megatron's default (the even split) would leave the fifth stage empty."""
    result = CliRunner().invoke(main, ["train", "gpt2-small", "--seq", "256", "--micro-batch", "1", "--gpus", "5",
                                       "--pp", "5"])
    assert result.exit_code == 2 and result.output.startswith("Error: --pp-split even: 12 layers at ⌈12/5⌉ = 3")
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


# Llama 3.1 70B (its config.json, calc's llama-3.1-70b preset: 80 layers, d_model 8,192, vocabulary 128,256) on 256
# GPUs, TP 8 with sequence parallelism × PP 8 × FSDP 4, 8,192 tokens a micro-batch, fully recomputed
RUN_70B = ["train", "llama-3.1-70b", "--seq", "8192", "--micro-batch", "1", "--gpus", "256", "--tp", "8", "--sp",
           "--pp", "8", "--zero", "3", "--recompute", "full"]


def _run_70b(microbatches: int | None):
    return train(load_spec("llama-3.1-70b"), Setup(8192, 1, gpus=256, tp=8, sp=True, pp=8, zero=3, recompute="full",
                                                   pp_microbatches=microbatches))


def test_more_microbatches_than_stages() -> None:
    """With 32 micro-batches over 8 stages stage 0 runs 8 forwards first and keeps 8 in flight through its 25th
    backward (the 24 after its first each followed by a forward); at that backward it holds, beside the gradients,
    one micro-batch more in flight than its peak at 8 micro-batches (its 2nd backward, 7 in flight) — 10 layer
    inputs of 8,192 × 8,192 × 2 B ÷ 8 and 8,192 int64 token ids — and 24 more stage outputs and output-gradient
    receive buffers, a residual each. The last stage keeps every micro-batch's logits (8,192 × 128,256 ÷ 8 × 2 B)
    to the step's end, where they are merged into a second copy."""
    residual = 8192 * 8192 * 2 // 8
    default, given, more = _run_70b(None), _run_70b(8), _run_70b(32)
    assert default.stage_peaks == given.stage_peaks
    (_, _, moment8, first8), (_, _, moment32, first32) = given.stage_peaks[0], more.stage_peaks[0]
    assert moment8.startswith("backward of micro-batch 2,") and moment32.startswith("backward of micro-batch 25,")
    assert first32 - first8 == 10 * residual + 8192 * 8 + 24 * 2 * residual
    assert [moment.split(",")[0] for _, _, moment, _ in more.stage_peaks[1:3]] == \
        ["backward of micro-batch 26", "backward of micro-batch 31"]  # stages 1 and 6: n − (p − i) + 1
    assert more.stage == Stage(7, 8, 32) and more.peak.name.startswith("the step ends")
    parts = dict(more.peak.parts)
    assert parts["pipeline: stage outputs (output_chunks)"] == parts["the merged outputs (torch.cat)"] \
        == 32 * 8192 * 128256 // 8 * 2


def test_the_option_sets_the_microbatches() -> None:
    out = CliRunner().invoke(main, [*RUN_70B, "--pp-microbatches", "32"], terminal_width=200).output
    assert "pipeline (1F1B, 32 micro-batches a step)" in out
    data = json.loads(CliRunner().invoke(main, [*RUN_70B, "--pp-microbatches", "32", "--json"]).output)
    assert data["setup"]["pp_microbatches"] == 32 and data["peak"]["allocated"] == _run_70b(32).allocated
    default = CliRunner().invoke(main, RUN_70B, terminal_width=200).output
    assert "pipeline (1F1B, 8 micro-batches a step)" in default
    import calc

    api = calc.train(calc.load("llama-3.1-70b"), seq=8192, micro_batch=1, gpus=256, tp=8, sp=True, pp=8, zero=3,
                     recompute="full", pp_microbatches=32).to_dict()
    assert api["setup"]["pp_microbatches"] == 32 and api["peak"]["allocated"] == data["peak"]["allocated"]


def test_torchtitans_own_default_is_a_note_not_a_change() -> None:
    """torchtitan's default micro-batches moved after the 405B runs' commit (90567fc98: p × V; 5e2033c75: the local
    batch ÷ pipeline_parallel_microbatch_size); the profile says so and counts p, the figure unchanged."""
    args = ["train", "llama-3.1-8b", "--seq", "2048", "--micro-batch", "1", "--gpus", "4", "--pp", "2", "--zero", "3"]
    titan = CliRunner().invoke(main, [*args, "--framework", "torchtitan"], terminal_width=400).output
    assert "torchtitan's own default micro-batches a pipeline step: pp at 9dec370" in titan
    given = CliRunner().invoke(main, [*args, "--framework", "torchtitan", "--pp-microbatches", "2"],
                               terminal_width=400).output
    assert "torchtitan's own default" not in given and titan.splitlines()[0] == given.splitlines()[0]


@pytest.mark.parametrize(("args", "message"), [
    (["--pp-microbatches", "4"], "--pp-microbatches: the micro-batches of a pipeline step need --pp 2 or more"),
    # torch 2.13's Schedule1F1B.__init__ raises for n_microbatches < num_stages
    (["--pp", "4", "--pp-microbatches", "2"], "--pp-microbatches: 2 micro-batches over 4 stages; torch's Schedule1F1B "
                                              "needs as many micro-batches as stages or more"),
    # torch 2.13's ScheduleInterleaved1F1B.__init__: max(1, 11 // 4) = 2 rounds, 11 % 2 != 0
    (["--pp", "4", "--pp-schedule", "interleaved-1f1b", "--pp-microbatches", "11"],
     "--pp-microbatches: interleaved 1F1B runs 11 micro-batches over 4 ranks in 2 rounds; 11 is not a multiple of 2"),
    (["--pp", "4", "--pp-microbatches", "0"], "Invalid value for '--pp-microbatches': 0 is not in the range 1<=x"),
])
def test_microbatches_a_schedule_cannot_run_are_one_error_line(args: list[str], message: str) -> None:
    """llama-2-7b has 32 layers: 4 stages of 8, or 8 of 4 under the interleaved schedule."""
    result = CliRunner().invoke(main, ["train", "llama-2-7b", "--seq", "256", "--micro-batch", "1", "--gpus", "4",
                                       *args])
    assert result.exit_code == 2 and result.output.startswith(f"Error: {message}"), result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize("more, says", [
    (["--pp", "4", "--gpus", "4"], "micro-batch 1 × seq 4,096, 3 pipeline steps of 4 micro-batches,"),  # n = pp
    (["--pp", "4", "--gpus", "4", "--pp-microbatches", "8"], "micro-batch 1 × seq 4,096, 3 pipeline steps of 8 "
                                                              "micro-batches,"),
    (["--gpus", "1"], "micro-batch 1 × 3 accumulated × seq 4,096,"),  # no pipeline: 3 micro-batches a step
])
def test_title_says_what_grad_accumulation_runs_under_pp(more: list[str], says: str) -> None:
    """Under --pp, --grad-accumulation K is K pipeline steps an optimizer step, each of --pp-microbatches
    micro-batches (torchtitan's trainer.py: one forward_backward_step per group), not K micro-batches."""
    result = CliRunner().invoke(main, ["train", "llama-3-8b", "--seq", "4096", "--micro-batch", "1",
                                       "--grad-accumulation", "3", *more], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert says in result.output, result.output
