"""Rebuilding a spec from its own validated dump, without validating it again.

The presets ship with their validated specs (`presets/compiled.json`, written by
`python docs/regenerate.py` and checked by the tests), so `gptcalc count llama-3.1-8b` needs no
pydantic at all — its import alone is the largest start-up cost of a calculator that answers in
milliseconds. `calc.spec.validate` ends here too, turning pydantic's validated data into parts.
`construct` walks the parts' own field annotations, so it knows nothing of any particular part:
a nested part is constructed by its class, a union of parts by its `kind`. Only data this program
validated may come here; anything a user gives is validated first.
"""

from functools import cache
from types import UnionType
from typing import Any, Callable, Union, get_args, get_origin

from calc.parts.base import MISSING, Part

__all__ = ["construct"]

Convert = Callable[[Any], Any]


def construct(cls: type[Part], data: dict[str, Any]) -> Any:
    """`cls` holding `data` (a dump, JSON or Python mode, of a validated `cls`), unvalidated."""
    return cls.model_construct(**{name: convert(data[name]) for name, convert in _plan(cls) if name in data})


@cache
def _plan(cls: type[Part]) -> tuple[tuple[str, Convert], ...]:
    """How each field of `cls` is rebuilt from JSON, worked out once per class (`gptcalc presets`
    rebuilds 52 specs: reading annotations per value cost more than the counts)."""
    return tuple((name, _converter(field.annotation)) for name, field in cls.model_fields.items())


def _converter(annotation: Any) -> Convert:
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, Part):
        return _optional(lambda value: construct(annotation, value))
    if origin in (Union, UnionType):
        models = [arg for arg in args if isinstance(arg, type) and issubclass(arg, Part)]
        if not models:
            return _same
        by_kind = {model.model_fields["kind"].default: model for model in models} if len(models) > 1 else {}
        free = by_kind.pop(MISSING, None)  # a part whose `kind` is any name (Tower: its reader's), not a literal
        return lambda value: value if not isinstance(value, dict) else construct(
            by_kind.get(value.get("kind"), free) if by_kind else models[0], value)
    if origin is dict:
        item = _converter(args[1])
        return _optional(lambda value: {key: item(entry) for key, entry in value.items()})
    if origin is tuple:
        item = _converter(args[0])
        return _optional(lambda value: tuple(item(entry) for entry in value))
    return _same


def _optional(convert: Convert) -> Convert:
    return lambda value: None if value is None else convert(value)


def _same(value: Any) -> Any:
    return value
