"""DeepSeek-V4 (deepseek_v4) against transformers itself: its count, and its cache as transformers'
own cache objects (DeepseekV4CSACache, DeepseekV4HCACache) hold it.

The tiny config (tests/tiny_models.py) has a sliding layer, two CSA layers (one compressed entry per
4 tokens, with the indexer's keys) and an HCA layer (one per 8), so that a forward at 7 and at 15
tokens (one short of a window of 4 and of 8: every compressor holds the most tokens waiting it can)
checks the window's rows, the compressed rows at 1/ratio, and the per-sequence compressor states.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.count import count
from calc.analysis.memory.kv import kv_cache
from calc.analysis.train.activations import layer_terms
from calc.cli import main
from calc.spec.load import load_spec
from oracle import spec_of, transformers_count
from test_hybrids import BATCH, _transformers_tiny
from tiny_models import VOCAB, tiny_config

FLASH = Path(__file__).resolve().parent / "configs" / "model_types" / "deepseek_v4.json"
STATES = ("buffer_kv", "buffer_gate", "overlap_kv", "overlap_gate")


def test_tiny_total_equals_transformers() -> None:
    assert count(spec_of(tiny_config("deepseek_v4"))).total == transformers_count(tiny_config("deepseek_v4"))


def test_flash_total_and_active() -> None:
    """DeepSeek-V4-Flash's config.json (tests/configs/model_types/SOURCES.yaml)."""
    b = count(load_spec(str(FLASH)))
    # transformers 5.24's DeepseekV4ForCausalLM on the meta device, sum of parameters().numel()
    assert b.total == 284_332_230_231
    # https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash: "284B total parameters, 13B activated" (the
    # activated figure without the token embedding and the head, 0.53B each)
    assert round(b.total / 1e9) == 284 and round((b.active - b.embeddings) / 1e9) == 13
    # the first 3 layers' token-id tables (129,280 x 6, int64) and 40 score-correction biases: buffers; the
    # checkpoint's MTP layer (mtp.0.*: MTP_TENSORS below, each FP4 int8 two parameters, scales left out)
    assert b.extra == {"router_hash_table": 3 * 129_280 * 6, "router_score_bias": 40 * 256, "mtp_layers": 6_610_048_891}


def _transformers_cache(seq: int) -> tuple[int, int, int]:
    """(rows, states, sliding-only layers' copy of V) in transformers' cache after `seq` tokens: rows are
    the window's K = V (each storage once) and the compressed entries, states the tokens waiting for their
    window and the last window's overlap."""
    torch = pytest.importorskip("torch")
    ids = torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = _transformers_tiny("deepseek_v4")(ids, use_cache=True).past_key_values
    rows = states = copies = 0
    for layer in cache.layers:
        rows += layer.keys.numel()
        if layer.values.data_ptr() != layer.keys.data_ptr():  # a plain sliding layer keeps V as a copy of K
            copies += layer.values.numel()
        rows += sum(t.numel() for t in getattr(layer, "compressed_kv", {}).values())
        states += sum(t.numel() for name in STATES for t in getattr(layer, name, {}).values() if t is not None)
    return rows, states, copies


@pytest.mark.parametrize("seq", [7, 15])
def test_cache_equals_transformers_cache_objects(seq: int) -> None:
    """transformers' DynamicSlidingWindowLayer keeps the sliding layer's K = V row twice (keys and values);
    its own V4 cache layers keep it once (values is keys), as gptcalc counts every layer."""
    ours = kv_cache(spec_of(tiny_config("deepseek_v4")), seq, BATCH, "fp32")
    rows, states, copies = _transformers_cache(seq)
    assert copies == BATCH * seq * 16
    assert (ours.total_bytes - ours.state_bytes) // 4 == rows
    assert ours.state_bytes // 4 == states > 0


