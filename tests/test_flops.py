"""`gptcalc flops`: hand-computed totals, the conventions, the rules of thumb, the time bounds, the CLI.

The torch cross-check (FlopCounterMode over the reference model, forward, backward and full
recomputation) is in tests/test_flops_torch.py.
"""

from __future__ import annotations

import json
from fractions import Fraction
from math import prod
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from calc.analysis.count import count
from calc.analysis.flops import Conventions, flops
from calc.analysis.flops.bounds import bounds, weights_read
from calc.analysis.flops.checks import checks
from calc.analysis.flops.rows import causal_pairs
from calc.cli import main
from calc.errors import GptcalcError
from calc.analysis.memory.gpus import rated_gpu
from calc.analysis.shapes import journey
from calc.spec.load import load_spec
from oracle import MODEL_TYPE_CONFIGS


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), terminal_width=200)
    return result.exit_code, result.output


def test_gpt2_small_prefill_by_hand() -> None:
    """GPT-2 small (d 768, 12 layers, d_ff 3072, vocab 50,257: its config.json) at T = 1,024, written
    out from the matmuls alone: Q, K, V, O are [768, 768], the MLP [768, 3072] and back, the tied head
    [768, 50257] on every position; QKᵀ and A·V 2·T·T·768 each per layer."""
    # source: https://huggingface.co/openai-community/gpt2/blob/main/config.json
    d, L, ff, V, T = 768, 12, 3072, 50257, 1024
    weights_per_token = L * (4 * d * d + 2 * d * ff) + d * V
    attention = L * 2 * (2 * T * T * d)
    f = flops(load_spec("gpt2-small"), T)
    assert f.forward == 2 * T * weights_per_token + attention
    assert f.attention == attention
    assert f.training() == {"none": 3 * f.forward, "selective": 3 * f.forward + attention,
                            "full": 3 * f.forward + f.forward - 2 * T * d * V}


def test_rows_add_up_and_macs_halve_every_row() -> None:
    spec = load_spec("llama-3-8b")
    f, m = flops(spec, 512, 2), flops(spec, 512, 2, conventions=Conventions(macs=True))
    assert sum(r.total for r in f.rows) == f.forward
    assert [r.total for r in f.rows] == [r.total for r in m.rows] and m.scale == 2
    assert all(r.total % 2 == 0 for r in f.rows)
    assert m.to_json()["forward"] * 2 == f.forward and m.to_json()["unit"] == "MAC"


def test_last_logit_is_the_shapes_journey() -> None:
    """--last-logit is exactly `gptcalc shapes`' FLOPs: the LM head on the last position only."""
    from calc.analysis.shapes import journey

    spec = load_spec("qwen2-0.5b")
    assert flops(spec, 100, 3, conventions=Conventions(last_logit=True)).forward == journey(spec, 100, 3).flops
    full = flops(spec, 100, 3).forward - journey(spec, 100, 3).flops
    assert full == 2 * 3 * 99 * 896 * 151936  # the other 99 positions' logits (qwen2-0.5b: d 896, vocab 151,936)


@given(st.integers(1, 300), st.one_of(st.none(), st.integers(1, 400)))
def test_causal_pairs_count_the_unmasked_pairs(seq: int, window: int | None) -> None:
    brute = sum(min(p + 1, window or seq) for p in range(seq))
    assert causal_pairs(seq, window) == brute


def test_causal_half_scales_only_attention() -> None:
    """Full attention: T·T pairs; causal: T(T+1)/2; a window of w: Σ_p min(p+1, w); decode: unchanged."""
    spec = load_spec("gemma-2-9b")  # source: its config.json: sliding_window 4096 on every other layer
    T = 8192
    full, half = flops(spec, T), flops(spec, T, conventions=Conventions(causal_half=True))
    for a, b in zip(full.rows, half.rows):
        window = spec.blocks[a.block].attention.window if a.block else None
        keys = min(T, window) if window else T
        if a.attention:
            assert b.flops * T * keys == a.flops * causal_pairs(T, window)
        else:
            assert b.flops == a.flops
    assert full.forward - full.attention == half.forward - half.attention > 0
    decode = [flops(spec, T - 1, decode=True, conventions=Conventions(causal_half=h)).forward for h in (False, True)]
    assert decode[0] == decode[1]


