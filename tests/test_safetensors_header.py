"""The header-only safetensors reader: what it accepts, what it refuses, and that it reads nothing else."""

from __future__ import annotations

import json
import struct
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import calc.checkpoint.safetensors_header as sh
from calc.errors import GptcalcError
from calc.checkpoint.safetensors_header import DTYPE_BITS, MAX_HEADER_BYTES, read_header
from checkpoint_files import WIDTH, header_bytes, numel, write_raw, write_safetensors


def entry(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, object]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def test_reads_names_dtypes_shapes_and_metadata(tmp_path: Path) -> None:
    layout = {"a.weight": ("F32", (3, 4)), "b": ("BF16", (5,)), "scalar": ("I64", ())}
    path = write_safetensors(tmp_path / "m.safetensors", layout, {"format": "pt", "note": "x"})
    header = read_header(path)
    assert [(t.name, t.dtype, t.shape) for t in header.tensors] == [(n, d, s) for n, (d, s) in layout.items()]
    assert header.metadata == {"format": "pt", "note": "x"}
    # source: 3*4*4 + 5*2 + 1*8 bytes written by the test helper, back to back
    assert [t.nbytes for t in header.tensors] == [48, 10, 8]
    assert header.file_size - header.bytes_read == 66
    assert header.bytes_read == 8 + header.header_length == len(header_bytes(layout, {"format": "pt", "note": "x"})[0])


