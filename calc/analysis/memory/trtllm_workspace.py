"""TensorRT-LLM's reserve for the context-MLA attention workspace, taken from the KV budget after profiling.

KvCacheCreator.configure_kv_cache_capacity (tensorrt_llm/_torch/pyexecutor/_util.py at NVIDIA/TensorRT-LLM
0004396720054f, merged in #16399 and made a backend contract in #16432) takes, after _cal_max_memory's budget,

    w       = the selected attention backend's runtime_workspace_bytes_per_token
              (get_attention_workspace_bytes_per_token)
    L_cap   = min(max_batch_size, max_num_tokens) x max_seq_len      (get_mla_context_workspace_kv_len_cap; or
              kv_cache_config.fp8_context_mla_kv_len_cap, floored at max_seq_len), and None, so no reserve, unless
              block reuse is on and chunked prefill off, or the backend's workspace ignores chunked prefill
    reserve = min(w x L_cap, budget x w / (k + w))      k: the KV cost of a token (get_mla_context_workspace_reserve)

and for the V1 manager max_tokens = (budget - reserve) // k. TensorRT-LLM's defaults are block reuse on
(KvCacheConfig.enable_block_reuse) and chunked prefill off (enable_chunked_prefill, llmapi/llm_args.py), so the gate
is open by default; what decides is w. A backend declares it only for a workspace sized by the summed attended KV
length: the default TRTLLM backend's fp8 context-MLA K/V dequant buffer and NVFP4 DSA context gather (its
ATTENTION_DEVELOPER_GUIDE.md, section 2.3); every other case inherits AttentionBackend's 0. So:

- a 16-bit cache, gptcalc's default and TensorRT-LLM's for a checkpoint without KV-cache quantisation (the model's
  dtype unless quant_mode.has_fp8_kv_cache(), _create_kv_cache_manager at the same commit), gives w = 0: no reserve,
  and the pool and max tokens gptcalc prints stand;
- an MLA cache (MLA or DSA) in fp8 gives w > 0 on the TRTLLM backend (for DSA on Blackwell's trtllm-gen kernels
  the absorption path may stage nothing, depending on TRTLLM_MLA_SHORT_SEQ_MHA_THRESHOLD, as TensorRT-LLM's unit
  tests of this reserve pin it). Then the pool shrinks: with
  L_cap = min(max_batch_size, 8,192) x max_seq_len far above the pool, the reserve is the per-token split and the
  tokens become budget / (k + w). The backend's formula for w was not in the index at a commit beside this _util.py
  (the stored attention backend files are older or newer), so gptcalc refuses to size that pool rather than print
  one too large, and asks for the log's figure.
"""

from __future__ import annotations

from calc.analysis.memory.kv import KVCache
from calc.analysis.memory.vllm_indexer import DSA
from calc.errors import GptcalcError

__all__ = ["SOURCE", "refuse_mla_workspace"]

SOURCE = ("https://github.com/NVIDIA/TensorRT-LLM/blob/0004396720054fd8e205cbf616f21f0b57c6b412/tensorrt_llm/_torch/"
          "pyexecutor/_util.py (KvCacheCreator.configure_kv_cache_capacity: the context-MLA workspace reserve, "
          "get_mla_context_workspace_reserve; NVIDIA/TensorRT-LLM#16399, #16432)")


def refuse_mla_workspace(kv: KVCache) -> None:
    """Stop before sizing TensorRT-LLM's pool from its start-up budget where it reserves the fp8 context-MLA workspace
    out of it: an MLA cache (MLA latent or DSA) in fp8."""
    mla = any(kind.kind in ("MLA", DSA) for kind in kv.layers)
    if mla and kv.format.name.startswith("fp8"):
        raise GptcalcError(
            f"--engine trtllm: {kv.model}'s MLA cache in {kv.format.name}: TensorRT-LLM takes a reserve for the fp8 "
            "context-MLA attention workspace out of the KV budget (budget x w / (k + w) by default, w its backend's "
            f"bytes a token, not pinned here; {SOURCE}); give the pool its log prints after "
            "\"KV cache budget … -> \" with --kv-memory, or a 16-bit cache")
