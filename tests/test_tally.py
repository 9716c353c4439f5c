"""The bulk tally (`calc.checkpoint.name_index`, `calc.checkpoint.tally`) reports exactly what the per-tensor path does.

For every model_type (tiny configs, `tests/tiny_models.py`) and the large MoE presets, in both expert
layouts, with the MTP layers and buffers a checkpoint may store: the name index spells exactly the
names `expected_shapes` lists, and a checkpoint, whole or damaged (a tensor missing, reshaped,
renamed, stored twice under a base-less name, in another dtype, with a quantisation scale beside
it, an alias), gives the same report, to the last key order, whether tallied in bulk (quantisation
scales too) or one by one.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import calc.checkpoint.tally as tally_module
from calc.checkpoint.name_index import name_index
from calc.checkpoint.names import tensor_table
from calc.checkpoint.report import CheckpointReport, analyze
from calc.checkpoint.tensors import RawCheckpoint, TensorColumns
from calc.spec.hf import HFConfig
from calc.spec.load import load_spec, spec_from_config
from calc.spec.model import ModelSpec
from cli_checks import fuzz_examples
from tiny_models import TINY, tiny_config

SPECS = {**{t: lambda t=t: spec_from_config(HFConfig(tiny_config(t), t)) for t in sorted(TINY)},
         **{p: lambda p=p: load_spec(p) for p in ("deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b")}}
WIDTH = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}
# (suffix, dtype) of quantisation scales, as calc.checkpoint.quant knows them, and one in a dtype it does not
SCALES = [(".weight_scale_inv", "F32"), (".weight_scale", "BF16"), (".input_scale", "F32"), ("_scales", "U8"),
          (".weight_scale_inv", "U8")]


def spec_of(name: str) -> ModelSpec:
    return SPECS[name]()


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize(("hub", "mtp"), [(False, False), (True, False), (False, True), (True, True)])
def test_the_index_spells_the_expected_names(name: str, hub: bool, mtp: bool) -> None:
    table = tensor_table(spec_of(name))
    index = name_index(table, 10**7)
    expected = table.expected_shapes(hub=hub, mtp=mtp)
    spelled = {n: index.groups[index.group_of[p]] for n, p in index.positions.items()}
    listed = {n: g.expected[hub] for n, g in spelled.items() if g.expected[hub] is not None and (mtp or not g.mtp)}
    assert listed == expected
    assert index.expected_count(hub, mtp) == len(expected)


def raw_of(layout: dict[str, tuple[str, tuple[int, ...]]], aliases: dict[str, str] | None = None) -> RawCheckpoint:
    records = [(n, d, tuple(s), math.prod(s) * WIDTH[d]) for n, (d, s) in layout.items()]
    columns = TensorColumns([r[0] for r in records], [r[1] for r in records], [r[2] for r in records],
                            [r[3] for r in records], ["model.safetensors"] * len(records))
    return RawCheckpoint("test", "safetensors file", columns, (), aliases=aliases or {})


def both_ways(raw: RawCheckpoint, spec: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> CheckpointReport:
    """The bulk report, once it equals the one-by-one one."""
    bulk = analyze(raw, spec, "test")
    with monkeypatch.context() as patched:
        patched.setattr(tally_module, "name_index", lambda table, limit: None)
        patched.setattr(tally_module, "companions", lambda *args: [])
        one_by_one = analyze(raw, spec, "test")
    assert bulk.to_json() == one_by_one.to_json()
    assert list(bulk.to_json()["bytes_by_dtype"]) == list(one_by_one.to_json()["bytes_by_dtype"])
    assert (bulk.buffers, bulk.unknown, bulk.mismatches) == (one_by_one.buffers, one_by_one.unknown, one_by_one.mismatches)
    return bulk


def layout_of(spec: ModelSpec, hub: bool, mtp: bool) -> dict[str, tuple[str, tuple[int, ...]]]:
    shapes = tensor_table(spec).expected_shapes(hub=hub, buffers=True, mtp=mtp)
    return {name: ("BF16", shape) for name, shape in shapes.items()}


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("hub", [False, True])
def test_a_whole_checkpoint_is_reported_the_same_either_way(name: str, hub: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_of(name)
    layout = layout_of(spec, hub, bool(spec.mtp))
    lay = tensor_table(spec).lay
    for buffer in lay.get("buffers", ()):  # a layout's buffers, as older checkpoints store them
        layout[buffer.format(layer=0)] = ("F32", (4,))
    both_ways(raw_of(layout), spec, monkeypatch)


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek-v3"])
def test_fp8_scales_beside_every_projection_are_reported_the_same_either_way(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek-V3's layout: each projection in F8_E4M3 followed by its F32 block scale (45,000 at full size);
    an alias among the scales on the tiny config (the same code at any size: full size, each tally is seconds)."""
    spec, layout = spec_of(name), {}
    for tensor, (dtype, shape) in layout_of(spec, True, True).items():
        fp8 = "_proj" in tensor and tensor.endswith(".weight")
        layout[tensor] = ("F8_E4M3", shape) if fp8 else (dtype, shape)
        if fp8:
            layout[tensor + "_scale_inv"] = ("F32", (len(tensor) % 5 + 1, 2))
    bulk = both_ways(raw_of(layout), spec, monkeypatch)
    assert len(bulk.companions) == sum(name.endswith("_scale_inv") for name in layout)
    if name in TINY:
        scale = next(name for name in layout if name.endswith("_scale_inv"))  # an alias is skipped, a scale too
        both_ways(raw_of(layout, {scale: next(iter(layout))}), spec, monkeypatch)


