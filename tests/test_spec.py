"""Spec validation: the flat form's defaults that follow other fields, the layered form, and errors
that name the fields."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calc.errors import GptcalcError
from calc.analysis.count import count
from calc.spec.flat import FlatSpec, flat_view
from calc.spec.model import ModelSpec, spec_from_dict

TINY = {"vocab_size": 100, "n_positions": 16, "d_model": 64, "n_layers": 2, "n_heads": 4}


def test_defaults_follow_other_fields() -> None:
    spec = flat_view(spec_from_dict(TINY, "tiny"))
    assert (spec.n_kv_heads, spec.head_dim, spec.d_ff) == (4, 16, 256)
    assert spec.attention_kind == "MHA"
    assert (spec.position_embedding, spec.norm, spec.mlp, spec.tie_embeddings) == ("learned", "layernorm", "gelu", True)


def test_llama_family_defaults() -> None:
    spec = flat_view(spec_from_dict({**TINY, "family": "llama", "n_kv_heads": 1}, "tiny"))
    assert (spec.position_embedding, spec.norm, spec.mlp) == ("rotary", "rmsnorm", "swiglu")
    assert not (spec.qkv_bias or spec.attn_out_bias or spec.mlp_bias or spec.tie_embeddings)
    assert spec.attention_kind == "MQA" and spec.group_size == 4


def test_head_dim_may_differ_from_d_model_over_heads() -> None:
    # source: gemma-7b's config.json: hidden_size 3072, num_attention_heads 16, head_dim 256.
    spec = flat_view(spec_from_dict({**TINY, "d_model": 3072, "n_heads": 16, "head_dim": 256}, "gemma-like"))
    assert (spec.q_dim, spec.kv_dim) == (4096, 4096)


def test_with_kv_heads_revalidates() -> None:
    spec = spec_from_dict(TINY, "tiny")
    assert spec.with_kv_heads(2).blocks["block"].attention.attention_kind == "GQA"
    with pytest.raises(GptcalcError, match="n_heads=4 is not a multiple of n_kv_heads=3"):
        spec.with_kv_heads(3)


def test_frozen() -> None:
    spec = spec_from_dict(TINY, "tiny")
    with pytest.raises(Exception):
        spec.d_model = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"d_model": 770, "n_heads": 12}, "f.yaml: d_model=770 is not divisible by n_heads=12"),
        ({"d_model": 8192, "n_heads": 64, "n_kv_heads": 7}, "f.yaml: n_heads=64 is not a multiple of n_kv_heads=7"),
        ({"n_layer": 12}, "f.yaml: n_layer: unknown field"),
        ({"d_model": 0}, "f.yaml: d_model: Input should be greater than 0"),
        ({"d_model": True}, "f.yaml: d_model: Input should be a valid integer"),
        ({"d_model": "768"}, "f.yaml: d_model: Input should be a valid integer"),
        ({"norm": "batchnorm"}, "f.yaml: norm: Input should be 'layernorm' or 'rmsnorm'"),
        ({"family": "llama", "head_dim": 15}, "f.yaml: head_dim=15 must be even for rotary"),
        ({"mlp": "swiglu"}, "f.yaml: mlp=swiglu needs family=llama"),
        ({"vocab_size": None}, "f.yaml: vocab_size: missing (required)"),
        ({"family": ["llama"]}, "f.yaml: family: Input should be 'gpt2' or 'llama'"),
    ],
)
def test_errors_name_the_field(change: dict, message: str) -> None:
    data = {key: value for key, value in {**TINY, **change}.items() if value is not None}
    with pytest.raises(GptcalcError) as caught:
        spec_from_dict(data, "f.yaml")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_not_a_mapping() -> None:
    with pytest.raises(GptcalcError, match="f.yaml: expected a mapping of spec fields, got list"):
        spec_from_dict([1, 2], "f.yaml")


def test_schema_lists_every_switch() -> None:
    # The YAML vocabulary users write: adding a field must be a deliberate, documented change.
    assert set(ModelSpec.model_fields) == {
        "name", "source", "model_type", "vocab_size", "d_model", "n_positions", "embedding", "blocks", "layers",
        "final_norm", "head", "mtp", "towers", "uncounted", "notes", "quant", "vllm", "sglang", "llamacpp",
        "architecture",
    }
    assert set(FlatSpec.model_fields) == {
        "name", "source", "family", "vocab_size", "n_positions", "d_model", "n_layers", "n_heads",
        "n_kv_heads", "head_dim", "d_ff", "position_embedding", "norm", "mlp", "qkv_bias",
        "attn_out_bias", "mlp_bias", "tie_embeddings", "norm_eps", "rope_theta", "dropout", "architecture",
    }


def test_flat_form_is_shorthand_for_one_block_kind() -> None:
    flat = spec_from_dict({**TINY, "family": "llama", "n_kv_heads": 2}, "tiny")
    layered = spec_from_dict(flat.model_dump(), "layered")
    assert layered == flat and count(layered).total == count(flat).total
    assert [(run.repeat, run.block) for run in flat.layers] == [(2, "block")]


def test_layers_are_run_length_and_a_huge_stack_is_instant() -> None:
    data = spec_from_dict({**TINY, "family": "llama"}, "tiny").model_dump()
    data["layers"] = [[3, "block"], [9_997, "block"]]  # adjacent runs of one kind merge
    spec = spec_from_dict(data, "deep")
    assert spec.n_layers == 10_000 and len(spec.layers) == 1
    assert count(spec).get("q") == 10_000 * 64 * 64


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(1, 6), st.sampled_from(["a", "b"])), min_size=1, max_size=6),
       first=st.integers(0, 40), width=st.integers(0, 40))
def test_layer_counts_of_a_range_are_the_layers_counted_one_by_one(runs: list[tuple[int, str]], first: int,
                                                                   width: int) -> None:
    """The run-length count (what lets memory --pp and train take 10^12 layers) against block_at."""
    data = spec_from_dict({**TINY, "family": "llama"}, "tiny").model_dump()
    data["blocks"] = {"a": data["blocks"]["block"], "b": data["blocks"]["block"]}
    kinds = {kind for _, kind in runs}
    data["blocks"] = {k: v for k, v in data["blocks"].items() if k in kinds}
    data["layers"] = [list(run) for run in runs]
    spec = spec_from_dict(data, "runs")
    last = min(first + width, spec.n_layers)
    expected: dict[str, int] = {}
    for layer in range(first, last):
        expected[spec.block_at(layer)] = expected.get(spec.block_at(layer), 0) + 1
    assert spec.layer_counts(first, last) == expected
    assert spec.layer_counts() == {k: sum(n for n, kind in runs if kind == k) for k in dict.fromkeys(k for _, k in runs)}


@pytest.mark.parametrize(("change", "message"), [
    ({"layers": [[2, "nope"]]}, "layered: layers: block 'nope' is not defined in blocks (block)"),
    ({"layers": [[0, "block"]]}, "layered: layers.0.repeat: Input should be greater than 0"),
    ({"blocks": {"block": {"attention": {"n_heads": 4, "head_dim": 16}, "mlp": {"kind": "moe", "n_experts": 2,
                                                                               "top_k": 3, "d_ff": 8},
                           "norm": {"kind": "rmsnorm"}}}}, "layered: blocks.block.mlp: Value error, top_k=3 is more"),
    ({"final_norm": {"kind": "rmsnorm", "bias": True}}, "layered: final_norm: an RMSNorm has no bias"),
    ({"blocks": {"block": {"attention": {"n_heads": 4, "head_dim": 16}, "mlp": {"d_ff": 8}, "norm": {"kind": "rmsnorm"},
                           "norms": ["attn_in", "attn_out", "mlp_in"], "normed_residual": {"mixer": [1.5, 1.0]}}}},
     "layered: blocks.block: Value error, normed_residual: one sequential mixer + MLP pair with input norms only"),
])
def test_layered_errors_name_the_path(change: dict, message: str) -> None:
    data = {**spec_from_dict({**TINY, "family": "llama"}, "tiny").model_dump(), **change}
    with pytest.raises(GptcalcError) as caught:
        spec_from_dict(data, "layered")
    assert str(caught.value).startswith(message.replace("Value error, ", "")), str(caught.value)
