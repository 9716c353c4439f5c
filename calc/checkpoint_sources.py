"""Where a checkpoint's tensor list comes from: files, directories, indexes, torch pickles, the Hub.

Every source is reduced to the same `RawCheckpoint`: tensor names, dtypes, shapes and byte sizes,
plus the config.json it came with and how many bytes were read to learn all that. safetensors
files are read header-only (`calc.safetensors_header`); a torch state dict is opened with
`torch.load(weights_only=True, mmap=True)`, which builds tensors and nothing else and maps the
weights instead of reading them; a Hub repo is read from the local cache when it is there, else
through huggingface_hub's header-only `get_safetensors_metadata`. torch and huggingface_hub are
imported only on the paths that need them.
"""

from __future__ import annotations

import math

import json
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from calc import hf
from calc.errors import GptcalcError
from calc.safetensors_header import read_header, validate_header

__all__ = ["FileRead", "RawCheckpoint", "TensorRecord", "as_state_dict", "load_torch_file", "open_checkpoint"]

# What a checkpoint directory may hold, in the order they are looked for.
WEIGHT_FILES = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json", "pytorch_model.bin")
TORCH_SUFFIXES = (".bin", ".pt", ".pth")
# A path ending in one of these is a file, never a Hub repo id (`Qwen/Qwen2.5-7B` has a dot and is a repo).
FILE_SUFFIXES = (".safetensors", ".json", *TORCH_SUFFIXES)


@dataclass(frozen=True)
class TensorRecord:
    """One stored tensor: enough to count it and check its shape, nothing of its values."""

    name: str
    dtype: str  # safetensors spelling: F32, BF16, ...
    shape: tuple[int, ...]
    nbytes: int
    file: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class FileRead:
    path: str
    size: int | None
    bytes_read: int | None  # None: read by a library that does not say (torch mmap, HTTP)


@dataclass(frozen=True)
class RawCheckpoint:
    source: str
    kind: str
    tensors: tuple[TensorRecord, ...]
    files: tuple[FileRead, ...]
    config: dict[str, Any] | None = None  # spec fields from the config.json beside the weights
    config_origin: str | None = None
    index_total_size: int | None = None
    aliases: dict[str, str] = field(default_factory=dict)  # name -> the name whose memory it shares

    @property
    def bytes_read(self) -> int | None:
        counts = [f.bytes_read for f in self.files]
        return None if any(c is None for c in counts) else sum(counts)  # type: ignore[misc]


def open_checkpoint(text: str, with_config: bool = True) -> RawCheckpoint:
    """A .safetensors file, a .bin/.pt state dict, a directory, an index.json, or a Hub repo id.

    with_config=False when the caller already has a spec: the config.json beside the weights is
    then neither read nor translated, so one of a model_type we do not support is no obstacle.
    """
    path = Path(text).expanduser()
    if path.is_dir():
        return _from_dir(path, text, with_config)
    if path.is_file():
        return _from_file(path, text)
    if hf.looks_like_repo_id(text) and path.suffix.lower() not in FILE_SUFFIXES:
        return _from_hub(text, with_config)
    raise GptcalcError(f"{text}: no such file or directory (nor a Hub repo id like org/name)")


def _from_file(path: Path, source: str, config: tuple[dict[str, Any], str] | None = None) -> RawCheckpoint:
    spec, origin = config or (None, None)
    if path.name.endswith(".index.json"):
        return _from_index(path, source, lambda name: path.parent / name, config)
    if path.suffix in TORCH_SUFFIXES:
        tensors, aliases = _torch_tensors(path)
        files = (FileRead(str(path), path.stat().st_size, None),)
        return RawCheckpoint(source, "torch state dict", tensors, files, spec, origin, aliases=aliases)
    if path.suffix != ".safetensors":
        raise GptcalcError(f"{path}: not a checkpoint (expected .safetensors, .bin, .pt, .pth or *.index.json)")
    tensors, read = _safetensors(path)
    return RawCheckpoint(source, "safetensors file", tensors, (read,), spec, origin)


def _from_dir(path: Path, source: str, with_config: bool) -> RawCheckpoint:
    config = _dir_config(path) if with_config else None
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            return _from_file(path / name, source, config)
    raise GptcalcError(f"{path}: no checkpoint in this directory (looked for {', '.join(WEIGHT_FILES)})")


def _dir_config(path: Path) -> tuple[dict[str, Any], str] | None:
    config = path / "config.json"
    return (hf.spec_dict_from_config_file(config), str(config)) if config.is_file() else None


def _safetensors(path: Path) -> tuple[tuple[TensorRecord, ...], FileRead]:
    header = read_header(path)
    tensors = tuple(TensorRecord(t.name, t.dtype, t.shape, t.nbytes, str(path)) for t in header.tensors)
    return tensors, FileRead(str(path), header.file_size, header.bytes_read)


