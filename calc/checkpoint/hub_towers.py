"""A tower checkpoint in its Hub layout, made into transformers 5's in-memory tensors for `verify --load`.

Where a tower kind's Hub files name or cut its tensors otherwise (`calc.checkpoint.tower_slots`, the
layout's `hub`: Kimi-K2.5's MoonViT), the reference tower and transformers' model both hold the
in-memory ones, which transformers' conversion_mapping.py makes on loading; this does the same, by
role: a tensor the two layouts name apart is renamed, a fused Q|K|V (`wqkv`) split into Q, K and V,
and where the Hub pairs Q's and K's rows for rotary as (2i, 2i+1) (`rope_pairs: interleaved`, the
original MoonViT's complex numbers) each head's rows reordered to (i, i + d_head / 2), as
transformers' PermuteForRope does. A tensor already in-memory is left as it is.
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.tower_slots import layout_of, tower_roles
from calc.towers import Tower

__all__ = ["in_memory_towers"]


def in_memory_towers(towers: dict[str, Tower], state: dict[str, Any]) -> dict[str, Any]:
    """`state` (tower tensors under their canonical names, Hub or in-memory) under the in-memory names."""
    out = dict(state)
    for name, tower in towers.items():
        hub = layout_of(tower).get("hub")
        if hub is None:
            continue
        memory = tower_roles(name, tower)
        for role, slot in tower_roles(name, tower, hub=True).items():
            if slot.name not in out or role in memory and memory[role].name == slot.name:
                continue
            tensor = out.pop(slot.name)
            if role in memory:
                out[memory[role].name] = tensor
            else:  # layer.{i}.qkv.{weight|bias}: one of Q, K and V each
                out.update(_unfused(role, tensor, memory, tower, hub.get("rope_pairs")))
    return out


def _unfused(role: str, tensor: Any, memory: dict, tower: Tower, pairs: str | None) -> dict[str, Any]:
    """Q, K and V of a fused projection's rows (Q|K|V), Q's and K's reordered for rotary by halves."""
    a = tower.attention
    layer, _, part = role.rpartition(".qkv.")
    q, k, v = tensor.split([a.q_dim, a.kv_dim, a.kv_dim])
    if pairs == "interleaved":
        q, k = _by_halves(q, a.n_heads), _by_halves(k, a.n_kv_heads)
    return {memory[f"{layer}.{key}.{part}"].name: t.contiguous() for key, t in (("q", q), ("k", k), ("v", v))}


def _by_halves(rows: Any, heads: int) -> Any:
    """Each head's rows (2i, 2i+1) moved to (i, i + d_head / 2)."""
    shape = rows.shape
    return rows.reshape(heads, -1, 2, *shape[1:]).transpose(1, 2).reshape(shape)
