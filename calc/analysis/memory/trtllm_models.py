"""Which models TensorRT-LLM's PyTorch backend can build at all.

TensorRT-LLM picks a model class by config.json's `architectures[0]` and nothing else
(tensorrt_llm/_torch/models/modeling_auto.py, AutoModelForCausalLM._resolve_class -> get_registered_model_class);
an architecture no `@register_auto_model` names stops it with "Unknown architecture for AutoModelForCausalLM".
The registered names are indexed, without importing the zoo, in tensorrt_llm/_torch/models/_arch_index.py
(MODEL_ARCH_TO_MODULE; its test, test_lazy_model_zoo.py, fails on any drift from the decorators). The set below
is that table's keys at NVIDIA/TensorRT-LLM commit 065ff9e93780bc0bdbfdbc7156a306ca14f5850c.
A spec without an architecture (a user's YAML spec; GPT-3 175B, whose source is a paper) is not checked: every
other preset names its source config's class (tests/test_trtllm_presets.py).
"""

from __future__ import annotations

from calc.errors import GptcalcError
from calc.spec.model import ModelSpec

__all__ = ["TRTLLM_ARCHITECTURES", "TRTLLM_COMMIT", "refuse_unbuilt"]

TRTLLM_COMMIT = "065ff9e93780bc0bdbfdbc7156a306ca14f5850c"
TRTLLM_ARCHITECTURES = frozenset({
    "AfmoeForCausalLM", "BartForConditionalGeneration", "BertForSequenceClassification", "CLIPVisionModel",
    "EAGLE3LlamaForCausalLM", "Eagle3DeepSeekV3ForCausalLM", "HCXVisionModel", "MBartForConditionalGeneration",
    "MTPDraftModelForCausalLM", "MistralLarge3EagleForCausalLM", "PixtralVisionModel", "SiglipVisionModel",
    "T5ForConditionalGeneration", "WhisperForConditionalGeneration", "Cohere2ForCausalLM", "Cosmos3ForConditionalGeneration", "DeciLMForCausalLM",
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Exaone4ForCausalLM",
    "Exaone4_5_ForConditionalGeneration", "ExaoneMoEForCausalLM", "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration", "Gemma4AssistantForCausalLM", "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration", "Glm4MoeForCausalLM",
    "GlmMoeDsaForCausalLM", "GptOssForCausalLM", "HCXVisionForCausalLM", "HunYuanDenseV1ForCausalLM",
    "HunYuanMoEV1ForCausalLM", "KimiK25ForConditionalGeneration", "KimiK3ForConditionalGeneration",
    "KimiLinearForCausalLM", "LagunaForCausalLM", "Llama4ForConditionalGeneration", "LlamaForCausalLM",
    "LlavaLlamaModel", "LlavaNextForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration",
    "MiniMaxM2ForCausalLM", "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
    "Mistral3ForConditionalGeneration", "MistralForCausalLM", "MistralLarge3ForCausalLM", "MixtralForCausalLM",
    "MllamaForConditionalGeneration", "NemotronForCausalLM", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2", "Phi3ForCausalLM", "Phi4MMForCausalLM",
    "PixtralForConditionalGeneration", "Qwen2ForCausalLM", "Qwen2ForProcessRewardModel", "Qwen2ForRewardModel",
    "Qwen2MoeForCausalLM", "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3ForCausalLM", "Qwen3ForTextEmbedding", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
    "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration",
    "QwenImageBenchForConditionalGeneration", "SeedOssForCausalLM", "Starcoder2ForCausalLM", "Step3p5ForCausalLM",
    "Step3p7ForConditionalGeneration",
})


def refuse_unbuilt(spec: ModelSpec, engine: str) -> None:
    """Under --engine trtllm, stop where TensorRT-LLM would: at a config whose architecture it has no class for,
    before any of its memory is sized (a budget for a model it cannot load would be fiction)."""
    if engine == "trtllm" and spec.architecture is not None and spec.architecture not in TRTLLM_ARCHITECTURES:
        raise GptcalcError(f"--engine trtllm: TensorRT-LLM's PyTorch backend has no model for {spec.architecture} "
                           f"(tensorrt_llm/_torch/models/_arch_index.py at {TRTLLM_COMMIT[:10]}; it stops with "
                           "\"Unknown architecture for AutoModelForCausalLM\")")
