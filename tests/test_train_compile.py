"""`train --compile` against what torch.compile's partitioner saves, measured on the CPU.

tests/data/compiled_saves.json holds, per Llama layer shape, framework form and recompute mode, every
tensor a compiled layer's forward saved for backward (tests/compiled_block.py: saved-tensor hooks on
AOTAutograd's CompiledFunction, torch 2.13's inductor, bf16). The default run checks that
calc/analysis/train/compiled.py's rule equals each recorded total, byte for byte and in fp32 apart;
`--compile-measure` compiles the layers again (a minute or more each) and checks the record itself.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from calc.analysis.train.activations import layer_terms
from calc.analysis.train.compiled import (_op_attention_moment, _op_mlp_moment, compiled_backward_terms,
                                          compiled_layer_terms, compiled_op_backward_terms)
from calc.cli import main
from calc.spec.model import spec_from_dict

RECORD = json.loads((Path(__file__).parent / "data" / "compiled_saves.json").read_text())
BF16 = 2


def _block(sh: dict):  # noqa: ANN202
    """The recorded layer's shape as a one-layer Llama spec's block."""
    spec = spec_from_dict({"name": "compiled", "family": "llama", "vocab_size": 97, "n_positions": sh["seq"],
                           "n_layers": 1, "d_model": sh["d_model"], "n_heads": sh["n_heads"],
                           "n_kv_heads": sh["n_kv_heads"], "d_ff": sh["d_ff"]}, origin="compiled")
    (block,) = spec.blocks.values()
    return block


def _terms(entry: dict) -> list:
    """The rule's terms for the recorded layer (its shape as a one-layer Llama spec)."""
    sh = entry["shape"]
    args = (_block(sh), sh["d_model"], sh["batch"], sh["seq"], BF16, entry["recompute"])
    if entry["recompute"] == "full":
        return layer_terms(*args, True)
    return compiled_layer_terms(*args, repeat_kv=entry["form"] != "gqa")


def _generator_state(entry: dict) -> int:
    """A compiled checkpoint saves its device generator's state beside its input, preserve_rng_state=False
    notwithstanding: on the CPU torch.get_rng_state(), 5,056 bytes (uint8); on a GPU the CUDA generator's
    seed and offset, 16. Not an activation, and left out of the rule."""
    state = [r for r in entry["saved"] if r[1] == "uint8"]
    assert state == ([[[torch.get_rng_state().nbytes], "uint8", torch.get_rng_state().nbytes]]
                     if entry["recompute"] == "full" else [])
    return sum(r[2] for r in state)


@pytest.mark.parametrize("entry", RECORD["entries"],
                         ids=[f"{e['form']}-{e['recompute']}-d{e['shape']['d_model']}" for e in RECORD["entries"]])
def test_the_rule_equals_what_inductor_saved(entry: dict) -> None:
    terms = _terms(entry)
    assert sum(t.bytes(1, False) for t in terms) == entry["total"] - _generator_state(entry)
    fp32 = sum(r[2] for r in entry["saved"] if r[1] == "float32")
    assert sum(t.bytes(1, False) for t in terms if t.bytes_per == 4) == fp32


def test_the_record_covers_each_form_and_mode() -> None:
    """Three shapes (GQA 2:1 and 3:1, MHA) of each framework's form under each of its modes."""
    seen = {(e["form"], e["recompute"]) for e in RECORD["entries"]}
    assert seen == {("torchtitan", r) for r in ("none", "full", "op")} | {("torchtune", r) for r in ("none", "full")} \
        | {("gqa", r) for r in ("none", "op")}
    assert len(RECORD["entries"]) == 3 * len(seen)


def test_the_record_is_what_inductor_saves_now(request: pytest.FixtureRequest) -> None:
    if not request.config.getoption("--compile-measure"):
        pytest.skip("compiles 21 layers with inductor (minutes): pass --compile-measure")
    from compiled_block import measure_all

    assert measure_all() == RECORD["entries"]


