"""`gptcalc train` against real torch: the bytes autograd keeps, and AdamW's state after one step.

Activations: tests/training_forward.py is a tiny training forward with plain torch ops (the one
calc/analysis/train/activations.py describes); `torch.autograd.graph.saved_tensors_hooks` sees
every tensor saved for backward, and the test adds up the bytes of their distinct storages, leaving
out parameters. That sum equals our formula exactly, for GPT-2 and Llama layouts (MHA, GQA, MQA;
LayerNorm and RMSNorm; learned, rotary or no positions; tied and untied heads) under each
recompute mode: none, selective (QKᵀ, softmax, P·V checkpointed) and full (every layer
checkpointed), with attention explicit or through torch's fused scaled_dot_product_attention (its
CPU FlashAttention kernel, which keeps what FlashAttention-2 keeps on a GPU: Q, K, V, the output
and the log-sum-exp). What is measured is what autograd holds at the end of the forward pass; the
transient memory of backward (a recomputed layer, gradients in flight) is not.

Optimizer: a real torch.optim.AdamW after one step holds `exp_avg` and `exp_avg_sq` (and a scalar
`step`) per parameter; their bytes equal `optimizer_bytes("adamw", ...)` in fp32.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from calc.analysis.train.activations import _norm, activation_terms, layer_terms
from calc.analysis.train.executed import as_run
from calc.analysis.train.params import held
from calc.analysis.train.loss import LITGPT_CHUNK, LOSSES
from calc.analysis.train.precision import PRECISIONS
from calc.analysis.train.states import Tensor, optimizer_bytes
from calc.parts import MLA, Attention
from calc.parts.norm import Norm
from calc.parts.parallel import Parallel
from calc.spec.flat import flat_view
from cli_checks import full_sweep
from tiny_specs import TINY, tiny_spec
from live_memory import Live
from training_forward import TrainingForward

B, T = 3, 7
FP32 = 4


def saved_bytes(model: torch.nn.Module, run) -> int:
    """Bytes of the distinct storages autograd saves while `run()` runs, parameters left out."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = run()
    loss.backward()  # the graph was complete and usable
    return sum(kept.values())


@pytest.mark.parametrize("attention", ["eager", "flash"])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("name", TINY)
def test_saved_tensors_equal_the_activation_formula(name: str, recompute: str, attention: str) -> None:
    spec = tiny_spec(name)
    torch.manual_seed(0)
    model = TrainingForward(flat_view(spec))
    ids = torch.randint(0, spec.vocab_size, (B, T))
    measured = saved_bytes(model, lambda: model(ids, recompute, attention))
    # its GELU is torch's fused F.gelu, as litgpt's model runs one (GPT2MLP's gelu_new is written out: below)
    spec = as_run(spec, "reference", True, fused_gelu=True)
    (block,) = spec.blocks.values()
    flash = attention == "flash"
    layer = sum(t.bytes(1, False) for t in layer_terms(block, spec.d_model, B, T, FP32, recompute, flash))
    outside = sum(t.bytes(1, False) for t in activation_terms(spec, B, T, FP32, recompute))
    assert measured == spec.n_layers * layer + outside


def _gpu_dropout(x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    """F.dropout as a GPU runs it: at::dropout takes the fused native_dropout there, whose mask is bool
    (aten/src/ATen/native/Dropout.cpp, is_fused_kernel_acceptable); on the CPU its composite path keeps
    the mask in the input's dtype. p = 0 or eval mode returns the input, as F.dropout does."""
    return torch.native_dropout(x, p, training)[0] if training and p > 0 else x


LAYER_TYPES = ["llama", "mistral", "qwen3", "olmo2", "olmo3", "exaone4", "gemma", "gemma2", "gemma3_text", "glm4",
               "ernie4_5", "cohere2", "apertus", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "flex_olmo", "afmoe",
               "minimax", "minimax_m1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "glm4_moe",
               "hunyuan_v1_moe", "granitemoe", "ernie4_5_moe", "llama4_text", "cohere", "phimoe", "laguna", "gpt_oss",
               "seed_oss", "gpt2", "gptj", "phi", "gpt_neox"]
# Every model_type at 12 tokens (past every window and chunk of 5); at 7 too MiniMax's lightning blocks of 4 (two
# of them, not three) and a dense and a MoE model, the rest of the second length with --fuzz-long.
SEVEN = ("minimax", "minimax_m1", "llama", "mixtral")


@pytest.mark.parametrize(("model_type", "seq"), [
    *((name, 12) for name in LAYER_TYPES),
    *((name, 7) if name in SEVEN else full_sweep((name, 7)) for name in LAYER_TYPES)])
def test_layers_equal_what_transformers_holds(model_type: str, seq: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' own tiny models (tests/tiny_models.py; fp32, eager, training mode), measured layer
    by layer with saved-tensor hooks (tests/saved_tensors.py): each layer's bytes equal layer_terms —
    Q and K norms per head (Qwen3, OLMo-3, EXAONE-4, LFM2) or over the full width (OLMo-2), sliding
    layers' P over every key (Mistral, OLMo-3, EXAONE-4: their window of 5 is a mask in
    eager_attention_forward), Gemma's norm scale 1 + w made at each call, Gemma-2's soft-capped logits
    (tanh keeps its output), GLM-4's
    and ERNIE-4.5's cos and sin re-laid in each layer (partial rotary: GLM-4's 4 of 8), Cohere-2's
    written-out LayerNorm feeding attention and the MLP in parallel, Apertus's xIELU (python form), and the
    MoE blocks of transformers' grouped_mm experts (router scores, top-k indices, the sort's int64
    permutations and int32 offsets; Qwen2-MoE's gated shared expert; GraniteMoE's softmax over the top-k
    logits alone; AFMoE's output-gated attention), and
    MLA (DeepSeek-V3, V3.2 and GLM-5 with their indexer, which keeps nothing: its scores end in top-k
    indices), whose KV norm reads a slice of kv_a's output and so keeps its rotary key too, with their
    grouped sigmoid routers, DeepSeek-V2's group-limited greedy one (its group mask kept); MiniMax's lightning attention block by block (blocks of 4: two and three of them; MiniMax-M1's
    default 256, whose decay buffers dominate at this size); Llama-4's MoE, every expert over every token
    (Llama4TextMoe), and its NoPE layers' query temperature; Cohere's per-head Q/K LayerNorm with
    full-width scales; Phi-3.5-MoE's sparsemixer, one masked softmax per pick; Laguna's soft-capped
    router; gpt-oss's sinks, top-k-first router and clamped SwiGLU with biases; Seed-OSS's dropout of P
    and of each sublayer's output (its config's 0.1), the masks bool as a GPU keeps them (_gpu_dropout); GPT-2's,
    GPT-J's and Phi-2's GELU written out (gelu_new: test_gelu_forms_keep_what_transformers_keeps) and GPT-J's cos
    and sin re-laid twice in each layer (apply_rotary_pos_emb's repeat_interleave for K, then for Q); GPT-NeoX's
    parallel residual, whose two LayerNorms read the same input, F.layer_norm keeping it once."""
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    spec, model = spec_of(tiny_config(model_type)), _transformers_tiny(model_type).train()
    model.set_attn_implementation("eager")
    monkeypatch.setattr(torch.nn.functional, "dropout", _gpu_dropout)
    ids = torch.randint(0, VOCAB, (B, seq), generator=torch.Generator().manual_seed(0))
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    assert saved_per_layer(model, ids) == [sum(t.bytes(1, False) for t in layer_terms(block, spec.d_model, B, seq, FP32,
                                                                                        "none")) for block in blocks]


# How many more tensors of the MLP's width each of transformers' ACT2FN forms keeps than torch's fused F.gelu (its
# input), read off activations.py's ops: NewGELUActivation's pow keeps x, tanh its output, the product 0.5·x and
# 1 + tanh (3 more); FastGELUActivation's products keep x, 0.7978845608·x, 0.044715·x, 1 + 0.044715·x², 0.5·x and
# 1 + tanh, tanh its output (6 more); the python erf form's erf keeps x/√2, the product 0.5·x and 1 + erf, x
# itself nothing (2 more); GELUTanh (gelu_pytorch_tanh) and GELUActivation (gelu) are F.gelu.
MORE_THAN_FUSED = {"gelu_new": 3, "gelu_fast": 6, "gelu_python": 2, "gelu_pytorch_tanh": 0, "gelu": 0}


def _gpt2_measured(name: str, dtype: torch.dtype, width: int):  # noqa: ANN202
    """A tiny GPT-2 (eager, dropout 0) whose MLP runs ACT2FN[name], measured layer by layer with saved-tensor
    hooks; with its spec and one layer's layer_terms bytes at `width` bytes an element."""
    import transformers

    from saved_tensors import saved_per_layer
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    config = {**tiny_config("gpt2"), **_zeroed(GPT2_KEYS), "activation_function": name}
    torch.manual_seed(0)
    data = {k: v for k, v in config.items() if k != "model_type"}
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model("gpt2", **data),
                                                          attn_implementation="eager").to(dtype).train()
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))

    def layer(run) -> int:  # noqa: ANN001
        (block,) = run.blocks.values()
        return sum(t.bytes(1, False) for t in layer_terms(block, run.d_model, B, T, width, "none"))

    return saved_per_layer(model, ids), spec_of(config), layer


