"""What every command shares: click settings, the MODEL argument with `--set`, `--json`, and the
option types of sizes and dtypes. Defining these imports nothing beyond click."""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

__all__ = ["CONTEXT", "DTYPES", "POSITIVE", "json_option", "load_model", "model_options", "pass_options", "set_option"]

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# The keys of calc.analysis.memory.DTYPE_BITS (tests/test_memory.py keeps the two in step), spelled out
# here so that defining the options imports nothing.
DTYPES = click.Choice(["fp32", "fp16", "bf16", "fp8", "int8", "int4"])
POSITIVE = click.IntRange(min=1)

set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                          help="Override a spec field, e.g. --set qkv_bias=false (repeatable; every MODEL).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs instead of tables.")


def pass_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One forward pass: `--seq T`, `--batch B` and `--decode` (shapes, flops)."""
    for option in reversed((
        click.option("--seq", "-T", type=POSITIVE, required=True,
                     help="Prompt length T (with --decode: tokens already in the KV cache)."),
        click.option("--batch", "-B", type=POSITIVE, default=1, show_default=True, help="Sequences per batch B."),
        click.option("--decode", is_flag=True, help="One new token attending to a KV cache of T past tokens."),
    )):
        command = option(command)
    return command


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


