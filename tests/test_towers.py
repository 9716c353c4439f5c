"""Towers: a multimodal model's vision encoders and projectors, counted per tower kind, and the
image tokens an image costs, each against transformers (its whole model class on the meta device,
its image processors on a blank image) or a published figure.

tests/test_arch.py already checks every multimodal config under tests/configs whole (decoder and
towers) against the class its `architectures` names, and its decoder alone against the language
model inside it; here: published figures, partial totals, and image tokens.
"""

from __future__ import annotations

import json

import pytest

from calc.analysis.count import count
from calc.arch.config import TIE_DEFAULT, whole_model_tie
from calc.spec.load import load_spec
from cli_checks import check_run
from oracle import CONFIG_DIR, spec_of, transformers_model

MODEL_TYPES = CONFIG_DIR / "model_types"


def counted(name: str):  # noqa: ANN201
    return count(load_spec(str(MODEL_TYPES / name)))


def test_the_totals_issue_20_found_short() -> None:
    """Issue 20: Qwen3.5-27B's total was short by 460,730,096 (its vision tower), Llama-4-Scout's by
    871,932,416; the Scout model card says "109B total" (https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct)."""
    qwen, scout = counted("qwen3_5.json"), counted("llama4.json")
    assert qwen.towers_total == 460_730_096 and scout.towers_total == 871_932_416
    assert round(scout.total / 1e9) == 109
    assert [t.name for t in qwen.towers] == ["vision"] and not qwen.partial


def test_qwen3_vl_235b_is_its_checkpoint() -> None:
    """Qwen3-VL-235B-A22B-Instruct's safetensors hold 235,670,022,896 parameters in 1,388 tensors,
    438.97 GiB in bf16 (a report that summed the Hub snapshot's headers: tests/configs/model_types/
    SOURCES.yaml, qwen3_vl_moe-235b.json); the name says 22B activated."""
    b = counted("qwen3_vl_moe-235b.json")
    assert b.total == 235_670_022_896 and not b.partial
    assert round(2 * b.total / 2**30, 2) == 438.97
    assert round(b.active / 1e9) == 22



def test_qwen3_6_27b_is_its_checkpoint_less_its_mtp_layer() -> None:
    """Qwen3.6-27B (tests/configs/model_types/qwen3_5-qwen3.6-27b.json, SOURCES.yaml): its 15 safetensors hold
    27,781,427,952 parameters in 1,199 tensors, the model plus one MTP layer that transformers does not build:
    mtp.fc [5120, 10240], a full-attention layer (q_proj [12288, 5120], k/v_proj [1024, 5120], o_proj
    [5120, 6144], q/k_norm [256]) with its SwiGLU of 17408 and two norms, and three more norms of 5120 (its
    tensor list). Qwen3.5-27B's shape: the same totals as tests/configs/model_types/qwen3_5.json."""
    b = counted("qwen3_5-qwen3.6-27b.json")
    mtp = 5120 * 10240 + 12288 * 5120 + 2 * 1024 * 5120 + 5120 * 6144 + 2 * 256 + 3 * 5120 * 17408 + 5 * 5120
    assert b.total + mtp == 27_781_427_952 and not b.partial
    assert b.extra == {"mtp_layers": mtp}  # the config's mtp_num_hidden_layers 1, shown beside the total
    assert (b.total, b.towers_total) == (counted("qwen3_5.json").total, 460_730_096)

def test_deepstack_mergers_are_one_per_tapped_layer() -> None:
    """Qwen3-VL-4B taps layers 5, 11, 17 (deepstack_visual_indexes): three mergers, each normalising
    the merged 4·1024 width (Qwen3VLVisionPatchMerger(use_postshuffle_norm=True))."""
    tower = counted("qwen3_vl.json").towers[0]
    merger, deepstack = tower.components["merger"], tower.components["deepstack_mergers"]
    assert deepstack == 3 * (merger + 2 * (4096 - 1024))  # LayerNorm scale and bias over 4096, not 1024


MULTIMODAL_LLAVA = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
                    "text_config": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                                    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000},
                    "vision_config": {"model_type": "clip_vision_model"}}


def test_a_tower_of_a_kind_not_read_makes_the_total_partial_everywhere(tmp_path) -> None:  # noqa: ANN001
    """LLaVA's CLIP tower is not read yet: the decoder is counted, and the text and the JSON both say
    the total is partial and what it leaves out."""
    b = count(spec_of(MULTIMODAL_LLAVA))
    assert b.partial and b.uncounted == ("vision encoder and projector",) and not b.towers
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MULTIMODAL_LLAVA))
    data = json.loads(check_run(["count", str(path), "--json"]).stdout)
    assert data["partial"] is True and data["not_counted"] == ["vision encoder and projector"]
    assert data["total"] == data["decoder_total"] == b.total
    text = check_run(["count", str(path)]).stdout
    assert "PARTIAL" in text and "total (partial)" in text


def test_count_json_has_the_model_the_decoder_and_each_tower() -> None:
    data = json.loads(check_run(["count", str(MODEL_TYPES / "qwen3_5.json"), "--json"]).stdout)
    assert data["partial"] is False
    assert data["total"] == data["decoder_total"] + sum(t["total"] for t in data["towers"]) == 27_356_728_560
    assert data["towers"][0]["kind"] == "qwen3_5" and data["towers"][0]["layers"] == 27


