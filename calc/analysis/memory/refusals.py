"""Where an engine stops before it sizes anything: the models it cannot load at all, checked in one place for
every command that takes --engine (memory, compare, report), so each refuses what the engine would.

TensorRT-LLM: an architecture its PyTorch backend has no class for (trtllm_models.refuse_unbuilt) and a model
only its KVCacheManagerV2 serves (trtllm_manager.refuse_v2_only); llama.cpp: a model its converter has no
architecture for (llamacpp.refuse_unconverted), and one whose GGUF its loader refuses (llamacpp.refuse_unloadable).
Each engine's modules load only under it, so a plain command answers at start-up speed.
"""

from __future__ import annotations

from collections.abc import Sequence

from calc.spec.model import ModelSpec

__all__ = ["engine_seq", "refuse_unserved"]


def refuse_unserved(spec: ModelSpec, engine: str | None) -> None:
    """Raise the engine's own refusal of `spec` (one Error: line), or return where it would load it."""
    if engine == "trtllm":
        from calc.analysis.memory.trtllm_manager import refuse_v2_only
        from calc.analysis.memory.trtllm_models import refuse_unbuilt

        refuse_unbuilt(spec, engine)
        refuse_v2_only(spec, engine)
    if engine == "llamacpp":
        from calc.analysis.memory.llamacpp import refuse_unconverted, refuse_unloadable

        refuse_unconverted(spec, engine)
        refuse_unloadable(spec, engine)


def engine_seq(engine: str | None, seq: int | None, specs: Sequence[ModelSpec]) -> int:
    """The context a server holds for `seq` tokens (default: the shortest of the models' contexts): llama.cpp pads
    it to its cells, others keep it; a model the engine cannot load (memory's refusals) is refused, not sized as
    if it ran."""
    tokens = seq or min(spec.n_positions for spec in specs)
    if engine is None:
        return tokens
    from calc.analysis.memory import ENGINES, padded_context

    for spec in specs:
        refuse_unserved(spec, engine)
    return padded_context(ENGINES[engine], tokens)
