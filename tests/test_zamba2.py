"""Zamba2: shared transformer blocks stored once and applied by several layers, each application
with its own adapters, output linear and KV cache (calc/parts/shared.py, calc/arch/zamba2.py).

The oracle is transformers' own Zamba2 (models/zamba2/modeling_zamba2.py): its tied shared blocks
appear once in named_parameters(), its DynamicCache keeps one K/V entry per hybrid layer. The tiny
config (tests/tiny_models.py) has two copies, A and B, applied by hybrid layers 1, 3 and 4 (A, B, A).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.count import count
from calc.analysis.memory.kv import kv_cache
from calc.analysis.memory.parallel import Layout, stages
from calc.analysis.shapes import journey
from calc.analysis.train.activations import shared_terms
from calc.analysis.train.params import held
from calc.cli import main
from calc.errors import GptcalcError
from calc.spec.model import spec_from_dict
from cli_checks import check_run
from oracle import CONFIG_DIR, read_config, spec_of, transformers_count, transformers_model
from test_hybrids import _transformers_tiny
from tiny_models import tiny_config

# gptcalc's component -> the parameter names transformers gives it (modeling_zamba2.py's module paths)
MODULES = {
    "shared_block_attn_norm": ("shared_transformer.input_layernorm.",),
    "shared_block_q": ("self_attn.q_proj.",), "shared_block_k": ("self_attn.k_proj.",),
    "shared_block_v": ("self_attn.v_proj.",), "shared_block_attn_out": ("self_attn.o_proj.",),
    "shared_block_mlp_norm": ("pre_ff_layernorm.",),
    "shared_block_mlp_gate": ("feed_forward.gate_up_proj.",), "shared_block_mlp_up": ("feed_forward.gate_up_proj.",),
    "shared_block_mlp_down": ("feed_forward.down_proj.",),
    "shared_block_q_adapter": ("linear_q_adapter_list.",), "shared_block_k_adapter": ("linear_k_adapter_list.",),
    "shared_block_v_adapter": ("linear_v_adapter_list.",), "shared_block_mlp_adapter": ("gate_up_proj_adapter_list.",),
    "shared_block_proj": (".linear.",),
}


def test_shared_rows_equal_transformers_modules() -> None:
    """Each shared-block component equals the parameters transformers holds under its module, each
    tied tensor once: the copies' weights once, the adapters and linear once per application (biases
    with their weights: add_bias_linear puts them on the MLP)."""
    config = tiny_config("zamba2")
    b = count(spec_of(config))
    named = dict(transformers_model(config).named_parameters())  # a tied tensor is listed once
    for component, paths in MODULES.items():
        held = sum(p.numel() for name, p in named.items() if any(path in name for path in paths))
        together = [c for c, other in MODULES.items() if other == paths]  # gate and up: one fused gate_up_proj
        assert sum(b.get(c) + b.get(f"{c}_bias") for c in together) == held > 0, component


@pytest.mark.parametrize("change", [
    {"num_mem_blocks": 1},  # one copy applied by every hybrid layer
    {"num_mem_blocks": 3, "num_key_value_heads": 2, "use_shared_attention_adapter": False, "use_mem_rope": False,
     "add_bias_linear": False, "hidden_act": "silu", "mamba_ngroups": 1},
    {"layers_block_type": ["linear_attention", "hybrid", "hybrid", "linear_attention", "hybrid"]},  # as transformers writes it
    {"layers_block_type": None, "num_hidden_layers": 54, "use_long_context": True},  # Zamba2Config's default 54-layer pattern
], ids=["one-copy", "three-copies-gqa", "written-names", "default-pattern"])
def test_variants_total_equals_transformers(change: dict) -> None:
    config = {key: value for key, value in {**tiny_config("zamba2"), **change}.items() if value is not None}
    assert count(spec_of(config)).total == transformers_count(config)


def test_a_split_the_heads_cannot_run_is_said() -> None:
    """Zamba2-7B's early config.json says mamba_headdim 64 but leaves n_mamba_heads at transformers'
    default 8: 8 × 64 is not 2 × 3,584; the parameters do not depend on the split, the note says so."""
    spec = spec_of(read_config(CONFIG_DIR / "model_types" / "zamba2.json"))
    assert any("mamba_headdim 64 × n_mamba_heads 8 is not mamba_expand × hidden_size = 7,168" in n for n in spec.notes)
    assert not any("mamba_headdim" in n for n in spec_of(tiny_config("zamba2")).notes)


@pytest.mark.parametrize("change, named", [
    ({"layers_block_type": "hybrid"}, "layers_block_type: expected a list"),
    ({"layers_block_type": ["mamba", "attention"]}, "layers_block_type: unknown layer type 'attention'"),
    ({"layers_block_type": []}, "layers_block_type: empty"),
    ({"n_mamba_heads": 3}, "n_mamba_heads: 3 heads do not divide"),
    ({"num_mem_blocks": 0}, "num_mem_blocks: 0"),
    ({"adapter_rank": 0}, "adapter_rank: 0"),
    ({"num_attention_heads": 5}, "num_attention_heads: 5 heads do not divide"),
])
def test_bad_keys_are_one_error_naming_them(change: dict, named: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**tiny_config("zamba2"), **change}))
    result = check_run(["count", str(tmp_path)])
    assert result.exit_code == 2 and named in result.stderr


def test_gqa_with_attention_adapters_is_refused_by_name() -> None:
    """Zamba2Attention's K and V adapters write attention_hidden_size (2·d): narrower K and V cannot take them."""
    with pytest.raises(GptcalcError, match="num_key_value_heads: 2 of 4 heads"):
        spec_of({**tiny_config("zamba2"), "num_key_value_heads": 2})


