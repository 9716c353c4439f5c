"""Hostile and broken input, class by class (issue 10): each class is closed in one shared
mechanism, and each test generates variants rather than replaying one example.

1. reading outside what the user named (calc.inputs.inside on every directory walk and index);
2. terminal control sequences (calc.render.text.shown, in the console and the error line);
3. blow-ups and hangs from tiny files (size caps, bounds before loops, torch zip checks);
4. silently wrong answers (repeated keys, strict layer indices, views of shared storage);
5. tracebacks (the CLI boundary, the strict readers);
6. errors of more than one line (click's usage errors, library warnings, an unreachable Hub).

Every command runs through `cli_checks.check_run`, which asserts the common contract (exit code,
one `Error:` line, no traceback, no control character, bounded time, no file opened outside).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from calc.cli import main

from cli_checks import check_run, fuzz_examples
from checkpoint_files import write_safetensors
from hostile_files import CONFIG, LAYOUT, TINY_PARAMS, write_checkpoint

CASES = settings(max_examples=fuzz_examples(12), deadline=None, suppress_health_check=list(HealthCheck))


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


def _cache_snapshot(repo_id: str) -> Path:
    """huggingface_hub's layout: snapshots/<commit>/<file> are relative symlinks into ../../blobs/."""
    from huggingface_hub import constants

    repo = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("1" * 40)
    source = write_checkpoint(repo / "source")
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("1" * 40)
    for name in ("config.json", "model.safetensors"):
        (source / name).rename(repo / "blobs" / f"blob-{name}")
        (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / f"blob-{name}")
    return snapshot


def test_the_hub_cache_blobs_are_read_and_a_link_out_of_the_cache_is_not(tmp_path: Path) -> None:
    snapshot = _cache_snapshot("cache-org/tiny")
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


# --- 2. control characters ---------------------------------------------------------------------

hostile_text = st.text(st.one_of(st.characters(categories=["Cc", "Cf", "Zl", "Zp"]), st.sampled_from("ab[]/\\é中")),
                       min_size=1, max_size=12).map(lambda s: "\x1b[2J" + s)


@CASES
@given(text=hostile_text)
def test_names_from_files_are_printed_with_control_characters_escaped(tmp_path_factory, text: str) -> None:
    root = tmp_path_factory.mktemp("names")
    spec = root / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": text, "family": "gpt2", "vocab_size": 11, "d_model": 4, "n_layers": 1,
                                "n_heads": 1, "n_positions": 8}))
    for args in (["count"], ["shapes", "--seq", "4"], ["memory"], ["kvcache"]):
        assert check_run([*args, str(spec)]).exit_code == 0
    checkpoint = write_checkpoint(root / "ckpt", config={**CONFIG, "_name_or_path": text})
    write_safetensors(checkpoint / "model.safetensors", {**LAYOUT, f"h.0.{text}.weight": ("F32", (1,))})
    assert check_run(["inspect", str(checkpoint)]).exit_code == 0
    assert check_run(["verify", "--checkpoint", str(checkpoint)]).exit_code == 1  # the extra tensor
    assert check_run(["count", str(checkpoint)]).exit_code == 0


@CASES
@given(text=hostile_text.filter(lambda s: "/" not in s and "\x00" not in s and not any(0xD800 <= ord(c) < 0xE000 for c in s)))
def test_paths_and_arguments_in_error_lines_are_escaped(tmp_path_factory, text: str) -> None:
    root = tmp_path_factory.mktemp("paths")
    directory = root / text
    directory.mkdir()
    for args in (["inspect", str(directory)], ["count", str(directory / "x.yaml")], ["count", text],
                 ["memory", "gpt2", "--budget", text], ["memory", "gpt2", "--dtype", text], ["count", "gpt2", "--set", text]):
        assert check_run(args).exit_code == 2


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
    checkpoint = write_checkpoint(tmp_path_factory.mktemp("config"), config={**CONFIG, "n_layer": n_layer})
    for args in (["inspect", str(checkpoint)], ["verify", "--checkpoint", str(checkpoint)]):
        result = check_run(args)
        assert result.exit_code == 2 and "cannot be the same model" in result.stderr


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


# --- 4. silently wrong answers -------------------------------------------------------------------

