"""TensorRT-LLM's MTP speculative decoding in its KV pool (speculative_config MTP, max_draft_len = gptcalc's
--speculative-num-steps).

One-model MTP keeps its draft layers in the target's own KV cache manager, V1's and KVCacheManagerV2's alike: the
manager's layers are the target's plus get_num_spec_layers(spec_config) appended after them, on the last pipeline
rank (get_pp_layers, tensorrt_llm/_torch/pyexecutor/resource_manager.py; the KvCacheCreator prices the pool's token
with those layers in, _util.py at 0004396720, _per_manager_cache_cost). get_num_spec_layers is 1 for MTP-Eagle one
model (it replays one MTP layer) and num_nextn_predict_layers for vanilla MTP (tensorrt_llm/_torch/speculative/utils.py
at 011d0933dc,
https://github.com/NVIDIA/TensorRT-LLM/blob/011d0933dcb5e592f5fa2626beaf42a96324c578/tensorrt_llm/_torch/speculative/utils.py),
so where the checkpoint has one MTP layer (DeepSeek-V3 / R1) both modes add that one layer. The
manager also reserves get_num_extra_kv_tokens = max_draft_len - 1 tokens a sequence (same file), which changes no
token slot of the pool, only what one request takes of it.

Sized here only where that layer count does not hang on the mode or on settings gptcalc does not take: one MTP
layer, plain attention layers (no DSA indexer, windows or Mamba states), one pipeline stage, no attention DP
(with attention DP, or use_separate_draft_kv_cache, the draft's layers go to a manager of their own).
"""

from __future__ import annotations

from dataclasses import replace

from calc.analysis.memory.kv import KVCache
from calc.errors import GptcalcError

__all__ = ["with_mtp_layers"]

_FLAG = "--speculative-num-steps with --engine trtllm"


def with_mtp_layers(kv: KVCache, draft_layers: int | None, pp: int) -> KVCache:
    """`kv` with the MTP layer TensorRT-LLM's manager appends (get_pp_layers), its rows the checkpoint's own
    (kv.mtp); what the layer count or the manager would hang on beyond those is refused."""
    if draft_layers is not None:
        raise GptcalcError(f"--speculative-draft-layers: {_FLAG} sizes the checkpoint's own MTP layers (an EAGLE3 "
                           "draft's layers are not modelled)")
    if pp > 1:
        raise GptcalcError(f"{_FLAG} under --pp: the MTP layers sit on the last pipeline rank only; not modelled")
    if kv.states or any(kind.window for kind in kv.layers) or len({kind.kind for kind in kv.layers}) > 1:
        raise GptcalcError(f"{_FLAG}: {kv.model}'s mixed cache (windows, states or a DSA indexer) is not modelled "
                           "with the MTP layer")
    mtp_layers = sum(kind.n_layers for kind in kv.mtp)
    if not mtp_layers:
        raise GptcalcError(f"{_FLAG}: {kv.model} has no MTP layers (an EAGLE3 draft's layers are not modelled)")
    if mtp_layers != 1:
        raise GptcalcError(f"{_FLAG}: {kv.model} has {mtp_layers} MTP layers; TensorRT-LLM's layer "
                           "count then hangs on the MTP mode (MTP-Eagle: 1, vanilla: num_nextn_predict_layers), so "
                           "only a checkpoint with one MTP layer is sized")
    appended = tuple(replace(kind, block=f"{kind.block} (MTP)") for kind in kv.mtp)
    return replace(kv, layers=kv.layers + appended)