def test_copies_counted_once_applications_each() -> None:
    """d = 32, 4 heads of 2·32 / 4 = 16, rank 4, d_ff 48: each copy's W_Q is 64 × 64, stored twice (A
    and B) for three applications; each application's Q adapter is 64·4 + 4·64, its linear 32 × 32."""
    b = count(spec_of(tiny_config("zamba2")))
    assert [(copy.name, copy.layers) for copy in b.shared] == [("A", 1), ("B", 1)]
    assert b.get("shared_block_q") == 2 * 64 * 64
    assert b.get("shared_block_q_adapter") == 3 * (64 * 4 + 4 * 64)
    assert b.get("shared_block_mlp_adapter") == 3 * (32 * 4 + 4 * 2 * 48)
    assert b.get("shared_block_proj") == 3 * 32 * 32
    assert "applied by 2 layers" in b.shared[0].description and "applied by 1 layers" in b.shared[1].description


def test_count_shows_each_copy_once(tmp_path: Path) -> None:
    """The table's section per copy ("shared block A (stored once)") and --json's shared_blocks, whose
    totals with the blocks' and the model's rows add up to the total."""
    (tmp_path / "config.json").write_text(json.dumps(tiny_config("zamba2")))
    table = CliRunner().invoke(main, ["count", str(tmp_path)])
    assert table.exit_code == 0 and "shared block A (stored once)" in table.output and "shared block B" in table.output
    data = json.loads(CliRunner().invoke(main, ["count", str(tmp_path), "--json"]).output)
    copies = {copy["name"]: copy["total"] for copy in data["shared_blocks"]}
    # norm 64, Q, K, V 3 × 64·64, W_O 64·32, norm 32, gate_up 32·96 + 96, down 48·32 + 32 (add_bias_linear)
    one_copy = 64 + 3 * 64 * 64 + 64 * 32 + 32 + (32 * 96 + 96) + (48 * 32 + 32)
    assert copies == {"A": one_copy, "B": one_copy}
    layers = sum(block["total"] for block in data["blocks"])
    assert layers + sum(copies.values()) + data["components"]["token_embedding"] + data["components"]["final_norm"] \
        == data["total"]


def test_each_application_keeps_its_own_cache() -> None:
    """Three applications, each K and V of 4 heads × 16 per token (fp32: 4 B); every layer, hybrid or
    not, keeps its Mamba2's conv window and SSM state, whatever the length."""
    spec = spec_of(tiny_config("zamba2"))
    short, long = kv_cache(spec, 10, 1, "fp32"), kv_cache(spec, 1000, 1, "fp32")
    assert short.bytes_per_token == 3 * 2 * 4 * 16 * 4
    assert short.state_bytes == long.state_bytes > 0
    assert long.total_bytes - short.total_bytes == 990 * short.bytes_per_token


def test_zamba2_7b_cache_per_token() -> None:
    """Zamba2-7B's config: 13 hybrid layers of 32 heads × 2·3584 / 32 = 224, K and V in fp16:
    13 × 2 × 32 × 224 × 2 B = 372,736 B per token; the 81 Mamba2 layers' states do not grow."""
    spec = spec_of(read_config(CONFIG_DIR / "model_types" / "zamba2.json"))
    kv = kv_cache(spec, 4096, 1, "fp16")
    assert kv.bytes_per_token == 13 * 2 * 32 * 224 * 2 == 372_736
    assert sum(n for name, n in spec.layer_counts().items()) == 81
    assert {copy: uses for copy, (_, uses) in spec.shared_blocks().items()} == {"A": 7, "B": 6}


