"""The analytic counter against published totals, the tutorials' arithmetic and transformers itself."""

from __future__ import annotations

import pytest

from calc.analysis.breakdown import MODEL_COMPONENTS
from calc.analysis.count import count
from calc.spec.flat import flat_view
from calc.spec.load import load_spec, preset_names

# Totals published for the real checkpoints. Each is also written out as independent arithmetic
# (the formulas of docs/counting.md with the published config values), so a typo in either fails.
# source: the figures, which are `model.num_parameters()` of the Hugging Face models
# (openai-community/gpt2*, huggyllama/llama-7b, meta-llama/*, mistralai/Mistral-7B-v0.1, Qwen/*),
# shown rounded on their model pages (124M, 355M, 774M, 1.56B, 6.74B, 69B, 72.7B, ...).
GOLDEN = {
    # V*d + n_ctx*d + L*(12d^2 + 13d) + 2d: per block 2 LayerNorms (4d), QKV 3d^2+3d, WO d^2+d,
    # MLP 4d^2+4d and 4d^2+d; then the final LayerNorm (2d). The head is tied.
    "gpt2-small": (124_439_808, 50257 * 768 + 1024 * 768 + 12 * (12 * 768 * 768 + 13 * 768) + 2 * 768),
    "gpt2-medium": (354_823_168, 50257 * 1024 + 1024 * 1024 + 24 * (12 * 1024**2 + 13 * 1024) + 2 * 1024),
    "gpt2-large": (774_030_080, 50257 * 1280 + 1024 * 1280 + 36 * (12 * 1280**2 + 13 * 1280) + 2 * 1280),
    "gpt2-xl": (1_557_611_200, 50257 * 1600 + 1024 * 1600 + 48 * (12 * 1600**2 + 13 * 1600) + 2 * 1600),
    # 2*V*d (embedding + untied head) + L*(4*d*d + 3*d*ff + 2d) + d
    "llama-7b": (6_738_415_616, 2 * 32000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096),
    "llama-2-7b": (6_738_415_616, 2 * 32000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096),
    "llama-2-13b": (13_015_864_320, 2 * 32000 * 5120 + 40 * (4 * 5120**2 + 3 * 5120 * 13824 + 2 * 5120) + 5120),
    # GQA: Q and WO are d*d, K and V are d*(kv*128) each
    "llama-2-70b": (68_976_648_192, 2 * 32000 * 8192 + 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192) + 8192),
    "llama-3-8b": (8_030_261_248, 2 * 128256 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 4096),
    "llama-3-70b": (70_553_706_496, 2 * 128256 * 8192 + 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192) + 8192),
    "mistral-7b": (7_241_732_096, 2 * 32000 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 4096),
    # Qwen2: plus Q, K, V biases (d + 2*kv*128 per layer)
    "qwen2-72b": (72_706_203_648, 2 * 152064 * 8192 + 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 29568 + 2 * 8192 + 8192 + 2 * 1024) + 8192),
    "qwen2-7b": (7_615_616_512, 2 * 152064 * 3584 + 28 * (2 * 3584**2 + 2 * 3584 * 512 + 3 * 3584 * 18944 + 2 * 3584 + 3584 + 2 * 512) + 3584),
    # tied: one V*d
    "qwen2-0.5b": (494_032_768, 151936 * 896 + 24 * (2 * 896**2 + 2 * 896 * 128 + 3 * 896 * 4864 + 2 * 896 + 896 + 2 * 128) + 896),
}


