"""A spec checked without pydantic when it is plainly valid; pydantic judges everything else.

Building the pydantic models of `calc.spec.validate` costs a process more than the whole count of
a config.json (about 90 ms for the 32 parts, on top of importing pydantic's validation machinery),
and almost every spec that reaches validation is valid: an adapter wrote it from a config. So
`accepted(cls, data)` reads the same declarations the models are built from (`Part.model_fields`,
`Part.validators`) and checks the data the way a frozen, strict pydantic model with
`extra="forbid"` would — but only where that is certain: exact types (an int where an int is
declared; an int or a float for a float, made a float as pydantic makes it), the `gt`/`ge`/`lt`
and `min_length` bounds, a part of a union picked by its `kind`, every validator the parts declare,
run where pydantic runs them. Whatever it is not sure of — a wrong type, a missing or unknown
field, a value pydantic would coerce, a validator's error, a declaration it does not know — it
declines (None), and the caller validates with pydantic, which gives the one error message or the
coerced value. What it accepts pydantic accepts too, with the same result (tests/test_quick_spec.py
compares both on every config and preset, and on mutated ones), so validation is exactly as
strict and only the common case is faster.
"""

from __future__ import annotations

import math
import operator
from functools import cache
from types import UnionType
from typing import Any, Callable, Literal, Union, get_args, get_origin, get_type_hints

from calc.parts.base import MISSING, Part

__all__ = ["accepted"]

Check = Callable[[Any], Any]
_EXACT_FLOAT = 2**53  # an int pydantic and Python both turn into the same float
_OPTIONS = {"gt", "ge", "lt", "strict", "min_length", "discriminator", "description"}


class Declined(Exception):
    """The data is not plainly valid (or not of a form this module reads): pydantic decides."""


def accepted(cls: type[Part], data: Any) -> Any:
    """`data` as a `cls` when it is certainly valid, as pydantic would have built it; else None."""
    try:
        return _part(cls, data)
    except Exception:  # noqa: BLE001  (a decline, or a validator's error: pydantic reports it)
        return None


def _part(cls: type[Part], data: Any) -> Any:
    fields, before, after, field_validators = _plan(cls)
    if before is not None:
        data = before.plain(cls, data)
    if type(data) is not dict or not data.keys() <= fields.keys():
        raise Declined  # not a mapping, or a field pydantic forbids (extra="forbid")
    values = {}
    for name, (check, default) in fields.items():
        if name not in data:
            if default is MISSING:
                raise Declined  # a required field is missing
            values[name] = default()
            continue
        value = data[name]
        for validator in field_validators.get((name, "before"), ()):
            value = validator.plain(cls, value)
        value = check(value)
        for validator in field_validators.get((name, "after"), ()):
            value = validator.plain(cls, value)
        values[name] = value
    part = cls.model_construct(**values)
    if after is not None:
        after.plain(part)
    return part


@cache
def _plan(cls: type[Part]) -> tuple[dict[str, tuple[Check, Any]], Any, Any, dict[tuple[str, str], list[Any]]]:
    """Each field's check and default maker, the model validators, the field validators: once per class."""
    fields = {}
    hints = get_type_hints(cls)  # a module with `from __future__ import annotations` declares strings
    for name, info in cls.model_fields.items():
        if not info.options.keys() <= _OPTIONS or info.options.get("discriminator", "kind") != "kind":
            raise Declined  # an option this module does not apply: pydantic validates this class
        check = _check(hints.get(name, info.annotation), info.options.get("strict", True) is False)
        fields[name] = (_bounded(check, info.options), _default(info))
    model_validators: dict[str, list[Any]] = {"before": [], "after": []}
    field_validators: dict[tuple[str, str], list[Any]] = {}
    for validator in cls.validators.values():
        if validator.fields:
            for name in validator.fields:
                field_validators.setdefault((name, validator.mode), []).append(validator)
        else:
            model_validators[validator.mode].append(validator)
    if any(len(found) > 1 for found in [*model_validators.values(), *field_validators.values()]):
        raise Declined  # the order pydantic runs several in is its own: left to it
    before, after = (next(iter(model_validators[mode]), None) for mode in ("before", "after"))
    return fields, before, after, field_validators


def _default(info: Any) -> Any:
    """A maker of the field's default as pydantic's model dump holds it (a part's factory validates {})."""
    factory = info.default_factory
    if isinstance(factory, type) and issubclass(factory, Part):
        return lambda: _part(factory, {})
    if factory is not None:
        return factory
    if type(info.default) in (list, dict, set):
        raise Declined  # a mutable default pydantic copies: left to it
    return MISSING if info.default is MISSING else lambda: info.default


