"""SGLang's absorbed-MLA copies of kv_b_proj: the `w_kc` / `w_vc` that its MLA decode multiplies by.

After loading, DeepseekV2WeightLoaderMixin.post_load_weights (python/sglang/srt/models/deepseek_common/
deepseek_weight_loader.py, read at sgl-project/sglang@0201c04e983820f371aedd97154d07453badd814, the version the
index stores; models/deepseek_v2.py's post_load_weights before it moved there) takes each MLA layer's
kv_b_proj weight `w` (this GPU's attention-TP shard: kv_b_proj is a ColumnParallelLinear over the attention-TP
group), splits it per head into its K rows (qk_nope_head_dim) and V rows (v_head_dim), and keeps

    w_kc = w_kc.transpose(1, 2).contiguous().transpose(1, 2)     a copy of the K rows
    w_vc = w_vc.contiguous().transpose(1, 2)                      a copy of the V rows

beside kv_b_proj, whose own weight stays: the prefill's MHA path still multiplies by it (`kv = self.kv_b_proj(kv_a)`,
models/deepseek_common/attention_forward_methods/forward_mha.py). Together the two copies
hold every value of kv_b's shard once more, in the dtype `w` has by then:

- a block-quantised FP8 kv_b (128 x 128 blocks, CUDA: DeepSeek-V3's checkpoints) is dequantised to bfloat16 first
  (block_quant_dequant(..., torch.bfloat16)): 2 B a value beside the FP8 weight;
- a per-tensor or per-channel FP8 kv_b is requantised to one FP8 tensor (channel_quant_to_tensor_quant): 1 B;
- a 16-bit kv_b (bf16 checkpoints: GLM-4.7-Flash, DeepSeek-V2) is copied as it is: 2 B, the same bytes again;
- AWQ and int8 kv_b are dequantised to bfloat16: 2 B.
Other schemes (GPTQ, bitsandbytes NF4, NVFP4, MXFP4 kv_b) are not read there and are counted at 2 B as well.

The temporaries (the dequantised `w`) are freed before SGLang reads its free memory (get_available_gpu_memory
empties the CUDA cache first). A shard of one head (attention-TP size = the head count) is not modelled: there
`w_vc` is already contiguous, so `.contiguous()` keeps a view, of kv_b_proj's weight (a 16-bit kv_b: the V rows are
not copied) or of the dequantised `w` (which then stays alive whole).
Which models SGLang builds this way is the adapter's to state (`SglangBuild.mla_kv_b_copy`): deepseek_v2.py's
classes (DeepSeek-V2 / V3 / V3.2, Kimi-K2 and K2.5's text model, GLM-5), GLM-4.7-Flash's glm4_moe_lite.py,
which reuses the mixin, LongCat-Flash, whose LongcatFlashForCausalLM.post_load_weights (models/longcat_flash.py,
read at sgl-project/sglang@01f67c3454bef5a2bf4bad57e739a3411d54b3d2, the version the index stores) repeats the same
dequantising, requantising and copying for both MLA layers of each of its layers, and Kimi-Linear, whose
KimiLinearForCausalLM.post_load_weights (models/kimi_linear.py at sgl-project/sglang@0220422fc0009bb4316f8a540e777d85dce156f3;
every version the index stores does the same) splits `self_attn.kv_b_proj.weight` of each full-attention layer and
keeps w_kc and w_vc made contiguous as above, without dequantising or requantising first: an FP8 kv_b is copied in
FP8, 1 B a value (`SglangBuild.mla_kv_b_as_stored`).
"""

from __future__ import annotations

from calc.analysis.memory.weights import Weights
from calc.spec.model import ModelSpec

__all__ = ["KV_B_COPY", "SOURCE", "kv_b_copy"]

KV_B_COPY = "MLA's w_kc/w_vc copy of kv_b_proj"
SOURCE = ("https://github.com/sgl-project/sglang/blob/0201c04e983820f371aedd97154d07453badd814/python/sglang/srt/"
          "models/deepseek_common/deepseek_weight_loader.py (post_load_weights: kv_b_proj dequantised (block FP8 to "
          "bf16) or requantised (FP8 per tensor), split into w_kc and w_vc, each made contiguous, kv_b_proj kept); "
          "LongCat-Flash's own post_load_weights does the same (models/longcat_flash.py at 01f67c3454be), Kimi-Linear's "
          "of kv_b_proj's weight as stored (models/kimi_linear.py at 0220422fc000)")
REQUANTISED = ("fp8", "fp8-channel")  # schemes whose kv_b SGLang turns into one per-tensor FP8 matrix
FP8 = (*REQUANTISED, "fp8-block")  # every FP8 kv_b: what a copy as stored keeps at 1 B


def kv_b_copy(spec: ModelSpec, weights: Weights) -> int:
    """The bytes of w_kc and w_vc on this GPU: every value of its kv_b share once more, 1 B each where SGLang
    requantises an FP8 kv_b per tensor (or copies any FP8 kv_b as stored), else 2 B (bfloat16 after dequantising,
    or the 16-bit weight copied)."""
    values = weights.params.get("kv_b", 0)
    if not spec.sglang.mla_kv_b_copy or not values:
        return 0
    one_byte = FP8 if spec.sglang.mla_kv_b_as_stored else REQUANTISED
    return values * (1 if weights.scheme is not None and weights.scheme.name in one_byte else 2)
