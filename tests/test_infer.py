"""Spec inference's pass over the names (calc.checkpoint.infer): the whole-column matching that
100,000 names need gives what `_template` gives name by name, on hostile names too.

The reference is computed here, one name at a time, with the per-name `_template` (the layout's
paths through `with_base` and the layer pattern); the column pass must agree on how many names each
family claims, the shape each template keeps (the last tensor's, aliases left out) and the layers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calc.analysis.count import count
from calc.checkpoint import infer
from calc.checkpoint.names import tensor_table
from calc.checkpoint.report import read_checkpoint
from calc.checkpoint.sources import RawCheckpoint
from calc.checkpoint.tensors import TensorColumns
from calc.spec.load import load_spec
from checkpoint_files import write_safetensors
from tests.cli_checks import fuzz_examples

# Name fragments: both families' paths, their base-less forms, indexes valid and not (leading zero,
# non-ASCII digits), empty parts and the newline a regex `$` treats specially.
FRAGMENTS = ["model.", "layers.", "transformer.", "h.", "0.", "7.", "12.", "01.", "١.", "²", ".", "\n", "",
             "self_attn.q_proj.", "mlp.c_fc.", "attn.c_attn.", "weight", "bias", "embed_tokens.weight", "wte.weight",
             "wpe.weight", "lm_head.weight", "norm.weight", "ln_f.weight", "model.norm.weight"]
NAMES = st.lists(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6).map("".join), max_size=40)


def raw_of(names: list[str], aliases: dict[str, str]) -> RawCheckpoint:
    shapes = [(i + 1, 2) for i in range(len(names))]  # each tensor's own shape: which one a template keeps shows
    columns = TensorColumns(names, ["F16"] * len(names), shapes, [4 * (i + 1) for i in range(len(names))],
                            ["x.safetensors"] * len(names))
    return RawCheckpoint("x.safetensors", "safetensors", columns, (), aliases=aliases)


def one_by_one(raw: RawCheckpoint, family: str) -> tuple[int, dict, set]:
    hits, shapes, layers = 0, {}, set()
    for name, shape in zip(raw.columns.names, raw.columns.shapes):
        found = infer._template(name, family)
        if found is None:
            continue
        hits += 1
        if name not in raw.aliases:
            shapes[found[0]] = shape
            layers.add(found[1])
    return hits, shapes, layers


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(NAMES, st.data())
def test_the_column_pass_finds_what_each_name_says(names: list[str], data: st.DataObject) -> None:
    aliased = data.draw(st.lists(st.sampled_from(names), max_size=3)) if names else []
    raw = raw_of(names, {name: names[0] for name in aliased})
    for family in infer.INFERABLE:
        found = infer._found(raw, family)
        assert (found.hits, found.shapes, found.layers) == one_by_one(raw, family), family


def test_a_checkpoint_of_each_family_is_read_both_ways() -> None:
    """Real paths of both layouts, base-less too: the column pass claims every one of them."""
    llama = [f"model.layers.{i}.self_attn.q_proj.weight" for i in range(3)] + ["model.embed_tokens.weight", "lm_head.weight"]
    gpt2 = [f"h.{i}.attn.c_attn.weight" for i in range(3)] + ["wte.weight", "transformer.ln_f.weight"]
    for names, family in ((llama, "llama"), (gpt2, "gpt2")):
        raw = raw_of(names, {})
        found = infer._found(raw, family)
        assert found.hits == len(names) and (found.hits, found.shapes, found.layers) == one_by_one(raw, family)
        assert infer.detect_family(raw) == family


# --- the layouts read through their config.json's keys (calc.checkpoint.infer_configs) -------------

MODEL_TYPES = Path(__file__).parent / "configs" / "model_types"
# Real configs (tests/configs/model_types/SOURCES.yaml), DeepSeek's cut to a few layers and experts
# with --set so that the sparse files stay small; the reference is the analytic count of that spec.
QWEN3_5_LAYERS = (["linear_attention"] * 3 + ["full_attention"]) * 2  # the real configs' first 8 layer_types
INFERRED = [
    ("lfm2.json", {}),
    ("deepseek_v32.json", {"num_hidden_layers": 4, "first_k_dense_replace": 1, "n_routed_experts": 16}),
    ("deepseek_v2.json", {"num_hidden_layers": 3, "first_k_dense_replace": 1, "n_routed_experts": 8}),
    ("kimi_k2.json", {"num_hidden_layers": 3, "first_k_dense_replace": 1, "n_routed_experts": 8}),
    ("qwen3_next.json", {"num_hidden_layers": 8, "num_experts": 16, "mlp_only_layers": [1]}),
    ("nemotron_h-nano3.json", {"hybrid_override_pattern": "MEM*EM-", "n_routed_experts": 8}),
    ("nemotron_h.json", {}),
    ("mamba2.json", {"num_hidden_layers": 4}),
    ("jamba.json", {"num_hidden_layers": 16, "num_experts": 4}),
    ("bamba.json", {"num_hidden_layers": 10}),
    ("falcon_h1.json", {"num_hidden_layers": 4}),
    ("minimax_m1.json", {"num_hidden_layers": 9, "attn_type_list": [0] * 7 + [1, 0], "num_local_experts": 4}),
    # the real config's first five layers (KDA, KDA, KDA, MLA, KDA): the top one is not MLA, whose q_proj is wider
    ("kimi_linear.json", {"num_hidden_layers": 5, "linear_attn_config.full_attn_layers": [4],
                          "linear_attn_config.kda_layers": [1, 2, 3, 5], "num_experts": 8}),
    # the real configs' first layers (Flash: sliding, sliding, CSA, HCA; Pro: HCA, HCA, CSA, HCA), hash-routed and not
    ("deepseek_v4.json", {"num_hidden_layers": 4, "compress_ratios": [0, 0, 4, 128, 0], "n_routed_experts": 8}),
    ("deepseek_v4-pro.json", {"num_hidden_layers": 4, "compress_ratios": [128, 128, 4, 128, 0], "n_routed_experts": 8}),
    ("qwen3_5.json", {"num_hidden_layers": 8, "layer_types": QWEN3_5_LAYERS}),
    ("qwen3_5_moe.json", {"num_hidden_layers": 8, "layer_types": QWEN3_5_LAYERS, "num_experts": 16}),
    # the real config's first six layers: five local, one global (its keys its values, 2 KV heads of 512)
    ("gemma4-26b-a4b.json", {"num_hidden_layers": 6, "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
                             "num_experts": 8}),
    ("olmo_hybrid.json", {"num_hidden_layers": 8, "layer_types": QWEN3_5_LAYERS}),  # its first 8 layers
    ("zamba2.json", {}),  # Zamba2-7B's 81 layers: 13 hybrid, its two shared blocks stored once each
    ("gemma3n_text-e2b.json", {}),  # Gemma-3n-E2B's 30 layers: 10 share K and V, AltUp, LAuReL, per-layer inputs
]
# Multimodal configs whose text model is read: their `text_config`, alone (the towers' tensors are another issue's).
TEXT_ONLY = {"qwen3_5.json", "qwen3_5_moe.json", "gemma4-26b-a4b.json"}
# Mamba2 stores n_groups·d_state, never the two apart: d_state 128 is assumed (and said), which
# Nemotron-H-56B's 8 x 256 (nvidia/Nemotron-H-56B-Base-8K) is not: its count is exact, its recurrent state read as 16 x 128.
STATE_ASSUMED = {"nemotron_h.json"}
# Attention's heads are stored only as total widths: head_dim 128 is assumed (and said), which
# Falcon-H1-0.5B's 64 (tiiuae/Falcon-H1-0.5B-Base) is not: its KV elements per token are exact, its heads read as 4 and 1.
HEADS_ASSUMED = {"falcon_h1.json"}
# No tensor stores Gemma-4's sliding window: Gemma4TextConfig's 512 is assumed (and said), which
# Gemma-4-26B-A4B's 1024 is not: its local layers' cache is read as half its length, every width exact.
WINDOW_ASSUMED = {"gemma4-26b-a4b.json"}


def lone_file(spec: Any, directory: Path, hub: bool) -> Path:
    """The tensors `spec` implies (buffers and MTP layers included, in the Hub's or transformers 5's expert
    layout), as a sparse safetensors file with no config.json beside it."""
    shapes = tensor_table(spec).expected_shapes(hub=hub, buffers=True, mtp=True)
    return write_safetensors(directory / "model.safetensors", {name: ("BF16", shape) for name, shape in shapes.items()})


@pytest.mark.parametrize("hub", [False, True], ids=["transformers5", "hub"])
@pytest.mark.parametrize(("config", "changes"), INFERRED, ids=[config for config, _ in INFERRED])
def test_a_lone_checkpoint_of_a_newer_layout_is_read_as_its_config_says(config: str, changes: dict[str, Any],
                                                                          hub: bool, tmp_path: Path) -> None:
    spec = load_spec(str(config_file(config, tmp_path)), changes)
    report = read_checkpoint(str(lone_file(spec, tmp_path, hub)))
    assert report.spec_origin == "tensor shapes (no config.json)"
    assert report.mismatches == () and report.unknown == ()
    assert dict(count(report.spec).components) == dict(count(spec).components)
    assert layers(report.spec) == layers(spec)
    assert (caches(report.spec) == caches(spec)) is (config not in STATE_ASSUMED | HEADS_ASSUMED | WINDOW_ASSUMED)
    assert (config in WINDOW_ASSUMED) <= any("the sliding window" in note for note in report.spec_notes)
    assert (config in STATE_ASSUMED) <= any("d_state 128 assumed" in note for note in report.spec_notes)
    assert (config in HEADS_ASSUMED) <= any("assumed head_dim 128" in note for note in report.spec_notes)
    assert (widths(report.spec) == widths(spec)) is (config not in STATE_ASSUMED)


def config_file(config: str, directory: Path) -> Path:
    """The real config, or for a multimodal one in `TEXT_ONLY` its text model's config alone."""
    if config not in TEXT_ONLY:
        return MODEL_TYPES / config
    text = directory / "text_config.json"
    text.write_text(json.dumps(json.loads((MODEL_TYPES / config).read_text())["text_config"]))
    return text


