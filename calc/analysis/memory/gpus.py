"""GPUs: the memory a program sees on each card, its peak memory bandwidth and dense bf16 rate,
with the source of every figure. A data module: memory, budgets and other commands read it.

Memory is what the driver reports as the card's total (nvidia-smi `memory.total`, rocminfo's
pool size), in MiB: less than the marketed figure read as GiB (the driver keeps some back; ECC on
GDDR cards keeps 1/16), more than it read as 10^9 B. An MI250/MI250X is two GCDs, each its own
device with its own 64 GB: the catalog lists one. On Apple Silicon the GPU shares the unified
memory but may wire only Metal's recommendedMaxWorkingSetSize of it, as llama.cpp logs it at start. Bandwidth (B/s) and bf16 (FLOP/s, dense,
no 2:4 sparsity) are the vendor's peak figures, and so are the dense fp8 and fp4 rates where the card
has them; None where no public figure was found.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.errors import GptcalcError

__all__ = ["GPU", "GPUS", "RATED", "find_gpu", "gpu_suggestion", "rated_gpu"]

A100_SHEET = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
H100_PAGE = "https://www.nvidia.com/en-us/data-center/h100/ (bf16 1,979 TF with sparsity, halved: 989.5; 3.35 TB/s)"
MODAL = "https://github.com/modal-labs/modal-client/pull/2797"
M1_MAX = "https://www.apple.com/newsroom/2021/10/introducing-m1-pro-and-m1-max-the-most-powerful-chips-apple-has-ever-built/ (400GB/s)"
M2_MAX = "https://www.apple.com/newsroom/2023/01/apple-unveils-m2-pro-and-m2-max-next-generation-chips-for-next-level-workflows/ (400GB/s)"
TORCHAO = "https://github.com/pytorch/ao/blob/0598012907d6f6e88734088a65f788c38d294a65/torchao/testing/training/roofline_utils.py"
H100_FP8 = H100_PAGE.replace("bf16 1,979 TF with sparsity, halved: 989.5", "fp8 3,958 TF with sparsity, halved: 1,979")
MODAL_ALL = MODAL + " (A10: 23028MiB, T4: 15360MiB)"
DGX_B300 = ("https://www.nvidia.com/en-us/data-center/dgx-b300/ (8 GPUs: FP8 72 PF with sparsity, FP4 144 | 108 PF "
            "sparse | dense; per GPU dense: fp8 4.5, fp4 13.5 PF) and NVIDIA/cosmos-framework PR 114 (bf16 2.25e15 "
            "dense per GPU from the HGX B300 datasheet); 8 TB/s")
GB200_NVL72 = ("https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (72 GPUs: FP4 1,440 | 720 PF, FP8 720 PF and "
               "BF16 360 PF with sparsity, 576 TB/s; per GPU dense: fp4 10, fp8 5, bf16 2.5 PF; 8 TB/s)")
GB300_NVL72 = ("https://www.nvidia.com/en-us/data-center/gb300-nvl72/ (72 GPUs: FP4 1,440 | 1,080 PF sparse | dense, "
               "FP8 720 PF with sparsity; per GPU dense: fp4 15, fp8 5 PF)")
APPLE_M3_ULTRA = ("https://www.apple.com/newsroom/2025/03/apple-unveils-new-mac-studio-the-most-powerful-mac-ever/ "
                  "(M3 Ultra: 819GB/s)")
APPLE_M4_PRO = ("https://www.apple.com/newsroom/2024/10/new-macbook-pro-features-m4-family-of-chips-and-apple-"
                "intelligence/ (M4 Pro: 273GB/s)")
AMD_MI325X = ("https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html (data sheet: BF16 1307.4 TF, "
              "FP8 2614.9 TF dense; 6 TB/s)")
AMD_MI355X = ("https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html (BF16 2.5 PF, FP8 5 PF, MXFP4 "
              "10 PF dense; 8 TB/s)")
APPLE_M4_MAX = ("https://www.apple.com/newsroom/2024/10/new-macbook-pro-features-m4-family-of-chips-and-apple-"
                "intelligence/ (M4 Max: 546GB/s)")

# CUDA compute capability of the catalog's NVIDIA cards (https://developer.nvidia.com/cuda-gpus): what picks an
# engine's kernels (vLLM's MXFP4 backend, calc/analysis/memory/startup.py).
CAPABILITY = {"T4": (7, 5), "A10": (8, 6), "A10G": (8, 6), "L4": (8, 9), "RTX 3090": (8, 6), "RTX 4090": (8, 9),
              "RTX 5090": (12, 0), "A100-40GB": (8, 0), "A100-80GB": (8, 0), "L40": (8, 9), "L40S": (8, 9),
              "H100-80GB": (9, 0), "H100 PCIe": (9, 0), "H100 NVL": (9, 0), "H20": (9, 0), "H200": (9, 0),
              "RTX PRO 6000 Blackwell": (12, 0), "B200": (10, 0), "GB200 (per GPU)": (10, 0), "B300": (10, 3),
              "GB300 (per GPU)": (10, 3)}


@dataclass(frozen=True)
class GPU:
    """A card: the memory a program sees (MiB), the vendor's marketed figure, peak rates, sources."""

    name: str
    marketed: str  # the vendor's figure, e.g. "80 GB" (HBM/GDDR come in GiB)
    mib: int
    source: str  # where the reported total comes from
    aliases: tuple[str, ...] = ()
    bandwidth: int | None = None  # peak memory bandwidth, bytes per second
    bf16_flops: int | None = None  # peak dense bf16 tensor FLOP/s
    rates_source: str | None = None
    fp8_flops: int | None = None  # peak dense fp8 tensor FLOP/s (the same source)
    fp4_flops: int | None = None  # peak dense fp4 tensor FLOP/s (the same source)

    @property
    def bytes(self) -> int:
        return self.mib * 2**20

    @property
    def capability(self) -> tuple[int, int] | None:
        """CUDA compute capability (None: not an NVIDIA card, or a size given as a budget)."""
        return CAPABILITY.get(self.name)

    def to_json(self) -> dict[str, object]:
        return {"gpu": self.name, "marketed": self.marketed, "bytes": self.bytes, "mib": self.mib, "source": self.source,
                "bandwidth_bytes_per_s": self.bandwidth, "bf16_flops": self.bf16_flops, "fp8_flops": self.fp8_flops,
                "fp4_flops": self.fp4_flops, "rates_source": self.rates_source}


