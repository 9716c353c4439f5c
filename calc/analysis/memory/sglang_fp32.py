"""The parameters SGLang allocates in fp32 and whole on every GPU, whatever the checkpoint's dtype and the tensor-parallel
size: what they hold beyond this GPU's share of the checkpoint's tensors (`SglangBuild.fp32_whole` names them).

DeepSeek-V4 (sgl-project/sglang at 000328a8cd54, python/sglang/srt/models/deepseek_v4.py, the version sglang_dp cites):

- MQALayer's attn_sink: `nn.Parameter(torch.empty(self.n_heads, dtype=torch.float32))`, every head's (n_heads, not
  n_local_heads), though wq_b and wo_a split the heads over the attention-TP group: the whole per-head vector on every
  GPU, under plain tensor parallelism (where gptcalc's common split gives each GPU n_heads / tp of them) and under DP
  attention alike. The attention backend takes the whole vector and the layer slices its own heads' output after;
- DeepseekV4DecoderLayer's hc_attn_fn / hc_ffn_fn, _base and _scale and DeepseekV4Model's hc_head_fn, _base and _scale:
  `dtype=torch.float32`, plain parameters, whole;
- the compressors (layers/attention/dsv4/compressor.py Compressor, read at 00bc152d26d3; every stored version builds
  them the same): ape, the position bias, `torch.empty(ratio, coff * head_dim, dtype=torch.float32)`, and norm,
  `RMSNorm(head_dim, ..., weight_dtype=torch.float32)`, beside wkv_gate, a bf16 ReplicatedLinear (quant_config None);
  the C4 indexer's (layers/attention/dsv4/indexer.py C4Indexer, read at 00509fc37435) builds one of these too, beside
  wq_b and weights_proj, both ReplicatedLinear (n_local_heads = n_heads: the indexer is not split over any group).

So the compressors and the indexer are whole on every GPU, as gptcalc's common split already counts them; what differs is
the dtype of the norms (2 B in a checkpoint's bf16, 4 B here) and the share of the sinks. Each such component on this GPU
holds, beyond the bytes its share of the checkpoint counts,

    whole x 4 - counted      whole = its share x the group it was split over (1 where the split keeps it whole)

where the group is the attention-TP size (tp, or tp / N under DP attention), which divides the heads exactly.

The router's tables, which transformers registers as buffers (so no count of gptcalc's holds them), are parameters in
SGLang's DeepseekV2MoE (models/deepseek_v2.py, built with is_deepseek_v4=True by deepseek_v4.py's decoder layer), whole
on every GPU of the layers it holds: MoEGate's e_score_correction_bias, `torch.empty(n_routed_experts,
dtype=torch.float32)` where `topk_method == "noaux_tc"` and the layer does not hash (bf16 only for modelopt_fp4 under
flashinfer's TRT-LLM runner or on ROCm's aiter), and a hash layer's HashTopK.tid2eid (layers/moe/hash_topk.py at
02b3581d12d4), `torch.empty(vocab_size, topk - num_fused_shared_experts, dtype=torch.int32)`: vocab x top_k, as
DeepSeek-V4 turns shared-expert fusion off (determine_num_fused_shared_experts). Both are 4 B a value (router_tables).
"""

from __future__ import annotations

from collections.abc import Mapping

from calc.analysis.memory.parallel import replicated
from calc.analysis.memory.weights import Weights
from calc.spec.model import ModelSpec

__all__ = ["LABEL", "ROUTER_LABEL", "ROUTER_SOURCE", "SOURCE", "fp32_whole", "router_tables"]

LABEL = "fp32 parameters kept whole"
SOURCE = ("https://github.com/sgl-project/sglang/blob/000328a8cd54dd3aac97cd9977c39b5408034b26/python/sglang/srt/models/"
          "deepseek_v4.py (MQALayer.attn_sink: n_heads in fp32; hc_*_fn / _base / _scale in fp32) and "
          "https://github.com/sgl-project/sglang/blob/00bc152d26d30c34d74cded1212ad11a09a437ff/python/sglang/srt/layers/"
          "attention/dsv4/compressor.py (Compressor: ape in fp32, norm weight_dtype=torch.float32, wkv_gate a bf16 "
          "ReplicatedLinear)")
FP32_BYTES = 4
ROUTER_LABEL = "router tables held as parameters"
ROUTER_SOURCE = ("https://github.com/sgl-project/sglang/blob/000328a8cd54dd3aac97cd9977c39b5408034b26/python/sglang/srt/"
                 "models/deepseek_v4.py (DeepseekV4DecoderLayer: deepseek_v2.DeepseekV2MoE(is_deepseek_v4=True); "
                 "'.gate.bias' -> e_score_correction_bias, '.gate.tid2eid' -> '.topk.tid2eid'): MoEGate's "
                 "e_score_correction_bias fp32 (n_routed_experts) on each scored layer where topk_method is noaux_tc, "
                 "HashTopK.tid2eid int32 (vocab_size x top_k, https://github.com/sgl-project/sglang/blob/"
                 "02b3581d12d4a59bb3d454816ea283f43710c5ba/python/sglang/srt/layers/moe/hash_topk.py) on each hash layer")
TABLE_BYTES = 4  # e_score_correction_bias in fp32, tid2eid in int32


def fp32_whole(spec: ModelSpec, weights: Weights, attention_tp: int) -> int:
    """The bytes the model's fp32 whole components hold on this GPU beyond what `weights` (its share of the checkpoint's
    tensors, its attention split `attention_tp` ways) counts for them."""
    extra = 0
    for name in spec.sglang.fp32_whole:
        if name in weights.params:
            whole = weights.params[name] * (1 if replicated(name) else attention_tp)
            extra += max(whole * FP32_BYTES - weights.component_bytes(name), 0)
    return extra


def router_tables(spec: ModelSpec, counts: Mapping[str, int]) -> int:
    """The bytes of the router tables (transformers' buffers) that `spec.sglang.fp32_whole` names, over the layers
    one GPU holds: `counts`, layers by block kind (ModelSpec.layer_counts of its stage, or an MTP layer's block)."""
    return TABLE_BYTES * sum(n * size for kind, n in counts.items()
                             for name, size in spec.blocks[kind].buffers().items() if name in spec.sglang.fp32_whole)
