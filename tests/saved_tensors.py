"""What autograd holds for backward at the end of a forward pass, layer by layer, in transformers' own model.

`torch.autograd.graph.saved_tensors_hooks` sees every tensor an op saves; each is held detached (an
op's own output held as it is would keep its node alive in a cycle), and only those still alive when
forward ends count: a graph branch that does not reach the loss (DeepSeek-V4's indexer, whose scores
end in top-k indices) is freed with what it saved. Each distinct storage counts once, in the layer
that saved it first; parameters and the model's rotary tables (its RotaryEmbedding's output) are left out.
"""

from __future__ import annotations

import weakref

import torch


def saved_per_layer(model, ids: torch.Tensor) -> list[int]:  # noqa: ANN001
    """Bytes each of the model's layers (its base model's `layers`, or GPT-2's and GPT-J's `h`) holds for
    backward after forward (the loss on `ids` itself)."""
    base = model.model if hasattr(model, "model") else model.base_model
    layers = base.layers if hasattr(base, "layers") else base.h
    left_out = {p.untyped_storage().data_ptr() for p in model.parameters()}
    state: dict = {"at": [], "saved": []}

    def pack(t: torch.Tensor) -> torch.Tensor:
        held = t.detach()
        if state["at"] and t.untyped_storage().data_ptr() not in left_out:
            state["saved"].append((state["at"][-1], weakref.ref(held)))
        return held

    def enter(index: int):  # noqa: ANN202
        return lambda *_: state["at"].append(index)

    def leave(*_) -> None:  # returns None: a forward hook's value would replace the module's output
        state["at"].pop()

    def tables(_module, _args, out) -> None:  # noqa: ANN001
        left_out.update(t.untyped_storage().data_ptr() for t in out)

    # the model's rotary module, whatever its name (LFM2-MoE calls it pos_emb)
    hooks = [module.register_forward_hook(tables) for module in base.children()
             if type(module).__name__.endswith("RotaryEmbedding")]
    for index, layer in enumerate(layers):
        hooks += [layer.register_forward_pre_hook(enter(index)), layer.register_forward_hook(leave)]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(ids, labels=ids).loss
    kept, seen = [0] * len(layers), set()
    for index, ref in state["saved"]:
        tensor = ref()
        if tensor is not None and tensor.untyped_storage().data_ptr() not in seen:
            seen.add(tensor.untyped_storage().data_ptr())
            kept[index] += tensor.untyped_storage().nbytes()
    loss.backward()  # the graph was complete and usable
    for hook in hooks:
        hook.remove()
    return kept
