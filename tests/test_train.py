"""`gptcalc train`: the ZeRO paper's figures, Korthikanti et al.'s formula, LoRA counts, the CLI.

The torch cross-checks (saved-tensor bytes per recompute mode, AdamW's state) are in
tests/test_train_torch.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import get_args

import pytest
from click.testing import CliRunner

from calc.analysis.count import count
from calc.analysis.train import Setup, train
from calc.analysis.train.activations import GELU_KEPT, korthikanti
from calc.analysis.train.frameworks import FRAMEWORKS
from calc.analysis.train.params import held, nf4_bytes
from calc.analysis.train.states import Tensor, model_states, optimizer_bytes
from calc.cli import main
from calc.parts.mlp import WRITTEN_GELUS, ActivationForm
from calc.spec.load import load_spec
from oracle import CONFIG_DIR, MODEL_TYPE_CONFIGS

ALL = ("q", "k", "v", "o", "gate", "up", "down")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), terminal_width=200)
    return result.exit_code, result.output


@pytest.mark.parametrize(("zero", "gb"), [(0, "120"), (1, "31.40625"), (2, "16.640625"), (3, "1.875")])
def test_zero_paper_model_states(zero: int, gb: str) -> None:
    """7.5B parameters, 64 data-parallel GPUs, Adam in mixed precision (K = 12): 120 GB, then
    31.4 / 16.6 / 1.9 GB per GPU for stages 1 / 2 / 3 (decimal GB)."""
    # source: Rajbhandari et al., "ZeRO", arXiv 1910.02054, Figure 1 (Ψ = 7.5B, N_d = 64, K = 12)
    psi = 7_500_000_000
    rows = model_states(psi, optimizer_bytes("adamw", [Tensor(1, psi)]), zero, 64)
    assert sum(row.per_gpu for row in rows) == int(float(gb) * 10**9)
    assert f"{sum(r.per_gpu for r in rows) / 10**9:.1f}" == {0: "120.0", 1: "31.4", 2: "16.6", 3: "1.9"}[zero]


def test_optimizers_per_parameter() -> None:
    tensors = [Tensor(2, 3000, 4000), Tensor(3, 4000)]
    n = 2 * 3000 * 4000 + 3 * 4000
    assert optimizer_bytes("adamw", tensors) == 8 * n
    assert optimizer_bytes("sgd", tensors) == 0
    assert optimizer_bytes("sgd-momentum", tensors) == 4 * n
    # bitsandbytes >= 0.44.0 (optim/optimizer.py): an fp32 absmax per 256 values of m and of v; under 4,096
    # elements (the 4,000-vectors) fp32 m and v
    big = 2 * 3000 * 4000
    assert optimizer_bytes("adamw8bit", tensors) == 2 * big + 2 * 2 * 4 * -(-3000 * 4000 // 256) + 8 * 3 * 4000
    assert optimizer_bytes("adafactor", tensors) == 4 * (2 * (3000 + 4000) + 3 * 4000)


@pytest.mark.parametrize(("tp", "sp", "recompute", "per_layer"), [
    (1, False, "none", "34·sbh + 5·a·s²·b"), (8, False, "none", "sbh(10 + 24/t) + 5as²b/t"),
    (8, True, "none", "(34sbh + 5as²b)/t"), (8, False, "selective", "sbh(10 + 24/t)"),
    (8, True, "selective", "34sbh/t"), (8, True, "full", "2sbh"),
])
def test_korthikanti_table_2(tp: int, sp: bool, recompute: str, per_layer: str) -> None:
    """GPT-3 175B (s 2048, h 12288, a 96, 96 layers), micro-batch 1, each row of their Table 2."""
    # source: Korthikanti et al., arXiv 2205.05198, Table 2 (activation memory per layer)
    s, b, h, a, L = 2048, 1, 12288, 96, 96
    expected = {"34·sbh + 5·a·s²·b": 34 * s * b * h + 5 * a * s * s * b,
                "sbh(10 + 24/t) + 5as²b/t": s * b * h * (10 + 24 // tp) + 5 * a * s * s * b // tp,
                "(34sbh + 5as²b)/t": (34 * s * b * h + 5 * a * s * s * b) // tp,
                "sbh(10 + 24/t)": s * b * h * (10 + 24 // tp), "34sbh/t": 34 * s * b * h // tp,
                "2sbh": 2 * s * b * h}[per_layer]
    assert korthikanti(s, b, h, a, L, tp, sp, recompute) == L * expected


@pytest.mark.parametrize("dropout", [True, False])
def test_ours_beside_korthikanti_on_gpt2_small(dropout: bool) -> None:
    """Their GPT-3 layer with dropout vs ours: with GPT-2's own dropout (attn_pdrop, resid_pdrop 0.1) the
    difference is LayerNorm's mean and rstd, which they leave out (2 × 2 per token, bf16), and the three
    intermediates GPT2MLP's gelu_new keeps beyond their fused GELU's input (3 × 4h per token, bf16: 24sbh;
    none with the fused GELU litgpt runs); without it also their dropout masks (2sbh + as²b bytes) and the
    dropped-out P (2as²b)."""
    # source: https://huggingface.co/openai-community/gpt2/blob/main/config.json (attn_pdrop, resid_pdrop 0.1,
    # activation_function gelu_new)
    spec = load_spec("gpt2-small")
    s, b, h, a = 1024, 4, 768, 12
    masks = 0 if dropout else 2 * s * b * h + 3 * a * s * s * b
    for fused, written in ((False, 24 * s * b * h), (True, 0)):
        t = train(spec, Setup(s, b, attention="eager", dropout=dropout, fused_gelu=fused))
        ours = sum(n * t.layer_bytes(terms) for _, n, terms in t.layers)
        assert t.korthikanti - ours == 12 * (masks - 8 * s * b - written)


def test_every_gelu_form_has_its_kept_count() -> None:
    """The MLP part's ActivationForm is the one list of GELU forms: the config reader's written forms derive
    from it, and training's count of what each form keeps (GELU_KEPT, measured in test_train_torch.py) must
    name every form and no other, or a config naming a new form would fail when trained."""
    assert set(GELU_KEPT) == set(get_args(ActivationForm)) == {"fused", *WRITTEN_GELUS}


def test_deepspeed_trains_bf16_adapters_with_fp32_masters() -> None:
    """DeepSpeed's engine casts the whole module to bf16 when bf16 is on, the LoRA adapters PEFT added included
    (deepspeed/runtime/engine.py, _configure_distributed_model: `self.module.bfloat16()`), and its optimizer
    keeps fp32 masters of what is trained: so its adapters are bf16 (2 B weights, 2 B gradients) with a 4 B
    master and 8 B of AdamW states, and their inputs are not cast (no copy): the peak is pure bf16's plus the
    masters and the states' second half. Llama-3-8B's default LoRA targets at rank 16: per layer
    16 × (2·(4096 + 4096) + 2·(4096 + 1024) + 3·(4096 + 14336)) = 1,310,720, × 32 layers (config.json)."""
    n = 32 * 16 * (2 * (4096 + 4096) + 2 * (4096 + 1024) + 3 * (4096 + 14336))
    args = ("train", "llama-3-8b", "--seq", "2048", "--micro-batch", "1", "--lora-rank", "16", "--json")
    code, out = run(*args, "--framework", "deepspeed")
    assert code == 0
    result = json.loads(out)
    states = {row["key"]: row["bytes"] for row in result["states"]}
    assert result["trained_params"] == n
    assert states == {"weights": 2 * n, "frozen_weights": states["frozen_weights"], "gradients": 2 * n,
                      "master_weights": 4 * n, "optimizer": 8 * n}
    code, out = run(*args, "--precision", "bf16")
    assert code == 0 and result["peak"]["allocated"] == json.loads(out)["peak"]["allocated"] + 4 * n + 4 * n


@pytest.mark.parametrize(("framework", "dropout"), [("hf", True), ("deepspeed", True), ("torchtune", False),
                                                    ("litgpt", False), ("torchtitan", False)])
def test_a_framework_without_dropout_keeps_no_masks(framework: str, dropout: bool) -> None:
    """GPT-2's embd_pdrop keeps one bool mask per embedding element (n·d bytes) outside the layers; its
    layers keep P's mask and the dropped-out P, and each sublayer output's mask. torchtune's, litgpt's
    and torchtitan's model code has no dropout, so their profiles turn it off; --dropout turns it back on.
    (litgpt's model runs a fused GELU where GPT2MLP writes gelu_new out: its base keeps that form's.)"""
    spec = load_spec("gpt2-small")
    s, b, d, h, layers = 128, 2, 768, 12, 12
    masks = layers * (b * h * s * s * (2 + 1) + 2 * s * b * d) + s * b * d  # bf16 P dropped, bool masks
    fused = FRAMEWORKS[framework].fused_gelu
    base = train(spec, Setup(s, b, attention="eager", dropout=False, fused_gelu=fused)).activations
    code, out = run("train", "gpt2-small", "--seq", str(s), "--micro-batch", str(b), "--attention", "eager",
                    "--framework", framework, "--precision", "mixed", "--loss", "fp32", "--recompute", "none", "--json")
    assert code == 0 and json.loads(out)["activations"]["total"] == base + masks * dropout
    code, out = run("train", "gpt2-small", "--seq", str(s), "--micro-batch", str(b), "--attention", "eager",
                    "--framework", framework, "--recompute", "none", "--dropout", "--json")
    assert code == 0 and json.loads(out)["setup"]["dropout"] is True


def test_llama4_moe_as_transformers_runs_it_and_as_grouped_matmuls() -> None:
    """Llama-4 Scout (16 experts, top-1, expert and shared d_ff 8192, d 5120, every layer MoE). transformers'
    Llama4TextMoe (hf, the reference) runs every expert over every token: sigmoid scores over every expert
    and their copy (2nE), the input repeated per expert and scaled (2nEd), each expert's hidden over all
    tokens (gate, SiLU, up, product: 4nEf). torchtitan and torchtune send the top-k rows through grouped
    matmuls (torchtitan/models/common/moe/moe.py @ 18761a8; torchtune/modules/moe/moe.py @ 0e25699):
    sigmoid scores (nE), the sort's int64 permutation, row indices and inverse (3nk), int32 offsets (E),
    the routed rows, the hidden (4nkf), the outputs and weights (nkd + nk). Elements × 2 B (bf16)."""
    # source: https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct/blob/main/config.json
    spec = load_spec("llama-4-scout")
    s, b, E, k, d, f, layers = 256, 2, 16, 1, 5120, 8192, 48
    n = s * b
    every = 2 * (2 * n * E + 2 * n * E * d + 4 * n * E * f)
    grouped = 2 * (n * E + n * k * d + 4 * n * k * f + n * k * d + n * k) + 8 * 3 * n * k + 4 * E
    reference = train(spec, Setup(s, b)).activations
    assert train(spec, Setup(s, b, moe_form="grouped")).activations == reference - layers * (every - grouped)
    for framework, form in (("hf", every), ("torchtitan", grouped), ("torchtune", grouped)):
        code, out = run("train", "llama-4-scout", "--seq", str(s), "--micro-batch", str(b), "--framework", framework,
                        "--precision", "mixed", "--loss", "fp32", "--recompute", "none", "--no-norm-upcast",
                        "--no-repeat-kv", "--json")  # the MoE form alone (torchtune's profile repeats K and V)
        assert code == 0 and json.loads(out)["activations"]["total"] == reference - layers * (every - form)
    code, out = run("train", "llama-4-scout", "--seq", str(s), "--micro-batch", str(b), "--framework", "torchtitan",
                    "--moe-form", "reference", "--recompute", "none", "--json")
    assert code == 0 and json.loads(out)["activations"]["total"] == reference
    notes = [run("train", "llama-4-scout", "--seq", str(s), "--micro-batch", str(b), *form)[1]
             for form in ((), ("--moe-form", "grouped"))]
    assert ["every expert over every token" in text for text in notes] == [True, False]


def test_korthikanti_only_where_its_layer_applies() -> None:
    assert train(load_spec("llama-2-70b"), Setup(128, 1)).korthikanti is None  # GQA and a gated MLP


def test_llama3_8b_lora_adapters() -> None:
    """r = 16 on q, k, v, o, gate, up, down: 32 layers × 16 × [(4096+4096) + 2·(4096+1024) + (4096+4096)
    + 3·(4096+14336)] = 41,943,040, what PEFT prints for Llama-3-8B (8,072,204,288 = base + adapters)."""
    # source: https://huggingface.co/docs/peft/main/en/developer_guides/lora (LoRA: A [in, r], B [r, out])
    spec = load_spec("llama-3-8b")
    h = held(spec, lora_rank=16, lora_targets=ALL)
    assert h.adapter_params == 41_943_040
    assert h.params + h.adapter_params == 8_072_204_288
    assert held(spec, lora_rank=8, lora_targets=("q", "v")).adapter_params == 32 * 8 * (8192 + 5120)


def test_qlora_base_is_nf4_layers_and_bf16_rest() -> None:
    spec = load_spec("llama-3-8b")
    t = train(spec, Setup(512, 1, lora_rank=16, qlora=True))
    h = t.held
    frozen = next(r for r in t.states if r.key == "frozen_weights")
    assert frozen.full == nf4_bytes(h.layer_matrices) + 2 * (h.params - h.layer_matrices)
    assert h.layer_matrices == count(spec).total - 2 * 128256 * 4096 - 65 * 4096  # all but embeddings, head, norms
    assert nf4_bytes(64 * 256) == 64 * 256 // 2 + 256 + 4
    assert {r.key for r in t.states} == {"weights", "frozen_weights", "gradients", "optimizer"}  # no fp32 master


def test_tensor_and_pipeline_parallel_split() -> None:
    """Llama-2-7B on tp 2 × pp 4: 8 layers per stage; matrices halved, norms copied; the busiest stage is
    the first (embedding) or last (head, final norm) — both 32000·4096/2 wide, the last has the final norm."""
    spec = load_spec("llama-2-7b")
    c = count(spec)
    per_layer_matrices = sum(v for k, v in c.per_layer.items() if not k.endswith("norm"))
    expected = 8 * (per_layer_matrices // 2 + 2 * 4096) + 32000 * 4096 // 2 + 4096
    assert held(spec, tp=2, pp=4).params == expected


def test_zero3_with_tp_pp_divides_by_data_parallel_only() -> None:
    t = train(load_spec("llama-2-7b"), Setup(256, 1, gpus=16, zero=3, tp=2, pp=2))
    assert t.setup.dp == 4 and {r.shards for r in t.states} == {4}


def test_cli_rows_add_up() -> None:
    code, out = run("train", "llama-2-70b", "--seq", "4096", "--micro-batch", "1", "--gpus", "64", "--zero", "3",
                    "--json")
    data = json.loads(out)
    assert code == 0
    for moment in data["moments"]:
        assert sum(moment["parts"].values()) == moment["allocated"]
    forward = data["moments"][0]["parts"]
    states = {s["label"]: s["bytes"] for s in data["states"] if s["key"] != "gradients"}
    assert {k: forward[k] for k in states} == states and forward["activations kept"] == data["activations"]["total"]
    assert data["peak"]["allocated"] == max(m["allocated"] for m in data["moments"])
    assert data["states"][0]["shards"] == 64


def test_cli_table() -> None:
    code, out = run("train", "gpt2-small", "--seq", "1024", "--micro-batch", "8", "--layers", "--attention", "eager")
    assert code == 0
    for phrase in ("fp32 master weights", "optimizer states", "softmax output P", "Korthikanti", "← peak", "nvidia-smi"):
        assert phrase in out


@pytest.mark.parametrize(("args", "message"), [
    (["--gpus", "6", "--tp", "4"], "do not split"),
    (["--tp", "5", "--gpus", "5"], "--tp 5: does not divide gpt2-small's 12 query and 12 KV heads"),
    (["--qlora"], "--qlora: needs --lora-rank"),
    (["--lora-rank", "8", "--lora-targets", "q,x"], "--lora-targets: unknown x"),
    (["--pp", "13", "--gpus", "13"], "--pp 13: more stages than gpt2-small's 12 layers"),
    (["--zero", "4"], "--zero"),
    (["--offload", "gpu"], "--offload: unknown gpu"),
    (["--checkpoint-every", "2"], "--checkpoint-every: needs --recompute full"),
    (["--fsdp-head-unit"], "--fsdp-head-unit: FSDP2's own unit for the head needs FSDP"),
    (["--fsdp-head-unit", "--zero", "3", "--gpus", "2", "--fsdp1"], "--fsdp-head-unit"),
    (["--budget", "80"], "give a unit"),
    (["--cuda-context", "lots"], "--cuda-context"),
])
def test_bad_input(args: list[str], message: str) -> None:
    code, out = run("train", "gpt2-small", "--seq", "64", "--micro-batch", "1", *args)
    assert code == 2 and message in out and "Traceback" not in out


def test_seq_beyond_context() -> None:
    code, out = run("train", "gpt2-small", "--seq", "2048", "--micro-batch", "1")
    assert code == 2 and "n_positions=1024" in out


@pytest.mark.parametrize(("precision", "per_param"), [("mixed", 16), ("bf16", 8), ("mixed-fp32-grads", 18),
                                                      ("fp32-autocast", 16), ("fsdp-mixed", 16)])
def test_precision_bytes_per_parameter(precision: str, per_param: int) -> None:
    """AdamW: 16 B/param in mixed precision (ZeRO §3.1), 8 in pure bf16, 18 with Megatron's fp32 main grads."""
    # source: Megatron-LM docs/source/api-guide/dist_optimizer.md (bf16 params + fp32 grads: 18 bytes per parameter)
    t = train(load_spec("llama-2-7b"), Setup(128, 1, precision=precision))
    assert sum(r.per_gpu for r in t.states) == per_param * t.held.params


