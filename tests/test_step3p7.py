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
from tiny_models import TINY_MULTIMODAL, VOCAB, tiny_config

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
    is not asserted: no public copy of its config.json was found. The one in ai-dynamo/aiconfigurator
    (aic-core/src/aiconfigurator_core/model_configs/stepfun-ai--Step-3.7-Flash_config.json) is, by that
    repository's own commit e10f03afe, a hand-curated flattening: no text_config or vision_config, an invented
    architecture name, and no sliding layers' head count (96, not 64: attention_other_setting), so it is not kept."""
    config = {"model_type": "step3p5"}
    assert count(spec_of(config)).total == transformers_count(config)


def test_a_step3p7_config_is_the_whole_model(tmp_path) -> None:
    """The multimodal wrapper's config: the language model and the vision tower (calc/towers/step3p7.py:
    layer scales, two conv downsamplers, a biased projector), together transformers' whole
    Step3p7ForConditionalGeneration on meta; nothing left uncounted."""
    import json

    config = {"model_type": "step3p7", **copy.deepcopy(TINY_MULTIMODAL["step3p7"])}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = load_spec(str(tmp_path))
    counted = count(spec)
    assert counted.total == transformers_count(config)
    assert counted.total - spec.towers["vision"].total == count(spec_of(tiny_config("step3p5"))).total
    # two 3x3 convolutions with biases, 16 -> 32 -> 64 (_VIT's width 16): modeling_step3p7.py downsampler1, 2
    assert spec.uncounted == () and counted.towers[0].components["downsamplers"] == 16 * 32 * 9 + 32 + 32 * 64 * 9 + 64


def test_the_hub_layout_save_pretrained_writes_is_recognised(tmp_path) -> None:
    """transformers' save_pretrained writes Step-3.7's Hub names back (conversion_mapping.py's "step3p7"):
    the router and its correction bias under `moe.`, gate, up and down stacked [E, f, d] apart, the shared
    expert as `share_expert.`; the vision tower under OpenCLIP's names (tests/test_tower_checkpoints.py checks
    it with the tiny whole model). The header check names every tensor; the total is the whole model's."""
    from calc.checkpoint.report import read_checkpoint

    model, _ = _wrapped()
    model.save_pretrained(tmp_path)
    report = read_checkpoint(str(tmp_path))
    assert report.mismatches == ()
    assert report.unknown == ()
    assert {record.name for record in report.buffers} == {f"model.layers.{i}.moe.router_bias" for i in (1, 2, 3)}
    assert report.breakdown.total == sum(p.numel() for p in model.parameters())


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
    assert report.unknown == ()
    assert report.breakdown.total == sum(p.numel() for p in model.parameters())


def _mtp_config(kind: str) -> dict:
    """The tiny text config as the Hub writes Step-3.7-Flash's: two MTP layers above the stack, its per-layer
    lists padded with their entries, MoE layers named by moe_layers_enum (the MTP layers not among them: dense)."""
    config = tiny_config("step3p5")
    config.pop("mlp_layer_types")
    config.update(num_nextn_predict_layers=2, moe_layers_enum="1,2,3", layer_types=config["layer_types"] + [kind] * 2,
                  swiglu_limits_shared=config["swiglu_limits_shared"] + [0.5, 0.5])
    return config


def _transformers_mtp(config: dict) -> tuple:
    """transformers' multimodal model around the text config and its MtpModel (modeling_layers.py: each
    layer enorm, hnorm, eh_proj, a decoder layer of get_mtp_config's types, an output norm), on meta."""
    from transformers.modeling_layers import MtpModel

    data = copy.deepcopy(config)
    data.pop("model_type")
    outer, vision = WRAPPED["step3p5"]
    hf_config = transformers.AutoConfig.for_model(outer, text_config=data, vision_config=vision)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(hf_config)
        return model, MtpModel(model, config["num_nextn_predict_layers"])


def test_mtp_layers_equal_transformers_mtp_model() -> None:
    """Full-attention MTP layers: the decoder's total is unchanged (transformers' model skips them), the MTP
    row equals transformers' MtpModel layers, and each layer's own head (its transformer.shared_head.output:
    vLLM's step3p5_mtp.py loads a ParallelLMHead per MTP layer) is a copy of vocab x d."""
    config = _mtp_config("full_attention")
    _, mtp = _transformers_mtp(config)
    counted = count(spec_of(config))
    assert counted.total == transformers_count(config) == count(spec_of(tiny_config("step3p5"))).total
    assert counted.extra["mtp_layers"] == sum(p.numel() for p in mtp.layers.parameters())
    assert counted.extra["mtp_embedding_copies"] == 2 * VOCAB * 32  # 2 layers, tiny_models' hidden_size 32


