"""Our torch model equals transformers' own, for every supported model_type.

For each model_type a tiny random model (tests/tiny_models.py: a few layers of width 32, 4 experts,
windows shorter than the sequence, rope scalings) is built by transformers, its 1-D weights (norm
scales, biases) moved away from their initial values so that a norm applied as w and one applied as
1 + w cannot agree by accident (and DeepSeek-V3's stored e_score_correction_bias buffer away from
zeros, so that a model which ignores it picks other experts), and written with save_pretrained (safetensors, float32). Our model of
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
import json
from pathlib import Path

import pytest

from click.testing import CliRunner

from calc.arch import ADAPTERS, transformers_type, transformers_view
from calc.cli import main
from calc.errors import GptcalcError
from oracle import spec_of
from tiny_models import NO_CAUSAL_LM, UNREAD_ROWS, VOCAB, as_published, tiny_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

from calc.checkpoint.report import read_checkpoint  # noqa: E402
from calc.reference.model import build  # noqa: E402
from calc.reference.parts.rope import scaling_type  # noqa: E402
from calc.spec.model import spec_from_dict  # noqa: E402

ATOL = 1e-4  # float32; the differences seen are ~1e-7 (summation order)
IDS = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))


def random_model(data: dict):
    """transformers' model of a config mapping, random, its 1-D weights and buffers moved off their
    initial values."""
    transformers.logging.set_verbosity_error()
    data = transformers_view(copy.deepcopy(data))  # minimax_m1: its own code's keys as transformers' MiniMax names them
    model_type = transformers_type(data, "test")  # kimi_k2: DeepseekV3 from the same keys
    data.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **data)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for tensor in model.state_dict(keep_vars=True).values():  # parameters and stored buffers
            if tensor.dim() == 1:
                tensor.add_(torch.randn_like(tensor) * 0.1)
    return model


def transformers_model(model_type: str, path: Path):
    """transformers' tiny model of `model_type`, written to `path` by save_pretrained."""
    model = random_model(tiny_config(model_type))
    model.save_pretrained(path)
    if model_type != model.config.model_type:  # an alias: its config.json says kimi_k2 (minimax_m1), as the Hub's does
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    return model


@pytest.fixture(scope="module", params=sorted(set(ADAPTERS) - NO_CAUSAL_LM))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(model_type, transformers' model, its save_pretrained directory, our model loaded from it)."""
    path = tmp_path_factory.mktemp(request.param)
    hf = transformers_model(request.param, path)
    saved = load_file(path / "model.safetensors")
    published = as_published(request.param, saved)
    if published is not saved:  # the published checkpoint's tensors only (LongCat-Flash's)
        save_file(published, path / "model.safetensors", metadata={"format": "pt"})
    ours = build(spec_of(tiny_config(request.param)))
    ours.load_state_dict(published, strict=True)
    return request.param, hf, path, ours


def test_prefill_logits_equal_transformers(pair: tuple) -> None:
    _, hf, _, ours = pair
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS), hf(IDS).logits, rtol=0, atol=ATOL)


def cached_decode(ours, hf) -> None:
    """A 4-token prefill then 8 one-token steps, ours with our KVCache, transformers' with its own
    `cache` (transformers 5's name for it: Mamba2ForCausalLM silently ignores the older
    past_key_values and would decode each token without context). A rope that depends on the
    length, Phi-3.5-MoE's long_mscale, differs between a cached decode and one long prefill in
    transformers too, so the cached runs are compared."""
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


def test_cached_decode_logits_equal_transformers(pair: tuple) -> None:
    _, hf, _, ours = pair
    cached_decode(ours, hf)


