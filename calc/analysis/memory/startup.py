"""The memory an inference engine gives its KV pool at start-up, term by term, as the engine computes it.

vLLM (vllm/v1/worker/gpu_worker.py determine_available_memory, vllm/v1/worker/utils.py request_memory,
vllm/utils/mem_utils.py memory_profiling; v0.32):

    requested = ceil(total x gpu_memory_utilization)              total: what CUDA reports, 0.9 by default
    pool      = requested - weights - activation peak - non-torch memory - CUDA graphs

  weights are what the model holds after loading ("Model loading took 14.96 GiB"); the activation peak
  is torch's peak above the weights during the profiling forward of max_num_batched_tokens tokens and
  the sampler's dummy run over min(max_num_seqs, max_num_batched_tokens) rows of logits; non-torch
  memory is what the process holds outside torch (NCCL, cuBLAS workspaces) after profiling; CUDA graphs
  are estimated by capturing them once (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on since v0.21).

SGLang (python/sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings,
mem_cache/kv_cache_configurator.py _profile_available_bytes; v0.5):

    reserved  = max(512 + 1.5 x max(chunked_prefill_size, 2048) + tp x pp / 8 x 1024 + 2 x cuda_graph_max_bs,
                    10,240 on a GPU of more than 60 GiB)                                   (MiB)
    mem_fraction_static = round((total MiB - reserved) / total MiB, 3)                    unless given
    pool      = free after loading - free before loading x (1 - mem_fraction_static)
              = (total - in use before loading) x mem_fraction_static - weights

  "free before loading" is pre_model_load_memory, the least free memory of the GPUs once CUDA is up and,
  on several GPUs, once the process groups (NCCL communicators, custom all-reduce buffers) exist: the
  "Load weight begin. avail mem" its log prints (init_torch_distributed's min_per_gpu_memory in
  model_runner.py). model_runner_kv_cache_mixin.py profile_max_num_token, lines 111-144 at 226149ac:
  rest_memory = available_gpu_memory - total_gpu_memory * (1 - self.mem_fraction_static), then
  int(rest_memory * (1 << 30)) // cell_size (SGLANG_POOL; later versions' _profile_available_bytes keep
  the rule). Weights are what loading took ("mem usage"): the checkpoint's bytes and the fp32 rotary
  table (`calc.analysis.memory.rope_cache`), and with speculative decoding the draft worker's too, loaded
  before the pool is profiled (`calc.analysis.memory.sglang_draft`).

TensorRT-LLM (PyTorch backend, tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator._cal_max_memory at 28295084972c;
llmapi/llm_args.py KvCacheConfig; v1.x):

    peak      = torch peak + non-torch memory of the profiling run of max_num_tokens tokens (8192 by
                default), less the temporary KV cache it allocated for that run
    pool      = (total - peak) x free_gpu_memory_fraction                       0.9 by default
    max tokens = floor(pool / kv size per token), in blocks of tokens_per_block (32)

  so its CUDA graphs and everything after the profiling run live in the 10% the fraction leaves. An fp8 MLA cache
  would lose a further reserve for the context-MLA attention workspace, not sized here
  (calc.analysis.memory.trtllm_workspace, which refuses it); a 16-bit cache loses none.

Only the weights are exact here (the checkpoint's bytes as the engine keeps them, one GPU's share).
The activation peak is an estimate from the model's shapes (`activation_estimate`), and non-torch
memory (SGLang: what is in use before loading) and CUDA graphs are the figures published start-up logs
show; each is a named term the user can set from their own log, and `--kv-memory` still overrides the
pool outright.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from calc.analysis.memory.budget import BudgetSpec
from calc.analysis.memory.gpus import GPU
from calc.analysis.memory.sglang_draft import EAGLE_UNCOUNTED, WEIGHTS_SOURCE as DRAFT_SOURCE, DraftWeights
from calc.analysis.memory.sglang_fp32 import LABEL as FP32_WHOLE, ROUTER_LABEL, ROUTER_SOURCE, SOURCE as FP32_WHOLE_SOURCE, \
    fp32_whole, router_tables
from calc.analysis.memory.sglang_mla import KV_B_COPY, SOURCE as KV_B_COPY_SOURCE, kv_b_copy
from calc.analysis.memory.sglang_prefill_graphs import SOURCE as PREFILL_GRAPHS_SOURCE
from calc.analysis.memory.sglang_prefill_graphs import prefill_graph_reserve
from calc.analysis.memory.rope_cache import (ROPE_SOURCE, SGLANG_FREQS_CIS_SOURCE, SGLANG_ROPE_SOURCE,
                                             TOWER_ROPE_SOURCE, sglang_freqs_cis, sglang_rope_cache, vllm_rope_cache,
                                             vllm_tower_rope_cache)
from calc.analysis.memory.trtllm_v2_sync import MAX_NUM_TOKENS  # the profiling run's tokens too
from calc.analysis.memory.weights import Weights
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["CUDA_TOTAL", "STARTUP_ENGINES", "Reserves", "StartupBudget", "Term", "activation_estimate", "budget_gpu",
           "cuda_total", "engine_extra_weights", "forward_bytes", "sglang_fraction", "sglang_preload", "startup_budget",
           "vllm_batch_defaults", "vllm_extra_weights"]

GIB = 2**30
MIB = 2**20
STARTUP_ENGINES = ("vllm", "sglang", "trtllm")  # the engines whose start-up budget is modelled
VLLM_WORKER = "https://github.com/vllm-project/vllm/blob/main/vllm/v1/worker/gpu_worker.py (determine_available_memory)"
VLLM_PROFILING = "https://github.com/vllm-project/vllm/blob/main/vllm/utils/mem_utils.py (memory_profiling)"
VLLM_DEFAULTS = "https://github.com/vllm-project/vllm/blob/main/vllm/engine/arg_utils.py (get_batch_defaults)"
# handle_gpu_memory_settings: card tiers at L67-L148, then the reserve ("Static memory and runtime headroom"
# and reserve_for_graph_mb, its prefill CUDA graphs in calc.analysis.memory.sglang_prefill_graphs).
SGLANG_FRACTION = ("https://github.com/sgl-project/sglang/blob/a82da8da159ec67038d9357c172fba89ad8af6a3/"
                   "python/sglang/srt/arg_groups/memory_hook.py#L67-L148 (handle_gpu_memory_settings)")
SGLANG_POOL = ("https://github.com/sgl-project/sglang/blob/226149ac457bd1a1b5d450f55c01f72f604320d6/"
               "python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py#L111-L144 (profile_max_num_token: "
               "free after loading - free before loading x (1 - mem_fraction_static))")
# Non-torch memory after profiling, one GPU: 0.16 GiB (H100, vllm#12126) and 0.20 GiB (RTX 3090 x 4, vllm#14447).
NON_TORCH = 0.2
NON_TORCH_SOURCE = ("https://github.com/vllm-project/vllm/pull/12126 (non_torch_memory takes 0.16GiB), "
                    "https://github.com/vllm-project/vllm/pull/14447 (0.20GiB)")
# What SGLang finds in use when it measures its free memory before loading (GiB, as its "GB" are): the CUDA
# context on any GPU; on several, also its process groups' NCCL and custom all-reduce buffers, counted on
# the GPU that has least left (the pool is sized from the least free memory of the group).
SGLANG_CONTEXT = 0.41  # 79.22 GiB total (H100, CUDA_TOTAL) - 78.81 "Load weight begin. avail mem", one GPU
SGLANG_GROUPS = 2.01  # "Init torch distributed ends. mem usage=2.01 GB", the most of 8 x H200's ranks
SGLANG_PRELOAD_SOURCE = ("CUDA context: https://docs.sglang.ai/start/send_request.html (2025-01-23, one 80 GB GPU: "
                         "'Load weight begin. avail mem=78.81 GB' of 79.22 GiB); process groups: "
                         "https://github.com/sgl-project/sglang/pull/11716 ('Init torch distributed ends. mem "
                         "usage=2.01 GB', 8 x H200); one GPU forms none ('mem usage=0.00 GB', "
                         "https://github.com/sgl-project/sglang/issues/9574)")
# vLLM's CUDA graph estimate; 0 with --enforce-eager. A stated default, not a measurement of any model.
CUDA_GRAPHS = 0.5
CUDA_GRAPHS_SOURCE = "vLLM: profile_cudagraph_memory (captured at start-up); 0 under --enforce-eager"
TRTLLM_POOL = ("https://github.com/NVIDIA/TensorRT-LLM/blob/28295084972c5ab61ef010a050a18f53f5d72810/tensorrt_llm/"
               "_torch/pyexecutor/_util.py (KvCacheCreator._cal_max_memory: (total - peak + temporary KV) x fraction)")
TRTLLM_FRACTION = ("TensorRT-LLM's default: KvCacheConfig.free_gpu_memory_fraction 0.9 "
                   "(https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/llmapi/llm_args.py)")
# Under pipeline parallelism each rank profiles its own peak (configure_kv_cache_capacity reads its own GPU's torch
# peak), runs its own layers, and only the last holds the LM head and samples.
TRTLLM_PP_PROFILING = ("each rank's own peak: https://github.com/NVIDIA/TensorRT-LLM/blob/"
                       "0004396720054fd8e205cbf616f21f0b57c6b412/tensorrt_llm/_torch/pyexecutor/_util.py (KvCacheCreator.configure_kv_cache_capacity: "
                       "torch.cuda.memory_stats()['allocated_bytes.all.peak'] on the rank); the embedding's forward on "
                       "the first rank, the final norm's and LM head's on the last: https://github.com/NVIDIA/"
                       "TensorRT-LLM/blob/000a01de66f0eab4ab05640711f0253f50f5209c/tensorrt_llm/_torch/models/"
                       "modeling_utils.py (DecoderModel.__pp_init__, DecoderModelForCausalLM.__pp_init__: skip_forward "
                       "elsewhere; later ranks pp_recv the hidden states and residual); sampling on the last: "
                       "https://github.com/NVIDIA/TensorRT-LLM/blob/9521caf4696c1fb79b0f946f0d980f8f0ebd3e64/"
                       "tensorrt_llm/_torch/pyexecutor/py_executor.py (_executor_loop_pp: 'Async forward (all ranks) "
                       "and decoding pass (last rank only)')")
# KvCacheCreator._cal_max_memory at NVIDIA/TensorRT-LLM@28295084972c logs the peak with the profiling run's temporary
# KV cache in it and that cache apart, and adds it back: (total - peak + temporary) x fraction. Its size follows the
# dummy requests, max_batch_size and the CUDA graphs' batch sizes (_get_token_num_for_estimation), whose defaults
# are not pinned here, so the line names it T; the pool does not depend on it.
TRTLLM_TEMPORARY = "T: the profiling run's temporary KV cache, not modelled; it cancels out of the pool"

# What CUDA reports as a card's total (torch.cuda.mem_get_info), which vLLM multiplies by its
# utilisation: less than nvidia-smi's total. From published vLLM start-up logs; other cards use the
# catalog's nvidia-smi figure.
CUDA_TOTAL: dict[str, tuple[float, str]] = {
    "H100-80GB": (79.22, "https://github.com/vllm-project/vllm/pull/10511 (total_gpu_memory 79.22GiB)"),
    "RTX 3090": (23.58, "https://github.com/vllm-project/vllm/pull/14447 (total_gpu_memory (23.58GiB))"),
    "H200": (139.81, "https://github.com/sungwon-chae/arxiv_confi/blob/3906c481ed03deeb5ce0b4db322c77bdc44416ad/"
                     "etu_logging.md (PyTorch on 8 x NVIDIA H200: 'GPU 0 has a total capacity of 139.81 GiB', "
                     "cudaMemGetInfo's total as torch.cuda.mem_get_info gives vLLM)"),
}


def budget_gpu(budget: BudgetSpec) -> GPU:
    """The card a --budget names, or one of its bytes when it gives a size (80GB)."""
    if budget.gpu is not None:
        return budget.gpu
    return GPU(budget.label, budget.label, budget.bytes_per_gpu // MIB, "--budget")


def cuda_total(gpu: GPU) -> tuple[int, str]:
    """(bytes, source) of the total the engine sees on `gpu`."""
    if gpu.name in CUDA_TOTAL:
        gib, source = CUDA_TOTAL[gpu.name]
        return round(gib * GIB), source
    return gpu.bytes, f"nvidia-smi total ({gpu.source})"


def vllm_batch_defaults(total: int) -> tuple[int, int]:
    """`vllm serve`'s (max_num_batched_tokens, max_num_seqs) for a card of `total` bytes (A100s take
    the small defaults whatever their memory)."""
    if total >= 160 * GIB:
        return 16384, 1024
    if total >= 70 * GIB:
        return 8192, 1024
    return 2048, 256


VOCAB_PADDING = 64  # vLLM's VocabParallelEmbedding pads the vocabulary to a multiple of 64 (DEFAULT_VOCAB_PADDING_SIZE)
VOCAB_SOURCE = "https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/vocab_parallel_embedding.py"
MLA_COPY_SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/v1/attention/backends/mla/common.py "
                   "(process_weights_after_loading: a quantised kv_b_proj is dequantised into W_UK_T and W_UV, "
                   "16-bit, and kept beside it for prefill)")

# Parameters vLLM allocates in fp32 whatever the model's dtype (a real vLLM loads 2 B more per value than the bf16
# model: tests/test_engine_budget.py): Mamba's, Mamba2's, Qwen3-Next's gated DeltaNet's and Kimi's KDA decay, and
# Gemma-3n's AltUp output scale (models/gemma3n.py:122-124, correct_output_scale)
FP32_PARAMS = ("ssm_a_log", "gdn_a_log", "kda_a_log", "altup_scale")
FP32_PARAMS_SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/mamba/mamba_mixer2.py "
                      "(self.A, dtype=torch.float32; likewise mamba_mixer.py, gdn/qwen_gdn_linear_attn.py and "
                      "gdn/kimi_gdn_linear_attn.py for A_log, models/gemma3n.py for AltUp's correct_output_scale)")


def vllm_extra_weights(spec: ModelSpec, weights: Weights, gpu: GPU, tp: int, ep: int = 1,
                       element_bytes: int = 2, towers: bool = True) -> tuple[tuple[str, int], ...]:
    """What vLLM holds beyond the checkpoint's tensors on one GPU, each (what, bytes): the embedding
    and LM head rows that pad the vocabulary to a multiple of 64, split tp ways (16-bit, as every
    scheme keeps them); where MLA's kv_b is quantised, the 16-bit copy of it that its decode path
    multiplies by (the weights' kv_b rows are already this GPU's share); and MXFP4 experts padded
    for the backend `gpu` runs them with; the parameters vLLM keeps in fp32 (FP32_PARAMS); and the
    rotary cos/sin tables its layers share (`calc.analysis.memory.rope_cache`), whole on every GPU, and
    with `towers` loaded (not --text-only) the tables its own vision towers build."""
    pad = -(-spec.vocab_size // VOCAB_PADDING) * VOCAB_PADDING - spec.vocab_size
    matrices = sum(name in weights.params for name in ("token_embedding", "lm_head"))
    extra = [("vocabulary padding", matrices * pad * spec.d_model * element_bytes // tp)]
    kv_b = weights.params.get("kv_b", 0)
    if kv_b and weights.component_bytes("kv_b") < kv_b * element_bytes:
        extra.append(("MLA's dequantised W_UK/W_UV copy", kv_b * element_bytes))
    extra.append(("MXFP4 expert padding", mxfp4_padding(spec, weights, tp, ep, gpu)))
    extra.append(("K copied into the V slot of V = K layers", k_eq_v_copy(spec, weights)))
    extra.append(("fp32 parameters", sum(max(4 * weights.params[name] - weights.component_bytes(name), 0)
                                         for name in FP32_PARAMS if name in weights.params)))
    extra.append(("rotary cos/sin cache", vllm_rope_cache(spec, element_bytes)))
    extra.append(("vision tower's rotary cos/sin cache", vllm_tower_rope_cache(spec, element_bytes) if towers else 0))
    return tuple((what, n) for what, n in extra if n)


def k_eq_v_copy(spec: ModelSpec, weights: Weights) -> int:
    """A layer whose values are its keys (Gemma-4's full layers, attention_k_eq_v) ships k_proj only, but vLLM
    builds its fused qkv_proj with a V slot and loads K into both (models/gemma4.py:86-118, 417-423): that layer's
    K matrix once more, in the bytes the K matrices take on this GPU."""
    k_eq_v = sum(n * mixer.params(spec.d_model).get("k", 0) for name, n in spec.layer_counts().items()
                 for mixer in spec.blocks[name].mixers() if getattr(mixer, "k_eq_v", False))
    every = sum(n * mixer.params(spec.d_model).get("k", 0) for name, n in spec.layer_counts().items()
                for mixer in spec.blocks[name].mixers())
    return weights.component_bytes("k") * k_eq_v // every if k_eq_v and "k" in weights.params else 0


def sglang_extra_weights(spec: ModelSpec, weights: Weights, attention_tp: int,
                         layers: range | None = None) -> tuple[tuple[str, int], ...]:
    """What SGLang holds beyond the checkpoint's tensors on one GPU: its fp32 rotary cos/sin tables (and a model
    file's own complex64 ones, calc.analysis.memory.rope_cache.sglang_freqs_cis), MLA's
    w_kc / w_vc, the second copy of this GPU's kv_b share (calc.analysis.memory.sglang_mla), the parameters it
    keeps whole in fp32 beyond their share (calc.analysis.memory.sglang_fp32; the attention split `attention_tp` ways)
    and the router tables it holds as parameters on the GPU's `layers` (None: every layer)."""
    counts = spec.layer_counts() if layers is None else spec.layer_counts(layers.start, layers.stop)
    extra = (("fp32 rotary cos/sin cache", sglang_rope_cache(spec)), (FREQS_CIS, sglang_freqs_cis(spec)),
             (KV_B_COPY, kv_b_copy(spec, weights)), (FP32_WHOLE, fp32_whole(spec, weights, attention_tp)),
             (ROUTER_LABEL, router_tables(spec, counts)))
    return tuple((what, n) for what, n in extra if n)


def engine_extra_weights(engine: str, spec: ModelSpec, weights: Weights, gpu: GPU, tp: int, ep: int = 1,
                         towers: bool = True, attention_tp: int | None = None,
                         layers: range | None = None) -> tuple[tuple[str, int], ...]:
    """What `engine` loads beyond the checkpoint on one GPU of the layout (none known for TensorRT-LLM);
    `towers`: whether it loads a multimodal model's towers (False: --text-only); `attention_tp`: SGLang's attention-TP
    size under DP attention (None: tp); `layers`: the GPU's pipeline stage (None: every layer)."""
    if engine == "vllm":
        return vllm_extra_weights(spec, weights, gpu, tp, ep, towers=towers)
    return sglang_extra_weights(spec, weights, attention_tp or tp, layers) if engine == "sglang" else ()


def sglang_preload(tp: int, pp: int) -> int:
    """The bytes SGLang finds in use on a GPU of a tp x pp group before it loads the weights."""
    return round((SGLANG_CONTEXT + (SGLANG_GROUPS if tp * pp > 1 else 0)) * GIB)


K_EQ_V_SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/models/gemma4.py "
                 "(_gemma4_layer_weights_mapper: an attention_k_eq_v layer's k_proj is loaded into the K and V shards "
                 "of its qkv_proj)")
