"""Fuzzing the whole CLI: random arguments, mutated YAML specs, config.json files, safetensors and
torch files, and directory layouts of links, FIFOs and loops. Every run must keep the contract of
`cli_checks.check_run`: exit 0, 1 or 2; exit 2 is one `Error:` line; no traceback; no control
character printed; within `cli_checks.SECONDS`; no file opened that resolves outside what was named.

The default run takes a few dozen examples per test (seconds). `pytest --fuzz-long` (or
GPTCALC_FUZZ_LONG=1) runs twenty times as many, for a longer hunt before a release:

    python -m pytest -q tests/test_cli_fuzz.py --fuzz-long
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint_files import header_bytes, write_safetensors
from cli_checks import check_run, fuzz_examples
from hostile_files import CONFIG, LAYOUT, write_checkpoint

FUZZ = settings(max_examples=fuzz_examples(25), deadline=None, suppress_health_check=list(HealthCheck))

# --- random arguments ------------------------------------------------------------------------------

HOSTILE = ["", " ", "-", "--", "0", "-1", "1e999999999", "9" * 5000, "nan", "inf", "\x1b[2J", "a\nb", "\udcff",
           "../../etc/passwd", "/etc", "/dev/zero", "/proc/self/status", "org/repo", "x.safetensors", "=", "a=b=c",
           "d_model=1e9", "n_layers=!!int abc", "name=\x1b]0;pwned\x07", "qkv_bias=\"false\"", "d_model=" + "9" * 40,
           "H100-80GB", "80GB", "fp12", "int4", "fp8", "n_layers=100000", "head_dim=1000000000", "32k", "1M", "٣k",
           "²", "vllm", "Q4_K_M", "2xH100-80GB", "0xH100-80GB", "99999999999999999999xH100-80GB", "adamw", "full",
           "all", "3", "1e-9", "1.5"]
values = st.one_of(st.sampled_from(HOSTILE), st.integers(-3, 10**20).map(str), st.text(max_size=6))
MODELS = ["gpt2", "llama-7b", "gpt2\x1b[31m", "nosuchmodel", *HOSTILE[:8]]
FLAGS = ["--json", "--gqa", "--decode", "--load", "--help", "--bogus", "--mla-expanded", "--causal-half", "--macs",
         "--last-logit", "--qlora", "--sp"]
OPTIONS = ["--seq", "-T", "--batch", "-B", "--dtype", "--kv-dtype", "--group-size", "--budget", "--set", "--model",
           "--checkpoint", "--quant", "--tp", "--pp", "--ep", "--engine", "--kv-memory", "--block-size", "--gpu",
           "--mfu", "--micro-batch", "--gpus", "--zero", "--recompute", "--attention", "--optimizer", "--lora-rank",
           "--lora-targets", "--layers", *FLAGS]
COMMANDS = ["count", "compare", "presets", "list", "shapes", "kvcache", "memory", "flops", "train", "inspect", "verify",
            "nosuchcommand"]


@FUZZ
@given(command=st.sampled_from(COMMANDS), model=st.sampled_from(MODELS),
       options=st.lists(st.tuples(st.sampled_from(OPTIONS), values), max_size=4))
def test_random_arguments(command: str, model: str, options: list[tuple[str, str]]) -> None:
    args = [command, model]
    for option, value in options:
        args += [option] if option in FLAGS else [option, value]
    if command in ("presets", "list", "kvcache") and "--json" not in args:
        args.append("--json")  # every preset's table is slow to draw and says nothing new
    check_run(args)


# --- mutated YAML specs ----------------------------------------------------------------------------

SPEC_YAML = """name: tiny
family: gpt2
vocab_size: 11
d_model: 4
n_layers: 2
n_heads: 1
n_positions: 8
qkv_bias: true
"""
SNIPPETS = ["\n", ": ", "- ", "{", "}", "[", "]", "&a ", "*a ", "!!int ", "!!python/name:os.system ", "<<: ",
            "'", '"', "\t", "\x1b", "9" * 40, "1e9", "2024-02-30", "~", "d_model: 8\n", "null", "true", "\ufeff", "#"]


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, len(SPEC_YAML)), st.sampled_from(SNIPPETS)), min_size=1, max_size=4),
       command=st.sampled_from([["count"], ["shapes", "--seq", "4"], ["memory"], ["verify"]]))
def test_mutated_yaml_specs(tmp_path_factory, edits: list[tuple[int, str]], command: list[str]) -> None:
    text = SPEC_YAML
    for position, snippet in edits:
        text = text[:position] + snippet + text[position:]
    path = tmp_path_factory.mktemp("yaml") / "spec.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    check_run([*command, str(path)])


# --- mutated config.json -----------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**40), 10**40), st.floats(), st.text(max_size=6)),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=4), children, max_size=3)),
    max_leaves=8,
)


@FUZZ
@given(changes=st.dictionaries(st.sampled_from([*CONFIG, "n_inner", "tie_word_embeddings", "_name_or_path",
                                                "text_config", "architectures", "layer_norm_epsilon"]),
                               json_values, min_size=1, max_size=3),
       command=st.sampled_from(["count", "inspect", "verify"]))
def test_mutated_config_json(tmp_path_factory, changes: dict, command: str) -> None:
    directory = write_checkpoint(tmp_path_factory.mktemp("config"), config={**CONFIG, **changes})
    check_run(["verify", "--checkpoint", str(directory)] if command == "verify" else [command, str(directory)])


# --- mutated safetensors names and shapes ------------------------------------------------------------

names = st.one_of(
    st.sampled_from(list(LAYOUT)),
    st.builds(lambda i, rest: f"h.{i}.{rest}", st.one_of(st.integers(0, 10**13).map(str), st.text("0123456789٣۵", max_size=4)),
              st.sampled_from(["ln_1.weight", "attn.c_attn.weight", "mlp.c_fc.bias", "attn.bias"])),
    st.text(max_size=10),
)
shapes = st.lists(st.integers(0, 70), max_size=3).map(tuple)


@FUZZ
@given(renames=st.dictionaries(st.sampled_from(list(LAYOUT)), names, max_size=3),
       reshapes=st.dictionaries(st.sampled_from(list(LAYOUT)), shapes, max_size=2),
       with_config=st.booleans())
def test_mutated_safetensors_layouts(tmp_path_factory, renames: dict, reshapes: dict, with_config: bool) -> None:
    layout = {renames.get(name, name): ("F32", reshapes.get(name, shape)) for name, (_, shape) in LAYOUT.items()}
    directory = tmp_path_factory.mktemp("st")
    write_safetensors(directory / "model.safetensors", layout)
    if with_config:
        (directory / "config.json").write_text(json.dumps(CONFIG))
    for args in (["inspect", str(directory)], ["inspect", str(directory), "--model", "gpt2-small", "--json"],
                 ["verify", "gpt2-small", "--checkpoint", str(directory)]):
        check_run(args)


# --- mutated torch files -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def torch_file() -> bytes:
    """The tiny GPT-2 saved by torch.save (a zip archive), as bytes."""
    torch = pytest.importorskip("torch")
    buffer = io.BytesIO()
    torch.save({name: torch.zeros(shape) for name, (_, shape) in LAYOUT.items()}, buffer)
    return buffer.getvalue()


def _with_pickle(archive: bytes, edit) -> bytes:
    """The archive with its data.pkl record changed by `edit` (bytes -> bytes), stored as torch does."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info.filename, edit(data) if info.filename.endswith("data.pkl") else data)
    return out.getvalue()


