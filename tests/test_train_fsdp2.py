"""torch FSDP2 (`fully_shard`) run for real on the CPU: what it holds while the head and the layers run backward.

Two ranks of torch's fake process group (its collectives move no data, FSDP2 allocates its buffers as on a
GPU; with one rank FSDP2 skips the all-gather: `_fsdp_param_group.py`, `unshard`), a model wrapped as
torchtune's full_finetune_distributed wraps Llama 3.1 70B with 70B_full.yaml (recipes/ @ 0031bfb0:
`shard_model` calls `fully_shard` on each `layers.i`, on `tok_embeddings` and `output`
(custom_sharded_layers), then on the root; reshard_after_forward True), and the head applied in 8 chunks
(TransformerDecoder.chunked_output) before an eager chunked cross-entropy. The allocations are torch's CPU
allocator as the profiler records it (dtensor_tp.Allocated); marks are allocations of odd sizes made at
known points.

What it shows, as peak.py counts it under `fsdp_head_unit`:
- the head is called once per chunk, so FSDP2 records it 8 times in its post-forward order and, in
  backward, prefetches the group before it only from the head's last chunk (`_record_post_forward`: "we
  record each usage (with multiplicity)"; `_backward_prefetch` pops one index per pre-backward); between
  chunks it reshards the head and gathers it again. At the head's second chunk the last layer is not
  gathered: the moment's new bytes are the three weight gradients, the head gathered, the logits
  gradients not yet reached and two pieces of the head input's gradient;
- while a layer runs backward FSDP2 holds that layer gathered, the next one's all-gather output
  (prefetched, not yet copied out), and the previous layer's reduce-scatter input (`reduce_scatter_state(s)`,
  freed at the next post-backward): no third gathered copy;
- wrapped as torchtitan and torchtune's LoRA recipes wrap it (the layers, then the root), the root unit
  (embedding, final norm, head) stays gathered, its gradients unsharded, until backward ends.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from dtensor_tp import Allocated

V, D, N, C = 1024, 512, 128, 8  # vocabulary, width, tokens, chunks: the head (1 MiB) twice a layer (D × D)
MARK = 1001  # odd byte counts no tensor of the model has


@pytest.fixture(scope="module")
def fsdp2(request: pytest.FixtureRequest):
    if not request.config.getoption("--distributed"):
        pytest.skip("opt-in: pytest --distributed (FSDP2 on a fake two-rank group, about 15 s)")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield init_device_mesh("cpu", (2,))
    dist.destroy_process_group()


class Decoder(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, D)
        self.layers = nn.ModuleList(nn.Linear(D, D, bias=False) for _ in range(layers))
        self.norm = nn.LayerNorm(D)
        self.output = nn.Linear(D, V, bias=False)

    def forward(self, ids: torch.Tensor) -> list[torch.Tensor]:
        h = self.tok_embeddings(ids)
        for layer in self.layers:
            h = h + layer(h)
        return [self.output(chunk) for chunk in self.norm(h).chunk(C, dim=1)]


def _sharded(mesh, layers: int, own_units: tuple[str, ...] = ("tok_embeddings", "output")) -> Decoder:
    """Wrapped as torchtune's shard_model wraps it (the embedding and head units of their own, as 70B_full.yaml
    says), or with `own_units` () as torchtitan's apply_fsdp and torchtune's LoRA recipe do: the layers, then the
    root, which holds the embedding, final norm and head."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = Decoder(layers).to(torch.bfloat16)
    for name, module in reversed(list(model.named_modules())):
        if name in own_units or (name.startswith("layers.") and name.count(".") == 1):
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _loss(model: Decoder, ids: torch.Tensor, hook=None) -> torch.Tensor:  # noqa: ANN001
    """torchtune's recipe: the model's chunks, then the loss over them (`hook` on each chunk's logits)."""
    logits = model(ids)
    for x in logits if hook else ():
        x.register_hook(hook)
    targets = ids.chunk(C, dim=1)
    return sum(F.cross_entropy(x.float().flatten(0, 1), t.flatten(), reduction="sum") for x, t in zip(logits, targets))


def _groups(model: Decoder) -> dict[str, object]:
    """Each FSDP2 unit's parameter group by the unit's name ("" the root)."""
    return {name: module._get_fsdp_state()._fsdp_param_group for name, module in model.named_modules()
            if hasattr(module, "_get_fsdp_state")}


