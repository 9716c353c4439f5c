"""The presets: one YAML file per model in presets/, and their validated specs in compiled.json.

A preset file is either a spec (flat or layered) or a verbatim config.json under `config:`, with
its `name`, `aliases` and the `source` URL it transcribes. `compiled.json` holds every preset's
spec as validated, with its names: `python docs/regenerate.py` writes it and a test fails when it
is stale. Looking a preset up then needs no YAML parsing, no adapter and no pydantic at all
(`calc.spec.construct`), which was most of a calculator's start-up. Nothing is read at import time.
"""

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["COMPILED", "PRESET_DIR", "compile_presets", "compiled_preset", "preset_index", "preset_names",
           "resolve_preset"]

_PACKAGE = Path(__file__).resolve().parent.parent
# In a wheel the YAML files sit in calc/presets/; in a source checkout, in the top-level presets/.
PRESET_DIR = next(
    (d for d in (_PACKAGE / "presets", _PACKAGE.parent / "presets") if d.is_dir()), _PACKAGE / "presets"
)
COMPILED = PRESET_DIR / "compiled.json"


def preset_names() -> list[str]:
    """Canonical preset names (file stems), in file order."""
    return [path.stem for path in sorted(PRESET_DIR.glob("*.yaml"))]


@lru_cache(maxsize=None)
def preset_index() -> dict[str, Path]:
    """Every name and alias (lower case) -> its YAML file."""
    from calc.spec.yamlfile import read_yaml

    index: dict[str, Path] = {}
    for path in sorted(PRESET_DIR.glob("*.yaml")):
        data = read_yaml(path) or {}
        for name in [path.stem, data.get("name", path.stem), *data.get("aliases", [])]:
            index[str(name).lower()] = path
    return index


def resolve_preset(name: str) -> Path | None:
    """A preset's file by name (no index needed) or by alias: from compiled.json's names, or where
    there is none (a source tree mid-edit) by reading every preset once, which a config.json's path
    would otherwise pay for on every run (it may be an alias, such as meta-llama/Meta-Llama-3-8B)."""
    direct = PRESET_DIR / f"{name.lower()}.yaml"
    if "/" not in name and direct.is_file():
        return direct
    if names := _compiled()["names"]:
        return PRESET_DIR / f"{names[name.lower()]}.yaml" if name.lower() in names else None
    return preset_index().get(name.lower())


@lru_cache(maxsize=1)
def _compiled() -> dict[str, Any]:
    try:
        return json.loads(COMPILED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"names": {}, "specs": {}}  # no compiled file (a source tree mid-edit): the YAML path


def compiled_preset(name: str) -> Any:
    """The validated spec of a preset by name or alias, without validating again; None if no such."""
    compiled = _compiled()
    stem = compiled["names"].get(name.lower())
    if stem is None:
        return None
    from calc.spec.construct import construct
    from calc.spec.model import ModelSpec

    return construct(ModelSpec, compiled["specs"][stem])


def compile_presets() -> dict[str, Any]:
    """Every preset validated the slow way (YAML, adapter, pydantic), as compiled.json holds it."""
    from calc.spec.load import load_spec

    names = {name: path.stem for name, path in preset_index().items()}
    specs = {stem: load_spec(str(PRESET_DIR / f"{stem}.yaml")).model_dump(mode="json") for stem in preset_names()}
    return {"names": dict(sorted(names.items())), "specs": specs}
