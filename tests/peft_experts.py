"""PEFT's LoRA on transformers 5's fused expert stacks, run for real: what it trains and what each layer keeps.

transformers 5 stores a MoE's experts as one parameter per stack (Qwen3MoeExperts and the others:
gate_up_proj [E, 2·f, d], down_proj [E, d, f]), which no module target reaches; PEFT adapts them through
`LoraConfig(target_parameters=[...])` (peft 0.21.2, tuners/lora/layer.py, ParamWrapper: A [r·E, in],
B [out, r·E]; _LoraFactorsProxy folds them into the stack each forward with baddbmm). Each of
transformers' tiny MoE models (tests/tiny_models.py) in bf16, its base frozen by get_peft_model, rank 4,
adapters on both stacks or on one, fp32 adapters (PEFT's default autocast_adapter_dtype=True) or bf16
ones, and (bf16 adapters) both stacks beside q_proj's and v_proj's adapters (target_modules) in the models
frozen.py counts: the trained parameters, the bytes each layer keeps for backward (tests/saved_tensors.py;
batch 3, 7 tokens, the loss on the ids themselves) and what the merged stacks' gradients add in backward.

peft is not a project dependency: `python tests/peft_experts.py` (with torch 2.13.0, transformers 5.24.0
and peft 0.21.2 installed) writes the record, tests/data/peft_experts.json; tests/test_train_peft.py checks
the record by default and measures again where peft is installed.
"""

from __future__ import annotations

import json
import sys
import weakref
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
    """{"trained": adapter parameters, "kept": bytes saved for backward per layer, "merged_gradient": what the
    merged stacks' gradients add in backward (`_merged_gradients`)} of one PEFT run."""
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
            "kept": saved_per_layer(model.base_model.model, ids), "merged_gradient": _merged_gradient(model, ids)}


def _merged_gradient(model, ids) -> int:  # noqa: ANN001
    """In backward each merged stack W + BA (what _LoraFactorsProxy's baddbmm makes each forward, saved by the
    grouped matmul) gets a gradient of its own size before it flows into A and B. The most that the saved merged
    stacks still alive and the gradient arriving hold together, at each gradient's arrival, beyond the merged
    stacks saved at forward's end (kept activations, counted already): the transient a layer's backward adds.
    Each saved tensor is held detached and watched (as tests/saved_tensors.py does): its storage counts while the
    graph holds it; a saved tensor is a merged stack's where it shares the storage of one still alive."""
    import torch
    from peft.tuners.lora import layer

    stacks, saved, state = {}, [], {"peak": 0, "kept": None}
    forward = layer._LoraFactorsProxy.forward

    def alive() -> int:
        return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                    for t in (ref() for ref in saved) if t is not None}.values())

    def arrived(grad: torch.Tensor) -> None:
        if state["kept"] is None:  # the first gradient: backward has freed no merged stack yet
            state["kept"] = alive()
        state["peak"] = max(state["peak"], alive() + grad.untyped_storage().nbytes() - state["kept"])

    def folded(self, W):  # noqa: ANN001, ANN202, N803
        out = forward(self, W)
        stacks[out.untyped_storage().data_ptr()] = weakref.ref(out)  # a freed stack's address may be reused
        out.register_hook(arrived)
        return out

    def pack(t: torch.Tensor) -> torch.Tensor:
        held = t.detach()
        stack = stacks.get(t.untyped_storage().data_ptr())
        if stack is not None and stack() is not None:
            saved.append(weakref.ref(held))
        return held

    layer._LoraFactorsProxy.forward = folded
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(ids, labels=ids).loss
        loss.backward()
    finally:
        layer._LoraFactorsProxy.forward = forward
    return state["peak"]


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
