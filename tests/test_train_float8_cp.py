"""`train --float8` (torchao Float8Linear) and `--cp` (torchtitan's context parallelism, torch's ring attention).

Shapes are Llama 3.1 8B's config.json (hidden 4096, 8 KV heads × 128, intermediate 14336, 32 layers).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from calc.analysis.train import Setup, train
from calc.analysis.train.context_parallel import ring_bytes
from calc.analysis.train.float8 import cast_bytes
from calc.cli import main
from calc.spec.load import load_spec

D, KV, FF = 4096, 8 * 128, 14336  # Llama 3.1 8B: hidden_size, num_key_value_heads × head_dim, intermediate_size
FSDP8 = Setup(seq=8192, micro_batch=1, gpus=8, zero=3, recompute="full", precision="fsdp-mixed")


@pytest.fixture(scope="module")
def llama() -> object:
    return load_spec("llama-3.1-8b")


def test_cp_holds_seq_over_cp_tokens_and_shards_over_dp_times_cp(llama) -> None:
    """cp 2 at 2T keeps what cp 1 keeps at T (each GPU holds T of the 2T tokens), and FSDP still
    shards the states over all 8 GPUs (torchtitan's dp_shard_cp mesh)."""
    whole, split = train(llama, FSDP8), train(llama, replace(FSDP8, seq=16384, cp=2))
    assert split.setup.dp == 4 and split.setup.shards == 8
    assert split.activations == whole.activations
    assert split.model_states == whole.model_states


def test_ring_attention_buffers(llama) -> None:
    """torch's ring attention backward (_context_parallel/_attention.py, rotate_method ALL_GATHER,
    convert_to_f32): K and V gathered from all cp ranks plus the local pair concatenated to send (bf16),
    fp32 dQ, dK, dV, and dK, dV sent on (fp32, the concatenation and the received buffer)."""
    n, cp = 32768, 4
    kv, q = n * 2 * KV, n * D
    expected = cp * kv * 2 + kv * 2 + (q + kv) * 4 + 2 * kv * 4
    assert ring_bytes(llama, cp, n, 1) == expected
    assert ring_bytes(llama, 1, n, 1) == 0
    moment = next(m for m in train(llama, replace(FSDP8, seq=4 * 8192, cp=4)).moments if "last layer" in m.name)
    assert dict(moment.parts)["CP: ring attention's gathered K, V and fp32 dQ, dK, dV"] == ring_bytes(llama, 4, 8192, 1)


def test_repeated_kv_rides_the_ring_at_the_query_heads(llama) -> None:
    """torchtitan's Llama before #2259 repeats K and V to every query head before SDPA (models/llama/model.py
    @ 9dec370: `keys = repeat_kv(xk, self.n_rep)`), so the ring gathers, sends and accumulates K and V
    32 heads wide (4,096 each), not 8 (1,024), and the recomputed layer's kernel keeps them so."""
    n, cp = 32768, 4
    kv, q = n * 2 * D, n * D
    assert ring_bytes(llama, cp, n, 1, repeat_kv=True) == cp * kv * 2 + kv * 2 + (q + kv) * 4 + 2 * kv * 4
    setup = replace(FSDP8, seq=4 * 8192, cp=4)
    plain, repeated = (dict(next(m for m in train(llama, replace(setup, repeat_kv=r)).moments
                                 if "last layer" in m.name).parts) for r in (False, True))
    assert repeated["one layer's activations rebuilt"] - plain["one layer's activations rebuilt"] \
        == 8192 * 2 * (D - KV) * 2  # K and V, bf16, 3,072 columns wider each
    assert repeated["CP: ring attention's gathered K, V and fp32 dQ, dK, dV"] == ring_bytes(llama, 4, 8192, 1, True)
    result = CliRunner().invoke(main, ["train", "llama-3.1-8b", "--seq", "32768", "--micro-batch", "1", "--gpus", "8",
                                       "--cp", "4", "--zero", "3", "--recompute", "full", "--precision", "fsdp-mixed",
                                       "--repeat-kv", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["peak"]["allocated"] \
        == train(llama, replace(setup, repeat_kv=True)).allocated


def test_float8_keeps_what_bf16_keeps_and_casts_for_a_moment(llama) -> None:
    """torchao's Float8Linear saves the high-precision input and weight (float8_linear.py:45), so the
    kept activations do not change; the largest linear's (an MLP matrix, 4096 × 14336) fp8 operands
    exist while its backward runs: input, weight and grad_output, one byte an element."""
    n = 8192
    plain, fp8 = train(llama, FSDP8), train(llama, replace(FSDP8, float8="tensorwise"))
    assert fp8.activations == plain.activations
    assert cast_bytes(llama, "tensorwise", n, 1) == n * D + D * FF + n * FF
    assert cast_bytes(llama, "rowwise", n, 1) == 2 * (n * D + D * FF + n * FF)


def test_float8_all_gather_gathers_matrices_in_one_byte(llama) -> None:
    """enable_fsdp_float8_all_gather: a gathered layer's matrices at 1 byte, its two RMSNorm weights at 2."""
    matrices = D * D + 2 * D * KV + D * D + 3 * D * FF
    norms = 2 * D

    def gathered(float8: str) -> int:
        moment = next(m for m in train(llama, replace(FSDP8, float8=float8)).moments if "recomputed" in m.name)
        return dict(moment.parts)["FSDP: two gathered layers (running, prefetched)"]

    assert gathered("none") == 2 * (2 * matrices + 2 * norms)
    assert gathered("tensorwise-all-gather") == 2 * (matrices + 2 * norms)


@pytest.mark.parametrize(("args", "message"), [
    (["--gpus", "8", "--cp", "3"], "do not split into tp=1 × pp=1 × cp=3"),
    (["--gpus", "8", "--cp", "4", "--seq", "1028"], "splits into 2·cp = 8 chunks"),
    (["--cp", "2", "--attention", "eager", "--gpus", "2"], "--cp: ring attention needs --attention flash"),
    (["--float8", "tensorwise", "--lora-rank", "8"], "--float8: trains the full model's linears"),
])
def test_refusals(args: list[str], message: str) -> None:
    options = ["--seq", "2048", *args] if "--seq" not in args else args
    result = CliRunner().invoke(main, ["train", "llama-3.1-8b", "--micro-batch", "1", *options])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_cli_shows_cp_and_float8() -> None:
    result = CliRunner().invoke(main, ["train", "llama-3.1-8b", "--seq", "65536", "--micro-batch", "1", "--gpus", "8",
                                       "--cp", "2", "--zero", "3", "--float8", "tensorwise", "--framework", "torchtitan"],
                                terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "8 GPUs = dp 4 × tp 1 × pp 1 × cp 2" in result.output and "float8 tensorwise" in result.output


def test_budget_under_cp_answers_in_whole_chunks(llama) -> None:
    """The longest sequence that fits is a multiple of 2·cp (torch's load balancer), and one more
    2·cp tokens does not fit."""
    from calc.analysis.memory.budget import parse_budget
    from calc.analysis.train.budget import solve

    setup = replace(FSDP8, seq=65536, cp=2)
    answer = solve(llama, setup, "8xH100-80GB")
    capacity = parse_budget("8xH100-80GB").bytes_per_gpu
    assert answer.max_seq % 4 == 0
    assert train(llama, replace(setup, seq=answer.max_seq)).nvidia_smi <= capacity
    assert train(llama, replace(setup, seq=answer.max_seq + 4)).nvidia_smi > capacity