@CASES
@given(key=st.sampled_from(sorted(CONFIG)), value=st.one_of(st.integers(1, 64), st.booleans(),
                                                            st.text("abcxyz_-.", max_size=5)))
def test_a_key_given_twice_is_an_error_in_json_and_yaml(tmp_path_factory, key: str, value: object) -> None:
    root = tmp_path_factory.mktemp("dup")
    body = json.dumps(CONFIG)[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}"
    (root / "config.json").write_text(body)
    spec = {"family": "gpt2", "vocab_size": 11, "d_model": 4, "n_layers": 1, "n_heads": 1, "n_positions": 8}
    yaml_key = sorted(spec)[len(key) % len(spec)]
    (root / "spec.yaml").write_text(json.dumps(spec)[:-1] + f", {json.dumps(yaml_key)}: {json.dumps(value)}}}")
    for path, name in ((root / "config.json", key), (root / "spec.yaml", yaml_key)):
        result = check_run(["count", str(path)])
        assert result.exit_code == 2 and f"{name!r} is given twice" in result.stderr


@pytest.mark.parametrize("key", ["qkv_bias", "tie_embeddings", "mlp_bias"])
@pytest.mark.parametrize("text", ["false", "False", "no", "0"])
def test_booleans_are_booleans(tmp_path: Path, key: str, text: str) -> None:
    """`"false"` (a string in JSON, quoted in YAML) is not False, and never True either."""
    spec = {"family": "gpt2", "vocab_size": 11, "d_model": 4, "n_layers": 1, "n_heads": 1, "n_positions": 8, key: text}
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    assert check_run(["count", str(tmp_path / "spec.yaml")]).exit_code == 2
    checkpoint = write_checkpoint(tmp_path / "ckpt", config={**CONFIG, "tie_word_embeddings": text})
    assert check_run(["count", str(checkpoint)]).exit_code == 2


@CASES
@given(index=st.one_of(
    st.integers(0, 99).map(lambda i: "0" + str(i)),  # leading zero: 00, 01, 099
    st.text(st.characters(categories=["Nd"]).filter(lambda c: not c.isascii()), min_size=1, max_size=3),
))
def test_only_plain_ascii_layer_indices_name_a_layer(tmp_path_factory, index: str) -> None:
    path = write_safetensors(tmp_path_factory.mktemp("index") / "m.safetensors",
                             {**LAYOUT, f"h.{index}.ln_1.weight": ("F32", (4,))})
    result = check_run(["inspect", str(path), "--json"])
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert [t["name"] for t in report["unknown"]] == [f"h.{index}.ln_1.weight"] and report["parameters"] == TINY_PARAMS


def test_views_of_shared_storage_are_refused_not_counted_twice(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"wte.weight": torch.zeros(1).expand(200_000, 100_000)}, tmp_path / "stride0.bin")
    flat = torch.zeros(10)
    torch.save({"wte.weight": flat[:6].view(2, 3), "wpe.weight": flat[4:].view(2, 3)}, tmp_path / "overlap.bin")
    for name, message in (("stride0.bin", "views of 1 stored ones"), ("overlap.bin", "overlap in storage")):
        result = check_run(["inspect", str(tmp_path / name)])
        assert result.exit_code == 2 and message in result.stderr


# --- 5. tracebacks ---------------------------------------------------------------------------------

BROKEN_YAML = {
    "a digit-limit integer": "d_model: " + "9" * 5000,
    "a 31-digit integer": "d_model: " + "9" * 31,
    "an int tag on text": "d_model: !!int abc",
    "an impossible date": "name: 2024-02-30",
    "a python tag": "name: !!python/object/apply:os.system [ls]",
    "nesting": "name: " + "[" * 10_000 + "]" * 10_000,
    "an alias bomb": "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
    "binary": "name: !!binary '@@@'",
    "not a mapping": "- 1\n- 2",
    "tabs": "a:\n\t- 1",
}


@pytest.mark.parametrize("case", sorted(BROKEN_YAML))
def test_broken_yaml_is_one_error_line(tmp_path: Path, case: str) -> None:
    (tmp_path / "spec.yaml").write_text(BROKEN_YAML[case])
    result = check_run(["count", str(tmp_path / "spec.yaml")])
    assert result.exit_code == 2 and "spec.yaml" in result.stderr


