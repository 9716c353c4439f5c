"""A parallel group of token mixers (calc.parts.parallel): each member reads the layer's normed
input times its in_scale, and their outputs, each times its out_scale, are summed (Falcon-H1's
attention and Mamba2, FalconH1DecoderLayer).

Each member is the module its kind always builds (`MIXERS`), as if it were the layer's only mixer;
they share the group's weights by role (their roles never overlap: the spec refuses it) and the
layer's cache entry (attention's keys and values beside Mamba2's states).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from calc.reference.parts.base import Part

__all__ = ["Parallel"]


class Parallel(Part):
    ROLES: frozenset[str] = frozenset()  # the members' own roles, which the layer already sorts as a mixer's

    def __init__(self, spec: Any, members: list[Part]) -> None:
        super().__init__()
        self.spec = spec
        self.members = nn.ModuleList(members)
        for member in members:
            member.weights = self.weights  # one table: the layer fills it once, each member reads its roles
            self.roles.update(member.roles)

    @classmethod
    def of(cls, block: Any, n_positions: int, lay: dict[str, Any]) -> "Parallel":
        from calc.reference.parts.block import MIXERS  # the members are built as a layer's only mixer

        members = [MIXERS[m.kind].of(block.with_mixer(m), n_positions, lay) for m in block.attention.mixers]
        return cls(block.attention, members)

    def norm_spec(self, role: str) -> Any:
        """The member's own norm (attention's QK-norm, Mamba2's gated norm)."""
        base = role.rsplit(".", 1)[0]
        return next(m for m in self.members if base in type(m).ROLES).norm_spec(role)

    def forward(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        out = None
        for member, (scale_in, scale_out) in zip(self.members, self.spec.scales()):
            y = member(x * scale_in if scale_in != 1 else x, ctx)
            y = y * scale_out if scale_out != 1 else y
            out = y if out is None else out + y
        return out
