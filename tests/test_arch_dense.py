"""The older and odd dense adapters (gpt_bigcode, gpt_neox, gptj, opt, bloom, falcon, mpt, phi,
stablelm, starcoder2) against published figures and against transformers itself.

tests/test_arch.py checks every saved config.json total against transformers. Here: published
totals and shapes, the defaults each adapter assumes for keys a config leaves out, the variants
real configs switch between (OPT-350m's post-LN and projected embeddings, Falcon's two
generations, NeoX's sequential form, ...), and the position information that has no parameters
(ALiBi, partial rotary, windows) but must be in the spec for the KV cache and the torch reference.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from calc.analysis.breakdown import MODEL_COMPONENTS
from calc.analysis.count import count
from calc.arch import spec_dict
from calc.errors import GptcalcError
from calc.spec.flat import flat_view
from calc.spec.load import load_spec
from calc.spec.model import spec_from_dict
from oracle import CONFIG_DIR, saved, spec_of, transformers_count, transformers_model

MODEL_TYPES = CONFIG_DIR / "model_types"
DATA = Path(__file__).resolve().parent / "data"


# --- published figures ---------------------------------------------------------------------------

def test_pythia_6_9b_matches_the_model_card() -> None:
    """Pythia-6.9B-deduped: 6,857,302,016 parameters, 6,444,163,072 of them non-embedding (the
    model card's tables, https://huggingface.co/EleutherAI/pythia-6.9b-deduped; Pythia counts the
    untied embed_out as embedding, as we do)."""
    b = count(load_spec(str(MODEL_TYPES / "gpt_neox.json")))
    assert (b.total, b.non_embedding) == (6_857_302_016, 6_444_163_072)


# BLOOM-560m's model card, "Technical Specifications": "559,214,592 parameters: 256,901,120 embedding
# parameters, 24 layers, 16 attention heads, Hidden layers are 1024-dimensional" (so 250,880 token rows).
# https://huggingface.co/bigscience/bloom-560m, mirrored at https://github.com/ZHUI/paddlenlp_model_readme/blob/40a7101e89dcf9a0dedb0e0d48c8c357fcc95996/bigscience/bloom-560m/index.md#L335
# Written the way the first BLOOM configs were, with n_embed for hidden_size.
BLOOM_560M = {"model_type": "bloom", "n_layer": 24, "n_head": 16, "n_embed": 1024, "vocab_size": 250880}


@pytest.mark.parametrize("config", [BLOOM_560M, "bloom.json"], ids=["card", "config.json"])
def test_bloom_560m_matches_the_model_card(config: dict[str, Any] | str) -> None:
    """The card's figures, from the config written the old way and from the real config.json
    (tests/configs/model_types/bloom.json)."""
    config = saved(config) if isinstance(config, str) else config
    b = count(spec_of(config))
    assert (b.total, b.get("token_embedding")) == (559_214_592, 256_901_120)
    assert b.total == transformers_count(config)


# OPT-350m as transformers prints it
# (https://github.com/if001/alpaca-lora/blob/9e2a12f1e1251601bdf906e99f69f9a048925b8f/gomi.md):
# embed_tokens (50272, 512), embed_positions (2050, 1024), project_out 1024 -> 512, project_in 512 -> 1024, 24
# layers of q/k/v/out_proj 1024 -> 1024 with bias, fc1 1024 -> 4096, fc2 4096 -> 1024 with bias, two LayerNorms,
# no final layer norm, lm_head 512 -> 50272 (tied). 16 heads: the OPT paper's Table 1 (arXiv:2205.01068).
OPT_350M = {"model_type": "opt", "num_hidden_layers": 24, "num_attention_heads": 16, "hidden_size": 1024,
            "ffn_dim": 4096, "word_embed_proj_dim": 512, "do_layer_norm_before": False, "vocab_size": 50272,
            "max_position_embeddings": 2048}
OPT_350M_ROWS = {
    "token_embedding": 50272 * 512, "position_embedding": 2050 * 1024, "project_in": 512 * 1024,
    "project_out": 1024 * 512, "lm_head": 0,
    **{name: 24 * (1024 * 1024) for name in ("q", "k", "v", "attn_out")},
    **{name: 24 * 1024 for name in ("q_bias", "k_bias", "v_bias", "attn_out_bias", "mlp_down_bias")},
    "mlp_up": 24 * 1024 * 4096, "mlp_up_bias": 24 * 4096, "mlp_down": 24 * 4096 * 1024,
    "attn_norm": 24 * 2 * 1024, "mlp_norm": 24 * 2 * 1024,
}


def test_opt_350m_has_the_printed_tensors() -> None:
    spec = spec_of(OPT_350M)
    b = count(spec)
    assert dict(b.components) == OPT_350M_ROWS
    assert b.total == transformers_count(OPT_350M)
    assert spec.final_norm is None and spec.blocks["decoder"].post_ln
    assert b.tied_saving == 50272 * 512  # an untied head would be as narrow as the embedding
    assert sum(block.total for block in b.blocks) + sum(b.get(name) for name in MODEL_COMPONENTS) == b.total


# --- defaults: an empty config is the model transformers' config class describes ----------------

LAYERS = {"gpt2": "n_layer", "gpt_bigcode": "n_layer", "gpt_neox": "num_hidden_layers", "gptj": "n_layer", "opt": "num_hidden_layers",
          "bloom": "n_layer", "falcon": "num_hidden_layers", "mpt": "n_layers", "phi": "num_hidden_layers",
          "stablelm": "num_hidden_layers", "starcoder2": "num_hidden_layers"}


@pytest.mark.parametrize("model_type", LAYERS)
def test_defaults_are_transformers_config_class_defaults(model_type: str) -> None:
    config = {"model_type": model_type, LAYERS[model_type]: 2}
    assert count(spec_of(config)).total == transformers_count(config)


# --- the variants configs switch between -----------------------------------------------------------

VARIANTS = {
    "bigcode-mqa": {"model_type": "gpt_bigcode", "n_layer": 2},
    "bigcode-mha": {"model_type": "gpt_bigcode", "n_layer": 2, "multi_query": False, "n_inner": 1000,
                    "activation_function": "gelu_fast"},
    "neox-sequential-no-bias-tied": {"model_type": "gpt_neox", "num_hidden_layers": 2, "use_parallel_residual": False,
                                     "attention_bias": False, "rotary_pct": 0.5, "tie_word_embeddings": True},
    "gptj-tied-head-keeps-its-bias": {"model_type": "gptj", "n_layer": 2, "n_inner": 1000, "tie_word_embeddings": True},
    "opt-no-bias-no-affine-untied-projected": {
        "model_type": "opt", "num_hidden_layers": 2, "enable_bias": False, "layer_norm_elementwise_affine": False,
        "_remove_final_layer_norm": True, "tie_word_embeddings": False, "word_embed_proj_dim": 256},
    "bloom-untied": {"model_type": "bloom", "n_layer": 2, "n_embed": 256, "num_attention_heads": 4,
                     "tie_word_embeddings": False},
    "falcon-40b-form": {"model_type": "falcon", "num_hidden_layers": 2, "new_decoder_architecture": True,
                        "num_kv_heads": 8, "hidden_size": 1024, "num_attention_heads": 64, "bias": True},
    "falcon-new-one-norm": {"model_type": "falcon", "num_hidden_layers": 2, "new_decoder_architecture": True,
                            "num_ln_in_parallel_attn": 1, "hidden_size": 1024, "num_attention_heads": 64},
    "falcon-sequential-alibi": {"model_type": "falcon", "num_hidden_layers": 2, "multi_query": False,
                                "parallel_attn": False, "alibi": True, "n_embed": 512, "num_attention_heads": 8,
                                "ffn_hidden_size": 1000},
    # Falcon-7B's layout ignores num_kv_heads without multi_query: its fused Q/K/V is d x 3d
    "falcon-mha-ignores-num-kv-heads": {"model_type": "falcon", "num_hidden_layers": 2, "multi_query": False,
                                        "num_kv_heads": 1, "hidden_size": 512, "num_attention_heads": 8},
    "phi-qk-layernorm-gqa-tied": {"model_type": "phi", "num_hidden_layers": 2, "qk_layernorm": True,
                                  "num_key_value_heads": 8, "tie_word_embeddings": True},
    "stablelm-qk-layernorm-parallel": {"model_type": "stablelm", "num_hidden_layers": 2, "use_qkv_bias": True,
                                       "qk_layernorm": True, "use_parallel_residual": True, "num_key_value_heads": 8},
    "starcoder2-no-bias-windowed-untied": {"model_type": "starcoder2", "num_hidden_layers": 2, "use_bias": False,
                                           "sliding_window": 4096, "tie_word_embeddings": False},
}


@pytest.mark.parametrize("name", VARIANTS)
def test_variants_count_as_transformers(name: str) -> None:
    assert count(spec_of(VARIANTS[name])).total == transformers_count(VARIANTS[name])


def _qkv_width(model: Any) -> int:
    """Output features of the first layer's Q, K and V projections (fused or not), from transformers' model."""
    names = ("query_key_value", "c_attn", "Wqkv", "q_proj", "k_proj", "v_proj")
    layer = next(module for name, module in model.named_modules() if name.endswith(".0"))
    return sum(module.out_features for name, module in layer.named_modules() if name.split(".")[-1] in names)


@pytest.mark.parametrize("name", VARIANTS)
def test_kv_heads_are_transformers(name: str) -> None:
    """The KV heads decide the cache: n_heads·hd + 2·n_kv_heads·hd must be the width transformers projects to."""
    attention = spec_of(VARIANTS[name]).blocks["decoder"].attention
    assert attention.q_dim + 2 * attention.kv_dim == _qkv_width(transformers_model(copy.deepcopy(VARIANTS[name])))


# --- position information without parameters, per transformers' modules ----------------------------

ROTARY: dict[str, Callable[[Any], int]] = {
    "gpt_neox.json": lambda m: m.gpt_neox.layers[0].attention.rotary_ndims,
    "gptj.json": lambda m: m.transformer.h[0].attn.rotary_dim,
    "phi.json": lambda m: m.model.layers[0].self_attn.rotary_ndims,
    "stablelm.json": lambda m: m.model.layers[0].self_attn.rotary_ndims,
}


@pytest.mark.parametrize("name", ROTARY)
def test_partial_rotary_width_is_transformers(name: str) -> None:
    """Pythia rotates 32 of 128 channels, GPT-J 64 of 256, Phi-2 32 of 80, StableLM-2 16 of 64."""
    rope = load_spec(str(MODEL_TYPES / name)).blocks["decoder"].attention.rope
    assert rope.rotary_dim == ROTARY[name](transformers_model(saved(name)))


@pytest.mark.parametrize("config, alibi", [
    (BLOOM_560M, True),
    ({"model_type": "mpt", "n_layers": 2}, True),
    (VARIANTS["falcon-sequential-alibi"], True),
    (VARIANTS["falcon-40b-form"], False),
])
def test_alibi_and_rotary_are_exclusive_and_marked(config: dict[str, Any], alibi: bool) -> None:
    attention = spec_of(config).blocks["decoder"].attention
    assert (attention.alibi, attention.rope is None) == (alibi, alibi)


def test_starcoder2_window_is_transformers() -> None:
    config = saved("starcoder2.json")
    window = load_spec(str(MODEL_TYPES / "starcoder2.json")).blocks["decoder"].attention.window
    assert window == transformers_model(config).config.sliding_window == 4096


@pytest.mark.parametrize("name, parallel", [
    ("gpt_neox.json", True), ("gpt_neox-redpajama.json", False), ("gptj.json", True), ("phi.json", True),
    ("stablelm.json", False),
])
def test_parallel_blocks(name: str, parallel: bool) -> None:
    """Pythia's use_parallel_residual keeps both norms; GPT-J and Phi share one; RedPajama-3B is sequential."""
    block = load_spec(str(MODEL_TYPES / name)).blocks["decoder"]
    assert block.parallel == parallel
    assert len(block.norms) == (1 if name in ("gptj.json", "phi.json") else 2)


