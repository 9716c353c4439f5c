"""Weights and KV cache per GPU under tensor (tp), pipeline (pp) and expert (ep) parallelism.

Tensor parallelism splits a layer's matrices tp ways, as vLLM and SGLang do (Megatron-style):
column-parallel Q/K/V, gate/up (and their biases) and row-parallel O and down are sharded; the
vocabulary-parallel token embedding and LM head are sharded by vocabulary rows; norms, the MoE
router, row-parallel biases and MLA's down-projections (q_a, kv_a: ReplicatedLinear in vLLM's
DeepSeek) are whole on every GPU. K and V are split by KV head, so past n_kv_heads GPUs each
holds one replicated head. With --ep the routed experts are split ep ways, whole, instead of
each expert being sharded.

Pipeline parallelism gives each stage a contiguous run of layers, vLLM's get_pp_indices split
(vllm/distributed/utils.py): n_layers // pp each, the remainder one extra per stage from the
second-to-last backwards; the first stage also holds the embedding, the last the final norm and
LM head, and every stage with a layer that applies a shared block (Zamba2's) holds that block.
The busiest GPU (weights + its layers' KV) decides what fits.

Sharding rounds up (a shard of an odd row count is the larger half); vLLM's vocabulary padding
to a multiple of 64 per shard is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.analysis.breakdown import Breakdown
from calc.analysis.memory.kv import KVCache, kv_cache
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["Layout", "Stage", "check_tp", "layer_params", "pp_partitions", "replicated", "stage_kv", "stages",
           "validate_layout", "whole_cache"]

# Whole on every tensor-parallel GPU (everything else in a layer is sharded tp ways).
REPLICATED = ("attn_out_bias", "mlp_down_bias", "shared_mlp_down_bias", "mlp_act", "shared_mlp_act", "router",
              "router_bias", "router_score_bias", "router_score_bias_param", "shared_expert_gate", "q_a", "q_a_bias", "idx_q", "idx_k", "idx_weights",
              "block_idx_k",  # MiniMax-M3: one index key for all heads
              "kv_a", "kv_a_bias", "position_embedding", "embedding_norm", "lm_head_bias", "project_in", "project_out",
              # Gemma-3n's and Gemma-4's small extras (AltUp, LAuReL, per-layer inputs, the router's scales): whole
              "router_scale", "router_expert_scale", "altup_scale", "altup_correct", "altup_predict", "altup_router",
              "laurel_left", "laurel_right", "ple_gate", "ple_proj", "per_layer_projection", "altup_in", "altup_out",
              "kda_f_a", "kda_g_a",  # KDA's gate bottlenecks: vLLM's ReplicatedLinear
              # DeepSeek-V4: the one K = V head, its compressors and the hyper-connection mixes
              "kv", "comp_kv", "comp_gate", "comp_bias", "idx_kv", "idx_gate", "idx_bias", "hc_attn", "hc_mlp", "hc_head",
              "layer_scale")  # InternViT's ls1/ls2: d-wide vectors on the all-reduced output (vLLM InternVisionEncoderLayer)
EXPERTS = "experts_"
FIRST_STAGE = ("token_embedding", "position_embedding", "embedding_norm", "project_in", "per_layer_embedding",
               "per_layer_projection", "per_layer_projection_norm", "altup_in")


@dataclass(frozen=True)
class Layout:
    """How many GPUs split the model which way; replicas (data parallel) copy the whole layout."""

    tp: int = 1
    pp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


def check_tp(spec: ModelSpec, tp: int, kv_heads: bool = False) -> None:
    """Refuse a tensor-parallel degree no server or trainer runs: it must divide every attention's
    query heads (vLLM's and SGLang's attention layers assert total_num_heads % tp_size == 0, as
    Megatron does). `kv_heads`: the KV heads too, as training splits them (Megatron's
    num_query_groups % tp); inference engines replicate a KV head past their count instead, which
    the KV cache checks (calc/analysis/memory/kv.py)."""
    for _, a in spec.attention_parts():
        heads = (a.n_heads, a.n_kv_heads) if kv_heads else (a.n_heads,)
        if any(n % tp for n in heads):
            what = f"{a.n_heads} query and {a.n_kv_heads} KV heads" if kv_heads else f"{a.n_heads} query heads"
            raise GptcalcError(f"--tp {tp}: does not divide {spec.name}'s {what}")


def validate_layout(spec: ModelSpec, layout: Layout, kv_heads: bool = False) -> None:
    """Every rule a server or trainer applies to a layout, in one place (memory, budgets, `fit` and
    `train` call it), each error naming the option: --tp divides the query heads (KV heads split or
    replicate, which the KV cache checks; with `kv_heads`, as training splits them, the KV heads too)
    and every state's heads; --pp at most the layers; --ep divides every MoE's routed experts (an
    expert group of more GPUs than --tp takes data-parallel replicas: vLLM's is tp x dp)."""
    check_tp(spec, layout.tp, kv_heads)
    for name, block in spec.blocks.items():
        for state in block.cache(spec.d_model).states:
            if not state.splits(layout.tp):
                raise GptcalcError(f"--tp {layout.tp}: does not divide the {state.heads} heads of {name}'s {state.name} state")
    if layout.pp > spec.n_layers:
        raise GptcalcError(f"--pp {layout.pp}: more stages than {spec.name}'s {spec.n_layers} layers")
    if layout.ep > 1:
        experts = {block.mlp.n_experts for block in spec.blocks.values() if block.is_moe}
        if not experts:
            raise GptcalcError(f"--ep {layout.ep}: {spec.name} has no routed experts to split")
        if any(n % layout.ep for n in experts):
            raise GptcalcError(f"--ep {layout.ep}: does not divide {spec.name}'s {min(experts)} routed experts")


# Pipeline stages are listed one by one; real pipelines have tens, not thousands.
MAX_STAGES = 4096


def pp_partitions(n_layers: int, pp: int) -> list[int]:
    """Layers per stage as vLLM's get_pp_indices splits them."""
    if pp > n_layers:
        raise GptcalcError(f"--pp {pp}: more stages than the model's {n_layers} layers")
    if pp > MAX_STAGES:
        raise GptcalcError(f"--pp {pp}: more than {MAX_STAGES:,} pipeline stages (each is listed)")
    parts = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        parts[-i] += 1
    return parts


def stage_layers(parts: list[int], index: int) -> range:
    """The layers stage `index` runs when the stages take `parts` layers each, in order."""
    first = sum(parts[:index])
    return range(first, first + parts[index])


def replicated(name: str) -> bool:
    """Whether component `name` is whole on every tensor-parallel GPU (the rest of a layer is split)."""
    return name in REPLICATED or "norm" in name


def _share(name: str, n: int, layout: Layout, kv_split: int) -> int:
    """One GPU's part of `n` parameters of component `name`."""
    if replicated(name):
        return n
    if name.startswith(EXPERTS) and layout.ep > 1:
        return -(-n // layout.ep)
    if name in ("k", "v", "k_bias", "v_bias"):
        return -(-n // kv_split)
    return -(-n // layout.tp)


def layer_params(spec: ModelSpec, block: str, layout: Layout) -> dict[str, int]:
    """One layer of `block` on one GPU of the layout, its rows split as every layer's are (a block no layer of
    the decoder applies too: the MTP layer a draft model builds, calc.analysis.memory.sglang_draft)."""
    kv_split = _kv_split(spec, layout.tp)
    return {name: _share(name, n, layout, kv_split) for name, n in spec.blocks[block].params(spec.d_model).items()}


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's GPU: its layers and the parameters it holds (one tp shard)."""

    index: int
    first_layer: int
    n_layers: int
    params: dict[str, int]


def _kv_split(spec: ModelSpec, tp: int) -> int:
    """How many ways K and V weights split: by KV head, at most n_kv_heads ways."""
    heads = {a.n_kv_heads for _, a in spec.attention_parts()}
    return min(tp, min(heads, default=tp))


def stages(spec: ModelSpec, breakdown: Breakdown, layout: Layout, parts: list[int] | None = None) -> list[Stage]:
    """Every pipeline stage's per-GPU parameters, by component; `parts`: the layers per stage where an engine splits
    them otherwise than vLLM (SGLang's get_pp_indices, calc.analysis.memory.sglang_dsv4)."""
    kv_split = _kv_split(spec, layout.tp)
    per_layer = {block.name: block.per_layer for block in breakdown.blocks}
    copies = {copy.name: copy.per_layer for copy in breakdown.shared}
    in_blocks = {name for rows in (*per_layer.values(), *copies.values()) for name in rows}
    outside = {name: n for name, n in breakdown.components.items() if name not in in_blocks}
    result, start = [], 0
    parts = parts or pp_partitions(spec.n_layers, layout.pp)
    for index, count in enumerate(parts):
        params: dict[str, int] = {}
        kinds = spec.layer_counts(start, start + count)
        # a shared block (Zamba2's) is held by every stage with a layer that applies it, once per stage
        applied = dict.fromkeys(spec.blocks[kind].shared.name for kind in kinds if spec.blocks[kind].shared)
        for rows, layers in [*((per_layer[kind], n) for kind, n in kinds.items()), *((copies[c], 1) for c in applied)]:
            for name, n in rows.items():
                params[name] = params.get(name, 0) + layers * _share(name, n, layout, kv_split)
        for name, n in outside.items():
            first = name in FIRST_STAGE
            if (first and index == 0) or (not first and index == len(parts) - 1):
                params[name] = _share(name, n, layout, kv_split)
        result.append(Stage(index, start, count, params))
        start += count
    return result


def stage_kv(spec: ModelSpec, kv: KVCache, stage: Stage) -> KVCache:
    """The cache of one stage's layers (kv is already per tensor-parallel GPU)."""
    counts = spec.layer_counts(stage.first_layer, stage.first_layer + stage.n_layers)
    layers = tuple(replace(kind, n_layers=counts[kind.block]) for kind in kv.layers if kind.block in counts)
    states = tuple(replace(state, n_layers=counts[state.block]) for state in kv.states if state.block in counts)
    return replace(kv, layers=layers, states=states)


# the engines whose pipeline stages each price their own layers, cut from the whole model's cache (SGLang's stages,
# sglang_dsv4.sglang_stages; TensorRT-LLM's ranks, trtllm_v2_pp.pipeline_ranks)
STAGE_CUT_ENGINES = ("sglang", "trtllm")


def whole_cache(spec: ModelSpec, engine: str | None, layout: Layout, seq: int, batch: int = 1, dtype: str = "fp16",
                expanded: bool = False) -> KVCache | None:
    """The whole model's cache on one tensor-parallel GPU of `layout`, which `engine`'s pipeline stages are cut from;
    None where nothing reads it (one stage, or an engine that takes each stage's share of the layout's cache)."""
    if layout.pp == 1 or engine not in STAGE_CUT_ENGINES:
        return None
    return kv_cache(spec, seq, batch, dtype, layout.tp, expanded)
