"""`inspect` at scale: time against the number of tensors, next to a bare read of the same headers.

Goal (issue 14): time linear in tensors with a small constant; on a 100,000-tensor sparse
checkpoint, within 2x a bare read-and-`json.loads` of its headers. The checkpoints are
Llama-layout, 10 shards, tiny widths (the header, not the weights, is what costs), with a
config.json; the files are sparse, so they cost a few MB of disk at most.

Measured, median of N runs after one warm-up, in one process:
- bare: open each shard, read its 8-byte length and its header, `json.loads` it (the floor);
- read_checkpoint: what `gptcalc inspect DIR` computes (validate every header, name every tensor,
  group by component, check shapes against the config);
and end to end, fresh processes: `gptcalc inspect DIR` (table) against `python -c` doing the bare
read. Run: python benchmarks/bench_inspect.py [N]

Where read_checkpoint's time goes at 100,000 tensors (an idle 2-core machine; CPU ms, about): the
headers' `json.loads` ~105 (the bare read itself, which pays ~30 more for the collector that
read_checkpoint pauses); checking them in bulk (`calc.checkpoint.header_columns`) ~80; the index's
`json.loads` ~40 and its check against the shards ~30; spelling the spec's names
(`calc.checkpoint.name_index`) ~35; the tally (`calc.checkpoint.tally`: look-ups, masks, counts)
~60; the rest (config, records of the buffers, the report) ~30. Every part is a handful of passes
in C over whole lists; none runs Python code per tensor.
"""

from __future__ import annotations

import json
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from bench_checkpoint import layer, write_shard  # noqa: E402  (the sparse shard writer, shared)
from calc.checkpoint.report import read_checkpoint  # noqa: E402

SHARDS, D, KV, FF, VOCAB = 10, 64, 64, 128, 1000
TENSORS_PER_LAYER = len(layer(0, D, KV, FF))
BARE = """
import json, struct, sys
from pathlib import Path
for shard in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    with open(shard, "rb") as handle:
        (n,) = struct.unpack("<Q", handle.read(8))
        json.loads(handle.read(n))
"""


def write_checkpoint(root: Path, n_layers: int) -> int:
    """A Llama-layout checkpoint of `n_layers` tiny layers in SHARDS shards; returns its tensor count."""
    shards: list[dict] = [{} for _ in range(SHARDS)]
    shards[0]["model.embed_tokens.weight"] = ("F16", [VOCAB, D])
    for i in range(n_layers):
        shards[i * SHARDS // n_layers].update(layer(i, D, KV, FF))
    shards[-1].update({"model.norm.weight": ("F16", [D]), "lm_head.weight": ("F16", [VOCAB, D])})
    weight_map = {}
    for i, tensors in enumerate(shards, start=1):
        name = f"model-{i:05d}-of-{SHARDS:05d}.safetensors"
        write_shard(root / name, tensors)
        weight_map.update({tensor: name for tensor in tensors})
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = {"model_type": "llama", "vocab_size": VOCAB, "hidden_size": D, "intermediate_size": FF,
              "num_hidden_layers": n_layers, "num_attention_heads": 4, "num_key_value_heads": 4,
              "max_position_embeddings": 128, "tie_word_embeddings": False}
    (root / "config.json").write_text(json.dumps(config))
    return len(weight_map)


def bare_read(root: Path) -> None:
    for shard in sorted(root.glob("*.safetensors")):
        with open(shard, "rb") as handle:
            (n,) = struct.unpack("<Q", handle.read(8))
            json.loads(handle.read(n))


def median_time(function, runs: int) -> float:  # type: ignore[no-untyped-def]
    function()  # warm-up: imports, page cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def process_time(command: list[str], runs: int) -> float:
    return median_time(lambda: subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL), runs)


def main(runs: int) -> None:
    print(f"{'tensors':>8} {'bare read':>10} {'read_checkpoint':>16} {'ratio':>6} {'us/tensor':>10}   "
          f"{'bare process':>12} {'gptcalc inspect':>16} {'ratio':>6}   (median of {runs})")
    for n_layers in (99, 999, 9_999):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            tensors = write_checkpoint(root, n_layers)
            bare = median_time(lambda: bare_read(root), runs)
            ours = median_time(lambda: read_checkpoint(str(root)), runs)
            bare_proc = process_time([sys.executable, "-c", BARE, str(root)], runs)
            ours_proc = process_time([sys.executable, "-m", "calc", "inspect", str(root)], runs)
        print(f"{tensors:>8,} {bare * 1e3:>8.1f}ms {ours * 1e3:>14.1f}ms {ours / bare:>5.1f}x {ours / tensors * 1e6:>10.1f}   "
              f"{bare_proc * 1e3:>10.1f}ms {ours_proc * 1e3:>14.1f}ms {ours_proc / bare_proc:>5.1f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
