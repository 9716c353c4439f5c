"""Checkpoint sources -> Breakdown + report, on real layouts built offline.

Golden numbers come from published facts or from torch's own parameter count of the model that
wrote the file, never from calc.checkpoint.report itself.
"""

from __future__ import annotations

import json
import os
import pickle
import random
from pathlib import Path

import pytest

from calc.checkpoint.report import read_checkpoint
from calc.analysis.count import count
from calc.errors import GptcalcError
from calc.spec.flat import flat_view
from calc.spec.load import load_spec
from checkpoint_files import (  # noqa: F401  (gpt2_file, tiny: fixtures)
    TINY,
    gpt2_file,
    gpt2_small_layout,
    llama2_70b_shards,
    llama2_layer,
    tiny,
    write_raw,
    write_safetensors,
    write_sharded,
)

# source: GPT-2 small, written out: wte 50257*768 + wpe 1024*768 + 12 blocks x (2 LayerNorms 2*2*768
# + c_attn 768*2304 + 2304 + c_proj 768*768 + 768 + c_fc 768*3072 + 3072 + mlp c_proj 3072*768 + 768)
# + ln_f 2*768; the published figure for openai-community/gpt2 is 124,439,808.
GPT2_PARAMS = 50257 * 768 + 1024 * 768 + 12 * (4 * 768 + 768 * 2304 + 2304 + 768 * 768 + 768 + 768 * 3072 + 3072 + 3072 * 768 + 768) + 2 * 768
GPT2_MASKS = 12 * 1024 * 1024  # source: 12 causal-mask buffers of shape [1, 1, 1024, 1024]

# source: Llama-2-70b-hf config (d 8192, 80 layers, 64 heads / 8 KV heads of 128, d_ff 28672, vocab 32000)
LLAMA2_70B_PARAMS = 2 * 32000 * 8192 + 8192 + 80 * (2 * 8192 + 2 * 8192 * 8192 + 2 * 1024 * 8192 + 3 * 8192 * 28672)
# source: https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/model.safetensors.index.json,
# "metadata": {"total_size": 137953316864} over 15 shards model-000NN-of-00015 (seen in a public copy of
# that index quoted in an accelerate big-model tutorial); the test below writes out why: 2 bytes x
# 68,976,648,192 F16 parameters + 80 layers x 64 F32 inv_freq values x 4 bytes.
LLAMA2_70B_TOTAL_SIZE = 137_953_316_864


def test_published_llama2_70b_total_size_is_params_plus_inv_freq() -> None:
    assert LLAMA2_70B_PARAMS == 68_976_648_192
    assert 2 * LLAMA2_70B_PARAMS + 80 * 64 * 4 == LLAMA2_70B_TOTAL_SIZE


def test_gpt2_small_real_layout(gpt2_file: Path) -> None:
    report = read_checkpoint(str(gpt2_file), load_spec("gpt2-small"))
    assert report.tensor_count == 160
    assert report.breakdown.total == GPT2_PARAMS == 124_439_808
    assert report.breakdown.tied and report.breakdown.get("lm_head") == 0
    assert report.mismatches == () and report.unknown == ()
    assert len(report.buffers) == 12 and {t.shape for t in report.buffers} == {(1, 1, 1024, 1024)}
    assert report.stored_elements == GPT2_PARAMS + GPT2_MASKS == 137_022_720  # the Hub's "137M"
    assert report.bytes_by_dtype == {"F32": 4 * 137_022_720}
    assert report.params_by_dtype == {"F32": GPT2_PARAMS}
    # c_attn [768, 2304] splits into equal Q, K, V of 768 x 768 per block
    assert report.breakdown.get("q") == report.breakdown.get("k") == report.breakdown.get("v") == 12 * 768 * 768
    assert report.bytes_read is not None and report.bytes_read < 20_000


def test_gpt2_small_agrees_with_the_analytic_count_component_by_component(gpt2_file: Path) -> None:
    spec = load_spec("gpt2-small")
    assert dict(read_checkpoint(str(gpt2_file), spec).breakdown.components) == dict(count(spec).components)


def test_gpt2_small_file_without_config_infers_the_gpt2_small_shape(gpt2_file: Path) -> None:
    report = read_checkpoint(str(gpt2_file))
    preset = load_spec("gpt2-small")
    for field in ("vocab_size", "n_positions", "d_model", "n_layers", "n_heads", "d_ff", "tie_embeddings", "qkv_bias"):
        assert getattr(flat_view(report.spec), field) == getattr(flat_view(preset), field), field
    assert report.spec_origin.startswith("tensor shapes") and report.spec_notes


