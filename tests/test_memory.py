"""Weights bytes, GPUs, budgets and `gptcalc memory`."""

from __future__ import annotations

import json

import re

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from calc import cli
from calc.analysis.count import count
from calc.errors import GptcalcError
from calc.analysis.memory import (
    FORMATS, GPUS, Layout, Weights, find_gpu, inference, kv_cache, parse_budget, solve_budget,
)
from calc.analysis.memory.weights import weights
from calc.spec.load import load_spec, preset_names

LLAMA2_7B_PARAMS = 6_738_415_616  # source: tests/test_count.py GOLDEN (HF num_parameters, written out)


def run(*args: str) -> Result:
    return CliRunner().invoke(cli.main, list(args))


DTYPES = ("fp32", "fp16", "bf16", "fp8_e4m3", "int8", "int4")


@pytest.mark.parametrize("dtype, total", [
    # source: 6,738,415,616 parameters x bytes per parameter (4, 2, 2, 1, 1, 0.5)
    ("fp32", LLAMA2_7B_PARAMS * 4),
    ("fp16", 13_476_831_232),
    ("bf16", LLAMA2_7B_PARAMS * 2),
    ("fp8", LLAMA2_7B_PARAMS),
    ("int8", LLAMA2_7B_PARAMS),
    ("int4", 3_369_207_808),
])
def test_llama_2_7b_weights(dtype: str, total: int) -> None:
    assert weights(count(load_spec("llama-2-7b")), dtype).total_bytes == total


def test_int4_group_scales() -> None:
    # source: every llama-2-7b component is a multiple of 128 parameters, so the scales are exactly
    # 6,738,415,616 / 128 = 52,643,872 groups x 2 B = 105,287,744 B on top of 3,369,207,808 B.
    w = weights(count(load_spec("llama-2-7b")), "int4", group_size=128)
    assert w.total_bytes == 3_369_207_808 + 105_287_744 == 3_474_495_552
    # 4 + 16/128 = 4.125 bits per weight
    assert w.total_bytes * 8 == LLAMA2_7B_PARAMS * 4.125


