"""What every command shares: click settings, the MODEL argument with `--set`, `--json`, and the
option types of sizes and dtypes. Defining these imports nothing beyond click."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

if TYPE_CHECKING:  # fractions loads decimal: only an option that is given a fraction imports it
    from fractions import Fraction

__all__ = ["CONTEXT", "KV_DTYPE", "POSITIVE", "SHARE", "TEXT", "TOKENS", "TokenCount", "WEIGHT_DTYPE", "complete_model", "dtype_option",
           "json_option", "kv_dtype_option", "load_model", "model_options", "models_argument", "one_model", "quant_option",
           "read_against_model", "pass_options", "seq_max_option", "seq_option", "set_option", "sizing_options", "wrote"]

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# A count of tokens, sequences, GPUs or weights is at most this: bounded so that products of counts
# stay printable (Python refuses to print an int of more than 4,300 digits).
MAX_COUNT = 10**15
MAX_DIGITS = len(str(MAX_COUNT))
POSITIVE = click.IntRange(min=1, max=MAX_COUNT)
MIN_SHARE_INVERSE = 10**6  # an MFU of one in a million at least: no smaller share of a GPU is worth a bound


class TokenCount(int):
    """A token count that remembers how it was written ("128k"), so the output can say what it read."""

    text: str

    def __new__(cls, value: int, text: str) -> "TokenCount":
        count = super().__new__(cls, value)
        count.text = text
        return count


class Tokens(click.ParamType):
    """A token count as people write it: 4096, 32k, 128K (k = 1,024: "128k context" is 131,072), 1M."""

    name = "TOKENS"
    _UNITS = {"k": 2**10, "m": 2**20}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().replace(",", "").replace("_", "")
        scale = self._UNITS.get(text[-1:], 1)
        digits = text[:-1] if scale > 1 else text
        if len(digits) > MAX_DIGITS:
            self.fail(f"{len(digits):,} digits: more than {MAX_COUNT:,} tokens", param, ctx)
        if not (digits.isascii() and digits.isdigit()) or int(digits) * scale < 1:
            self.fail(f"{value!r} is not a positive token count (examples: 4096, 32k, 128k = 131,072)", param, ctx)
        if int(digits) * scale > MAX_COUNT:
            self.fail(f"{value!r} is more than {MAX_COUNT:,} tokens", param, ctx)
        return TokenCount(int(digits) * scale, str(value)) if scale > 1 else int(digits)


class Share(click.ParamType):
    """A fraction such as an MFU, read exactly from its decimal text (0.45 is 9/20, not the float
    nearest it), finite and in [1 / MIN_SHARE_INVERSE, 1]: `nan`, `inf`, `0` and `1e-400` are errors, not a
    division by zero or a float overflow later."""

    name = "FRACTION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Fraction:
        from fractions import Fraction

        if isinstance(value, Fraction):
            return value
        try:
            share = Fraction(str(value).strip())  # 'nan', 'inf', '1/0', 5,000 digits: errors, as junk is
        except (ValueError, ZeroDivisionError):
            self.fail(f"{value!r} is not a number (examples: 0.5, 0.35)", param, ctx)
        if not 1 <= share * MIN_SHARE_INVERSE <= MIN_SHARE_INVERSE:
            self.fail(f"{value!r} is not between {1 / MIN_SHARE_INVERSE:g} and 1", param, ctx)
        return share


class Dtype(click.ParamType):
    """A storage format by any common spelling (bfloat16, FP16, float8_e4m3fn, q8_0), resolved to its
    canonical name by calc.analysis.memory.formats, imported only when a value is given."""

    name = "DTYPE"

    def __init__(self, kv: bool) -> None:
        self.kv = kv

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from calc.analysis.memory.formats import KV_FORMATS, WEIGHT_FORMATS, find_format

        allowed = KV_FORMATS if self.kv else WEIGHT_FORMATS
        found = find_format(str(value), allowed)
        if found is None:
            self.fail(f"{value!r} is not one of {', '.join(allowed)}", param, ctx)
        return found.name


class Text(click.ParamType):
    """Free text (a model, a path, a scheme, a list of names) that must say something: an empty value
    (`--quant ''`, often an unset shell variable) is an error, never "none", "all" or ".". Every
    option and argument without a type of its own has this one."""

    name = "TEXT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("empty (give a value, or leave the option out)", param, ctx)
        return value


TEXT = Text()
SHARE = Share()
TOKENS = Tokens()
KV_DTYPE = Dtype(kv=True)
WEIGHT_DTYPE = Dtype(kv=False)


def complete_model(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of MODEL: the preset names that start with what is typed, else files."""
    from calc.spec.load import preset_names

    names = [name for name in preset_names() if name.startswith(incomplete)]
    return names or [click.shell_completion.CompletionItem(incomplete, type="file")]


