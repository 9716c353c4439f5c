"""pydantic models made from the parts' declarations, to validate specs; imported only to validate.

Each part (`calc.parts.base.Part`) declares its fields and validators as a frozen, strict pydantic
model would. `model_for(Part subclass)` builds that model once, with `pydantic.create_model`:
the same field names, types (parts replaced by their models), `Field` options and validators, so
pydantic checks exactly what it would have checked had the parts been pydantic models, and its
errors name the same fields. `validated` returns the part itself, rebuilt from the model's data.
An after-validator runs on the part, so it may use the part's properties and methods.
"""

from __future__ import annotations

from functools import cache
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, create_model, field_validator, model_validator
from pydantic import Field as PydanticField

from calc.parts.base import MISSING, FieldInfo, Part, Validator
from calc.spec.construct import construct

__all__ = ["model_for", "validated"]

CONFIG = ConfigDict(frozen=True, extra="forbid", strict=True)


def validated(cls: type[Part], data: Any) -> Any:
    """`data` validated as a `cls` (raises pydantic's ValidationError), as a `cls`."""
    return construct(cls, model_for(cls).model_validate(data).model_dump())


@cache
def model_for(cls: type[Part]) -> type[BaseModel]:
    """The pydantic model `cls` declares."""
    fields = {name: (_annotation(info.annotation), _field(info)) for name, info in cls.model_fields.items()}
    validators = {name: _validator(cls, validator) for name, validator in cls.validators.items()}
    return create_model(cls.__name__, __config__=CONFIG, __module__=cls.__module__,  # type: ignore[call-overload]
                        __validators__=validators, **fields)


def _annotation(annotation: Any) -> Any:
    """The annotation with every part replaced by its pydantic model."""
    if isinstance(annotation, type) and issubclass(annotation, Part):
        return model_for(annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, UnionType):
        return Union[tuple(_annotation(arg) for arg in args)]
    if origin is dict:
        return dict[args[0], _annotation(args[1])]  # type: ignore[index]
    if origin is tuple:
        return tuple[tuple(_annotation(arg) if arg is not Ellipsis else arg for arg in args)]  # type: ignore[misc]
    return annotation


def _field(info: FieldInfo) -> Any:
    options = dict(info.options)
    if info.default_factory is not None:
        factory = info.default_factory
        model = model_for(factory) if isinstance(factory, type) and issubclass(factory, Part) else None
        options["default_factory"] = model if model is not None else factory
    elif info.default is not MISSING:
        options["default"] = info.default
    return PydanticField(**options)


def _validator(cls: type[Part], validator: Validator) -> Any:
    """A part's validator, wired into its model: before-validators and field validators see the raw
    data as they would have; an after-validator gets the part rebuilt from the validated model."""
    function = validator.plain
    if validator.fields:
        return field_validator(*validator.fields, mode=validator.mode)(  # type: ignore[call-overload]
            classmethod(lambda _model, value: function(cls, value)))
    if validator.mode == "before":
        return model_validator(mode="before")(classmethod(lambda _model, data: function(cls, data)))

    def after(model: BaseModel) -> BaseModel:
        function(construct(cls, model.model_dump()))
        return model

    return model_validator(mode="after")(after)