def test_sliding_mtp_layers_take_the_sliding_head_count() -> None:
    """A sliding MTP layer has the sliding layers' query heads, as vLLM builds it from the padded layer_types
    (vllm/model_executor/models/step3p5.py Step3p5DecoderLayer: attention_other_setting where
    layer_types[layer_idx] is sliding; the checkpoint it loads is shaped so). transformers' MtpModel keeps the
    full count there (get_mtp_config drops the per-layer overrides): 2 heads fewer of q, o (head_dim 8 x
    d 32 each) and the per-head gate (d 32) in each of the 2 layers."""
    config = _mtp_config("sliding_attention")
    _, mtp = _transformers_mtp(config)
    fewer = 2 * (4 - 2) * (2 * 8 * 32 + 32)
    assert count(spec_of(config)).extra["mtp_layers"] == sum(p.numel() for p in mtp.layers.parameters()) - fewer


def test_mtp_layers_untyped_are_left_out_with_a_note() -> None:
    """layer_types for the stack only: transformers' get_mtp_config calls that ambiguous, so they are not counted."""
    config = {**tiny_config("step3p5"), "num_nextn_predict_layers": 2}
    spec = spec_of(config)
    assert spec.mtp is None and any("2 multi-token-prediction layers are not counted" in note for note in spec.notes)


@pytest.mark.parametrize("change, message", [
    ({"layer_types": ["full_attention"] * 4 + ["full_attention", "sliding_attention"]}, "MTP layers are of several kinds"),
    ({"num_nextn_predict_layers": -1}, "expected 0 or more MTP layers")])
def test_mtp_layers_it_cannot_hold_are_one_error(change: dict, message: str) -> None:
    """MTP layers of two kinds (ModelSpec's MTP holds one block) or a negative count: one error naming the field."""
    from calc.errors import GptcalcError

    with pytest.raises(GptcalcError, match=message):
        spec_of({**_mtp_config("full_attention"), **change})


def test_the_hub_checkpoints_mtp_layers_are_recognised(tmp_path) -> None:
    """A saved tiny model with its MTP layers appended as the Hub stores them (model.layers.{4,5}.*: the block's
    own names, enorm, hnorm, eh_proj, transformer.shared_head.norm and .output; TensorRT-LLM's and vLLM's
    Step-3.7 loaders read these names), shapes from transformers' MtpModel: every name recognised, the MTP rows
    beside the decoder's total."""
    import json

    from calc.checkpoint.report import read_checkpoint
    from checkpoint_files import write_safetensors

    config = _mtp_config("full_attention")
    _, mtp = _transformers_mtp(config)
    data = copy.deepcopy(config)
    data.pop("model_type")
    outer, vision = WRAPPED["step3p5"]
    hf_config = transformers.AutoConfig.for_model(outer, text_config=data, vision_config=vision)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config)
    model.save_pretrained(tmp_path / "saved")
    raw = (tmp_path / "saved" / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    header.pop("__metadata__", None)
    layout = {name: (entry["dtype"], entry["shape"]) for name, entry in header.items()}
    hub = {"post_norm.": "transformer.shared_head.norm.", "mtp_block.": ""}
    for name, tensor in mtp.layers.named_parameters():
        index, _, rest = name.partition(".")
        for old, new in hub.items():
            rest = rest.replace(old, new) if rest.startswith(old) else rest
        layout[f"model.layers.{4 + int(index)}.{rest}"] = ("F32", list(tensor.shape))
    for index in (4, 5):
        layout[f"model.layers.{index}.transformer.shared_head.output.weight"] = ("F32", [VOCAB, 32])
    write_safetensors(tmp_path / "hub" / "model.safetensors", layout)
    (tmp_path / "hub" / "config.json").write_text((tmp_path / "saved" / "config.json").read_text())
    report = read_checkpoint(str(tmp_path / "hub"))
    assert report.mismatches == ()
    assert report.unknown == ()
    counted = count(spec_of(config))
    assert report.breakdown.total == sum(p.numel() for p in model.parameters())
    assert report.breakdown.extra == {k: v for k, v in counted.extra.items() if k.startswith("mtp")}


def test_quick_gelu_is_transformers_quick_gelu() -> None:
    """The vision MLP's activation (Step3p7VisionConfig.hidden_act) as the torch reference computes it equals
    transformers' ACT2FN["quick_gelu"] (activations.py QuickGELUActivation)."""
    from transformers.activations import ACT2FN

    from calc.reference.parts.mlp import ACTIVATIONS

    x = torch.randn(64, generator=torch.Generator().manual_seed(0)) * 4
    torch.testing.assert_close(ACTIVATIONS["quick_gelu"](x), ACT2FN["quick_gelu"](x), rtol=0, atol=1e-6)
