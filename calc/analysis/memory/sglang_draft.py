"""SGLang's EAGLE / MTP draft worker in its KV budget (--speculative-algorithm EAGLE, EAGLE3 or NEXTN, turned on in
gptcalc by --speculative-num-steps), for the models its DefaultPoolConfigurator sizes (MHA, GQA, MLA and DSA caches
without sliding windows or Mamba states).

The draft worker keeps its own KV pool of as many tokens as the target's (draft_runner_cache_size: the target's
max_total_num_tokens), over its own layers. SGLang makes room for it by pricing the target's token higher
(sgl-project/sglang at 29b719ba3a72, model_runner_components/pool_configurator.py, DefaultPoolConfigurator.__init__):

    cell = int(cell x (1 + eagle_draft_num_layers / num_layers))          num_layers: the target's on this GPU

in floats, as written there, assuming each draft layer costs what a target layer does. eagle_draft_num_layers is
the draft config's num_nextn_predict_layers, else max(num_hidden_layers, num_attention_layers)
(ModelRunner.__init__ in model_executor/model_runner.py at the same commit). It is read only where a draft model
path is set: SGLang sets it to the model's own for its MTP architectures (DeepSeek-V3 / V3.2 / V4, GLM-4.5 /
4.5-Air / 5, Bailing, Mistral-Large-3, HY-V3: _handle_eagle_family in arg_groups/speculative_hook.py at
004c82e07d87); elsewhere (Qwen3-Next's, MiMo's MTP) the user gives --speculative-draft-model-path, without which
SGLang prices no draft at all. gptcalc assumes the path is set.

With speculative decoding SGLang runs at most 48 requests unless --max-running-requests says otherwise
(_handle_eagle_family), and the pool config keeps them under half its tokens (_resolve_max_num_reqs in
model_runner_kv_cache_mixin.py at 29b719ba3a72: min(48 // dp_size, tokens // 2)).

The draft's weights come out of the target's pool. SGLang builds the target worker (its weights loaded), then the
draft worker (the draft's loaded), and only then profiles the target's pool: free memory now less the memory free
before loading x (1 - mem_fraction_static), "Loaded weights (target + draft)" charged against it
(_profile_available_bytes in model_runner_kv_cache_mixin.py at 29b719ba3a72, whose error adds "If using speculative
decoding, draft weights are now counted"; Scheduler.init_model_worker: init_tp_model_worker, maybe_init_draft_worker,
init_memory_pools, managers/scheduler.py at 0003215cf146). The draft worker does no profiling of its own: it takes
the target's memory_pool_config (init_memory_pool at 29b719ba3a72). An MTP draft (DeepseekV3ForCausalLMNextN) builds
one embedding, its MTP layer (a decoder layer split over the GPUs as the target's are, its MoE's experts too), enorm,
hnorm, a bias-free eh_proj (nn.Linear, whole on every GPU, in the model's dtype) and shared_head.norm, and an LM head
(models/deepseek_nextn.py at 0114f9c923f2). It loads no embedding or head ("Use shared head and embed weights from
target model") and EagleDraftWorker.init_lm_head hands it the target's (set_embed_and_head, which deletes its own two
and empties the CUDA cache: models/deepseek_v2.py at 00114aef19bb; speculative/eagle_worker_v2.py at 006b0e3d317f),
before the pool is profiled. So the pool loses the draft's layers, norms and eh_proj; its "Load weight end" line,
printed before the hand-over, holds its embedding and head shards too. Its rotary table is the target's (get_rope
caches one per setting). DeepSeek-V4's draft (models/deepseek_v4_nextn.py at 000328a8cd54) builds its two d x d
projections, e_proj and h_proj, as ReplicatedLinear with the checkpoint's quant config and its hc_head in fp32;
gptcalc prices them at 16 bits, so there the figure is an estimate (within 2 x d^2 bytes). An EAGLE draft of
another checkpoint (--speculative-draft-layers) is not read here, so its weights are not counted.

--speculative-eagle-topk and --speculative-num-draft-tokens do not enter this pool (they size the Mamba pool's
intermediate states and the sliding-window cap, which are not modelled here), so gptcalc takes no flag for them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from calc.analysis.memory.kv import KVCache
from calc.analysis.memory.parallel import Layout, layer_params
from calc.analysis.memory.sglang_fp32 import fp32_whole, router_tables
from calc.analysis.memory.sglang_mla import kv_b_copy
from calc.analysis.memory.vllm_packed import has_compressed_rows
from calc.analysis.memory.weights import Weights
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["DRAFT_LAYERS", "EAGLE_UNCOUNTED", "SOURCE", "SPECULATIVE_MAX_RUNNING", "WEIGHTS_SOURCE", "DraftShare",
           "DraftWeights", "draft_share", "draft_weights", "refuse_draft_flags", "refuse_unmodelled_draft"]

SOURCE = ("https://github.com/sgl-project/sglang/blob/29b719ba3a729295c7b5afcc80b4cf0adf5b45fb/python/sglang/srt/"
          "model_executor/model_runner_components/pool_configurator.py (DefaultPoolConfigurator.__init__: cell x "
          "(1 + eagle_draft_num_layers / num_layers))")
SPECULATIVE_MAX_RUNNING = 48  # _handle_eagle_family: max_running_requests when --max-running-requests is not given
DRAFT_LAYERS = ("--speculative-draft-layers: the draft's layers in SGLang's pool, with --speculative-num-steps "
                "(DeepSeek-V4's pools price their one MTP layer themselves)")


def refuse_draft_flags(engine: str, steps: int, draft_layers: int | None) -> None:
    """The draft flags size SGLang's draft worker alone, and its layers need its steps: refused before any pool
    is sized, so that fit says it once rather than as every layout's (PoolSettings.refuse_other_engines) and
    memory as kv_pool sizes its one pool."""
    if steps and engine not in ("sglang", "trtllm"):
        raise GptcalcError(f"--speculative-num-steps {steps}: what a draft model adds to the pool is modelled for "
                           "SGLang and TensorRT-LLM only (--engine sglang or trtllm)")
    if draft_layers is not None and not steps:
        raise GptcalcError(DRAFT_LAYERS)


@dataclass(frozen=True)
class DraftShare:
    """The target's cell on one GPU, and what SGLang's draft worker adds to it."""

    cell: int  # the target's bytes a token over its layers on this GPU
    layers: int  # the target's layers on this GPU (num_effective_layers)
    draft_layers: int  # eagle_draft_num_layers

    @property
    def priced(self) -> int:
        """The cell the pool is divided by: int(cell x (1 + D / L)) in SGLang's floats."""
        return int(self.cell * (1 + self.draft_layers / self.layers))

    @property
    def draft_cell(self) -> int:
        """One token of the draft worker's own pool, each draft layer a target layer's bytes."""
        return self.cell * self.draft_layers // self.layers

    def to_json(self) -> dict[str, object]:
        return {"target_cell_bytes": self.cell, "target_layers": self.layers, "draft_layers": self.draft_layers,
                "priced_cell_bytes": self.priced, "draft_cell_bytes": self.draft_cell, "source": SOURCE}