@pytest.mark.parametrize(("dtype", "width"), [(torch.float32, FP32), (torch.bfloat16, 2)])
@pytest.mark.parametrize("name", MORE_THAN_FUSED)
def test_gelu_forms_keep_what_transformers_keeps(name: str, dtype: torch.dtype, width: int) -> None:
    """GPT-2's MLP runs ACT2FN[activation_function] (tiny, fp32 and bf16, eager, dropout 0), measured layer by
    layer with saved-tensor hooks: each layer's bytes equal layer_terms for the form the config names, and
    exceed the fused form's (what litgpt's own model runs: fused_gelu) by MORE_THAN_FUSED tensors of B·T·d_ff."""
    measured, spec, layer = _gpt2_measured(name, dtype, width)
    assert measured == [layer(spec)] * spec.n_layers
    fused = layer(as_run(spec, "reference", True, fused_gelu=True))
    (block,) = spec.blocks.values()
    assert measured[0] - fused == MORE_THAN_FUSED[name] * B * T * block.mlp.d_ff * width


@pytest.mark.parametrize(("dtype", "width"), [(torch.float32, FP32), (torch.bfloat16, 2)])
def test_quick_gelu_keeps_its_input_sigmoid_and_output(dtype: torch.dtype, width: int) -> None:
    """QuickGELUActivation (x·σ(1.702·x), activations.py; CLIP's, named by GPT-2's activation_function here) keeps
    x and the sigmoid, and down keeps the output: three tensors of B·T·d_ff, one more than a plain MLP's
    input and output. torch has no fused form of it, so fused_gelu (litgpt's F.gelu) leaves it as it is."""
    measured, spec, layer = _gpt2_measured("quick_gelu", dtype, width)
    assert measured == [layer(spec)] * spec.n_layers
    (block,) = spec.blocks.values()
    plain = layer(spec.replaced(blocks={k: b.replaced(mlp=b.mlp.replaced(activation_form="fused"))
                                        for k, b in spec.blocks.items()}))
    assert measured[0] - plain == B * T * block.mlp.d_ff * width
    assert layer(as_run(spec, "reference", True, fused_gelu=True)) == measured[0]


@pytest.mark.parametrize("model_type", ["gptj", "phi"])
def test_gelu_new_layers_in_bf16_keep_what_transformers_keeps(model_type: str) -> None:
    """GPT-J's and Phi-2's layers (gelu_new; GPT-J's fp32 copies of Q and K and its cos and sin re-laid for K
    and for Q) in bf16, tiny, eager, measured layer by layer: each equals layer_terms at 2 bytes."""
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    spec, model = spec_of(tiny_config(model_type)), _transformers_tiny(model_type).to(torch.bfloat16).train()
    model.set_attn_implementation("eager")
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    assert saved_per_layer(model, ids) == [sum(t.bytes(1, False) for t in layer_terms(block, spec.d_model, B, T, 2, "none"))
                                           for block in blocks]


# Falcon's attention variants (tiny_models.py's is Falcon-7B's: multi_query, one shared norm in parallel):
# FalconAttention._split_heads picks K and V by list index ([-2], [-1]) in the multi-query and new-architecture
# layouts, each keeping its int64 index (16 B a layer); per head otherwise, by int index, keeping nothing.
FALCON_LAYOUTS = {"multi_query": ({}, 16), "per head": ({"multi_query": False}, 0),
                  "new architecture": ({"new_decoder_architecture": True, "num_kv_heads": 2}, 16),
                  "sequential": ({"parallel_attn": False}, 16)}


@pytest.mark.parametrize("layout", FALCON_LAYOUTS)
def test_falcon_layers_equal_what_transformers_holds(layout: str) -> None:
    """transformers' tiny Falcon (fp32, eager from the start: its attention is not switched after construction),
    measured layer by layer: each layer equals layer_terms, the list indices' 16 B included where it picks so."""
    import transformers

    from saved_tensors import saved_per_layer
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    changes, indices = FALCON_LAYOUTS[layout]
    config = {**tiny_config("falcon"), **changes}
    data = {k: v for k, v in config.items() if k != "model_type"}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model("falcon", **data),
                                                          attn_implementation="eager").train()
    spec = spec_of(config)
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))
    terms = [layer_terms(spec.blocks[spec.block_at(layer)], spec.d_model, B, T, FP32, "none")
             for layer in range(spec.n_layers)]
    assert saved_per_layer(model, ids) == [sum(t.bytes(1, False) for t in layer) for layer in terms]
    assert sum(t.bytes(1, False) for t in terms[0] if "list indices" in t.label) == indices


