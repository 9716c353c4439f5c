"""`verify --checkpoint ... --load`: the literal "loaded checkpoint" check.

The header check (`calc.checkpoint.report`) proves every tensor has the name and shape the spec implies
without reading a weight. This goes further for models that fit in memory. Every tensor is read
once and checked as it is read (`calc.checkpoint.weights`: a float dtype the model computes in,
no NaN or inf anywhere, not only in the rows a short forward pass touches). The weights are then
loaded into the torch reference model (`calc.reference.model`) with `strict=True` — every parameter
filled, nothing left over — and one forward pass must give finite logits of shape [1, T, vocab_size].
Last, transformers' own model of the same config takes the same tensors and must give the same
logits within a stated tolerance (`calc.checkpoint.crosscheck`). The two models are built one
after the other, so memory holds the tensors and one float32 model at a time. A multimodal
checkpoint's tower tensors load into the reference's vision tower (`calc.reference.tower`; Gemma 3n's
MobileNet-v5: `calc.reference.mobilenet`, no timm needed), which encodes one seeded random image
(`_image_size`), and its audio tower (`calc.reference.conformer`); transformers' whole model, given every tensor,
must give the same image features (a tower kind the reference does not build says so, unrun). Imports torch; the
CLI imports this module only when --load is given.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

import torch

from calc.analysis.count import count
from calc.checkpoint.crosscheck import TowerRun, compare_logits
from calc.checkpoint.hub_towers import in_memory_towers
from calc.checkpoint.layouts import in_memory, layout
from calc.checkpoint.names import tensor_table
from calc.checkpoint.report import CheckpointReport, LoadResult
from calc.checkpoint.tower_slots import whole_model_names
from calc.checkpoint.weights import Rejected, read_checked
from calc.errors import GptcalcError
from calc.reference.conformer import AudioTower
from calc.reference.mobilenet import MobileNetTower
from calc.reference.model import Decoder, build
from calc.reference.tower import VisionTower, buildable, runner_of
from calc.spec.model import ModelSpec
from calc.towers import Conformer, MobileNet, Tower
from calc.units import human_bytes

__all__ = ["available_memory", "forward_ids", "load_and_run", "load_weights", "memory_needed", "run_towers", "split_towers"]

FORWARD_TOKENS = 8
# Log-mel frames an audio tower is run on: 4 s at 10 ms a frame, subsampled 4 x to 100, over eight of its
# 12-frame attention blocks and a part one
AUDIO_FRAMES = 400
LARGEST_SIDE = 64  # patches a side of the image a tower without a position table is run on (4,096 patches)
MEMINFO = Path("/proc/meminfo")


def memory_needed(report: CheckpointReport) -> int:
    """The float32 reference model plus the checkpoint's tensors held while they are copied in."""
    return 4 * count(report.spec).total + report.tensor_bytes


def load_and_run(report: CheckpointReport, config: dict[str, Any] | None = None) -> LoadResult:
    """Check every tensor, load strictly, run one forward pass, then compare with transformers' model
    of `config` (the config.json the spec came from); any failure is a verification failure (exit 1)."""
    _check_memory(report)
    _check_not_quantised(report)
    try:
        state = read_checked(report)
    except Rejected as exc:
        return LoadResult(False, f"tensor check failed: {exc}")
    decoder, towers = split_towers(report, state)
    try:
        model = load_weights(report, decoder)
        images = run_towers(report.spec, towers)
    except RuntimeError as exc:
        return LoadResult(False, f"load_state_dict(strict=True) failed: {_compact(exc)}", len(state))
    ids = forward_ids(report.spec)
    with torch.no_grad():
        logits = model(ids)  # (1, T, vocab)
    # What our model holds, under transformers' in-memory names (a Hub checkpoint's per-expert tensors
    # stacked as transformers 5 keeps them, Nemotron-H's `backbone.` as `model.`, a multimodal model's
    # decoder under its language model's prefix, its towers' tensors beside): the very weights
    # transformers' model is given next.
    lay, spec = layout(report.spec), report.spec
    held = {in_memory(name, lay): tensor for name, tensor in model.state_dict().items()}
    held = {whole: held[name] for name, whole in whole_model_names(held, spec.towers).items()} | towers
    del model  # transformers' model is built next: one float32 model in memory at a time
    not_parameters = {t.name for t in (*report.buffers, *report.unknown)}
    dtypes = _dtypes(t for name, t in state.items() if name not in not_parameters)
    result = _check_logits(spec, ids, logits, len(state), dtypes)
    if not result.ok:
        return result
    result = replace(result, message=result.message + "".join(f"; {image.describe()}" for image in images.values()))
    comparison = compare_logits(config, held, ids, logits, {in_memory(n, lay) for n in not_parameters},
                                {name: image for name, image in images.items() if image.features is not None})
    return replace(result, ok=comparison.ok, transformers=comparison)