def test_moe_counts_top_k_experts_and_mla_its_latents() -> None:
    """DeepSeek-V3 (config.json: d 7168, 256 experts of 2048, top 8, 1 shared, kv_lora_rank 512, q_lora_rank
    1536, 128 heads of 128 + 64, v 128): the experts rows are 8 experts' worth, not 256."""
    # source: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
    T = 16
    rows = {(r.block, r.id): r for r in flops(load_spec("deepseek-v3"), T).rows}
    assert rows["moe", "experts_up"].flops == 2 * T * 8 * 7168 * 2048
    assert rows["moe", "shared_mlp_up"].flops == 2 * T * 7168 * 2048
    assert rows["moe", "experts_up"].layers == 58 and rows["dense", "mlp_up"].layers == 3
    assert rows["moe", "kv_a"].flops == 2 * T * 7168 * (512 + 64)
    assert rows["moe", "kv_b"].flops == 2 * T * 512 * 128 * (128 + 128)
    assert rows["moe", "q_b"].flops == 2 * T * 1536 * 128 * 192
    assert rows["moe", "scores"].flops == 2 * 128 * T * T * 192


def test_palm_attention_term_is_ours_times_three_and_the_rest_is_the_head_and_norms() -> None:
    """Llama-2-7B (MHA, no biases, untied head): PaLM's 12·L·H·Q·T is our training attention exactly; the
    weights terms differ by the LM head (in ours, not in N) and the norms (in N, multiplied by nothing)."""
    spec = load_spec("llama-2-7b")
    f = flops(spec, 4096)
    rule = {c.name: c for c in checks(spec, f)}
    assert rule["PaLM"].attention == rule["ours: training"].attention == 12 * 32 * 4096 * 4096
    norms = 32 * 2 * 4096 + 4096
    assert rule["ours: training"].weights - rule["PaLM"].weights == 6 * 4096 * 32000 - 6 * norms
    assert rule["6N"].total == rule["PaLM"].weights == 6 * count(spec).non_embedding


def test_kaplan_attention_term_is_the_causal_count_less_one_key() -> None:
    """Kaplan's 2·n_layer·n_ctx·d_attn per token vs our causal T(T+1)/2 pairs: 4·d_attn·(T+1)/2 per layer."""
    spec = load_spec("gpt2-small")
    f = flops(spec, 1024, conventions=Conventions(causal_half=True))
    rule = {c.name: c for c in checks(spec, f)}
    assert rule["ours: forward"].attention - rule["Kaplan et al."].attention == 2 * 12 * 768


def test_decode_bound_by_hand() -> None:
    """Llama-2-7B, batch 1, 4,000 cached tokens, bf16, on an H100 SXM (3.35 TB/s): every weight but the
    embedding table (the head is untied) and a KV cache of 2·32·4096·4000 elements, each 2 bytes."""
    spec = load_spec("llama-2-7b")
    f = flops(spec, 4000, decode=True)
    b = bounds(spec, f, rated_gpu("h100"), Fraction(1, 2))
    weights = (6_738_415_616 - 32000 * 4096) * 2
    cache = 2 * 32 * 4096 * 4000 * 2
    assert (b.weight_bytes, b.kv_bytes) == (weights, cache)
    assert b.tokens_per_second == Fraction(3_350 * 10**9, weights + cache)


def test_tied_head_and_moe_weights_read() -> None:
    gpt2, mixtral = load_spec("gpt2-small"), load_spec("mixtral-8x7b")
    assert weights_read(gpt2) == 124_439_808 - 1024 * 768  # the table is read whole as the head, wpe by rows
    assert weights_read(mixtral) == count(mixtral).active - 32000 * 4096