def test_agrees_with_the_safetensors_library(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors import safe_open
    from safetensors.torch import save_file

    tensors = {"w": torch.zeros(7, 3, dtype=torch.float16), "b": torch.ones(3), "ids": torch.arange(5), "e": torch.zeros(0, 4)}
    save_file(tensors, tmp_path / "lib.safetensors", metadata={"format": "pt"})
    header = read_header(tmp_path / "lib.safetensors")
    with safe_open(tmp_path / "lib.safetensors", framework="pt") as f:
        expected = {name: (f.get_slice(name).get_dtype(), tuple(f.get_slice(name).get_shape())) for name in f.keys()}
        assert f.metadata() == header.metadata
    assert {t.name: (t.dtype, t.shape) for t in header.tensors} == expected
    assert header.file_size == (tmp_path / "lib.safetensors").stat().st_size


class CountingFile:
    """Wraps a file handle and counts the bytes its read() calls return."""

    def __init__(self, handle, counter: list[int]) -> None:
        self.handle, self.counter = handle, counter

    def read(self, n: int = -1) -> bytes:
        data = self.handle.read(n)
        self.counter[0] += len(data)
        return data

    def __getattr__(self, name: str):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()


def test_reads_only_the_length_and_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = {f"t{i}": ("F16", (4096, 4096)) for i in range(64)}  # 2 GiB of (sparse) data
    path = write_safetensors(tmp_path / "big.safetensors", layout)
    counter = [0]
    monkeypatch.setattr(sh, "open", lambda p, mode: CountingFile(open(p, mode), counter), raising=False)
    header = read_header(path)
    assert counter[0] == header.bytes_read == 8 + header.header_length
    assert header.bytes_read < 10_000
    assert header.file_size - header.bytes_read == 64 * 4096 * 4096 * 2


@pytest.mark.parametrize("dtype", sorted(DTYPE_BITS))
def test_every_format_dtype_is_known(tmp_path: Path, dtype: str) -> None:
    # source: 8 elements x width in bits / 8; F4 packs two per byte, F6 four per three bytes
    nbytes = 8 * DTYPE_BITS[dtype] // 8
    path = write_raw(tmp_path / "d.safetensors", json.dumps({"x": entry(dtype, [2, 4], 0, nbytes)}), nbytes)
    assert read_header(path).tensors[0].nbytes == nbytes


def test_zero_size_tensors_and_no_metadata(tmp_path: Path) -> None:
    header = {"empty": entry("F32", [0, 5], 0, 0), "x": entry("U8", [3], 0, 3), "e2": entry("F16", [4, 0], 3, 3)}
    parsed = read_header(write_raw(tmp_path / "z.safetensors", json.dumps(header), 3))
    assert parsed.metadata == {}
    assert {t.name: t.numel for t in parsed.tensors} == {"empty": 0, "x": 3, "e2": 0}


def test_empty_checkpoint_is_valid(tmp_path: Path) -> None:
    parsed = read_header(write_raw(tmp_path / "n.safetensors", "{}"))
    assert parsed.tensors == () and parsed.file_size - parsed.bytes_read == 0


def _header(**tensors: dict[str, object]) -> str:
    return json.dumps(tensors)


# (file contents as (header, data size, length prefix override), what the one-line error says)
NESTED_70: list = []
for _ in range(70):
    NESTED_70 = [NESTED_70]

BAD_HEADERS = {
    "not JSON": ("{not json", 0, None, "not valid JSON"),
    "JSON array": ("[1, 2]", 0, None, "expected an object"),
    "not UTF-8": (b'{"\xff\xfe": 1}', 0, None, "not UTF-8"),
    "unknown dtype": (_header(x=entry("F128", [2], 0, 32)), 32, None, "unknown dtype 'F128'"),
    "dtype not a string": (_header(x=entry(7, [2], 0, 8)), 8, None, "unknown dtype 7"),  # type: ignore[arg-type]
    "negative dimension": (_header(x=entry("F32", [-2, 3], 0, 24)), 24, None, "negative dimension"),
    "float dimension": (_header(x=entry("F32", [2.0], 0, 8)), 8, None, "expected a list of integers"),  # type: ignore[list-item]
    "bool dimension": (_header(x=entry("F32", [True], 0, 4)), 4, None, "expected a list of integers"),
    "shape not a list": (_header(x=entry("F32", "3", 0, 12)), 12, None, "shape: expected a list"),  # type: ignore[arg-type]
    "missing shape": (json.dumps({"x": {"dtype": "F32", "data_offsets": [0, 4]}}), 4, None, "shape: missing"),
    "tensor not an object": (json.dumps({"x": [1, 2]}), 0, None, "expected an object with dtype"),
    "offsets not a pair": (json.dumps({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}), 4, None, "expected [begin, end]"),
    "offsets reversed": (_header(x=entry("F32", [1], 4, 0)), 4, None, "not a valid byte range"),
    "offsets negative": (_header(x=entry("F32", [1], -4, 0)), 4, None, "not a valid byte range"),
    "size not shape x width": (_header(x=entry("F32", [2, 3], 0, 20)), 20, None, "holds 20 B but shape [2, 3] of F32 needs 24 B"),
    "offsets outside the file": (_header(x=entry("F32", [4], 0, 16)), 8, None, "past the end of the file"),
    "huge shape, small range": (_header(x=entry("F32", [10**25], 0, 4)), 4, None, "needs"),
    "overlapping tensors": (_header(a=entry("F32", [2], 0, 8), b=entry("F32", [2], 4, 12)), 12, None, "overlap"),
    "hole between tensors": (_header(a=entry("F32", [1], 0, 4), b=entry("F32", [1], 8, 12)), 12, None, "belong to no tensor"),
    "bytes after the last tensor": (_header(a=entry("F32", [1], 0, 4)), 12, None, "after the last tensor"),
    "sub-byte dtype not byte aligned": (_header(x=entry("F4", [3], 0, 2)), 2, None, "not a whole number of bytes"),
    "duplicate tensor name": ('{"a": %s, "a": %s}' % (json.dumps(entry("F32", [1], 0, 4)), json.dumps(entry("F32", [1], 4, 8))), 8, None, "key 'a' is given twice"),
    "metadata not an object": (json.dumps({"__metadata__": ["format"]}), 0, None, "__metadata__: expected an object"),
    "metadata value not a string": (json.dumps({"__metadata__": {"format": 1}}), 0, None, "__metadata__: 'format': expected a string"),
    "deeply nested JSON": ("[" * 100_000 + "]" * 100_000, 0, None, "nested too deeply"),
    "integer past the digit limit": ('{"x": {"dtype": "F32", "shape": [%s], "data_offsets": [0, 4]}}' % ("9" * 5000), 4, None, "integer of 5,000 digits"),
    # Well-formed entries a header of plain entries is read without the per-value checks: these must still get them.
    "integer of 31 digits in a shape": (_header(x=entry("F32", [10**30], 0, 4)), 4, None, "integer of 31 digits"),
    "integer of 31 digits in data_offsets": (_header(x=entry("F32", [1], 0, 10**30)), 4, None, "integer of 31 digits"),
    "negative integer of 31 digits": (_header(x=entry("F32", [-(10**30)], 0, 4)), 4, None, "integer of 32 digits"),
    "entry with a deeply nested extra key": (json.dumps({"x": {**entry("F32", [1], 0, 4), "extra": NESTED_70}}), 4, None,
                                             "nested too deeply"),
    "metadata with a deeply nested value": (json.dumps({"__metadata__": {"format": NESTED_70}}), 0, None, "nested too deeply"),
    "header length past the end": ("{}", 0, 1_000, "runs past the end of the"),
    "header length over 100 MB": ("{}", 0, MAX_HEADER_BYTES + 1, "over the 100,000,000 B limit"),
    "header length 2**64 - 1": ("{}", 0, 2**64 - 1, "over the 100,000,000 B limit"),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
def test_bad_headers_are_one_line_errors(tmp_path: Path, case: str) -> None:
    header, data_size, length, message = BAD_HEADERS[case]
    path = write_raw(tmp_path / "bad.safetensors", header, data_size, length)
    with pytest.raises(GptcalcError) as caught:
        read_header(path)
    text = str(caught.value)
    assert message in text
    assert text.startswith(str(path)) and "\n" not in text


@pytest.mark.parametrize("content", [b"", b"abc", b"\x10\x00\x00\x00\x00\x00\x00"], ids=["empty", "3 bytes", "7 bytes"])
def test_files_shorter_than_the_length_prefix(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "short.safetensors"
    path.write_bytes(content)
    with pytest.raises(GptcalcError, match=r"shorter than the 8-byte header length"):
        read_header(path)


def test_truncated_file_is_named(tmp_path: Path) -> None:
    layout = {"a": ("F32", (256,)), "b": ("F32", (256,))}
    path = write_safetensors(tmp_path / "t.safetensors", layout)
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 100)
    with pytest.raises(GptcalcError, match=r"tensor 'b' ends at data byte 2,048, past the end .*truncated"):
        read_header(path)


def test_huge_claimed_lengths_allocate_nothing(tmp_path: Path) -> None:
    """The length is checked against the cap and the file size before a byte is allocated for it."""
    sparse = tmp_path / "sparse.safetensors"
    with open(sparse, "wb") as handle:  # a 300 MB sparse file claiming a 200 MB header
        handle.write(struct.pack("<Q", 200_000_000))
        handle.truncate(300_000_000)
    short = write_raw(tmp_path / "short.safetensors", "{}", 0, 90_000_000)  # 90 MB claimed, 10 B present
    tracemalloc.start()
    for path in (sparse, short):
        with pytest.raises(GptcalcError):
            read_header(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1_000_000


def test_a_header_of_too_many_tensors_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """720,000 entries (7 values each: over calc.inputs.MAX_VALUES) in a 40 MB header: refused without
    the JSON ever being parsed, so in far less memory than the header itself (parsing 1.39M entries took
    1.7 GB)."""
    one = b'"t":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}'
    path = write_raw(tmp_path / "many.safetensors", b"{" + b",".join([one] * 720_000) + b"}", 2)
    tracemalloc.start()
    with pytest.raises(GptcalcError, match="720,000 tensor entries hold more than 5,000,000 values"):
        read_header(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2 * path.stat().st_size  # the raw header and no more: no parsed entries


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GptcalcError, match="cannot read"):
        read_header(tmp_path / "nope.safetensors")


layouts = st.dictionaries(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12).filter(lambda n: n != "__metadata__"),
    st.tuples(st.sampled_from(sorted(WIDTH)), st.lists(st.integers(0, 40), max_size=3).map(tuple)),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(layout=layouts)
def test_any_layout_the_format_allows_reads_back_exactly(tmp_path_factory: pytest.TempPathFactory, layout: dict) -> None:
    path = write_safetensors(tmp_path_factory.mktemp("h") / "x.safetensors", layout)
    header = read_header(path)
    assert {t.name: (t.dtype, t.shape) for t in header.tensors} == layout
    assert header.file_size - header.bytes_read == sum(numel(shape) * WIDTH[dtype] for dtype, shape in layout.values())
    assert header.bytes_read == 8 + header.header_length


def test_a_metadata_key_with_a_newline_stays_on_one_line(tmp_path: Path) -> None:
    """Found by tests/test_header_fuzz.py: the key is the file's text, so it is quoted, never printed raw."""
    path = write_raw(tmp_path / "k.safetensors", json.dumps({"__metadata__": {"a\nb": 1}}))
    with pytest.raises(GptcalcError, match=r"__metadata__: 'a\\nb': expected a string, got int") as caught:
        read_header(path)
    assert "\n" not in str(caught.value)