# --- image tokens: our rule against transformers' own image processors ------------------------------

@pytest.mark.parametrize("width, height", [(1024, 1024), (640, 480), (4000, 3000), (20, 20)])
def test_qwen_image_tokens_are_the_processors(width: int, height: int) -> None:
    """Qwen3-VL's rule (GridImages) against transformers' Qwen2VLImageProcessor with the released
    preprocessor bounds: patches = t·h·w of image_grid_thw, tokens = that / merge²."""
    np = pytest.importorskip("numpy")
    transformers = pytest.importorskip("transformers")
    rule = load_spec(str(MODEL_TYPES / "qwen3_vl.json")).towers["vision"].images
    processor = transformers.Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2,
                                                   min_pixels=rule.min_pixels, max_pixels=rule.max_pixels)
    grid = processor(images=[np.zeros((height, width, 3), dtype=np.uint8)], return_tensors="np")["image_grid_thw"][0]
    ours = rule.tokens(width, height)
    assert ours.patches == int(grid.prod()) and ours.image_tokens == int(grid.prod()) // 4
    assert (ours.height, ours.width) == (grid[1] * 16, grid[2] * 16)


@pytest.mark.parametrize("width, height", [(1024, 1024), (3000, 1000), (100, 37)])
def test_pixtral_image_tokens_are_the_processors(width: int, height: int) -> None:
    """Mistral-3's rule (RowImages) against transformers' Pixtral resize, with the processor's
    patch_size x spatial_merge_size tokens (processing_pixtral.py): rows x (cols + 1) tokens."""
    np = pytest.importorskip("numpy")
    pixtral = pytest.importorskip("transformers.models.pixtral.image_processing_pil_pixtral")
    rule = load_spec(str(MODEL_TYPES / "mistral3.json")).towers["vision"].images
    h, w = pixtral.get_resize_output_image_size(np.zeros((height, width, 3)), size=(1540, 1540), patch_size=(28, 28))
    ours = rule.tokens(width, height)
    assert (ours.height, ours.width) == (h, w)
    assert ours.tokens == (h // 28) * (w // 28 + 1)


def test_memory_holds_the_towers_and_what_images_cost() -> None:
    """--json: the weights hold decoder + towers (the decoder alone with --text-only); four
    1024x1024 images through Qwen3-VL are 4 x (1,024 + 2) tokens, whose fp16 KV cache is
    36 layers x 2 x 8 KV heads x 128 x 2 bytes per token."""
    path = str(MODEL_TYPES / "qwen3_vl.json")
    b = counted("qwen3_vl.json")
    whole = json.loads(check_run(["memory", path, "--seq", "4096", "--json", "--image", "1024x1024", "--images", "4"]).stdout)
    text = json.loads(check_run(["memory", path, "--seq", "4096", "--json", "--text-only"]).stdout)
    assert whole["weights"]["params"] == b.total and text["weights"]["params"] == b.decoder_total
    assert whole["images"]["tokens"] == 4 * 1026 and whole["images"]["kv_bytes"] == 4 * 1026 * 36 * 2 * 8 * 128 * 2
    split, split_text = (json.loads(check_run(["memory", path, "--seq", "4096", "--json", "--tp", "2", *more]).stdout)
                         for more in ([], ["--text-only"]))
    tower = b.towers[0]  # under --tp 2 its layers' matrices and column biases halve; norms and row biases stay whole
    whole_rows = ("attn_norm", "mlp_norm", "attn_out_bias", "mlp_down_bias")
    per_gpu = sum(n if name in whole_rows else n // 2 for name, n in tower.per_layer.items()) * tower.layers
    outside = tower.total - sum(tower.per_layer.values()) * tower.layers
    assert split["weights"]["params"] - split_text["weights"]["params"] == outside + per_gpu


def test_the_fallback_never_passes_a_language_model_off_as_the_model() -> None:
    """Issue 20: the fallback counted Qwen3.5's text_config and printed it as the model's total.
    Now it builds the class `architectures` names (whole); without one, transformers'
    AutoModelForCausalLM builds Qwen3.5's language model alone, and the breakdown says so."""
    pytest.importorskip("transformers")
    from calc.arch.fallback import transformers_breakdown
    from calc.errors import UnsupportedModelType

    config = json.loads((MODEL_TYPES / "qwen3_5.json").read_text())
    whole = transformers_breakdown(UnsupportedModelType("test", dict(config), "qwen3_5.json"))
    assert whole.total == counted("qwen3_5.json").total and not whole.partial
    config.pop("architectures")
    text = transformers_breakdown(UnsupportedModelType("test", config, "qwen3_5.json"))
    assert text.total == counted("qwen3_5.json").decoder_total
    assert text.partial and text.to_json()["not_counted"] == ["vision encoder and projector"]


def test_llama4_image_tiles() -> None:
    """Llama 4's rule (TileImages). transformers' get_best_fit docstring (models/llama4/
    image_processing_llama4.py): a 200 x 300 image (height x width) on the canvases 224x672, 672x224,
    224x448, 448x224, 224x224 (all of at most 3 tiles of 224) goes to 224 x 448. A 1024 x 1024 image
    on Scout's 336-pixel tiles: no canvas of at most 16 tiles is 1024 wide but 4 x 4 (1344), so 16
    tiles plus the global view, 144 tokens each ((336 / 14)² / 2²), and _prompt_split_image's
    <|image_start|>, 16 separators, <|image|>, <|image_end|>. (transformers' own functions need
    torchvision, not installed here.)"""
    from calc.towers.images import TileImages

    docstring = TileImages.model_construct(tile=224, patch_size=14, shuffle=2, max_tiles=3).tokens(300, 200)
    assert (docstring.height, docstring.width) == (224, 448)
    scout = load_spec(str(MODEL_TYPES / "llama4.json")).towers["vision"].images.tokens(1024, 1024)
    assert (scout.height, scout.width) == (1344, 1344)
    assert scout.image_tokens == 17 * 144 and scout.special_tokens == 3 + 16


# --- LLaVA-OneVision: SigLIP + two-layer projector + image newline ---------------------------------

# No llava-hf/llava-onevision-* config.json was found in the searchable copies: this is the 0.5B's
# shape as transformers builds it, the vision_config LlavaOnevisionConfig makes when none is given
# (sub_configs_defaults, models/llava_onevision/configuration_llava_onevision.py) spelled out, and a
# two-layer Qwen2-0.5B-wide decoder to keep the meta-device build small.
LLAVA_ONEVISION = {
    "model_type": "llava_onevision", "architectures": ["LlavaOnevisionForConditionalGeneration"],
    "text_config": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 2,
                    "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                    "tie_word_embeddings": True},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                      "patch_size": 14, "image_size": 384, "num_hidden_layers": 26, "num_attention_heads": 16,
                      "vision_use_head": False},
}
SMALL_SIGLIP = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
                "image_size": 56, "vision_use_head": False}


