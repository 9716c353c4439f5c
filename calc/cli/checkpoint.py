"""`inspect` and `verify`: checkpoints read from their headers (calc/checkpoint/) and the sources of truth
side by side (calc/verify.py)."""

from __future__ import annotations

import click

from calc.cli.options import CONTEXT, TEXT, json_option, read_against_model, set_option


@click.command(context_settings=CONTEXT)
@click.argument("checkpoint", type=TEXT, metavar="PATH|REPO_ID")
@click.option("--model", "model", type=TEXT, metavar="MODEL", default=None,
              help="Check the tensors against this spec instead of the checkpoint's config.json.")
@json_option
def inspect(checkpoint: str, model: str | None, as_json: bool) -> None:
    """What a checkpoint holds, read from its headers only (tensor data is never read).

    Tensors grouped by component, parameters vs buffers, dtypes, bytes on disk per dtype, the
    spec from its config.json (or inferred from the tensor shapes), and every tensor name that
    no name map recognises. PATH is a .safetensors file, a .bin/.pt state dict, a directory
    (config.json plus model.safetensors or a sharded index) or an index.json; REPO_ID is a Hub repo.
    With --model, exit 1 when a tensor is missing, unrecognised or of another shape than MODEL says.

    \b
    Example:
      gptcalc inspect ./gpt2/model.safetensors
      gptcalc inspect ./Llama-2-70b-hf --json
      gptcalc inspect openai-community/gpt2
    """
    from calc.render import base as render
    from calc.render import checkpoint as rc

    report = read_against_model(checkpoint, model)
    if as_json:
        render.print_json(report.to_json())
    else:
        out = render.console()
        for line in rc.summary_lines(report):
            out.print(line)
        out.print(rc.component_table(report))
        out.print(rc.dtype_table(report))
        for line in rc.inspect_lines(report):
            out.print(line)
    if model and not report.ok:  # checked against a spec the user named, and it disagrees: like verify
        raise SystemExit(1)


@click.command(context_settings=CONTEXT)
@click.argument("model", type=TEXT, required=False)
@set_option
@click.option("--checkpoint", type=TEXT, metavar="PATH|REPO_ID", default=None,
              help="Also compare with what this checkpoint stores, tensor by tensor (headers only). "
                   "MODEL may be omitted when it has a config.json.")
@click.option("--load", is_flag=True,
              help="With --checkpoint: check every tensor, load the weights into the torch model (strict=True), run one "
                   "forward pass and compare its logits with transformers' model on the same weights.")
@json_option
def verify(model: str | None, overrides: tuple[str, ...], checkpoint: str | None, load: bool, as_json: bool) -> None:
    """Check the analytic counts against a real torch model built from the same spec.

    The torch model is built on the meta device (no memory, any size) with Hugging Face
    parameter names; each parameter is mapped to a component and compared. When transformers
    is installed and MODEL comes from a config.json (a preset transcribing one, a file, a hub
    id), transformers' own model of it is a further column. Exit 0 when every component and the
    total agree, 1 on any mismatch (after printing the table); the title says which.

    --checkpoint adds what a checkpoint really stores, read from its headers only, every
    tensor's name and shape checked against the spec (a wrong shape, a missing or unrecognised
    tensor also exits 1). --load then checks every tensor (float dtype, finite), loads the
    weights for real (strict=True), runs one forward pass and compares the logits with
    transformers' model on the same weights.

    \b
    Example:
      gptcalc verify gpt2-small
      gptcalc verify llama-70b --json
      gptcalc verify qwen2-7b --set n_kv_heads=2
      gptcalc verify gpt2-small --checkpoint ./gpt2/model.safetensors
      gptcalc verify --checkpoint ./Llama-2-7b-hf --load
    """
    from calc.render import base as render, verify as render_verify
    from calc.verify import verify as run_verification

    if checkpoint is None and model is not None and model.endswith(".gguf"):  # its tensors are checked too
        checkpoint = model
    result = run_verification(model, overrides, checkpoint, load)
    if as_json:
        render.print_json(result.to_json())
    else:
        out = render.console()
        out.print(render_verify.verify_table(result.spec.name, result.diff, result.verdict))
        for line in render_verify.verify_lines(result):
            out.print("  " + line, soft_wrap=True)  # one line each, however long: greppable
    if not result.ok:
        raise SystemExit(1)
