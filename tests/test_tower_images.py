"""Image tokens of Phi-4-multimodal, Step-3.7 and Gemma 3n (calc/towers/images.py HdImages, CropImages,
FixedImages) against transformers 5.24's own processors run on a blank image.

Both image processors are torchvision-backed classes, and torchvision is not installed here, so each
is loaded from its source file (transformers' lazy module would hand back a placeholder); their
tensor helpers (resize, pad, rescale and normalise) are given plain-torch stand-ins. What decides
the count — the crop planning, the masks, the token strings — is the processors' own code.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from cli_checks import check_run
from oracle import CONFIG_DIR, spec_of
from tiny_models import TINY_MULTIMODAL

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
F = torch.nn.functional
PHI4 = CONFIG_DIR / "model_types" / "phi4_multimodal.json"


def _load(relative: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A transformers module executed from its file, under a name of its package (relative imports)."""
    path = Path(transformers.__file__).parent / relative
    name = "transformers." + relative.removesuffix(".py").replace("/", ".") + "_from_source"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _resize(image, size, **_):  # noqa: ANN001, ANN202
    """tvF.resize / the backend's resize: [..., H, W] to size ([h, w] or a SizeDict)."""
    h, w = (size.height, size.width) if hasattr(size, "height") else size
    batch = image if image.dim() == 4 else image[None]
    out = F.interpolate(batch, size=(h, w))
    return out if image.dim() == 4 else out[0]


def _pad(image, padding, fill=None):  # noqa: ANN001, ANN202
    """tvF.pad with [left, top, right, bottom]."""
    left, top, right, bottom = padding
    return F.pad(image, (left, right, top, bottom))


def _blank(width: int, height: int):  # noqa: ANN202
    return torch.zeros(3, height, width)


# --- Phi-4-multimodal: dynamic HD crops, a global view, separators -----------------------------------

@pytest.fixture(scope="module")
def phi4_processor():  # noqa: ANN201
    """Phi4MultimodalImageProcessor with its class defaults (448 crops, patch 14, dynamic_hd 36)."""
    with pytest.MonkeyPatch.context() as patch:
        functional = types.ModuleType("torchvision.transforms.v2.functional")
        functional.resize, functional.pad = _resize, _pad
        for name in ("torchvision", "torchvision.transforms", "torchvision.transforms.v2"):
            patch.setitem(sys.modules, name, types.ModuleType(name))
        patch.setitem(sys.modules, "torchvision.transforms.v2.functional", functional)
        module = _load("models/phi4_multimodal/image_processing_phi4_multimodal.py", patch)
    processor = object.__new__(module.Phi4MultimodalImageProcessor)
    processor.rescale_and_normalize = lambda image, *_: image
    processor.resize = _resize
    return processor


@pytest.mark.parametrize("width, height", [(1024, 1024), (448, 448), (640, 480), (4000, 300), (100, 3000),
                                           (1920, 1080), (3000, 3000), (50, 400), (448, 16128)])
def test_phi4_image_tokens_are_the_processors(phi4_processor, width: int, height: int) -> None:  # noqa: ANN001
    from transformers.image_utils import SizeDict

    rule = spec_of(json.loads(PHI4.read_text())).towers["vision"].images
    out = phi4_processor._preprocess([_blank(width, height)], True, SizeDict(height=448, width=448), None, False, 1.0,
                                     False, None, None, 14, 36, None)
    ours = rule.tokens(width, height)
    assert ours.tokens == out["num_img_tokens"][0] and ours.special_tokens == 0
    assert ours.views == out["image_pixel_values"].shape[1]  # the global view and the crops
    assert [ours.height, ours.width] == out["image_sizes"][0].tolist()


def test_phi4_largest_image_is_one_column_of_36_crops() -> None:
    """36 crops in one column: 16 x 16 + 16 + 1 global-view tokens, 576 x 16 + 576 crop tokens."""
    largest = spec_of(json.loads(PHI4.read_text())).towers["vision"].images.largest()
    assert (largest.width, largest.height, largest.tokens) == (448, 16128, 273 + 576 * 17)