@pytest.mark.parametrize("seq", [4, 12])
@pytest.mark.parametrize("model_type", ["llama", "mistral", "gemma3_text"])
def test_sdpa_layers_equal_what_transformers_holds(model_type: str, seq: int) -> None:
    """The same measurement under transformers' sdpa attention (fp32, training mode) against the fused
    terms: a sliding layer whose window (5 in the tiny Mistral and Gemma-3) is shorter than the sequence
    gets a mask, so transformers repeats K and V to all heads and SDPA keeps the mask as an additive
    bias, B·T·T more; at 4 tokens no mask is made and the layer keeps what a full one does."""
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    spec, model = spec_of(tiny_config(model_type)), _transformers_tiny(model_type).train()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(0, VOCAB, (B, seq), generator=torch.Generator().manual_seed(0))
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    terms = (layer_terms(block, spec.d_model, B, seq, FP32, "none", True) for block in blocks)
    assert saved_per_layer(model, ids) == [sum(t.bytes(1, False) for t in layer) for layer in terms]


GPT2_KEYS = {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}
P_ONLY = {"attention_dropout": 0.1}


# The dropped-out P changes the routing, and what a MoE block keeps follows the routing by a few values per
# token (docs/training.md), so MLA's dropout is measured in the tiny DeepSeek models with every layer dense.
DENSE = {**{name: {"first_k_dense_replace": 3}
            for name in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa")},
         "glm4_moe_lite": {"mlp_layer_types": ["dense"] * 3}, "kimi_linear": {"first_k_dense_replace": 4}}


def _merged(config: dict, rates: dict) -> dict:
    """`config` with `rates` set in it, nested sections (MPT's and DBRX's attn_config) merged key by key."""
    return {**config, **{k: _merged(config.get(k, {}), v) if isinstance(v, dict) else v for k, v in rates.items()}}


def _zeroed(rates: dict) -> dict:
    """The same keys, each rate at 0.0 (a flag such as Falcon's alibi kept)."""
    return {k: _zeroed(v) if isinstance(v, dict) else 0.0 if isinstance(v, float) else v for k, v in rates.items()}


@pytest.mark.parametrize(("model_type", "rates", "kept_by"), [
    ("gpt2", GPT2_KEYS, "PRE"), ("gpt_bigcode", GPT2_KEYS, "PRE"),
    ("phi", {"attention_dropout": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}, "PRE"),
    ("starcoder2", {"attention_dropout": 0.1, "residual_dropout": 0.1, "embedding_dropout": 0.1}, "PRE"),
    ("opt", {"attention_dropout": 0.1, "dropout": 0.1}, "PR"),
    ("gpt_neox", {"attention_dropout": 0.1, "hidden_dropout": 0.1}, "PRE"),
    ("gptj", {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}, "PRE"),
    ("bloom", {"attention_dropout": 0.1, "hidden_dropout": 0.1}, "PR"),
    ("phi3", {"attention_dropout": 0.1, "resid_pdrop": 0.1}, "PR"),
    ("stablelm", {"attention_dropout": 0.1, "hidden_dropout": 0.1}, "PM"),
    ("falcon", {"attention_dropout": 0.1, "hidden_dropout": 0.1}, "M"),
    ("falcon", {"attention_dropout": 0.1, "hidden_dropout": 0.1, "alibi": True}, "PM"),
    ("falcon", {"hidden_dropout": 0.1, "parallel_attn": False}, "M"),
    ("falcon", {"attention_dropout": 0.1, "hidden_dropout": 0.1, "parallel_attn": False}, "R"),
    ("falcon", {"attention_dropout": 0.1, "hidden_dropout": 0.1, "parallel_attn": False, "alibi": True}, "PR"),
    ("dbrx", {"attn_config": {"attn_pdrop": 0.1}, "resid_pdrop": 0.1}, "PR"),
    *((name, P_ONLY, "P") for name in ("llama", "qwen3", "gemma2", "cohere2", "olmo2", "mixtral", "qwen3_moe",
                                        "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa",
                                        "glm4_moe_lite", "kimi_linear", "falcon_h1", "zamba2")),
    *((name, P_ONLY, "") for name in ("ernie4_5", "lfm2"))])
def test_dropout_keeps_what_transformers_keeps(model_type: str, rates: dict[str, float], kept_by: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' own tiny models (fp32, eager, training mode) with their configs' dropout keys at 0.1
    (GPT2Config's and GPTBigCodeConfig's defaults; Phi-2's resid_pdrop and StarCoder2's three keys in their
    released configs; OPTConfig's `dropout`; the Llama-like configs' attention_dropout) against the same
    model with 0.0: the extra bytes autograd keeps are the dropout terms, masks bool as a GPU keeps them
    (_gpu_dropout): per layer the dropped-out P (fp32) and its mask (`kept_by` P), the two sublayer
    outputs' masks (R; Phi's and GPT-J's parallel ones too) or the MLP's alone (M: StableLM's hidden_dropout,
    Falcon's on the summed outputs); the embeddings' mask once (E). The keys: GPT-NeoX's, BLOOM's, GPT-J's,
    Phi-3's, DBRX's, StableLM's and Falcon's (P's dropout with ALiBi only; a sequential block's attention output
    at attention_dropout, R) as their modeling code applies them; MLA's attention_dropout (DENSE: dense layers), Falcon-H1's beside Mamba2, Zamba2's shared block's.
    ERNIE-4.5's and LFM2's attention passes dropout 0.0 whatever the config says, and keeps nothing more."""
    import transformers

    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    monkeypatch.setattr(torch.nn.functional, "dropout", _gpu_dropout)
    config = _merged(_merged(tiny_config(model_type), DENSE.get(model_type, {})), rates)
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))

    def kept(off: bool) -> int:
        data = {k: v for k, v in (_merged(config, _zeroed(rates)) if off else config).items() if k != "model_type"}
        torch.manual_seed(0)
        # eager from the start: Falcon's attention cannot be switched after construction
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **data),
                                                              attn_implementation="eager").train()
        return saved_bytes(model, lambda: model(ids, labels=ids).loss)

    def formula(spec) -> int:
        layers = (spec.blocks[spec.block_at(i)] for i in range(spec.n_layers))
        kept = sum(t.bytes(1, False) for block in layers for t in layer_terms(block, spec.d_model, B, T, FP32, "none"))
        return kept + sum(t.bytes(1, False) for t in activation_terms(spec, B, T, FP32, "none"))

    spec = spec_of(config)
    layers = [spec.blocks[spec.block_at(i)] for i in range(spec.n_layers)]
    mixers = [m for b in layers for _ in range(b.pairs)
              for m in (b.attention.mixers if isinstance(b.attention, Parallel) else (b.attention,))]
    attentions = [m for m in mixers if isinstance(m, (Attention, MLA))] + [b.shared.block.attention for b in layers
                                                                         if b.shared is not None]
    measured = kept(False) - kept(True)
    assert measured == formula(spec) - formula(as_run(spec, "reference", False))
    p_bytes = sum(B * a.n_heads * T * T * (FP32 + 1) for a in attentions) * ("P" in kept_by)
    outputs = 2 * ("R" in kept_by) + ("M" in kept_by)
    n_d = B * T * spec.d_model
    assert measured == p_bytes + spec.n_layers * outputs * n_d + n_d * ("E" in kept_by)


def test_stablelm_per_head_layernorm_keeps_what_transformers_keeps() -> None:
    """StableLM-2-12B's qk_layernorm (StableLmLayerNormPerHead: one LayerNorm per head, each over its
    own [B, 1, T, head_dim] slice of the projection) on transformers' tiny model (fp32, eager, training
    mode), measured layer by layer with saved-tensor hooks: each layer's bytes equal layer_terms."""
    import transformers

    from saved_tensors import saved_per_layer
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    config = {**tiny_config("stablelm"), "qk_layernorm": True}
    torch.manual_seed(0)
    data = {k: v for k, v in config.items() if k != "model_type"}
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model("stablelm", **data))
    model.train().set_attn_implementation("eager")
    spec = spec_of(config)
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    terms = (layer_terms(block, spec.d_model, B, T, FP32, "none") for block in blocks)
    assert saved_per_layer(model, ids) == [sum(t.bytes(1, False) for t in layer) for layer in terms]


