"""Property tests over random valid specs: analytic == torch, and the KV cache changes nothing.

Two generators: flat specs (both flat families, MHA/GQA/MQA, every bias switch, tied and untied
heads, both norms, both MLPs, learned/rotary/no positions, head_dim unrelated to d_model / n_heads)
and layered specs mixing every part option (MoE with shared experts and biases, MLA, sliding
windows, sinks, QK-norm, ALiBi, soft-capping, parallel and post-LN blocks, output norms, several
block kinds in one stack: `test_shapes_parts.layered_specs`). Models are tiny and counted on the
meta device, so each example takes milliseconds; the default run draws 20 and 8 examples
(about 2 s), `pytest --fuzz-long` 20 times as many.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from calc.analysis.breakdown import compare
from calc.analysis.count import count
from calc.analysis.memory import kv_cache
from calc.checkpoint.names import expected_shapes
from calc.spec.model import ModelSpec, spec_from_dict
from cli_checks import fuzz_examples
from test_shapes_parts import layered_specs

torch = pytest.importorskip("torch")
from calc.reference.count import breakdown  # noqa: E402  (needs torch)
from calc.reference.model import build  # noqa: E402


@st.composite
def flat_specs(draw: st.DrawFn) -> ModelSpec:
    family = draw(st.sampled_from(["gpt2", "llama"]))
    n_kv_heads = draw(st.integers(1, 4))
    n_heads = n_kv_heads * draw(st.integers(1, 4))  # group size 1 is MHA, n_heads is MQA
    fields = {
        "family": family,
        "vocab_size": draw(st.integers(1, 64)),
        "n_positions": draw(st.integers(8, 32)),
        "d_model": draw(st.integers(1, 40)),
        "n_layers": draw(st.integers(1, 3)),
        "n_heads": n_heads,
        "n_kv_heads": n_kv_heads,
        "head_dim": 2 * draw(st.integers(1, 6)),  # even, for rotary; rarely d_model / n_heads
        "d_ff": draw(st.integers(1, 48)),
        "position_embedding": draw(st.sampled_from(["learned", "rotary", "none"])),
        "norm": draw(st.sampled_from(["layernorm", "rmsnorm"])),
        "mlp": draw(st.sampled_from(["gelu", "swiglu"] if family == "llama" else ["gelu"])),
        **{key: draw(st.booleans()) for key in ("qkv_bias", "attn_out_bias", "mlp_bias", "tie_embeddings")},
    }
    return spec_from_dict(fields, "hypothesis")


specs = st.one_of(flat_specs(), layered_specs())


@settings(max_examples=fuzz_examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs)
def test_analytic_equals_torch(spec: ModelSpec) -> None:
    note(json.dumps(spec.model_dump(mode="json")))
    model = build(spec, device="meta")
    diff = compare({"analytic": count(spec), "torch": breakdown(model)})
    assert diff.ok, diff.mismatches
    assert {name: tuple(t.shape) for name, t in model.named_parameters()} == expected_shapes(spec)
    assert model(torch.zeros(2, 3, dtype=torch.long, device="meta")).shape == (2, 3, spec.vocab_size)


@settings(max_examples=fuzz_examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs, st.integers(1, 4), st.data())
def test_cached_decoding_equals_full_forward(spec: ModelSpec, prompt: int, data: st.DataObject) -> None:
    """Prefill `prompt` tokens, then decode one at a time: the logits match one full pass."""
    note(json.dumps(spec.model_dump(mode="json")))
    torch.manual_seed(0)
    model = build(spec, dtype=torch.float64)
    length = data.draw(st.integers(prompt, min(8, spec.n_positions)))
    ids = torch.tensor([data.draw(st.lists(st.integers(0, spec.vocab_size - 1), min_size=length, max_size=length))])
    cache = model.new_cache()
    with torch.no_grad():
        full = model(ids)
        stepped = [model(ids[:, :prompt], cache=cache)]
        stepped += [model(ids[:, t:t + 1], cache=cache) for t in range(prompt, length)]
    torch.testing.assert_close(torch.cat(stepped, dim=1), full)
    assert cache.length == length
    # float64 is twice fp32's bytes; sliding-window layers keep at most `window` positions (a rolling cache)
    assert cache.nbytes == 2 * kv_cache(spec, length, 1, "fp32").total_bytes
