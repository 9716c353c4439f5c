"""`verify --load`'s second opinion: transformers' own model holding the same weights.

Our torch reference can agree with the checkpoint's names and shapes and still compute something
else: a config option it ignores (Llama-3.1's `rope_scaling`) changes no tensor. So when
transformers is installed and the spec came from a config.json, its `AutoModelForCausalLM` is
built from that config (float32, eval), given the very tensors our model
loaded, and run on the same token ids; the largest absolute logit difference must stay within
`TOLERANCE` times the largest |logit| (at least 1). Both models compute in float32, so what
separates them when they agree is rounding, orders of magnitude below the tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from calc.arch.fallback import transformers_model
from calc.spec.hf import first_line

__all__ = ["TOLERANCE", "LogitsComparison", "TowerRun", "audio_features", "compare_logits", "image_features"]

TOLERANCE = 1e-4  # relative to max(1, the largest |logit| transformers computes)


@dataclass(frozen=True)
class LogitsComparison:
    """transformers' logits against ours on the same weights, or why they were not compared."""

    ok: bool
    message: str
    compared: bool = True
    max_difference: float | None = None
    tolerance: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "compared": self.compared, "message": self.message,
                "max_difference": self.max_difference, "tolerance": self.tolerance}


@dataclass(frozen=True)
class TowerRun:
    """One tower of our reference run on an image (`features` None: not run, `why`)."""

    name: str
    pixels: Any  # torch.Tensor [1, channels, H, W]; an audio tower's log-mel frames [1, frames, mel bins]
    features: Any  # torch.Tensor [1, tokens, text width]
    why: str = ""
    inputs: Any = None  # what get_image_features takes for `pixels` (a Qwen tower: patches and grid_thw)
    audio: bool = False  # compared with get_audio_features (Gemma 4's Conformer), not get_image_features

    @property
    def method(self) -> str:
        return "get_audio_features" if self.audio else "get_image_features"

    def describe(self) -> str:
        if self.features is None:
            return f"{self.name} tower not run: {self.why}"
        if self.audio:
            _, frames, bins = self.pixels.shape
            return f"{self.name} tower: audio features {list(self.features.shape)} of {frames} frames of {bins} mel bins"
        _, _, height, width = self.pixels.shape
        return f"{self.name} tower: image features {list(self.features.shape)} of one {width}x{height} image"


def _skipped(why: str) -> LogitsComparison:
    return LogitsComparison(True, f"transformers' logits not compared: {why}", compared=False)


def compare_logits(config: dict[str, Any] | None, state: dict[str, torch.Tensor], ids: torch.Tensor,
                   ours: torch.Tensor, not_parameters: set[str], towers: dict[str, TowerRun] | None = None) -> LogitsComparison:
    """Build transformers' model of `config`, load `state` into it, compare its logits with `ours`,
    then its image features with each tower's run (`towers`: a multimodal model's)."""
    if config is None:
        return _skipped("the spec did not come from a config.json (transformers builds models from one)")
    try:
        import transformers
    except ImportError:
        return _skipped("transformers is not installed")
    try:
        with _quiet(transformers):
            model = transformers_model(config, device="cpu")
    except (KeyError, ValueError, TypeError, AttributeError, ImportError, RuntimeError) as exc:
        return _skipped(f"transformers cannot build model_type {config.get('model_type')!r}: {first_line(exc)}")
    name = type(model).__name__
    problem = _load(model, state, not_parameters)
    if problem:
        return LogitsComparison(False, f"transformers' {name} does not take these weights: {problem}")
    try:
        with torch.no_grad():
            theirs = model(ids).logits.float()  # (1, T, vocab)
    except (AttributeError, TypeError, ValueError) as exc:  # transformers' own forward fails on text alone
        verdict = _skipped(f"transformers' {name} fails on token ids alone: {first_line(exc)}")
    else:
        verdict = _verdict(name, ours, theirs)
    for run in (towers or {}).values():  # the towers are compared even where the text forward fails (Llama 4)
        with torch.no_grad():
            features = (audio_features(model, run.inputs) if run.audio else
                        image_features(model, run.inputs or {"pixel_values": run.pixels}))
        image = _verdict(f"{name}.{run.method}", run.features, features, run.method[4:].replace("_", " "))
        verdict = LogitsComparison(verdict.ok and image.ok, f"{verdict.message}; {image.message}", True,
                                   verdict.max_difference, verdict.tolerance)
    return verdict


