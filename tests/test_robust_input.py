"""What used to end in "unexpected ... (a bug in gptcalc)", closed where it starts (issue 25).

- numbers: `--mfu` read exactly and strictly (finite, in range), integers of any length refused
  before Python's 4,300-digit limit turns them into a ValueError;
- paths the system refuses (a 300-character name: ENAMETOOLONG) are bad input, named;
- one debug switch: `GPTCALC_DEBUG=1`, and no other value, shows a traceback;
- output files: `-o -` is standard output where the format allows it, a path ending in `/` is
  an error, and a file is written whole or not at all (a failed write keeps the old file).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main
from cli_checks import check_run

HUGE = "9" * 5000  # past Python's int-from-text limit (4,300 digits)
LONG = "a" * 300  # past every file system's 255-byte name limit


@pytest.mark.parametrize("mfu", ["nan", "inf", "-inf", "0", "-0.5", "1.5", "1e-400", "1/0", "0x1", HUGE, "0." + HUGE])
def test_an_mfu_that_is_no_share_is_refused(mfu: str) -> None:
    result = check_run(["flops", "gpt2", "--seq", "8", "--mfu", mfu])
    assert result.exit_code == 2 and "--mfu" in result.stderr


def test_a_small_mfu_is_read_exactly() -> None:
    """0.0001 was rounded to 0 (a fraction limited to denominators of 1,000), then divided by. The
    prefill time bound is the FLOPs over (peak x MFU), so at 0.0001 it is 5,000 times that at 0.5."""
    times = []
    for mfu in ("0.5", "0.0001"):
        result = check_run(["flops", "gpt2", "--seq", "8", "--mfu", mfu, "--json"])
        bound = json.loads(result.stdout)["bounds"][0]
        assert bound["mfu"] == float(mfu)
        times.append(bound["prefill_seconds_at_mfu"])
    assert times[1] == pytest.approx(5000 * times[0], rel=1e-12)


@pytest.mark.parametrize("args", [
    ["memory", "gpt2", "--budget", f"{HUGE}xH100-80GB"], ["memory", "mixtral-8x7b", "--cpu-experts", HUGE],
    ["memory", "gpt2", "--seq", HUGE], ["memory", "gpt2", "--batch", HUGE], ["memory", "gpt2", "--budget", f"{HUGE}GB"],
    ["memory", "mixtral-8x7b", "--cpu-experts", "²"], ["memory", "gpt2", "--budget", "²xH100-80GB"],
    ["train", "gpt2", "--seq", HUGE, "--micro-batch", "1"],
], ids=lambda args: " ".join(arg[:12] for arg in args))
def test_integers_of_any_length_are_input_errors(args: list[str]) -> None:
    result = check_run(args)
    assert result.exit_code == 2 and "bug in gptcalc" not in result.stderr


def test_cpu_experts_on_a_billion_layers_is_arithmetic(tmp_path: Path) -> None:
    """`--cpu-experts all` summed the offloaded experts layer by layer; now by runs of layers. A
    billion MoE layers of 4 experts (gate, up, down: 3 x 8 x 16 each): expert bytes in fp16 held in
    system RAM = 10^9 x 4 x 384 x 2 B."""
    spec = tmp_path / "deep.yaml"
    spec.write_text("name: deep\nvocab_size: 10\nd_model: 8\nn_positions: 16\nfinal_norm: {kind: rmsnorm}\n"
                    "head: {tied: true}\nlayers: [[1000000000, moe]]\nblocks:\n  moe:\n"
                    "    attention: {n_heads: 2, head_dim: 4}\n    norm: {kind: rmsnorm}\n"
                    "    mlp: {kind: moe, n_experts: 4, top_k: 2, d_ff: 16, gated: true}\n")
    result = check_run(["memory", str(spec), "--cpu-experts", "all", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["cpu_experts"]["weights_bytes"] == 10**9 * 4 * 3 * 8 * 16 * 2


@pytest.mark.parametrize("args", [["count", LONG], ["count", f"{LONG}.yaml"], ["count", f"{LONG}/config.json"],
                                  ["inspect", LONG], ["memory", "--checkpoint", LONG], ["verify", "gpt2", "--checkpoint", LONG]],
                         ids=lambda args: " ".join(arg[:12] for arg in args))
def test_a_name_too_long_for_the_file_system_is_an_input_error(args: list[str]) -> None:
    result = check_run(args)
    assert result.exit_code == 2 and "bug in gptcalc" not in result.stderr and LONG[:50] in result.stderr


@pytest.mark.parametrize("value", ["0", "", "false", "no"])
def test_only_gptcalc_debug_1_shows_a_traceback(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    import calc.analysis.count

    def broken(spec):  # type: ignore[no-untyped-def]
        raise KeyError("x")

    monkeypatch.setattr(calc.analysis.count, "count", broken)
    monkeypatch.setenv("GPTCALC_DEBUG", value)
    result = check_run(["count", "gpt2"])
    assert result.exit_code == 2 and "bug in gptcalc" in result.stderr


# --- files written ---------------------------------------------------------------------------------

def test_report_to_standard_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = check_run(["report", "gpt2", "-o", "-"])
    assert result.exit_code == 0 and result.stdout.startswith("<!DOCTYPE html>") and "wrote" not in result.stdout
    assert not list(tmp_path.iterdir())  # no file named '-'


@pytest.mark.parametrize("args", [["plot", "params", "gpt2"], ["plot", "memory", "gpt2"]], ids=" ".join)
def test_a_picture_is_not_written_to_standard_output(args: list[str]) -> None:
    result = check_run([*args, "-o", "-"])
    assert result.exit_code == 2 and "-o -" in result.stderr


@pytest.mark.parametrize("args, name", [(["plot", "params", "gpt2"], "new.png/"), (["report", "gpt2"], "page.html/"),
                                        (["plot", "params", "gpt2"], "."), (["report", "gpt2"], ".")])
def test_a_directory_is_not_a_file_to_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
                                            name: str) -> None:
    """`plot -o new.png/` wrote `new.png` (pathlib drops the slash)."""
    monkeypatch.chdir(tmp_path)
    result = check_run([*args, "-o", name])
    assert result.exit_code == 2 and "a directory" in result.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args, name", [(["plot", "params", "gpt2"], "p.svg"), (["plot", "memory", "gpt2"], "m.png"),
                                        (["report", "gpt2"], "r.html")])
def test_a_failed_write_keeps_the_old_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                 name: str) -> None:
    """The disk fills up as the file is written: the old file is still there, whole, and nothing else."""
    pytest.importorskip("matplotlib")
    import calc.outputs

    path = tmp_path / name
    path.write_text("the old file")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(calc.outputs.os, "fsync", full)
    result = check_run([*args, "-o", str(path)])
    assert result.exit_code == 2 and "No space left on device" in result.stderr
    assert path.read_text() == "the old file" and [p.name for p in tmp_path.iterdir()] == [name]
    monkeypatch.undo()
    assert check_run([*args, "-o", str(path)]).exit_code == 0 and path.read_bytes() != b"the old file"
    assert [p.name for p in tmp_path.iterdir()] == [name] and oct(path.stat().st_mode & 0o777) != oct(0o600)


# --- transformers' fallback: bounded before it builds ------------------------------------------------

@pytest.mark.parametrize("change, key", [({"num_hidden_layers": 10**8}, "num_hidden_layers"),
                                         ({"hidden_size": 2**25}, "hidden_size"),
                                         ({"vocab_size": 2**25}, "vocab_size")])
def test_the_fallback_refuses_sizes_before_transformers_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               change: dict, key: str) -> None:
    """biogpt has no adapter, so transformers would build it: 10^8 layers or a 2^25 width (the limits
    docs/checkpoints.md states) are refused first, transformers' config class never made."""
    pytest.importorskip("transformers")
    import transformers

    def never(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("transformers was asked to build it")

    monkeypatch.setattr(transformers.AutoConfig, "for_model", never)
    config = {"model_type": "biogpt", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, **change}
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = check_run(["count", str(tmp_path)])
    assert result.exit_code == 2 and f"config.json: {key}: {change[key]:,} is more than" in result.stderr


# --- streams ------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def _gptcalc(args: list[str], **streams) -> "subprocess.CompletedProcess[bytes]":  # type: ignore[name-defined]
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "calc", *args], cwd=REPO, **streams)


