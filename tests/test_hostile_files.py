"""Hostile files, class by class (issue 10), part 1: what is on disk.

1. reading outside what the user named (`calc.inputs.inside` on every directory walk and index,
   the Hugging Face cache for a cached repo), FIFOs, loops and dangling links;
3. blow-ups and hangs from tiny files (size caps, bounds before loops, torch zip checks) and
   torch views that share storage.

Part 2, values inside files and arguments, is tests/test_hostile_input.py. Every command runs
through `cli_checks.check_run`, which asserts the common contract (exit code, one `Error:` line,
no traceback, no control character, bounded time, no file opened outside what was named); the
hypothesis tests generate variants rather than replaying one example (`--fuzz-long`: 20x more).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint_files import write_safetensors
from cli_checks import CASES, check_run
from hostile_files import CONFIG, LAYOUT, TINY_PARAMS, cache_snapshot, write_checkpoint


def commands(directory: Path) -> list[list[str]]:
    return [["inspect", str(directory)], ["count", str(directory)], ["verify", "--checkpoint", str(directory)]]


# --- 1. reading outside --------------------------------------------------------------------------

OUTSIDE_NAME = "OUTSIDE-SENTINEL"


def _outside(root: Path) -> Path:
    """A directory beside the checkpoint holding files worth stealing: a checkpoint of its own, a passwd."""
    outside = write_checkpoint(root / "outside", config={**CONFIG, "_name_or_path": OUTSIDE_NAME})
    write_safetensors(outside / "stolen.safetensors", {f"{OUTSIDE_NAME}.weight": ("F32", (2,)), **LAYOUT})
    (outside / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    return outside


ROLE_FILES = {"config": "config.json", "weights": "model.safetensors", "index": "model.safetensors.index.json",
              "shard": "model-00001-of-00002.safetensors"}


@CASES
@given(role=st.sampled_from(sorted(ROLE_FILES)), target=st.sampled_from(["passwd", "stolen.safetensors", "config.json"]),
       how=st.sampled_from(["absolute", "relative", "chain"]))
def test_a_link_out_of_the_checkpoint_is_never_followed(tmp_path_factory, role: str, target: str, how: str) -> None:
    root = tmp_path_factory.mktemp("outside")
    outside = _outside(root)
    checkpoint = write_checkpoint(root / "ckpt", sharded=role in ("index", "shard"))
    link = checkpoint / ROLE_FILES[role]
    link.unlink()
    if how == "chain":  # inside -> inside -> outside
        (checkpoint / "hop").symlink_to(outside / target)
        link.symlink_to(checkpoint / "hop")
    else:
        link.symlink_to(outside / target if how == "absolute" else Path("..") / "outside" / target)
    for args in commands(checkpoint):
        result = check_run(args, area=root, allowed=checkpoint)
        assert OUTSIDE_NAME not in result.stdout + result.stderr and "root:x" not in result.stderr
        if role == "config" or args[0] != "count":  # count reads config.json only
            assert result.exit_code == 2 and "refused: it links to" in result.stderr


def test_a_link_inside_the_checkpoint_is_followed(tmp_path: Path) -> None:
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    (checkpoint / "store").mkdir()
    (checkpoint / "model.safetensors").rename(checkpoint / "store" / "weights.safetensors")
    (checkpoint / "model.safetensors").symlink_to(Path("store") / "weights.safetensors")
    result = check_run(["inspect", str(checkpoint), "--json"], area=tmp_path, allowed=checkpoint)
    assert result.exit_code == 0 and json.loads(result.stdout)["parameters"] == TINY_PARAMS


def test_the_hub_cache_blobs_are_read_and_a_link_out_of_the_cache_is_not(tmp_path: Path) -> None:
    snapshot = cache_snapshot("cache-org/tiny")
    assert json.loads(check_run(["inspect", "cache-org/tiny", "--json"]).stdout)["parameters"] == TINY_PARAMS
    outside = _outside(tmp_path)
    (snapshot / "model.safetensors").unlink()
    (snapshot / "model.safetensors").symlink_to(outside / "stolen.safetensors")
    result = check_run(["inspect", "cache-org/tiny"])
    assert result.exit_code == 2 and "outside the Hugging Face cache" in result.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "dangling", "loop"])
@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_special_files_in_a_checkpoint_directory_neither_hang_nor_crash(tmp_path: Path, kind: str, name: str) -> None:
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    (checkpoint / name).unlink()
    if kind == "fifo":
        os.mkfifo(checkpoint / name)
    elif kind == "directory":
        (checkpoint / name).mkdir()
    elif kind == "dangling":
        (checkpoint / name).symlink_to(checkpoint / "nowhere")
    else:
        (checkpoint / name).symlink_to(checkpoint / name)
    for args in commands(checkpoint):
        assert check_run(args, area=tmp_path, allowed=checkpoint).exit_code in (0, 2)


def test_a_named_fifo_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "spec.yaml")
    assert check_run(["count", str(tmp_path / "spec.yaml")]).exit_code == 2



# --- 3. blow-ups and hangs ---------------------------------------------------------------------

def test_a_huge_text_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    for name in ("config.json", "spec.yaml", "model.safetensors.index.json"):
        with open(tmp_path / name, "wb") as handle:
            handle.truncate(3 * 2**30)  # 3 GiB, sparse
    write_checkpoint(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "config.json").unlink()
    (tmp_path / "ckpt" / "config.json").symlink_to(tmp_path / "config.json")  # and a link out: refused first
    for args in (["count", str(tmp_path / "config.json")], ["count", str(tmp_path / "spec.yaml")],
                 ["inspect", str(tmp_path / "model.safetensors.index.json")]):
        result = check_run(args)
        assert result.exit_code == 2 and "far more than any such file holds" in result.stderr


@CASES
@given(layer=st.integers(len(LAYOUT) + 1, 10**15))
def test_a_layer_index_beyond_the_tensors_is_refused_fast(tmp_path_factory, layer: int) -> None:
    path = write_safetensors(tmp_path_factory.mktemp("layers") / "m.safetensors",
                             {**LAYOUT, f"h.{layer}.ln_1.weight": ("F32", (4,))})
    result = check_run(["inspect", str(path)])
    assert result.exit_code == 2 and f"says layer {layer:,}" in result.stderr


@CASES
@given(n_layer=st.integers(17, 10**12))
def test_a_config_with_more_layers_than_tensors_is_refused_fast(tmp_path_factory, n_layer: int) -> None:
    """Beside 16 tensors, 17 layers cannot be; past 65,536 no config.json is believed at all."""
    checkpoint = write_checkpoint(tmp_path_factory.mktemp("config"), config={**CONFIG, "n_layer": n_layer})
    message = "cannot be the same model" if n_layer <= 65_536 else "more than the 65,536 any config.json describes"
    for args in (["inspect", str(checkpoint)], ["verify", "--checkpoint", str(checkpoint)]):
        result = check_run(args)
        assert result.exit_code == 2 and message in result.stderr
    assert check_run(["count", str(checkpoint)]).exit_code == (0 if n_layer <= 65_536 else 2)


DEEP = [["memory", "--tp", "2"], ["memory", "--pp", "4"], ["memory", "--engine", "vllm", "--kv-memory", "10GB"],
        ["memory", "--quant", "q4_k_m"], ["memory", "--budget", "4xH100-80GB"], ["kvcache", "--tp", "2"],
        ["train", "-T", "1024", "-b", "4", "--gpus", "4", "--pp", "4"], ["train", "-T", "1024", "-b", "1"],
        ["flops", "-T", "1024"], ["shapes", "-T", "16"], ["count"], ["memory", "--pp", "100000"]]


@CASES
@given(n_layers=st.integers(10**6, 10**29), args=st.sampled_from(DEEP))
def test_a_spec_of_any_depth_answers_or_is_refused_in_seconds(n_layers: int, args: list[str]) -> None:
    """Layers are run-length: the arithmetic takes any depth; what lists layers one by one (a GGUF
    mix, pipeline stages) refuses past its bound instead of looping."""
    result = check_run([args[0], "llama-7b", "--set", f"n_layers={n_layers}", *args[1:]])
    assert result.exit_code == 0 or "--quant" in args or "100000" in args


@CASES
@given(field=st.sampled_from(["n_layers", "head_dim", "d_model", "vocab_size", "d_ff"]), size=st.integers(10**8, 10**29))
def test_verify_refuses_torch_models_it_cannot_build_in_seconds(field: str, size: int) -> None:
    overrides = ["--set", f"{field}={size}"] + (["--set", "n_heads=1"] if field == "d_model" else [])
    result = check_run(["verify", "llama-7b", *overrides])
    assert result.exit_code == 2
    assert "verify builds at most" in result.stderr or "torch model is built with" in result.stderr \
        or "overflow" in result.stderr or "llama-7b" in result.stderr


def test_a_torch_pickle_past_the_cap_is_refused_before_torch_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import calc.checkpoint.sources

    torch.save({f"h.{i}.ln_1.weight": torch.zeros(1) for i in range(200)}, tmp_path / "m.bin")
    monkeypatch.setattr(calc.checkpoint.sources, "MAX_PICKLE_BYTES", 1000)
    result = check_run(["inspect", str(tmp_path / "m.bin")])
    assert result.exit_code == 2 and "data.pkl: a " in result.stderr and "refused" in result.stderr


def test_a_compressed_torch_archive_is_refused(tmp_path: Path) -> None:
    """A zip bomb: 64 MiB of zeros in a 64 kB data.pkl record; torch.save never compresses."""
    import zipfile

    with zipfile.ZipFile(tmp_path / "bomb.bin", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb/data.pkl", bytes(64 * 2**20))
    assert (tmp_path / "bomb.bin").stat().st_size < 200_000
    result = check_run(["inspect", str(tmp_path / "bomb.bin")])
    assert result.exit_code == 2 and "compressed" in result.stderr


def test_a_legacy_torch_file_is_not_read_whole(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"wte.weight": torch.zeros(11, 4)}, tmp_path / "old.bin", _use_new_zipfile_serialization=False)
    result = check_run(["inspect", str(tmp_path / "old.bin")])
    assert result.exit_code == 2 and "legacy" in result.stderr



def test_views_of_shared_storage_are_refused_not_counted_twice(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"wte.weight": torch.zeros(1).expand(200_000, 100_000)}, tmp_path / "stride0.bin")
    flat = torch.zeros(10)
    torch.save({"wte.weight": flat[:6].view(2, 3), "wpe.weight": flat[4:].view(2, 3)}, tmp_path / "overlap.bin")
    for name, message in (("stride0.bin", "views of 1 stored ones"), ("overlap.bin", "overlap in storage")):
        result = check_run(["inspect", str(tmp_path / name)])
        assert result.exit_code == 2 and message in result.stderr
