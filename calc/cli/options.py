"""What every command shares: click settings, the MODEL argument with `--set`, `--json`, and the
option types of sizes and dtypes. Defining these imports nothing beyond click."""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

__all__ = ["CONTEXT", "DTYPES", "POSITIVE", "json_option", "load_model", "model_options", "set_option"]

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# The keys of calc.analysis.memory.DTYPE_BITS (tests/test_memory.py keeps the two in step), spelled out
# here so that defining the options imports nothing.
DTYPES = click.Choice(["fp32", "fp16", "bf16", "fp8", "int8", "int4"])
# A count of tokens, sequences or weights: positive, and bounded so that products of it stay printable
# (Python refuses to print an int of more than 4,300 digits).
POSITIVE = click.IntRange(min=1, max=10**15)

set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                          help="Override a spec field, e.g. --set qkv_bias=false (repeatable; every MODEL).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs instead of tables.")


def model_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """MODEL plus `--set key=value` overrides; the command receives a loaded `spec`."""

    @click.argument("model")
    @set_option
    @functools.wraps(command)
    def wrapper(model: str, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        return command(spec=load_model(model, overrides), **kwargs)

    return wrapper


def load_model(model: str, overrides: tuple[str, ...] = ()) -> Any:
    from calc.spec.load import load_spec, parse_overrides

    return load_spec(model, parse_overrides(overrides))


