"""SGLang's DP attention beyond deepseek_v2.py (calc/analysis/memory/sglang_dp.py): GLM-4.5/4.6's glm4_moe.py,
GLM-4.7-Flash's glm4_moe_lite.py, qwen2_moe.py, qwen3_moe.py, gpt_oss.py and deepseek_v4.py. Each expected figure is
recomputed here from the shapes of the model's config.json (each test names its source) and the split the model's SGLang
file makes: qkv_proj / o_proj over the attention-TP group of tp / N with max(1, kv_heads / (tp / N)) KV heads a GPU (the
pool's cell too), the embedding over that group (gpt_oss.py and deepseek_v4.py: whole), the head over the whole group
unless --enable-dp-lm-head, a dense layer's MLP whole under --moe-dense-tp-size 1, the MoE as without DP attention."""

from __future__ import annotations

import json

import pytest

from tests.cli_checks import check_run

DP2 = ["--enable-dp-attention", "--dp-size", "2"]


def components(model: str, tp: int, *args: str) -> dict[str, object]:
    """One GPU's bf16 weights by component and the pool's bytes a token, the pool given (no budget needed)."""
    result = check_run(["memory", model, "--engine", "sglang", "--tp", str(tp), "--kv-memory", "10GiB", "--dtype",
                        "bf16", *args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    return {**data["weights"]["components"], "cell": data["engine"]["bytes_per_token"]}


def test_qwen3_moe_attention_and_embedding_over_the_group() -> None:
    """Qwen3-235B-A22B (https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json: hidden_size 4096, 64 heads,
    4 KV heads of head_dim 128, 94 layers, vocab_size 151936) at tp 8, dp 2: an attention group of 4 (qwen3_moe.py at
    008af3a6, Qwen3MoeAttention tp_size=attn_tp_size); 4 KV heads / 4 = 1 a GPU, as at tp 8 (max(1, 4 / 8)).
    bf16: 2 B."""
    d, layers, vocab, hd = 4096, 94, 151936, 128
    plain, dp = components("qwen3-235b-a22b", 8), components("qwen3-235b-a22b", 8, *DP2)
    assert dp["q"] == dp["attn_out"] == layers * d * 64 * hd // 4 * 2 == 2 * plain["q"]
    assert dp["k"] == dp["v"] == plain["k"] == layers * d * 1 * hd * 2
    assert dp["token_embedding"] == vocab * d // 4 * 2 == 2 * plain["token_embedding"]
    assert dp["lm_head"] == plain["lm_head"] == vocab * d // 8 * 2
    for name in ("router", "experts_gate", "experts_up", "experts_down"):
        assert dp[name] == plain[name]
    assert dp["cell"] == plain["cell"] == layers * 2 * 1 * hd * 2  # K and V, one head a GPU


def test_qwen3_moe_budget_on_eight_h200() -> None:
    """--dp-size 8 on 8 H200s: groups of one GPU, each holding the 4 KV heads whole, 94 x 2 x 4 x 128 x 2 B =
    192,512 B a token (48,128 at plain tp 8); the pool is the fraction's usable bytes less the weights, in those cells;
    a group serves 213,770 // 32,768 = 6 requests of 32k, the 8 groups 48 (plain tp 8: one pool of 46)."""
    base = ["memory", "qwen3-235b-a22b", "--engine", "sglang", "--budget", "8xH200", "--tp", "8", "--seq", "32k"]
    plain = json.loads(check_run([*base, "--json"]).stdout)
    result = check_run([*base, "--enable-dp-attention", "--dp-size", "8", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    budget, cell = data["engine_budget"], 94 * 2 * 4 * 128 * 2
    assert data["engine"]["bytes_per_token"] == cell == 192_512 and plain["engine"]["bytes_per_token"] == 48_128
    assert budget["kv_memory_bytes"] == budget["usable_bytes"] - budget["terms"][0]["bytes"]
    assert data["engine"]["tokens"] == budget["kv_memory_bytes"] // cell == 213_770
    assert data["engine"]["tokens"] // 32768 == 6 and plain["engine"]["tokens"] // 32768 == 46
    assert "qwen3_moe.py" in budget["terms"][0]["source"]


def test_fit_counts_the_groups_of_a_gqa_model() -> None:
    """fit under DP attention: 6 requests a group (above) x 8 groups = 48 on 8 H200s at tp 8; 49 needs more."""
    args = ["fit", "qwen3-235b-a22b", "--seq", "32k", "--engine", "sglang", "--gpus", "H200", "--enable-dp-attention",
            "--dp-size", "8", "--json", "--concurrency"]
    top = json.loads(check_run([*args, "48"]).stdout)["candidates"][0]
    assert (top["gpus"], top["tp"], top["dp_attention_groups"], top["tokens"]) == (8, 8, 8, 213_770)
    assert json.loads(check_run([*args, "49"]).stdout)["candidates"] == []


def test_gpt_oss_keeps_its_embedding_whole() -> None:
    """gpt-oss-120b (https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json: hidden_size 2880, 64 heads and
    8 KV heads of head_dim 64, 36 layers, vocab_size 201088) at tp 8, dp 2: gpt_oss.py (009c6808) builds its embedding
    with enable_tp=not is_dp_attention_enabled(), whole; q, o and the per-head sinks over the group of 4; o_proj's bias
    (RowParallelLinear) whole either way; 8 KV heads / 4 = 2 a GPU (1 at plain tp 8)."""
    d, layers, vocab, hd = 2880, 36, 201088, 64
    plain, dp = components("gpt-oss-120b", 8), components("gpt-oss-120b", 8, *DP2)
    assert dp["token_embedding"] == vocab * d * 2 == 8 * plain["token_embedding"]
    assert dp["q"] == dp["attn_out"] == layers * d * 64 * hd // 4 * 2
    assert dp["k"] == layers * d * 2 * hd * 2 == 2 * plain["k"]
    assert dp["attn_sinks"] == layers * 64 // 4 * 2
    assert dp["attn_out_bias"] == plain["attn_out_bias"] == layers * d * 2
    assert dp["cell"] == layers * 2 * 2 * hd * 2 == 2 * plain["cell"]


def test_glm4_moe_dense_layers_and_dp_lm_head() -> None:
    """GLM-4.6 (https://huggingface.co/zai-org/GLM-4.6/blob/main/config.json: hidden_size 5120, 96 heads and 8 KV heads
    of head_dim 128, 92 layers of which first_k_dense_replace 3 dense of intermediate_size 12288, vocab_size 151552) at
    tp 8, dp 2 with --enable-dp-lm-head and --moe-dense-tp-size 1 (glm4_moe.py at 005ffc65: Glm4MoeMLP tp_size 1 under
    enable_moe_dense_fully_dp(), lm_head use_attn_tp_group=enable_dp_lm_head); 8 KV heads / 4 = 2 a GPU."""
    d, layers, vocab, hd = 5120, 92, 151552, 128
    dp = components("glm-4.6", 8, *DP2, "--enable-dp-lm-head", "--moe-dense-tp-size", "1")
    plain = components("glm-4.6", 8)
    assert dp["mlp_gate"] == dp["mlp_up"] == dp["mlp_down"] == 3 * d * 12288 * 2 == 8 * plain["mlp_gate"]
    assert dp["lm_head"] == dp["token_embedding"] == vocab * d // 4 * 2
    assert dp["q"] == layers * d * 96 * hd // 4 * 2
    for name in ("shared_mlp_gate", "experts_gate", "router"):
        assert dp[name] == plain[name]
    assert dp["cell"] == layers * 2 * 2 * hd * 2 == 94_208 == 2 * plain["cell"]


def test_glm4_moe_lite_is_deepseek_v2s_mla() -> None:
    """GLM-4.7-Flash (https://huggingface.co/zai-org/GLM-4.7-Flash/blob/main/config.json: hidden_size 2048, 20 heads,
    q_lora_rank 768, kv_lora_rank 512, qk_nope_head_dim 192, qk_rope_head_dim 64, v_head_dim 256, 47 layers, vocab_size
    154880) at tp 4, dp 2: glm4_moe_lite.py (03b1e880) builds deepseek_v2.py's DeepseekV2AttentionMLA, q_b, kv_b and o
    over the group of 2, q_a and kv_a whole; the latent cell (512 + 64) x 2 B x 47 layers whole either way."""
    d, layers, heads = 2048, 47, 20
    plain, dp = components("glm-4.7-flash", 4), components("glm-4.7-flash", 4, *DP2)
    assert dp["q_b"] == layers * 768 * heads * (192 + 64) // 2 * 2
    assert dp["kv_b"] == layers * 512 * heads * (192 + 256) // 2 * 2
    assert dp["attn_out"] == layers * heads * 256 * d // 2 * 2
    assert dp["kv_a"] == plain["kv_a"] == layers * d * (512 + 64) * 2
    assert dp["token_embedding"] == 154880 * d // 2 * 2
    assert dp["cell"] == plain["cell"] == (512 + 64) * 2 * layers


def test_qwen2_moe_shared_expert_over_the_whole_group() -> None:
    """Qwen1.5-MoE-A2.7B (tests/configs/model_types/qwen2_moe.json: hidden_size 2048, 16 heads = 16 KV heads, head_dim
    2048 / 16 = 128, 24 layers, shared_expert_intermediate_size 5632) at tp 4, dp 2: q, k, v over the group of 2, 8 KV
    heads a GPU (4 at plain tp 4); the shared expert a Qwen2MoeMLP at the whole group's size, as without DP
    attention."""
    d, layers, hd = 2048, 24, 128
    config = "tests/configs/model_types/qwen2_moe.json"
    plain, dp = components(config, 4), components(config, 4, *DP2)
    assert dp["q"] == dp["k"] == dp["attn_out"] == layers * d * 16 * hd // 2 * 2
    assert dp["shared_mlp_gate"] == plain["shared_mlp_gate"] == layers * d * 5632 // 4 * 2
    assert dp["cell"] == layers * 2 * 8 * hd * 2 == 2 * plain["cell"]


def test_deepseek_v4_keeps_its_embedding_and_latent_whole() -> None:
    """DeepSeek-V4-Flash (https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash/blob/main/config.json: hidden_size 4096,
    64 heads of head_dim 512, q_lora_rank 1024, o_groups 8 of o_lora_rank 1024, 43 layers, vocab_size 129280) at tp 8,
    dp 2: deepseek_v4.py (000328a8) MQALayer builds wq_b, wo_a (64 x 512 / 8 = 4,096 in, 8 x 1,024 out) and wo_b over
    the group of 4, wq_a and wkv ReplicatedLinear; its embedding enable_tp=not is_dp_attention_enabled(), whole; the
    head over all 8; the shared-KV row whole on every GPU either way."""
    d, layers, vocab = 4096, 43, 129280
    plain, dp = components("deepseek-v4-flash", 8), components("deepseek-v4-flash", 8, *DP2)
    assert dp["q_b"] == layers * 1024 * 64 * 512 // 4 * 2 == 2 * plain["q_b"]
    assert dp["o_a"] == layers * 4096 * 8 * 1024 // 4 * 2 and dp["o_b"] == layers * 8 * 1024 * d // 4 * 2
    assert dp["q_a"] == plain["q_a"] == layers * d * 1024 * 2 and dp["kv"] == plain["kv"] == layers * d * 512 * 2
    assert dp["token_embedding"] == vocab * d * 2 and dp["lm_head"] == plain["lm_head"] == vocab * d // 8 * 2
    assert dp["cell"] == plain["cell"]


@pytest.mark.parametrize(("model", "extra"), [
    ("qwen3-vl-30b-a3b", ["--text-only"]),  # Qwen3-VL's language model: qwen3_vl_moe.py, not read
    ("llama-3-8b", []),  # a dense model: llama.py's DP attention is not read
])
def test_unread_files_refused(model: str, extra: list[str]) -> None:
    result = check_run(["memory", model, "--engine", "sglang", "--kv-memory", "10GiB", "--tp", "8", *DP2, *extra])
    assert result.exit_code == 2 and "is not read here" in result.stderr


def test_attention_group_must_split_the_kv_heads() -> None:
    """GLM-4.6's 8 KV heads at tp 24: plain tensor parallelism replicates them (24 a multiple of 8), but dp 2 leaves
    attention groups of 12, which Glm4MoeAttention asserts against (attn_tp_size % total_num_kv_heads == 0)."""
    args = ["memory", "glm-4.6", "--engine", "sglang", "--tp", "24", "--kv-memory", "10GiB"]
    assert check_run(args).exit_code == 0
    result = check_run([*args, *DP2])
    assert result.exit_code == 2 and "SGLang splits the attention over tp / dp = 12 GPUs" in result.stderr
