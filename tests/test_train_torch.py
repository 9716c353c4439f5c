"""`gptcalc train` against real torch: the bytes autograd keeps, and AdamW's state after one step.

Activations: tests/training_forward.py is a tiny training forward with plain torch ops (the one
calc/analysis/train/activations.py describes); `torch.autograd.graph.saved_tensors_hooks` sees
every tensor saved for backward, and the test adds up the bytes of their distinct storages, leaving
out parameters. That sum equals our formula exactly, for GPT-2 and Llama layouts (MHA, GQA, MQA;
LayerNorm and RMSNorm; learned, rotary or no positions; tied and untied heads) under each
recompute mode: none, selective (QKᵀ, softmax, P·V checkpointed) and full (every layer
checkpointed), with attention explicit or through torch's fused scaled_dot_product_attention (its
CPU FlashAttention kernel, which keeps what FlashAttention-2 keeps on a GPU: Q, K, V, the output
and the log-sum-exp). What is measured is what autograd holds at the end of the forward pass; the
transient memory of backward (a recomputed layer, gradients in flight) is not.

Optimizer: a real torch.optim.AdamW after one step holds `exp_avg` and `exp_avg_sq` (and a scalar
`step`) per parameter; their bytes equal `optimizer_bytes("adamw", ...)` in fp32.
"""

from __future__ import annotations

import pytest
import torch

from calc.analysis.train.activations import activation_terms, layer_terms
from calc.analysis.train.params import held
from calc.analysis.train.states import optimizer_bytes
from calc.spec.flat import flat_view
from tiny_specs import TINY, tiny_spec
from training_forward import TrainingForward

B, T = 3, 7
FP32 = 4


def saved_bytes(model: torch.nn.Module, run) -> int:
    """Bytes of the distinct storages autograd saves while `run()` runs, parameters left out."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = run()
    loss.backward()  # the graph was complete and usable
    return sum(kept.values())


@pytest.mark.parametrize("attention", ["eager", "flash"])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("name", TINY)
def test_saved_tensors_equal_the_activation_formula(name: str, recompute: str, attention: str) -> None:
    spec = tiny_spec(name)
    torch.manual_seed(0)
    model = TrainingForward(flat_view(spec))
    ids = torch.randint(0, spec.vocab_size, (B, T))
    measured = saved_bytes(model, lambda: model(ids, recompute, attention))
    (block,) = spec.blocks.values()
    flash = attention == "flash"
    layer = sum(t.bytes(1, False) for t in layer_terms(block, spec.d_model, B, T, FP32, recompute, flash))
    outside = sum(t.bytes(1, False) for t in activation_terms(spec, B, T, FP32, recompute))
    assert measured == spec.n_layers * layer + outside


@pytest.mark.parametrize("name", TINY)
def test_adamw_state_after_one_step(name: str) -> None:
    spec = tiny_spec(name)
    torch.manual_seed(0)
    model = TrainingForward(flat_view(spec))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randint(0, spec.vocab_size, (B, T))).backward()
    optimizer.step()
    moments = sum(state[key].nbytes for state in optimizer.state.values() for key in ("exp_avg", "exp_avg_sq"))
    steps = {state["step"].numel() for state in optimizer.state.values()}
    assert len(optimizer.state) == len(list(model.parameters())) and steps == {1}  # one scalar step count each
    assert moments == optimizer_bytes("adamw", held(spec).tensors)
    assert sum(p.numel() for p in model.parameters()) == held(spec).params
