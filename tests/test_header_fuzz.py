"""Fuzzing the safetensors header reader: whatever the bytes, a result or one GptcalcError line.

Three mutators over a small valid file (a tiny GPT-2, so the checkpoint layer has names to map):
raw byte edits (flip, insert, delete, truncate), a random length prefix, and structural edits
of the JSON (a field replaced by any JSON value). Each example has a deadline, so a hang or a
pathological slowdown fails the test as surely as a traceback does.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calc.checkpoint.report import read_checkpoint
from calc.cli import main
from calc.errors import GptcalcError
from calc.checkpoint.names import expected_shapes
from calc.spec.load import load_spec
from calc.checkpoint.safetensors_header import read_header
from checkpoint_files import header_bytes, numel, write_safetensors
from cli_checks import fuzz_examples
from hostile_files import LAYOUT

PREFIX, DATA_SIZE = header_bytes(LAYOUT)
VALID = PREFIX + bytes(DATA_SIZE)
FUZZ = settings(max_examples=fuzz_examples(100), deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])


def check(path: Path) -> None:
    """The contract: a header, or a GptcalcError of one line naming the file; nothing else."""
    for reader in (read_header, read_checkpoint):
        try:
            reader(str(path))
        except GptcalcError as exc:
            assert "\n" not in str(exc) and str(exc)


def test_the_unmutated_file_is_valid(tmp_path: Path) -> None:
    (tmp_path / "m.safetensors").write_bytes(VALID)
    report = read_checkpoint(str(tmp_path / "m.safetensors"))
    # source: wte 44 + wpe 32 + ln_1 8 + c_attn 48+12 + c_proj 16+4 + ln_2 8 + c_fc 64+16 + c_proj 64+4 + ln_f 8
    assert report.breakdown.total == 328 and report.ok


edits = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.integers(0, len(VALID) - 1), st.integers(0, 255)),
        st.tuples(st.just("insert"), st.integers(0, len(VALID)), st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("delete"), st.integers(0, len(VALID) - 1), st.integers(1, 64)),
        st.tuples(st.just("truncate"), st.integers(0, len(VALID))),
    ),
    min_size=1, max_size=6,
)


def apply(data: bytes, edit: tuple) -> bytes:
    kind, where, *rest = edit
    where = min(where, len(data))
    if kind == "flip":
        return data[:where] + bytes([rest[0]]) + data[where + 1:]
    if kind == "insert":
        return data[:where] + rest[0] + data[where:]
    if kind == "delete":
        return data[:where] + data[where + rest[0]:]
    return data[:where]


def mutated(tmp_path: Path, edits: list[tuple]) -> Path:
    """VALID with every edit applied, written to a file."""
    data = VALID
    for edit in edits:
        data = apply(data, edit)
    path = tmp_path / "m.safetensors"
    path.write_bytes(data)
    return path


@FUZZ
@given(edits=edits)
def test_byte_mutations(tmp_path: Path, edits: list[tuple]) -> None:
    check(mutated(tmp_path, edits))


@FUZZ
@given(length=st.one_of(st.integers(0, 2**64 - 1), st.integers(0, len(VALID) + 64)))
def test_length_prefix_mutations(tmp_path: Path, length: int) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", length) + VALID[8:])
    check(path)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
FIELDS = ("dtype", "shape", "data_offsets")


@FUZZ
@given(
    tensor=st.sampled_from(sorted(LAYOUT)),
    field=st.sampled_from((*FIELDS, None, "__metadata__")),
    value=json_values,
    data_extra=st.integers(-8, 8),
)
def test_structural_mutations(tmp_path: Path, tensor: str, field: str | None, value: object, data_extra: int) -> None:
    header = json.loads(PREFIX[8:])
    if field == "__metadata__":
        header["__metadata__"] = value
    elif field is None:
        header[tensor] = value
    else:
        header[tensor][field] = value
    raw = json.dumps(header).encode()
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(max(0, DATA_SIZE + data_extra)))
    check(path)


@settings(max_examples=60, deadline=5000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=edits)
def test_cli_never_shows_a_traceback(tmp_path: Path, edits: list[tuple]) -> None:
    path = mutated(tmp_path, edits)
    result = CliRunner().invoke(main, ["inspect", str(path)])
    assert result.exit_code in (0, 2)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if result.exit_code == 2:
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1


KNOWN_NAMES = sorted(
    {name for preset in ("gpt2-small", "llama-2-7b") for name in expected_shapes(load_spec(preset))
     if not re.search(r"\.\d+\.", name) or re.search(r"\.(0|1|3)\.", name)}
    | {"wte.weight", "h.0.attn.c_attn.weight", "transformer.h.0.attn.bias", "model.layers.1.self_attn.rotary_emb.inv_freq",
       "something.else"}
)


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=st.dictionaries(
    st.sampled_from(KNOWN_NAMES),
    st.tuples(st.sampled_from(["F32", "F16", "BF16", "U8"]), st.lists(st.integers(0, 6), max_size=3).map(tuple)),
    min_size=1, max_size=12,
))
def test_valid_files_with_any_shapes_under_known_names(tmp_path: Path, layout: dict) -> None:
    """Headers that are valid but describe nonsense models: spec inference and the name maps must
    answer with a report or one error line, never a traceback."""
    path = write_safetensors(tmp_path / "m.safetensors", layout)
    try:
        report = read_checkpoint(str(path))
    except GptcalcError as exc:
        assert "\n" not in str(exc)
        return
    # every element written is accounted for exactly once: a parameter, a buffer, or unknown
    assert report.stored_elements == sum(numel(shape) for _, shape in layout.values())