@pytest.mark.parametrize(("args", "says"), [
    (("gpt2-small", "--compile"), "measured for a Llama layer"),
    (("llama-3.2-1b", "--compile", "--recompute", "selective"), "--recompute none, op or full"),
    (("llama-3.2-1b", "--compile", "--lora-rank", "8", "--recompute", "none"), "with LoRA only under full"),
    # the layers --checkpoint-every leaves unchecked would keep a compiled frozen layer's saves, not measured
    (("llama-3.2-1b", "--compile", "--lora-rank", "8", "--recompute", "full", "--checkpoint-every", "2"),
     "with LoRA only under full on every layer"),
])
def test_compile_outside_what_was_measured_is_refused(args: tuple[str, ...], says: str) -> None:
    result = CliRunner().invoke(main, ["train", *args, "--seq", "64", "--micro-batch", "1"])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output


def test_compile_drops_the_eager_norms_and_silu_from_a_layer() -> None:
    """llama-3.2-1b, micro-batch 1 × 1,024 tokens, no recompute: the compiled layer keeps neither the
    two norms' normed x nor SiLU's output, and its rsqrt in fp32 (two per token) instead of bf16; K and V
    at the kv heads both ways (no --repeat-kv)."""
    def layer(*extra: str) -> int:
        out = CliRunner().invoke(main, ["train", "llama-3.2-1b", "--seq", "1024", "--micro-batch", "1", "--json", *extra])
        (kind,) = json.loads(out.output)["activations"]["layers"]
        return kind["per_layer"]

    n, d, d_ff = 1024, 2048, 8192  # llama-3.2-1b: hidden_size 2048, intermediate_size 8192 (its config.json)
    assert layer() - layer("--compile") == 2 * n * d * BF16 + n * d_ff * BF16 + 2 * n * BF16 - 2 * n * 4


def test_compiled_and_eager_flash_keep_one_log_sum_exp() -> None:
    """A Llama-3.2-1B layer (hidden_size 2048, 32 attention heads, 8 KV heads, intermediate_size 8192: its
    config.json), 1 x 1,024 tokens: eager with a flash kernel and compiled, the layer keeps the same fp32
    log-sum-exp, one a query row and head, 32 x 1,024 x 4 B, split by tensor parallelism."""
    block = _block({"seq": 1024, "d_model": 2048, "n_heads": 32, "n_kv_heads": 8, "d_ff": 8192})
    for terms in (layer_terms(block, 2048, 1, 1024, BF16, "none", True),
                  compiled_layer_terms(block, 2048, 1, 1024, BF16, "none")):
        (lse,) = [t for t in terms if "log-sum-exp" in t.label]
        assert (lse.label, lse.elements * lse.bytes_per, lse.split) == ("fused attention: log-sum-exp (fp32)",
                                                                         32 * 1024 * 4, "tp")


BACKWARD = json.loads((Path(__file__).parent / "data" / "compiled_backward.json").read_text())
LOSS_SCALAR = 4  # the test loss's out.float().sum(): its gradient, one fp32 scalar (ones_like), in every record


def _reused(entry: dict) -> set[int]:
    """What the rule may exceed a record by: gradients that took over a dead activation's buffer of the same
    size (compiled_backward.py), so that the allocator saw them as activations: the layer input's (n·d),
    and where the tokens equal the width the three MLP weights' too (d·d_ff = n·d_ff)."""
    sh = entry["shape"]
    n, d = sh["batch"] * sh["seq"], sh["d_model"]
    mlp = {n * d * BF16 + 3 * n * sh["d_ff"] * BF16} if n == d else set()
    return {0, n * d * BF16} | mlp


@pytest.mark.parametrize("entry", [e for e in BACKWARD["entries"] if e["recompute"] == "full"],
                         ids=[f"{e['form']}-d{e['shape']['d_model']}-n{e['shape']['batch'] * e['shape']['seq']}"
                              for e in BACKWARD["entries"] if e["recompute"] == "full"])