# The arguments and options of the commands that size several models at once (compare, plot, report).
models_argument = click.argument("models", nargs=-1, required=True, type=TEXT, metavar="MODEL...",
                                 shell_complete=complete_model)
seq_option = click.option("--seq", type=TOKENS, help="Context of the KV cache, e.g. 4096 or 32k (k = 1024), batch 1  "
                                                      "[default: the shortest context among the models]")
dtype_option = click.option("--dtype", type=WEIGHT_DTYPE, metavar="DTYPE",
                            help="Storage type of the weights: fp32, fp16/bf16, fp8_e4m3, int8, int4, or a llama.cpp "
                                 "type (q8_0, q4_K, mxfp4, ...)  [default: as stored: the scheme config.json's "
                                 "quantization_config names (gpt-oss: mxfp4), else 16-bit]")
quant_option = click.option("--quant", type=TEXT, metavar="SCHEME",
                            help="A checkpoint's quantisation scheme, its real layout and what it keeps 16-bit: "
                                 "gptq-int4, awq-int4, bnb-nf4, bnb-nf4-dq, bnb-int8, fp8, fp8-channel, fp8-block, mxfp4, "
                                 "nvfp4, or a llama.cpp mix (q4_k_m, ...).")
kv_dtype_option = click.option("--kv-dtype", type=KV_DTYPE, default="fp16", show_default=True,
                               help="Storage type of the cached K and V, not tied to --dtype (servers keep it 16-bit): fp16 (bf16 "
                                    "is as wide), fp32, fp8_e4m3, fp8_e5m2, or llama.cpp's q8_0, q5_1, q5_0, q4_1, q4_0, "
                                    "iq4_nl (block scales included: q8_0 is 8.5 bits).")
ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")  # calc.analysis.memory.engines.ENGINES, without importing it
seq_max_option = click.option("--seq-max", type=TOKENS, help="Longest context drawn, e.g. 32k or 131072 (k = 1024)  "
                                                            "[default: the longest context among the models]")



