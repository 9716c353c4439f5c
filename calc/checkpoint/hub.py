"""A checkpoint named by a Hub repo id (`org/name`): its config.json and its weights' headers.

From the local Hugging Face cache when every file is there, read exactly like a local checkpoint;
else, unless HF_HUB_OFFLINE is set, through huggingface_hub's `get_safetensors_metadata`, which
fetches the safetensors headers with HTTP range requests and never a weight. Every header is
checked as strictly as a local file's. huggingface_hub is imported only here, and this module only
when a repo id is given.
"""

from __future__ import annotations

from pathlib import Path

from calc.spec import hf
from calc.checkpoint.sources import FileRead, RawCheckpoint, TensorColumns, TensorRecord, from_file, from_index, read_index
from calc.errors import GptcalcError
from calc.checkpoint.safetensors_header import validate_header

__all__ = ["from_hub"]


def from_hub(repo_id: str, with_config: bool = True) -> RawCheckpoint:
    """config.json, then the weights' headers: from the local cache if there, else over HTTP."""
    from huggingface_hub import constants

    config = hf.config_from_hub(repo_id) if with_config else None
    if cached := _from_cache(repo_id, config):
        return cached
    if constants.HF_HUB_OFFLINE:
        raise GptcalcError(
            f"{repo_id}: no model.safetensors or model.safetensors.index.json in the local Hugging Face "
            "cache, and HF_HUB_OFFLINE is set"
        )
    return _from_hub_metadata(repo_id, config)


def _from_cache(repo_id: str, config: hf.HFConfig | None) -> RawCheckpoint | None:
    """The cached checkpoint, read like a local one; None unless every file it needs is cached."""
    import huggingface_hub

    def locate(name: str) -> Path | None:
        found = huggingface_hub.try_to_load_from_cache(repo_id, name)
        return hf.in_cache(Path(found)) if isinstance(found, str) else None

    if index := locate("model.safetensors.index.json"):
        listed = read_index(index)
        if all(locate(shard) for shard in listed.shards):
            return from_index(index, repo_id, locate, config, hf.cache_root(), listed)
    elif single := locate("model.safetensors"):
        return from_file(single, repo_id, config)
    return None


def _from_hub_metadata(repo_id: str, config: hf.HFConfig | None) -> RawCheckpoint:
    """Headers only, through huggingface_hub's range requests; checked as strictly as a local file."""
    import huggingface_hub
    from huggingface_hub import errors

    with hf.hub_errors(repo_id, "safetensors headers"):
        if not hf.reachable(repo_id):
            raise GptcalcError(f"{repo_id}: the Hub cannot be reached (no network?) and the safetensors files are not "
                               "in the local Hugging Face cache")
        try:
            meta = huggingface_hub.get_safetensors_metadata(repo_id)
        except errors.NotASafetensorsRepoError:
            raise GptcalcError(f"{repo_id}: the repository has no model.safetensors or model.safetensors.index.json") from None
        except errors.SafetensorsParsingError as exc:
            raise GptcalcError(f"{repo_id}: a safetensors header cannot be parsed: {hf.first_line(exc)}") from None
    tensors: list[TensorRecord] = []
    for filename, file_meta in sorted(meta.files_metadata.items()):
        header = {name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
                  for name, t in file_meta.tensors.items()}
        entries, _ = validate_header(header, None, f"{repo_id}/{filename}")
        tensors.extend(TensorRecord(e.name, e.dtype, e.shape, e.nbytes, filename) for e in entries)
    files = tuple(FileRead(f"{repo_id}/{name}", None, None) for name in sorted(meta.files_metadata))
    total = (meta.metadata or {}).get("total_size")
    return RawCheckpoint(repo_id, f"Hub safetensors headers ({len(files)} files)", TensorColumns.of(tensors), files,
                         config, total if isinstance(total, int) else None)