@pytest.mark.parametrize("outer", [{}, {"vision_feature_layer": [-2, -5], "multimodal_projector_bias": False,
                                        "vision_config": SMALL_SIGLIP}], ids=["defaults", "two-taps-no-bias"])
def test_llava_onevision_is_transformers_whole_model(outer: dict) -> None:
    """Total == LlavaOnevisionForConditionalGeneration's parameters; decoder == its language model
    and head; the tower's newline row is the one text-width vector (image_newline)."""
    from oracle import transformers_model

    config = {**LLAVA_ONEVISION, **outer}
    named = list(transformers_model(config).named_parameters())
    b = count(spec_of(config))
    assert not b.partial and b.total == sum(p.numel() for _, p in named)
    assert b.decoder_total == sum(p.numel() for n, p in named if "language_model." in n or n.startswith("lm_head"))
    assert b.towers[0].components["image_newline"] == 896


def test_llava_onevision_7b_derived_config_totals() -> None:
    """llava_onevision.json (llava-hf/llava-onevision-qwen2-7b-ov-hf as transformers' conversion script builds it;
    SOURCES.yaml): Qwen2-7B with the vocabulary padded to 152128 (152064 + 2 new tokens, to a multiple of 64),
    untied; SigLIP-so400m's 26 kept layers at 384 px (27 x 27 = 729 positions), no post-pool head; a 1152 -> 3584
    -> 3584 projector and the 3584-wide newline. transformers 5.24's whole model on meta: 8,030,807,584."""
    d, f, vocab, w, w_ff = 3584, 18944, 152128, 1152, 4304
    decoder = 2 * vocab * d + 28 * (2 * (d * d + d) + 2 * (d * 512 + 512) - d + 3 * d * f + 2 * d) + d
    siglip = w * 3 * 14 * 14 + w + 729 * w + 26 * (4 * (w * w + w) + 4 * w + 2 * w * w_ff + w_ff + w) + 2 * w
    b = counted("llava_onevision.json")
    assert b.decoder_total == decoder == 7_616_075_264
    assert b.towers_total == siglip + (w * d + d) + (d * d + d) + d == 414_732_320
    assert b.total == 8_030_807_584 and not b.partial


def test_llava_onevision_siglip_head_is_refused_not_left_out() -> None:
    """A vision_config mapping without vision_use_head gets SiglipVisionConfig's default (true), and
    transformers builds the attention-pooling head gptcalc does not count: refused, one line."""
    from calc.errors import GptcalcError

    vision = {k: v for k, v in SMALL_SIGLIP.items() if k != "vision_use_head"}
    with pytest.raises(GptcalcError, match="vision_use_head"):
        spec_of({**LLAVA_ONEVISION, "vision_config": vision})


def test_llava_onevision_count_is_analytic(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAVA_ONEVISION))
    data = json.loads(check_run(["count", str(path), "--json"]).stdout)
    assert data["partial"] is False and data["towers"][0]["kind"] == "siglip"
    assert data["total"] == data["decoder_total"] + data["towers"][0]["total"]
    assert "not analytic" not in check_run(["count", str(path)]).stdout


# --- InternVL: InternViT (layer scale, QK-norm) + pixel-shuffle projector --------------------------

# The real InternVL3-1B-hf shape is tests/configs/model_types/internvl.json (derived by transformers' converter
# from the original config; test_internvl3_1b_derived_config_totals). Here: InternVLVisionConfig's
# defaults (InternViT-300M's shape, models/internvl/configuration_internvl.py) with attention_bias
# true, as the HF-format InternViT-300M config in InternVL's converter copies carries it (found
# with find_string, no Hub file), under a two-layer Qwen2-0.5B-wide decoder; and InternViT-6B's
# switches (RMSNorm, QK-norm, a post LayerNorm) on a small encoder.
INTERNVL = {"model_type": "internvl", "architectures": ["InternVLForConditionalGeneration"],
            "text_config": LLAVA_ONEVISION["text_config"],
            "vision_config": {"model_type": "internvl_vision", "attention_bias": True}}
