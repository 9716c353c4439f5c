"""MiniMax-M3 (model_type minimax_m3_vl): the released config read as transformers 5.24 reads it
(models/minimax_m3_vl), against its checkpoint's own parameter total, transformers' cache objects
(the block indexer's keys beside K and V) and its whole tiny model; a vision tower and projector
as their own rows.

tests/test_arch.py checks the released config whole against transformers' meta model, and
tests/test_reference_equivalence.py the torch reference's logits on the tiny language model
(tests/tiny_models.py "minimax_m3_vl_text")."""

from __future__ import annotations

import copy
import json

import pytest

from calc.analysis.count import count
from calc.analysis.memory.kv import kv_cache
from calc.spec.load import load_spec
from cli_checks import check_run
from oracle import CONFIG_DIR, spec_of, transformers_count
from test_hybrids import BATCH, _transformers_tiny
from tiny_models import TINY_MULTIMODAL, VOCAB, tiny_config

CONFIG = CONFIG_DIR / "model_types" / "minimax_m3_vl.json"


def test_published_checkpoint_total() -> None:
    """The checkpoint's safetensors hold 427,040,140,160 parameters in 23,416 tensors (a model-information
    report of MiniMaxAI/MiniMax-M3's files; tests/configs/model_types/SOURCES.yaml): the model plus the 57
    routers' e_score_correction_bias buffers (57 x 128). Its vision tower is 1,505,280 (the Conv3d,
    [1280, 3, 2, 14, 14]) + 2,560 (pre_layrnorm) + 32 layers of 19,677,440, and its projector four biased
    linears: [6144, 1280], [6144, 6144], [6144, 24576], [6144, 6144] (the same report's tensor list)."""
    b = count(load_spec(str(CONFIG)))
    assert b.total + b.extra["router_score_bias"] == 427_040_140_160
    assert b.extra["router_score_bias"] == 57 * 128
    layer = 4 * (1280 * 1280 + 1280) + 2 * 2 * 1280 + 2 * 1280 * 5120 + 5120 + 1280
    projector = 6145 * 6144 + 1281 * 6144 + 24577 * 6144 + 6145 * 6144
    assert b.towers_total == 1_505_280 + 2_560 + 32 * layer + projector == 865_567_232


def test_layer_kinds_follow_the_sparse_attention_config() -> None:
    """sparse_attention_freq and moe_layer_freq ([0, 0, 0, 1 x 57] in the release) are what transformers
    reads as layer_types and mlp_layer_types: 3 dense full-attention layers, then 57 indexed MoE layers."""
    spec = load_spec(str(CONFIG))
    assert [(run.repeat, run.block) for run in spec.layers] == [(3, "attention_dense"), (57, "indexed_sparse")]
    indexer = spec.blocks["indexed_sparse"].attention.indexer
    assert (indexer.n_heads, indexer.head_dim, indexer.block_size, indexer.topk_blocks, indexer.local_blocks) == (
        4, 128, 128, 16, 1)


def _transformers_cache_elements(seq: int) -> int:
    """Elements transformers' cache holds after `seq` tokens of the tiny language model: K, V and, in the
    sparse layers (MiniMaxM3VLSparseCacheLayer), the indexer's keys [B, 1, seq, index_head_dim]."""
    torch = pytest.importorskip("torch")
    ids = torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = _transformers_tiny("minimax_m3_vl_text")(ids, use_cache=True).cache
    held = [getattr(layer, name, None) for layer in cache.layers for name in ("keys", "values", "idx_keys")]
    assert sum(getattr(layer, "idx_keys", None) is not None for layer in cache.layers) == 2
    return sum(t.numel() for t in held if t is not None)


@pytest.mark.parametrize("seq", [5, 9])
def test_cache_equals_transformers_cache_objects(seq: int) -> None:
    ours = kv_cache(spec_of(tiny_config("minimax_m3_vl_text")), seq, BATCH, "fp32")  # 4 bytes an element
    assert ours.state_bytes == 0
    assert ours.total_bytes // 4 == _transformers_cache_elements(seq)


