"""A tiny, valid GPT-2 checkpoint directory to break on purpose (the hostile-input and fuzz tests).

One layer, d_model 4, vocabulary 11, 8 positions, d_ff 16: `config.json` and either one
`model.safetensors` or two shards with an index. Small enough that a test can build hundreds.
`cache_snapshot` lays one out in the Hugging Face cache as huggingface_hub does.
"""

from __future__ import annotations

import json
from pathlib import Path

from checkpoint_files import Layout, write_safetensors, write_sharded

__all__ = ["CONFIG", "LAYOUT", "TINY_PARAMS", "cache_snapshot", "write_checkpoint"]

LAYOUT: Layout = {
    "wte.weight": ("F32", (11, 4)), "wpe.weight": ("F32", (8, 4)),
    "h.0.ln_1.weight": ("F32", (4,)), "h.0.ln_1.bias": ("F32", (4,)),
    "h.0.attn.c_attn.weight": ("F32", (4, 12)), "h.0.attn.c_attn.bias": ("F32", (12,)),
    "h.0.attn.c_proj.weight": ("F32", (4, 4)), "h.0.attn.c_proj.bias": ("F32", (4,)),
    "h.0.ln_2.weight": ("F32", (4,)), "h.0.ln_2.bias": ("F32", (4,)),
    "h.0.mlp.c_fc.weight": ("F32", (4, 16)), "h.0.mlp.c_fc.bias": ("F32", (16,)),
    "h.0.mlp.c_proj.weight": ("F32", (16, 4)), "h.0.mlp.c_proj.bias": ("F32", (4,)),
    "ln_f.weight": ("F32", (4,)), "ln_f.bias": ("F32", (4,)),
}
# wte 44 + wpe 32 + ln_1 8 + c_attn 48+12 + c_proj 16+4 + ln_2 8 + c_fc 64+16 + c_proj 64+4 + ln_f 8
TINY_PARAMS = 328
CONFIG = {"model_type": "gpt2", "vocab_size": 11, "n_positions": 8, "n_embd": 4, "n_layer": 1, "n_head": 1}


def write_checkpoint(directory: Path, sharded: bool = False, config: dict | None = None) -> Path:
    """config.json plus model.safetensors, or two shards and model.safetensors.index.json."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config or CONFIG))
    if sharded:
        names = list(LAYOUT)
        write_sharded(directory, [{n: LAYOUT[n] for n in names[:8]}, {n: LAYOUT[n] for n in names[8:]}])
    else:
        write_safetensors(directory / "model.safetensors", LAYOUT)
    return directory


def cache_snapshot(repo_id: str) -> Path:
    """huggingface_hub's layout: snapshots/<commit>/<file> are relative symlinks into ../../blobs/."""
    from huggingface_hub import constants

    repo = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("1" * 40)
    source = write_checkpoint(repo / "source")
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("1" * 40)
    for name in ("config.json", "model.safetensors"):
        (source / name).rename(repo / "blobs" / f"blob-{name}")
        (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / f"blob-{name}")
    return snapshot


