"""PEFT's LoRA on transformers 5's fused expert stacks, run for real: what it trains and what each layer keeps.

transformers 5 stores a MoE's experts as one parameter per stack (Qwen3MoeExperts and the others:
gate_up_proj [E, 2·f, d], down_proj [E, d, f]), which no module target reaches; PEFT adapts them through
`LoraConfig(target_parameters=[...])` (peft 0.21.2, tuners/lora/layer.py, ParamWrapper: A [r·E, in],
B [out, r·E]; _LoraFactorsProxy folds them into the stack each forward with baddbmm). Each of
transformers' tiny MoE models (tests/tiny_models.py) in bf16, its base frozen by get_peft_model, rank 4,
adapters on both stacks or on one, fp32 adapters (PEFT's default autocast_adapter_dtype=True) or bf16
ones, and (bf16 adapters) both stacks beside q_proj's and v_proj's adapters (target_modules) in the models
frozen.py counts: the trained parameters, and the bytes each layer keeps for backward (tests/saved_tensors.py;
batch 3, 7 tokens, the loss on the ids themselves).

peft is not a project dependency: `python tests/peft_experts.py` (with torch 2.13.0, transformers 5.24.0
and peft 0.21.2 installed) writes the record, tests/data/peft_experts.json; tests/test_train_peft.py checks
the record by default and measures again where peft is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RECORD = Path(__file__).parent / "data" / "peft_experts.json"
MODEL_TYPES = ("qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "gpt_oss", "deepseek_v3")
TARGETS = (("experts_gate_up", "experts_down"), ("experts_gate_up",), ("experts_down",))
PARAMETERS = {"experts_gate_up": "mlp.experts.gate_up_proj", "experts_down": "mlp.experts.down_proj"}
MODULES = {"q": "q_proj", "v": "v_proj"}
BESIDE = ("q", "v", *TARGETS[0])  # with the attention's adapters, bf16 adapters only (the fp32 copies PEFT makes of
# the linears' inputs are measured on their own: tests/peft_linears.py)
FROZEN_FORMS = ("qwen3_moe", "qwen2_moe", "mixtral", "olmoe")  # frozen.py's _plain MoE blocks
RANK, BATCH, SEQ = 4, 3, 7


def measure(model_type: str, targets: tuple[str, ...], fp32_adapters: bool) -> dict[str, object]:
    """{"trained": adapter parameters, "kept": bytes saved for backward per layer} of one PEFT run."""
    import peft
    import torch
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from tiny_models import VOCAB

    model = _transformers_tiny(model_type).to(torch.bfloat16).train()
    config = peft.LoraConfig(r=RANK, target_modules=[MODULES[t] for t in targets if t in MODULES],
                             target_parameters=[PARAMETERS[t] for t in targets if t in PARAMETERS])
    model = peft.get_peft_model(model, config, autocast_adapter_dtype=fp32_adapters)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    return {"trained": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "kept": saved_per_layer(model.base_model.model, ids)}


def key(targets: tuple[str, ...], fp32_adapters: bool) -> str:
    return ",".join(targets) + (" fp32" if fp32_adapters else " bf16")


def runs() -> list[tuple[str, tuple[str, ...], bool]]:
    """(model type, targets, fp32 adapters) of every recorded run."""
    return [*((model_type, targets, fp32) for model_type in MODEL_TYPES for targets in TARGETS for fp32 in (True, False)),
            *((model_type, BESIDE, False) for model_type in FROZEN_FORMS)]


def record() -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for model_type, targets, fp32 in runs():
        out.setdefault(model_type, {})[key(targets, fp32)] = measure(model_type, targets, fp32)
    return out


if __name__ == "__main__":  # record: python tests/peft_experts.py (from the repository root)
    sys.path.insert(0, str(Path(__file__).parent))
    RECORD.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {RECORD}\n")
