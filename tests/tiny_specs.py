"""Tiny GPT-2- and Llama-layout specs for the torch cross-checks of `flops` and `train`: MHA, GQA and
MQA; learned, rotary or no positions; head_dim ≠ d_model / n_heads; tied and untied heads; GELU
and SwiGLU MLPs; LayerNorm and RMSNorm; biases on Q/K/V."""

from __future__ import annotations

from typing import Any

from calc.spec.model import ModelSpec, spec_from_dict

SMALL = {"vocab_size": 97, "n_positions": 16, "d_model": 24, "n_layers": 2}
TINY: dict[str, dict[str, Any]] = {
    "gpt2-mha-learned": {"family": "gpt2", "n_heads": 4},
    "gpt2-gqa-head_dim": {"family": "gpt2", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8},
    "llama-gqa-rotary-bias": {"family": "llama", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8, "d_ff": 40,
                              "qkv_bias": True},
    "llama-mqa-tied": {"family": "llama", "n_heads": 6, "n_kv_heads": 1, "tie_embeddings": True},
    "llama-nopos-gelu-layernorm": {"family": "llama", "n_heads": 2, "position_embedding": "none", "mlp": "gelu",
                                   "norm": "layernorm"},
}


def tiny_spec(name: str) -> ModelSpec:
    return spec_from_dict({"name": name, **SMALL, **TINY[name]}, origin=name)
