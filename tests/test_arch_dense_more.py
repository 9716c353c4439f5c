"""The dense model_types of 2025: glm4, cohere2, internlm3, seed_oss, ernie4_5, hunyuan_v1_dense, arcee, apertus.

transformers is the oracle: each total here is compared with transformers' own model of the same
config built on the meta device, and each per-layer choice (window, rotary, its base) with what
transformers' modules or config hold. tests/test_reference_equivalence.py proves the logits of
tiny models of every type; this file covers what a tiny model does not: defaults, every key that
switches a part on or off, and the options a config can spell two ways.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from calc.analysis.count import count
from calc.errors import GptcalcError
from oracle import saved, spec_of, transformers_count, transformers_model

TYPES = ["glm4", "cohere2", "internlm3", "seed_oss", "ernie4_5", "hunyuan_v1_dense", "arcee", "apertus"]
# HunYuanDenseV1Config leaves head_dim None, which HunYuanDenseV1Attention cannot build: every real config sets it.
NEEDED = {"hunyuan_v1_dense": {"head_dim": 128}}


def total(config: dict[str, Any]) -> int:
    return count(spec_of(config)).total


@pytest.mark.parametrize("model_type", TYPES)
def test_defaults_are_transformers_config_class_defaults(model_type: str) -> None:
    """A config that names only its model_type is the model its transformers config class describes."""
    config = {"model_type": model_type, "num_hidden_layers": 2, **NEEDED.get(model_type, {})}
    assert total(config) == transformers_count(config)


# Every switch the adapters read, on and off, at a small width (the counts differ when they are wrong).
SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 100, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
SWITCHES = {
    "glm4-no-bias": {"model_type": "glm4", **SMALL, "head_dim": 32, "attention_bias": False},
    "glm4-tied": {"model_type": "glm4", **SMALL, "tie_word_embeddings": True},
    "cohere2-bias": {"model_type": "cohere2", **SMALL, "attention_bias": True, "head_dim": 8},
    "cohere2-untied": {"model_type": "cohere2", **SMALL, "tie_word_embeddings": False},
    "internlm3-bias": {"model_type": "internlm3", **SMALL, "qkv_bias": True, "bias": True},
    "internlm3-new-names": {"model_type": "internlm3", **SMALL, "attention_bias": True, "mlp_bias": True},
    "seed_oss-out-bias": {"model_type": "seed_oss", **SMALL, "attention_out_bias": True, "mlp_bias": True},
    "seed_oss-no-bias": {"model_type": "seed_oss", **SMALL, "attention_bias": False},
    "ernie4_5-bias": {"model_type": "ernie4_5", **SMALL, "use_bias": True, "tie_word_embeddings": False},
    "hunyuan-bias": {"model_type": "hunyuan_v1_dense", **SMALL, "head_dim": 16, "attention_bias": True},
    "arcee-bias": {"model_type": "arcee", **SMALL, "mlp_bias": True, "attention_bias": True},
    "arcee-gelu": {"model_type": "arcee", **SMALL, "hidden_act": "gelu"},
    "apertus-bias": {"model_type": "apertus", **SMALL, "attention_bias": True},
    "apertus-silu": {"model_type": "apertus", **SMALL, "hidden_act": "silu"},
}


@pytest.mark.parametrize("name", SWITCHES)
def test_every_switch_counts_as_in_transformers(name: str) -> None:
    assert total(SWITCHES[name]) == transformers_count(SWITCHES[name])


def test_seed_oss_bias_on_qkv_and_output_apart() -> None:
    """SeedOssAttention: attention_bias on q/k/v_proj, attention_out_bias on o_proj."""
    attention = spec_of({"model_type": "seed_oss", **SMALL, "attention_bias": True}).blocks["decoder"].attention
    assert (attention.q_bias, attention.k_bias, attention.v_bias, attention.o_bias) == (True, True, True, False)


def test_xielu_scalars_are_parameters() -> None:
    """XIELUActivation holds alpha_p and alpha_n as nn.Parameter of one element each: 2 per layer, which
    transformers counts; beta and eps are buffers, not counted."""
    config = {"model_type": "apertus", **SMALL}
    components = count(spec_of(config)).components
    assert components["mlp_act"] == 2 * SMALL["num_hidden_layers"]
    model = transformers_model(copy.deepcopy(config))
    names = {name for name, _ in model.named_parameters()}
    assert {"model.layers.0.mlp.act_fn.alpha_p", "model.layers.0.mlp.act_fn.alpha_n"} <= names
    assert "model.layers.0.mlp.act_fn.beta" in dict(model.named_buffers())


# --- per layer: windows, rotary and its base ------------------------------------------------------

COHERE2 = {
    "pattern-4": {"model_type": "cohere2", **SMALL, "num_hidden_layers": 8},
    "pattern-2": {"model_type": "cohere2", **SMALL, "num_hidden_layers": 4, "sliding_window_pattern": 2,
                  "sliding_window": 64},
    "layer-types": {"model_type": "cohere2", **SMALL, "num_hidden_layers": 3,
                    "layer_types": ["full_attention", "sliding_attention", "sliding_attention"]},
    "no-window": {"model_type": "cohere2", **SMALL, "sliding_window": None},
}


@pytest.mark.parametrize("name", COHERE2)
def test_cohere2_sliding_layers_rotate_full_layers_do_not(name: str) -> None:
    """Cohere2Attention windows a sliding layer and rotates only a layer with a window."""
    config = COHERE2[name]
    spec = spec_of(config)
    for i, layer in enumerate(transformers_model(copy.deepcopy(config)).model.layers):
        ours = spec.blocks[spec.block_at(i)].attention
        assert ours.window == layer.self_attn.sliding_window, i
        assert (ours.rope is not None) == (layer.self_attn.sliding_window is not None), i
    assert count(spec).total == transformers_count(config)


def test_cohere2_head_dim_is_hidden_over_heads_unless_set() -> None:
    """Cohere2Config's __post_init__ sets head_dim = hidden_size // num_attention_heads, and a head_dim the
    config gives is set after it: Cohere2Attention reads the config's."""
    for extra, expected in (({}, 16), ({"head_dim": 8}, 8)):
        config = {"model_type": "cohere2", **SMALL, **extra}
        spec = spec_of(config)
        assert {block.attention.head_dim for block in spec.blocks.values()} == {expected}
        assert transformers_model(copy.deepcopy(config)).model.layers[0].self_attn.head_dim == expected


