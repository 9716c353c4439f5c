"""Writing the files gptcalc makes (`plot`, `report`): whole or not at all, where the user meant.

- `output_path`: what `-o` may name. `-` is standard output where the format is text the user can
  pipe (the report's HTML), and an error where it is not (a picture: its format comes from the
  file's suffix); a path ending in `/` names a directory, not a file to write (pathlib would drop
  the slash and write `new.png`), and so does an existing directory.
- `write_atomic`: the bytes go to a temporary file beside the target, are flushed to disk, and
  the temporary file is renamed over the target. A failed or interrupted write (a full disk, a
  crash, two runs on one path) leaves the old file as it was, never a truncated page or a picture
  two runs wrote into at once; the temporary file is removed. A link is followed (the file it
  names is replaced, the link kept), and what is not a regular file (`/dev/stdout`, `/dev/null`, a
  FIFO) is written as it is: nothing is renamed over a device.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from calc.errors import GptcalcError

__all__ = ["STDOUT", "output_path", "write_atomic"]

STDOUT = "-"


def output_path(text: str, stdout_ok: bool) -> Path | None:
    """The file `-o TEXT` names, or None for standard output (`-`, where `stdout_ok`)."""
    if text == STDOUT:
        if stdout_ok:
            return None
        raise GptcalcError("-o -: a picture is written to a file (its suffix, .png or .svg, picks the format)")
    if text.endswith((os.sep, "/")) or Path(text).is_dir():
        raise GptcalcError(f"{text}: a directory; -o names the file to write")
    return Path(text)


def write_atomic(path: Path | None, write: Callable[[BinaryIO], None]) -> None:
    """Call `write` with a binary file that becomes `path` once it is complete (None: standard output)."""
    if path is None:
        write(sys.stdout.buffer)
        sys.stdout.flush()
    elif _special(path):
        try:
            with open(path, "wb") as handle:
                write(handle)
        except OSError as exc:
            raise _cannot_write(path, exc) from None
    else:
        _write_and_rename(path, write)


def _write_and_rename(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """A temporary file beside `path` (or the file a link there names), written, flushed to disk,
    renamed over it; removed on failure. Errors name `path` as the user wrote it."""
    target = Path(os.path.realpath(path))
    try:
        fd, temporary = tempfile.mkstemp(prefix=".gptcalc-", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp's 0600 would hide the page from everyone else
        os.replace(temporary, target)
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _cannot_write(path: Path, exc: OSError) -> GptcalcError:
    return GptcalcError(f"{path}: cannot write ({exc.strerror or exc})")


def _special(path: Path) -> bool:
    """Whether `path` exists as something other than a regular file (links followed)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # not there (yet): a new file
        return False


def _umask() -> int:
    """The process's umask (reading it means setting it: set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