INTERNVIT_6B_SWITCHES = {"model_type": "internvl_vision", "hidden_size": 64, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "intermediate_size": 96, "image_size": [56, 56],
                         "patch_size": [14, 14], "norm_type": "rms_norm", "use_qk_norm": True,
                         "attention_bias": True, "use_mean_pooling": False}


def test_internvl3_1b_derived_config_totals() -> None:
    """internvl.json (OpenGVLab/InternVL3-1B-hf as transformers' converter builds it; SOURCES.yaml): InternViT-300M
    (patch conv, class token, 1025 positions, 24 layers of biased Q, K, V, O, two LayerNorms, a 4096 MLP and two
    layer scales), the LayerNorm(4096) + 4096 -> 896 -> 896 projector, Qwen2.5-0.5B's 24 layers. Its head is tied
    (transformers 5's outer tie_word_embeddings, true), so the Hub checkpoint's 938,193,024 (its Hub API total)
    is this plus the 151674 x 896 head it stores."""
    w, f, d, ff, vocab = 1024, 4096, 896, 4864, 151674
    vit = w * 3 * 14 * 14 + w + w + 1025 * w + 24 * (4 * (w * w + w) + 4 * w + w * f + f + f * w + w + 2 * w)
    projector = 2 * 4 * w + 4 * w * d + d + d * d + d
    decoder = vocab * d + 24 * (2 * (d * d + d) - d + 2 * (d * 128 + 128) + 3 * d * ff + 2 * d) + d
    b = counted("internvl.json")
    assert b.towers_total == vit + projector == 308_495_104
    assert b.decoder_total == decoder == 493_798_016
    assert b.total == 802_293_120 and b.tied and b.total + b.tied_saving == 938_193_024


def test_internvl3_1b_untied_variant_is_the_hub_checkpoints_total() -> None:
    """The untied variant (text_config's own tie_word_embeddings false over the outer true) counts the head the
    Hub checkpoint stores: OpenGVLab/InternVL3-1B-hf's Hub API total, 938,193,024 (SOURCES.yaml). Where the text
    config does not say false, or the whole model does not tie, there is no variant."""
    from calc.spec import hf
    from calc.spec.load import spec_from_config

    config = hf.read_config(MODEL_TYPES / "internvl.json")
    variant = config.untied_variant()
    assert variant is not None and count(spec_from_config(variant)).total == 938_193_024
    assert variant.untied_variant() is None
    text = config.data["text_config"]
    for outer in ({**config.data, "text_config": {**text, "tie_word_embeddings": True}},
                  {**config.data, "tie_word_embeddings": False},
                  {k: v for k, v in config.data.items() if k != "tie_word_embeddings"} | {"model_type": "llava"}):
        assert config.with_data(outer, "test").untied_variant() is None


@pytest.mark.parametrize("vision", [{}, INTERNVIT_6B_SWITCHES], ids=["internvit-300m", "internvit-6b-switches"])
def test_internvl_is_transformers_whole_model(vision: dict) -> None:
    """Total == InternVLForConditionalGeneration's parameters; decoder == its language model and head;
    two layer scales of the encoder width in every layer."""
    from oracle import transformers_model

    config = {**INTERNVL, "vision_config": {**INTERNVL["vision_config"], **vision}}
    named = list(transformers_model(config).named_parameters())
    b = count(spec_of(config))
    assert not b.partial and b.total == sum(p.numel() for _, p in named)
    assert b.decoder_total == sum(p.numel() for n, p in named if "language_model." in n or n.startswith("lm_head"))
    tower = b.towers[0]
    assert tower.components["layer_scale"] == sum(p.numel() for n, p in named if ".lambda_" in n)


@pytest.mark.parametrize("width, height", [(1024, 1024), (640, 480), (4000, 3000), (300, 2000), (20, 20)])
def test_llava_onevision_image_tokens_are_the_processors(width: int, height: int) -> None:
    """anyres_max_9 (AnyresImages) against transformers' own code: LlavaOnevisionProcessor's
    _get_number_of_features (num_image_tokens 729 = (384/14)², as the 0.5B/7B processors set it)
    for the tokens, LlavaOnevisionImageProcessor on a blank image for the tiles the encoder sees."""
    np = pytest.importorskip("numpy")
    transformers = pytest.importorskip("transformers")
    rule = spec_of(LLAVA_ONEVISION).towers["vision"].images
    processor = object.__new__(transformers.LlavaOnevisionProcessor)
    processor.image_processor = transformers.LlavaOnevisionImageProcessor()
    processor.num_image_tokens, processor.vision_aspect_ratio = 729, "anyres_max_9"
    ours = rule.tokens(width, height)
    assert ours.tokens == processor._get_number_of_features(height, width, 384, 384)
    pixels = processor.image_processor(np.zeros((height, width, 3), dtype=np.uint8), return_tensors="np")
    assert ours.patches == pixels["pixel_values"].shape[1] * 729