def layers(spec: Any) -> list[tuple[int, list[str], str | None]]:
    """What the shapes fix layer by layer: each run's mixers and MLP kind (not, say, how many experts
    a token picks, which no tensor stores)."""
    return [(n, [mixer.kind for mixer in block.mixers()], block.mlp and block.mlp.kind) for n, block in spec.runs()]


def caches(spec: Any) -> list[Any]:
    """What each run keeps per token and per sequence."""
    return [block.cache(spec.d_model) for _, block in spec.runs()]


def widths(spec: Any) -> list[Any]:
    """What each run keeps, as element counts: per token (K and V widths) and per sequence (each state's size)."""
    return [([(token.k, token.v) for token in cache.tokens], [(state.name, state.rows, state.cols, state.dtype)
                                                              for state in cache.states]) for cache in caches(spec)]


# --- transformers' own tiny models, saved with no config.json beside them ---------------------------

# Layouts whose layers hold a second kind of sublayer (calc.checkpoint.infer_hybrids, and LFM2-MoE's
# experts in infer_configs), and Gemma-4's per-layer embeddings (a model-level table): each tiny model of
# tests/tiny_models.py, written by transformers' save_pretrained (the Hub's names), its config.json removed.
SAVED_TINY = ["granitemoehybrid", "olmo_hybrid", "lfm2_moe", "zamba2", "gemma3n_text", "gemma4_text"]


