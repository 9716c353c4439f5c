"""Rich tables for `kvcache` and `memory`.

Every byte figure is printed exact (`1,342,177,280 B`) next to both unit systems, binary (GiB,
1024^3) and decimal (GB, 10^9), because a "1.34 G" that does not say which is the mistake users
complain about. The weights table's rows add up to its total, and total = weights + KV cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

from calc.render.markup import styled
from calc.render.table import Table

from calc.analysis.breakdown import label
from calc.analysis import memory as mem  # its names load on first use (calc/analysis/memory/__init__.py)
from calc.spec.model import ModelSpec
from calc.units import bytes_with_units, human_bytes

if TYPE_CHECKING:  # `kvcache` draws its tables without loading what only `memory` computes
    from calc.analysis.memory import Budget, BudgetSpec, Inference, KVCache, KVLayers, StoredWeights, Weights
    from calc.analysis.memory.startup import StartupBudget
    from calc.analysis.memory.engines import KVPool

__all__ = ["budget_lines", "context_note", "gpu_table", "gqa_table", "headline", "inference_notes", "inference_table", "kv_notes",
           "kvcache_table", "served_cache_lines", "server_lines", "startup_table", "weights_table"]


def _columns(table: Table, *headers: str) -> Table:
    for header in headers:
        table.add_column(header, justify="left" if header in ("model", "attention", "component", "variant", "GPU", "marketed", "") else "right")
    return table


def _units(n: int) -> tuple[str, str, str]:
    """Exact bytes, binary units, decimal units."""
    return f"{n:,} B", human_bytes(n, binary=True), human_bytes(n, binary=False)


KV_TITLE = ("KV cache: n_layers x (K + V elements) x tokens kept x batch x bytes/element "
            "(sliding-window layers keep at most their window; MLA: latent + rope key)")
STATE_TITLE = ("cache: K and V rows grow with every token kept (a compressed kind: one row per ratio tokens); conv, "
               "recurrent and compressor states are fixed per sequence "
               "(n_layers x elements x batch x bytes/element, whatever the length)")


def kvcache_table(caches: Iterable[KVCache]) -> Table:
    """One row per model, or per layer kind (K and V rows, then fixed states) and then the model's total."""
    caches = list(caches)
    table = _columns(Table(title=STATE_TITLE if any(kv.states for kv in caches) else KV_TITLE),
                     "model", "attention", "layers", "KV heads x head_dim", "window", "tokens kept", "batch", "dtype",
                     "bytes/token", "total", "GiB units", "GB units")
    for kv in caches:
        if len(kv.layers) == 1 and not kv.states:
            kind = kv.layers[0]
            table.add_row(kv.model, *_kv_shape(kind), f"{kind.tokens(kv.seq):,}", f"{kv.batch:,}", kv.dtype,
                          f"{kv.bytes_per_token:,}", *_units(kv.total_bytes))
            continue
        for kind in kv.layers:  # each kind of layer's share, then the model's total
            table.add_row("", *_kv_shape(kind), f"{kind.tokens(kv.seq):,}", "", "",
                          f"{kind.bytes_per_token(kv.format):,}", *_units(kv.kind_bytes(kind)), style="dim")
        for state in kv.states:  # fixed per sequence: no bytes per token
            table.add_row("", f"{state.name} state", _layers_cell(state.n_layers, state.block),
                          f"{state.elements:,} per seq", "-", "fixed", "", state.format(kv.format).name, "0",
                          *_units(state.bytes_per_sequence(kv.format) * kv.batch), style="dim")
        table.add_row(kv.model, kv.attention_kind, str(kv.n_layers + _state_layers(kv)), "", "",
                      f"seq {kv.seq:,}", f"{kv.batch:,}", kv.dtype, f"{kv.bytes_per_token:,}", *_units(kv.total_bytes))
        table.add_section()
    return table


