"""`gptcalc flops` against torch's own FlopCounterMode (also 2·m·n·k per matmul) on the reference model.

Tiny GPT-2- and Llama-layout specs (MHA, GQA, MQA; learned, rotary or no positions; tied and untied
heads; GELU and SwiGLU MLPs), the layouts calc/reference/model.py builds. Its attention runs QKᵀ and
weights·V as explicit matmuls (no fused SDPA, which FlopCounterMode may not see), so the counter sees
every matmul we count, and nothing else it counts is a matmul we leave out:

- a prefill: the forward total, each block, each attention; the LM head on every position (the
  reference computes all T logits, our default);
- a decode step after a filled KV cache;
- a training step, forward + backward: 3× the forward exactly;
- with every block checkpointed (torch.utils.checkpoint, full recomputation): 3× forward + every
  block's forward again. torch's non-reentrant checkpoint by default stops recomputing as soon as it
  has every tensor backward needs, which skips a block's last matmul (its output is not saved): the
  test turns that early stop off to measure the whole recomputed forward our count assumes.

Selective recomputation (only QKᵀ, softmax and weights·V again) is not measured here: the reference
model has no hook to checkpoint its core attention alone.

Beyond these layouts, every model_type's tiny config runs through the reference once, its prefill's
matmuls against the forward total.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode

from calc.analysis.flops import flops
from calc.reference.model import Decoder, build
from calc.spec.model import ModelSpec
from oracle import spec_of
from tiny_models import DATA_DEPENDENT_ROWS, TINY as TINY_CONFIGS, tiny_config
from tiny_specs import TINY, tiny_spec

B, T = 2, 5


def tiny(name: str) -> tuple[ModelSpec, Decoder]:
    spec = tiny_spec(name)
    torch.manual_seed(0)
    return spec, build(spec)


def counted(run) -> dict[str, int]:
    """FlopCounterMode's totals by module while `run()` runs (forward and, inside it, any backward)."""
    with FlopCounterMode(display=False) as counter:
        run()
    return {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}


@pytest.mark.parametrize("name", TINY)
def test_prefill_total_per_block_and_attention(name: str) -> None:
    spec, model = tiny(name)
    ids = torch.randint(0, spec.vocab_size, (B, T))
    with torch.no_grad():
        torch_flops = counted(lambda: model(ids))
    f = flops(spec, T, B)
    assert torch_flops["Global"] == f.forward
    names = {module: n for n, module in model.named_modules()}
    per_layer = {row.id: row.flops for row in f.rows if row.block}
    for block in model.part("blocks"):
        assert torch_flops[f"Decoder.{names[block]}"] == sum(per_layer.values())
        attention = torch_flops[f"Decoder.{names[block.part('attn')]}"]
        assert attention == sum(per_layer[i] for i in ("q", "k", "v", "scores", "attn_heads_out", "attn_out"))


@pytest.mark.parametrize("name", TINY)
def test_decode_step(name: str) -> None:
    spec, model = tiny(name)
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, spec.vocab_size, (B, T)), cache=cache)
        step = counted(lambda: model(torch.randint(0, spec.vocab_size, (B, 1)), cache=cache))
    assert step["Global"] == flops(spec, T, B, decode=True).forward


def _train_step(model: Decoder, ids: torch.Tensor) -> None:
    model.train()
    logits = model(ids)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()


@pytest.mark.parametrize("name", TINY)
def test_training_step_is_three_forwards(name: str) -> None:
    spec, model = tiny(name)
    ids = torch.randint(0, spec.vocab_size, (B, T))
    assert counted(lambda: _train_step(model, ids))["Global"] == flops(spec, T, B).training()["none"]


@pytest.mark.parametrize("name", TINY)
def test_full_recomputation_adds_every_blocks_forward(name: str) -> None:
    spec, model = tiny(name)
    for block in model.part("blocks"):  # each block's activations dropped and recomputed in backward
        block.forward = lambda *args, run=block.forward: checkpoint(run, *args, use_reentrant=False)
    ids = torch.randint(0, spec.vocab_size, (B, T))
    f = flops(spec, T, B)
    with set_checkpoint_early_stop(False):  # torch's default stops recomputing once backward has what it needs
        assert counted(lambda: _train_step(model, ids))["Global"] == f.training()["full"] == 3 * f.forward + f.blocks


# What FlopCounterMode (matmuls only) cannot see of each recurrence as the reference runs it: Mamba's,
# the delta rules' and KDA's per-step elementwise products and sums, and of lightning attention's
# 4·hd² per head per token the k⊗v outer product (a broadcast multiply), half; its o = q·S is a matmul.
UNSEEN_SHARE = {"ssm_scan": Fraction(1), "gdn_scan": Fraction(1), "kda_scan": Fraction(1), "la_scan": Fraction(1, 2)}


@pytest.mark.parametrize("model_type", sorted(set(TINY_CONFIGS) - DATA_DEPENDENT_ROWS))
def test_every_model_type_prefill_equals_flop_counter(model_type: str) -> None:
    """Each model_type's tiny config (hybrids, MLA, DSA's indexer, DeepSeek-V4's compressors, Gemma 3n's
    AltUp, shared blocks, ...) through the reference: FlopCounterMode's total equals `flops`' forward, less
    the scans it cannot see. Four tokens are within every tiny window and DSA's top-k, where the reference's
    masked full scores and our windowed count agree."""
    spec, seq = spec_of(tiny_config(model_type)), 4
    torch.manual_seed(0)
    model = build(spec)
    ids = torch.randint(0, spec.vocab_size, (1, seq))
    with torch.no_grad():
        measured = counted(lambda: model(ids))["Global"]
    f = flops(spec, seq, 1)
    assert measured == f.forward - sum(row.total * UNSEEN_SHARE.get(row.id, 0) for row in f.rows)
