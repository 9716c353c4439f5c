"""Hugging Face `config.json` files: reading one (a file, or from the Hub) as an `HFConfig`, and
fetching files from the Hub.

An `HFConfig` is the mapping exactly as read; `spec_dict()` translates it through the adapter of
its model_type (`calc.arch`) after any `--set` overrides, which name the config's own keys. Keys a
config has but a parameter count does not need (dropout, token ids, ...) are ignored; a missing
required key is an error naming it. huggingface_hub is imported only when a hub id is fetched.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from calc.errors import GptcalcError
from calc.inputs import inside, load_json, read_text

__all__ = ["HUB_TIMEOUT", "HFConfig", "cache_root", "config_from_hub", "download", "first_line", "hub_errors",
           "in_cache", "looks_like_repo_id", "reachable", "read_config"]

HUB_TIMEOUT = 5  # seconds: an unreachable Hub is an error line within this, not after 24 s of retries
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")


def looks_like_repo_id(text: str) -> bool:
    return bool(_REPO_ID.match(text))


@dataclass(frozen=True)
class HFConfig:
    """A config.json mapping as read, where it came from, and the model's name if it has none."""

    data: dict[str, Any]
    origin: str
    name: str | None = None  # the directory or repo id, used when the config names no model
    source: str | None = None  # the URL a Hub config came from
    force_name: bool = False  # a Hub repo id always names the model

    def spec_dict(self) -> dict[str, Any]:
        """ModelSpec fields (not yet validated), through the adapter of the config's model_type."""
        from calc.arch import spec_dict

        spec = spec_dict(self.data, self.origin)
        if self.name and (self.force_name or spec.get("name") in (None, spec.get("model_type"))):
            spec["name"] = self.name
        if self.source:
            spec.setdefault("source", self.source)
        if isinstance(quantization := self.data.get("quantization_config"), dict):
            from calc.analysis.memory.schemes import stored_scheme  # the sizing formats: only a quantised config

            if "expert_dtype" in self.data:  # DeepSeek-V4 states it beside (DeepseekV4Config folds it in)
                quantization = {"expert_dtype": self.data["expert_dtype"], **quantization}
            if scheme := stored_scheme(quantization):
                spec.setdefault("quant", scheme)
        return spec

    def with_data(self, data: dict[str, Any], origin: str) -> HFConfig:
        return HFConfig(data, origin, self.name, self.source, self.force_name)

    def untied_variant(self) -> HFConfig | None:
        """This config with the LM head untied where its language model says so but the whole model ties it
        (calc.arch.config.untied_variant): what a checkpoint storing the head apart holds; None otherwise."""
        from calc.arch.config import untied_variant

        data = untied_variant(self.data)
        return None if data is None else self.with_data(data, f"{self.origin} (head untied, as its text_config says)")


def read_config(path: Path) -> HFConfig:
    """A config.json file; a bad one is one error line naming it."""
    config = load_json(read_text(path), str(path))
    if not isinstance(config, dict):
        raise GptcalcError(f"{path}: expected a JSON object, got {type(config).__name__}")
    # ./Llama-3.1-8B/config.json is "Llama-3.1-8B"; a config saved as mixtral.json is "mixtral"
    name = path.resolve().parent.name if path.name == "config.json" else path.stem
    return HFConfig(config, str(path), name or None)


def config_from_hub(repo_id: str) -> HFConfig:
    """Fetch only config.json through huggingface_hub (its cache and HF_HUB_OFFLINE apply)."""
    config = read_config(download(repo_id, "config.json"))
    url = f"https://huggingface.co/{repo_id}/blob/main/config.json"
    return HFConfig(config.data, f"{repo_id}/config.json", repo_id, url, force_name=True)


def download(repo_id: str, filename: str) -> Path:
    """One file of a Hub repo, from the cache or the network; every failure is one clear line."""
    import huggingface_hub

    with hub_errors(repo_id, filename):
        if not reachable(repo_id):
            cached = huggingface_hub.try_to_load_from_cache(repo_id, filename)
            if not isinstance(cached, str):
                raise GptcalcError(f"{repo_id}: the Hub cannot be reached (no network?) and {filename} is not in the "
                                   "local Hugging Face cache")
            return in_cache(Path(cached))
        path = Path(huggingface_hub.hf_hub_download(repo_id, filename, etag_timeout=HUB_TIMEOUT))
    return in_cache(path)


def reachable(repo_id: str) -> bool:
    """One request with a short timeout, no retries: can the Hub be reached at all?

    Unreachable, huggingface_hub retries for 24 s (printing "Retrying in 8s" lines) before it
    gives up on a file it has not cached; this answers in at most `HUB_TIMEOUT` seconds instead.
    An HTTP error (404, 401, ...) means the Hub answered: the real request reports it. With
    HF_HUB_OFFLINE set there is nothing to try, and huggingface_hub reads its cache.
    """
    import huggingface_hub
    from huggingface_hub import constants, errors

    if constants.HF_HUB_OFFLINE:
        return True
    try:
        huggingface_hub.get_hf_file_metadata(huggingface_hub.hf_hub_url(repo_id, "config.json"), timeout=HUB_TIMEOUT)
    except errors.HfHubHTTPError:
        return True
    except (OSError, *_httpx_errors()):
        return False
    return True


def cache_root() -> Path:
    """huggingface_hub's cache directory: its snapshot files are symlinks into its own blobs/."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def in_cache(path: Path) -> Path:
    """A file the cache returned, refused if it links out of the cache (a planted symlink)."""
    inside(path, cache_root(), "the Hugging Face cache")
    return path


@contextmanager
def hub_errors(repo_id: str, what: str) -> Iterator[None]:
    """huggingface_hub's failures, as one `GptcalcError` line each, for every Hub call we make.

    `what` names what was being fetched ("config.json", "safetensors headers"). Order matters:
    a gated repo is a kind of missing repo, which is a kind of HTTP error, which is an OSError.
    """
    from huggingface_hub import errors

    try:
        yield
    except errors.LocalEntryNotFoundError:
        raise GptcalcError(
            f"{repo_id}: {what} is not in the local Hugging Face cache and the Hub cannot be "
            "reached (HF_HUB_OFFLINE is set or there is no network)"
        ) from None
    except errors.GatedRepoError:
        raise GptcalcError(f"{repo_id}: gated repository; log in with `hf auth login` first") from None
    except errors.RepositoryNotFoundError:
        raise GptcalcError(f"{repo_id}: no such repository on the Hub (or it is private)") from None
    except errors.EntryNotFoundError:
        raise GptcalcError(f"{repo_id}: the repository has no {what}") from None
    except errors.HFValidationError as exc:
        raise GptcalcError(f"{repo_id}: not a valid Hub repo id: {first_line(exc)}") from None
    except (errors.HfHubHTTPError, OSError, *_httpx_errors()) as exc:
        raise GptcalcError(f"{repo_id}: cannot fetch {what}: {first_line(exc)}") from None
    except ValueError as exc:  # the cache's own state refused (a refs/main that is a path, not a commit)
        raise GptcalcError(f"{repo_id}: cannot read {what} from the Hugging Face cache: {first_line(exc)}") from None


def _httpx_errors() -> tuple[type[Exception], ...]:
    """huggingface_hub >= 1 talks HTTP through httpx (or its httpx2 fork), whose errors are not OSErrors."""
    found: list[type[Exception]] = []
    for module in ("httpx", "httpx2"):
        try:
            found.append(__import__(module).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def first_line(exc: Exception) -> str:
    """A library's (often multi-line) message cut to its first line, for a one-line error."""
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