@pytest.mark.parametrize(("change", "named"), [
    ({"layer_types": ["sliding_attention"]}, "layer_types: expected 2 layer type names"),
    ({"sliding_window_pattern": 0}, "sliding_window_pattern: expected a positive layer period, got 0"),
    ({"sliding_window_pattern": "LLLG"}, "sliding_window_pattern: expected an integer"),
])
def test_cohere2_layer_kinds_it_cannot_read_are_named(change: dict[str, Any], named: str) -> None:
    with pytest.raises(GptcalcError, match=f"^test: {named}"):
        spec_of({"model_type": "cohere2", **SMALL, **change})


def test_cohere2_pattern_is_named_as_defaulted_only_when_read() -> None:
    """Cohere2Config reads sliding_window_pattern only without layer_types, so only then is its default noted."""
    kinds = ["sliding_attention", "full_attention"]
    assert "sliding_window_pattern=4" in spec_of({"model_type": "cohere2", **SMALL}).notes[0]
    assert "sliding_window_pattern" not in spec_of({"model_type": "cohere2", **SMALL, "layer_types": kinds}).notes[0]


def test_glm4_rotates_half_of_each_head_by_pairs() -> None:
    """Glm4Config's partial_rotary_factor 0.5 of head_dim 128: 64 channels, pairs interleaved."""
    rope = spec_of({"model_type": "glm4", **SMALL}).blocks["decoder"].attention.rope
    assert (rope.rotary_dim, rope.interleaved) == (64, True)


def test_hunyuan_ntk_alpha_is_a_fixed_base() -> None:
    """A "dynamic" rope_scaling with alpha 1000 (Hunyuan-7B's) stretches the base once; the frequencies
    are those HunYuanDenseV1RotaryEmbedding computes."""
    torch = pytest.importorskip("torch")
    from calc.reference.parts.rope import Rotary

    config = {"model_type": "hunyuan_v1_dense", **SMALL, "head_dim": 16, "rope_theta": 10000.0,
              "rope_scaling": {"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0, "mscale": 1.0,
                               "mscale_all_dim": 1.0, "type": "dynamic"}}
    rope = spec_of(config).blocks["decoder"].attention.rope
    assert rope.scaling is None and rope.theta == 10000.0 * 1000.0 ** (16 / 14)
    transformers = pytest.importorskip("transformers")
    data = copy.deepcopy(config)
    hf_config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    module = transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense.HunYuanDenseV1RotaryEmbedding(hf_config)
    ours, _ = Rotary(rope, 64)._inv_freq(False)
    torch.testing.assert_close(ours, module.inv_freq, rtol=0, atol=0)


def test_hunyuan_ntk_alpha_needs_a_head_wider_than_two() -> None:
    config = {"model_type": "hunyuan_v1_dense", **SMALL, "head_dim": 2,
              "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}}
    with pytest.raises(GptcalcError, match="^test: rope_scaling: NTK-alpha needs a head_dim above 2"):
        spec_of(config)


@pytest.mark.parametrize("config", [
    {"model_type": "apertus", **SMALL},
    {"model_type": "apertus", **SMALL, "rope_theta": 500000.0},
    {"model_type": "apertus", **SMALL, "rope_theta": 500000.0, "rope_scaling": None},
    {"model_type": "apertus", **SMALL, "rope_theta": 500000.0,
     "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
], ids=["defaults", "theta-alone", "scaling-null", "scaling"])
def test_apertus_rotary_as_its_config_class_fills_it(config: dict[str, Any]) -> None:
    """Without rope_scaling ApertusConfig uses Llama-3 scaling with base 12,000,000, whatever rope_theta
    says; with one, the config's rope_theta."""
    rope = spec_of(config).blocks["decoder"].attention.rope
    expected = transformers_model(copy.deepcopy(config)).config.rope_parameters
    assert rope.theta == expected["rope_theta"]
    assert rope.scaling["rope_type"] == expected["rope_type"] and rope.scaling["factor"] == expected["factor"]


def test_ernie_0_3b_is_the_model_cards_0_36b() -> None:
    """ERNIE-4.5-0.3B's model card gives "Params 0.36B" (rounded); the total is transformers' (test_arch)."""
    # source: https://github.com/Hchnr/early_exiting/blob/ca9794deb204051c2e9cf1d5ea4517b49059a4ec/ERNIE45_03B_Base/README.md
    assert round(total(saved("ernie4_5.json")) / 1e9, 2) == 0.36