@pytest.mark.parametrize("seq", [7, 12])
@pytest.mark.parametrize("model_type", ["gemma3n_text", "gemma4_text"])
def test_gemma_ple_layers_equal_what_transformers_holds(model_type: str, seq: int) -> None:
    """Gemma-3n's and Gemma-4's text layers (tiny, fp32, eager), measured as above: RMSNorms taking the
    rsqrt as a pow (its input and output kept), V's weightless norm (on Gemma-4's global layer V is K's
    projection, so its input is the K norm's), the per-layer input sublayer; Gemma-3n's AltUp (the
    streams' whole storage read through views, both router passes, the coefficients, the innovation),
    LAuReL and the gate's Gaussian top-k on its first layer; Gemma-4's layer scalar and the MoE beside
    the dense MLP with its router norm and scales and its three extra norms. The first layer also holds
    the per-layer inputs, one [B, T, L, p] tensor every layer reads a slice of: activation_terms counts
    it outside the layers."""
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    config = tiny_config(model_type)
    spec, model = spec_of(config), _transformers_tiny(model_type).train()
    model.set_attn_implementation("eager")
    ids = torch.randint(0, VOCAB, (B, seq), generator=torch.Generator().manual_seed(0))
    measured = saved_per_layer(model, ids)
    measured[0] -= B * seq * config["num_hidden_layers"] * config["hidden_size_per_layer_input"] * FP32
    assert measured == [sum(t.bytes(1, False) for t in layer_terms(spec.blocks[spec.block_at(layer)], spec.d_model, B, seq,
                                                                   FP32, "none")) for layer in range(spec.n_layers)]


@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_text", "lfm2_moe"])
def test_attention_layers_of_hybrids_equal_what_transformers_holds(model_type: str) -> None:
    """The softmax-attention layers of the hybrids, measured as above: Qwen3-Next's and Qwen3.5's gated
    attention (the gate inside q_proj, so the Q norm's input is the whole projection; sigmoid's output
    and the gated heads' output; partial rotary, 2 of 8). Their DeltaNet layers are checked below."""
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    spec, model = spec_of(tiny_config(model_type)), _transformers_tiny(model_type).train()
    model.set_attn_implementation("eager")
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    measured = saved_per_layer(model, ids)
    attention = [i for i, block in enumerate(blocks) if isinstance(block.attention, Attention)]
    assert attention and [measured[i] for i in attention] == [
        sum(t.bytes(1, False) for t in layer_terms(blocks[i], spec.d_model, B, T, FP32, "none")) for i in attention]


RECURRENT = ("mamba2", "gated_deltanet", "kda", "short_conv")


@pytest.mark.parametrize("model_type", ["nemotron_h", "bamba", "granitemoehybrid", "qwen3_next", "qwen3_5_text",
                                        "olmo_hybrid", "kimi_linear", "lfm2", "lfm2_moe"])
def test_recurrent_layers_equal_what_the_gpu_kernels_keep(model_type: str) -> None:
    """The recurrent mixers as a GPU run keeps them: transformers' own tiny model with its fused kernels
    (mamba_ssm's combined Mamba2 Function, fla's chunked gated-delta and KDA rules, causal-conv1d) stood
    in by what each saves (tests/kernel_saves.py), so the torch ops around them are measured for real;
    each recurrent layer's bytes equal layer_terms. transformers' CPU fallback keeps more: for LFM2's
    short conv exactly the padded tail of F.conv1d's output, B·d·(kernel − 1) per layer."""
    from kernel_saves import gpu_kernels
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    spec, model = spec_of(tiny_config(model_type)), _transformers_tiny(model_type).train()
    model.config.use_cache = False  # a training step keeps no cache (Mamba2's fused path needs none)
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    recurrent = [i for i, block in enumerate(blocks) if block.attention is not None and block.attention.kind in RECURRENT]
    with gpu_kernels(model):
        kept = saved_per_layer(model, ids)
    assert recurrent and [kept[i] for i in recurrent] == [
        sum(t.bytes(1, False) for t in layer_terms(blocks[i], spec.d_model, B, T, FP32, "none")) for i in recurrent]
    if model_type == "lfm2":
        cpu = saved_per_layer(model, ids)
        assert [cpu[i] - kept[i] for i in recurrent] == [B * spec.d_model * (blocks[i].attention.kernel - 1) * FP32
                                                         for i in recurrent]


@pytest.mark.parametrize("model_type", ["nemotron_h", "bamba", "granitemoehybrid", "qwen3_next", "qwen3_5_text",
                                        "olmo_hybrid", "kimi_linear", "lfm2", "lfm2_moe", "minimax"])