def _state_layers(kv: KVCache) -> int:
    """Layers that keep a state but no K and V rows (a layer's conv and recurrent states count once)."""
    rows = {kind.block for kind in kv.layers}
    return sum({s.block: s.n_layers for s in kv.states if s.block not in rows}.values())


def _layers_cell(n_layers: int, block: str) -> str:
    return f"{n_layers} ({block})" if block not in ("block", "decoder") else str(n_layers)


def _kv_shape(kind: KVLayers) -> tuple[str, str, str, str]:
    """attention, layers, KV heads x head_dim, window; MLA caches a latent and one rope key instead of heads."""
    layers = _layers_cell(kind.n_layers, kind.block)
    window = f"{kind.window:,}" if kind.window else f"1 per {kind.ratio:,}" if kind.ratio > 1 else "-"
    if kind.kind == "MLA" and kind.expanded is not None:
        return kind.kind, layers, f"latent {kind.k}", window
    if kind.kind == "MLA":
        return kind.kind, layers, f"expanded: K {kind.k}, V {kind.v}", window
    if kind.kv_heads_per_gpu is None:  # one key per token for every head (DSA's indexer), whole on every GPU
        return kind.kind, layers, f"key {kind.k} (all {kind.n_heads} heads)", window
    heads = f"{kind.n_kv_heads}/{kind.n_heads}"
    if kind.kv_heads_per_gpu is not None and kind.kv_heads_per_gpu != kind.n_kv_heads:
        heads += f" ({kind.kv_heads_per_gpu}/GPU)"
    return kind.kind, layers, f"{heads} x {kind.head_dim}", window


def _state_names(kv: KVCache) -> str:
    """The kinds of state the model keeps, each once: "conv, recurrent", "compressor window, ..."."""
    return ", ".join(dict.fromkeys(state.name for state in kv.states))


def kv_notes(kv: KVCache) -> list[str]:
    """What the table's total assumes, in words: the format's width, windows, MLA, sinks, tensor parallelism."""
    name = kv.model
    notes = [] if kv.format.block == 1 and kv.format.bits_per_value == 16 else [f"{name}: KV {kv.format.describe()}"]
    windowed = [k for k in kv.layers if k.window and k.window < kv.seq]
    if windowed:
        caps = ", ".join(f"{k.n_layers} {k.block} layers keep {k.window:,}" for k in windowed)
        notes.append(f"{name}: sliding window, a rolling buffer ({caps} of {kv.seq:,} tokens); an engine that "
                     f"allocates all {kv.seq:,} positions on every layer holds {bytes_with_units(kv.unrolled_bytes)}")
    if kv.expanded_bytes is not None:
        notes.append(f"{name}: MLA caches one latent per layer per token for all heads (vLLM, SGLang, llama.cpp); "
                     f"caching expanded per-head K and V instead (transformers' eager attention) takes "
                     f"{bytes_with_units(kv.expanded_bytes)}, {kv.expanded_bytes // kv.total_bytes}x more")
    if any(k.sinks for k in kv.layers):
        notes.append(f"{name}: attention sinks are one learned logit per head (parameters): nothing cached")
    if kv.states:
        notes.append(f"{name}: {bytes_with_units(kv.state_bytes)} of fixed states ({_state_names(kv)}), "
                     f"{bytes_with_units(kv.state_bytes_per_sequence)} per sequence at any length: "
                     + ("only the attention layers grow with the context" if kv.layers else "nothing grows with the context"))
    if kv.tp > 1:
        notes.append(f"{name}: per GPU under --tp {kv.tp}: KV heads split across GPUs (replicated when tp exceeds "
                     f"them); rows with no heads to split (an MLA latent, DeepSeek-V4's K = V row and compressed "
                     f"rows) are held whole on every GPU")
    return notes