# --- Gemma 4 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("width, height", [(1024, 1024), (640, 480), (4000, 3000), (3000, 40), (20, 20)])
def test_gemma4_image_tokens_are_the_processors(width: int, height: int) -> None:
    """Gemma 4's rule (PooledImages) against transformers' get_aspect_ratio_preserving_size with the
    processor's defaults (patch 16, pool 3, 280 soft tokens = 2,520 patches): tokens = patches / 9."""
    gemma4 = pytest.importorskip("transformers.models.gemma4.image_processing_pil_gemma4")
    rule = load_spec(str(MODEL_TYPES / "gemma4-26b-a4b.json")).towers["vision"].images
    h, w = gemma4.get_aspect_ratio_preserving_size(height, width, patch_size=16, max_patches=2520, pooling_kernel_size=3)
    ours = rule.tokens(width, height)
    assert (ours.height, ours.width) == (h, w)
    assert ours.patches == (h // 16) * (w // 16) and ours.image_tokens == ours.patches // 9 and ours.tokens == ours.image_tokens + 2


# The audio_config Gemma 4's E2B and E4B checkpoints ship, as ollama's test of its Gemma 4 reader
# quotes it (releasedGemma4AudioConfig, x/models/gemma4 in github.com/ollama/ollama; public code index
# file id 58001126666): a 12-layer Conformer of 1024 with 8 heads, output 1536.
RELEASED_GEMMA4_AUDIO = {"model_type": "gemma4_audio", "attention_chunk_size": 12, "attention_context_left": 13,
                         "attention_context_right": 0, "attention_invalid_logits_value": -1000000000.0,
                         "attention_logit_cap": 50.0, "conv_kernel_size": 5, "gradient_clipping": 10000000000.0,
                         "hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 12,
                         "output_proj_dims": 1536, "residual_weight": 0.5, "rms_norm_eps": 0.000001,
                         "subsampling_conv_channels": [128, 32], "use_clipped_linears": True}


def test_gemma4_audio_tower_is_transformers_whole_model() -> None:
    """Gemma 4 with that audio_config (here beside gemma-4-26B-A4B's decoder and vision tower): the
    Conformer is counted, and decoder + vision + audio equal transformers' Gemma4ForConditionalGeneration
    on the meta device, the audio tower exactly its audio_tower and embed_audio."""
    config = json.loads((MODEL_TYPES / "gemma4-26b-a4b.json").read_text())
    config["audio_config"] = RELEASED_GEMMA4_AUDIO
    b = count(spec_of(config))
    assert not b.partial and [(t.name, t.kind) for t in b.towers] == [("vision", "gemma4"), ("audio", "conformer")]
    named = list(transformers_model(config).named_parameters())
    assert b.total == sum(p.numel() for _, p in named)
    audio = sum(p.numel() for name, p in named if ".audio_tower." in name or ".embed_audio." in name)
    d, layers, heads = 1024, 12, 8  # by hand, from the modelling code (calc/towers/conformer.py's table)
    subsample = 9 * 128 + 9 * 128 * 32 + (128 + 32) + (128 // 4) * 32 * d
    layer = 2 * (2 * 4 * d * d + 2 * d) + 5 * d * d + d // heads + 2 * d + 3 * d * d + 5 * d + 2 * d + d
    encoder = subsample + layers * layer + d * 1536 + 1536
    assert b.towers[1].total == audio == encoder + 1536 * 2816 == 309_149_984  # then embed_audio into 2816


def test_a_tower_its_reader_does_not_read_is_flagged_beside_those_it_does() -> None:
    """An audio_config beside a reader that reads vision only (Gemma 3's): the vision tower is
    counted and the total says the audio encoder is not."""
    config = json.loads((MODEL_TYPES / "gemma3_multimodal.json").read_text())
    config["audio_config"] = {"hidden_size": 32}
    b = count(spec_of(config))
    assert b.partial and [t.name for t in b.towers] == ["vision"] and b.uncounted == ("audio encoder and projector",)


def test_a_conformer_survives_the_compiled_round_trip() -> None:
    """Presets ship as dumps rebuilt without validation (calc/spec/construct.py): a union of a Tower
    (any kind name) and a Conformer (kind "conformer") rebuilds each as its own part."""
    from calc.spec.construct import construct
    from calc.spec.model import ModelSpec
    from calc.towers import Conformer, Tower

    config = json.loads((MODEL_TYPES / "gemma4-26b-a4b.json").read_text())
    config["audio_config"] = RELEASED_GEMMA4_AUDIO
    spec = spec_of(config)
    rebuilt = construct(ModelSpec, json.loads(json.dumps(spec.model_dump(mode="json"))))
    assert rebuilt == spec
    assert isinstance(rebuilt.towers["vision"], Tower) and isinstance(rebuilt.towers["audio"], Conformer)


@pytest.mark.parametrize("width, height", [(1024, 1024), (640, 480), (4000, 300), (448, 448), (20, 900)])
def test_internvl_image_tokens_are_the_processors(width: int, height: int) -> None:
    """InternVL's rule (CanvasImages) against transformers' get_optimal_tiled_canvas with the
    processor's crop_to_patches range (1 to 12 tiles of 448): tiles, a thumbnail beside several, 256
    tokens each (InternVLProcessor's image_seq_length), <img> and </img>."""
    got_ocr2 = pytest.importorskip("transformers.models.got_ocr2.image_processing_pil_got_ocr2")
    cols, rows = got_ocr2.get_optimal_tiled_canvas((height, width), (448, 448), 1, 12)
    ours = spec_of(INTERNVL).towers["vision"].images.tokens(width, height)
    views = cols * rows + (cols * rows > 1)
    assert (ours.width, ours.height, ours.views) == (cols * 448, rows * 448, views)
    assert ours.tokens == 256 * views + 2


# Gemma 3n: E2B's text decoder (tests/configs/model_types/gemma3n_text-e2b.json) under a gemma3n config
# whose vision and audio configs are transformers' Gemma3nVisionConfig and Gemma3nAudioConfig defaults
# (mobilenetv5_300m_enc, 2048 wide, 128 vision tokens: what gemma-3n-E2B-it's and E4B-it's config.json carry).
GEMMA3N = {"model_type": "gemma3n", "architectures": ["Gemma3nForConditionalGeneration"],
           "text_config": json.loads((MODEL_TYPES / "gemma3n_text-e2b.json").read_text()),
           "audio_config": {"model_type": "gemma3n_audio"}, "vision_config": {"model_type": "gemma3n_vision"}}


def test_gemma3n_is_counted_whole() -> None:
    """Both towers are counted: Gemma3nForConditionalGeneration built on the meta device with timm 1.0.31
    and transformers 5.24 holds 5,418,464,192 parameters, of which its vision_tower (timm's MobileNet-v5)
    294,126,912 and embed_vision 4,460,544 (measured once; test_gemma3n_is_transformers_whole_model
    rebuilds it where timm is installed). keras-hub's mobilenetv5_300m_enc_gemma3n preset says 294,284,096
    for the encoder (keras_hub/src/models/mobilenetv5/mobilenetv5_presets.py; its own layout, 157,184 more)."""
    b = count(spec_of(GEMMA3N))
    assert not b.partial and [(t.name, t.kind) for t in b.towers] == [("vision", "mobilenetv5"), ("audio", "conformer")]
    vision = b.towers[0]
    assert b.total == 5_418_464_192 and vision.total == 294_126_912 + 4_460_544
    # the embedder: 128 x 2048 table, two 2048 scales, a 2048 x 2048 projection into E2B's width
    assert vision.components["vision_embedding"] + vision.components["projector"] == 4_460_544
    assert vision.layers == 84  # 3 + 5 + 37 + 39 blocks, timm's four stages


def test_gemma3n_is_transformers_whole_model() -> None:
    """Where timm is installed, the whole Gemma3nForConditionalGeneration on the meta device: every
    parameter, and each tower's part of them (`vision_tower` + `embed_vision`, `audio_tower` + `embed_audio`)."""
    pytest.importorskip("timm")
    from oracle import transformers_model

    named = list(transformers_model(GEMMA3N).named_parameters())
    b = count(spec_of(GEMMA3N))
    assert b.total == sum(p.numel() for _, p in named)
    for tower, prefixes in zip(b.towers, (("model.vision_tower.", "model.embed_vision."),
                                          ("model.audio_tower.", "model.embed_audio."))):
        assert tower.total == sum(p.numel() for n, p in named if n.startswith(prefixes))


def test_gemma3n_audio_tower_is_transformers() -> None:
    """The Conformer and its embedder equal transformers' Gemma3nAudioEncoder and Gemma3nMultimodalEmbedder
    built from the same configs (no timm needed)."""
    torch, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    from transformers.models.gemma3n import modeling_gemma3n

    audio, text_config = transformers.Gemma3nAudioConfig(), transformers.Gemma3nTextConfig(**GEMMA3N["text_config"])
    with torch.device("meta"):
        parts = (modeling_gemma3n.Gemma3nAudioEncoder(audio), modeling_gemma3n.Gemma3nMultimodalEmbedder(audio, text_config))
    assert count(spec_of(GEMMA3N)).towers[1].total == sum(p.numel() for part in parts for p in part.parameters())


@pytest.mark.parametrize("vision, key", [({"architecture": "resnet50"}, "architecture"),
                                         ({"model_args": {"depth": 3}}, "model_args")])
def test_gemma3n_other_timm_models_are_refused(vision: dict, key: str) -> None:
    from calc.errors import GptcalcError

    with pytest.raises(GptcalcError, match=key):
        spec_of({**GEMMA3N, "vision_config": {"model_type": "gemma3n_vision", **vision}})


# The fusion adapter's two timm arguments (MobileNetV5Encoder's msfa_indices, msfa_output_resolution), set through
# vision_config.model_args (TimmWrapperModel passes them to timm.create_model): the last stage alone (1280 channels)
# to an 8 x 8 grid. Its parameters, timm 1.0.31's MobileNetV5MultiScaleFusionAdapter: a 1x1 expand conv 1280 ->
# 2560 and its RMSNorm, a 1x1 project conv 2560 -> 2048 and its RMSNorm, the output RMSNorm.
LAST_STAGE = {"msfa_indices": [-1], "msfa_output_resolution": 8}


def test_gemma3n_fusion_adapter_follows_model_args() -> None:
    """msfa_indices and msfa_output_resolution are read (not refused): the adapter's row is what its inputs' channels
    make (1920 by default: 640 + 1280), the tokens what its grid holds (64); timm's own adapter, where installed."""
    vision = {"model_type": "gemma3n_vision", "model_args": LAST_STAGE}
    tower = spec_of({**GEMMA3N, "vision_config": vision, "vision_soft_tokens_per_image": 64}).towers["vision"]
    default = spec_of(GEMMA3N).towers["vision"]
    assert (tower.fused_maps, tower.output_grid, default.fused_maps, default.output_grid) == ((4,), 8, (3, 4), 16)
    assert tower.params()["msfa"] == 1280 * 2560 + 2560 + 2560 * 2048 + 2048 + 2048
    assert default.params()["msfa"] == 1920 * 3840 + 3840 + 3840 * 2048 + 2048 + 2048
    assert tower.images.tokens(768, 768).image_tokens == 64
    torch, timm = pytest.importorskip("torch"), pytest.importorskip("timm")
    with torch.device("meta"):
        encoder = timm.create_model("mobilenetv5_300m_enc", pretrained=False, **LAST_STAGE)
    assert tower.params()["msfa"] == sum(p.numel() for p in encoder.msfa.parameters())


@pytest.mark.parametrize("vision, outer, message", [
    ({"model_args": LAST_STAGE}, {}, "vision_soft_tokens_per_image"),  # 256, not the 8 x 8 grid's 64
    ({"model_args": {"msfa_indices": [5]}}, {}, "msfa_indices"),  # the stem and 4 stages: maps 0-4
    ({"model_args": {"msfa_indices": [3, -2]}}, {}, "msfa_indices")])  # the same map twice
def test_gemma3n_fusion_adapter_settings_it_cannot_build_are_one_error(vision: dict, outer: dict, message: str) -> None:
    from calc.errors import GptcalcError

    with pytest.raises(GptcalcError, match=message):
        spec_of({**GEMMA3N, **outer, "vision_config": {"model_type": "gemma3n_vision", **vision}})


def test_a_mobilenet_survives_the_compiled_round_trip() -> None:
    from calc.spec.construct import construct
    from calc.spec.model import ModelSpec
    from calc.towers import Conformer, MobileNet

    spec = spec_of(GEMMA3N)
    rebuilt = construct(ModelSpec, json.loads(json.dumps(spec.model_dump(mode="json"))))
    assert rebuilt == spec
    assert isinstance(rebuilt.towers["vision"], MobileNet) and isinstance(rebuilt.towers["audio"], Conformer)


def test_gemma3n_audio_tensor_names_are_transformers() -> None:
    """Gemma 3n's Conformer and embedder, tensor by tensor: the names and shapes verify and inspect match
    are transformers' Gemma3nAudioEncoder's and Gemma3nMultimodalEmbedder's, under the attributes
    Gemma3nModel holds them by (`audio_tower`, `embed_audio`: models/gemma3n/modeling_gemma3n.py,
    Gemma3nModel.__init__) inside Gemma3nForConditionalGeneration's `model` (its whole model needs timm)."""
    torch, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    from transformers.models.gemma3n import modeling_gemma3n

    from calc.checkpoint.tower_slots import tower_slots

    text = json.loads((MODEL_TYPES / "gemma3n_text-e2b.json").read_text())
    config = {"model_type": "gemma3n", "architectures": ["Gemma3nForConditionalGeneration"], "text_config": text,
              "audio_config": {"model_type": "gemma3n_audio", "conf_num_hidden_layers": 2}}
    audio = transformers.Gemma3nAudioConfig(conf_num_hidden_layers=2)
    with torch.device("meta"):
        encoder = modeling_gemma3n.Gemma3nAudioEncoder(audio)
        embedder = modeling_gemma3n.Gemma3nMultimodalEmbedder(audio, transformers.Gemma3nTextConfig(**text))
    theirs = {f"model.{prefix}.{name}": tuple(p.shape) for prefix, part in (("audio_tower", encoder), ("embed_audio", embedder))
              for name, p in part.state_dict().items()}
    ours = {name: slot.shape for name, slot in tower_slots("audio", spec_of(config).towers["audio"]).items()}
    assert ours == theirs


def test_gemma3n_vision_tensor_names_are_transformers() -> None:
    """Where timm is installed: the MobileNet-v5 encoder's and its embedder's tensors, names and shapes,
    are those of Gemma3nForConditionalGeneration on the meta device under `model.vision_tower` and
    `model.embed_vision`."""
    pytest.importorskip("timm")
    from calc.checkpoint.tower_slots import tower_slots
    from oracle import transformers_model

    theirs = {name: tuple(t.shape) for name, t in transformers_model(GEMMA3N).state_dict().items()
              if name.startswith(("model.vision_tower.", "model.embed_vision."))}
    ours = {name: slot.shape for name, slot in tower_slots("vision", spec_of(GEMMA3N).towers["vision"]).items()}
    assert ours == theirs


def test_gemma3n_vision_tensors_add_up_to_its_rows() -> None:
    """Every MobileNet-v5 tensor inspect and verify match lands in one of the tower's count rows, and
    each row's tensors hold exactly what the formulas count (two readings of timm's block table)."""
    import math

    from calc.checkpoint.tower_slots import tower_slots

    tower = spec_of(GEMMA3N).towers["vision"]
    rows: dict[str, int] = {}
    for slot in tower_slots("vision", tower).values():
        rows[slot.target] = rows.get(slot.target, 0) + math.prod(slot.shape)
    assert rows == {f"vision.{name}": n for name, n in tower.params().items()}


# --- Phi-4-multimodal: SigLIP with its pooling head and HD separators; a biased Conformer ----------------

def test_phi4_multimodal_towers_are_transformers() -> None:
    """tests/configs/model_types/phi4_multimodal.json against Phi4MultimodalForCausalLM on the meta device:
    each tower equals its module under the decoder's embed_tokens_extend (image_embed, audio_embed), the
    pooling head and the separators their own tensors. The model card's "5.6B" counts the original
    checkpoint's vision and speech LoRA adapters too (SOURCES.yaml: 4,743,988,032 + 830,472,192)."""
    from oracle import transformers_model

    config = json.loads((MODEL_TYPES / "phi4_multimodal.json").read_text())
    named = list(transformers_model(config).named_parameters())
    b = count(spec_of(config))
    assert [(t.name, t.kind) for t in b.towers] == [("vision", "phi4_multimodal"), ("audio", "phi4_conformer")]
    vision, audio = b.towers

    def under(*prefixes: str) -> int:
        return sum(p.numel() for n, p in named if n.startswith(tuple(f"model.embed_tokens_extend.{x}" for x in prefixes)))

    assert (vision.total, audio.total) == (under("image_embed."), under("audio_embed.")) == (441_550_016, 466_416_256)
    assert vision.components["pooling_head"] == under("image_embed.img_processor.head.")
    assert vision.components["separators"] == under("image_embed.global_img", "image_embed.sub_img")
    assert audio.components["relative_bias"] == 1000 * 16  # t5_bias_max_distance 500, both directions, 16 heads


def test_a_phi4_audio_tower_survives_the_compiled_round_trip() -> None:
    from calc.spec.construct import construct
    from calc.spec.model import ModelSpec
    from calc.towers import Phi4Audio, Tower

    spec = spec_of(json.loads((MODEL_TYPES / "phi4_multimodal.json").read_text()))
    rebuilt = construct(ModelSpec, json.loads(json.dumps(spec.model_dump(mode="json"))))
    assert rebuilt == spec
    assert isinstance(rebuilt.towers["vision"], Tower) and isinstance(rebuilt.towers["audio"], Phi4Audio)


# --- whose tie_word_embeddings the whole model honours ----------------------------------------------

def _tie_pair(model_type: str, outer: bool | None, text: bool | None) -> dict:
    """An outer config with (or without) its own flag, and a text_config with (or without) its own."""
    config: dict = {"model_type": model_type, "text_config": {} if text is None else {"tie_word_embeddings": text}}
    return config if outer is None else {**config, "tie_word_embeddings": outer}


FLAGS = [None, True, False]


@pytest.mark.parametrize("model_type", sorted(TIE_DEFAULT))
def test_the_tie_rule_is_transformers_outer_config(model_type: str) -> None:
    """For every multimodal model_type gptcalc reads, and every way the two configs may (not) set the
    flag, gptcalc's tie equals the outer config's resolved tie_word_embeddings in transformers 5.24
    (what the ...ForConditionalGeneration class ties by: modeling_utils.get_expanded_tied_weights_keys)."""
    transformers = pytest.importorskip("transformers")
    for outer in FLAGS:
        for text in FLAGS:
            config = _tie_pair(model_type, outer, text)
            data = {k: v for k, v in config.items() if k != "model_type"}
            expected = transformers.AutoConfig.for_model(model_type, **data).tie_word_embeddings
            assert whole_model_tie(config, config["text_config"]) is expected, (outer, text)


TINY_MISTRAL3 = {"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"],
                 "text_config": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
                                 "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
                                 "head_dim": 16, "vocab_size": 1000},
                 "vision_config": {"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64,
                                   "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 64,
                                   "patch_size": 16, "head_dim": 16}}


