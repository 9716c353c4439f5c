"""LoRA on a checkpoint's fused linears: one adapter on a fused q|k|v or gate|up module, as PEFT makes it, against the
parameters PEFT trained on transformers' tiny models (tests/peft_fused.py, recorded in tests/data/peft_fused.json;
measured again here where peft is installed); a target naming part of a fused linear is refused; litgpt's and
torchtune's profiles keep an adapter per part (their own models: litgpt/lora.py LoRAQKVLinear, torchtune's
phi3_hf_to_tune split)."""

from __future__ import annotations

import json

import pytest

import calc
from calc.analysis.train import Setup, train
from cli_checks import check_run
from oracle import spec_of
from peft_fused import BATCH, KEPT, MODULES, RANK, RECORD, SEQ, measure, measure_kept, runs
from tiny_models import tiny_config

RECORDED = json.loads(RECORD.read_text())
MEASURED = RECORDED["trained"]
LORA = ["--seq", "2048", "--micro-batch", "1", "--lora-rank", "16"]


def _train(model_type: str, targets: str, **setup: object):  # noqa: ANN202
    spec = spec_of(tiny_config(model_type))
    return spec, train(spec, Setup(SEQ, BATCH, lora_rank=RANK, lora_targets=tuple(targets.split(",")), **setup))


def _trained(model_type: str, targets: str, **setup: object) -> int:
    return _train(model_type, targets, **setup)[1].held.adapter_params


@pytest.mark.parametrize(("model_type", "targets"), runs())
def test_an_adapter_on_a_fused_linear_trains_what_peft_trains(model_type: str, targets: str) -> None:
    assert _trained(model_type, targets) == MEASURED[model_type][targets]


@pytest.mark.parametrize("model_type", KEPT)
def test_a_layer_keeps_one_copy_and_one_a_output_per_fused_adapter(model_type: str) -> None:
    """PEFT's fp32 adapters on a bf16 base (precision "mixed": precision.py), every target: each adapted module keeps an
    fp32 copy of its input and A's output, one for a fused linear's parts together. Layer 0's input needs no gradient
    (the embedding is frozen) and is left out."""
    spec, t = _train(model_type, ",".join(MODULES[model_type]), norm_upcast=True)
    (_, _, terms), = t.layers
    assert RECORDED["kept"][model_type][1:] == [t.layer_bytes(terms)] * (spec.n_layers - 1)


def test_a_fused_linear_takes_one_adapter() -> None:
    """Tiny Phi-3 (tests/tiny_models.py: d 32, 4 query heads and 2 KV heads of 8, d_ff 48, 2 layers), rank 4:
    qkv_proj [32 → 64] takes 4·(32 + 64), gate_up_proj [32 → 96] 4·(32 + 96), where an adapter per part would take
    4·(3·32 + 64) and 4·(2·32 + 96)."""
    assert MEASURED["phi3"]["q,k,v"] == 2 * 4 * (32 + 64)
    assert MEASURED["phi3"]["gate,up"] == 2 * 4 * (32 + 96)


@pytest.mark.parametrize("framework", ["litgpt", "torchtune"])
def test_litgpt_and_torchtune_adapt_each_part(framework: str) -> None:
    """Their own models: litgpt's LoRAQKVLinear has lora_A [r·3, in] for q, k and v, torchtune splits qkv_proj into
    q, k, v and gate_up_proj into w1, w3; tiny Phi-3 as above, an adapter per part."""
    setup = calc.analysis.train.frameworks.resolve(framework, {})
    assert _trained("phi3", "q,k,v", lora_per_part=setup["lora_per_part"]) == 2 * 4 * (3 * 32 + 64)
    assert _trained("phi3", "gate,up", lora_per_part=setup["lora_per_part"]) == 2 * 4 * (2 * 32 + 96)


def test_phi3_mini_trains_what_peft_prints() -> None:
    """Phi-3-mini (presets/phi-3-mini.yaml: 32 layers, d 3072, 32 heads of 96, d_ff 8192), rank 16 on all seven:
    qkv_proj 16·(3072 + 9216), o_proj 16·(3072 + 3072), gate_up_proj 16·(3072 + 16384), down_proj 16·(8192 + 3072)
    a layer; PEFT 0.21.2's print_trainable_parameters on transformers 5.24's meta Phi3ForCausalLM:
    "trainable params: 25,165,824"."""
    result = check_run(["train", "phi-3-mini", *LORA, "--lora-targets", "q,k,v,o,gate,up,down", "--json"])
    per_layer = 16 * ((3072 + 9216) + (3072 + 3072) + (3072 + 16384) + (8192 + 3072))
    assert json.loads(result.stdout)["trained_params"] == 32 * per_layer == 25_165_824


@pytest.mark.parametrize(("model", "targets", "message"), [
    ("phi-3-mini", "q,v", "phi-3-mini fuses q, k, v into one linear (qkv_proj), which PEFT adapts whole: target q, k, "
                          "v together, not q, v alone"),
    ("phi-3-mini", "gate", "phi-3-mini fuses gate, up into one linear (gate_up_proj), which PEFT adapts whole: target "
                           "gate, up together, not gate alone"),
    ("gpt2", "q", "gpt2-small fuses q, k, v into one linear (c_attn), which PEFT adapts whole: target q, k, v "
                  "together, not q alone"),
    # tiiuae/falcon-7b-instruct's config.json (tests/configs/SOURCES.yaml)
    ("tests/configs/model_types/falcon.json", "k,v", "tiiuae/falcon-7b-instruct fuses q, k, v into one linear (query_key_value), which PEFT adapts whole: target "
                         "q, k, v together, not k, v alone"),
])
def test_part_of_a_fused_linear_is_refused(model: str, targets: str, message: str) -> None:
    result = check_run(["train", model, "--seq", "512", *LORA[2:], "--lora-targets", targets])
    assert result.exit_code == 2
    assert result.stderr == (f"Error: --lora-targets: {message} (litgpt's and torchtune's own models adapt each "
                             "part: --lora-per-part)\n")


@pytest.mark.parametrize("option", [["--framework", "litgpt"], ["--framework", "torchtune"], ["--lora-per-part"]])
def test_a_part_of_a_fused_linear_is_taken_per_part(option: list[str]) -> None:
    """litgpt's LoRAQKVLinear enables q and v alone (lora_query, lora_value), torchtune's split q_proj and v_proj
    take theirs: Phi-3-mini's 32 layers, rank 16, 16·(3072 + 3072) each."""
    result = check_run(["train", "phi-3-mini", *LORA, "--lora-targets", "q,v", *option, "--json"])
    assert json.loads(result.stdout)["trained_params"] == 32 * 2 * 16 * (3072 + 3072)


def test_lora_whole_overrides_the_profile() -> None:
    """--lora-whole beside litgpt's profile: PEFT's one adapter per fused module again (25,165,824, as above)."""
    result = check_run(["train", "phi-3-mini", *LORA, "--framework", "litgpt", "--lora-whole", "--json"])
    assert json.loads(result.stdout)["trained_params"] == 25_165_824


@pytest.mark.parametrize(("model_type", "targets"), [r for r in runs() if r[0] in ("phi3", "zamba2", "gpt2")])
def test_peft_still_trains_the_record(model_type: str, targets: str) -> None:
    """The live measurement, where peft is installed (not a project dependency)."""
    pytest.importorskip("peft")
    assert measure(model_type, targets) == MEASURED[model_type][targets]


def test_peft_still_keeps_the_record() -> None:
    pytest.importorskip("peft")
    assert measure_kept("phi3") == RECORDED["kept"]["phi3"]
