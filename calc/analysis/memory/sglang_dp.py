"""SGLang's DP attention (--enable-dp-attention --dp-size N): the weights one GPU holds, for the models SGLang builds
with models/deepseek_v2.py's DeepseekV2ForCausalLM (DeepSeek-V2 / V2-Lite, DeepSeek-V3 / R1, Kimi-K2, and its
subclasses DeepseekV32ForCausalLM and GLM-5's GlmMoeDsaForCausalLM, which change none of its layers:
`SglangBuild.dp_attention`).

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

MLA keeps one latent a token, whole on every GPU, so the pool's cell does not change; the default fraction reserves
more (`reserve_mib`), before the chunked prefill is divided by N. Multimodal towers, pipeline stages and speculative
drafts under DP attention are not read, and refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.budget import Inference
from calc.analysis.memory.parallel import Layout, stages
from calc.analysis.memory.weights import Weights
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["RESERVE_SOURCE", "SOURCE", "DpAttention", "dp_weights", "reserve_mib"]

SOURCE = ("https://github.com/sgl-project/sglang/blob/00114aef19bbb7431b9cfc5a77dce64b9c53ed95/python/sglang/srt/"
          "models/deepseek_v2.py (attention over get_attention_tp_size(), lm_head use_attn_tp_group="
          "enable_dp_lm_head, dense MLP tp_size 1 under moe_dense_tp_size 1) and "
          "https://github.com/sgl-project/sglang/pull/17403 (the embedding over the attention-TP group)")
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
                               "is not read here (only models/deepseek_v2.py's: DeepSeek-V2, V3, V3.2, Kimi-K2, GLM-5)")
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
        """`result` (one GPU of `layout` under plain tensor parallelism) with the weights DP attention lays out."""
        self.check(layout)
        weights = dp_weights(spec, breakdown, result.weights, layout, self)
        return replace(result, weights=weights, gpus=(replace(result.gpus[0], weights=weights),))


def dp_weights(spec: ModelSpec, breakdown: Breakdown, weights: Weights, layout: Layout, dp: DpAttention) -> Weights:
    """One GPU's weights under DP attention: `weights` (its share under plain tensor parallelism) with the attention
    projections and the embedding (and with --enable-dp-lm-head the head) split over the attention-TP group, and
    with --moe-dense-tp-size 1 the dense layers' MLPs whole."""
    narrow = stages(spec, breakdown, replace(layout, tp=dp.attention_tp(layout.tp)))[0].params
    attention_rows = {name for block in spec.blocks.values() for mixer in block.mixers()
                      for name in mixer.params(spec.d_model)}
    by_group = dict.fromkeys(attention_rows | {"token_embedding"} | ({"lm_head"} if dp.lm_head else set()), narrow)
    if dp.dense_tp == 1:
        whole = stages(spec, breakdown, replace(layout, tp=1))[0].params
        by_group.update(dict.fromkeys((name for block in spec.blocks.values() if not block.is_moe and block.mlp
                                       for name in block.mlp.params(spec.d_model)), whole))
    return replace(weights, params={name: by_group[name][name] if name in by_group else n
                                    for name, n in weights.params.items()})


def reserve_mib(max_bs: int, dp: int) -> float:
    """What SGLang's default fraction reserves beyond plain tensor parallelism for DP attention (MiB): its decode
    graphs' buffers grow with the ranks' batches, max_bs x N x 3, and x 1.5 more past a max_bs of 300."""
    return max_bs * dp * 3 + (max_bs * dp * 1.5 if max_bs > 300 else 0)