def test_gpt2_small_against_gpt2_medium_names_the_first_mismatches(gpt2_file: Path) -> None:
    report = read_checkpoint(str(gpt2_file), load_spec("gpt2-medium"))
    assert not report.ok
    first = report.mismatches[0]
    assert (first.name, first.found, first.expected) == ("wte.weight", (50257, 768), (50257, 1024))
    missing = [m.name for m in report.mismatches if m.found is None]
    assert "h.12.ln_1.weight" in missing and "h.23.mlp.c_proj.bias" in missing  # medium has 24 blocks
    assert report.breakdown.n_layers == 12


def test_prefixed_names_and_masked_bias_buffers(tmp_path: Path) -> None:
    layout = {f"transformer.{name}": value for name, value in gpt2_small_layout().items()}
    layout.update({f"transformer.h.{i}.attn.masked_bias": ("F32", ()) for i in range(12)})
    report = read_checkpoint(str(write_safetensors(tmp_path / "p.safetensors", layout)), load_spec("gpt2-small"))
    assert report.breakdown.total == GPT2_PARAMS and report.mismatches == ()
    assert len(report.buffers) == 24


def test_unknown_names_are_reported_not_dropped(tmp_path: Path) -> None:
    layout = {**gpt2_small_layout(), "score.weight": ("F32", (2, 768)), "h.0.attn.rotary.freq": ("F32", (4,))}
    report = read_checkpoint(str(write_safetensors(tmp_path / "u.safetensors", layout)), load_spec("gpt2-small"))
    assert [t.name for t in report.unknown] == ["score.weight", "h.0.attn.rotary.freq"]
    assert report.breakdown.total == GPT2_PARAMS  # unknown tensors are not parameters of any component
    assert report.stored_elements == GPT2_PARAMS + GPT2_MASKS + 2 * 768 + 4
    assert not report.ok


def test_untied_spec_with_no_lm_head_is_a_missing_tensor(gpt2_file: Path) -> None:
    spec = load_spec("gpt2-small", {"tie_embeddings": False})
    report = read_checkpoint(str(gpt2_file), spec)
    assert not report.breakdown.tied
    assert [(m.name, m.found) for m in report.mismatches] == [("lm_head.weight", None)]


@pytest.fixture(scope="module")
def llama70b_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sharded(tmp_path_factory.mktemp("llama70b"), llama2_70b_shards(), LLAMA2_70B_TOTAL_SIZE)


def test_llama2_70b_sized_sharded_checkpoint(llama70b_dir: Path) -> None:
    report = read_checkpoint(str(llama70b_dir / "model.safetensors.index.json"), load_spec("llama-2-70b"))
    assert report.breakdown.total == LLAMA2_70B_PARAMS
    assert report.mismatches == () and report.unknown == ()
    assert len(report.buffers) == 80 and report.buffer_elements == 80 * 64
    assert report.index_total_size == report.tensor_bytes == LLAMA2_70B_TOTAL_SIZE
    assert report.bytes_by_dtype == {"F16": 2 * LLAMA2_70B_PARAMS, "F32": 80 * 64 * 4}
    assert len(report.files) == 16  # the index and 15 shards
    assert report.bytes_read is not None and report.bytes_read < 2_000_000
    assert dict(report.breakdown.components) == dict(count(load_spec("llama-2-70b")).components)


def test_llama2_70b_directory_without_config_infers_its_shape(llama70b_dir: Path) -> None:
    report = read_checkpoint(str(llama70b_dir))
    flat = flat_view(report.spec)
    assert (flat.n_heads, flat.n_kv_heads, flat.head_dim) == (64, 8, 128)
    assert report.breakdown.total == LLAMA2_70B_PARAMS and report.mismatches == ()


def test_stale_index_total_size_is_reported(tmp_path: Path) -> None:
    shards = [{"model.embed_tokens.weight": ("F16", (10, 8)), **llama2_layer(0, 8, 4, 12, 2)},
              {"model.norm.weight": ("F16", (8,)), "lm_head.weight": ("F16", (10, 8))}]
    report = read_checkpoint(str(write_sharded(tmp_path, shards, total_size=999) / "model.safetensors.index.json"))
    # source: F16 embed 80 + norms 16 + q/o 2*64 + k/v 2*32 + gate/up/down 3*96 + norm 8 + head 80 = 664
    # elements x 2 B, plus 2 F32 inv_freq x 4 B
    assert report.index_total_size == 999 and report.tensor_bytes == 664 * 2 + 8