def test_indexer_keys_grow_beside_k_and_v() -> None:
    """Per token and sparse layer: K and V (4 KV heads of 128 each) and one 128-wide index key, so 57 of
    the 60 layers keep 1,024 + 128 elements a token and the 3 others 1,024."""
    kv = kv_cache(load_spec(str(CONFIG)), 1000, 1, "bf16")
    assert kv.bytes_per_token == (60 * 2 * 4 * 128 + 57 * 128) * 2
    assert {(kind.kind, kind.n_layers, kind.k) for kind in kv.layers if kind.kind == "block indexer"} == {
        ("block indexer", 57, 128)}


# The tiny whole model: the tiny language model under a two-layer vision tower of width 16 (projector 24 wide)
TINY_WHOLE = {"model_type": "minimax_m3_vl", **TINY_MULTIMODAL["minimax_m3_vl"]}


def test_tiny_whole_model_equals_transformers() -> None:
    b = count(spec_of(copy.deepcopy(TINY_WHOLE)))
    assert not b.partial and [t.name for t in b.towers] == ["vision"]
    assert b.total == transformers_count(copy.deepcopy(TINY_WHOLE))


@pytest.mark.parametrize("width, height", [(1024, 1024), (640, 480), (4000, 3000), (20, 20)])
def test_image_tokens_are_the_processors(width: int, height: int) -> None:
    """MiniMaxM3VLImageProcessor is Qwen2-VL's with size {shortest_edge: 3136, longest_edge: 451584}
    (modular_minimax_m3_vl.py); patch 14, merge 2, two frames per patch."""
    np = pytest.importorskip("numpy")
    transformers = pytest.importorskip("transformers")
    rule = load_spec(str(CONFIG)).towers["vision"].images
    processor = transformers.Qwen2VLImageProcessor(patch_size=14, merge_size=2, temporal_patch_size=2,
                                                   min_pixels=3136, max_pixels=451_584)
    grid = processor(images=[np.zeros((height, width, 3), dtype=np.uint8)], return_tensors="np")["image_grid_thw"][0]
    ours = rule.tokens(width, height)
    assert ours.patches == int(grid.prod()) and ours.image_tokens == int(grid.prod()) // 4


@pytest.mark.parametrize(("change", "key"), [({"swiglu_alpha": 1.5}, "swiglu_alpha"),
                                             ({"moe_layer_freq": [0, 2] + [1] * 58}, "mlp_layer_types"),
                                             ({"layer_types": ["full_attention"] * 59 + ["other"]}, "layer_types")])
def test_what_is_not_modelled_is_one_error_line(tmp_path, change: dict, key: str) -> None:  # noqa: ANN001
    config = json.loads(CONFIG.read_text())
    config["text_config"].update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = check_run(["count", str(path)])
    assert result.exit_code == 2 and key in result.stderr


def test_verify_names_every_tensor_of_transformers_whole_model(tmp_path) -> None:  # noqa: ANN001
    """`verify` of the tiny whole model: the formulas, the torch reference (the language model) and
    transformers' MiniMaxM3SparseForConditionalGeneration agree, every one of its tensors (vision tower and
    both projector stages included) under the name and shape the spec implies."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_WHOLE))
    result = check_run(["verify", str(path)])
    assert result.exit_code == 0, result.stdout
    assert "every transformers parameter has the name and shape the spec implies" in result.stdout


def _save_whole(path) -> None:  # noqa: ANN001
    """transformers' save_pretrained of the tiny whole model into `path` (the release's tensor names)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    data = copy.deepcopy(TINY_WHOLE)
    config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    torch.manual_seed(0)
    transformers.MiniMaxM3SparseForConditionalGeneration(config).save_pretrained(path)


