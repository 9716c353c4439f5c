"""GPT-BigCode (SantaCoder, StarCoder-1; model_type gpt_bigcode): GPT-2 with multi-query attention.

With `multi_query` (the default) one key head and one value head serve every query head, so the
fused c_attn is d x (d + 2·head_dim) instead of GPT-2's d x 3d; without it, c_attn is GPT-2's.
The rest is GPT-2's layout (learned positions, pre-norm LayerNorm blocks, a non-gated MLP of
n_inner, default 4·d, biases everywhere, head tied unless `tie_word_embeddings` is false), with
the activation `activation_function` names (gelu_pytorch_tanh by default).
"""

from __future__ import annotations

from typing import Any

from calc.arch import gpt2
from calc.arch.common import TRANSFORMERS_BACKEND, mlp_activation, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' GPTBigCodeConfig defaults (models/gpt_bigcode/configuration_gpt_bigcode.py) for the keys read here.
DEFAULTS = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
            "activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-5, "multi_query": True,
            "tie_word_embeddings": True}


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    spec = gpt2.spec_dict(cfg)
    block = spec["blocks"]["decoder"]
    if cfg.bool("multi_query"):
        block["attention"]["n_kv_heads"] = 1
    block["mlp"].update(mlp_activation(cfg, "activation_function"))
    # vLLM 0.32: GPTBigCodeForCausalLM through the Transformers backend (vllm/model_executor/models/registry.py L715)
    return {**spec, "name": cfg.raw("_name_or_path", default="gpt_bigcode"), "model_type": "gpt_bigcode",
            **TRANSFORMERS_BACKEND}