def test_a_pipeline_stage_holds_the_copies_its_layers_apply() -> None:
    """--pp 2 splits the 5 layers 3 + 2 (vLLM's get_pp_indices): stage 0 applies A (layer 1), stage 1
    applies B and A (layers 3, 4): it holds both copies, stage 0 one."""
    spec = spec_of(tiny_config("zamba2"))
    first, last = stages(spec, count(spec), Layout(pp=2))
    assert (first.n_layers, last.n_layers) == (3, 2)
    assert first.params["shared_block_q"] == 64 * 64 and last.params["shared_block_q"] == 2 * 64 * 64


def test_one_copy_is_one_block() -> None:
    """Two layers applying copy A must describe the same block: it is stored once."""
    data = json.loads(json.dumps(spec_of(tiny_config("zamba2")).model_dump(mode="json")))
    data["blocks"]["hybrid_B"]["shared"]["name"] = "A"
    assert spec_from_dict(data, "spec").shared_blocks().keys() == {"A"}  # the same block under one name: fine
    data["blocks"]["hybrid_B"]["shared"]["block"]["mlp"]["d_ff"] = 64
    with pytest.raises(GptcalcError, match="copy 'A' is stored once"):
        spec_from_dict(data, "spec")


def test_shapes_own_each_copy_once() -> None:
    """The journey's params column adds up to the count: a copy's steps own its weights one time
    (`once`), in the first layer kind applying it; each application's adapters and linear per layer."""
    spec = spec_of(tiny_config("zamba2"))
    for decode in (False, True):
        j = journey(spec, 6, 2, decode)
        assert j.params == count(spec).decoder_total
        assert {s.block for s in j.steps if s.once and s.params} == {"hybrid_A", "hybrid_B"}


