"""Hybrid models — gated DeltaNet (Qwen3-Next, Qwen3.5), Mamba2 (Mamba2, Nemotron-H, Bamba,
Granite-4.0-H) and short convolutions (LFM2) beside attention — against transformers itself.

For each model_type's tiny config (tests/tiny_models.py): our count equals transformers' model on
the meta device; our cache equals the tensors transformers' own cache object holds after a forward
pass, measured at two lengths, so that both the fixed per-sequence states and the per-token slope are
checked; and the header check recognises every tensor transformers writes.

transformers keeps each conv state one column wider than an engine must: `conv_kernel` past inputs
(LinearAttentionLayer.lazy_initialization pads the prefill to the kernel), where the conv needs only
the last kernel - 1 (vLLM's MambaStateShapeCalculator and llama.cpp's recurrent state keep
kernel - 1). gptcalc states the engines' size; the test adds the extra column back for transformers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from calc.analysis.count import count
from calc.errors import GptcalcError
from calc.spec.model import spec_from_dict
from calc.analysis.memory.kv import kv_cache
from calc.arch import transformers_view
from calc.cli import main
from calc.spec.load import load_spec
from oracle import spec_of, transformers_count
from tiny_models import VOCAB, tiny_config

CONFIGS = Path(__file__).resolve().parent / "configs" / "model_types"
HYBRIDS = ["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "mamba2", "nemotron_h", "bamba", "granitemoehybrid",
           "lfm2", "lfm2_moe", "mamba", "falcon_mamba", "jamba", "falcon_h1", "kimi_linear", "minimax", "minimax_m1",
           "olmo_hybrid", "zamba2"]
BATCH = 2


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_tiny_total_equals_transformers(model_type: str) -> None:
    assert count(spec_of(tiny_config(model_type))).total == transformers_count(tiny_config(model_type))


def _transformers_tiny(model_type: str):
    """transformers' own tiny model of `model_type`, random weights (seed 0)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    data = transformers_view(tiny_config(model_type))  # minimax_m1: as transformers' MiniMax reads it
    config = transformers.AutoConfig.for_model(data.pop("model_type"), **copy.deepcopy(data))
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _transformers_cache(model_type: str, seq: int) -> tuple[int, int]:
    """(K and V elements, conv and recurrent state elements) in transformers' cache after `seq` tokens."""
    torch = pytest.importorskip("torch")
    model = _transformers_tiny(model_type)
    ids = torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    rows = states = 0
    for layer in cache.layers:
        rows += sum(t.numel() for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                    if isinstance(t, torch.Tensor))
    for state in getattr(cache, "linear_cache", ()):  # MiniMaxCache: each lightning layer's [B, h, hd, hd] state
        states += state.numel() if isinstance(state, torch.Tensor) else 0
    for layer in cache.layers:
        for kind in ("conv_states", "recurrent_states"):
            states += sum(t.numel() for t in (getattr(layer, kind, None) or {}).values() if isinstance(t, torch.Tensor))
    return rows, states


@pytest.mark.parametrize("model_type", HYBRIDS)
@pytest.mark.parametrize("seq", [5, 9])
def test_cache_equals_transformers_cache_objects(model_type: str, seq: int) -> None:
    spec = spec_of(tiny_config(model_type))
    ours = kv_cache(spec, seq, BATCH, "fp32")  # 4 bytes an element, as the fp32 tiny model keeps them
    rows, states = _transformers_cache(model_type, seq)
    assert (ours.total_bytes - ours.state_bytes) // 4 == rows
    assert ours.state_bytes // 4 + _conv_channels(spec) * BATCH == states


def _conv_channels(spec) -> int:
    """Every conv state's channels over all layers: transformers' one extra column per sequence."""
    return sum(n * state.elements // state.cols for name, n in spec.layer_counts().items()
               for state in spec.blocks[name].cache(spec.d_model).states if state.name == "conv")


