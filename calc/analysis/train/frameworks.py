"""Framework profiles: the precision, loss, checkpointing and optimizer each training framework
uses by default, how it runs a MoE and whether its models have dropout, and which memory statistic
its published figures report.

`--framework NAME` sets these; an option given beside it wins. Each line cites the source it is
read from (commit-pinned where the file was read).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["FRAMEWORKS", "Profile", "resolve"]

TORCHTUNE = "https://github.com/pytorch/torchtune/blob/bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1"
LITGPT = "https://github.com/Lightning-AI/litgpt/blob/03ffc5515b251fb7e3a461efd0e3c163e45b6b3b"


@dataclass(frozen=True)
class Profile:
    precision: str
    loss: str
    recompute: str
    optimizer_impl: str  # "fused": no full-size temporary in the step; "foreach": one, the states' size
    statistic: str  # what the framework's published peaks measure
    source: str
    lora_fused_qkv: bool = False  # one LoRA dropout for q, k and v (a fused qkv projection's adapter)
    lora_per_part: bool = False  # its own model adapts each part of a checkpoint's fused linear (params.py)
    lora_megatron: bool = False  # its LoRA adapts megatron-core's fused linear_qkv and linear_fc1 whole (params.py)
    tp_impl: str = "megatron"  # how its tensor parallelism keeps activations: "megatron" or "dtensor"
    moe_form: str = "reference"  # "grouped": its MoE routes top-k rows through grouped matmuls (executed.py)
    dropout: bool = True  # False: its model code has no dropout, whatever the config's rates
    no_sync: bool = False  # gradient accumulation skips the reduction until the last micro-batch
    fsdp1: bool = False  # its FSDP is torch's FSDP1 (peak.py: the root unit kept unsharded, no copy-out buffer)
    fsdp_keeps_last_layer: bool = True  # its FSDP2 leaves the last layer gathered after forward (peak.py)
    tied: bool = True  # False: its model has its own head whatever the config ties (executed.py)
    fused_gelu: bool = False  # its model runs torch's fused F.gelu whatever GELU the config names (executed.py)
    norm_upcast: bool = False  # its eager RMSNorm upcasts a bf16 input and keeps fp32 copies (activations._norm)
    bnb: str = "current"  # the bitsandbytes its QLoRA runs under (bnb.py)
    qlora_head: bool = False  # its QLoRA quantises the LM head too
    loop_holds_output: bool = False  # its loop holds the last micro-batch's logits through the next forward (peak.py)
    pp_split: str = "even"  # which layers each pipeline stage holds (pipeline.stage_sizes)
    repeat_kv: bool = False  # its attention hands SDPA K and V expanded to every query head
    pp_microbatches: str = ""  # how it picks a pipeline step's micro-batches where none are given: a note, not a
    # default (gptcalc runs --pp of them unless --pp-microbatches says otherwise)


FRAMEWORKS: dict[str, Profile] = {
    # recipes/configs/llama3_1/8B_lora_single_device.yaml: dtype: bf16, loss LinearCrossEntropyLoss,
    # enable_activation_checkpointing: True, torch.optim.AdamW fused: True; the recipe logs
    # torchtune.training.get_memory_stats (peak_memory_active, _alloc, _reserved); torchtune/modules/moe/moe.py:
    # top-k rows through GroupedExperts; its builders pass attn_dropout=0.0 and its layers have no other dropout;
    # torchtune/modules/rms_norm.py @ 1814feb17, lines 40-44: x.float() · rsqrt(...), .type_as(x), · scale, eager
    # unless the config's compile: True (its configs' default is False); training/_distributed.py, shard_model
    # (@ 0031bfb0): fully_shard(m, reshard_after_forward=...) alike for every layer, True by default;
    # torchtune/models/phi3/_convert_weights.py: phi3_hf_to_tune splits qkv_proj into q, k, v and gate_up_proj into
    # w1 and w3, so its LoRA adapts each part (lora_per_part);
    # torchtune/modules/attention.py @ 00c242ba, MultiHeadAttention.forward: k and v expanded to
    # (b, s_y, num_kv_heads, q_per_kv, head_dim) and reshaped to every head before the attention call
    "torchtune": Profile("bf16", "linear-chunked", "full", "fused", "active (≈ allocated)",
                         f"{TORCHTUNE}/recipes/configs/llama3_1/8B_lora_single_device.yaml",
                         moe_form="grouped", dropout=False, norm_upcast=True, fsdp_keeps_last_layer=False,
                         repeat_kv=True, lora_per_part=True),
    # config_hub/finetune/*/lora.yaml: precision bf16-true; finetune/lora.py: model(..., lm_head_chunk_size=128)
    # (Fabric's convert_output returns the chunks in fp32) and chunked_cross_entropy over 128-token chunks;
    # torch.optim.AdamW (foreach on CUDA);
    # utils.py prints torch.cuda.max_memory_allocated() / 1e9
    # litgpt/lora.py: LoRAQKVLinear applies one lora_dropout to the fused qkv input (line 421), its lora_A
    # [r·sum(enable_lora), in] an adapter per enabled part (lora_per_part);
    # litgpt/model.py has no dropout module (scaled_dot_product_attention with dropout_p=0.0);
    # finetune/*.py accumulate under fabric.no_backward_sync(model, enabled=is_accumulating), which
    # Lightning's FSDPStrategy and DDPStrategy turn into the module's no_sync(); model.py builds its own
    # lm_head always (executed.py); its RMSNorm (model.py @ 5895df10, lines 427-438) computes x.float() ·
    # rsqrt(mean(x·x) + ε) and casts back before the weight, and finetuning runs it eagerly;
    # pyproject.toml pins bitsandbytes==0.42.0; quantize bnb.* is Lightning's BitsandbytesPrecision, whose
    # convert_module replaces every torch.nn.Linear, lm_head included; finetune/lora.py's fit loop reassigns
    # `logits = model(...)` each micro-batch and, with the config_hub's log_interval: 1, `loss` to a float;
    # finetune/full.py on several devices: Lightning's FSDPStrategy (torch FSDP1) with auto_wrap_policy={Block},
    # so the embedding, final norm and lm_head are the root unit's; model.py @ 5895df10, GptNeoxMLP.forward:
    # torch.nn.functional.gelu(x, approximate=self.config.gelu_approximate), whatever GELU the HF config named
    "litgpt": Profile("bf16", "fp32-chunked", "none", "foreach", "allocated (decimal GB)",
                      f"{LITGPT}/config_hub/finetune/llama-2-7b/lora.yaml", lora_fused_qkv=True, dropout=False,
                      no_sync=True, tied=False, norm_upcast=True, bnb="0.42.0", qlora_head=True,
                      loop_holds_output=True, fsdp1=True, fused_gelu=True, lora_per_part=True),
    # transformers Trainer, bf16=True: fp32 model under torch.autocast, one F.cross_entropy on
    # logits.float() (loss/loss_utils.py), gradient_checkpointing False, optim adamw_torch; the model's GELU is
    # ACT2FN[the config's name] (activations.py), written out in python ops for gelu_new, gelu_fast, gelu_python
    "hf": Profile("fp32-autocast", "fp32", "none", "foreach", "allocated",
                  "https://github.com/huggingface/transformers/blob/main/src/transformers/loss/loss_utils.py"),
    # torchtitan: FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over fp32 sharded
    # parameters; cross_entropy_loss upcasts to fp32; selective (op) activation checkpointing;
    # optimizer implementation "fused"; the log's "memory:" is the peak reserved; tensor parallelism with torch's
    # DTensor plan (parallelisms/parallelize_llama.py @ 9dec370, apply_tp: SequenceParallel norms, ColwiseParallel
    # linears after PrepareModuleInput to Replicate, the loss under loss_parallel: train.py, utils.get_train_context);
    # MoE: top-k rows through torch._grouped_mm (models/common/moe/moe.py @ 18761a8, GroupedExperts); its
    # models have no dropout; pipeline stages as parallelisms/pipelining_utils.py @ 9dec370, generate_split_points,
    # splits them without pipeline_parallel_split_points (pipeline.py)
    # pipelining_utils.build_pipeline_schedule: n_microbatches = pipeline_parallel_degree when unset @ 9dec370,
    # the stages in all from 90567fc98 (2025-01-07), batch_size ÷ pipeline_parallel_microbatch_size (default 1)
    # from 5e2033c75 (2025-04-07)
    "torchtitan": Profile("fsdp-mixed", "fp32", "selective", "fused", "reserved",
                          "https://github.com/pytorch/torchtitan/blob/main/docs/fsdp.md", tp_impl="dtensor",
                          moe_form="grouped", dropout=False, pp_split="torchtitan",
                          pp_microbatches="torchtitan's own default micro-batches a pipeline step: pp at 9dec370 "
                                          "(the 405B runs', counted here), pp × V (every stage) from 90567fc98 "
                                          "(2025-01-07), the local batch ÷ pipeline_parallel_microbatch_size "
                                          "(default 1) from 5e2033c75 (2025-04-07); give --pp-microbatches N"),
    # DeepSpeed bf16 with ZeRO: the engine casts the module to bf16 (LoRA adapters too), fp32 master weights and
    # Adam states (FusedAdam); see_memory_usage reports allocated (MA / Max_MA)
    "deepspeed": Profile("deepspeed-bf16", "fp32", "none", "fused", "allocated",
                         "https://www.deepspeed.ai/docs/config-json/#bfloat16-training-options"),
    # Megatron-LM: bf16 weights with fp32 main gradients and fp32 optimizer (18 bytes per parameter,
    # docs/source/api-guide/dist_optimizer.md), vocab-parallel fp32 cross-entropy,
    # --recompute-activations (selective), TE/Apex FusedAdam; LoRA as Megatron-Bridge's (peft/lora.py: one
    # ParallelLinearAdapter on each of megatron-core's linear_qkv, linear_proj, linear_fc1, linear_fc2)
    "megatron": Profile("mixed-fp32-grads", "fp32", "selective", "fused", "allocated",
                        "https://github.com/NVIDIA/Megatron-LM/blob/main/docs/source/api-guide/dist_optimizer.md",
                        lora_megatron=True),
}


# every convention a profile sets for Setup: its fields but what describes the profile itself
CONVENTIONS = tuple(f.name for f in fields(Profile) if f.name not in ("statistic", "source", "pp_microbatches"))


def resolve(framework: str | None, given: dict[str, object]) -> dict[str, object]:
    """Options for Setup: what was given, else the framework's convention, else left to Setup's default."""
    out = {k: v for k, v in given.items() if v is not None}
    if framework is not None:
        profile = FRAMEWORKS[framework]
        for key in CONVENTIONS:
            out.setdefault(key, getattr(profile, key))
        out["framework"] = framework
    return out
