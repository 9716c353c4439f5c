"""The reference MobileNet-v5 vision tower (Gemma 3n's), runnable without timm, built from a `MobileNet`
(calc/towers/mobilenet.py) on the tensors `calc.checkpoint.mobilenet_slots` names, so a checkpoint's
tower loads with `load_state_dict(strict=True)`.

Computed as timm 1.0.31's MobileNetV5Encoder.forward_features (models/mobilenetv5.py, with
mobilenetv5_300m_enc's pad_type 'same', GELU-tanh and RmsNorm2d) and Gemma3nModel.get_image_features
(transformers models/gemma3n/modeling_gemma3n.py) do:

    conv       no bias (but the stem's); TF "same" padding: ceil(n / stride) out, the padding's odd
               pixel at the end (timm layers/padding.py pad_same; symmetric where the stride is 1)
    norm       RmsNorm2d over the channels: x · rsqrt(mean(x²) + 1e-6) · weight, GELU-tanh after it where
               the conv is followed by an activation (ConvNormAct, EdgeResidual's bn1)
    er         conv_exp k x k (strided), norm + act, conv_pwl 1x1, norm
    uir        [dw_start a x a, norm], pw_exp 1x1, norm + act, [dw_mid k x k, norm + act], pw_proj 1x1, norm,
               times layer_scale; the stride on dw_mid where there is one, else on dw_start
    mqa        norm; queries (1x1 to h·d), one key and one value head (1x1 to d, after a strided depthwise
               conv and a norm where v > 1); softmax(q·kᵀ / √d) v over every position; output 1x1;
               times layer_scale
    residual   a block's input added back where its stride is 1 and its channels do not change
    msfa       the feature maps `fused_maps` names, each smaller one upsampled (nearest) to the first's
               grid, concatenated; pw_exp 1x1, norm + act, pw_proj 1x1, norm; average-pooled to
               `output_grid` (bilinear where that does not divide the grid); norm
    embedder   the grid as rows, times √d_model, the soft-embedding RMSNorm, the bias-free projection, an
               RMSNorm without a scale (Gemma3nMultimodalEmbedder)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from calc.checkpoint.mobilenet_slots import mobilenet_roles
from calc.checkpoint.tower_slots import layout_of
from calc.parts.norm import Norm as NormSpec
from calc.reference.parts.base import build_weights
from calc.reference.parts.norm import Norm
from calc.towers.mobilenet import MobileNet, block_options

__all__ = ["MobileNetTower"]

EPS = 1e-6  # timm's RmsNorm2d and RmsNormAct2d default, which MobileNetV5Encoder keeps


class MobileNetTower(nn.Module):
    """One MobileNet-v5 encoder and Gemma 3n's vision embedder, its tensors at their Hugging Face paths:
    built empty, to hold a checkpoint's (loaded strictly)."""

    def __init__(self, name: str, tower: MobileNet, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.tower, lay = tower, layout_of(tower)
        self.root, self.embedder = lay["root"], lay["embedder"]
        with torch.device(device):
            self.weights = build_weights(self, mobilenet_roles(name, tower, lay), self._norm, conv1d=False)

    def _norm(self, role: str, slot: object, bias: object) -> Norm:
        """An RMSNorm with a scale: the encoder's over the channels (applied by `_rms`), the embedder's."""
        eps = self.tower.eps if role.startswith(self.embedder) else EPS
        return Norm(NormSpec.model_construct(kind="rmsnorm", weight=True, bias=False, eps=eps, unit_offset=False),
                    slot.shape)

    @staticmethod
    def transformers_inputs(pixels: torch.Tensor) -> dict[str, torch.Tensor]:
        """get_image_features' input: the pixels."""
        return {"pixel_values": pixels}

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """Image features [N, output_grid², text width] of pixels [N, C, H, W] (module docstring)."""
        t, w = self.tower, self.weights
        stem = f"{self.root}.conv_stem.conv"
        x = self._rms(self._conv(pixels, stem, 2, bias=w.tensor(f"{stem}.bias")), f"{stem}.norm", act=True)
        maps, c = [x], t.stem
        for i, stage in enumerate(t.stages):
            for j, block in enumerate(stage):
                x, c = self._block(x, f"{self.root}.blocks.{i}.{j}", block, c)
            maps.append(x)
        x = self._fusion([maps[i] for i in t.fused_maps])
        x = x.flatten(2).transpose(1, 2) * math.sqrt(t.d_model)  # (N, grid², d_model)
        x = w[f"{self.embedder}.soft_embedding_norm"](x) @ w.tensor(f"{self.embedder}.projection").T
        unscaled = Norm(NormSpec.model_construct(kind="rmsnorm", weight=False, bias=False, eps=t.eps), ())
        return unscaled(x)

    def _conv(self, x: torch.Tensor, path: str, stride: int = 1, depthwise: bool = False,
              bias: torch.Tensor | None = None) -> torch.Tensor:
        """timm's conv with "same" padding (pad_same: the odd pixel after)."""
        weight = self.weights.tensor(f"{path}.weight")
        k = weight.shape[-1]
        pads = [(max((math.ceil(n / stride) - 1) * stride + k - n, 0)) for n in x.shape[-2:]]
        x = F.pad(x, (pads[1] // 2, pads[1] - pads[1] // 2, pads[0] // 2, pads[0] - pads[0] // 2))
        return F.conv2d(x, weight, bias, stride=stride, groups=x.shape[1] if depthwise else 1)

    def _rms(self, x: torch.Tensor, role: str, act: bool = False) -> torch.Tensor:
        """RmsNorm2d over the channels, GELU-tanh after it where `act`."""
        x = x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + EPS) * self.weights.tensor(role)[:, None, None]
        return F.gelu(x, approximate="tanh") if act else x

    def _conv_norm(self, x: torch.Tensor, path: str, stride: int = 1, depthwise: bool = False,
                   act: bool = True) -> torch.Tensor:
        """ConvNormAct: `path`.conv, then `path`.bn (and the activation where `act`)."""
        return self._rms(self._conv(x, f"{path}.conv", stride, depthwise), f"{path}.conv.norm", act)

    def _block(self, x: torch.Tensor, path: str, block: str, c_in: int) -> tuple[torch.Tensor, int]:
        """One block of timm's string on x; its output and channels."""
        kind, o = block_options(block)
        stride, inputs = o.get("s", 1), x
        if kind == "er":
            x = self._rms(self._conv(x, f"{path}.conv_exp", stride), f"{path}.bn1", act=True)
            x = self._rms(self._conv(x, f"{path}.conv_pwl"), f"{path}.bn2")
        elif kind == "uir":
            if o["a"]:
                x = self._conv_norm(x, f"{path}.dw_start", 1 if o["k"] else stride, depthwise=True, act=False)
            x = self._conv_norm(x, f"{path}.pw_exp")
            if o["k"]:
                x = self._conv_norm(x, f"{path}.dw_mid", stride, depthwise=True)
            x = self._conv_norm(x, f"{path}.pw_proj", act=False)
        else:
            x = self._attention(self._rms(x, f"{path}.norm"), f"{path}.attn", o)
        if kind != "er":
            x = x * self.weights.tensor(f"{path}.layer_scale")[:, None, None]
        return (x + inputs if stride == 1 and c_in == o["c"] else x), o["c"]

    def _attention(self, x: torch.Tensor, path: str, o: dict[str, int]) -> torch.Tensor:
        """MultiQueryAttention2d: h query heads against one key and one value head, strided by v."""
        N, _, H, W = x.shape
        heads, d, v = o["h"], o["d"], o.get("v", 1)
        q = self._conv(x, f"{path}.query.proj").reshape(N, heads, d, H * W).transpose(-1, -2)  # (N, h, HW, d)
        kv = []
        for part in ("key", "value"):
            y = x
            if v > 1:
                y = self._rms(self._conv(y, f"{path}.{part}.down_conv", v, depthwise=True), f"{path}.{part}.norm")
            kv.append(self._conv(y, f"{path}.{part}.proj").flatten(2).transpose(1, 2)[:, None])  # (N, 1, H'W', d)
        scores = (q * d ** -0.5) @ kv[0].transpose(-1, -2)
        out = scores.softmax(dim=-1) @ kv[1]  # (N, h, HW, d)
        out = out.transpose(1, 2).reshape(N, H, W, heads * d).permute(0, 3, 1, 2)
        return self._conv(out, f"{path}.output.proj")

    def _fusion(self, maps: list[torch.Tensor]) -> torch.Tensor:
        """MobileNetV5MultiScaleFusionAdapter on its feature maps (module docstring)."""
        size, grid = maps[0].shape[-2:], self.tower.output_grid
        x = torch.cat([m if m.shape[-2:] == size else F.interpolate(m, size=size, mode="nearest") for m in maps], 1)
        ffn = f"{self.root}.msfa.ffn"
        x = self._conv_norm(self._conv_norm(x, f"{ffn}.pw_exp"), f"{ffn}.pw_proj", act=False)
        if tuple(size) != (grid, grid):
            if size[0] % grid or size[1] % grid:
                x = F.interpolate(x, size=(grid, grid), mode="bilinear")
            else:
                x = F.avg_pool2d(x, (size[0] // grid, size[1] // grid))
        return self._rms(x, f"{self.root}.msfa.norm")
