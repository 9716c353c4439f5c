"""Finding a model: preset names, user YAML files, config.json files or directories, hub ids.

`load_spec(text, overrides)` is the single entry every command uses. Presets are one YAML file
each, found on demand (nothing is read at import time); a preset's `aliases` let `gpt2` find
`gpt2-small`. Overrides (`--set key=value`) are applied to the raw mapping *before* validation —
a spec's own fields for YAML, the config's own keys for a config.json — so fields that default
from others (head_dim, n_kv_heads, d_ff) follow the change.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calc.errors import GptcalcError
from calc.inputs import inside
from calc.spec.model import ModelSpec, is_flat, spec_from_dict
from calc.spec.presets import compiled_preset, preset_index, preset_names, resolve_preset

if TYPE_CHECKING:  # a preset's count never needs config.json machinery (start-up time)
    from calc.spec.hf import HFConfig

__all__ = ["apply_overrides", "config_with_overrides", "load_config", "load_spec", "load_spec_and_config", "parse_overrides", "preset_names", "spec_from_config"]

_METADATA = ("aliases", "copy", "published")  # provenance of a preset, not spec fields
_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".gguf")
def parse_overrides(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """['qkv_bias=false', 'd_model=1024'] -> {'qkv_bias': False, 'd_model': 1024} (YAML scalars,
    read as strictly as a YAML file: `--set d_model=!!int abc` is an error, not a traceback).

    Which keys exist depends on the model's source (a spec's fields, a config.json's own keys), so
    they are checked when applied (`apply_overrides`)."""
    if not pairs:
        return {}
    from calc.spec.yamlfile import load_yaml  # YAML is read only for a --set (or a YAML spec): start-up time

    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise GptcalcError(f"--set {pair!r}: expected key=value, e.g. --set qkv_bias=false")
        overrides[key.strip()] = load_yaml(raw, f"--set {key.strip()}") if raw.strip() else None
    return overrides


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any], known: Any) -> dict[str, Any]:
    """A copy of `data` with `--set` values; `a.b.c` reaches into nested mappings (blocks.moe.mlp.top_k).

    The first part of each key must be in `known` (a spec's fields, or the config.json's own keys),
    so a typo is an error with a suggestion rather than a silently ignored key.
    """
    result = copy.deepcopy(data)
    for key, value in overrides.items():
        head, *path = key.split(".")
        if head not in known:
            raise GptcalcError(f"--set {key}: unknown field{_suggest(head, known)}")
        target = result
        for part in [head, *path][:-1]:
            if not isinstance(target.get(part), dict):
                raise GptcalcError(f"--set {key}: {part} is not a mapping here")
            target = target[part]
        target[[head, *path][-1]] = value
    return result


def load_spec(text: str, overrides: dict[str, Any] | None = None) -> ModelSpec:
    """A preset name, a YAML spec, a config.json (or a directory with one), or a hub repo id."""
    if not overrides and (spec := compiled_preset(text)) is not None:
        return spec
    return _spec_of(_raw_spec(text), overrides)


def load_config(text: str, overrides: dict[str, Any] | None = None) -> HFConfig | None:
    """The config.json mapping MODEL comes from (a preset transcribing one, a file, a directory, a
    hub id), with the same `--set` changes as its spec; None for a spec written as gptcalc's own
    fields, which transformers cannot build."""
    return _config_of(_raw_spec(text), overrides)


def load_spec_and_config(text: str, overrides: dict[str, Any] | None = None) -> tuple[ModelSpec, HFConfig | None]:
    """load_spec and load_config from one read of MODEL's source (a hub id is fetched once, not twice)."""
    source = _raw_spec(text)
    spec = None if overrides else compiled_preset(text)
    return spec if spec is not None else _spec_of(source, overrides), _config_of(source, overrides)


