"""Where a checkpoint's tensor list comes from: files, directories, indexes, torch pickles, the Hub.

Every source is reduced to the same `RawCheckpoint`: tensor names, dtypes, shapes and byte sizes,
plus the config.json it came with and how many bytes were read to learn all that. safetensors
files are read header-only (`calc.checkpoint.safetensors_header`); a torch state dict is opened with
`torch.load(weights_only=True, mmap=True)`, which builds tensors and nothing else and maps the
weights instead of reading them. Before torch sees a file, the zip archive is checked: its pickle
must be stored uncompressed (as torch.save writes it) and under `MAX_PICKLE_BYTES`, so a small
file cannot inflate to gigabytes; a legacy (pre-1.6, non-zip) torch file cannot be mapped, would
be read whole, and is refused. A Hub repo id goes to `calc.checkpoint.hub`. torch and huggingface_hub are imported only on the
paths that need them.
"""

from __future__ import annotations

import pickle
import struct
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

from calc.spec import hf
from calc.errors import GptcalcError
from calc.inputs import INT_LIMIT, MAX_INDEX_BYTES, MAX_VALUES, inside, load_json, read_text
from calc.checkpoint.safetensors_header import read_header
from calc.checkpoint.tensors import FileRead, RawCheckpoint, TensorColumns, TensorRecord

__all__ = ["FileRead", "RawCheckpoint", "ShardIndex", "TensorColumns", "TensorRecord", "as_state_dict", "from_file", "from_index", "load_torch_file",
           "needs_torch", "open_checkpoint", "read_index"]

# What a checkpoint directory may hold, in the order they are looked for.
WEIGHT_FILES = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json", "pytorch_model.bin")
TORCH_SUFFIXES = (".bin", ".pt", ".pth")
# A path ending in one of these is a file, never a Hub repo id (`Qwen/Qwen2.5-7B` has a dot and is a repo).
FILE_SUFFIXES = (".safetensors", ".json", ".gguf", *TORCH_SUFFIXES)
# A state dict's pickle is ~150 B per tensor (a 1,000-tensor shard: 150 kB); the weights are separate records.
MAX_PICKLE_BYTES = 64 * 2**20
# torch.save's legacy format opens with this number, pickled (torch/serialization.py's MAGIC_NUMBER).
_LEGACY_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def open_checkpoint(text: str, with_config: bool = True) -> RawCheckpoint:
    """A .safetensors file, a .bin/.pt state dict, a directory, an index.json, or a Hub repo id.

    with_config=False when the caller already has a spec: the config.json beside the weights is
    then neither read nor translated, so one of a model_type we do not support is no obstacle.
    """
    path = Path(text).expanduser()
    if path.is_dir():
        return _from_dir(path, text, with_config)
    if path.is_file():
        return from_file(path, text)
    if hf.looks_like_repo_id(text) and path.suffix.lower() not in FILE_SUFFIXES:
        from calc.checkpoint.hub import from_hub

        return from_hub(text, with_config)
    raise GptcalcError(f"{text}: no such file or directory (nor a Hub repo id like org/name)")


def from_file(path: Path, source: str, config: hf.HFConfig | None = None) -> RawCheckpoint:
    if path.name.endswith(".index.json"):
        return from_index(path, source, lambda name: path.parent / name, config, path.parent)
    if path.suffix in TORCH_SUFFIXES:
        tensors, aliases = _torch_tensors(path)
        files = (FileRead(str(path), path.stat().st_size, None),)
        return RawCheckpoint(source, "torch state dict", TensorColumns.of(tensors), files, config, aliases=aliases)
    if path.suffix == ".gguf":
        from calc.checkpoint.gguf_source import from_gguf

        return from_gguf(path, source)
    if path.suffix != ".safetensors":
        raise GptcalcError(f"{path}: not a checkpoint (expected .safetensors, .gguf, .bin, .pt, .pth or *.index.json)")
    tensors, read = _safetensors(path)
    return RawCheckpoint(source, "safetensors file", tensors, (read,), config)


def _from_dir(path: Path, source: str, with_config: bool) -> RawCheckpoint:
    """The first weight file of `WEIGHT_FILES` in the directory; none may link out of it."""
    config = _dir_config(path) if with_config else None
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            inside(path / name, path, "the checkpoint directory")
            return from_file(path / name, source, config)
    raise GptcalcError(f"{path}: no checkpoint in this directory (looked for {', '.join(WEIGHT_FILES)})")


def _dir_config(path: Path) -> hf.HFConfig | None:
    config = path / "config.json"
    if not config.is_file():
        return None
    inside(config, path, "the checkpoint directory")
    return hf.read_config(config)


def _safetensors(path: Path) -> tuple[TensorColumns, FileRead]:
    header, file = read_header(path), str(path)
    c = header.columns
    return TensorColumns.of_file(c.names, c.dtypes, c.shapes, c.nbytes, file), FileRead(file, header.file_size, header.bytes_read)


