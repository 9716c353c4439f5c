"""The steps of the token mixers that keep a state instead of a KV cache: Mamba2's selective scan,
gated DeltaNet's delta rule and LFM2's gated short convolution.

Each reads the (normed) residual stream [B, T, d_model], projects it, runs a depthwise causal conv
of K taps along the sequence (in decode: over the K - 1 inputs its conv state holds and the new
one), then — Mamba2 and DeltaNet — a recurrence over a fixed-size state, and projects back.
FLOPs follow the convention (2·m·n·k per matmul); the conv costs 2·K per channel per token, and a
recurrence is counted as the matmuls one token's update makes, once per token:
- Mamba2: the state h [P, N] per head takes dt·x ⊗ B (2·P·N) and gives y = h·C (2·P·N): 4·I·N
  per token, I = H·P;
- gated DeltaNet: S [D_k, D_v] per value head gives Sᵀk (2·D_k·D_v), takes β·k ⊗ (v - Sᵀk)
  (2·D_k·D_v) and gives Sᵀq (2·D_k·D_v): 6·H_v·D_k·D_v per token; Kimi Delta Attention the same
  with D_k = D_v = D and as many key heads as value heads: 6·H·D² (its decay per channel, like
  DeltaNet's per head, is an elementwise multiply, not counted); lightning attention's S [hd, hd]
  per head takes k ⊗ v (2·hd²) and gives q·S (2·hd²): 4·h·hd² per token.
Training kernels compute the same recurrences in chunks, with more arithmetic for the same result.
"""

from __future__ import annotations

from typing import Any

from calc.analysis.shapes.core import Dims, Rows, Shape, Step
from calc.parts import GatedDeltaNet, KimiDeltaAttention, LightningAttention, Mamba, Mamba2, ShortConv

__all__ = ["deltanet_steps", "kda_steps", "lightning_steps", "mamba_steps", "mamba2_steps", "short_conv_steps"]


def _conv(d: Dims, id: str, x: Shape, kernel: int, params: int, state: str) -> Step:
    """A depthwise causal conv of `kernel` taps along the sequence: shape unchanged, 2·K FLOPs per channel."""
    source = (f"the {kernel - 1} inputs its conv state holds and the new one" if d.decode
              else f"each position and the {kernel - 1} before it (zeros before the first)")
    return d.step(id, f"causal conv, {kernel} taps", x, (x,), d.shape(x.names[-1], "K"), params,
                  2 * kernel * _positions(x), note=f"depthwise over {source}; the last {kernel - 1} inputs are "
                                                   f"kept per sequence as the {state} conv state")


def _positions(x: Shape) -> int:
    """Every channel of every position: the elements of x."""
    n = 1
    for size in x.sizes:
        n *= size
    return n


def _scan_cost(d: Dims, factor: int, positions: Shape, *state: str) -> dict[str, Any]:
    """A recurrence's FLOPs, `factor` per position and state element, with its formula ('4·B·T·I·N'),
    which no [m, k] × [k, n] shape states (the flops table would otherwise print a matmul's 2·m·n·k of
    the wrong names): one source for both, as d.step's `flops` and `formula`."""
    flops = factor * _positions(positions)
    for name in state:
        flops *= d.sizes[name]
    return {"flops": flops, "formula": "·".join((str(factor), *positions.names, *state))}


