"""The bitsandbytes QLoRA gap, measured where bitsandbytes runs on the CPU (skipped where it is not installed).

litgpt's QLoRA runs measure 2.6-3.2 GB above `gptcalc train` while its LoRA runs match (docs/training.md).
One suspect is the 4-bit layer itself keeping more for backward than a bf16 linear does. Measured here
with the live-storage tracker around a frozen linear plus a LoRA branch (dropout, A, B), as litgpt's
LoRALinear computes it: bitsandbytes' Linear4bit (NF4) keeps exactly what the bf16 linear keeps after
forward, and its backward adds at most one dequantised matrix, so the suspect is ruled out.
"""

from __future__ import annotations

import pytest
import torch

from live_memory import Live

bnb = pytest.importorskip("bitsandbytes")

D_IN, D_OUT, N, RANK = 512, 1024, 256, 8


def _frozen(kind: str) -> torch.nn.Module:
    weight = torch.randn(D_OUT, D_IN, dtype=torch.bfloat16)
    if kind == "bf16":
        layer = torch.nn.Linear(D_IN, D_OUT, bias=False).to(torch.bfloat16)
        layer.weight = torch.nn.Parameter(weight)
    else:
        layer = bnb.nn.Linear4bit(D_IN, D_OUT, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
        layer.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type="nf4")._quantize("cpu")
    return layer.requires_grad_(False)


def _measure(kind: str) -> tuple[int, int]:
    """(bytes alive after forward, the peak in backward) beyond the inputs, weights and adapters."""
    torch.manual_seed(0)
    layer = _frozen(kind)
    a = torch.nn.Parameter(torch.randn(RANK, D_IN, dtype=torch.bfloat16))
    b = torch.nn.Parameter(torch.zeros(D_OUT, RANK, dtype=torch.bfloat16))
    x = torch.randn(N, D_IN, dtype=torch.bfloat16, requires_grad=True)
    with Live(x, a, b, *layer.parameters()) as live:
        live.tag = "forward"
        y = layer(x) + (torch.nn.functional.dropout(x, 0.05) @ a.t() @ b.t()) * 2.0
        kept = live.now
        live.tag = "backward"
        y.float().sum().backward()
    return kept, live.peaks["backward"]


def test_nf4_layer_keeps_what_a_bf16_layer_keeps() -> None:
    (kept_bf16, peak_bf16), (kept_nf4, peak_nf4) = _measure("bf16"), _measure("nf4")
    assert kept_nf4 == kept_bf16
    assert 0 <= peak_nf4 - peak_bf16 <= D_IN * D_OUT * 2  # one dequantised weight, for a moment