def from_index(
    index: Path, source: str, locate: Callable[[str], Path | None], config: hf.HFConfig | None, root: Path,
    listed: ShardIndex | None = None,
) -> RawCheckpoint:
    """A sharded checkpoint: every shard the index names must exist, resolve to a file under `root`
    (the index's directory; the Hub cache for a cached repo) and hold what the index says.
    `listed`: the index, when the caller has read it already."""
    listed = listed or read_index(index)
    tensors = TensorColumns()
    files = [FileRead(str(index), index.stat().st_size, index.stat().st_size)]
    aliases: dict[str, str] = {}
    agrees = True  # every tensor of every shard is listed under that shard
    for shard in listed.shards:
        shard_path = locate(shard)
        if shard_path is None or not shard_path.is_file():
            raise GptcalcError(f"{index}: weight_map names shard {shard!r}, which is missing")
        inside(shard_path, root, "the checkpoint directory")
        raw = from_file(shard_path, source)
        tensors.extend(raw.columns)
        where = list(map(listed.weight_map.get, raw.columns.names))
        agrees = agrees and where.count(shard) == len(where)
        files.extend(raw.files)
        aliases.update(raw.aliases)
    # A shard holds no name twice; each listed under its own shard, none is in two; as many as listed: all are.
    if not agrees or len(tensors) != len(listed.weight_map):
        _index_error(index, listed.weight_map, tensors)
    kind = f"sharded {'safetensors' if index.name.startswith('model.safetensors') else 'torch state dict'}"
    return RawCheckpoint(source, f"{kind} ({len(files) - 1} files)", tensors, tuple(files), config, listed.total_size, aliases)


class ShardIndex(NamedTuple):
    """A checked `*.index.json`: tensor name -> shard file, the shards (sorted), metadata's total_size."""

    weight_map: dict[str, str]
    shards: list[str]
    total_size: int | None


def read_index(index: Path) -> ShardIndex:
    data = load_json(read_text(index, MAX_INDEX_BYTES), str(index), _plain_index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    shards = _distinct(weight_map.values()) if isinstance(weight_map, dict) else None
    if shards is None or not set(map(type, shards)) <= {str}:  # a non-string among the values leaves one among these
        raise GptcalcError(f"{index}: weight_map: expected an object of tensor name -> shard file name")
    for shard in shards:
        if not shard or Path(shard).name != shard or shard in (".", ".."):
            raise GptcalcError(f"{index}: weight_map: {shard!r} is not a plain file name beside the index")
    total = (data.get("metadata") or {}).get("total_size") if isinstance(data.get("metadata"), dict) else None
    return ShardIndex(weight_map, sorted(shards), total if isinstance(total, int) and not isinstance(total, bool) else None)


def _distinct(values: Iterable[Any]) -> set[Any] | None:
    """The distinct values, None when one is a list or an object (unhashable)."""
    try:
        return set(values)
    except TypeError:
        return None


def _plain_index(data: Any) -> int | None:
    """An index as save_pretrained writes it, a flat name -> file map and flat metadata, needs none of
    `load_json`'s generic per-value checks (a 100,000-tensor index would pay for them): its key count."""
    if type(data) is not dict or not set(data) <= {"metadata", "weight_map"}:
        return None
    weight_map, metadata = data.get("weight_map", {}), data.get("metadata", {})
    shards = _distinct(weight_map.values()) if type(weight_map) is dict else None  # a few, whatever the tensor count
    plain = (shards is not None and set(map(type, shards)) <= {str} and type(metadata) is dict
             and set(map(type, metadata.values())) <= {str, float, bool, type(None)} | _SMALL_INT
             and all(-INT_LIMIT < v < INT_LIMIT for v in metadata.values() if type(v) is int)
             and 3 + len(weight_map) + len(metadata) <= MAX_VALUES)
    return len(data) + len(weight_map) + len(metadata) if plain else None


_SMALL_INT = {int}


def _index_error(index: Path, weight_map: dict[str, str], tensors: TensorColumns) -> None:
    """Each tensor exactly once, in the shard the index says, nothing stored that it does not list:
    the first tensor that breaks this, named (called when the shards and the index disagree)."""
    where: dict[str, str] = {}
    for name, file in zip(tensors.names, tensors.files):
        shard = Path(file).name
        if name in where:
            raise GptcalcError(f"{index}: tensor {name!r} is stored in both {where[name]} and {shard}")
        where[name] = shard
        if name not in weight_map:
            raise GptcalcError(f"{index}: shard {shard} holds {name!r}, which weight_map does not list")
    for name, shard in weight_map.items():
        if where.get(name) != shard:
            raise GptcalcError(f"{index}: weight_map puts {name!r} in {shard}, which does not hold it")


_TORCH_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                 "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
                 "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "complex64": "C64"}


def _torch_tensors(path: Path) -> tuple[tuple[TensorRecord, ...], dict[str, str]]:
    """Tensor names, dtypes and shapes of a state dict; memory-mapped, so the weights stay on disk.

    Two names for the very same view (a tied head) are one tensor and an alias. Any other sharing
    of stored bytes is refused rather than counted as bytes that are not there: a zero-stride
    view (1,000 x 1,000 elements from one stored float) or two views that overlap in part.
    """
    state = as_state_dict(load_torch_file(path), path)
    records, owners, aliases, views = [], {}, {}, []
    for name in sorted(state, key=lambda n: n.endswith("lm_head.weight")):  # a tied head is the alias
        tensor = state[name]
        dtype = _TORCH_DTYPES.get(str(tensor.dtype).removeprefix("torch."), str(tensor.dtype))
        shape = tuple(int(d) for d in tensor.shape)
        records.append(TensorRecord(name, dtype, shape, tensor.numel() * tensor.element_size(), str(path)))
        if tensor.numel():
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), shape, tuple(tensor.stride()))
            if key in owners:
                aliases[name] = owners[key]
            else:
                owners[key] = name
                views.append((key[0], *_view_bytes(tensor, name, path), name))
    _check_disjoint(views, path)
    order = {name: i for i, name in enumerate(state)}
    return tuple(sorted(records, key=lambda r: order[r.name])), aliases