@pytest.mark.parametrize("args", [["count", "gpt2"], ["count", "gpt2", "--json"], ["report", "gpt2", "-o", "-"]],
                         ids=" ".join)
def test_a_stdout_that_cannot_take_the_result_is_an_error_exit(args: list[str]) -> None:
    """Closed (`>&-`): everything was dropped with exit 0; full (/dev/full): 'unexpected OSError'."""
    import subprocess

    closed = _gptcalc(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                      preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2 and closed.stderr == b"Error: standard output is closed: the result would be lost\n"
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    with open("/dev/full", "wb") as full:
        result = _gptcalc(args, stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 2
    assert result.stderr == b"Error: standard output: cannot write (No space left on device)\n"


def test_a_stderr_that_cannot_take_the_error_line_still_exits_2() -> None:
    """It exited 1 (click's own write of the line failed, then Python's of the traceback)."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    import subprocess

    with open("/dev/full", "wb") as full:
        assert _gptcalc(["count", "nope"], stdout=subprocess.DEVNULL, stderr=full).returncode == 2


def test_an_ascii_only_stdout_gets_names_escaped(tmp_path: Path) -> None:
    """A name its encoding lacks was a UnicodeEncodeError; it is escaped as a control character is."""
    import subprocess

    spec = tmp_path / "spec.yaml"
    spec.write_text('name: "名前"\nvocab_size: 10\nd_model: 8\nn_layers: 1\nn_heads: 2\nn_positions: 16\n', encoding="utf-8")
    result = _gptcalc(["count", str(spec)], capture_output=True, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0 and b"\\u540d\\u524d: " in result.stdout, result.stderr


# --- bounded pictures, strict JSON, transformers' own refusals ----------------------------------------

@pytest.mark.parametrize("constant, says", [("NaN", "NaN is not a JSON value"),
                                            ("Infinity", "layer_norm_epsilon: expected a finite number"),
                                            ("-Infinity", "layer_norm_epsilon: expected a finite number")])
def test_nan_and_infinity_are_refused_where_they_would_count(tmp_path: Path, constant: str, says: str) -> None:
    """Python's json reads them (and transformers' fallback took an rms_norm_eps of NaN). Infinity loads,
    as transformers writes it into Mamba2's time_step_limit, but no key gptcalc reads may hold it."""
    (tmp_path / "config.json").write_text(
        '{"model_type": "gpt2", "vocab_size": 11, "n_positions": 8, "n_embd": 4, "n_layer": 1, "n_head": 1, '
        f'"layer_norm_epsilon": {constant}}}')
    result = check_run(["count", str(tmp_path)])
    assert result.exit_code == 2 and says in result.stderr, result.stderr


def test_infinity_where_transformers_writes_it_loads(tmp_path: Path) -> None:
    """Mamba2's time_step_limit is [0.0, Infinity] in the configs transformers saves; gptcalc reads no such key."""
    (tmp_path / "config.json").write_text('{"model_type": "mamba2", "num_hidden_layers": 2, '
                                          '"time_step_limit": [0.0, Infinity]}')
    assert check_run(["count", str(tmp_path)]).exit_code == 0


def test_an_inconsistent_config_is_one_error_line(tmp_path: Path) -> None:
    """hidden_size x expand != num_heads x head_dim, which transformers' own validation refuses with a
    huggingface_hub StrictDataclassError: the mamba2 adapter names the key instead."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba2", "vocab_size": 100, "hidden_size": 64,
                                                      "num_hidden_layers": 2, "num_heads": 3, "head_dim": 7, "expand": 2}))
    result = check_run(["count", str(tmp_path)])
    assert result.exit_code == 2 and "num_heads: 3 heads x head_dim 7 must equal expand x hidden_size = 128" \
        in result.stderr, result.stderr


def test_a_config_transformers_refuses_is_one_error_line(tmp_path: Path) -> None:
    """biogpt has no adapter; transformers' own validation (a huggingface_hub StrictDataclassError, not a
    ValueError) refuses a field of the wrong type: that is the config's fault, said in one line."""
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "biogpt", "vocab_size": 100, "hidden_size": 64,
                                                      "num_hidden_layers": 2, "hidden_act": 5}))
    result = check_run(["count", str(tmp_path)])
    assert result.exit_code == 2 and "transformers cannot build it either" in result.stderr, result.stderr


