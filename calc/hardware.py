"""Peak dense bf16 matmul throughput and memory bandwidth of a few GPUs, for the time bounds of
`gptcalc flops`.

Vendor datasheet figures, exact as published: FLOP/s are *dense* (the datasheets print 2× with 2:4
sparsity) bf16 tensor-core figures, bandwidth in decimal bytes per second. Kept tiny on purpose: it
should merge with the memory catalog (`calc.analysis.memory.GPUS`, names and reported memory) into
one GPU table.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.errors import GptcalcError

__all__ = ["ACCELERATORS", "Accelerator", "find_accelerator"]


@dataclass(frozen=True)
class Accelerator:
    name: str
    bf16_flops: int  # dense bf16 tensor-core FLOP/s (multiply and add = 2 FLOPs)
    bandwidth: int  # memory bandwidth, bytes/s (decimal)
    source: str
    aliases: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "bf16_flops_per_s": self.bf16_flops, "bandwidth_bytes_per_s": self.bandwidth,
                "source": self.source}


ACCELERATORS: tuple[Accelerator, ...] = (
    # H100 SXM5: BF16 tensor core 1,979 TFLOPS with sparsity, 989.4 dense; HBM3 3.35 TB/s
    Accelerator("H100 SXM", 989_400 * 10**9, 3_350 * 10**9,
                "https://www.nvidia.com/en-us/data-center/h100/", ("h100", "h100-sxm", "h100-80gb")),
    # A100 80GB SXM: BF16 tensor core 312 TFLOPS dense (624 with sparsity); HBM2e 2,039 GB/s
    Accelerator("A100 80GB SXM", 312 * 10**12, 2_039 * 10**9,
                "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf", ("a100", "a100-80gb", "a100-80")),
    # RTX 4090: FP16/BF16 tensor with FP32 accumulate 165.2 TFLOPS dense (330.4 sparse); GDDR6X 1,008 GB/s
    Accelerator("RTX 4090", 165_200 * 10**9, 1_008 * 10**9,
                "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
                ("4090", "rtx4090")),
)


def _key(text: str) -> str:
    return text.lower().replace(" ", "").replace("-", "").replace("_", "")


def find_accelerator(text: str) -> Accelerator:
    """A GPU by name or alias, ignoring case, spaces and dashes; an unknown name is bad input."""
    wanted = _key(text)
    for gpu in ACCELERATORS:
        if wanted in {_key(name) for name in (gpu.name, *gpu.aliases)}:
            return gpu
    names = ", ".join(g.name for g in ACCELERATORS)
    raise GptcalcError(f"--gpu: unknown GPU {text!r}; known: {names}")
