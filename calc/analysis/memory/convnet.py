"""The activation peak of a convolutional encoder's eager forward without gradients (Gemma 3n's
MobileNet-v5 in vLLM's profiling run), read off its shapes journey (calc/analysis/shapes/mobilenet.py).

Without autograd a tensor lives only while a Python name holds it, so at any moment the live maps are
few: the pixels (the caller's), the block's input (kept for the residual add), the step's input, and
what the step is making. A conv's RMSNorm (timm layers/fast_norm.py rms_norm2d: x * rsqrt(mean(x²)),
then * weight) holds three maps of the conv's output size at once (the conv's output, x · rsqrt and
· weight) and their mean square [B, 1, H, W]; the activation after it holds two. So the peak is

    max over steps: pixels + the block's input + the step's inputs + 3 x a conv's output
                    + B·H·W (its norm's mean square) + the maps held for the fusion adapter

(1 x the output for a step without a weight: scores, adds, the concat), the step's inputs counted apart
from the block's input but for the block's first step, which reads it. Measured: timm 1.0.31's mobilenetv5_300m_enc in
bfloat16 under no_grad on CPU, every op output tracked until its last tensor is freed (tests/
test_encoder_forward.py's fixture), peaks at block 2.1's expand conv as the rule says, to within the
weight reshape's view. GPU kernels' workspaces (cuDNN) and CPU weight reorders are not activations and
are not counted.
"""

from __future__ import annotations

import math

from calc.analysis.shapes.core import Journey, Shape, Step

__all__ = ["NORM_COPIES", "conv_peak"]

NORM_COPIES = 3  # a conv's output, x·rsqrt(mean(x²)) and its product with the weight, live at once


def conv_peak(journey: Journey, dtype_bytes: int, fused_maps: tuple[int, ...]) -> int:
    """The most bytes live at once in the journey's forward (the rule in the module docstring); `fused_maps`:
    the feature maps the fusion adapter reads (MobileNet.fused_maps: 0 the stem's, s stage s's)."""
    pixels = _size(journey.steps[0].output)
    held = _held(journey.steps, fused_maps)
    peak, block, block_input = 0, "", 0
    for step in (step for step in journey.steps[1:] if step.traced):  # untraced: a table off the path, a count
        inputs = sum(_size(shape) for shape in step.inputs)
        name = step.id.split("_")[0]
        if name != block:  # a block's first step reads the block's input itself
            block, block_input, inputs = name, inputs, 0
        peak = max(peak, pixels + block_input + inputs + _made(step) + held.get(step.block, 0))
    return peak * dtype_bytes


def _made(step: Step) -> int:
    """A conv writes its output and its norm's two more copies and mean square; other steps one output."""
    out = _size(step.output)
    if step.weight is None or len(step.weight.sizes) != 4:
        return out
    b, _, h, w = step.output.sizes
    return NORM_COPIES * out + b * h * w


def _held(steps: tuple[Step, ...], fused_maps: tuple[int, ...]) -> dict[str, int]:
    """Per block kind: the sizes of the fused feature maps made before its stage, which the encoder keeps
    for the fusion adapter while the stage runs (its block kinds are "stage {s} block(s) ...")."""
    stages: dict[int, list[Step]] = {}
    for step in steps:
        if step.block:
            stages.setdefault(int(step.block.split()[1]), []).append(step)
    maps = [_size(next(step.output for step in steps if step.id == "stem"))]
    maps += [_size(stage[-1].output) for _, stage in sorted(stages.items())]
    return {step.block: sum(maps[i] for i in fused_maps if i < s) for s, stage in stages.items() for step in stage}


def _size(shape: Shape) -> int:
    return math.prod(shape.sizes)