GPUS: tuple[GPU, ...] = (
    GPU("T4", "16 GB", 15360, MODAL_ALL, ("tesla-t4",), 320 * 10**9, None,
        "https://www.nvidia.com/en-us/data-center/tesla-t4/ (320+ GB/s; Turing tensor cores have no bf16)"),
    GPU("A10", "24 GB", 23028, MODAL_ALL, (), 600 * 10**9, 125 * 10**12,
        "https://www.nvidia.com/en-us/data-center/products/a10-gpu/ (BF16 125 | 250 TF dense | sparse; 600 GB/s)"),
    GPU("A10G", "24 GB", 23028, "https://github.com/NVIDIA/DCGM/issues/232 (8722MiB / 23028MiB)"),
    GPU("L4", "24 GB", 23034, MODAL, (), 300 * 10**9, 121 * 10**12,
        "https://www.nvidia.com/en-us/data-center/l4/ (bf16 242 TF with sparsity, halved; 300 GB/s)"),
    GPU("RTX 3090", "24 GB", 24576, "https://github.com/noonghunna/club-3090/issues/1127 (22591MiB / 24576MiB)",
        ("3090", "rtx3090"), 936 * 10**9, 71 * 10**12,
        "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf (Table 9)"),
    GPU("RTX 4090", "24 GB", 24564, "https://github.com/RLinf/RLinf/issues/255", ("4090", "rtx4090"),
        1008 * 10**9, 165_200 * 10**9,
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf (Table 2)"),
    GPU("RTX 5090", "32 GB", 32607, "https://github.com/noonghunna/club-3090/issues/617 (492MiB / 32607MiB)",
        ("5090", "rtx5090"), 1792 * 10**9, 209_500 * 10**9, TORCHAO, 419 * 10**12, 1676 * 10**12),
    GPU("M4 Pro 48GB", "48 GB unified", 36864,
        "llama.cpp's log on a 48 GB Apple M3 Max: recommendedMaxWorkingSetSize  = 38654.71 MB (= 36 GiB; public "
        "logs). Metal sets the limit from the unified memory size, not the chip, so a 48 GB M4 Pro gets the same",
        ("m4-pro-48gb",), 273 * 10**9, None, APPLE_M4_PRO),
    GPU("A100-40GB", "40 GB", 40960, MODAL, ("a100-40",), 1555 * 10**9, 312 * 10**12, A100_SHEET),
    GPU("L40", "48 GB", 46068, "nvidia-smi on NVIDIA L40 with ECC on: 5MiB / 46068MiB (public logs; 49140MiB with "
        "ECC off)", (), 864 * 10**9, 181_050 * 10**9,
        "https://www.nvidia.com/en-us/data-center/l40/ (BF16 181.05 | 362.1 TF, FP8 362 | 724 TF dense | sparse; "
        "864 GB/s)", 362 * 10**12),
    GPU("L40S", "48 GB", 46068, MODAL, (), 864 * 10**9, 362_050 * 10**9,
        "https://www.nvidia.com/en-us/data-center/l40s/ (bf16 362.05 TF dense, 733 with sparsity; 864 GB/s)"),
    GPU("M1 Max 64GB", "64 GB unified", 49152,
        "https://github.com/ggml-org/llama.cpp/issues/1870 (recommendedMaxWorkingSetSize  = 49152.00 MiB)",
        ("m1-max-64gb",), 400 * 10**9, None, M1_MAX),
    GPU("MI250 (one GCD)", "64 GB per GCD", 65520,
        "https://github.com/ROCm/rocm_smi_lib/issues/160 (rocminfo gfx90a pool 67092480 KB)", ("mi250", "mi250x")),
    GPU("M2 Max 96GB", "96 GB unified", 73728,
        "https://github.com/ggml-org/llama.cpp/issues/3213 (recommendedMaxWorkingSetSize  = 73728,00 MB, in MiB "
        "as its allocation lines show)", ("m2-max-96gb",), 400 * 10**9, None, M2_MAX),
    GPU("A100-80GB", "80 GB", 81920, MODAL, ("a100-80",), 2039 * 10**9, 312 * 10**12, A100_SHEET),
    GPU("H100-80GB", "80 GB", 81559, "https://github.com/NVIDIA/nccl/issues/1264 (0MiB / 81559MiB, H100 80GB HBM3 SXM)",
        ("h100", "h100-sxm"), 3350 * 10**9, 989_500 * 10**9, H100_PAGE + "; " + H100_FP8, 1979 * 10**12),
    GPU("H100 PCIe", "80 GB", 81559, "nvidia-smi on NVIDIA H100 PCIe, driver 565.57.01: 1MiB / 81559MiB (public logs)",
        ("h100-pcie",)),
    GPU("H100 NVL", "94 GB", 95830, "https://github.com/NVIDIA/gpu-admin-tools/issues/4 (0MiB / 95830MiB)",
        ("h100nvl",), 3900 * 10**9, None, H100_PAGE),
    GPU("M4 Max 128GB", "128 GB unified", 98304,
        "LM Studio's llama.cpp log on an Apple M4 Max (2025-08): recommendedMaxWorkingSetSize  = 103079.22 MB "
        "(= 96 GiB; public logs)", ("m4-max-128gb",), 546 * 10**9, None, APPLE_M4_MAX),
    GPU("H20", "96 GB", 97871, "https://github.com/NVIDIA/nvtrust/issues/128 (0MiB /  97871MiB, NVIDIA H20)"),
    GPU("RTX PRO 6000 Blackwell", "96 GB", 97887, "nvidia-smi on NVIDIA RTX PRO 6000 Blackwell Server Edition, driver "
        "580.178.04: 0MiB / 97887MiB (public logs; the Workstation Edition reports the same)",
        ("rtx-pro-6000", "rtx6000-pro", "pro6000")),
    GPU("H200", "141 GB", 143771, "nvidia-smi on NVIDIA H200, driver 570.158.01 (public logs)", ("h200-141gb",),
        4800 * 10**9, 989 * 10**12, "https://github.com/allenai/open-instruct/pull/1441 (989 TFLOPS BF16, 4.8 TB/s)"),
    GPU("B200", "180 GB", 183359, "https://github.com/NVIDIA/TensorRT-LLM/issues/10278 (166593MiB / 183359MiB)", (),
        8 * 10**12, 2250 * 10**12, TORCHAO, 4500 * 10**12, 9000 * 10**12),
    GPU("GB200 (per GPU)", "186 GB", 189471, "nvidia-smi on NVIDIA GB200 (one Blackwell GPU of a Grace Blackwell "
        "superchip): 0MiB / 189471MiB (public logs)", ("gb200",), 8 * 10**12, 2500 * 10**12, GB200_NVL72,
        5000 * 10**12, 10_000 * 10**12),
    GPU("MI300X", "192 GB", 196592,
        "https://github.com/ROCm/legacy-rocm-build/issues/4414 (rocminfo pool 201310208 KB)", ("mi300",),
        5300 * 10**9, 1307 * 10**12, TORCHAO, 2614 * 10**12),
    GPU("MI325X", "256 GB", 262128, "https://github.com/vllm-project/vllm/issues/41963 (AMD MI325X × 8, 255.98 GiB "
        "HBM each) and torch's total_memory on an MI325X: 274,861,129,728 B = 262128 MiB (public logs)", (),
        6 * 10**12, 1_307_400 * 10**9, AMD_MI325X, 2_614_900 * 10**9),
    GPU("B300", "288 GB", 275040, "nvidia-smi on NVIDIA B300 SXM6 AC, driver 580.105.08: 0MiB / 275040MiB "
        "(public logs)", ("b300-sxm6",), 8 * 10**12, 2250 * 10**12, DGX_B300, 4500 * 10**12, 13_500 * 10**12),
    GPU("GB300 (per GPU)", "288 GB", 284208, "nvidia-smi on NVIDIA GB300 (one Blackwell Ultra GPU of a Grace "
        "Blackwell superchip): 0MiB / 284208MiB (public logs)", ("gb300",), None, None, GB300_NVL72,
        5000 * 10**12, 15_000 * 10**12),
    GPU("MI355X", "288 GB", 294896, "SGLang benchmark notes on AMD Instinct MI355X, driver 6.14.14: gfx950, 294896MiB "
        "reported GPU memory; vLLM's start-up check prints the same as 287.98 GiB (public logs)", (),
        8 * 10**12, 2500 * 10**12, AMD_MI355X, 5000 * 10**12, 10_000 * 10**12),
    GPU("M3 Ultra 512GB", "512 GB unified", 475136,
        "llama-bench's log on an Apple M3 Ultra Mac Studio: recommendedMaxWorkingSetSize  = 498216.21 MB "
        "(= 464 GiB; public logs)", ("m3-ultra-512gb",), 819 * 10**9, None, APPLE_M3_ULTRA),
)


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def find_gpu(text: str) -> GPU | None:
    """A GPU by name or alias, ignoring case, spaces and dashes ('a100-80gb', 'H100', '4090')."""
    wanted = _key(text)
    return next((g for g in GPUS if wanted in {_key(n) for n in (g.name, *g.aliases)}), None)


def gpu_suggestion(text: str) -> str:
    """' (did you mean H100-80GB?)' for a mistyped GPU name, or '' when nothing in the catalog is close."""
    import difflib  # only a name that is not found needs it

    names = {_key(n): g.name for g in GPUS for n in (g.name, *g.aliases)}
    wanted = _key(text)
    if wanted and (started := sorted({name for key, name in names.items() if key.startswith(wanted)})):
        return f" (which one: {' or '.join(started)}?)" if len(started) > 1 else f" (did you mean {started[0]}?)"
    close = difflib.get_close_matches(wanted, list(names), n=1, cutoff=0.7)
    return f" (did you mean {names[close[0]]}?)" if close else ""


# The cards `gptcalc flops` draws its time bounds for when none is named: one of each generation people rent or own.
RATED = ("H100-80GB", "A100-80GB", "RTX 4090")


def rated_gpu(text: str) -> GPU:
    """A GPU whose peak bf16 rate and bandwidth are both known (what a time bound needs); else bad input."""
    gpu = find_gpu(text)
    if gpu is None:
        raise GptcalcError(f"--gpu: unknown GPU {text!r}{gpu_suggestion(text)}; known: "
                          f"{', '.join(g.name for g in GPUS)}")
    if gpu.bf16_flops is None or gpu.bandwidth is None:
        raise GptcalcError(f"--gpu: {gpu.name} has no published peak bf16 rate or bandwidth in the catalog")
    return gpu
