"""Hugging Face tensor names -> our components, kept as data, and the tensors a spec implies.

Both the torch reference model (whose parameters carry Hugging Face names so real checkpoints
load with strict=True) and the checkpoint readers map names through these tables, so the two
sources cannot disagree about what a tensor is. `{}` stands for the layer index. A value of
`None` marks a known buffer (causal masks, rotary frequencies): stored in some files, never a
parameter. A tuple marks a fused tensor (GPT-2's `c_attn`) that holds Q, K and V side by side.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from calc.spec.model import ModelSpec

__all__ = ["NAME_MAPS", "TensorName", "classify", "component_counts", "expected_shapes"]

Target = str | tuple[str, ...] | None

NAME_MAPS: dict[str, dict[str, Target]] = {
    "gpt2": {
        "wte.weight": "token_embedding",
        "wpe.weight": "position_embedding",
        "h.{}.ln_1.weight": "attn_norm",
        "h.{}.ln_1.bias": "attn_norm",
        "h.{}.attn.c_attn.weight": ("q", "k", "v"),
        "h.{}.attn.c_attn.bias": ("q_bias", "k_bias", "v_bias"),
        "h.{}.attn.c_proj.weight": "attn_out",
        "h.{}.attn.c_proj.bias": "attn_out_bias",
        "h.{}.ln_2.weight": "mlp_norm",
        "h.{}.ln_2.bias": "mlp_norm",
        "h.{}.mlp.c_fc.weight": "mlp_up",
        "h.{}.mlp.c_fc.bias": "mlp_up_bias",
        "h.{}.mlp.c_proj.weight": "mlp_down",
        "h.{}.mlp.c_proj.bias": "mlp_down_bias",
        "ln_f.weight": "final_norm",
        "ln_f.bias": "final_norm",
        "lm_head.weight": "lm_head",
        "h.{}.attn.bias": None,  # causal mask [1, 1, n_positions, n_positions]
        "h.{}.attn.masked_bias": None,  # the -1e4 fill value, older checkpoints
    },
    "llama": {
        "model.embed_tokens.weight": "token_embedding",
        "wpe.weight": "position_embedding",  # only a spec asking for learned positions; named as GPT-2's
        "model.layers.{}.input_layernorm.weight": "attn_norm",
        "model.layers.{}.input_layernorm.bias": "attn_norm",  # norm=layernorm only
        "model.layers.{}.self_attn.q_proj.weight": "q",
        "model.layers.{}.self_attn.q_proj.bias": "q_bias",
        "model.layers.{}.self_attn.k_proj.weight": "k",
        "model.layers.{}.self_attn.k_proj.bias": "k_bias",
        "model.layers.{}.self_attn.v_proj.weight": "v",
        "model.layers.{}.self_attn.v_proj.bias": "v_bias",
        "model.layers.{}.self_attn.o_proj.weight": "attn_out",
        "model.layers.{}.self_attn.o_proj.bias": "attn_out_bias",
        "model.layers.{}.post_attention_layernorm.weight": "mlp_norm",
        "model.layers.{}.post_attention_layernorm.bias": "mlp_norm",
        "model.layers.{}.mlp.gate_proj.weight": "mlp_gate",
        "model.layers.{}.mlp.gate_proj.bias": "mlp_gate_bias",
        "model.layers.{}.mlp.up_proj.weight": "mlp_up",
        "model.layers.{}.mlp.up_proj.bias": "mlp_up_bias",
        "model.layers.{}.mlp.down_proj.weight": "mlp_down",
        "model.layers.{}.mlp.down_proj.bias": "mlp_down_bias",
        "model.norm.weight": "final_norm",
        "model.norm.bias": "final_norm",
        "lm_head.weight": "lm_head",
        "model.layers.{}.self_attn.rotary_emb.inv_freq": None,  # Llama-2 checkpoints store it
    },
}

# GPT2LMHeadModel's state dict says `transformer.wte.weight`; GPT2Model's says `wte.weight`.
OPTIONAL_PREFIXES: dict[str, tuple[str, ...]] = {"gpt2": ("transformer.",), "llama": ()}


# A layer index as transformers writes it: ASCII digits, no leading zero (`h.01.` and `h.١.` are not layer 1).
LAYER_INDEX = r"(0|[1-9][0-9]*)"


def _compile(family: str) -> list[tuple[re.Pattern[str], str, Target]]:
    return [
        (re.compile("^" + re.escape(template).replace(r"\{\}", LAYER_INDEX) + "$"), template, target)
        for template, target in NAME_MAPS[family].items()
    ]


_PATTERNS = {family: _compile(family) for family in NAME_MAPS}


@dataclass(frozen=True)
class TensorName:
    """What one tensor name means: its template, layer (None outside the stack) and target."""

    template: str
    layer: int | None
    target: Target

    @property
    def is_buffer(self) -> bool:
        return self.target is None


def classify(name: str, family: str) -> TensorName | None:
    """Map a tensor name to its meaning, or None when the family has no such tensor."""
    for prefix in OPTIONAL_PREFIXES[family]:
        if name.startswith(prefix) and name != prefix:
            name = name[len(prefix):]
            break
    for pattern, template, target in _PATTERNS[family]:
        if match := pattern.match(name):
            return TensorName(template, int(match.group(1)) if match.groups() else None, target)
    return None


def expected_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Every parameter tensor a Hugging Face checkpoint of this spec holds, with its shape.

    Linear weights are [out, in] (torch's nn.Linear); GPT-2's Conv1D weights are [in, out]
    because its Conv1D computes x @ W. A tied head has no `lm_head.weight`.
    """
    layer_shapes = _gpt2_layer(spec) if spec.family == "gpt2" else _llama_layer(spec)
    shapes: dict[str, tuple[int, ...]] = {}
    embed = "wte.weight" if spec.family == "gpt2" else "model.embed_tokens.weight"
    shapes[embed] = (spec.vocab_size, spec.d_model)
    if spec.position_embedding == "learned":
        shapes["wpe.weight"] = (spec.n_positions, spec.d_model)
    for layer in range(spec.n_layers):
        for template, shape in layer_shapes.items():
            shapes[template.format(layer)] = shape
    final = "ln_f" if spec.family == "gpt2" else "model.norm"
    shapes.update(_norm(spec, final))
    if not spec.tie_embeddings:
        shapes["lm_head.weight"] = (spec.vocab_size, spec.d_model)
    return shapes