def _spec_of(source: tuple[dict[str, Any], str] | HFConfig, overrides: dict[str, Any] | None) -> ModelSpec:
    """The spec of a source _raw_spec read, with `--set` changes."""
    if not isinstance(source, tuple):
        return spec_from_config(source, overrides)
    raw, origin = source
    if overrides:
        from calc.spec.flat import FLAT_FIELDS

        known = {*raw, *(FLAT_FIELDS if is_flat(raw) else ModelSpec.model_fields)}
        raw, origin = apply_overrides(raw, overrides, known), f"{origin} (with --set)"
    return spec_from_dict(raw, origin)


def _config_of(source: tuple[dict[str, Any], str] | HFConfig, overrides: dict[str, Any] | None) -> HFConfig | None:
    """The config.json of a source _raw_spec read, with `--set` changes; None for gptcalc's own fields."""
    if isinstance(source, tuple):
        return None
    return config_with_overrides(source, overrides) if overrides else source


def spec_from_config(config: HFConfig, overrides: dict[str, Any] | None = None) -> ModelSpec:
    """A config.json's spec; `--set` names the config's own keys (num_key_value_heads=2)."""
    if overrides:
        config = config_with_overrides(config, overrides)
    return spec_from_dict(config.spec_dict(), config.origin)


def config_with_overrides(config: HFConfig, overrides: dict[str, Any]) -> HFConfig:
    """`--set` names the config's own keys (num_key_value_heads=2)."""
    return config.with_data(apply_overrides(config.data, overrides, config.data), f"{config.origin} (with --set)")


def _raw_spec(text: str) -> tuple[dict[str, Any], str] | HFConfig:
    """A spec's own fields and where they came from, or a config.json."""
    from calc.spec import hf

    path = Path(text).expanduser()
    if preset := resolve_preset(text):
        return _yaml_source(preset, preset.name)
    if path.is_dir():
        return hf.read_config(_config_in_dir(path))
    if path.is_file():
        if path.suffix == ".json":
            return hf.read_config(path)
        if path.suffix == ".gguf":  # llama.cpp's file: its metadata is the config (calc.checkpoint.gguf_source)
            from calc.checkpoint.gguf_source import config_of

            return config_of(path)
        return _yaml_source(path, str(path))
    if hf.looks_like_repo_id(text) and path.suffix.lower() not in _FILE_SUFFIXES:
        return hf.config_from_hub(text)
    if path.suffix.lower() in _FILE_SUFFIXES or "/" in text:
        raise GptcalcError(f"{text}: no such file")
    hint = _suggest(text.lower(), _same_numbers(text, preset_index())) or (
        " (not a preset: give its config.json, a directory holding one, or its Hub id org/name; "
        "`gptcalc presets` lists the presets)")
    raise GptcalcError(f"unknown model {text!r}{hint}")


def _yaml_source(path: Path, origin: str) -> tuple[dict[str, Any], str] | HFConfig:
    """A spec (flat or layered), or under `config:` a config.json transcribed with its name and source
    (how the presets of released models are written)."""
    from calc.spec.yamlfile import read_yaml

    data = _mapping(read_yaml(path), path)
    if "config" not in data:
        return data, origin
    if not isinstance(data["config"], dict):
        raise GptcalcError(f"{path}: config: expected the config.json mapping")
    from calc.spec.hf import HFConfig

    return HFConfig(data["config"], origin, data.get("name", path.stem), data.get("source"), force_name=True)


def _config_in_dir(path: Path) -> Path:
    config = path / "config.json"
    if not config.is_file():
        raise GptcalcError(f"{path}: directory has no config.json")
    inside(config, path, "the directory")
    return config


def _mapping(data: Any, path: Path) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise GptcalcError(f"{path}: expected a mapping of spec fields, got {type(data).__name__}")
    return {key: value for key, value in data.items() if key not in _METADATA}


def _same_numbers(text: str, names: Any) -> list[str]:
    """Names whose digits are the query's: a typo may be in the letters, never in a size or version,
    so `mixtral-8x7b` is never offered `mistral-7b`, nor `llama-3.1-7b` `llama-3.1-8b`."""
    digits = "".join(ch for ch in text if ch.isdigit())
    return [name for name in names if "".join(ch for ch in name if ch.isdigit()) == digits]


def _suggest(word: str, choices: Any) -> str:
    import difflib  # only a name that is not found needs it

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""