def sizing_options(gpus: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The one set of sizing options of memory, compare, plot memory and report: --dtype (as stored
    by default) or --quant, --kv-dtype, --tp/--pp/--ep, --engine, and the GPUs: --budget
    (SIZE|GPU|NxGPU), or with `gpus` --gpus (GPU,... lines, NxGPU among them). The command gets them
    by these names: dtype, quant, kv_dtype, tp, pp, ep, engine, budget or gpus."""
    where = (click.option("--gpus", type=TEXT, metavar="GPU,...",
                          help="GPUs drawn as lines at their reported memory: H100,4090, or 8xH100-80GB for 8 cards' "
                               "memory together.") if gpus else
             click.option("--budget", type=TEXT, metavar="SIZE|GPU|NxGPU",
                          help="The GPUs: a size per GPU (80GB, 75GiB), a card (H100-80GB) or N of them (2xH100-80GB: "
                               "tensor parallel over 2 unless --tp/--pp say otherwise). memory solves for the longest "
                               "context (or with --seq the largest batch) that fits; compare says if each model fits."))
    options = (
        dtype_option,
        quant_option,
        kv_dtype_option,
        click.option("--tp", type=POSITIVE, help="Tensor-parallel GPUs: shards matrices, splits KV heads (replicated past their count; an "
                                          "MLA latent stays whole)  [default: 1]"),
        click.option("--pp", type=POSITIVE, help="Pipeline stages (splits layers as vLLM does)  [default: 1]"),
        click.option("--ep", type=POSITIVE, help="Expert-parallel ways: routed experts split whole  [default: 1]"),
        where,
        click.option("--engine", type=click.Choice(ENGINES),
                     help="The server: its rules for the KV cache (llama.cpp pads the context to 256 cells)."),
    )

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


# vLLM's scheduling options that size its KV pages (memory and fit): the profiling forward, and the tokens a
# sliding-window or chunked group holds beyond its window or chunk.
max_batched_option = click.option(
    "--max-num-batched-tokens", "max_batched", type=POSITIVE,
    help="vLLM: tokens of the profiling forward (its activation peak) and, with sliding-window or chunked layers, "
         "what a window or chunk group holds beyond its window or chunk  [default: vllm serve's: 2048, 8192 on a "
         "70 GiB+ GPU that is not an A100, 16384 on 160 GiB+; SGLang: its chunked prefill size; TensorRT-LLM: "
         "max_num_tokens, 8192]")


def hisparse_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's HiSparse: `--hisparse-host-pool SIZE` (its HiSparseConnector's host_pool_gib) turns it on,
    `--hisparse-device-buffer ROWS` sizes the hot buffer (attention_config.hisparse_config.device_buffer_size)."""
    command = click.option(
        "--hisparse-device-buffer", type=POSITIVE, metavar="ROWS",
        help="vLLM's HiSparse hot buffer, rows a request keeps on the GPU (its device_buffer_size)  "
             "[default: two index_topk's]")(command)
    return click.option(
        "--hisparse-host-pool", type=TEXT, metavar="SIZE",
        help="vLLM's HiSparse for a DSA model (DeepSeek-V3.2, GLM-5): its MLA latents in a pinned host pool of "
             "SIZE (its HiSparseConnector's host_pool_gib), the GPU keeping the indexer keys and a few pages a "
             "request.")(command)


_POOL_OPTIONS = (
    click.option(
        "--async-scheduling/--no-async-scheduling", default=True, show_default=True,
        help="vLLM's: with it (its default on a GPU) a sliding-window or chunked group holds two batches of "
             "--max-num-batched-tokens beyond its window or chunk, one without."),
    click.option(
        "--indexer-kv-dtype", type=TEXT, default="auto", show_default=True, metavar="auto|bf16|fp8|mxfp4|nvfp4",
        help="vLLM's attention_config.indexer_kv_dtype: how a sparse-attention indexer keeps its keys (auto: the "
             "model's default, fp8 for DeepSeek's, bf16 for MiniMax-M3's; mxfp4 for DeepSeek-V4's on SM10x cards)."),
    click.option(
        "--speculative-num-steps", "speculative_num_steps", type=click.IntRange(min=0, max=MAX_COUNT), default=0,
        show_default=True,
        help="SGLang's: draft steps of speculative decoding (EAGLE / MTP): the draft worker's share of the pool (its "
             "layers priced per target layer) and at most 48 running requests; for DeepSeek-V4 its compressor rings "
             "of 16 and 256. TensorRT-LLM's MTP max_draft_len: its one MTP layer joins the pool's layers (0: none)."),
    click.option(
        "--speculative-draft-layers", "speculative_draft_layers", type=click.IntRange(min=1, max=MAX_COUNT),
        default=None,
        help="SGLang's EAGLE draft: its layers, which SGLang reads from --speculative-draft-model-path's config "
             "(num_nextn_predict_layers, else num_hidden_layers) to price the draft's pool  [default: the model's "
             "MTP layers]"),
    click.option(
        "--mamba-ssm-dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
        help="SGLang's: the dtype of a hybrid's SSM states in its Mamba pool (default: the model's there, float32 "
             "unless its config's mamba_ssm_dtype says otherwise; Kimi-Linear bfloat16 on B200/B300)."),
    click.option(
        "--enable-prefix-caching/--no-enable-prefix-caching", "prefix_caching", default=True, show_default=True,
        help="vLLM's: with it (its default for a model with attention) a Mamba or linear-attention group holds 2 "
             "pages a request, 3 for a Mamba2 mixer ('align' mode), 1 without."),
    click.option(
        "--use-kv-cache-manager-v2", "kv_cache_manager_v2", type=click.Choice(["auto", "true", "false"]),
        default="auto", show_default=True,
        help="TensorRT-LLM's kv_cache_config.use_kv_cache_manager_v2: auto takes the model class's preference "
             "(KVCacheManagerV2 for Llama, Llama 4, gpt-oss, Gemma 3/4, DeepSeek-V3/V3.2, GLM-5, Mistral-Large-3, "
             "Kimi-K2.5), false the V1 manager's pool and lines."),
    click.option(
        "--disable-overlap-scheduler", is_flag=True, default=False,
        help="TensorRT-LLM's disable_overlap_scheduler: without it (its default) the KV cache managers are built for "
             "max_seq_len --seq + 1, which sets the windows and a request's blocks in KVCacheManagerV2's pools."),
)


def pool_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The server flags that shape vLLM's and SGLang's KV pool (memory and fit take the same ones): the
    command receives them as one `pool_settings` (calc/analysis/memory/pool_settings.py), built here once."""

    @functools.wraps(command)
    def wrapper(*args: Any, async_scheduling: bool, indexer_kv_dtype: str, speculative_num_steps: int,
                speculative_draft_layers: int | None, mamba_ssm_dtype: str | None, prefix_caching: bool,
                kv_cache_manager_v2: str, disable_overlap_scheduler: bool, **kwargs: Any) -> Any:
        from calc.analysis.memory.pool_settings import PoolSettings

        settings = PoolSettings(async_scheduling, indexer_kv_dtype, prefix_caching, speculative_num_steps,
                                speculative_draft_layers, mamba_ssm_dtype, kv_cache_manager_v2,
                                not disable_overlap_scheduler)
        return command(*args, pool_settings=settings, **kwargs)

    for option in reversed(_POOL_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def dp_attention_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """SGLang's DP attention: `--enable-dp-attention` with `--dp-size N`, `--enable-dp-lm-head` and
    `--moe-dense-tp-size 1`; the command receives them as one `dp_attention` (calc.analysis.memory.sglang_dp's
    DpAttention, None without --enable-dp-attention), the flags given without it refused here."""

    @functools.wraps(command)
    def wrapper(*args: Any, enable_dp_attention: bool, dp_size: int | None, enable_dp_lm_head: bool,
                moe_dense_tp_size: int | None, **kwargs: Any) -> Any:
        from calc.analysis.memory.sglang_dp import DpAttention
        from calc.errors import GptcalcError

        if not enable_dp_attention:
            given = [flag for flag, value in (("--dp-size", dp_size), ("--enable-dp-lm-head", enable_dp_lm_head or None),
                                              ("--moe-dense-tp-size", moe_dense_tp_size)) if value is not None]
            if given:
                raise GptcalcError(f"{', '.join(given)}: SGLang's DP attention settings; give --enable-dp-attention "
                                   "(--dp-size alone is whole replicas of the layout, each GPU as without it)")
            return command(*args, dp_attention=None, **kwargs)
        return command(*args, dp_attention=DpAttention(dp_size or 1, enable_dp_lm_head, moe_dense_tp_size), **kwargs)

    for option in reversed((
        click.option("--enable-dp-attention", is_flag=True,
                     help="SGLang's DP attention (DeepSeek-V2/V3/V3.2, Kimi-K2, GLM-5): --dp-size groups of tp / dp GPUs each run "
                          "their own requests and KV pool, their attention weights split over the group."),
        click.option("--dp-size", "--dp", "dp_size", type=POSITIVE, default=None,
                     help="SGLang's: DP-attention groups, dividing --tp  [default: 1]"),
        click.option("--enable-dp-lm-head", is_flag=True,
                     help="SGLang's: the LM head split over the attention group (tp / dp) instead of all tp GPUs."),
        click.option("--moe-dense-tp-size", type=POSITIVE, default=None,
                     help="SGLang's: 1 keeps the dense layers' MLPs whole on every GPU  [default: split over --tp]"),
    )):
        wrapper = option(wrapper)
    return wrapper


set_option = click.option("--set", "overrides", multiple=True, type=TEXT, metavar="KEY=VALUE",
                          help="Override a spec field, e.g. --set qkv_bias=false (repeatable; every MODEL).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs instead of tables.")


def image_options(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--image WxH` and `--images N`: images through a multimodal model's vision tower; `what` says
    what the command shows of them."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option("--images", type=POSITIVE, default=1, show_default=True,
                               help="How many such images (with --image).")(command)
        return click.option("--image", type=TEXT, metavar="WxH",
                            help=f"A multimodal model: one image of WxH pixels through its vision tower; {what}")(command)

    return decorate


def pass_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One forward pass: `--seq T`, `--batch B` and `--decode` (shapes, flops)."""
    for option in reversed((
        click.option("--seq", "-T", type=POSITIVE, required=True,
                     help="Prompt length T (with --decode: tokens already in the KV cache)."),
        click.option("--batch", "-B", type=POSITIVE, default=1, show_default=True, help="Sequences per batch B."),
        click.option("--decode", is_flag=True, help="One new token attending to a KV cache of T past tokens."),
    )):
        command = option(command)
    return command


def model_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """MODEL plus `--set key=value` overrides; the command receives a loaded `spec`. Several
    models are refused with a pointer to `compare`, which puts them side by side."""

    @click.argument("model", type=TEXT, shell_complete=complete_model)
    @click.argument("more", nargs=-1, type=TEXT, metavar="")
    @set_option
    @functools.wraps(command)
    def wrapper(model: str, more: tuple[str, ...], overrides: tuple[str, ...], **kwargs: Any) -> Any:
        one_model(model, more)
        return command(spec=load_model(model, overrides), **kwargs)

    return wrapper


def one_model(model: str | None, more: tuple[str, ...]) -> None:
    """Refuse extra MODEL arguments with a pointer to `compare`, which puts models side by side."""
    if more:
        raise click.UsageError(f"one MODEL at a time; for several side by side: gptcalc compare "
                               f"{' '.join((model or '', *more)).strip()}")


def wrote(path: Path, note: str = "") -> None:
    """`wrote <path>`, the line of a command that writes a file: printed through the console like
    every other line, so the path (the user's argument: any bytes) is text with its control
    characters escaped, never an escape sequence or a second line; one line however long."""
    from calc.render.output import console

    console().print(f"wrote {path}{note}", soft_wrap=True)


def load_model(model: str, overrides: tuple[str, ...] = ()) -> Any:
    from calc.spec.load import load_spec, parse_overrides

    return load_spec(model, parse_overrides(overrides))


def read_against_model(checkpoint: str, model: str | None, overrides: tuple[str, ...] = ()) -> Any:
    """The checkpoint read against MODEL's spec and the config.json it comes from (whose untied variant
    accounts for a head stored apart, calc.checkpoint.report._or_untied), else against its own config.json."""
    from calc.checkpoint.report import read_checkpoint
    from calc.spec.load import load_spec_and_config, parse_overrides

    if model is None:
        return read_checkpoint(checkpoint)
    return read_checkpoint(checkpoint, *load_spec_and_config(model, parse_overrides(overrides)))
