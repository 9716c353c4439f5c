"""A spec read off a checkpoint's tensor shapes, for a lone weights file with no config.json.

Shapes give almost everything: vocabulary and width from the embedding, depth from the layer
indices, d_ff from the MLP, the Q and KV widths, which biases exist, whether the head is tied.
Two things are not stored in any tensor and are assumed, and said so in the returned notes:
the head count (head_dim 64 for GPT-2, 128 for Llama-style models when the widths allow) and,
for rotary models, the context length. Neither changes a parameter count.
"""

from __future__ import annotations

import re
from math import gcd
from typing import Any

from calc.checkpoint.layouts import LAYOUTS, with_base
from calc.checkpoint.names import INDEX
from calc.checkpoint.sources import RawCheckpoint
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec, spec_from_dict

__all__ = ["detect_family", "infer_spec"]

INFERABLE = ("gpt2", "llama")  # the layouts whose specs tensor shapes alone determine (with stated assumptions)


def _template(name: str, family: str) -> tuple[str, int | None] | None:
    """A stored name as the family's canonical template (`{}` for the layer) and its layer, or None
    when the name is not under the family's paths."""
    lay = LAYOUTS[family]
    model_level = {f"{lay[role]}.{kind}" for role in ("embed", "positions", "final_norm", "lm_head") if role in lay
                   for kind in ("weight", "bias")}
    name = with_base(name, lay, model_level)
    if name in model_level:
        return name, None
    match = re.match(rf"^{re.escape(lay['layers'])}\.{INDEX}\.(.+)$", name)
    return (f"{lay['layers']}.{{}}.{match.group(2)}", int(match.group(1))) if match else None


def detect_family(raw: RawCheckpoint) -> str:
    """The layout whose paths hold the most tensors."""
    hits = {family: sum(_template(t.name, family) is not None for t in raw.tensors) for family in INFERABLE}
    family = max(hits, key=lambda f: hits[f])
    if not hits[family]:
        example = raw.tensors[0].name if raw.tensors else "(no tensors)"
        raise GptcalcError(
            f"{raw.source}: no tensor name matches a known layout ({', '.join(INFERABLE)}), e.g. {example!r}; "
            "pass MODEL to say what it is"
        )
    return family


def infer_spec(raw: RawCheckpoint) -> tuple[ModelSpec, tuple[str, ...]]:
    """A spec consistent with every tensor shape, and the notes saying what was assumed."""
    family = detect_family(raw)
    shapes: dict[str, tuple[int, ...]] = {}
    layers = set()
    for tensor in raw.tensors:
        found = _template(tensor.name, family)
        if found is not None and tensor.name not in raw.aliases:
            shapes[found[0]] = tensor.shape
            layers.add(found[1])
    try:
        fields, notes = (_gpt2 if family == "gpt2" else _llama)(shapes)
    except _Uninferable as exc:
        raise GptcalcError(f"{raw.source}: cannot infer a spec from tensor shapes: {exc}; pass MODEL") from None
    n_layers = max((l for l in layers if l is not None), default=0) + 1
    if n_layers > len(raw.tensors):  # every layer stores at least one tensor
        raise GptcalcError(f"{raw.source}: a tensor name says layer {n_layers - 1:,}, but only {len(raw.tensors):,} "
                           "tensors are stored; refused")
    fields.update(family=family, name=raw.source, n_layers=n_layers)
    return spec_from_dict(fields, f"{raw.source} (spec inferred from tensor shapes)"), notes


class _Uninferable(Exception):
    """A tensor inference needs is absent, or not the matrix it should be."""


def _dim(shapes: dict[str, tuple[int, ...]], template: str, axis: int) -> int:
    """One dimension of a weight matrix (every tensor inference reads is 2-D)."""
    shape, name = shapes.get(template), template.replace("{}", "N").removeprefix("transformer.")  # as GPT-2 files name it
    if shape is None:
        raise _Uninferable(f"no {name} tensor")
    if len(shape) != 2 or not all(shape):
        raise _Uninferable(f"{name}: shape {list(shape)}, expected 2 dimensions, neither empty")
    return shape[axis]


def _gpt2(shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, Any], tuple[str, ...]]:
    vocab, width = _dim(shapes, "transformer.wte.weight", 0), _dim(shapes, "transformer.wte.weight", 1)
    heads = width // 64 if width % 64 == 0 else 1
    fields: dict[str, Any] = {
        "vocab_size": vocab, "d_model": width, "n_heads": heads,
        "d_ff": _dim(shapes, "transformer.h.{}.mlp.c_fc.weight", 1),
        "qkv_bias": "transformer.h.{}.attn.c_attn.bias" in shapes,
        "attn_out_bias": "transformer.h.{}.attn.c_proj.bias" in shapes,
        "mlp_bias": "transformer.h.{}.mlp.c_fc.bias" in shapes,
        "norm": "layernorm" if "transformer.h.{}.ln_1.bias" in shapes else "rmsnorm",
        "tie_embeddings": "lm_head.weight" not in shapes,
    }
    if "transformer.wpe.weight" in shapes:
        fields["n_positions"] = _dim(shapes, "transformer.wpe.weight", 0)
        notes = ()
    else:
        fields.update(position_embedding="none", n_positions=1024)
        notes = ("no position embedding stored: n_positions assumed 1024",)
    return fields, (f"n_heads is not stored in tensor shapes: assumed {heads} (head_dim {width // heads})", *notes)


def _llama(shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, Any], tuple[str, ...]]:
    prefix = "model.layers.{}."
    width = _dim(shapes, "model.embed_tokens.weight", 1)
    q_dim, kv_dim = _dim(shapes, prefix + "self_attn.q_proj.weight", 0), _dim(shapes, prefix + "self_attn.k_proj.weight", 0)
    head_dim = next((h for h in (128, 64) if q_dim % h == 0 and kv_dim % h == 0), gcd(q_dim, kv_dim))
    fields: dict[str, Any] = {
        "vocab_size": _dim(shapes, "model.embed_tokens.weight", 0), "d_model": width,
        "n_heads": q_dim // head_dim, "n_kv_heads": kv_dim // head_dim, "head_dim": head_dim,
        "d_ff": _dim(shapes, prefix + "mlp.up_proj.weight", 0), "n_positions": 4096,
        "mlp": "swiglu" if prefix + "mlp.gate_proj.weight" in shapes else "gelu",
        "qkv_bias": prefix + "self_attn.q_proj.bias" in shapes,
        "attn_out_bias": prefix + "self_attn.o_proj.bias" in shapes,
        "mlp_bias": prefix + "mlp.up_proj.bias" in shapes,
        "tie_embeddings": "lm_head.weight" not in shapes,
        "norm": "layernorm" if prefix + "input_layernorm.bias" in shapes else "rmsnorm",
    }
    if "wpe.weight" in shapes:
        fields.update(position_embedding="learned", n_positions=_dim(shapes, "wpe.weight", 0))
    notes = (
        f"head count is not stored in tensor shapes: assumed head_dim {head_dim} "
        f"({fields['n_heads']} query heads, {fields['n_kv_heads']} KV heads)",
    )
    if "wpe.weight" not in shapes:
        notes += ("context length is not stored in a rotary model's tensors: n_positions assumed 4096",)
    return fields, notes
