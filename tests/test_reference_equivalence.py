"""Our torch model equals transformers' own, for every supported model_type.

For each model_type a tiny random model (tests/tiny_models.py: a few layers of width 32, 4 experts,
windows shorter than the sequence, rope scalings) is built by transformers, its 1-D weights (norm
scales, biases) moved away from their initial values so that a norm applied as w and one applied as
1 + w cannot agree by accident, and written with save_pretrained (safetensors, float32). Our model of
the spec that gptcalc reads from the config.json it wrote then
- loads that file with strict=True (transformers 5 writes the Hub's one-tensor-per-expert layout:
  Mixtral's w1/w3/w2, Qwen's experts.N.gate_proj, GraniteMoE's input_linear) and also transformers'
  in-memory state dict (the fused experts.gate_up_proj), so both layouts load;
- gives transformers' logits within 1e-4 (absolute, float32) for a 12-token prefill, and for a
  4-token prefill followed by 8 cached one-token steps (transformers' with its own cache);
- and the header check of that directory (`calc.checkpoint.report`) recognises every tensor.
An option the reference does not implement must be refused by name.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from click.testing import CliRunner

from calc.arch import ADAPTERS
from calc.cli import main
from calc.errors import GptcalcError
from oracle import spec_of
from tiny_models import VOCAB, tiny_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file  # noqa: E402

from calc.checkpoint.report import read_checkpoint  # noqa: E402
from calc.reference.model import build  # noqa: E402

ATOL = 1e-4  # float32; the differences seen are ~1e-7 (summation order)
IDS = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))


def transformers_model(model_type: str, path: Path):
    """transformers' tiny model of `model_type`, written to `path` by save_pretrained."""
    transformers.logging.set_verbosity_error()
    data = tiny_config(model_type)
    config = transformers.AutoConfig.for_model(data.pop("model_type"), **copy.deepcopy(data))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module", params=sorted(ADAPTERS))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(model_type, transformers' model, its save_pretrained directory, our model loaded from it)."""
    path = tmp_path_factory.mktemp(request.param)
    hf = transformers_model(request.param, path)
    ours = build(spec_of(tiny_config(request.param)))
    ours.load_state_dict(load_file(path / "model.safetensors"), strict=True)
    return request.param, hf, path, ours


def test_prefill_logits_equal_transformers(pair: tuple) -> None:
    _, hf, _, ours = pair
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS), hf(IDS).logits, rtol=0, atol=ATOL)


def test_cached_decode_logits_equal_transformers(pair: tuple) -> None:
    """A 4-token prefill then 8 one-token steps, ours with our KVCache, transformers' with its own
    `cache` (transformers 5's name for it: Mamba2ForCausalLM silently ignores the older
    past_key_values and would decode each token without context). A rope that depends on the
    length, Phi-3.5-MoE's long_mscale, differs between a cached decode and one long prefill in
    transformers too, so the cached runs are compared."""
    _, hf, _, ours = pair
    cache = ours.new_cache()
    with torch.no_grad():
        steps = [ours(IDS[:, :4], cache=cache)] + [ours(IDS[:, t:t + 1], cache=cache) for t in range(4, 12)]
        out = hf(IDS[:, :4], use_cache=True)
        expected = [out.logits]
        for t in range(4, 12):
            out = hf(IDS[:, t:t + 1], cache=out.cache, use_cache=True)
            expected.append(out.logits)
        torch.testing.assert_close(torch.cat(steps, dim=1), torch.cat(expected, dim=1), rtol=0, atol=ATOL)
    assert cache.length == 12


def test_in_memory_state_dict_loads_strictly(pair: tuple) -> None:
    """transformers' own state dict (fused experts, tied heads listed twice) loads into a fresh model."""
    model_type, hf, _, ours = pair
    fresh = build(ours.spec)
    fresh.load_state_dict(hf.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(fresh(IDS[:, :6]), ours(IDS[:, :6]), rtol=0, atol=0)


def test_checkpoint_header_recognises_every_tensor(pair: tuple) -> None:
    _, _, path, ours = pair
    report = read_checkpoint(str(path))
    assert not report.unknown, [t.name for t in report.unknown]
    assert not report.mismatches, [m.describe() for m in report.mismatches]
    assert report.breakdown.total == sum(p.numel() for p in ours.parameters())


def test_verify_checkpoint_and_load_pass(pair: tuple) -> None:
    """The user-facing proof: `gptcalc verify --checkpoint DIR --load` agrees three ways and loads strictly."""
    _, _, path, _ = pair
    result = CliRunner().invoke(main, ["verify", "--checkpoint", str(path), "--load"])
    assert result.exit_code == 0, result.output
    assert "all agree" in result.output and "strict=True" in result.output


@pytest.mark.parametrize(("model_type", "change", "named"), [
    ("phimoe", {"num_experts_per_tok": 3}, "'sparsemixer' with top_k 3"),
    ("llama", {"rope_scaling": {"rope_type": "proportional", "factor": 2.0}}, "rope scaling type 'proportional'"),
    ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0, "extra": 1}}, "rope scaling linear: 'extra'"),
])
def test_unimplemented_options_are_refused_by_name(model_type: str, change: dict, named: str) -> None:
    """An option the reference does not compute is an error naming it, never silently ignored."""
    with pytest.raises(GptcalcError, match=named):
        build(spec_of({**tiny_config(model_type), **change}), device="meta")
