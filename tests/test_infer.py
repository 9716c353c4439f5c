"""Spec inference's pass over the names (calc.checkpoint.infer): the whole-column matching that
100,000 names need gives what `_template` gives name by name, on hostile names too.

The reference is computed here, one name at a time, with the per-name `_template` (the layout's
paths through `with_base` and the layer pattern); the column pass must agree on how many names each
family claims, the shape each template keeps (the last tensor's, aliases left out) and the layers.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from calc.checkpoint import infer
from calc.checkpoint.sources import RawCheckpoint
from calc.checkpoint.tensors import TensorColumns
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
