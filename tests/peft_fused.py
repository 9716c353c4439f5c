"""PEFT's LoRA on fused linears, run for real: how many parameters it trains on models whose checkpoint fuses Q, K and V
into one linear (GPT-2's and StarCoder's c_attn, GPT-NeoX's, BLOOM's and Falcon's query_key_value, MPT's and DBRX's
Wqkv, Phi-3's qkv_proj) or gate and up (Phi-3's, GLM-4's, MiniMax-M3's and Zamba2's gate_up_proj, GraniteMoeHybrid's
shared_mlp.input_linear).

PEFT adapts a module by its name (peft 0.21.2, tuners/tuners_utils.py, check_target_module_exists: the module's name
ends with `.{target}`), so a fused linear takes one adapter, A [in, r] and B [r, its whole output]: (in + out)·r, not
one per part. Each of transformers' tiny models (tests/tiny_models.py), rank 4, PEFT's target_modules named by hand
from the model's own modules below (gptcalc's target names beside them), expert stacks through target_parameters.
On tiny Phi-3, GLM-4 and GPT-NeoX in bf16 with PEFT's default fp32 adapters on every target, also the bytes each layer
keeps for backward (tests/saved_tensors.py; batch 3, 7 tokens, SDPA, the loss on the ids themselves): a fused
adapter keeps one fp32 copy of its input and one A output. (With bf16 adapters these models keep 1,344 B a layer more
than gptcalc counts: o_proj's A saves the attention output's contiguous copy, 21 × 32 bf16, a storage apart from
CPU SDPA's output, where tiny Llama's is one with it; tiny Phi, which fuses nothing, shows the same, so it is not the
fused linears' doing and is not recorded here.)

peft is not a project dependency: `python tests/peft_fused.py` (with torch 2.13.0, transformers 5.24.0 and peft
0.21.2 installed) writes the record, tests/data/peft_fused.json; tests/test_train_fused_lora.py checks the record by
default and measures again where peft is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RECORD = Path(__file__).parent / "data" / "peft_fused.json"
RANK, BATCH, SEQ = 4, 3, 7
KEPT = ("phi3", "glm4", "gpt_neox")  # dense models whose layers frozen.py counts: their kept bytes are recorded
_GPT2 = {"q,k,v": ["c_attn"], "o": ["attn.c_proj"], "up": ["c_fc"], "down": ["mlp.c_proj"]}
_NEOX = {"q,k,v": ["query_key_value"], "o": ["attention.dense"], "up": ["dense_h_to_4h"], "down": ["dense_4h_to_h"]}
_BLOOM = {**_NEOX, "o": ["self_attention.dense"]}
_SPLIT_QKV = {"q": ["self_attn.q_proj"], "k": ["self_attn.k_proj"], "v": ["self_attn.v_proj"], "o": ["o_proj"]}
# model_type -> gptcalc's targets (comma-joined) -> PEFT's target_modules, read off each tiny model's modules
# (named_modules: nn.Linear and GPT-2's Conv1D); "experts_*": PEFT's target_parameters on the expert stacks
MODULES: dict[str, dict[str, list[str]]] = {
    "gpt2": _GPT2, "gpt_bigcode": _GPT2, "gpt_neox": _NEOX, "bloom": _BLOOM, "falcon": _BLOOM,
    "mpt": {"q,k,v": ["Wqkv"], "o": ["out_proj"], "up": ["up_proj"], "down": ["down_proj"]},
    "dbrx": {"q,k,v": ["Wqkv"], "o": ["out_proj"]},
    "phi3": {"q,k,v": ["qkv_proj"], "o": ["o_proj"], "gate,up": ["gate_up_proj"], "down": ["down_proj"]},
    "glm4": {**_SPLIT_QKV, "gate,up": ["gate_up_proj"], "down": ["down_proj"]},
    "zamba2": {**_SPLIT_QKV, "gate,up": ["gate_up_proj"], "down": ["down_proj"]},
    "minimax_m3_vl_text": {**_SPLIT_QKV, "gate,up": ["gate_up_proj"], "down": ["down_proj"],
                           "experts_gate_up": ["mlp.experts.gate_up_proj"], "experts_down": ["mlp.experts.down_proj"]},
    "granitemoehybrid": {**_SPLIT_QKV, "gate,up": ["input_linear"], "down": ["output_linear"],
                         "experts_gate_up": ["block_sparse_moe.experts.gate_up_proj"],
                         "experts_down": ["block_sparse_moe.experts.down_proj"]},
}


def runs() -> list[tuple[str, str]]:
    """(model_type, gptcalc's targets) of every recorded run: every target the model has, and each fused linear's
    targets alone; beside a MoE's expert stack (down's), which PEFT reaches as a parameter only, so that gate and up
    adapt the dense and shared MLPs only in gptcalc too (params.py)."""
    out = []
    for model_type, modules in MODULES.items():
        stack = ",experts_down" if "experts_down" in modules else ""
        out.append((model_type, ",".join(modules)))
        out += [(model_type, targets + stack) for targets in modules if targets in ("q,k,v", "gate,up")]
    return out


def _adapted(model_type: str, targets: str, dtype: str = "float32"):  # noqa: ANN202
    """transformers' tiny `model_type` in `dtype` under PEFT's adapters of rank RANK on `targets` (gptcalc's names,
    MODULES maps them)."""
    import peft
    import torch
    from test_hybrids import _transformers_tiny

    given = set(targets.split(","))
    wanted = [name for target, names in MODULES[model_type].items() if set(target.split(",")) <= given for name in names]
    config = peft.LoraConfig(r=RANK, target_modules=[n for n in wanted if not _stack(n)] or None,
                             target_parameters=[n for n in wanted if _stack(n)] or None)
    return peft.get_peft_model(_transformers_tiny(model_type).to(getattr(torch, dtype)).train(), config)


def measure(model_type: str, targets: str) -> int:
    """The parameters PEFT trains with adapters on `targets`."""
    return sum(p.numel() for p in _adapted(model_type, targets).parameters() if p.requires_grad)


def measure_kept(model_type: str) -> list[int]:
    """Bytes each layer of the bf16 tiny `model_type` keeps for backward under PEFT's fp32 adapters on every target."""
    import torch
    from saved_tensors import saved_per_layer
    from tiny_models import VOCAB

    model = _adapted(model_type, ",".join(MODULES[model_type]), "bfloat16")
    model.base_model.model.set_attn_implementation("sdpa")
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    return saved_per_layer(model.base_model.model, ids)


def _stack(name: str) -> bool:
    return name.endswith(("experts.gate_up_proj", "experts.down_proj"))


if __name__ == "__main__":  # record: python tests/peft_fused.py (from the repository root)
    sys.path.insert(0, str(Path(__file__).parent))
    record = {"trained": {model_type: {} for model_type in MODULES},
              "kept": {model_type: measure_kept(model_type) for model_type in KEPT}}
    for model_type, targets in runs():
        record["trained"][model_type][targets] = measure(model_type, targets)
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    sys.stdout.write(f"wrote {RECORD}\n")