def test_layout_missing_a_tensor_inference_needs(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "x.safetensors", {"model.embed_tokens.weight": ("F16", (10, 8))})
    with pytest.raises(GptcalcError, match=r"x.safetensors: cannot infer a spec from tensor shapes: no model.layers.N.self_attn.q_proj.weight"):
        read_checkpoint(str(path))


def test_a_tensor_of_the_wrong_rank_is_named_not_called_missing(tmp_path: Path) -> None:
    layout = {**gpt2_small_layout(), "wte.weight": ("F32", (4,))}
    with pytest.raises(GptcalcError, match=r"cannot infer a spec from tensor shapes: wte.weight: shape \[4\], expected 2 dimensions"):
        read_checkpoint(str(write_safetensors(tmp_path / "x.safetensors", layout)))


# --- tiny models written by transformers ---------------------------------------------------------

@pytest.mark.parametrize("family", sorted(TINY))
@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_save_pretrained_checkpoints_match_torch_and_the_analytic_count(tiny, family: str, layout: str) -> None:
    root, params = tiny[family].root, tiny[family].params
    report = read_checkpoint(str(root / layout))
    assert report.spec_origin.endswith("config.json")
    assert report.breakdown.total == params == count(report.spec).total
    assert report.ok, [m.describe() for m in report.mismatches] + [t.name for t in report.unknown]
    assert report.breakdown.tied == (family != "llama")
    if layout == "sharded":
        assert len(report.files) > 2 and report.index_total_size == report.tensor_bytes


@pytest.mark.parametrize("family", sorted(TINY))
def test_torch_state_dicts_count_a_tied_head_once(tiny, family: str) -> None:
    root, params = tiny[family].root, tiny[family].params
    spec = read_checkpoint(str(root / "single")).spec
    report = read_checkpoint(str(root / "state.bin"), spec)
    assert report.breakdown.total == params
    assert report.ok
    assert report.bytes_read is None  # torch.load maps the file; it does not say what it read
    if family != "llama":  # state_dict() lists the tied head under both names, one memory
        assert report.aliases == {"lm_head.weight": "transformer.wte.weight" if family == "gpt2" else "model.embed_tokens.weight"}
        assert report.breakdown.tied


def test_wrapped_torch_file_is_read_and_a_legacy_one_refused(tiny, tmp_path: Path) -> None:
    """A legacy (pre-zip) file cannot be memory-mapped: reading it would read every weight."""
    torch = pytest.importorskip("torch")
    params, model = tiny["llama"].params, tiny["llama"].model
    torch.save({"state_dict": model.state_dict(), "step": 3}, tmp_path / "wrapped.pt")
    assert read_checkpoint(str(tmp_path / "wrapped.pt")).breakdown.total == params
    torch.save(model.state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(GptcalcError, match="legacy.pt: a legacy .* torch file"):
        read_checkpoint(str(tmp_path / "legacy.pt"))


class RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned > pwned.txt",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickle_that_runs_code_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    torch.save({"x": RunsCode()}, tmp_path / "evil.pt")
    with open(tmp_path / "evil.bin", "wb") as handle:  # protocol 2: no framing, so torch reads as far as the GLOBAL
        pickle.dump({"x": RunsCode()}, handle, protocol=2)
    for name in ("evil.pt", "evil.bin"):
        with pytest.raises(GptcalcError, match=r"refused to unpickle: .*wants to run code") as caught:
            read_checkpoint(str(tmp_path / name))
        assert "\n" not in str(caught.value)
    assert not (tmp_path / "pwned.txt").exists()


@pytest.mark.parametrize("content", [
    b"",
    b"\x00",  # one byte: torch's unpickler says "Unsupported operand 0"
    random.Random(0).randbytes(256),
    b"hello world\n",
    b"PK\x03\x04garbage",
    pickle.dumps({"x": 1}, protocol=5),  # a pickle, but framed as torch never writes one
], ids=["empty", "1 byte", "random bytes", "text", "bad zip", "framed pickle"])
@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_broken_torch_files_are_not_torch_checkpoints(tmp_path: Path, content: bytes) -> None:
    """Garbage is garbage: only a pickle that asks for a forbidden global is said to want to run code."""
    pytest.importorskip("torch")
    (tmp_path / "x.bin").write_bytes(content)
    with pytest.raises(GptcalcError, match=r"x.bin: not a readable torch checkpoint") as caught:
        read_checkpoint(str(tmp_path / "x.bin"))
    assert "run code" not in str(caught.value) and "\n" not in str(caught.value)


def test_torch_file_that_is_not_a_state_dict(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"weights": torch.zeros(2), "epoch": 3}, tmp_path / "x.pt")
    with pytest.raises(GptcalcError, match="entry 'epoch' is not a tensor"):
        read_checkpoint(str(tmp_path / "x.pt"))
    torch.save([torch.zeros(2)], tmp_path / "y.pt")
    with pytest.raises(GptcalcError, match="holds a list"):
        read_checkpoint(str(tmp_path / "y.pt"))


