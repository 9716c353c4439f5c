"""Pictures for `plot` and `report`, drawn with matplotlib (the optional extra `gptcalc[plot]`).

matplotlib is imported only here, inside the functions, so nothing else pays for it; without it
the user gets one `Error:` line saying how to install it. Figures are built on
`matplotlib.figure.Figure` (no pyplot, no global state, no display needed). SVG keeps its text as
text (`svg.fonttype: none`) so the model names and numbers can be found in the file and in an HTML
page, and carries no date, so the same input gives the same file.

Names are drawn as written: through `calc.render.text.one_line` (control and bidi characters
escaped, which would make the SVG ill-formed; cut at NAME_CHARS), never read as mathtext (`cost $5 or $6`), and a legend label
that starts with `_` is kept (matplotlib hides those it finds itself). Only gptcalc's style
applies: matplotlib's defaults under `_STYLE`, whatever a `./matplotlibrc` or `MPLBACKEND` says
(a picture is drawn by its format's canvas; no backend is used).
"""

from __future__ import annotations

import io
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from calc.analysis.memory import GPU
from calc.analysis.pictures import GROUPS, MemoryCurve, check_drawable
from calc.errors import GptcalcError
from calc.outputs import output_path, write_atomic
from calc.render.text import one_line
from calc.units import human_count

__all__ = ["FORMATS", "INSTALL", "available", "memory_figure", "params_figure", "picture_path", "save", "svg_text"]

FORMATS = (".png", ".svg")
INSTALL = "pip install 'gptcalc[plot]' (or pip install matplotlib)"
GIB = 2**30
NAME_CHARS = 100  # a longer name is cut, with "...", where a picture draws it
LOG_RATIO = 20  # memory axis turns logarithmic when its largest value is this many times the smallest weights
_SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}  # no date, no links in the file
_STYLE = {"text.parse_math": False, "svg.fonttype": "none", "svg.hashsalt": "gptcalc", "font.size": 10, "axes.spines.top": False,
          "axes.spines.right": False}


