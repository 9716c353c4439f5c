"""SGLang's DP attention (--enable-dp-attention --dp-size N) for DeepSeek-V2/V3 and Kimi-K2
(calc/analysis/memory/sglang_dp.py): the weights one GPU holds, its default fraction's larger reserve, and the
refusals. Shapes are DeepSeek-V3's config.json (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json:
hidden_size 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64,
v_head_dim 128, vocab_size 129280, 61 layers of which first_k_dense_replace 3 dense of intermediate_size 18432)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from calc.analysis.memory.startup import sglang_fraction
from tests.cli_checks import check_run

LOGS = Path(__file__).parent / "data" / "engine_logs"
PR17403 = (LOGS / "sglang-pr17403-deepseek-v31-tp8-dp2.log").read_text()
D, HEADS, LAYERS, DENSE, VOCAB = 7168, 128, 61, 3, 129280
BASE = ["memory", "deepseek-v3", "--engine", "sglang", "--budget", "8xH200", "--tp", "8", "--seq", "32k"]


def run(*args: str) -> dict:  # type: ignore[type-arg]
    result = check_run([*BASE, *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def components(*args: str) -> dict[str, int]:
    """One GPU's bf16 weights by component (bf16 DeepSeek-V3 leaves an H200 no pool: the pool is given)."""
    result = check_run(["memory", "deepseek-v3", "--engine", "sglang", "--tp", "8", "--kv-memory", "10GiB",
                        "--dtype", "bf16", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["weights"]["components"]


def test_attention_and_embedding_split_over_the_attention_group() -> None:
    """tp 8, dp 2: an attention-TP group of 4. deepseek_v2.py (00114aef): q_b_proj, kv_b_proj and o_proj over
    get_attention_tp_size(), fused_qkv_a_proj_with_mqa ReplicatedLinear; the embedding over the attention group
    (sgl-project/sglang#17403); the head, the experts, the shared experts and the dense MLPs over all 8 (bf16: 2 B)."""
    plain, dp = components(), components("--enable-dp-attention", "--dp-size", "2")
    assert dp["q_b"] == LAYERS * 1536 * HEADS * (128 + 64) // 4 * 2
    assert dp["kv_b"] == LAYERS * 512 * HEADS * (128 + 128) // 4 * 2
    assert dp["attn_out"] == LAYERS * HEADS * 128 * D // 4 * 2
    assert dp["token_embedding"] == VOCAB * D // 4 * 2
    assert dp["q_a"] == plain["q_a"] == LAYERS * D * 1536 * 2  # replicated either way
    assert dp["kv_a"] == plain["kv_a"] == LAYERS * D * (512 + 64) * 2
    assert dp["lm_head"] == plain["lm_head"] == VOCAB * D // 8 * 2
    assert dp["mlp_gate"] == plain["mlp_gate"] == DENSE * D * 18432 // 8 * 2
    for name in ("experts_gate", "experts_up", "experts_down", "shared_mlp_gate", "router"):
        assert dp[name] == plain[name]


def test_dp_lm_head_and_dense_tp_size_one() -> None:
    """--enable-dp-lm-head: ParallelLMHead(use_attn_tp_group=True), over the group of 4; --moe-dense-tp-size 1:
    the dense layers' DeepseekV2MLP built with tp_size 1, whole on every GPU."""
    dp = components("--enable-dp-attention", "--dp-size", "2", "--enable-dp-lm-head", "--moe-dense-tp-size", "1")
    assert dp["lm_head"] == VOCAB * D // 4 * 2
    assert dp["mlp_gate"] == dp["mlp_up"] == dp["mlp_down"] == DENSE * D * 18432 * 2


def test_pr17403_weights_per_gpu() -> None:
    """DeepSeek-V3.1 (DeepSeek-V3's shapes) at tp 8, dp 2 with DP attention: moving the embedding from whole on every
    GPU to the attention group of 4 saved 82.82 - 81.53 = 1.29 GB (SGLang's GB are GiB), its 3/4:
    129,280 x 7,168 x 2 B x 3 / 4 = 1,390,018,560 B. gptcalc's 'Load weight end' for the checkpoint (fp8 blocks) counts
    the bf16 w_kc / w_vc SGLang dequantises the group's kv_b_proj share into (deepseek_weight_loader.py
    post_load_weights at 0201c04e: 61 layers x 128 heads x (128 + 128) rows x 512 / 4 x 2 B = 511,705,088 B), and lands
    0.34% under the 81.53 published (80.77, 0.9% under, without it)."""
    found = re.search(r"tp=8 dp=2: ([\d.]+)GB → ([\d.]+)GB", PR17403)
    before, after = (float(x) for x in found.groups())  # type: ignore[union-attr]
    assert round(before - after, 2) == round(VOCAB * D * 2 * 3 / 4 / 2**30, 2) == 1.29
    data = run("--enable-dp-attention", "--dp-size", "2")
    says = " ".join(data["server_says"])
    loaded = float(re.search(r"Load weight end\. mem usage=([\d.]+) GB", says).group(1))  # type: ignore[union-attr]
    copy = LAYERS * HEADS * (128 + 128) * 512 // 4 * 2
    assert copy == 511_705_088
    assert f"with {copy:,} B of MLA's w_kc/w_vc copy" in data["engine_budget"]["terms"][0]["source"]
    assert loaded == 81.25 and abs(loaded - after) / after < 0.004


def test_default_fraction_reserves_the_ranks_graphs() -> None:
    """memory_hook.py (a82da8da) on an H200 (143,771 MiB, decode graphs to 512, chunk 8,192, undivided by dp) at tp 8,
    dp 8: 512 + 1.5 x 8,192 + 8 / 8 x 1,024 + 2 x 512 + 512 x 8 x 3 + 512 x 8 x 1.5 + 1,536 (MLA prefill graphs) =
    34,816 MiB, round((143,771 - 34,816) / 143,771, 3) = 0.758 (0.886 without DP attention)."""
    assert sglang_fraction(143771, 8, 1, prefill_graphs=1536, dp=8) == (0.758, 34816)
    assert sglang_fraction(143771, 8, 1, prefill_graphs=1536) == (0.886, 16384)
    data = run("--enable-dp-attention", "--dp-size", "8")
    assert data["server_says"][0] == "mem_fraction_static=0.758"
    assert "34,816 MiB reserved" in data["engine_budget"]["fraction_how"]


def test_pool_is_the_fraction_less_the_dp_weights() -> None:
    """The pool stays MLA's 70,272 B a token (576 x 2 B x 61 layers, whole on every GPU); what DP attention changes is
    the weights and the fraction: tokens = (usable - weights) // 70,272."""
    data = run("--enable-dp-attention", "--dp-size", "8")
    budget = data["engine_budget"]
    assert data["engine"]["bytes_per_token"] == 576 * 2 * LAYERS
    assert budget["kv_memory_bytes"] == budget["usable_bytes"] - budget["terms"][0]["bytes"]
    assert data["engine"]["tokens"] == budget["kv_memory_bytes"] // (576 * 2 * LAYERS)
    assert "under DP attention in 8 groups" in budget["terms"][0]["source"]


@pytest.mark.parametrize(("args", "message"), [
    (["--dp-size", "2"], "give --enable-dp-attention"),
    (["--enable-dp-attention", "--dp-size", "3"], "--dp-size 3: does not divide --tp 8"),
    (["--enable-dp-attention", "--dp-size", "2", "--moe-dense-tp-size", "2"], "SGLang takes only 1"),
    (["--enable-dp-attention", "--dp-size", "2", "--speculative-num-steps", "3"], "not read for DP attention"),
])
def test_refusals(args: list[str], message: str) -> None:
    result = check_run([*BASE, *args])
    assert result.exit_code == 2 and message in result.stderr


def test_other_engines_and_towers_refused() -> None:
    """DP attention is SGLang's alone (models whose SGLang file is not read: tests/test_sglang_dp_gqa.py)."""
    vllm = check_run(["memory", "deepseek-v3", "--engine", "vllm", "--budget", "8xH200", "--tp", "8",
                      "--enable-dp-attention", "--dp-size", "2"])
    assert vllm.exit_code == 2 and "give --engine sglang" in vllm.stderr
    kimi = ["memory", "kimi-k2.5", "--engine", "sglang", "--kv-memory", "10GiB", "--tp", "8", "--enable-dp-attention",
            "--dp-size", "8"]  # KimiK25's language model is a DeepseekV3ForCausalLM; its vision tower is not read
    towers = check_run(kimi)
    assert towers.exit_code == 2 and "a vision tower (give --text-only)" in towers.stderr
    assert check_run([*kimi, "--text-only"]).exit_code == 0


def fit(*args: str) -> dict:  # type: ignore[type-arg]
    result = check_run(["fit", "deepseek-v3", "--seq", "32k", "--engine", "sglang", "--gpus", "H200",
                        "--enable-dp-attention", "--dp-size", "8", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_fit_counts_every_groups_requests() -> None:
    """fit under DP attention: the layouts whose tp the 8 groups divide (tp 8 on one node; pipeline stages are not
    read), each sized as memory sizes it, 196,233 tokens a group (5 requests of 32,768), 8 groups: 40 requests on
    8 H200s and no more. A group of one GPU holds kv_b whole, and SGLang's w_kc / w_vc copy of it, 61 x 128 x 256 x
    512 x 2 B = 2,046,820,352 B, is what took the group from the 6 requests (225,360 tokens) it held without that copy
    to 5: (pool + copy) // 70,272 B a token = 225,360."""
    data = run("--enable-dp-attention", "--dp-size", "8")
    pool, copy = data["engine"], LAYERS * HEADS * 256 * 512 * 2
    assert pool["tokens"] == 196233 and pool["tokens"] // 32768 == 5
    assert (data["engine_budget"]["kv_memory_bytes"] + copy) // (576 * 2 * LAYERS) == 225360
    served = fit("--concurrency", "40")
    top = served["candidates"][0]
    assert (top["gpus"], top["tp"], top["dp_attention_groups"], top["tokens"]) == (8, 8, 8, 196233)
    assert served["dp_attention"] == 8 and any("does not divide --tp 4" in s for s in served["skipped_layouts"])
    assert fit("--concurrency", "41")["candidates"] == []  # more GPUs would need --pp, refused under DP attention


def test_dsa_indexer_stays_whole() -> None:
    """DeepSeek-V3.2 (DeepseekV32ForCausalLM, a DeepseekV2ForCausalLM): its indexer's wq_b, wk and weights_proj are
    ReplicatedLinear (layers/attention/nsa/nsa_indexer.py at 005e8bf8), whole with or without DP attention, and its
    fp8 DSA cell stays 656 B of latent + 132 B of index key a layer, 61 layers, whole on every GPU."""
    args = ["memory", "deepseek-v3.2", "--engine", "sglang", "--budget", "8xB200", "--tp", "8", "--seq", "4096",
            "--kv-dtype", "fp8_e4m3", "--json"]
    plain, dp = (json.loads(check_run([*args, *extra]).stdout)
                 for extra in ([], ["--enable-dp-attention", "--dp-size", "8"]))
    for name in ("idx_q", "idx_k", "idx_weights"):
        assert dp["weights"]["components"][name] == plain["weights"]["components"][name]
    assert dp["engine"]["bytes_per_token"] == plain["engine"]["bytes_per_token"] == LAYERS * (656 + 132)
    assert dp["weights"]["components"]["attn_out"] == 8 * plain["weights"]["components"]["attn_out"]
