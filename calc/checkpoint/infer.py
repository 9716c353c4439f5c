"""A spec read off a checkpoint's tensor shapes, for a lone weights file with no config.json.

Shapes give almost everything: vocabulary and width from the embedding, depth from the layer
indices, d_ff from the MLP, the Q and KV widths, which biases exist, whether the head is tied.
Two things are not stored in any tensor and are assumed, and said so in the returned notes:
the head count (head_dim 64 for GPT-2, 128 for Llama-style models when the widths allow) and,
for rotary models, the context length. Neither changes a parameter count. Layouts with more in
their layers (hybrids, MLA) go through their config.json's keys (`calc.checkpoint.infer_configs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from itertools import compress, repeat
from math import gcd
from operator import gt, methodcaller, not_, or_
from typing import Any, Iterator

from calc.checkpoint.infer_configs import Shapes, Uninferable
from calc.checkpoint.infer_hybrids import config_of
from calc.checkpoint.layouts import LAYOUTS, with_base
from calc.checkpoint.names import INDEX
from calc.checkpoint.sources import RawCheckpoint
from calc.errors import GptcalcError
from calc.spec.hf import HFConfig
from calc.spec.model import ModelSpec, spec_from_dict

__all__ = ["detect_family", "infer_spec"]

# The layouts whose specs tensor shapes determine (with stated assumptions), by their paths: GPT-2's
# and Llama's, whose own tensors may tell a newer layout (calc.checkpoint.infer_configs), and the
# `backbone.` of Mamba2 and Nemotron-H. A tie goes to the first.
INFERABLE = ("gpt2", "llama", "mamba2")


# Model-level tensors a newer Llama-named layout stores beside the embedding: Gemma-3n's and
# Gemma-4's per-layer embedding table, its projection and that projection's norm.
PER_LAYER_INPUT = tuple(LAYOUTS["gemma3n_text"][role] for role in ("embed_per_layer", "per_layer_projection",
                                                                    "per_layer_projection_norm"))


@cache
def _paths(family: str) -> tuple[dict[str, Any], frozenset[str], re.Pattern[str]]:
    """A family's layout, its model-level tensor names and its layer-name pattern, made once."""
    lay = LAYOUTS[family]
    paths = [lay[role] for role in ("embed", "positions", "final_norm", "lm_head") if role in lay]
    model_level = frozenset(f"{path}.{kind}" for path in (*paths, *(PER_LAYER_INPUT if family == "llama" else ()))
                            for kind in ("weight", "bias"))
    return lay, model_level, re.compile(rf"^{re.escape(lay['layers'])}\.{INDEX}\.(.+)$")


def _template(name: str, family: str) -> tuple[str, int | None] | None:
    """A stored name as the family's canonical template (`{}` for the layer) and its layer, or None
    when the name is not under the family's paths."""
    lay, model_level, pattern = _paths(family)
    name = with_base(name, lay, model_level)
    if name in model_level:
        return name, None
    match = pattern.match(name)
    return (f"{lay['layers']}.{{}}.{match.group(2)}", int(match.group(1))) if match else None


@dataclass(frozen=True)
class _Found:
    """The names under one family's paths: how many; of those not aliases, each one's template and
    layer, and the shape of each template (its last tensor's); each one's position in `column`, the
    file's shapes, for the rare layout whose layers store one template at two shapes."""

    hits: int
    templates: list[str]
    layer_of: list[int | None]
    shapes: dict[str, tuple[int, ...]]
    positions: list[int]
    column: list[tuple[int, ...]]

    @property
    def layers(self) -> set[int | None]:
        return set(self.layer_of)

    def layers_of(self, template: str) -> list[int]:
        """The layers that store a tensor of `template`, in order."""
        return sorted(set(compress(self.layer_of, map(template.__eq__, self.templates))))  # type: ignore[type-var]

    def in_layer(self, layer: int) -> dict[str, tuple[int, ...]]:
        """The shapes as one layer stores them (the model-level ones beside): a pass over every name,
        made only for a layout that asks (Kimi Linear's MLA and KDA layers share q_proj's name)."""
        here = [found == layer for found in self.layer_of]
        return {**self.shapes, **dict(zip(compress(self.templates, here),
                                          map(self.column.__getitem__, compress(self.positions, here))))}

    def per_layer(self, template: str) -> dict[int, tuple[int, ...]]:
        """Each layer's shape of `template`: one pass, for a layout whose layer kinds differ only in
        widths (Gemma-4's local and global layers' head widths)."""
        here = [found == template for found in self.templates]
        return dict(zip(compress(self.layer_of, here), map(self.column.__getitem__, compress(self.positions, here))))


