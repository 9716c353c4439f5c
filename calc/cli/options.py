"""What every command shares: click settings, the MODEL argument with `--set`, `--json`, and the
option types of sizes and dtypes. Defining these imports nothing beyond click."""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

__all__ = ["CONTEXT", "KV_DTYPE", "POSITIVE", "TOKENS", "TokenCount", "WEIGHT_DTYPE", "json_option", "load_model", "model_options",
           "pass_options", "set_option"]

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# A count of tokens, sequences, GPUs or weights is at most this: bounded so that products of counts
# stay printable (Python refuses to print an int of more than 4,300 digits).
MAX_COUNT = 10**15
POSITIVE = click.IntRange(min=1, max=MAX_COUNT)


class TokenCount(int):
    """A token count that remembers how it was written ("128k"), so the output can say what it read."""

    text: str

    def __new__(cls, value: int, text: str) -> "TokenCount":
        count = super().__new__(cls, value)
        count.text = text
        return count


class Tokens(click.ParamType):
    """A token count as people write it: 4096, 32k, 128K (k = 1,024: "128k context" is 131,072), 1M."""

    name = "TOKENS"
    _UNITS = {"k": 2**10, "m": 2**20}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().replace(",", "").replace("_", "")
        scale = self._UNITS.get(text[-1:], 1)
        digits = text[:-1] if scale > 1 else text
        if not (digits.isascii() and digits.isdigit()) or not 1 <= int(digits) * scale <= MAX_COUNT:
            self.fail(f"{value!r} is not a positive token count up to {MAX_COUNT:,} "
                      "(examples: 4096, 32k, 128k = 131,072)", param, ctx)
        return TokenCount(int(digits) * scale, str(value)) if scale > 1 else int(digits)


class Dtype(click.ParamType):
    """A storage format by any common spelling (bfloat16, FP16, float8_e4m3fn, q8_0), resolved to its
    canonical name by calc.analysis.memory.formats, imported only when a value is given."""

    name = "DTYPE"

    def __init__(self, kv: bool) -> None:
        self.kv = kv

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from calc.analysis.memory.formats import KV_FORMATS, WEIGHT_FORMATS, find_format

        allowed = KV_FORMATS if self.kv else WEIGHT_FORMATS
        found = find_format(str(value), allowed)
        if found is None:
            self.fail(f"{value!r} is not one of {', '.join(allowed)}", param, ctx)
        return found.name


TOKENS = Tokens()
KV_DTYPE = Dtype(kv=True)
WEIGHT_DTYPE = Dtype(kv=False)

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


