"""MPT (model_type mpt), as transformers builds it, which is not everything an MPT config can say.

transformers' MptModel hard-codes MPT-7B's choices: ALiBi and no position table, a fused Wqkv and
out_proj without bias, a 4·d GELU MLP (up_proj, down_proj) without bias, LayerNorms with a scale
but no bias (blocks and norm_f), head tied. The keys of MosaicML's own code that would change this
(`expansion_ratio`, `no_bias`, `attn_config.alibi`, `attn_config.attn_type`, `attn_config.qk_ln`)
are not read there; when a config sets one to something else, a note says it is ignored. Context
length: `max_seq_len`.
"""

from __future__ import annotations

from typing import Any

from calc.arch.common import KEYS, mha, norm, uniform, with_defaults
from calc.arch.config import Config

__all__ = ["DEFAULTS", "spec_dict"]

# transformers' MptConfig defaults (models/mpt/configuration_mpt.py) for the keys read here.
DEFAULTS = {"d_model": 2048, "n_heads": 16, "n_layers": 24, "max_seq_len": 2048, "vocab_size": 50368,
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
# What MptModel builds, whatever the config says: (key, the value transformers' model has, the mapping the key is in).
HARD_CODED = (("expansion_ratio", 4, None), ("no_bias", True, None),
              ("attn_type", "multihead_attention", "attn_config"), ("qk_ln", False, "attn_config"),
              ("alibi", True, "attn_config"))


def spec_dict(cfg: Config) -> dict[str, Any]:
    cfg = with_defaults(cfg, DEFAULTS)
    ln = norm("layernorm", cfg.float("layer_norm_epsilon"), bias=False)
    attn = mha(cfg, False, fused_qkv=True, alibi=True)
    mlp = {"d_ff": 4 * cfg.int(*KEYS["d_model"]), "activation": "gelu"}
    # no dropout: MptAttentionConfig types attn_pdrop (the one rate MptAttention, MptMLP and MptBlock apply) as
    # an int, so transformers refuses 0.1 and a config it loads drops out nothing
    block = {"attention": attn, "mlp": mlp, "norm": ln}
    # vLLM 0.32 serves MPT no more (vllm/model_executor/models/registry.py L847-848, until 0.28.0), nor can its
    # Transformers backend: transformers' MptForCausalLM neither supports the attention backend nor uses the
    # attention interface
    return uniform(cfg, "mpt", block, ln, cfg.bool("tie_word_embeddings"), notes=_ignored(cfg),
                   vllm={"implementation": "none"})


def _ignored(cfg: Config) -> tuple[str, ...]:
    """A note for each key the config sets to something transformers' MPT does not build."""
    notes = []
    for key, built, section in HARD_CODED:
        value = (cfg.dict(section) if section else cfg.data).get(key)
        if value is not None and value != built:
            where = f"{section}.{key}" if section else key
            notes.append(f"mpt: {where} = {value!r} is ignored: transformers' MPT builds {key} = {built!r}, "
                         "and so is counted")
    return tuple(notes)