def refuse_unmodelled_draft(kv: KVCache, draft_layers: int | None) -> None:
    """What SGLang's draft share is not modelled for in this model's cache, whatever its layout, so that fit says
    it once: DeepSeek-V4's pools price their own MTP layer (calc/analysis/memory/sglang_dsv4.py), so take no
    --speculative-draft-layers; elsewhere Mamba states, sliding windows, or no draft layers at all."""
    if has_compressed_rows(kv):
        if draft_layers is not None:
            raise GptcalcError(DRAFT_LAYERS)
        return
    if kv.states:
        raise GptcalcError(f"--speculative-num-steps with --engine sglang: {kv.model} keeps Mamba states, whose pool "
                           "SGLang shrinks for the draft's intermediate states (handle_max_mamba_cache); not modelled")
    if any(kind.window for kind in kv.layers):
        raise GptcalcError(f"--speculative-num-steps with --engine sglang: {kv.model} has sliding-window layers, which "
                           "SGLang's HybridSWAPoolConfigurator sizes without the draft's share; not modelled")
    if _draft_layers(kv, draft_layers) <= 0:
        raise GptcalcError(f"--speculative-num-steps: {kv.model} has no MTP layers; give the EAGLE draft's layer count "
                           "with --speculative-draft-layers (its config's num_hidden_layers)")


