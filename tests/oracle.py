"""transformers as the test oracle: its own model of a config, built on the meta device, counted.

`transformers_total(config)` is the reference every supported config.json must match exactly:
`AutoModelForCausalLM.from_config` on the meta device (no memory, any size), parameters summed
once each (a tied head shares the embedding's tensor and appears once). For a multimodal config
the language model alone is built from its text config, which is what gptcalc counts as the total.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
# One real config.json per model_type (tests/configs/model_types/SOURCES.yaml has their URLs).
MODEL_TYPE_CONFIGS = sorted((CONFIG_DIR / "model_types").glob("*.json"))


def config_files() -> list[Path]:
    """Every real config.json: those kept under tests/configs/, and the presets that transcribe one
    (presets/<name>.yaml with the config.json verbatim under `config:`) that is not already one of
    those (a flagship's preset is the tested file verbatim: checked once, not twice)."""
    from calc.spec.presets import PRESET_DIR

    kept = sorted(p for p in CONFIG_DIR.rglob("*.json") if not p.name.endswith(".index.json"))
    seen = [read_config(p) for p in kept]
    presets = [p for p in PRESET_DIR.glob("*.yaml") if "config" in (_yaml(p) or {})]
    return kept + sorted(p for p in presets if read_config(p) not in seen)


def read_config(path: Path) -> dict[str, Any]:
    """The config.json mapping of a tests/configs file or of a preset."""
    if path.suffix == ".yaml":
        return _yaml(path)["config"]
    return json.loads(path.read_text())


def _yaml(path: Path) -> Any:
    """A YAML file, by libyaml's safe loader where PyYAML has it (the pure one took ~4 ms a preset, and the
    configs are listed at every collection)."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def preset_config(name: str) -> dict[str, Any]:
    from calc.spec.presets import PRESET_DIR

    return read_config(PRESET_DIR / f"{name}.yaml")


def transformers_model(config: dict[str, Any]) -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from calc.arch import transformers_type, transformers_view
    from calc.arch.fallback import whole_class

    config = transformers_view(config)  # minimax_m1: its own code's keys as transformers' MiniMax names them
    # {"__float__": "Infinity"} back to the float, as transformers' from_pretrained reads its own config.json
    data = transformers.PreTrainedConfig._decode_special_floats(dict(config))
    data.pop("model_type")
    # kimi_k2, which transformers has no class for: DeepseekV3 built from the same keys, as its config says
    hf_config = transformers.AutoConfig.for_model(transformers_type(config, "test"), **data)
    named = (config.get("architectures") or [None])[0]
    # the class the config names, else its model_type's image-text class (Moonshot's configs name
    # KimiK25ForConditionalGeneration, transformers' is Kimi_K25ForConditionalGeneration)
    whole_cls = whole_class(config)
    whole = "vision_config" in config and (named is None or whole_cls is not None)
    if "text_config" in config and not whole:
        hf_config = hf_config.get_text_config()
    with torch.device("meta"):
        if hf_config.model_type in WRAPPED:
            return wrapped_language_model(hf_config)
        if whole and named:
            return whole_cls._from_config(hf_config)
        if whole:  # a preset's transcription without `architectures`: the model_type's image-text class
            return transformers.AutoModelForImageTextToText.from_config(hf_config)
        return transformers.AutoModelForCausalLM.from_config(hf_config)


# Text configs transformers has no causal-LM class for: the multimodal model_type whose language model
# and head they are (Step-3.7's step3p5 text config; its vision tower kept to one small layer).
WRAPPED = {"step3p5": ("step3p7", {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                                   "image_size": 28, "patch_size": 14})}


def wrapped_language_model(text_config: Any) -> Any:
    """The language model and LM head of the multimodal model built around `text_config`, as one module."""
    torch, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    outer, vision = WRAPPED[text_config.model_type]
    config = transformers.AutoConfig.for_model(outer, text_config=text_config.to_dict(), vision_config=vision)
    model = transformers.AutoModelForImageTextToText.from_config(config)
    return torch.nn.ModuleDict({"model": model.model.language_model, "lm_head": model.lm_head})


def transformers_count(config: dict[str, Any]) -> int:
    """transformers' parameter count of a config mapping (copied: transformers consumes its dict)."""
    return sum(p.numel() for p in transformers_model(copy.deepcopy(config)).parameters())


def spec_of(config: dict[str, Any]) -> Any:
    """gptcalc's spec of a config mapping, through its adapter."""
    from calc.arch import spec_dict
    from calc.spec.model import spec_from_dict

    return spec_from_dict(spec_dict(copy.deepcopy(config), "test"), "test")


def saved(name: str) -> dict[str, Any]:
    """A config kept under tests/configs/model_types/."""
    return json.loads((CONFIG_DIR / "model_types" / name).read_text())


@functools.lru_cache(maxsize=None)
def transformers_sizes(path: Path) -> dict[str, int]:
    """Each parameter of transformers' model of a config file, by name (a tied one once), built once a session:
    the total and the decoder-and-towers split of tests/test_arch.py read the same model."""
    return {name: p.numel() for name, p in transformers_model(read_config(path)).named_parameters()}


def transformers_total(path: Path) -> int:
    return sum(transformers_sizes(path).values())
