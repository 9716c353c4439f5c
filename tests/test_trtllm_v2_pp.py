"""TensorRT-LLM's KVCacheManagerV2 under pipeline parallelism (calc/analysis/memory/trtllm_v2_pp.py), worked by hand.

Sources (NVIDIA/TensorRT-LLM; each file at the commit it was read at):
- tensorrt_llm/mapping.py Mapping.pp_layers at 05ebebb2c1 and b35ac1b643: torch.tensor_split(torch.arange(num_layers),
  pp_size)[pp_rank] ("If num_layers % pp_size = n != 0, first n ranks get one extra layer"); torch.tensor_split's
  documentation: an integer n gives size // n + 1 to the first size % n sections and size // n to the rest.
- tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at 0004396720, KVCacheManagerV2.__init__:
  self.pp_layers = get_pp_layers(num_layers, mapping); quota = int(max_gpu_total_bytes); with world_size > 1
  (the comment: "Normalize to tokens because cache costs vary across PP ranks") resumable = int(quota *
  max_util_for_resume), max_tokens = _get_max_tokens_from_quota(resumable) over the rank's own layers,
  dist.allreduce(max_tokens, op=ReduceOp.MIN), and unless it is inf quota = min(quota,
  int(math.ceil(_get_quota_from_max_tokens(max_tokens) / max_util_for_resume))), again over the rank's own layers.
  _get_max_tokens_from_quota_impl: size_per_batch = max_batch_size x the sliding layers' ceil(window / 32) x 32
  tokens of bytes; 0 below it; (q - batch) / (full + swa) up to max_num_tokens x (full + swa) + batch; past it
  max_num_tokens + (q - that) / full, inf when full is 0. _get_quota_from_max_tokens_impl: int(T x full + batch +
  min(T, max_num_tokens) x swa). max_batch_size 2,048, max_num_tokens 8,192, max_util_for_resume 0.95 (llm_args.py
  at 0004396720).
- tensorrt_llm/_torch/pyexecutor/_util.py at 0004396720: _derive_layer_type_attention_windows over every decoder layer
  ("in global model layer order"), projected onto the rank's layers (_resolve_v2_max_attention_window_vec); each rank's
  configure_kv_cache_capacity: int((total - its peak) x free_gpu_memory_fraction), logged as "Estimated max memory in
  KV cache : {x / GB:.2f} GiB".
- The grain and slots on each rank as on one GPU (tests/test_trtllm_v2.py's sources): 2 MiB << min(4, int(log2(quota //
  1 GiB))), ceil(quota / grain) grains, the most slots whose pool fits them.
Model shapes: Llama-3.1-70B (presets/llama-3.1-70b.yaml, its config.json): 80 layers of hidden 8,192, 64 heads, 8 KV
heads x 128, MLP 28,672, vocabulary 128,256, untied; Llama-3.1-8B: 32 layers, 8 KV heads x 128; Gemma 3 27B
(tests/configs/model_types/gemma3_multimodal.json): 62 layers, 16 KV heads x 128, window 1,024, full attention at
layers 5, 11, ..., 59 (its layer_types).
"""

from __future__ import annotations

import json
import math

from click.testing import CliRunner

from calc.analysis.memory.parallel import pp_partitions
from calc.analysis.memory.trtllm_v2_pp import trtllm_pp_parts
from calc.cli import main

GIB = 2**30
MIB = 2**20
BLOCK, MAX_NUM_TOKENS, MAX_BATCH_SIZE, RESUME = 32, 8192, 2048, 0.95
H100_TOTAL = 85_061_827_297  # the H100's total as CUDA reports it (79.22 GiB, vllm-project/vllm#10511: the catalog's)
NON_TORCH = round(0.2 * GIB)  # gptcalc's non-torch default (calc/analysis/memory/startup.py NON_TORCH: vllm#14447)
# Llama-3.1-70B (presets/llama-3.1-70b.yaml): one layer's parameters, q, o 8,192^2, k, v 8,192 x 1,024, gate, up, down
# 8,192 x 28,672 and two norms; the vocabulary rows of the embedding and of the head; 8 KV heads of 128.
L70_MATRICES = (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672, 2 * 8192)
L70_VOCAB = 128256 * 8192


