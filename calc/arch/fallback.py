"""A model_type with no adapter, counted by transformers' own model on the meta device.

Exact (it is the reference implementation's parameter count, each tensor once) but not analytic:
the rows are module names with the layer and expert indices folded (`model.layers.{n}.mlp...`),
not our components, and nothing can be explained or verified beyond the total. Used only when
transformers is installed; otherwise the model_type is refused with the list of supported ones.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from calc.analysis.breakdown import Breakdown
from calc.errors import GptcalcError, UnsupportedModelType
from calc.inputs import MAX_TORCH_LAYERS
from calc.spec.hf import first_line

__all__ = ["transformers_breakdown", "transformers_model"]

SOURCE = "transformers (meta device, not analytic)"
_INDEX = re.compile(r"\.\d+(?=\.|$)")


def transformers_breakdown(exc: UnsupportedModelType) -> Breakdown:
    """transformers' model of the config, parameters grouped by module name; or the original error."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise GptcalcError(str(exc)) from None
    model = _build(exc)
    rows: dict[str, int] = {}
    for name, param in model.named_parameters():  # a tied tensor is listed once
        key = _INDEX.sub(".{n}", name.removesuffix(".weight").removesuffix(".bias"))
        rows[key] = rows.get(key, 0) + param.numel()
    name = exc.config.get("_name_or_path") or exc.config.get("model_type") or exc.origin
    layers = getattr(model.config.get_text_config(), "num_hidden_layers", 0) or 0
    return Breakdown(str(name), layers, rows, source=SOURCE)


def transformers_model(config: dict[str, Any], device: str = "meta", text_only: bool = False) -> Any:
    """transformers' own causal LM of a config.json mapping, float32, in eval mode; on the meta
    device (shapes only, any size) unless a real one is asked for. `text_only`: of a multimodal
    config, the language model alone (what gptcalc counts). transformers' errors pass through:
    each caller says what a model_type transformers cannot build means for it."""
    import torch
    import transformers

    from calc.arch import transformers_type

    data = _special_floats(copy.deepcopy(config))
    data.pop("model_type", None)
    # A model_type transformers reads as another (kimi_k2: DeepseekV3, as its architectures says)
    hf_config = transformers.AutoConfig.for_model(transformers_type(config, "config.json"), **data)
    if text_only and "text_config" in config:
        hf_config = hf_config.get_text_config()
    layers = getattr(hf_config.get_text_config(), "num_hidden_layers", 0)
    if isinstance(layers, int) and layers > MAX_TORCH_LAYERS:
        raise GptcalcError(f"transformers' model of {layers:,} layers is refused (at most {MAX_TORCH_LAYERS:,}: "
                           "one torch module per layer)")
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32).eval()


# How save_pretrained writes a float JSON has no literal for (Mamba2's time_step_limit [0.0, inf]);
# transformers decodes it only when it reads the file itself (PreTrainedConfig._decode_special_floats).
_FLOAT_TAG = "__float__"
_SPECIAL_FLOATS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def _special_floats(value: Any) -> Any:
    """`value` with every {"__float__": "Infinity"} (and -Infinity, NaN) back as the float it stands for."""
    if isinstance(value, dict):
        if set(value) == {_FLOAT_TAG} and value[_FLOAT_TAG] in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[value[_FLOAT_TAG]]
        return {key: _special_floats(item) for key, item in value.items()}
    return [_special_floats(item) for item in value] if isinstance(value, list) else value


def _build(exc: UnsupportedModelType) -> Any:
    try:
        return transformers_model(exc.config)
    except (KeyError, ValueError) as error:
        if "Unrecognized" in str(error):  # transformers does not know the model_type either
            raise GptcalcError(str(exc)) from None
        raise GptcalcError(f"{exc}; transformers cannot build it either: {first_line(error)}") from None
    except (TypeError, AttributeError, ImportError, RuntimeError) as error:
        raise GptcalcError(f"{exc}; transformers cannot build it either: {first_line(error)}") from None
