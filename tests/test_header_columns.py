"""The bulk header check (`calc.checkpoint.header_columns`) never accepts what the strict path refuses.

The strict path is `calc.inputs.load_json` (a key given twice, an integer of more than 30 digits,
deep nesting: refused) followed by `safetensors_header.validate_header`, entry by entry. Every
hostile header below is one the bulk check must decline (None), for the strict path to name what
is wrong; and for any text at all, what the bulk check accepts the strict path reads identically.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calc.checkpoint import safetensors_header as sh
from calc.checkpoint.header_columns import as_columns, plain_columns
from calc.checkpoint.safetensors_header import DTYPE_BITS, read_header
from calc.errors import GptcalcError
from calc.inputs import load_json
from checkpoint_files import write_raw

F32_1 = '{"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}'
F32_2 = '{"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}'

# (header text, data size, what the strict path's one-line error says)
HOSTILE = {
    "tensor given twice": ('{"a": %s, "a": %s}' % (F32_1, F32_2), 8, "key 'a' is given twice"),
    "tensor given twice, first not an entry": ('{"a": 5, "a": %s}' % F32_1, 4, "key 'a' is given twice"),
    "tensor given twice, first an empty object": ('{"a": {}, "a": %s}' % F32_1, 4, "key 'a' is given twice"),
    "dtype given twice": ('{"a": {"dtype": "F16", "dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', 4,
                          "key 'dtype' is given twice"),
    "shape given twice": ('{"a": {"dtype": "F32", "shape": [2], "shape": [1], "data_offsets": [0, 4]}}', 4,
                          "key 'shape' is given twice"),
    "metadata key given twice": ('{"__metadata__": {"format": "pt", "format": "np"}, "a": %s}' % F32_1, 4,
                                 "key 'format' is given twice"),
    "metadata given twice": ('{"__metadata__": {"format": "pt"}, "__metadata__": {}, "a": %s}' % F32_1, 4,
                             "key '__metadata__' is given twice"),
    "dtype twice, once unicode-escaped": (
        '{"a": {"\\u0064type": "F16", "dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', 4, "given twice"),
    "tensor twice, once unicode-escaped": ('{"\\u0061": %s, "a": %s}' % (F32_1, F32_2), 8, "given twice"),
    "bool dimension": ('{"a": {"dtype": "F32", "shape": [true], "data_offsets": [0, 4]}}', 4, "list of integers"),
    "false dimension": ('{"a": {"dtype": "F32", "shape": [false, 3], "data_offsets": [0, 0]}}', 0, "list of integers"),
    "bool offset": ('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [false, true]}}', 1, "[begin, end] integers"),
    "float dimension": ('{"a": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}}', 4, "list of integers"),
    "float dimension beside a 0": ('{"a": {"dtype": "F32", "shape": [0, 2.5], "data_offsets": [0, 0]}}', 0,
                                   "list of integers"),
    "NaN dimension": ('{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}', 4, "NaN is not a JSON value"),
    "float offset": ('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4]}}', 4, "[begin, end] integers"),
    "two negative dimensions": ('{"a": {"dtype": "F32", "shape": [-1, -1], "data_offsets": [0, 4]}}', 4,
                                "negative dimension"),
    "huge dimension beside a 0": ('{"a": {"dtype": "F32", "shape": [%d, 0], "data_offsets": [0, 0]}}' % 10**30, 0,
                                  "integer of 31 digits"),
    "integer past Python's limit": ('{"a": {"dtype": "F32", "shape": [%s, 0], "data_offsets": [0, 0]}}' % ("9" * 5000),
                                    0, "integer of 5,000 digits"),
    "string dimension": ('{"a": {"dtype": "F32", "shape": ["ab"], "data_offsets": [0, 4]}}', 4, "list of integers"),
    "string shape": ('{"a": {"dtype": "F32", "shape": "", "data_offsets": [0, 4]}}', 4, "expected a list"),
    "list inside a shape": ('{"a": {"dtype": "F32", "shape": [[1]], "data_offsets": [0, 4]}}', 4, "list of integers"),
    "object inside a shape": ('{"a": {"dtype": "F32", "shape": [{}], "data_offsets": [0, 4]}}', 4, "list of integers"),
    "string offsets of two characters": ('{"a": {"dtype": "F32", "shape": [1], "data_offsets": "04"}}', 4,
                                         "[begin, end] integers"),
    "three offsets": ('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}', 4, "[begin, end] integers"),
    "null dtype": ('{"a": {"dtype": null, "shape": [1], "data_offsets": [0, 4]}}', 4, "unknown dtype None"),
    "list dtype": ('{"a": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}', 4, "unknown dtype"),
}


def strict(text: str, data_size: int) -> tuple:
    """What the strict path reads: (columns, metadata), or it raises."""
    tensors, metadata = sh.validate_header(load_json(text, "h"), data_size, "h")
    return as_columns(tensors), metadata


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_headers_take_the_strict_path_and_its_error(tmp_path: Path, case: str) -> None:
    text, data_size, message = HOSTILE[case]
    assert plain_columns(text.encode(), data_size) is None
    with pytest.raises(GptcalcError) as caught:
        read_header(write_raw(tmp_path / "h.safetensors", text, data_size))
    assert "\n" not in str(caught.value) and message in str(caught.value)


# Valid headers the bulk check may decline (then the strict path reads them) or accept: the same either way.
VALID = {
    "names holding the key words": '{"dtype": %s, "shape.data_offsets": %s}' % (F32_1, F32_2),
    "a name with a colon": '{"a:b": %s}' % F32_1,
    "a name saying true": '{"true": %s}' % F32_1,
    "a unicode-escaped key": '{"a": {"\\u0064type": "F32", "shape": [1], "data_offsets": [0, 4]}}',
    "a name with a dash": '{"a-b": %s}' % F32_1,
    "a name with a lone surrogate escape": '{"a\\ud800": %s}' % F32_1,  # json.loads reads it, from_json refuses it
    "offsets out of order": '{"b": %s, "a": %s}' % (F32_2, F32_1),
    "zero-size tensors": '{"e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [0, 0]}, "a": %s}' % F32_1,
    "a fourth key": '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}}',
    "a fourth key holding an object": '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": {"dtype": 1}}}',
    "spaces around colons": '{"a" : {"dtype" :"F32","shape":[1] , "data_offsets": [0,4]}}',
}


@pytest.mark.parametrize("case", sorted(VALID))
def test_valid_headers_read_the_same_on_either_path(case: str) -> None:
    text = VALID[case]
    data_size = max(end for info in json.loads(text).values() for end in info["data_offsets"][1:])
    plain = plain_columns(text.encode(), data_size)
    assert plain is None or plain == strict(text, data_size)
    assert sh.parse_header(text.encode(), data_size, "h") == strict(text, data_size)


DIMS = ["1", "2", "3", "0", "-1", "true", "1.0", '"2"', "[2]", "{}"]
names = st.sampled_from(["a", "b", "c", "\\u0061", "a:b", "dtype", "__metadata__"])
# (dtype, dimensions, an extra key written into the entry, a shift of its end offset)
tensors = st.tuples(st.sampled_from(["F32", "U8", "F4"]), st.lists(st.sampled_from(DIMS), max_size=2),
                    st.sampled_from([None, None, None, "dtype", "shape", "\\u0064type", "extra"]),
                    st.sampled_from([0, 0, 0, 1, -4]))


def render(members: list[tuple[str, tuple]]) -> tuple[str, int]:
    """A header of tensors laid out back to back, as far as their dimensions are numbers, and its data size."""
    offset, parts = 0, []
    for name, (dtype, dims, extra, shift) in members:
        ints = [int(d) for d in dims if d.lstrip("-").isdigit()]
        size = max(0, DTYPE_BITS[dtype] * math.prod(ints) // 8)
        extra_key = f', "{extra}": [1]' if extra else ""
        parts.append(f'"{name}": {{"dtype": "{dtype}", "shape": [{", ".join(dims)}]{extra_key}, '
                     f'"data_offsets": [{offset}, {offset + size + shift}]}}')
        offset += size + shift
    return "{" + ", ".join(parts) + "}", offset


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members=st.lists(st.tuples(names, tensors), max_size=4), metadata=st.sampled_from(["", '"__metadata__": {}, ',
       '"__metadata__": {"format": "pt", "format": "np"}, ', '"__metadata__": {"format": 1}, ']))
def test_what_the_bulk_check_accepts_the_strict_path_reads_identically(members: list, metadata: str) -> None:
    text, data_size = render(members)
    text = "{" + metadata + text[1:]
    plain = plain_columns(text.encode(), data_size)
    if plain is not None:
        assert plain == strict(text, data_size)
    else:
        with contextlib.suppress(GptcalcError):
            strict(text, data_size)  # the strict path answers, one way or the other