@pytest.mark.parametrize("model_type", SAVED_TINY)
def test_a_saved_model_without_its_config_is_counted_as_transformers_counts_it(model_type: str, tmp_path: Path) -> None:
    """Every tensor recognised, each component as the real config's spec counts it, the total
    transformers' own (the model the file was saved from)."""
    from oracle import spec_of, transformers_count
    from test_hybrids import _transformers_tiny
    from tiny_models import tiny_config

    _transformers_tiny(model_type).save_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    report = read_checkpoint(str(tmp_path))
    assert report.spec_origin == "tensor shapes (no config.json)"
    assert report.mismatches == () and report.unknown == ()
    inferred = count(report.spec)
    assert dict(inferred.components) == dict(count(spec_of(tiny_config(model_type))).components)
    assert inferred.total == transformers_count(tiny_config(model_type))
    assert report.spec_notes


@pytest.mark.parametrize("hub", [False, True], ids=["transformers5", "hub"])
@pytest.mark.parametrize("model_type", SAVED_TINY)
def test_a_tiny_header_in_either_expert_layout_is_read(model_type: str, hub: bool, tmp_path: Path) -> None:
    """The same tiny specs as the tensors gptcalc implies, in transformers 5's fused expert names
    (Granite's `experts.gate_up_proj`, LFM2-MoE's) as well as the Hub's: each component as counted."""
    from oracle import spec_of
    from tiny_models import tiny_config

    spec = spec_of(tiny_config(model_type))
    report = read_checkpoint(str(lone_file(spec, tmp_path, hub)))
    assert report.mismatches == () and report.unknown == ()
    assert dict(count(report.spec).components) == dict(count(spec).components)
    # (the tiny Gemma-3n alternates local and global layers; which is which is not stored, and every fifth is assumed)
    assert (layers(report.spec) == layers(spec)) is (model_type != "gemma3n_text")


def test_zamba2_shared_blocks_listed_under_every_layer_applying_them(tmp_path: Path) -> None:
    """A torch state dict (transformers' own `state_dict()`, torch.save'd) lists each shared block again
    under every hybrid layer applying it, where save_pretrained writes it once: the repeats share the
    first listing's storage (aliases, left out), so both read as two blocks."""
    import torch

    from oracle import spec_of
    from test_hybrids import _transformers_tiny
    from tiny_models import tiny_config

    state = _transformers_tiny("zamba2").state_dict()
    assert "model.layers.4.shared_transformer.self_attn.q_proj.weight" in state  # block A again, under layer 4
    torch.save(state, tmp_path / "pytorch_model.bin")
    report = read_checkpoint(str(tmp_path / "pytorch_model.bin"))
    assert report.mismatches == () and report.unknown == ()
    assert dict(count(report.spec).components) == dict(count(spec_of(tiny_config("zamba2"))).components)