def test_a_chunked_head_of_its_own_unit_prefetches_the_last_layer_at_its_last_chunk(fsdp2) -> None:
    from calc.analysis.train.loss import LOSSES
    from calc.analysis.train.peak import _head_accumulated

    model = _sharded(fsdp2, layers=2)
    last = _groups(model)["layers.1"]
    gathered: list[bool] = []  # at each chunk's backward, in backward's order: the last layer gathered (or under way)?

    def chunk_started(grad: torch.Tensor) -> torch.Tensor:  # runs after FSDP2's own pre-backward hook on the chunk
        gathered.append(last.is_unsharded or last._all_gather_result is not None)
        return grad

    def mark(*_) -> None:  # the head input's gradient is whole: the head's backward is over
        torch.empty(MARK, dtype=torch.uint8)

    model.norm.register_full_backward_pre_hook(mark)
    loss = _loss(model, torch.randint(0, V, (1, N)), chunk_started)
    with Allocated(MARK) as allocated:  # phases[0]: from the loss's backward to the head input's gradient whole
        loss.backward()
    assert gathered == [False] * (C - 1) + [True]
    # the head's second chunk is the larger moment here (the last one holds two gradients, the head and half a head
    # of layer), and what it allocates is what peak.py counts there: no layer beside the head
    head = V * D * 2
    _, parts = _head_accumulated(LOSSES["chunked"], N, V, D, head)
    assert abs(allocated.phases[0] - (sum(b for _, b in parts) + head)) <= 16 * N + 64  # the loss's per-token scalars


def test_peak_counts_the_head_unit_as_fsdp2_runs_it() -> None:
    """torchtune's 70B full fine-tuning (70B_full.yaml): at the head's second chunk FSDP holds the projection
    alone (1.96 GiB), at its last chunk also the last layer's all-gather output (prefetched), as measured above."""
    from calc.analysis.train import Setup, train
    from calc.spec.load import load_spec

    t = train(load_spec("llama-3.1-70b"), Setup(2048, 2, gpus=8, zero=3, offload=("params",), precision="bf16",
                                                loss="chunked-compiled", recompute="full", fsdp_head_unit=True))
    moments = {m.name: dict(m.parts) for m in t.moments}
    second = {what: b for what, b in moments["backward, the head's second chunk"].items() if what.startswith("FSDP")}
    assert second == {"FSDP: the output projection gathered (its own unit)": 2 * 128256 * 8192}
    layers = moments["backward, the last layer recomputed"]
    assert moments["backward, the head's last chunk"]["FSDP: the last layer's all-gather output (prefetched)"] \
        == layers["FSDP: two gathered layers (running, prefetched)"] // 2


def test_a_layer_runs_backward_beside_the_next_ones_all_gather_and_the_previous_ones_reduce_scatter(fsdp2) -> None:
    model = _sharded(fsdp2, layers=3)
    groups = _groups(model)
    found: list[tuple[set[str], set[str], int]] = []

    def started(grad: torch.Tensor) -> torch.Tensor:  # after FSDP2's pre-backward: unsharded, prefetched, reducing
        found.append(({n for n, g in groups.items() if g.is_unsharded},
                      {n for n, g in groups.items() if g._all_gather_result is not None},
                      [s.reduce_scatter_input.numel() for s in groups["layers.1"].comm_ctx.reduce_scatter_states]))
        return grad

    model.layers[1].register_forward_hook(lambda _m, _a, out: out.register_hook(started) and None)
    _loss(model, torch.randint(0, V, (1, N))).backward()
    # the root (the final norm) stays gathered; layers.1 runs; layers.0's all-gather is under way; layers.2's
    # gradient (D × D) waits in its reduce-scatter input
    assert found == [({"", "layers.1"}, {"layers.0"}, [D * D])]


def test_the_root_stays_gathered_with_its_gradients_unsharded_until_backward_ends(fsdp2) -> None:
    """With only the layers wrapped, FSDP2's root unit holds the embedding, final norm and head: it never reshards
    the root after forward (`_lazy_init`: "For the root, do not reshard after forward"), and the root's post-backward
    is registered on its inputs, the token ids, which need no gradient, so it reshards and reduce-scatters only in
    the final callback: while a layer runs backward the root is gathered and its head's and norm's gradients are
    still unsharded (the embedding's comes last)."""
    model = _sharded(fsdp2, layers=3, own_units=())
    groups = _groups(model)
    found: list[tuple[set[str], dict[str, bool]]] = []

    def started(grad: torch.Tensor) -> torch.Tensor:
        found.append(({n for n, g in groups.items() if g.is_unsharded},
                      {p._param_fqn: p._unsharded_param.grad is not None for p in groups[""].fsdp_params}))
        return grad

    model.layers[1].register_forward_hook(lambda _m, _a, out: out.register_hook(started) and None)
    _loss(model, torch.randint(0, V, (1, N))).backward()
    assert found == [({"", "layers.1"}, {"tok_embeddings.weight": False, "norm.weight": True, "norm.bias": True,
                                         "output.weight": True})]


