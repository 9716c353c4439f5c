"""One adapter per Hugging Face `model_type`: config.json keys -> a `ModelSpec` mapping.

The registry below is plain data, so listing the supported types imports nothing; the adapter
module for a config is imported only when a config of its type is read, keeping start-up as fast
as a preset. Model types whose configs differ only in data share a module (mistral and qwen2 are
Llama's layout). `spec_dict(config, origin)` is the one entry point.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from calc.arch.common import KEYS
from calc.arch.config import Config, unwrap_text_config
from calc.errors import GptcalcError, UnsupportedModelType

__all__ = ["ADAPTERS", "CONVERTED", "SUPPORTED_MODEL_TYPES", "TRANSFORMERS_ALIASES", "spec_dict", "transformers_type",
           "transformers_view"]

# model_type -> the calc.arch module that reads it.
ADAPTERS: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3_text": "gemma",
    "gemma3n_text": "gemma_ple",
    "gemma4_text": "gemma_ple",
    "qwen3": "llama",
    "granite": "llama",
    "smollm3": "llama",
    "internlm3": "llama",
    "phi3": "phi3",
    "cohere": "cohere",
    "cohere2": "cohere",
    "olmo": "olmo",
    "olmo2": "olmo",
    "olmo3": "olmo",
    "exaone4": "exaone4",
    "llama4_text": "llama4",
    "ministral3": "llama",
    "mixtral": "mixtral",
    "phimoe": "mixtral",
    "granitemoe": "mixtral",
    "olmoe": "mixtral",
    "flex_olmo": "mixtral",
    "minimax_m2": "mixtral",
    "ernie4_5_moe": "ernie4_5_moe",
    "hunyuan_v1_moe": "hunyuan_v1_moe",
    "dots1": "dots1",
    "exaone_moe": "exaone4",
    "dbrx": "dbrx",
    "afmoe": "afmoe",
    "qwen2_moe": "qwen_moe",
    "qwen3_moe": "qwen_moe",
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
    "deepseek_v32": "deepseek",
    "deepseek_v4": "deepseek_v4",
    "glm_moe_dsa": "deepseek",
    "kimi_k2": "deepseek",
    "glm4_moe": "glm4_moe",
    "glm4_moe_lite": "deepseek",
    "glm4": "glm4",
    "gpt_oss": "gpt_oss",
    "mimo_v2_flash": "mimo_v2_flash",
    "laguna": "laguna",
    "gpt_bigcode": "gpt_bigcode",
    "gpt_neox": "gpt_neox",
    "gptj": "gptj",
    "opt": "opt",
    "bloom": "bloom",
    "falcon": "falcon",
    "mpt": "mpt",
    "phi": "phi",
    "stablelm": "stablelm",
    "starcoder2": "starcoder2",
    "qwen3_next": "qwen3_next",
    "qwen3_5_text": "qwen3_next",
    "qwen3_5_moe_text": "qwen3_next",
    "mamba2": "mamba",
    "falcon_h1": "falcon_h1",
    "longcat_flash": "longcat_flash",
    "kimi_linear": "kimi_linear",
    "minimax": "minimax",
    "minimax_m1": "minimax",
    "minimax_m3_vl_text": "minimax_m3",
    "olmo_hybrid": "olmo",
    "mamba": "mamba1",
    "falcon_mamba": "mamba1",
    "jamba": "mamba1",
    "nemotron_h": "mamba",
    "bamba": "mamba",
    "granitemoehybrid": "mamba",
    "zamba2": "zamba2",
    "lfm2": "lfm2",
    "lfm2_moe": "lfm2",
    "step3p5": "step3p7",
    "seed_oss": "llama_variants",
    "ernie4_5": "llama_variants",
    "hunyuan_v1_dense": "llama_variants",
    "arcee": "llama_variants",
    "apertus": "llama_variants",
}
SUPPORTED_MODEL_TYPES = tuple(sorted(ADAPTERS))

# model_types transformers has no config class for, whose config.json names the architecture that
# reads them: Kimi-K2's (moonshotai/Kimi-K2-Instruct, K2-Thinking) says model_type "kimi_k2" with
# architectures ["DeepseekV3ForCausalLM"] and its auto_map's DeepseekV3Config (transformers'
# Kimi-K2.5 config reads its kimi_k2 text_config as deepseek_v3 too). alias -> (model_type, architecture).
TRANSFORMERS_ALIASES = {"kimi_k2": ("deepseek_v3", "DeepseekV3ForCausalLM")}


# Configs written for a model's own code, whose keys transformers' class of the same model names
# otherwise: the module's `transformers_data` rewrites them (MiniMax-M1's attn_type_list, Kimi-K2.5's
# vt_hidden_size ...).
CONVERTED = {"minimax_m1": "calc.arch.minimax", "kimi_k25": "calc.towers.moonvit"}


def transformers_view(config: dict[str, Any]) -> dict[str, Any]:
    """The config as transformers' own class of its model reads it (converted where CONVERTED says)."""
    module = CONVERTED.get(config.get("model_type"))
    return import_module(module).transformers_data(config) if module else config


