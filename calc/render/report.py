"""`report`: one self-contained HTML page with the tables and the pictures, for sharing a sizing decision.

The tables are the command line's own rich tables, recorded and exported as HTML with inline
styles (so the page shows exactly what `gptcalc compare`, `count` and `memory` print); the
pictures are inline SVG. No script, no stylesheet or font from elsewhere, no date: the page opens
offline and the same input gives the same page.
"""

from __future__ import annotations

import html
import io
from typing import Any, Iterable

from calc import __version__
from calc.analysis.compare import Comparison
from calc.render.base import count_notes, count_table
from calc.render.compare import compare_table
from calc.render.memory import gpu_table
from calc.render.output import rich_console
from calc.render.table import as_rich
from calc.render.text import shown

__all__ = ["report_html"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
pre { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 12px; line-height: 1.25;
      overflow-x: auto; background: #fafafa; padding: 0.8em; border: 1px solid #eee; }
figure { margin: 1em 0; } svg { max-width: 100%; height: auto; }
.note { color: #555; }
form label { margin-right: 1em; white-space: nowrap; }
#sizing-table { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; }
#sizing-table th, #sizing-table td { border: 1px solid #ddd; padding: 0.25em 0.6em; }
#sizing-table td.num { text-align: right; } td.yes { color: #070; } td.no { color: #b00; }
"""


def _text(text: str) -> str:
    """Text from a file or an argument as page text: control and bidi characters escaped as in the
    terminal (`calc.render.text.shown`: an ESC or NUL makes the page ill-formed), then HTML-escaped."""
    return html.escape(shown(text))


def _tables(renderables: Iterable[Any]) -> str:
    """rich renderables as HTML (<pre> with inline-styled spans), exactly as the terminal shows them."""
    console = rich_console(record=True, width=160, file=io.StringIO(), color_system="truecolor")
    for renderable in renderables:
        console.print(as_rich(renderable))
    return console.export_html(inline_styles=True, code_format="<pre>{code}</pre>")


def report_html(comparison: Comparison, pictures: dict[str, str] | None, command: str,
                coefficients: list[dict[str, Any]] | None = None) -> str:
    """The page: the controls that recompute each model's memory (from `coefficients`, one per model:
    calc/analysis/coefficients.py), the side-by-side table, the pictures (title -> inline SVG; None:
    matplotlib is missing), then each model's parameter table and which GPUs its weights + KV cache fit."""
    names = " vs ".join(column.name for column in comparison.columns)
    parts = [
        f"<h1>{_text(names)}</h1>",
        f"<p class='note'>Made by gptcalc {__version__}: <code>{_text(command)}</code>. Exact counts; bytes "
        "in binary units (GiB = 2<sup>30</sup> B) unless they say GB (10<sup>9</sup> B).</p>",
    ]
    if coefficients:
        from calc.analysis.memory import GPUS
        from calc.render.interactive import interactive_section

        parts.append(interactive_section(coefficients, list(GPUS), comparison.seq, comparison.kv_dtype))
    parts += ["<h2>Side by side</h2>", _tables([compare_table(comparison)])]
    if pictures is None:
        parts.append("<p class='note'>No pictures: they need matplotlib (pip install 'gptcalc[plot]').</p>")
    for title, svg in (pictures or {}).items():
        parts += [f"<h2>{_text(title)}</h2>", f"<figure>{svg}</figure>"]
    for column in comparison.columns:
        notes = ["  " + note for note in count_notes(column.spec, column.breakdown)]
        parts += [f"<h2>{_text(column.name)}</h2>",
                  _tables([count_table(column.spec, column.breakdown), *notes,
                           f"  weights ({comparison.dtype}) + KV cache ({comparison.kv_dtype}) at {comparison.seq:,} "
                           f"tokens: {column.memory.total_bytes:,} B", gpu_table(column.memory)])]
    return ("<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
            f"<title>gptcalc: {_text(names)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")