def _from_index(
    index: Path, source: str, locate: Callable[[str], Path | None], config: tuple[dict[str, Any], str] | None
) -> RawCheckpoint:
    """A sharded checkpoint: every shard the index names must exist and hold what it says."""
    weight_map, total_size = _read_index(index)
    tensors: list[TensorRecord] = []
    files = [FileRead(str(index), index.stat().st_size, index.stat().st_size)]
    aliases: dict[str, str] = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = locate(shard)
        if shard_path is None or not shard_path.is_file():
            raise GptcalcError(f"{index}: weight_map names shard {shard!r}, which is missing")
        raw = _from_file(shard_path, source)
        tensors.extend(raw.tensors)
        files.extend(raw.files)
        aliases.update(raw.aliases)
    _check_index(index, weight_map, tensors)
    spec, origin = config or (None, None)
    kind = f"sharded {'safetensors' if index.name.startswith('model.safetensors') else 'torch state dict'}"
    return RawCheckpoint(source, f"{kind} ({len(files) - 1} files)", tuple(tensors), tuple(files),
                         spec, origin, total_size, aliases)


def _read_index(index: Path) -> tuple[dict[str, str], int | None]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GptcalcError(f"{index}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise GptcalcError(f"{index}: not valid JSON: {exc}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise GptcalcError(f"{index}: weight_map: expected an object of tensor name -> shard file name")
    for shard in set(weight_map.values()):
        if not shard or Path(shard).name != shard or shard in (".", ".."):
            raise GptcalcError(f"{index}: weight_map: {shard!r} is not a plain file name beside the index")
    total = (data.get("metadata") or {}).get("total_size") if isinstance(data.get("metadata"), dict) else None
    return weight_map, total if isinstance(total, int) and not isinstance(total, bool) else None


def _check_index(index: Path, weight_map: dict[str, str], tensors: list[TensorRecord]) -> None:
    """Each tensor exactly once, in the shard the index says; nothing stored that it does not list."""
    where: dict[str, str] = {}
    for tensor in tensors:
        shard = Path(tensor.file).name
        if tensor.name in where:
            raise GptcalcError(f"{index}: tensor {tensor.name!r} is stored in both {where[tensor.name]} and {shard}")
        where[tensor.name] = shard
        if tensor.name not in weight_map:
            raise GptcalcError(f"{index}: shard {shard} holds {tensor.name!r}, which weight_map does not list")
    for name, shard in weight_map.items():
        if where.get(name) != shard:
            raise GptcalcError(f"{index}: weight_map puts {name!r} in {shard}, which does not hold it")


_TORCH_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                 "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
                 "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "complex64": "C64"}


def _torch_tensors(path: Path) -> tuple[tuple[TensorRecord, ...], dict[str, str]]:
    """Tensor names, dtypes and shapes of a state dict; memory-mapped, so the weights stay on disk."""
    state = as_state_dict(load_torch_file(path), path)
    records, owners, aliases = [], {}, {}
    for name in sorted(state, key=lambda n: n.endswith("lm_head.weight")):  # a tied head is the alias
        tensor = state[name]
        dtype = _TORCH_DTYPES.get(str(tensor.dtype).removeprefix("torch."), str(tensor.dtype))
        shape = tuple(int(d) for d in tensor.shape)
        records.append(TensorRecord(name, dtype, shape, tensor.numel() * tensor.element_size(), str(path)))
        if tensor.numel():
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), shape, tuple(tensor.stride()))
            if key in owners:
                aliases[name] = owners[key]
            owners.setdefault(key, name)
    order = {name: i for i, name in enumerate(state)}
    return tuple(sorted(records, key=lambda r: order[r.name])), aliases


def load_torch_file(path: Path) -> Any:
    try:
        import torch
    except ImportError:
        raise GptcalcError(f"{path}: reading a torch state dict needs torch (pip install 'gptcalc[torch]')") from None
    mmap = zipfile.is_zipfile(path)  # the legacy (pre-1.6) format cannot be memory-mapped
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        raise GptcalcError(f"{path}: {_unpickling_failure(exc)}") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise GptcalcError(f"{path}: not a readable torch checkpoint: {_first_line(exc)}") from None