def _spec(path: Path, name: str = "x", positions: int = 16) -> str:
    path.write_text(json.dumps({"name": name, "vocab_size": 10, "d_model": 8, "n_layers": 1, "n_heads": 2,
                                "n_positions": positions}))
    return str(path)


def test_a_context_past_what_a_picture_draws_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    spec = _spec(tmp_path / "s.yaml", positions=10**29)
    for args in (["plot", "memory", spec, "-o", str(tmp_path / "m.svg")], ["report", spec, "-o", str(tmp_path / "r.html")]):
        result = check_run(args)
        assert result.exit_code == 2 and "a picture draws contexts up to 1,000,000,000,000,000 tokens" in result.stderr
    assert check_run(["plot", "memory", spec, "--seq-max", "1k", "-o", str(tmp_path / "m.svg")]).exit_code == 0


def test_pictures_hold_at_most_64_models_and_cut_long_names(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    result = check_run(["plot", "params", *["gpt2"] * 65, "-o", str(tmp_path / "p.svg")])
    assert result.exit_code == 2 and "a picture draws at most 64 models, not 65" in result.stderr
    svg = tmp_path / "long.svg"
    assert check_run(["plot", "params", _spec(tmp_path / "l.yaml", "n" * 200_000), "-o", str(svg)]).exit_code == 0
    assert "n" * 97 + "..." in svg.read_text() and "n" * 101 not in svg.read_text()


def test_a_device_is_written_as_it_is_and_a_link_keeps_pointing(tmp_path: Path) -> None:
    """Nothing is renamed over /dev/null (as root, that would replace the device with a file); a
    link's file is replaced, and the link stays a link to it."""
    assert check_run(["report", "gpt2", "-o", os.devnull]).exit_code == 0
    assert Path(os.devnull).is_char_device()
    real, link = tmp_path / "real.html", tmp_path / "link.html"
    real.write_text("old")
    link.symlink_to(real.name)
    assert check_run(["report", "gpt2", "-o", str(link)]).exit_code == 0
    assert link.is_symlink() and real.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.html", "real.html"]


@pytest.mark.parametrize("ref", ["../../../../etc", "2" * 40])
def test_a_cache_ref_that_is_a_path_or_names_no_snapshot_is_one_error_line(ref: str) -> None:
    """refs/main is the cache's own file: a path in it made huggingface_hub raise a bare ValueError."""
    from hostile_files import cache_snapshot

    repo = f"cache-org/refs-{len(ref)}"
    snapshot = cache_snapshot(repo)
    (snapshot.parent.parent / "refs" / "main").write_text(ref)
    for args in (["count", repo], ["inspect", repo]):
        result = check_run(args)
        assert result.exit_code == 2 and "bug in gptcalc" not in result.stderr and repo in result.stderr


def test_spec_sizes_are_refused_before_parsing_or_validating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25: 40,000 layer kinds in a 4 MB YAML took 39 s. The file's size is checked before YAML
    parses it, and the number of kinds and runs before pydantic validates any of them."""
    from calc.errors import GptcalcError
    from calc.inputs import MAX_KINDS, MAX_LAYER_RUNS, MAX_SPEC_BYTES
    from calc.spec.load import load_spec
    from calc.spec.model import spec_from_dict

    big = tmp_path / "big.yaml"
    big.write_text("name: big\n" + "# padding\n" * (MAX_SPEC_BYTES // 10 + 1), encoding="utf-8")

    def never(*args: object) -> None:
        raise AssertionError("reached: the refusal must come first")

    monkeypatch.setattr("calc.spec.yamlfile._StrictLoader", never)
    monkeypatch.setattr("calc.spec.validate.validated", never)
    with pytest.raises(GptcalcError, match="larger than 262,144 B"):
        load_spec(str(big))
    kinds = {f"k{i}": {"attention": {"kind": "attention", "n_heads": 1}} for i in range(MAX_KINDS + 1)}
    many = {"vocab_size": 8, "d_model": 8, "n_positions": 8, "blocks": kinds, "layers": [[1, k] for k in kinds]}
    with pytest.raises(GptcalcError, match=f"blocks: {MAX_KINDS + 1} layer kinds; at most {MAX_KINDS}"):
        spec_from_dict(many, "many")
    runs = {**many, "blocks": {"a": {}, "b": {}}, "layers": [[1, "ab"[i % 2]] for i in range(MAX_LAYER_RUNS + 1)]}
    with pytest.raises(GptcalcError, match="layers: 100,001 runs; at most 100,000"):
        spec_from_dict(runs, "runs")
