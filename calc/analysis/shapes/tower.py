"""An image's journey through the vision tower to the decoder's input: every tensor's shape from
the processor's patches to image tokens at the decoder's width.

    patches [B, P, C·t·p²] -> patch embedding [B, P, d] (+ class token, + positions, pre norm)
      -> n_layers × (norm, attention, norm, MLP) -> post norm (- class token)
      -> projectors: pool or merge r patches into one, norm, linears -> [B, P/r, d_text]

B is the number of views the encoder runs on separately (each image, or each of its tiles and its
global view), P the patches of one view, d the tower's width (named d_model inside the tower's
block, whose steps are the decoder's own: `block_steps`). r is the image rule's patches per token;
whether the projector averages them (Gemma 3 and 4) or concatenates them (Qwen-VL's merger,
Pixtral's and Llama-4's) is read off its data: a linear whose input is r·d concatenates.
The activations between a projector's linears are not rows (0 FLOPs by the convention).
Projectors stored `repeat` times (Qwen3-VL's DeepStack mergers, one per tapped layer) are a block
of their own, repeated. A projector's k x k convolutions (Step-3.7's downsamplers) lay the rows out
as their view's grid of patches and shrink it by their stride; views of several sizes (Step-3.7's
global view and crops) are walked one size after another, the later sizes' steps with the same
weights (params 0). Gemma 3n's MobileNet-v5 is walked as feature maps (`mobilenet`). The params
column adds up to the tower's total in `count`.
"""

from __future__ import annotations

import math
from dataclasses import replace

from calc.analysis.shapes.block import block_steps
from calc.analysis.shapes.mobilenet import mobilenet_journey
from calc.analysis.shapes.core import Dims, Journey, Rows, Shape, Step
from calc.analysis.shapes.norm import norm_step
from calc.spec.model import Block, ModelSpec
from calc.towers import Linear, MobileNet, Projector, Tower, vision_tower
from calc.towers.images import ImageTokens

__all__ = ["tower_journey"]

LAYERS, WINDOWED = "vision", "vision window"


def tower_journey(spec: ModelSpec, width: int, height: int, images: int = 1) -> tuple[Journey, ImageTokens]:
    """`images` images of width x height through `spec`'s vision tower, and what each costs the decoder."""
    tower = vision_tower(spec)
    tokens = tower.images.tokens(width, height)
    if isinstance(tower, MobileNet):  # a convolutional encoder: feature maps, not a ViT's rows of patches
        return mobilenet_journey(spec.name, tower, tokens, images), tokens
    rows = Rows(tower.params())
    grids = tokens.grids or ((tokens.views, 0, 0),)
    steps: list[Step] = []
    layers: dict[str, int] = {}
    for index, grid in enumerate(grids):
        part, d, kinds = _pass(spec, tower, tokens, images, grid, rows if index == 0 else Rows(tower.params()))
        steps += part if index == 0 else [_again(step, grid) for step in part]
        layers.update(kinds if index == 0 else {f"{kind} {_size(grid)}": n for kind, n in kinds.items()})
    newline = rows.take("image_newline")  # LLaVA-OneVision: one learned row ends each row of features
    separators = rows.take("separators")  # Phi-4-multimodal: learned rows of the tower's width, projected too
    d = d.named(separators=tower.separators)
    steps.append(d.step("image_tokens", "image tokens", d.shape("N", "tokens", "d_text"), (steps[-1].output,),
                        d.shape("d_text") if newline else d.shape("separators", "d_model") if separators else None,
                        newline + separators, traced=False,
                        note=_placed(tokens) + ("; a learned image-newline row ends each row" if newline else "")
                        + ("; learned separators (projected like the features) end each row and part the views"
                           if separators else "")))
    for name in [name for name in tower.layer_params() if name != "layer_scale"]:
        rows.take(name)  # the block's steps own one layer's rows; the journey multiplies them by n_layers
    rows.done(f"tower {tower.kind!r}")
    title = (f"{spec.name} vision tower ({tower.kind}): {images} image{'s' if images > 1 else ''} of {width}x{height}, "
             f"resized to {tokens.width}x{tokens.height}")
    batch, seq = (d.sizes["B"], d.sizes["T"]) if len(grids) == 1 else (images, tokens.patches)
    journey = Journey(spec.name, batch, seq, False, tower.n_layers, tuple(steps), layers,
                      _notes(tower, tokens, d, grids), title, "the tower's total in `gptcalc count`")
    return journey, tokens


