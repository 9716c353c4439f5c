"""Published, measured training peaks beside `gptcalc train`'s figure for the same statistic: each within 10%.

Each case is the publisher's configuration (read from its config file) expressed with train's
options, and the statistic the publisher reports: litgpt prints torch.cuda.max_memory_allocated()
/ 1e9 (decimal GB); torchtune's README gives its recipes' logged peak (GiB, its 405B row GB; torchtune logs
peak_memory_active, which equals allocated up to the allocator's rounding); torchtitan logs
"memory:" as max_reserved_gib (torch.cuda.memory_stats()["reserved_bytes.all.peak"], GiB; its
train.py and metrics.py at 9dec370). The cases train does not yet land within 10% are in
docs/training.md's table with their gap, not here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from calc.analysis.train import Setup, train
from calc.analysis.train.frameworks import resolve
from calc.spec.load import load_spec

GIB, GB = 2**30, 10**9
LITGPT_TABLE = "https://github.com/Lightning-AI/litgpt/blob/03ffc5515b251fb7e3a461efd0e3c163e45b6b3b/config_hub/finetune/README.md"
TORCHTUNE_TABLE = "https://github.com/pytorch/torchtune/blob/0031bfb080bd35ec533c412df883cf2bf7bf7fe4/README.md#memory-and-training-speed"
TORCHTUNE_FLAGS = "https://github.com/pytorch/torchtune/blob/bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1/README.md#optimization-flags"
TRAINY_TABLE = "https://github.com/pytorch/torchtitan/blob/b5bcd76c66d0acb1a08b176d9639425bc55e0b2a/benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md"
TORCHTITAN_TABLE = "https://github.com/pytorch/torchtitan/blob/b5bcd76c66d0acb1a08b176d9639425bc55e0b2a/benchmarks/llama3_h100_202412_torchtitan.md"
# litgpt config_hub/finetune/<model>/lora.yaml: bf16-true, lora_r 32 on query and value, lora_dropout 0.05,
# max_seq_length 512 (Alpaca2k, padded to the batch's longest); each yaml's global_batch_size over devices ×
# micro_batch_size is its gradient accumulation (finetune/*.py, train.gradient_accumulation_iters), under
# fabric.no_backward_sync (the profile's no_sync)
LITGPT_LORA = dict(framework="litgpt", seq=512, lora_rank=32, lora_targets=("q", "v"), lora_dropout=True)
# finetune/full.py: logits = model(input_ids) (no lm_head_chunk_size: the head on every token), then
# chunked_cross_entropy over 128-row chunks of Fabric's fp32 logits
LITGPT_FULL = dict(framework="litgpt", seq=512, loss="fp32-whole-chunked")
# torchtune README: batch size 2, packed to 2048, torch.compile on (CEWithChunkedOutputLoss, compiled);
# recipes/configs/llama3_1/8B_full_single_device.yaml: PagedAdamW8bit, optimizer_in_bwd, activation checkpointing;
# 8B_lora_single_device.yaml / 8B_qlora_single_device.yaml: lora_rank 8 on q, v, output_proj and the MLP;
# 70B_full.yaml: FSDP over 8, fsdp_cpu_offload; 70B_lora.yaml: lora_rank 16 on q, v, output_proj and the MLP
# compile: True (training/_compile.py, compile_model: each layer compiled, the final norm left eager, upcasting)
TORCHTUNE = dict(framework="torchtune", loss="chunked-compiled", seq=2048, micro_batch=2, compile=True)
QVO_MLP = ("q", "v", "o", "gate", "up", "down")
# torchtitan @ 9dec370 (the runs' commit): train_configs/llama3_8b.toml: seq_len 8192, activation_checkpoint
# selective with selective_ac_option 'op'; FSDP2 over every GPU (data_parallel_shard_degree -1); train.py: the
# loss is F.cross_entropy(pred.flatten(0, 1).float(), ...) (not compiled: "compiling loss function causes CUDA
# errors"), `del pred` before backward. Table 1 and 3: local batch 2, selective AC; Table 2: local batch 1, full
# AC, Float8 (torchao tensorwise), seq 32768 a CP rank. The "+ compile" rows compile each TransformerBlock after its
# checkpoint wrapper (parallelize_llama.py, apply_compile): compile=True. Llama 3.1's RoPE is trained past its 131072 positions
# at CP 8 (torchtitan sizes its rotary table from seq_len): max_position_embeddings is raised for that row
# torchtune README "Optimization flags": Llama 3.2 3B, full_finetune_single_device, batch 2, max_seq_len 4096, bf16,
# A100, peak memory active; each row adds its technique to the previous. Rows from "+ Packed": packed to 4096; until
# "+ Chunked Cross Entropy" the loss is nn.CrossEntropyLoss on the model's fp32 logits (torchtune/modules/
# transformer.py: `output = self.output(h).float()`), then CEWithChunkedOutputLoss under compile. LoRA and QLoRA:
# the final row's command (lora_finetune_single_device with llama3_2/3B_{lora,qlora}_single_device.yaml: rank 64 on
# q, v, output_proj and the MLP; packed, compile, chunked loss, activation checkpointing and offloading, AdamW,
# optimizer_in_bwd False). From "+ Compile" on the layers are compiled (compile_model), the final norm eager
FLAGS = dict(framework="torchtune", seq=4096, micro_batch=2)  # eager: "+ Packed" (its RMSNorms upcast)
FLAGS_COMPILED = dict(compile=True, **FLAGS)  # from "+ Compile" on
FLAGS_CHUNKED = dict(loss="chunked-compiled", recompute="full", **FLAGS_COMPILED)
# torchtitan before #2259 (2026-01-27) repeats K and V to every query head before SDPA (models/llama/model.py
# @ 9dec370 and models/llama3/model.py @ e7c0cae: keys = repeat_kv(xk, self.n_rep)): every torchtitan row repeats
TITAN_SAC = dict(framework="torchtitan", recompute="op", zero=3, seq=8192, micro_batch=2, repeat_kv=True)
TITAN_SAC_COMPILED = dict(compile=True, **TITAN_SAC)
TITAN_CP = dict(framework="torchtitan", recompute="full", zero=3, gpus=8, micro_batch=1, float8="tensorwise",
                repeat_kv=True)
# Table 6, Llama 3.1 405B on 512 GPUs, TP 8 (sequence parallel), PP 8 (1F1B; local batch 8 in the default 8
# micro-batches: pipelining_utils.py), train_configs/llama3_405b.toml: full AC, float8 with FSDP float8 all-gather.
# No pipeline_parallel_split_points there, so generate_split_points' split (15, 16 × 6, 15: the profile's
# pp_split), compiled (with full AC each layer keeps its input, as eager; its backward rebuilds it as compiled.py's
# compiled_backward_terms count). Async TP is not modelled. The CP 1 row lands -9.1% with that split (-10.1% before
# the compiled backward was counted), inside; the CP 8 row -14.5%, outside (OUTSIDE): docs/training.md lists it
# Table 4, Llama 3.1 70B on 256 GPUs, FSDP 32 × TP 8 (sequence parallel: torchtitan's DTensor plan, the profile's
# tp_impl), local batch 16, full AC, float8, compile (of the layers; async TP, the second row's, is not modelled)
TITAN_2D = dict(framework="torchtitan", seq=8192, micro_batch=16, gpus=256, tp=8, sp=True, zero=3, recompute="full",
                float8="tensorwise", repeat_kv=True, compile=True)
# Trainy on H200s (torchtitan @ e7c0cae, llama3_8b.toml: seq 8192, per-op AC), local batch 2, compile (which at that
# commit compiles the loss too: torchtitan/components/loss.py), float8 with FSDP float8 all-gather; 4 and 8 nodes of 8
TRAINY = dict(framework="torchtitan", recompute="op", loss="compiled", zero=3, seq=8192, micro_batch=2,
              float8="tensorwise-all-gather", repeat_kv=True, compile=True)
TITAN_4D = dict(framework="torchtitan", recompute="full", zero=3, gpus=512, tp=8, sp=True, pp=8, micro_batch=1,
                float8="tensorwise-all-gather", repeat_kv=True, compile=True)

# litgpt's falcon-7b rows, with falcon-7b-instruct's config.json (the same shapes: tests/configs/model_types/SOURCES.yaml);
# mistral-7b-v0.2's: Mistral 7B v0.1's shapes without the sliding window, rope_theta 1e6, 32k positions (its config.json)
CONFIGS = Path(__file__).parent / "configs" / "model_types"
FALCON = str(CONFIGS / "falcon.json")
# phi-2, gemma-2b and phi-3 lora.yaml: lora_r 8 on query, key, value, projection, MLP and head, dropout 0.05 (gemma
# 0.1), micro-batch 4 (gemma 2); phi.json and gemma.json are microsoft/phi-2's and google/gemma-2b's config.json;
# tiny-llama/lora.yaml: the same targets at lora_r 32, micro-batch 8 (TinyLlama-1.1B-Chat-v1.0's config.json)
ALL_AND_HEAD = dict(framework="litgpt", seq=512, lora_rank=8, lora_dropout=True,
                    lora_targets=("q", "k", "v", "o", "gate", "up", "down", "head"))
QLORA_ALL = dict(qlora=True, double_quant=False, **ALL_AND_HEAD)
# phi-2's MLP (litgpt's GptNeoxMLP: fc and proj) has no gate: lora_mlp adapts up and down
PHI2_LORA = {**ALL_AND_HEAD, "lora_targets": ("q", "k", "v", "o", "up", "down", "head")}
QLORA_QV = dict(qlora=True, double_quant=False, **LITGPT_LORA)
MISTRAL_V02 = {"sliding_window": None, "rope_theta": 1000000.0, "max_position_embeddings": 32768}

CASES = [
    # (what, model, published, unit, options); source: the table named by the unit's publisher
    ("litgpt llama-2-7b LoRA, 1xA10G", "llama-2-7b", 19.77, GB, dict(micro_batch=2, grad_accumulation=4, **LITGPT_LORA)),
    ("litgpt llama-3-8b LoRA, 1xA10G", "llama-3-8b", 19.73, GB, dict(micro_batch=1, grad_accumulation=8, **LITGPT_LORA)),
    ("litgpt mistral-7b LoRA, 1xA10G", "mistral-7b", 20.66, GB, dict(micro_batch=2, grad_accumulation=4, **LITGPT_LORA)),
    ("litgpt mistral-7b-v0.2 LoRA, 1xA10G", "mistral-7b", 20.66, GB,
     dict(micro_batch=2, grad_accumulation=4, config=MISTRAL_V02, **LITGPT_LORA)),
    ("litgpt llama-3.1-8b LoRA, 1xA10G", "llama-3.1-8b", 19.73, GB,
     dict(micro_batch=1, grad_accumulation=8, **LITGPT_LORA)),
    ("litgpt falcon-7b LoRA, 1xA10G", FALCON, 16.69, GB, dict(micro_batch=1, grad_accumulation=8, **LITGPT_LORA)),
    ("litgpt phi-2 LoRA, 1xA10G", str(CONFIGS / "phi.json"), 13.98, GB,
     dict(micro_batch=4, grad_accumulation=2, **PHI2_LORA)),
    ("litgpt gemma-2b LoRA, 1xA10G", str(CONFIGS / "gemma.json"), 12.62, GB,
     dict(micro_batch=2, grad_accumulation=3, **ALL_AND_HEAD)),
    ("litgpt Phi-3-mini-4k-instruct LoRA, 1xA10G", "phi-3-mini", 19.75, GB,
     dict(micro_batch=4, grad_accumulation=2, **ALL_AND_HEAD)),
    # phi-2/full.yaml: devices 2, micro-batch 4; finetune/full.py: FSDPStrategy (full sharding, torch FSDP1) with
    # activation checkpointing of every Block when devices > 1, and model(input_ids) on the whole head
    ("litgpt phi-2 full, 2xA10G", str(CONFIGS / "phi.json"), 14.44, GB,
     dict(micro_batch=4, gpus=2, zero=3, recompute="full", **LITGPT_FULL)),
    # gemma-2b/full.yaml: devices 4, global batch 16, micro-batch 1 (4 micro-batches a step, under no_sync),
    # bf16-true; the peak is FSDP1's root gradient assembled at the end of a no_sync backward
    ("litgpt gemma-2b full, 4xA10G", str(CONFIGS / "gemma.json"), 17.43, GB,
     dict(micro_batch=1, gpus=4, zero=3, recompute="full", grad_accumulation=4, **LITGPT_FULL)),
    ("litgpt tiny-llama LoRA, 1xA10G", str(CONFIGS / "llama-tinyllama.json"), 13.50, GB,
     dict(micro_batch=8, **{**ALL_AND_HEAD, "lora_rank": 32})),
    # tiny-llama/full.yaml: devices 1, global batch 32, micro-batch 4 (8 micro-batches a step, the later ones
    # beside the bf16 gradients); its 4xA10G row ran the same yaml, on one of the four GPUs (devices: 1)
    ("litgpt tiny-llama full, 1xA10G", str(CONFIGS / "llama-tinyllama.json"), 14.10, GB,
     dict(micro_batch=4, grad_accumulation=8, **LITGPT_FULL)),
    ("litgpt tiny-llama full, 4xA10G", str(CONFIGS / "llama-tinyllama.json"), 14.10, GB,
     dict(micro_batch=4, grad_accumulation=8, **LITGPT_FULL)),
    # <model>/qlora.yaml: quantize bnb.nf4 (no double quantisation), the LoRA settings of its lora.yaml but for the
    # rank (phi-2, Phi-3-mini 8; gemma-2b, gemma-2-9b 16; tiny-llama and the 7-8B models 32) and micro-batch
    # (gemma-2-9b 1, accumulating 6); bitsandbytes 0.42.0, Lightning's NF4 head, the loop's logits: the profile's
    ("litgpt tiny-llama QLoRA, 1xA10G", str(CONFIGS / "llama-tinyllama.json"), 16.24, GB,
     dict(micro_batch=8, **{**QLORA_ALL, "lora_rank": 32})),
    ("litgpt phi-2 QLoRA, 1xA10G", str(CONFIGS / "phi.json"), 14.27, GB,
     dict(micro_batch=4, grad_accumulation=2, qlora=True, double_quant=False, **PHI2_LORA)),
    ("litgpt gemma-2b QLoRA, 1xA10G", str(CONFIGS / "gemma.json"), 11.58, GB,
     dict(micro_batch=2, grad_accumulation=3, **{**QLORA_ALL, "lora_rank": 16})),
    ("litgpt Phi-3-mini-4k-instruct QLoRA, 1xA10G", "phi-3-mini", 19.13, GB,
     dict(micro_batch=4, grad_accumulation=2, **QLORA_ALL)),
    ("litgpt gemma-2-9b QLoRA, 1xA10G", "gemma-2-9b", 20.92, GB,
     dict(micro_batch=1, grad_accumulation=6, **{**QLORA_ALL, "lora_rank": 16})),
    ("litgpt llama-3.1-8b QLoRA, 1xA10G", "llama-3.1-8b", 17.41, GB, dict(micro_batch=2, grad_accumulation=4, **QLORA_QV)),
    ("litgpt falcon-7b QLoRA, 1xA10G", FALCON, 9.44, GB, dict(micro_batch=1, grad_accumulation=8, **QLORA_QV)),
    ("litgpt llama-2-7b QLoRA, 1xA10G", "llama-2-7b", 13.68, GB, dict(micro_batch=2, grad_accumulation=4, **QLORA_QV)),
    ("litgpt llama-3-8b QLoRA, 1xA10G", "llama-3-8b", 17.41, GB, dict(micro_batch=2, grad_accumulation=4, **QLORA_QV)),
    ("litgpt mistral-7b QLoRA, 1xA10G", "mistral-7b", 14.29, GB, dict(micro_batch=2, grad_accumulation=4, **QLORA_QV)),
    ("torchtune Llama 3.1 8B full, 1x4090", "llama-3.1-8b", 18.9, GIB,
     dict(optimizer="paged-adamw8bit", optimizer_in_backward=True, **TORCHTUNE)),
    ("torchtune Llama 3.1 8B LoRA, 1x4090", "llama-3.1-8b", 16.2, GIB,
     dict(lora_rank=8, lora_targets=QVO_MLP, **TORCHTUNE)),
    ("torchtune Llama 3.1 8B QLoRA, 1x4090", "llama-3.1-8b", 7.4, GIB,
     dict(lora_rank=8, lora_targets=QVO_MLP, qlora=True, **TORCHTUNE)),
    # 70B_full.yaml @ 0031bfb0 (the README's commit): fsdp_cpu_offload True (CPUOffloadPolicy: sharded parameters,
    # gradients and AdamW states on the host), custom_sharded_layers ['tok_embeddings', 'output'] (each its own
    # FSDP2 unit, resharded after forward), CEWithChunkedOutputLoss; full_finetune_distributed.py's shard_model
    ("torchtune Llama 3.1 70B full, 8xA100", "llama-3.1-70b", 13.9, GIB,
     dict(gpus=8, zero=3, offload=("params",), fsdp_head_unit=True, **TORCHTUNE)),
    ("torchtune Llama 3.1 70B LoRA, 8xA100", "llama-3.1-70b", 27.6, GIB,
     dict(gpus=8, zero=3, lora_rank=16, lora_targets=QVO_MLP, **TORCHTUNE)),
    # 405B QLoRA as its recipe config runs it: recipes/configs/llama3_1/405B_qlora.yaml @ 30b8519e8 (the commit that
    # added the table): batch_size 1, gradient_accumulation_steps 16, loss torch.nn.CrossEntropyLoss on the fp32
    # logits, no compile or packing keys, lora_rank 16 on q, k, v, output_proj and the MLP; the README gives this row
    # in "GB" (every other row "GiB"). Its note's "batch size 2 (without gradient accumulation)" contradicts the
    # config: at batch 2 gptcalc says 55.11 GiB (+23.0% as GiB, +32% as GB); docs/training.md states both
    ("torchtune Llama 3.1 405B QLoRA, 8xA100", "llama-3.1-405b", 44.8, GB,
     dict(framework="torchtune", loss="fp32", seq=2048, micro_batch=1, grad_accumulation=16, gpus=8, zero=3,
          lora_rank=16, lora_targets=("q", "k", "v", "o", "gate", "up", "down"), qlora=True, norm_upcast=False)),
    ("torchtune Llama 3.2 3B full, + packed", "llama-3.2-3b", 60.0, GIB, dict(loss="fp32", recompute="none", **FLAGS)),
    ("torchtune Llama 3.2 3B full, + compile", "llama-3.2-3b", 51.0, GIB,
     dict(loss="fp32", recompute="none", **FLAGS_COMPILED)),
    ("torchtune Llama 3.2 3B full, + chunked cross-entropy", "llama-3.2-3b", 42.9, GIB,
     dict(loss="chunked-compiled", recompute="none", **FLAGS_COMPILED)),
    ("torchtune Llama 3.2 3B full, + activation checkpointing", "llama-3.2-3b", 24.9, GIB, FLAGS_CHUNKED),
    ("torchtune Llama 3.2 3B full, + optimizer in backward", "llama-3.2-3b", 23.1, GIB,
     dict(optimizer_in_backward=True, **FLAGS_CHUNKED)),
    ("torchtune Llama 3.2 3B full, + activation offloading", "llama-3.2-3b", 21.8, GIB,
     dict(optimizer_in_backward=True, offload=("activations",), **FLAGS_CHUNKED)),
    # torchtune#2003's review: "... then opt-in-bwd, then AO": torchao's AdamW8bit (0.6.1, 2024-10-21:
    # torchao/prototype/low_bit_optim/adam.py, single_param_adam compiled per parameter)
    ("torchtune Llama 3.2 3B full, + 8-bit AdamW", "llama-3.2-3b", 17.6, GIB,
     dict(optimizer_in_backward=True, offload=("activations",), optimizer="adamw8bit-torchao", **FLAGS_CHUNKED)),
    ("torchtune Llama 3.2 3B LoRA", "llama-3.2-3b", 8.5, GIB,
     dict(lora_rank=64, lora_targets=QVO_MLP, offload=("activations",), **FLAGS_CHUNKED)),
    ("torchtune Llama 3.2 3B QLoRA", "llama-3.2-3b", 4.6, GIB,
     dict(lora_rank=64, lora_targets=QVO_MLP, qlora=True, offload=("activations",), **FLAGS_CHUNKED)),
    ("torchtitan 8B FSDP, 8xH100", "llama-3.1-8b", 82.4, GIB, dict(gpus=8, **TITAN_SAC)),
    ("torchtitan 8B FSDP + compile, 8xH100", "llama-3.1-8b", 77.0, GIB, dict(gpus=8, **TITAN_SAC_COMPILED)),
    ("torchtitan 8B FSDP + compile + Float8, 8xH100", "llama-3.1-8b", 76.8, GIB,
     dict(gpus=8, float8="tensorwise", **TITAN_SAC_COMPILED)),
    ("torchtitan 8B FSDP, 128xH100", "llama-3.1-8b", 67.0, GIB, dict(gpus=128, **TITAN_SAC)),
    ("torchtitan 8B FSDP + compile, 128xH100", "llama-3.1-8b", 62.0, GIB, dict(gpus=128, **TITAN_SAC_COMPILED)),
    ("torchtitan 8B FSDP + compile + Float8, 128xH100", "llama-3.1-8b", 61.8, GIB,
     dict(gpus=128, float8="tensorwise", **TITAN_SAC_COMPILED)),
    ("torchtitan 8B FSDP 8 CP 1, seq 32768", "llama-3.1-8b", 83.9, GIB, dict(seq=32768, cp=1, **TITAN_CP)),
    ("torchtitan 8B FSDP 4 CP 2, seq 65536", "llama-3.1-8b", 84.2, GIB, dict(seq=65536, cp=2, **TITAN_CP)),
    ("torchtitan 8B FSDP 2 CP 4, seq 131072", "llama-3.1-8b", 84.0, GIB, dict(seq=131072, cp=4, **TITAN_CP)),
    ("torchtitan 8B FSDP 1 CP 8, seq 262144", "llama-3.1-8b", 84.5, GIB,
     dict(seq=262144, cp=8, config={"max_position_embeddings": 262144}, **TITAN_CP)),
    ("Trainy torchtitan 8B FSDP + compile + Float8, 32xH200", "llama-3.1-8b", 47.96, GIB, dict(gpus=32, **TRAINY)),
    ("Trainy torchtitan 8B FSDP + compile + Float8, 64xH200", "llama-3.1-8b", 46.97, GIB, dict(gpus=64, **TRAINY)),
    # CP 1: -10.1% until the compiled layer's backward working set was counted (compiled.py), -9.1% since
    ("torchtitan 405B FSDP 8 CP 1 TP 8 PP 8, seq 32768", "llama-3.1-405b", 75.3, GIB,
     dict(seq=32768, cp=1, **TITAN_4D)),
    ("torchtitan 405B FSDP 4 CP 2 TP 8 PP 8, seq 65536", "llama-3.1-405b", 75.9, GIB, dict(seq=65536, cp=2, **TITAN_4D)),
    ("torchtitan 405B FSDP 2 CP 4 TP 8 PP 8, seq 131072", "llama-3.1-405b", 77.1, GIB,
     dict(seq=131072, cp=4, config={"max_position_embeddings": 262144}, **TITAN_4D)),
    # Table 5's other row: the same run under Interleaved 1F1B, 2 stages a rank over 16 (torchtitan's
    # generate_split_points without split points: 7, 8 × 14, 7), still 8 micro-batches of 4 (pipelining_utils.py
    # @ 9dec370: n_microbatches = pipeline_parallel_degree)
    ("torchtitan 405B FSDP 8 TP 8 PP 8 (Interleaved 1F1B), 512xH100", "llama-3.1-405b", 72.7, GIB,
     dict(seq=8192, pp_schedule="interleaved-1f1b", **{**TITAN_4D, "micro_batch": 4})),
    ("torchtitan 70B FSDP 32 TP 8, 256xH100", "llama-3.1-70b", 71.9, GIB, TITAN_2D),
    ("torchtitan 70B FSDP 32 TP 8 + AsyncTP, 256xH100", "llama-3.1-70b", 67.6, GIB, TITAN_2D),
]
# Published runs gptcalc does not land within 10% of, counted as the runs ran (docs/training.md gives each gap and
# what is left to explain it): Table 6's 405B rows with torchtitan's own stage split. A change that brings one
# inside moves it to CASES.
OUTSIDE = [
    ("torchtitan 405B FSDP 1 CP 8 TP 8 PP 8, seq 262144", "llama-3.1-405b", 84.9, GIB,
     dict(seq=262144, cp=8, config={"max_position_embeddings": 262144}, **TITAN_4D)),
    # Table 5: local batch 32 in the default 8 micro-batches of 4
    # FSDP2 under torch 2.6.0's own Schedule1F1B adds nothing a micro-batch (tests/test_train_pipeline_fsdp.py)
    ("torchtitan 405B FSDP 8 TP 8 PP 8 (1F1B), 512xH100", "llama-3.1-405b", 82.5, GIB,
     dict(seq=8192, **{**TITAN_4D, "micro_batch": 4})),
]
STATISTIC = {"litgpt": "allocated", "torchtune": "allocated", "torchtitan": "reserved"}


def predict(model: str, options: dict) -> int:
    """gptcalc's figure for the statistic the case's framework publishes."""
    options = dict(options)
    given = {k: options.pop(k, None) for k in ("precision", "loss", "recompute", "optimizer_impl", "norm_upcast",
                                               "pp_split", "repeat_kv")}
    framework, spec = options.pop("framework"), load_spec(model, options.pop("config", None))
    return getattr(train(spec, Setup(**resolve(framework, given), **options)), STATISTIC[framework])


@pytest.mark.parametrize(("what", "model", "published", "unit", "options"), CASES, ids=[c[0] for c in CASES])
def test_published_peak_within_10_percent(what: str, model: str, published: float, unit: int, options: dict) -> None:
    # source: LITGPT_TABLE (unit GB), TORCHTUNE_TABLE (GiB; its 405B row GB), TORCHTUNE_FLAGS, TORCHTITAN_TABLE
    # or TRAINY_TABLE (unit GiB)
    ours = predict(model, options)
    assert abs(ours / (published * unit) - 1) <= 0.10, f"{what}: {ours / unit:.2f} vs {published}"


@pytest.mark.parametrize(("what", "model", "published", "unit", "options"), OUTSIDE, ids=[c[0] for c in OUTSIDE])
def test_published_peak_still_outside_10_percent(what: str, model: str, published: float, unit: int,
                                                 options: dict) -> None:
    # source: TORCHTITAN_TABLE (unit GiB, reserved)
    ours = predict(model, options)
    assert abs(ours / (published * unit) - 1) > 0.10, f"{what}: {ours / unit:.2f} vs {published}: move it to CASES"