def test_flash_cache_at_128k_and_1m() -> None:
    """Per layer per sequence, bf16: the window's 128 rows of 512 (K = V), a compressed row of 512 per 4
    tokens (21 CSA layers) or 128 (20 HCA layers) and an indexer key of 128 per 4 tokens (CSA); states:
    CSA's 3 waiting tokens (kv and gate, 2 x 512 each) and 4 rows of overlap (kv bf16, gate fp32), its
    indexer's the same at 128; HCA's 127 waiting tokens (kv and gate, 512 each)."""
    spec = load_spec(str(FLASH))
    window = 43 * 128 * 512 * 2
    states = 21 * (3 * 2 * 2 * 512 * 2 + 4 * 512 * 2 + 4 * 512 * 4 + 3 * 2 * 2 * 128 * 2 + 4 * 128 * 2 + 4 * 128 * 4) \
        + 20 * 127 * 2 * 512 * 2
    for seq in (131_072, 1_048_576):
        kv = kv_cache(spec, seq, 1, "bf16")
        compressed = 21 * (seq // 4) * (512 + 128) * 2 + 20 * (seq // 128) * 512 * 2
        assert kv.state_bytes == states
        assert kv.total_bytes == window + compressed + states
    assert kv_cache(spec, 1_048_576, 1, "bf16").total_bytes == 7_225_686_016


def test_kvcache_cli_names_the_compressed_rows(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(FLASH.read_text())
    result = CliRunner().invoke(main, ["kvcache", str(config), "--seq", "131072", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    kinds = {(layer["kind"], layer["ratio"], layer["tokens_kept"]) for layer in data[0]["layers"]}
    assert kinds == {("MQA", 1, 128), ("compressed", 4, 32_768), ("compressed indexer", 4, 32_768),
                     ("compressed", 128, 1_024)}


def _saved(tmp_path: Path) -> Path:
    """transformers' own save_pretrained of the tiny model: the Hub's leaf names under `model.layers`
    (conversion_mapping.py's "deepseek_v4", reversed), `head.weight`, `model.embed_tokens.weight`."""
    _transformers_tiny("deepseek_v4").save_pretrained(tmp_path)
    return tmp_path / "model.safetensors"


def test_header_check_recognises_what_transformers_saves(tmp_path: Path) -> None:
    from calc.checkpoint.report import read_checkpoint

    _saved(tmp_path)
    report = read_checkpoint(str(tmp_path))
    assert report.ok, (report.unknown, report.mismatches)
    assert report.breakdown.total == transformers_count(tiny_config("deepseek_v4"))


def _hub_name(name: str) -> str:
    """The name DeepSeek's checkpoint gives a tensor save_pretrained wrote: no `model.` prefix, its own
    model-level names (embed.weight, norm.weight, hc_head_fn: the Flash checkpoint's tensor listing)."""
    name = {"model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm.weight"}.get(name, name)
    return name.removeprefix("model.").replace("hc_head.hc_", "hc_head_")


def test_hub_layout_with_fp8_and_fp4(tmp_path: Path) -> None:
    """The Hub's names, every attention and shared-expert projection in F8_E4M3 with an F8_E8M0 `.scale`
    per 128x128 block, the routed experts in FP4, two values an int8 ([out, in / 2] I8) with a `.scale`
    per 32 values (the compressors' and the indexer's kv, gate and weights_proj stay BF16), as
    DeepSeek-V4-Flash stores them: every tensor recognised, the scales set apart, the total unchanged."""
    import math

    from calc.checkpoint.report import read_checkpoint
    from checkpoint_files import write_safetensors

    raw = _saved(tmp_path / "saved").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    layout: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        hub, (out, *rest) = _hub_name(name), entry["shape"]
        fp4 = ".ffn.experts." in hub
        fp8 = any(f".{w}." in hub for w in ("wq_a", "wq_b", "wkv", "wo_a", "wo_b", "w1", "w2", "w3")) \
            and ".compressor." not in hub and not fp4
        if fp4:
            layout[hub] = ("I8", (out, rest[0] // 2))
            layout[hub.removesuffix(".weight") + ".scale"] = ("F8_E8M0", (out, math.ceil(rest[0] / 32)))
        else:
            layout[hub] = ("F8_E4M3" if fp8 else entry["dtype"], (out, *rest))
        if fp8:
            layout[hub.removesuffix(".weight") + ".scale"] = ("F8_E8M0", (math.ceil(out / 128), math.ceil(rest[0] / 128)))
    write_safetensors(tmp_path / "hub" / "model.safetensors", layout)
    (tmp_path / "hub" / "config.json").write_text(json.dumps(tiny_config("deepseek_v4")))
    report = read_checkpoint(str(tmp_path / "hub"))
    assert report.ok, (report.unknown, report.mismatches)
    assert report.breakdown.total == transformers_count(tiny_config("deepseek_v4"))
    scales = [name for name in layout if name.endswith(".scale") and layout[name][0] == "F8_E8M0"]
    assert len(report.companions) == len(scales) > 0


@pytest.mark.parametrize("seq", [30, 32])
def test_layer_activations_equal_what_autograd_saves(seq: int) -> None:
    """saved_tensors_hooks over transformers' own tiny DeepSeek-V4 in fp32 (eager attention, training
    mode): what each layer saves — both hyper-connection mixes with their write-backs, both norms, the
    sliding, CSA (with its indexer) or HCA attention, and the MoE block (sqrt-softplus scores, hash or
    top-k routing, the grouped experts' int64 permutations, gate and up clamped before SiLU, the clamped
    shared expert) — equals layer_terms, at a length that fills every compressor window (32) and one
    that leaves a partial window waiting (30)."""
    torch = pytest.importorskip("torch")
    from saved_tensors import saved_per_layer

    spec, model = spec_of(tiny_config("deepseek_v4")), _transformers_tiny("deepseek_v4")
    model.set_attn_implementation("eager")
    model.train()
    ids = torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(0))
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    assert saved_per_layer(model, ids) == [sum(t.bytes(1, False) for t in layer_terms(block, spec.d_model, BATCH, seq, 4,
                                                                                        "none")) for block in blocks]


@pytest.mark.parametrize("seq", [30, 32])
def test_frozen_layer_activations_equal_what_autograd_saves(seq: int) -> None:
    """The same layers with every weight frozen but the embedding's (each layer's input still needs a
    gradient, as under LoRA adapters upstream) and no adapter in them: the hyper-connections' normed copies
    and mixing projection's output, the norms' normed x (the layer's two, the Q latent's, K = V's, the
    compressed entries'), q_b's, W_o_a's and W_o_b's inputs, the router's and the experts' input and each
    down projection's input go; frozen_layer drops exactly these (transformers 5.24's tiny model, fp32)."""
    torch = pytest.importorskip("torch")
    from calc.analysis.train import Setup
    from calc.analysis.train.frozen import frozen_layer
    from saved_tensors import saved_per_layer

    spec, model = spec_of(tiny_config("deepseek_v4")), _transformers_tiny("deepseek_v4")
    model.set_attn_implementation("eager")
    model.train().requires_grad_(False).get_input_embeddings().weight.requires_grad_(True)
    ids = torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(0))
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    setup = Setup(seq, BATCH, lora_rank=4, lora_targets=())

    def kept(block, frozen: bool) -> int:  # noqa: ANN001 - a Block
        terms = layer_terms(block, spec.d_model, BATCH, seq, 4, "none", False, setup.norms if frozen else "act")
        return sum(t.bytes(1, False) for t in (frozen_layer(terms, block, setup) if frozen else terms))

    frozen = [kept(block, True) for block in blocks]
    assert saved_per_layer(model, ids) == frozen
    assert all(f < kept(block, False) for f, block in zip(frozen, blocks))


def _counted(run) -> int:  # noqa: ANN001 - a callable
    """FlopCounterMode's total while `run()` runs."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        run()
    return sum(counter.get_flop_counts()["Global"].values())


def test_flops_equal_flop_counter_prefill_and_decode() -> None:
    """transformers' tiny model under FlopCounterMode, its experts run one by one (eager: the default
    grouped_mm is not seen by the counter). At 7 tokens every query sees every key (window 16) and
    every compressed entry (one per CSA layer, within its top 2), so eager attention, which scores
    all entries and masks, computes what `flops` counts; a decode step then closes a window in each
    compressor (8 tokens: two CSA entries, one HCA entry)."""
    torch = pytest.importorskip("torch")
    from calc.analysis.flops import flops

    model = _transformers_tiny("deepseek_v4")
    model.set_experts_implementation("eager")
    spec, seq = spec_of(tiny_config("deepseek_v4")), 7
    ids = torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert _counted(lambda: model(ids, use_cache=False)) == flops(spec, seq, BATCH).forward
        cache = model(ids, use_cache=True).cache
        step = ids[:, :1]
        assert _counted(lambda: model(step, cache=cache, use_cache=True)) == \
            flops(spec, seq, BATCH, decode=True).forward


@pytest.mark.parametrize("decode", [False, True])
def test_shapes_own_every_parameter(decode: bool) -> None:
    from calc.analysis.shapes import journey

    spec = load_spec(str(FLASH))
    assert journey(spec, 4096, 1, decode).params == count(spec).total


# deepseek-ai/DeepSeek-V4-Flash's safetensors (https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash/tree/main), the
# 43 layers' and the model's tensors as a model-information report of the downloaded checkpoint lists them (46 files,
# 69,187 tensors; found in the code search corpus, its repository not named): (tensors, shape, bytes per element).
# FP8 weights F8_E4M3 with F8_E8M0 `.scale`s per 128x128 block, experts' FP4 as I8 [out, in/2] with a scale per 32,
# compressors and the indexer's kv, gate and weights_proj BF16, hyper-connections, sinks and `ape` F32. Left out:
# the MTP layer (mtp.0.*) and the buffers (ffn.gate.tid2eid, ffn.gate.bias).
FLASH_TENSORS = [
    (1, (129280, 4096), 2), (1, (4,), 4), (1, (4, 16384), 4), (1, (1,), 4), (1, (129280, 4096), 2), (1, (4096,), 2),
    (43, (64,), 4), (43, (512,), 2), (43, (1024,), 2), (43, (4096,), 2), (43, (4096,), 2),  # sinks, norms
    (43, (4, 32), 1), (43, (512, 4096), 1), (43, (64, 32), 1), (43, (8192, 4096), 1),  # wkv, wo_a
    (43, (32, 64), 1), (43, (4096, 8192), 1), (43, (8, 32), 1), (43, (1024, 4096), 1),  # wo_b, wq_a
    (43, (256, 8), 1), (43, (32768, 1024), 1),  # wq_b
    (43 * 256, (2048, 128), 1), (43 * 256, (2048, 2048), 1), (43 * 256, (4096, 64), 1),  # experts w1, w2
    (43 * 256, (4096, 1024), 1), (43 * 256, (2048, 128), 1), (43 * 256, (2048, 2048), 1),  # w2, w3
    (43, (256, 4096), 2), (43, (16, 32), 1), (43, (2048, 4096), 1), (43, (32, 16), 1),  # router, shared w1, w2
    (43, (4096, 2048), 1), (43, (16, 32), 1), (43, (2048, 4096), 1),  # shared w2, w3
    (86, (24,), 4), (86, (24, 16384), 4), (86, (3,), 4),  # hc_attn_*, hc_ffn_*
    (21, (4, 1024), 4), (21, (1024, 4096), 2), (21, (1024, 4096), 2), (41, (512,), 2),  # CSA compressor, norms
    (21, (4, 256), 4), (21, (128,), 2), (21, (256, 4096), 2), (21, (256, 4096), 2),  # indexer compressor
    (21, (64, 4096), 2), (21, (64, 8), 1), (21, (8192, 1024), 1),  # indexer weights_proj, wq_b
    (20, (128, 512), 4), (20, (512, 4096), 2), (20, (512, 4096), 2),  # HCA compressor
]
# Its MTP layer, mtp.0.* in the same listing: a sliding layer's attention, a scored MoE (FP4 experts), e_proj and
# h_proj in FP8, enorm, hnorm, norm, and its own hyper-connections and head (the router's bias, a buffer, included).
MTP_TENSORS = [
    (1, (64,), 4), (1, (512,), 2), (1, (1024,), 2), (4, (4096,), 2), (1, (4096,), 2),  # sink, norms, 4 d-wide norms
    (1, (4, 32), 1), (1, (512, 4096), 1), (1, (64, 32), 1), (1, (8192, 4096), 1), (1, (32, 64), 1),
    (1, (4096, 8192), 1), (1, (8, 32), 1), (1, (1024, 4096), 1), (1, (256, 8), 1), (1, (32768, 1024), 1),
    (2, (32, 32), 1), (2, (4096, 4096), 1),  # e_proj, h_proj
    (512, (2048, 128), 1), (512, (2048, 2048), 1), (256, (4096, 64), 1), (256, (4096, 1024), 1),  # experts
    (1, (256,), 4), (1, (256, 4096), 2), (2, (16, 32), 1), (2, (2048, 4096), 1), (1, (32, 16), 1),
    (1, (4096, 2048), 1),  # router bias and weight, shared experts
    (2, (24,), 4), (2, (24, 16384), 4), (2, (3,), 4), (1, (4,), 4), (1, (4, 16384), 4), (1, (1,), 4),  # hc
]


def test_flash_weights_as_stored_equal_its_checkpoint() -> None:
    """config.json's quantization_config (fp8, ue8m0 block scales) and expert_dtype fp4 name the scheme;
    its bytes equal the checkpoint's tensors, every dtype and shape as stored."""
    from math import prod

    from calc.analysis.memory.schemes import find_scheme
    from calc.analysis.memory.weights import weights

    spec = load_spec(str(FLASH))
    assert spec.quant == "fp8-fp4"
    stored = weights(count(spec), scheme=find_scheme(spec.quant), spec=spec).total_bytes
    assert stored == sum(n * prod(shape) * width for n, shape, width in FLASH_TENSORS) == 155_997_040_860


def _flash_hub_layout() -> dict[str, tuple[str, tuple[int, ...]]]:
    """DeepSeek-V4-Flash's checkpoint as it names and stores its tensors (FLASH_TENSORS' dtypes): the
    names from the layout's Hub table, without `model.`, the MTP layer as mtp.0.*; the buffers too."""
    import math

    from calc.checkpoint.names import tensor_table

    layout: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, shape in tensor_table(load_spec(str(FLASH))).expected_shapes(hub=True, buffers=True, mtp=True).items():
        hub, out, rest = _hub_name(name).replace("layers.43.", "mtp.0."), shape[0], shape[1:]
        if hub.endswith("tid2eid"):
            layout[hub] = ("I64", (129_280, 6))
        elif ".ffn.experts." in hub:
            layout[hub] = ("I8", (out, rest[0] // 2))
            layout[hub.removesuffix(".weight") + ".scale"] = ("F8_E8M0", (out, rest[0] // 32))
        elif hub.endswith(".weight") and rest and any(f".{w}." in hub for w in ("wq_a", "wq_b", "wkv", "wo_a", "wo_b",
                                                                                  "w1", "w2", "w3", "e_proj", "h_proj")) \
                and ".compressor." not in hub:
            layout[hub] = ("F8_E4M3", shape)
            layout[hub.removesuffix(".weight") + ".scale"] = ("F8_E8M0", (math.ceil(out / 128), math.ceil(rest[0] / 128)))
        else:
            fp32 = any(part in hub for part in ("hc_", "attn_sink", ".ape", "gate.bias"))
            layout[hub] = ("F32" if fp32 else "BF16", shape)
    return layout


def test_flash_checkpoint_header_full_size(tmp_path: Path) -> None:
    """The whole Flash checkpoint as a sparse file (header only): every tensor recognised, the FP4 experts
    unpacked, the total transformers counts, its bytes the tensor list's plus the buffers, read fast."""
    import time
    from math import prod

    from calc.checkpoint.report import read_checkpoint
    from checkpoint_files import write_safetensors
    from test_full_size_checkpoints import BOUND

    layout = _flash_hub_layout()
    write_safetensors(tmp_path / "model.safetensors", layout)
    (tmp_path / "config.json").write_text(FLASH.read_text())
    start = time.perf_counter()
    report = read_checkpoint(str(tmp_path))
    elapsed = time.perf_counter() - start
    assert report.ok, (report.unknown[:3], report.mismatches[:3])
    assert report.breakdown.total == 284_332_230_231
    # the MTP layer's parameters, from MTP_TENSORS' shapes (an FP4 int8 two values, its router bias included)
    assert report.breakdown.extra["mtp_layers"] == 6_610_048_891
    # attention's 5 and the shared expert's 3 scales a layer, the experts' 3 each, the indexers' one; the MTP layer's
    assert len(report.companions) == 44 * (5 + 3 + 3 * 256) + 21 + 2
    buffers = 3 * 129_280 * 6 * 8 + 40 * 256 * 4
    mtp = sum(n * prod(shape) * width for n, shape, width in MTP_TENSORS)
    assert report.tensor_bytes == 155_997_040_860 + buffers + mtp
    assert elapsed < BOUND


def test_tensor_parallel_gpus_each_hold_the_whole_cache() -> None:
    """The one K = V head, the compressed rows and the compressor states have no heads to split."""
    spec = load_spec(str(FLASH))
    assert kv_cache(spec, 131_072, 2, "bf16", tp=8).total_bytes == kv_cache(spec, 131_072, 2, "bf16").total_bytes


def test_budget_finds_the_longest_context_a_row_per_ratio_tokens_allows() -> None:
    """Solving for the context: the answer's cache fits, one token more would not (the compressed rows
    grow by a whole row every ratio tokens, so the search is over rows kept, not a bytes-per-token slope)."""
    from calc.analysis.memory.budget import solve_budget

    spec = load_spec(str(FLASH))
    budget = solve_budget(spec, 200 * 2**30, 155_997_040_860, "bf16", "seq", 4)
    free, seq = budget.free_bytes, budget.by_memory
    assert budget.cache_bytes(seq, 4) <= free < budget.cache_bytes(seq + 1, 4)