MXFP4_SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/quantization/mxfp4.py "
                "(get_mxfp4_backend; Mxfp4MoEMethod.create_weights pads each expert's intermediate and hidden sizes "
                "for its kernel)")
# vLLM's MXFP4 MoE backend by the card's CUDA compute capability: Hopper (9.0) Triton's kernels,
# Blackwell datacentre (10.x) FlashInfer's, others Marlin.
MXFP4_PADDING = {"marlin": (128, 256), "triton": (64, 1), "flashinfer": (256, 256)}  # (intermediate, hidden) multiples


def mxfp4_backend(gpu: GPU) -> str | None:
    """vLLM's default MXFP4 MoE backend on `gpu` (None: not an NVIDIA card vLLM runs MXFP4 on): FlashInfer's
    BF16 kernels on SM100 (installed with vLLM), Triton's on SM90, Marlin's weight-only kernel elsewhere."""
    cc = gpu.capability
    if cc is None or cc < (8, 0):
        return None
    return "flashinfer" if cc[0] == 10 else "triton" if cc == (9, 0) else "marlin"


def _mxfp4_expert_bytes(inner: int, hidden: int) -> int:
    """One expert as vLLM allocates it: fused gate/up and down, 4-bit values, a u8 scale per 32, bf16 biases."""
    return 2 * inner * (hidden // 2 + hidden // 32 + 2) + hidden * (inner // 2 + inner // 32 + 2)


def mxfp4_padding(spec: ModelSpec, weights: Weights, tp: int, ep: int, gpu: GPU) -> int:
    """The bytes vLLM adds to MXFP4 experts on one GPU by padding their sizes to its kernel's multiples."""
    backend = mxfp4_backend(gpu)
    sizes = {block.moe.d_ff for block in spec.blocks.values() if block.moe is not None}
    if backend is None or weights.scheme is None or weights.scheme.name != "mxfp4" or len(sizes) != 1:
        return 0
    inner, hidden = sizes.pop() // (1 if ep > 1 else tp), spec.d_model
    experts = weights.params.get("experts_down", 0) // (inner * hidden)  # expert matrices on this GPU, all layers
    up = lambda n, m: -(-n // m) * m  # noqa: E731 - vLLM's round_up
    step_i, step_h = MXFP4_PADDING[backend]
    return experts * (_mxfp4_expert_bytes(up(inner, step_i), up(hidden, step_h)) - _mxfp4_expert_bytes(inner, hidden))


FREQS_CIS = "complex64 rotary freqs_cis"
_EXTRA_SOURCES = {"vocabulary padding": VOCAB_SOURCE, "MLA's dequantised W_UK/W_UV copy": MLA_COPY_SOURCE,
                  "MXFP4 expert padding": MXFP4_SOURCE,
                  "K copied into the V slot of V = K layers": K_EQ_V_SOURCE, "fp32 parameters": FP32_PARAMS_SOURCE,
                  "rotary cos/sin cache": ROPE_SOURCE, "fp32 rotary cos/sin cache": SGLANG_ROPE_SOURCE,
                  "vision tower's rotary cos/sin cache": TOWER_ROPE_SOURCE, KV_B_COPY: KV_B_COPY_SOURCE,
                  FP32_WHOLE: FP32_WHOLE_SOURCE, FREQS_CIS: SGLANG_FREQS_CIS_SOURCE,
                  ROUTER_LABEL: ROUTER_SOURCE}


def activation_estimate(spec: ModelSpec, tokens: int, rows: int, tp: int, dtype_bytes: int = 2,
                        layers: range | None = None) -> int:
    """torch's peak above the weights in the profiling run, estimated from the shapes: the residual
    stream and hidden states of `tokens` tokens, the widest layer's outputs for them (what one token
    reads, in elements per model width: attention's projections and the MLP's, the routed experts it
    picks; split tp ways), and the sampler's fp32 logits and probabilities over `rows` requests.
    `layers`: the layers one pipeline rank runs, where each rank profiles its own peak (TensorRT-LLM:
    trtllm_v2_pp): the widest of its own layers, and the sampler on the last rank only, which alone holds
    the LM head and samples; a first rank's embedding output is the hidden state every rank holds (the
    others receive it and the residual from the rank before). None: every layer, on one GPU."""
    kinds = spec.blocks if layers is None else spec.layer_counts(layers.start, layers.stop)
    widest = max(sum(spec.blocks[kind].active_params(spec.d_model).values()) // spec.d_model for kind in kinds)
    samples = layers is None or layers.stop == spec.n_layers
    sampler = rows * spec.vocab_size * 4 * 2 if samples else 0
    return forward_bytes(tokens, spec.d_model, widest, tp, dtype_bytes) + sampler


def forward_bytes(tokens: int, d_model: int, widest: int, tp: int, dtype_bytes: int) -> int:
    """A profiling forward's activations, a decoder's or an encoder's: the residual stream and hidden
    states of `tokens` tokens (2·d_model each) and the widest layer's outputs for them (`widest`
    elements per token, split tp ways)."""
    return tokens * dtype_bytes * (2 * d_model + -(-widest // tp))


@dataclass(frozen=True)
class Term:
    """One line of the engine's budget: bytes taken from the memory it may use."""

    key: str
    label: str  # as the engine's log names it
    bytes: int
    option: str  # the gptcalc option that sets it
    how: str  # "exact", "estimate" or "given"
    source: str

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class StartupBudget:
    """An engine's memory at start-up: what it may use, each term it takes out, the pool left."""

    engine: str
    gpu: str
    total: int  # bytes CUDA reports
    total_source: str
    fraction: float  # vLLM gpu_memory_utilization, SGLang mem_fraction_static
    fraction_option: str
    fraction_how: str
    terms: tuple[Term, ...]
    draft: DraftWeights | None = None  # SGLang's draft worker, loaded before the pool is profiled (sglang_draft)

    def term(self, key: str) -> int:
        return next(t.bytes for t in self.terms if t.key == key)

    @property
    def before_share(self) -> tuple[Term, ...]:
        """The terms taken from the total before the fraction applies: what SGLang finds in use before
        loading (its fraction is of what is free then), TensorRT-LLM's whole profiling peak."""
        keys = {"sglang": ("non_torch",), "trtllm": ("weights", "activation", "non_torch")}.get(self.engine, ())
        return tuple(t for t in self.terms if t.key in keys)

    @property
    def usable(self) -> int:
        """vLLM: ceil(total x utilisation); SGLang: (total - in use before loading) x mem_fraction_static;
        TensorRT-LLM: (total - profiling peak) x free_gpu_memory_fraction."""
        if self.before_share:
            return int((self.total - sum(t.bytes for t in self.before_share)) * self.fraction)
        return math.ceil(self.total * self.fraction)

    @property
    def taken(self) -> tuple[Term, ...]:
        """The terms subtracted from `usable` (SGLang's activations and graphs live outside its fraction,
        TensorRT-LLM's CUDA graphs in what its fraction leaves)."""
        if self.engine == "vllm":
            return self.terms
        return tuple(t for t in self.terms if self.engine == "sglang" and t.key in ("weights", "draft_weights"))

    @property
    def kv_memory(self) -> int:
        return self.usable - sum(t.bytes for t in self.taken)

    def check(self, rank: str = "") -> None:
        """Refuse a card left nothing for the cache; `rank` names the pipeline rank it is (TensorRT-LLM's
        ranks each have their own budget, and one other than the busiest GPU may be the one that fails)."""
        where = f"{self.gpu} ({rank})" if rank else self.gpu
        if self.before_share and self.usable <= 0:  # the terms taken before the fraction already fill the card: say which
            raise GptcalcError(f"--engine {self.engine}: nothing left for the KV cache on {where}: "
                               f"{self._over_total()} exceed the {self.total / GIB:.2f} GiB it has (try more GPUs "
                               "or --tp)")
        if self.kv_memory <= 0:
            raise GptcalcError(f"--engine {self.engine}: nothing left for the KV cache on {where}: "
                               f"{self.usable / GIB:.2f} GiB usable, {sum(t.bytes for t in self.taken) / GIB:.2f} GiB "
                               "taken by weights and reserves (try more GPUs, --tp, or a larger "
                               f"{self.fraction_option})")

    def _over_total(self) -> str:
        """What fills the card before the engine's fraction applies: the weights alone where they do, else
        every term measured then (TensorRT-LLM's profiling peak, SGLang's memory in use before loading)."""
        weights = self.term("weights")
        if weights > self.total:
            return f"the weights alone, {weights / GIB:.2f} GiB a GPU,"
        held = sum(t.bytes for t in self.before_share)
        return f"{' + '.join(t.label for t in self.before_share)}, {held / GIB:.2f} GiB,"

    def lines(self, kv_bytes_per_token: int) -> list[str]:
        """The engine's own start-up lines for these figures, in its units and rounding (TensorRT-LLM
        names the cache's bytes per token on one GPU in its line)."""
        gib = lambda n: f"{round(n / GIB, 2)}"  # noqa: E731 - vLLM's format_gib
        if self.engine == "vllm":
            return [f"Model loading took {gib(self.term('weights'))} GiB memory"]
        if self.engine == "sglang":  # its server_args log line: the float's repr, a multimodal default unrounded
            return [f"mem_fraction_static={self.fraction!r}", *self._sglang_loads()]
        peak = sum(t.bytes for t in self.before_share)
        return [f"Peak memory during memory usage profiling (torch + non-torch): {peak / GIB:.2f} GiB + T, available "
                f"KV cache memory when calculating max tokens: {self.kv_memory / GIB:.2f} GiB, fraction is set "
                f"{self.fraction}, kv size per token is {kv_bytes_per_token} bytes/token. device total memory "
                f"{self.total / GIB:.2f} GiB, temporary kv cache memory during profiling T GiB ({TRTLLM_TEMPORARY})"]

    def _sglang_loads(self) -> list[str]:
        """SGLang's load lines, the target's and then (with a draft whose weights are known) the draft worker's, each
        ModelRunner.load_model's: free memory before, what loading took."""
        free = self.total - self.term("non_torch")
        loads = [self.term("weights"), *([self.draft.loaded] if self.draft and self.draft.loaded is not None else [])]
        lines = []
        for taken in loads:
            lines += [f"Load weight begin. avail mem={free / GIB:.2f} GB",
                      f"Load weight end. mem usage={taken / GIB:.2f} GB"]
            free -= taken
        return lines

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine, "gpu": self.gpu, "total_bytes": self.total, "total_source": self.total_source,
                "fraction": self.fraction, "fraction_option": self.fraction_option, "fraction_how": self.fraction_how,
                "usable_bytes": self.usable, "terms": [t.to_json() for t in self.terms],
                "subtracted": [t.key for t in self.taken], "kv_memory_bytes": self.kv_memory}


def _encoder_terms(spec: ModelSpec, tokens: int, seqs: int, max_model_len: int, tp: int, reserves: Reserves,
                   decoder_forward: int, dtype_bytes: int) -> list[Term]:
    """vLLM's encoder cache and the encoder forward's excess over the decoder's in its profiling run
    (`calc.analysis.memory.encoder`); none for a text model or a tower without an image rule."""
    from calc.analysis.memory.encoder import MM_LIMIT, SOURCE, encoder_profile

    profile = encoder_profile(spec, tokens, seqs, max_model_len, tp, reserves.encoder_cache_size,
                              MM_LIMIT if reserves.mm_limit is None else reserves.mm_limit, dtype_bytes)
    if profile is None:
        return []
    cache_how = "given" if reserves.encoder_cache_size is not None else "exact"
    given = reserves.encoder_activation is not None
    excess = reserves.encoder_activation if given else max(0, profile.forward_bytes - decoder_forward)
    return [Term("encoder_cache", "encoder cache", profile.cache_bytes, "--encoder-cache-size", cache_how,
                 f"{profile.describe()}: their outputs, {profile.width:,} wide, held through the profiling forward "
                 f"({SOURCE})"),
            Term("encoder_activation", "encoder forward (above the decoder's)", excess, "--encoder-activation-memory",
                 "given" if given else "estimate",
                 f"the encoder's forward over {profile.items:,} x {profile.item.patches:,} patches"
                 + ("" if given else f", {profile.forward_bytes:,} B, less the decoder's profiling forward"))] + ([
            Term("encoder_rope", "encoder's rotary table (built on its first forward)", profile.table_bytes,
                 "--limit-mm-per-prompt", "exact", "a buffer the tower makes in the profiling run and keeps "
                 "(vllm/model_executor/models/kimi_k25_vit.py Rope2DPosEmbRepeated.get_freqs_cis)")]
            if profile.table_bytes else [])


def _sglang_vlm(spec: ModelSpec, fraction: float, how: str) -> tuple[float, str]:
    """SGLang's default fraction scaled down for a vision tower (`calc.analysis.memory.encoder`)."""
    from calc.analysis.memory.encoder import SGLANG_VLM_SOURCE, sglang_vlm_factor

    factor = sglang_vlm_factor(spec)
    if factor == 1.0:
        return fraction, how
    return fraction * factor, f"{how}, x {factor:.4f} for the vision encoder ({SGLANG_VLM_SOURCE})"


def sglang_fraction(mib: int, tp: int, pp: int, chunked_prefill: int | None = None,
                    graph_max_bs: int | None = None, prefill_graphs: int = 0,
                    dp: int | None = None) -> tuple[float, int]:
    """SGLang's default mem_fraction_static on a card of `mib` MiB (nvidia-smi's total, which SGLang
    reads), and the MiB it reserves for activations, CUDA graphs and parallel buffers; `prefill_graphs`:
    the MiB its prefill CUDA graphs take (calc.analysis.memory.sglang_prefill_graphs), inside the floor;
    `dp`: the --dp-size of DP attention (None: off), whose ranks' graph buffers it reserves too, the chunk
    still undivided (calc.analysis.memory.sglang_dp)."""
    chunk, max_bs = _sglang_sizes(mib, tp)
    chunk = chunked_prefill or chunk
    max_bs = graph_max_bs or max_bs
    reserved = 512 + max(chunk, 2048) * 1.5 + tp * pp / 8 * 1024 + 2 * max_bs + prefill_graphs
    if dp is not None:
        from calc.analysis.memory.sglang_dp import reserve_mib

        reserved += reserve_mib(max_bs, dp)
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3), int(reserved)


def _sglang_sizes(mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA graph max batch) SGLang picks by the card's memory."""
    if mib < 20 * 1024:
        return 2048, 8
    if mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


@dataclass(frozen=True)
class Reserves:
    """The settable terms (None: the engine's default or our estimate)."""

    fraction: float | None = None  # --gpu-memory-utilization / --mem-fraction-static
    activation: int | None = None
    non_torch: int | None = None
    cuda_graphs: int | None = None
    max_batched: int | None = None  # --max-num-batched-tokens (SGLang: --chunked-prefill-size)
    max_seqs: int | None = None
    encoder_cache_size: int | None = None  # vLLM's --encoder-cache-size (encoder embeddings)
    mm_limit: int | None = None  # vLLM's --limit-mm-per-prompt for images
    encoder_activation: int | None = None  # the encoder forward's excess over the decoder's, from a log


def startup_budget(engine: str, spec: ModelSpec, gpu: GPU, weights: int, tp: int = 1, pp: int = 1,
                   reserves: Reserves = Reserves(), dtype_bytes: int = 2,
                   extra: tuple[tuple[str, int], ...] = (), max_model_len: int | None = None,
                   encoder_tp: int | None = None, draft: DraftWeights | None = None,
                   dp: int | None = None, layers: range | None = None) -> StartupBudget:
    """The budget `engine` draws up on one GPU of the layout holding `weights` bytes of the model
    (`extra`: what the engine holds beyond them, engine_extra_weights); under vLLM, a multimodal model's
    encoder cache and encoder forward for requests of `max_model_len` tokens, under SGLang its default
    fraction scaled for the vision encoder (`encoder_tp`: the GPUs its layers are split over; None: the
    towers are not loaded, --text-only) and, with a speculative `draft`, the draft worker's weights taken from its pool
    (calc.analysis.memory.sglang_draft); `dp`: SGLang's --dp-size under DP attention (None: off); `layers`: the
    layers of the pipeline rank whose own profiling run this is (TensorRT-LLM's, activation_estimate; None: the
    model's)."""
    if engine not in STARTUP_ENGINES:
        raise GptcalcError(f"--engine {engine}: its start-up budget is not modelled ({', '.join(STARTUP_ENGINES)} "
                           "are); give the pool from its log with --kv-memory")
    total, total_source = cuda_total(gpu)
    batched, seqs = vllm_batch_defaults(total)
    if engine == "sglang":
        batched = reserves.max_batched or _sglang_sizes(total // MIB, tp)[0]
        seqs = 1  # SGLang's fraction covers activations; the estimate below is shown, not subtracted
    if engine == "trtllm":  # the profiling run is context requests of one output token: one row of logits each
        batched, seqs = MAX_NUM_TOKENS, 1
    tokens, rows = reserves.max_batched or batched, min(reserves.max_seqs or seqs, reserves.max_batched or batched)
    act = reserves.activation if reserves.activation is not None else activation_estimate(spec, tokens, rows, tp,
                                                                                             dtype_bytes, layers)
    sglang = engine == "sglang"
    non_torch = reserves.non_torch if reserves.non_torch is not None else \
        sglang_preload(tp, pp) if sglang else round(NON_TORCH * GIB)
    graphs = reserves.cuda_graphs if reserves.cuda_graphs is not None else round(CUDA_GRAPHS * GIB)
    given = lambda value: "given" if value is not None else "estimate"  # noqa: E731
    terms = [
        Term("weights", "model weights", weights + sum(n for _, n in extra), "--quant/--dtype/--checkpoint", "exact",
             "this model's bytes on one GPU of the layout" + _dp_layout(dp, spec) + "".join(
                 f", with {n:,} B of {what}" for what, n in extra) + (
                 f" ({'; '.join(_EXTRA_SOURCES[what] for what, _ in extra)})" if extra else "")),
        Term("activation", "activation peak", act, "--activation-memory", given(reserves.activation),
             _profiled(spec, tokens, rows, layers) + f" ({TRTLLM_POOL if engine == 'trtllm' else VLLM_PROFILING}"
             f"{'; ' + TRTLLM_PP_PROFILING if layers else ''})"),
        Term("non_torch", "in use before loading" if sglang else "non-torch memory", non_torch, "--non-torch-memory",
             given(reserves.non_torch), f"{SGLANG_PRELOAD_SOURCE}; {SGLANG_POOL}" if sglang else NON_TORCH_SOURCE),
        Term("cuda_graphs", "CUDA graphs", graphs, "--cuda-graph-memory", given(reserves.cuda_graphs),
             CUDA_GRAPHS_SOURCE),
    ]
    if engine == "vllm" and encoder_tp is not None and reserves.activation is None:  # a log's peak holds them already
        terms += _encoder_terms(spec, tokens, reserves.max_seqs or seqs, max_model_len or spec.n_positions, encoder_tp,
                                reserves, act, dtype_bytes)
    if engine == "vllm":
        fraction = reserves.fraction if reserves.fraction is not None else 0.9
        how = "given" if reserves.fraction is not None else "vLLM's default"
        return StartupBudget("vllm", gpu.name, total, total_source, fraction, "--gpu-memory-utilization", how,
                             tuple(terms))
    if engine == "trtllm":
        return StartupBudget("trtllm", gpu.name, total, total_source,
                             reserves.fraction if reserves.fraction is not None else 0.9, "--free-gpu-memory-fraction",
                             "given" if reserves.fraction is not None else TRTLLM_FRACTION, tuple(terms))
    if reserves.fraction is not None:
        fraction, how = reserves.fraction, "given"
    else:
        chunk = reserves.max_batched or _sglang_sizes(gpu.mib, tp)[0]
        prefill, why = prefill_graph_reserve(spec, chunk, pp)
        fraction, reserved = sglang_fraction(gpu.mib, tp, pp, reserves.max_batched, prefill_graphs=prefill, dp=dp)
        ranks = _dp_reserve(dp)
        how = (f"SGLang's default: ({gpu.mib:,} - {reserved:,} MiB reserved, {why}{ranks}) / {gpu.mib:,} MiB "
               f"({SGLANG_FRACTION}; {PREFILL_GRAPHS_SOURCE})")
        if encoder_tp is not None:  # the towers are loaded: SGLang leaves room for the vision encoder
            fraction, how = _sglang_vlm(spec, fraction, how)
    return StartupBudget("sglang", gpu.name, total, total_source, fraction, "--mem-fraction-static", how,
                         tuple(terms[:1] + ([_draft_term(draft)] if draft else []) + terms[1:]), draft)


def _profiled(spec: ModelSpec, tokens: int, rows: int, layers: range | None) -> str:
    """What the profiling run the activation estimate stands for runs: every layer and the sampler, or one
    pipeline rank's layers and, on the last rank only, the sampler (activation_estimate)."""
    if layers is None:
        return f"profiling forward of {tokens:,} tokens + sampler over {rows:,} rows"
    through = f"profiling forward of {tokens:,} tokens through layers {layers.start}-{layers.stop - 1}"
    if layers.stop == spec.n_layers:
        return f"{through} + sampler over {rows:,} rows"
    return f"{through}, no sampler (the last pipeline rank samples)"


def _dp_reserve(dp: int | None) -> str:
    """What the fraction's reserve holds for SGLang's DP attention (calc.analysis.memory.sglang_dp)."""
    if dp is None:
        return ""
    from calc.analysis.memory.sglang_dp import RESERVE_SOURCE

    return f", the decode graphs of {dp} DP-attention ranks: {RESERVE_SOURCE}"


def _dp_layout(dp: int | None, spec: ModelSpec) -> str:
    """How the weights term's bytes are laid out under SGLang's DP attention (calc.analysis.memory.sglang_dp)."""
    if dp is None:
        return ""
    from calc.analysis.memory.sglang_dp import FILES

    return f" under DP attention in {dp} groups ({FILES[spec.sglang.dp_attention].source})"


def _draft_term(draft: DraftWeights) -> Term:
    """SGLang's draft worker's weights, taken from the pool as the target's are (calc.analysis.memory.sglang_draft)."""
    if draft.own is None:
        return Term("draft_weights", "draft model weights", 0, "--speculative-num-steps", "not counted",
                    EAGLE_UNCOUNTED)
    return Term("draft_weights", "draft model weights", draft.own, "--speculative-num-steps",
                "exact" if draft.exact else "estimate",
                f"its MTP layers on one GPU, with their enorm, hnorm, shared_head.norm and eh_proj whole"
                f"{'' if draft.exact else ' (at 16 bits: e_proj, h_proj quantised and hc_head fp32 in SGLang)'}; it "
                f"also loads {draft.shared:,} B of embedding and head shards and frees them for the target's "
                f"({DRAFT_SOURCE})")
