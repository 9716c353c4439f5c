"""An image's journey through Gemma 3n's MobileNet-v5 encoder (calc/towers/mobilenet.py) to the decoder:
every feature map [B, C, H, W] from the stem to the fusion adapter's output grid (16 x 16 by default),
then the embedder's soft tokens at the text width.

Read off timm 1.0.31 (models/mobilenetv5.py MobileNetV5Encoder and MobileNetV5MultiScaleFusionAdapter,
models/_efficientnet_blocks.py EdgeResidual, UniversalInvertedResidual and MobileAttention,
layers/attention2d.py MultiQueryAttention2d, layers/padding.py pad_same). Every conv pads TF's "same"
way (mobilenetv5_300m_enc's pad_type 'same'): (ceil(n / stride) - 1)·stride + k - n pixels a side, the
odd one after, so a side n leaves ceil(n / stride). A conv costs 2·C_in·C_out·k²·H'·W' / groups FLOPs per view
(depthwise: groups = C); an RMSNorm's scale is its conv's step's, no FLOPs. A universal inverted
residual strides its middle depthwise conv where it has one, else its first; a multi-query attention
block's keys and values go through a strided depthwise conv (v > 1) before their one-head
projection, so its scores are [B, h, H·W, H·W / v²]. Runs of identical blocks (one block string, or
an alternating pair) are one block kind, repeated. The fusion adapter takes the feature maps the
tower's `fused_maps` names (the stem's and each stage's output, numbered from 0; the last two stages'
by default), upsamples each smaller one to the first one's grid (nearest), concatenates them, runs a
universal inverted residual without depthwise convs, and brings the grid to `output_grid` a side: an
average pool where it divides the grid, else a bilinear resize (MobileNetV5MultiScaleFusionAdapter).
"""

from __future__ import annotations

from calc.analysis.shapes.core import Dims, Journey, Rows, Shape, Step
from calc.towers.images import ImageTokens
from calc.towers.mobilenet import ROWS, MobileNet, block_options

__all__ = ["mobilenet_journey"]

