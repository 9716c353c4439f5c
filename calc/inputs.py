"""Reading what strangers wrote: bounded text files, strict JSON, and paths that stay inside.

Every config.json, YAML spec and shard index gptcalc reads comes through here, so the limits are
set once:

- `read_text`: regular files only (a FIFO would block forever, a device never ends), at most
  `limit` bytes (a real config.json is a few kilobytes; a multi-gigabyte one is refused before it
  is read, not after), UTF-8.
- `load_json`: a key given twice is an error, not "the last one wins" (`d_model: 64` then
  `d_model: 128` must not silently be 128); an integer longer than `MAX_INT_DIGITS` is refused
  (no size has 30 digits, and Python itself stops at 4,300); `check_nesting` then bounds the
  depth and the number of values, the expanded number for YAML, whose aliases can share one list
  a billion times.
- `inside`: a path found in a directory or named by an index, resolved (symlinks followed) and
  refused unless it stays under the directory the user named, or under the Hugging Face cache,
  whose snapshot files are symlinks into its own `blobs/` folder.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable, Iterator

from calc.errors import GptcalcError

__all__ = ["INT_LIMIT", "MAX_DEPTH", "MAX_INDEX_BYTES", "MAX_INT_DIGITS", "MAX_TEXT_BYTES", "MAX_TORCH_DIM", "MAX_TORCH_LAYERS",
           "MAX_VALUES", "check_nesting", "inside", "load_json", "many_objects", "read_text", "strict_int"]

MAX_TEXT_BYTES = 16 * 2**20  # a config.json or a YAML spec: real ones are a few KiB
# A YAML spec is read before anything is parsed only up to this size: the largest preset is 3.9 KB and
# one that embeds a config.json (`config:`) stays far under, while PyYAML's pure parser takes about a
# second per 100 KB (a 4 MB spec of 40,000 layer kinds took 39 s to parse before any check saw it).
MAX_SPEC_BYTES = 256 * 2**10
MAX_KINDS = 256  # layer kinds (blocks) in one spec: real models have a handful, DeepSeek-V3 two
MAX_LAYER_RUNS = 100_000  # runs of the layers list: alternating kinds give one run per layer
MAX_INDEX_BYTES = 64 * 2**20  # a shard index lists every tensor: DeepSeek-V3's 91,000 names take ~9 MB
MAX_INT_DIGITS = 30
INT_LIMIT = 10**MAX_INT_DIGITS  # the first integer too long: a bound a plain parse checks values against
MAX_DEPTH = 64
MAX_VALUES = 5_000_000
# A torch model is one Python module per layer, even on the meta device (100,000 layers: 3 GB, 70 s).
# Released models have at most a few hundred layers; beyond this, only the arithmetic answers.
MAX_TORCH_LAYERS = 1024
# torch dimensions: wider than any real width, head, vocabulary or expert count (2^24 = 16,777,216).
MAX_TORCH_DIM = 2**24


def read_text(path: Path, limit: int = MAX_TEXT_BYTES) -> str:
    """A regular file's UTF-8 text, refused (one error line) past `limit` bytes."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise GptcalcError(f"{path}: not a regular file")
        with open(path, "rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise GptcalcError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise GptcalcError(f"{path}: larger than {limit:,} B, far more than any such file holds; refused")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GptcalcError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def load_json(text: str | bytes, origin: str, plain: Callable[[Any], int | None] | None = None) -> Any:
    """Parse JSON strictly: no repeated key, no absurd integer, bounded depth and size.

    `plain`: a caller's cheap test that a value it expects is shallow, small and free of long
    integers (a shard index: a flat name -> file map), returning how many keys its objects hold
    (None: not plain). A value that passes is returned from one plain parse, without the
    per-key, per-integer and per-value checks a 100,000-tensor index would pay for, when the text
    has exactly that many colons: each key is followed by one, so a key given twice (which a plain
    parse drops) would leave more colons than keys (`calc.checkpoint.header_columns` argues it in
    full). Anything else is parsed again the strict way, so its error is the same either way.
    """
    if plain is not None:
        from pydantic_core import from_json  # Rust, a fifth faster than json.loads on a 100,000-name index

        try:
            value = from_json(text, allow_inf_nan=False)
        except ValueError:  # bad JSON, a number too long, nested too deeply: the strict parse says which
            pass
        else:
            keys = plain(value)
            if keys is not None and (text.count(":") if isinstance(text, str) else text.count(b":")) == keys:
                return value
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_int=lambda s: strict_int(s, origin),
                           parse_constant=lambda name: _not_json(name, origin))
    except _Duplicate as exc:
        raise GptcalcError(f"{origin}: key {exc.args[0]!r} is given twice (which one is meant?)") from None
    except RecursionError:
        raise GptcalcError(f"{origin}: JSON nested too deeply") from None
    except GptcalcError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise GptcalcError(f"{origin}: not valid JSON: {exc}") from None
    check_nesting(value, origin)
    return value


