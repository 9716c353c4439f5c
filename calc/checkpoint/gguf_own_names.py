"""What every `OWN` architecture's tables (calc/checkpoint/gguf_source.py) do with them, since gguf-py 0.19.0 has
none for it: transformers' name -> the GGUF name llama.cpp's converter writes (its layers' tensors after
`model.layers.{i}.`, and the rest), and its scalar hyperparameter keys -> the config's."""

from __future__ import annotations

from typing import Any

from calc.checkpoint.gguf_header import GGUFArray
from calc.errors import GptcalcError

__all__ = ["TOP", "gguf_name_in", "scalars"]

# transformers' embedding, final norm and head -> the GGUF tensors every converter writes for them
TOP = {"model.embed_tokens": "token_embd.weight", "model.norm": "output_norm.weight", "lm_head": "output.weight"}


def gguf_name_in(hf_name: str, layer: dict[str, str], top: dict[str, str]) -> str | None:
    """The GGUF tensor for this transformers tensor by the tables `layer` and `top` (None: the converter writes
    none). Keys are names without `.weight` / `.bias`."""
    stem = hf_name.removesuffix(".weight").removesuffix(".bias")
    parts = stem.split(".")
    if len(parts) > 3 and parts[:2] == ["model", "layers"] and parts[2].isdigit():
        found = layer.get(".".join(parts[3:]))
        return f"blk.{parts[2]}.{found}" if found else None
    return top.get(stem)


def scalars(meta: dict[str, Any], arch: str, keys: dict[str, str], model: str, path: str) -> dict[str, Any]:
    """The config's keys `keys` maps `{arch}.KEY` to, where the file has them; an array is refused, since the
    model (`model`, for the message) has one value for every layer."""
    data: dict[str, Any] = {}
    for key, target in keys.items():
        value = meta.get(f"{arch}.{key}")
        if isinstance(value, (list, GGUFArray)):
            raise GptcalcError(f"{path}: {arch}.{key}: an array; {model} has one value for every layer")
        if value is not None:
            data[target] = value
    return data