byte_edits = st.lists(st.tuples(st.sampled_from(["flip", "insert", "delete", "truncate"]), st.integers(0, 10**6),
                                st.binary(min_size=1, max_size=4)), min_size=1, max_size=3)


def _apply(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    for kind, position, chunk in edits:
        at = position % (len(data) + 1)
        if kind == "flip" and data:
            at %= len(data)
            data = data[:at] + bytes([data[at] ^ chunk[0] or 1]) + data[at + 1:]
        elif kind == "insert":
            data = data[:at] + chunk + data[at:]
        elif kind == "delete":
            data = data[:at] + data[at + len(chunk):]
        else:
            data = data[:at]
    return data


@FUZZ
@given(edits=byte_edits, inside_pickle=st.booleans())
def test_mutated_torch_files(tmp_path_factory, torch_file: bytes, edits: list, inside_pickle: bool) -> None:
    data = _with_pickle(torch_file, lambda pkl: _apply(pkl, edits)) if inside_pickle else _apply(torch_file, edits)
    path = tmp_path_factory.mktemp("torch") / "pytorch_model.bin"
    path.write_bytes(data)
    check_run(["inspect", str(path)])
    check_run(["verify", "gpt2-small", "--checkpoint", str(path)])


# --- directory layouts: links, FIFOs, loops ----------------------------------------------------------

KINDS = ["file", "link inside", "link outside", "dangling", "loop", "fifo", "directory", "empty", "sparse 1 GiB"]
ROLES = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
         "pytorch_model.bin"]