def _norm(spec: ModelSpec, prefix: str) -> dict[str, tuple[int, ...]]:
    shapes = {f"{prefix}.weight": (spec.d_model,)}
    if spec.norm == "layernorm":
        shapes[f"{prefix}.bias"] = (spec.d_model,)
    return shapes


def _gpt2_layer(s: ModelSpec) -> dict[str, tuple[int, ...]]:
    qkv = s.q_dim + 2 * s.kv_dim
    shapes = {**_norm(s, "h.{}.ln_1"), "h.{}.attn.c_attn.weight": (s.d_model, qkv)}
    if s.qkv_bias:
        shapes["h.{}.attn.c_attn.bias"] = (qkv,)
    shapes["h.{}.attn.c_proj.weight"] = (s.q_dim, s.d_model)
    if s.attn_out_bias:
        shapes["h.{}.attn.c_proj.bias"] = (s.d_model,)
    shapes.update(_norm(s, "h.{}.ln_2"))
    shapes["h.{}.mlp.c_fc.weight"] = (s.d_model, s.d_ff)
    if s.mlp_bias:
        shapes["h.{}.mlp.c_fc.bias"] = (s.d_ff,)
    shapes["h.{}.mlp.c_proj.weight"] = (s.d_ff, s.d_model)
    if s.mlp_bias:
        shapes["h.{}.mlp.c_proj.bias"] = (s.d_model,)
    return shapes


def _llama_layer(s: ModelSpec) -> dict[str, tuple[int, ...]]:
    prefix = "model.layers.{}."
    shapes = _norm(s, prefix + "input_layernorm")
    linears = [
        ("self_attn.q_proj", s.q_dim, s.d_model, s.qkv_bias),
        ("self_attn.k_proj", s.kv_dim, s.d_model, s.qkv_bias),
        ("self_attn.v_proj", s.kv_dim, s.d_model, s.qkv_bias),
        ("self_attn.o_proj", s.d_model, s.q_dim, s.attn_out_bias),
    ]
    mlp = [("mlp.up_proj", s.d_ff, s.d_model, s.mlp_bias), ("mlp.down_proj", s.d_model, s.d_ff, s.mlp_bias)]
    if s.mlp == "swiglu":
        mlp.insert(0, ("mlp.gate_proj", s.d_ff, s.d_model, s.mlp_bias))
    shapes.update(_linears(prefix, linears))
    shapes.update(_norm(s, prefix + "post_attention_layernorm"))
    shapes.update(_linears(prefix, mlp))
    return shapes


def _linears(prefix: str, linears: list[tuple[str, int, int, bool]]) -> dict[str, tuple[int, ...]]:
    """nn.Linear tensors: weight [out, in] and, where present, bias [out]."""
    shapes: dict[str, tuple[int, ...]] = {}
    for name, out_features, in_features, bias in linears:
        shapes[f"{prefix}{name}.weight"] = (out_features, in_features)
        if bias:
            shapes[f"{prefix}{name}.bias"] = (out_features,)
    return shapes


def component_counts(meaning: TensorName, shape: tuple[int, ...], spec: ModelSpec) -> dict[str, int]:
    """How many elements of a tensor of `shape` go to which component.

    A fused Q/K/V tensor is split along its output axis in the proportions the spec gives
    (q_dim : kv_dim : kv_dim); its element count must divide that way or the split is refused.
    A buffer contributes nothing.
    """
    elements = math.prod(shape)
    if meaning.target is None:
        return {}
    if isinstance(meaning.target, str):
        return {meaning.target: elements}
    widths = (spec.q_dim, spec.kv_dim, spec.kv_dim)
    rows, remainder = divmod(elements, sum(widths))
    if remainder:
        raise ValueError(f"fused Q/K/V of shape {list(shape)} does not split as {list(widths)}")
    return {component: rows * width for component, width in zip(meaning.target, widths)}