def test_deltanet_state_is_constant_and_attention_grows() -> None:
    """Qwen3-Next's shape of memory: 3 of every 4 layers hold a fixed state; only the others grow."""
    spec = spec_of(tiny_config("qwen3_next"))
    short, long = kv_cache(spec, 100, 1), kv_cache(spec, 1_000_000, 1)
    assert short.state_bytes == long.state_bytes > 0
    assert long.total_bytes - short.total_bytes == long.bytes_per_token * (1_000_000 - 100)
    assert {kind.block for kind in long.layers} == {"attention", "attention_dense"}


def test_pure_mamba2_cache_does_not_grow() -> None:
    spec = spec_of(tiny_config("mamba2"))
    assert kv_cache(spec, 1, 3).total_bytes == kv_cache(spec, 10**9, 3).total_bytes == 3 * kv_cache(spec, 1, 1).total_bytes


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_header_check_recognises_every_tensor(model_type: str, tmp_path: Path) -> None:
    from calc.checkpoint.report import read_checkpoint

    _transformers_tiny(model_type).save_pretrained(tmp_path)
    report = read_checkpoint(str(tmp_path))
    assert report.ok, report.problems
    assert report.breakdown.total == transformers_count(tiny_config(model_type))


def test_kvcache_json_shows_both_parts(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(tiny_config("nemotron_h")))
    result = CliRunner().invoke(main, ["kvcache", str(tmp_path), "--seq", "10", "--batch", "3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    (kv,) = data if isinstance(data, list) else data["caches"]
    rows = sum(layer["total_bytes"] for layer in kv["layers"])
    assert kv["state_bytes"] == 3 * kv["state_bytes_per_sequence"] > 0
    assert kv["total_bytes"] == rows + kv["state_bytes"]
    assert {state["name"] for state in kv["states"]} == {"conv", "recurrent"}


def test_kvcache_table_names_the_fixed_part(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(tiny_config("lfm2")))
    result = CliRunner().invoke(main, ["kvcache", str(tmp_path), "--seq", "10"])
    assert result.exit_code == 0, result.output
    assert "conv state" in result.output and "per sequence at any length" in result.output


# Published figures. LFM2-1.2B's model card gives the exact total; the others publish rounded ones.
# source: https://github.com/fetchwiki/LiquidAI-LFM2-1.2B/blob/60dc8602e06e43aec0e5cd5bb54fe7a7fedcdc81/README.md
# ("Parameters 1,170,340,608", a mirror of huggingface.co/LiquidAI/LFM2-1.2B)
def test_lfm2_1_2b_published_total() -> None:
    assert count(load_spec("lfm2-1.2b")).total == 1_170_340_608


@pytest.mark.parametrize("name, total_b, active_b", [
    # source: https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct ("80B total, 3B activated")
    ("qwen3-next-80b-a3b", 80, 3),
    # source: https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 (the name: 30B total, A3B)
    ("nemotron-3-nano-30b-a3b", 32, 3),
    # source: https://huggingface.co/docs/transformers/v4.51.3/model_doc/bamba ("Bamba 9B (9.78B)")
    ("bamba-9b", 10, None),
])
def test_rounded_published_totals(name: str, total_b: int, active_b: int | None) -> None:
    """Totals rounded to the billion; "A3B" counts the active parameters without the token embedding
    and the head (count prints both conventions), 3.25B and 2.88B here."""
    b = count(load_spec(name))
    assert round(b.total / 1e9) == total_b
    assert (b.active is None) if active_b is None else round((b.active - b.embeddings) / 1e9) == active_b


def test_falcon_h1_0_5b_published_total() -> None:
    # source: https://huggingface.co/tiiuae/Falcon-H1-0.5B-Base (the name: 0.5B); 521,411,104 is transformers' own count
    assert round(count(load_spec(str(CONFIGS / "falcon_h1.json"))).total / 1e8) == 5


def test_lfm2_8b_a1b_published_total() -> None:
    """source: https://huggingface.co/LiquidAI/LFM2-8B-A1B ("Total parameters 8.3B", "Active parameters 1.5B",
    "Layers 24 (18 conv + 6 attn)"), on a fine-tune's config.json with its shapes (tests/configs/model_types/
    SOURCES.yaml, lfm2_moe.json). The active 1,557,740,288 (the tied embedding counted) reaches 1.5B only by truncation."""
    b = count(load_spec(str(CONFIGS / "lfm2_moe.json")))
    assert round(b.total / 1e8) == 83 and b.active // 10**8 == 15
    assert sum(block.layers for block in b.blocks if "attention" in block.name) == 6


def test_granite_4_0_h_350m_as_released() -> None:
    """Granite-4.0-H-350M's config.json (tests/configs/model_types/granitemoehybrid.json) names its mixers
    "mamba" and "attention", as every Granite-4.0-H config does; transformers renames them on load
    (configuration_utils.py _LEGACY_LAYER_TYPE_REMAP), and so does gptcalc: 28 Mamba2 layers, 4 attention.
    Its bf16 model.safetensors is "649MB (340M parameters)" (hashneo/nano-vllm-go GRANITE_STATUS.md, the
    download beside this config; MiB), and whatmodel.sh lists "0.34B params"."""
    b = count(load_spec(str(CONFIGS / "granitemoehybrid.json")))
    assert [(block.name, block.layers) for block in b.blocks] == [("mamba", 28), ("attention", 4)]
    assert round(b.total / 1e6) == 340 and round(2 * b.total / 2**20) == 649


@pytest.mark.parametrize(("model_type", "key", "kinds"), [
    ("nemotron_h", "layers_block_type", ["mamba", "mlp", "attention", "moe"]),
    ("granitemoehybrid", "layer_types", ["mamba", "attention"])])
def test_older_layer_type_names_read_as_transformers_renames_them(model_type: str, key: str, kinds: list[str]) -> None:
    """Configs written before transformers 5 say "mamba" and "attention" where it now says linear_attention
    and full_attention; every config renames them as it loads (configuration_utils.py, _LEGACY_LAYER_TYPE_REMAP;
    Nemotron-H's layers_block_type is its layer_types). The tiny models with the older names, the layers as
    hybrid_override_pattern "M-*E" and the tiny Granite's list give them."""
    config = {**{k: v for k, v in tiny_config(model_type).items() if k != "hybrid_override_pattern"}, key: kinds}
    assert count(spec_of(config)).total == transformers_count(config) == count(spec_of(tiny_config(model_type))).total


def test_a_parallel_group_holds_different_mixers() -> None:
    """Two members of one kind would share component keys (and tensor names): refused by name."""
    attention = {"n_heads": 2, "head_dim": 8}
    spec = {"vocab_size": 10, "d_model": 16, "n_positions": 8, "final_norm": None, "head": {"tied": True},
            "blocks": {"b": {"attention": {"kind": "parallel", "mixers": [attention, attention]}, "mlp": None,
                             "norm": {"kind": "rmsnorm"}}}, "layers": [[1, "b"]]}
    with pytest.raises(GptcalcError, match="blocks.b.attention.*two members have the component"):
        spec_from_dict(spec, "spec")


# DeepSeek-V3.2's sparse attention (DSA): MLA plus a lightning indexer whose keys are a second per-token cache.
DSA = ["deepseek_v32", "glm_moe_dsa"]


@pytest.mark.parametrize("model_type", DSA)
def test_dsa_tiny_total_equals_transformers(model_type: str) -> None:
    assert count(spec_of(tiny_config(model_type))).total == transformers_count(tiny_config(model_type))


@pytest.mark.parametrize("model_type", DSA)
def test_dsa_header_check_recognises_every_tensor(model_type: str, tmp_path: Path) -> None:
    from calc.checkpoint.report import read_checkpoint

    _transformers_tiny(model_type).save_pretrained(tmp_path)
    report = read_checkpoint(str(tmp_path))
    assert report.ok, report.problems


@pytest.mark.parametrize("model_type", DSA)
def test_dsa_indexer_keys_equal_transformers_cache(model_type: str) -> None:
    """transformers' DynamicIndexedLayer keeps [B, T, index_head_dim] indexer keys in each layer that
    runs the indexer; ours are the 'DSA indexer' rows beside the latent (GLM-5's shared layers have none)."""
    torch = pytest.importorskip("torch")
    spec, seq = spec_of(tiny_config(model_type)), 7
    ids = torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = _transformers_tiny(model_type)(ids, use_cache=True).past_key_values
    theirs = sum(layer.indexer_keys.numel() for layer in cache.layers if getattr(layer, "indexer_keys", None) is not None
                 and layer.indexer_keys.numel())
    ours = kv_cache(spec, seq, BATCH, "fp32")
    indexer = [kind for kind in ours.layers if kind.kind == "DSA indexer"]
    assert sum(kind.n_layers * kind.k for kind in indexer) * seq * BATCH == theirs > 0


def test_published_dsa_totals() -> None:
    """DeepSeek-V3.2's and GLM-5's config.json files, counted exactly as transformers 5.24 builds them."""
    # transformers' own count of each file (tests/test_arch.py compares them again); the Hub's "685B" for
    # DeepSeek-V3.2 adds the MTP layer (https://huggingface.co/deepseek-ai/DeepSeek-V3.2), GLM-5's card says 744B / 40B
    # (https://huggingface.co/zai-org/GLM-5): 743.9B, and 39.9B active without the embedding and the head.
    v32 = count(load_spec(str(CONFIGS / "deepseek_v32.json")))
    glm5 = count(load_spec(str(CONFIGS / "glm_moe_dsa.json")))
    assert v32.total == 671_877_929_216 and glm5.total == 743_911_199_232
    assert round(glm5.total / 1e9) == 744 and round((glm5.active - glm5.embeddings) / 1e9) == 40
    assert round((v32.total + v32.extra["mtp_layers"] + v32.extra["mtp_embedding_copies"]) / 1e9) == 685


def test_published_kimi_linear_totals() -> None:
    """Kimi-Linear-48B-A3B-Instruct's config.json: its checkpoint's parameter count, and the card's rounded figures."""
    b = count(load_spec(str(CONFIGS / "kimi_linear.json")))
    # source: the checkpoint's safetensors, 20,493 tensors summing to 49,122,681,728 parameters
    # (https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct/tree/main, as a model-information report
    # of the downloaded checkpoint prints it; tests/configs/model_types/SOURCES.yaml): the model plus the 26
    # routers' e_score_correction_bias buffers.
    assert b.total + b.extra["router_score_bias"] == 49_122_681_728
    # source: https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct ("48B" total, "3B" activated): both
    # without the token embedding and the head (49.12B and 3.48B with them)
    assert round((b.total - b.embeddings) / 1e9) == 48 and round((b.active - b.embeddings) / 1e9) == 3


def test_kimi_linear_state_is_fp32_and_mla_cache_is_the_latent() -> None:
    """Kimi Linear keeps each KDA layer's recurrent state in float32 (transformers' update_recurrent_state(
    state.to(torch.float32))) and its 7 MLA layers the 512-wide latent and the 64-wide shared key per token."""
    spec = load_spec(str(CONFIGS / "kimi_linear.json"))
    kv = kv_cache(spec, 1000, 1, "bf16")
    assert kv.state_bytes == 20 * (3 * 4096 * 3 * 2 + 32 * 128 * 128 * 4)
    assert kv.total_bytes - kv.state_bytes == 7 * (512 + 64) * 1000 * 2


def test_published_minimax_m1_totals() -> None:
    """MiniMax-M1's config.json (its own code's keys), counted as transformers' MiniMax builds it."""
    b = count(load_spec(str(CONFIGS / "minimax_m1.json")))
    # source: https://github.com/MiniMax-AI/MiniMax-M1/blob/2abb4f45a9df4154b4bde024d51874bd127edcee/README.md
    # ("456 billion parameters in total, with 45.9 billion parameters activated per token"): 456.09B, and
    # 45.94B active without the token embedding and the head
    assert round(b.total / 1e9) == 456 and round((b.active - b.embeddings) / 1e8) == 459


def test_lightning_state_is_constant() -> None:
    """MiniMax-M1 keeps one 128 x 128 state per head in each of its 70 lightning layers, whatever the
    length; only its 10 softmax layers' K and V (8 KV heads of 128) grow."""
    spec = load_spec(str(CONFIGS / "minimax_m1.json"))
    kv = kv_cache(spec, 1000, 1, "bf16")
    assert kv.state_bytes == 70 * 64 * 128 * 128 * 2
    assert kv.total_bytes - kv.state_bytes == 10 * 2 * 8 * 128 * 1000 * 2


def test_olmo_hybrid_defaults_equal_transformers() -> None:
    """No verbatim OLMo-Hybrid config.json could be found; OlmoHybridConfig's defaults are documented as
    "a similar configuration to that of the allenai/Olmo-Hybrid-7B model"
    (source: https://docs.vllm.ai/en/v0.18.1/api/vllm/transformers_utils/configs/olmo_hybrid/), so the
    empty config is counted as transformers builds it, and rounds to the name's 7B."""
    config = {"model_type": "olmo_hybrid"}
    total = count(spec_of(config)).total
    assert total == transformers_count(config) and round(total / 1e9) == 7


@pytest.mark.parametrize("model_type", ["zamba2", "nemotron_h"])
def test_reference_floors_the_time_step_in_a_prefill_only(model_type: str) -> None:
    """transformers' Zamba2MambaMixer and NemotronHMamba2Mixer floor dt at time_step_min in their
    chunked scan (a prefill: time_step_limit = (time_step_min, inf); modeling_zamba2.py,
    modeling_nemotron_h.py ~line 415) and not in their one-token recurrent update
    (mamba2_selective_state_update gets no limit). time_step_min = 5.0, above the init range's top
    (time_step_max 0.1), makes the floor bind for every head: our logits equal transformers' in a
    prefill and in a cached decode, where flooring every step as well would differ, and the same
    weights without the floor are more than the tolerance away in the prefill."""
    torch = pytest.importorskip("torch")
    from calc.reference.model import build
    from test_reference_equivalence import ATOL, IDS, cached_decode, random_model

    config = {**tiny_config(model_type), "time_step_min": 5.0}
    spec = spec_of(config)
    hf = random_model(config)
    floored = build(spec)
    data = spec.model_dump()
    mixers = [block["attention"] for block in data["blocks"].values() if (block["attention"] or {}).get("dt_min")]
    assert mixers  # the floor reached the spec
    for mixer in mixers:
        mixer["dt_min"] = None
    unfloored = build(spec_from_dict(data, f"{model_type}-no-floor"))
    for ours in (floored, unfloored):
        ours.load_state_dict(hf.state_dict(), strict=True)
    with torch.no_grad():
        expected = hf(IDS).logits
        torch.testing.assert_close(floored(IDS), expected, rtol=0, atol=ATOL)
        assert (unfloored(IDS) - expected).abs().max() > 10 * ATOL
    cached_decode(floored, hf)



def test_granite4_layer_types_as_its_config_names_them() -> None:
    """Granite-4.0-H's config.json names its layers "mamba" and "attention" (ibm-granite/granite-4.0-h-small),
    which transformers renames on loading (configuration_utils.py _LEGACY_LAYER_TYPE_REMAP): the same model."""
    config = {**tiny_config("granitemoehybrid"), "layer_types": ["mamba", "attention"]}
    spec = spec_of(config)
    renamed = spec_of(tiny_config("granitemoehybrid"))
    assert [spec.block_at(i) for i in range(2)] == [renamed.block_at(i) for i in range(2)]
    # source: transformers' own model of the same config, counted on the meta device
    assert count(spec).total == transformers_count(config)
