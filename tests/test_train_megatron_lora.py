"""LoRA as Megatron-Bridge runs it (`--framework megatron`): megatron-core's layers fuse q|k|v into linear_qkv and
gate|up into linear_fc1 on every model, and its LoRA puts one ParallelLinearAdapter on each target module, A
(linear_in) [in, r] and B (linear_out) [r, the fused output], both split t ways under tensor parallelism
(NVIDIA-NeMo/Megatron-Bridge 2afd2d3 src/megatron/bridge/peft/lora.py, LoRA.transform; 29836cc
src/megatron/bridge/peft/utils.py, get_adapter_attributes_from_linear and ParallelLinearAdapter.__init__)."""

from __future__ import annotations

import json

import pytest

from cli_checks import check_run

LORA = ["train", "llama-3.1-8b", "--seq", "2048", "--micro-batch", "1", "--lora-rank", "16", "--framework", "megatron"]
MODULES = "linear_qkv,linear_proj,linear_fc1,linear_fc2"  # Megatron-Bridge's LoRA.target_modules default
# meta-llama/Llama-3.1-8B config.json: hidden_size 4096, 32 attention heads and 8 KV heads of head_dim 128,
# intermediate_size 14336, num_hidden_layers 32
D, KV, FF, LAYERS = 4096, 8 * 128, 14336, 32
QKV_OUT, FC1_OUT = D + 2 * KV, 2 * FF  # linear_qkv's q|k|v, linear_fc1's gate|up (megatron-core's fused widths)
PER_LAYER = 16 * ((D + QKV_OUT) + (D + D) + (D + FC1_OUT) + (FF + D))  # r·(in + out) per target module


def _trained(*options: str) -> int:
    return _trained_on(LORA[1], *options)