def _bounded(check: Check, options: dict[str, Any]) -> Check:
    """`check`, then the field's bounds (on a number, or the length of a tuple or mapping)."""
    tests = (("gt", operator.gt), ("ge", operator.ge), ("lt", operator.lt))
    bounds = [(options[key], test) for key, test in tests if key in options]
    shortest = options.get("min_length")
    if not bounds and shortest is None:
        return check

    def bounded(value: Any) -> Any:
        value = check(value)
        if value is None:
            return value
        if shortest is not None and len(value) < shortest:
            raise Declined
        if not all(test(value, limit) for limit, test in bounds):
            raise Declined
        return value

    return bounded


def _check(annotation: Any, lax: bool) -> Check:
    """The check of one annotation; `lax` (the field's strict=False) lets a list stand for a tuple,
    at the field's own level only, as pydantic applies it."""
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, Part):
        return lambda value: _part(annotation, value)
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if annotation is Any:
        return _plain
    if origin is Literal:
        return _literal(args)
    if origin in (Union, UnionType):
        return _union(args, lax)
    if origin is tuple:
        return _tuple(args, lax)
    if origin is dict and args[0] is str:
        item = _check(args[1], False)
        return lambda value: {_exactly(str, key): item(entry) for key, entry in _exactly(dict, value).items()}
    raise Declined  # a type this module does not read: pydantic validates the class


def _exactly(kind: type, value: Any) -> Any:
    if type(value) is not kind:
        raise Declined
    return value


def _float(value: Any) -> float:
    """A finite float, or an int pydantic's strict float takes and makes one (not a bool)."""
    if type(value) is int and -_EXACT_FLOAT <= value <= _EXACT_FLOAT:
        return float(value)
    if type(value) is float and math.isfinite(value):
        return value
    raise Declined


_SCALARS: dict[Any, Check] = {int: lambda value: _exactly(int, value), bool: lambda value: _exactly(bool, value),
                              str: lambda value: _exactly(str, value), float: _float}


def _plain(value: Any) -> Any:
    """An `Any` field's value, copied as pydantic's dump copies it, when it is plain JSON data."""
    if value is None or type(value) in (bool, int, str) or (type(value) is float and math.isfinite(value)):
        return value
    if type(value) is list:
        return [_plain(item) for item in value]
    if type(value) is dict:
        return {_exactly(str, key): _plain(item) for key, item in value.items()}
    raise Declined


def _literal(choices: tuple[Any, ...]) -> Check:
    if not all(type(choice) is str for choice in choices):
        raise Declined

    def literal(value: Any) -> Any:
        if type(value) is not str or value not in choices:
            raise Declined
        return value

    return literal


def _union(members: tuple[Any, ...], lax: bool) -> Check:
    """None, or the one member the value can be: a part picked by its `kind` where several are
    possible (pydantic's discriminated union, and its smart union of parts whose kinds differ)."""
    optional = type(None) in members
    members = tuple(member for member in members if member is not type(None))
    parts = [member for member in members if isinstance(member, type) and issubclass(member, Part)]
    if len(members) == 1:
        check = _check(members[0], lax)
    elif parts and len(parts) == len(members):
        check = _by_kind(parts)
    else:
        raise Declined
    if not optional:
        return check
    return lambda value: None if value is None else check(value)


def _by_kind(parts: list[type[Part]]) -> Check:
    """The part whose `kind` the value names; a part whose kind is any name (a Tower's: the module
    that read it) takes the kinds no other part declares, as pydantic's smart union ends up doing."""
    kinds, named = {}, []
    for part in parts:
        kind = part.model_fields.get("kind")
        if kind is None:
            raise Declined
        if type(kind.default) is str:
            kinds[kind.default] = part
        else:
            named.append(part)
    if len(named) > 1:
        raise Declined

    def pick(value: Any) -> Any:
        part = kinds.get(_exactly(dict, value)["kind"], named[0] if named else None)
        if part is None:
            raise Declined
        return _part(part, value)

    return pick


def _tuple(args: tuple[Any, ...], lax: bool) -> Check:
    """tuple[T, ...] or a fixed tuple[A, B, ...]: a tuple (or, lax, a list) of checked items."""
    containers = (tuple, list) if lax else (tuple,)
    if len(args) == 2 and args[1] is Ellipsis:
        item = _check(args[0], False)

        def each(value: Any) -> tuple[Any, ...]:
            if type(value) not in containers:
                raise Declined
            return tuple(item(entry) for entry in value)

        return each
    checks = [_check(arg, False) for arg in args]

    def fixed(value: Any) -> tuple[Any, ...]:
        if type(value) not in containers or len(value) != len(checks):
            raise Declined
        return tuple(check(entry) for check, entry in zip(checks, value))

    return fixed