def test_frozen_recurrent_layers_keep_what_the_gpu_kernels_need(model_type: str) -> None:
    """The same models as above, every weight frozen but the embedding's (so each layer's input needs a
    gradient, as under LoRA adapters upstream), the mixers with no adapter (LoRA's targets name none of their
    projections): the kernels' own saves stay, and so does every torch op's save that the input's gradient
    reads, but in_proj's input, out_proj's (C·conv, the gated output), a gated norm's normed x, the gates'
    bottleneck inputs (KDA), exp(A_log)'s output and the softplus result that multiplies −exp(A_log) go —
    the terms marked weight_grad. The MLP (or MoE) after them follows the dense rule (frozen.py). Exact for
    Mamba2, gated DeltaNet, KDA, short conv and lightning layers."""
    from calc.analysis.train import Setup
    from calc.analysis.train.frozen import frozen_layer
    from kernel_saves import gpu_kernels
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    spec, model = spec_of(tiny_config(model_type)), _transformers_tiny(model_type).train()
    model.config.use_cache = False
    model.requires_grad_(False).get_input_embeddings().weight.requires_grad_(True)
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))
    blocks = [spec.blocks[spec.block_at(layer)] for layer in range(spec.n_layers)]
    mixed = [i for i, block in enumerate(blocks) if block.attention is not None
             and block.attention.kind in (*RECURRENT, "lightning")]
    setup = Setup(T, B, lora_rank=4, lora_targets=())
    full = [sum(t.bytes(1, False) for t in layer_terms(blocks[i], spec.d_model, B, T, FP32, "none")) for i in mixed]
    frozen = [sum(t.bytes(1, False) for t in frozen_layer(layer_terms(blocks[i], spec.d_model, B, T, FP32, "none", True,
                                                                      setup.norms), blocks[i], setup)) for i in mixed]
    with gpu_kernels(model):
        kept = saved_per_layer(model, ids)
    assert mixed and [kept[i] for i in mixed] == frozen
    assert all(f < whole for f, whole in zip(frozen, full))


@pytest.mark.parametrize("name", [n for n in TINY if n.startswith("llama") and "bias" not in n])
def test_torchtitan_op_checkpointing_keeps_what_the_formula_says(name: str) -> None:
    """torchtitan's per-op policy run for real: after forward the live storages (parameters left out) are the layers' op terms and what lies outside the layers, plus the causal mask the
    checkpoints' closures hold (T² fp32). With a gated MLP (seven matmuls) a second step saves the other
    half of them (the policy's count carries over): Q's output fewer in each layer, as layer_terms'
    larger set says."""
    spec = tiny_spec(name)
    torch.manual_seed(0)
    model = TrainingForward(flat_view(spec))
    ids = torch.randint(0, spec.vocab_size, (B, T))
    (block,) = spec.blocks.values()
    layer = sum(t.bytes(1, False) for t in layer_terms(block, spec.d_model, B, T, FP32, "op", True))
    outside = sum(t.bytes(1, False) for t in activation_terms(spec, B, T, FP32, "op"))
    kept = []
    for _ in range(2):
        with Live(*model.parameters(), ids) as live:
            loss = model(ids, "op", "flash")
            # the ids were made before the tracker (the embedding keeps them); the loss itself is no activation
            kept.append(live.now + ids.nbytes - loss.untyped_storage().nbytes() - T * T * FP32)
            loss.backward()
    assert kept[0] == spec.n_layers * layer + outside
    fewer = block.attention.q_dim if block.mlp.gated else 0  # six matmuls (a plain MLP): the same set every step
    assert kept[0] - kept[1] == spec.n_layers * B * T * fewer * FP32


@pytest.mark.parametrize("name", TINY)
def test_adamw_state_after_one_step(name: str) -> None:
    spec = tiny_spec(name)
    torch.manual_seed(0)
    model = TrainingForward(flat_view(spec))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randint(0, spec.vocab_size, (B, T))).backward()
    optimizer.step()
    moments = sum(state[key].nbytes for state in optimizer.state.values() for key in ("exp_avg", "exp_avg_sq"))
    steps = {state["step"].numel() for state in optimizer.state.values()}
    assert len(optimizer.state) == len(list(model.parameters())) and steps == {1}  # one scalar step count each
    assert moments == optimizer_bytes("adamw", held(spec).tensors)
    assert sum(p.numel() for p in model.parameters()) == held(spec).params


@pytest.mark.parametrize("name", ["gpt2-mha-learned", "llama-mqa-tied"])
def test_a_later_micro_batch_runs_beside_the_accumulated_gradients(name: str) -> None:
    """Gradient accumulation measured: the second micro-batch's forward peaks above the first's by
    exactly the gradients the first left (every parameter's, fp32 here), and its backward by at least
    that — the term peak.py adds to a later micro-batch's moments."""
    spec = tiny_spec(name)
    torch.manual_seed(0)
    model = TrainingForward(flat_view(spec))
    ids = torch.randint(0, spec.vocab_size, (B, T))
    with Live(*model.parameters(), ids) as live:
        for micro_batch in "12":
            live.tag = "forward " + micro_batch
            loss = model(ids)
            live.tag = "backward " + micro_batch
            loss.backward()
            del loss
    grads = held(spec).params * FP32
    assert sum(p.grad.nbytes for p in model.parameters()) == grads
    assert live.peaks["forward 2"] - live.peaks["forward 1"] == grads
    assert live.peaks["backward 2"] - live.peaks["backward 1"] >= grads - max(p.nbytes for p in model.parameters())


