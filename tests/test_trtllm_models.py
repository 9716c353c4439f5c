"""TensorRT-LLM builds only the architectures its PyTorch backend registers (calc/analysis/memory/trtllm_models.py).

Sources: NVIDIA/TensorRT-LLM at 065ff9e93780bc0bdbfdbc7156a306ca14f5850c, tensorrt_llm/_torch/models/_arch_index.py
(MODEL_ARCH_TO_MODULE: JambaForCausalLM and BambaForCausalLM are absent, NemotronHForCausalLM and
Qwen3_5ForConditionalGeneration present) and modeling_auto.py (AutoModelForCausalLM._resolve_class takes
architectures[0]; unknown: "Unknown architecture for AutoModelForCausalLM"). The architectures are those of the
config.json files under tests/configs/model_types (their SOURCES.yaml).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from calc.cli import main
from calc.spec.load import load_spec

CONFIGS = "tests/configs/model_types"


@pytest.mark.parametrize("model_type, architecture", [
    ("jamba", "JambaForCausalLM"), ("nemotron_h", "NemotronHForCausalLM"),
    ("qwen3_5", "Qwen3_5ForConditionalGeneration"),  # a multimodal wrapper: the checkpoint's class, not its text model's
])
def test_a_config_keeps_the_class_engines_build(model_type: str, architecture: str) -> None:
    assert load_spec(f"{CONFIGS}/{model_type}.json").architecture == architecture


@pytest.mark.parametrize("command", [["memory", "--budget", "8xH200", "--seq", "32k"], ["memory", "--kv-memory", "8GiB"],
                                     ["fit", "--seq", "32k"], ["compare", "llama-3-8b"], ["compare", "--json"],
                                     ["report", "llama-3-8b", "-o", "-"]])
def test_trtllm_refuses_an_architecture_it_has_no_class_for(command: list[str]) -> None:
    """memory, fit, and compare and report (whose --engine sizes the context a server holds) alike."""
    result = CliRunner().invoke(main, [command[0], f"{CONFIGS}/jamba.json", "--engine", "trtllm", *command[1:]])
    assert result.exit_code == 2 and result.output == (
        "Error: --engine trtllm: TensorRT-LLM's PyTorch backend has no model for JambaForCausalLM "
        "(tensorrt_llm/_torch/models/_arch_index.py at 065ff9e937; it stops with \"Unknown architecture for "
        "AutoModelForCausalLM\")\n"), result.output


def test_a_built_architecture_and_a_preset_pass_the_check() -> None:
    """Nemotron-H is built; its states' pages are what stops the line (engines._refuse_unmodelled), not its class.
    A preset names its source config's class (tests/test_trtllm_presets.py): llama-3-8b's LlamaForCausalLM is built."""
    nemotron = CliRunner().invoke(main, ["memory", f"{CONFIGS}/nemotron_h.json", "--engine", "trtllm", "--kv-memory",
                                         "8GiB"])
    assert nemotron.exit_code == 2 and "nemotron_h keeps conv and recurrent states" in nemotron.output, nemotron.output
    llama = CliRunner().invoke(main, ["memory", "llama-3-8b", "--engine", "trtllm", "--budget", "H100"])
    assert llama.exit_code == 0 and "KV cache manager v2 device quota set to" in llama.output, llama.output
