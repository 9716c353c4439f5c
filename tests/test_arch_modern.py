"""The modern dense adapters (qwen3, phi3, cohere, olmo, olmo2, granite, smollm3, gemma, gemma2,
gemma3_text, ministral3) and llama4, against published totals and against transformers itself.

tests/test_arch.py already checks every saved config.json total against transformers. Here:
published figures (keras-hub preset metadata, which counts the same tensors), the defaults each
adapter assumes for keys a config leaves out (an empty config must build the model transformers'
config class builds), per-layer facts that do not change the total but must still be right (which
layers are windowed, which rotate and with what base), and the odd config forms: LLaMA-1's
`max_sequence_length`, transformers-5's nested `rope_parameters` (flat, and Gemma-3's per layer
type), multimodal `text_config`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from calc.analysis.count import count
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from oracle import CONFIG_DIR, preset_config, saved, spec_of, transformers_count, transformers_model

MODEL_TYPES = CONFIG_DIR / "model_types"
DATA = Path(__file__).resolve().parent / "data"
KERAS = "https://github.com/keras-team/keras-hub/blob/71453d08f59edc90d276e999319fc51e61cbf82c/keras_hub/src/models"


def total(config: dict[str, Any]) -> int:
    return count(spec_of(config)).total


# --- published totals ------------------------------------------------------------------------

@pytest.mark.parametrize("config, published", [
    # keras-hub gemma2_27b_en; the config is mlc-llm's transcription of google/gemma-2-27b (SOURCES.yaml)
    # f"{KERAS}/gemma/gemma_presets.py#L162"
    (preset_config("gemma-2-27b"), 27_227_128_320),
    # keras-hub gemma2_2b_en, f"{KERAS}/gemma/gemma_presets.py#L126"
    (preset_config("gemma-2-2b"), 2_614_341_888),
    # keras-hub gemma_2b_en, f"{KERAS}/gemma/gemma_presets.py#L8"
    (saved("gemma.json"), 2_506_172_416),
    # keras-hub phi3_mini_4k_instruct_en, f"{KERAS}/phi3/phi3_presets.py#L14"
    (preset_config("phi-3-mini"), 3_821_079_552),
    # keras-hub magistral_small_2506_en (the same 40-layer, 5120-wide text model as Devstral-Small-2's),
    # f"{KERAS}/mistral/mistral_presets.py#L50"
    (saved("mistral3.json"), 23_572_403_200),
    # keras-hub llama2_7b_en (LLaMA-1 7B has the same shape), f"{KERAS}/llama/llama_presets.py#L8"
    (saved("llama-1.json"), 6_738_415_616),
], ids=["gemma-2-27b", "gemma-2-2b", "gemma-2b", "phi-3-mini-4k", "devstral-small-2", "llama-1-7b"])
def test_published_totals(config: dict[str, Any], published: int) -> None:
    """Text models' figures: the language model's total (Devstral-Small-2's also holds a Pixtral tower)."""
    assert count(spec_of(config)).decoder_total == published


def test_phi3_128k_counts_as_4k_though_transformers_5_cannot_build_its_config() -> None:
    """Phi-3-mini-128k's original config says rope_scaling type "su"; longrope adds no parameters,
    so its total is the 4k model's (keras-hub phi3_mini_128k_instruct_en: 3,821,079,552,
    f"{KERAS}/phi3/phi3_presets.py#L28"). transformers 5.23 renames "su" to longrope only after
    validating, and rejects the file for lacking original_max_position_embeddings in rope_parameters.
    Config: https://github.com/dotnet/machinelearning/blob/cd2fbd617c13bcb98ec8b6554bfa20ac603e4572/src/Microsoft.ML.GenAI.Phi/Resource/Config/phi-3-mini-128k-instruct-config.json
    """
    config = json.loads((DATA / "phi-3-mini-128k-instruct.config.json").read_text())
    spec = spec_of(config)
    assert count(spec).total == 3_821_079_552
    assert spec.blocks["decoder"].attention.rope.scaling["type"] == "su"
    with pytest.raises(KeyError, match="original_max_position_embeddings"):
        transformers_count(config)


# HF's Gemma-3 configs keep 262,208 token rows (image tokens included); keras-hub's text presets keep
# 262,144, so ours is keras-hub's plus 64 x d_model. Text configs: the text_config of
# https://huggingface.co/google/gemma-3-{4b,12b,27b}-it/blob/main/config.json (the rest is
# Gemma3TextConfig's defaults); multimodal, as published.
GEMMA3 = {
    # keras-hub gemma3_4b_text, f"{KERAS}/gemma3/gemma3_presets.py#L33"
    "4b": ({"hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34}, 3_880_099_328),
    # keras-hub gemma3_12b_text, f"{KERAS}/gemma3/gemma3_presets.py#L55"
    "12b": ({"hidden_size": 3840, "intermediate_size": 15360, "num_hidden_layers": 48, "num_attention_heads": 16,
             "num_key_value_heads": 8}, 11_765_788_416),
    # keras-hub gemma3_27b_text, f"{KERAS}/gemma3/gemma3_presets.py#L77"
    "27b": ({"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
             "num_attention_heads": 32, "num_key_value_heads": 16, "query_pre_attn_scalar": 168}, 27_009_002_240),
}


def gemma3_multimodal(text: dict[str, Any]) -> dict[str, Any]:
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
            "text_config": {**text, "model_type": "gemma3_text", "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                            "sliding_window": 1024},
            "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                              "model_type": "siglip_vision_model", "num_attention_heads": 16,
                              "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}}


# keras-hub's vision+text presets gemma3_4b, gemma3_12b, gemma3_27b (262,144-row vocabulary, as its text ones):
# https://github.com/keras-team/keras-hub/blob/00d9f10a8e74d4f552ed50170b7dcadb65d3bd52/keras_hub/src/models/gemma3/gemma3_presets.py
GEMMA3_WITH_VISION = {"4b": 4_299_915_632, "12b": 12_187_079_280, "27b": 27_432_062_576}


@pytest.mark.parametrize("size", GEMMA3)
def test_gemma3_multimodal_counts_the_language_model_and_its_siglip_tower(size: str) -> None:
    """The decoder is keras' text preset plus the 64 vocabulary rows the config has beyond keras';
    the SigLIP tower and projector are keras' vision+text preset minus its text one, exactly."""
    text, published = GEMMA3[size]
    config = gemma3_multimodal(text)
    b = count(spec_of(config))
    assert b.decoder_total == published + 64 * text["hidden_size"]
    assert b.towers_total == GEMMA3_WITH_VISION[size] - published
    assert b.total == GEMMA3_WITH_VISION[size] + 64 * text["hidden_size"] == transformers_count(config)
    assert spec_of(config).layer_counts() == {"local": text["num_hidden_layers"] - text["num_hidden_layers"] // 6,
                                              "global": text["num_hidden_layers"] // 6}


def test_smollm3_matches_keras_but_for_its_rotary_buffers() -> None:
    """keras-hub smollm3_3b_en says 3,075,100,928 (f"{KERAS}/smollm3/smollm3_presets.py#L11"), but
    its rotary layer stores inv_freq (head_dim/2 = 64 values) as a weight in each of the 36 layers
    (keras_hub/src/models/smollm3/smollm3_layers.py, `self.inv_freq = self.add_weight`); transformers
    keeps it as a buffer. SmolLM3Config's defaults are SmolLM3-3B's shape, and so is its config.json."""
    assert total({"model_type": "smollm3"}) == 3_075_100_928 - 36 * 64 == transformers_count({"model_type": "smollm3"})
    assert total(saved("smollm3.json")) == 3_075_100_928 - 36 * 64


def test_llama4_active_parameters_match_the_model_cards() -> None:
    """Llama-4 Scout and Maverick: "17B active parameters" (model cards, https://huggingface.co/meta-llama/
    Llama-4-Scout-17B-16E-Instruct and .../Llama-4-Maverick-17B-128E-Instruct): top-1 routed expert
    plus the shared one. Maverick's MoE layers are the odd ones (interleave_moe_layer_step 2), and so
    are its layers without rotary (every 4th), so those are all MoE."""
    scout, maverick = (count(load_spec(str(MODEL_TYPES / name))) for name in ("llama4.json", "llama4-maverick.json"))
    assert round(scout.active / 1e9) == round(maverick.active / 1e9) == 17
    assert {b.name: b.layers for b in scout.blocks} == {"moe": 36, "moe_nope": 12}
    assert {b.name: b.layers for b in maverick.blocks} == {"dense": 24, "moe": 12, "moe_nope": 12}


# --- defaults: an empty config is the model transformers' config class describes ---------------

EMPTY = ["llama", "mistral", "qwen2", "gemma", "gemma2", "gemma3_text", "qwen3", "phi3", "cohere", "olmo", "olmo2",
         "olmo3", "granite", "smollm3", "ministral3", "llama4_text", "exaone4"]


@pytest.mark.parametrize("model_type", EMPTY)
def test_defaults_are_transformers_config_class_defaults(model_type: str) -> None:
    config = {"model_type": model_type, "num_hidden_layers": 2}  # 2 layers: the defaults are 7B-30B models
    assert total(config) == transformers_count(config)


def test_defaulted_sizes_are_named_in_a_note() -> None:
    """A config that leaves out its sizes is LlamaConfig()'s 7B shape, as transformers builds it, and
    the output says which keys came from those defaults (the integer and true/false ones; epsilons and
    rope bases change no count and are not listed)."""
    config = {"model_type": "llama", "vocab_size": 1000, "num_hidden_layers": 2, "mlp_bias": True}
    spec = spec_of(config)
    assert count(spec).total == transformers_count(config)
    assert spec.notes == ("llama: not in the config, so transformers' defaults for llama are used: hidden_size=4096, "
                          "intermediate_size=11008, num_attention_heads=32, max_position_embeddings=2048, "
                          "tie_word_embeddings=false, attention_bias=false",)
    assert spec_of(saved("mistral.json")).notes == ()


def test_gemma_defaults_are_gemma_7b() -> None:
    """GemmaConfig() is Gemma-7B: keras-hub gemma_7b_en params 8,537,680,896 (f"{KERAS}/gemma/gemma_presets.py#L61")."""
    assert total({"model_type": "gemma"}) == 8_537_680_896


# --- what the total does not show: windows, rotary, norms, per layer ---------------------------

LAYERED = {
    "gemma2": {"model_type": "gemma2", "num_hidden_layers": 4},
    "gemma3": {"model_type": "gemma3_text", "num_hidden_layers": 8, "sliding_window": 512},
    "gemma3-pattern": {"model_type": "gemma3_text", "num_hidden_layers": 6, "sliding_window_pattern": 3},
    "gemma3-layer-types": {"model_type": "gemma3_text", "num_hidden_layers": 3,
                           "layer_types": ["full_attention", "sliding_attention", "full_attention"]},
    "qwen3-sliding": {"model_type": "qwen3", "num_hidden_layers": 6, "use_sliding_window": True, "sliding_window": 128,
                      "max_window_layers": 4},
    "qwen3-window-off": {"model_type": "qwen3", "num_hidden_layers": 6, "max_window_layers": 4},
    "smollm3": {"model_type": "smollm3", "num_hidden_layers": 8},
    "smollm3-sliding": {"model_type": "smollm3", "num_hidden_layers": 4, "use_sliding_window": True,
                        "sliding_window": 64, "no_rope_layers": [1, 0, 1, 0]},
    "phi3": {"model_type": "phi3", "num_hidden_layers": 2, "sliding_window": 2047},
    "ministral3": {"model_type": "ministral3", "num_hidden_layers": 2, "sliding_window": 4096},
    "llama4": {"model_type": "llama4_text", "num_hidden_layers": 8, "interleave_moe_layer_step": 2},
    "olmo3": {"model_type": "olmo3", "num_hidden_layers": 8},
    "olmo3-layer-types": {"model_type": "olmo3", "num_hidden_layers": 3, "sliding_window": 256,
                          "layer_types": ["full_attention", "sliding_attention", "full_attention"]},
}


@pytest.mark.parametrize("name", LAYERED)
def test_each_layer_is_windowed_and_rotated_as_in_transformers(name: str) -> None:
    config = LAYERED[name]
    spec = spec_of(config)
    model = transformers_model(copy.deepcopy(config))
    for i, layer in enumerate(model.model.layers):
        ours = spec.blocks[spec.block_at(i)].attention
        attention = layer.self_attn
        # Ministral-3 and Phi-3 pass config.sliding_window to every layer's attention; the others decide per layer
        window = getattr(attention, "sliding_window", getattr(model.config, "sliding_window", None))
        assert ours.window == window, i
        assert (ours.rope is not None) == bool(getattr(attention, "use_rope", True)), i


GEMMA3_BLOCKS = {"sliding_attention": "local", "full_attention": "global"}
OLMO3_BLOCKS = {"sliding_attention": "sliding", "full_attention": "full"}


@pytest.mark.parametrize("config, blocks", [
    ({"model_type": "gemma3_text", "num_hidden_layers": 6}, GEMMA3_BLOCKS),
    ({"model_type": "gemma3_text", "num_hidden_layers": 6, "rope_theta": 500000.0, "rope_local_base_freq": 20000.0,
      "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, GEMMA3_BLOCKS),
    # transformers 5 writes Gemma-3's rotary settings as one rope_parameters mapping per layer type
    ({"model_type": "gemma3_text", "num_hidden_layers": 6,
      "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}, GEMMA3_BLOCKS),
    # OLMo-3: one base for both kinds; a legacy rope_scaling goes to the full layers only
    ({"model_type": "olmo3", "num_hidden_layers": 4}, OLMO3_BLOCKS),
    ({**saved("olmo3.json"), "num_hidden_layers": 4, "layer_types": None}, OLMO3_BLOCKS),
], ids=["gemma3-defaults", "gemma3-old-keys", "gemma3-nested-per-layer-type", "olmo3-defaults", "olmo3-yarn"])
def test_rotary_bases_per_layer_type_as_in_transformers(config: dict[str, Any], blocks: dict[str, str]) -> None:
    spec = spec_of(config)
    hf = transformers_model(copy.deepcopy(config)).config
    for kind, block in blocks.items():
        rope = spec.blocks[block].attention.rope
        expected = hf.rope_parameters[kind]
        assert rope.theta == expected["rope_theta"], kind
        assert (rope.scaling or {}).get("factor") == (expected.get("factor") if expected["rope_type"] != "default" else None)


@pytest.mark.parametrize("config", [
    {"model_type": "exaone4", "num_hidden_layers": 8},
    {"model_type": "exaone4", "num_hidden_layers": 6, "sliding_window_pattern": 3, "sliding_window": 128},
    {"model_type": "exaone4", "num_hidden_layers": 2, "sliding_window": None,
     "layer_types": ["sliding_attention", "full_attention"]},
    saved("exaone4.json"),
    {"model_type": "exaone_moe", "num_hidden_layers": 6, "sliding_window_pattern": 3, "sliding_window": 128},
], ids=["defaults", "pattern-3", "no-window", "EXAONE-4.0-32B", "exaone_moe"])
def test_exaone4_local_layers_windowed_global_layers_without_rotary(config: dict[str, Any]) -> None:
    """Exaone4Attention windows its local layers and, in a model with a window, does not rotate the global
    ones ("global NoPE"); its `sliding_window` attribute is the config's on every layer, `is_sliding` decides."""
    spec = spec_of(config)
    for i, layer in enumerate(transformers_model(copy.deepcopy(config)).model.layers):
        ours, theirs = spec.blocks[spec.block_at(i)].attention, layer.self_attn
        assert ours.window == (theirs.sliding_window if theirs.is_sliding else None), i
        assert (ours.rope is None) == (theirs.sliding_window is not None and not theirs.is_sliding), i
    assert count(spec).total == transformers_count(config)


def test_exaone4_string_pattern_needs_layer_types() -> None:
    """Exaone4Config cannot expand "LLLG" by itself (a TypeError in transformers 5.23): an error naming the key."""
    with pytest.raises(GptcalcError, match="^test: sliding_window_pattern: 'LLLG' needs layer_types beside it"):
        spec_of({"model_type": "exaone4", "num_hidden_layers": 4, "sliding_window_pattern": "LLLG"})


def test_transformers5_flat_rope_parameters() -> None:
    """Devstral-Small-2's text_config (ministral3) has no rope_theta key: theta and yarn scaling live
    in rope_parameters, as transformers 5 writes them."""
    rope = spec_of(saved("mistral3.json")).blocks["decoder"].attention.rope
    assert rope.theta == 100_000_000.0
    assert rope.scaling["rope_type"] == "yarn" and rope.scaling["factor"] == 48.0


def test_phi4_mini_partial_rotary() -> None:
    """partial_rotary_factor 0.75 of head_dim 128 (Phi-4-mini): 96 rotated channels, as Phi3RotaryEmbedding
    computes `int(head_dim * partial_rotary_factor)`."""
    config = {"model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 3072, "num_attention_heads": 24,
              "num_key_value_heads": 8, "partial_rotary_factor": 0.75, "tie_word_embeddings": True}
    spec = spec_of(config)
    assert spec.blocks["decoder"].attention.rope.rotary_dim == 96
    assert count(spec).total == transformers_count(config)


def test_llama1_max_sequence_length_is_the_context() -> None:
    """LLaMA-1 configs (decapoda form) give the context as max_sequence_length; a config class's own
    default for max_position_embeddings (GraniteConfig's 2048) must not shadow it."""
    config = saved("llama-1.json")
    assert spec_of(config).n_positions == 2048
    assert spec_of({**config, "max_sequence_length": 4096}).n_positions == 4096
    assert spec_of({"model_type": "granite", "num_hidden_layers": 2, "max_sequence_length": 4096}).n_positions == 4096
    assert spec_of({"model_type": "granite", "num_hidden_layers": 2}).n_positions == 2048


def test_olmo_norms_have_no_parameters_and_olmo2_norms_sit_on_outputs() -> None:
    olmo = count(spec_of({"model_type": "olmo", "num_hidden_layers": 2})).components
    assert not {"attn_norm", "mlp_norm", "final_norm"} & set(olmo)
    olmo2 = spec_of({"model_type": "olmo2", "num_hidden_layers": 2, "num_key_value_heads": 8})
    block = olmo2.blocks["decoder"]
    assert block.norms == ("attn_out", "mlp_out")
    rows = block.params(olmo2.d_model)
    assert rows["q_norm"] == 32 * 128 and rows["k_norm"] == 8 * 128  # full width, per OLMo-2's q_norm/k_norm


def test_cohere_qk_norm_is_stored_per_head() -> None:
    """CohereLayerNorm((n_heads, head_dim)) for queries, ((n_kv_heads, head_dim)) for keys; no biases."""
    config = {"model_type": "cohere", "num_hidden_layers": 2, "num_key_value_heads": 8, "use_qk_norm": True}
    spec = spec_of(config)
    rows = spec.blocks["decoder"].params(spec.d_model)
    assert rows["q_norm"] == 64 * 128 and rows["k_norm"] == 8 * 128
    assert spec.blocks["decoder"].parallel and count(spec).total == transformers_count(config)


def test_gemma2_null_softcaps_switch_soft_capping_off() -> None:
    """A key set to null is not a missing key: Gemma2Config keeps None, so no soft-capping."""
    default, off = spec_of({"model_type": "gemma2"}), spec_of(
        {"model_type": "gemma2", "attn_logit_softcapping": None, "final_logit_softcapping": None})
    assert (default.blocks["local"].attention.softcap, default.head.softcap) == (50.0, 30.0)
    assert (off.blocks["local"].attention.softcap, off.head.softcap) == (None, None)