class Map:
    """A feature map's channels and grid, and the steps that made it (under the block kind being walked)."""

    def __init__(self, d: Dims, c: int, h: int, w: int) -> None:
        self.d, self.c, self.h, self.w = d, c, h, w
        self.steps: list[Step] = []

    def shape(self, c: int | None = None, h: int | None = None, w: int | None = None) -> Shape:
        return Shape((self.d.sizes["B"], c or self.c, h or self.h, w or self.w), ("B", "C", "H", "W"))

    def conv(self, id: str, label: str, c_out: int, k: int, stride: int = 1, depthwise: bool = False,
             bias: bool = False, norm: bool = True) -> None:
        """A k x k conv (and the RMSNorm after it, whose scale it owns) from this map to the next."""
        h, w = (-(-n // stride) for n in (self.h, self.w))
        pad = max((h - 1) * stride + k - self.h, 0)  # along the height; the width's alike on a square map
        per_out = 1 if depthwise else self.c
        params = c_out * per_out * k * k + c_out * bias + c_out * norm
        x, out = self.shape(), self.shape(c_out, h, w)
        flops = 2 * out.sizes[0] * c_out * per_out * k * k * h * w
        kind = "depthwise " if depthwise else ""
        note = (f"{kind}{k}x{k}, stride {stride}, padding {pad // 2}+{pad - pad // 2}: {self.c} -> {c_out} channels, "
                f"{self.h}x{self.w} -> {h}x{w}" + ("; plus a bias" if bias else "") + ("; RMSNorm" if norm else ""))
        formula = f"2·B·{'C' if depthwise else 'C_in·C_out'}·{k}²·H'·W'"
        weight = Shape((c_out, per_out, k, k), ("C_out", "C_in/groups", "k", "k"))
        self.steps.append(self.d.step(id, label, out, (x,), weight, params, flops, note=note, formula=formula))
        self.c, self.h, self.w = c_out, h, w

    def add(self, id: str, label: str, params: int = 0, note: str = "") -> None:
        """A step that keeps the map's shape (a layer scale, a residual add)."""
        x = self.shape()
        weight = Shape((self.c,), ("C",)) if params else None
        self.steps.append(self.d.step(id, label, x, (x,), weight, params, note=note))


def mobilenet_journey(name: str, tower: MobileNet, tokens: ImageTokens, images: int) -> Journey:
    """`images` images through the encoder and the embedder; the params column adds up to the tower's count."""
    rows = Rows(tower.params())
    d = Dims({"B": images, "N": images, "tokens": tokens.tokens, "d_model": tower.d_model,
              "d_text": tower.text_width, "P": tower.output_grid ** 2}, decode=False)
    x = Map(d, tower.in_channels, tokens.height, tokens.width)
    x.steps.append(d.step("pixels", "pixels", x.shape(), note=f"the processor's {tokens.width}x{tokens.height} image"))
    x.conv("stem", "stem conv", tower.stem, 3, 2, bias=True)
    _owns(rows, "stem", x.steps[-1:])
    layers: dict[str, int] = {}
    maps = [Map(d, x.c, x.h, x.w)]  # the feature maps timm numbers: the stem's, then each stage's
    taken = dict.fromkeys(ROWS.values(), 0)
    for s, stage in enumerate(tower.stages, 1):
        for start, period, repeat in _runs(stage):
            last = start + period * repeat
            kind = f"stage {s} blocks {start + 1}-{last}" if last > start + 1 else f"stage {s} block {last}"
            layers[kind] = repeat
            x.d = d.within(kind)
            for index, block in enumerate(stage[start:start + period]):
                before = len(x.steps)
                _block(x, block, f"{s}.{start + index + 1}")
                taken[ROWS[block_options(block)[0]]] += repeat * sum(step.params for step in x.steps[before:])
        maps.append(Map(d, x.c, x.h, x.w))
    for row, n in taken.items():
        _owns(rows, row, [], n)
    x.d = d
    _fusion(x, tower, [maps[i] for i in tower.fused_maps], rows)
    x.steps += _embedder(d, tower, x.shape(), rows, tokens)
    rows.done(f"tower {tower.kind!r}")
    title = (f"{name} vision tower ({tower.kind}): {images} image{'s' if images > 1 else ''}, "
             f"resized to {tokens.width}x{tokens.height}")
    notes = (f"B = {images} image(s); C, H, W = each feature map's channels and grid (a conv's output side is "
             "floor((n + 2·pad - k) / stride) + 1); d_model = the vision width, d_text = the decoder's",
             "a multi-query block's scores are over all of its map's positions against the strided keys'")
    return Journey(name, images, tokens.patches, False, tower.n_layers, tuple(x.steps), layers, notes, title,
                   "the tower's total in `gptcalc count`")


def _owns(rows: Rows, row: str, steps: list[Step], n: int = 0) -> None:
    """The count's component `row` is what these steps (or n parameters) hold: the journey adds up."""
    held = n or sum(step.params for step in steps)
    if rows.take(row) != held:
        raise RuntimeError(f"shapes: the {row} steps hold {held} parameters, not the count's")


def _runs(stage: tuple[str, ...]) -> list[tuple[int, int, int]]:
    """(start, period, repeats): consecutive repeats of one block string or of an alternating pair."""
    runs, i = [], 0
    while i < len(stage):
        best = (1, 1)
        for period in (1, 2):
            chunk, n = stage[i:i + period], 1
            while stage[i + n * period:i + (n + 1) * period] == chunk:
                n += 1
            if n > 1 and period * n > best[0] * best[1]:
                best = (period, n)
        runs.append((i, *best))
        i += best[0] * best[1]
    return runs


def _block(x: Map, block: str, at: str) -> None:
    """One block's convs (and attention) on the map, in timm's order."""
    kind, o = block_options(block)
    c_in, stride = x.c, o.get("s", 1)
    if kind == "er":
        x.conv(f"{at}_exp", f"block {at} expand conv", c_in * o["e"], o["k"], stride)
        x.conv(f"{at}_proj", f"block {at} project conv", o["c"], 1)
    elif kind == "uir":
        _inverted(x, o, at, f"block {at}")
    else:
        _attention(x, o, at)
    if stride == 1 and c_in == x.c:
        x.add(f"{at}_residual", f"block {at} + x", note="the block's input added back")


def _inverted(x: Map, o: dict[str, int], at: str, label: str, layer_scale: bool = True) -> None:
    """A universal inverted residual: optional depthwise a x a, expand, optional depthwise k x k, project."""
    stride, mid = o.get("s", 1), x.c * o["e"]
    if o["a"]:
        x.conv(f"{at}_dw_start", f"{label} depthwise conv", x.c, o["a"], 1 if o["k"] else stride, depthwise=True)
    x.conv(f"{at}_exp", f"{label} expand conv", mid, 1)
    if o["k"]:
        x.conv(f"{at}_dw_mid", f"{label} middle depthwise conv", mid, o["k"], stride, depthwise=True)
    x.conv(f"{at}_proj", f"{label} project conv", o["c"], 1)
    if layer_scale:
        x.add(f"{at}_layer_scale", f"{label} layer scale", x.c, "each channel times a learned scale")


def _attention(x: Map, o: dict[str, int], at: str) -> None:
    """A multi-query attention block: norm, h query heads, one key and one value head (strided by v)."""
    heads, dk, v, c_in = o["h"], o["d"], o.get("v", 1), x.c
    label = f"block {at}"
    x.add(f"{at}_norm", f"{label} norm", c_in, "RMSNorm over channels")
    q = Map(x.d, c_in, x.h, x.w)
    q.conv(f"{at}_q", f"{label} queries", heads * dk, 1, norm=False)
    x.steps += q.steps
    for part, what in (("k", "key"), ("v", "value")):
        kv = Map(x.d, c_in, x.h, x.w)
        if v > 1:
            kv.conv(f"{at}_{part}_down", f"{label} {what}s' depthwise conv", c_in, o["k"], v, depthwise=True)
        kv.conv(f"{at}_{part}", f"{label} {what} head", dk, 1, norm=False)
        x.steps += kv.steps
    b, n, m = x.d.sizes["B"], x.h * x.w, kv.h * kv.w
    scores = Shape((b, heads, n, m), ("B", "h", "H·W", "H'·W'"))
    flops = 2 * b * heads * dk * n * m
    x.steps.append(x.d.step(f"{at}_scores", f"{label} scores = Q·Kᵀ/√d", scores, (q.shape(), kv.shape()),
                            flops=flops, note=f"{heads} heads of {dk} against one key head, {n} x {m} positions",
                            formula="2·B·h·d·(H·W)·(H'·W')"))
    x.steps.append(x.d.step(f"{at}_weighted", f"{label} softmax · V", q.shape(), (scores, kv.shape()), flops=flops,
                            note="every position attends to every strided key; rows sum to 1",
                            formula="2·B·h·d·(H·W)·(H'·W')"))
    x.c = heads * dk
    x.conv(f"{at}_out", f"{label} output conv", o["c"], 1, norm=False)
    x.add(f"{at}_layer_scale", f"{label} layer scale", x.c, "each channel times a learned scale")


def _fusion(x: Map, tower: MobileNet, maps: list[Map], rows: Rows) -> None:
    """The multi-scale fusion adapter: its feature maps at the first one's grid, side by side, a 1x1 FFN,
    the grid brought to the output grid's side, a norm."""
    first, grid = len(x.steps), tower.output_grid
    big = maps[0]
    x.c, x.h, x.w = sum(m.c for m in maps), big.h, big.w
    x.steps.append(x.d.step("msfa_concat", "fusion: stages upsampled (nearest) and concatenated", x.shape(),
                            tuple(m.shape() for m in maps),
                            note=" + ".join(f"{m.c} @ {m.h}x{m.w}" for m in maps) + f" -> {x.c} @ {x.h}x{x.w}"))
    _inverted(x, {"a": 0, "k": 0, "e": tower.fusion_expansion, "c": tower.width}, "msfa", "fusion",
              layer_scale=False)
    fused, size = x.shape(), f"{x.h}x{x.w}"
    if (x.h, x.w) != (grid, grid):
        pooled = x.h % grid == 0 and x.w % grid == 0
        label = f"fusion: {x.h // grid}x{x.w // grid} average pool" if pooled else "fusion: bilinear resize"
        x.h = x.w = grid
        x.steps.append(x.d.step("msfa_pool", label, x.shape(), (fused,), note=f"{size} -> {grid}x{grid}, no weights"))
    x.add("msfa_norm", "fusion norm", x.c, "RMSNorm over channels")
    _owns(rows, "msfa", x.steps[first:])


def _embedder(d: Dims, tower: MobileNet, grid: Shape, rows: Rows, tokens: ImageTokens) -> list[Step]:
    """Gemma3nMultimodalEmbedder on the soft tokens: the grid as rows (times √d_model), norm, projection,
    an unscaled norm; the hard-token table and its norm are off the path."""
    x = d.shape("B", "P", "d_model")
    embedding = rows.take("vision_embedding")
    steps = [
        d.step("soft_tokens", "grid as rows · √d_model", x, (grid,),
               note=f"{tower.output_grid}x{tower.output_grid} positions, one soft token each "
                    "(Gemma3nModel.get_image_features)"),
        d.step("soft_norm", "soft embedding norm", x, (x,), d.shape("d_model"), tower.d_model, note="RMSNorm: scale"),
        d.step("hard_tokens", "hard vision-token table and its norm (not on the path)", d.shape("d_model"), (),
               None, embedding - tower.d_model, traced=False, note=f"{tower.vocab} rows; 0 FLOPs counted"),
        d.linear("projector", "projection ·W", x, d.shape("d_model", "d_text"), d.shape("B", "P", "d_text"),
                 rows.take("projector"), f"{tower.d_model} -> {tower.text_width}, no bias"),
        d.step("post_norm", "post-projection norm", d.shape("B", "P", "d_text"), (d.shape("B", "P", "d_text"),),
               note="RMSNorm without a scale"),
        d.step("image_tokens", "image tokens", d.shape("N", "tokens", "d_text"), (d.shape("B", "P", "d_text"),),
               traced=False, note=f"{tokens.image_tokens} soft tokens + {tokens.special_tokens} special per image"),
    ]
    return steps
