"""LongCat-Flash: a layer of two MLA + SwiGLU pairs and a shortcut-connected MoE with zero-computation
experts (calc/arch/longcat_flash.py), against its published figures and transformers' own tiny model.

transformers allocates gate_up rows for the zero-computation experts that its forward never reads and
the checkpoint does not hold (tests/test_arch.py's zero_expert_rows): a checkpoint saved from
transformers' model holds them as tensors of experts past n_routed_experts, which the header check
names and a checkpoint without them (the published layout) passes.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from calc.analysis.count import count
from calc.analysis.memory import kv_cache
from calc.spec.load import load_spec
from oracle import CONFIG_DIR, spec_of
from tiny_models import VOCAB, tiny_config

BATCH = 2


def test_published_total_and_active_range() -> None:
    # source: https://huggingface.co/docs/transformers/en/model_doc/longcat_flash ("a 560B parameter
    # Mixture-of-Experts (MoE) model that activates 18.6B-31.3B parameters dynamically"): the range runs from
    # every one of a token's 12 picks a zero-computation expert to none of them, counted with the head and
    # without the token embedding (18.69B and 31.38B, truncated), as gpt-oss's card counts.
    spec = load_spec(str(CONFIG_DIR / "model_types" / "longcat_flash.json"))
    b = count(spec)
    moe = spec.blocks["layer"].shortcut
    picked = spec.n_layers * moe.top_k * sum(moe.expert_params(spec.d_model).values())
    most = b.active - spec.vocab_size * spec.d_model  # the token embedding left out, the head kept
    assert round(b.total / 1e9) == 561 and int(b.total / 1e9) == 560
    assert (math.floor(most / 1e8), math.floor((most - picked) / 1e8)) == (313, 186)


def _transformers_tiny():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    data = tiny_config("longcat_flash")
    config = transformers.AutoConfig.for_model(data.pop("model_type"), **copy.deepcopy(data))
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("seq", [5, 9])
def test_cache_equals_transformers_cache(seq: int) -> None:
    """Two latents per layer (one per attention), each kv_lora_rank + qk_rope_head_dim per token: the sum
    of transformers' DynamicCache after a forward of `seq` tokens."""
    torch = pytest.importorskip("torch")
    model = _transformers_tiny()
    ids = torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    theirs = sum(t.numel() for layer in cache.layers for t in (layer.keys, layer.values))
    ours = kv_cache(spec_of(tiny_config("longcat_flash")), seq, BATCH, "fp32")
    assert ours.total_bytes // 4 == theirs and ours.state_bytes == 0


def test_header_check_names_only_the_unread_zero_expert_rows(tmp_path: Path) -> None:
    """Every tensor of transformers' save is recognised but the zero experts' gate and up projections,
    which the published checkpoint does not hold; without them the checkpoint is the spec, exactly."""
    from safetensors.torch import load_file, save_file

    from calc.checkpoint.report import read_checkpoint

    _transformers_tiny().save_pretrained(tmp_path)
    config = tiny_config("longcat_flash")
    routed = config["n_routed_experts"]
    report = read_checkpoint(str(tmp_path))
    unread = {f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight" for layer in range(config["num_layers"])
              for e in range(routed, routed + config["zero_expert_num"]) for proj in ("gate_proj", "up_proj")}
    assert not report.unknown
    assert {(m.name, m.expected) for m in report.mismatches} == {(name, None) for name in unread}
    tensors = {k: v for k, v in load_file(tmp_path / "model.safetensors").items() if k not in unread}
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    report = read_checkpoint(str(tmp_path))
    assert report.ok, (report.unknown, report.mismatches)
    assert report.breakdown.total == count(spec_of(config)).total
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "longcat_flash"
