"""Every shape `gptcalc shapes` prints, checked against a real torch model built from the same spec.

The reference (calc/reference/model.py and parts/) calls `trace(name, tensor)` at each step, with the
step ids of calc/analysis/shapes/; forward hooks record what each weight module reads and writes, and
torch's own FlopCounterMode counts the matmuls. Tiny specs cover MHA, GQA and MQA, learned, rotary
and no position embedding, head_dim != d_model / n_heads, tied and untied heads, both MLPs and norms,
for a prefill and for a decode step after a filled KV cache; and the trace of every model_type's tiny
config (tests/tiny_models.py: MoE, MLA, sliding windows, soft-caps, sinks, QK-norm, parallel and
sandwich blocks, mixed layer kinds) is compared step by step with what `shapes` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from calc.spec.flat import flat_view
from calc.analysis.shapes import Journey, Step, journey
from calc.spec.model import ModelSpec, spec_from_dict
from calc.reference.model import Decoder, build
from oracle import spec_of
from tiny_models import DATA_DEPENDENT_ROWS, TINY as TINY_CONFIGS
from tiny_models import tiny_config

SMALL = {"vocab_size": 97, "n_positions": 16, "d_model": 24, "n_layers": 2}
TINY: dict[str, dict[str, Any]] = {
    "gpt2-mha-learned": {"family": "gpt2", "n_heads": 4},
    "gpt2-gqa-learned-head_dim": {"family": "gpt2", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8},
    "llama-gqa-rotary-qkv_bias": {"family": "llama", "n_heads": 4, "n_kv_heads": 2, "head_dim": 8,
                                  "d_ff": 40, "qkv_bias": True},
    "llama-mqa-rotary-tied": {"family": "llama", "n_heads": 6, "n_kv_heads": 1, "tie_embeddings": True},
    "llama-mha-nopos-gelu-layernorm": {"family": "llama", "n_heads": 2, "position_embedding": "none",
                                       "mlp": "gelu", "norm": "layernorm", "mlp_bias": True},
}
B, T = 2, 5
MODES = ("prefill", "decode")
# Printed steps the reference has no tensor for, and why. Every other printed step is asserted.
UNTRACEABLE = {"probs": "the reference returns logits; the softmax over the vocabulary is the sampler's"}


@dataclass
class Recording:
    traced: list[tuple[str, list[int]]] = field(default_factory=list)
    calls: dict[str, list[tuple[list[int], list[int]]]] = field(default_factory=dict)  # module -> (in, out)
    flops: dict[str, int] = field(default_factory=dict)  # module name (FlopCounterMode's) -> FLOPs
    past: list[int] | None = None  # the cached keys' shape before a decode step


def tiny(name: str) -> ModelSpec:
    return spec_from_dict({"name": name, **SMALL, **TINY[name]}, origin=name)


def forward(model: Decoder, ids: torch.Tensor, cache: Any = None) -> Recording:
    """One forward pass with every trace point, every weight module's shapes and the FLOPs recorded."""
    rec = Recording()

    def hook(name: str):
        def record(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            rec.calls.setdefault(name, []).append((list(args[0].shape), list(output.shape)))
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if "weight" in m._parameters]
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(ids, cache=cache, trace=lambda name, t: rec.traced.append((name, list(t.shape))))
    finally:
        for handle in handles:
            handle.remove()
    rec.flops = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    return rec


@pytest.fixture(scope="module", params=[(name, mode) for name in TINY for mode in MODES], ids="-".join)
def case(request: pytest.FixtureRequest) -> tuple[ModelSpec, Decoder, Journey, Recording]:
    """The spec, its torch model, what `shapes` says, and what torch did (prefill or decode)."""
    name, mode = request.param
    spec = tiny(name)
    torch.manual_seed(0)
    model = build(spec)
    ids = torch.randint(0, spec.vocab_size, (B, T))
    if mode == "prefill":
        return spec, model, journey(spec, T, B), forward(model, ids)
    cache = model.new_cache()
    with torch.no_grad():
        model(ids, cache=cache)
    past = list(cache.keys[0].shape)
    rec = forward(model, torch.randint(0, spec.vocab_size, (B, 1)), cache)
    rec.past = past
    return spec, model, journey(spec, T, B, decode=True), rec


