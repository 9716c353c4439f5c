"""A preset and the config.json it comes from get the same --engine trtllm verdict (trtllm_models.refuse_unbuilt).

TensorRT-LLM builds by config.json's architectures[0] (tensorrt_llm/_torch/models/_arch_index.py at 065ff9e937), and
so does gptcalc: a preset carries that class as its spec's `architecture`, so `memory gpt2-small --engine trtllm` stops
where `memory tests/configs/model_types/gpt2.json --engine trtllm` does. A preset transcribing a config (`config:`)
is checked against that config read as a config.json; a flat spec names its source's class itself, and where the
same repository's config.json is kept in tests/configs (SOURCES.yaml hf_repo), against that file. GPT-3 175B's
source is a paper, not a config.json, so it names none and is not checked (as a user's YAML spec is not).
"""

from __future__ import annotations

import pytest
import yaml

from calc.analysis.memory.trtllm_models import refuse_unbuilt
from calc.errors import GptcalcError
from calc.spec.presets import PRESET_DIR, compiled_preset, preset_names
from oracle import CONFIG_DIR, preset_config, saved, spec_of

SOURCES = yaml.safe_load((CONFIG_DIR / "model_types" / "SOURCES.yaml").read_text())
KEPT = {entry["hf_repo"].split()[0]: name for name, entry in SOURCES.items()}  # hub repo -> kept config file


def _builds(spec: object) -> bool:
    try:
        refuse_unbuilt(spec, "trtllm")
    except GptcalcError:
        return False
    return True


def _preset(name: str) -> dict:
    return yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text())


def _source_repo(source: str) -> str | None:
    """org/name of a https://huggingface.co/org/name/blob/main/config.json source; None for any other source."""
    prefix, suffix = "https://huggingface.co/", "/blob/main/config.json"
    return source[len(prefix):-len(suffix)] if source.startswith(prefix) and source.endswith(suffix) else None


@pytest.mark.parametrize("name", preset_names())
def test_a_preset_gets_its_configs_trtllm_verdict(name: str) -> None:
    preset, spec = _preset(name), compiled_preset(name)  # compiled.json: what the CLI reads for a preset
    if "config" in preset:
        config = spec_of(preset_config(name))
        assert config.architecture is not None and spec.architecture == config.architecture, name
        assert _builds(spec) == _builds(config), name
        return
    repo = _source_repo(preset["source"])
    assert (spec.architecture is None) == (repo is None), (name, preset["source"], spec.architecture)
    if repo in KEPT:  # the same repository's config.json, kept: it names the class the preset says
        kept = spec_of(saved(KEPT[repo]))
        assert spec.architecture == kept.architecture and _builds(spec) == _builds(kept), name


def test_gpt2_is_refused_as_a_preset_as_its_config_is() -> None:
    """GPT2LMHeadModel is not in TensorRT-LLM's registry: the preset used to answer while gpt2.json was refused."""
    for spec in (compiled_preset("gpt2-small"), spec_of(saved("gpt2.json"))):
        with pytest.raises(GptcalcError, match="has no model for GPT2LMHeadModel"):
            refuse_unbuilt(spec, "trtllm")