def test_framework_sets_conventions_and_given_options_win() -> None:
    code, out = run("train", "llama-2-7b", "--seq", "512", "--micro-batch", "1", "--framework", "torchtune",
                    "--recompute", "none", "--json")
    setup = json.loads(out)["setup"]
    assert code == 0 and (setup["precision"], setup["loss"], setup["recompute"]) == ("bf16", "linear-chunked", "none")


def test_budget_verdict_and_inverse() -> None:
    """The largest micro-batch fits and one more does not; the longest sequence likewise (bf16 adapters: PEFT's
    fp32 ones keep an fp32 copy of every target's input, and 8B's QLoRA no longer fits a 4090 at 2,048 tokens)."""
    spec = load_spec("llama-3-8b")
    code, out = run("train", "llama-3-8b", "--seq", "2048", "--micro-batch", "1", "--lora-rank", "16", "--qlora",
                    "--precision", "bf16", "--budget", "1xRTX-4090", "--json")
    answer = json.loads(out)["budget"]
    assert code == 0 and answer["fits"]
    capacity = answer["bytes_per_gpu"]
    b, s = answer["max_micro_batch"], answer["max_seq"]
    def setup(seq: int, micro_batch: int) -> Setup:
        return Setup(seq, micro_batch, lora_rank=16, qlora=True, precision="bf16")

    assert train(spec, setup(2048, b)).nvidia_smi <= capacity < train(spec, setup(2048, b + 1)).nvidia_smi
    assert train(spec, setup(s, 1)).nvidia_smi <= capacity < train(spec, setup(s + 1, 1)).nvidia_smi
    assert setup(2048, 1).overheads.cuda_context == 512 * 2**20