def mamba2_steps(d: Dims, m: Mamba2, rows: Rows) -> list[Step]:
    """x -> in_proj (z, x B C, dt) -> conv -> SiLU -> selective scan -> gated norm -> out_proj."""
    d = d.named(I=m.d_inner, C=m.conv_dim, H=m.n_heads, P=m.head_dim, N=m.d_state, G=m.n_groups,
                K=m.conv_kernel, **{"I+C+H": m.d_inner + m.conv_dim + m.n_heads})
    x, inner, xbc = d.hidden, d.shape("B", d.new, "I"), d.shape("B", d.new, "C")
    heads, state = d.shape("B", d.new, "H", "P"), d.shape("B", "H", "P", "N")
    return [
        d.linear("ssm_in", "in_proj: z, x·B·C, dt", x, d.shape("d_model", "I+C+H"), d.shape("B", d.new, "I+C+H"),
                 rows.take("ssm_in", "ssm_in_bias"), f"one matmul, split into the gate z (I={m.d_inner}), the conv's "
                 f"input (C = I + 2·G·N = {m.conv_dim}: x, then {m.n_groups} groups of B and C) and one dt per head"),
        _conv(d, "ssm_conv", xbc, m.conv_kernel, rows.take("ssm_conv", "ssm_conv_bias"), "Mamba2"),
        d.step("ssm_act", "SiLU", xbc, (xbc,), note="elementwise; then split into x [.., I], B and C [.., G, N]"),
        d.step("ssm_scan", "selective scan: h = exp(dt·A)·h + dt·x⊗B, y = h·C + D·x", heads, (heads,), None,
               rows.take("ssm_dt_bias", "ssm_a_log", "ssm_d"), **_scan_cost(d, 4, inner, "N"), state=state,
               note=f"a [{m.head_dim}, {m.d_state}] state per head, kept per sequence whatever its length; "
                    "dt_bias, A (as log) and D are one number per head"),
        d.step("ssm_norm", "gated RMSNorm: norm(y·SiLU(z))", inner, (inner, inner), d.shape("I"),
               rows.take("ssm_norm"), note=f"over {m.n_groups} group{'s' * (m.n_groups > 1)} of "
                                           f"{m.d_inner // m.n_groups} channels"),
        d.linear("ssm_out", "out_proj", inner, d.shape("I", "d_model"), x, rows.take("ssm_out", "ssm_out_bias"),
                 "back to d_model"),
    ]


def mamba_steps(d: Dims, m: Mamba, rows: Rows) -> list[Step]:
    """x -> in_proj (x, z) -> conv -> SiLU -> x_proj (dt, B, C) -> dt_proj -> selective scan -> ·SiLU(z) -> out_proj."""
    d = d.named(I=m.d_inner, N=m.d_state, R=m.dt_rank, K=m.conv_kernel,
                **{"2I": 2 * m.d_inner, "R+2N": m.dt_rank + 2 * m.d_state})
    x, inner = d.hidden, d.shape("B", d.new, "I")
    dt_low = d.shape("B", d.new, "R+2N")
    norms = " (each RMS-normed: Jamba)" if m.dt_norms else ""
    return [
        d.linear("ssm_in", "in_proj: x, z", x, d.shape("d_model", "2I"), d.shape("B", d.new, "2I"),
                 rows.take("ssm_in", "ssm_in_bias"), f"the scan's input and its gate, I = {m.d_inner:,} each"),
        _conv(d, "ssm_conv", inner, m.conv_kernel, rows.take("ssm_conv", "ssm_conv_bias"), "Mamba"),
        d.step("ssm_act", "SiLU", inner, (inner,), note="elementwise"),
        d.linear("ssm_x_proj", "x_proj: dt, B, C", inner, d.shape("I", "R+2N"), dt_low,
                 rows.take("ssm_x_proj", "ssm_dt_norm", "ssm_b_norm", "ssm_c_norm"),
                 f"a rank-{m.dt_rank} dt and a B and C of N = {m.d_state} per token{norms}"),
        d.linear("ssm_dt_proj", "dt_proj", d.shape("B", d.new, "R"), d.shape("R", "I"), inner,
                 rows.take("ssm_dt_proj", "ssm_dt_proj_bias"), "one time step per channel; plus a bias"),
        d.step("ssm_scan", "selective scan: h = exp(dt·A)·h + dt·x⊗B, y = h·C + D·x", inner, (inner,),
               None, rows.take("ssm_a_log", "ssm_d"), **_scan_cost(d, 4, inner, "N"), state=d.shape("B", "I", "N"),
               note=f"an N = {m.d_state} state per channel, kept per sequence whatever its length"),
        d.step("ssm_gate", "× SiLU(z)", inner, (inner, inner), note="elementwise"),
        d.linear("ssm_out", "out_proj", inner, d.shape("I", "d_model"), x, rows.take("ssm_out", "ssm_out_bias"),
                 "back to d_model"),
    ]