# --- sharded and directory errors ----------------------------------------------------------------

def _two_shards(tmp_path: Path) -> Path:
    first = {"model.embed_tokens.weight": ("F16", (10, 8)), "model.layers.0.input_layernorm.weight": ("F16", (8,))}
    return write_sharded(tmp_path, [first, {"model.norm.weight": ("F16", (8,))}])


def test_missing_shard_is_named(tmp_path: Path) -> None:
    (_two_shards(tmp_path) / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(GptcalcError, match=r"names shard 'model-00002-of-00002.safetensors', which is missing"):
        read_checkpoint(str(tmp_path))


def _edit_index(directory: Path, change) -> None:
    index = directory / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    change(data)
    index.write_text(json.dumps(data))


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["weight_map"].update({"model.norm.weight": "model-00001-of-00002.safetensors"}), "which does not hold it"),
    (lambda d: d["weight_map"].pop("model.layers.0.input_layernorm.weight"), "which weight_map does not list"),
    (lambda d: d["weight_map"].update({"x": "../../etc/passwd"}), "not a plain file name"),
    (lambda d: d.pop("weight_map"), "weight_map: expected an object"),
    # values that are not file names: an unhashable list, a number, a bool beside an equal number (one set member)
    (lambda d: d["weight_map"].update({"model.norm.weight": ["model-00002-of-00002.safetensors"]}), "expected an object of"),
    (lambda d: d["weight_map"].update({"model.norm.weight": 2}), "expected an object of"),
    (lambda d: d["weight_map"].update({"model.norm.weight": 1, "lm_head.weight": True}), "expected an object of"),
])
def test_inconsistent_index(tmp_path: Path, change, message: str) -> None:
    _edit_index(_two_shards(tmp_path), change)
    with pytest.raises(GptcalcError, match=message):
        read_checkpoint(str(tmp_path))


def test_tensor_stored_in_two_shards(tmp_path: Path) -> None:
    norm = {"model.norm.weight": ("F16", (8,))}
    write_sharded(tmp_path, [{"model.embed_tokens.weight": ("F16", (10, 8)), **norm}, {**norm, "lm_head.weight": ("F16", (10, 8))}])
    with pytest.raises(GptcalcError, match="stored in both"):
        read_checkpoint(str(tmp_path))


def test_index_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text("{")
    with pytest.raises(GptcalcError, match="not valid JSON"):
        read_checkpoint(str(tmp_path))


def test_bad_shard_header_names_the_shard(tmp_path: Path) -> None:
    directory = _two_shards(tmp_path)
    write_raw(directory / "model-00002-of-00002.safetensors", "nope")
    with pytest.raises(GptcalcError, match=r"model-00002-of-00002.safetensors: header: not valid JSON"):
        read_checkpoint(str(directory))


@pytest.mark.parametrize(("setup", "message"), [
    (lambda p: p.mkdir(), "no checkpoint in this directory"),
    (lambda p: p.with_suffix(".txt").write_text("x"), "not a checkpoint"),
])
def test_paths_that_are_not_checkpoints(tmp_path: Path, setup, message: str) -> None:
    target = tmp_path / "thing"
    setup(target)
    source = target if target.exists() else target.with_suffix(".txt")
    with pytest.raises(GptcalcError, match=message):
        read_checkpoint(str(source))


def test_nonexistent_path(tmp_path: Path) -> None:
    with pytest.raises(GptcalcError, match="no such file or directory"):
        read_checkpoint(str(tmp_path / "nothing.safetensors"))


def test_names_of_no_known_family(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "x.safetensors", {"encoder.weight": ("F32", (2, 2))})
    with pytest.raises(GptcalcError, match=r"no tensor name matches a known layout .*'encoder.weight'"):
        read_checkpoint(str(path))