def _l70_layer_bytes(tp: int) -> int:
    """One Llama-3.1-70B layer on one of `tp` GPUs at 2 B: its matrices split tp ways, its norms whole."""
    return 2 * (L70_MATRICES[0] // tp + L70_MATRICES[1])


def _l70_activation(tp: int, last: bool) -> int:
    """gptcalc's activation estimate for one rank's profiling run (startup.activation_estimate) of TensorRT-LLM's
    max_num_tokens = 8,192 tokens at 2 B: the residual stream and hidden states (2 x 8,192 wide) and the layer's
    outputs, 104,450 elements a token (its parameters / 8,192: 8,192 + 1,024 + 1,024 + 8,192 + 3 x 28,672 + 2) split
    tp ways; on the last rank alone, the sampler's fp32 logits and probabilities over one row of 128,256."""
    widest = sum(L70_MATRICES) // 8192
    return 8192 * 2 * (2 * 8192 + -(-widest // tp)) + (128256 * 4 * 2 if last else 0)


def _answer(*args: str) -> dict:
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, ["memory", *args, "--engine", "trtllm", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _tokens(quota: int, full: int, swa: int, batch: int) -> float:
    """_get_max_tokens_from_quota_impl."""
    if quota < batch:
        return 0
    limit = MAX_NUM_TOKENS * (full + swa) + batch
    if quota <= limit:
        return math.inf if full + swa <= 0 else (quota - batch) / (full + swa)
    return math.inf if full <= 0 else MAX_NUM_TOKENS + (quota - limit) / full


def _synced(quota: int, tokens: float, full: int, swa: int, batch: int) -> int:
    """The quota after the MIN all-reduce agreed on `tokens`."""
    if math.isinf(tokens):
        return quota
    return min(quota, math.ceil(int(tokens * full + batch + min(tokens, MAX_NUM_TOKENS) * swa) / RESUME))


def _one_pool_tokens(quota: int, slot: int) -> int:
    """One full-attention pool: the grain, the grains the quota rounds up to, the most slots in them."""
    grain = (2 * MIB) << min(4, int(math.log2(quota // GIB)))
    grains = -(-quota // grain)
    slots = grains * grain // slot
    while -(-(slots + 1) * slot // grain) <= grains:
        slots += 1
    return slots * BLOCK


def test_tensorrt_llm_gives_the_first_ranks_the_extra_layers() -> None:
    """tensor_split: 62 = 3 x 20 + 2, 32 = 3 x 10 + 2, 62 = 12 x 5 + 2, 80 = 6 x 13 + 2. vLLM's get_pp_indices
    (vllm/distributed/utils.py: the remainder one each from the second-to-last rank backwards) agrees where the
    remainder is pp - 1 (62 over 3) and differs otherwise: 80 over 6 gives ranks 3 and 4 the extra layers there."""
    assert trtllm_pp_parts(62, 3) == [21, 21, 20] == pp_partitions(62, 3) and trtllm_pp_parts(32, 3) == [11, 11, 10]
    assert trtllm_pp_parts(80, 2) == [40, 40] and trtllm_pp_parts(62, 12) == [6, 6] + [5] * 10
    assert trtllm_pp_parts(80, 6) == [14, 14, 13, 13, 13, 13] and pp_partitions(80, 6) == [13, 13, 13, 14, 14, 13]


def test_llama_31_70b_on_two_h100s_each_rank_sizes_its_own_pool_at_the_fewest_tokens() -> None:
    """Each rank's weights: 40 layers of q, o 8,192^2, k, v 8,192 x 1,024, gate, up, down 8,192 x 28,672 and two
    norms, the first rank with the embedding, the last with the final norm and the head, at 2 B. Each rank's budget
    is int((total - weights - activation - non-torch) x 0.9) with the reserves given; its layers cost 40 x K and V x 8
    x 128 x 2 B = 163,840 B a token. The last rank, 16 KiB heavier (the final norm), offers the fewest tokens; the
    first rank's quota is cut to them, and both then hold the same slots."""
    layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    vocab = 128256 * 8192
    weights = [2 * (vocab + 40 * layer), 2 * (40 * layer + 8192 + vocab)]
    activation, non_torch = 2 * GIB, 200 * MIB
    budgets = [int((H100_TOTAL - w - activation - non_torch) * 0.9) for w in weights]
    per_token = 40 * 2 * 8 * 128 * 2
    offered = [_tokens(int(b * RESUME), per_token, 0, 0) for b in budgets]
    quotas = [_synced(b, min(offered), per_token, 0, 0) for b in budgets]
    assert offered[1] < offered[0] and quotas[0] < budgets[0]

    answer = _answer("llama-3.1-70b", "--budget", "2xH100", "--pp", "2", "--seq", "8192", "--activation-memory",
                     "2GiB", "--non-torch-memory", "200MiB")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert [(r["first_layer"], r["layers"], r["kv_memory_bytes"], r["quota_bytes"]) for r in v2["ranks"]] == \
        [(0, 40, budgets[0], quotas[0]), (40, 40, budgets[1], quotas[1])]
    tokens = [_one_pool_tokens(q, per_token * BLOCK) for q in quotas]
    assert [r["tokens"] for r in v2["ranks"]] == tokens and answer["engine"]["tokens"] == min(tokens)
    assert v2["agreed_tokens"] == min(offered) and v2["binding_pp_rank"] == 1
    says = answer["server_says"]
    for rank, (first, last) in enumerate([(0, 39), (40, 79)]):
        label = f"[PP rank {rank}, layers {first}-{last}]"
        peak = weights[rank] + activation + non_torch
        assert f"{label} Peak memory during memory usage profiling (torch + non-torch): {peak / GIB:.2f} GiB + T, " \
               f"available KV cache memory when calculating max tokens: {budgets[rank] / GIB:.2f} GiB" in says[rank * 7]
        assert says[rank * 7 + 1:rank * 7 + 7] == [
            f"{label} Estimated max memory in KV cache : {budgets[rank] / GIB:.2f} GiB",
            f"{label} max_gpu_total_bytes is provided. New quota is {budgets[rank] / GIB}GiB",
            f"{label} KV cache manager v2 device quota set to {quotas[rank] / GIB}GiB",
            f"{label} KVCacheManagerV2 role-to-pool/lifecycle mapping:",
            f"{label} role=key, pool_group_id=0, layer_group_id=0",
            f"{label} role=value, pool_group_id=0, layer_group_id=0"]
    assert len(says) == 14


def test_a_rank_with_a_layer_fewer_is_cut_to_the_others_tokens() -> None:
    """Llama-3.1-8B at --pp 3 with --kv-memory 8GiB on every rank: 11, 11 and 10 layers of 8 x 128 x 2 x 2 B = 4,096 B
    a token. The two ranks of 11 offer the fewest tokens and keep their quota up to the floats' last byte; the rank of
    10 is cut to the bytes of those tokens, and holds the same tokens give or take a grain."""
    quota = 8 * GIB
    costs = [11 * 4096, 11 * 4096, 10 * 4096]
    agreed = min(_tokens(int(quota * RESUME), cost, 0, 0) for cost in costs)
    quotas = [_synced(quota, agreed, cost, 0, 0) for cost in costs]
    assert quotas[2] < quotas[0] <= quota and quotas[0] == quotas[1]
    answer = _answer("llama-3.1-8b", "--kv-memory", "8GiB", "--pp", "3", "--seq", "8k")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert [(r["first_layer"], r["layers"], r["quota_bytes"]) for r in v2["ranks"]] == \
        [(0, 11, quotas[0]), (11, 11, quotas[1]), (22, 10, quotas[2])]
    tokens = [_one_pool_tokens(q, cost * BLOCK) for q, cost in zip(quotas, costs)]
    assert [r["tokens"] for r in v2["ranks"]] == tokens and answer["engine"]["tokens"] == min(tokens)
    assert answer["server_says"][0] == "[PP rank 0, layers 0-10] Estimated max memory in KV cache : 8.00 GiB"
    assert f"[PP rank 2, layers 22-31] KV cache manager v2 device quota set to {quotas[2] / GIB}GiB" in \
        answer["server_says"]


def test_a_rank_of_sliding_layers_alone_keeps_their_windows_and_is_cut_to_the_others_tokens() -> None:
    """Gemma 3 27B at --pp 12, 6, 6 and then 5 layers a rank: ranks 2 (layers 12-16) and 8 (42-46) hold no full layer.
    The windows are the whole model's (two sizes), so their layers keep the 1,024-token window: 8,192 B a token a
    layer (16 x 128 x 2 x 2 B), each priced for 2,048 requests of 32 blocks. With no full layer they offer inf tokens
    past max_num_tokens; the MIN is a full rank's, and their quota is cut to the bytes of the batch's windows and of
    8,192 context tokens, over 0.95."""
    quota, layer = 100 * GIB, 16 * 128 * 2 * 2
    full_layers = set(range(5, 62, 6))
    bounds, start = [], 0
    for count in [6, 6] + [5] * 10:
        bounds.append(range(start, start + count))
        start += count
    costs = []
    for layers in bounds:
        full = sum(1 for i in layers if i in full_layers)
        sliding = len(layers) - full
        costs.append((full * layer, sliding * layer, MAX_BATCH_SIZE * sliding * -(-1024 // BLOCK) * BLOCK * layer))
    offered = [_tokens(int(quota * RESUME), *cost) for cost in costs]
    assert [i for i, t in enumerate(offered) if math.isinf(t)] == [2, 8]
    agreed = min(offered)
    quotas = [_synced(quota, agreed, *cost) for cost in costs]
    assert quotas[2] == quotas[8] == math.ceil(int(agreed * 0 + costs[2][2] + MAX_NUM_TOKENS * costs[2][1]) / RESUME)
    answer = _answer("tests/configs/model_types/gemma3_multimodal.json", "--kv-memory", "100GiB", "--pp", "12",
                     "--seq", "4k")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert [r["quota_bytes"] for r in v2["ranks"]] == quotas and v2["agreed_tokens"] == agreed
    assert [r["own_tokens"] for r in v2["ranks"]][2] is None
    assert v2["ranks"][2]["pool_groups"][0]["life_cycle_windows"] == [1024] and len(v2["ranks"][2]["pool_groups"]) == 1
    assert "[PP rank 2, layers 12-16] role=key, pool_group_id=0, layer_group_id=0" in answer["server_says"]


def test_the_text_output_prints_each_ranks_lines_and_says_why() -> None:
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(main, ["memory", "llama-3.1-70b", "--engine", "trtllm",
                                                              "--budget", "2xH100", "--pp", "2", "--seq", "8192"])
    assert result.exit_code == 0, result.output
    assert "trtllm will print: [PP rank 1, layers 40-79] KV cache manager v2 device quota set to" in result.output
    assert "under --pp 2 each rank builds its own pools from its layers and its own budget" in result.output
    assert "[MemUsageChange]" not in result.output and "V1 KV cache manager" not in result.output


def test_dsa_ranks_count_layers_not_buffers_and_price_the_index_keys() -> None:
    """DeepSeek-V3.2 (tests/configs/model_types/deepseek_v32.json, 61 layers) at --pp 2: 31 and 30 layers, each a
    576-wide bf16 latent (1,152 B a token) and its indexer keys, 128 fp8 bytes + one 4-byte scale (132 B a token),
    priced together in the sync (get_layer_bytes_per_token with Role.ALL). The rank of 31 offers the fewest tokens;
    the rank of 30 is cut to their bytes."""
    quota, layer = 8 * GIB, 576 * 2 + 128 + 4
    costs = [31 * layer, 30 * layer]
    agreed = min(_tokens(int(quota * RESUME), cost, 0, 0) for cost in costs)
    quotas = [_synced(quota, agreed, cost, 0, 0) for cost in costs]
    answer = _answer("tests/configs/model_types/deepseek_v32.json", "--kv-memory", "8GiB", "--pp", "2", "--seq", "4k")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert [(r["first_layer"], r["layers"], r["quota_bytes"]) for r in v2["ranks"]] == \
        [(0, 31, quotas[0]), (31, 30, quotas[1])]
    assert quotas[1] < quotas[0] and v2["binding_pp_rank"] == 0
    assert "[PP rank 1, layers 31-60] DSACacheManagerV2 role-to-pool/lifecycle mapping:" in answer["server_says"]
    assert "[PP rank 1, layers 31-60] role=index_key, pool_group_id=0, layer_group_id=0" in answer["server_says"]


def test_each_rank_profiles_its_own_peak_the_sampler_on_the_last_rank_only() -> None:
    """Each rank's KvCacheCreator.configure_kv_cache_capacity (_util.py at 0004396720) reads its own GPU's torch peak;
    every rank forwards the same 8,192 tokens through its own layers (the first its embedding, the others receiving
    the hidden states and residual: modeling_utils.py at 000a01de66, DecoderModel.__pp_init__), and only the last holds
    the LM head (DecoderModelForCausalLM.__pp_init__) and samples (py_executor.py at 9521caf469, _executor_loop_pp:
    "Async forward (all ranks) and decoding pass (last rank only)"). So the first rank of Llama-3.1-70B's two has
    the sampler's 1,026,048 B less in its peak and, with the final norm's 16,384 B, (1,026,048 + 16,384) x 0.9 B more in
    its budget (to the byte after each int()); the last rank binds, and the table and pool line are its own."""
    weights = [2 * L70_VOCAB + 40 * _l70_layer_bytes(1), 40 * _l70_layer_bytes(1) + 2 * 8192 + 2 * L70_VOCAB]
    activations = [_l70_activation(1, last=False), _l70_activation(1, last=True)]
    budgets = [int((H100_TOTAL - w - a - NON_TORCH) * 0.9) for w, a in zip(weights, activations)]
    assert activations[1] - activations[0] == 1_026_048 and budgets[0] - budgets[1] == 938_188
    answer = _answer("llama-3.1-70b", "--budget", "2xH100", "--pp", "2", "--seq", "8192")
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert [(r["activation_bytes"], r["kv_memory_bytes"]) for r in v2["ranks"]] == list(zip(activations, budgets))
    assert v2["binding_pp_rank"] == 1 and answer["engine_budget"]["kv_memory_bytes"] == budgets[1]
    assert [t["bytes"] for t in answer["engine_budget"]["terms"][:2]] == [weights[1], activations[1]]
    text = CliRunner(env={"COLUMNS": "1000"}).invoke(main, ["memory", "llama-3.1-70b", "--engine", "trtllm", "--budget",
                                                            "2xH100", "--pp", "2", "--seq", "8192"]).output
    assert "trtllm on one H100-80GB [PP rank 1, layers 40-79]: the KV pool, term by term" in text
    assert f"trtllm's KV pool [PP rank 1, layers 40-79]: {budgets[1]:,} B at 163,840 B per token" in text


def test_the_busiest_gpu_is_tensorrt_llms_split_and_the_table_the_pool_ranks() -> None:
    """Llama-3.1-70B on 48 H100s, tp 8 x pp 6: TensorRT-LLM's ranks hold 14, 14, 13, 13, 13, 13 layers (vLLM's split
    would be 13, 13, 13, 14, 14, 13, its busiest GPU the last: 13 layers and the head). One GPU's layer is 213,942,272 B
    (its matrices / 8, its norms whole, at 2 B), its cache 512 B a token (K and V of its one KV head of 128 at 2 B,
    8 heads / tp 8 = 1), the embedding's and head's vocabulary rows / 8. The busiest GPU is rank 0's (the embedding and
    14 layers), the headline's figures and the budget's; it offers the fewest tokens and its budget is the table's."""
    layer, head = _l70_layer_bytes(8), 2 * L70_VOCAB // 8
    counts = trtllm_pp_parts(80, 6)
    weights = [n * layer + (head if rank == 0 else 0) + (head + 2 * 8192 if rank == 5 else 0)
               for rank, n in enumerate(counts)]
    cache = [n * 512 * 8192 for n in counts]
    answer = _answer("llama-3.1-70b", "--budget", "48xH100", "--tp", "8", "--pp", "6", "--seq", "8192")
    assert [(s["weights_bytes"], s["kv_bytes"]) for s in answer["stages"]] == list(zip(weights, cache))
    assert answer["weights"]["total_bytes"] == weights[0] == 3_257_860_096
    assert answer["kv_cache"]["total_bytes"] == cache[0]
    budget = int((H100_TOTAL - weights[0] - _l70_activation(8, last=False) - NON_TORCH) * 0.9)
    v2 = answer["engine"]["trtllm_kv_cache_manager_v2"]
    assert v2["binding_pp_rank"] == 0 and v2["ranks"][0]["kv_memory_bytes"] == budget
    assert answer["engine_budget"]["kv_memory_bytes"] == budget
    assert answer["budget"]["budget_bytes"] == budget + weights[0]


def test_fit_shows_the_pool_ranks_budget_and_the_busiest_ranks_weights() -> None:
    """fit's tp 8 x pp 6 row of Llama-3.1-70B on H100s: the weights are TensorRT-LLM's busiest rank's (rank 0's
    embedding and 14 layers, 3.03 GiB, where vLLM's split has 2.83) and the KV pool its budget, the rank whose pool
    gives the tokens (as memory's, above)."""
    result = CliRunner().invoke(main, ["fit", "llama-3.1-70b", "--seq", "8k", "--gpus", "H100", "--engine", "trtllm",
                                       "--json"])
    assert result.exit_code == 0, result.output
    row = next(c for c in json.loads(result.output)["candidates"] if (c["tp"], c["pp"]) == (8, 6))
    weights = 14 * _l70_layer_bytes(8) + 2 * L70_VOCAB // 8
    budget = int((H100_TOTAL - weights - _l70_activation(8, last=False) - NON_TORCH) * 0.9)
    assert row["weights_bytes_per_gpu"] == weights and row["kv_memory_bytes"] == budget


# Gemma 3 12B's text model (presets/gemma-3-12b.yaml, its config.json): 48 layers of hidden 3,840, 16 heads and 8 KV
# heads of 256 (q_norm, k_norm 256 each), MLP 15,360, four norms a layer; vocabulary 262,208, tied; full attention
# at layers 5, 11, ..., 47 (every sixth), the rest sliding. 48 such layers, the embedding and the final norm are the
# 11,766,034,176 parameters transformers builds for the language model (the preset's header, tests/test_arch.py).
G12_LAYER = 3840 * 4096 + 2 * 3840 * 2048 + 4096 * 3840 + 3 * 3840 * 15360 + 4 * 3840 + 2 * 256
G12_EMBEDDING = 262208 * 3840


def test_a_rank_other_than_the_busiest_gpu_refused_is_named() -> None:
    """TensorRT-LLM splits 48 layers 16, 16, 16: rank 0 holds layers 5 and 11 at full attention, ranks 1 and 2
    three each, so at 131,072 tokens of fp32 K and V (16 B x 256 x 8 heads a token) one full layer more,
    2,147,483,648 B, outweighs the embedding (2,013,757,440 B) and the busiest GPU is the last rank, which fits.
    Rank 0's profiling peak is its weights, its profiling run (8,192 tokens x 2 B x (2 x 3,840 + its layer's
    parameters // 3,840)) and the non-torch figure given: past the T4's 15,360 MiB (gpus.py's catalog)."""
    assert 48 * G12_LAYER + G12_EMBEDDING + 3840 == 11_766_034_176
    assert 2 * 256 * 8 * 4 * 131072 > 2 * G12_EMBEDDING
    peak = 2 * (G12_EMBEDDING + 16 * G12_LAYER) + 8192 * 2 * (2 * 3840 + G12_LAYER // 3840) + 6 * GIB
    assert peak > 15360 * MIB
    result = CliRunner().invoke(main, ["memory", "gemma-3-12b", "--engine", "trtllm", "--budget", "3xT4", "--pp", "3",
                                       "--seq", "128k", "--kv-dtype", "fp32", "--text-only",
                                       "--non-torch-memory", "6GiB"])
    assert result.exit_code == 2
    assert result.output == ("Error: --engine trtllm: nothing left for the KV cache on T4 (PP rank 0, layers 0-15): "
                             "model weights + activation peak + non-torch memory, "
                             f"{peak / GIB:.2f} GiB, exceed the 15.00 GiB it has (try more GPUs or --tp)\n")