def split_towers(report: CheckpointReport, state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the decoder's tensors as stored, the towers' under their canonical in-memory names, a Hub
    layout's converted by `calc.checkpoint.hub_towers`): the reference decoder loads the first,
    `calc.reference.tower` (and transformers' model) the second."""
    table = tensor_table(report.spec)
    canonical = {name: table.canonical(name) for name in state} if table.towers else {}
    ours = table.towers.keys() | table.towers_hub.keys()
    towers = {canonical[name]: t for name, t in state.items() if canonical.get(name) in ours}
    decoder = {name: t for name, t in state.items() if canonical.get(name) not in ours}
    return decoder, in_memory_towers(report.spec.towers, towers)


def run_towers(spec: ModelSpec, state: dict[str, torch.Tensor]) -> dict[str, TowerRun]:
    """Each tower the reference builds, loaded strictly from `state` and run on one seeded random image
    (`_image_size`; Gemma 3n's MobileNet-v5 its 768 x 768) or clip, with what transformers' get_image_features
    (get_audio_features) takes for it; the others say why they were not run."""
    runs = {}
    for name, tower in spec.towers.items():
        if isinstance(tower, Conformer):  # `AUDIO_FRAMES` log-mel frames
            model = AudioTower(name, tower)
            runs[name] = _run(name, model, state, _seeded(1, AUDIO_FRAMES, model.mel_bins), audio=True)
        elif isinstance(tower, MobileNet):  # the one size its processor resizes every image to
            side = tower.images.image_size
            runs[name] = _run(name, MobileNetTower(name, tower), state, _seeded(1, tower.in_channels, side, side))
        elif (why := buildable(tower)) is not None:
            runs[name] = TowerRun(name, None, None, why)
        else:
            width, height = _image_size(tower)
            runs[name] = _run(name, VisionTower(name, tower), state, _seeded(1, tower.in_channels, height, width))
    return runs


def _seeded(*shape: int) -> torch.Tensor:
    """The seeded random input a tower is run on."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _run(name: str, model: Any, state: dict[str, torch.Tensor], inputs: torch.Tensor, audio: bool = False) -> TowerRun:
    """A reference tower loaded strictly from `state` and run on `inputs`, with what transformers' model
    takes for them."""
    model.load_state_dict({n: t for n, t in state.items() if n in model.state_dict()}, strict=True)
    with torch.no_grad():
        return TowerRun(name, inputs, model(inputs), inputs=model.transformers_inputs(inputs), audio=audio)


def load_weights(report: CheckpointReport, state: dict[str, torch.Tensor] | None = None) -> Decoder:
    """The reference model of `report.spec` holding the checkpoint's weights (strict=True)."""
    state = read_checked(report) if state is None else state
    model = build(report.spec)
    model.load_state_dict(state, strict=True)
    return model


def _image_size(tower: Tower) -> tuple[int, int]:
    """(width, height) of the one image a tower is run on: with window attention (Qwen2.5-VL), a
    square of two whole windows and one cut short a side (its full-attention layers over the rule's
    largest image would need every patch against every other); else the square its learned position
    table covers (SigLIP's, InternViT's: a tiling rule such as InternVL's cuts larger images into such
    squares; Qwen3-VL's, resized to any grid), else its rule's largest image up to `LARGEST_SIDE`
    patches a side (2-D rotary towers take any size: Pixtral's 1540 px would be 12,100 patches, every
    one against every other in each layer); a tower kind's own module may say (Gemma 4's: its rule's
    largest image within its position tables; LLaVA-OneVision's: its smallest canvas)."""
    if (size := getattr(runner_of(tower), "image_size", None)) is not None:
        return size(tower)
    if tower.window and tower.images is not None:
        side = (2 * tower.window + tower.images.merge_size) * tower.patch_size
        return side, side
    if tower.positions or tower.images is None:
        side = math.isqrt(tower.positions - tower.class_token) * tower.patch_size
        return side, side
    largest, cap = tower.images.largest(), LARGEST_SIDE * tower.patch_size
    return min(largest.width, cap), min(largest.height, cap)


def forward_ids(spec: ModelSpec) -> torch.Tensor:
    """The token ids of the check: 0, 1, 2, ... for up to FORWARD_TOKENS positions, shape (1, T)."""
    steps = min(FORWARD_TOKENS, spec.n_positions)
    return (torch.arange(steps) % spec.vocab_size).unsqueeze(0)


def _check_logits(spec: ModelSpec, ids: torch.Tensor, logits: torch.Tensor, tensors: int, dtypes: str) -> LoadResult:
    steps = ids.shape[1]
    shape = tuple(logits.shape)
    if shape != (1, steps, spec.vocab_size):
        return LoadResult(False, f"forward pass gave logits {list(shape)}, expected [1, {steps}, {spec.vocab_size}]", tensors, shape)
    if not bool(torch.isfinite(logits).all()):
        return LoadResult(False, "forward pass gave non-finite logits", tensors, shape)
    return LoadResult(True, f"loaded {tensors} tensors with strict=True (parameters in {dtypes} and finite, buffers free of NaN); "
                            f"one forward pass on {steps} tokens gave finite logits {list(shape)}", tensors, shape)


def _dtypes(tensors: Iterable[torch.Tensor]) -> str:
    return ", ".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors}))


