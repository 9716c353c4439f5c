"""Quantised checkpoints: the tensors stored beside a weight, and weights stored packed, as data.

A quantised checkpoint stores two kinds of tensor a model's `named_parameters()` does not have:

- **companions** — scales (and zero points) that say how to read a quantised weight. They are not
  parameters: each is named, classified by scheme and its bytes reported, never counted.
- **packed weights** — several low-bit values per stored element. The parameter they stand for
  is counted from the packed elements, exactly: MXFP4's `*_blocks` hold two 4-bit values per byte.

The layouts, from their publishers:

- FP8 with 128x128 block scales (DeepSeek-V3): `<name>.weight` in F8_E4M3 and
  `<name>.weight_scale_inv`, one float32 per 128x128 block of the weight ("(128x128 weight block)
  * weight_scale_inv"), so a [1536, 7168] weight has a [12, 56] scale and a [576, 7168] one a
  [5, 56] scale (blocks at the edge are padded to 128).
  https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md
- FP8 with per-tensor (or per-channel) scales: `<name>.weight_scale` and, with static activation
  scales, `<name>.input_scale` (the FP8 checkpoints vLLM loads, dynamic and static).
  https://github.com/vllm-project/vllm/pull/4332
- FP8 with power-of-two block scales (DeepSeek-V4, "scale_fmt": "ue8m0"): `<name>.weight` in
  F8_E4M3 and `<name>.scale` in F8_E8M0, one per 128x128 block (wq_a [1024, 4096]: scale [8, 32]);
  the routed experts' FP4 weights, two E2M1 values per int8 under the weight's own name ([2048, 2048]
  I8 for a [2048, 4096] w1), carry one per 32 values ([2048, 128]).
  https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash (inference/convert.py, its safetensors index)
- MXFP4 (gpt-oss): `<name>_blocks` U8 [..., G, 16], 16 bytes holding 32 E2M1 values, and
  `<name>_scales` U8 [..., G], one E8M0 exponent per block of 32. transformers dequantises
  [E, R, G, 16] to [E, R, G*32] and transposes it to its parameter's [E, G*32, R].
  https://github.com/huggingface/transformers/blob/main/src/transformers/integrations/mxfp4.py
  https://arxiv.org/abs/2508.10925 (gpt-oss model card: MoE weights in MXFP4, 4.25 bits per parameter)

`split_quantised(tensor)` is the one call a checkpoint reader makes per tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import compress, repeat
from operator import itemgetter, methodcaller
from typing import Any, NamedTuple

from calc.checkpoint.sources import TensorRecord

__all__ = ["COMPANIONS", "companions", "FP8_BLOCK", "MXFP4_BLOCK", "NEVER_PARAMETERS", "PACKED", "PACKED_DTYPES",
           "QUANTISED_SUFFIXES", "Companion", "CompanionKind",
           "PackedKind", "fp8_block_scale_shape", "split_quantised", "unpacked_shape"]

FP8_BLOCK = 128  # DeepSeek-V3's weight_block_size [128, 128]
MXFP4_BLOCK = 32  # values per E8M0 scale
MXFP4_BYTES = 16  # bytes per block: 32 values x 4 bits


@dataclass(frozen=True)
class CompanionKind:
    """A tensor that qualifies a weight: the name ending that marks it, the weight's name ending
    in its place, the dtypes it is stored in, and the scheme in words."""

    suffix: str
    base_suffix: str
    dtypes: tuple[str, ...]
    scheme: str
    parameter_too: bool = False  # a parameter's name may end so too (Gemma-4's router.scale): only the dtype tells


@dataclass(frozen=True)
class PackedKind:
    """A weight stored packed: its name ending, dtype, the size of its last axis, and how many
    values each stored element holds."""

    suffix: str
    dtype: str
    last_axis: int | None  # None: any width
    values_per_element: int
    scheme: str
    blocks: bool = True  # MXFP4's [..., G, 16] blocks under a name of their own; False: a weight's own name,
    # its values side by side along the last axis (DeepSeek-V4's FP4 experts in int8)

    def unpack(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of the parameter a packed tensor of `shape` stands for."""
        return unpacked_shape(shape) if self.blocks else (*shape[:-1], shape[-1] * self.values_per_element)


COMPANIONS: tuple[CompanionKind, ...] = (
    CompanionKind(".weight_scale_inv", ".weight", ("F32", "BF16"),
                  f"FP8 block scale (one per {FP8_BLOCK}x{FP8_BLOCK} block of the weight)"),
    CompanionKind(".weight_scale", ".weight", ("F32", "BF16", "F16"), "FP8 weight scale (per tensor or per channel)"),
    CompanionKind(".input_scale", ".weight", ("F32", "BF16", "F16"), "FP8 static activation scale"),
    CompanionKind("_scales", "", ("U8", "F8_E8M0"), f"MXFP4 scales (one E8M0 exponent per {MXFP4_BLOCK} values)"),
    CompanionKind(".scale", ".weight", ("F8_E8M0",), f"UE8M0 scale (DeepSeek-V4: one per {FP8_BLOCK}x{FP8_BLOCK} "
                  f"block of an FP8 weight, one per {MXFP4_BLOCK} values of an FP4 expert)", parameter_too=True),
)