def _draft_layers(kv: KVCache, draft_layers: int | None) -> int:
    """The draft's layers: those given, else the model's MTP layers (each block kind's once)."""
    return draft_layers if draft_layers is not None else sum({kind.block: kind.n_layers for kind in kv.mtp}.values())


def draft_share(kv: KVCache, cell: int, draft_layers: int | None, pp: int = 1) -> DraftShare:
    """SGLang's draft share for this cache (one refuse_unmodelled_draft passed); `draft_layers`: the draft's layers
    (None: the model's MTP layers)."""
    if pp > 1:
        raise GptcalcError(f"--pp {pp} with a draft model: SGLang refuses MTP drafts under pipeline parallelism "
                           "(\"PP is not compatible with MTP models\", model_runner.py) and places an EAGLE draft on "
                           "the last stage, which is not modelled")
    return DraftShare(cell, kv.n_layers, _draft_layers(kv, draft_layers))


WEIGHTS_SOURCE = ("https://github.com/sgl-project/sglang/blob/29b719ba3a729295c7b5afcc80b4cf0adf5b45fb/python/sglang/"
                  "srt/model_executor/model_runner_kv_cache_mixin.py (_profile_available_bytes: 'Loaded weights "
                  "(target + draft)' charged against the pool) and python/sglang/srt/managers/scheduler.py at "
                  "0003215cf146 (init_model_worker: the draft worker is built before init_memory_pools); the MTP "
                  "layer, norms and eh_proj of models/deepseek_nextn.py, whose embedding and head are the target's "
                  "(set_embed_and_head)")
EAGLE_UNCOUNTED = ("an EAGLE draft of another checkpoint (--speculative-draft-layers): SGLang loads it before it "
                   "profiles the pool, but its checkpoint is not read here, so its weights are not subtracted")


@dataclass(frozen=True)
class DraftWeights:
    """The bytes SGLang's draft worker holds on one GPU (None: an EAGLE draft whose checkpoint is not read)."""

    own: int | None  # what it keeps: its MTP layers, their norms and eh_proj
    shared: int = 0  # the embedding and head shards it builds, then frees for the target's (set_embed_and_head)
    exact: bool = True  # False with hyper-connections: SGLang quantises e_proj, h_proj and keeps hc_head in fp32

    @property
    def loaded(self) -> int | None:
        """Its "Load weight end. mem usage": what it holds before the embedding and head are handed over."""
        return None if self.own is None else self.own + self.shared


def draft_weights(spec: ModelSpec, weights: Weights, layout: Layout, draft_layers: int | None,
                  element_bytes: int = 2) -> DraftWeights:
    """What the draft worker holds on one GPU of `layout` when the target's pool is profiled: the model's MTP layers
    at the target's scheme (`weights`), split as its layers are, with the w_kc / w_vc copy its post_load_weights
    (is_nextn) makes of an MLA layer's kv_b (calc.analysis.memory.sglang_mla) and the parameters it keeps whole in fp32
    (calc.analysis.memory.sglang_fp32: DeepSeek-V4's sinks of every head, and its router's score bias: the MTP layer
    does not hash), and their norms and eh_proj whole in
    the model's `element_bytes`; `draft_layers` given (an EAGLE draft of another checkpoint): not known here."""
    if draft_layers is not None or spec.mtp is None:
        return DraftWeights(None)
    mtp = spec.mtp
    layer = replace(weights, params=layer_params(spec, mtp.block, layout))
    held = (layer.total_bytes + kv_b_copy(spec, layer) + fp32_whole(spec, layer, layout.tp)
            + router_tables(spec, {mtp.block: 1}) + mtp.extras(spec) * element_bytes)
    shard = -(-spec.vocab_size // layout.tp) * spec.d_model * element_bytes  # VocabParallelEmbedding / ParallelLMHead
    return DraftWeights(mtp.n_layers * held, 2 * shard, spec.head.hyper is None)
