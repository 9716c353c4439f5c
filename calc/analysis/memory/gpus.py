"""GPUs: the memory a program sees on each card, with the source of every figure.

A data module (no formulas beyond MiB x 2^20): memory, budgets and other commands read it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GPU", "GPUS", "find_gpu"]


@dataclass(frozen=True)
class GPU:
    """A card and the total memory nvidia-smi reports for it (memory.total, in MiB)."""

    name: str
    marketed: str  # the vendor's figure, e.g. "80 GB" (it is binary: HBM/GDDR come in GiB)
    mib: int
    source: str
    aliases: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return self.mib * 2**20


# memory.total as nvidia-smi prints it. This is less than the marketed figure read as GiB (the
# driver keeps some back; ECC on GDDR cards keeps 1/16) and more than it read as GB (10^9).
GPUS: tuple[GPU, ...] = (
    GPU("RTX 4090", "24 GB", 24564, "https://github.com/RLinf/RLinf/issues/255", ("4090", "rtx4090")),
    GPU("A100-40GB", "40 GB", 40960, "https://github.com/modal-labs/modal-client/pull/2797", ("a100-40",)),
    GPU("L40S", "48 GB", 46068, "https://github.com/modal-labs/modal-client/pull/2797"),
    GPU("A100-80GB", "80 GB", 81920, "https://github.com/modal-labs/modal-client/pull/2797", ("a100-80",)),
    GPU("H100-80GB", "80 GB", 81559, "https://github.com/modal-labs/modal-client/pull/2797", ("h100",)),
    GPU("H200", "141 GB", 143771, "nvidia-smi on NVIDIA H200, driver 570.158.01 (public logs)", ("h200-141gb",)),
)


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def find_gpu(text: str) -> GPU | None:
    """A GPU by name or alias, ignoring case, spaces and dashes ('a100-80gb', 'H100', '4090')."""
    wanted = _key(text)
    return next((g for g in GPUS if wanted in {_key(n) for n in (g.name, *g.aliases)}), None)
