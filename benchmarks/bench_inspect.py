"""`inspect` at scale: time against the number of tensors, next to a bare read of the same headers.

Goal (issues 14 and 26): time linear in tensors with a small constant; a 100,000-tensor sparse
checkpoint within 2x a bare read-and-`json.loads` of its headers, with its config.json or, for one
file, without (the spec then inferred from the tensor names, `calc/checkpoint/infer.py`).

The checkpoints are Llama-layout, tiny widths (the header, not the weights, is what costs), in three
layouts: one file and 10 shards with the index `save_pretrained` writes
(`json.dumps(index, indent=2, sort_keys=True)`), each with a config.json, and one file alone
("no config"). The files are sparse: a few MB of disk at most.

The bare read is what any reader of the checkpoint must do, as a plain Python program does it, in
a fresh process (the collector on, start-up excluded, its best of 3 runs): `json.loads` of the
index, to learn the shards (a directory may hold other .safetensors files:
mistralai/Mistral-7B-Instruct-v0.3 ships `consolidated.safetensors` beside its shards), then of each
shard's header. `headers alone` leaves the index out, for comparison.

`read_checkpoint(dir)` (what `gptcalc inspect DIR` computes: validate every header and the index,
name every tensor, group by component, check shapes against the config) is timed in this process,
its imports done, also as its best of 3 runs; each sample follows a bare one. `ratio` is the median
over the samples of the two times' ratio, `min ratio` the ratio of the fastest of each (a shared
machine's noise moves both). End to end, fresh processes: `gptcalc inspect DIR` against `python -c`
doing the bare read once, start-up and imports included, fastest of N each.
Run: python benchmarks/bench_inspect.py [N]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from bench_checkpoint import layer, write_shard  # noqa: E402  (the sparse shard writer, shared)
from calc.checkpoint.report import read_checkpoint  # noqa: E402

SHARDS, D, KV, FF, VOCAB = 10, 64, 64, 128, 1000
INDEX = "model.safetensors.index.json"
READER = """
import json, struct, sys, time
from pathlib import Path


def read(root, headers_only):
    index = root / "model.safetensors.index.json"
    if not index.exists():
        shards = ["model.safetensors"]
    elif headers_only:
        shards = sorted(path.name for path in root.glob("model-*.safetensors"))
    else:
        shards = sorted(set(json.loads(index.read_bytes())["weight_map"].values()))
    for shard in shards:
        with open(root / shard, "rb") as handle:
            (n,) = struct.unpack("<Q", handle.read(8))
            json.loads(handle.read(n))
"""
BARE_TIMED = READER + """
root, headers_only, times = Path(sys.argv[1]), len(sys.argv) > 2, []
for _ in range(3):
    start = time.perf_counter()
    read(root, headers_only)
    times.append(time.perf_counter() - start)
print(min(times))
"""
BARE_ONCE = READER + "read(Path(sys.argv[1]), False)\n"


def write_checkpoint(root: Path, n_layers: int, shards: int = SHARDS, config: bool = True) -> int:
    """A Llama-layout checkpoint of `n_layers` tiny layers, in one file or `shards` shards, with its
    config.json or without (the spec then inferred from the tensor names); its tensor count."""
    parts: list[dict] = [{} for _ in range(shards)]
    parts[0]["model.embed_tokens.weight"] = ("F16", [VOCAB, D])
    for i in range(n_layers):
        parts[i * shards // n_layers].update(layer(i, D, KV, FF))
    parts[-1].update({"model.norm.weight": ("F16", [D]), "lm_head.weight": ("F16", [VOCAB, D])})
    if shards == 1:
        write_shard(root / "model.safetensors", parts[0])
    else:
        weight_map, total = {}, 0
        for i, tensors in enumerate(parts, start=1):
            name = f"model-{i:05d}-of-{shards:05d}.safetensors"
            total += write_shard(root / name, tensors)
            weight_map.update(dict.fromkeys(tensors, name))
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (root / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    settings = {"model_type": "llama", "vocab_size": VOCAB, "hidden_size": D, "intermediate_size": FF,
              "num_hidden_layers": n_layers, "num_attention_heads": 4, "num_key_value_heads": 4,
              "max_position_embeddings": 128, "tie_word_embeddings": False}
    if config:
        (root / "config.json").write_text(json.dumps(settings))
    return sum(map(len, parts))


def bare_read(root: Path, headers_only: bool = False) -> float:
    """Seconds a fresh Python process takes to read `root`'s headers, as it timed itself (its best of 3)."""
    command = [sys.executable, "-c", BARE_TIMED, str(root), *(["headers only"] if headers_only else [])]
    return float(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def timed(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def paired(root: Path, runs: int) -> dict[str, list[float]]:
    """After one warm-up of each: a bare read, the headers alone, read_checkpoint, `runs` times over."""
    steps = {"bare": lambda: bare_read(root), "headers": lambda: bare_read(root, True),
             "ours": lambda: min(timed(lambda: read_checkpoint(str(root))) for _ in range(3))}
    for step in steps.values():
        step()  # imports, page cache
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(runs):
        for name, step in steps.items():
            times[name].append(step())
    return times


def process_time(command: list[str], runs: int) -> float:
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return min(timed(lambda: subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)) for _ in range(runs))


def main(runs: int) -> None:
    print(f"{'layout':>9} {'tensors':>8} {'bare read':>10} {'read_checkpoint':>16} {'ratio':>6} {'min ratio':>9} "
          f"{'headers alone':>13} {'us/tensor':>9}   {'bare process':>12} {'gptcalc inspect':>15} {'ratio':>6}"
          f"   (ms, median of {runs}; processes: fastest)")
    for shards, config in ((SHARDS, True), (1, True), (1, False)):
        for n_layers in (99, 999, 9_999):
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                tensors = write_checkpoint(root, n_layers, shards, config)
                times = paired(root, runs)
                bare_proc = process_time([sys.executable, "-c", BARE_ONCE, str(root)], runs)
                ours_proc = process_time([sys.executable, "-m", "calc", "inspect", str(root)], runs)
            bare, ours = statistics.median(times["bare"]), statistics.median(times["ours"])
            ratio = statistics.median(o / b for o, b in zip(times["ours"], times["bare"]))
            alone = statistics.median(o / h for o, h in zip(times["ours"], times["headers"]))
            print(f"{'sharded' if shards > 1 else 'one file' if config else 'no config':>9} {tensors:>8,} {bare * 1e3:>8.1f}ms {ours * 1e3:>14.1f}ms "
                  f"{ratio:>5.2f}x {min(times['ours']) / min(times['bare']):>8.2f}x "
                  f"{(f'{alone:.2f}x' if shards > 1 else '-'):>13} {ours / tensors * 1e6:>9.1f}   "
                  f"{bare_proc * 1e3:>10.1f}ms {ours_proc * 1e3:>13.1f}ms {ours_proc / bare_proc:>5.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
