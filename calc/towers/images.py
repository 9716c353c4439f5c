"""How one image becomes decoder tokens, per tower kind: the processor's resize, the patches the
encoder sees, the tokens left after merging, and the special tokens around them.

Each rule is what the model's processor in transformers does (cited per class); its numbers come
from the config where the config has them (patch and merge sizes) and otherwise from the model's
preprocessor_config.json as published (min/max pixels, longest edge), which a config.json does not
carry: they are fields, so a spec may change them.
"""


import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from calc.errors import GptcalcError
from calc.parts.base import Field, Part

__all__ = ["AnyresImages", "CanvasImages", "CropImages", "FixedImages", "HdImages", "NavitImages", "GridImages",
           "ImageTokens", "PooledImages", "RowImages", "TileImages", "closest_grid", "parse_image"]


def parse_image(text: str) -> tuple[int, int]:
    """`--image 1024x768`: width x height in pixels."""
    width, sep, height = text.lower().partition("x")
    if not sep or not width.strip().isdigit() or not height.strip().isdigit() or not int(width) or not int(height):
        raise GptcalcError(f"--image {text!r}: give WIDTHxHEIGHT in pixels, as 1024x768")
    return int(width), int(height)


@dataclass(frozen=True)
class ImageTokens:
    """One image through the tower: the size the processor resized it to, the patches the encoder
    attends over, and the tokens the decoder receives (image tokens plus special ones)."""

    width: int
    height: int
    patches: int
    image_tokens: int
    special_tokens: int
    views: int = 1  # what the encoder runs on separately: Llama-4's tiles and global view, LLaVA-OneVision's
    # (views, rows, columns of patches) for each size of view, where views differ in size (Step-3.7's
    # global view and crops); empty where every view is patches / views patches
    grids: tuple[tuple[int, int, int], ...] = ()

    @property
    def tokens(self) -> int:
        """What the image costs in the decoder's context (and its KV cache)."""
        return self.image_tokens + self.special_tokens

    def to_json(self) -> dict[str, int]:
        return {"width": self.width, "height": self.height, "patches": self.patches, "views": self.views,
                "image_tokens": self.image_tokens, "special_tokens": self.special_tokens, "tokens": self.tokens}