def test_shared_block_flops_equal_flop_counter_on_transformers() -> None:
    """FlopCounterMode over transformers' own tiny Zamba2 (eager attention, so the scores and the
    weighted values are matmuls it sees): what each hybrid layer's shared_transformer and linear
    modules multiply equals our shared-block steps' FLOPs, summed over the layers applying them."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    config, (batch, seq) = tiny_config("zamba2"), (2, 6)
    model = _transformers_tiny("zamba2")
    model.set_attn_implementation("eager")
    ids = torch.randint(0, config["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(ids)
    measured = sum(sum(ops.values()) for name, ops in counter.get_flop_counts().items()
                   if name.count(".") == 4 and name.endswith((".shared_transformer", ".linear")))
    j = journey(spec_of(config), seq, batch)
    ours = sum(s.flops * j.layers[s.block] for s in j.steps if s.block.startswith("hybrid") and not s.id.startswith("ssm"))
    assert ours == measured > 0


def test_shared_block_activations_equal_what_autograd_saves() -> None:
    """saved_tensors_hooks over transformers' own tiny Zamba2 (eager attention, no dropout), recording
    only while a hybrid layer's shared_transformer or linear runs: the distinct storages saved, the
    parameters and the rotary tables (computed once for the model) left out, equal our terms for every
    application — both norms, the attention reading d_in, the adapters' middles, the MLP, the linear's input."""
    torch = pytest.importorskip("torch")
    config, (batch, seq) = tiny_config("zamba2"), (2, 6)
    spec, model = spec_of(config), _transformers_tiny("zamba2")
    model.set_attn_implementation("eager")
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    state: dict = {"on": False, "kept": {}, "tables": set()}

    def pack(t):  # noqa: ANN001, ANN202 - a saved tensor, returned as it is
        storage = t.untyped_storage()
        if state["on"] and storage.data_ptr() not in params | state["tables"]:
            state["kept"][storage.data_ptr()] = storage.nbytes()
        return t

    for name, module in model.named_modules():
        if name.count(".") == 3 and name.endswith((".shared_transformer", ".linear")):
            module.register_forward_pre_hook(lambda *_: state.update(on=True))
            module.register_forward_hook(lambda *_: state.update(on=False))
    model.model.rotary_emb.register_forward_hook(
        lambda _m, _a, out: state["tables"].update(t.untyped_storage().data_ptr() for t in out))
    ids = torch.randint(0, config["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(ids)
    ours = sum(n * sum(t.bytes(1, False) for t in shared_terms(spec.blocks[kind].shared, batch, seq, spec.d_model, 4,
                                                          "none", False))
               for kind, n in spec.layer_counts().items() if spec.blocks[kind].shared)
    assert sum(state["kept"].values()) == ours > 0


def test_train_holds_each_copy_once() -> None:
    """The parameters train holds add up to the count (a copy once, not once per layer applying it);
    over 2 pipeline stages (layers 0-2 and 3-4) the second applies both copies and holds both."""
    spec = spec_of(tiny_config("zamba2"))
    b = count(spec)
    assert held(spec).params == b.total
    busiest = held(spec, pp=2)
    layers = {block.name: block.per_layer_total for block in b.blocks}
    copies = sum(copy.total for copy in b.shared)
    assert busiest.stage_layers == 2
    assert busiest.params == layers["hybrid_B"] + layers["hybrid_A"] + copies + b.get("final_norm")


def test_what_does_not_follow_shared_blocks_refuses_by_name(tmp_path: Path) -> None:
    """A result that left the shared blocks out would look right and be wrong: one named error
    (a GGUF mix, whose type choice for a shared block llama.cpp's code does not say)."""
    (tmp_path / "config.json").write_text(json.dumps(tiny_config("zamba2")))
    result = CliRunner().invoke(main, ["memory", str(tmp_path), "--seq", "8", "--quant", "q4_k_m"])
    assert result.exit_code == 2, result.output
    assert "does not implement shared blocks yet" in result.output


def test_the_checkpoint_reader_places_each_copy_once(tmp_path: Path) -> None:
    """transformers' save_pretrained writes copy A's tensors under layer 1, the first applying it, with
    the adapters of applications 0 and 2, and copy B's under layer 3 (application 1); layer 4, which
    applies A again, holds only its Mamba and its linear. Every tensor recognised, the total the count's."""
    from calc.checkpoint.names import classify
    from calc.checkpoint.report import read_checkpoint

    _transformers_tiny("zamba2").save_pretrained(tmp_path)
    report = read_checkpoint(str(tmp_path))
    assert report.ok, report.problems
    spec = spec_of(tiny_config("zamba2"))
    assert report.breakdown.total == count(spec).total
    adapter = "model.layers.1.shared_transformer.self_attn.linear_q_adapter_list.{}.0.weight"
    assert classify(adapter.format(2), spec).target == "shared_block_q_adapter"
    assert classify(adapter.format(1), spec) is None  # application 1 applies B, stored under layer 3
    assert classify("model.layers.4.linear.weight", spec).target == "shared_block_proj"
    assert classify("model.layers.4.shared_transformer.self_attn.q_proj.weight", spec) is None


def test_reference_builds_each_copy_once_at_full_size() -> None:
    """Zamba2-7B's config.json on the meta device: the torch reference's parameters are the count's
    (7,326,532,760, transformers' own meta model's: docs/architectures.md's table), each copy once,
    under the first two of its 13 hybrid layers (A, B in turn); the names transformers' state dict
    lists a copy under again, in each of the 11 later hybrid layers, map to the first's."""
    pytest.importorskip("torch")
    from calc.reference.model import build

    config = read_config(CONFIG_DIR / "model_types" / "zamba2.json")
    hybrid = [i for i, kind in enumerate(config["layers_block_type"]) if kind == "hybrid"]
    spec = spec_of(config)
    model = build(spec, device="meta")
    assert sum(p.numel() for p in model.parameters()) == count(spec).total == 7_326_532_760
    layer = lambda name: int(name.split(".")[2])  # noqa: E731  model.layers.{i}.shared_transformer...
    assert len(hybrid) == 13 and {layer(name) for name in model.tied.values()} == set(hybrid[:2])
    assert {layer(name) for name in model.tied} == set(hybrid[2:])


def test_reference_refuses_a_shared_block_in_another_layer_form() -> None:
    """The reference adds a shared block's output to what a sequential layer's mixer norm reads; a
    parallel layer (a spec written by hand) is refused by name rather than run without it."""
    pytest.importorskip("torch")
    from calc.reference.model import build

    data = spec_of(tiny_config("zamba2")).model_dump()
    data["blocks"]["hybrid_A"]["parallel"] = True
    data["blocks"]["hybrid_A"]["mlp"] = {"kind": "mlp", "d_ff": 48}
    with pytest.raises(GptcalcError, match="applies a shared block before the mixer"):
        build(spec_from_dict(data, "zamba2-parallel"), device="meta")