def test_rounding_is_up_to_whole_bytes_per_component() -> None:
    w = Weights("m", FORMATS["int4"], {"odd": 3, "even": 4})
    assert w.components == {"odd": 2, "even": 2}
    assert Weights("m", FORMATS["int4"], {"x": 3}, group_size=2).components == {"x": (3 * 4 + 2 * 16 + 7) // 8}


@pytest.mark.parametrize("name", preset_names())
@pytest.mark.parametrize("dtype", ["fp16", "int4"])
def test_weight_rows_add_up_and_a_tied_head_costs_nothing(name: str, dtype: str) -> None:
    b = count(load_spec(name))
    w = weights(b, dtype)
    assert sum(w.components.values()) == w.total_bytes
    assert w.total_params == b.total
    if b.tied:
        assert w.components["lm_head"] == 0


def test_group_size_needs_a_quantized_dtype() -> None:
    with pytest.raises(GptcalcError, match="--group-size"):
        weights(count(load_spec("gpt2-small")), "fp16", group_size=128)


# --- GPUs and budgets ------------------------------------------------------------------------


def test_gpu_memory_is_what_nvidia_smi_reports() -> None:
    by_name = {g.name: g for g in GPUS}
    # source: modal-labs/modal-client PR 2797: "H100: 81559MiB", "85520809984 bytes ... on H100"
    assert by_name["H100-80GB"].bytes == 85_520_809_984
    # source: same PR, "A100 80GB: 81920MiB" = 80 x 2^30
    assert by_name["A100-80GB"].bytes == 80 * 2**30
    # source: the "80 GB" of an A100 is binary: 80 GiB = 85.9e9 B > 80e9 B
    assert by_name["A100-80GB"].bytes > 80 * 10**9
    # source: NVIDIA/TensorRT-LLM issue 10278 ("166593MiB / 183359MiB" on a B200), ROCm issue 4414 (MI300X
    # rocminfo pool 201310208 KB = 196,592 MiB), NVIDIA/gpu-admin-tools issue 4 (H100 NVL "95830MiB")
    assert (by_name["B200"].mib, by_name["MI300X"].mib, by_name["H100 NVL"].mib) == (183359, 201310208 // 1024, 95830)
    assert all(g.source for g in GPUS) and all(g.rates_source for g in GPUS if g.bandwidth or g.bf16_flops)


def test_catalog_gaps_hold_their_logged_totals() -> None:
    """H100 PCIe as nvidia-smi reports it; one MI250 GCD as rocminfo's pool; Apple Silicon as the GPU working
    set llama.cpp logs, not the RAM."""
    by_name = {g.name: g for g in GPUS}
    # source: nvidia-smi "NVIDIA H100 PCIe ... 1MiB /  81559MiB" (driver 565.57.01): the SXM card's figure too
    assert by_name["H100 PCIe"].bytes == by_name["H100-80GB"].bytes == 81559 * 2**20
    # source: https://github.com/ROCm/rocm_smi_lib/issues/160 (gfx90a "Size: 67092480(0x3ffc000) KB")
    assert by_name["MI250 (one GCD)"].bytes == 67092480 * 1024 == 68_702_699_520
    # source: https://github.com/ggml-org/llama.cpp/issues/1870 ("recommendedMaxWorkingSetSize  = 49152.00 MiB",
    # M1 Max 64 GB) and /issues/3213 ("73728,00 MB" on a 96 GB M2 Max): three quarters of the RAM
    assert by_name["M1 Max 64GB"].bytes * 4 == 64 * 2**30 * 3
    assert by_name["M2 Max 96GB"].bytes * 4 == 96 * 2**30 * 3
    assert find_gpu("mi250x") is find_gpu("MI250") is by_name["MI250 (one GCD)"]


def test_2026_catalog_holds_the_reported_totals() -> None:
    """The cards people size for in 2026, each at the total its driver reports (MiB as nvidia-smi prints it)."""
    by_name = {g.name: g for g in GPUS}
    # source: modal-labs/modal-client PR 2797 ("A10: 23028MiB", "T4: 15360MiB"); NVIDIA/nvtrust issue 128
    # ("NVIDIA H20 ... 0MiB /  97871MiB"); nvidia-smi logs: "NVIDIA B300 SXM6 AC ... 0MiB / 275040MiB",
    # "NVIDIA GB200 ... 0MiB / 189471MiB", "NVIDIA GB300 ... 0MiB / 284208MiB", "NVIDIA RTX PRO 6000 Blackwell
    # Server Edition ... 0MiB / 97887MiB", "NVIDIA L40 ... 5MiB /  46068MiB"
    assert {name: by_name[name].mib for name in ("T4", "A10", "H20", "B300", "GB200 (per GPU)", "GB300 (per GPU)",
                                                  "RTX PRO 6000 Blackwell", "L40")} == {
        "T4": 15360, "A10": 23028, "H20": 97871, "B300": 275040, "GB200 (per GPU)": 189471,
        "GB300 (per GPU)": 284208, "RTX PRO 6000 Blackwell": 97887, "L40": 46068}
    # source: llama.cpp's Metal logs "recommendedMaxWorkingSetSize  = 103079.22 MB" (M4 Max 128GB) and
    # "= 498216.21 MB" (M3 Ultra 512GB), in 10^6 B: 96 GiB and 464 GiB
    assert round(by_name["M4 Max 128GB"].bytes / 10**4) == 10307922
    assert round(by_name["M3 Ultra 512GB"].bytes / 10**4) == 49821621
    # source: the DGX B300 page (8 GPUs: FP4 108 PF dense, FP8 72 PF with sparsity) and the GB200 NVL72 page
    # (72 GPUs: FP4 720 PF dense, BF16 360 PF with sparsity)
    assert (by_name["B300"].fp4_flops * 8, by_name["B300"].fp8_flops * 8 * 2) == (108 * 10**15, 72 * 10**15)
    assert (by_name["GB200 (per GPU)"].fp4_flops * 72, by_name["GB200 (per GPU)"].bf16_flops * 72 * 2) == \
        (720 * 10**15, 360 * 10**15)
    assert all(g.rates_source for g in GPUS if g.fp8_flops or g.fp4_flops)


def test_amd_2025_cards_and_m4_pro_hold_their_reported_totals() -> None:
    """MI325X and MI355X at the total ROCm reports; a 48 GB M4 Pro at Metal's working set for 48 GB."""
    by_name = {g.name: g for g in GPUS}
    # source: torch's total_memory on an MI325X, "274,861,129,728 bytes / 262128 MiB", and vllm-project/vllm
    # issue 41963 ("AMD MI325X × 8 (255.98 GiB HBM each)")
    assert by_name["MI325X"].bytes == 274_861_129_728 and f"{by_name['MI325X'].bytes / 2**30:.2f}" == "255.98"
    # source: SGLang notes on MI355X (driver 6.14.14) "294896MiB reported GPU memory"; vLLM's "Free memory on
    # device cuda:0 (84.11/287.98 GiB)" on an MI355X
    assert by_name["MI355X"].mib == 294896 and f"{by_name['MI355X'].bytes / 2**30:.2f}" == "287.98"
    # source: llama.cpp's Metal log on a 48 GB M3 Max, "recommendedMaxWorkingSetSize  = 38654.71 MB" (10^6 B)
    assert round(by_name["M4 Pro 48GB"].bytes / 10**4) == 3865471
    # source: AMD's pages (MI325X FP8 2614.9 TF, 6 TB/s; MI355X MXFP4 10 PF dense) and Apple's (M4 Pro 273GB/s)
    assert (by_name["MI325X"].fp8_flops, by_name["MI355X"].fp4_flops) == (2_614_900 * 10**9, 10**16)
    assert (by_name["MI325X"].bandwidth, by_name["M4 Pro 48GB"].bandwidth) == (6 * 10**12, 273 * 10**9)


@pytest.mark.parametrize("text, name", [("b300", "B300"), ("GB200", "GB200 (per GPU)"), ("gb300", "GB300 (per GPU)"),
                                        ("rtx-pro-6000", "RTX PRO 6000 Blackwell"), ("h20", "H20"), ("t4", "T4"),
                                        ("A10", "A10"), ("l40", "L40"), ("m3-ultra-512gb", "M3 Ultra 512GB"),
                                        ("mi325x", "MI325X"), ("MI355X", "MI355X"), ("m4-pro-48gb", "M4 Pro 48GB")])
def test_budget_takes_every_2026_card(text: str, name: str) -> None:
    budget = parse_budget(f"4x{text}")
    assert (budget.bytes_per_gpu, budget.count) == (find_gpu(name).bytes, 4)


@pytest.mark.parametrize("text, near", [("H10", "H100-80GB"), ("2xB30", "B300"), ("rtx-pro-600", "RTX PRO 6000 Blackwell"),
                                        ("gb2000", "GB200 (per GPU)")])
def test_a_mistyped_gpu_gets_the_closest_name(text: str, near: str) -> None:
    with pytest.raises(GptcalcError, match=f"unknown GPU .*{re.escape(near)}"):
        parse_budget(text)


@pytest.mark.parametrize("text, name", [("H100", "H100-80GB"), ("a100-80gb", "A100-80GB"), ("RTX 4090", "RTX 4090"),
                                        ("4090", "RTX 4090"), ("l40s", "L40S"), ("h200", "H200")])
def test_find_gpu(text: str, name: str) -> None:
    assert find_gpu(text).name == name


def test_parse_budget() -> None:
    assert (parse_budget("80GB").bytes_per_gpu, parse_budget("80GB").count) == (80 * 10**9, 1)
    assert parse_budget("75GiB").bytes_per_gpu == 75 * 2**30
    assert parse_budget("H100-80GB").bytes_per_gpu == 81559 * 2**20
    assert (parse_budget("8xA100-40GB").count, parse_budget("2 x H100").bytes_per_gpu) == (8, 81559 * 2**20)
    with pytest.raises(GptcalcError, match="--budget 'A100': unknown GPU .which one: A100-40GB or A100-80GB"):
        parse_budget("A100")  # ambiguous: 40 or 80 GB, so not a name
    with pytest.raises(GptcalcError, match="give a unit"):
        parse_budget("80")  # 80 what?


def test_budget_longest_context_and_largest_batch() -> None:
    spec = load_spec("llama-2-7b")
    w = 13_476_831_232  # fp16 weights, above
    # source: (80e9 - 13,476,831,232) // 524,288 = 126,882 tokens; the model's context is 4,096
    seq = solve_budget(spec, 80 * 10**9, w, "fp16", "seq", 1)
    assert (seq.by_memory, seq.answer, seq.limited_by) == (126_882, 4096, "context")
    # source: 66,523,168,768 // (524,288 x 4,096 = 2,147,483,648) = 30
    batch = solve_budget(spec, 80 * 10**9, w, "fp16", "batch", 4096)
    assert (batch.answer, batch.limited_by) == (30, "memory")


def test_budget_smaller_than_the_weights() -> None:
    spec = load_spec("llama-70b")
    w = weights(count(spec), "fp16").total_bytes
    b = solve_budget(spec, find_gpu("4090").bytes, w, "fp16", "seq", 1)
    assert (b.answer, b.limited_by) == (0, "weights") and b.free_bytes < 0


@settings(max_examples=50, deadline=None)
@given(budget=st.integers(10**9, 2 * 10**11), batch=st.integers(1, 64),
       dtype=st.sampled_from(DTYPES), name=st.sampled_from(["llama-3-8b", "qwen2-0.5b", "mistral-7b"]))
def test_the_answer_fits_and_one_more_does_not(budget: int, batch: int, dtype: str, name: str) -> None:
    spec = load_spec(name)
    w = weights(count(spec), dtype).total_bytes
    b = solve_budget(spec, budget, w, dtype, "seq", batch)
    if b.by_memory is None:  # every layer windowed: the whole window fits, so any length does
        assert w + kv_cache(spec, spec.n_positions, batch, dtype).total_bytes <= budget
        return
    if b.by_memory:
        assert w + kv_cache(spec, b.by_memory, batch, dtype).total_bytes <= budget
    assert w + kv_cache(spec, b.by_memory + 1, batch, dtype).total_bytes > budget
    assert b.answer == min(b.by_memory, spec.n_positions)


def test_inference_total_and_logits_estimate() -> None:
    spec = load_spec("llama-2-7b")
    result = inference(spec, count(spec), 4096, 1, "int4", kv_dtype="fp16")
    assert result.total_bytes == 3_369_207_808 + 2_147_483_648
    assert result.kv.dtype == "fp16"
    # source: 1 x 4,096 positions x 32,000 vocab x 4 B
    assert result.logits_bytes == 524_288_000
    # the cache stays 16-bit whatever the weights are (servers do not quantise it unless told to)
    assert inference(spec, count(spec), 10, 1, "int4").kv.dtype == "fp16"


# --- the command ---------------------------------------------------------------------------


def test_cli_memory_json() -> None:
    result = run("memory", "llama-2-7b", "--seq", "4096", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["weights"]["total_bytes"] == 13_476_831_232
    assert data["kv_cache"]["total_bytes"] == 2_147_483_648
    assert data["total_bytes"] == 13_476_831_232 + 2_147_483_648
    assert sum(data["weights"]["components"].values()) == data["weights"]["total_bytes"]
    fits = {g["gpu"]: g["fits"] for g in data["gpus"]}
    # 15,624,314,880 B: more than the 24 GB cards' 23,028-24,576 MiB? no: 14.6 GiB fits all of them
    assert all(fits.values()) and len(fits) == len(GPUS)
    assert "activations" in data["not_included"]


def test_cli_memory_budget_json() -> None:
    result = run("memory", "llama-2-7b", "--budget", "80GB", "--seq", "4096", "--json")
    budget = json.loads(result.output)["budget"]
    assert (budget["solve_for"], budget["max_batch"], budget["seq"]) == ("batch", 30, 4096)


def test_budget_solve_for_a_sliding_window_model() -> None:
    # Mistral-7B-v0.1: every layer windowed at 4,096, so the cache stops at 32 x 2 x 8 x 128 x 2 x 4,096 = 512 MiB
    result = json.loads(run("memory", "mistral-7b", "--budget", "24GB", "--json").output)
    assert result["budget"]["max_seq_by_memory"] is None and result["budget"]["max_seq"] == 32768
    assert result["budget"]["limited_by"] == "context"


@pytest.mark.parametrize("tp, pp, per_gpu_layers", [(1, 1, [80]), (2, 1, [80]), (1, 3, [27, 27, 26]), (4, 2, [40, 40])])
def test_per_gpu_weights_and_cache_under_tp_and_pp(tp: int, pp: int, per_gpu_layers: list[int]) -> None:
    # llama-3-70b: 80 layers, 8 KV heads; vLLM's get_pp_indices gives the remainder to the stages before the last
    spec = load_spec("llama-3-70b")
    result = inference(spec, count(spec), 4096, 1, "bf16", layout=Layout(tp, pp))
    assert [share.kv.n_layers for share in result.gpus] == per_gpu_layers
    per_layer = 2 * 8 // tp * 128 * 2 * 4096  # K and V heads split tp ways, 2 B each
    assert [share.kv.total_bytes for share in result.gpus] == [n * per_layer for n in per_gpu_layers]
    d, vocab = 8192, 128256
    layer = 2 * d * d + 2 * d * 1024 + 3 * d * 28672  # q, o, k, v, gate/up/down (norms aside)
    first = result.gpus[0].weights.params
    assert first["token_embedding"] == vocab * d // tp and first["attn_norm"] == d * per_gpu_layers[0]
    assert sum(first[n] for n in ("q", "k", "v", "attn_out", "mlp_gate", "mlp_up", "mlp_down")) == \
        layer * per_gpu_layers[0] // tp
    if pp > 1:
        assert "lm_head" not in first and "token_embedding" not in result.gpus[-1].weights.params
    assert sum(sum(g.weights.params.values()) for g in result.gpus) * tp >= count(spec).total


def test_tp_past_the_kv_heads_replicates_k_and_v_weights() -> None:
    spec = load_spec("llama-3-8b")  # 8 KV heads of 128 over 16 GPUs: each holds one head's K and V
    share = inference(spec, count(spec), 16, layout=Layout(16)).gpus[0]
    assert share.weights.params["k"] == 32 * 4096 * 128 and share.weights.params["q"] == 32 * 4096 * 4096 // 16


def test_cli_memory_multi_gpu_budget() -> None:
    data = json.loads(run("memory", "llama-3-70b", "--budget", "2xH100-80GB", "--seq", "32k", "--json").output)
    assert data["layout"] == {"tp": 2, "pp": 1, "ep": 1, "gpus": 2} and data["per_gpu"]
    assert data["budget"]["gpus"] == 2 and data["budget"]["budget_bytes"] == 81559 * 2**20
    assert data["total_bytes"] == data["weights"]["total_bytes"] + data["kv_cache"]["total_bytes"]
    text = run("memory", "llama-3-70b", "--budget", "2xH100-80GB", "--seq", "32k").output
    assert text.splitlines()[0].startswith("fits on 2 x H100-80GB")


def test_cli_memory_tables_add_up() -> None:
    result = run("memory", "gpt2-small", "--dtype", "fp32")
    assert result.exit_code == 0, result.output
    rows = [line.split("│") for line in result.output.splitlines() if line.count("│") == 6]
    byte_cells = {cells[1].strip(): int(cells[3].strip().removesuffix(" B").replace(",", "")) for cells in rows}
    total = byte_cells.pop("weights total")
    assert total == 124_439_808 * 4 == sum(byte_cells.values())
    assert "GiB" in result.output and "GB = 10^9 B" in result.output
    assert "not included: activations" in result.output


def test_cli_memory_says_when_the_weights_alone_do_not_fit() -> None:
    result = run("memory", "llama-70b", "--budget", "rtx 4090", "--all")
    assert result.exit_code == 0, result.output
    assert "exceed the budget" in result.output and "nothing fits" in result.output
    rows = {line.split("│")[1].strip(): line.split("│")[6].strip() for line in result.output.splitlines()
            if line.count("│") == 8}
    # 137,953,296,384 B of weights + 1,342,177,280 B of cache: the cards from the H200 (150,754,820,096 B) up hold it
    assert {name for name, fits in rows.items() if fits == "yes"} == {
        "H200", "B200", "GB200 (per GPU)", "MI300X", "MI325X", "B300", "GB300 (per GPU)", "MI355X", "M3 Ultra 512GB"}


@pytest.mark.parametrize("args, message", [
    (["memory", "gpt2-small", "--budget", "lots"], "--budget"),
    (["memory", "gpt2-small", "--budget", "80GB", "--seq", "10", "--batch", "2"], "not both"),
    (["memory", "gpt2-small", "--group-size", "128"], "--group-size"),
    (["memory", "gpt2-small", "--dtype", "int4", "--group-size", "0"], "--group-size"),
    (["memory", "gpt2-small", "--kv-dtype", "fp64"], "--kv-dtype"),
    (["memory", "gpt2-small", "--batch", "0"], "--batch"),
    (["memory", "nope"], "unknown model"),
    (["memory", "gpt2-small", "--budget", "80"], "give a unit"),
    (["memory", "llama-3-70b", "--budget", "2xH100", "--tp", "4"], "--tp x --pp = 4"),
    (["memory", "llama-3-70b", "--pp", "100"], "--pp 100"),
])
def test_cli_memory_bad_input_exits_2(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert "Error:" in result.output and message in result.output
    assert "Traceback" not in result.output


def test_memory_help_has_an_example() -> None:
    assert "gptcalc memory llama-7b --seq 4096" in run("memory", "--help").output