def gqa_table(models: Iterable[Mapping[str, KVCache]]) -> Table:
    """For each model its cache under MHA, its own setting and MQA, with the saving against MHA."""
    table = _columns(Table(title="KV cache under MHA, the model's own attention, and MQA"),
                     "model", "variant", "KV heads", "bytes/token", "total", "GiB units", "GB units", "saving vs MHA")
    for variants in models:
        mha = variants["MHA"].total_bytes
        for name, kv in variants.items():
            label = f"{kv.attention_kind} (model's own)" if name == "model" else name
            table.add_row(kv.model if name == "MHA" else "", label, f"{kv.n_kv_heads}/{kv.n_heads}",
                          f"{kv.bytes_per_token:,}", *_units(kv.total_bytes), f"{mha // kv.total_bytes}x")
        table.add_section()
    return table


def weights_table(result: Inference) -> Table:
    """Bytes per component at the weights' dtype; the rows add up to the total row."""
    w = result.weights
    scales = f", +1 {mem.SCALE_BITS}-bit scale per {w.group_size} weights" if w.group_size else ""
    table = _columns(Table(title=f"{w.model}: weights as {w.describe()}{scales}{_where(result, True)}"),
                     "component", "params", "bytes", "GiB units", "GB units")
    for name, size in w.components.items():
        table.add_row(label(name), f"{w.params[name]:,}", *_units(size))
    table.add_section()
    table.add_row(styled("bold", "weights total"), f"{w.total_params:,}", *_units(w.total_bytes), style="bold")
    return table


def inference_table(result: Inference) -> Table:
    """Weights + KV cache = what inference keeps in memory (activations and overhead excluded)."""
    kv = result.kv
    table = _columns(Table(title=f"{kv.model}: inference memory at seq {kv.seq:,} x batch {kv.batch:,}{_where(result, True)}"),
                     "", "bytes", "GiB units", "GB units")
    table.add_row(f"weights ({result.weights.dtype})", *_units(result.weights.total_bytes))
    table.add_row(f"KV cache ({kv.dtype}, {kv.bytes_per_token:,} B/token)", *_units(kv.total_bytes))
    table.add_section()
    table.add_row(styled("bold", "total"), *_units(result.total_bytes), style="bold")
    return table


# The cards `memory` shows when no --budget names one and --all is not given: one of each size people rent or own.
SHORT_LIST = ("RTX 4090", "RTX 5090", "L40S", "A100-80GB", "H100-80GB", "H200", "B200", "MI300X", "B300")


def shown_gpus(target: BudgetSpec | None, show_all: bool) -> tuple[mem.GPU, ...]:
    """The GPU table's rows: every card with --all, the budget's card when it names one, else SHORT_LIST."""
    if show_all:
        return mem.GPUS
    if target is not None and target.gpu is not None:
        return (target.gpu,)
    return tuple(gpu for gpu in mem.GPUS if gpu.name in SHORT_LIST)


def gpu_table(result: Inference, gpus: Iterable[mem.GPU] | None = None) -> Table:
    """Does weights + KV cache fit in each GPU's reported memory, and what is left over."""
    table = _columns(Table(title=f"fits{_where(result, True)}? (memory = the total the driver reports; GB = 10^9 B, GiB = 2^30 B)"),
                     "GPU", "marketed", "memory", "GiB units", "GB units", "fits", "headroom")
    for gpu in mem.GPUS if gpus is None else gpus:
        left = result.headroom(gpu.bytes)
        verdict = styled("green", "yes") if left >= 0 else styled("red", "no")
        sign = "" if left >= 0 else "-"
        table.add_row(gpu.name, gpu.marketed, *_units(gpu.bytes), verdict, f"{sign}{human_bytes(abs(left))}")
    return table