def _make(path: Path, kind: str, root: Path) -> None:
    """Replace (or create) `path` with a file of `kind`."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    if kind == "link inside":
        (path.parent / "elsewhere").mkdir(exist_ok=True)
        write_safetensors(path.parent / "elsewhere" / path.name, LAYOUT)
        path.symlink_to(Path("elsewhere") / path.name)
    elif kind == "link outside":
        path.symlink_to(root / "outside" / ("config.json" if path.name == "config.json" else "model.safetensors"))
    elif kind == "dangling":
        path.symlink_to(root / "nowhere")
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "sparse 1 GiB":
        with open(path, "wb") as handle:
            handle.write(header_bytes(LAYOUT)[0][:8])
            handle.truncate(2**30)
    else:
        write_safetensors(path, LAYOUT)


@FUZZ
@given(layout=st.dictionaries(st.sampled_from(ROLES), st.sampled_from(KINDS), min_size=1, max_size=3),
       sharded=st.booleans())
def test_directory_layouts(tmp_path_factory, layout: dict[str, str], sharded: bool) -> None:
    root = tmp_path_factory.mktemp("layout")
    write_checkpoint(root / "outside", config={**CONFIG, "_name_or_path": "OUTSIDE"})
    checkpoint = write_checkpoint(root / "ckpt", sharded=sharded)
    for role, kind in layout.items():
        _make(checkpoint / role, kind, root)
    for args in (["inspect", str(checkpoint)], ["count", str(checkpoint)], ["verify", "--checkpoint", str(checkpoint)]):
        result = check_run(args, area=root, allowed=checkpoint)
        assert "OUTSIDE" not in result.stdout + result.stderr


# --- issue 25's classes: YAML merges, planted code, names in pictures and pages, output paths --------

FEW = settings(max_examples=fuzz_examples(10), deadline=None, suppress_health_check=list(HealthCheck))
ANCHOR_KEYS = ["d_model", "n_heads", "vocab_size", "n_layers", "n_positions", "family"]
anchor = st.dictionaries(st.sampled_from(ANCHOR_KEYS), st.sampled_from([1, 2, 4, 8, 11, "gpt2", "x"]), max_size=3)


@FUZZ
@given(anchors=st.lists(anchor, min_size=1, max_size=3), merges=st.lists(st.lists(st.integers(0, 2), max_size=3),
                                                                          min_size=1, max_size=2),
       own=anchor, nested=st.booleans())
def test_yaml_merges(tmp_path_factory, anchors: list[dict], merges: list[list[int]], own: dict, nested: bool) -> None:
    """Anchors merged into the spec, into each other, twice, conflicting: a result or one error line."""
    lines = [f"x-{i}: &a{i} {json.dumps(body)}" for i, body in enumerate(anchors)]
    if nested and len(anchors) > 1:
        lines.append("x-n: &n {<<: *a0, d_model: 4}")
    for sources in merges:
        refs = [f"*a{i}" for i in sources if i < len(anchors)] + (["*n"] if nested and len(anchors) > 1 else [])
        if refs:
            lines.append(f"<<: [{', '.join(refs)}]")
    lines += [f"{key}: {json.dumps(value)}" for key, value in own.items()]
    path = tmp_path_factory.mktemp("merge") / "spec.yaml"
    path.write_text("\n".join(lines) + "\n")
    check_run(["count", str(path)])


@FUZZ
@given(model_type=st.sampled_from(["t5", "llama", "arcee", "nonesuch", "gpt2", "qwen3_vl"]),
       where=st.sampled_from(["top", "text_config", "both"]),
       ref=st.sampled_from(["evil.Evil", "{dir}--evil.Evil", "evil.Evil ", "./evil.Evil"]),
       key=st.sampled_from(["AutoModelForCausalLM", "AutoModel", "AutoConfig"]),
       command=st.sampled_from([["count"], ["verify"], ["shapes", "--seq", "2"], ["memory"]]))
def test_planted_code_never_runs(tmp_path_factory, monkeypatch, model_type: str, where: str, ref: str, key: str,
                                 command: list[str]) -> None:
    """Code named by auto_map anywhere, on any route, with "y" on stdin: never imported, never asked about."""
    root = tmp_path_factory.mktemp("evil")
    marker = root / "PWNED"
    (root / "evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    auto_map = {key: ref.format(dir=root)}
    config = {**CONFIG, "model_type": model_type, "_name_or_path": "."}
    if where in ("top", "both"):
        config["auto_map"] = auto_map
    if where in ("text_config", "both"):
        config["text_config"] = {**CONFIG, "model_type": model_type, "auto_map": auto_map}
    (root / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(root)
    result = check_run([command[0], str(root), *command[1:]], input="y\ny\n")
    assert not marker.exists() and "[y/N]" not in result.stdout + result.stderr


picture_names = st.text(st.sampled_from("ab$_\\[]/<>&\"'\x1b\x00\u202e名 {}^"), min_size=1, max_size=12)


@FEW
@given(names=st.lists(picture_names, min_size=1, max_size=3), command=st.sampled_from(["plot params", "plot memory",
                                                                                       "report"]))
def test_names_in_pictures_and_pages(tmp_path_factory, names: list[str], command: str) -> None:
    """Markup, mathtext, HTML and control characters in model names: a picture or a page, never a crash
    or an element made of a name."""
    pytest.importorskip("matplotlib")
    root = tmp_path_factory.mktemp("names")
    specs = []
    for i, name in enumerate(names):
        (root / f"{i}.yaml").write_text(json.dumps({"name": name, "vocab_size": 11, "d_model": 4, "n_layers": 1,
                                                    "n_heads": 1, "n_positions": 8}))
        specs.append(str(root / f"{i}.yaml"))
    out = root / ("page.html" if command == "report" else "picture.svg")
    result = check_run([*command.split(), *specs, "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    if command == "report":
        from test_injection import own_scripts_removed

        text = own_scripts_removed(text)  # the page's own two scripts, checked to be exactly its own
    assert "<script" not in text and "<a " not in text and not any(c in text for c in "\x1b\x00\u202e")


@FEW
@given(name=st.one_of(st.sampled_from(HOSTILE), st.text(max_size=8))
       .map(lambda s: s.replace("\x00", "").replace("..", "_").lstrip("/")),  # inside the test's folder
       suffix=st.sampled_from(["", ".svg", ".png", ".html", "/", ".svg/", ".pdf"]),
       command=st.sampled_from([["plot", "params", "gpt2"], ["report", "gpt2"]]))
def test_output_paths(tmp_path_factory, monkeypatch, name: str, suffix: str, command: list[str]) -> None:
    """Any -o: written whole where it names a file, one error line otherwise, no temporary file left."""
    pytest.importorskip("matplotlib")
    root = tmp_path_factory.mktemp("out")
    monkeypatch.chdir(root)
    check_run([*command, "-o", name + suffix])
    assert not [p for p in Path(root).rglob(".gptcalc-*")]
