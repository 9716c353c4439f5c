"""The torch reference's vision tower against transformers' on the same weights.

Tiny Gemma 3 and InternVL models (tests/tiny_models.py TINY_MULTIMODAL), built by transformers' own
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
BUILT = {"gemma3": {}, "internvl": {}, "internvl-6b-switches": INTERNVIT_6B}


def saved(model_type: str, directory: Path, vision: dict | None = None):  # noqa: ANN201
    """transformers' whole model of the tiny config, every weight random (it starts Gemma 3's projector
    at zeros, which would make any two towers agree), written by save_pretrained to `directory`."""
    config = copy.deepcopy(TINY_MULTIMODAL[model_type])
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
    from calc.reference.tower import VisionTower

    model_type = case.split("-")[0]
    model = saved(model_type, tmp_path, BUILT[case])
    spec, state = tower_state(tmp_path)
    ours = VisionTower("vision", spec.towers["vision"])
    ours.load_state_dict(state, strict=True)
    pixels = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        mine, theirs = ours(pixels), model.get_image_features(pixels).pooler_output
    # 4 tokens: Gemma 3's mm_tokens_per_image; InternVL's 16 patches shuffled 2 x 2. 32: the text width
    assert mine.shape == theirs.shape == (2, 4, 32)
    assert float((mine - theirs).abs().max()) <= 1e-5 * max(1.0, float(theirs.abs().max()))
    name = next(n for n in ours.state_dict() if n.endswith("layers.1.mlp.fc2.weight") or n.endswith("layer.1.mlp.fc2.weight"))
    with torch.no_grad():
        ours.get_parameter(name).mul_(2.0)
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


@pytest.mark.parametrize("model_type, image, whole", [("gemma3", "56x56", "Gemma3ForConditionalGeneration"),
                                                     ("internvl", "56x56", "InternVLForConditionalGeneration")])
def test_verify_load_runs_the_tower_against_transformers(model_type: str, image: str, whole: str,
                                                         tmp_path: Path) -> None:
    """--load: decoder and tower loaded strictly, one seeded image through our tower, and transformers'
    whole model on the same tensors gives the same logits and the same image features."""
    saved(model_type, tmp_path)
    load = verify_load(tmp_path)["load"]
    assert load["ok"] and f"vision tower: image features [1, 4, 32] of one {image} image" in load["message"]
    assert f"{whole}.get_image_features on the same weights: max |feature difference|" \
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