def test_budget_names_the_setting_that_fits() -> None:
    code, out = run("train", "llama-2-7b", "--seq", "4096", "--micro-batch", "4", "--precision", "bf16",
                    "--budget", "A100-80GB")
    assert code == 0 and "does not fit" in out and "the first memory saver that fits as given: --recompute" in out


def test_selective_recompute_under_flash_says_so() -> None:
    code, out = run("train", "llama-2-7b", "--seq", "512", "--micro-batch", "1", "--recompute", "selective")
    assert code == 0 and "changes (almost) nothing under flash attention" in out


def test_optimizer_in_backward_and_paged_states() -> None:
    """torchtune's optimizer_in_bwd frees each gradient after its step: at most the largest (the embedding);
    a paged optimizer's states are outside allocated, inside nvidia-smi."""
    spec = load_spec("llama-3.1-8b")
    t = train(spec, Setup(512, 1, precision="bf16", optimizer="paged-adamw8bit", optimizer_in_backward=True))
    end = next(m for m in t.moments if m.name == "backward ends")
    assert dict(end.parts)["gradients"] == 128256 * 4096 * 2
    assert all(m.name != "optimizer step" for m in t.moments)
    paged = next(r for r in t.states if r.key == "optimizer")
    assert paged.where == "managed" and t.nvidia_smi == t.reserved + t.setup.overheads.cuda_context + paged.per_gpu
    kept = next(r for r in t.states if r.key == "optimizer_gpu")  # absmax and the norms' fp32 states: allocated
    assert kept.where == "gpu" and paged.full + kept.full == optimizer_bytes("adamw8bit", held(spec).tensors)


