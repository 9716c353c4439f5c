"""Rich tables for `inspect`, and the checkpoint lines `verify --checkpoint` prints.

The component table's rows add up to its parameter total; buffers and unrecognised tensors are
shown apart from it, never folded in. Bytes say exact B and both MiB/GiB and MB/GB.
"""

from __future__ import annotations

import re

from collections import defaultdict

from calc.render.markup import styled
from calc.render.table import Table

from calc.analysis.breakdown import label
from calc.checkpoint.report import CheckpointReport
from calc.checkpoint.sources import TensorRecord
from calc.units import bytes_with_units, count_with_units, human_bytes, human_count

__all__ = ["buffer_groups", "companion_lines", "component_table", "dtype_table", "inspect_lines", "problem_lines", "summary_lines",
           "untied_variant_lines", "verify_checkpoint_lines"]

MAX_LISTED = 10  # names listed before "... and N more"


def summary_lines(r: CheckpointReport) -> list[str]:
    """Where it came from, what reading it cost, which spec it was checked against."""
    files = f"{len(r.files)} file{'s' if len(r.files) != 1 else ''}"
    read = f"not measured for {files} (torch.load with mmap, or huggingface_hub over HTTP)" if r.bytes_read is None \
        else f"{bytes_with_units(r.bytes_read)} from {files} (headers only)"
    lines = [
        f"source: {r.source} ({r.kind})",
        f"tensors: {r.tensor_count:,} holding {bytes_with_units(r.tensor_bytes)}",
        f"bytes read: {read}",
        f"spec: {r.spec.name} from {r.spec_origin}",
    ]
    lines += [f"  assumed: {note}" for note in r.spec_notes]
    return lines


def component_table(r: CheckpointReport) -> Table:
    """Parameters by component; the rows add up to the total row."""
    b = r.breakdown
    table = Table(title=f"{r.source}: {b.total:,} parameters ({human_count(b.total)})")
    for column in ("component", "tensors", "parameters", "human", "dtypes"):
        table.add_column(column, justify="left" if column in ("component", "dtypes") else "right")
    for row in r.components:
        table.add_row(label(row.component), f"{row.tensors:,}", f"{row.parameters:,}", human_count(row.parameters),
                      ", ".join(row.dtypes))
    if b.tied:
        table.add_row(label("lm_head"), "0", "0 (tied to token embedding)", "", "")
    table.add_section()
    table.add_row(styled("bold", "total parameters"), "", styled("bold", f"{b.total:,}"), human_count(b.total), "")
    if r.buffers:
        table.add_row("buffers (not parameters)", f"{len(r.buffers):,}", f"{r.buffer_elements:,}",
                      human_count(r.buffer_elements), ", ".join(sorted({t.dtype for t in r.buffers})))
    if r.companions:
        elements = sum(c.tensor.numel for c in r.companions)
        table.add_row("quantisation scales (not parameters)", f"{len(r.companions):,}", f"{elements:,}",
                      human_count(elements), ", ".join(sorted({c.tensor.dtype for c in r.companions})))
    if r.unknown:
        elements = sum(t.numel for t in r.unknown)
        table.add_row(styled("red", "unrecognised"), f"{len(r.unknown):,}", f"{elements:,}", human_count(elements), "")
    if r.stored_elements != b.total:
        table.add_row("all stored elements", f"{r.tensor_count - len(r.aliases):,}", f"{r.stored_elements:,}",
                      human_count(r.stored_elements), "")
    return table


def dtype_table(r: CheckpointReport) -> Table:
    """Bytes on disk per dtype (buffers included) and the parameters stored in each."""
    table = Table(title="by dtype")
    for column in ("dtype", "parameters", "bytes on disk", "binary", "decimal"):
        table.add_column(column, justify="left" if column == "dtype" else "right")
    for dtype, nbytes in sorted(r.bytes_by_dtype.items(), key=lambda item: -item[1]):
        table.add_row(dtype, f"{r.params_by_dtype.get(dtype, 0):,}", f"{nbytes:,} B",
                      human_bytes(nbytes, binary=True), human_bytes(nbytes, binary=False))
    table.add_section()
    table.add_row("total", f"{r.breakdown.total:,}", f"{r.tensor_bytes:,} B",
                  human_bytes(r.tensor_bytes, binary=True), human_bytes(r.tensor_bytes, binary=False))
    return table