def _check_not_quantised(report: CheckpointReport) -> None:
    """Quantised weights are read through their scales, which the reference model does not apply."""
    if report.companions:
        first = report.companions[0]
        raise GptcalcError(
            f"--load: {report.source} is quantised ({len(report.companions):,} scale tensors, e.g. "
            f"{first.tensor.name}: {first.scheme}); --load does not dequantise, the header check without it "
            "covers every tensor"
        )


def _check_memory(report: CheckpointReport) -> None:
    needed = memory_needed(report)
    available = available_memory()
    if available is not None and needed > available:
        raise GptcalcError(
            f"--load: {report.source} needs about {human_bytes(needed)} of memory to load "
            f"(float32 model + checkpoint tensors) and {human_bytes(available)} is available; "
            "the header check without --load needs none"
        )


def available_memory() -> int | None:
    """Bytes a new allocation can get: Linux's MemAvailable (free memory plus the page cache and
    other memory the kernel reclaims on demand). MemFree alone leaves the cache out and, on a
    machine that has been reading files, says "full" when it is not. Where /proc/meminfo has no
    MemAvailable (macOS, Linux before 3.14) the free pages are the best the platform says; None
    when it says nothing, and the load is tried."""
    try:
        for line in MEMINFO.read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "MemAvailable" and value.split()[1:] == ["kB"]:
                return int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _compact(exc: Exception) -> str:
    """torch's multi-line strict-load report as one line, cut to a readable length."""
    lines = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()] or [str(exc)]
    text = "; ".join(lines)
    return text if len(text) <= 600 else text[:597] + "..."
