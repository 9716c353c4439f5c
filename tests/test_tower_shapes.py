"""An image through a vision tower (`shapes --image`, `flops --image`): the params column adds up to
each tower's count, the FLOPs equal a hand count from the config, and the shapes equal a torch trace
of transformers' own vision model on a tiny config."""

from __future__ import annotations

import json

import pytest

from calc.analysis.count import count
from calc.analysis.flops import tower_flops
from calc.analysis.shapes.tower import tower_journey
from calc.spec.load import load_spec
from cli_checks import check_run
from oracle import CONFIG_DIR, spec_of

MODEL_TYPES = CONFIG_DIR / "model_types"
WITH_IMAGES = ["qwen3_vl.json", "qwen3_vl_moe.json", "qwen2_5_vl.json", "qwen3_5.json", "gemma3_multimodal.json",
               "gemma4-26b-a4b.json", "llama4.json", "mistral3.json"]


@pytest.mark.parametrize("name", WITH_IMAGES)
@pytest.mark.parametrize("width, height", [(1024, 1024), (640, 480)])
def test_the_params_column_is_the_towers_count(name: str, width: int, height: int) -> None:
    spec = load_spec(str(MODEL_TYPES / name))
    walk, tokens = tower_journey(spec, width, height, 2)
    assert walk.params == count(spec).towers_total
    assert walk.steps[-1].output.sizes == (2, tokens.tokens, spec.d_model)  # at the decoder's width


def test_qwen3_vl_flops_by_hand() -> None:
    """Qwen3-VL-4B's tower on a 1024x1024 image, from its config (tests/configs/model_types/qwen3_vl.json:
    depth 24, hidden 1024, 16 heads, intermediate 4096, patch 16, temporal 2, merge 2, out 2560,
    3 DeepStack mergers): 64 x 64 = 4096 patches, 1024 merged tokens."""
    p, d, ff, m, out, layers = 4096, 1024, 4096, 1024, 2560, 24
    patch = 2 * p * (3 * 2 * 16 * 16) * d
    layer = 2 * p * d * 3 * d + 2 * p * d * d + 2 * 2 * p * p * d + 2 * 2 * p * d * ff  # QKV, O, QKᵀ and A·V, MLP
    merger = 2 * m * (4 * d) * (4 * d) + 2 * m * (4 * d) * out
    expected = patch + layers * layer + 4 * merger  # the merger and 3 DeepStack mergers
    f = tower_flops(load_spec(str(MODEL_TYPES / "qwen3_vl.json")), 1024, 1024)
    assert f.forward == expected == 4_359_391_805_440


def test_the_cli_walks_an_image_then_the_text() -> None:
    path = str(MODEL_TYPES / "qwen3_vl.json")
    data = json.loads(check_run(["shapes", path, "--seq", "1100", "--image", "1024x1024", "--json"]).stdout)
    assert data["image"]["per_image"]["tokens"] == 1026 and data["image"]["params"] == 415_347_712
    assert data["params"] == count(load_spec(path)).decoder_total
    flops = json.loads(check_run(["flops", path, "--seq", "1100", "--image", "1024x1024", "--json"]).stdout)
    assert flops["image"]["forward"] == 4_359_391_805_440 and flops["image"]["per"] == "patch"
    text = check_run(["shapes", path, "--seq", "8", "--image", "640x480", "--images", "3"]).stdout
    assert "merge 4 patches -> 1" in text and "3 images of 640x480" in text


def test_a_model_without_a_vision_tower_refuses_an_image() -> None:
    result = check_run(["shapes", "gpt2-small", "--seq", "8", "--image", "64x64"])
    assert result.exit_code == 2 and "has no vision tower" in result.stderr


# --- against a torch trace of transformers' own vision model -----------------------------------------

TINY_QWEN3_VL = {
    "model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
    "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000,
                    "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}},
    "vision_config": {"model_type": "qwen3_vl", "depth": 3, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2,
                      "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
                      "num_position_embeddings": 64, "deepstack_visual_indexes": [0, 2]},
}


def test_qwen3_vl_steps_are_a_torch_trace() -> None:
    """A 320 x 256 image (20 x 16 patches of 16; the processor keeps it, a multiple of 32) through a tiny
    Qwen3VLVisionModel: each hooked module's output holds as many rows, as wide, as our step says
    (transformers packs an image's patches as [P, width], we show [B, P, width] with B = 1)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**{k: v for k, v in TINY_QWEN3_VL.items() if k != "architectures"})
    torch.manual_seed(0)
    visual = transformers.Qwen3VLForConditionalGeneration(config).model.visual.eval()
    walk, tokens = tower_journey(spec_of(TINY_QWEN3_VL), 320, 256)
    grid = torch.tensor([[1, tokens.height // 16, tokens.width // 16]])
    seen: dict[str, tuple[int, ...]] = {}
    modules = {"patch_embed": visual.patch_embed, "mlp_residual": visual.blocks[0], "merger_1": visual.merger,
               "deepstack_mergers_1": visual.deepstack_merger_list[0]}

    def hook(name: str):  # noqa: ANN202
        def record(_module, _inputs, out) -> None:  # noqa: ANN001
            seen.setdefault(name, tuple(out.shape))
        return record

    for name, module in modules.items():
        module.register_forward_hook(hook(name))
    with torch.no_grad():
        visual(torch.zeros(int(grid.prod()), 3 * 2 * 16 * 16), grid_thw=grid)
    ours = {step.id: step.output.sizes for step in walk.steps}
    for name, shape in seen.items():
        assert (ours[name][0] * ours[name][1], ours[name][2]) == shape, name
    assert seen["merger_1"] == (tokens.image_tokens, 64) == (80, 64)
