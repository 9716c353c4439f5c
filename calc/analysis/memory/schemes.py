"""Named weight quantisation schemes: which matrices they quantise, and every byte they store.

A scheme stores each quantised matrix (in_features i, out_features o, n = i x o values) as its
library lays it out, and leaves everything else (embeddings, LM head, norms, biases, and the
router where the scheme skips it) in 16 bits. Bits per matrix, with g the group size:

    gptq-int4   n x 4 + ceil(i/g) x o x (16 + 4) + i x 32        qweight, fp16 scales, packed int4 zeros, int32 g_idx
    awq-int4    n x 4 + (i/g) x o x (16 + 4)                      qweight, fp16 scales, packed int4 zeros
    bnb-nf4     n x 4 + ceil(n/64) x 32 + 16 x 32                 fp32 absmax per 64, the 16-value NF4 code
    bnb-nf4-dq  n x 4 + ceil(n/64) x 8 + ceil(n/64/256) x 32 + (16 + 256 + 1) x 32   absmax quantised to 8 bits
    bnb-int8    n x 8 + o x 32                                    int8 weights, fp32 scale per output row (SCB)
    fp8         n x 8 + 32                                        one fp32 scale per tensor
    fp8-channel n x 8 + o x 32                                    one fp32 scale per output channel
    fp8-block   n x 8 + ceil(o/128) x ceil(i/128) x 32            fp32 scale per 128 x 128 block (DeepSeek-V3)
    mxfp4       n x 4 + ceil(i/32) x o x 8                        FP4 E2M1 + one E8M0 scale per 32 (gpt-oss experts)
    nvfp4       n x 4 + ceil(i/16) x o x 8 + 2 x 32               FP4 + FP8 E4M3 scale per 16, fp32 global and input scales
    fp8-fp4     n x 8 + ceil(o/128) x ceil(i/128) x 8             DeepSeek-V4: FP8 with a UE8M0 scale per 128 x 128 block;
                routed experts n x 4 + ceil(i/32) x o x 8         its experts FP4 with a UE8M0 scale per 32; compressors,
                                                                  indexer kv, gate and weights BF16; fp32 rows below

llama.cpp's mixes (every llama-quantize type: q2_k, q2_k_s, q3_k_s/m/l, q4_k_s/m, q5_k_s/m, q6_k, q8_0, iq1_s/m,
iq2_xxs/xs/s/m, iq3_xxs/xs/s/m, iq4_nl, iq4_xs, tq1_0, tq2_0, mxfp4_moe) and ollama's (`ollama create --quantize`:
ollama_q4_k_m, ollama_q4_k_s, its own Go port before v0.30; ollama30_q4_k_m, ollama30_q4_k_s, llama-quantize with
ollama's --tensor-type pins since) give each tensor its own ggml type: gguf.py and gguf_rules.py.

Counted per matrix as the model defines them; a checkpoint that fuses matrices (q/k/v, gate/up)
stores fewer per-tensor scales (fp8, nvfp4: 32 bits each) and GPTQ's g_idx once per fused input.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.gguf import MIXES, SOURCE as GGUF_SOURCE, gguf_bits
from calc.analysis.memory.gguf_rules import LLAMA_QUANTIZE, OLLAMA, OLLAMA30
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["AS_STORED", "SCHEMES", "Scheme", "find_scheme", "scheme_bits", "stored_scheme", "weight_choice"]

AS_STORED = "as stored"  # what the sizing commands size weights as when neither --dtype nor --quant is given

GPTQ = "https://github.com/AutoGPTQ/AutoGPTQ/blob/058fd80a72d63d992347e3a23dcd5757449a9e2d/auto_gptq/nn_modules/qlinear/qlinear_cuda.py (register_buffer shapes)"
AWQ = "https://github.com/casper-hansen/AutoAWQ/blob/030fe2a15b959425d278de8121f03ed895e3b10c/awq/modules/linear/gemm.py (WQLinear_GEMM buffers)"
BNB = "bitsandbytes functional.quantize_4bit / Int8Params (blocksize 64, nested blocksize 256, SCB per row): https://github.com/bitsandbytes-foundation/bitsandbytes"
FP8 = "compressed-tensors / llm-compressor FP8 schemes (weight_scale per tensor or channel): https://github.com/neuralmagic/compressed-tensors"
FP8_BLOCK = "DeepSeek-V3 config.json quantization_config weight_block_size [128, 128] (weight_scale_inv per block)"
MX = "OCP Microscaling Formats (MX) v1.0; gpt-oss config.json quant_method mxfp4, modules_to_not_convert"
NVFP4 = "NVIDIA ModelOpt NVFP4 (weight_scale FP8 per 16, weight_scale_2 and input_scale fp32)"
DSV4 = ("DeepSeek-V4-Flash config.json quantization_config (fp8, weight_block_size [128, 128], scale_fmt ue8m0) and "
        "expert_dtype fp4; dtypes as its safetensors store them (https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash)")
G = 128  # the group size GPTQ and AWQ checkpoints use


def _c(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Scheme:
    """How one scheme stores a quantised matrix, and which matrices it quantises."""

    name: str
    bits: Callable[[int, int], int]  # (in_features, out_features) -> bits of one matrix, scales included
    router: bool  # is the MoE router (and a shared-expert gate) quantised too?
    experts_only: bool  # only the routed experts (gpt-oss MXFP4)
    keeps: str  # what stays 16-bit, in words
    source: str
    gguf: bool = False  # a llama.cpp mix: per-tensor types from llama_tensor_get_type (gguf.py)
    expert_bits: Callable[[int, int], int] | None = None  # the routed experts stored another way (DeepSeek-V4's FP4)
    kept: tuple[str, ...] = ()  # more matrices left in 16 bits (DeepSeek-V4's compressors)
    fp32: tuple[str, ...] = ()  # rows stored in fp32 (DeepSeek-V4's hyper-connections, sinks, position biases)

    def quantises(self, name: str) -> bool:
        if self.experts_only:
            return name.startswith("experts_")
        return self.router or name not in ("router", "shared_expert_gate", *self.kept)

    def matrix_bits(self, name: str, n_in: int, n_out: int) -> int:
        """One quantised matrix, scales included: the experts' way where the scheme has one."""
        bits = self.expert_bits if self.expert_bits is not None and name.startswith("experts_") else self.bits
        return bits(n_in, n_out)


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("gptq-int4", lambda i, o: i * o * 4 + _c(i, G) * o * 20 + i * 32, False, False,
           "embeddings, LM head, norms, biases, router", GPTQ),
    Scheme("awq-int4", lambda i, o: i * o * 4 + _c(i, G) * o * 20, False, False,
           "embeddings, LM head, norms, biases, router", AWQ),
    Scheme("bnb-nf4", lambda i, o: i * o * 4 + _c(i * o, 64) * 32 + 16 * 32, True, False,
           "embeddings, LM head, norms, biases", BNB),
    Scheme("bnb-nf4-dq", lambda i, o: i * o * 4 + _c(i * o, 64) * 8 + _c(_c(i * o, 64), 256) * 32 + 273 * 32, True,
           False, "embeddings, LM head, norms, biases", BNB),
    Scheme("bnb-int8", lambda i, o: i * o * 8 + o * 32, True, False, "embeddings, LM head, norms, biases", BNB),
    Scheme("fp8", lambda i, o: i * o * 8 + 32, False, False, "embeddings, LM head, norms, biases, router", FP8),
    Scheme("fp8-channel", lambda i, o: i * o * 8 + o * 32, False, False,
           "embeddings, LM head, norms, biases, router", FP8),
    Scheme("fp8-block", lambda i, o: i * o * 8 + _c(o, 128) * _c(i, 128) * 32, False, False,
           "embeddings, LM head, norms, biases, router", FP8_BLOCK),
    Scheme("mxfp4", lambda i, o: i * o * 4 + _c(i, 32) * o * 8, False, True,
           "everything but the routed experts (attention, router, embeddings, LM head)", MX),
    Scheme("nvfp4", lambda i, o: i * o * 4 + _c(i, 16) * o * 8 + 64, False, False,
           "embeddings, LM head, norms, biases, router", NVFP4),
    Scheme("fp8-fp4", lambda i, o: i * o * 8 + _c(o, 128) * _c(i, 128) * 8, False, False,
           "embeddings, LM head, norms, router, compressors and the indexer's kv, gate and weights in 16 bits; "
           "hyper-connections, sinks and position biases in fp32", DSV4,
           expert_bits=lambda i, o: i * o * 4 + _c(i, 32) * o * 8,
           kept=("comp_kv", "comp_gate", "idx_kv", "idx_gate", "idx_weights"),
           fp32=("hc_attn", "hc_mlp", "hc_head", "attn_sinks", "comp_bias", "idx_bias")),
    *(Scheme(mix, lambda i, o: 0, False, False, "norms, biases and router F32, LM head Q6_K (Q8_0 in Q8_0 and "
             "MXFP4_MOE files, Q5_K in IQ1 / IQ2 / IQ3_XXS ones), attn_v and ffn_down with more bits on some layers",
             OLLAMA if mix.startswith("ollama_") else OLLAMA30 if mix in LLAMA_QUANTIZE else GGUF_SOURCE, True)
      for mix in MIXES),
)}
KEPT_BITS = 16  # what a scheme leaves unquantised is stored in bf16 / fp16