def transformers_type(config: dict[str, Any], origin: str) -> str:
    """The model_type transformers builds a config as: its own, or for an alias the model_type of the
    architecture it names (an alias whose `architectures` names another class is an error)."""
    model_type = config.get("model_type")
    if model_type not in TRANSFORMERS_ALIASES:
        return model_type
    target, architecture = TRANSFORMERS_ALIASES[model_type]
    named = config.get("architectures")
    if isinstance(named, list) and named and architecture not in named:
        raise GptcalcError(f"{origin}: architectures: {named!r}; a {model_type} config is read as {target} "
                           f"only when it names {architecture}")
    return target


# Adapters list a config's layers one by one (layer_types, rotary flags, MoE placement): a layer
# count no released model comes near is refused before a list that long is built.
MAX_CONFIG_LAYERS = 65_536


def _check_layer_count(config: dict[str, Any], origin: str) -> None:
    for key in KEYS["n_layers"]:
        value = config.get(key)
        if isinstance(value, int) and value > MAX_CONFIG_LAYERS:
            raise GptcalcError(f"{origin}: {key}: {value:,} layers; more than the {MAX_CONFIG_LAYERS:,} any config.json "
                               "describes (for a hypothetical model, --set n_layers on a YAML spec takes any size)")


def spec_dict(config: dict[str, Any], origin: str) -> dict[str, Any]:
    """Translate one config.json mapping to ModelSpec fields (validated by the caller): the decoder
    through its model_type's adapter, and a multimodal config's towers through `calc.towers`; towers
    of a kind not read there are named in `uncounted` (and a note), never silently left out."""
    text, left_out = unwrap_text_config(config, origin)
    model_type = text.get("model_type")
    if not isinstance(model_type, str) or model_type not in ADAPTERS:
        raise UnsupportedModelType(
            f"{origin}: model_type: {model_type!r} is not supported (supported: {', '.join(SUPPORTED_MODEL_TYPES)})",
            config, origin,
        )
    _check_layer_count(text, origin)
    transformers_type(text, origin)
    adapter = import_module(f"calc.arch.{ADAPTERS[model_type]}")
    spec = adapter.spec_dict(Config(text, origin))
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        spec["architecture"] = architectures[0]  # the whole checkpoint's class, a multimodal wrapper's included
    if left_out:
        spec.update(_towers(config, origin, spec, left_out))
        for engine in ("sglang", "llamacpp"):  # the tower reader's facts beside the adapter's
            spec[engine] = {**spec.get(engine, {}), **_engine_build(config, engine)}
    return spec


def _engine_build(config: dict[str, Any], engine: str) -> dict[str, Any]:
    """What a multimodal config's tower reader states of an engine (calc/spec/sglang.py, calc/spec/llamacpp.py)."""
    from calc.towers import engine_build

    return engine_build(config, engine)


def _towers(config: dict[str, Any], origin: str, spec: dict[str, Any], left_out: tuple[str, ...]) -> dict[str, Any]:
    """The towers field of a multimodal config; what its reader does not count (every tower when
    there is no reader, Gemma 4's audio encoder beside its vision tower) is `uncounted`, with a note."""
    from calc.towers import towers_of

    towers = towers_of(config, origin, spec["d_model"])
    if towers is None:
        note = f"{config['model_type']}: the language model only (text_config); the {left_out[0]} are not counted"
        return {"uncounted": left_out, "notes": (note, *spec.get("notes", ()))}
    unread = [m for m in ("vision", "audio") if config.get(f"{m}_config") is not None and m not in towers]
    if not unread:
        return {"towers": towers}
    missing = " and ".join(f"{m} encoder" for m in unread) + " and projector"
    note = f"{config['model_type']}: the {missing} are not counted"
    return {"towers": towers, "uncounted": (missing,), "notes": (note, *spec.get("notes", ()))}
