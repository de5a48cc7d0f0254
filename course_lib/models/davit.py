"""DaViT: Dual Attention Vision Transformers, spatial windows and channel groups in turn.

Ding et al., 2022, "DaViT: Dual Attention Vision Transformers" (ECCV). Every stage stacks *dual*
blocks, each a spatial block followed by a channel block (Fig. 2 and 3 of the paper):

* spatial window attention: tokens attend to tokens inside ``ws x ws`` windows (as Swin's W-MSA,
  without shifting and without a relative position bias);
* channel group attention (Eq. 3): the C channels are split into ``G`` groups of ``C_g`` and, per
  group, *channels attend to channels*, the scores summing over all ``N`` tokens:
  ``A(Q_g, K_g, V_g) = (softmax(Q_g^T K_g / sqrt(C_g)) V_g^T)^T``, a ``C_g x C_g`` attention matrix.
  Each output channel is a mixture of channels taken over the whole image: a global receptive
  field at linear cost in N. The authors' code (and timm's port) computes ``softmax(k^T v)`` and
  applies it to ``q``: the same equation with q, k, v relabelled, so loading their weights
  permutes the three chunks of ``qkv`` (``from_timm``);
* a convolutional position encoding (a depthwise 3x3 convolution added as a residual) before the
  attention and before the MLP of every block.

Stages are joined by downsampling (LayerNorm, then a 2x2 stride-2 convolution); the stem is a 7x7
stride-4 convolution and LayerNorm. The head pools the last map, then normalises (LayerNorm) and
classifies, as in the authors' code. Maps not divisible by the window are zero-padded on the bottom
and right before window attention and cropped afterwards (as in the authors' code), so any input
size works. Presets ``davit-t``, ``davit-s`` and ``davit-b`` have 28.3M,
49.7M and 87.9M parameters (Table 1 of the paper).

Shape legend: ``B`` batch, ``H x W`` feature map, ``N = H * W`` tokens, ``C`` channels, ``G``
channel groups of ``Cg = C / G`` channels, ``Hd`` heads, ``nW`` windows, ``ws`` window size.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import MultiHeadAttention
from course_lib.layers import FeedForward
from course_lib.models._family import load_converted, preset, split_chunks
from course_lib.vision import DropPath, pad_to_multiple, window_partition, window_reverse

__all__ = [
    "PRESETS",
    "TINY",
    "ChannelAttention",
    "ChannelBlock",
    "ConvPosEnc",
    "DaViT",
    "DaViTConfig",
    "SpatialBlock",
    "example_batch",
    "from_timm",
]


@dataclass(frozen=True)
class DaViTConfig:
    """Hyper-parameters of a DaViT (defaults: DaViT-Tiny at 224 px, ImageNet-1k head)."""

    image_size: int = 224  # only sets the input the presets expect; the model takes any size
    patch_size: int = 4  # stride of the stem convolution (kernel 2 * patch_size - 1)
    in_channels: int = 3
    num_classes: int = 1000  # 0: no head, forward returns the pooled features
    embed_dims: tuple[int, ...] = (96, 192, 384, 768)
    depths: tuple[int, ...] = (1, 1, 3, 1)  # dual blocks (spatial + channel) per stage
    num_heads: tuple[int, ...] = (3, 6, 12, 24)  # of the spatial window attention
    num_groups: tuple[int, ...] = (3, 6, 12, 24)  # of the channel group attention
    window_size: int = 7
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.1
    norm_eps: float = 1e-5
    dropout: float = 0.0  # attention weights (spatial and channel), attention output and MLP
    fused_attn: bool = True  # torch's fused SDPA kernel; False = the lecture's manual path

    # The contract's names (course_lib.models._family).
    @property
    def embed_dim(self) -> int:
        """embed_dims[0]: the width of the first stage."""
        return self.embed_dims[0]

    @property
    def depth(self) -> int:
        """2 * sum(depths): a dual block is a spatial and a channel block."""
        return 2 * sum(self.depths)

    def __post_init__(self) -> None:
        lengths = {
            len(self.embed_dims),
            len(self.depths),
            len(self.num_heads),
            len(self.num_groups),
        }
        if len(lengths) != 1:
            raise ValueError("embed_dims, depths, num_heads and num_groups must have equal lengths")


class ConvPosEnc(nn.Module):
    """Convolutional position encoding: x + DepthwiseConv3x3(x); (B, H, W, C) -> (B, H, W, C)."""

    def __init__(self, *, dim: int, kernel_size: int = 3) -> None:
        super().__init__()
        self.proj = nn.Conv2d(dim, dim, kernel_size, padding=kernel_size // 2, groups=dim)

    def forward(self, x: Tensor) -> Tensor:
        feat = self.proj(x.permute(0, 3, 1, 2))  # (B, C, H, W)
        return x + feat.permute(0, 2, 3, 1)  # (B, H, W, C)


class ChannelAttention(nn.Module):
    """Channel group attention (Eq. 3): (B, N, C) -> (B, N, C); weights (B, G, Cg, Cg).

    ``q``, ``k``, ``v`` follow the paper's Eq. 3. The authors' code names the same three chunks
    of ``qkv`` differently (its ``softmax(k^T v)`` applied to ``q`` is this module's
    ``softmax(q^T k)`` applied to ``v``): ``from_timm`` permutes them when loading.
    ``fused_attn=True`` runs the same product through ``scaled_dot_product_attention`` on the
    transposed tensors (channels as queries and keys, tokens as features).
    """

    def __init__(
        self,
        *,
        dim: int,
        num_groups: int,
        qkv_bias: bool = True,
        dropout: float = 0.0,
        fused_attn: bool = True,
    ) -> None:
        super().__init__()
        if dim % num_groups:
            raise ValueError(f"dim={dim} is not divisible by num_groups={num_groups}")
        self.num_groups = num_groups
        self.dropout, self.fused_attn = dropout, fused_attn
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, *, return_attn: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        B, N, C = x.shape
        G = self.num_groups
        qkv = self.qkv(x).reshape(B, N, 3, G, C // G).permute(2, 0, 3, 1, 4)  # (3, B, G, N, Cg)
        q, k, v = qkv.unbind(0)  # (B, G, N, Cg) each
        dropout_p = self.dropout if self.training else 0.0
        if self.fused_attn and not return_attn:
            qt, kt, vt = (t.transpose(-2, -1) for t in (q, k, v))  # (B, G, Cg, N) each
            y = F.scaled_dot_product_attention(
                qt, kt, vt, dropout_p=dropout_p, scale=(C // G) ** -0.5
            ).transpose(-2, -1)  # (B, G, N, Cg)
        else:
            scores = q.transpose(-2, -1) @ k * (C // G) ** -0.5  # (B, G, Cg, Cg), over tokens
            weights = scores.softmax(dim=-1)  # each channel's weights over its group's channels
            dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
            y = v @ dropped.transpose(-2, -1)  # (B, G, N, Cg): y_n,i = sum_j A_ij v_n,j
        y = y.transpose(1, 2).reshape(B, N, C)  # (B, N, C) groups concatenated
        y = self.proj(y)
        return (y, weights) if return_attn else y


class SpatialBlock(nn.Module):
    """CPE, window attention, CPE, MLP: (B, H, W, C) -> (B, H, W, C) (Fig. 3a)."""

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        window_size: int,
        mlp_ratio: float = 4.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-5,
        dropout: float = 0.0,
        fused_attn: bool = True,
    ) -> None:
        super().__init__()
        self.window_size = window_size
        self.cpe1 = ConvPosEnc(dim=dim)
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = MultiHeadAttention(dim, num_heads, dropout=dropout, fused=fused_attn)
        self.cpe2 = ConvPosEnc(dim=dim)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = FeedForward(dim, int(dim * mlp_ratio), dropout=dropout, activation="gelu")
        self.dropout = nn.Dropout(dropout)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: Tensor) -> Tensor:
        B, H, W, C = x.shape
        ws = self.window_size
        x = self.cpe1(x)
        h = pad_to_multiple(self.norm1(x), ws)  # (B, Hp, Wp, C)
        Hp, Wp = h.shape[1:3]
        windows = window_partition(h, ws).reshape(-1, ws * ws, C)  # (B*nW, ws*ws, C)
        windows = self.attn(windows)
        h = window_reverse(windows.reshape(-1, ws, ws, C), ws, Hp, Wp)  # (B, Hp, Wp, C)
        x = x + self.drop_path(self.dropout(h[:, :H, :W]))
        x = self.cpe2(x)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ChannelBlock(nn.Module):
    """CPE, channel group attention, CPE, MLP: (B, H, W, C) -> (B, H, W, C) (Fig. 3b)."""

    def __init__(
        self,
        *,
        dim: int,
        num_groups: int,
        mlp_ratio: float = 4.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-5,
        dropout: float = 0.0,
        fused_attn: bool = True,
    ) -> None:
        super().__init__()
        self.cpe1 = ConvPosEnc(dim=dim)
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = ChannelAttention(
            dim=dim, num_groups=num_groups, dropout=dropout, fused_attn=fused_attn
        )
        self.cpe2 = ConvPosEnc(dim=dim)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = FeedForward(dim, int(dim * mlp_ratio), dropout=dropout, activation="gelu")
        self.dropout = nn.Dropout(dropout)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: Tensor) -> Tensor:
        x = self.cpe1(x)
        h = self.attn(self.norm1(x).flatten(1, 2)).reshape(x.shape)  # over all N = H*W tokens
        x = x + self.drop_path(self.dropout(h))
        x = self.cpe2(x)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class Downsample(nn.Module):
    """LayerNorm then a 2x2 stride-2 convolution: (B, H, W, C) -> (B, ceil(H/2), ceil(W/2), C')."""

    def __init__(self, *, in_dim: int, out_dim: int, norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(in_dim, eps=norm_eps)
        self.proj = nn.Conv2d(in_dim, out_dim, kernel_size=2, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        x = pad_to_multiple(self.norm(x), 2)
        return self.proj(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)  # (B, H/2, W/2, C')


class DaViT(nn.Module):
    """DaViT classifier: images (B, C_in, H, W) -> logits (B, num_classes)."""

    def __init__(self, *, config: DaViTConfig) -> None:
        super().__init__()
        self.config = cfg = config
        p = cfg.patch_size
        # Overlapping stem: kernel 2p - 1, stride p, padding p - 1 (7x7 / 4 / 3 for p = 4).
        self.stem = nn.Conv2d(
            cfg.in_channels, cfg.embed_dims[0], 2 * p - 1, stride=p, padding=p - 1
        )
        self.stem_norm = nn.LayerNorm(cfg.embed_dims[0], eps=cfg.norm_eps)
        n_blocks = 2 * sum(cfg.depths)
        rates = [cfg.drop_path_rate * i / max(n_blocks - 1, 1) for i in range(n_blocks)]
        self.stages = nn.ModuleList()
        for i, (dim, depth) in enumerate(zip(cfg.embed_dims, cfg.depths)):
            blocks: list[nn.Module] = []
            if i > 0:
                blocks.append(
                    Downsample(in_dim=cfg.embed_dims[i - 1], out_dim=dim, norm_eps=cfg.norm_eps)
                )
            for _ in range(depth):
                common = dict(
                    mlp_ratio=cfg.mlp_ratio,
                    norm_eps=cfg.norm_eps,
                    dropout=cfg.dropout,
                    fused_attn=cfg.fused_attn,
                )
                blocks.append(
                    SpatialBlock(
                        dim=dim,
                        num_heads=cfg.num_heads[i],
                        window_size=cfg.window_size,
                        drop_path=rates.pop(0),
                        **common,
                    )
                )
                blocks.append(
                    ChannelBlock(
                        dim=dim, num_groups=cfg.num_groups[i], drop_path=rates.pop(0), **common
                    )
                )
            self.stages.append(nn.Sequential(*blocks))
        self.norm = nn.LayerNorm(cfg.embed_dims[-1], eps=cfg.norm_eps)
        self.head = (
            nn.Linear(cfg.embed_dims[-1], cfg.num_classes) if cfg.num_classes else nn.Identity()
        )

    def forward_features(self, images: Tensor) -> Tensor:
        """images (B, C_in, H, W) -> last stage's map (B, H', W', C'), before the head's norm."""
        if images.ndim != 4 or images.shape[1] != self.config.in_channels:
            raise ValueError(
                f"expected images of shape (B, {self.config.in_channels}, H, W), "
                f"got {tuple(images.shape)}"
            )
        x = self.stem(images).permute(0, 2, 3, 1)  # (B, H/p, W/p, C)
        x = self.stem_norm(x)
        for stage in self.stages:
            x = stage(x)
        return x

    def forward(self, images: Tensor) -> Tensor:
        """images (B, C_in, H, W) -> logits (B, num_classes) (with ``num_classes=0``: (B, C')).

        The head pools, then normalises, then classifies (the authors' order; timm's
        ``NormMlpClassifierHead``).
        """
        pooled = self.forward_features(images).mean(dim=(1, 2))  # (B, C') global average pooling
        return self.head(self.norm(pooled))


def from_timm(model: DaViT, state_dict: dict[str, Tensor]) -> DaViT:
    """Load a timm ``DaVit`` state dict (the authors' layout, as ported to timm) into ``model``.

    Key mapping (timm -> course_lib; everything else keeps its name). Stage ``i`` of course_lib
    is one ``nn.Sequential``: ``Downsample`` first (``i > 0``, offset ``o = 1``, else ``o = 0``),
    then the spatial and channel block of each dual block ``j``::

        stem.conv.* / stem.norm.*                -> stem.* / stem_norm.*
        stages.i.downsample.norm.* / .conv.*     -> stages.i.0.norm.* / stages.i.0.proj.*
        stages.i.blocks.j.0.*  (spatial)         -> stages.i.{o + 2j}.*
        stages.i.blocks.j.1.*  (channel)         -> stages.i.{o + 2j + 1}.*
        ...spatial attn.qkv.*                    -> attn.{q,k,v}_proj.*  (rows split in 3)
        ...spatial attn.proj.*                   -> attn.out_proj.*
        ...channel attn.qkv.*  chunks (q, k, v)  -> attn.qkv.*  chunks (k, v, q)
        head.norm.* / head.fc.*                  -> norm.* / head.*

    The channel permutation: the authors compute ``softmax(k^T v)`` and apply it to ``q``; this
    module's Eq. 3 computes ``softmax(q^T k)`` and applies it to ``v``, so the paper's q, k, v
    are their k, v, q. ``model`` must have the checkpoint's sizes (``create("davit-t")`` for
    ``davit_tiny``) and ``num_groups == num_heads``; timm's stem pads images to a multiple of 4,
    so feed sizes that are multiples of 4.
    """
    offsets = [0] + [1] * (len(model.config.depths) - 1)

    def convert(key: str, value: Tensor) -> dict[str, Tensor]:
        m = re.fullmatch(r"stages\.(\d+)\.downsample\.(norm|conv)\.(.*)", key)
        if m:
            return {f"stages.{m[1]}.0.{'proj' if m[2] == 'conv' else 'norm'}.{m[3]}": value}
        m = re.fullmatch(r"stages\.(\d+)\.blocks\.(\d+)\.([01])\.(.*)", key)
        if m:
            i, j, kind, rest = int(m[1]), int(m[2]), int(m[3]), m[4]
            prefix = f"stages.{i}.{offsets[i] + 2 * j + kind}."
            a = re.fullmatch(r"attn\.qkv\.(weight|bias)", rest)
            if a and kind == 0:
                return split_chunks(prefix + "attn.", a[1], value, ("q_proj", "k_proj", "v_proj"))
            if a:  # theirs (q, k, v) = ours (v, q, k)
                q, k, v = value.chunk(3, dim=0)
                return {f"{prefix}{rest}": torch.cat([k, v, q], dim=0)}
            if rest.startswith("attn.proj.") and kind == 0:
                rest = rest.replace("attn.proj.", "attn.out_proj.")
            return {prefix + rest: value}
        for theirs, ours in (("stem.conv.", "stem."), ("stem.norm.", "stem_norm."),
                             ("head.norm.", "norm."), ("head.fc.", "head.")):  # fmt: skip
            if key.startswith(theirs):
                return {ours + key.removeprefix(theirs): value}
        return {key: value}

    return load_converted(model, state_dict, convert, source="timm")


#: course_lib.interop.from_timm_state_dict loads timm checkpoints with this function.
TIMM_LOADER = from_timm


PRESETS: dict[str, Callable[..., nn.Module]] = {
    # Table 1 of the paper (ImageNet-1k head, 224 px, window 7).
    "davit-t": preset(DaViT, DaViTConfig()),
    "davit-s": preset(DaViT, DaViTConfig(depths=(1, 1, 9, 1), drop_path_rate=0.2)),
    "davit-b": preset(
        DaViT,
        DaViTConfig(
            embed_dims=(128, 256, 512, 1024),
            depths=(1, 1, 9, 1),
            num_heads=(4, 8, 16, 32),
            num_groups=(4, 8, 16, 32),
            drop_path_rate=0.4,
        ),
    ),
    # Tiny models for the sklearn digits (upsampled to 1 x 16 x 16: a 4x4 token map) and for tests.
    "davit-digits": preset(
        DaViT,
        DaViTConfig(
            image_size=16,
            patch_size=4,
            in_channels=1,
            num_classes=10,
            embed_dims=(32, 64),
            depths=(1, 1),
            num_heads=(2, 4),
            num_groups=(2, 4),
            window_size=2,
            drop_path_rate=0.0,
        ),
    ),
    "davit-tiny": preset(
        DaViT,
        DaViTConfig(
            image_size=16,
            patch_size=2,
            in_channels=3,
            num_classes=10,
            embed_dims=(16, 32),
            depths=(1, 1),
            num_heads=(1, 2),
            num_groups=(2, 2),
            window_size=2,
            drop_path_rate=0.0,
        ),
    ),
}

# Overrides that make every preset tiny (the generic model test in tests/test_models_generic.py).
TINY: dict[str, Any] = dict(
    image_size=16, patch_size=2, embed_dims=(8, 16), depths=(1, 1), num_heads=(1, 2),
    num_groups=(2, 2), window_size=2, num_classes=5,
)  # fmt: skip


def example_batch(
    model: DaViT, *, batch_size: int = 2
) -> tuple[dict[str, Tensor], tuple[int, ...]]:
    """Deterministic random images for ``model(**inputs)`` and the shape of the logits."""
    cfg = model.config
    generator = torch.Generator().manual_seed(0)
    shape = (batch_size, cfg.in_channels, cfg.image_size, cfg.image_size)
    images = torch.randn(shape, generator=generator)
    return {"images": images}, (batch_size, cfg.num_classes)