def find_scheme(name: str) -> Scheme:
    """A scheme by name; '_' and '-' are the same ('AWQ_INT4', 'Q4_K_M', 'q4-k-m')."""
    wanted = name.strip().lower().replace("_", "-")
    key = next((s for s in SCHEMES if s.replace("_", "-") == wanted), None)
    if key is None:
        raise GptcalcError(f"--quant {name!r}: unknown (choose from {', '.join(SCHEMES)})")
    return SCHEMES[key]


def scheme_bits(spec: ModelSpec, breakdown: Breakdown, scheme: Scheme) -> dict[str, Fraction]:
    """Bits per parameter of every component under `scheme` (exact: total bits / parameters)."""
    if scheme.gguf:
        return _per_param(gguf_bits(spec, breakdown, scheme.name), breakdown)
    bits = {name: (32 if name in scheme.fp32 else KEPT_BITS) * n for name, n in breakdown.components.items()}
    copies = {name: block for name, (block, _) in spec.shared_blocks().items()}
    kinds = [(block, spec.blocks[block.name]) for block in breakdown.blocks]
    for block, part in [*kinds, *((copy, copies[copy.name]) for copy in breakdown.shared)]:
        for name, (i, count) in part.matrices(spec.d_model).items():
            if not scheme.quantises(name) or name not in block.per_layer:
                continue
            out = block.per_layer[name] // (i * count)
            bits[name] += block.layers * (count * scheme.matrix_bits(name, i, out) - KEPT_BITS * block.per_layer[name])
    return _per_param(bits, breakdown)


