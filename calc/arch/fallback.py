"""A model_type with no adapter, counted by transformers' own model on the meta device.

Exact (it is the reference implementation's parameter count, each tensor once) but not analytic:
the rows are module names with the layer and expert indices folded (`model.layers.{n}.mlp...`),
not our components, and nothing can be explained or verified beyond the total. Used only when
transformers is installed; otherwise the model_type is refused with the list of supported ones.

gptcalc never runs a model's own code, nor lets transformers offer to: a config's `auto_map` (class
name -> `module.Class` in the model's directory or another repo) never reaches transformers, which is
told `trust_remote_code=False` besides, so it builds its own class of the model_type or nothing and
never prompts on stdin. Without an adapter the code `auto_map` names *is* the model, so such a config
is refused here rather than counted as transformers' own class of its model_type.

A multimodal config (a `vision_config` or `audio_config` beside its text model) is built whole, as
the class its `architectures` names, so the total is the checkpoint's. Where transformers has no such
class, the causal LM it builds may hold the language model alone: the breakdown then names what is
left out (`uncounted`), and every output says the total is partial. A sub-model's total is never
printed as the model's.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from calc.analysis.breakdown import Breakdown
from calc.errors import GptcalcError, UnsupportedModelType
from calc.arch.common import KEYS
from calc.inputs import MAX_TORCH_DIM, MAX_TORCH_LAYERS
from calc.spec.hf import first_line

__all__ = ["transformers_breakdown", "transformers_model"]

SOURCE = "transformers (meta device, not analytic)"
_INDEX = re.compile(r"\.\d+(?=\.|$)")
REMOTE_CODE = "auto_map"  # the key by which a config names modelling code of its own
# The sizes checked before transformers builds anything (its config classes may already expand a
# per-layer list of 10^8 entries): layers, one module each, and widths, one dimension each.
_LAYERS = set(KEYS["n_layers"])
_WIDTHS = {*KEYS["d_model"], *KEYS["n_heads"], "num_key_value_heads", "head_dim", "intermediate_size", "n_inner",
           "ffn_dim", "d_ff", "moe_intermediate_size", "vocab_size", "num_experts", "num_local_experts", "n_routed_experts"}


def transformers_breakdown(exc: UnsupportedModelType) -> Breakdown:
    """transformers' model of the config, parameters grouped by module name; or the original error."""
    _refuse_remote_code(exc)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise GptcalcError(str(exc)) from None
    model, uncounted = _build(exc)
    rows: dict[str, int] = {}
    for name, param in model.named_parameters():  # a tied tensor is listed once
        key = _INDEX.sub(".{n}", name.removesuffix(".weight").removesuffix(".bias"))
        rows[key] = rows.get(key, 0) + param.numel()
    name = exc.config.get("_name_or_path") or exc.config.get("model_type") or exc.origin
    layers = getattr(model.config.get_text_config(), "num_hidden_layers", 0) or 0
    return Breakdown(str(name), layers, rows, source=SOURCE, uncounted=uncounted)


def transformers_model(config: dict[str, Any], device: str = "meta", text_only: bool = False,
                       origin: str = "config.json") -> Any:
    """transformers' own causal LM of a config.json mapping, float32, in eval mode; on the meta
    device (shapes only, any size) unless a real one is asked for. `text_only`: of a multimodal
    config, the language model alone (what gptcalc counts). Sizes past what a torch model is built
    with are refused first (`origin` names the file). transformers' errors pass through:
    each caller says what a model_type transformers cannot build means for it."""
    import torch
    import transformers

    from calc.arch import transformers_type, transformers_view

    config = transformers_view(config)  # minimax_m1: its own code's keys as transformers' MiniMax names them
    _check_sizes(config, origin)
    data = _special_floats(_without_remote_code(config))
    data.pop("model_type", None)
    # A model_type transformers reads as another (kimi_k2: DeepseekV3, as its architectures says)
    hf_config = transformers.AutoConfig.for_model(transformers_type(config, origin), **data)
    if text_only and "text_config" in config:
        hf_config = hf_config.get_text_config()
    whole = None if text_only else whole_class(config)
    with torch.device(device):
        if whole is not None:
            return whole._from_config(hf_config, dtype=torch.float32).eval()
        return transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32,
                                                                trust_remote_code=False).eval()