def _pass(spec: ModelSpec, tower: Tower, tokens: ImageTokens, images: int, grid: tuple[int, int, int],
          rows: Rows) -> tuple[list[Step], Dims, dict[str, int]]:
    """The views of one size (`grid`: how many, and their rows and columns of patches, 0 where every
    view is alike and no convolution needs the grid) from patches to the projector's output."""
    views, h, w = grid
    per_view = h * w or tokens.patches // tokens.views
    d = Dims({"B": images * views, "P": per_view, "T": per_view + tower.class_token, "d_model": tower.d_model,
              "C·t·p²": tower.in_channels * tower.temporal_patch * tower.patch_size ** 2, "d_text": spec.d_model,
              "N": images, "tokens": tokens.tokens, "H": h, "W": w}, decode=False)
    steps = _embedding(d, tower, rows, tokens)
    full = len(tower.full_layers) if tower.window else tower.n_layers
    steps += [_bidirectional(step) for step in block_steps(d, _block(tower), tower.d_model, LAYERS, full)]
    if tower.window:
        windowed = block_steps(d, _block(tower), tower.d_model, WINDOWED, tower.n_layers - full)
        steps += [_within_windows(d, step, tower, tokens) for step in windowed]
    steps += _layer_scale(d, tower, rows) + _after(d, tower, rows)
    steps += _projectors(d, tower, tower.images.per_token, rows)
    layers = {LAYERS: full, **({WINDOWED: tower.n_layers - full} if tower.window else {}),
              **{_kind(p): p.repeat for p in tower.projectors if p.repeat > 1}}
    return steps, d, layers


def _size(grid: tuple[int, int, int]) -> str:
    """A view size's tag: '36x36' (rows x columns of patches)."""
    return f"{grid[1]}x{grid[2]}"


def _again(step: Step, grid: tuple[int, int, int]) -> Step:
    """A step of a later view size: the same weights the first size's step owns (params 0), its own
    shapes and FLOPs, named by its size."""
    tag = _size(grid)
    return replace(step, id=f"{step.id}@{tag}", label=f"{tag} views: {step.label}", params=0,
                   block=f"{step.block} {tag}" if step.block else "")


def _notes(tower: Tower, tokens: ImageTokens, d: Dims, grids: tuple[tuple[int, int, int], ...]) -> tuple[str, ...]:
    """What B, P and d_model are, and how attention is counted."""
    patch = f"{tower.patch_size}x{tower.patch_size}"
    if len(grids) == 1:
        views = (f"B = {d.sizes['B']} view(s) the encoder runs on separately, P = {d.sizes['P']:,} patches of "
                 f"{patch} pixels each (T = P, plus a class token where there is one)")
    else:
        sizes = " and ".join(f"{n} of {h}x{w} patches" for n, h, w in grids)
        views = (f"views of {len(grids)} sizes, each size a batch of its own: {sizes} per image ({patch} pixels a "
                 f"patch); the later sizes' rows ({', '.join(_size(g) for g in grids[1:])}) run the first's weights "
                 "(params counted once)")
    return (f"{views}, d_model = the tower's width {tower.d_model}, d_text = the decoder's {d.sizes['d_text']}, "
            "N = the images",
            "each layer's attention is counted over all of a view's patches (bidirectional, no cache)"
            + (", a window layer's over its window's" if tower.window else "")
            + "; r = the patches one image token is made of")


def _block(tower: Tower) -> Block:
    """The encoder layer as a decoder Block of the same parts (a layer scale is the tower's own row)."""
    norms = ("attn_in", "attn_out", "mlp_in", "mlp_out") if tower.post_norms else ("attn_in", "mlp_in")
    return Block.model_construct(attention=tower.attention, mlp=tower.mlp, norm=tower.norm, norms=norms)


def _bidirectional(step: Step) -> Step:
    """An encoder's softmax masks nothing (the decoder's step says causal)."""
    if step.id != "attn_weights":
        return step
    return replace(step, label="softmax (no mask)", note="every patch attends to every patch of its view; rows sum to 1")