def _view_bytes(tensor: Any, name: str, path: Path) -> tuple[int, int]:
    """[begin, end) of the storage bytes a tensor's view spans; every element must have its own."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    if span < tensor.numel():
        raise GptcalcError(f"{path}: tensor {name!r}: {tensor.numel():,} elements are views of {span:,} stored ones "
                           f"(strides {list(tensor.stride())}); a state dict stores every weight")
    begin = tensor.storage_offset() * tensor.element_size()
    return begin, begin + span * tensor.element_size()


def _check_disjoint(views: list[tuple[int, int, int, str]], path: Path) -> None:
    """No two tensors (other than aliases) may share stored bytes: (storage, begin, end, name) each."""
    views.sort()
    for (storage, _, end, name), (other, begin, _, second) in zip(views, views[1:]):
        if storage == other and begin < end:
            raise GptcalcError(f"{path}: tensors {name!r} and {second!r} overlap in storage; "
                               "their bytes would be counted twice")


# As the README says: a bare `torch` requirement may pull a multi-GB CUDA build, so the user picks it.
TORCH_HINT = ("install the torch build you want first (pip install torch==2.13.0 for CPU; CUDA builds at "
              "https://pytorch.org/get-started/locally/), then: pip install 'gptcalc[torch]'")


def needs_torch(where: str, exc: ImportError) -> GptcalcError:
    """The one message for a path that needs torch when it is not installed."""
    return GptcalcError(f"{where}: needs torch ({exc}); {TORCH_HINT}")


def load_torch_file(path: Path) -> Any:
    try:
        import torch
    except ImportError as exc:
        raise needs_torch(f"{path}: reading a torch state dict", exc) from None
    mmap = _check_torch_file(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        raise GptcalcError(f"{path}: {_unpickling_failure(exc)}") from None
    except Exception as exc:  # torch's readers fail on hostile bytes with AssertionError, IndexError, struct.error, ...
        raise GptcalcError(f"{path}: not a readable torch checkpoint: {type(exc).__name__}: {hf.first_line(exc)}") from None


def _check_torch_file(path: Path) -> bool:
    """What can be checked before torch reads a byte: True for a zip archive torch can map.

    torch reads the archive's pickle whole into memory, so its uncompressed size is capped, and
    torch.save never compresses, so a compressed record (a zip bomb) is refused. A legacy file
    cannot be memory-mapped, so torch.load would read every weight: refused.
    """
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as handle:
            if _LEGACY_MAGIC in handle.read(32):
                raise GptcalcError(f"{path}: a legacy (pre-1.6, non-zip) torch file: reading it means reading every "
                                   "weight, so gptcalc does not; re-save it with torch.save or convert it to safetensors")
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error, NotImplementedError) as exc:
        raise GptcalcError(f"{path}: not a readable torch checkpoint: {type(exc).__name__}: {hf.first_line(exc)}") from None
    for record in records:
        if record.compress_type != zipfile.ZIP_STORED:
            raise GptcalcError(f"{path}: {record.filename}: compressed, which torch.save never does; refused")
        if record.filename.endswith("data.pkl") and record.file_size > MAX_PICKLE_BYTES:
            raise GptcalcError(f"{path}: {record.filename}: a {record.file_size:,} B pickle, over the "
                               f"{MAX_PICKLE_BYTES:,} B any state dict needs; refused")
    return True


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
