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
  - mamba_ssm 2.3.2.post1 (PyPI sdist), mamba_ssm/ops/selective_scan_interface.py, lines 184-280
    (MambaInnerFn, checkpoint_lvl 1: conv and delta recomputed in backward; save_for_backward at 275-277): xz
    (made contiguous first), x_dbl (x_proj's output), A, B and C (each made contiguous, [b, 1, d_state, L]), D,
    delta_bias, the scan's intermediates and its output before the gate; the intermediates are [b, d_inner,
    ⌈L / 2048⌉, 2·d_state] in A's dtype, fp32 (csrc/selective_scan/selective_scan.cpp, lines 307-313);
    out_proj runs inside;
  - mamba_ssm 2.3.2.post1, the same file, lines 23-57 (SelectiveScanFn, which Jamba's mixer calls after its own
    conv, x_proj and norms): u, delta, B, C and z (each made contiguous), A, D, delta_bias, the intermediates and
    the output before the gate;
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


def mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight,  # noqa: ANN001, ANN201
                   out_proj_weight, out_proj_bias, A, B=None, C=None, D=None, delta_bias=None, *_, **__):  # noqa: N803
    b, _, length = xz.shape
    d_inner, d_state = A.shape
    xz = xz if xz.stride(-1) == 1 else xz.contiguous()
    x_dbl = torch.empty(b * length, x_proj_weight.shape[0], dtype=xz.dtype)
    b_c = [torch.empty(b, 1, d_state, length, dtype=xz.dtype) for _ in "BC"]
    states = torch.empty(b, d_inner, -(-length // 2048), 2 * d_state, dtype=A.dtype)
    out = torch.empty(b, d_inner, length, dtype=xz.dtype)
    kept = (xz, x_dbl, A, *b_c, *(t for t in (D, delta_bias) if t is not None), states, out)
    return _run((b, length, out_proj_weight.shape[0]), xz.dtype, kept, xz, conv1d_weight, conv1d_bias, x_proj_weight,
                delta_proj_weight, out_proj_weight, out_proj_bias, A, D, delta_bias)


def selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, *_, **__):  # noqa: ANN001, ANN201, N803
    u, delta, B, C = (t if t.stride(-1) == 1 else t.contiguous() for t in (u, delta, B, C))
    z = z if z is None or z.stride(-1) == 1 else z.contiguous()
    b, d_inner, length = u.shape
    states = torch.empty(b, d_inner, -(-length // 2048), 2 * A.shape[1], dtype=A.dtype)
    kept = (u, delta, A, B, C, *(t for t in (D, z, delta_bias) if t is not None), states,
            *([torch.empty(delta.shape, dtype=delta.dtype)] if z is not None else []))
    return _run(u.shape, u.dtype if z is None else z.dtype, kept, u, delta, A, B, C, D, z, delta_bias)


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
              "chunk_kimi_delta_attention": chunk_kda, "mamba_inner_fn": mamba_inner_fn,
              "mamba_selective_scan": selective_scan}


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