def _within_windows(d: Dims, step: Step, tower: Tower, tokens: ImageTokens) -> Step:
    """A window-attention layer's scores and weighted values: each patch attends to the patches of its
    window only (Qwen2.5-VL: windows of w x w patches, those at the right and bottom edges cut short),
    so the (query, key) pairs are Σ over windows of its size², per view; shown against a full
    window's w² keys, counted exactly."""
    if step.id not in ("scores", "attn_weights", "attn_heads_out"):
        return _bidirectional(step)
    w, patch = tower.window, tower.patch_size
    sides = [[w] * (n // w) + [n % w] * bool(n % w) for n in (tokens.height // patch, tokens.width // patch)]
    pairs = sum(a * a for a in sides[0]) * sum(b * b for b in sides[1])
    full = step.output if step.id != "attn_heads_out" else step.inputs[0]  # [B, h, T, T]
    scores = Shape((*full.sizes[:-1], w * w), (*full.names[:-1], "w²"))
    note = (f"within windows of {w}x{w} patches (edge windows smaller): {pairs:,} (query, key) pairs a view, "
            f"not T² = {d.sizes['T'] ** 2:,}; full attention in layers {', '.join(map(str, tower.full_layers))}")
    if step.id == "attn_weights":
        return replace(step, label="softmax (within each window)", output=scores, inputs=(scores,), note=note)
    a = tower.attention
    flops = 2 * d.sizes["B"] * a.n_heads * a.head_dim * pairs
    formula = "2·B·h·d_head·Σ_windows len²"
    if step.id == "scores":
        return replace(step, output=scores, flops=flops, note=note, formula=formula)
    return replace(step, inputs=(scores, step.inputs[1]), flops=flops, note=note, formula=formula)


def _embedding(d: Dims, tower: Tower, rows: Rows, tokens: ImageTokens) -> list[Step]:
    patches, x = d.shape("B", "P", "C·t·p²"), d.shape("B", "P", "d_model")
    frames = f" × {tower.temporal_patch} frames (an image is repeated to fill them)" if tower.temporal_patch > 1 else ""
    steps = [
        d.step("patches", "cut into patches", patches,
               note=f"the processor's {tokens.width}x{tokens.height} pixels in {tower.patch_size}x{tower.patch_size} "
                    f"squares of {tower.in_channels} channels{frames}, each flattened"),
        d.linear("patch_embed", "patch embedding ·W_patch", patches, d.shape("C·t·p²", "d_model"), x,
                 rows.take("patch_embedding"), "one linear map per patch (a conv with stride = its kernel)"),
    ]
    if tower.class_token:
        x = d.shape("B", "T", "d_model")
        steps.append(d.step("class_token", "class token appended", x, (d.shape("B", "P", "d_model"),),
                            d.shape("d_model"), rows.take("class_embedding"), note="one learned vector per view"))
    if tower.positions:
        steps.append(d.step("positions", "+ position embedding", x, (x,), d.shape("d_model"),
                            rows.take("position_embedding"),
                            note=f"a learned table of {tower.positions:,} rows of d_model, looked up (or interpolated) "
                                 "per patch and added"))
    if tower.pre_norm:
        steps.append(norm_step(d, tower.pre_norm, "pre_norm", "pre-encoder norm", x, rows.take("pre_norm")))
    return steps


def _layer_scale(d: Dims, tower: Tower, rows: Rows) -> list[Step]:
    if not tower.layer_scale:
        return []
    x, layer = d.shape("B", "T", "d_model"), d.within(LAYERS)
    return [layer.step("layer_scale", "layer scales λ₁, λ₂", x, (x,), d.shape("d_model"),
                       rows.take("layer_scale") // tower.n_layers,
                       note="attention's and the MLP's outputs each times a learned d_model vector before its add")]


def _after(d: Dims, tower: Tower, rows: Rows) -> list[Step]:
    """The post norm, and dropping the class token the projector does not read."""
    x, steps = d.shape("B", "T", "d_model"), []
    if tower.post_norm:
        steps.append(norm_step(d, tower.post_norm, "post_norm", "post-encoder norm", x, rows.take("post_norm")))
    if tower.pooling_head:
        steps.append(d.step("pooling_head", "attention-pooling head (not on the path)", d.shape("B", "d_model"), (x,),
                            None, rows.take("pooling_head"), traced=False,
                            note="SigLIP's probe, attention and MLP: built and stored, its output unread "
                                 "(0 FLOPs counted)"))
    if tower.class_token:
        steps.append(d.step("drop_class_token", "class token dropped", d.shape("B", "P", "d_model"), (x,),
                            note="the projector reads the patches only"))
    return steps


def _projectors(d: Dims, tower: Tower, r: int, rows: Rows) -> list[Step]:
    """The projectors in order, then the repeated ones (each reads a tapped layer's [B, P, d_model])."""
    x = d.shape("B", "P", "d_model")
    chain = [p for p in tower.projectors if p.repeat == 1]
    concatenates = any(linear.d_in == r * tower.d_model for p in tower.projectors for linear in p.linears) \
        or _merges_later(chain, tower.d_model, r)
    convolves = any(linear.kernel > 1 for p in chain for linear in p.linears)  # strided convs shrink the grid
    steps: list[Step] = []
    if r > 1 and not (concatenates or convolves):
        d = d.named(**{"P/r": d.sizes["P"] // r})
        x = d.shape("B", "P/r", "d_model")
        steps.append(d.step("pool", f"average pool: {r} patches -> 1 token", x, (d.shape("B", "P", "d_model"),),
                            note=f"a {round(r ** 0.5)}x{round(r ** 0.5)} average over neighbouring patches; no weights"))
    for projector in chain:
        part, d, x = _projector(d, projector, x, r, rows)
        steps += part
    for projector in [p for p in tower.projectors if p.repeat > 1]:
        steps += _projector(d.within(_kind(projector)), projector, d.shape("B", "P", "d_model"), r, rows)[0]
    return steps


def _merges_later(chain: list[Projector], width: int, r: int) -> bool:
    """Whether a linear of the chain reads r rows of the one before side by side (MiniMax-M3: each patch
    projected to the text width first, then r of them merged)."""
    for projector in chain:
        for linear in projector.linears:
            if linear.d_in == r * width:
                return True
            width = linear.d_out
    return False


def _kind(p: Projector) -> str:
    """A repeated projector's block kind: its name ("deepstack mergers")."""
    return p.name.replace("_", " ")


def _projector(d: Dims, p: Projector, x: Shape, r: int, rows: Rows) -> tuple[list[Step], Dims, Shape]:
    """One projector's steps from `x`: a merge where a norm or linear reads r·width, its norm, its linears."""
    share = Rows({**({"norm": p.norm.params(p.norm_width)} if p.norm else {}),
                  **{str(i): linear.params() for i, linear in enumerate(p.linears)}})
    rows.take(p.name)
    steps: list[Step] = []
    if p.norm and p.norm_width != x.sizes[-1]:
        d, x = _widen(d, x, p.norm_width, r, steps)
    if p.norm:
        steps.append(norm_step(d, p.norm, f"{p.name}_norm", f"{p.name.replace('_', ' ')} norm", x, share.take("norm")))
    for i, linear in enumerate(p.linears):
        if linear.kernel > 1:
            d, x = _conv(d, x, linear, f"{p.name}_{i}", f"{p.name.replace('_', ' ')} conv {i + 1}",
                         share.take(str(i)), steps)
            continue
        if len(x.sizes) == 4:
            d, x = _flatten(d, x, steps)
        if linear.d_in != x.sizes[-1]:
            d, x = _widen(d, x, linear.d_in, r, steps)
        out_name = _width_name(d, linear.d_out)
        d = d.named(**{out_name: linear.d_out})
        out = d.shape(*x.names[:-1], out_name)
        bias = "; plus a bias" if linear.bias else ""
        steps.append(d.linear(f"{p.name}_{i}", f"{p.name.replace('_', ' ')} linear {i + 1} ·W", x,
                              d.shape(x.names[-1], out_name), out, share.take(str(i)),
                              f"{linear.d_in} -> {linear.d_out}{bias}"))
        x = out
    share.done(p.name)
    return steps, d, x


def _conv(d: Dims, x: Shape, conv: Linear, id: str, label: str, params: int,
          steps: list[Step]) -> tuple[Dims, Shape]:
    """A k x k convolution over the view's grid of patches (Step-3.7's downsamplers): rows of patches
    laid out as a [B, C, H, W] image first; each output side floor((n + 2·padding - k) / stride) + 1;
    2·C_in·C_out·k² FLOPs per output position (no groups; the bias not counted, as for a linear)."""
    if len(x.sizes) == 3:
        grid = d.shape("B", x.names[-1], "H", "W")
        if not grid.sizes[-1] or grid.sizes[-2] * grid.sizes[-1] != x.sizes[1]:
            raise RuntimeError("shapes: a convolution needs the view's grid of patches")
        steps.append(d.step("grid", "rows of patches laid out as a grid", grid, (x,),
                            note="permuted and viewed as [B, channels, rows, columns] of patches; no weights"))
        x = grid
    c_in, h, w = x.names[1], x.names[2] + "'", x.names[3] + "'"
    c_out = f"{conv.d_out // d.sizes['d_model']}·d_model" if conv.d_out % d.sizes["d_model"] == 0 else "d_proj"
    d = d.named(**{c_out: conv.d_out, h: conv.side(x.sizes[2]), w: conv.side(x.sizes[3]), "k": conv.kernel})
    out = d.shape("B", c_out, h, w)
    k = conv.kernel
    flops = 2 * math.prod(out.sizes) * conv.d_in * k * k
    bias = "; plus a bias" if conv.bias else ""
    steps.append(d.step(id, label, out, (x,), d.shape(c_out, c_in, "k", "k"), params, flops,
                        note=f"{k}x{k}, stride {conv.stride}, padding {conv.padding}: {conv.d_in} -> {conv.d_out} "
                             f"channels, {x.sizes[2]}x{x.sizes[3]} -> {out.sizes[2]}x{out.sizes[3]}{bias}",
                        formula="2·B·" + "·".join(f"({n})" if "·" in n else n for n in (c_in, c_out, "k²", h, w))))
    return d, out


def _flatten(d: Dims, x: Shape, steps: list[Step]) -> tuple[Dims, Shape]:
    """A grid back to rows, one per position: [B, C, H, W] -> [B, H·W, C]."""
    rows = f"{x.names[2]}·{x.names[3]}"
    d = d.named(**{rows: x.sizes[2] * x.sizes[3]})
    out = d.shape("B", rows, x.names[1])
    steps.append(d.step("flatten", "grid flattened to rows", out, (x,), note="one row per position left; no weights"))
    return d, out


def _widen(d: Dims, x: Shape, width: int, r: int, steps: list[Step]) -> tuple[Dims, Shape]:
    """Merge r neighbouring patches into one row r times as wide (pixel shuffle / patch merger), or,
    for another multiple, the features of that many tapped layers side by side."""
    k = width // x.sizes[-1]
    if width % x.sizes[-1]:
        raise RuntimeError(f"shapes: a projector reads {width} wide rows from {x.sizes[-1]} wide ones")
    wide = f"{k}·{x.names[-1]}"
    if k == r and "P/r" not in x.names:
        d = d.named(**{"P/r": d.sizes["P"] // r, wide: width})
        out = d.shape(*x.names[:-2], "P/r", wide)
        note = f"each {round(r ** 0.5)}x{round(r ** 0.5)} group of neighbouring patches concatenated into one row"
        steps.append(d.step("merge", f"merge {r} patches -> 1", out, (x,), note=note))
    else:
        d = d.named(**{wide: width})
        out = d.shape(*x.names[:-1], wide)
        steps.append(d.step("taps", f"{k} layers' features side by side", out, (x,),
                            note=f"the outputs of {k} encoder layers concatenated per patch"))
    return d, out


def _width_name(d: Dims, width: int) -> str:
    """A projector's output width by what it is: the decoder's, the tower's, or its own."""
    if width == d.sizes["d_text"]:
        return "d_text"
    return "d_model" if width == d.sizes["d_model"] else "d_proj"


def _placed(tokens: ImageTokens) -> str:
    """How the projector's rows become the context's image tokens."""
    special = f" + {tokens.special_tokens} special" if tokens.special_tokens else ""
    return (f"{tokens.image_tokens:,} image tokens{special} = {tokens.tokens:,} positions per image in the decoder's "
            "sequence (the processor's rule; special tokens are embedded from the token table), each a d_text row")