def test_llama3_style_checkpoint_has_no_buffers(tmp_path: Path) -> None:
    layer = {k: ("BF16", shape) for k, (_, shape) in llama2_layer(0, 64, 16, 96, 4).items() if "inv_freq" not in k}
    layout = {"model.embed_tokens.weight": ("BF16", (50, 64)), **layer, "model.norm.weight": ("BF16", (64,)),
              "lm_head.weight": ("BF16", (50, 64))}
    report = read_checkpoint(str(write_safetensors(tmp_path / "m.safetensors", layout)))
    assert report.buffers == () and report.ok and not report.breakdown.tied
    assert report.params_by_dtype == {"BF16": report.breakdown.total}


# --- Hub repo ids (HF_HUB_OFFLINE=1 from conftest; nothing reaches the network) --------------------

def _cache_repo(repo_id: str, files: dict[str, Path | str]) -> Path:
    """Lay files out as huggingface_hub's cache does: snapshots/<commit>/..., refs/main -> commit. A file
    given as a path becomes a blob, hard-linked (pytest's and the cache's temp folders share a file system),
    that its snapshot entry links to, as in the cache: the full-size sparse GPT-2 copied took seconds and
    half a gigabyte of disk for a header read."""
    from huggingface_hub import constants

    root = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    snapshot = root / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text("0" * 40)
    for name, content in files.items():
        target = snapshot / name
        if isinstance(content, Path):
            (root / "blobs").mkdir(exist_ok=True)
            os.link(content, root / "blobs" / name)
            target.symlink_to(root / "blobs" / name)
        else:
            target.write_text(content)
    return snapshot


GPT2_CONFIG = json.dumps({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768,
                          "n_layer": 12, "n_head": 12})


def test_hub_repo_read_from_the_cache_offline(gpt2_file: Path) -> None:
    _cache_repo("cached-org/gpt2", {"config.json": GPT2_CONFIG, "model.safetensors": gpt2_file})
    report = read_checkpoint("cached-org/gpt2")
    assert report.breakdown.total == GPT2_PARAMS and report.ok and len(report.buffers) == 12
    assert report.spec_origin == "cached-org/gpt2/config.json"
    assert report.bytes_read is not None and report.bytes_read < 20_000