BROKEN_JSON = {
    "a digit-limit integer": '{"model_type": "gpt2", "n_embd": %s}' % ("9" * 5000),
    "nested 100,000 deep": '{"model_type": "gpt2", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "nested 60 deep": '{"model_type": "gpt2", "x": ' + "[" * 60 + "]" * 60 + "}",
    "not UTF-8": b'{"model_type": "\xff"}',
    "NaN sizes": '{"model_type": "gpt2", "n_embd": NaN}',
    "a list": "[1, 2]",
}


@pytest.mark.parametrize("case", sorted(BROKEN_JSON))
def test_broken_config_json_is_one_error_line(tmp_path: Path, case: str) -> None:
    content = BROKEN_JSON[case]
    (tmp_path / "config.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    for args in (["count", str(tmp_path / "config.json")], ["count", str(tmp_path)]):
        assert check_run(args).exit_code == 2


@CASES
@given(value=st.one_of(st.integers(10**29, 10**4000).map(str), st.sampled_from(
    ["!!int abc", "2024-02-30", "[[[[", "{a: 1, a: 2}", "!!binary x", "1e999999999", "&a [*a]", "*nowhere"])))
def test_set_values_never_escape_as_tracebacks(value: str) -> None:
    for command in ("count", "memory", "shapes"):
        assert check_run([command, "gpt2", "--set", f"d_model={value}"]).exit_code == 2


@pytest.mark.parametrize("budget", ["", " ", "1e999999999", "-1", "nan", "inf", "1e30", "80XB", "80 G B s"])
def test_budgets_that_are_not_sizes(budget: str) -> None:
    result = check_run(["memory", "gpt2", "--budget", budget])
    assert result.exit_code == 2 and "--budget" in result.stderr


def test_an_unexpected_error_is_one_line_naming_itself_as_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    import calc.analysis.count

    def broken(spec):
        raise KeyError("x\n\x1b[2Jsecond line")

    monkeypatch.setattr(calc.analysis.count, "count", broken)
    result = check_run(["count", "gpt2"])
    assert result.exit_code == 2 and "unexpected KeyError" in result.stderr and "bug in gptcalc" in result.stderr
    monkeypatch.setenv("GPTCALC_DEBUG", "1")
    assert isinstance(CliRunner().invoke(main, ["count", "gpt2"]).exception, KeyError)  # the traceback, when asked


# --- 6. one line ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["memory", "gpt2", "--seq", "0"], ["memory", "gpt2", "--dtype", "fp12"], ["count", "gpt2", "gpt2"],
    ["count"], ["nosuchcommand"], ["--nosuchoption"], ["kvcache", "--batch", "x"], ["shapes", "gpt2", "--seq", "-1"],
    ["memory", "gpt2", "--group-size", "0"], ["inspect"], ["count", "gpt2", "--set"],
])
def test_click_usage_errors_are_one_line(args: list[str]) -> None:
    result = check_run(args)
    assert result.exit_code == 2 and "--help" in result.stderr


def test_an_unreachable_hub_fails_in_seconds_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network and no HF_HUB_OFFLINE: huggingface_hub alone retries for 24 s, printing as it goes."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: connection refused
    for args in (["count", "unreachable-org/model"], ["inspect", "unreachable-org/model"]):
        start = time.monotonic()
        result = check_run(args)
        assert result.exit_code == 2 and "cannot be reached" in result.stderr and time.monotonic() - start < 8


def test_a_cached_config_is_used_when_the_hub_cannot_be_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    _cache_snapshot("cache-org/offline")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    assert "328 parameters" in check_run(["count", "cache-org/offline"]).stdout


def test_torch_warnings_do_not_precede_the_error_line(tmp_path: Path) -> None:
    """A protocol-5 pickle makes torch warn before it fails; only the `Error:` line is printed."""
    pytest.importorskip("torch")
    import pickle

    (tmp_path / "x.bin").write_bytes(pickle.dumps({"x": 1}, protocol=5))
    result = check_run(["inspect", str(tmp_path / "x.bin")])
    assert result.exit_code == 2 and result.stderr.startswith("Error: ")