@pytest.mark.parametrize("outer, text", [(None, False), (False, True), (True, False)])
def test_a_disagreeing_tie_counts_as_transformers_whole_model(outer: bool | None, text: bool) -> None:
    """Mistral-3 (Mistral3Config defaults to tied) and InternVL (InternVLConfig too) whose two configs
    disagree: the total is Mistral3ForConditionalGeneration's / InternVLForConditionalGeneration's."""
    from oracle import transformers_count

    for base in (TINY_MISTRAL3, {**INTERNVL, "text_config": TINY_MISTRAL3["text_config"] | {"model_type": "qwen2"},
                                 "vision_config": INTERNVIT_6B_SWITCHES}):
        config = {**base, **_tie_pair(base["model_type"], outer, text), "model_type": base["model_type"]}
        config["text_config"] = {**base["text_config"], **config["text_config"]}
        assert count(spec_of(config)).total == transformers_count(config)


def test_a_real_mistral3_config_without_its_outer_flag_is_tied() -> None:
    """tests/configs/model_types/mistral3.json (Devstral-Small-2) says tie_word_embeddings false at the
    top and nothing in text_config; without the top flag (as InternVL's -hf converter writes its
    configs: text_config holds the chat model's llm_config, the outer config no flag) transformers
    ties the head (Mistral3Config's default, true): Mistral3ForConditionalGeneration on the meta
    device, transformers 5.24, holds 23,340,272,640 parameters = the untied 24,011,361,280
    (SOURCES.yaml) less the 131072 x 5120 head."""
    config = json.loads((MODEL_TYPES / "mistral3.json").read_text())
    untied = count(spec_of(config)).total
    del config["tie_word_embeddings"]
    assert untied == 24_011_361_280
    assert count(spec_of(config)).total == untied - 131072 * 5120 == 23_340_272_640