# The presets of released models transcribe their config.json (presets/<name>.yaml, `config:`).
# source: transformers 5.23's own model of that config on the meta device, summed once per tensor
# (tests/test_arch.py recomputes it live); where keras-hub publishes the same exact count, the
# preset's `published` field cites it (marked "keras" here). Llama-3.2's keras-hub figures count the
# tied head a second time: 1,498,482,688 - 128,256 x 2,048 = 1,235,814,400 and
# 3,606,752,256 - 128,256 x 3,072 = 3,212,749,824.
RELEASED = {
    # transformers 5.24's own count of each preset's config.json (tests/test_arch.py checks it again)
    "qwen3-next-80b-a3b": 79_674_391_296,
    "nemotron-3-nano-30b-a3b": 31_577_937_344,
    "lfm2-1.2b": 1_170_340_608,  # also the model card's exact figure
    "bamba-9b": 9_780_235_392,
    "mamba-codestral-7b": 7_285_403_648,
    "deepseek-v2-lite": 15_706_484_224,
    "deepseek-v3": 671_026_404_352,
    "gemma-2-27b": 27_227_128_320,  # keras
    "gemma-2-2b": 2_614_341_888,  # keras
    "gemma-2-9b": 9_241_705_984,  # keras
    "gemma-3-1b": 999_885_952,  # keras
    # Gemma 3 with its SigLIP tower: keras-hub medgemma_4b / gemma3_12b + 64 x 3840 (its vision+text preset has a
    # 262,144-row vocabulary, the config 262,208) / medgemma_instruct_27b, https://github.com/keras-team/keras-hub/blob/
    # 00d9f10a8e74d4f552ed50170b7dcadb65d3bd52/keras_hub/src/models/gemma3/gemma3_presets.py
    "gemma-3-4b": 4_300_079_472,
    "gemma-3-12b": 12_187_079_280 + 64 * 3840,
    "gemma-3-27b": 27_432_406_640,
    "gpt-oss-120b": 116_829_156_672,
    "gpt-oss-20b": 20_914_757_184,
    "llama-3.1-405b": 405_853_388_800,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,  # keras
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "mistral-nemo": 12_247_782_400,
    "mixtral-8x22b": 140_620_634_112,
    "mixtral-8x7b": 46_702_792_704,  # keras
    "olmo-2-7b": 7_298_617_344,
    "phi-3-mini": 3_821_079_552,  # keras
    "phi-4": 14_659_507_200,
    "qwen2.5-0.5b": 494_032_768,  # keras
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,  # keras (the instruct preset, same shape)
    "qwen2.5-3b": 3_085_938_688,  # keras
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
    "qwen3-0.6b": 596_049_920,
    "qwen3-1.7b": 1_720_574_976,
    "qwen3-14b": 14_768_307_200,  # keras
    "qwen3-235b-a22b": 235_093_634_560,  # keras
    "qwen3-30b-a3b": 30_532_122_624,  # keras
    "qwen3-32b": 32_762_123_264,  # keras
    "qwen3-4b": 4_022_468_096,  # keras
    "qwen3-8b": 8_190_735_360,  # keras
    # the 2025-26 flagships: transformers 5.24's count of the config.json each preset transcribes, as
    # tests/configs/model_types/SOURCES.yaml records it (transformers_params; a multimodal model's whole class)
    "deepseek-v3.2": 671_877_929_216,
    "glm-5": 743_911_199_232,
    "kimi-k2": 1_026_408_209_408,
    "kimi-k2.5": 1_026_879_353_328,  # the whole model: decoder 1,026,408,209,408 + MoonViT 471,143,920
    "glm-4.7-flash": 29_943_390_976,
    "glm-4.6": 352_797_814_784,
    "minimax-m2": 228_689_748_992,
    "mimo-v2-flash": 308_778_768_832,
    # transformers' 741,053,585,408 less the 180,388,626,432 zero-expert rows it allocates and never reads
    # (tests/test_longcat.py measures both on transformers' own model)
    "longcat-flash": 741_053_585_408 - 180_388_626_432,
    "qwen3.5-27b": 27_356_728_560,
    "qwen3.6-27b": 27_356_728_560,  # Qwen3.5-27B's shape (SOURCES.yaml qwen3_5-qwen3.6-27b.json)
    "qwen3.5-35b-a3b": 35_107_181_936,
    "qwen3.5-397b-a17b": 396_802_360_816,
    "llama-4-scout": 108_641_793_536,
    "llama-4-maverick": 401_583_781_376,
    "qwen3-coder-480b-a35b": 480_154_875_392,
    "nemotron-h-56b": 56_324_350_464,
    "jamba-v0.1": 51_570_323_328,
    "qwen3-vl-4b": 4_437_815_808,
    "devstral-small-2": 24_011_361_280,
    "kimi-linear-48b-a3b": 49_122_675_072,
    "minimax-m1": 456_089_655_296,
    "qwen3-vl-30b-a3b": 31_070_754_032,
    # the whole model: decoder 25,233,141,760 + vision tower 572,792,112 (transformers 5.24's
    # Gemma4ForConditionalGeneration on the meta device, tests/configs/model_types/gemma4-26b-a4b.json)
    "gemma-4-26b-a4b": 25_805_933_872,
    "deepseek-v4-flash": 284_332_230_231,  # its MTP layer (6,610,048,891) shown beside, as transformers leaves it out
    # the whole model, equal to the released checkpoint's 1,388 tensors (tests/test_towers.py
    # test_qwen3_vl_235b_is_its_checkpoint): decoder 235,093,634,560 + vision tower 576,388,336
    "qwen3-vl-235b-a22b": 235_670_022_896,
    "lfm2-8b-a1b": 8_339_929_856,  # the model card: "8.3B total parameters"
}
# The presets written in the flat form, which the torch reference and transformers' Llama/GPT-2
# classes below can build.
FLAT_PRESETS = sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_models(name: str) -> None:
    assert count(load_spec(name)).total == RELEASED[name]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_published_totals(name: str) -> None:
    published, arithmetic = GOLDEN[name]
    assert published == arithmetic
    assert count(load_spec(name)).total == published