def test_every_k_layers_checkpointing_splits_the_layers() -> None:
    t = train(load_spec("llama-2-7b"), Setup(512, 1, recompute="full", checkpoint_every=4))
    assert [n for _, n, _ in t.layers] == [8, 24]


def test_nf4_without_double_quant() -> None:
    """bitsandbytes' NF4 without double quantisation: ½ byte per weight and an fp32 absmax per 64."""
    # source: https://huggingface.co/docs/bitsandbytes/main/en/reference/nn/linear4bit (blocksize 64, compress_statistics)
    assert nf4_bytes(64 * 256, double_quant=False) == 64 * 256 // 2 + 4 * 256


@pytest.mark.parametrize(("model", "args", "message"), [
    # training splits KV heads too (Megatron's num_query_groups % tp): 8 KV heads refuse --tp 16 that 32 query heads allow
    ("llama-3-8b", ["--tp", "16", "--gpus", "16"], "--tp 16: does not divide llama-3-8b's 32 query and 8 KV heads"),
    ("llama-2-7b", ["--tp", "64", "--gpus", "64"], "--tp 64: does not divide llama-2-7b's 32 query and 32 KV heads"),
    ("llama-2-7b", ["--pp", "33", "--gpus", "33"], "--pp 33: more stages than llama-2-7b's 32 layers"),
    # a state's heads split across tp GPUs as the attention's do (train accepted this layout before)
    (str(Path(__file__).parent / "configs" / "model_types" / "mamba2.json"), ["--tp", "3", "--gpus", "3"],
     "--tp 3: does not divide the 128 heads of mamba's conv state"),
])
def test_train_refuses_a_layout_as_memory_does(model: str, args: list[str], message: str) -> None:
    """train checks its layout with memory's validate_layout (calc/analysis/memory/parallel.py): one
    refusal line naming the option, never a traceback."""
    code, out = run("train", model, "--seq", "64", "--micro-batch", "1", *args)
    assert code == 2 and message in out and "Traceback" not in out


