"""Tensor parallelism as torchtitan runs it (torch's DTensor plan): what `train --tp-impl dtensor` counts,
against what each rank kept when the plan ran for real on two gloo ranks (tests/dtensor_tp.py).

The measurement, recorded in tests/data/dtensor_tp.json (world sizes 1 and 2, every rank), takes about a
minute; `pytest --distributed` runs it again and checks the record. The default run checks
the recorded bytes against the formulas: a column-parallel linear (wq/wk/wv, w1/w3, the output
projection) keeps its all-gathered input, n·d, where Megatron keeps the 1/tp shard; the norms, the
heads' and the MLP's hidden tensors and the checkpointed layer inputs are split as Megatron splits them;
the loss under loss_parallel keeps 4 bytes per token and vocabulary entry of the shard but adds 10 at
forward's peak and 12 at backward's (plain F.cross_entropy: 6 and 8).
"""

from __future__ import annotations

import json

import pytest

from calc.analysis.train import Setup, train
from calc.analysis.train.activations import activation_terms, layer_terms
from calc.analysis.train.frameworks import resolve
from calc.analysis.train.loss import LOSS_PARALLEL, LOSSES
from calc.spec.model import spec_from_dict
from dtensor_tp import DIMS, LOSS_DIMS, RECORD, measure

FP32, BF16 = 4, 2
D, B, T, L = DIMS["d"], DIMS["batch"], DIMS["seq"], DIMS["layers"]
N = B * T


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def block() -> object:
    """gptcalc's spec of the measured model (torchtitan's layer: RMSNorm, MHA, SwiGLU, untied head)."""
    return spec_from_dict({"name": "torchtitan-tiny", "family": "llama", "vocab_size": DIMS["vocab"], "n_positions": T,
                           "d_model": D, "n_layers": L, "n_heads": DIMS["heads"], "d_ff": DIMS["ff"]},
                          origin="tests/dtensor_tp.py")


@pytest.fixture(scope="module")
def terms(block) -> tuple:
    (layer,) = block.blocks.values()
    return layer_terms(layer, D, B, T, FP32, "none", True), activation_terms(block, B, T, FP32, "none")


def _layer(saved: dict, index: int) -> int:
    return sum(size for where, size in saved["per_module"].items() if where.startswith(f"layers.{index}."))


def _exact(rank: dict) -> dict:
    """What a run keeps exactly (the loss's peaks vary by a few per-token scalars: tests/dtensor_tp.py)."""
    return {"saved": rank["saved"], "checkpointed": rank["checkpointed"], "kept": rank["loss"]["kept"]}


def test_every_rank_kept_the_same(record) -> None:
    assert all(_exact(rank) == _exact(record["2"][0]) for rank in record["2"])


