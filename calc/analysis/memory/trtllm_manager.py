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

V2 is not sized here. For one kind of layer its runtime keeps one pool group (runtime/kv_cache_manager_v2/_storage/
_config.py at 1148a82f66) and gives it the most slots whose pools fit the quota rounded up to a grain, 2 MiB <<
min(4, int(log2(quota / 1 GiB))) (_storage_manager.py at 00f6bd61f2), but the quota is set by the pyexecutor wrapper
(kv_cache/kv_cache_manager_v2.py), whose stored versions disagree on it, and at 0076e9390e the runtime is C++
(runtime/kv_cache_manager_v2/__init__.py re-exports cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2), whose files
the index holds at other commits only; the only pool line of V2's found is its quota. So gptcalc prints V1's lines
and says whose they are (docs/memory.md, "Which KV cache manager TensorRT-LLM uses").
"""

from __future__ import annotations

from calc.analysis.memory.kv import kv_layers
from calc.analysis.memory.trtllm_windows import window_note
from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["TRTLLM_V2_DEFAULT", "manager_note", "refuse_v2_only"]

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


def manager_note(spec: ModelSpec) -> str:
    """Whose pool and lines `--engine trtllm` showed, where the class prefers V2 that its default differs, and what V1
    does with sliding-window layers (calc.analysis.memory.trtllm_windows)."""
    windows = window_note(spec)
    return f"{_manager(spec)}; {windows}" if windows else _manager(spec)


def _manager(spec: ModelSpec) -> str:
    arch = spec.architecture
    if arch is None:
        return f"{_V1}; {spec.name} names no architecture, so which manager TensorRT-LLM's \"auto\" picks is not known"
    source = TRTLLM_V2_DEFAULT.get(arch)
    if source is None:
        return f"{_V1}, which the default, \"auto\", keeps for {arch} (no V2 preference of its class was found)"
    return (f"{_V1}; for {arch} the default, \"auto\", picks KVCacheManagerV2 ({source}), whose pool and lines "
            "are not sized here: set use_kv_cache_manager_v2: false to get these")


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