def test_fsdp_under_pipeline_keeps_the_stage_gathered_and_accumulates_fp32_gradients() -> None:
    """torchtitan with PP: no resharding after forward, and unsharded fp32 gradients accumulate over
    the micro-batches. Llama 3.1 8B over 2 stages: the last holds 16 layers (218,112,000 parameters
    each: 4096² · 2 + 4096 · 1024 · 2 + 3 · 4096 · 14336 + two norms of 4096), the final norm and the
    128,256 × 4096 head."""
    stage = 16 * 218_112_000 + 4096 + 128256 * 4096
    t = train(load_spec("llama-3.1-8b"), Setup(2048, 1, gpus=4, pp=2, zero=3, recompute="full", precision="fsdp-mixed"))
    assert t.held.params == stage
    parts = dict(next(m for m in t.moments if m.name == "backward of micro-batch 2, through the loss").parts)
    assert parts["FSDP under PP: the stage kept gathered"] == 2 * stage
    assert parts["FSDP under PP: unsharded fp32 gradients accumulated"] == 4 * stage


def test_fsdp_gathers_qlora_layers_in_nf4() -> None:
    """torchao's NF4Tensor all-gathers its 4-bit data and scalers (fsdp_pre_all_gather), so a QLoRA
    layer travels in NF4: Llama 3.1 8B's layer matrices (218,103,808) at NF4 with double
    quantisation, its two RMSNorm weights (2 × 4096) at 2 bytes."""
    t = train(load_spec("llama-3.1-8b"), Setup(2048, 1, gpus=8, zero=3, recompute="full", precision="bf16",
                                               lora_rank=8, qlora=True))
    parts = dict(next(m for m in t.moments if m.name == "backward, the last layer recomputed").parts)
    assert parts["FSDP: two gathered layers (running, prefetched)"] == 2 * (nf4_bytes(218_103_808) + 2 * 2 * 4096)