# --- Step-3.7: a global view and sliding-window crops ------------------------------------------------

@pytest.fixture(scope="module")
def step_processors():  # noqa: ANN201
    """Step3p7ImageProcessor with its class defaults (728 global, 504 crops, 3024 at most) and
    Step3p7Processor over it (its __init__ derives the 169 and 81 tokens from them)."""
    with pytest.MonkeyPatch.context() as patch:
        module = _load("models/step3p7/image_processing_step3p7.py", patch)
    image = object.__new__(module.Step3p7ImageProcessor)
    image.size = {"height": 728, "width": 728}
    image.resize, image.rescale_and_normalize = _resize, lambda images, *_: images
    image.pad = lambda images, pad_size: [_pad(i, [0, 0, pad_size.width - i.shape[-1], pad_size.height - i.shape[-2]])
                                          for i in images]
    from transformers.models.step3p7.processing_step3p7 import Step3p7Processor

    text = object.__new__(Step3p7Processor)
    with pytest.MonkeyPatch.context() as patch:  # ProcessorMixin's own checks want a real tokenizer
        patch.setattr("transformers.processing_utils.ProcessorMixin.__init__", lambda *a, **k: None)
        text.__init__(image)
    return image, text


SPECIAL = ("<patch_start>", "<patch_end>", "<patch_newline>", "<im_start>", "<im_end>")


@pytest.mark.parametrize("width, height", [(1024, 768), (500, 500), (700, 300), (3000, 2000), (4000, 500),
                                           (20, 200), (728, 728), (1600, 1600), (6000, 6000)])
def test_step3p7_image_tokens_are_the_processors(step_processors, width: int, height: int) -> None:  # noqa: ANN001
    from transformers.image_utils import SizeDict

    image, text = step_processors
    config = {"model_type": "step3p7", **TINY_MULTIMODAL["step3p7"]}
    config["vision_config"] = {**config["vision_config"], "image_size": 728}
    rule = spec_of(config).towers["vision"].images
    out = image._preprocess([_blank(width, height)], False, 1.0, False, None, None, None,
                            SizeDict(height=728, width=728), 504, True, None)
    replaced = text.replace_image_token(out, 0)
    ours = rule.tokens(width, height)
    assert ours.image_tokens == replaced.count("<im_patch>")
    assert ours.special_tokens == sum(replaced.count(token) for token in SPECIAL)
    assert ours.views == 1 + out["num_local_patches"][0]


# --- Gemma 3n: every image 256 soft tokens --------------------------------------------------------------

def test_gemma3n_image_is_256_tokens_and_four_around() -> None:
    """Gemma3nProcessor (processing_gemma3n.py: image_seq_length 256, "\\n\\n<boi>" + 256 x <image_soft_token>
    + "<eoi>\\n\\n") for any image; the model reshapes the encoder's output to vision_soft_tokens_per_image rows."""
    from test_towers import GEMMA3N

    rule = spec_of(GEMMA3N).towers["vision"].images
    assert {(t.tokens, t.image_tokens) for t in map(rule.tokens, (1024, 300, 4000), (768, 3000, 20))} == {(260, 256)}


def test_memory_counts_their_image_tokens_in_the_kv_cache() -> None:
    """--image on Phi-4-multimodal: a 1024 x 1024 image is 2,625 tokens (test above), whose fp16 KV cache is
    32 layers x 2 x 8 KV heads x 128 x 2 bytes a token (phi4_multimodal.json)."""
    out = json.loads(check_run(["memory", str(PHI4), "--seq", "4096", "--json", "--image", "1024x1024",
                                "--images", "2"]).stdout)
    assert out["images"]["tokens"] == 2 * 2625 and out["images"]["kv_bytes"] == 2 * 2625 * 32 * 2 * 8 * 128 * 2