DAMAGE = st.sampled_from(["drop", "reshape", "rename", "dtype", "scale", "base-less", "alias", "buffer-shape", "other layout"])


@settings(max_examples=fuzz_examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from([n for n in sorted(SPECS) if n not in ("deepseek-v3", "qwen3-30b-a3b")]),
       hub=st.booleans(), damage=st.lists(st.tuples(DAMAGE, st.integers(0, 10**6)), max_size=4))
def test_a_damaged_checkpoint_is_reported_the_same_either_way(name: str, hub: bool, damage: list,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_of(name)
    layout, aliases = layout_of(spec, hub, bool(spec.mtp)), {}
    other = sorted(set(layout_of(spec, not hub, bool(spec.mtp))) - set(layout)) or sorted(layout)
    base = tensor_table(spec).lay.get("base", "")
    for kind, where in damage:
        names = list(layout)
        if not names:
            break
        victim = names[where % len(names)]
        dtype, shape = layout[victim]
        if kind == "drop":
            del layout[victim]
        elif kind == "reshape":
            layout[victim] = (dtype, (*shape, 2))
        elif kind == "rename":
            layout[victim + ".x"] = layout.pop(victim)
        elif kind == "dtype":
            layout[victim] = ("F32", shape)
        elif kind == "scale":
            suffix, scale_dtype = SCALES[where % len(SCALES)]
            layout[victim] = ("F8_E4M3", shape)
            layout[victim.removesuffix(".weight") + suffix] = (scale_dtype, (1 + where % 3,))
        elif kind == "base-less" and base and victim.startswith(base):
            layout[victim.removeprefix(base)] = (dtype, shape)
        elif kind == "alias":
            aliases[victim] = names[0]
        elif kind == "other layout":  # a tensor of the other expert layout, in place of one of this one's
            del layout[victim]
            layout[other[where % len(other)]] = layout_of(spec, not hub, bool(spec.mtp))[other[where % len(other)]]
        elif kind == "buffer-shape":
            layout[f"{tensor_table(spec).layers}.{where % spec.n_layers}.self_attn.rotary_emb.inv_freq"] = ("F32", (where % 7,))
    if len(layout) >= spec.n_layers:
        both_ways(raw_of(layout, aliases), spec, monkeypatch)