def test_fsdp1_keeps_its_root_unit_unsharded_and_gathers_without_a_copy_out() -> None:
    """torch FSDP1 (litgpt's, through Lightning's FSDPStrategy wrapping each Block) does not free the root's
    parameters after forward (torch/distributed/fsdp/_runtime_utils.py, _post_forward_reshard: `not
    state._is_root`), so the head and, untied, the embedding stay gathered through backward; its
    all-gather fills the flat parameter itself. In a layer's backward both hold the running layer and the
    prefetched one (FSDP2 copies a layer's all-gather out as that layer starts, when the layer before is
    resharded: tests/test_train_fsdp2.py).
    gemma.json: vocab 256,000 × hidden 2,048 (tests/configs/model_types/SOURCES.yaml), bf16: 1,048,576,000 B
    a matrix."""
    spec = load_spec(str(CONFIG_DIR / "model_types" / "gemma.json"))
    fsdp2 = Setup(512, 1, gpus=4, zero=3, precision="bf16", recompute="full", tied=False)
    matrix = 2 * 256000 * 2048
    for tied, root in ((False, "FSDP1: the root unit (head, embedding) unsharded through backward"),
                       (True, "FSDP1: the root unit (head) unsharded through backward")):
        t = train(spec, replace(fsdp2, fsdp1=True, tied=tied))
        for moment in t.moments[:-2]:  # every moment before backward ends
            parts = dict(moment.parts)
            assert parts[root] == matrix * (1 if tied else 2)
        assert root not in dict(t.moments[-2].parts)  # backward ends: the root resharded in its post-backward
    parts = dict(next(m for m in train(spec, fsdp2).moments if m.name == "backward, the last layer recomputed").parts)
    assert "FSDP: two gathered layers (running, prefetched)" in parts and not any(k.startswith("FSDP1") for k in parts)
    args = ("train", str(CONFIG_DIR / "model_types" / "gemma.json"), "--seq", "512", "--micro-batch", "1", "--gpus", "4",
            "--zero", "3", "--recompute", "full", "--framework", "litgpt", "--json")
    for flag, kept in (((), True), (("--fsdp2",), False)):  # litgpt's profile sets FSDP1; an option beside it wins
        code, out = run(*args, *flag)
        assert code == 0 and any(k.startswith("FSDP1: the root unit") for m in json.loads(out)["moments"]
                                 for k in m["parts"]) == kept


