"""Which of TensorRT-LLM's two KV cache managers a model gets, so its lines are never shown as the default's.

TensorRT-LLM's PyTorch backend has two: the C++ KVCacheManager ("V1"), whose "Number of tokens per block" and
"[MemUsageChange] Allocated … GiB for max tokens in paged KV cache" lines gptcalc prints, and KVCacheManagerV2,
whose pool is a byte quota its StorageManager rounds to a grain and deals out as slots.
kv_cache_config.use_kv_cache_manager_v2 picks one; its default, "auto", takes the model class's preference and V1
where the class states none (tensorrt_llm/llmapi/llm_utils.py _resolve_kv_cache_manager_v2_auto at 0066b2a569:
get_preferred_kv_cache_manager_version "V2" -> V2, else V1; back to V1 under disaggregated serving without the
Python NIXL transceiver and, its docstring says, for two-model speculative decoding). The class is config.json's
architectures[0] (calc.analysis.memory.trtllm_models), so the preference is keyed by the spec's `architecture`, as
TensorRT-LLM keys it. The classes below state "V2"; each is cited where the index holds it: the merged pull request
that added the preference, and docs/source/features/kvcache.md at 0076e9390e ("Models that select the V2 manager by
default"). No other class was found stating one (those pull requests, kvcache.md, a search of the index for the
hook), so "auto" is taken to keep V1 for it, and the note says it was not found rather than that there is none.

Where the manager is KVCacheManagerV2 and its layers are plain attention, MLA or DSA (DSACacheManagerV2:
calc.analysis.memory.trtllm_dsa), full or sliding (Llama 4's chunked layers full, which V2 keeps in one full-context
pool: kvcache.md "chunked attention does not partition the pools"; a model whose every layer slides full too,
trtllm_v2.derived_windows), gptcalc sizes V2's pools and prints its lines (calc.analysis.memory.trtllm_v2; under
pipeline parallelism each rank's, calc.analysis.memory.trtllm_v2_pp); otherwise it shows V1's and says why V2's is
not sized.
`use_kv_cache_manager_v2` ("auto", "true", "false"; --use-kv-cache-manager-v2) picks as TensorRT-LLM does; "true" on
a model whose V2 pool is not sized is refused rather than answered with V1's figures.
"""

from __future__ import annotations

from calc.analysis.memory.kv import KVCache, kv_layers
from calc.analysis.memory.trtllm_dsa import TRTLLM_DSA_V2
from calc.analysis.memory.trtllm_v2 import derived_windows, own_window, v2_unsized
from calc.analysis.memory.trtllm_windows import window_note
from calc.analysis.memory.vllm_indexer import DSA
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["SETTINGS", "TRTLLM_V2_DEFAULT", "manager_note", "refuse_v2_only", "sizes_v2"]

_PR = "https://github.com/NVIDIA/TensorRT-LLM/pull/"
_DOCS = "docs/source/features/kvcache.md at 0076e9390e"
_DSA = (f"{_PR}16060 (merged; its kvcache.md names DeepseekV3ForCausalLM, DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM "
        "and MistralLarge3ForCausalLM; for DSA, get_sparse_attn_kv_cache_manager at 0bbb76d22e gives V1 when the "
        "setting is false, and pyexecutor/_util.py at 0004396720 hands it the setting, though "
        f"{_DOCS} says sparse-attention models get V2 whatever it says)")
