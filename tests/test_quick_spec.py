"""calc.spec.quick against pydantic: what the quick check accepts, pydantic accepts too, with the
same spec; everything else is left to pydantic (and its error message).

The references are pydantic's own answers (`calc.spec.validate.validated`, the models built from the
same declarations), computed here side by side: the specs of every config.json in
tests/configs/model_types and of every preset, and those specs mutated at random places.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from calc.spec import hf, load
from calc.spec.flat import FlatSpec
from calc.spec.model import ModelSpec, is_flat
from calc.spec.presets import preset_names
from calc.spec.quick import accepted
from calc.spec.validate import validated
from tests.cli_checks import fuzz_examples

CONFIGS = sorted((Path(__file__).parent / "configs" / "model_types").glob("*.json"))


def pydantic_spec(data: dict[str, Any]) -> Any:
    """pydantic's answer: the spec, or the exception it raised."""
    try:
        return validated(ModelSpec, copy.deepcopy(data))
    except Exception as exc:  # noqa: BLE001  (a validator may raise other than ValidationError)
        return exc


def config_spec(path: Path) -> dict[str, Any]:
    return hf.read_config(path).spec_dict()


def preset_spec(name: str) -> dict[str, Any]:
    """A preset's layered spec mapping, as spec_from_dict receives it."""
    source = load._raw_spec(name)
    if isinstance(source, hf.HFConfig):
        return source.spec_dict()
    raw = source[0]
    return FlatSpec.model_validate(raw).to_layered() if is_flat(raw) else raw


def same(quick: Any, reference: Any) -> bool:
    """Equal, and of the same types throughout (repr tells 1 from 1.0 and a list from a tuple)."""
    return quick == reference and repr(quick) == repr(reference)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.stem)
def test_every_config_is_accepted_as_pydantic_validates_it(path: Path) -> None:
    data = config_spec(path)
    quick = accepted(ModelSpec, copy.deepcopy(data))
    assert quick is not None, f"{path.name}: the quick check declined a valid spec (pydantic needed: slow start-up)"
    assert same(quick, pydantic_spec(data))


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_is_accepted_as_pydantic_validates_it(name: str) -> None:
    data = preset_spec(name)
    quick = accepted(ModelSpec, copy.deepcopy(data))
    assert quick is not None and same(quick, pydantic_spec(data))


# What a mutation puts in place of a value: wrong types, bounds, coercible strings, containers, kinds.
REPLACEMENTS = [None, True, False, 0, -1, 1, 2.0, 1.5, float("nan"), float("inf"), 2**60, "1", "x", "true", [], {},
                [1, 2], (1,), "attention", "mla", "moe", "mlp", "mamba2", "rmsnorm", "layernorm", "attn_in"]


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a nested mapping/list a mutation can reach."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths(value, (*prefix, key))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            found += paths(value, (*prefix, i))
    return found


def mutated(data: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """`data` with one value replaced, one key removed, or one unknown key added, somewhere."""
    data = json.loads(json.dumps(data))  # lists for tuples, as a config.json's adapter may write them
    *parent_path, last = rng.choice(paths(data))
    parent = data
    for key in parent_path:
        parent = parent[key]
    action = rng.random()
    if action < 0.15 and isinstance(parent, dict):
        del parent[last]
    elif action < 0.25 and isinstance(parent, dict):
        parent[f"{last}_typo"] = parent[last]
    else:
        parent[last] = rng.choice(REPLACEMENTS)
    return data


@pytest.mark.parametrize("path", CONFIGS[::6], ids=lambda path: path.stem)
def test_a_mutated_spec_is_accepted_only_as_pydantic_accepts_it(path: Path) -> None:
    """Each mutation: either the quick check declines, or pydantic builds the very same spec."""
    base, rng = config_spec(path), random.Random(path.stem)
    declined = 0
    for _ in range(fuzz_examples(40)):
        data = mutated(base, rng)
        quick, reference = accepted(ModelSpec, copy.deepcopy(data)), pydantic_spec(data)
        if quick is None:
            declined += 1
            continue
        assert not isinstance(reference, Exception), f"accepted what pydantic refuses: {reference}"
        assert same(quick, reference)
    assert declined, "no mutation was declined: the mutations test nothing"


def test_a_declined_spec_gets_pydantics_error() -> None:
    """The decline is not a verdict: spec_from_dict still reports pydantic's error, naming the field."""
    from calc.errors import GptcalcError
    from calc.spec.model import spec_from_dict

    data = config_spec(Path(__file__).parent / "configs" / "model_types" / "llama.json")
    data["d_model"] = True
    assert accepted(ModelSpec, data) is None
    with pytest.raises(GptcalcError, match="d_model: Input should be a valid integer"):
        spec_from_dict(data, "llama")
    with pytest.raises(ValidationError):
        validated(ModelSpec, data)
