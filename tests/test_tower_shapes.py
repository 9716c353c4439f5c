"""An image through a vision tower (`shapes --image`, `flops --image`): the params column adds up to
each tower's count, the FLOPs equal a hand count from the config, and the shapes equal a torch trace
of transformers' own vision model on a tiny config."""

from __future__ import annotations

import json
import math

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


@pytest.mark.parametrize("outer", [{}, {"vision_feature_layer": [-2, -5]}], ids=["one-layer", "two-taps"])
def test_llava_onevision_views_and_taps(outer: dict) -> None:
    """LLaVA-OneVision's tower (tests/test_towers.py's config): a 1024 x 1024 image is the base view
    and the 3 x 3 tiles of its 1152-pixel canvas, 10 views of 27 x 27 patches, every patch a feature;
    two tapped layers are concatenated before the projector."""
    from test_towers import LLAVA_ONEVISION

    spec = spec_of({**LLAVA_ONEVISION, **outer})
    walk, tokens = tower_journey(spec, 1024, 1024)
    assert tokens.views == 10 and walk.batch == 10 and walk.seq == 27 * 27
    assert walk.params == count(spec).towers_total
    assert ("taps" in [step.id for step in walk.steps]) == bool(outer)


def test_internvl_tiles_and_thumbnail() -> None:
    """InternVL (tests/test_towers.py's config, InternViT-300M): a 1024 x 1024 image is 3 x 3 tiles of
    448 and a thumbnail, 10 views of 32 x 32 patches with a class token, 256 tokens each."""
    from test_towers import INTERNVL

    spec = spec_of(INTERNVL)
    walk, tokens = tower_journey(spec, 1024, 1024)
    assert (walk.batch, walk.seq, tokens.image_tokens, tokens.tokens) == (10, 32 * 32 + 1, 2560, 2562)
    assert walk.params == count(spec).towers_total


def test_a_tower_without_an_image_rule_refuses_an_image() -> None:
    """LLaVA-OneVision without an anyres_max_N aspect mode has no image rule here: --image says so
    rather than guess."""
    from calc.errors import GptcalcError
    from test_towers import LLAVA_ONEVISION

    with pytest.raises(GptcalcError, match="how siglip turns an image into tokens is not modelled yet"):
        tower_journey(spec_of({**LLAVA_ONEVISION, "vision_aspect_ratio": "pad"}), 1024, 1024)


KIMI_K25 = {"model_type": "kimi_k25", "vision_config": {},  # MoonViT with its config class's defaults
            "text_config": {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000}}