@pytest.mark.parametrize(("world", "sp"), [(1, False), (2, True)])
def test_a_layer_keeps_the_gathered_linear_inputs(record, terms, world: int, sp: bool) -> None:
    """Each layer's saved bytes equal layer_terms with the column-parallel inputs gathered; Megatron's
    split would be short by the two inputs' other shards (attention's and the MLP's, n·d/2 each)."""
    layer, _ = terms
    saved = record[str(world)][0]["saved"]
    gathered = sum(t.bytes(world, sp, gathered=True) for t in layer)
    assert [_layer(saved, i) for i in range(L)] == [gathered] * L
    if world > 1:
        assert gathered - sum(t.bytes(world, sp) for t in layer) == 2 * (N * D - N * D // world) * FP32
        # the local shapes wq and w1 saved: every token of the sequence, all d columns
        assert set(map(tuple, saved["linear_input_shapes"].values())) == {(N, D)}


@pytest.mark.parametrize("world", [1, 2])
def test_outside_the_layers(record, terms, world: int) -> None:
    """The ids, the final norm (a 1/tp shard), the head's gathered input and the fp32 log-softmax of the
    vocabulary shard; torchtitan's rotary table is a model buffer, not an activation, so it is left out."""
    _, outside = terms
    saved = record[str(world)][0]["saved"]["per_module"]
    counted = sum(t.bytes(world, world > 1, gathered=True) for t in outside if not t.label.startswith("rotary"))
    assert saved["tok_embeddings"] + saved["norm"] + saved["output"] + saved["loss"] == counted
    assert saved["output"] == N * D * FP32


@pytest.mark.parametrize("world", [1, 2])
def test_full_checkpointing_keeps_each_layers_shard(record, block, world: int) -> None:
    """checkpoint_wrapper around each block keeps its input, the 1/tp sequence shard, as gptcalc counts."""
    (layer,) = block.blocks.values()
    (kept,) = layer_terms(layer, D, B, T, FP32, "full")
    assert record[str(world)][0]["checkpointed"] == L * kept.bytes(world, world > 1, gathered=True)


@pytest.mark.parametrize("world", [1, 2])
def test_the_loss_under_loss_parallel(record, world: int) -> None:
    """bf16 head and loss: kept after forward, the log-softmax (4 B an entry of the shard) and the head's
    gathered input; forward's and backward's peaks beyond it: plain F.cross_entropy's 6 and 8 on one
    rank, loss_parallel's 10 and 12 on two (per-token scalars and the two gradients allowed for)."""
    n, vocab = LOSS_DIMS["batch"] * LOSS_DIMS["seq"], LOSS_DIMS["vocab"] // world
    loss = LOSS_PARALLEL["fp32"] if world > 1 else LOSSES["fp32"]
    measured = record[str(world)][0]["loss"]
    head_input = n * LOSS_DIMS["d"] * BF16 if world > 1 else 0  # one rank: made before the measurement
    slack = 64 * n
    assert 0 <= measured["kept"] - loss.held * n * vocab - head_input <= slack
    assert 0 <= measured["forward_peak"] - loss.transient("forward", n, vocab, LOSS_DIMS["d"]) <= slack
    assert 0 <= measured["backward_peak"] - loss.transient("backward", n, vocab, LOSS_DIMS["d"]) <= slack


def test_torchtitan_profile_uses_dtensor_and_an_option_beside_it_wins() -> None:
    assert resolve("torchtitan", {})["tp_impl"] == "dtensor"
    assert resolve("torchtitan", {"tp_impl": "megatron"})["tp_impl"] == "megatron"
    assert "tp_impl" not in resolve(None, {})


def test_cli_takes_the_profile_and_an_option_beside_it() -> None:
    """`--framework torchtitan` counts DTensor's way and says so; `--tp-impl megatron` beside it wins."""
    from click.testing import CliRunner

    from calc.cli import main

    args = ["train", "llama-3.1-8b", "--seq", "4096", "--micro-batch", "1", "--gpus", "8", "--tp", "8", "--sp",
            "--framework", "torchtitan", "--recompute", "full"]
    titan, megatron = (CliRunner().invoke(main, args + extra + ["--json"]) for extra in ([], ["--tp-impl", "megatron"]))
    assert json.loads(titan.output)["setup"]["tp_impl"] == "dtensor"
    assert json.loads(megatron.output)["setup"]["tp_impl"] == "megatron"
    n, d = 4096, 4096  # tokens, Llama 3.1 8B's hidden_size
    head_input = "LM head input"
    assert json.loads(titan.output)["activations"]["outside"][head_input] == n * d * BF16
    assert json.loads(megatron.output)["activations"]["outside"][head_input] == n * d * BF16 // 8
    assert "all-gathered input" in CliRunner().invoke(main, args).output


def test_dtensor_adds_the_gathered_head_input_and_loss_parallel_temporaries() -> None:
    """Llama 3.1 70B at TP 8 with SP, 16 × 8192 tokens (torchtitan's Table 4 run): at backward's start
    through the loss DTensor holds the head's input whole (131,072 tokens × 8192 × 2 B, where Megatron's
    SP keeps 1/8) and loss_parallel's 4 more bytes per token and vocabulary entry of the 128,256/8 shard."""
    from calc.spec.load import load_spec

    spec = load_spec("llama-3.1-70b")
    setup = Setup(seq=8192, micro_batch=16, gpus=256, zero=3, tp=8, sp=True, recompute="full", precision="fsdp-mixed")
    megatron, dtensor = train(spec, setup), train(spec, Setup(**{**setup.__dict__, "tp_impl": "dtensor"}))
    n, d, shard = 16 * 8192, 8192, 128256 // 8

    def at_loss(t) -> int:  # noqa: ANN001
        return next(m.allocated for m in t.moments if m.name == "backward, through the loss")

    assert at_loss(dtensor) - at_loss(megatron) == (n * d - n * d // 8) * BF16 + 4 * n * shard


def test_the_record_is_what_the_plan_keeps_now(request) -> None:  # noqa: ANN001
    """Runs the measurement (spawned gloo ranks, about a minute) and compares it with the record."""
    if not request.config.getoption("--distributed"):
        pytest.skip("opt-in: pytest --distributed (spawns gloo ranks, about a minute)")
    recorded = json.loads(RECORD.read_text())
    for world in (1, 2):
        for then, now in zip(recorded[str(world)], measure(world), strict=True):
            assert _exact(now) == _exact(then)
            for peak in ("forward_peak", "backward_peak"):
                assert abs(now["loss"][peak] - then["loss"][peak]) <= 64 * LOSS_DIMS["batch"] * LOSS_DIMS["seq"]