def test_lora_on_the_head_and_litgpt_s_shared_qkv_dropout() -> None:
    """An adapter on the head (litgpt's lora_head) adds r·(4096 + 128,256) parameters for Llama 3.1 8B and
    keeps its A output (bf16) outside the layers; litgpt's LoRAQKVLinear drops out the fused q, k, v input
    once (litgpt/lora.py: `F.linear(self.lora_dropout(x), self.lora_A)`), so q and v adapters keep one
    dropped-out copy of the 4096-wide input a token, not two."""
    spec, rows = load_spec("llama-3.1-8b"), 512
    base = Setup(512, 1, precision="bf16", lora_rank=8, lora_targets=("q", "v"), lora_dropout=True)

    def dropped(t) -> int:
        (_, _, terms), = t.layers
        return next(x.elements for x in terms if x.label == "LoRA dropout: dropped-out inputs")

    assert dropped(train(spec, base)) == 2 * rows * 4096
    assert dropped(train(spec, replace(base, lora_fused_qkv=True))) == rows * 4096
    head = train(spec, replace(base, lora_targets=("q", "v", "head")))
    assert head.held.adapter_params - train(spec, base).held.adapter_params == 8 * (4096 + 128256)
    assert {t.label: t.elements for t in head.outside}["LoRA: A's outputs (head)"] == rows * 8