def test_the_backward_rule_against_the_allocator(entry: dict) -> None:
    """A fully checkpointed compiled layer's backward: the rule (the rebuilt layer, the gradient arriving and
    the MLP's three gradient temporaries) equals what the CPU allocator held at the peak, less only a
    gradient that reused an activation's buffer (`_reused`); exactly for the shapes chosen to rule that out."""
    from compiled_backward import EXTRA
    from compiled_block import Shape

    sh = entry["shape"]
    rule = sum(t.bytes(1, False) for t in compiled_backward_terms(
        _block(sh), sh["d_model"], sh["batch"], sh["seq"], BF16, repeat_kv=entry["form"] != "gqa"))
    assert rule - (entry["total"] - LOSS_SCALAR) in _reused(entry)
    if Shape(**sh) in EXTRA:  # tokens unlike every width: nothing reused (d128 reused the input's gradient)
        assert rule == entry["total"] - LOSS_SCALAR


OP = [e for e in BACKWARD["entries"] if e["recompute"] == "op"]


@pytest.mark.parametrize("entry", OP, ids=[f"{e['form']}-d{e['shape']['d_model']}" for e in OP])
def test_the_op_backward_rule_against_the_allocator(entry: dict) -> None:
    """A compiled layer under the per-op policy: the allocator's peak is one of the two moments the rule names
    (the MLP's backward, or the attention's where inductor left the MLP weights' gradients to the end), byte
    for byte, and the rule, the larger, is never below it. Where the tokens equal the width (d64 at 64) every
    weight's gradient has an activation's size (d·d = n·d, d·kv = n·kv, d·d_ff = n·d_ff), inductor writes them
    into dead activations' buffers and the allocator counts those as gradients: the record is lower."""
    sh = entry["shape"]
    block, d, b, s, rk = _block(sh), sh["d_model"], sh["batch"], sh["seq"], entry["form"] != "gqa"
    total = lambda terms: sum(t.bytes(1, False) for t in terms)  # noqa: E731
    moments = {total(_op_mlp_moment(block, d, b * s, BF16)), total(_op_attention_moment(block, d, b, s, BF16, rk))}
    measured = entry["total"] - LOSS_SCALAR
    assert total(compiled_op_backward_terms(block, d, b, s, BF16, rk)) == max(moments) >= measured
    assert (measured in moments) == (b * s != d)


def test_the_backward_record_covers_each_form_and_shape() -> None:
    from compiled_block import FORMS, SHAPES

    seen = {(e["form"], e["recompute"]) for e in BACKWARD["entries"]}
    assert seen == {(f, r) for f, modes in FORMS.items() for r in modes}
    assert len(BACKWARD["entries"]) == (len(SHAPES) + 2) * len(seen)


def test_the_backward_record_is_what_the_allocator_holds_now(request: pytest.FixtureRequest) -> None:
    if not request.config.getoption("--compile-measure"):
        pytest.skip("compiles 35 layers with inductor (minutes): pass --compile-measure")
    from compiled_backward import measure_all

    assert measure_all() == BACKWARD["entries"]


def test_the_rebuilt_moment_counts_the_compiled_backward() -> None:
    """llama-3.2-1b, 1 × 1,024 tokens, fully checkpointed and compiled: the last layer's backward holds what the
    compiled layer keeps without recompute (the arriving gradient in its input's place) and the MLP's three
    gradient temporaries; under LoRA the eager rebuilt layer stands in."""
    def run(*extra: str) -> dict:
        out = CliRunner().invoke(main, ["train", "llama-3.2-1b", "--seq", "1024", "--micro-batch", "1", "--compile",
                                        "--json", *extra])
        return json.loads(out.output)

    def rebuilt(*extra: str) -> dict:
        (moment,) = [m for m in run("--recompute", "full", *extra)["moments"] if "recomputed" in m["moment"]]
        return moment["parts"]

    (kind,) = run("--recompute", "none")["activations"]["layers"]
    n, d_ff = 1024, 8192  # llama-3.2-1b: intermediate_size 8192 (its config.json)
    assert rebuilt()["one compiled layer's backward working set (rebuilt)"] == kind["per_layer"] + 3 * n * d_ff * BF16
    assert "one layer's activations rebuilt" in rebuilt("--lora-rank", "8")


