"""Step-3.7's language model (model_type step3p5, the text_config of a step3p7 config) against transformers.

transformers 5.24 builds no causal LM for a step3p5 config: its language model and LM head live in
Step3p7ForConditionalGeneration. So the oracle is that model's language model and head
(tests/oracle.py WRAPPED): our count equals theirs, our KV cache equals their cache object's tensors,
and our torch reference, loaded with their language model's weights, gives their logits (prefill and
cached decode) for text-only input, clamped SwiGLU and per-head output gates included.
"""

from __future__ import annotations

import copy

import pytest

from calc.analysis.count import count
from calc.analysis.memory.kv import kv_cache
from calc.spec.load import load_spec
from oracle import WRAPPED, spec_of, transformers_count
from tiny_models import VOCAB, tiny_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from calc.reference.model import build  # noqa: E402

IDS = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
ATOL = 1e-4


def _wrapped() -> tuple:
    """transformers' Step3p7ForConditionalGeneration around the tiny text config, random, its 1-D weights
    and the routers' correction buffers moved off their initial values; and our reference loaded with
    its language model's and head's weights."""
    transformers.logging.set_verbosity_error()
    data = tiny_config("step3p5")
    data.pop("model_type")
    outer, vision = WRAPPED["step3p5"]
    config = transformers.AutoConfig.for_model(outer, text_config=copy.deepcopy(data), vision_config=vision)
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(config).eval()
    with torch.no_grad():
        for tensor in model.state_dict(keep_vars=True).values():
            if tensor.dim() == 1:
                tensor.add_(torch.randn_like(tensor) * 0.1)
    prefix = "model.language_model."
    state = {("model." + k[len(prefix):]) if k.startswith(prefix) else k: v for k, v in model.state_dict().items()
             if k.startswith(prefix) or k == "lm_head.weight"}
    ours = build(spec_of(tiny_config("step3p5")))
    ours.load_state_dict(state, strict=True)
    return model, ours


def test_tiny_total_equals_transformers() -> None:
    assert count(spec_of(tiny_config("step3p5"))).total == transformers_count(tiny_config("step3p5"))


def test_prefill_and_cached_decode_logits_equal_transformers() -> None:
    hf, ours = _wrapped()
    with torch.no_grad():
        torch.testing.assert_close(ours(IDS), hf(input_ids=IDS).logits, rtol=0, atol=ATOL)
        cache = ours.new_cache()
        steps = [ours(IDS[:, :4], cache=cache)] + [ours(IDS[:, t:t + 1], cache=cache) for t in range(4, 12)]
        out = hf(input_ids=IDS[:, :4], use_cache=True)
        expected = [out.logits]
        for t in range(4, 12):
            out = hf(input_ids=IDS[:, t:t + 1], cache=out.cache, use_cache=True)
            expected.append(out.logits)
        torch.testing.assert_close(torch.cat(steps, dim=1), torch.cat(expected, dim=1), rtol=0, atol=ATOL)


@pytest.mark.parametrize("seq", [3, 4])
def test_cache_equals_transformers_cache_objects(seq: int) -> None:
    """Below the window (transformers' rolling buffer keeps window - 1, gptcalc the window): K and V
    of every layer, the sliding layers' with their own head count (the KV heads are shared)."""
    hf, _ = _wrapped()
    with torch.no_grad():
        cache = hf(input_ids=IDS[:, :seq], use_cache=True).past_key_values
    rows = sum(t.numel() for layer in cache.layers for t in (layer.keys, layer.values))
    assert kv_cache(spec_of(tiny_config("step3p5")), seq, 2, "fp32").total_bytes // 4 == rows


def test_transformers_defaults() -> None:
    """A config with no keys is Step3p7TextConfig's defaults (45 layers of 4,096, 288 experts of 1,280, top 8,
    a shared expert, the first 3 layers dense): transformers' own count of the same. Step-3.7-Flash's
    "196B language backbone, 11B active" (https://vllm-recipes-6nwqixkam-inferact-inc.vercel.app/stepfun-ai/Step-3.7-Flash)
    is not asserted: no copy of its config.json (its sliding layers' head count) was found."""
    config = {"model_type": "step3p5"}
    assert count(spec_of(config)).total == transformers_count(config)


def test_a_step3p7_config_reads_its_text_config(tmp_path) -> None:
    """The multimodal wrapper's config: the language model is counted, the vision tower named as left out."""
    import json

    text = {k: v for k, v in tiny_config("step3p5").items() if k != "model_type"}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "step3p7", "text_config": text,
                                                      "vision_config": WRAPPED["step3p5"][1]}))
    spec = load_spec(str(tmp_path))
    assert count(spec).total == count(spec_of(tiny_config("step3p5"))).total
    assert any("vision encoder" in note for note in spec.notes)


def test_the_hub_layout_save_pretrained_writes_is_recognised(tmp_path) -> None:
    """transformers' save_pretrained writes Step-3.7's Hub names back (conversion_mapping.py's "step3p7"):
    the router and its correction bias under `moe.`, gate, up and down stacked [E, f, d] apart, the shared
    expert as `share_expert.`. The header check names every language-model tensor; only the vision tower
    and its projector are left (towers of this kind are not modelled), and the total is the language model's."""
    from calc.checkpoint.report import read_checkpoint

    model, _ = _wrapped()
    model.save_pretrained(tmp_path)
    report = read_checkpoint(str(tmp_path))
    assert report.mismatches == ()
    assert {record.name.split(".")[0] for record in report.unknown} == {"vision_model", "vit_large_projector"}
    assert {record.name for record in report.buffers} == {f"model.layers.{i}.moe.router_bias" for i in (1, 2, 3)}
    assert report.breakdown.total == count(spec_of(tiny_config("step3p5"))).total == transformers_count(tiny_config("step3p5"))


def test_fp8_block_scales_beside_the_stacked_experts_are_companions(tmp_path) -> None:
    """Step-3.7-Flash-FP8's experts: each stacked [E, f, d] projection in F8_E4M3 with a float32
    `weight_scale_inv` of one scale per 128 x 128 block of each expert's matrix (DeepSeek-V3's block
    scales, https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md): [E, ceil(f/128),
    ceil(d/128)]. Scales are named as companions, never counted; the total does not move."""
    import json
    import math

    from calc.checkpoint.report import read_checkpoint
    from checkpoint_files import write_safetensors

    model, _ = _wrapped()
    model.save_pretrained(tmp_path / "bf16")
    data, layout = (tmp_path / "bf16" / "model.safetensors").read_bytes(), {}
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])  # the Hub's names, as save_pretrained wrote them
    header.pop("__metadata__", None)
    for name, entry in header.items():
        shape = entry["shape"]
        if ".moe." in name and name.endswith("_proj.weight"):
            layout[name] = ("F8_E4M3", shape)
            layout[name + "_scale_inv"] = ("F32", [shape[0], math.ceil(shape[1] / 128), math.ceil(shape[2] / 128)])
        else:
            layout[name] = (entry["dtype"], shape)
    write_safetensors(tmp_path / "fp8" / "model.safetensors", layout)
    (tmp_path / "fp8" / "config.json").write_text((tmp_path / "bf16" / "config.json").read_text())
    report = read_checkpoint(str(tmp_path / "fp8"))
    assert report.mismatches == () and len(report.companions) == 3 * 3  # gate, up, down in each of the 3 MoE layers
    assert {record.name.split(".")[0] for record in report.unknown} == {"vision_model", "vit_large_projector"}
    assert report.breakdown.total == count(spec_of(tiny_config("step3p5"))).total