@pytest.mark.parametrize("path", MODEL_TYPE_CONFIGS, ids=lambda p: p.stem)
def test_every_model_type_holds_its_decoder_as_tensors(path: Path) -> None:
    """Every model_type trains, and one GPU holds exactly the decoder's parameters as tensors of positive
    size: a recurrence's state (Mamba's, a delta rule's, lightning attention's [B, h, hd, hd]) is no weight
    matrix (MiniMax-M1's lightning scan, a state with no parameters, made `train` crash; a Mamba2 scan's
    3·H parameters were laid out as a P × N matrix plus a negative rest)."""
    spec = load_spec(str(path))
    held = train(spec, Setup(16, 1)).held
    assert held.params == count(spec).decoder_total and all(t.elements > 0 for t in held.tensors)


def test_gradient_accumulation_runs_beside_the_gradients() -> None:
    """A later micro-batch's forward and backward hold the gradients accumulated so far: this GPU's
    shard under FSDP2's per-micro-batch reduce-scatter, the unsharded whole under no_sync (torch FSDP's
    no_sync docstring: "FSDP will accumulate the full model gradients (instead of gradient shards)")."""
    spec = load_spec("llama-2-7b")
    base = Setup(512, 1, gpus=4, zero=3, precision="bf16", recompute="full")
    one = train(spec, base)
    grads = next(r for r in one.states if r.key == "gradients")
    for no_sync, held_grads in ((False, grads.per_gpu), (True, grads.full)):
        t = train(spec, replace(base, grad_accumulation=4, no_sync=no_sync))
        for before, after in zip(one.moments[:2], t.moments[:2]):
            assert after.allocated - before.allocated == held_grads
        assert dict(t.moments[-2].parts)["gradients"] == held_grads  # backward ends
    code, out = run("train", "llama-2-7b", "--seq", "512", "--micro-batch", "1", "--grad-accumulation", "2",
                    "--optimizer-in-backward")
    assert code == 2 and "nothing to accumulate" in out


def test_litgpt_unties_the_head() -> None:
    """litgpt's GPT builds its own lm_head whatever the config ties (litgpt/model.py @ 5895df10, line 25;
    scripts/convert_hf_checkpoint.py copies wte into it): Gemma's head is a second vocab × d matrix."""
    spec = load_spec(str(Path(__file__).parent / "configs" / "model_types" / "gemma.json"))  # google/gemma-2b
    tied, untied = (train(spec, Setup(512, 1, tied=tied)).held.params for tied in (True, False))
    assert spec.head.tied and untied - tied == 256000 * 2048
    code, out = run("train", "llama-3.2-1b", "--seq", "512", "--micro-batch", "1", "--framework", "litgpt", "--json")
    assert code == 0 and json.loads(out)["params_on_gpu"] == count(load_spec("llama-3.2-1b")).total + 128256 * 2048