def _unpickling_failure(exc: Exception) -> str:
    """torch's message is a page long; keep the line that says why it stopped.

    Only a pickle that names a global the weights-only unpickler forbids (`posix.system`, a class)
    wants to run code; anything else it cannot parse ("Unsupported operand 0": random bytes, a
    1-byte file, a pickle framed as torch never writes one) is simply not a torch checkpoint.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if forbidden := next((line for line in lines if "GLOBAL" in line), None):
        return (f"refused to unpickle: {forbidden} (torch.load(weights_only=True) builds tensors only; "
                "this file wants to run code or build other objects)")
    reason = next((line for line in lines if line.startswith("Unsupported")), lines[-1] if lines else "")
    return f"not a readable torch checkpoint: the unpickler stopped at: {reason}"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def as_state_dict(obj: Any, path: Path) -> dict[str, Any]:
    """A flat name -> tensor mapping, or one wrapped under "state_dict" / "model"."""
    import torch

    for candidate in (obj, *(obj.get(k) for k in ("state_dict", "model") if isinstance(obj, dict))):
        if isinstance(candidate, dict) and candidate and all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in candidate.items()
        ):
            return candidate
    if isinstance(obj, dict):
        bad = next((k for k, v in obj.items() if not isinstance(v, torch.Tensor)), None)
        raise GptcalcError(f"{path}: not a state dict: entry {bad!r} is not a tensor")
    raise GptcalcError(f"{path}: not a state dict: the file holds a {type(obj).__name__}, expected name -> tensor")


def _from_hub(repo_id: str, with_config: bool) -> RawCheckpoint:
    """config.json, then the weights' headers: from the local cache if there, else over HTTP."""
    from huggingface_hub import constants

    config = (hf.spec_dict_from_hub(repo_id), f"{repo_id}/config.json") if with_config else None
    if cached := _from_cache(repo_id, config):
        return cached
    if constants.HF_HUB_OFFLINE:
        raise GptcalcError(
            f"{repo_id}: no model.safetensors or model.safetensors.index.json in the local Hugging Face "
            "cache, and HF_HUB_OFFLINE is set"
        )
    return _from_hub_metadata(repo_id, config)


def _from_cache(repo_id: str, config: tuple[dict[str, Any], str] | None) -> RawCheckpoint | None:
    """The cached checkpoint, read like a local one; None unless every file it needs is cached."""
    import huggingface_hub

    def locate(name: str) -> Path | None:
        found = huggingface_hub.try_to_load_from_cache(repo_id, name)
        return Path(found) if isinstance(found, str) else None

    if index := locate("model.safetensors.index.json"):
        weight_map, _ = _read_index(index)
        if all(locate(shard) for shard in set(weight_map.values())):
            return _from_index(index, repo_id, locate, config)
    elif single := locate("model.safetensors"):
        return _from_file(single, repo_id, config)
    return None


def _from_hub_metadata(repo_id: str, config: tuple[dict[str, Any], str] | None) -> RawCheckpoint:
    """Headers only, through huggingface_hub's range requests; checked as strictly as a local file."""
    import huggingface_hub
    from huggingface_hub import errors

    try:
        meta = huggingface_hub.get_safetensors_metadata(repo_id)
    except errors.NotASafetensorsRepoError:
        raise GptcalcError(f"{repo_id}: the repository has no model.safetensors or model.safetensors.index.json") from None
    except errors.SafetensorsParsingError as exc:
        raise GptcalcError(f"{repo_id}: a safetensors header cannot be parsed: {_first_line(exc)}") from None
    except errors.GatedRepoError:
        raise GptcalcError(f"{repo_id}: gated repository; log in with `hf auth login` first") from None
    except errors.RepositoryNotFoundError:
        raise GptcalcError(f"{repo_id}: no such repository on the Hub (or it is private)") from None
    except (errors.HfHubHTTPError, OSError, *_httpx_errors()) as exc:
        raise GptcalcError(f"{repo_id}: cannot fetch safetensors headers: {_first_line(exc)}") from None
    tensors: list[TensorRecord] = []
    for filename, file_meta in sorted(meta.files_metadata.items()):
        header = {name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
                  for name, t in file_meta.tensors.items()}
        entries, _ = validate_header(header, None, f"{repo_id}/{filename}")
        tensors.extend(TensorRecord(e.name, e.dtype, e.shape, e.nbytes, filename) for e in entries)
    files = tuple(FileRead(f"{repo_id}/{name}", None, None) for name in sorted(meta.files_metadata))
    total = (meta.metadata or {}).get("total_size")
    spec, origin = config or (None, None)
    return RawCheckpoint(repo_id, f"Hub safetensors headers ({len(files)} files)", tuple(tensors), files,
                         spec, origin, total if isinstance(total, int) else None)


def _httpx_errors() -> tuple[type[Exception], ...]:
    """huggingface_hub >= 1 talks HTTP through httpx (or its httpx2 fork), whose errors are not OSErrors."""
    found: list[type[Exception]] = []
    for module in ("httpx", "httpx2"):
        try:
            found.append(__import__(module).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)