def inference_notes(result: Inference) -> list[str]:
    """What the total leaves out, said plainly, and the assumptions behind the weights."""
    w = result.weights
    notes = [
        "not included: activations, the CUDA context, framework overhead (allocator cache, fragmentation)",
        "so 'fits: yes' means weights + KV cache fit; the headroom must still hold all of the above",
        f"prefill logits, if computed in fp32 for every prompt position (batch x seq x vocab_size x 4 B): "
        f"{result.logits_bytes:,} B ({human_bytes(result.logits_bytes)}), not added above",
        _weights_note(w),
        *kv_notes(result.kv),
        *_offload_notes(result),
    ]
    if w.group_size:
        notes.append(f"group quantization: one {mem.SCALE_BITS}-bit scale per {w.group_size} weights "
                     f"(+{mem.SCALE_BITS / w.group_size:g} bits per weight); zero points are not counted")
    elif w.format.name in ("int8", "int4"):
        notes.append("no quantization scales counted: add --group-size 128 for GPTQ/AWQ-style fp16 scales")
    return notes


def _blocks(n: int) -> str:
    return "layer 0" if n == 1 else f"layers 0-{n - 1}"


def _offload_notes(result: Inference) -> list[str]:
    """Where the offloaded experts are, and what each decoded token reads of them from system RAM."""
    moved = result.offload
    if moved is None:
        return []
    return [f"system RAM: the routed experts of {_blocks(moved.layers)}, {bytes_with_units(moved.weights.total_bytes)} "
            f"(llama.cpp --n-cpu-moe {moved.layers}); the GPU figures above leave them out, while the router, "
            f"shared experts, attention and KV cache stay on the GPU",
            f"decode: each token reads its top-k experts of those layers from system RAM, "
            f"{bytes_with_units(moved.read_per_token.total_bytes)} per token, at the CPU's memory bandwidth"]


def _weights_note(w: Weights) -> str:
    """How the weights' bytes were found: a plain dtype, a scheme's layout, or a checkpoint's headers."""
    if w.stored is not None:
        return (f"weights: every tensor's stored bytes from {w.stored.source}'s headers, scales and packed "
                f"tensors placed with their weight{_left_out(w.stored)}")
    if w.scheme is not None:
        return f"{w.scheme.name}: quantised matrices laid out as in {w.scheme.source}; 16-bit: {w.scheme.keeps}"
    return f"every parameter is stored as {w.format.describe()}, rounded up to whole bytes per component"


def _left_out(stored: StoredWeights) -> str:
    """'; not counted: buffers 12 B, 2 tensors no weight owns (a.b, c) 64 B', or ''."""
    parts = [f"buffers {stored.buffer_bytes:,} B"] if stored.buffer_bytes else []
    if stored.not_placed:
        names = ", ".join(t.name for t in stored.not_placed[:3]) + (", ..." if len(stored.not_placed) > 3 else "")
        parts.append(f"{len(stored.not_placed)} tensors no weight owns ({names}) "
                     f"{sum(t.nbytes for t in stored.not_placed):,} B")
    return f"; not counted: {', '.join(parts)}" if parts else ""


def _where(result: Inference, short: bool = False) -> str:
    """'' on one GPU; ' per GPU (busiest of 8: tp 4 x pp 2)' under a layout."""
    layout = result.layout
    if layout.gpus == 1:
        return " on the GPU" if result.offload else ""
    if short:
        return " per GPU"
    ep = f", ep {layout.ep}" if layout.ep > 1 else ""
    return f" per GPU (busiest of {layout.gpus}: tp {layout.tp} x pp {layout.pp}{ep})"


def gpus_note(shown: int) -> str:
    """Says how much of the catalog the GPU table shows, and how to see the rest."""
    total = len(mem.GPUS)
    return "" if shown == total else f"GPUs: {shown} of the {total} in the catalog shown; --all shows every one"


def kvcache_headline(kv: KVCache) -> str:
    """The answer first: one model's cache in total, per token and for what."""
    return (f"{kv.model}: KV cache " + styled("bold", human_bytes(kv.total_bytes)) + f" ({kv.total_bytes:,} B) at seq "
            f"{kv.seq:,} x batch {kv.batch:,} in {kv.dtype}, {kv.bytes_per_token:,} B per token"
            + (f" per GPU (tp {kv.tp})" if kv.tp > 1 else ""))