def test_hub_sharded_repo_from_the_cache(tmp_path: Path) -> None:
    shards = write_sharded(tmp_path, [{"model.embed_tokens.weight": ("F16", (10, 8)), **llama2_layer(0, 8, 4, 12, 2)},
                                      {"model.norm.weight": ("F16", (8,)), "lm_head.weight": ("F16", (10, 8))}])
    files = {p.name: p for p in shards.iterdir()}
    config = json.dumps({"model_type": "llama", "vocab_size": 10, "max_position_embeddings": 16, "hidden_size": 8,
                         "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 12})
    _cache_repo("cached-org/tiny-llama", {"config.json": config, **files})
    report = read_checkpoint("cached-org/tiny-llama")
    assert report.ok and len(report.files) == 3 and len(report.buffers) == 1
    assert report.breakdown.total == count(report.spec).total


def test_hub_repo_offline_and_not_cached() -> None:
    with pytest.raises(GptcalcError, match=r"nobody/nothing: config.json is not in the local Hugging Face cache"):
        read_checkpoint("nobody/nothing")


def test_hub_repo_offline_with_only_the_config_cached() -> None:
    _cache_repo("config-only/gpt2", {"config.json": GPT2_CONFIG})
    with pytest.raises(GptcalcError, match=r"config-only/gpt2: no model.safetensors .* HF_HUB_OFFLINE is set"):
        read_checkpoint("config-only/gpt2")


def test_hub_repo_online_reads_headers_through_huggingface_hub(gpt2_file: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Online, the headers come from get_safetensors_metadata (stubbed here with the file's header)."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.utils import SafetensorsFileMetadata, SafetensorsRepoMetadata, TensorInfo

    import calc.spec.hf

    with gpt2_file.open("rb") as file:  # the header only: the full-size file is half a gigabyte
        header = json.loads(file.read(int.from_bytes(file.read(8), "little")))
    metadata = header.pop("__metadata__")
    tensors = {name: TensorInfo(t["dtype"], t["shape"], tuple(t["data_offsets"])) for name, t in header.items()}
    repo = SafetensorsRepoMetadata(None, False, {name: "model.safetensors" for name in tensors},
                                   {"model.safetensors": SafetensorsFileMetadata(metadata, tensors)})
    (tmp_path / "config.json").write_text(GPT2_CONFIG)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(calc.spec.hf, "download", lambda repo_id, name: tmp_path / name)
    monkeypatch.setattr(calc.spec.hf, "reachable", lambda repo_id: True)
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", lambda repo_id: repo)
    report = read_checkpoint("online-org/gpt2")
    assert report.breakdown.total == GPT2_PARAMS and report.ok
    assert report.bytes_read is None and report.kind.startswith("Hub safetensors headers")

    header["h.0.ln_1.weight"]["shape"] = [769]  # the Hub's header is checked as strictly as a file's
    bad = {name: TensorInfo(t["dtype"], t["shape"], tuple(t["data_offsets"])) for name, t in header.items()}
    repo.files_metadata["model.safetensors"] = SafetensorsFileMetadata(metadata, bad)
    with pytest.raises(GptcalcError, match=r"online-org/gpt2/model.safetensors: tensor 'h.0.ln_1.weight'"):
        read_checkpoint("online-org/gpt2")


@pytest.mark.parametrize("repo_id", ["meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B"])
def test_hub_repo_ids_with_a_dot_are_repo_ids(repo_id: str) -> None:
    """A dot in the name is not a file suffix: offline, the error is the Hub cache's, not 'no such file'."""
    with pytest.raises(GptcalcError, match=rf"{repo_id}: config.json is not in the local Hugging Face cache"):
        read_checkpoint(repo_id)


def test_a_missing_weights_file_with_an_org_like_path_is_no_such_file() -> None:
    with pytest.raises(GptcalcError, match=r"org/model.safetensors: no such file or directory"):
        read_checkpoint("org/model.safetensors")


def _hub_exception(name: str) -> Exception:
    """A huggingface_hub error as the library raises it (built without an HTTP response; only its type and text matter)."""
    from huggingface_hub import errors

    cls = getattr(errors, name)
    exc = cls.__new__(cls)
    Exception.__init__(exc, "what the Hub said\nand a second line")
    return exc


HUB_FAILURES = {
    "GatedRepoError": "some-org/some-model: gated repository; log in with `hf auth login` first",
    "RepositoryNotFoundError": "some-org/some-model: no such repository on the Hub (or it is private)",
    "HfHubHTTPError": "some-org/some-model: cannot fetch WHAT: what the Hub said",
    "LocalEntryNotFoundError": "some-org/some-model: WHAT is not in the local Hugging Face cache and the Hub cannot be reached",
    "EntryNotFoundError": "some-org/some-model: the repository has no WHAT",
}


@pytest.mark.parametrize("name", sorted(HUB_FAILURES))
def test_hub_failures_are_one_line_the_same_for_config_and_headers(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """hf.download (config.json) and the online header read share one mapping of Hub errors to messages."""
    import huggingface_hub
    from huggingface_hub import constants

    import calc.spec.hf

    def fail(*args, **kwargs):
        raise _hub_exception(name)

    with pytest.raises(GptcalcError) as caught, calc.spec.hf.hub_errors("some-org/some-model", "WHAT"):
        fail()
    assert str(caught.value).startswith(HUB_FAILURES[name]) and "\n" not in str(caught.value)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fail)
    with pytest.raises(GptcalcError) as caught:
        calc.spec.hf.download("some-org/some-model", "config.json")
    assert str(caught.value).startswith(HUB_FAILURES[name].replace("WHAT", "config.json"))

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(calc.spec.hf, "reachable", lambda repo_id: True)  # the Hub answers, with an error
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", fail)
    with pytest.raises(GptcalcError) as caught:
        read_checkpoint("some-org/some-model", load_spec("gpt2-small"))  # a spec: no config.json fetched
    assert str(caught.value).startswith(HUB_FAILURES[name].replace("WHAT", "safetensors headers"))


def test_torch_missing_is_one_message_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from calc.checkpoint.sources import needs_torch

    assert str(needs_torch("verify", ImportError("No module named 'torch'"))) == (
        "verify: needs torch (No module named 'torch'); install the torch build you want first (pip install "
        "torch==2.13.0 for CPU; CUDA builds at https://pytorch.org/get-started/locally/), then: pip install 'gptcalc[torch]'")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    (tmp_path / "x.bin").write_bytes(b"\x00")
    with pytest.raises(GptcalcError, match=r"x.bin: reading a torch state dict: needs torch \(.*\); install the torch build you want first"):
        read_checkpoint(str(tmp_path / "x.bin"))