def _trained_on(model: str, *options: str) -> int:
    result = check_run([*LORA[:1], model, *LORA[2:], *options, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["trained_params"]


@pytest.mark.parametrize("targets", [MODULES, "q,k,v,o,gate,up,down"])
def test_one_adapter_per_fused_linear(targets: str) -> None:
    """Llama-3.1-8B, rank 16: 32 × 16·[(4096 + 6144) + (4096 + 4096) + (4096 + 28672) + (14336 + 4096)] =
    35,651,584, where PEFT's adapter per checkpoint module takes 41,943,040 (tests/test_train.py)."""
    assert _trained("--lora-targets", targets) == LAYERS * PER_LAYER == 35_651_584


def test_tensor_parallelism_splits_both_adapter_matrices() -> None:
    """A is column- (linear_qkv, linear_fc1: r/t rows) or row-parallel (linear_proj, linear_fc2: in/t columns) and B
    column-parallel (out/t): every adapter r·(in + out)/t per GPU."""
    assert _trained("--gpus", "2", "--tp", "2") == LAYERS * PER_LAYER // 2


def test_per_part_gives_each_projection_its_adapter() -> None:
    """--lora-per-part: an adapter on q, k, v, gate and up apart, PEFT's count on Llama's separate modules."""
    assert _trained("--lora-per-part") == 41_943_040


def test_canonical_lora_splits_a_over_tensor_parallelism_too() -> None:
    """CanonicalLoRA (--lora-per-part) builds each part's adapter as a ParallelLinearAdapter(in, part's out) with
    LoRA's arguments (canonical_lora.py @ 869bb39, CanonicalLoRA.transform: adapter_kwargs from
    get_adapter_attributes_from_linear), so A is split t ways as LoRA's is: 41,943,040 / 2 a GPU at --tp 2."""
    assert _trained("--lora-per-part", "--gpus", "2", "--tp", "2") == 41_943_040 // 2


def test_a_target_module_alone() -> None:
    assert _trained("--lora-targets", "linear_qkv") == LAYERS * 16 * (D + QKV_OUT)


@pytest.mark.parametrize(("model", "options", "message"), [
    ("llama-3.1-8b", ["--lora-targets", "q,v"], "--lora-targets: megatron-core fuses q, k, v into one linear, which "
     "Megatron-Bridge's LoRA adapts whole: target q, k, v together (or its name), not q, v alone (an adapter per "
     "part: --lora-per-part)"),
    ("llama-3.1-8b", ["--gpus", "8", "--tp", "8", "--lora-rank", "12"], "--lora-rank: 12 does not divide by --tp 8: "
     "Megatron-Bridge's adapter A is column-parallel on linear_qkv and linear_fc1, r/t rows per GPU "
     "(megatron.core's divide)"),
    ("qwen3-30b-a3b", ["--lora-targets", "gate"], "--lora-targets: megatron-core fuses gate, up into one linear, "
     "which Megatron-Bridge's LoRA adapts whole: target gate, up together (or its name), not gate alone (an adapter "
     "per part: --lora-per-part)"),
])
def test_what_megatron_does_not_run_as_counted_is_refused(model: str, options: list[str], message: str) -> None:
    result = check_run([*LORA[:1], model, *LORA[2:], *options])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {message}\n"


def test_adapters_are_bf16_with_fp32_main_grads_masters_and_states() -> None:
    """ParallelLinearAdapter casts itself to bf16 under Megatron's bf16 (utils.py, `self.bfloat16()`); Megatron's DDP
    accumulates its gradients in the fp32 main_grad and the optimizer keeps fp32 masters and AdamW's m and v:
    2 + 4 + 4 + 8 bytes per adapter parameter."""
    result = check_run([*LORA, "--json"])
    states = {row["key"]: row["bytes"] for row in json.loads(result.stdout)["states"]}
    n = LAYERS * PER_LAYER
    assert (states["weights"], states["gradients"], states["master_weights"], states["optimizer"]) == \
        (2 * n, 4 * n, 4 * n, 8 * n)


# Routed experts: megatron-core's TEGroupedMLP holds a layer's experts in one grouped linear_fc1 and one linear_fc2
# (Megatron-Bridge qwen3_moe_bridge.py @ 4d3dd37: moe_grouped_gemm=True, every expert's gate|up mapped onto
# mlp.experts.linear_fc1.weight*), and LoRA.transform puts one ParallelLinearAdapter on each, shared by all experts
# (peft/lora.py @ 2afd2d3: LoRAMerge merges it into every weight{i} of a "TE Grouped Linear").
# Qwen/Qwen3-30B-A3B config.json (presets/qwen3-30b-a3b.yaml's source): hidden_size 2048, 32 attention heads and
# 4 KV heads of head_dim 128, moe_intermediate_size 768, 128 experts on each of num_hidden_layers 48
Q_D, Q_Q, Q_KV, Q_F, Q_LAYERS = 2048, 32 * 128, 4 * 128, 768, 48
Q_PER_LAYER = 16 * ((Q_D + Q_Q + 2 * Q_KV) + (Q_Q + Q_D) + (Q_D + 2 * Q_F) + (Q_F + Q_D))


def test_grouped_experts_share_one_adapter_per_linear() -> None:
    """Qwen3-30B-A3B, rank 16: 48 × 16·[(2048 + 5120) + (4096 + 2048) + (2048 + 1536) + (768 + 2048)] = 15,138,816,
    the 128 experts of a layer sharing one adapter on linear_fc1 and one on linear_fc2."""
    assert _trained_on("qwen3-30b-a3b") == Q_LAYERS * Q_PER_LAYER == 15_138_816


def test_mixtral_takes_what_llama_3_1_8b_does() -> None:
    """mistralai/Mixtral-8x7B-v0.1 config.json (presets/mixtral-8x7b.yaml's source) has Llama-3.1-8B's widths
    (hidden 4096, 32 heads, 8 KV heads, intermediate_size 14336, 32 layers): its 8 experts sharing one adapter per
    grouped linear, it trains Llama-3.1-8B's 35,651,584 adapter parameters."""
    assert _trained_on("mixtral-8x7b") == LAYERS * PER_LAYER == 35_651_584


def test_grouped_experts_split_over_tensor_parallelism() -> None:
    """is_expert splits the adapter over the expert tensor-parallel size, megatron-core's default the tensor-parallel
    size (peft/utils.py, get_adapter_attributes_from_linear): r·(in + out)/t on every adapter."""
    assert _trained_on("qwen3-30b-a3b", "--gpus", "2", "--tp", "2") == Q_LAYERS * Q_PER_LAYER // 2


def test_canonical_lora_splits_grouped_fc1_into_gate_and_up() -> None:
    """CanonicalLoRA (--lora-per-part) gives q, k, v apart and, on a grouped linear_fc1 too, gate and up each a
    ParallelLinearAdapter(in, out // 2) (canonical_lora.py @ 869bb39, CanonicalLoRA.transform)."""
    per_layer = 16 * ((Q_D + Q_Q) + 2 * (Q_D + Q_KV) + (Q_Q + Q_D) + 2 * (Q_D + Q_F) + (Q_F + Q_D))
    assert _trained_on("qwen3-30b-a3b", "--lora-per-part") == Q_LAYERS * per_layer == 19_857_408


# Multi-latent attention: megatron-core's MLASelfAttention has linear_q_proj (no q LoRA rank) or linear_q_down_proj
# and linear_q_up_proj, linear_kv_down_proj, linear_kv_up_proj and linear_proj, no linear_qkv (megatron-core's
# gpt_layer_specs MLA spec: MLASelfAttentionSubmodules(linear_q_proj=..., linear_q_down_proj=backend.linear(), ...)),
# so Megatron-Bridge's default targets (linear_qkv, linear_proj, linear_fc1, linear_fc2) reach its linear_proj alone.
MLA = "linear_kv_down_proj,linear_kv_up_proj,linear_proj,linear_fc1,linear_fc2"


def test_deepseek_v2_lite_latent_attention() -> None:
    """deepseek-ai/DeepSeek-V2-Lite config.json (presets/deepseek-v2-lite.yaml's source): hidden 2048, 16 heads,
    no q_lora_rank, kv_lora_rank 512, qk_nope/rope/v head dims 128/64/128, intermediate_size 10944 on the one dense
    layer (first_k_dense_replace 1), moe_intermediate_size 1408 on 64 experts and 2 shared experts, 27 layers."""
    attn = (2048 + 16 * 192) + (2048 + 512 + 64) + (512 + 16 * (128 + 128)) + (16 * 128 + 2048)
    dense = (2048 + 2 * 10944) + (10944 + 2048)
    moe = (2048 + 2 * 1408) + (1408 + 2048) + (2048 + 2 * 2816) + (2816 + 2048)  # routed, then shared
    want = 16 * (27 * attn + dense + 26 * moe)
    assert _trained_on("deepseek-v2-lite", "--lora-targets", f"linear_q_proj,{MLA}") == want == 16_375_808


def test_deepseek_v3_latent_attention() -> None:
    """deepseek-ai/DeepSeek-V3 config.json (presets/deepseek-v3.yaml's source): hidden 7168, 128 heads, q_lora_rank
    1536, kv_lora_rank 512, qk_nope/rope/v head dims 128/64/128, intermediate_size 18432 on 3 dense layers,
    moe_intermediate_size 2048 on 256 experts and 1 shared expert, 61 layers."""
    attn = (7168 + 1536) + (1536 + 128 * 192) + (7168 + 512 + 64) + (512 + 128 * 256) + (128 * 128 + 7168)
    dense = (7168 + 2 * 18432) + (18432 + 7168)
    moe = 2 * ((7168 + 2 * 2048) + (2048 + 7168))  # the grouped experts' adapters, then the shared expert's
    want = 16 * (61 * attn + 3 * dense + 58 * moe)
    targets = f"linear_q_down_proj,linear_q_up_proj,{MLA}"
    assert _trained_on("deepseek-v3", "--lora-targets", targets) == want == 138_359_808
    assert _trained_on("deepseek-v3", "--lora-targets", "linear_proj,linear_fc1,linear_fc2") == \
        want - 16 * 61 * (attn - (128 * 128 + 7168))


@pytest.mark.parametrize(("model", "targets", "message"), [
    ("deepseek-v3", "q,k,v,o,gate,up,down", "--lora-targets: q, k, v: megatron-core runs this model's attention as "
     "MLASelfAttention, which has no linear_qkv (Megatron-Bridge's default targets reach its linear_proj alone): name "
     "linear_q_proj or linear_q_up_proj, linear_q_down_proj, linear_kv_down_proj, linear_kv_up_proj, linear_proj"),
    ("llama-3.1-8b", "linear_q_proj", "--lora-targets: linear_q_proj is megatron-core's multi-latent attention's q; "
     "this model's q, k and v are its linear_qkv"),
    # DeepSeek-V2-Lite has no q_lora_rank: its q is linear_q_proj, and q, k, v, linear_qkv name none of its modules
    ("deepseek-v2-lite", "linear_q_down_proj", "--lora-targets: deepseek-v2-lite has no linear_q_down_proj to adapt "
     "(its targets: o, gate, up, down, head, experts_gate_up, experts_down, linear_proj, linear_fc1, linear_fc2, "
     "linear_q_proj, linear_kv_down_proj, linear_kv_up_proj)"),
])
def test_an_attention_module_the_model_lacks_is_refused(model: str, targets: str, message: str) -> None:
    result = check_run([*LORA[:1], model, *LORA[2:], "--lora-targets", targets])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {message}\n"