def _per_param(bits: dict[str, int], breakdown: Breakdown) -> dict[str, Fraction]:
    return {name: Fraction(b, breakdown.components[name]) for name, b in bits.items() if breakdown.components[name]}


def weight_choice(spec: ModelSpec, dtype: str | None, quant: str | None) -> tuple[str, Scheme | None]:
    """(dtype, scheme) the weights are sized as: --quant's scheme, else --dtype, else as stored (the
    config's quantization_config: gpt-oss's MXFP4 experts), else 16-bit."""
    if quant is not None:
        return dtype or "fp16", find_scheme(quant)
    if dtype is not None:
        return dtype, None
    return "fp16", find_scheme(spec.quant) if spec.quant else None


def stored_scheme(config: object) -> str | None:
    """The scheme a config.json's `quantization_config` says its weights are stored in ('mxfp4' for
    gpt-oss, 'fp8-block' for DeepSeek-V3), or None: not quantised, or a method with no scheme here."""
    if not isinstance(config, dict):
        return None
    method = str(config.get("quant_method", "")).lower().replace("_", "-")
    bits = config.get("bits")
    if method in ("mxfp4", "nvfp4"):
        return method
    if method == "fp8" and config.get("expert_dtype") == "fp4" and config.get("scale_fmt") == "ue8m0":
        return "fp8-fp4"  # DeepSeek-V4
    if method == "fp8":
        return "fp8-block" if config.get("weight_block_size") else "fp8"
    if method in ("gptq", "awq") and bits == 4:
        return f"{method}-int4"
    if method == "bitsandbytes":
        return _bitsandbytes(config)
    if method == "modelopt":
        return {"NVFP4": "nvfp4", "FP8": "fp8"}.get(str(config.get("quant_algo", "")).upper())
    if method == "compressed-tensors":
        return _compressed_tensors(config)
    return None


def _bitsandbytes(config: dict) -> str | None:  # type: ignore[type-arg]
    if config.get("load_in_4bit") and config.get("bnb_4bit_quant_type") == "nf4":
        return "bnb-nf4-dq" if config.get("bnb_4bit_use_double_quant") else "bnb-nf4"
    return "bnb-int8" if config.get("load_in_8bit") else None


def _compressed_tensors(config: dict) -> str | None:  # type: ignore[type-arg]
    """llm-compressor's formats: FP8 by its scale strategy (tensor, channel, block), NVFP4."""
    if config.get("format") == "nvfp4-pack-quantized":
        return "nvfp4"
    if config.get("format") != "float-quantized":
        return None
    groups = config.get("config_groups")
    weights = [g.get("weights") for g in groups.values() if isinstance(g, dict)] if isinstance(groups, dict) else []
    strategies = {w.get("strategy") for w in weights if isinstance(w, dict) and w.get("num_bits") == 8}
    return {"tensor": "fp8", "channel": "fp8-channel", "block": "fp8-block"}.get(strategies.pop()) \
        if len(strategies) == 1 else None
