"""How vLLM builds a model: facts of vLLM's code for an architecture, which no config key states.

vLLM (v0.32) picks an implementation by the config's architecture (vllm/model_executor/models/registry.py)
and each implementation makes its own choices: which class, which dtype its rotary table keeps, how many
positions its M-RoPE table spans. The adapter that reads a model_type knows which architecture that is, so
it states them here (calc/arch/*.py), and whatever sizes vLLM's memory asks the spec, never the model_type.
A spec with none of them set is a model vLLM implements itself with get_rope's defaults.
"""

from __future__ import annotations

from typing import Literal

from calc.parts.base import Field, Part

__all__ = ["VllmBuild"]


class VllmBuild(Part):
    """`implementation`: "native", a class of vLLM's own; "transformers", the architecture is one vLLM
    0.32 serves through its Transformers backend (registry.py _TRANSFORMERS_SUPPORTED_MODELS, or the
    fallback of resolve_model_cls for a transformers class that can set its attention implementation),
    whose layers are transformers' own: their rotary keeps inv_freq, no cos/sin table; "none", vLLM 0.32
    serves it no more (registry.py _PREVIOUSLY_SUPPORTED_MODELS, no transformers class it can run).
    `rope_dtype`: "float32" where vLLM keeps the cos/sin table in fp32 whatever the model's dtype.
    `mrope_positions`: MRotaryEmbedding's positions_factor, its table's rows per max_position
    (rotary_embedding/__init__.py get_rope: 4 unless the model passes another)."""

    implementation: Literal["native", "transformers", "none"] = "native"
    rope_dtype: Literal["model", "float32"] = "model"
    mrope_positions: int = Field(default=4, gt=0)
