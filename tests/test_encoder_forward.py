"""vLLM's profiling forward through Gemma 3n's MobileNet-v5 (calc/analysis/memory/convnet.py): the peak
of live feature maps along the shapes journey, against a peak measured on timm's encoder.

Facts: vLLM's profile_run encodes mm_budget.mm_max_items_per_batch dummy images of the largest size in
one batch (vllm 0.32 vllm/v1/worker/gpu_model_runner.py profile_run -> _get_mm_dummy_batch ->
model.embed_multimodal), and Gemma 3n runs its timm vision tower on all of them at once
(vllm/model_executor/models/gemma3n_mm.py _process_image_input: self.vision_tower(pixel_values=...)).
The measured peaks (tests/data/mobilenet_live_peak.json) are timm 1.0.31's mobilenetv5_300m_enc in
bfloat16 at one image, tracked with tests/live_memory.py; re-measured here where timm is installed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from calc.analysis.memory.convnet import conv_peak
from calc.analysis.memory.encoder import encoder_profile
from calc.analysis.shapes.mobilenet import mobilenet_journey
from cli_checks import check_run
from oracle import spec_of

FIXTURE = json.loads((Path(__file__).parent / "data" / "mobilenet_live_peak.json").read_text())


def _tower():  # noqa: ANN202
    from test_towers import GEMMA3N

    return spec_of(GEMMA3N).towers["vision"]


def _rule(side: int, images: int = 1) -> int:
    tower = _tower()
    item = replace(tower.images.largest(), width=side, height=side)
    return conv_peak(mobilenet_journey("gemma3n", tower, item, images), FIXTURE["dtype_bytes"], tower.fused_maps)


@pytest.mark.parametrize("side", sorted(FIXTURE["peak_bytes_by_side"], key=int))
def test_the_rule_is_the_measured_peak(side: str) -> None:
    """The rule's peak, less the pixels (the measurement leaves the input out), is the measured one to the
    byte: at block 2.1's expand conv, its input held for the residual and the block's depthwise output beside
    three 768-channel maps of its output size and their mean square (at 768: 768 x 192 x 192 each)."""
    pixels = 3 * int(side) ** 2 * FIXTURE["dtype_bytes"]
    assert _rule(int(side)) - pixels == FIXTURE["peak_bytes_by_side"][side]


def test_the_peak_grows_with_the_images_batched() -> None:
    """Every map carries the batch, so the peak of N images at once is N times one image's."""
    assert _rule(768, 32) == 32 * _rule(768)


def test_vllm_profiles_gemma3n_with_the_estimate(tmp_path) -> None:  # noqa: ANN001
    """memory --engine vllm answers without --encoder-activation-memory: the encoder term is the estimate for
    the 32 images of 256 embeddings vLLM's default 8,192-token budget profiles, less the decoder's forward."""
    from test_towers import GEMMA3N

    path = tmp_path / "gemma3n.json"
    path.write_text(json.dumps(GEMMA3N))
    data = json.loads(check_run(["memory", str(path), "--engine", "vllm", "--budget", "H100", "--json"]).stdout)
    terms = {t["key"]: t for t in data["engine_budget"]["terms"]}
    forward = encoder_profile(spec_of(GEMMA3N), 8192, 1024, 32768).forward_bytes
    assert forward == 32 * _rule(768) and terms["encoder_activation"]["how"] == "estimate"
    assert f"{forward:,} B" in terms["encoder_activation"]["source"]


def measure(side: int) -> int:
    """timm's encoder on one random image: the peak of live activations (weights and input left out)."""
    torch, timm = pytest.importorskip("torch"), pytest.importorskip("timm")
    from live_memory import Live

    model = timm.create_model(FIXTURE["model"], pretrained=False).to(torch.bfloat16).eval()
    x = torch.randn(1, 3, side, side, dtype=torch.bfloat16)
    with torch.no_grad(), Live(x, *model.parameters()) as live:
        model(x)
    return live.peaks[""]


def test_the_fixture_is_timms_peak() -> None:
    """Where timm is installed: the 256 x 256 measurement again (about 10 s on CPU)."""
    assert measure(256) == FIXTURE["peak_bytes_by_side"]["256"]