def expected_trace(spec: ModelSpec, j: Journey) -> list[tuple[str, list[int]]]:
    """What the reference must trace, in order: the steps before the blocks, each layer's block kind's
    steps (a mixed stack: the kind of each layer in turn), the head's steps; all but UNTRACEABLE."""
    def shapes(steps: list[Step]) -> list[tuple[str, list[int]]]:
        return [(s.id, list(s.output.sizes)) for s in steps if s.id not in UNTRACEABLE]

    first = next(i for i, s in enumerate(j.steps) if s.per_layer)
    layers = [step for i in range(spec.n_layers) for step in shapes([s for s in j.steps if s.block == spec.block_at(i)])]
    return shapes(list(j.steps[:first])) + layers + shapes([s for s in j.steps[first:] if not s.per_layer])


def test_every_traced_shape_equals_the_printed_one(case) -> None:
    """The whole trace, in order, layer by layer: names and shapes equal the steps' outputs."""
    spec, _, j, rec = case
    assert rec.traced == expected_trace(spec, j)


def test_only_explanations_are_left_untraced() -> None:
    """The steps `shapes` marks as making no tensor of their own (rendered dim, with ·): GQA's grouped
    heads, which the reference copies and so traces all the same, and the softmax, listed in UNTRACEABLE."""
    specs = [spec_of(tiny_config(name)) for name in TINY_CONFIGS]
    untraced = {s.id for spec in specs for s in journey(spec, T, B).steps if not s.traced}
    assert untraced == {"kv_groups", "probs"} and set(UNTRACEABLE) == {"probs"}


@pytest.mark.parametrize("decode", [False, True], ids=["prefill", "decode"])
@pytest.mark.parametrize("model_type", sorted(set(TINY_CONFIGS) - DATA_DEPENDENT_ROWS))
def test_every_model_type_traces_every_printed_step(model_type: str, decode: bool) -> None:
    """Each model_type's tiny config (MoE, MLA, windows longer than and shorter than the sequence, ...):
    the reference's trace equals the printed steps, names and shapes, prefill and one decode step.
    T = 6 is longer than the tiny sliding windows (5), so the band and the rolling cache show."""
    spec, seq = spec_of(tiny_config(model_type)), 6
    torch.manual_seed(0)
    model = build(spec)
    ids = torch.randint(0, spec.vocab_size, (B, seq))
    cache = model.new_cache() if decode else None
    with torch.no_grad():
        if decode:
            model(ids, cache=cache)
            ids = ids[:, -1:]
        traced: list[tuple[str, list[int]]] = []
        model(ids, cache=cache, trace=lambda name, t: traced.append((name, list(t.shape))))
    assert traced == expected_trace(spec, journey(spec, seq, B, decode=decode))


# Where each weight step's matrix lives in the torch model: (scope, role) for `Parts.part(role)`.
ROLES = {
    "token_embedding": ("model", "token_embedding"), "position_embedding": ("model", "position_embedding"),
    "final_norm": ("model", "final_norm"), "attn_norm": ("block", "attn_norm"), "mlp_norm": ("block", "mlp_norm"),
    "q": ("attn", "q"), "k": ("attn", "k"), "v": ("attn", "v"), "attn_out": ("attn", "attn_out"),
    "mlp_gate": ("mlp", "mlp_gate"), "mlp_up": ("mlp", "mlp_up"), "mlp_down": ("mlp", "mlp_down"),
}


def in_out(module: nn.Module) -> list[int]:
    """A module's weight as `shapes` prints it, [in, out]: nn.Linear stores [out, in]; GPT-2's Conv1D,
    embeddings ([rows, d_model]) and norms ([d_model]) are printed as stored."""
    shape = list(module.weight.shape)
    return shape[::-1] if isinstance(module, nn.Linear) else shape


