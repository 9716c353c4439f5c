"""The `gptcalc` command line: click commands only, one module per group of commands.

Each command parses its arguments, calls one library function, picks a renderer and maps
errors to exit codes: `GptcalcError` -> `Error: ...` and exit 2 (bad input); a failed
verification -> exit 1. torch, transformers and safetensors are imported only inside the
commands that need them, so `count`, `kvcache` and `shapes` answer instantly.
"""

from __future__ import annotations

from typing import Any

import click

from calc import __version__
from calc.cli.options import CONTEXT
from calc.errors import GptcalcError

__all__ = ["main"]

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


def _register() -> None:
    """Add each command module's commands (a new command is a module here plus one line)."""
    from calc.cli import checkpoint, compare, count, flops, memory, plot, report, shapes, train

    for command in (count.count, count.presets, compare.compare, memory.kvcache, memory.memory, shapes.shapes,
                    flops.flops, train.train, plot.plot, report.report, checkpoint.inspect, checkpoint.verify):
        main.add_command(command)


_register()