def available() -> bool:
    """Whether matplotlib can be imported (`report` leaves its pictures out when it cannot)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def _matplotlib() -> Iterator[Any]:
    """matplotlib's Figure under gptcalc's style, or one clear error when matplotlib is missing."""
    try:
        matplotlib = _import_matplotlib()
        from matplotlib.figure import Figure
        from matplotlib.ticker import LogLocator
    except ImportError:
        raise GptcalcError(f"pictures need matplotlib, which is not installed: {INSTALL}") from None
    with matplotlib.rc_context():
        matplotlib.rcdefaults()  # not a ./matplotlibrc's or the user's settings (text.usetex would run LaTeX)
        matplotlib.rcParams.update(_STYLE)
        yield Figure, LogLocator


def _import_matplotlib() -> Any:
    """matplotlib, imported with a backend it accepts: MPLBACKEND or a ./matplotlibrc naming one it
    does not know fail its import, and none is used here."""
    saved = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = "agg"
    try:
        import matplotlib
    finally:
        if saved is None:
            del os.environ["MPLBACKEND"]
        else:
            os.environ["MPLBACKEND"] = saved
    return matplotlib


def _token_label(n: float) -> str:
    n = int(n)
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def _token_ticks(seq_max: int) -> list[int]:
    """0 and about eight round steps (powers of two, so 128k reads as 128k) up to seq_max."""
    step = 1
    while seq_max // step > 8:
        step *= 2
    return list(range(0, seq_max + 1, step))


def memory_figure(curves: list[MemoryCurve], gpus: list[GPU], seq_max: int, dtype: str, kv_dtype: str) -> Any:
    """Weights + KV cache against context, one line per model (dotted past its context), GPUs as lines."""
    with _matplotlib() as (Figure, LogLocator):
        fig = Figure(figsize=(9, 5.5), layout="constrained")
        ax = fig.subplots()
        legend = []  # given to the legend whole: a label of its own starting with `_` would be hidden
        for curve in curves:
            inside = [(s, t / GIB) for s, t in zip(curve.seqs, curve.total_bytes) if s <= curve.context]
            beyond = [(s, t / GIB) for s, t in zip(curve.seqs, curve.total_bytes) if s >= curve.context]
            (line,) = ax.plot(*zip(*inside), linewidth=2)
            legend.append((line, f"{_name(curve.model)} (weights {curve.weights_bytes / GIB:,.1f} GiB)"))
            if len(beyond) > 1:
                ax.plot(*zip(*beyond), linewidth=2, linestyle=":", color=line.get_color())
                ax.plot(*inside[-1], marker="o", color=line.get_color())
        for gpu in gpus:
            ax.axhline(gpu.bytes / GIB, color="0.45", linestyle="--", linewidth=1)
            ax.annotate(f"{gpu.name}: {gpu.bytes / GIB:,.1f} GiB", (seq_max, gpu.bytes / GIB), xytext=(-4, 3),
                        textcoords="offset points", color="0.3", fontsize=9, ha="right")
        ticks = _token_ticks(seq_max)
        ax.set_xticks(ticks, [_token_label(t) for t in ticks])
        ax.set_xlim(0, seq_max)
        top = max([*(max(curve.total_bytes) for curve in curves), *(gpu.bytes for gpu in gpus)]) / GIB
        bottom = min(curve.weights_bytes for curve in curves) / GIB
        scale = "linear"
        if top > LOG_RATIO * bottom:  # a 671B model beside a 7B one: on a linear axis the 7B is a flat line at 0
            scale = "log"
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # 1, 2, 5, 10, 20, 50, ... GiB
            ax.yaxis.set_major_formatter(lambda value, _: f"{value:,.4g}")
            ax.set_ylim(bottom / 1.5, top * 1.5)
        else:
            ax.set_ylim(0, top * 1.08)
        ax.set_xlabel("context (tokens per sequence, batch 1)")
        ax.set_ylabel("memory (GiB = 2^30 bytes)" + (", log scale" if scale == "log" else ""))
        ax.set_title(f"weights ({dtype}) + KV cache ({kv_dtype}) against context")
        ax.grid(True, color="0.9")
        ax.legend(*zip(*legend), loc="best", fontsize=9, title="dotted: past the model's context", title_fontsize=8)
        return fig


def params_figure(rows: list[tuple[str, dict[str, int]]]) -> Any:
    """Where the parameters sit: one bar per model, split by group, as shares of its total."""
    check_drawable(len(rows))
    drawn = [g for g in rows[0][1] if any(groups[g] for _, groups in rows)]
    with _matplotlib() as (Figure, _):
        fig = Figure(figsize=(9, 1.2 + 0.55 * len(rows)), layout="constrained")
        ax = fig.subplots()
        places = range(len(rows))  # a bar per argument, by position: models of one name are two bars
        ax.set_yticks(places, [f"{_name(name)}\n{human_count(sum(groups.values()))}" for name, groups in rows])
        left = [0.0] * len(rows)
        for group in drawn:
            shares = [100 * groups[group] / max(sum(groups.values()), 1) for _, groups in rows]
            bars = ax.barh(places, shares, left=left, label=group, height=0.6, color=_group_color(group))
            ax.bar_label(bars, labels=[f"{s:.0f}%" if s >= 6 else "" for s in shares], label_type="center",
                         fontsize=8, color="white")
            left = [a + b for a, b in zip(left, shares)]
        ax.invert_yaxis()  # the first model on top
        ax.set_xlim(0, 100)
        ax.set_xlabel("share of the model's parameters (%)")
        ax.set_title("where the parameters sit")
        fig.legend(loc="outside lower center", ncol=min(len(drawn), 4), fontsize=9, frameon=False)
        return fig


def _name(name: str) -> str:
    """A model's name as a picture shows it: control and bidi characters escaped, at most
    NAME_CHARS long (a name of a million characters took a minute to lay out)."""
    return one_line(name, NAME_CHARS)


def _group_color(group: str) -> str:
    """The same colour for a group in every picture, whichever groups a picture shows."""
    order = [*GROUPS, "other"]
    return f"C{order.index(group)}"


def picture_path(text: str) -> Path:
    """The file `-o TEXT` names (`calc.outputs.output_path`), checked before any work is done."""
    path = output_path(text, stdout_ok=False)
    _format(path)
    return path


def _format(path: Path | None) -> str:
    """'png' or 'svg', by the file's suffix."""
    suffix = path.suffix.lower() if path is not None else ""
    if suffix not in FORMATS:
        raise GptcalcError(f"{path}: the picture's format comes from its suffix: .png or .svg")
    return suffix[1:]


def save(fig: Any, path: Path) -> None:
    """PNG or SVG by the file's suffix, written whole or not at all (`calc.outputs.write_atomic`)."""
    kind = _format(path)
    with _matplotlib():
        write_atomic(path, lambda handle: fig.savefig(handle, format=kind, dpi=150,
                                                      metadata=_SVG_METADATA if kind == "svg" else None))


def svg_text(fig: Any) -> str:
    """The figure as an inline <svg> element (no XML prologue), for an HTML page."""
    buffer = io.StringIO()
    with _matplotlib():
        fig.savefig(buffer, format="svg", metadata=_SVG_METADATA)
    text = buffer.getvalue()
    return text[text.index("<svg"):]
