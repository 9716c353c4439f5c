"""The fused GPU kernels a training run of a recurrent mixer calls, stood in on the CPU by what each saves.

transformers calls these by name from each model's module (`use_kernel_func_from_hub_with_fallback`),
and on the CPU falls back to torch code that keeps far more (the chunked scans' padded intermediates).
Each stand-in here is an autograd.Function that returns zeros of the kernel's output shape and saves,
with `save_for_backward`, tensors of the shapes and dtypes its kernel saves (values are irrelevant:
memory is what is measured), so saved-tensor hooks see the real torch ops around the kernel plus the
kernel's own saves. Read from the kernels' sources:
  - causal-conv1d (Dao-AILab/causal-conv1d, causal_conv1d_interface.py, CausalConv1dFn): x, weight, bias;
    the SiLU is fused and recomputed;
  - mamba_ssm (state-spaces/mamba @ e9594ce, mamba_ssm/ops/triton/ssd_combined.py, lines 824-889,
    MambaSplitConv1dScanCombinedFn): zxbcdt, out_x (the scan's output before the gated norm), the
    norm's rstd (fp32, one per row and group), A, D, dt_bias and the weights; out_proj runs inside;
  - fla (fla-org/flash-linear-attention @ bc3b101, fla/ops/gated_delta_rule/chunk.py, lines 253-325,
    ChunkGatedDeltaRuleFunction): q and k l2-normed with their rstd (fp32), v, g's chunk-local cumsum
    (fp32), beta and A, the WY representation's [B, T, HV, 64] block (k's dtype, chunk_fwd.py line 385);
    fla/ops/kda/chunk.py, lines 74-107 (ChunkKDAFunction, recompute on): the same with a per-channel
    gate — its cumsum (fp32) and its input — and two blocks, Aqk and Akk (chunk_intra.py, lines 817-819).
Gradients come back as zeros: only the forward's memory is of interest, the backward just has to run.
"""

from __future__ import annotations

import contextlib
import sys

import torch

CHUNK = 64  # fla's chunk size (BT) in both chunked kernels


class _Saves(torch.autograd.Function):
    """out = zeros(shape) (as the kernel's output, depending on `inputs`), saving `kept`."""

    @staticmethod
    def forward(ctx, shape, dtype, kept, *inputs):  # noqa: ANN001, ANN205
        ctx.save_for_backward(*kept)
        ctx.shapes = [(t.shape, t.dtype) for t in inputs]
        return torch.zeros(shape, dtype=dtype)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        return (None, None, None, *(torch.zeros(shape, dtype=dtype) for shape, dtype in ctx.shapes))


def _run(shape, dtype, kept, *inputs):  # noqa: ANN001, ANN202
    inputs = [t for t in inputs if isinstance(t, torch.Tensor)]
    return _Saves.apply(tuple(shape), dtype, kept, *inputs)


def causal_conv1d(x, weight, bias=None, activation=None, **_):  # noqa: ANN001, ANN201
    return _run(x.shape, x.dtype, (x,), x, weight, bias)


def split_conv1d_scan_combined(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size, *_,  # noqa: ANN001, ANN201, N803
                               rmsnorm_weight=None, outproj_weight=None, outproj_bias=None, headdim=None, ngroups=1,
                               **__):
    b, s, heads = *zxbcdt.shape[:2], A.shape[0]
    out_x = torch.empty(b, s, heads, headdim, dtype=zxbcdt.dtype)
    rstd = [torch.empty(b * s * ngroups, dtype=torch.float32)] if rmsnorm_weight is not None else []
    return _run((b, s, outproj_weight.shape[0]), zxbcdt.dtype, (zxbcdt, out_x, *rstd, A), zxbcdt, conv1d_weight,
                conv1d_bias, dt_bias, A, D, rmsnorm_weight, outproj_weight, outproj_bias)


def _normed(x):  # noqa: ANN001, ANN202 - fla's l2norm_fwd: the normed x and one fp32 rstd per row
    return torch.empty(x.shape, dtype=x.dtype), torch.empty(x.shape[:-1], dtype=torch.float32)


def _final(key, value, output_final_state: bool):  # noqa: ANN001, ANN202 - the state a cache asks for
    return torch.zeros(*value.shape[:1], value.shape[2], key.shape[-1], value.shape[-1]) if output_final_state else None


def chunk_gated_delta_rule(query, key, value, g, beta, *_, output_final_state=False, **__):  # noqa: ANN001, ANN201
    b, s, heads = value.shape[:3]
    kept = (*_normed(query), *_normed(key), value.contiguous(), torch.empty(g.shape, dtype=torch.float32),
            beta.contiguous(), torch.empty(b, s, heads, CHUNK, dtype=key.dtype))
    return _run(value.shape, value.dtype, kept, query, key, value, g, beta), _final(key, value, output_final_state)


def chunk_kda(query, key, value, g, beta, *_, output_final_state=False, **__):  # noqa: ANN001, ANN201
    b, s, heads = value.shape[:3]
    blocks = (torch.empty(b, s, heads, CHUNK, dtype=key.dtype) for _ in range(2))
    kept = (*_normed(query), *_normed(key), value.contiguous(), torch.empty(g.shape, dtype=torch.float32),
            g.contiguous(), beta.contiguous(), *blocks)
    return _run(value.shape, value.dtype, kept, query, key, value, g, beta), _final(key, value, output_final_state)


_STAND_INS = {"causal_conv1d_fn": causal_conv1d, "torch_chunk_gated_delta_rule": chunk_gated_delta_rule,
              "chunk_kimi_delta_attention": chunk_kda}


@contextlib.contextmanager
def gpu_kernels(model: torch.nn.Module):
    """`model`'s transformers module with its kernels' names bound to the stand-ins while inside."""
    module = sys.modules[type(model).__module__]
    names = {name: fn for name, fn in _STAND_INS.items() if hasattr(module, name)}
    names.update({name: split_conv1d_scan_combined for name in vars(module) if name.endswith("split_conv1d_scan_combined")})
    old = {name: getattr(module, name) for name in names}
    try:
        for name, fn in names.items():
            setattr(module, name, fn)
        yield
    finally:
        for name, fn in old.items():
            setattr(module, name, fn)
