"""The `gptcalc` command line: click commands only.

Each command parses its arguments, calls one library function, picks a renderer and maps
errors to exit codes: `GptcalcError` -> `Error: ...` and exit 2 (bad input); a failed
verification -> exit 1. torch, transformers and safetensors are imported only inside the
commands that need them, so `count`, `kvcache` and `shapes` answer instantly.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

from calc import __version__
from calc.errors import GptcalcError

__all__ = ["main"]

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class InputError(click.ClickException):
    """Printed by click as `Error: <message>`; exit code 2 like click's own usage errors."""

    exit_code = 2


class _Group(click.Group):
    """Resolves the `list` alias of `presets` and turns library errors into `InputError`."""

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return super().get_command(ctx, "presets" if name == "list" else name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GptcalcError as exc:
            raise InputError(str(exc)) from None


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="gptcalc")
def main() -> None:
    """Exact parameter counts, shapes and memory of decoder-only transformers.

    MODEL is a preset name (`gptcalc presets` lists them), a YAML spec file, a Hugging Face
    config.json (or a directory holding one), or a Hub repo id whose config.json is fetched.
    """


def model_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """MODEL plus `--set key=value` overrides; the command receives a loaded `spec`."""

    @click.argument("model")
    @click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                  help="Override a spec field, e.g. --set qkv_bias=false (repeatable).")
    @functools.wraps(command)
    def wrapper(model: str, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        return command(spec=load_model(model, overrides), **kwargs)

    return wrapper


def load_model(model: str, overrides: tuple[str, ...] = ()) -> Any:
    from calc.presets import load_spec, parse_overrides

    return load_spec(model, parse_overrides(overrides))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs instead of tables.")


@main.command(context_settings=CONTEXT)
@model_options
@json_option
def count(spec: Any, as_json: bool) -> None:
    """Parameters per component, per layer and in total, exact.

    \b
    Example:
      gptcalc count gpt2-small
      gptcalc count llama-70b --json
      gptcalc count gpt2-small --set qkv_bias=false --set tie_embeddings=false
    """
    from calc.count import count as count_params
    from calc import render

    breakdown = count_params(spec)
    if as_json:
        render.print_json({**breakdown.to_json(), "spec": spec.model_dump()})
        return
    out = render.console()
    out.print(render.count_table(spec, breakdown))
    for note in render.count_notes(spec, breakdown):
        out.print(f"  {note}")


@main.command(context_settings=CONTEXT)
@json_option
def presets(as_json: bool) -> None:
    """All presets side by side: shape of each model and its exact total (alias: list).

    \b
    Example:
      gptcalc presets
      gptcalc list --json
    """
    from calc.count import count as count_params
    from calc import render
    from calc.presets import load_spec, preset_names

    rows = [(spec, count_params(spec)) for spec in map(load_spec, preset_names())]
    rows.sort(key=lambda row: (row[0].family, row[1].total))
    if as_json:
        render.print_json([{**spec.model_dump(), "total": b.total} for spec, b in rows])
        return
    render.console().print(render.presets_table(rows))
