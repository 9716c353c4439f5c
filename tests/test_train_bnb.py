"""bitsandbytes' 4-bit layers measured where bitsandbytes runs on the CPU (those tests skip without it).

litgpt's QLoRA runs measured 1.4-4.4 GB above `gptcalc train` while its LoRA runs matched (docs/training.md,
"The bitsandbytes gap, explained"). Measured here with the live-storage tracker: the current bitsandbytes'
Linear4bit keeps exactly what a bf16 linear keeps; bitsandbytes 0.42.0's MatMul4Bit, the version litgpt pins,
keeps every 4-bit linear's input as long as the graph lives and dequantises an fp16-quantised weight through
an fp16 copy. The figures measured are recorded and checked against gptcalc's terms in the default run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from live_memory import Live

try:
    import bitsandbytes as bnb
except ImportError:  # the recorded figures are still checked against gptcalc below
    bnb = None
needs_bnb = pytest.mark.skipif(bnb is None, reason="bitsandbytes is not installed")

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


@needs_bnb
def test_nf4_layer_keeps_what_a_bf16_layer_keeps() -> None:
    (kept_bf16, peak_bf16), (kept_nf4, peak_nf4) = _measure("bf16"), _measure("nf4")
    assert kept_nf4 == kept_bf16
    assert 0 <= peak_nf4 - peak_bf16 <= D_IN * D_OUT * 2  # one dequantised weight, for a moment


# --- bitsandbytes 0.42.0, the version litgpt's QLoRA table ran (calc/analysis/train/bnb.py) ---------------
# Its MatMul4Bit, verbatim from the 0.42.0 wheel (tests/data), run over the installed bitsandbytes' NF4
# kernels: a tiny Llama with every linear in NF4 (quantised from fp16, as Lightning does), LoRA on q and v,
# the head applied in chunks and returned in fp32 as litgpt and Fabric do. Measured with the live-storage
# tracker (bitsandbytes 0.50.2, torch 2.13 on the CPU) and recorded here, so the default run checks gptcalc's
# terms against the measurement without bitsandbytes:
TINY = {"name": "tiny-qlora", "family": "llama", "vocab_size": 512, "n_positions": 64, "d_model": 128,
        "n_layers": 2, "n_heads": 2, "head_dim": 64, "d_ff": 256}
B, T, CHUNK = 2, 64, 32
MEASURED_GRAPH_INPUTS = 327680  # bytes still held after backward, 0.42.0 less the current MatMul4Bit: by hand,
# 2 layers × 128 tokens × (normed x, attention output, normed x, SiLU·up: 3·128 + 256) + the head input (128 × 128)
# less layer 0's normed x (it needs no gradient), at 2 bytes
MEASURED_HEAD_PEAK = 262144  # a head chunk's forward, 0.42.0: beyond the chunk's input


def _setup(bnb: str):
    from calc.analysis.train import Setup

    return Setup(T, B, lora_rank=8, qlora=True, bnb=bnb, qlora_head=True, tied=False)


def test_gptcalc_counts_the_measured_terms() -> None:
    from calc.analysis.train.bnb import dequantised_bytes, graph_inputs
    from calc.spec.model import spec_from_dict

    spec = spec_from_dict(TINY, origin="tiny-qlora")
    assert graph_inputs(spec, _setup("0.42.0")) == MEASURED_GRAPH_INPUTS
    assert graph_inputs(spec, _setup("current")) == 0
    assert dequantised_bytes(_setup("0.42.0")) * TINY["vocab_size"] * TINY["d_model"] == MEASURED_HEAD_PEAK


def _matmul_0420():
    from math import prod

    source = (Path(__file__).parent / "data" / "bitsandbytes-0.42.0-MatMul4Bit.py.txt").read_text()
    namespace = {"torch": torch, "F": bnb.functional, "prod": prod}
    exec(source, namespace)  # noqa: S102 - bitsandbytes' own source, recorded
    return namespace["MatMul4Bit"]


class _TinyQLoRA:
    """litgpt's layer order in plain torch: RMSNorm, q k v, causal attention, o; RMSNorm, gate up, SiLU, down."""

    def __init__(self, version: str) -> None:
        torch.manual_seed(0)
        d, ff, v = TINY["d_model"], TINY["d_ff"], TINY["vocab_size"]
        self.old = _matmul_0420() if version == "0.42.0" else None
        shapes = [(d, d), (d, d), (d, d), (d, d), (ff, d), (ff, d), (d, ff)] * TINY["n_layers"] + [(v, d)]
        self.w = [bnb.nn.Params4bit(torch.randn(o, i, dtype=torch.float16), requires_grad=False, quant_type="nf4",
                                    compress_statistics=False)._quantize("cpu") for o, i in shapes]
        self.lora = [torch.nn.Parameter(torch.randn(r, c, dtype=torch.bfloat16) / 8)
                     for _ in range(2 * TINY["n_layers"]) for r, c in ((8, d), (d, 8))]
        self.emb = torch.randn(v, d, dtype=torch.bfloat16)

    def tensors(self) -> list[torch.Tensor]:
        return [*self.w, *self.lora, self.emb]

    def linear(self, x: torch.Tensor, w) -> torch.Tensor:  # noqa: ANN001
        if self.old is not None:
            return self.old.apply(x, w.t(), None, None, w.quant_state)
        return bnb.matmul_4bit(x, w.t(), quant_state=w.quant_state)

    @staticmethod
    def norm(x: torch.Tensor) -> torch.Tensor:
        f = x.float()
        return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)

    def __call__(self, ids: torch.Tensor) -> list[torch.Tensor]:
        x, heads = self.emb[ids], TINY["n_heads"]
        for layer in range(TINY["n_layers"]):
            w, (qa, qb, va, vb) = self.w[7 * layer:7 * layer + 7], self.lora[4 * layer:4 * layer + 4]
            h = self.norm(x)
            q = self.linear(h, w[0]) + h @ qa.t() @ qb.t()
            k = self.linear(h, w[1])
            v = self.linear(h, w[2]) + h @ va.t() @ vb.t()
            split = [t.unflatten(-1, (heads, -1)).transpose(1, 2) for t in (q, k, v)]
            a = torch.nn.functional.scaled_dot_product_attention(*split, is_causal=True).transpose(1, 2).flatten(2)
            x = x + self.linear(a, w[3])
            h = self.norm(x)
            x = x + self.linear(torch.nn.functional.silu(self.linear(h, w[4])) * self.linear(h, w[5]), w[6])
        h = self.norm(x)
        return [self.linear(c, self.w[-1]).float() for c in h.split(CHUNK, dim=1)]