def _found(raw: RawCheckpoint, family: str) -> _Found:
    """`_template` of every stored name, as the whole-column operations that 100,000 names need.

    First the names that might be the family's at all (`_might`: names of another family are left
    there, in one pass). Of those, a name already under the full layer path (`model.layers.7.…`,
    all but a few in a checkpoint of this family) is its own canonical name, so one regular
    expression reads them all (`_in_layers`); the few others (model-level names, a base model's
    `layers.7.…`) take `_template` one by one.
    """
    lay, model_level, _ = _paths(family)
    names, shapes = raw.columns.names, raw.columns.shapes
    layers_dot, memory = lay["layers"] + ".", lay.get("memory_base", "")
    candidates = list(compress(range(len(names)), _might(names, lay, model_level)))
    if _direct(lay, model_level):
        direct = list(map(methodcaller("startswith", layers_dot), map(names.__getitem__, candidates)))
        if memory:  # a name under `memory_base` is renamed first (`with_base`)
            direct = list(map(gt, direct, map(methodcaller("startswith", memory), map(names.__getitem__, candidates))))
    else:  # (a layout whose layers are not under its base, or with a model-level name there: one by one)
        direct = [False] * len(candidates)
    under, rest = list(compress(candidates, direct)), list(compress(candidates, map(not_, direct)))
    positions, templates, layers = _in_layers(names, under, layers_dot)
    if positions is None:  # a name with a line break (never a real one) would break the lines: one by one
        rest = sorted([*rest, *(i for i in under if "\n" in names[i])])
        positions, templates, layers = _in_layers(names, [i for i in under if "\n" not in names[i]], layers_dot)
    n_direct = len(positions)
    for i in rest:
        if (found := _template(names[i], family)) is not None:
            positions.append(i)
            templates.append(found[0])
            layers.append(found[1])
    hits = len(positions)
    if raw.aliases:  # (a torch state dict's shared tensors: rare, and few names)
        kept = [k for k, i in enumerate(positions) if names[i] not in raw.aliases]
        positions, templates, layers = ([column[k] for k in kept] for column in (positions, templates, layers))
        n_direct = sum(k < n_direct for k in kept)
    return _Found(hits, templates, layers, _last_shapes(positions, templates, shapes, n_direct), positions, shapes)


def _in_layers(names: list[str], positions: list[int], layers_dot: str) -> tuple[Any, Any, Any]:
    """Of the names at `positions` (all under `layers_dot`), those the layer pattern matches: their
    positions, templates and layers. One regular expression reads them all, joined a line each;
    (None, None, None) when a name holds a line break."""
    joined = "\n".join(map(names.__getitem__, positions))
    if joined.count("\n") != max(len(positions) - 1, 0):
        return None, None, None
    indexes, rests = zip(*_lines(layers_dot).findall(joined)) if positions else ((), ())
    layer_of = {index: int(index) for index in set(indexes) if index}  # one per layer
    template_of = {rest: layers_dot + "{}." + rest for rest in set(rests)}  # a few dozen
    return (list(compress(positions, indexes)), list(map(template_of.__getitem__, compress(rests, indexes))),
            list(map(layer_of.__getitem__, compress(indexes, indexes))))