@pytest.mark.parametrize("name, total, non_embedding", [
    # source: https://huggingface.co/Qwen/Qwen2.5-1.5B-Instruct "Number of Parameters: 1.54B,
    # Non-Embedding: 1.31B" (mirrored: ZHUI/paddlenlp_model_readme .../Qwen2.5-1.5B-Instruct/index.md#L25)
    ("qwen2.5-1.5b", 1.54, 1.31),
    # source: https://huggingface.co/Qwen/Qwen2.5-72B-Instruct "72.7B" (its "70.0B non-embedding" is not
    # reproduced: 72.7B less the untied embedding and head, 2 x 152,064 x 8,192, is 70.2B)
    ("qwen2.5-72b", 72.7, None),
    # source: https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite "15.7B total parameters"
    ("deepseek-v2-lite", 15.7, None),
])
def test_model_cards_round_our_totals(name: str, total: float, non_embedding: float | None) -> None:
    b = count(load_spec(name))
    digits = len(str(total).split(".")[1])
    assert round(b.total / 1e9, digits) == total
    if non_embedding is not None:
        assert round((b.total - b.get("token_embedding") - b.get("lm_head")) / 1e9, digits) == non_embedding


def test_every_preset_has_a_golden_total() -> None:
    assert set(preset_names()) - set(GOLDEN) - set(RELEASED) == {"gpt3-175b"}


def test_gpt3_matches_the_papers_175b() -> None:
    # source: Brown et al. 2020, Table 2.1: "GPT-3 175B", n_params 175.0B. The paper rounds; the
    # exact figure from its table's shape (GPT-2 architecture, d_ff = 4 d_model, vocab 50,257) is:
    d, layers = 12288, 96
    exact = 50257 * d + 2048 * d + layers * (12 * d * d + 13 * d) + 2 * d
    total = count(load_spec("gpt3-175b")).total
    assert total == exact == 174_604_259_328
    assert round(total, -9) == 175_000_000_000


def test_seed_004_bias_free_gpt2() -> None:
    # source: hironori-maruoka, "Understanding LLM Mechanisms from GPT-2 small (124M)", https://developer.mamezou-tech.com/en/blogs/2025/09/03/attention ("LLMs from scratch" GPT-2 small with qkv_bias=False): 124,412,160 in total;
    # token embedding 38,597,376, position embedding 786,432, per block 7,085,568 (attention
    # 2,360,064, FFN 4,722,432, LayerNorm 3,072), final LayerNorm 1,536; untied: 163,009,536.
    spec = load_spec("gpt2-small", {"qkv_bias": False})
    b = count(spec)
    per = b.per_layer
    attention = per["q"] + per["k"] + per["v"] + per["attn_out"] + per["attn_out_bias"]
    ffn = per["mlp_up"] + per["mlp_up_bias"] + per["mlp_down"] + per["mlp_down_bias"]
    assert b.total == 124_412_160
    assert (b.get("token_embedding"), b.get("position_embedding")) == (38_597_376, 786_432)
    assert sum(per.values()) == 7_085_568
    assert (attention, ffn, per["attn_norm"] + per["mlp_norm"]) == (2_360_064, 4_722_432, 3_072)
    assert b.get("final_norm") == 1_536
    assert count(load_spec("gpt2-small", {"qkv_bias": False, "tie_embeddings": False})).total == 163_009_536


