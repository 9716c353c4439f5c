"""SGLang's w_kc / w_vc: the second copy of an MLA layer's kv_b_proj shard that post_load_weights keeps beside it
(calc/analysis/memory/sglang_mla.py; python/sglang/srt/models/deepseek_common/deepseek_weight_loader.py at
sgl-project/sglang@0201c04e983820f371aedd97154d07453badd814: a block-FP8 kv_b dequantised to bf16, a per-tensor or
per-channel FP8 one requantised to FP8, a 16-bit one copied by .contiguous(); kv_b_proj itself kept).
Shapes: DeepSeek-V3's config.json (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json: 61 layers,
128 heads, kv_lora_rank 512, qk_nope_head_dim 128, v_head_dim 128) and GLM-4.7-Flash's
(https://huggingface.co/zai-org/GLM-4.7-Flash/blob/main/config.json: 47 layers, 20 heads, kv_lora_rank 512,
qk_nope_head_dim 192, v_head_dim 256)."""

from __future__ import annotations

import pytest

import calc
from calc.analysis.memory.gpus import find_gpu
from calc.analysis.memory.parallel import Layout
from calc.analysis.memory.sglang_draft import draft_weights
from calc.analysis.memory.sglang_mla import kv_b_copy
from calc.analysis.memory.startup import engine_extra_weights

KV_B_V3 = 61 * 128 * (128 + 128) * 512  # DeepSeek-V3's kv_b_proj values, every layer, whole
KV_B_GLM_FLASH = 47 * 20 * (192 + 256) * 512
# Kimi-Linear-48B-A3B's config.json (presets/kimi-linear-48b-a3b.yaml: full_attn_layers 4, 8, 12, 16, 20, 24, 27 are
# MLA, 32 heads, kv_lora_rank 512, qk_nope_head_dim 128, v_head_dim 128) and LongCat-Flash-Chat's
# (presets/longcat-flash.yaml: num_layers 28, each with two MLA layers, 64 heads, kv_lora_rank 512, 128 + 128)
KV_B_KIMI_LINEAR = 7 * 32 * (128 + 128) * 512
KV_B_LONGCAT = 28 * 2 * 64 * (128 + 128) * 512


def weights(model: str, tp: int = 1, **kwargs: object) -> tuple[calc.ModelSpec, object]:
    spec = calc.load(model)
    return spec, calc.memory(spec, seq=4096, tp=tp, engine="sglang", kv_memory="10GiB", **kwargs).inference.weights


@pytest.mark.parametrize(("quant", "dtype", "each"), [
    (None, None, 2),  # as stored: fp8-block (weight_block_size [128, 128]) dequantised to bf16
    (None, "bf16", 2),  # a bf16 kv_b: .contiguous() copies the per-head K and V slices
    ("fp8-channel", None, 1),  # channel_quant_to_tensor_quant: one FP8 tensor
    ("fp8", None, 1),
])
def test_deepseek_v3_copy_per_gpu(quant: str | None, dtype: str | None, each: int) -> None:
    spec, held = weights("deepseek-v3", tp=8, quant=quant, dtype=dtype)
    assert kv_b_copy(spec, held) == KV_B_V3 // 8 * each  # kv_b_proj is a ColumnParallelLinear: split 8 ways


def test_same_bytes_as_vllms_dequantised_copy() -> None:
    """vLLM's W_UK_T / W_UV of the FP8 checkpoint (v1/attention/backends/mla/common.py) is the same bf16 matrix:
    255,852,544 B a GPU at tp 8 (docs/memory.md's vLLM weights row)."""
    spec, held = weights("deepseek-v3", tp=8)
    vllm = dict(engine_extra_weights("vllm", spec, held, find_gpu("H200"), 8))
    sglang = dict(engine_extra_weights("sglang", spec, held, find_gpu("H200"), 8))
    assert vllm["MLA's dequantised W_UK/W_UV copy"] == sglang["MLA's w_kc/w_vc copy of kv_b_proj"] == 255_852_544


def test_bf16_checkpoint_copied_too() -> None:
    """GLM-4.7-Flash ships kv_b_proj in bf16 (glm4_moe_lite.py runs the same post_load_weights): SGLang holds it
    twice, vLLM (which copies only a quantised kv_b) once."""
    spec, held = weights("glm-4.7-flash")
    assert kv_b_copy(spec, held) == KV_B_GLM_FLASH * 2 == 431_226_880
    assert not any("W_UK" in what for what, _ in engine_extra_weights("vllm", spec, held, find_gpu("H100"), 1))


def test_mtp_draft_layer_copied() -> None:
    """The MTP draft's post_load_weights(is_nextn=True) splits its one layer's kv_b too: 128 x 256 x 512 / 8 x 2 B."""
    spec, held = weights("deepseek-v3", tp=8)
    draft = draft_weights(spec, held, Layout(tp=8), None)
    assert draft.own is not None
    assert draft.own == 1_661_046_944 + 128 * 256 * 512 // 8 * 2  # docs/memory.md's draft before the copy


def test_none_without_mla() -> None:
    spec, held = weights("llama-3.1-8b")
    assert kv_b_copy(spec, held) == 0


@pytest.mark.parametrize(("quant", "each"), [(None, 2), ("fp8-block", 2), ("fp8-channel", 1), ("fp8", 1)])
def test_longcat_flash_copies_as_deepseek_does(quant: str | None, each: int) -> None:
    """LongcatFlashForCausalLM.post_load_weights (models/longcat_flash.py at sgl-project/sglang@01f67c34) runs
    deepseek's dequantise / requantise / copy for both MLA layers of each layer: bf16 as published, a 128 x 128
    block-FP8 kv_b dequantised to bf16, a per-channel or per-tensor one requantised to FP8."""
    spec, held = weights("longcat-flash", quant=quant)
    assert kv_b_copy(spec, held) == KV_B_LONGCAT * each


@pytest.mark.parametrize(("quant", "each"), [(None, 2), ("fp8-block", 1), ("fp8-channel", 1), ("fp8", 1)])
def test_kimi_linear_copies_its_kv_b_as_stored(quant: str | None, each: int) -> None:
    """KimiLinearForCausalLM.post_load_weights (models/kimi_linear.py at sgl-project/sglang@0220422f) splits each
    full-attention layer's kv_b_proj.weight into w_kc and w_vc, each made contiguous, with no dequantising: its
    bf16 kv_b once more, 58,720,256 B; an FP8 one, block-scaled too, in FP8 (where DeepSeek-V3's is bf16)."""
    spec, held = weights("kimi-linear-48b-a3b", quant=quant)
    assert kv_b_copy(spec, held) == KV_B_KIMI_LINEAR * each
    assert KV_B_KIMI_LINEAR * 2 == 58_720_256