PACKED: tuple[PackedKind, ...] = (
    PackedKind("_blocks", "U8", MXFP4_BYTES, 2, f"MXFP4 blocks ({MXFP4_BLOCK} E2M1 values in {MXFP4_BYTES} bytes)"),
    PackedKind(".weight", "I8", None, 2, "FP4 E2M1, two per int8 (DeepSeek-V4's routed experts)", blocks=False),
)


class Companion(NamedTuple):
    """One stored companion tensor: not a parameter; which weight it qualifies, under which scheme.
    A named tuple, as `TensorRecord`: DeepSeek-V3 stores 45,000 of them."""

    tensor: TensorRecord
    base: str  # the name of the weight it belongs to, as stored
    scheme: str

    def to_json(self) -> dict[str, Any]:
        t = self.tensor
        return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "nbytes": t.nbytes,
                "base": self.base, "scheme": self.scheme}


def split_quantised(tensor: TensorRecord) -> tuple[TensorRecord, Companion | None]:
    """A packed weight becomes the parameter it stands for (its name without the packing suffix, its
    unpacked shape, the bytes as stored); a companion is set aside; anything else passes unchanged."""
    if not tensor.name.endswith(QUANTISED_SUFFIXES) and tensor.dtype not in PACKED_DTYPES:  # nearly every tensor
        return tensor, None
    for kind in PACKED:
        if tensor.name.endswith(kind.suffix) and tensor.dtype == kind.dtype and \
                (kind.last_axis is None or tensor.shape[-1:] == (kind.last_axis,)):
            name = tensor.name.removesuffix(kind.suffix) if kind.blocks else tensor.name
            return tensor._replace(name=name, shape=kind.unpack(tensor.shape)), None
    for kind in COMPANIONS:
        if tensor.name.endswith(kind.suffix) and tensor.dtype in kind.dtypes:
            base = tensor.name.removesuffix(kind.suffix) + kind.base_suffix
            return tensor, Companion(tensor, base, kind.scheme)
    return tensor, None


_BLOCKS = tuple(kind.suffix for kind in PACKED if kind.blocks)
QUANTISED_SUFFIXES = (*_BLOCKS, *(kind.suffix for kind in COMPANIONS))  # a packed weight's own name, or a companion's
PACKED_DTYPES = tuple(kind.dtype for kind in PACKED if not kind.blocks)  # a packed weight under the weight's name
# Name endings no parameter has: a name ending so is a packed weight or a companion, whatever its dtype.
NEVER_PARAMETERS = (*_BLOCKS, *(kind.suffix for kind in COMPANIONS if not kind.parameter_too))


def companions(names: list[str], dtypes: list[str], positions: list[int], aliases: dict[str, str]) -> list[tuple[int, CompanionKind]]:
    """The tensors at `positions` that `split_quantised` sets aside as companions, in order, with
    their kind: a name test and a dtype test per kind, in C (DeepSeek-V3 stores 45,000 scales).
    No name ends with two of the kinds' suffixes, nor with a packed weight's."""
    found: dict[int, CompanionKind] = {}
    for kind in COMPANIONS:
        named = list(compress(positions, map(methodcaller("endswith", kind.suffix), map(names.__getitem__, positions))))
        found.update(zip(compress(named, map(kind.dtypes.__contains__, map(dtypes.__getitem__, named))), repeat(kind)))
    if aliases:
        found = {i: kind for i, kind in found.items() if names[i] not in aliases}
    return sorted(found.items(), key=itemgetter(0))


def unpacked_shape(blocks: tuple[int, ...]) -> tuple[int, ...]:
    """The parameter an MXFP4 `[*prefix, G, 16]` tensor stands for: `[*prefix, G*32]`, with the last two
    axes swapped when there are three or more (transformers' dequantised [E, in, out] expert layout)."""
    *prefix, groups, _ = blocks
    shape = [*prefix, groups * MXFP4_BYTES * 2]
    if len(shape) >= 3:
        shape[1], shape[2] = shape[2], shape[1]
    return tuple(shape)


def fp8_block_scale_shape(weight: tuple[int, ...], block: int = FP8_BLOCK) -> tuple[int, ...]:
    """The `weight_scale_inv` shape of a weight: one scale per block, edge blocks padded."""
    return tuple(math.ceil(dim / block) for dim in weight)