def deltanet_steps(d: Dims, g: GatedDeltaNet, rows: Rows) -> list[Step]:
    """x -> q, k, v (conv, SiLU) and z, beta, a -> delta rule per value head -> gated norm -> out_proj."""
    d = d.named(Hk=g.n_k_heads, Hv=g.n_v_heads, Dk=g.k_head_dim, Dv=g.v_head_dim, K=g.conv_kernel,
                **{"2K+V": g.conv_dim, "V": g.value_dim})
    x, qkv, values = d.hidden, d.shape("B", d.new, "2K+V"), d.shape("B", d.new, "V")
    gates, heads = d.shape("B", d.new, "Hv"), d.shape("B", d.new, "Hv", "Dv")
    return [
        d.linear("gdn_qkv", "in_proj: q, k, v", x, d.shape("d_model", "2K+V"), qkv, rows.take("gdn_qkv"),
                 f"queries and keys of {g.n_k_heads} heads of {g.k_head_dim}, values of {g.n_v_heads} heads of "
                 f"{g.v_head_dim}"),
        d.linear("gdn_z", "in_proj: output gate z", x, d.shape("d_model", "V"), values, rows.take("gdn_z")),
        d.linear("gdn_b", "in_proj: beta (write strength)", x, d.shape("d_model", "Hv"), gates, rows.take("gdn_b")),
        d.linear("gdn_a", "in_proj: a (decay input)", x, d.shape("d_model", "Hv"), gates, rows.take("gdn_a"),
                 "decay g = -exp(A)·softplus(a + dt_bias)"),
        _conv(d, "gdn_conv", qkv, g.conv_kernel, rows.take("gdn_conv"), "DeltaNet"),
        d.step("gdn_act", "SiLU; L2-normalise q and k", qkv, (qkv,), note="elementwise; key heads are repeated "
               f"{g.n_v_heads // g.n_k_heads}× to meet the value heads"),
        d.step("gdn_scan", "delta rule: S = exp(g)·S + β·k⊗(v − Sᵀk), o = Sᵀq", heads, (heads,),
               None, rows.take("gdn_dt_bias", "gdn_a_log"), **_scan_cost(d, 6, gates, "Dk", "Dv"),
               state=d.shape("B", "Hv", "Dk", "Dv"),
               note=f"a [{g.k_head_dim}, {g.v_head_dim}] state per value head, kept per sequence whatever its length"),
        d.step("gdn_norm", "gated RMSNorm: norm(o)·SiLU(z)", heads, (heads, heads), d.shape("Dv"), rows.take("gdn_norm"),
               note="one Dv-wide scale shared by the value heads"),
        d.linear("gdn_out", "out_proj", values, d.shape("V", "d_model"), x, rows.take("gdn_out"), "back to d_model"),
    ]