def test_the_mistakes_other_calculators_make() -> None:
    # source: DESIGN.md's list of user complaints; each is the real total minus (or plus) one term.
    gpt2 = count(load_spec("gpt2-small"))
    untied = count(load_spec("gpt2-small", {"tie_embeddings": False}))
    assert untied.total - gpt2.total == gpt2.tied_saving == 50257 * 768  # tied head counted twice
    llama = count(load_spec("llama-7b"))
    assert llama.get("lm_head") == 32000 * 4096 == 131_072_000  # the LM head others forget
    no_bias_no_pos = load_spec("gpt2-small", {"qkv_bias": False, "attn_out_bias": False,
                                              "mlp_bias": False, "position_embedding": "none",
                                              "norm": "rmsnorm"})
    # GPT-2 short by 888,576 = 786,432 position rows + 12 blocks * 11 bias vectors of 768
    # (Q, K, V, WO, 4 for the 3072-wide MLP up, MLP down, two LayerNorms) + the final LayerNorm's
    assert gpt2.total - count(no_bias_no_pos).total == 888_576 == 1024 * 768 + 12 * 11 * 768 + 768


def test_gated_mlp_has_three_matrices() -> None:
    b = count(load_spec("llama-7b"))
    assert b.per_layer["mlp_gate"] == b.per_layer["mlp_up"] == b.per_layer["mlp_down"] == 4096 * 11008


@pytest.mark.parametrize("name", preset_names())
def test_rows_add_up_by_layer_kind(name: str) -> None:
    b = count(load_spec(name))
    assert b.decoder_total == sum(b.components.values()) == b.total - sum(t.total for t in b.towers)
    assert b.layers_total == sum(block.layers * sum(block.per_layer.values()) for block in b.blocks)
    assert sum(block.layers for block in b.blocks) == b.n_layers
    assert all(isinstance(value, int) for value in b.components.values())
    assert not any(set(block.per_layer) & set(MODEL_COMPONENTS) for block in b.blocks)
    assert b.non_embedding == b.total - b.get("token_embedding") - b.get("position_embedding") - b.get("lm_head")


def _transformers_model(name: str):  # noqa: ANN202 - a transformers model on the meta device
    """The reference implementation, built from an independent translation of the preset."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    s = flat_view(load_spec(name))
    if s.family == "gpt2":
        config = transformers.GPT2Config(vocab_size=s.vocab_size, n_positions=s.n_positions, n_embd=s.d_model,
                                         n_layer=s.n_layers, n_head=s.n_heads, n_inner=s.d_ff)
        cls = transformers.GPT2LMHeadModel
    else:
        kind = "Qwen2" if name.startswith("qwen2") else "Mistral" if name.startswith("mistral") else "Llama"
        config = getattr(transformers, f"{kind}Config")(
            vocab_size=s.vocab_size, hidden_size=s.d_model, intermediate_size=s.d_ff,
            num_hidden_layers=s.n_layers, num_attention_heads=s.n_heads, num_key_value_heads=s.n_kv_heads,
            max_position_embeddings=s.n_positions, tie_word_embeddings=s.tie_embeddings)
        cls = getattr(transformers, f"{kind}ForCausalLM")
    with torch.device("meta"):
        return cls(config)


@pytest.mark.parametrize("name", FLAT_PRESETS)
def test_matches_transformers_reference(name: str) -> None:
    model = _transformers_model(name)
    reference = sum(p.numel() for p in model.parameters())  # shared (tied) tensors appear once
    assert count(load_spec(name)).total == reference
