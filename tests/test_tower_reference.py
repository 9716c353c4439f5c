"""The torch reference's vision tower against transformers' on the same weights.

Tiny Gemma 3, InternVL, Qwen2.5-VL, Qwen3-VL, Qwen3.5, Mistral 3, Llama 4, LLaVA-OneVision, Gemma 4,
Kimi-K2.5, MiniMax-M3 and Step-3.7 models (tests/tiny_models.py TINY_MULTIMODAL), built by transformers' own
ForConditionalGeneration classes and written by their save_pretrained; our VisionTower loads the
checkpoint's tower tensors (strict) and must give get_image_features' projected features for the
same pixels.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from calc.checkpoint.hub_towers import in_memory_towers
from calc.checkpoint.names import tensor_table
from calc.checkpoint.tower_slots import tower_roles, tower_slots
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from tiny_models import TINY, TINY_MULTIMODAL

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


# InternViT-6B's switches (RMSNorm, QK-norm over the full width, a post LayerNorm) on the tiny InternViT.
INTERNVIT_6B = {"norm_type": "rms_norm", "use_qk_norm": True, "use_mean_pooling": False}
# case: (vision_config changes, image (height, width) in pixels, images, features per image). Gemma 3:
# its mm_tokens_per_image 4; InternVL: 4 x 4 patches of 14 shuffled 2 x 2. Qwen (one image, its grid_thw),
# wider than tall so a swapped axis shows: Qwen2.5-VL's 140 x 196 px = 10 x 14 patches of 14, merged 2 x 2 =
# 5 x 7 = 35 tokens, windows of 56 // 2 // 14 = 2 merged tokens (transformers vision_utils.get_vision_window_index),
# so 4 + 4 + 2 patches down and 4 + 4 + 4 + 2 across: whole windows and cut-short ones; Qwen3-VL's 96 x 160 px
# = 6 x 10 patches of 16 (the config class's default patch size) against a 4 x 4 position table (resized),
# 15 tokens from the merger and 15 from each of 2 DeepStack mergers; Qwen3.5 the same without DeepStack.
# Mistral 3: 84 x 140 px = 6 x 10 Pixtral patches of 14, merged 2 x 2 (spatial_merge_size) = 15 tokens.
# MiniMax-M3: 56 x 84 px = 4 x 6 patches of 14, merged 2 x 2 = 6 tokens.
# Llama 4: tiles of its image_size 56 = 4 x 4 patches of 14, pixel-shuffled 2 x 2 (ratio 0.5) = 4 tokens;
# the adapter's fc1 reads intermediate_size channels, so that is 4 x the width (Llama 4's 5632 = 4 x 1408).
LLAMA4_ADAPTER = {"intermediate_size": 64}
# LLaVA-OneVision: a 56 px image of one tile, with canvases of the tiny tile (56) as image_grid_pinpoints
# (the released ones are 384's multiples for 384 px tiles): a base view of 4 x 4 patches of 14 = 16 tokens,
# then the one grid tile's 4 rows of 4, each ended by the image newline = 20: 36 tokens. A 112 x 84 px image
# (wider than tall) on its 112 x 112 canvas (select_best_resolution: the one that keeps all its pixels), 2 x 2
# tiles: the 8 x 8 feature grid unpadded to round(84 · 8 / 112) = 6 rows, 16 + 6 x (8 + 1) = 70 tokens; with
# anyres_max_1 (√(48 / 16) = 1.73 > 1.1) shrunk to 3 x 4, 16 + 3 x 5 = 31; an 84 x 112 one (taller than wide)
# unpadded to 8 x 6 columns, shrunk to 4 x 3 = 16 + 4 x 4 = 32. AnyresImages counts each the same.
SHRINK = {"vision_aspect_ratio": "anyres_max_1"}
CASE_OUTER = {"llava_onevision-shrunk-wide": SHRINK, "llava_onevision-shrunk-tall": SHRINK}
# Gemma 4: 32 x 24 px = 8 x 6 patches of 4 (its x table's 8 rows: the most one axis reaches), pooled 2 x 2
# (pooling_kernel_size) = 4 x 3 = 12 soft tokens; wider than tall so a swapped axis shows; and the same with
# `standardize` (Gemma 4 26B-A4B's vision_config sets it: tests/configs/model_types/gemma4-26b-a4b.json).
GEMMA4 = {"pooling_kernel_size": 2}
# Kimi-K2.5: 64 x 48 px = 16 x 12 patches of 4 against a 4 x 4 position grid (resampled bicubically; square,
# as the released 64 x 64: transformers resamples a grid of pos_emb_height rows a side), merged 2 x 2 = 8 x 6 =
# 48 tokens.
MOONVIT = {"pos_emb_width": 4}
# Step-3.7 (Step3p7ImageProcessor's crop of 504, its global view the tiny image_size 56: 4 x 4 patches of 14, through
# two 3 x 3 stride-2 convolutions, 2 x 2 then 1 x 1 token): a 1008 x 504 image is one row of two 504 px crops (long
# side over the global view, aspect 2 <= 4), each 36 x 36 patches (the 4 x 4 position table resampled bilinearly)
# -> 18 -> 9 = 81 tokens: 81 + 81 + 1 = 163. With image_size 112 (8 x 8 patches -> 4 x 4 -> 2 x 2 = 4 tokens), a
# 200 x 20 image is near-degenerate (a side under 32, aspect 10 > 4): zero-padded to 200 x 200, its side under
# one 504 window, so one crop of all of it, resized up to 504: 81 + 4 = 85.
STEP3P7 = {"image_size": 112}
OUTER = {"llava_onevision": {"image_grid_pinpoints": [[56, 56], [56, 112], [112, 56], [112, 112]]}}
BUILT = {"gemma3": ({}, (56, 56), 2, 4), "internvl": ({}, (56, 56), 2, 4),
         "internvl-6b-switches": (INTERNVIT_6B, (56, 56), 2, 4), "qwen2_5_vl": ({}, (140, 196), 1, 35),
         "qwen3_vl": ({}, (96, 160), 1, 45), "qwen3_5": ({}, (96, 160), 1, 15), "mistral3": ({}, (84, 140), 1, 15),
         "llama4": (LLAMA4_ADAPTER, (56, 56), 2, 4), "llava_onevision": ({}, (56, 56), 1, 36),
         "llava_onevision-tiles-wide": ({}, (84, 112), 1, 70), "llava_onevision-shrunk-wide": ({}, (84, 112), 1, 31),
         "llava_onevision-shrunk-tall": ({}, (112, 84), 1, 32),
         "gemma4": (GEMMA4, (24, 32), 1, 12), "kimi_k25": (MOONVIT, (48, 64), 1, 48), "gemma4-standardized": ({**GEMMA4, "standardize": True}, (24, 32), 1, 12),
         "minimax_m3_vl": ({}, (56, 84), 1, 6), "step3p7": ({}, (504, 1008), 1, 163),
         "step3p7-squared": (STEP3P7, (20, 200), 1, 85)}


def saved(model_type: str, directory: Path, vision: dict | None = None, outer: dict | None = None):  # noqa: ANN201
    """transformers' whole model of the tiny config, every weight random (it starts Gemma 3's projector
    at zeros, which would make any two towers agree) and Gemma 4's standardisation buffers too (left
    as torch.empty), written by save_pretrained to `directory`."""
    config = {**copy.deepcopy(TINY_MULTIMODAL[model_type]), **OUTER.get(model_type, {}), **(outer or {})}
    config["vision_config"].update(vision or {})
    torch.manual_seed(0)
    hf = transformers.AutoConfig.for_model(model_type, **config)
    model = getattr(transformers, config["architectures"][0])._from_config(hf).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.2)
        for name, buffer in model.named_buffers():
            if name.endswith(("std_bias", "std_scale")):
                buffer.normal_(1.0, 0.2)
    model.save_pretrained(directory)
    return model


def tower_state(directory: Path) -> tuple[object, dict]:
    """The spec of the saved config, and the checkpoint's vision tower tensors under their canonical
    in-memory names (not an audio tower's: Gemma 4's); where save_pretrained writes the Hub's layout
    (Kimi-K2.5: Q, K and V fused into `wqkv`, their rows in the original interleaved rotary's order),
    converted as `verify --load` converts them (calc/checkpoint/hub_towers.py)."""
    spec = load_spec(str(directory / "config.json"))
    table, vision = tensor_table(spec), {"vision": spec.towers["vision"]}
    names = tower_slots("vision", vision["vision"]).keys() | tower_slots("vision", vision["vision"], hub=True).keys()
    state = safetensors_torch.load_file(str(directory / "model.safetensors"))
    return spec, in_memory_towers(vision, {table.canonical(n): t for n, t in state.items() if table.canonical(n) in names})


@pytest.mark.parametrize("case", sorted(BUILT))
def test_image_features_are_transformers(case: str, tmp_path: Path) -> None:
    """Our tower on the checkpoint's tensors (strict) gives get_image_features' projected features;
    one changed weight moves them, so the comparison can fail. The largest difference is printed."""
    from calc.checkpoint.crosscheck import image_features
    from calc.reference.tower import VisionTower

    vision, (height, width), images, tokens = BUILT[case]
    model = saved(case.split("-")[0], tmp_path, vision, CASE_OUTER.get(case))
    spec, state = tower_state(tmp_path)
    ours = VisionTower("vision", spec.towers["vision"])
    ours.load_state_dict(state, strict=True)
    pixels = torch.randn(images, 3, height, width, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine, theirs = ours(pixels), image_features(model, ours.transformers_inputs(pixels))
    assert mine.shape == theirs.shape == (images, tokens, 32)  # 32: the text width
    assert sum(p.numel() for p in ours.parameters()) == spec.towers["vision"].total
    if spec.towers["vision"].images.kind in ("anyres", "crops"):  # as many tokens as the count's rule says
        assert spec.towers["vision"].images.tokens(width, height).image_tokens == tokens
    print(f"{case}: max |ours - transformers'| {float((mine - theirs).abs().max()):.2e}")
    assert float((mine - theirs).abs().max()) <= 1e-5 * max(1.0, float(theirs.abs().max()))
    name = tower_roles("vision", spec.towers["vision"])["layer.1.down.weight"].name
    with torch.no_grad():  # random noise, not a scaling or a shift, which a norm after it (Gemma 4's
        param = ours.get_parameter(name)  # post-feedforward RMSNorm, SigLIP's post LayerNorm) would undo
        param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(2)))
        assert float((ours(pixels) - theirs).abs().max()) > 1e-3


def test_other_tower_kinds_are_refused_by_name(tmp_path: Path) -> None:
    """LLaVA-OneVision with the "default" feature selection (its first token dropped, a CLS SigLIP has not)
    is named as not run."""
    from calc.reference.tower import VisionTower

    config = {**copy.deepcopy(TINY_MULTIMODAL["llava_onevision"]), "model_type": "llava_onevision",
              "vision_feature_select_strategy": "default"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = load_spec(str(tmp_path / "config.json"))
    with pytest.raises(GptcalcError, match="LLaVA-OneVision's tower with an anyres_max_N rule, canvases of whole "
                                           "tiles in image_grid_pinpoints and the \"full\" feature selection"):
        VisionTower("vision", spec.towers["vision"], device="meta")


def test_audio_features_are_transformers(tmp_path: Path) -> None:
    """Gemma 4's Conformer audio tower on the checkpoint's tensors (strict) gives get_audio_features'
    projected features: 100 log-mel frames of 8 bins (the tiny subsampling_conv_channels [8, 4]: the
    input projection reads 8 // 4 · 4 = 8 values a frame, 2 frequencies x 4 channels, so 8 bins) subsampled
    4 x to 25, over three 12-frame attention blocks (the last cut short); its parameters are the formulas';
    noise on one layer's relative-position keys moves the features."""
    from calc.checkpoint.crosscheck import audio_features
    from calc.reference.conformer import AudioTower

    model = saved("gemma4", tmp_path, GEMMA4)
    spec = load_spec(str(tmp_path / "config.json"))
    table, tower = tensor_table(spec), spec.towers["audio"]
    audio = tower_slots("audio", tower)
    state = safetensors_torch.load_file(str(tmp_path / "model.safetensors"))
    ours = AudioTower("audio", tower)
    ours.load_state_dict({table.canonical(n): t for n, t in state.items() if table.canonical(n) in audio}, strict=True)
    assert sum(p.numel() for p in ours.parameters()) == tower.total and ours.mel_bins == 8
    frames = torch.randn(1, 100, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine, theirs = ours(frames), audio_features(model, ours.transformers_inputs(frames))
    assert mine.shape == (1, 25, 32)
    agrees_and_can_fail("gemma4", ours, frames, mine, theirs)


# Gemma 3n's audio tower, tiny: 16 mel bins (input_feat_size) through two 3 x 3 stride-2 convolutions of 8 and 4
# channels (16 -> 8 -> 4 frequencies: the input projection reads 4 x 4), two Conformer layers of 16, 2 heads.
GEMMA3N_AUDIO = {"hidden_size": 16, "conf_num_attention_heads": 2, "conf_num_hidden_layers": 2,
                 "sscp_conv_channel_size": [8, 4], "input_feat_size": 16, "vocab_size": 8}


def test_gemma3n_audio_features_are_transformers() -> None:
    """Gemma 3n's Conformer and embedder against transformers' Gemma3nAudioEncoder and
    Gemma3nMultimodalEmbedder on the same random weights (its whole Gemma3nForConditionalGeneration
    needs timm for the MobileNet-v5 vision tower, not installed here): 100 frames, subsampled to 25
    (the time axis padded at the end: causal), every 4th kept (conf_reduction_factor) = 7 soft tokens;
    noise on one layer's relative-position keys moves them."""
    from transformers.models.gemma3n import modeling_gemma3n

    from calc.arch.config import Config
    from calc.reference.conformer import AudioTower
    from calc.spec.validate import validated
    from calc.towers import Conformer, gemma3n

    audio = transformers.Gemma3nAudioConfig(**GEMMA3N_AUDIO)
    torch.manual_seed(0)
    parts = {"model.audio_tower.": modeling_gemma3n.Gemma3nAudioEncoder(audio).eval(),
             "model.embed_audio.": modeling_gemma3n.Gemma3nMultimodalEmbedder(audio, transformers.Gemma3nTextConfig(
                 hidden_size=32)).eval()}
    with torch.no_grad():
        for part in parts.values():
            for param in part.parameters():
                param.normal_(0.0, 0.2)
    tower = validated(Conformer, gemma3n.towers(Config({"audio_config": GEMMA3N_AUDIO}, "tiny"), 32)["audio"])
    ours = AudioTower("audio", tower)
    ours.load_state_dict({prefix + n: t for prefix, part in parts.items() for n, t in part.state_dict().items()},
                         strict=True)
    assert sum(p.numel() for p in ours.parameters()) == tower.total and ours.mel_bins == 16
    frames = torch.randn(1, 100, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine = ours(frames)
        encoded = parts["model.audio_tower."](frames, ours.transformers_inputs(frames)["input_features_mask"])
        theirs = parts["model.embed_audio."](inputs_embeds=encoded.last_hidden_state)
    assert mine.shape == (1, 7, 32)
    agrees_and_can_fail("gemma3n", ours, frames, mine, theirs)


def agrees_and_can_fail(label: str, ours: object, frames: object, mine: object, theirs: object) -> None:
    """Our audio features equal transformers' (the difference printed), and noise on layer 1's
    relative-position keys moves them."""
    assert mine.shape == theirs.shape
    print(f"{label} audio: max |ours - transformers'| {float((mine - theirs).abs().max()):.2e}")
    assert float((mine - theirs).abs().max()) <= 1e-5 * max(1.0, float(theirs.abs().max()))
    with torch.no_grad():
        param = ours.get_parameter(tower_roles("audio", ours.tower)["layer.1.relative_k"].name)
        param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(2)))
        assert float((ours(frames) - theirs).abs().max()) > 1e-3


def test_a_released_towers_parameters_are_its_count(tmp_path: Path) -> None:
    """Gemma 4 26B-A4B's vision tower built on the meta device: its parameters are the formulas' total,
    and its standardisation buffers (`standardize` in its vision_config) are there, not counted; the audio
    tower E2B and E4B ship (tests/test_towers.py RELEASED_GEMMA4_AUDIO) the same, 309,149,984 into 2816,
    reading 128 mel bins a frame."""
    from calc.reference.conformer import AudioTower
    from calc.reference.tower import VisionTower
    from oracle import CONFIG_DIR
    from test_towers import RELEASED_GEMMA4_AUDIO

    config = json.loads((CONFIG_DIR / "model_types" / "gemma4-26b-a4b.json").read_text())
    config["audio_config"] = RELEASED_GEMMA4_AUDIO
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    towers = load_spec(str(path)).towers
    built = VisionTower("vision", towers["vision"], device="meta")
    assert sum(p.numel() for p in built.parameters()) == towers["vision"].total
    assert {n.rsplit(".", 1)[-1] for n, _ in built.named_buffers()} == {"std_bias", "std_scale"}
    audio = AudioTower("audio", towers["audio"], device="meta")
    assert sum(p.numel() for p in audio.parameters()) == towers["audio"].total == 309_149_984
    assert audio.mel_bins == 128  # Gemma4AudioFeatureExtractor's feature_size


# Gemma 4's Conformer beside its vision tower: 400 seeded log-mel frames (of the 8 bins its tiny subsampling
# reads) subsampled to 100, compared with get_audio_features.
AUDIO_RUN = {"gemma4": ("audio tower: audio features [1, 100, 32] of 400 frames of 8 mel bins",
                        "Gemma4ForConditionalGeneration.get_audio_features on the same weights: max |feature difference|")}


def verify_load(directory: Path) -> dict:
    from click.testing import CliRunner

    from calc.cli import main

    result = CliRunner().invoke(main, ["verify", "--checkpoint", str(directory), "--load", "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return json.loads(result.stdout)


@pytest.mark.parametrize("model_type, image, features, whole", [
    ("gemma3", "56x56", [1, 4, 32], "Gemma3ForConditionalGeneration"),
    ("internvl", "56x56", [1, 4, 32], "InternVLForConditionalGeneration"),
    # two whole windows of 4 patches and one merge block (2) a side: 10 x 14 px; 25 merged tokens
    ("qwen2_5_vl", "140x140", [1, 25, 32], "Qwen2_5_VLForConditionalGeneration"),
    # the 4 x 4 position table's square of 16 px patches: 4 merged tokens, then 4 from each DeepStack merger
    ("qwen3_vl", "64x64", [1, 12, 32], "Qwen3VLForConditionalGeneration"),
    # Pixtral's image_size (56, the rule's longest edge): 4 x 4 patches of 14, merged 2 x 2
    ("mistral3", "56x56", [1, 4, 32], "Mistral3ForConditionalGeneration"),
    # one tile of image_size 56; transformers' whole model fails on token ids alone (the logits are not
    # compared), the tower is compared all the same
    ("llama4", "56x56", [1, 4, 32], "Llama4ForConditionalGeneration"),
    ("llava_onevision", "56x56", [1, 36, 32], "LlavaOnevisionForConditionalGeneration"),
    # the square its 8-row position tables reach in whole 2 x 2 pooling blocks: 8 x 8 patches of 4, 16 soft
    # tokens; its audio tower runs beside it (AUDIO_RUN)
    ("gemma4", "32x32", [1, 16, 32], "Gemma4ForConditionalGeneration"),
    # the square its 4 x 4 position grid covers: 4 x 4 patches of 4, merged 2 x 2; its file in the Hub's layout
    # (fused, permuted `wqkv`), made in-memory for both models
    ("kimi_k25", "16x16", [1, 4, 32], "Kimi_K25ForConditionalGeneration"),
    # saved under the release's names (block_sparse_moe, w1 / w3 / w2, gate and up apart), its rule's largest
    # image (451,584 pixels): 48 x 48 patches, merged 2 x 2
    ("minimax_m3_vl", "672x672", [1, 576, 32], "MiniMaxM3SparseForConditionalGeneration"),
    # one row of two 504 px crops beside the 56 px global view (BUILT's "step3p7"): 2 x 81 + 1 tokens; its file in
    # the Hub's layout (OpenCLIP's names, Q, K and V fused, their rows paired for rotary), made in-memory for both
    ("step3p7", "1008x504", [1, 163, 32], "Step3p7ForConditionalGeneration")])
def test_verify_load_runs_the_tower_against_transformers(model_type: str, image: str, features: list[int],
                                                         whole: str, tmp_path: Path) -> None:
    """--load: decoder and tower loaded strictly, one seeded image through our tower, and transformers'
    whole model on the same tensors gives the same logits and the same image features."""
    saved(model_type, tmp_path, BUILT[model_type][0])
    load = verify_load(tmp_path)["load"]
    assert load["ok"] and f"vision tower: image features {features} of one {image} image" in load["message"]
    assert f"{whole}.get_image_features on the same weights: max |feature difference|" \
        in load["transformers"]["message"] and load["transformers"]["compared"]
    for line in AUDIO_RUN.get(model_type, ()):
        assert line in load["message"] or line in load["transformers"]["message"]


def test_verify_load_of_a_tower_the_reference_does_not_run(tmp_path: Path) -> None:
    """LLaVA-OneVision with the released 384 px canvases on 56 px tiles: 384 is no whole number of tiles,
    so the tower is named as not run (not skipped in silence), and the decoder's logits are compared with
    LlavaOnevisionForConditionalGeneration holding every tensor."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("llava_onevision", **copy.deepcopy(TINY_MULTIMODAL["llava_onevision"]))
    transformers.LlavaOnevisionForConditionalGeneration._from_config(config).save_pretrained(tmp_path)
    data = verify_load(tmp_path)
    assert data["ok"] and "vision tower not run: the torch reference runs LLaVA-OneVision's tower with an " \
        "anyres_max_N rule, canvases of whole tiles in image_grid_pinpoints" in data["load"]["message"]
    assert "LlavaOnevisionForConditionalGeneration on the same weights: max |logit difference|" \
        in data["load"]["transformers"]["message"]


# Gemma 3n whole: the tiny gemma3n_text decoder and the tiny Conformer (GEMMA3N_AUDIO) under the released vision
# tower, which transformers builds through timm by name only (Gemma3nVisionConfig's mobilenetv5_300m_enc, 2048 wide,
# 256 soft tokens), so it cannot be made small: about 300M parameters saved and run at 768 x 768.
GEMMA3N_WHOLE = {"architectures": ["Gemma3nForConditionalGeneration"],
                 "text_config": {**TINY["gemma3n_text"], "model_type": "gemma3n_text"},
                 "audio_config": {"model_type": "gemma3n_audio", **GEMMA3N_AUDIO},
                 "vision_config": {"model_type": "gemma3n_vision"}}


def test_verify_load_of_a_saved_gemma3n(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """`verify --checkpoint DIR --load` of transformers' save_pretrained of a whole Gemma3nForConditionalGeneration
    (its own initialisation, the embedders' tables and projections made random): every tensor placed, the
    decoder, the MobileNet-v5 (calc/reference/mobilenet.py, no timm) on one seeded 768 x 768 image and the
    Conformer on seeded log-mel frames loaded strictly, and transformers' model on the same tensors gives the
    same logits and the same image and audio features. Opt-in (--heavy-towers) and skipped without timm."""
    if not request.config.getoption("--heavy-towers"):
        pytest.skip("saves a 300M-parameter vision tower and runs it at 768 x 768: pass --heavy-towers")
    pytest.importorskip("timm")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("gemma3n", **copy.deepcopy(GEMMA3N_WHOLE))
    model = transformers.Gemma3nForConditionalGeneration._from_config(config).eval()
    with torch.no_grad():  # the embedders start at ones and zeros, which would let two towers agree
        for name, param in model.named_parameters():
            if name.startswith(("model.embed_vision.", "model.embed_audio.")):
                param.normal_(1.0 if "norm" in name else 0.0, 0.2)
    model.save_pretrained(tmp_path)
    data = verify_load(tmp_path)
    load = data["load"]
    assert data["ok"] and load["ok"] and load["transformers"]["compared"], load
    print(load["message"], load["transformers"]["message"], sep="\n")
    assert "vision tower: image features [1, 256, 32] of one 768x768 image" in load["message"]
    for what in ("get_image_features", "get_audio_features"):
        assert f"Gemma3nForConditionalGeneration.{what} on the same weights" in load["transformers"]["message"]


# Gemma 3n's MobileNet-v5, tiny (timm's block notation, as calc/towers/mobilenet.py reads it): a 16-channel stem, two
# edge residuals, universal inverted residuals with and without their depthwise convs, a multi-query block with
# strided keys and values (v2) and one without, over four stride-2 stages; channels multiples of 8, as timm's
# make_divisible keeps them. The fusion adapter, 2048 wide (timm's fixed num_features), as Gemma 3n's embedder reads
# it. Cases (fused_maps, output_grid, image side): stages 3 and 4 of a 128 px image (8 x 8 and 4 x 4, the second
# upsampled) average-pooled 2 x 2 to 4 x 4; stages 2 and 4 of a 96 px one (12 x 12 and 3 x 3) pooled 4 x 4 to
# 3 x 3; stages 3 and 4 of a 128 px image at their own 8 x 8 grid, neither pooled nor resized; stages 2 and 3 of
# a 96 px image (12 x 12 and 6 x 6) to 5 x 5, which 12 does not divide: resized bilinearly.
TINY_MOBILENET = (("er_r1_k3_s2_e2_c16", "er_r1_k3_s1_e2_c16"),
                  ("uir_r1_a3_k5_s2_e2_c24", "uir_r1_a3_k0_s1_e2_c24"),
                  ("uir_r1_a5_k5_s2_e2_c32", "mqa_r1_k3_h2_v2_s1_d8_c32", "uir_r1_a0_k0_s1_e2_c32"),
                  ("uir_r1_a5_k5_s2_e2_c48", "mqa_r1_k3_h2_s1_d8_c48", "uir_r1_a0_k0_s1_e1_c48"))


@pytest.mark.parametrize("fused, grid, side", [((3, 4), 4, 128), ((2, 4), 3, 96), ((3, 4), 8, 128), ((2, 3), 5, 96)])
def test_mobilenet_features_are_timms(fused: tuple, grid: int, side: int) -> None:
    """Our MobileNet-v5 (calc/reference/mobilenet.py, no timm) on the tensors of timm 1.0.31's MobileNetV5Encoder
    built as mobilenetv5_300m_enc is (models/mobilenetv5.py _gen_mobilenet_v5: pad_type 'same', GELU-tanh,
    RmsNorm2d, layer scales) with the tiny stages, and of transformers' Gemma3nMultimodalEmbedder, all random:
    loaded strictly, its parameters are the formulas', and it gives what Gemma3nModel.get_image_features computes
    from them (forward_features, the grid as rows times √2048, the embedder) for two images; noise on one
    block's expand conv moves the features. Skipped without timm."""
    from functools import partial

    pytest.importorskip("timm")
    from timm.layers import RmsNorm2d
    from timm.models._efficientnet_builder import decode_arch_def, round_channels
    from timm.models.mobilenetv5 import MobileNetV5Encoder
    from transformers.models.gemma3n import modeling_gemma3n

    from calc.reference.mobilenet import MobileNetTower
    from calc.spec.validate import validated
    from calc.towers import MobileNet

    torch.manual_seed(0)
    encoder = MobileNetV5Encoder(decode_arch_def([list(stage) for stage in TINY_MOBILENET]), stem_size=16,
                                 pad_type="same", msfa_indices=fused, msfa_output_resolution=grid,
                                 act_layer=partial(torch.nn.GELU, approximate="tanh"), norm_layer=RmsNorm2d,
                                 layer_scale_init_value=1e-5, round_chs_fn=partial(round_channels, multiplier=1.0))
    embedder = modeling_gemma3n.Gemma3nMultimodalEmbedder(transformers.Gemma3nVisionConfig(hidden_size=2048),
                                                          transformers.Gemma3nTextConfig(hidden_size=32))
    with torch.no_grad():
        for name, param in [*encoder.named_parameters(), *embedder.named_parameters()]:
            param.normal_(1.0 if "norm" in name or "bn" in name else 0.0, 0.2)
    tower = validated(MobileNet, {"architecture": "tiny", "stages": TINY_MOBILENET, "stem": 16,
                                  "fused_maps": fused, "output_grid": grid, "d_model": 2048, "vocab": 128,
                                  "text_width": 32})
    ours = MobileNetTower("vision", tower)
    ours.load_state_dict({**{"model.vision_tower.timm_model." + n: t for n, t in encoder.state_dict().items()},
                          **{"model.embed_vision." + n: t for n, t in embedder.state_dict().items()}}, strict=True)
    assert sum(p.numel() for p in ours.parameters()) == tower.total
    pixels = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine, grid_out = ours(pixels), encoder.eval().forward_features(pixels)
        theirs = embedder.eval()(inputs_embeds=grid_out.reshape(2, 2048, grid * grid).permute(0, 2, 1) * 2048 ** 0.5)
    assert mine.shape == theirs.shape == (2, grid * grid, 32)
    print(f"mobilenet {fused} -> {grid}: max |ours - timm's| {float((mine - theirs).abs().max()):.2e}")
    assert float((mine - theirs).abs().max()) <= 1e-5 * max(1.0, float(theirs.abs().max()))
    with torch.no_grad():
        param = ours.get_parameter("model.vision_tower.timm_model.blocks.1.0.pw_exp.conv.weight")
        param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(2)))
        assert float((ours(pixels) - theirs).abs().max()) > 1e-3


def test_the_released_mobilenet_is_built_whole() -> None:
    """Gemma 3n's released MobileNet-v5 (tests/test_towers.py GEMMA3N: mobilenetv5_300m_enc and its embedder) built
    on the meta device without timm: as many parameters as the formulas, 298,587,456."""
    from calc.reference.mobilenet import MobileNetTower
    from oracle import spec_of
    from test_towers import GEMMA3N

    tower = spec_of(GEMMA3N).towers["vision"]
    built = MobileNetTower("vision", tower, device="meta")
    assert sum(p.numel() for p in built.parameters()) == tower.total == 298_587_456
