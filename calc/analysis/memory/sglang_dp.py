"""SGLang's DP attention (--enable-dp-attention --dp-size N): the weights one GPU holds and the KV heads its pool keeps,
for the models whose SGLang file gptcalc has read (`SglangBuild.dp_attention` names it; `FILES` holds each one's
facts): models/deepseek_v2.py's DeepseekV2ForCausalLM (DeepSeek-V2 / V2-Lite, DeepSeek-V3 / R1, Kimi-K2, and its
subclasses DeepseekV32ForCausalLM and GLM-5's GlmMoeDsaForCausalLM), GLM-4.7-Flash's glm4_moe_lite.py, GLM-4.5 / 4.6 /
4.7's glm4_moe.py, Qwen2-MoE's qwen2_moe.py, Qwen3-MoE's qwen3_moe.py, gpt-oss's gpt_oss.py and DeepSeek-V4's
deepseek_v4.py.

Under DP attention the tp GPUs form N attention groups of tp / N (the attention-TP size,
layers/dp_attention.py compute_dp_attention_world_info); each group runs its own requests and its own KV
pool. Which weights split over that group is each model's to say. sgl-project/sglang's
python/sglang/srt/models/deepseek_v2.py (read at 00114aef19bb, the version the index stores):

- DeepseekV2AttentionMLA: q_b_proj (or V2-Lite's q_proj) and kv_b_proj are ColumnParallelLinear, o_proj
  RowParallelLinear, each built with tp_rank=get_attention_tp_rank(), tp_size=get_attention_tp_size(): split
  tp / N ways; fused_qkv_a_proj_with_mqa (kv_a_proj_with_mqa) is ReplicatedLinear, whole as without DP attention;
- DeepseekV2MoE: its experts over the whole TP group (or --ep) and its shared experts a DeepseekV2MLP at the
  default tp size, the whole group, as without DP attention;
- DeepseekV2DecoderLayer: a dense layer's DeepseekV2MLP is built with tp_size 1 when enable_moe_dense_fully_dp()
  (--moe-dense-tp-size 1: whole on every GPU), else at the whole group's size;
- DeepseekV2ForCausalLM: ParallelLMHead(use_attn_tp_group=enable_dp_lm_head): over the attention-TP group with
  --enable-dp-lm-head, over the whole group without.
- The token embedding: that version builds VocabParallelEmbedding(enable_tp=not enable_dp_attention), whole on
  every GPU; sgl-project/sglang#17403 (merged 2026-01-20) builds it over the attention-TP group instead
  ("dsv3 tp=8 dp=2: 82.82GB -> 81.53GB per GPU"), which gptcalc follows: the SGLang it cites elsewhere
  (29b719ba, with PRs numbered past #30000) is newer.
- The DSA indexer of DeepSeek-V3.2 and GLM-5 (layers/attention/nsa/nsa_indexer.py at 005e8bf8abf4, Indexer):
  wq_b, wk and weights_proj are ReplicatedLinear, whole on every GPU with or without DP attention.

The other files lay out the same way (`FILES`): GLM-4.7-Flash's layers build deepseek_v2.py's DeepseekV2AttentionMLA;
the GQA ones qkv_proj (QKVParallelLinear) and o_proj (RowParallelLinear) with the attention-TP rank and size, their KV
heads max(1, kv_heads / (tp / N)) a GPU, replicated past that; DeepSeek-V4's MQALayer wq_b, wo_a and wo_b with them,
wq_a and wkv ReplicatedLinear, its compressors and C4 indexer ReplicatedLinear, whole as under plain tensor parallelism
(its attn_sink, every head's in fp32 on every GPU, is counted whole beside the weights by calc.analysis.memory.sglang_fp32,
here as there); the router, experts and shared experts as without DP attention; a dense layer's MLP (GLM-4.5's
first_k_dense_replace) with tp_size 1 under enable_moe_dense_fully_dp(); lm_head
ParallelLMHead(use_attn_tp_group=enable_dp_lm_head); the embedding over the attention-TP group, except gpt-oss's and
DeepSeek-V4's, whole on every GPU (`File.whole_embedding`). Qwen2-MoE's and
Qwen3-MoE's embedding is Qwen2MoeModel's (qwen2_moe.py), read in the version beside qwen3_moe.py at 008af3a6
(get_parallel().moe_dp_size): use_attn_tp_group=is_dp_attention_enabled(); the older one at 0115497da8f2 built it
enable_tp=not enable_dp_attention, whole, as deepseek_v2.py did before #17403.

MLA keeps one latent a token, and DeepSeek-V4 one shared-KV row, whole on every GPU, so their pools' cells do not
change; a GQA pool's cell is the attention group's KV heads, more a GPU than under plain tensor parallelism. The default
fraction reserves more (`reserve_mib`), before the chunked prefill is divided by N. Multimodal towers, pipeline stages
and speculative drafts under DP attention are not read, and refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.budget import Inference
from calc.analysis.memory.kv import kv_cache
from calc.analysis.memory.parallel import Layout, stages
from calc.analysis.memory.weights import Weights
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["FILES", "RESERVE_SOURCE", "SOURCE", "DpAttention", "dp_weights", "reserve_mib"]

_BLOB = "https://github.com/sgl-project/sglang/blob/"
SOURCE = (f"{_BLOB}00114aef19bbb7431b9cfc5a77dce64b9c53ed95/python/sglang/srt/"
          "models/deepseek_v2.py (attention over get_attention_tp_size(), lm_head use_attn_tp_group="
          "enable_dp_lm_head, dense MLP tp_size 1 under moe_dense_tp_size 1) and "
          "https://github.com/sgl-project/sglang/pull/17403 (the embedding over the attention-TP group)")


@dataclass(frozen=True)
class File:
    """What one SGLang model file does under DP attention beyond the common layout (the module's docstring): where it
    was read, and whether it keeps the token embedding whole (VocabParallelEmbedding(enable_tp=not
    is_dp_attention_enabled())) rather than over the attention-TP group
    (use_attn_tp_group=is_dp_attention_enabled())."""

    source: str
    whole_embedding: bool = False


# `SglangBuild.dp_attention` -> the file's facts, each read at the commit its source names.
FILES = {
    "deepseek_v2": File(SOURCE),
    "glm4_moe_lite": File(f"{_BLOB}03b1e880014d74b76aecf345917bf59de42d8aff/python/sglang/srt/models/glm4_moe_lite.py "
                          "(deepseek_v2.py's DeepseekV2AttentionMLA; Glm4MoeLiteMLP tp_size 1 under "
                          "enable_moe_dense_fully_dp(); embed_tokens use_attn_tp_group=is_dp_attention_enabled())"),
    "glm4_moe": File(f"{_BLOB}005ffc65dc0f72d42a1436c31ef129ed98cccc58/python/sglang/srt/models/glm4_moe.py "
                     "(Glm4MoeAttention qkv_proj / o_proj tp_size=attn_tp_size; Glm4MoeMLP tp_size 1 under "
                     "enable_moe_dense_fully_dp(); embed_tokens use_attn_tp_group=is_dp_attention_enabled())"),
    "qwen2_moe": File(f"{_BLOB}0115497da8f2340cdce444597387cf2a4d499f5c/python/sglang/srt/models/qwen2_moe.py "
                      "(Qwen2MoeAttention qkv_proj / o_proj tp_size=attn_tp_size, lm_head "
                      "use_attn_tp_group=enable_dp_lm_head; the embedding over the group in the later Qwen2MoeModel)"),
    "qwen3_moe": File(f"{_BLOB}008af3a6f95b956ea4d50986f9a921f13dced28b/python/sglang/srt/models/qwen3_moe.py "
                      "(Qwen3MoeAttention qkv_proj / o_proj tp_size=attn_tp_size, lm_head "
                      "use_attn_tp_group=enable_dp_lm_head; Qwen2MoeModel's embed_tokens "
                      "use_attn_tp_group=is_dp_attention_enabled())"),
    "gpt_oss": File(f"{_BLOB}009c68085e684e0cf2829d129ad026180c1f8c32/python/sglang/srt/models/gpt_oss.py "
                    "(GptOssAttention qkv_proj / o_proj tp_size=attn_tp_size, sinks a head each; embed_tokens "
                    "enable_tp=not is_dp_attention_enabled())", whole_embedding=True),
    "deepseek_v4": File(f"{_BLOB}000328a8cd54dd3aac97cd9977c39b5408034b26/python/sglang/srt/models/deepseek_v4.py "
                        "(MQALayer wq_b / wo_a / wo_b tp_size=attn_tp_size, wq_a and wkv ReplicatedLinear; "
                        "embed_tokens enable_tp=not is_dp_attention_enabled())", whole_embedding=True),
}
RESERVE_SOURCE = ("https://github.com/sgl-project/sglang/blob/a82da8da159ec67038d9357c172fba89ad8af6a3/python/"
                  "sglang/srt/arg_groups/memory_hook.py (reserve_for_graph_mb: cuda_graph_max_bs x dp_size x 3, and "
                  "x 1.5 more above a max_bs of 300)")


@dataclass(frozen=True)
class DpAttention:
    """SGLang's --dp-size under --enable-dp-attention, --enable-dp-lm-head and --moe-dense-tp-size (None: unset)."""

    size: int
    lm_head: bool = False
    dense_tp: int | None = None

    def attention_tp(self, tp: int) -> int:
        return tp // self.size

    def refuse(self, spec: ModelSpec, engine: str | None, towers: bool, draft: bool) -> None:
        """Refuse what no layout changes: another engine, a model whose layout is not read, a --moe-dense-tp-size
        SGLang refuses (1 or unset), and what is not read under DP attention (towers loaded, a speculative draft)."""
        if engine != "sglang":
            raise GptcalcError("--enable-dp-attention is SGLang's: give --engine sglang")
        if not spec.sglang.dp_attention:
            raise GptcalcError(f"--enable-dp-attention: how SGLang lays out {spec.name}'s weights under DP attention "
                               f"is not read here (only those of its {', '.join(f + '.py' for f in FILES)})")
        if self.dense_tp not in (None, 1):
            raise GptcalcError(f"--moe-dense-tp-size {self.dense_tp}: SGLang takes only 1")
        if towers or draft:
            what = "a vision tower (give --text-only)" if towers else "--speculative-num-steps"
            raise GptcalcError(f"--enable-dp-attention with {what}: not read for DP attention here")

    def check(self, layout: Layout) -> None:
        """Refuse a layout: N must divide --tp (SGLang's attention-TP size is tp / N); pipeline stages not read."""
        if layout.tp % self.size:
            raise GptcalcError(f"--dp-size {self.size}: does not divide --tp {layout.tp} (SGLang's attention-TP "
                               "size is tp / dp)")
        if layout.pp > 1:
            raise GptcalcError("--enable-dp-attention with --pp: not read for DP attention here")

    def note(self, tp: int) -> str:
        """What the per-GPU answer stands for: one group's pool and requests, N such groups in all."""
        return (f"DP attention: {self.size} groups of {self.attention_tp(tp)} GPU(s), each running its own requests "
                f"from its own KV pool: the pool, tokens and largest batch above are one group's, the {self.size} "
                "groups together serve that many times the requests")

    def held(self, spec: ModelSpec, breakdown: Breakdown, result: Inference, layout: Layout) -> Inference:
        """`result` (one GPU of `layout` under plain tensor parallelism) with the weights DP attention lays out and
        the cache of the attention group's KV heads (RadixAttention's num_kv_heads at the attention-TP size)."""
        self.check(layout)
        old, attention_tp = result.kv, self.attention_tp(layout.tp)
        try:
            kv = kv_cache(spec, old.seq, old.batch, old.format, attention_tp, old.expanded)
        except GptcalcError as e:  # the rule SGLang's attention asserts, at the group's size rather than --tp
            raise GptcalcError(f"--dp-size {self.size}: SGLang splits the attention over tp / dp = {attention_tp} GPUs "
                               f"({e})") from None
        weights = dp_weights(spec, breakdown, result.weights, layout, self)
        return replace(result, weights=weights, kv=kv, gpus=(replace(result.gpus[0], weights=weights, kv=kv),))


def dp_weights(spec: ModelSpec, breakdown: Breakdown, weights: Weights, layout: Layout, dp: DpAttention) -> Weights:
    """One GPU's weights under DP attention: `weights` (its share under plain tensor parallelism) with the attention
    projections and the embedding (and with --enable-dp-lm-head the head) split over the attention-TP group, the
    embedding whole where the model's file keeps it so, and with --moe-dense-tp-size 1 the dense layers' MLPs whole."""
    narrow = stages(spec, breakdown, replace(layout, tp=dp.attention_tp(layout.tp)))[0].params
    whole_embedding = FILES[spec.sglang.dp_attention].whole_embedding
    whole = stages(spec, breakdown, replace(layout, tp=1))[0].params if whole_embedding or dp.dense_tp == 1 else None
    attention_rows = {name for block in spec.blocks.values() for mixer in block.mixers()
                      for name in mixer.params(spec.d_model)}
    by_group = dict.fromkeys(attention_rows | ({"lm_head"} if dp.lm_head else set()), narrow)
    by_group["token_embedding"] = whole if whole_embedding else narrow
    if dp.dense_tp == 1:
        by_group.update(dict.fromkeys((name for block in spec.blocks.values() if not block.is_moe and block.mlp
                                       for name in block.mlp.params(spec.d_model)), whole))
    return replace(weights, params={name: by_group[name][name] if name in by_group else n
                                    for name, n in weights.params.items()})


def reserve_mib(max_bs: int, dp: int) -> float:
    """What SGLang's default fraction reserves beyond plain tensor parallelism for DP attention (MiB): its decode
    graphs' buffers grow with the ranks' batches, max_bs x N x 3, and x 1.5 more past a max_bs of 300."""
    return max_bs * dp * 3 + (max_bs * dp * 1.5 if max_bs > 300 else 0)
