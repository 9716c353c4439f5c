"""The `gptcalc` command line: click commands only, one module per group of commands.

Each command parses its arguments, calls one library function, picks a renderer and maps
errors to exit codes: `GptcalcError` -> `Error: ...` and exit 2 (bad input); a failed
verification -> exit 1. `_Group` is the one boundary: whatever escapes a command (a library
error, click's own usage errors, even a bug) leaves as exactly one `Error: ...` line on stderr
with control characters escaped, never a traceback (`GPTCALC_DEBUG=1`, and no other value, shows
the traceback of an unexpected error), and a library's warnings are not printed between the result
and the user. A path the system refuses (a name too long, no access) is bad input, named.
torch, transformers and safetensors are imported only inside the commands that need them, so
`count`, `kvcache` and `shapes` answer instantly.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

import click

from calc import __version__
from calc.cli.options import CONTEXT
from calc.errors import GptcalcError
from calc.render.text import one_line

__all__ = ["input_error", "main"]

class InputError(click.ClickException):
    """Printed by click as `Error: <message>`; exit code 2 like click's own usage errors."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        """The error line; a stderr that cannot take it (full, closed) leaves the exit code to say it."""
        try:
            super().show(file)
        except (OSError, ValueError, AttributeError):
            pass


SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a tool whose reader went away

# What click raises to stop on purpose (--help, --version, Ctrl-C, no arguments: the help page).
_PASS_THROUGH = (click.exceptions.Exit, click.Abort, click.exceptions.NoArgsIsHelpError)


# Each command's module and function (a new command is a module here plus one line): a command's
# module is imported when it runs, so `gptcalc count` never loads what `verify` or `plot` need.
COMMANDS = {
    "count": "count", "presets": "count", "compare": "compare", "kvcache": "memory", "memory": "memory", "fit": "fit",
    "shapes": "shapes", "flops": "flops", "train": "train", "plot": "plot", "report": "report",
    "inspect": "checkpoint", "verify": "checkpoint",
}


class _Group(click.Group):
    """Loads each command on demand and resolves the `list` alias of `presets`; every error, ours or
    not, becomes one `InputError` line."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        name = "presets" if name == "list" else name
        if name not in COMMANDS:
            return None
        command: click.Command = getattr(importlib.import_module(f"calc.cli.{COMMANDS[name]}"), name)
        return command

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        """The group's own arguments (`gptcalc --bogus`) are parsed here, before `invoke`."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except _PASS_THROUGH:
            raise
        except click.ClickException as exc:
            raise input_error(exc, parent) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with warnings.catch_warnings(), _quiet_loggers(), _standard_output():
                warnings.simplefilter("ignore")  # torch's and transformers' advice is not for our users
                return super().invoke(ctx)
        except _PASS_THROUGH:
            raise
        except BrokenPipeError:
            raise _reader_gone() from None
        except Exception as exc:
            if os.environ.get("GPTCALC_DEBUG") == "1" and not isinstance(exc, (GptcalcError, click.ClickException)):
                raise
            raise input_error(exc, ctx) from None


@contextmanager
def _standard_output() -> Iterator[None]:
    """What a command prints reaches its reader, or the command fails with one error line: a closed
    stdout (`>&-`: Python's sys.stdout is None, and print() then drops everything), a full or broken
    one (a write or the final flush fails: an OSError naming no file) is exit 2, never a silent 0.
    A character the stream's encoding lacks (an ASCII-only terminal) is escaped, as `\\u540d`,
    like a control character, rather than failing the write."""
    if sys.stdout is None:
        raise GptcalcError("standard output is closed: the result would be lost")
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise GptcalcError(f"standard output: cannot write ({exc.strerror or exc})") from None


def _reader_gone() -> SystemExit:
    """`gptcalc presets | head`: the reader stopped reading. No error line (nothing went wrong), and
    no second one when Python flushes stdout at exit; the exit code is a Unix tool's killed by
    SIGPIPE, 141, which `set -o pipefail` reports as it does for `yes | head`."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a file descriptor (a test's captured stdout)
        pass
    return SystemExit(SIGPIPE_EXIT)


@contextmanager
def _quiet_loggers() -> Iterator[None]:
    """Libraries log to stderr too (huggingface_hub's "Retrying in 8s", transformers' notices): not
    while a command runs, whose stderr is its one `Error:` line or nothing. `logging` itself is
    imported only by the libraries that log (a count never loads it): it is quietened when they do."""
    hook = _QuietLogging()
    if "logging" in sys.modules:
        hook.quieten(sys.modules["logging"])
    else:
        sys.meta_path.insert(0, hook)
    try:
        yield
    finally:
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)
        if "logging" in sys.modules:
            sys.modules["logging"].disable(sys.modules["logging"].NOTSET)


class _QuietLogging:
    """An import hook that loads `logging` as usual and disables it below CRITICAL right away."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "logging":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module: Any) -> None:
                run(module)
                self.quieten(module)

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    @staticmethod
    def quieten(logging: Any) -> None:
        logging.disable(logging.ERROR)


def input_error(exc: Exception, ctx: click.Context | None = None) -> InputError:
    """The one line (control characters escaped) that `exc` is shown as; exit 2."""
    if isinstance(exc, GptcalcError):
        message = str(exc)
    elif isinstance(exc, click.UsageError):  # click's usage, hint and error lines, as one
        path = (exc.ctx or ctx).command_path if (exc.ctx or ctx) else "gptcalc"
        message = f"{exc.format_message()} (see {path} --help)"
    elif isinstance(exc, click.ClickException):
        message = exc.format_message()
    elif isinstance(exc, MemoryError):
        message = "out of memory (an input far larger than any real model or file?)"
    elif isinstance(exc, RecursionError):
        message = "input nested too deeply to read"
    elif isinstance(exc, OSError) and exc.filename is not None:  # a path the system refuses: too long, no access
        message = f"{exc.filename}: {exc.strerror or exc}"
    else:
        message = (f"unexpected {type(exc).__name__}: {str(exc).strip() or 'no message'} (a bug in gptcalc; "
                   "please report it with the command; GPTCALC_DEBUG=1 shows the traceback)")
    return InputError(one_line(message))


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="gptcalc")
def main() -> None:
    """Exact parameter counts, shapes and memory of decoder-only transformers.

    MODEL is a preset name (`gptcalc presets` lists them), a YAML spec file, a Hugging Face
    config.json (or a directory holding one), or a Hub repo id whose config.json is fetched.
    """

