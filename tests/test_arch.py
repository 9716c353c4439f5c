"""Every real config.json under tests/configs/ counts exactly as transformers' own model does.

The configs are copies of published Hugging Face config.json files (tests/configs/*/SOURCES.yaml
gives the URL each came from). For each: our total equals transformers' count of the model it
builds from the same file on the meta device, and our rows add up to our total.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from calc.analysis.breakdown import MODEL_COMPONENTS
from calc.analysis.count import count
from calc.spec.load import load_spec
from oracle import (CONFIG_DIR, config_files, read_config, spec_of, transformers_count, transformers_model,
                    transformers_sizes, transformers_total)
from tiny_models import tiny_config

CONFIGS = config_files()
# multimodal configs whose every tower gptcalc counts (the partial ones: test_total_equals_transformers)
MULTIMODAL = [path for path in CONFIGS if "vision_config" in read_config(path) and not count(load_spec(str(path))).partial]


def _id(path: Path) -> str:
    return str(path.relative_to(CONFIG_DIR)) if path.is_relative_to(CONFIG_DIR) else f"presets/{path.name}"


@pytest.mark.parametrize("path", CONFIGS, ids=_id)
def test_total_equals_transformers(path: Path) -> None:
    """A model whose towers gptcalc cannot count yet (Gemma-3n's MobileNet-v5 vision tower) says so
    (`partial`, and what is missing); its decoder then equals the language model and head inside
    transformers' whole model, and the whole model is larger by exactly what is not counted."""
    b = count(load_spec(str(path)))
    if not b.partial:
        assert b.total == transformers_total(path) - unread_rows(path)
        return
    assert b.uncounted
    sizes = transformers_sizes(path)
    if not any("language_model." in name for name in sizes):  # transformers built the text model only
        assert b.decoder_total == sum(sizes.values())
        return
    decoder = sum(n for name, n in sizes.items() if "language_model." in name or name.startswith("lm_head"))
    assert b.decoder_total == decoder < sum(sizes.values())


def unread_rows(path: Path) -> int:
    """Parameters transformers allocates that its forward never reads and a checkpoint does not hold:
    LongcatFlashExperts' fused gate_up_proj has a row block for every zero-computation expert (its
    down_proj does not), though a token routed to one goes to nn.Identity; the published 560B
    (tests/test_arch_moe.py) is the total without them. Read off transformers' own model."""
    config = read_config(path)
    return zero_expert_rows(config) if config.get("model_type") == "longcat_flash" else 0


def zero_expert_rows(config: dict) -> int:
    """zero_expert_num x (2 x expert_ffn_hidden_size) x hidden_size in each of num_layers layers."""
    return config["zero_expert_num"] * 2 * config["expert_ffn_hidden_size"] * config["hidden_size"] * config["num_layers"]


def test_zero_expert_rows_are_what_transformers_allocates() -> None:
    """The formula above, against transformers' own tiny LongCat-Flash: its gate_up_proj's extra rows."""
    config = tiny_config("longcat_flash")
    experts = [layer.mlp.experts for layer in transformers_model(config).model.layers]
    allocated = sum((e.gate_up_proj.shape[0] - e.down_proj.shape[0]) * e.gate_up_proj[0].numel() for e in experts)
    assert allocated == zero_expert_rows(config) > 0
    assert count(spec_of(config)).total == transformers_count(config) - allocated


@pytest.mark.parametrize("path", MULTIMODAL, ids=_id)
def test_multimodal_decoder_and_towers_each_exact(path: Path) -> None:
    """The whole model is counted (no part left out), and its decoder alone equals the parameters of
    transformers' whole model under its language model and head: the towers hold exactly the rest."""
    b = count(load_spec(str(path)))
    assert b.towers and not b.partial
    inside = TOWERS_INSIDE_DECODER.get(read_config(path)["model_type"])
    assert b.decoder_total == sum(n for name, n in transformers_sizes(path).items()
                                  if ("language_model." in name or name.startswith("lm_head"))
                                  or (inside is not None and not name.startswith(inside)))


# Whole models with no language_model submodule: the decoder is the model, its towers one module inside it
# (Phi4MultimodalModel.embed_tokens_extend, models/phi4_multimodal/modeling_phi4_multimodal.py).
TOWERS_INSIDE_DECODER = {"phi4_multimodal": "model.embed_tokens_extend."}


@pytest.mark.parametrize("path", CONFIGS, ids=_id)
def test_rows_add_up(path: Path) -> None:
    b = count(load_spec(str(path)))
    layers = sum(block.total for block in (*b.blocks, *b.shared))  # shared blocks (Zamba2's): each copy once
    outside = sum(n for name, n in b.components.items() if name in MODEL_COMPONENTS)
    assert layers + outside == b.decoder_total == sum(b.components.values())
    assert b.decoder_total + sum(sum(t.components.values()) for t in b.towers) == b.total
    assert sum(block.layers for block in b.blocks) == b.n_layers


def test_every_config_cites_where_it_came_from() -> None:
    """tests/configs/*/SOURCES.yaml, or the preset's own `source` and `copy` URLs."""
    for path in CONFIGS:
        if path.suffix == ".yaml":
            preset = yaml.safe_load(path.read_text())
            assert preset["source"].startswith("https://huggingface.co/") and preset["copy"].startswith("https://")
    for folder in {path.parent for path in CONFIGS if path.suffix == ".json"}:
        sources = yaml.safe_load((folder / "SOURCES.yaml").read_text())
        for path in CONFIGS:
            if path.parent == folder and path.suffix == ".json":
                assert sources.get(path.name, {}).get("url", "").startswith("https://"), path
