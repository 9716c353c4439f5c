"""`train --lora-targets`: a target that adapts nothing in the model is refused, naming it and the model's targets.

PEFT refuses a config none of whose targets matches (peft 0.21.2, tuners/tuners_utils.py: NoMatchingPeftModuleError,
"Target modules ... not found in the base model"); gptcalc refuses each target that matches nothing, which would
otherwise be counted as adapted and keeping nothing. A target only some layers have stays valid, as PEFT takes it.
"""

from __future__ import annotations

import pytest

import calc
from cli_checks import check_run

LORA = ["--seq", "64", "--micro-batch", "1", "--lora-rank", "8"]


@pytest.mark.parametrize(("model", "targets", "message"), [
    # Qwen3-8B is dense (config.json: no num_experts): no expert stack to adapt
    ("qwen3-8b", "q,experts_down",
     "qwen3-8b has no experts_down to adapt (its targets: q, k, v, o, gate, up, down, head)"),
    ("qwen3-8b", "q,experts_gate_up,experts_down",
     "qwen3-8b has none of experts_gate_up, experts_down to adapt (its targets: q, k, v, o, gate, up, down, head)"),
    # GPT-2's MLP is c_fc and c_proj: no gate
    ("gpt2", "q,gate", "gpt2-small has no gate to adapt (its targets: q, k, v, o, up, down, head)"),
    # Qwen3-30B-A3B has experts only (no dense MLP, no shared expert): beside a stack, gate reaches nothing
    ("qwen3-30b-a3b", "gate,experts_down", "qwen3-30b-a3b has no gate to adapt (its targets: q, k, v, o, head, "
     "experts_gate_up, experts_down; with an expert stack targeted, gate, up and down adapt only dense MLPs and "
     "shared experts)"),
    # Mamba-Codestral has Mamba2 mixers only, no MLP: the default targets (every layer matrix) find none
    ("mamba-codestral-7b", None, "mamba-codestral-7b has none of q, k, v, o, gate, up, down to adapt (its targets: head)"),
])
def test_a_target_the_model_lacks_is_refused(model: str, targets: str | None, message: str) -> None:
    result = check_run(["train", model, *LORA, *(["--lora-targets", targets] if targets else [])])
    assert result.exit_code == 2 and result.stderr == f"Error: --lora-targets: {message}\n"


@pytest.mark.parametrize(("model", "targets"), [("gpt2", None), ("qwen3-30b-a3b", "q,experts_gate_up,experts_down"),
                                                ("jamba-v0.1", "q,v")])
def test_a_target_some_layers_have_is_counted(model: str, targets: str | None) -> None:
    """The default takes the layer matrices the model has (GPT-2: no gate); a hybrid's q and v are on its attention
    layers only."""
    result = check_run(["train", model, *LORA, *(["--lora-targets", targets] if targets else [])])
    assert result.exit_code == 0


def test_a_hybrid_adapts_its_attention_layers_only() -> None:
    """Jamba-v0.1 (config.json: 32 layers, attn_layer_period 8, attn_layer_offset 4, 32 query and 8 KV heads of
    128, hidden 4096): q and v adapted on its 4 attention layers, r·(in + out) each.
    https://huggingface.co/ai21labs/Jamba-v0.1/blob/main/config.json"""
    result = calc.train(calc.load("jamba-v0.1"), seq=64, micro_batch=1, lora_rank=8, lora_targets=("q", "v"))
    assert result.to_json()["trained_params"] == 4 * 8 * ((4096 + 4096) + (4096 + 1024))


def test_the_api_refuses_a_target_the_model_lacks() -> None:
    with pytest.raises(calc.GptcalcError, match="qwen3-8b has no experts_down to adapt"):
        calc.train(calc.load("qwen3-8b"), seq=64, micro_batch=1, lora_rank=8, lora_targets=("q", "experts_down"))
