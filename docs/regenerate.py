"""Refresh the command output shown in docs/*.md and README.md from the real CLI.

A block of output is marked by a comment naming the command, followed by a fenced block (and the
tensor-name table of docs/checkpoints.md, from calc.checkpoint.layouts, between
`<!-- generated: tensor-name layouts -->` and `<!-- end generated -->`):

    <!-- output: gptcalc count gpt2-small -->
    ```text
    ...whatever the command prints...
    ```

`python docs/regenerate.py` rewrites every such block in place; `--check` only reports blocks
that differ (tests/test_docs.py runs that, so the docs can never show stale numbers). It also
rewrites presets/compiled.json, the presets' validated specs (calc/spec/presets.py), first, since
the output of the commands depends on it.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import sys
from pathlib import Path

from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from calc.cli import main as cli  # noqa: E402  (after the path is set, for running as a script)
from calc.spec.presets import COMPILED, _compiled  # noqa: E402

MARKED = re.compile(r"(<!-- output: gptcalc (?P<args>.+?) -->\n```text\n)(?P<body>.*?)(```)", re.S)
# A table generated from data rather than from a command: the tensor-name layouts per model_type.
LAYOUT_TABLE = re.compile(r"(<!-- generated: tensor-name layouts -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def command_output(args: str) -> str:
    # the docs show a 160-column pipe, whatever COLUMNS the shell running this exports
    with contextlib.chdir(REPO):  # a command may name a file of the repository (tests/configs/...)
        result = CliRunner(env={"COLUMNS": None}).invoke(cli, shlex.split(args), terminal_width=160)
    text = result.stdout + (result.stderr if result.exit_code else "")
    return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines()) + "\n"


def refreshed(text: str) -> str:
    from calc.checkpoint.layouts import markdown

    text = MARKED.sub(lambda m: m.group(1) + command_output(m.group("args")) + m.group(4), text)
    return LAYOUT_TABLE.sub(lambda m: m.group(1) + markdown() + m.group(3), text)


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def compiled_presets() -> str:
    from calc.spec.presets import compile_presets

    return json.dumps(compile_presets(), indent=1) + "\n"


def main(check: bool) -> int:
    stale = []
    compiled = compiled_presets()
    if COMPILED.read_text(encoding="utf-8") != compiled if COMPILED.is_file() else True:
        stale.append(COMPILED.relative_to(REPO))
        if not check:
            COMPILED.write_text(compiled, encoding="utf-8")
            _compiled.cache_clear()
    for path in documents():
        text = path.read_text(encoding="utf-8")
        new = refreshed(text)
        if new != text:
            stale.append(path.relative_to(REPO))
            if not check:
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if check else 'updated'}: {path}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main(check="--check" in sys.argv[1:]))