def _patch_grid(width: int, height: int, patch: int, per_token: int, special: int) -> ImageTokens:
    """An image resized to width x height: (height/patch)·(width/patch) patches, `per_token` of them
    merged or pooled into each token the decoder receives."""
    patches = (height // patch) * (width // patch)
    return ImageTokens(width, height, patches, patches // per_token, special)


class GridImages(Part):
    """Qwen2-VL's rule, kept by Qwen2.5-VL, Qwen3-VL and Qwen3.5 (transformers
    models/qwen2_vl/image_processing_qwen2_vl.py `smart_resize`): each side rounded to a multiple of
    patch·merge, the area then brought within [min_pixels, max_pixels] keeping the aspect ratio;
    (h/patch)·(w/patch) patches, merge² of them per token; <|vision_start|> and <|vision_end|> around."""

    kind: Literal["grid"] = "grid"
    patch_size: int = Field(gt=0)
    merge_size: int = Field(gt=0)
    min_pixels: int = Field(gt=0)
    max_pixels: int = Field(gt=0)
    special_tokens: int = Field(default=2, ge=0)

    def tokens(self, width: int, height: int) -> ImageTokens:
        h, w = self._resize(height, width)
        return _patch_grid(w, h, self.patch_size, self.per_token, self.special_tokens)

    @property
    def per_token(self) -> int:
        """Patches the projector makes one token of (merge x merge)."""
        return self.merge_size ** 2

    def largest(self) -> ImageTokens:
        """The image of the most tokens: the square of max_pixels (vLLM's Qwen2-VL processing info,
        get_image_size_with_most_features: Qwen3-VL's 4096² -> 16,384 tokens)."""
        side = math.isqrt(self.max_pixels)
        return self.tokens(side, side)

    def _resize(self, height: int, width: int) -> tuple[int, int]:
        factor = self.patch_size * self.merge_size
        if max(height, width) / min(height, width) > 200:  # smart_resize refuses it too
            raise GptcalcError(f"--image {width}x{height}: an aspect ratio over 200 is refused by the processor")
        h, w = round(height / factor) * factor, round(width / factor) * factor
        if h * w > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h = max(factor, math.floor(height / beta / factor) * factor)
            w = max(factor, math.floor(width / beta / factor) * factor)
        elif h * w < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
        return h, w


class FixedImages(Part):
    """Gemma 3 (transformers models/gemma3/processing_gemma3.py): every image resized to one square
    `image_size`, pooled to `tokens_per_image` soft tokens (mm_tokens_per_image), inserted as
    "\\n\\n<start_of_image>" + tokens + "<end_of_image>\\n\\n": 4 more tokens ("\\n\\n" is one). Gemma 3n's
    processor does the same at 768 x 768 (its MobileNet's 16 x 16 output grid: a "patch" of 48 pixels)."""

    kind: Literal["fixed"] = "fixed"
    image_size: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    tokens_per_image: int = Field(gt=0)
    special_tokens: int = Field(default=4, ge=0)

    def tokens(self, width: int, height: int) -> ImageTokens:
        side = self.image_size
        return ImageTokens(side, side, (side // self.patch_size) ** 2, self.tokens_per_image, self.special_tokens)

    @property
    def per_token(self) -> int:
        """Patches averaged into one soft token (Gemma 3: 4096 / 256 = a 4 x 4 pool)."""
        return (self.image_size // self.patch_size) ** 2 // self.tokens_per_image

    def largest(self) -> ImageTokens:
        """Every image is the same (pan and scan, off by default, not modelled)."""
        return self.tokens(self.image_size, self.image_size)


class PooledImages(Part):
    """Gemma 4 (transformers models/gemma4/image_processing_gemma4.py `get_aspect_ratio_preserving_size`,
    processing_gemma4.py `replace_image_token`): the image scaled, keeping its aspect ratio, to the
    largest size of at most max_tokens · pool² patches whose sides are multiples of pool·patch;
    pool x pool patches average into one soft token; <boi> and <eoi> around them. The encoder
    itself runs over the batch padded to max_tokens · pool² patches (padding masked)."""

    kind: Literal["pooled"] = "pooled"
    patch_size: int = Field(gt=0)
    pool: int = Field(gt=0)
    max_tokens: int = Field(gt=0)
    special_tokens: int = Field(default=2, ge=0)

    def tokens(self, width: int, height: int) -> ImageTokens:
        h, w = self._resize(height, width)
        return _patch_grid(w, h, self.patch_size, self.per_token, self.special_tokens)

    @property
    def per_token(self) -> int:
        return self.pool ** 2

    def _resize(self, height: int, width: int) -> tuple[int, int]:
        side = self.pool * self.patch_size
        factor = math.sqrt(self.max_tokens * self.pool ** 2 * self.patch_size ** 2 / (height * width))
        h, w = math.floor(factor * height / side) * side, math.floor(factor * width / side) * side
        if h == 0 and w == 0:
            raise GptcalcError(f"--image {width}x{height}: the processor refuses to resize it to 0 x 0")
        longest = self.max_tokens * side
        if h == 0:
            return side, min(width // height * side, longest)
        if w == 0:
            return min(height // width * side, longest), side
        return h, w

    def largest(self) -> ImageTokens:
        """The image of the most tokens: a square that fills max_tokens soft tokens."""
        side = math.isqrt(self.max_tokens) * self.pool * self.patch_size
        return self.tokens(side, side)


class RowImages(Part):
    """Pixtral / Mistral-3 (transformers models/pixtral/image_processing_pixtral.py
    `get_resize_output_image_size` and processing_pixtral.py): scaled down (never up) so the longest
    edge fits `longest_edge`, each side rounded up to whole tokens of patch·merge pixels; each row of
    tokens ends with [IMG_BREAK], the last with [IMG_END] instead."""

    kind: Literal["rows"] = "rows"
    patch_size: int = Field(gt=0)
    merge_size: int = Field(gt=0)
    longest_edge: int = Field(gt=0)

    def tokens(self, width: int, height: int) -> ImageTokens:
        ratio = max(height / self.longest_edge, width / self.longest_edge)
        if ratio > 1:
            height, width = math.floor(height / ratio), math.floor(width / ratio)
        token = self.patch_size * self.merge_size
        rows, cols = (height - 1) // token + 1, (width - 1) // token + 1
        return ImageTokens(cols * token, rows * token, rows * cols * self.merge_size ** 2, rows * cols, rows)

    @property
    def per_token(self) -> int:
        return self.merge_size ** 2

    def largest(self) -> ImageTokens:
        """The square of the longest edge."""
        return self.tokens(self.longest_edge, self.longest_edge)


class TileImages(Part):
    """Llama 4 (transformers models/llama4/image_processing_llama4.py `find_supported_resolutions`,
    `get_best_fit`; processing_llama4.py `_prompt_split_image`): the canvas of rows x cols tiles of
    `tile` pixels (rows·cols <= max_tiles) that the image fits with the least upscaling (or, when
    none fits, the least downscaling; ties: the smaller canvas); each tile, and a global view when
    there is more than one tile, becomes (tile / patch)² / shuffle² tokens. Around them:
    <|image_start|>, a <|tile_x_separator|> between tiles of a row and a <|tile_y_separator|> after
    each row (several tiles only), <|image|> before the global view, <|image_end|>."""

    kind: Literal["tiles"] = "tiles"
    tile: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    shuffle: int = Field(gt=0)  # pixel shuffle: shuffle² patches per token (ratio 0.5 -> 2)
    max_tiles: int = Field(gt=0)

    def tokens(self, width: int, height: int) -> ImageTokens:
        rows, cols = self._canvas(width, height)
        per_tile = (self.tile // self.patch_size) ** 2
        views = rows * cols + (rows * cols > 1)
        special = 3 + (rows * cols if rows * cols > 1 else 0)  # start, <|image|>, end; a separator after each tile
        return ImageTokens(cols * self.tile, rows * self.tile, views * per_tile, views * per_tile // self.shuffle ** 2,
                           special, views)

    @property
    def per_token(self) -> int:
        """Patches one pixel-shuffled token holds (shuffle x shuffle)."""
        return self.shuffle ** 2

    def largest(self) -> ImageTokens:
        """An image that fills all max_tiles tiles exactly (one row of them), plus the global view."""
        return self.tokens(self.max_tiles * self.tile, self.tile)

    def _canvas(self, width: int, height: int) -> tuple[int, int]:
        canvases = {(r, c) for n in range(1, self.max_tiles + 1) for r in range(1, n + 1) if n % r == 0 for c in [n // r]}
        scale = {rc: min(Fraction(rc[0] * self.tile, height), Fraction(rc[1] * self.tile, width)) for rc in canvases}
        up = [s for s in scale.values() if s >= 1]
        best = min(up) if up else max(scale.values())
        return min((rc for rc in canvases if scale[rc] == best), key=lambda rc: (rc[0] * rc[1], rc))


class NavitImages(Part):
    """Kimi-K2.5 (transformers models/kimi_k25/image_processing_kimi_k25.py `navit_resize`,
    processing_kimi_k25.py `replace_image_token`): scaled down (never up) until it holds at most
    max_patches patches and max_side patches a side, then padded to whole tokens of merge x merge
    patches; every merge² patches one <|media_pad|> token. The markers around an image come from the
    chat template, not the processor: not counted here."""

    kind: Literal["navit"] = "navit"
    patch_size: int = Field(gt=0)
    merge_size: int = Field(gt=0)
    max_patches: int = Field(default=16384, gt=0)
    max_side: int = Field(default=512, gt=0)  # the processor's size {"max_height": 512}, in patches

    def tokens(self, width: int, height: int) -> ImageTokens:
        p, side = self.patch_size, self.max_side * self.patch_size
        patches = max(1, height // p) * max(1, width // p)
        scale = min(1.0, math.sqrt(self.max_patches / patches), side / height, side / width)
        h, w = min(max(1, int(height * scale)), side), min(max(1, int(width * scale)), side)
        factor = self.merge_size * p
        h, w = -(-h // factor) * factor, -(-w // factor) * factor
        return _patch_grid(w, h, p, self.per_token, 0)

    @property
    def per_token(self) -> int:
        return self.merge_size ** 2

    def largest(self) -> ImageTokens:
        """The image of the most tokens: a square of max_patches patches."""
        side = math.isqrt(self.max_patches) * self.patch_size
        return self.tokens(side, side)


class CanvasImages(Part):
    """InternVL (transformers models/got_ocr2/image_processing_pil_got_ocr2.py `get_optimal_tiled_canvas`,
    which InternVLProcessor turns on with crop_to_patches; processing_internvl.py): the columns x rows
    of `tile`-pixel tiles (min_tiles .. max_tiles of them, fewest first) whose aspect ratio is closest
    to the image's, a tie going to more tiles while the image's area exceeds half the canvas; a
    thumbnail of the whole image beside several tiles; each view's (tile / patch)² patches
    pixel-shuffled shuffle x shuffle into one token; <img> and </img> around them."""

    kind: Literal["canvas"] = "canvas"
    tile: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    shuffle: int = Field(gt=0)  # 1 / downsample_ratio
    min_tiles: int = Field(default=1, gt=0)
    max_tiles: int = Field(default=12, gt=0)
    special_tokens: int = Field(default=2, ge=0)

    def tokens(self, width: int, height: int) -> ImageTokens:
        cols, rows = self._grid(width, height)
        views = cols * rows + (cols * rows > 1)
        per_view = (self.tile // self.patch_size) ** 2
        return ImageTokens(cols * self.tile, rows * self.tile, views * per_view,
                           views * per_view // self.per_token, self.special_tokens, views)

    @property
    def per_token(self) -> int:
        return self.shuffle ** 2

    def largest(self) -> ImageTokens:
        """The image of the most tokens: one shaped like the largest grid of tiles, so every tile is used."""
        cols, rows = max(((c, self.max_tiles // c) for c in range(1, self.max_tiles + 1)), key=lambda g: g[0] * g[1])
        return self.tokens(cols * self.tile, rows * self.tile)

    def _grid(self, width: int, height: int) -> tuple[int, int]:
        return closest_grid(width, height, self.tile, self.min_tiles, self.max_tiles)


def closest_grid(width: int, height: int, tile: int, least: int, most: int) -> tuple[int, int]:
    """(columns, rows) of `tile`-pixel tiles, least .. most of them, whose aspect is closest to the image's:
    InternVL's get_optimal_tiled_canvas and Phi-4-multimodal's find_closest_aspect_ratio (one algorithm),
    in their own float arithmetic so ties fall the same way."""
    grids = sorted(((c, r) for c in range(1, most + 1) for r in range(1, most + 1) if least <= c * r <= most),
                   key=lambda g: g[0] * g[1])
    best, best_diff = (1, 1), math.inf
    for cols, rows in grids:
        diff = abs(width / height - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * tile * tile * cols * rows:
            best = (cols, rows)
    return best


class AnyresImages(Part):
    """LLaVA-OneVision's "anyres_max_N" (transformers models/llava_onevision/processing_llava_onevision.py
    `_get_number_of_features`, image_processing_utils.py `select_best_resolution`): the image goes
    to the pinpoint canvas that keeps the most of its pixels (ties: the least waste), cut into
    `tile`-pixel tiles, plus a base view of the whole image; the tiles' side x side feature grid is
    cropped back to the image's aspect (the processor's padding removed), shrunk by √(area / N
    tiles' worth) when that is over 1.1, and ends each row with the image newline. One image alone;
    several images in one prompt take the base view and a newline each (not modelled). All of it is
    image-token placeholders; a "default" feature selection drops one (the CLS it assumes)."""

    kind: Literal["anyres"] = "anyres"
    tile: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    pinpoints: tuple[tuple[int, int], ...] = Field(strict=False, min_length=1)  # (height, width) canvases
    max_tiles: int = Field(gt=0)  # the N of anyres_max_N
    drop_first: bool = False  # vision_feature_select_strategy "default"

    def tokens(self, width: int, height: int) -> ImageTokens:
        canvas_h, canvas_w = self.canvas(height, width)
        side = self.tile // self.patch_size
        rows, cols = self.shrunk(*self.unpadded(height, width, side * (canvas_h // self.tile),
                                                side * (canvas_w // self.tile)))
        views = 1 + (canvas_h // self.tile) * (canvas_w // self.tile)
        return ImageTokens(canvas_w, canvas_h, views * side ** 2, rows * cols + rows + side ** 2 - self.drop_first, 0,
                           views)

    @property
    def per_token(self) -> int:
        """Every patch feature is a token (before the unpadding crop and the shrink drop some)."""
        return 1

    def largest(self) -> ImageTokens:
        """The pinpoint canvas of the most tokens, as vLLM's LLaVA-NeXT-style processing info looks for it
        (get_image_size_with_most_features: each pinpoint tried)."""
        return max((self.tokens(w, h) for h, w in self.pinpoints), key=lambda t: (t.image_tokens, t.tokens))

    def canvas(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) of the canvas: select_best_resolution, in its own float arithmetic so ties fall
        the same way."""
        best, most, waste = self.pinpoints[0], 0, math.inf
        for h, w in self.pinpoints:
            scale = min(w / width, h / height)
            effective = min(int(width * scale) * int(height * scale), width * height)
            if effective > most or (effective == most and w * h - effective < waste):
                best, most, waste = (h, w), effective, w * h - effective
        return best

    def unpadded(self, height: int, width: int, rows: int, cols: int) -> tuple[int, int]:
        """The canvas' rows x cols feature grid cropped back to the image's aspect, as many cut from each
        side (_get_unpadded_features, unpad_image)."""
        if width / height > cols / rows:
            return rows - (rows - int(round(height * (cols / width), 7))) // 2 * 2, cols
        return rows, cols - (cols - int(round(width * (rows / height), 7))) // 2 * 2

    def shrunk(self, rows: int, cols: int) -> tuple[int, int]:
        """The grid shrunk by √(rows·cols / N tiles' features) where that is over 1.1 (anyres_max_N)."""
        ratio = math.sqrt(rows * cols / (self.max_tiles * (self.tile // self.patch_size) ** 2))
        return (int(rows // ratio), int(cols // ratio)) if ratio > 1.1 else (rows, cols)


class HdImages(Part):
    """Phi-4-multimodal's dynamic HD transform (transformers models/phi4_multimodal/
    image_processing_phi4_multimodal.py `dynamic_preprocess` lines 79-137, `_preprocess` lines 172-230):
    the image goes onto ceil(w / crop) x ceil(h / crop) crops of `crop` pixels, or, past max_crops,
    onto the closest grid of at most max_crops (lines 84-100, `closest_grid`); scaled to fill the
    grid's width or height, the rest padded, and the padding's whole patches masked out (126-129).
    The encoder runs on a global view (the whole image at crop x crop) and on every crop; the
    embedding (modeling_phi4_multimodal.py `image_token_compression`, 2 x 2 average pool) keeps half
    of each side's patches. num_img_tokens (lines 216-222) counts the global view's side² tokens plus
    a separator ending each of its rows, one separator between the views, and the crops' unmasked
    tokens plus a separator ending each row of them; every one is an <|image|> placeholder the
    tower's output (separators included, learned vectors of the tower) replaces: no special tokens."""

    kind: Literal["hd"] = "hd"
    crop: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    max_crops: int = Field(default=36, gt=0)  # the processor's dynamic_hd

    def tokens(self, width: int, height: int) -> ImageTokens:
        cols, rows = self._grid(width, height)
        pad_w, pad_h = self._padding(width, height, cols, rows)
        mask = self.crop // self.patch_size
        kept_rows, kept_cols = (self._kept(n * mask - pad // self.patch_size, n, mask)
                                for n, pad in ((rows, pad_h), (cols, pad_w)))
        side = self._kept(mask, 1, mask)  # the processor writes 256 and 16: 448 / 14 = 32 patches, 16 kept a side
        views = 1 + rows * cols
        return ImageTokens(cols * self.crop, rows * self.crop, views * mask ** 2,
                           side * side + side + 1 + kept_rows * kept_cols + kept_rows, 0, views)

    @property
    def per_token(self) -> int:
        """The 2 x 2 average pool."""
        return 4

    def largest(self) -> ImageTokens:
        """The image of the most tokens: one column of max_crops crops (each row of crops adds its separators)."""
        return self.tokens(self.crop, self.max_crops * self.crop)

    def _grid(self, width: int, height: int) -> tuple[int, int]:
        cols, rows = math.ceil(width / self.crop), math.ceil(height / self.crop)
        if cols * rows > self.max_crops:
            return closest_grid(width, height, self.crop, 1, self.max_crops)
        return cols, rows

    def _padding(self, width: int, height: int, cols: int, rows: int) -> tuple[int, int]:
        """The pixels padded on the right and at the bottom, in the processor's float arithmetic."""
        target_w, target_h = self.crop * cols, self.crop * rows
        if target_w / width < target_h / height:
            new_w, new_h = target_w, int(height * (target_w / width))
        else:
            new_w, new_h = int(width * (target_h / height)), target_h
        if min(new_w, new_h) < 10:
            raise GptcalcError(f"--image {width}x{height}: the processor refuses so extreme an aspect ratio")
        return target_w - new_w, target_h - new_h

    @staticmethod
    def _kept(unmasked: int, crops: int, mask: int) -> int:
        """Pooled tokens along one axis of `crops` crops of `mask` patches whose first `unmasked` patches
        are kept: every other patch of each crop (the mask's [0::2] per crop)."""
        return sum(-(-min(max(unmasked - k * mask, 0), mask) // 2) for k in range(crops))


class CropImages(Part):
    """Step-3.7 (transformers models/step3p7/image_processing_step3p7.py `_plan_patches` lines 108-140,
    processing_step3p7.py `replace_image_token` lines 49-60): a near-degenerate image (a side under 32
    pixels, aspect over 4) squared; one longer than max_side scaled down to it; then a window: none
    when the image fits the global view (long side <= global_size) unless it is elongated (over 1.5,
    the short side), min(short side, crop) when over 4, else `crop`; each side snapped to a multiple
    of the window (up when the remainder exceeds 20 % of it) and cut into windows, each resized to
    crop x crop. The encoder sees the global view (global_size²) and every crop; its two stride-2
    convolutions leave one token per (patch·stride)² pixels (the views are of two sizes: `patches`
    is their sum). Tokens: <patch_start>, a crop's tokens, <patch_end> per crop, a <patch_newline>
    after each row of crops but the last, then <im_start>, the global view's tokens, <im_end>."""

    kind: Literal["crops"] = "crops"
    global_size: int = Field(gt=0)
    crop: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    stride: int = Field(gt=0)  # the downsamplers' total stride
    max_side: int = Field(default=3024, gt=0)

    def tokens(self, width: int, height: int) -> ImageTokens:
        cols, rows, window = self.windows(width, height)
        crops, token = cols * rows, self.patch_size * self.stride
        image = (self.global_size // token) ** 2 + crops * (self.crop // token) ** 2
        special = 2 + 2 * crops + max(0, rows - 1)
        patches = (self.global_size // self.patch_size) ** 2 + crops * (self.crop // self.patch_size) ** 2
        size = (cols * window, rows * window) if crops else (self.global_size, self.global_size)
        sides = (self.global_size // self.patch_size, self.crop // self.patch_size)
        grids = ((1, sides[0], sides[0]),) + ((crops, sides[1], sides[1]),) * bool(crops)
        return ImageTokens(*size, patches, image, special, 1 + crops, grids)

    @property
    def per_token(self) -> int:
        return self.stride ** 2

    def largest(self) -> ImageTokens:
        """The image of the most tokens: max_side square, cut into the most crop x crop windows."""
        return self.tokens(self.max_side, self.max_side)

    @staticmethod
    def squared(width: int, height: int) -> bool:
        """Whether the processor pads the image to a square first (a near-degenerate one)."""
        return min(width, height) < 32 and max(width / height, height / width) > 4

    def windows(self, width: int, height: int) -> tuple[int, int, int]:
        """(columns, rows) of crops and the window's side (0 x 0 without crops)."""
        if self.squared(width, height):
            width = height = max(width, height)
        if max(width, height) > self.max_side:
            scale = self.max_side / max(width, height)
            width, height = int(width * scale), int(height * scale)
        short, long = min(width, height), max(width, height)
        if long <= self.global_size:
            window = short if long / short > 1.5 else 0
        else:
            window = min(short, self.crop) if long / short > 4 else self.crop
        if not window:
            return 0, 0, 0
        cols, rows = (max(1, (window * (n // window + (n % window > 0.2 * window)) if n >= window else n) // window)
                      for n in (width, height))
        return cols, rows, window