# Each rope scaling type with every supported model_type whose released configs carry it, the scaling as
# those configs write it, but with original_max_position_embeddings shrunk to 8, below the 12 test tokens,
# so that what changes past the original context (YaRN's ramp, LongRoPE's long factors) is exercised.
YARN = {"type": "yarn", "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 8}
ROPE_SCALINGS = [
    # source: google/gemma-3-27b-it config.json (tests/configs/model_types/gemma3_multimodal.json), global layers
    ("linear", "gemma3_text", {"rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
    # no released config of a supported model_type with it was found; transformers computes it for Llama
    ("dynamic", "llama", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    # source: deepseek-ai/DeepSeek-V2-Lite (presets/deepseek-v2-lite.yaml): mscale 0.707 = mscale_all_dim
    ("yarn", "deepseek_v2", {"rope_scaling": {**YARN, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707}}),
    # source: deepseek-ai/DeepSeek-V4-Flash (tests/configs/model_types/deepseek_v4.json): on the compressed layers
    # only, without YaRN's cos/sin factor (DeepseekV4Config sets attention_factor 1.0)
    ("yarn", "deepseek_v4", {"rope_scaling": {**YARN, "factor": 16}}),
    # source: deepseek-ai/DeepSeek-V3 (presets/deepseek-v3.yaml)
    ("yarn", "deepseek_v3", {"rope_scaling": {**YARN, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0}}),
    # source: moonshotai/Kimi-K2-Instruct (tests/configs/model_types/kimi_k2.json): beta_fast = beta_slow = 1
    ("yarn", "kimi_k2", {"rope_scaling": {**YARN, "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0,
                                          "mscale_all_dim": 1.0}}),
    # source: allenai/Olmo-3.1-32B-Instruct (tests/configs/model_types/olmo3.json): an explicit attention_factor
    ("yarn", "olmo3", {"rope_scaling": {**YARN, "rope_type": "yarn", "factor": 8.0,
                                        "attention_factor": 1.2079441541679836}}),
    # source: openai/gpt-oss-20b (presets/gpt-oss-20b.yaml): the correction range not truncated
    ("yarn", "gpt_oss", {"rope_scaling": {**YARN, "factor": 32.0, "truncate": False}}),
    # source: mistralai/Devstral-Small-2-24B-Instruct-2512 text_config (tests/configs/model_types/mistral3.json)
    ("yarn", "ministral3", {"rope_scaling": {**YARN, "factor": 48.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                             "llama_4_scaling_beta": 0.1}}),
    # source: microsoft/Phi-4-mini-instruct (tests/configs/model_types/phi3.json): Phi-3's original context is
    # a top-level key
    ("longrope", "phi3", {"original_max_position_embeddings": 8,
                          "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.5], "long_factor": [2.0, 4.0]}}),
    # source: microsoft/Phi-3.5-MoE-instruct: short_mscale and long_mscale (tests/tiny_models.py's phimoe)
    ("longrope", "phimoe", {}),
    # source: transformers' Gemma4TextConfig (configuration_gemma4.py __post_init__): its full_attention layers'
    # default rope_parameters, proportional with partial_rotary_factor 0.25 (tests/tiny_models.py's gemma4_text)
    ("proportional", "gemma4_text", {}),
    # source: presets/llama-3.1-8b.yaml, tests/configs/model_types/exaone4.json, llama4.json (Llama-4-Scout)
    ("llama3", "llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8}}),
    ("llama3", "exaone4", {"rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8}}),
    ("llama3", "llama4_text", {"rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 1.0, "original_max_position_embeddings": 8}}),
]


@pytest.mark.parametrize(("kind", "model_type", "changes"), ROPE_SCALINGS,
                         ids=[f"{kind}-{model_type}" for kind, model_type, _ in ROPE_SCALINGS])
def test_rope_scaling_logits_equal_transformers(kind: str, model_type: str, changes: dict) -> None:
    """Our logits equal transformers' for each rope scaling type on each model_type that ships it, in
    one prefill and a cached decode (the scaling's attention factors included: YaRN's cos/sin factor
    and, on MLA, its mscale² on the softmax scale)."""
    config = {**tiny_config(model_type), **changes}
    spec = spec_of(config)
    assert {scaling_type(block.attention.rope) for block in spec.blocks.values() if block.attention.rope} - {"default"} \
        == {kind}
    hf = random_model(config)
    ours = build(spec)
    ours.load_state_dict(hf.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS), hf(IDS).logits, rtol=0, atol=ATOL)
    cached_decode(ours, hf)


def test_in_memory_state_dict_loads_strictly(pair: tuple) -> None:
    """transformers' own state dict (fused experts, tied heads listed twice) loads into a fresh model."""
    model_type, hf, _, ours = pair
    fresh = build(ours.spec)
    fresh.load_state_dict(as_published(model_type, hf.state_dict()), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(fresh(IDS[:, :6]), ours(IDS[:, :6]), rtol=0, atol=0)


def test_checkpoint_header_recognises_every_tensor(pair: tuple) -> None:
    _, _, path, ours = pair
    report = read_checkpoint(str(path))
    assert not report.unknown, [t.name for t in report.unknown]
    assert not report.mismatches, [m.describe() for m in report.mismatches]
    assert report.breakdown.total == sum(p.numel() for p in ours.parameters())


def test_verify_checkpoint_and_load_pass(pair: tuple) -> None:
    """The user-facing proof: `gptcalc verify --checkpoint DIR --load` agrees three ways, loads strictly and
    compares its logits with transformers' own model of the config.json (MiniMax-M1's read as MiniMax's).
    LongCat-Flash's transformers model holds zero-expert gate/up rows its checkpoint does not (as_published):
    verify says so, those two components and nothing else, and its logits still agree on the same weights."""
    model_type, _, path, _ = pair
    result = CliRunner().invoke(main, ["verify", "--checkpoint", str(path), "--load"])
    if model_type not in UNREAD_ROWS:
        assert result.exit_code == 0, result.output
        assert "all agree" in result.output and "strict=True" in result.output
        assert "max |logit difference|" in result.output, result.output  # transformers' own model built and run
        return
    disagree = {line.split("(")[-1].split(")")[0] for line in result.output.splitlines()
                if line.endswith("✗ │") and "(" in line}
    assert result.exit_code == 1 and disagree == {"experts_gate", "experts_up"}, result.output
    assert "strict=True" in result.output and "within the tolerance" in result.output


@pytest.mark.parametrize(("model_type", "change", "named"), [
    ("phimoe", {"num_experts_per_tok": 3}, "'sparsemixer' with top_k 3"),
    ("llama", {"rope_scaling": {"rope_type": "mrope", "factor": 2.0}}, "rope scaling type 'mrope'"),
    ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0, "extra": 1}}, "rope scaling linear: 'extra'"),
])
def test_unimplemented_options_are_refused_by_name(model_type: str, change: dict, named: str) -> None:
    """An option the reference does not compute is an error naming it, never silently ignored."""
    with pytest.raises(GptcalcError, match=named):
        build(spec_of({**tiny_config(model_type), **change}), device="meta")


def test_laurel_outside_altup_is_refused() -> None:
    """LAuReL without AltUp's streams is no layer transformers builds (Gemma3nTextDecoderLayer has both):
    refused by name, not computed as if it were absent."""
    data = spec_of(tiny_config("gemma3n_text")).model_dump()
    data["embedding"]["altup_inputs"] = None
    for block in data["blocks"].values():
        block["attention"]["augment"]["altup_inputs"] = None
    with pytest.raises(GptcalcError, match="LAuReL"):
        build(spec_from_dict(data, "laurel-alone"), device="meta")
