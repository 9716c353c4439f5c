"""What every command shares: click settings, the MODEL argument with `--set`, `--json`, and the
option types of sizes and dtypes. Defining these imports nothing beyond click."""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

__all__ = ["CONTEXT", "DTYPES", "POSITIVE", "TOKENS", "complete_model", "dtype_option", "gpus_option", "json_option",
           "kv_dtype_option", "load_model", "model_options", "models_argument", "pass_options", "seq_max_option",
           "seq_option", "set_option"]

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# The keys of calc.analysis.memory.DTYPE_BITS (tests/test_memory.py keeps the two in step), spelled out
# here so that defining the options imports nothing.
DTYPES = click.Choice(["fp32", "fp16", "bf16", "fp8", "int8", "int4"])
POSITIVE = click.IntRange(min=1)


class Tokens(click.ParamType):
    """A token count: 4096, 4k or 128k (k = 1024, as "128k context" means 131,072 for Llama 3.1)."""

    name = "TOKENS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().replace(",", "").replace("_", "")
        scale = 1024 if text.endswith("k") else 1
        digits = text.removesuffix("k")
        if not digits.isdigit() or int(digits) < 1:
            self.fail(f"{value!r} is not a token count (examples: 4096, 4k, 128k)", param, ctx)
        return int(digits) * scale


TOKENS = Tokens()



def complete_model(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of MODEL: the preset names that start with what is typed, else files."""
    from calc.spec.load import preset_names

    names = [name for name in preset_names() if name.startswith(incomplete)]
    return names or [click.shell_completion.CompletionItem(incomplete, type="file")]


# The arguments and options of the commands that size several models at once (compare, plot, report).
models_argument = click.argument("models", nargs=-1, required=True, metavar="MODEL...", shell_complete=complete_model)
seq_option = click.option("--seq", type=TOKENS, help="Context of the KV cache, e.g. 4096 or 32k (k = 1024), batch 1  "
                                                      "[default: the shortest context among the models]")
dtype_option = click.option("--dtype", type=DTYPES, default="fp16", show_default=True,
                            help="Storage type of the weights.")
kv_dtype_option = click.option("--kv-dtype", type=DTYPES, help="Storage type of the KV cache  [default: --dtype]")
seq_max_option = click.option("--seq-max", type=TOKENS, help="Longest context drawn, e.g. 32k or 131072 (k = 1024)  "
                                                            "[default: the longest context among the models]")
gpus_option = click.option("--gpus", metavar="GPU,...", help="GPUs drawn as horizontal lines at their memory, "
                                                             "e.g. H100,4090.")

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
    """MODEL plus `--set key=value` overrides; the command receives a loaded `spec`. Several
    models are refused with a pointer to `compare`, which puts them side by side."""

    @click.argument("model", shell_complete=complete_model)
    @click.argument("more", nargs=-1, metavar="")
    @set_option
    @functools.wraps(command)
    def wrapper(model: str, more: tuple[str, ...], overrides: tuple[str, ...], **kwargs: Any) -> Any:
        if more:
            raise click.UsageError(f"one MODEL at a time; for several side by side: gptcalc compare "
                                   f"{' '.join((model, *more))}")
        return command(spec=load_model(model, overrides), **kwargs)

    return wrapper


def load_model(model: str, overrides: tuple[str, ...] = ()) -> Any:
    from calc.spec.load import load_spec, parse_overrides

    return load_spec(model, parse_overrides(overrides))