@cache
def _lines(layers_dot: str) -> re.Pattern[str]:
    """Each line: the layer pattern's index and rest, or ("", "") when it does not match."""
    return re.compile(rf"^(?:{re.escape(layers_dot)}{INDEX}\.(.+)|.*)$", re.MULTILINE)


def _last_shapes(positions: list[int], templates: list[str], shapes: list[tuple[int, ...]],
                 n_direct: int) -> dict[str, tuple[int, ...]]:
    """Each template's shape: that of its last tensor in the file. The first `n_direct` are in file
    order (a dict keeps the last); each of the others replaces a template's only if it comes later."""
    found = dict(zip(templates[:n_direct], map(shapes.__getitem__, positions[:n_direct])))
    last: dict[str, int] = {}  # of a template the others share with the first ones (base-less layer names: rare)
    for position, template in zip(positions[n_direct:], templates[n_direct:]):
        if template in found and template not in last:
            last[template] = max(compress(positions[:n_direct], map(template.__eq__, templates[:n_direct])), default=-1)
        if last.get(template, -1) < position:
            found[template], last[template] = shapes[position], position
    return found


def _direct(lay: dict[str, Any], model_level: frozenset[str]) -> bool:
    """Whether a name under the full layer path is sure to be its own canonical name, not model-level."""
    layers_dot = lay["layers"] + "."
    return layers_dot.startswith(lay.get("base", "")) and not any(name.startswith(layers_dot) for name in model_level)


def _might(names: list[str], lay: dict[str, Any], model_level: frozenset[str]) -> Iterator[bool]:
    """For each name, whether `_template` might find it under the family's paths: a model-level
    name (or one with the base left out), a name under the layer path, the memory base, or the
    layer path with the base left out."""
    base, memory, layers_dot = lay.get("base", ""), lay.get("memory_base", ""), lay["layers"] + "."
    if base.startswith(layers_dot):
        return repeat(True)
    known = model_level | {name.removeprefix(base) for name in model_level if name.startswith(base)}
    starts = tuple(prefix for prefix in (layers_dot, memory, layers_dot.removeprefix(base)
                                         if layers_dot.startswith(base) else "") if prefix)
    return map(or_, map(known.__contains__, names), map(methodcaller("startswith", starts), names))


def detect_family(raw: RawCheckpoint) -> str:
    """The layout whose paths hold the most tensors."""
    return _detected(raw)[0]


def _detected(raw: RawCheckpoint) -> tuple[str, _Found]:
    found = {family: _found(raw, family) for family in INFERABLE}
    family = max(found, key=lambda f: found[f].hits)
    if not found[family].hits:
        example = raw.columns.names[0] if len(raw.columns) else "(no tensors)"
        raise GptcalcError(
            f"{raw.source}: no tensor name matches a known layout ({', '.join(INFERABLE)}), e.g. {example!r}; "
            "pass MODEL to say what it is"
        )
    return family, found[family]


def infer_spec(raw: RawCheckpoint) -> tuple[ModelSpec, tuple[str, ...]]:
    """A spec consistent with every tensor shape, and the notes saying what was assumed: a layout
    `calc.checkpoint.infer_configs` knows by its own tensors through its config.json's keys and
    adapter, any other GPT-2- or Llama-named one as a flat spec."""
    family, found = _detected(raw)
    n_layers = max((l for l in found.layers if l is not None), default=0) + 1
    shapes, origin = Shapes(found.shapes, found.layers_of, n_layers, found.in_layer, found.per_layer), f"{raw.source} (spec inferred from tensor shapes)"
    try:
        configured = config_of(shapes) if n_layers <= len(raw.columns) else None
        if configured is None and family not in FLAT:
            raise Uninferable(f"no tensor says which {family}-named layout it is")
        fields, notes = configured or FLAT[family](shapes)
    except Uninferable as exc:
        raise GptcalcError(f"{raw.source}: cannot infer a spec from tensor shapes: {exc}; pass MODEL") from None
    if n_layers > len(raw.columns):  # every layer stores at least one tensor
        raise GptcalcError(f"{raw.source}: a tensor name says layer {n_layers - 1:,}, but only {len(raw.columns):,} "
                           "tensors are stored; refused")
    if configured:
        return spec_from_dict(HFConfig(fields, origin, raw.source, force_name=True).spec_dict(), origin), notes
    fields.update(family=family, name=raw.source, n_layers=n_layers)
    return spec_from_dict(fields, origin), notes


