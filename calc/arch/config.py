"""Reading a config.json as an adapter needs it: typed, named, and never silently wrong.

`Config.int("num_attention_heads")` returns the first key present (several may be given: LLaMA-1
wrote `max_sequence_length` where later configs write `max_position_embeddings`), checks its type
strictly (`"false"` is not a bool, `true` is not an int) and names the key in every error.
Multimodal configs nest the language model under `text_config`: `unwrap_text_config` counts that,
and says what is left out.
"""

from __future__ import annotations

import math
from typing import Any

from calc.errors import GptcalcError

__all__ = ["REQUIRED", "Config", "untied_variant", "unwrap_text_config"]

REQUIRED: Any = object()


class Config:
    """One config.json mapping, where it came from, and the keys it left out that were filled with
    transformers' config-class defaults (`defaulted`, so the output can say so)."""

    def __init__(self, data: dict[str, Any], origin: str, defaulted: dict[str, Any] | None = None) -> None:
        self.data = data
        self.origin = origin
        self.defaulted = defaulted or {}

    def replace(self, data: dict[str, Any]) -> Config:
        """The same config read with other data (renamed or fixed keys), keeping what was defaulted."""
        return Config(data, self.origin, self.defaulted)

    def error(self, key: str, what: str) -> GptcalcError:
        return GptcalcError(f"{self.origin}: {key}: {what}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, *keys: str, default: Any = REQUIRED) -> Any:
        """The first of `keys` that is present and not null, else `default` (missing: an error)."""
        for key in keys:
            if self.data.get(key) is not None:
                return self.data[key]
        if default is REQUIRED:
            raise self.error(keys[0], "missing (required)")
        return default

    def _typed(self, keys: tuple[str, ...], default: Any, ok: Any, kind: str) -> Any:
        for key in keys:
            value = self.data.get(key)
            if value is not None:
                if not ok(value):
                    raise self.error(key, f"expected {kind}, got {value!r}")
                return value
        return self.raw(*keys, default=default)

    def int(self, *keys: str, default: Any = REQUIRED) -> Any:
        return self._typed(keys, default, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")

    def float(self, *keys: str, default: Any = REQUIRED) -> Any:
        number = self._typed(keys, default, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                             and math.isfinite(v), "a finite number")
        return float(number) if isinstance(number, (int, float)) else number

    def bool(self, *keys: str, default: Any = REQUIRED) -> Any:
        return self._typed(keys, default, lambda v: isinstance(v, bool), "true or false")

    def dict(self, *keys: str) -> dict[str, Any]:
        value = self._typed(keys, None, lambda v: isinstance(v, dict), "a mapping")
        return value or {}

    def list(self, *keys: str) -> list[Any] | None:
        return self._typed(keys, None, lambda v: isinstance(v, list), "a list")


def unwrap_text_config(config: dict[str, Any], origin: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A multimodal config's language model, and what else the checkpoint holds (its towers).

    Gemma-3, Mistral-3, Llama-4, Qwen3-VL and Qwen3.5 configs put the decoder under `text_config`
    and a vision encoder under `vision_config`; Qwen2.5-VL's keeps the decoder's keys at the top
    level beside `vision_config`. The towers are read by `calc.towers` where their kind is known;
    the names returned here ("vision encoder and projector") are what is left out otherwise, so a
    partial total is never passed off as the whole model's. A plain config comes back with ().
    """
    text = config.get("text_config")
    outer = config.get("model_type")
    if not isinstance(outer, str) or not (isinstance(text, dict) or (outer in FLAT_TEXT and "vision_config" in config)):
        return config, ()
    if isinstance(text, dict):
        inner = dict(text)
    else:
        inner = {k: v for k, v in config.items() if k not in ("vision_config", "audio_config", "model_type", "architectures")}
    inner.setdefault("model_type", TEXT_MODEL_TYPES.get(outer) or FLAT_TEXT.get(outer) or f"{outer}_text")
    inner["model_type"] = TEXT_AS.get(inner["model_type"], inner["model_type"])
    for key in ("_name_or_path", "auto_map"):  # auto_map: see calc/arch/fallback.py
        if key in config and key not in inner:
            inner[key] = config[key]
    vision = config.get("vision_config")
    if isinstance(vision, dict) and "deepstack_visual_indexes" in vision:  # Qwen3-VL: the text layers' deepstack inputs
        inner.setdefault("deepstack_visual_indexes", vision["deepstack_visual_indexes"])
    tied = whole_model_tie(config, inner)
    if tied is not None:
        inner["tie_word_embeddings"] = tied
    left_out = [key.removesuffix("_config") + " encoder" for key in ("vision_config", "audio_config")
                if config.get(key) is not None]  # Gemma 4 writes "audio_config": null for none
    return inner, (" and ".join(left_out or ["non-text parts"]) + " and projector",)


def whole_model_tie(config: dict[str, Any], text: dict[str, Any]) -> Any:
    """Whether the whole model's head is tied to its embedding, where the two configs may disagree.

    transformers ties lm_head to the embedding when the config of the class it builds says so
    (PreTrainedModel.get_expanded_tied_weights_keys reads `self.config.tie_word_embeddings`, and the
    ...ForConditionalGeneration class holds the outer config), so text_config's own flag is not what
    counts: the outer config's flag, or the outer config class's default where it writes none
    (Mistral3Config and InternVLConfig default to True); LLaVA-style configs (TIE_FROM_TEXT) also take
    text_config's true. Outer types not listed keep text_config's flag, the outer one when it has none.
    """
    outer, own = config.get("tie_word_embeddings"), text.get("tie_word_embeddings")
    kind = config.get("model_type")
    if kind not in TIE_DEFAULT:
        return own if own is not None else outer
    tied = TIE_DEFAULT[kind] if outer is None else outer
    return True if kind in TIE_FROM_TEXT and tied is False and own is True else tied


def untied_variant(config: dict[str, Any]) -> dict[str, Any] | None:
    """The whole config with the LM head untied, where its language model declares it untied but the whole
    model ties it (whole_model_tie): None where the two agree.

    transformers' InternVL converter (convert_internvl_weights_to_hf.py) writes the outer tie_word_embeddings
    true, InternVLConfig's default, under a text_config that says false, and the -hf checkpoints store
    language_model.lm_head.weight apart (OpenGVLab/InternVL3-1B-hf: 938,193,024 parameters, its head's
    135,899,904 among them): transformers 5 ties that head away, the checkpoint holds the untied model."""
    text = config.get("text_config")
    if not isinstance(text, dict) or text.get("tie_word_embeddings") is not False or not whole_model_tie(config, text):
        return None
    return {**config, "tie_word_embeddings": False}


# The outer config class's tie_word_embeddings default, transformers 5.24 (models/<type>/configuration_<type>.py),
# read off AutoConfig.for_model(<type>) (tests/test_towers.py checks every combination against it).
TIE_DEFAULT = {"qwen3_5": False, "qwen3_5_moe": False, "qwen3_vl": False, "qwen3_vl_moe": False, "qwen2_5_vl": False,
               "llama4": False, "llava": False, "llava_onevision": False, "phi4_multimodal": False,
               "minimax_m3_vl": False, "gemma3": True, "gemma3n": True, "gemma4": True, "mistral3": True,
               "internvl": True, "kimi_k25": True}
# Outer configs whose __post_init__ takes text_config's true over their own false (configs saved before
# transformers 5 wrote the flag there): LlavaConfig, LlavaOnevisionConfig, Qwen2_5_VLConfig, MiniMaxM3VLConfig.
TIE_FROM_TEXT = {"llava", "llava_onevision", "qwen2_5_vl", "minimax_m3_vl"}


# What transformers calls the language model of a multimodal model_type, when its text_config omits it.
TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "mistral3": "mistral", "llama4": "llama4_text", "llava": "llama",
                    "llava_onevision": "qwen2", "internvl": "qwen2",
                    "step3p7": "step3p5"}
# Multimodal model_types whose decoder keys sit at the top level (no text_config), and its model_type
# (Phi4MultimodalModel's decoder layers are Phi-3's: fused qkv_proj and gate_up_proj, partial rotary).
FLAT_TEXT = {"qwen2_5_vl": "qwen2", "phi4_multimodal": "phi3"}
# Language models transformers builds exactly as another model_type (Qwen3VLTextModel is Qwen3's
# layers: QK-norm, no biases, no sliding window; mrope changes positions, not weights).
TEXT_AS = {"qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3_moe", "qwen2_5_vl_text": "qwen2"}