def test_prefill_bound_is_flops_over_peak() -> None:
    spec = load_spec("gpt2-small")
    f = flops(spec, 1024)
    b = bounds(spec, f, rated_gpu("A100-80GB"), Fraction(2, 5))
    assert b.compute_seconds(f.forward, b.mfu) == Fraction(f.forward, 312 * 10**12) * Fraction(5, 2)


def test_cli_table_adds_up_and_states_conventions() -> None:
    code, out = run("flops", "gpt2-small", "--seq", "1024")
    assert code == 0
    table = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.split("┡", 1)[1].split("└", 1)[0]
             .splitlines() if "│" in line]
    rows = {cells[0]: int(cells[4].replace(",", "")) for cells in table if cells[4]}
    total = rows.pop("forward total")
    rows.pop("per token (÷ 1,024)")
    assert sum(rows.values()) == total == flops(load_spec("gpt2-small"), 1024).forward
    for phrase in ("causal attention counted in full", "LM head: on every position", "Kaplan et al.", "PaLM",
                   "H100-80GB", "training step"):
        assert phrase in out


def test_cli_json() -> None:
    code, out = run("flops", "mixtral-8x7b", "--seq", "100", "--decode", "--batch", "4", "--gpu", "h100", "--json")
    data = json.loads(out)
    assert code == 0 and data["decode"] and "training" not in data
    assert data["forward"] == sum(row["total"] for row in data["rows"])
    assert [b["gpu"]["gpu"] for b in data["bounds"]] == ["H100-80GB"]
    assert data["bounds"][0]["tokens_per_second"] > 0


@pytest.mark.parametrize(("args", "message"), [
    (["--seq", "2000"], "exceed gpt2-small's context length"),
    (["--seq", "10", "--gpu", "tpu"], "--gpu: unknown GPU 'tpu'"),
    (["--seq", "10", "--mfu", "0"], "--mfu"),
    (["--seq", "0"], "--seq"),
])
def test_bad_input(args: list[str], message: str) -> None:
    code, out = run("flops", "gpt2-small", *args)
    assert code == 2 and message in out and "Traceback" not in out


def test_unknown_gpu_is_an_input_error() -> None:
    with pytest.raises(GptcalcError):
        rated_gpu("v100")
    with pytest.raises(GptcalcError, match="no published peak bf16 rate"):
        rated_gpu("A10G")


@pytest.mark.parametrize(("flag", "phrase"), [
    ("--macs", "forward MACs of a prefill"), ("--causal-half", "only the (query, key) pairs the mask keeps"),
    ("--last-logit", "LM head: on the last position only"),
])
def test_cli_conventions_are_stated(flag: str, phrase: str) -> None:
    code, out = run("flops", "llama-3.2-1b", "--seq", "64", flag)
    assert code == 0 and phrase in out


@pytest.mark.parametrize("path", MODEL_TYPE_CONFIGS, ids=lambda p: p.stem)
def test_every_printed_formula_evaluates_to_its_row(path: Path) -> None:
    """Each row's formula, read with the sizes its step's shapes name, is the FLOPs the row prints, for a
    prefill and a decode step of every model_type: a recurrence's scan (Mamba's 4·B·T·I·N, a delta rule's
    6·B·T·Hv·Dk·Dv, lightning attention's 4·B·T·h·hd·hd) states its own, not a matmul's 2·m·k·n. Formulas
    with names no shape of the step carries (a sum of windows, 'k' routed experts) are left to their own
    tests. MiniMax-M1's lightning scan, which carried no state shape, made `flops` crash before."""
    spec = load_spec(str(path))
    checked = 0
    for decode in (False, True):
        steps = {(s.id, s.block): s for s in journey(spec, 12, 2, decode=decode).steps}
        for row in flops(spec, 12, 2, decode=decode).rows:
            step = steps[row.id, row.block]
            sizes = {"T": 12} | {name: size for shape in (*step.inputs, step.output, step.weight) if shape
                                 for name, size in zip(shape.names, shape.sizes)}
            factors = [int(f) if f.isdigit() else sizes.get(f.strip("()")) for f in row.formula.split("·")]
            if None not in factors:
                assert prod(factors) == row.flops, (row.id, row.formula)
                checked += 1
    assert checked
