"""The one exception type users see.

Library code raises `GptcalcError` with a message that already names the file and the field
("presets/x.yaml: d_model: ..."); the CLI prints it as `Error: <message>` and exits 2. Anything
else that escapes is a bug, and the CLI says so in its one line ("unexpected KeyError: ... a bug
in gptcalc"), never as a traceback a user of a broken file would have to read
(`GPTCALC_DEBUG=1` shows it).
"""

from __future__ import annotations

__all__ = ["GptcalcError", "UnsupportedModelType"]


class GptcalcError(Exception):
    """Bad input: a file, a field or a value the user can fix. Exit code 2."""


class UnsupportedModelType(GptcalcError):
    """A config.json of a model_type no adapter reads; `count` may still ask transformers."""

    def __init__(self, message: str, config: dict, origin: str) -> None:
        super().__init__(message)
        self.config = config
        self.origin = origin