TRTLLM_V2_DEFAULT: dict[str, str] = {
    "LlamaForCausalLM": f"{_PR}19004 (merged), {_DOCS}",
    "Llama4ForConditionalGeneration": f"{_PR}19004 (merged), {_DOCS}",
    "GptOssForCausalLM": f"{_PR}16942 (merged), {_DOCS}",
    "Gemma3ForCausalLM": f"{_PR}17396 (merged), {_DOCS}",
    "Gemma3ForConditionalGeneration": f"{_PR}17396 (merged), {_DOCS}",
    "Gemma4ForCausalLM": f"{_PR}17396 (merged), {_DOCS}",
    "Gemma4ForConditionalGeneration": f"{_PR}17396 (merged), {_DOCS}",
    "DeepseekV3ForCausalLM": _DSA,
    "DeepseekV32ForCausalLM": _DSA,
    "GlmMoeDsaForCausalLM": _DSA,
    "MistralLarge3ForCausalLM": _DSA,
    "KimiK25ForConditionalGeneration": f"{_PR}17125 (merged: KimiK25ForConditionalGeneration.get_model_defaults)",
}
_V1 = ("the TensorRT-LLM pool and lines shown are its V1 KV cache manager's "
       "(kv_cache_config.use_kv_cache_manager_v2: false)")


SETTINGS = ("auto", "true", "false")  # kv_cache_config.use_kv_cache_manager_v2


def _picks_v2(spec: ModelSpec, setting: str) -> bool:
    """Whether TensorRT-LLM builds KVCacheManagerV2: as set, or under "auto" where the class prefers it."""
    return setting == "true" or (setting == "auto" and spec.architecture in TRTLLM_V2_DEFAULT)


def sizes_v2(spec: ModelSpec, kv: KVCache, setting: str = "auto") -> bool:
    """Whether the pool to size is V2's: TensorRT-LLM picks it and it is one gptcalc sizes (trtllm_v2.v2_unsized).
    Set to "true" on a pool it does not size, stop rather than show V1's figures as V2's."""
    if setting not in SETTINGS:
        raise GptcalcError(f"--use-kv-cache-manager-v2 {setting!r}: choose from {', '.join(SETTINGS)}")
    if not _picks_v2(spec, setting):
        return False
    why = v2_unsized(kv)
    if why is not None and setting == "true":
        raise GptcalcError(f"--engine trtllm --use-kv-cache-manager-v2 true: {spec.name}'s KVCacheManagerV2 pool is "
                           f"not sized here {why}; --use-kv-cache-manager-v2 false gives V1's")
    return why is None


def manager_note(spec: ModelSpec, kv: KVCache, pp: int = 1, setting: str = "auto", overlap: bool = True) -> str:
    """Whose pool and lines `--engine trtllm` showed and why, and what V1 does with sliding-window layers
    (calc.analysis.memory.trtllm_windows) where the lines are V1's; `overlap`: the overlap scheduler runs, so V2's
    max_seq_len is --seq + 1 (trtllm_v2.engine_seq); `kv` the whole model's cache, `pp` its pipeline ranks."""
    if sizes_v2(spec, kv, setting):
        return _v2(spec, kv, setting, overlap) + _ranks(pp)
    windows = window_note(spec)
    manager = _manager(spec, setting, v2_unsized(kv))
    return f"{manager}; {windows}" if windows else manager


def _v2(spec: ModelSpec, kv: KVCache, setting: str, overlap: bool) -> str:
    why = ("use_kv_cache_manager_v2: true" if setting == "true" else
           f"the default, \"auto\", picks it for {spec.architecture}: {TRTLLM_V2_DEFAULT[str(spec.architecture)]}")
    chunked = _chunked_layers(spec)
    return (f"the TensorRT-LLM pool and lines shown are its KVCacheManagerV2's ({why}); "
            "use_kv_cache_manager_v2: false (--use-kv-cache-manager-v2 false) gives V1's" +
            (f"; V2 keeps {spec.name}'s {chunked} chunked-attention layers in the one full-context pool ({_DOCS}: "
             "\"chunked attention does not partition the pools\")" if chunked else "") + _sliding(spec, kv, overlap)
            + _dsa(spec, kv))


def _ranks(pp: int) -> str:
    """What V2 does on several pipeline ranks (calc.analysis.memory.trtllm_v2_pp)."""
    return (f"; under --pp {pp} each rank builds its own pools from its layers and its own budget, and cuts its "
            "quota to the fewest tokens any rank holds (KVCacheManagerV2.__init__ at 0004396720: a MIN all-reduce of "
            "each rank's tokens), so the lines are each rank's and the tokens the fewest any rank's pools hold"
            if pp > 1 else "")