def buffer_groups(r: CheckpointReport) -> list[str]:
    """`h.{}.attn.bias x 12: [1, 1, 1024, 1024] F32` — one line per kind of buffer."""
    groups: dict[tuple[str, tuple[int, ...], str], int] = defaultdict(int)
    for tensor in r.buffers:
        groups[(re.sub(r"\.\d+\.", ".{}.", tensor.name, count=1), tensor.shape, tensor.dtype)] += 1
    return [f"{template} x {n}: {list(shape)} {dtype}" for (template, shape, dtype), n in groups.items()]


def companion_lines(r: CheckpointReport) -> list[str]:
    """Quantisation companions by scheme: how many, their dtype and bytes (calc.checkpoint.quant)."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for companion in r.companions:
        group = groups[(companion.scheme, companion.tensor.dtype)]
        group[0] += 1
        group[1] += companion.tensor.nbytes
    lines = [f"quantisation companions, stored but not parameters: {len(r.companions):,} tensors"] if groups else []
    return lines + [f"  {scheme} x {n:,}: {dtype}, {bytes_with_units(nbytes)}"
                    for (scheme, dtype), (n, nbytes) in groups.items()]


def problem_lines(r: CheckpointReport) -> list[str]:
    """Unrecognised names and shape mismatches, the first few by name."""
    lines: list[str] = []
    if r.unknown:
        lines.append(f"{len(r.unknown)} tensor name(s) not in the {r.layout} name map:")
        lines += [f"  {_describe(t)}" for t in r.unknown[:MAX_LISTED]]
        lines += _more(len(r.unknown))
    if r.mismatches:
        lines.append(f"{len(r.mismatches)} tensor(s) disagree with the spec {r.spec.name}:")
        lines += [f"  {m.describe()}" for m in r.mismatches[:MAX_LISTED]]
        lines += _more(len(r.mismatches))
    return lines


def inspect_lines(r: CheckpointReport) -> list[str]:
    """The notes under the tables: buffers, tying, shared memory, the index's total_size."""
    lines = []
    if r.buffers:
        lines.append(f"buffers (stored, not parameters): {count_with_units(r.buffer_elements)} elements")
        lines += [f"  {group}" for group in buffer_groups(r)]
        lines.append(f"parameters + buffers = {count_with_units(r.stored_elements)} stored elements")
    if r.breakdown.tied:
        lines.append(f"LM head tied to the token embedding: no lm_head.weight counted "
                     f"(untied it would add {count_with_units(r.breakdown.tied_saving)})")
    lines += untied_variant_lines(r)
    lines += [f"{alias}: the same memory as {owner} (counted once)" for alias, owner in r.aliases.items()]
    if r.index_total_size is not None:
        verdict = "= the tensors' bytes" if r.index_total_size == r.tensor_bytes \
            else f"!= the tensors' bytes {r.tensor_bytes:,} B (stale index?)"
        lines.append(f"index total_size: {r.index_total_size:,} B {verdict}")
    return lines + companion_lines(r) + problem_lines(r)


def untied_variant_lines(r: CheckpointReport) -> list[str]:
    """Why a checkpoint's head is counted though its config ties it (calc.checkpoint.report._or_untied)."""
    if not r.untied_variant:
        return []
    head = r.breakdown.components.get("lm_head", 0)
    return [f"the checkpoint stores the LM head apart ({count_with_units(head)}): read as the untied model its "
            "text_config declares; transformers ties that head to the embedding by the outer tie_word_embeddings"]


def _describe(t: TensorRecord) -> str:
    return f"{t.name} {list(t.shape)} {t.dtype}"


def _more(n: int) -> list[str]:
    return [f"  ... and {n - MAX_LISTED} more (--json lists all)"] if n > MAX_LISTED else []


def verify_checkpoint_lines(r: CheckpointReport) -> list[str]:
    """Under the verify table: what was read, what is stored but not counted, each disagreement."""
    read = "not measured" if r.bytes_read is None else f"{bytes_with_units(r.bytes_read)} read, headers only"
    lines = [f"checkpoint: {r.source} ({r.kind}; {r.tensor_count:,} tensors; {read})"]
    if r.buffers:
        lines.append(f"checkpoint buffers, stored but not parameters: {'; '.join(buffer_groups(r))}")
    lines += [f"{alias}: the same memory as {owner} (counted once)" for alias, owner in r.aliases.items()]
    lines += untied_variant_lines(r) + companion_lines(r) + problem_lines(r)
    if r.ok:
        lines.append(f"every checkpoint tensor has the name and shape {r.spec.name} implies")
    return lines
