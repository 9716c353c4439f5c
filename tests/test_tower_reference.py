"""The torch reference's vision tower against transformers' on the same weights.

Tiny Gemma 3, InternVL, Qwen2.5-VL, Qwen3-VL, Qwen3.5, Mistral 3, Llama 4 and LLaVA-OneVision
models (tests/tiny_models.py TINY_MULTIMODAL), built by transformers' own
ForConditionalGeneration classes and written by their save_pretrained; our VisionTower loads the
checkpoint's tower tensors (strict) and must give get_image_features' projected features for the
same pixels.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from calc.checkpoint.names import tensor_table
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from tiny_models import TINY_MULTIMODAL

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
# then the one grid tile's 4 rows of 4, each ended by the image newline = 20: 36 tokens.
OUTER = {"llava_onevision": {"image_grid_pinpoints": [[56, 56], [56, 112], [112, 56], [112, 112]]}}
BUILT = {"gemma3": ({}, (56, 56), 2, 4), "internvl": ({}, (56, 56), 2, 4),
         "internvl-6b-switches": (INTERNVIT_6B, (56, 56), 2, 4), "qwen2_5_vl": ({}, (140, 196), 1, 35),
         "qwen3_vl": ({}, (96, 160), 1, 45), "qwen3_5": ({}, (96, 160), 1, 15), "mistral3": ({}, (84, 140), 1, 15),
         "llama4": (LLAMA4_ADAPTER, (56, 56), 2, 4), "llava_onevision": ({}, (56, 56), 1, 36),
         "minimax_m3_vl": ({}, (56, 84), 1, 6)}


def saved(model_type: str, directory: Path, vision: dict | None = None):  # noqa: ANN201
    """transformers' whole model of the tiny config, every weight random (it starts Gemma 3's projector
    at zeros, which would make any two towers agree), written by save_pretrained to `directory`."""
    config = {**copy.deepcopy(TINY_MULTIMODAL[model_type]), **OUTER.get(model_type, {})}
    config["vision_config"].update(vision or {})
    torch.manual_seed(0)
    hf = transformers.AutoConfig.for_model(model_type, **config)
    model = getattr(transformers, config["architectures"][0])._from_config(hf).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.2)
    model.save_pretrained(directory)
    return model


def tower_state(directory: Path) -> tuple[object, dict]:
    """The spec of the saved config, and the checkpoint's tower tensors under their canonical names."""
    spec = load_spec(str(directory / "config.json"))
    table = tensor_table(spec)
    state = safetensors_torch.load_file(str(directory / "model.safetensors"))
    return spec, {table.canonical(n): t for n, t in state.items() if table.canonical(n) in table.towers}


@pytest.mark.parametrize("case", sorted(BUILT))
def test_image_features_are_transformers(case: str, tmp_path: Path) -> None:
    """Our tower on the checkpoint's tensors (strict) gives get_image_features' projected features;
    one changed weight moves them, so the comparison can fail."""
    from calc.checkpoint.crosscheck import image_features
    from calc.checkpoint.tower_slots import tower_roles
    from calc.reference.tower import VisionTower

    vision, (height, width), images, tokens = BUILT[case]
    model = saved(case.split("-")[0], tmp_path, vision)
    spec, state = tower_state(tmp_path)
    ours = VisionTower("vision", spec.towers["vision"])
    ours.load_state_dict(state, strict=True)
    pixels = torch.randn(images, 3, height, width, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine, theirs = ours(pixels), image_features(model, ours.transformers_inputs(pixels))
    assert mine.shape == theirs.shape == (images, tokens, 32)  # 32: the text width
    assert float((mine - theirs).abs().max()) <= 1e-5 * max(1.0, float(theirs.abs().max()))
    name = tower_roles("vision", spec.towers["vision"])["layer.1.down.weight"].name
    with torch.no_grad():
        ours.get_parameter(name).mul_(2.0)
        assert float((ours(pixels) - theirs).abs().max()) > 1e-3


def test_other_tower_kinds_are_refused_by_name() -> None:
    from calc.reference.tower import VisionTower
    from oracle import CONFIG_DIR

    spec = load_spec(str(CONFIG_DIR / "model_types" / "gemma4-26b-a4b.json"))
    with pytest.raises(GptcalcError, match="gemma4 towers are counted and checked in checkpoints, not run"):
        VisionTower("vision", spec.towers["vision"], device="meta")


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
    # saved under the release's names (block_sparse_moe, w1 / w3 / w2, gate and up apart), its rule's largest
    # image (451,584 pixels): 48 x 48 patches, merged 2 x 2
    ("minimax_m3_vl", "672x672", [1, 576, 32], "MiniMaxM3SparseForConditionalGeneration")])
def test_verify_load_runs_the_tower_against_transformers(model_type: str, image: str, features: list[int],
                                                         whole: str, tmp_path: Path) -> None:
    """--load: decoder and tower loaded strictly, one seeded image through our tower, and transformers'
    whole model on the same tensors gives the same logits and the same image features."""
    saved(model_type, tmp_path, BUILT[model_type][0])
    load = verify_load(tmp_path)["load"]
    assert load["ok"] and f"vision tower: image features {features} of one {image} image" in load["message"]
    assert f"{whole}.get_image_features on the same weights: max |feature difference|" \
        in load["transformers"]["message"] and load["transformers"]["compared"]


def test_verify_load_of_a_tower_the_reference_does_not_run(tmp_path: Path) -> None:
    """LLaVA-OneVision with the released 384 px canvases on 56 px tiles: one tile-sized image is not a
    canvas of its own, so the tower is named as not run (not skipped in silence), and the decoder's
    logits are compared with LlavaOnevisionForConditionalGeneration holding every tensor."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("llava_onevision", **copy.deepcopy(TINY_MULTIMODAL["llava_onevision"]))
    transformers.LlavaOnevisionForConditionalGeneration._from_config(config).save_pretrained(tmp_path)
    data = verify_load(tmp_path)
    assert data["ok"] and "vision tower not run: the torch reference runs LLaVA-OneVision's tower on one " \
        "tile-sized image, which needs an anyres_max_N rule with a tile x tile canvas" in data["load"]["message"]
    assert "LlavaOnevisionForConditionalGeneration on the same weights: max |logit difference|" \
        in data["load"]["transformers"]["message"]