def _held_after_backward(version: str) -> int:
    """Bytes alive after one micro-batch's backward while the loop still holds its logits."""
    model = _TinyQLoRA(version)
    ids = torch.randint(0, TINY["vocab_size"], (B, T))
    with Live(*model.tensors()) as live:
        logits = model(ids)
        sum(c.sum() for c in logits).backward()
        for p in model.lora:
            p.grad = None
        return live.now


@needs_bnb
def test_bnb_0_42_0_keeps_every_4bit_input_while_the_graph_lives() -> None:
    assert _held_after_backward("0.42.0") - _held_after_backward("current") == MEASURED_GRAPH_INPUTS


@needs_bnb
def test_bnb_0_42_0_dequantises_through_fp16() -> None:
    model = _TinyQLoRA("0.42.0")
    x = torch.randn(B, CHUNK, TINY["d_model"], dtype=torch.bfloat16, requires_grad=True)
    with Live(x, *model.tensors()) as live:
        model.linear(x, model.w[-1])
    assert live.peaks[""] == MEASURED_HEAD_PEAK


def test_bnb_0_42_0_is_counted_for_a_whole_model_per_gpu() -> None:
    from calc.analysis.train import Setup, train
    from calc.errors import GptcalcError
    from calc.spec.model import spec_from_dict

    spec = spec_from_dict(TINY, origin="tiny-qlora")
    with pytest.raises(GptcalcError, match="--bnb 0.42.0"):
        train(spec, Setup(T, B, gpus=2, tp=2, lora_rank=8, qlora=True, bnb="0.42.0"))
    assert train(spec, Setup(T, B, gpus=2, tp=2, lora_rank=8, qlora=True)).allocated > 0  # current: no such limit


def test_litgpt_loop_holds_the_previous_logits_through_the_next_forward() -> None:
    """litgpt's fit loop (`logits = model(...)`, Fabric's fp32 copy made before model(...) returns) runs the
    next forward beside the previous micro-batch's fp32 logits: measured, the second forward peaks above the
    first by exactly them (4 bytes per token and vocabulary entry), the moment peak.py's `forward ends`."""
    torch.manual_seed(0)
    d, v = TINY["d_model"], TINY["vocab_size"]
    emb, head = torch.randn(v, d, dtype=torch.bfloat16), torch.randn(v, d, dtype=torch.bfloat16)
    lora = torch.nn.Parameter(torch.randn(d, d, dtype=torch.bfloat16) / 16)
    ids = torch.randint(0, v, (B, T))

    def model() -> list[torch.Tensor]:
        chunks = [c @ head.t() for c in (emb[ids] @ lora).split(CHUNK, dim=1)]
        return [c.float() for c in chunks]  # Fabric's convert_output, the bf16 list dropped after

    with Live(emb, head, lora) as live:
        logits = None
        for step in range(2):
            live.tag = f"forward {step}"
            logits = model()
            live.tag = f"backward {step}"
            sum(c.sum() for c in logits).backward()
            lora.grad = None
    assert live.peaks["forward 1"] - live.peaks["forward 0"] == 4 * B * T * v
