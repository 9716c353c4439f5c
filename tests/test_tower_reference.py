"""The torch reference's vision tower against transformers' on the same weights.

A tiny Gemma 3 (tests/tiny_models.py TINY_MULTIMODAL), built by transformers'
Gemma3ForConditionalGeneration and written by its save_pretrained; our VisionTower loads the
checkpoint's tower tensors (strict) and must give Gemma3Model.get_image_features' projected
features for the same pixels.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from calc.checkpoint.names import tensor_table
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from tiny_models import TINY_MULTIMODAL

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    directory = tmp_path_factory.mktemp("gemma3")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("gemma3", **copy.deepcopy(TINY_MULTIMODAL["gemma3"]))
    model = transformers.Gemma3ForConditionalGeneration._from_config(config).eval()
    with torch.no_grad():  # transformers starts the projector at zeros: every weight random, so features differ
        for param in model.parameters():
            param.normal_(0.0, 0.2)
    model.save_pretrained(directory)
    return model, directory


def tower_state(directory: Path) -> tuple[object, dict]:
    """The spec of the saved config, and the checkpoint's tower tensors under their canonical names."""
    spec = load_spec(str(directory / "config.json"))
    table = tensor_table(spec)
    state = safetensors_torch.load_file(str(directory / "model.safetensors"))
    return spec, {table.canonical(n): t for n, t in state.items() if table.canonical(n) in table.towers}


def test_gemma3_image_features_are_transformers(gemma3) -> None:  # noqa: ANN001
    from calc.reference.tower import VisionTower

    model, directory = gemma3
    spec, state = tower_state(directory)
    ours = VisionTower("vision", spec.towers["vision"])
    ours.load_state_dict(state, strict=True)
    pixels = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine, theirs = ours(pixels), model.get_image_features(pixels).pooler_output
    assert mine.shape == theirs.shape == (2, 4, 32)  # 4 = mm_tokens_per_image, 32 = the text width
    assert float((mine - theirs).abs().max()) <= 1e-5 * max(1.0, float(theirs.abs().max()))
    with torch.no_grad():  # the comparison can fail: one changed weight moves the features
        ours.get_parameter("model.vision_tower.encoder.layers.1.mlp.fc2.weight")[0, 0] += 0.5
        assert float((ours(pixels) - theirs).abs().max()) > 1e-3


def test_other_tower_kinds_are_refused_by_name() -> None:
    from calc.reference.tower import VisionTower
    from oracle import CONFIG_DIR

    spec = load_spec(str(CONFIG_DIR / "model_types" / "qwen3_vl.json"))
    with pytest.raises(GptcalcError, match="qwen3_vl towers are counted and checked in checkpoints, not run"):
        VisionTower("vision", spec.towers["vision"], device="meta")