def _sliding(spec: ModelSpec, kv: KVCache, overlap: bool) -> str:
    """What V2 does with sliding-window layers whose window is shorter than its max_seq_len (--seq + 1,
    engine_seq): pools of their own life cycle."""
    sliding = sum(kind.n_layers for kind in kv.layers if own_window(kind, kv.seq, overlap))
    if sliding and not derived_windows(kv, overlap):
        return (f"; V2 derives no windows for {spec.name}, whose every layer slides "
                "(_derive_layer_type_attention_windows needs two window sizes), so it caches its "
                f"{sliding} sliding-window layers for the whole context in one full-attention life cycle, as V1 does")
    return (f"; V2 keeps {spec.name}'s {sliding} sliding-window layers in a life cycle of their own, whose stale "
            "blocks leave the pool (_derive_layer_type_attention_windows, getStaleRange); tokens are requests of "
            "--seq tokens its pool groups hold" if sliding else "")


def _dsa(spec: ModelSpec, kv: KVCache) -> str:
    """Which V2 class a DSA model gets and what it adds: its indexer keys as a buffer of each layer."""
    layers = sum(kind.n_layers for kind in kv.layers if kind.kind == DSA)
    return (f"; for DSA it is DSACacheManagerV2, a KVCacheManagerV2 that gives each of {spec.name}'s {layers} "
            f"layers its indexer keys as an INDEX_KEY buffer, pooled apart from the latent ({TRTLLM_DSA_V2})"
            if layers else "")


def _chunked_layers(spec: ModelSpec) -> int:
    """Chunked-attention layers, which V2 pages as full attention."""
    return sum(kind.n_layers for kind in kv_layers(spec) if kind.chunk)


def _manager(spec: ModelSpec, setting: str, unsized: str | None) -> str:
    if setting == "false":
        return f"{_V1}, as set"
    arch = spec.architecture
    if arch is None:
        return f"{_V1}; {spec.name} names no architecture, so which manager TensorRT-LLM's \"auto\" picks is not known"
    source = TRTLLM_V2_DEFAULT.get(arch)
    if source is None:
        return f"{_V1}, which the default, \"auto\", keeps for {arch} (no V2 preference of its class was found)"
    return (f"{_V1}; for {arch} the default, \"auto\", picks KVCacheManagerV2 ({source}), whose pool is not sized "
            f"here {unsized}: set use_kv_cache_manager_v2: false to get these")


_PLAIN = ("MHA", "GQA", "MQA")  # K and V of heads x head_dim (not MLA's latent, not indexer keys)
_V2_ONLY = ("tensorrt_llm/_torch/pyexecutor/_util.py _non_hybrid_kv_cache_manager_cls at 0004396720: "
            "KVCacheManagerV2 where use_kv_cache_manager_v2 is true or is_gemma4_hybrid")


def refuse_v2_only(spec: ModelSpec, engine: str) -> None:
    """Under --engine trtllm, stop at a model whose attention layers differ in head_dim (Gemma 4's hybrid attention):
    V1's pool has one head_dim for every layer, so TensorRT-LLM serves Gemma 4 from KVCacheManagerV2 whatever the
    setting (and, its _fallback_if_unsupported_kv_cache_manager_v2 comment says, V1 would coerce another such model
    to the largest head_dim); V1's lines for it would describe a pool TensorRT-LLM never builds."""
    if engine != "trtllm":
        return
    dims = sorted({kind.head_dim for kind in kv_layers(spec) if kind.kind in _PLAIN})
    if len(dims) > 1:
        raise GptcalcError(f"--engine trtllm: {spec.name}'s attention layers differ in head_dim "
                           f"({', '.join(map(str, dims))}), which TensorRT-LLM's V1 KV cache manager cannot hold (one "
                           f"head_dim for every layer): it serves such a model from KVCacheManagerV2 whatever "
                           f"use_kv_cache_manager_v2 says ({_V2_ONLY}), whose pool is not sized here")