TOWER_KEYS = {"vision_config": "vision encoder and projector", "audio_config": "audio encoder and projector"}


def whole_class(config: dict[str, Any]) -> Any:
    """transformers' class of a multimodal config's whole model (the one its `architectures` names,
    else its model_type's image-text-to-text class: Moonshot's configs name KimiK25ForConditionalGeneration,
    transformers' is Kimi_K25ForConditionalGeneration), or None: for a text-only config, or where
    transformers has neither."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    named = config.get("architectures")
    if not any(key in config for key in TOWER_KEYS) or not isinstance(named, list) or not named:
        return None
    own = getattr(transformers, str(named[0]), None) if str(named[0]).isidentifier() else None
    by_type = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(str(config.get("model_type")))
    return own or (getattr(transformers, by_type, None) if by_type else None)


def _uncounted(exc: UnsupportedModelType, model: Any) -> tuple[str, ...]:
    """The towers a multimodal config describes that `model` leaves out: none when it was built as
    the whole class, or holds more than the config's language model alone; else all of them."""
    left_out = tuple(what for key, what in TOWER_KEYS.items() if key in exc.config)
    if not left_out or whole_class(exc.config) is not None:
        return ()
    if "text_config" in exc.config:
        text = transformers_model(exc.config, origin=exc.origin, text_only=True)
        if sum(p.numel() for p in text.parameters()) < sum(p.numel() for p in model.parameters()):
            return ()
    return left_out


def _check_sizes(data: Any, origin: str, prefix: str = "") -> None:
    """Refuse, before transformers sees the config, a layer count over MAX_TORCH_LAYERS or a width
    over MAX_TORCH_DIM, wherever in the mapping it is (a text_config's too)."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        limit = MAX_TORCH_LAYERS if key in _LAYERS else MAX_TORCH_DIM if key in _WIDTHS else None
        if limit is not None and isinstance(value, int) and value > limit:
            unit = "layers, one torch module each" if key in _LAYERS else "per dimension"
            raise GptcalcError(f"{origin}: {prefix}{key}: {value:,} is more than transformers' model is built with "
                               f"({limit:,} {unit}); count, memory and shapes take any size for a model_type gptcalc reads")
        _check_sizes(value, origin, f"{prefix}{key}.")


def _refuse_remote_code(exc: UnsupportedModelType) -> None:
    """One error line naming `auto_map` (wherever it is nested), before transformers is imported."""
    found = next(_remote_code(exc.config), None)
    if found is not None:
        path, value = found
        raise GptcalcError(f"{exc.origin}: {path}: names the model's own code ({value!r}); gptcalc never runs it, and "
                           f"model_type {exc.config.get('model_type')!r} has no adapter to count the model without it "
                           "(remove auto_map to count transformers' own class of that model_type)")


def _remote_code(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every `auto_map` in a config mapping and the mappings nested in it."""
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{prefix}{key}"
            if key == REMOTE_CODE:
                yield path, value
            yield from _remote_code(value, f"{path}.")


def _without_remote_code(data: Any) -> Any:
    """A copy of a config mapping with no `auto_map` at any depth: what transformers is given."""
    if isinstance(data, dict):
        return {key: _without_remote_code(value) for key, value in data.items() if key != REMOTE_CODE}
    if isinstance(data, list):
        return [_without_remote_code(value) for value in data]
    return data


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


def _build(exc: UnsupportedModelType) -> tuple[Any, tuple[str, ...]]:
    """transformers' model of the config, and what it leaves out of the checkpoint (nothing when built whole)."""
    try:
        model = transformers_model(exc.config, origin=exc.origin)
        return model, _uncounted(exc, model)
    except GptcalcError:
        raise
    except Exception as error:  # transformers' own checks of a stranger's config raise all kinds (hub's StrictDataclassError)
        if isinstance(error, (KeyError, ValueError)) and "Unrecognized" in str(error):  # an unknown model_type
            raise GptcalcError(str(exc)) from None
        raise GptcalcError(f"{exc}; transformers cannot build it either: {first_line(error)}") from None
