"""How many bytes each model state takes per parameter: the precision a run trains in.

  precision         weights  gradients  master  optimizer states  AdamW in all   who trains so
  mixed             2 (bf16) 2 (bf16)   4       fp32 (8)          16             ZeRO paper §3.1
  deepspeed-bf16    2        2          4       fp32 (8)          16             DeepSpeed's bf16 engine
  mixed-fp32-grads  2        4 (fp32)   4       fp32 (8)          18             Megatron-LM (fp32 main_grad)
  bf16              2        2          none    bf16 (4)          8              torchtune, litgpt (bf16-true)
  fp32-autocast     4 (fp32) 4 (fp32)   none    fp32 (8)          16             HF Trainer bf16=True, litgpt bf16-mixed
  fsdp-mixed        4 (fp32) 4 (fp32)   none    fp32 (8)          16             torchtitan (FSDP2: bf16 gathered for
                                                                                 compute, gradients reduced in fp32)

Pure bf16 keeps no fp32 copy: the optimizer's states take the parameters' dtype (torch's AdamW
allocates `exp_avg` with `torch.zeros_like(p)`). Under fp32 weights with bf16 autocast, every
linear layer saves the bf16 copy of its weight that autocast made for forward, so backward holds
2 bytes per matrix parameter beside the activations (counted as an activation term).

LoRA adapters take the precision's adapter width: fp32 where the base is trained in fp32 states
(PEFT upcasts adapters to fp32, `autocast_adapter_dtype=True`, and then hands each a cast copy of its
input: Setup.adapter_copies), bf16 under pure bf16; the frozen base is 16-bit either way (QLoRA: NF4).
DeepSpeed's engine casts the whole module to bf16 when bf16 is enabled, the adapters PEFT added included
(deepspeed/runtime/engine.py, `_configure_distributed_model`: `self.module.bfloat16()`), and its bf16 / ZeRO
optimizer keeps the fp32 master copy of what is trained: under LoRA, bf16 adapters (no cast copy of their
inputs) with fp32 masters (`deepspeed-bf16`); for full training the same bytes as `mixed`. Megatron-Bridge
casts its adapters to the model's dtype too (NVIDIA-NeMo/Megatron-Bridge 29836cc src/megatron/bridge/peft/utils.py,
ParallelLinearAdapter.__init__: `if model_parallel_config.bf16: self.bfloat16()`) and they read the layer's own
normed input (peft/lora_layers.py, LoRALinear.forward: `self.adapter(layernorm_output.contiguous())`, no copy);
Megatron's DDP accumulates every trained parameter's gradient in its fp32 main_grad and its optimizer keeps fp32
masters, so under `mixed-fp32-grads` the adapters take 2 + 4 + 4 + 8 = 18 bytes, as full training does.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PRECISIONS", "Precision"]


@dataclass(frozen=True)
class Precision:
    weight: int  # bytes per trained parameter
    grad: int
    master: int  # fp32 master copy, 0 when the weights are themselves what the optimizer updates
    state: int  # bytes per element of an optimizer state (AdamW's m and v each)
    adapter: int  # LoRA adapters' weights and gradients
    label: str
    autocast_copies: bool = False  # fp32 weights under bf16 autocast: each linear saves its bf16 weight copy
    adapter_master: int = 0  # an fp32 master copy of the LoRA adapters (DeepSpeed's and Megatron's optimizers keep one)
    adapter_grad: int = 0  # bytes per adapter gradient where not the adapters' own width (Megatron's fp32 main_grad)
    gathered_bf16: bool = False  # forward reads bf16 unsharded copies of the fp32 parameters (FSDP2's param_dtype:
    # "the dtype for the unsharded parameter and hence the dtype for forward/backward computation", torch 2.13
    # distributed/fsdp/_fully_shard/_fsdp_api.py, MixedPrecisionPolicy), the adapters' too

    @property
    def adapter_grads(self) -> int:
        """Bytes per LoRA adapter gradient: the adapters' width unless the framework accumulates them wider."""
        return self.adapter_grad or self.adapter


PRECISIONS: dict[str, Precision] = {
    "mixed": Precision(2, 2, 4, 4, 4, "mixed precision: bf16 weights and gradients, fp32 master weights and optimizer states"),
    "deepspeed-bf16": Precision(2, 2, 4, 4, 2, "DeepSpeed bf16: the engine casts the module to bf16 (LoRA adapters "
                                "too), fp32 master weights and optimizer states", adapter_master=4),
    "mixed-fp32-grads": Precision(2, 4, 4, 4, 2, "mixed precision with fp32 gradients (Megatron's main_grad): bf16 "
                                  "weights, fp32 gradients, master weights and optimizer states",
                                  adapter_master=4, adapter_grad=4),
    "bf16": Precision(2, 2, 0, 2, 2, "pure bf16: weights, gradients and optimizer states in bf16, no fp32 master copy"),
    "fp32-autocast": Precision(4, 4, 0, 4, 4, "fp32 weights, gradients and optimizer states, bf16 autocast for compute",
                               autocast_copies=True),
    "fsdp-mixed": Precision(4, 4, 0, 4, 4, "fp32 sharded weights, gradients and optimizer states; bf16 copies "
                            "gathered for compute (FSDP2 MixedPrecisionPolicy)", gathered_bf16=True),
}