def kda_steps(d: Dims, k: KimiDeltaAttention, rows: Rows) -> list[Step]:
    """x -> q, k, v (conv, SiLU), forget gate (f_a, f_b), beta -> delta rule per head -> gated norm (g_a, g_b) -> o_proj."""
    d = d.named(H=k.n_heads, D=k.head_dim, K=k.conv_kernel, **{"HD": k.width, "3HD": 3 * k.width})
    x, qkv, width = d.hidden, d.shape("B", d.new, "3HD"), d.shape("B", d.new, "HD")
    low, heads = d.shape("B", d.new, "D"), d.shape("B", d.new, "H", "D")
    projections = [d.linear(f"kda_{name}", f"{name}_proj", x, d.shape("d_model", "HD"), width, rows.take(f"kda_{name}"))
                   for name in "qkv"]
    return [
        *projections,
        _conv(d, "kda_conv", qkv, k.conv_kernel, rows.take("kda_conv"), "KDA"),
        d.step("kda_act", "SiLU; L2-normalise q and k", qkv, (qkv,), note="elementwise, per head"),
        d.linear("kda_f_a", "forget gate: f_a_proj", x, d.shape("d_model", "D"), low, rows.take("kda_f_a"),
                 f"a rank-{k.head_dim} bottleneck"),
        d.linear("kda_f_b", "forget gate: f_b_proj", low, d.shape("D", "HD"), width, rows.take("kda_f_b"),
                 "decay g = -exp(A)·softplus(f + dt_bias), one per channel"),
        d.linear("kda_b", "b_proj: beta (write strength)", x, d.shape("d_model", "H"), d.shape("B", d.new, "H"),
                 rows.take("kda_b")),
        d.step("kda_scan", "delta rule: S = diag(exp(g))·S + β·k⊗(v − Sᵀk), o = Sᵀq", heads, (heads,),
               None, rows.take("kda_dt_bias", "kda_a_log"), **_scan_cost(d, 6, d.shape("B", d.new, "H"), "D", "D"),
               state=d.shape("B", "H", "D", "D"),
               note=f"a [{k.head_dim}, {k.head_dim}] state per head, kept per sequence whatever its length"),
        d.linear("kda_g_a", "output gate: g_a_proj", x, d.shape("d_model", "D"), low, rows.take("kda_g_a")),
        d.linear("kda_g_b", "output gate: g_b_proj", low, d.shape("D", "HD"), width, rows.take("kda_g_b")),
        d.step("kda_norm", "gated RMSNorm: norm(o)·sigmoid(g)", heads, (heads, heads), d.shape("D"),
               rows.take("kda_norm"), note="one D-wide scale shared by the heads"),
        d.linear("kda_out", "o_proj", width, d.shape("HD", "d_model"), x, rows.take("kda_out"), "back to d_model"),
    ]


def lightning_steps(d: Dims, a: LightningAttention, rows: Rows) -> list[Step]:
    """x -> qkv (SiLU) -> decayed linear attention per head -> RMSNorm -> × sigmoid(gate) -> out_proj."""
    d = d.named(h=a.n_heads, hd=a.head_dim, **{"W": a.width, "3W": 3 * a.width})
    x, qkv, width, heads = d.hidden, d.shape("B", d.new, "3W"), d.shape("B", d.new, "W"), d.shape("B", d.new, "h", "hd")
    return [
        d.linear("la_qkv", "qkv_proj", x, d.shape("d_model", "3W"), qkv, rows.take("la_qkv"),
                 f"q, k and v of {a.n_heads} heads of {a.head_dim}"),
        d.step("la_act", "SiLU", qkv, (qkv,), note="elementwise"),
        d.step("la_scan", "S = λ·S + k⊗v, o = q·S", heads, (heads,), None, 0,
               **_scan_cost(d, 4, d.shape("B", d.new, "h"), "hd", "hd"), state=d.shape("B", "h", "hd", "hd"),
               note=f"a [B, h, {a.head_dim}, {a.head_dim}] state, one per head with a fixed decay λ (buffers), "
                    "kept per sequence whatever its length"),
        d.step("la_norm", "RMSNorm", width, (width,), d.shape("W"), rows.take("la_norm"), note="over all heads"),
        d.linear("la_gate", "output_gate", x, d.shape("d_model", "W"), width, rows.take("la_gate"),
                 "sigmoid, times the normed output"),
        d.linear("la_out", "out_proj", width, d.shape("W", "d_model"), x, rows.take("la_out"), "back to d_model"),
    ]


def short_conv_steps(d: Dims, c: ShortConv, rows: Rows) -> list[Step]:
    """x -> in_proj (B, C, x) -> B·x -> causal conv -> C·conv -> out_proj."""
    d = d.named(K=c.kernel, **{"3·d_model": 3 * d.sizes["d_model"]})
    x = d.hidden
    return [
        d.linear("conv_in", "in_proj: B, C, x", x, d.shape("d_model", "3·d_model"), d.shape("B", d.new, "3·d_model"),
                 rows.take("conv_in", "conv_in_bias"), "three d_model-wide gates and inputs"),
        d.step("conv_gate_in", "B·x", x, (x, x), note="elementwise"),
        _conv(d, "conv", x, c.kernel, rows.take("conv", "conv_bias"), "short-conv"),
        d.step("conv_gate_out", "C·conv", x, (x, x), note="elementwise"),
        d.linear("conv_out", "out_proj", x, d.shape("d_model", "d_model"), x, rows.take("conv_out", "conv_out_bias")),
    ]