def _gpt2(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    vocab, width = shapes.dim("transformer.wte.weight", 0), shapes.dim("transformer.wte.weight", 1)
    heads = width // 64 if width % 64 == 0 else 1
    fields: dict[str, Any] = {
        "vocab_size": vocab, "d_model": width, "n_heads": heads,
        "d_ff": shapes.dim("transformer.h.{}.mlp.c_fc.weight", 1),
        "qkv_bias": "transformer.h.{}.attn.c_attn.bias" in shapes,
        "attn_out_bias": "transformer.h.{}.attn.c_proj.bias" in shapes,
        "mlp_bias": "transformer.h.{}.mlp.c_fc.bias" in shapes,
        "norm": "layernorm" if "transformer.h.{}.ln_1.bias" in shapes else "rmsnorm",
        "tie_embeddings": "lm_head.weight" not in shapes,
    }
    if "transformer.wpe.weight" in shapes:
        fields["n_positions"] = shapes.dim("transformer.wpe.weight", 0)
        notes = ()
    else:
        fields.update(position_embedding="none", n_positions=1024)
        notes = ("no position embedding stored: n_positions assumed 1024",)
    return fields, (f"n_heads is not stored in tensor shapes: assumed {heads} (head_dim {width // heads})", *notes)


def _llama(shapes: Shapes) -> tuple[dict[str, Any], tuple[str, ...]]:
    prefix = "model.layers.{}."
    width = shapes.dim("model.embed_tokens.weight", 1)
    q_dim, kv_dim = shapes.dim(prefix + "self_attn.q_proj.weight", 0), shapes.dim(prefix + "self_attn.k_proj.weight", 0)
    head_dim = next((h for h in (128, 64) if q_dim % h == 0 and kv_dim % h == 0), gcd(q_dim, kv_dim))
    fields: dict[str, Any] = {
        "vocab_size": shapes.dim("model.embed_tokens.weight", 0), "d_model": width,
        "n_heads": q_dim // head_dim, "n_kv_heads": kv_dim // head_dim, "head_dim": head_dim,
        "d_ff": shapes.dim(prefix + "mlp.up_proj.weight", 0), "n_positions": 4096,
        "mlp": "swiglu" if prefix + "mlp.gate_proj.weight" in shapes else "gelu",
        "qkv_bias": prefix + "self_attn.q_proj.bias" in shapes,
        "attn_out_bias": prefix + "self_attn.o_proj.bias" in shapes,
        "mlp_bias": prefix + "mlp.up_proj.bias" in shapes,
        "tie_embeddings": "lm_head.weight" not in shapes,
        "norm": "layernorm" if prefix + "input_layernorm.bias" in shapes else "rmsnorm",
    }
    if "wpe.weight" in shapes:
        fields.update(position_embedding="learned", n_positions=shapes.dim("wpe.weight", 0))
    notes = (
        f"head count is not stored in tensor shapes: assumed head_dim {head_dim} "
        f"({fields['n_heads']} query heads, {fields['n_kv_heads']} KV heads)",
    )
    if "wpe.weight" not in shapes:
        notes += ("context length is not stored in a rotary model's tensors: n_positions assumed 4096",)
    return fields, notes


FLAT = {"gpt2": _gpt2, "llama": _llama}  # the families read as a flat spec when no newer layout's tensor is stored