# --- shapes / flops --image, and vLLM's encoder budget --------------------------------------------------

def test_phi4_journey_owns_every_vision_row() -> None:
    """A 1024 x 1024 image through Phi-4-multimodal's SigLIP: the global view and 3 x 3 crops (10 views of
    32 x 32 patches), the params column the vision tower's count (pooling head and separators included),
    and the 2,625 tokens the processor gives it (test above) at the decoder's 3,072."""
    from calc.analysis.count import count
    from calc.analysis.shapes.tower import tower_journey

    spec = spec_of(json.loads(PHI4.read_text()))
    walk, tokens = tower_journey(spec, 1024, 1024)
    vision = next(t for t in count(spec).towers if t.name == "vision")
    assert (walk.batch, walk.seq, walk.params) == (10, 32 * 32, vision.total)
    assert walk.steps[-1].output.sizes == (1, 2625, 3072)


def test_gemma3n_journey_walks_the_convolutional_encoder(tmp_path) -> None:  # noqa: ANN001
    """Gemma 3n's MobileNet-v5 through the CLI: feature maps from the stem to the fusion adapter's 16 x 16
    grid (tests/test_tower_shapes.py checks them against timm), 256 soft tokens at the text width."""
    from test_towers import GEMMA3N

    path = tmp_path / "gemma3n.json"
    path.write_text(json.dumps(GEMMA3N))
    data = json.loads(check_run(["shapes", str(path), "--seq", "8", "--image", "1024x768", "--json"]).stdout)
    steps = {step["id"]: step["output"] for step in data["image"]["steps"]}
    assert steps["msfa_norm"] == [1, 2048, 16, 16] and steps["image_tokens"] == [1, 260, 2048]
    text = check_run(["flops", str(path), "--seq", "8", "--image", "1024x768"]).stdout
    assert "fusion expand conv" in text
    assert check_run(["memory", str(path), "--image", "1024x768"]).exit_code == 0


def test_step3p7_journey_walks_both_view_sizes(tmp_path) -> None:  # noqa: ANN001
    """Step-3.7's tiny tower through the CLI: a 1024 x 768 image is the 56-pixel global view and 2 x 2 crops
    of 504 (the processor's rule, tested above), both sizes walked through the downsamplers
    (tests/test_tower_shapes.py traces them against transformers)."""
    path = tmp_path / "step3p7.json"
    path.write_text(json.dumps({"model_type": "step3p7", **TINY_MULTIMODAL["step3p7"]}))
    data = json.loads(check_run(["shapes", str(path), "--seq", "8", "--image", "1024x768", "--json"]).stdout)
    steps = {step["id"]: step["output"] for step in data["image"]["steps"]}
    assert steps["downsamplers_1"] == [1, 64, 1, 1] and steps["downsamplers_1@36x36"] == [4, 64, 9, 9]
    text = check_run(["flops", str(path), "--seq", "8", "--image", "1024x768"]).stdout
    assert "36x36 views: downsamplers conv 1" in text


def test_vllm_budget_takes_a_given_gemma3n_encoder_forward(tmp_path) -> None:  # noqa: ANN001
    """Gemma 3n's MobileNet forward is estimated (tests/test_encoder_forward.py) and a figure given replaces
    it; its encoder cache holds whole 256-token images at the text width (2,048)."""
    from test_towers import GEMMA3N

    path = tmp_path / "gemma3n.json"
    path.write_text(json.dumps(GEMMA3N))
    args = ["memory", str(path), "--engine", "vllm", "--budget", "H100"]
    out = json.loads(check_run([*args, "--encoder-activation-memory", "1000000", "--json"]).stdout)
    terms = {t["key"]: t for t in out["engine_budget"]["terms"]}
    assert terms["encoder_activation"]["bytes"] == 1_000_000 and terms["encoder_activation"]["how"] == "given"
    assert terms["encoder_cache"]["bytes"] % (256 * 2048 * 2) == 0 and terms["encoder_cache"]["bytes"]