def served_cache_lines(answer: Any) -> list[str]:
    """kvcache's answer first: the cache on one GPU, and where a budget or server was asked for,
    memory's verdict before it and the server's own lines after it."""
    served = answer.served
    if served is None:
        return [kvcache_headline(answer.cache)]
    pp = served.inference.layout.pp
    cache = kvcache_headline(answer.cache) + (f", the busiest of {pp} pipeline stages" if pp > 1 else "")
    verdict = headline(served.inference, served.budget, served.target) if served.budget and served.target else []
    note = ["  " + served.engine_note] if served.engine_note else []
    return [*verdict, cache, *server_lines(served.engine, served.server), *note]


def server_lines(engine: str | None, lines: Iterable[str]) -> list[str]:
    """The lines the server prints at start-up, each introduced as its own."""
    return [f"{engine} will print: " + styled("bold", line) for line in lines]


def headline(result: Inference, solved: Budget | None, target: BudgetSpec | None) -> list[str]:
    """The answer first: what it takes (per GPU), whether it fits the budget, and how far it stretches."""
    kv, w = result.kv, result.weights
    need = (f"{kv.model} at seq {kv.seq:,} x batch {kv.batch:,}{_where(result)}: weights {human_bytes(w.total_bytes)} "
            f"+ KV cache {human_bytes(kv.total_bytes)} = " + styled("bold", human_bytes(result.total_bytes))
            + f" ({result.total_bytes:,} B)")
    if result.offload is not None:
        need += f"; routed experts of {_blocks(result.offload.layers)} in system RAM: {human_bytes(result.offload.weights.total_bytes)}"
    if solved is None or target is None:
        return [need]
    left = result.headroom(target.bytes_per_gpu)
    verdict = (styled("bold green", "fits") + f" on {target.label}, {human_bytes(left)} to spare" if left >= 0 else
               styled("bold red", "does not fit") + f" on {target.label}: {human_bytes(-left)} short")
    what = "longest context at batch" if solved.solve_for == "seq" else "largest batch at seq"
    whose = f" ({solved.engine.engine.name}'s pool)" if solved.engine else ""
    return [verdict + f"; {what} {solved.fixed:,}{whose}: " + styled("bold", f"{solved.answer:,}"), need]


def budget_lines(budget: Budget, label: str) -> list[str]:
    """The answer to --budget in words, with the arithmetic that produced it."""
    what, fixed = ("longest context", f"batch {budget.fixed:,}") if budget.solve_for == "seq" else \
        ("largest batch", f"seq {budget.fixed:,}")
    lines = [f"budget {label}: {budget.budget_bytes:,} B per GPU ({human_bytes(budget.budget_bytes)}, "
             f"{human_bytes(budget.budget_bytes, binary=False)})"]
    if budget.limited_by == "weights":
        lines.append(f"the weights alone ({budget.weights_bytes:,} B) exceed the budget by "
                     f"{-budget.free_bytes:,} B: nothing fits")
        return lines
    if budget.engine is not None:
        lines.append(_pool_line(budget.engine))
    else:
        lines.append(f"left for the KV cache after weights: {budget.free_bytes:,} B; "
                     f"{budget.kv_bytes_per_token:,} B per token per sequence")
    allows = "any length (the cache stops growing at the window)" if budget.by_memory is None else f"{budget.by_memory:,}"
    limit = (f"limited by the model's context, n_positions = {budget.context:,}; memory allows {allows}"
             if budget.limited_by == "context" else "limited by memory")
    lines.append(styled("bold", f"{what} at {fixed}: {budget.answer:,}") + f" ({limit})")
    return lines