@pytest.mark.parametrize("frozen", [False, True])
def test_an_eager_rmsnorm_on_bf16_keeps_fp32_copies(frozen: bool) -> None:
    """transformers' LlamaRMSNorm on a bf16 input (the form litgpt's and torchtune's RMSNorm take too:
    x.float() · rsqrt(mean(x²) + ε), cast back, times the weight) keeps the fp32 input and rsqrt, and the
    cast-back normed x only where the weight trains: what _norm's "upcast" and "upcast-frozen" count."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    rows, width = 24, 40
    norm = LlamaRMSNorm(width).to(torch.bfloat16).requires_grad_(not frozen)
    x = torch.randn(rows, width, dtype=torch.bfloat16, requires_grad=True)
    kept = saved_bytes(norm, lambda: norm(x).float().sum())
    counted = _norm(Norm.model_construct(kind="rmsnorm", weight=True, bias=False), rows, width, 2, "norm", "upcast-frozen" if frozen else "upcast")
    assert kept == sum(t.bytes(1, False) for t in counted)


class _LoRA(torch.nn.Module):
    """A LoRA adapter beside a frozen linear, as PEFT's and torchtune's LoRALinear run it: base(x) + B(A(drop(x)))."""

    def __init__(self, base: torch.nn.Linear, rank: int, dropout: float) -> None:
        super().__init__()
        self.base, self.dropout = base, dropout
        self.a = torch.nn.Linear(base.in_features, rank, bias=False, dtype=base.weight.dtype)
        self.b = torch.nn.Linear(rank, base.out_features, bias=False, dtype=base.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dropped = F.dropout(x, self.dropout, self.training) if self.dropout else x
        return self.base(x) + self.b(self.a(dropped))


LLAMA_LINEARS = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
                 "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


@pytest.mark.parametrize(("targets", "dropout", "attention"), [
    *((targets, dropout, "sdpa") for targets in [("q", "v"), ("o",), ("gate", "up"), ("down",), tuple(LLAMA_LINEARS)]
      for dropout in (False, True)),
    (("q", "v"), False, "eager"), (("o",), False, "eager")])
def test_a_frozen_base_keeps_only_what_its_adapters_read(targets: tuple[str, ...], dropout: bool, attention: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' tiny Llama in bf16, every weight frozen, LoRA adapters on `targets` (with dropout 0.1 or
    none), saved-tensor hooks layer by layer: a frozen linear keeps no input, so each layer keeps what full
    training keeps less the inputs no adapter reads as they are (frozen.py) and the norms' normed x (their
    weights frozen), plus the adapters' own tensors (A's output; with dropout the dropped-out input and its
    mask). The first layer, whose input comes from the frozen embedding and needs no gradient, keeps less
    and is left out. Explicit attention keeps W_O's input (its transposed copy) only for an adapter on o,
    and in bf16 its softmax's fp32 output beside the cast copy
    (test_a_16_bit_eager_softmax_keeps_what_it_computes_in)."""
    from calc.analysis.train import Setup, train
    from saved_tensors import saved_per_layer
    from test_hybrids import _transformers_tiny
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    rank = 4
    monkeypatch.setattr(torch.nn.functional, "dropout", _gpu_dropout)
    model = _transformers_tiny("llama").to(torch.bfloat16).requires_grad_(False).train()
    model.set_attn_implementation(attention)
    for layer in model.model.layers:
        for target in targets:
            parent, name = LLAMA_LINEARS[target].split(".")
            module = getattr(layer, parent)
            setattr(module, name, _LoRA(getattr(module, name), rank, 0.1 if dropout else 0.0))
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))
    spec = spec_of(tiny_config("llama"))
    t = train(spec, Setup(T, B, lora_rank=rank, lora_targets=targets, lora_dropout=dropout, precision="bf16",
                          norm_upcast=True, attention="flash" if attention == "sdpa" else "eager"))
    (_, layers, terms), = t.layers
    assert saved_per_layer(model, ids)[1:] == [t.layer_bytes(terms)] * (layers - 1)


def _adapted_tiny(model_type: str, linears: dict[str, str], targets: tuple[str, ...], attention: str,
                  dtype: torch.dtype):  # noqa: ANN202
    """transformers' tiny `model_type` in `dtype`, every weight frozen, LoRA adapters (rank 4, no dropout) on
    the attention's `linears` that `targets` name: the model, token ids and our spec of it."""
    from test_hybrids import _transformers_tiny
    from oracle import spec_of
    from tiny_models import VOCAB, tiny_config

    model = _transformers_tiny(model_type).to(dtype).requires_grad_(False).train()
    model.set_attn_implementation(attention)
    for layer in model.model.layers:
        for target in targets:
            setattr(layer.self_attn, linears[target], _LoRA(getattr(layer.self_attn, linears[target]), 4, 0.0))
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))
    return model, ids, spec_of(tiny_config(model_type))


@pytest.mark.parametrize("targets", [("q", "v"), ("o",)])
@pytest.mark.parametrize("model_type", ["qwen3_moe", "qwen2_moe", "mixtral", "olmoe"])
def test_a_frozen_moe_block_keeps_no_input_of_its_frozen_experts(model_type: str, targets: tuple[str, ...]) -> None:
    """transformers' tiny MoE models (grouped_mm experts) in bf16, adapters on the attention only, every later
    layer measured: the frozen router keeps no input, the frozen experts' grouped matmuls keep neither the
    routed rows nor the product down reads (SiLU's input and output and up stay, and each expert's output
    beside its routing weight), Qwen2-MoE's frozen shared expert and its gate likewise, and a Q or K norm
    with a frozen weight keeps its fp32 input and rsqrt but no normed x (Qwen3-MoE per head, OLMoE over the
    full width): frozen.py's rule with the dense MLP's. The softmax routers compute in fp32 (their scores and
    renormalised weights kept so), Mixtral's handing its weights to the experts in fp32 (MoE.router_fp32)."""
    from calc.analysis.train import Setup, train
    from saved_tensors import saved_per_layer

    model, ids, spec = _adapted_tiny(model_type, {t: LLAMA_LINEARS[t].split(".")[1] for t in targets}, targets,
                                     "sdpa", torch.bfloat16)
    t = train(spec, Setup(T, B, lora_rank=4, lora_targets=targets, precision="bf16", norm_upcast=True))
    (_, layers, terms), = t.layers
    assert saved_per_layer(model, ids)[1:] == [t.layer_bytes(terms)] * (layers - 1)