# --- what transformers does not build, and what it cannot read -----------------------------------

def test_mpt_notes_the_keys_transformers_ignores() -> None:
    """MptModel hard-codes a 4·d MLP, no biases, multi-head ALiBi attention; a config asking otherwise
    is counted as transformers builds it, and says so."""
    config = {"model_type": "mpt", "n_layers": 2, "expansion_ratio": 2, "no_bias": False,
              "attn_config": {"attn_type": "multiquery_attention"}}
    spec = spec_of(config)
    assert count(spec).total == transformers_count(config)
    ignored = [note.split(" = ")[0] for note in spec.notes if " is ignored" in note]
    assert ignored == ["mpt: expansion_ratio", "mpt: no_bias", "mpt: attn_config.attn_type"]
    assert not [note for note in spec_of({"model_type": "mpt", "n_layers": 2}).notes if " is ignored" in note]


def test_refinedweb_configs_are_refused_as_transformers_refuses_them() -> None:
    """Falcon-40B's original config says model_type "RefinedWeb" (remote code, n_head_kv), which
    transformers 5.23 no longer maps; neither do we. Verbatim copy of
    https://github.com/Decentralised-AI/falcon-40b/blob/e7950c40d6bc9caca678af160de9c79f33f93699/config.json"""
    path = DATA / "falcon-40b-refinedweb.config.json"
    with pytest.raises(GptcalcError, match="'RefinedWeb' is not supported"):
        load_spec(str(path))
    with pytest.raises(ValueError, match="Unrecognized model identifier: RefinedWeb"):
        transformers_model(json.loads(path.read_text()))


# --- the part features OPT-350m needed ----------------------------------------------------------------

def test_post_ln_and_projected_embeddings_are_not_a_flat_stack() -> None:
    """The torch reference builds pre-norm stacks with d_model-wide embeddings: it must refuse these, not misbuild."""
    data = spec_dict(copy.deepcopy(OPT_350M), "test") | {"model_type": "custom"}
    with pytest.raises(GptcalcError, match="norms placed other than before attention and MLP"):
        flat_view(spec_from_dict(data, "test"))
    data["blocks"]["decoder"]["post_ln"] = False
    with pytest.raises(GptcalcError, match="projection"):
        flat_view(spec_from_dict(data, "test"))


def test_post_ln_takes_only_the_input_norm_positions() -> None:
    data = spec_dict(copy.deepcopy(OPT_350M), "test")
    data["blocks"]["decoder"]["parallel"] = True
    with pytest.raises(GptcalcError, match="post_ln"):
        spec_from_dict(data, "test")