def _pool_line(pool: KVPool) -> str:
    """How the engine's pool answers the largest batch: its pages, and the pages one request takes."""
    name = pool.engine.name
    if name == "vllm":
        backend = f"; attention backend {pool.backend.backend}" if pool.backend else ""
        per = (f"{pool.blocks:,} blocks of {pool.block_bytes:,} B ({pool.block} tokens{backend}), "
               f"{pool.blocks_per_request:,} per request of {pool.max_model_len:,} tokens")
    else:
        per = f"{pool.tokens:,} token slots, {pool.max_model_len:,} per request"
    states = f", {pool.mamba.slots:,} Mamba state slots" if pool.mamba else ""
    cap = f", at most {pool.max_running:,} running (its max_running_requests)" if pool.max_running else ""
    return (f"{name}'s KV pool{pool.rank_label}: {pool.kv_memory:,} B at {pool.bytes_per_token:,} B per token as {name} "
            f"lays it out: {per}{states}; the largest batch is the whole requests it holds (its maximum concurrency, "
            f"rounded down){cap}")


def seq_note(seq: int | None) -> str | None:
    """What a --seq written with a unit was read as: "seq 128k = 131,072 tokens (k = 1,024)"."""
    text = getattr(seq, "text", None)
    return f"seq {text} = {seq:,} tokens (k = 1,024)" if text else None


def context_note(spec: ModelSpec, seq: int | None) -> str | None:
    """A warning when --seq asks for more tokens than the model was trained to attend over."""
    if seq is None or seq <= spec.n_positions:
        return None
    return f"note: seq {seq:,} is longer than {spec.name}'s context ({spec.n_positions:,})"


def startup_table(budget: StartupBudget, rank: str = "") -> Table:
    """The engine's own budget on one GPU: what it may use, each term it takes out, and how each was found;
    `rank`: the pipeline rank's label where each rank has its own budget (KVPool.rank_label)."""
    table = _columns(Table(title=f"{budget.engine} on one {budget.gpu}{rank}: the KV pool, term by term"),
                     "", "bytes", "GiB units", "how", "set with")
    table.add_row("total (as CUDA reports it)", *_units(budget.total)[:2], "catalog" if "nvidia-smi" in budget.total_source
                  else "published log", "--budget")
    before = budget.before_share
    for term in before:
        table.add_row(f"- {term.label}", *_units(term.bytes)[:2], term.how, term.option)
    share = "x " + f"{budget.fraction}" + (" of what is left" if before else "")
    table.add_row(f"usable ({share})", *_units(budget.usable)[:2], budget.fraction_how.split(":")[0],
                  budget.fraction_option)
    for term in budget.terms:
        if term not in before:
            sign = "- " if term in budget.taken else "  (outside the share) "
            table.add_row(f"{sign}{term.label}", *_units(term.bytes)[:2], term.how, term.option)
    table.add_section()
    table.add_row(styled("bold", "= KV pool"), *_units(budget.kv_memory)[:2], "", "--kv-memory", style="bold")
    return table


def tower_notes(spec: Any, pictures: Any, text_only: bool) -> list[str]:
    """What the weights hold of a multimodal model's towers, and what --image costs."""
    notes = []
    if spec.towers:
        kept = "left out (--text-only)" if text_only else (
            "in the weights: encoder layers split across --tp GPUs as vLLM does by default "
            "(mm_encoder_tp_mode weights), embeddings, norms and projectors whole on each; 16-bit under --quant")
        notes.append(f"{', '.join(spec.towers)} tower {kept}")
    if spec.uncounted:
        notes.append(f"PARTIAL: the {', '.join(spec.uncounted)} are not counted, so their weights are missing here")
    if pictures is not None:
        t = pictures.tokens
        notes.append(f"{pictures.count} image(s) resized to {t.width}x{t.height}: {t.patches:,} patches, {t.image_tokens:,} "
                     f"image tokens + {t.special_tokens} special = {t.tokens:,} tokens each; {pictures.total_tokens:,} tokens "
                     f"in the context, KV cache {bytes_with_units(pictures.kv_bytes)} at {pictures.kv_dtype} "
                     "(part of --seq when --seq counts them)")
    return notes