def image_features(model: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """transformers' projected image features of `inputs` as one [N, tokens, width] tensor:
    get_image_features' pooler_output (a tuple of one per image from the Qwen models and Mistral 3,
    stacked), then each DeepStack merger's (Qwen3-VL's deepstack_features), along the tokens, as our
    tower returns them. Llama 4's gives no pooler_output: its forward applies multi_modal_projector
    to last_hidden_state, and so does this."""
    output = model.get_image_features(**inputs)
    pooled = getattr(output, "pooler_output", output)
    if pooled is None:
        pooled = model.multi_modal_projector(output.last_hidden_state)
    parts = [pooled, *(getattr(output, "deepstack_features", None) or [])]
    return torch.cat([torch.stack(part) if isinstance(part, (tuple, list)) else part for part in parts],
                     dim=1)


def audio_features(model: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """transformers' projected audio features [1, frames, width]: get_audio_features' pooler_output
    (Gemma 4's inner model has the method, its ForConditionalGeneration not)."""
    method = getattr(model, "get_audio_features", None) or model.model.get_audio_features
    return method(**inputs).pooler_output


def _verdict(name: str, ours: torch.Tensor, theirs: torch.Tensor, what: str = "logits") -> LogitsComparison:
    if theirs.shape != ours.shape:
        return LogitsComparison(False, f"transformers' {name} gave {what} {list(theirs.shape)}, ours {list(ours.shape)}")
    difference = float((ours - theirs).abs().max())
    tolerance = TOLERANCE * max(1.0, float(theirs.abs().max()))
    ok = difference <= tolerance  # False for NaN too
    verdict = "within" if ok else "above"
    unit = "logit" if what == "logits" else "feature"
    return LogitsComparison(ok, f"transformers' {name} on the same weights: max |{unit} difference| "
                                f"{difference:.2e}, {verdict} the tolerance {tolerance:.2e}",
                            max_difference=difference, tolerance=tolerance)


def _load(model: Any, state: dict[str, torch.Tensor], not_parameters: set[str]) -> str:
    """Load `state` (names as stored, with or without transformers' base-model prefix); what does
    not fit, as one line ("" when every parameter was filled). A parameter tied to one that was
    loaded (the LM head of a tied model) is filled by it. A buffer goes in where transformers' model
    keeps one of that name in its state dict, as from_pretrained would load it (DeepSeek-V3's
    e_score_correction_bias steers the routing: left at zeros, the two models pick other experts);
    other buffers and unknown tensors are left out. A stored tensor that is the leading rows of a larger
    one of transformers' fills those rows, the rest left as initialised: rows transformers allocates and
    the checkpoint does not hold (LongCat-Flash's zero-computation experts' gate_up_proj); were they read,
    the logits would show it. A tensor of any other shape is named, not loaded."""
    expected = model.state_dict()
    prefix = f"{model.base_model_prefix}."
    named = {name: name if name in expected else prefix + name for name in state}
    mapped = {named[name]: tensor for name, tensor in state.items()
              if name not in not_parameters or named[name] in expected}
    mismatched = []
    for name, tensor in list(mapped.items()):
        target = expected.get(name)
        if target is None or target.shape == tensor.shape:
            continue
        if tensor.dim() == target.dim() and tensor.shape[1:] == target.shape[1:] and tensor.shape[0] < target.shape[0]:
            mapped[name] = torch.cat((tensor.to(target.dtype), target[tensor.shape[0]:].to(tensor.device)))
        else:
            mismatched.append(f"{name} stored {list(tensor.shape)}, transformers' {list(target.shape)}")
            del mapped[name]
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    params = dict(model.named_parameters(remove_duplicate=False))
    filled = {params[name].data_ptr() for name in mapped if name in params}
    missing = [name for name in missing if name in params and params[name].data_ptr() not in filled]
    parts = [f"{label}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
             for label, names in (("missing", missing), ("unexpected", list(unexpected)), ("shape", mismatched))
             if names]
    return "; ".join(parts)


class _quiet:
    """transformers' warnings about a config (unused keys, defaults) are not ours to print."""

    def __init__(self, transformers: Any) -> None:
        self.logging = transformers.utils.logging

    def __enter__(self) -> None:
        self.level = self.logging.get_verbosity()
        self.logging.set_verbosity_error()

    def __exit__(self, *_: object) -> None:
        self.logging.set_verbosity(self.level)
