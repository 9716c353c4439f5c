"""What every part shares: declared like a pydantic model, validated by pydantic, light at run time.

A part is written as a frozen, strict pydantic model would be — annotated fields, `Field(gt=0)`,
`@model_validator` / `@field_validator` — but with this module's `Field` and decorators, which only
record the declaration. `calc.spec.validate` turns the declarations into real pydantic models when
something is to be validated (a YAML spec, a config.json, `--set`), and the validated data becomes
these plain, frozen objects. A preset, validated when the package was built (presets/compiled.json),
is rebuilt straight into them, so `gptcalc count llama-3-8b` never imports pydantic: its field
machinery alone costs more start-up time than the whole count.

A part's `params(d_model)` returns its components for one layer, in the order a token meets them,
leaving out the ones it does not have (a bias-free projection has no `*_bias` row). Component keys
are the same for every source (formula, torch model, checkpoint), so verification is one compare.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterator

__all__ = ["MISSING", "FieldInfo", "Part", "Field", "field_validator", "model_validator", "present"]

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()


class FieldInfo:
    """One declared field: its annotation, its default, and pydantic's `Field` keyword arguments."""

    __slots__ = ("annotation", "default", "default_factory", "options")

    def __init__(self, default: Any = MISSING, default_factory: Callable[[], Any] | None = None, **options: Any) -> None:
        self.annotation: Any = None
        self.default, self.default_factory, self.options = default, default_factory, options

    def value(self) -> Any:
        """The default, made afresh when it comes from a factory."""
        return self.default_factory() if self.default_factory is not None else self.default


def Field(default: Any = MISSING, *, default_factory: Callable[[], Any] | None = None, **options: Any) -> Any:  # noqa: N802
    """pydantic's `Field`, recorded for `calc.spec.validate` (gt, ge, strict, min_length, discriminator...)."""
    return FieldInfo(default, default_factory, **options)


class Validator:
    """A validator as declared: `mode` is pydantic's ("before"/"after"); `fields` for a field validator."""

    __slots__ = ("function", "mode", "fields")

    def __init__(self, function: Any, mode: str, fields: tuple[str, ...] = ()) -> None:
        self.function, self.mode, self.fields = function, mode, fields

    @property
    def plain(self) -> Any:
        """The function itself (a classmethod unwrapped): whoever runs it passes the part's class, or
        the part, explicitly (calc.spec.validate wires it into a pydantic model, calc.spec.quick calls it)."""
        return self.function.__func__ if isinstance(self.function, classmethod) else self.function


def model_validator(*, mode: str) -> Callable[[Any], Validator]:
    return lambda function: Validator(function, mode)


def field_validator(*fields: str, mode: str = "after") -> Callable[[Any], Validator]:
    return lambda function: Validator(function, mode, fields)


class Part:
    """Frozen (a spec never changes after validation), compared and hashed by value like pydantic's
    frozen models; `model_fields`, `model_dump` and `model_construct` as pydantic names them."""

    model_fields: ClassVar[dict[str, FieldInfo]] = {}
    validators: ClassVar[dict[str, Validator]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields, validators = dict(cls.model_fields), dict(cls.validators)
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if name in ("model_fields", "validators"):
                continue
            declared = cls.__dict__.get(name, MISSING)
            info = declared if isinstance(declared, FieldInfo) else FieldInfo(declared)
            info.annotation = annotation
            fields[name] = info
            if name in cls.__dict__:
                delattr(cls, name)  # the value lives on each instance
        for name, value in list(cls.__dict__.items()):
            if isinstance(value, Validator):
                validators[name] = value
                setattr(cls, name, value.function)
        cls.model_fields, cls.validators = fields, validators

    @classmethod
    def model_construct(cls, **values: Any) -> Any:
        """An instance holding `values` (already valid) and the defaults of the fields not given."""
        part = object.__new__(cls)
        for name, info in cls.model_fields.items():
            object.__setattr__(part, name, values[name] if name in values else info.value())
        return part

    def transient(self, graph: Any) -> int | None:
        """The bytes of this part's tensors alive together at its widest point of llama.cpp's worst-case graph
        (calc/parts/transient.py); None where the part does not state them, which leaves the model without a
        compute-buffer estimate."""
        return None

    def graph_nodes(self, graph: Any, layer: int, x: str) -> Any:
        """This part's nodes of layer `layer` of llama.cpp's worst-case graph over its normed input `x`
        (calc/parts/transient.py Subgraph), for a replay of ggml's allocator where a sum of live tensors is not
        enough (calc/analysis/memory/llamacpp_graph.py); None where the part does not state them."""
        return None

    def replaced(self, **changes: Any) -> Any:
        """This part with `changes` (already valid) in place of its fields: a variant, not an edit."""
        return type(self).model_construct(**{**{name: getattr(self, name) for name in self.model_fields}, **changes})

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"{type(self).__name__} is frozen: {name} cannot change")

    def __delattr__(self, name: str) -> None:
        raise TypeError(f"{type(self).__name__} is frozen: {name} cannot be deleted")

    def _values(self) -> Iterator[Any]:
        return (getattr(self, name) for name in self.model_fields)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and tuple(self._values()) == tuple(other._values())  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), *self._values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{name}={getattr(self, name)!r}' for name in self.model_fields)})"

    def model_dump(self, mode: str = "python", exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
        """The fields as plain data; `mode="json"`: tuples become lists, as JSON has them."""
        return {name: _dumped(getattr(self, name), mode) for name in self.model_fields if name not in exclude}


def _dumped(value: Any, mode: str) -> Any:
    if isinstance(value, Part):
        return value.model_dump(mode)
    if isinstance(value, dict):
        return {key: _dumped(item, mode) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        items = [_dumped(item, mode) for item in value]
        return items if mode == "json" else type(value)(items)
    return value


def present(**rows: int) -> dict[str, int]:
    """The rows that are not zero, in the order given."""
    return {name: count for name, count in rows.items() if count}