@pytest.mark.parametrize(("extra", "noted"), [(("--lora-rank", "8"), True), ((), False)])
def test_the_output_says_a_compiled_lora_layer_is_rebuilt_as_the_eager_one(extra: tuple[str, ...], noted: bool) -> None:
    """A compiled layer's backward is measured for full training only (tests/compiled_backward.py): under LoRA the
    rebuilt layer counted is the eager frozen one, and the output says so."""
    out = CliRunner().invoke(main, ["train", "llama-3.2-1b", "--seq", "1024", "--micro-batch", "1", "--compile",
                                    "--recompute", "full", *extra], terminal_width=400).output
    assert ("--compile with LoRA: the layer rebuilt in a checkpointed backward is counted as the eager one" in out) is noted


LORA = json.loads((Path(__file__).parent / "data" / "compiled_lora.json").read_text())


def test_the_compiled_lora_record_covers_its_targets_and_holds_only_the_layer_widths() -> None:
    """tests/data/compiled_lora.json: every target set on both shapes, and every block alive at the backward's peak
    one of the layer's widths: n·d_ff, n·d or n·r bf16 (r 8), the log-sum-exp (B·h·T fp32), an fp32 per token,
    and the loss's 4-byte gradient."""
    from compiled_backward import EXTRA
    from compiled_lora import RANK, TARGETS

    assert [(tuple(e["targets"]), e["shape"]) for e in LORA["entries"]] == \
        [(t, asdict(shape)) for shape in EXTRA for t in TARGETS]
    for e in LORA["entries"]:
        sh = e["shape"]
        n = sh["batch"] * sh["seq"]
        widths = {2 * n * sh["d_ff"], 2 * n * sh["d_model"], 2 * n * RANK, 4 * sh["batch"] * sh["n_heads"] * sh["seq"],
                  4 * n, 4}
        assert set(e["alive"]) <= widths and sum(e["alive"]) == e["total"]


def test_the_compiled_lora_record_is_what_the_allocator_holds_now(request: pytest.FixtureRequest) -> None:
    if not request.config.getoption("--compile-measure"):
        pytest.skip("compiles 32 LoRA layers with inductor (minutes): pass --compile-measure")
    from compiled_lora import measure_all

    assert measure_all() == LORA["entries"]


def test_the_op_moment_counts_the_compiled_backward() -> None:
    """llama-3.2-1b, 1 × 1,024 tokens, per-op recompute: compiled, the last layer's backward holds the MLP
    backward's moment (its d_ff = 4d makes it the larger): 3·n·d and 5·n·d_ff bf16 and the MLP norm's fp32
    rsqrt; eager nothing rebuilt is counted, so the moment is not there."""
    def last_layer(*extra: str) -> list[dict]:
        out = CliRunner().invoke(main, ["train", "llama-3.2-1b", "--seq", "1024", "--micro-batch", "1", "--recompute",
                                        "op", "--json", *extra])
        return [m["parts"] for m in json.loads(out.output)["moments"] if m["moment"] == "backward, the last layer"]

    n, d, d_ff = 1024, 2048, 8192  # llama-3.2-1b: hidden_size 2048, intermediate_size 8192 (its config.json)
    (compiled,) = last_layer("--compile")
    assert compiled["one compiled layer's backward working set (rebuilt)"] == n * (3 * d + 5 * d_ff) * BF16 + n * 4
    assert last_layer() == []
