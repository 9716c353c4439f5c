"""The torch reference's vision tower against transformers' on the same weights.

A tiny Gemma 3 (tests/tiny_models.py TINY_MULTIMODAL), built by transformers'
Gemma3ForConditionalGeneration and written by its save_pretrained; our VisionTower loads the
checkpoint's tower tensors (strict) and must give Gemma3Model.get_image_features' projected
features for the same pixels.
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


def verify_load(directory: Path) -> dict:
    from click.testing import CliRunner

    from calc.cli import main

    result = CliRunner().invoke(main, ["verify", "--checkpoint", str(directory), "--load", "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return json.loads(result.stdout)


def test_verify_load_runs_the_tower_against_transformers(gemma3) -> None:  # noqa: ANN001
    """--load: decoder and tower loaded strictly, one seeded image through our tower, and transformers'
    whole model on the same tensors gives the same logits and the same image features."""
    _, directory = gemma3
    data = verify_load(directory)
    load = data["load"]
    assert load["ok"] and "vision tower: image features [1, 4, 32] of one 56x56 image" in load["message"]
    assert "Gemma3ForConditionalGeneration.get_image_features on the same weights: max |feature difference|" \
        in load["transformers"]["message"] and load["transformers"]["compared"]


def test_verify_load_of_a_tower_the_reference_does_not_run(tmp_path: Path) -> None:
    """Qwen3-VL: the decoder's logits against Qwen3VLForConditionalGeneration holding every tensor
    (towers included); the tower is named as not run, not skipped in silence."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("qwen3_vl", **copy.deepcopy(TINY_MULTIMODAL["qwen3_vl"]))
    transformers.Qwen3VLForConditionalGeneration._from_config(config).save_pretrained(tmp_path)
    data = verify_load(tmp_path)
    assert data["ok"] and "vision tower not run: the torch reference builds SigLIP" in data["load"]["message"]
    assert "Qwen3VLForConditionalGeneration on the same weights: max |logit difference|" in data["load"]["transformers"]["message"]
