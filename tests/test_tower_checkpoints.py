"""Towers in checkpoints: `verify --checkpoint` and `inspect` account for every tensor of a
multimodal checkpoint, header-only, and compare each tower's rows with the formulas.

The checkpoints are tiny whole models (tests/tiny_models.py TINY_MULTIMODAL) built by transformers'
own ForConditionalGeneration class and written by its save_pretrained, which writes the Hub's layout
(`language_model.model.*`, `vision_tower.*`; Qwen2.5-VL's `model.layers.*`, `visual.*`); and the same
weights under transformers 5's in-memory names (`model.language_model.*`, `model.vision_tower.*`),
which Qwen3-VL's and Qwen3.5's Hub files use. The reference total is the whole model's parameters.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.cli import main
from tiny_models import TINY_MULTIMODAL

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


def whole_model(model_type: str):  # noqa: ANN201
    config = copy.deepcopy(TINY_MULTIMODAL[model_type])
    named = config["architectures"][0]
    torch.manual_seed(0)
    return getattr(transformers, named)._from_config(transformers.AutoConfig.for_model(model_type, **config))


def saved(model_type: str, directory: Path, in_memory: bool = False) -> tuple[Path, dict[str, int]]:
    """The tiny model written to `directory` (save_pretrained's layout, or its in-memory names), and
    transformers' parameters by name."""
    model = whole_model(model_type)
    model.save_pretrained(directory)
    if in_memory:  # the same tensors under the names transformers 5 holds them by
        for old in directory.glob("*.safetensors"):
            old.unlink()
        state = {name: t.contiguous() for name, t in model.state_dict().items() if name in dict(model.named_parameters())}
        safetensors_torch.save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
    return directory, {name: p.numel() for name, p in model.named_parameters()}


def verify_json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["verify", *args, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize("in_memory", [False, True], ids=["save_pretrained", "in-memory-names"])
@pytest.mark.parametrize("model_type", sorted(TINY_MULTIMODAL))
def test_every_tensor_of_a_vlm_checkpoint_is_recognised(model_type: str, in_memory: bool, tmp_path: Path) -> None:
    """No unknown tensor, no shape mismatch; the checkpoint's total is transformers' whole model's,
    and each tower row equals the formulas' (and transformers' own model's, read the same way)."""
    directory, params = saved(model_type, tmp_path, in_memory)
    code, data = verify_json("--checkpoint", str(directory))
    checkpoint = data["checkpoint"]
    assert checkpoint["unknown"] == [] and checkpoint["shape_mismatches"] == [], checkpoint
    assert checkpoint["parameters"] == sum(params.values())
    towers = [row for row in data["components"] if row["component"].startswith(("vision.", "audio."))]
    assert towers and all(row["ok"] and row["checkpoint"] == row["analytic"] for row in towers)
    assert sum(row["checkpoint"] for row in towers) == sum(t["total"] for t in checkpoint["breakdown"]["towers"])
    assert code == 0 and data["ok"], data["problems"]


def test_a_tower_of_another_shape_is_named(tmp_path: Path) -> None:
    """Gemma 3's checkpoint against a spec whose SigLIP MLP is 20 wide, not 24: the tower's tensors are
    named as stored, with both shapes, its rows disagree, and verify exits 1."""
    directory, _ = saved("gemma3", tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config["vision_config"]["intermediate_size"] = 20
    other = tmp_path / "other.json"
    other.write_text(json.dumps(config))
    code, data = verify_json(str(other), "--checkpoint", str(directory))
    mismatched = {m["name"]: (m["expected"], m["found"]) for m in data["checkpoint"]["shape_mismatches"]}
    assert mismatched["vision_tower.encoder.layers.0.mlp.fc1.weight"] == ([20, 16], [24, 16])
    assert "vision.mlp_up" in data["mismatches"] and code == 1


def test_inspect_lists_the_tower_rows(tmp_path: Path) -> None:
    """inspect (config.json beside the weights): every tensor accounted for, the towers' rows labelled."""
    directory, params = saved("llama4", tmp_path)
    result = CliRunner().invoke(main, ["inspect", str(directory), "--json"])
    data = json.loads(result.stdout)
    assert data["unknown"] == [] and data["parameters"] == sum(params.values())
    tower = {name.removeprefix("vision_model."): n for name, n in params.items() if name.startswith("vision_model.")}
    assert data["breakdown"]["towers"][0]["components"]["adapter"] == sum(
        n for name, n in tower.items() if name.startswith("vision_adapter."))
    assert "vision tower: vision adapter (pixel shuffle MLP)" in CliRunner().invoke(main, ["inspect", str(directory)]).stdout


def test_internvl_hf_head_stored_apart_is_the_untied_model(tmp_path: Path) -> None:
    """InternVL-hf checkpoints store language_model.lm_head.weight while their config.json, as transformers'
    converter writes it, says tie_word_embeddings true outside and false in text_config (OpenGVLab/
    InternVL3-1B-hf: 938,193,024 stored, 802,293,120 as transformers 5 ties it; tests/configs/model_types/
    SOURCES.yaml). A tiny one saved untied, then given that outer flag: verify and inspect read the untied model
    the checkpoint holds, the head counted, nothing unrecognised; transformers' model built untied agrees."""
    directory, params = saved("internvl", tmp_path)  # TINY_MULTIMODAL's internvl: untied outside and in
    config = json.loads((directory / "config.json").read_text())
    assert config["text_config"]["tie_word_embeddings"] is False
    (directory / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    text = TINY_MULTIMODAL["internvl"]["text_config"]
    head = params["lm_head.weight"]
    assert head == text["vocab_size"] * text["hidden_size"]
    code, data = verify_json("--checkpoint", str(directory))
    checkpoint = data["checkpoint"]
    assert checkpoint["unknown"] == [] and checkpoint["shape_mismatches"] == [] and checkpoint["untied_variant"]
    assert checkpoint["parameters"] == sum(params.values()) and checkpoint["breakdown"]["components"]["lm_head"] == head
    assert not any(data["tied"].values()) and code == 0 and data["ok"], data["problems"]
    inspected = json.loads(CliRunner().invoke(main, ["inspect", str(directory), "--json"]).stdout)
    assert inspected["unknown"] == [] and inspected["parameters"] == sum(params.values())
    assert "stores the LM head apart" in CliRunner().invoke(main, ["inspect", str(directory)]).stdout
    # the head left out (a tied save, in transformers' in-memory names): read tied, as the config says
    state = {name: t for name, t in whole_model("internvl").state_dict().items() if name != "lm_head.weight"}
    safetensors_torch.save_file({n: t.contiguous() for n, t in state.items()}, str(directory / "model.safetensors"),
                                metadata={"format": "pt"})
    code, data = verify_json("--checkpoint", str(directory))
    assert data["checkpoint"]["untied_variant"] is False and all(data["tied"].values()) and code == 0


@pytest.fixture
def internvl_apart(tmp_path: Path) -> tuple[Path, Path, dict[str, int]]:
    """The untied tiny InternVL's weights, its config.json apart from them (a MODEL file) under its converter's outer
    tie_word_embeddings true (test_internvl_hf_head_stored_apart_is_the_untied_model), transformers' parameters."""
    directory, params = saved("internvl", tmp_path / "weights")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").unlink()
    model = tmp_path / "internvl.json"
    model.write_text(json.dumps({**config, "tie_word_embeddings": True}))
    return directory, model, params


def test_internvl_hf_head_stored_apart_against_an_explicit_model(internvl_apart: tuple[Path, Path, dict[str, int]]) -> None:
    """The same untied tiny InternVL under its converter's outer tie_word_embeddings true, its config.json given as
    MODEL (a file apart from the weights): MODEL's config reads the untied variant as the checkpoint's own does,
    the head counted, nothing unrecognised, transformers' model built untied."""
    directory, model, params = internvl_apart
    code, data = verify_json(str(model), "--checkpoint", str(directory))
    checkpoint = data["checkpoint"]
    assert checkpoint["unknown"] == [] and checkpoint["shape_mismatches"] == [] and checkpoint["untied_variant"]
    assert checkpoint["parameters"] == sum(params.values())
    assert checkpoint["breakdown"]["components"]["lm_head"] == params["lm_head.weight"]
    assert not any(data["tied"].values()) and code == 0 and data["ok"], data["problems"]


def test_inspect_against_an_explicit_model_reads_the_head_stored_apart(
        internvl_apart: tuple[Path, Path, dict[str, int]]) -> None:
    """`inspect DIR --model MODEL` reads that checkpoint as verify does: the untied variant, the head counted,
    nothing unrecognised, so exit 0 (before, language_model.lm_head.weight was unknown and it exited 1)."""
    directory, model, params = internvl_apart
    result = CliRunner().invoke(main, ["inspect", str(directory), "--model", str(model), "--json"])
    data = json.loads(result.stdout)
    assert data["unknown"] == [] and data["shape_mismatches"] == [] and data["untied_variant"] and result.exit_code == 0
    assert data["parameters"] == sum(params.values())
    assert data["breakdown"]["components"]["lm_head"] == params["lm_head.weight"]
    text = CliRunner().invoke(main, ["inspect", str(directory), "--model", str(model)])
    assert "stores the LM head apart" in text.stdout and text.exit_code == 0


@pytest.mark.parametrize("given", [True, False], ids=["MODEL", "its-config"])
def test_memory_of_the_checkpoint_holds_the_head_and_tower(given: bool,
                                                           internvl_apart: tuple[Path, Path, dict[str, int]]) -> None:
    """`memory [MODEL] --checkpoint DIR` of that checkpoint: every tensor it stores is a weight row, the head
    and each vision-tower row included, at 4 B per parameter (transformers builds the tiny model in float32,
    saved as F32), none left unplaced; the tower rows are named as the formulas' ("vision q")."""
    directory, model, params = internvl_apart
    if not given:  # the checkpoint's own config.json, as the converter writes it
        (directory / "config.json").write_text(model.read_text())
    result = CliRunner().invoke(main, ["memory", *([str(model)] if given else []), "--checkpoint", str(directory),
                                       "--seq", "16", "--json"])
    assert result.exit_code == 0, result.output
    weights = json.loads(result.stdout)["weights"]
    assert weights["checkpoint"]["not_placed"] == [] and weights["params"] == sum(params.values())
    assert weights["total_bytes"] == 4 * sum(params.values())
    assert weights["components"]["lm_head"] == 4 * params["lm_head.weight"]
    tower = sum(n for name, n in params.items() if name.startswith(("model.vision_tower.", "model.multi_modal_projector.")))
    assert sum(size for row, size in weights["components"].items() if row.startswith("vision ")) == 4 * tower


@pytest.mark.parametrize("model_type", ["gemma3", "llava_onevision"])
def test_siglip_under_its_own_vision_model_prefix(model_type: str, tmp_path: Path) -> None:
    """The Hub's Gemma 3 and LLaVA-OneVision files keep SigLIP's `vision_model.` inside the tower
    (`vision_tower.vision_model.encoder.layers.0...`; transformers' conversion_mapping.py reads
    SiglipVisionModel as CLIPVisionModel, prefix_to_remove="vision_model"). transformers loads such a
    file with nothing missing or left over, and verify recognises every tensor of it."""
    directory, params = saved(model_type, tmp_path)
    path = directory / "model.safetensors"
    state = safetensors_torch.load_file(str(path))
    hub = {name.replace("vision_tower.", "vision_tower.vision_model.", 1): t for name, t in state.items()}
    assert sum(name.startswith("vision_tower.vision_model.") for name in hub) > 10
    safetensors_torch.save_file(hub, str(path), metadata={"format": "pt"})
    named = TINY_MULTIMODAL[model_type]["architectures"][0]
    _, info = getattr(transformers, named).from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    code, data = verify_json("--checkpoint", str(directory))
    assert data["checkpoint"]["unknown"] == [] and data["checkpoint"]["shape_mismatches"] == []
    assert data["checkpoint"]["parameters"] == sum(params.values()) and code == 0


@pytest.mark.parametrize("model_type", ["gemma4", "kimi_k25"])
def test_verify_compares_each_tower_row_with_transformers_whole_model(model_type: str, tmp_path: Path) -> None:
    """`verify CONFIG.json` of a tiny Gemma 4 (vision and Conformer audio) and Kimi-K2.5 (MoonViT): every
    parameter of transformers' whole model is named and shaped as the spec implies, and each tower row
    equals the formulas' (Kimi's config names Moonshot's class; transformers' own is found by model_type)."""
    config = {"model_type": model_type, **copy.deepcopy(TINY_MULTIMODAL[model_type])}
    if model_type == "kimi_k25":
        config["architectures"] = ["KimiK25ForConditionalGeneration"]  # as moonshotai/Kimi-K2.5's config.json
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, data = verify_json(str(path))
    source = data["transformers"]
    assert source["by_component"] and source["unknown"] == [] and source["shape_mismatches"] == [], source
    towers = [row for row in data["components"] if row["component"].startswith(("vision.", "audio."))]
    assert {row["component"].partition(".")[0] for row in towers} == ({"vision", "audio"} if model_type == "gemma4"
                                                                     else {"vision"})
    assert all(row["ok"] and row["transformers"] == row["analytic"] for row in towers)
    assert code == 0 and data["ok"], data["problems"]


def test_kimi_k25_hub_names(tmp_path: Path) -> None:
    """Kimi-K2.5's Hub files, as transformers' conversion_mapping.py "kimi_k25" reads them (its source
    patterns: `language_model.model.*`, `vision_tower.patch_embed.pos_emb.weight`,
    `vision_tower.encoder.blocks.N.{norm0,norm1,wqkv,wo,mlp.fc0,mlp.fc1}`, `mm_projector.proj.0/.2`), made
    from what save_pretrained writes (which spells a few prefixes otherwise): transformers loads the file
    with nothing missing or left over, and verify recognises every tensor, the fused wqkv as Q, K and V."""
    directory, params = saved("kimi_k25", tmp_path)
    path = directory / "model.safetensors"
    renames = (("language_model.model.blocks.", "language_model.model.layers."),
               ("vision_tower.encoder.patch_embed.", "vision_tower.patch_embed."),
               ("model.mm_projector.pre_norm.", "mm_projector.pre_norm."))
    hub = {}
    for name, tensor in safetensors_torch.load_file(str(path)).items():
        stored, canonical = next(((s, c) for s, c in renames if name.startswith(s)), ("", ""))
        hub[canonical + name[len(stored):]] = tensor
    assert "vision_tower.encoder.blocks.1.wqkv.weight" in hub and "mm_projector.pre_norm.weight" in hub
    safetensors_torch.save_file(hub, str(path), metadata={"format": "pt"})
    _, info = transformers.Kimi_K25ForConditionalGeneration.from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    code, data = verify_json("--checkpoint", str(directory))
    checkpoint = data["checkpoint"]
    assert checkpoint["unknown"] == [] and checkpoint["shape_mismatches"] == [], checkpoint
    assert checkpoint["parameters"] == sum(params.values())
    rows = {row["component"]: row for row in data["components"]}
    assert all(rows[f"vision.{key}"]["ok"] and rows[f"vision.{key}"]["checkpoint"] > 0 for key in ("q", "k", "v", "q_bias"))
    assert code == 0 and data["ok"], data["problems"]