def test_the_release_names_are_recognised(tmp_path) -> None:  # noqa: ANN001
    """transformers' save_pretrained of the whole tiny model writes the release's names back out
    (conversion_mapping.py "minimax_m3_vl" reversed: language_model.model.*, block_sparse_moe with w1, w3, w2
    per expert, self_attn.index_*, gate_proj and up_proj apart, vision_tower.vision_model.*,
    patch_merge_mlp.*); the header check places every tensor and adds up to the count."""
    from calc.checkpoint.report import read_checkpoint

    _save_whole(tmp_path)
    names = json.loads((tmp_path / "model.safetensors").read_bytes()[8:8 + int.from_bytes(
        (tmp_path / "model.safetensors").read_bytes()[:8], "little")])
    assert "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight" in names
    assert "patch_merge_mlp.linear_1.weight" in names
    report = read_checkpoint(str(tmp_path))
    assert report.ok and not report.unknown and not report.mismatches
    assert report.breakdown.total == count(spec_of(copy.deepcopy(TINY_WHOLE))).total


def test_mtp_modules_are_counted_apart_from_every_total() -> None:
    """num_mtp_modules 7: each, as vLLM's minimax_m3_mtp builds it (vllm/models/minimax_m3/nvidia/mtp.py), an
    indexed sparse MoE layer (the release's layers 3-59, tensor shapes from the checkpoint's tensor list in
    SOURCES.yaml: norms, q/k/v/o, index_q/index_k and their norms, router, bias, 128 experts, shared expert) plus
    enorm, hnorm and final_layernorm (6144 each) and eh_proj [6144, 12288]; the released checkpoint holds none
    of them (its 427,040,140,160 parameters are the model and router biases), so no total grows."""
    d = 6144
    layer = (2 * d + 2 * 128 + 8192 * d + 2 * 512 * d + d * 8192 + 512 * d + 128 * d + 2 * 128 + 128 * d + 128
             + 128 * 3 * 3072 * d + 3 * 3072 * d)
    b = count(load_spec(str(CONFIG)))
    assert b.unstored == {"mtp_layers": 7 * (layer + 3 * d + d * 2 * d)} == {"mtp_layers": 52_441_078_144}
    assert b.stored_total == 427_040_140_160 and "mtp_layers" not in b.extra
    assert b.to_json()["declared_not_stored"] == {"mtp_layers": 52_441_078_144}


def test_a_checkpoint_bundling_mtp_modules_is_read_whole(tmp_path) -> None:  # noqa: ANN001
    """A checkpoint that bundles MTP modules as vLLM's minimax_m3_mtp loads them (nvidia/mtp.py
    _map_checkpoint_name: language_model.model.mtp.layers.N.{enorm, hnorm, eh_proj, final_layernorm} and the
    decoder layer under transformer_layer.): here two modules written beside transformers' save_pretrained of the
    tiny whole model, each a copy of its sparse layer 1's stored tensors; every tensor is placed, the MTP ones
    as multi-token prediction layers of the size count() gives them."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    from calc.checkpoint.report import read_checkpoint

    _save_whole(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    layer, d = "language_model.model.layers.1.", TINY_WHOLE["text_config"]["hidden_size"]
    for i in range(2):
        prefix = f"language_model.model.mtp.layers.{i}."
        tensors |= {prefix + "transformer_layer." + name[len(layer):]: t.clone()
                    for name, t in tensors.items() if name.startswith(layer)}
        tensors |= {prefix + f"{norm}.weight": torch.zeros(d) for norm in ("enorm", "hnorm", "final_layernorm")}
        tensors[prefix + "eh_proj.weight"] = torch.zeros(d, 2 * d)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    bundled = {**copy.deepcopy(TINY_WHOLE), "text_config": {**TINY_WHOLE["text_config"], "num_mtp_modules": 2}}
    (tmp_path / "config.json").write_text(json.dumps(bundled))
    report = read_checkpoint(str(tmp_path))
    assert report.ok and not report.unknown and not report.mismatches
    stored = {c.component: c.parameters for c in report.components}
    in_layer_1 = sum(t.numel() for name, t in tensors.items() if name.startswith(layer))
    assert stored["mtp_layers"] == 2 * (in_layer_1 + 3 * d + 2 * d * d) == count(spec_of(bundled)).unstored["mtp_layers"]
