"""A model_type with no adapter, counted by transformers' own model on the meta device.

Exact (it is the reference implementation's parameter count, each tensor once) but not analytic:
the rows are module names with the layer and expert indices folded (`model.layers.{n}.mlp...`),
not our components, and nothing can be explained or verified beyond the total. Used only when
transformers is installed; otherwise the model_type is refused with the list of supported ones.
"""

from __future__ import annotations

import re
from typing import Any

from calc.analysis.breakdown import Breakdown
from calc.errors import GptcalcError, UnsupportedModelType
from calc.inputs import MAX_TORCH_LAYERS
from calc.spec.hf import first_line

__all__ = ["transformers_breakdown"]

SOURCE = "transformers (meta device, not analytic)"
_INDEX = re.compile(r"\.\d+(?=\.|$)")


def transformers_breakdown(exc: UnsupportedModelType) -> Breakdown:
    """transformers' model of the config, parameters grouped by module name; or the original error."""
    try:
        import torch
        import transformers
    except ImportError:
        raise GptcalcError(str(exc)) from None
    model = _build(torch, transformers, exc)
    rows: dict[str, int] = {}
    for name, param in model.named_parameters():  # a tied tensor is listed once
        key = _INDEX.sub(".{n}", name.removesuffix(".weight").removesuffix(".bias"))
        rows[key] = rows.get(key, 0) + param.numel()
    name = exc.config.get("_name_or_path") or exc.config.get("model_type") or exc.origin
    layers = getattr(model.config.get_text_config(), "num_hidden_layers", 0) or 0
    return Breakdown(str(name), layers, rows, source=SOURCE)


def _build(torch: Any, transformers: Any, exc: UnsupportedModelType) -> Any:
    data = dict(exc.config)
    try:
        config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
        layers = getattr(config.get_text_config(), "num_hidden_layers", 0)
        if isinstance(layers, int) and layers > MAX_TORCH_LAYERS:
            raise GptcalcError(f"{exc}; building transformers' model of {layers:,} layers is refused "
                               f"(at most {MAX_TORCH_LAYERS:,}: one torch module per layer)")
        with torch.device("meta"):
            return transformers.AutoModelForCausalLM.from_config(config)
    except (KeyError, ValueError) as error:
        if "Unrecognized" in str(error):  # transformers does not know the model_type either
            raise GptcalcError(str(exc)) from None
        raise GptcalcError(f"{exc}; transformers cannot build it either: {first_line(error)}") from None
    except (TypeError, AttributeError, ImportError, RuntimeError) as error:
        raise GptcalcError(f"{exc}; transformers cannot build it either: {first_line(error)}") from None