def test_the_final_callback_copies_the_roots_unsharded_gradients_into_one_reduce_scatter_input(fsdp2,
                                                                                             monkeypatch) -> None:
    """The root's post-backward runs in FSDP2's final callback: it reshards the root, then foreach_reduce copies
    the root's unsharded gradients (head, final norm, embedding) into one reduce-scatter input of their summed
    size, in the reduce dtype, and only then frees them (`unsharded_grads.clear()`): both exist at the copy-in,
    with no gathered unit and no earlier layer's reduce-scatter input left."""
    import torch.distributed.fsdp._fully_shard._fsdp_collectives as collectives

    model = _sharded(fsdp2, layers=3, own_units=())
    groups = _groups(model)
    found = []
    copy_in = collectives.foreach_reduce_scatter_copy_in

    def spy(grads: list[torch.Tensor], reduce_scatter_input: torch.Tensor, world_size: int) -> None:
        found.append((sorted(g.numel() for g in grads), reduce_scatter_input.numel(), reduce_scatter_input.dtype,
                      {n for n, g in groups.items() if g.is_unsharded}, len(groups[""].comm_ctx.reduce_scatter_states)))
        return copy_in(grads, reduce_scatter_input, world_size)

    monkeypatch.setattr(collectives, "foreach_reduce_scatter_copy_in", spy)
    _loss(model, torch.randint(0, V, (1, N))).backward()
    assert found[-1] == ([D, D, V * D, V * D], 2 * V * D + 2 * D, torch.bfloat16, set(), 0)
    assert found[:-1] == [([D * D], D * D, torch.bfloat16, {""}, 0)] * 3  # each layer's, the root gathered


def test_peak_counts_fsdp2s_root_gradients_reduce_scattered_at_backwards_end() -> None:
    """Llama 3.1 70B under torchtitan's FSDP2 (fp32 sharded states, bf16 compute, fp32 reduce): at backward's end
    the root's unsharded bf16 gradients (head and embedding, 2 × 128,256 × 8,192) beside their fp32 reduce-scatter
    input, the layers' sharded gradients and states beside them; none under LoRA (a frozen root)."""
    from calc.analysis.train import Setup, train
    from calc.analysis.train.frameworks import resolve
    from calc.spec.load import load_spec

    spec, params = load_spec("llama-3.1-70b"), 2 * 128256 * 8192
    name = "backward ends: FSDP2 reduce-scatters the root's gradients"
    t = train(spec, Setup(2048, 1, gpus=8, zero=3, **resolve("torchtitan", {"recompute": "full"})))
    moment = {m.name: dict(m.parts) for m in t.moments}[name]
    assert moment["FSDP2: the root's unsharded gradients (head, embedding) and their reduce-scatter input"] \
        == params * (2 + 4)
    lora = train(spec, Setup(2048, 1, gpus=8, zero=3, lora_rank=8, **resolve("torchtitan", {"recompute": "full"})))
    assert name not in {m.name for m in lora.moments}


def test_peak_counts_fsdp2s_root_through_backward_and_each_frameworks_last_layer() -> None:
    """Llama 3.1 70B's root (embedding and head, 2 × 128,256 × 8,192 × 2 B) gathered at the loss and in every
    layer's backward; the last layer beside it at the loss where the framework does not reshard it (torchtitan's
    apply_fsdp: `reshard_after_forward = int(layer_id) < len(model.layers) - 1`), not where it does (torchtune's
    shard_model reshards every layer alike)."""
    from calc.analysis.train import Setup, train
    from calc.analysis.train.frameworks import resolve
    from calc.spec.load import load_spec

    spec, root = load_spec("llama-3.1-70b"), 2 * 2 * 128256 * 8192
    label = "FSDP2: the root unit (head, embedding) gathered until backward ends"
    for framework, last in (("torchtitan", True), ("torchtune", False)):
        t = train(spec, Setup(2048, 1, gpus=8, zero=3, **resolve(framework, {"recompute": "full"})))
        moments = {m.name: dict(m.parts) for m in t.moments}
        for name in ("forward, computing the loss", "backward, the last layer recomputed"):
            assert moments[name][label] == root
        at_loss = moments["forward, computing the loss"]
        assert ("FSDP: the last layer gathered (not resharded after forward)" in at_loss) is last