def _not_json(name: str, origin: str) -> float:
    """Infinity: not JSON, but transformers writes it (Mamba2's time_step_limit [0.0, Infinity]), so a
    config.json holding it loads, and a key gptcalc reads refuses it by name (no size or rate is infinite).
    NaN: no config has a reason to hold it."""
    if name == "NaN":
        raise GptcalcError(f"{origin}: NaN is not a JSON value (nor any size)")
    return float(name)


def strict_int(digits: str, origin: str) -> int:
    """An integer literal of a JSON or YAML file, refused when no size could be that long."""
    if len(digits.lstrip("+-")) > MAX_INT_DIGITS:
        raise GptcalcError(f"{origin}: an integer of {len(digits):,} digits; no size is that large")
    return int(digits)


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # a key given twice: name the first one repeated
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return result


def check_nesting(value: Any, origin: str) -> None:
    """Refuse data nested deeper than `MAX_DEPTH` or holding more than `MAX_VALUES` values once
    shared parts (YAML aliases) are counted every time they are used."""
    _measure(value, origin, 0, {})


def _measure(value: Any, origin: str, depth: int, memo: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(values, height) of `value`, each shared container measured once."""
    if not isinstance(value, (dict, list)):
        return 1, 0
    if id(value) not in memo:
        if depth >= MAX_DEPTH:
            raise GptcalcError(f"{origin}: nested more than {MAX_DEPTH} levels deep; nested too deeply")
        sizes = [_measure(child, origin, depth + 1, memo) for child in (value.values() if isinstance(value, dict) else value)]
        memo[id(value)] = (1 + sum(n for n, _ in sizes), 1 + max((h for _, h in sizes), default=0))
    values, height = memo[id(value)]
    if values > MAX_VALUES or depth + height > MAX_DEPTH:
        raise GptcalcError(f"{origin}: more than {MAX_VALUES:,} values or {MAX_DEPTH} levels once its "
                           "aliases are expanded; refused")
    return values, height


@contextlib.contextmanager
def many_objects() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large header is parsed and accounted for.

    A 100,000-tensor checkpoint builds a few hundred thousand small objects (parsed JSON, one record
    per tensor) and none of them in a cycle; the collector would otherwise walk the growing heap
    again and again (half the time of reading such a checkpoint). Reference counting still frees
    everything; the collector resumes, as it was, when the block ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def inside(path: Path, root: Path, what: str = "the directory it is in") -> Path:
    """`path` with its symlinks resolved, if that stays under `root` (resolved too); else an error.

    Used for every file found in a checkpoint directory or named by an index: a shard that links
    to /etc/passwd is refused before a byte of it is read or echoed.
    """
    try:
        resolved, base = path.resolve(strict=True), root.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # a dangling or looping symlink
        raise GptcalcError(f"{path}: cannot resolve: {getattr(exc, 'strerror', None) or exc}") from None
    if not resolved.is_relative_to(base):
        raise GptcalcError(f"{path}: refused: it links to {resolved}, outside {what} ({base}); "
                           "gptcalc reads only files inside what it is given")
    return resolved