@pytest.mark.parametrize("width, height", [(1024, 1024), (640, 480), (9000, 300), (30, 20), (4000, 3000)])
def test_moonvit_image_tokens_are_navit_resize(width: int, height: int) -> None:
    """Kimi-K2.5's rule (NavitImages) against transformers' own navit_resize, read out of
    models/kimi_k25/image_processing_kimi_k25.py (the module itself needs torchvision, not installed
    here) with the processor's defaults: patch 14, merge 2, 16384 patches, 512 a side."""
    import ast
    import importlib.util
    import math as math_module
    from pathlib import Path

    spec_file = importlib.util.find_spec("transformers.models.kimi_k25")
    if spec_file is None:
        pytest.skip("transformers without kimi_k25")
    source = (Path(spec_file.origin).parent / "image_processing_kimi_k25.py").read_text()
    function = next(node for node in ast.parse(source).body if getattr(node, "name", "") == "navit_resize")
    scope = {"math": math_module}
    exec(compile(ast.Module([function], []), "navit_resize", "exec"), scope)  # noqa: S102 - transformers' own code
    _, (pad_h, pad_w) = scope["navit_resize"](height, width, patch_size=14, merge_kernel_size=2, max_patches=16384,
                                              max_size_per_side=512)
    walk, tokens = tower_journey(spec_of(KIMI_K25), width, height)
    assert (tokens.height, tokens.width) == (pad_h, pad_w)
    assert tokens.patches == (pad_h // 14) * (pad_w // 14) == 4 * tokens.image_tokens == walk.seq
    assert walk.params == count(spec_of(KIMI_K25)).towers_total


@pytest.mark.parametrize("width, height", [(1024, 1024), (640, 480), (2000, 300)])
def test_qwen2_5_vl_window_attention_is_transformers_windows(width: int, height: int) -> None:
    """Qwen2.5-VL's window layers (28 of 32: fullatt_block_indexes 7, 15, 23, 31) attend within the
    windows transformers' get_vision_window_index cuts: their scores cost 2·h·d_head·Σ len² a layer,
    len each window's patches (the steps of cu_window_seqlens); the full layers T²."""
    torch = pytest.importorskip("torch")
    vision_utils = pytest.importorskip("transformers.vision_utils")
    spec = load_spec(str(MODEL_TYPES / "qwen2_5_vl.json"))
    walk, tokens = tower_journey(spec, width, height)
    grid = torch.tensor([[1, tokens.height // 14, tokens.width // 14]])
    _, cu = vision_utils.get_vision_window_index(grid, spatial_merge_size=2, window_size=112, patch_size=14)
    lengths = [b - a for a, b in zip(cu.tolist(), cu.tolist()[1:])]  # in patches (merged tokens x merge²)
    scores = {step.block: step.flops for step in walk.steps if step.id == "scores"}
    assert walk.layers == {"vision": 4, "vision window": 28}
    assert scores["vision window"] == 2 * 16 * 80 * sum(n * n for n in lengths)
    assert scores["vision"] == 2 * 16 * 80 * tokens.patches ** 2


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
    import calc

    assert calc.flops(load_spec(path), seq=1100, image="1024x1024").to_dict()["image"] == flops["image"]
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
    torch, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**{k: v for k, v in TINY_QWEN3_VL.items() if k != "architectures"})
    torch.manual_seed(0)
    visual = transformers.Qwen3VLForConditionalGeneration(config).model.visual.eval()
    walk, tokens = tower_journey(spec_of(TINY_QWEN3_VL), 320, 256)
    grid = torch.tensor([[1, tokens.height // 16, tokens.width // 16]])
    modules = {"patch_embed": visual.patch_embed, "mlp_residual": visual.blocks[0], "merger_1": visual.merger,
               "deepstack_mergers_1": visual.deepstack_merger_list[0]}
    seen = traced(modules, lambda: visual(torch.zeros(int(grid.prod()), 3 * 2 * 16 * 16), grid_thw=grid))
    ours = {step.id: step.output.sizes for step in walk.steps}
    for name, shape in seen.items():
        assert (ours[name][0] * ours[name][1], ours[name][2]) == shape, name
    assert seen["merger_1"] == (tokens.image_tokens, 64) == (80, 64)


TINY_GEMMA3 = {
    "model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "mm_tokens_per_image": 16,
    "text_config": {"model_type": "gemma3_text", "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
                    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 24, "vocab_size": 300},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 48,
                      "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 64, "patch_size": 8,
                      "vision_use_head": False},
}


def test_gemma3_steps_are_a_torch_trace() -> None:
    """Gemma 3's SigLIP tower and its pooling projector, tiny: a 64-pixel image is 8 x 8 patches of 8;
    the projector averages 2 x 2 of them into 16 tokens at the text width 48. Each hooked module's
    output has our step's shape exactly."""
    torch, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**{k: v for k, v in TINY_GEMMA3.items() if k != "architectures"})
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config).model.eval()
    walk, tokens = tower_journey(spec_of(TINY_GEMMA3), 500, 300)
    vision = model.vision_tower
    modules = {"positions": vision.embeddings, "post_norm": vision.post_layernorm,
               "projector_0": model.multi_modal_projector}
    seen = traced(modules, lambda: model.get_image_features(pixel_values=torch.zeros(1, 3, 64, 64)))
    ours = {step.id: step.output.sizes for step in walk.steps}
    assert seen == {name: ours[name] for name in modules} and seen["projector_0"] == (1, 16, 48)
    assert (tokens.width, tokens.height, tokens.image_tokens) == (64, 64, 16)


TINY_LLAMA4 = {
    "model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
    "text_config": {"model_type": "llama4_text", "hidden_size": 48, "intermediate_size": 64, "intermediate_size_mlp": 96,
                    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 24,
                    "vocab_size": 300, "num_local_experts": 2},
    "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 32, "num_hidden_layers": 2,
                      "num_attention_heads": 2, "intermediate_size": 128, "image_size": 56, "patch_size": 14,
                      "vision_output_dim": 40, "projector_input_dim": 40, "projector_output_dim": 40},
}


def test_llama4_steps_are_a_torch_trace() -> None:
    """Llama 4's tower, tiny: a 100 x 60 image on 56-pixel tiles goes to the 2 x 2 canvas (the least
    upscaling), 4 tiles and a global view: 5 views of 4 x 4 patches plus the class token (appended;
    dropped before the adapter); the adapter's pixel shuffle makes 4 patches one 4·32 row, the
    projector takes it to the text width 48. transformers keeps a chunk axis of 1 in the encoder
    ([views, 1, T, d]): compared as rows x width."""
    torch, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**{k: v for k, v in TINY_LLAMA4.items() if k != "architectures"})
    torch.manual_seed(0)
    model = transformers.Llama4ForConditionalGeneration(config).eval()
    walk, tokens = tower_journey(spec_of(TINY_LLAMA4), 100, 60)
    vision = model.vision_model
    modules = {"patch_embed": vision.patch_embedding, "pre_norm": vision.layernorm_pre,
               "post_norm": vision.layernorm_post, "adapter_1": vision.vision_adapter}
    seen = traced(modules, lambda: model.multi_modal_projector(vision(torch.zeros(tokens.views, 3, 56, 56)).last_hidden_state))
    ours = {step.id: step.output.sizes for step in walk.steps}
    for name, shape in seen.items():
        assert (math.prod(shape[:-1]), shape[-1]) == (math.prod(ours[name][:-1]), ours[name][-1]), name
    assert seen["adapter_1"] == (5, 4, 40) and ours["projector_0"] == (5, 4, 48) and tokens.image_tokens == 20


def traced(modules: dict, run) -> dict[str, tuple[int, ...]]:  # noqa: ANN001
    """The output shape of each named module, from forward hooks, after `run()` without gradients."""
    import torch

    seen: dict[str, tuple[int, ...]] = {}

    def hook(name: str):  # noqa: ANN202
        def record(_module, _inputs, out) -> None:  # noqa: ANN001
            seen.setdefault(name, tuple((out[0] if isinstance(out, tuple) else out).shape))
        return record

    for name, module in modules.items():
        module.register_forward_hook(hook(name))
    with torch.no_grad():
        run()
    return seen


def test_minimax_m3_flops_by_hand() -> None:
    """MiniMax-M3's tower on a 672x672 image (tests/configs/model_types/minimax_m3_vl.json: 32 layers of 1280,
    intermediate 5120, patch 14, temporal 2, merge 2, projector and text width 6144): 48 x 48 = 2304 patches,
    each projected 1280 -> 6144 -> 6144, then 4 side by side: 576 tokens through 24576 -> 6144 -> 6144."""
    p, d, ff, w, m, layers = 2304, 1280, 5120, 6144, 576, 32
    patch = 2 * p * (3 * 2 * 14 * 14) * d
    layer = 2 * p * d * 3 * d + 2 * p * d * d + 2 * 2 * p * p * d + 2 * 2 * p * d * ff  # QKV, O, QKᵀ and A·V, MLP
    projector = 2 * p * d * w + 2 * p * w * w
    merger = 2 * m * (4 * w) * w + 2 * m * w * w
    f = tower_flops(load_spec(str(MODEL_TYPES / "minimax_m3_vl.json")), 672, 672)
    assert f.forward == patch + layers * layer + projector + merger == 4_203_387_813_888


def test_minimax_m3_steps_are_a_torch_trace() -> None:
    """A 56 x 84 image (4 x 6 patches of 14, 6 tokens) through transformers' tiny MiniMax-M3 (tests/tiny_models.py):
    the projector runs on every patch, the merger on the merged tokens."""
    torch, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    from tiny_models import TINY_MULTIMODAL

    data = {k: v for k, v in TINY_MULTIMODAL["minimax_m3_vl"].items() if k != "architectures"}
    torch.manual_seed(0)
    model = transformers.MiniMaxM3SparseForConditionalGeneration(
        transformers.AutoConfig.for_model("minimax_m3_vl", **data)).model.eval()
    walk, tokens = tower_journey(spec_of({"model_type": "minimax_m3_vl", **data}), 84, 56)
    grid = torch.tensor([[1, tokens.height // 14, tokens.width // 14]])
    projector = model.multi_modal_projector
    modules = {"patch_embed": model.vision_tower.embeddings, "mlp_residual": model.vision_tower.layers[0],
               "projector_1": projector.linear_2, "merger_1": projector.merge_linear_2}
    seen = traced(modules, lambda: model.get_image_features(torch.zeros(int(grid.prod()), 3 * 2 * 14 * 14), grid))
    ours = {step.id: step.output.sizes for step in walk.steps}
    for name, shape in seen.items():
        assert (ours[name][0] * ours[name][1], ours[name][-1]) == (math.prod(shape[:-1]), shape[-1]), name
    assert seen["projector_1"] == (24, 32) and seen["merger_1"] == (tokens.image_tokens, 32) == (6, 32)


def test_step3p7_views_and_downsamplers_are_a_torch_trace() -> None:
    """Step-3.7's tower, tiny (tests/tiny_models.py: width 16, image_size 56, patch 14): a 1008 x 504 image
    is its 56-pixel global view (4 x 4 patches) and 2 crops of 504 (36 x 36 patches; the processor's rule,
    calc/towers/images.py CropImages); each size runs the blocks, then downsampler1 and 2 (3x3, stride 2,
    padding 1: 4 -> 2 -> 1, 36 -> 18 -> 9) and the projector, as Step3p7Model.get_image_features runs them
    (modeling_step3p7.py). The shapes are the hooked modules' outputs; the FLOPs torch's FlopCounterMode
    over the whole call (eager attention), equal to the last one."""
    torch, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    from tiny_models import TINY_MULTIMODAL

    whole = {"model_type": "step3p7", **TINY_MULTIMODAL["step3p7"]}
    config = transformers.AutoConfig.for_model(**{k: v for k, v in whole.items() if k != "architectures"})
    config.vision_config._attn_implementation = "eager"  # its two matmuls, which FlopCounterMode sees
    torch.manual_seed(0)
    model = transformers.Step3p7ForConditionalGeneration(config).model.eval()
    spec = spec_of(whole)
    walk, tokens = tower_journey(spec, 1008, 504)
    assert tokens.grids == ((1, 4, 4), (2, 36, 36)) and walk.params == count(spec).towers_total
    vision = model.vision_model
    modules = {"pre_norm": vision.pre_layernorm, "downsamplers_0": vision.downsampler1,
               "downsamplers_1": vision.downsampler2, "projector_0": model.multi_modal_projector}
    ours = {step.id: step.output.sizes for step in walk.steps}
    views = {"": torch.zeros(1, 3, 56, 56), "@36x36": torch.zeros(2, 3, 504, 504)}
    for tag, pixels in views.items():
        seen = traced(modules, lambda: model.multi_modal_projector(vision(pixels).last_hidden_state))
        assert seen == {name: ours[name + tag] for name in modules}, tag
    assert ours["downsamplers_1@36x36"] == (2, 64, 9, 9) and ours["projector_0@36x36"] == (2, 81, 32)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        features = model.get_image_features(pixel_values=views[""], pixel_values_local=views["@36x36"],
                                            num_local_patches=[2]).pooler_output
    assert features[0].shape == (tokens.image_tokens, 32) == (1 + 2 * 81, 32)
    assert tower_flops(spec, 1008, 504).forward == counter.get_total_flops() == walk.flops


def test_gemma3n_mobilenet_is_timms_encoder() -> None:
    """Gemma 3n's MobileNet-v5 (tests/test_towers.py's config: E2B's text, mobilenetv5_300m_enc): every image is
    768 x 768; the stem and four stages leave 384, 192, 96, 48 and 24 a side (stride 2 each, timm's "same"
    padding), the fusion adapter pools the 48 x 48 grid of both last stages to 16 x 16, the embedder makes
    256 soft tokens at the text width 2048. The params column is the vision tower's count; the FLOPs are
    timm 1.0.31's encoder under torch's FlopCounterMode on the meta device (871,482,949,632, measured with
    timm.create_model("mobilenetv5_300m_enc")) plus the embedder's 2·256·2048·2048 projection; with timm
    installed, both are traced again and every stage's output shape compared."""
    from test_towers import GEMMA3N

    spec = spec_of(GEMMA3N)
    walk, tokens = tower_journey(spec, 1024, 768)
    vision = next(t for t in count(spec).towers if t.name == "vision")
    assert walk.params == vision.total and (tokens.width, tokens.tokens) == (768, 260)
    ours = {step.id: step.output.sizes for step in walk.steps}
    ends = [next(step.output.sizes for step in reversed(walk.steps) if step.id.startswith(f"{s}.")) for s in range(1, 5)]
    assert [ours["stem"], *ends] == [(1, 64, 384, 384), (1, 128, 192, 192), (1, 256, 96, 96), (1, 640, 48, 48),
                                     (1, 1280, 24, 24)]
    assert ours["3.10_k"] == (1, 64, 24, 24) and ours["3.10_scores"] == (1, 12, 48 * 48, 24 * 24)
    assert ours["msfa_norm"] == (1, 2048, 16, 16) and ours["image_tokens"] == (1, 260, 2048)
    projection = 2 * 256 * 2048 * 2048
    assert walk.flops == 871_482_949_632 + projection
    torch, timm = pytest.importorskip("torch"), pytest.importorskip("timm")
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        encoder = timm.create_model("mobilenetv5_300m_enc", pretrained=False)
        pixels = torch.zeros(1, 3, 768, 768)
    modules = {"stem": encoder.conv_stem, **{f"end{s}": encoder.blocks[s - 1] for s in range(1, 5)},
               "3.10_k": encoder.blocks[2][9].attn.key, "msfa_norm": encoder.msfa}
    with FlopCounterMode(display=False) as counter:
        seen = traced(modules, lambda: encoder(pixels))
    assert seen == {"stem": ours["stem"], **{f"end{s}": ends[s - 1] for s in range(1, 5)}, "3.10_k": ours["3.10_k"],
                    "msfa_norm": ours["msfa_norm"]}
    assert counter.get_total_flops() + projection == walk.flops


def test_gemma3n_fusion_adapter_follows_the_spec() -> None:
    """The fusion adapter as vision_config.model_args sets it (timm's msfa_indices, msfa_output_resolution): stages
    2 and 3 (256 @ 96 x 96 and 640 @ 48 x 48, the second upsampled to the first's grid: 896 channels) to a 20 x 20
    grid, which 96 does not divide, so a bilinear resize rather than a pool (MobileNetV5MultiScaleFusionAdapter.
    forward), and 400 soft tokens. With timm installed its encoder built with the same arguments gives the same
    shapes and, with the projection, the same FLOPs; the params column is the count's all the same."""
    from test_towers import GEMMA3N

    vision = {"model_type": "gemma3n_vision", "model_args": {"msfa_indices": [2, 3], "msfa_output_resolution": 20}}
    spec = spec_of({**GEMMA3N, "vision_config": vision, "vision_soft_tokens_per_image": 400})
    walk, tokens = tower_journey(spec, 768, 768)
    assert walk.params == next(t for t in count(spec).towers if t.name == "vision").total
    ours = {step.id: step for step in walk.steps}
    assert ours["msfa_concat"].output.sizes == (1, 896, 96, 96) and ours["msfa_pool"].label == "fusion: bilinear resize"
    assert ours["msfa_norm"].output.sizes == (1, 2048, 20, 20) and ours["image_tokens"].output.sizes == (1, 404, 2048)
    torch, timm = pytest.importorskip("torch"), pytest.importorskip("timm")
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        encoder = timm.create_model("mobilenetv5_300m_enc", pretrained=False, **vision["model_args"])
        pixels = torch.zeros(1, 3, 768, 768)
    with FlopCounterMode(display=False) as counter:
        seen = traced({"ffn": encoder.msfa.ffn, "msfa_norm": encoder.msfa}, lambda: encoder(pixels))
    assert seen == {"ffn": (1, 2048, 96, 96), "msfa_norm": (1, 2048, 20, 20)}
    assert counter.get_total_flops() + 2 * 400 * 2048 * 2048 == walk.flops