@pytest.mark.parametrize("targets", [("q",), ("o",), ("q", "o")])
@pytest.mark.parametrize("model_type", ["deepseek_v3", "deepseek_v2", "glm4_moe_lite"])
def test_a_frozen_mla_keeps_only_the_latents_its_adapters_read(model_type: str, targets: tuple[str, ...]) -> None:
    """MLA frozen, fp32 and eager (CPU's SDPA runs MLA's unequal Q and V head widths through its math path, which
    no GPU run takes), the second layer measured: q_a and kv_a, which take no adapter, keep no normed input;
    each latent norm keeps its input and rsqrt (the KV one its input's whole storage, the rotary key with it),
    its frozen weight no normed x; q_b's input (the Q latent) stays for an adapter on q (DeepSeek-V2's plain q
    projection reads the normed input instead), kv_b's never; W_O's input for an adapter on o; the MoE block
    as above."""
    from calc.analysis.train import Setup
    from calc.analysis.train.frozen import frozen_layer
    from saved_tensors import saved_per_layer

    linears = {"q": "q_proj" if model_type == "deepseek_v2" else "q_b_proj", "o": "o_proj"}
    model, ids, spec = _adapted_tiny(model_type, linears, targets, "eager", torch.float32)
    block = spec.blocks[spec.block_at(1)]
    frozen = frozen_layer(layer_terms(block, spec.d_model, B, T, FP32, "none", False, "act-frozen"), block,
                          Setup(T, B, lora_rank=4, lora_targets=targets, attention="eager"))
    adapters = len(targets) * B * T * 4 * FP32  # each adapter's A output (rank 4), for B's gradient
    assert saved_per_layer(model, ids)[1] == sum(t.bytes(1, False) for t in frozen) + adapters


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("model_type", ["llama", "gpt2", "llama4_text"])
def test_a_16_bit_eager_softmax_keeps_what_it_computes_in(model_type: str, dropout: float,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' own eager_attention_forward on bf16 Q, K and V (one KV head per query head): QKᵀ keeps
    Q and K, P·V keeps V and its P. Llama's softmax(..., dtype=float32).to(query.dtype) keeps the fp32 P for
    the softmax's backward and P·V its bf16 copy, or the dropout's output and mask (the copy then freed);
    GPT-2's and Llama-4's softmax runs in bf16 and keeps one P. What layer_terms counts for P, as the
    adapter's softmax_fp32 says."""
    import importlib
    from oracle import spec_of
    from tiny_models import tiny_config

    monkeypatch.setattr(torch.nn.functional, "dropout", _gpu_dropout)
    family = model_type.removesuffix("_text")
    forward = importlib.import_module(f"transformers.models.{family}.modeling_{family}").eager_attention_forward
    rate = "attn_pdrop" if model_type == "gpt2" else "attention_dropout"
    spec = spec_of({**tiny_config(model_type), rate: dropout})
    block = spec.blocks[spec.block_at(0)]
    module = torch.nn.Module()
    module.num_key_value_groups = 1
    q, k, v = (torch.randn(B, block.attention.n_heads, T, block.attention.head_dim, dtype=torch.bfloat16,
                           requires_grad=True) for _ in "qkv")
    kept = saved_bytes(module, lambda: forward(module, q, k, v, None, scaling=0.5, dropout=dropout)[0].float().sum())
    terms = layer_terms(block, spec.d_model, B, T, 2, "none")
    p = [t for t in terms if t.label.startswith(("softmax", "P's"))]
    assert kept == 3 * q.nbytes + sum(t.bytes(1, False) for t in p)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gptj_eager_attention_keeps_fp32_copies_of_q_and_k(dtype: torch.dtype, dropout: float,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-J's eager_attention_forward (transformers' modeling_gptj.py) multiplies
    query.to(torch.float32) by key.to(torch.float32): on 16-bit Q and K, QKᵀ keeps those fp32 copies and
    nothing keeps Q and K themselves; the softmax of the fp32 logits keeps its fp32 P, P·V the cast-back
    copy (or the dropout's output and mask). In fp32 the casts are no-ops. What layer_terms counts for Q, K,
    V and P (Attention.qk_fp32, set by the GPT-J adapter)."""
    from transformers.models.gptj.modeling_gptj import eager_attention_forward
    from oracle import spec_of
    from tiny_models import tiny_config

    monkeypatch.setattr(torch.nn.functional, "dropout", _gpu_dropout)
    spec = spec_of({**tiny_config("gptj"), "attn_pdrop": dropout})
    block = spec.blocks[spec.block_at(0)]
    module = torch.nn.Module()
    q, k, v = (torch.randn(B, block.attention.n_heads, T, block.attention.head_dim, dtype=dtype, requires_grad=True)
               for _ in "qkv")
    kept = saved_bytes(module, lambda: eager_attention_forward(module, q, k, v, None, scaling=0.5,
                                                               dropout=dropout)[0].float().sum())
    width = torch.finfo(dtype).bits // 8
    terms = [t for t in layer_terms(block, spec.d_model, B, T, width, "none")
             if t.label.startswith(("Q and K", "Q, K, V", "V", "softmax", "P's"))]
    assert kept == sum(t.bytes(1, False) for t in terms)
    assert any(t.bytes_per == 4 for t in terms if t.label.startswith("Q and K")) == (dtype == torch.bfloat16)


# --- the loss, the optimizer step, autocast: measured with a live-storage tracker (tests/live_memory.py)

V, D, N = 2048, 32, 512  # vocabulary, width, tokens (a multiple of litgpt's 128-token chunks)


def _fp32(head, h, y, keep):  # transformers: logits = lm_head(...); loss_function(logits) upcasts a copy
    logits = head(h)
    return F.cross_entropy(logits.float(), y)


def _chunked(head, h, y, keep):  # torchtune's CEWithChunkedOutputLoss: the model returns 8 bf16 chunks
    logits = [head(c) for c in h.chunk(8)]
    return sum(F.cross_entropy(x.float(), t, reduction="sum") for x, t in zip(logits, y.chunk(8))) / len(y)


def _chunk_loss(head, chunk, target):  # torchtune's compute_cross_entropy: logits = projection(chunk), then .float()
    logits = head(chunk)
    return F.cross_entropy(logits.float(), target, reduction="sum")


def _linear_chunked(head, h, y, keep):  # torchtune's LinearCrossEntropyLoss: the head runs inside, per chunk
    return sum(_chunk_loss(head, c, t) for c, t in zip(h.chunk(8), y.chunk(8))) / len(y)


def _fp32_chunked(head, h, y, keep):  # litgpt: lm_head_chunk_size=128, Fabric's convert_output to fp32, chunked CE;
    keep += [x.float() for x in [head(c) for c in h.split(LITGPT_CHUNK)]]  # the loop keeps `logits`
    losses = [F.cross_entropy(x, t, reduction="none") for x, t in zip(keep, y.split(LITGPT_CHUNK))]
    return torch.cat(losses).sum() / len(y)


def _fp32_whole_chunked(head, h, y, keep):  # litgpt's full.py: model(input_ids) whole, fp32, chunked_cross_entropy
    keep.append(head(h).float())  # the loop keeps `logits` (full.py also drops the last position: one row fewer)
    losses = [F.cross_entropy(x, t, reduction="none") for x, t in zip(keep[0].split(LITGPT_CHUNK), y.split(LITGPT_CHUNK))]
    return torch.cat(losses).sum() / len(y)


@pytest.mark.parametrize(("name", "run"), [("fp32", _fp32), ("chunked", _chunked), ("linear-chunked", _linear_chunked),
                                           ("fp32-chunked", _fp32_chunked), ("fp32-whole-chunked", _fp32_whole_chunked)])
def test_loss_keeps_and_holds_what_loss_py_says(name: str, run) -> None:
    """Kept after forward, and the peaks of forward and backward, beyond the bf16 head and its input:
    the vocabulary-wide bytes are exact; per-token scalars (losses, log-sum-exps) are allowed for."""
    torch.manual_seed(0)
    head = torch.nn.Linear(D, V, bias=False).to(torch.bfloat16)
    h = torch.randn(N, D, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, V, (N,))
    loss, keep = LOSSES[name], []
    with Live(head.weight, h, y) as live:
        live.tag = "forward"
        value = run(head, h, y, keep)
        kept = live.now
        live.tag = "backward"
        value.backward()
    grads = head.weight.grad.nbytes + h.grad.nbytes  # made in backward, not the loss's
    slack = 16 * N + 64
    assert 0 <= kept - loss.held * N * V <= slack
    assert 0 <= live.peaks["forward"] - kept - loss.transient("forward", N, V, D) <= slack
    # kept's per-token scalars (the chunks' losses) may be gone by backward's peak: allowed for either way
    assert -slack <= live.peaks["backward"] - kept - loss.transient("backward", N, V, D) <= slack + grads


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_adamw_step_temporaries(impl: str) -> None:
    """torch's foreach AdamW makes sqrt(v) for every parameter at once (one state's worth); the fused
    kernel makes nothing full-size: what peak.py's optimizer-step moment adds."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(64, 64)) for _ in range(4)]
    optimizer = torch.optim.AdamW(params, **{impl: True})
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer.step()  # the states exist from here on
    with Live(*params, *(p.grad for p in params), *(s[k] for s in optimizer.state.values() for k in s)) as live:
        optimizer.step()
    state = sum(p.numel() for p in params) * FP32
    assert live.peaks[""] - state == 0 if impl == "foreach" else live.peaks[""] < state // 8


def test_pure_bf16_adamw_states_take_the_parameters_width() -> None:
    """torch's AdamW allocates m and v with zeros_like(param): 4 bytes per bf16 parameter, as precision 'bf16' says."""
    params = [torch.nn.Parameter(torch.randn(64, 32, dtype=torch.bfloat16))]
    optimizer = torch.optim.AdamW(params)
    params[0].grad = torch.randn_like(params[0])
    optimizer.step()
    moments = sum(s[k].nbytes for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq"))
    assert moments == optimizer_bytes("adamw", [Tensor(1, 64, 32)], PRECISIONS["bf16"].state)


def test_autocast_saves_bf16_weight_copies() -> None:
    """fp32 weights under bf16 autocast: a linear saves the bf16 copy of its weight (2 B per parameter)
    beside its bf16 input — the term precision 'fp32-autocast' adds."""
    linear = torch.nn.Linear(64, 96, bias=False)
    x = torch.randn(5, 64, requires_grad=True)  # as every layer but the first sees it
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autocast("cpu", dtype=torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = linear(x)
    out.sum().backward()
    assert sum(saved.values()) == 2 * 64 * 96 + 2 * 5 * 64


def test_a_flat_parameter_gradient_is_assembled_beside_its_views_gradients() -> None:
    """torch FSDP1 runs forward on views of its flat parameter (torch/distributed/fsdp/_flat_param.py,
    _get_unflat_views: `torch.split(flat_param, numels)` then `.view(shape)`), so autograd's split backward
    assembles the flat gradient from the views' gradients once the last view's arrives: both exist for a
    moment, beside an accumulated `.grad` (no_sync) when there is one. For the root unit the last view is
    the embedding, so this is backward's last moment. Measured here on a flat embedding, norm and untied
    head: twice the flat gradient (and a few activations), accumulating or not; peak.py's FSDP1 root moment
    counts the same, 2 × the root's parameters × 2 bytes for gemma.json (vocab 256,000 × hidden 2,048)."""
    from calc.analysis.train import Setup, train
    from calc.spec.load import load_spec
    from oracle import CONFIG_DIR

    vocab, d, n = 4096, 256, 8
    flat = torch.nn.Parameter(torch.randn(2 * vocab * d + d, dtype=torch.bfloat16))
    ids = torch.randint(0, vocab, (n,))

    def backward() -> None:
        emb, norm, head = (t.view(shape) for t, shape in zip(torch.split(flat, [vocab * d, d, vocab * d]),
                                                               ((vocab, d), (d,), (vocab, d))))
        F.linear(F.embedding(ids, emb) * norm, head).float().sum().backward()

    activations = n * d * 2 * 2 + n * vocab * (2 + 4)  # embedding out, its product with norm; bf16 and fp32 logits
    for accumulating in (False, True):  # the second backward runs beside the first's .grad
        with Live(flat, ids, *((flat.grad,) if accumulating else ())) as live:
            backward()
        assert 2 * flat.nbytes <= max(live.peaks.values()) <= 2 * flat.nbytes + activations
    spec = load_spec(str(CONFIG_DIR / "model_types" / "gemma.json"))
    t = train(spec, Setup(512, 1, gpus=4, zero=3, precision="bf16", recompute="full", tied=False, fsdp1=True))
    parts = dict(next(m for m in t.moments if m.name == "backward, FSDP1's root gradient assembled").parts)
    assert parts["FSDP1: the root's parameters' gradients and the flat gradient autograd assembles from them"] \
        == 2 * (2 * 256000 * 2048) * 2


@pytest.mark.parametrize("name", ["chunked", "linear-chunked"])
def test_a_chunked_head_sums_its_weight_gradients_out_of_place(name: str) -> None:
    """A head applied chunk by chunk gets one weight gradient per chunk, which autograd sums out of place
    (F.linear's weight gradient is a view, so the input buffer cannot add into it): from the second chunk
    on the sum so far, the chunk's and the new sum exist together, 3 × the head's gradient, also where no
    dispatch mode watches (the profiler's record of the allocator). With the head in the model
    (CEWithChunkedOutputLoss) every chunk's loss backward runs first (the engine takes the latest sequence
    number first), so the other chunks' logits gradients are there too: peak.py's moment "backward, the
    head's second chunk", exact here to the per-token scalars."""
    from calc.analysis.train.peak import _head_accumulated
    from dtensor_tp import Allocated

    vocab, d, n = 2048, 2048, 512  # a head gradient (8 MiB) above the logits (2 MiB), as in a real model
    torch.manual_seed(0)
    head = torch.nn.Linear(d, vocab, bias=False).to(torch.bfloat16)
    h = torch.randn(n, d, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, vocab, (n,))
    run = {"chunked": _chunked, "linear-chunked": _linear_chunked}[name]
    with Live(head.weight, h, y) as live:
        live.tag = "forward"
        value = run(head, h, y, [])
        kept = live.now
        live.tag = "backward"
        value.backward()
    freed, parts = _head_accumulated(LOSSES[name], n, vocab, d, head.weight.nbytes)
    assert abs(live.peaks["backward"] - kept - (sum(b for _, b in parts) - freed)) <= 16 * n + 64  # kept's scalars
    head.weight.grad = None
    value = run(head, h, y, [])
    with Allocated() as allocated:
        value.backward()
    assert allocated.peak >= 3 * head.weight.nbytes