def module_for(model: Decoder, step: Step, layer: int) -> tuple[nn.Module, bool]:
    """The module that applies `step`'s weight in `layer`, and whether it is GPT-2's fused Q|K|V."""
    scope, role = ROLES[step.id]
    if scope == "model":
        return model.part(role), False
    block = model.part("blocks")[layer]
    if scope == "block":
        return block.part(role), False
    owner = block.part(scope)
    if role in ("q", "k", "v") and owner.spec.fused_qkv:
        return owner.part("qkv"), True
    return owner.part(role), False


def test_every_weight_input_and_matmul_equals_the_module(case) -> None:
    """Each weight step: the module's weight ([in, out]), what it reads, what it writes, its FLOPs."""
    spec, model, j, rec = case
    names = {module: name for name, module in model.named_modules()}
    weighted = [s for s in j.steps if s.weight is not None and s.id != "logits"]  # the head: test_lm_head
    for step, layer in [(s, i) for s in weighted for i in range(spec.n_layers if s.per_layer else 1)]:
        module, fused = module_for(model, step, layer)
        (call,) = rec.calls[names[module]]  # each module runs once per forward pass
        assert call[0] == list(step.inputs[0].sizes), step.id
        flops = rec.flops.get(f"Decoder.{names[module]}", 0)
        if fused:  # GPT-2's c_attn is [d_model, q_dim + 2 kv_dim]: Q, K and V side by side
            parts = [s for s in j.steps if s.id in ("q", "k", "v")]
            assert in_out(module) == [step.weight.sizes[0], sum(s.weight.sizes[1] for s in parts)]
            assert flops == sum(s.flops for s in parts)
            continue
        assert in_out(module) == list(step.weight.sizes), step.id
        if step.id != "position_embedding":  # wpe returns [T, d_model], broadcast over the batch
            assert call[1] == list(step.output.sizes), step.id
        assert flops == step.flops, step.id


def test_lm_head(case) -> None:
    spec, model, j, rec = case
    head = next(s for s in j.steps if s.id == "logits")
    matrix = model.part("token_embedding").weight if flat_view(spec).tie_embeddings else model.lm_head.weight
    assert [matrix.shape[1], matrix.shape[0]] == list(head.weight.sizes)  # [vocab, d] stored, [d, vocab] shown
    assert dict(rec.traced)["last_position"] == list(head.inputs[0].sizes)
    assert (model.lm_head is None) == flat_view(spec).tie_embeddings and (head.params == 0) == flat_view(spec).tie_embeddings


def test_flops_equal_torch_flop_counter(case) -> None:
    """torch's FlopCounterMode (also 2·m·n·k) agrees per block, per attention and in total."""
    spec, model, j, rec = case
    names = {module: name for name, module in model.named_modules()}
    by_id = {s.id: s.flops for s in j.steps}
    for block in model.part("blocks"):
        assert rec.flops[f"Decoder.{names[block]}"] == j.flops_per_layer
        attention = rec.flops[f"Decoder.{names[block.part('attn')]}"]
        assert attention == sum(by_id[i] for i in ("q", "k", "v", "scores", "attn_heads_out", "attn_out"))
    # torch_ref computes logits at every position; `shapes` counts only the last row, the one that
    # predicts the next token. The difference is the LM head over the other new positions.
    others = 2 * B * (j.new_tokens - 1) * spec.d_model * spec.vocab_size
    assert rec.flops["Global"] == j.flops + others


def test_every_other_input_is_an_earlier_output(case) -> None:
    """Steps without a weight read what earlier steps wrote (Kᵀ: transposed), or the cache's past."""
    _, _, j, rec = case
    seen: list[list[int]] = []
    for step in j.steps:
        for shape in map(list, (s.sizes for s in step.inputs)):
            if step.weight is None:
                transposed = [*shape[:-2], *shape[-2:][::-1]]
                assert shape in seen or transposed in seen or shape == rec.past, (step.id, shape)
        seen.append(list(step.output.sizes))
    if j.decode:
        spec = case[0]
        assert rec.past == [B, flat_view(spec).n_kv_heads, T, flat_view(spec).head_dim]
        assert list(next(s for s in j.steps if s.id == "k_cache").inputs[0].sizes) == rec.past
