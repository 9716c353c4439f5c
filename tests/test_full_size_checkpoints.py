"""Real checkpoint layouts at full size, as sparse files: `verify --checkpoint` reads headers only.

Each file is written as its publisher stores it (header written, file truncated to its full length,
no data written, so a 1.3 TB DeepSeek-V3 costs a few megabytes of header): every tensor must be
recognised, the parameters counted from it must equal the preset's analytic total (DeepSeek-V3's MTP
layer beside it, quantisation scales set apart, never counted), and the header check must be fast.

Layouts:
- Mixtral-8x7B and Qwen3-30B-A3B: BF16, one tensor per expert, the names of their
  model.safetensors.index.json (https://huggingface.co/mistralai/Mixtral-8x7B-v0.1,
  https://huggingface.co/Qwen/Qwen3-30B-A3B).
- DeepSeek-V3: every linear weight in F8_E4M3 with a float32 `weight_scale_inv`, one per 128x128
  block; embeddings, norms, routers and the heads in BF16
  (https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md), with the MTP layer 61.
- gpt-oss-20b: the experts' `gate_up_proj_blocks` [E, 2I, H/32, 16] and `down_proj_blocks`
  [E, H, I/32, 16] in U8 with `*_scales` [..., H/32] U8 beside them, everything else BF16
  (https://huggingface.co/openai/gpt-oss-20b model.safetensors.index.json; read by
  https://github.com/huggingface/transformers/blob/main/src/transformers/integrations/mxfp4.py and
  https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/models/gpt_oss.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from calc.analysis.count import count
from calc.checkpoint.names import tensor_table
from calc.checkpoint.quant import MXFP4_BLOCK, MXFP4_BYTES, fp8_block_scale_shape
from calc.checkpoint.report import read_checkpoint
from calc.spec.load import load_spec
from checkpoint_files import Layout, header_bytes, write_safetensors

BOUND = 10.0  # seconds: generous on a loaded 2-core machine; the check itself takes well under a second


def bf16(preset: str, mtp: bool = False) -> Layout:
    """Every tensor of the preset as the Hub stores it (one per expert), in BF16."""
    shapes = tensor_table(load_spec(preset)).expected_shapes(hub=True, buffers=True, mtp=mtp)
    return {name: ("BF16", shape) for name, shape in shapes.items()}


def fp8_blocks(layout: Layout) -> Layout:
    """DeepSeek-V3's FP8: each projection's weight (attention's, kv_a_proj_with_mqa's too, the dense
    MLP's, the experts' and shared experts') in F8_E4M3 followed by its block scale; the MTP layer's
    eh_proj stays BF16 as stored."""
    out: Layout = {}
    for name, (dtype, shape) in layout.items():
        if "_proj" in name and name.endswith(".weight") and not name.endswith("eh_proj.weight"):
            out[name] = ("F8_E4M3", shape)
            out[name + "_scale_inv"] = ("F32", fp8_block_scale_shape(shape))
        else:
            out[name] = (dtype, shape)
    return out


def mxfp4_experts(layout: Layout) -> Layout:
    """gpt-oss's MXFP4: the fused expert weights (transformers' [E, in, out]) as OpenAI stores them,
    [E, out, in/32, 16] bytes plus one E8M0 scale per 32 values."""
    out: Layout = {}
    for name, (dtype, shape) in layout.items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            experts, width, rows = shape
            groups = width // MXFP4_BLOCK
            out[name + "_blocks"] = ("U8", (experts, rows, groups, MXFP4_BYTES))
            out[name + "_scales"] = ("U8", (experts, rows, groups))
        else:
            out[name] = (dtype, shape)
    return out


def gpt_oss(preset: str) -> Layout:
    shapes = tensor_table(load_spec(preset)).expected_shapes(buffers=True)
    return mxfp4_experts({name: ("BF16", shape) for name, shape in shapes.items()})


# (preset, layout, how many quantisation companions the layout stores)
CASES = {
    "mixtral-8x7b": (lambda: bf16("mixtral-8x7b"), 0),
    "qwen3-30b-a3b": (lambda: bf16("qwen3-30b-a3b"), 0),
    # 61 layers x 5 attention projections + 3 dense x 3 + 58 MoE x (256 + 1 shared) x 3 + MTP's 5 + 256 x 3 + 3
    "deepseek-v3": (lambda: fp8_blocks(bf16("deepseek-v3", mtp=True)), 61 * 5 + 3 * 3 + 58 * 257 * 3 + 5 + 257 * 3),
    "gpt-oss-20b": (lambda: gpt_oss("gpt-oss-20b"), 24 * 2),  # source: config.json, 24 layers
}


@pytest.fixture(scope="module", params=list(CASES))
def checked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(preset, layout, the sparse file, its report, seconds the header check took); each file written once."""
    preset = request.param
    layout = CASES[preset][0]()
    path = write_safetensors(tmp_path_factory.mktemp(preset) / "model.safetensors", layout)
    start = time.perf_counter()
    report = read_checkpoint(str(path), load_spec(preset))
    elapsed = time.perf_counter() - start
    print(f"\n{preset}: {len(layout):,} tensors, {path.stat().st_size / 1e9:,.1f} GB sparse, "
          f"header check {elapsed:.3f} s")
    return preset, layout, path, report, elapsed


def test_full_size_checkpoint_headers(checked: tuple) -> None:
    preset, layout, path, report, elapsed = checked
    header, data = header_bytes(layout)
    assert path.stat().st_size == len(header) + data
    # sparse: only the header's blocks are allocated (plus rounding)
    assert os.stat(path).st_blocks * 512 <= len(header) + 65536, "the data must be truncated, never written"
    assert report.ok, ([t.name for t in report.unknown[:3]], [m.describe() for m in report.mismatches[:3]])
    analytic = count(load_spec(preset))
    assert report.breakdown.total == analytic.total
    assert report.breakdown.extra == {k: v for k, v in analytic.extra.items() if k.startswith("mtp")}
    assert len(report.companions) == CASES[preset][1]
    assert elapsed < BOUND, elapsed


def test_quantisation_companions_are_named_and_not_counted(checked: tuple) -> None:
    """Each scale is set apart under its scheme, beside the weight it qualifies: DeepSeek-V3's
    weight_scale_inv one float per 128x128 block of an F8_E4M3 weight, gpt-oss's one E8M0 per 32 values."""
    preset, layout, _, report, _ = checked
    scales = {c.tensor.name: c for c in report.companions}
    if preset == "deepseek-v3":
        q_a = scales["model.layers.0.self_attn.q_a_proj.weight_scale_inv"]
        # source: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (q_lora_rank 1536, hidden 7168)
        assert q_a.base == "model.layers.0.self_attn.q_a_proj.weight" and q_a.tensor.shape == (12, 56)
        assert all(layout[c.base][0] == "F8_E4M3" and "128x128 block" in c.scheme for c in report.companions)
    elif preset == "gpt-oss-20b":
        down = scales["model.layers.23.mlp.experts.down_proj_scales"]
        # source: https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json (32 experts, hidden 2880)
        assert down.base == "model.layers.23.mlp.experts.down_proj" and down.tensor.shape == (32, 2880, 90)
        assert all("E8M0" in c.scheme for c in report.companions)
    else:
        assert not scales
