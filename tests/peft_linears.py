"""PEFT's LoRA on linear modules, run for real: what each layer keeps as the adapters' dtype and autocast decide.

PEFT casts each linear adapter's input to the adapters' dtype before A reads it (peft 0.21.2,
tuners/lora/layer.py, Linear.forward: `x = self._cast_input_dtype(x, lora_A.weight.dtype)`), a new tensor per
target module where the dtypes differ. transformers' tiny Llama in bf16, its base frozen by get_peft_model,
rank 4, adapters on q and v, o, down or all seven, LoRA dropout 0 or 0.1 (F.dropout as a GPU runs it: a bool
mask), in three runs: fp32 adapters (PEFT's default autocast_adapter_dtype=True) without autocast, the same
under bf16 autocast (torch.autocast on the CPU, as HF Trainer's bf16=True on a GPU), and bf16 adapters. The
record holds the bytes each layer keeps for backward (tests/saved_tensors.py; batch 3, 7 tokens, the loss on
the ids themselves).

peft is not a project dependency: `python tests/peft_linears.py` (with torch 2.13.0, transformers 5.24.0 and
peft 0.21.2 installed) writes the record, tests/data/peft_linears.json; tests/test_train_peft.py checks the
record by default and measures again where peft is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RECORD = Path(__file__).parent / "data" / "peft_linears.json"
MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
           "down": "down_proj"}
TARGETS = (("q", "v"), ("o",), ("down",), tuple(MODULES))
# the run -> gptcalc's precision that counts it (calc/analysis/train/precision.py: the adapters' width, autocast)
PRECISION = {"fp32": "mixed", "fp32 autocast": "fp32-autocast", "bf16": "bf16"}
RANK, BATCH, SEQ, DROPOUT = 4, 3, 7, 0.1


def measure(targets: tuple[str, ...], dropout: bool, run: str) -> list[int]:
    """Bytes each layer of the tiny Llama keeps for backward under PEFT's adapters on `targets`."""
    import peft
    import torch
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from test_train_torch import _gpu_dropout
    from tiny_models import VOCAB

    model = _transformers_tiny("llama").to(torch.bfloat16).train()
    model.set_attn_implementation("sdpa")
    config = peft.LoraConfig(r=RANK, target_modules=[MODULES[t] for t in targets], lora_dropout=DROPOUT * dropout)
    model = peft.get_peft_model(model, config, autocast_adapter_dtype=run != "bf16")
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    dropout_before, torch.nn.functional.dropout = torch.nn.functional.dropout, _gpu_dropout
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=run.endswith("autocast")):
            return saved_per_layer(model.base_model.model, ids)
    finally:
        torch.nn.functional.dropout = dropout_before


def key(targets: tuple[str, ...], dropout: bool, run: str) -> str:
    return ",".join(targets) + (" dropout" if dropout else "") + f" {run}"


def runs() -> list[tuple[tuple[str, ...], bool, str]]:
    """(targets, LoRA dropout, run) of every recorded run."""
    return [(targets, dropout, run) for targets in TARGETS for dropout in (False, True) for run in PRECISION]


if __name__ == "__main__":  # record: python tests/peft_linears.py (from the repository root)
    sys.path.insert(0, str(Path(__file__).parent))
    RECORD.write_text(json.dumps({key(*r): measure(*r) for r in runs()}, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {RECORD}\n")
