"""Swin Transformer: self-attention inside local windows that shift from one block to the next.

Liu et al., 2021, "Swin Transformer: Hierarchical Vision Transformer using Shifted Windows"
(ICCV). The pieces, in the paper's order:

* patch partition + linear embedding (Sec. 3.1): 4x4 patches -> C channels, then LayerNorm;
* W-MSA (Sec. 3.2): attention inside non-overlapping ``ws x ws`` windows, with a learned relative
  position bias ``softmax(Q K^T / sqrt(d) + B) V`` where B is read from a ((2 ws - 1)^2, H) table;
* SW-MSA (Sec. 3.2, Fig. 4): every second block rolls the map by ``ws // 2`` (cyclic shift) and a
  mask keeps tokens that came from different image regions apart;
* patch merging (Sec. 3.1): 2x2 neighbours concatenated, LayerNorm(4C), Linear(4C -> 2C);
* four stages, then LayerNorm, global average pooling and a linear head.

If a stage's feature map is not larger than the window, the window shrinks to the map and the
shift is switched off, as in the paper. Maps not divisible by the window are zero-padded on the
bottom and right before attention (as the Hugging Face and detection implementations do) and
cropped afterwards. Presets ``swin-t``, ``swin-s`` and ``swin-b`` have 28M, 50M and 88M
parameters (Table 1).

Shape legend: ``B`` batch, ``H x W`` feature map, ``C`` channels, ``nW`` windows per image,
``N = ws * ws`` tokens per window, ``Hd`` heads (``H`` is taken by the height here).
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
from course_lib.vision import (
    DropPath,
    PatchEmbed,
    PatchMerging,
    pad_to_multiple,
    shifted_window_mask,
    window_partition,
    window_relative_position_index,
    window_reverse,
)

__all__ = [
    "PRESETS",
    "TINY",
    "SwinBlock",
    "SwinConfig",
    "SwinTransformer",
    "WindowAttention",
    "example_batch",
    "from_hf_swin",
    "from_timm",
]


@dataclass(frozen=True)
class SwinConfig:
    """Hyper-parameters of a Swin Transformer (defaults: Swin-T at 224 px, ImageNet-1k head)."""

    image_size: int = 224
    patch_size: int = 4
    in_channels: int = 3
    num_classes: int = 1000  # 0: no head, forward returns the pooled features
    embed_dim: int = 96  # C of stage 1; stage i has C * 2^i
    depths: tuple[int, ...] = (2, 2, 6, 2)
    num_heads: tuple[int, ...] = (3, 6, 12, 24)
    window_size: int = 7
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.2  # stochastic depth, rising linearly over the blocks
    norm_eps: float = 1e-5  # of the block and final LayerNorms
    dropout: float = 0.0  # attention weights, attention output and MLP (timm: drop/attn_drop)
    fused_attn: bool = True  # torch's fused SDPA kernel; False = the lecture's manual path

    @property
    def depth(self) -> int:
        """sum(depths): blocks over all stages (the contract's name, course_lib.models._family)."""
        return sum(self.depths)

    def __post_init__(self) -> None:
        if len(self.depths) != len(self.num_heads):
            raise ValueError(
                f"depths {self.depths} and num_heads {self.num_heads} differ in length"
            )
        if self.window_size < 1:
            raise ValueError(f"window_size must be positive, got {self.window_size}")


class WindowAttention(nn.Module):
    """Multi-head attention inside windows with a learned relative position bias (Sec. 3.2).

    forward(windows (B * nW, N, C), mask (nW, N, N) bool keep or None) -> (B * nW, N, C).
    """

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        window_size: int,
        dropout: float = 0.0,
        fused_attn: bool = True,
    ) -> None:
        super().__init__()
        self.num_heads, self.window_size = num_heads, window_size
        self.attn = MultiHeadAttention(dim, num_heads, dropout=dropout, fused=fused_attn)
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1) ** 2, num_heads)
        )
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.register_buffer(
            "window_relative_position_index",
            window_relative_position_index(window_size),
            persistent=False,
        )

    def relative_position_bias(self) -> Tensor:
        """The bias B added to the scores: (Hd, N, N)."""
        bias = self.relative_position_bias_table[self.window_relative_position_index]  # (N, N, Hd)
        return bias.permute(2, 0, 1)  # (Hd, N, N)

    def forward(
        self, windows: Tensor, mask: Tensor | None = None, *, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        BnW, N, _ = windows.shape
        if mask is not None:
            nW = mask.shape[0]
            mask = mask.expand(BnW // nW, nW, N, N).reshape(BnW, 1, N, N)  # same for every image
        return self.attn(
            windows,
            mask=mask,
            attn_bias=self.relative_position_bias()[None],  # (1, Hd, N, N)
            return_weights=return_attn,
        )


class SwinBlock(nn.Module):
    """One Swin block: (shifted) window attention and MLP, pre-norm with residuals (Eq. 3).

    forward(x (B, H, W, C)) -> (B, H, W, C). ``shift_size=0`` is W-MSA, ``> 0`` is SW-MSA.
    """

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        window_size: int,
        shift_size: int = 0,
        mlp_ratio: float = 4.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-5,
        dropout: float = 0.0,
        fused_attn: bool = True,
    ) -> None:
        super().__init__()
        if not 0 <= shift_size < window_size:
            raise ValueError(f"need 0 <= shift_size < window_size, got {shift_size}, {window_size}")
        self.window_size, self.shift_size = window_size, shift_size
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = WindowAttention(
            dim=dim,
            num_heads=num_heads,
            window_size=window_size,
            dropout=dropout,
            fused_attn=fused_attn,
        )
        self.dropout = nn.Dropout(dropout)
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = FeedForward(dim, int(dim * mlp_ratio), dropout=dropout, activation="gelu")

    def forward(self, x: Tensor) -> Tensor:
        B, H, W, C = x.shape
        ws, s = self.window_size, self.shift_size
        h = pad_to_multiple(self.norm1(x), ws)  # (B, Hp, Wp, C)
        Hp, Wp = h.shape[1:3]
        mask = None
        if s:
            h = torch.roll(h, shifts=(-s, -s), dims=(1, 2))  # cyclic shift up and left
            mask = shifted_window_mask(Hp, Wp, ws, s, device=x.device)  # (nW, N, N)
        windows = window_partition(h, ws).reshape(-1, ws * ws, C)  # (B*nW, N, C)
        windows = self.attn(windows, mask)  # (B*nW, N, C)
        h = window_reverse(windows.reshape(-1, ws, ws, C), ws, Hp, Wp)  # (B, Hp, Wp, C)
        if s:
            h = torch.roll(h, shifts=(s, s), dims=(1, 2))  # undo the shift
        x = x + self.drop_path(self.dropout(h[:, :H, :W]))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x


class SwinStage(nn.Module):
    """Blocks alternating W-MSA / SW-MSA, then (except in the last stage) patch merging."""

    def __init__(
        self,
        *,
        dim: int,
        resolution: int,
        depth: int,
        num_heads: int,
        window_size: int,
        mlp_ratio: float,
        drop_path: list[float],
        downsample: bool,
        norm_eps: float,
        dropout: float = 0.0,
        fused_attn: bool = True,
    ) -> None:
        super().__init__()
        if resolution <= window_size:  # the window covers the whole map: no shifting (paper)
            window_size, shift = resolution, 0
        else:
            shift = window_size // 2
        self.blocks = nn.ModuleList(
            SwinBlock(
                dim=dim,
                num_heads=num_heads,
                window_size=window_size,
                shift_size=0 if i % 2 == 0 else shift,
                mlp_ratio=mlp_ratio,
                drop_path=drop_path[i],
                norm_eps=norm_eps,
                dropout=dropout,
                fused_attn=fused_attn,
            )
            for i in range(depth)
        )
        self.downsample = PatchMerging(dim=dim) if downsample else None

    def forward(self, x: Tensor) -> Tensor:
        """(B, H, W, C) -> (B, H, W, C), or (B, H/2, W/2, 2C) after patch merging."""
        for block in self.blocks:
            x = block(x)
        return self.downsample(x) if self.downsample is not None else x


class SwinTransformer(nn.Module):
    """Swin classifier: images (B, C_in, H, W) -> logits (B, num_classes).

    Image sides that are not multiples of ``patch_size`` are zero-padded on the bottom and right.
    """

    def __init__(self, *, config: SwinConfig) -> None:
        super().__init__()
        self.config = cfg = config
        self.patch_embed = PatchEmbed(
            in_channels=cfg.in_channels, embed_dim=cfg.embed_dim, patch_size=cfg.patch_size
        )
        self.patch_norm = nn.LayerNorm(cfg.embed_dim)
        n_blocks = sum(cfg.depths)
        rates = [cfg.drop_path_rate * i / max(n_blocks - 1, 1) for i in range(n_blocks)]
        resolution = -(-cfg.image_size // cfg.patch_size)  # ceil: images are padded
        self.layers = nn.ModuleList()
        for i, (depth, heads) in enumerate(zip(cfg.depths, cfg.num_heads)):
            start = sum(cfg.depths[:i])
            self.layers.append(
                SwinStage(
                    dim=cfg.embed_dim * 2**i,
                    resolution=resolution,
                    depth=depth,
                    num_heads=heads,
                    window_size=cfg.window_size,
                    mlp_ratio=cfg.mlp_ratio,
                    drop_path=rates[start : start + depth],
                    downsample=i < len(cfg.depths) - 1,
                    norm_eps=cfg.norm_eps,
                    dropout=cfg.dropout,
                    fused_attn=cfg.fused_attn,
                )
            )
            resolution = -(-resolution // 2)
        self.num_features = cfg.embed_dim * 2 ** (len(cfg.depths) - 1)
        self.norm = nn.LayerNorm(self.num_features, eps=cfg.norm_eps)
        self.head = (
            nn.Linear(self.num_features, cfg.num_classes) if cfg.num_classes else nn.Identity()
        )

    def forward_features(self, images: Tensor) -> Tensor:
        """images (B, C_in, H, W) -> last stage's tokens after the final norm (B, H', W', C')."""
        if images.ndim != 4:
            raise ValueError(f"expected images of shape (B, C, H, W), got {tuple(images.shape)}")
        p = self.config.patch_size
        images = F.pad(images, (0, (-images.shape[-1]) % p, 0, (-images.shape[-2]) % p))
        x = self.patch_embed(images)  # (B, N, C)
        gh, gw = self.patch_embed.grid_size(*images.shape[-2:])
        x = self.patch_norm(x).reshape(x.shape[0], gh, gw, -1)  # (B, H, W, C)
        for stage in self.layers:
            x = stage(x)
        return self.norm(x)  # (B, H', W', C')

    def forward(self, images: Tensor) -> Tensor:
        """images (B, C_in, H, W) -> logits (B, num_classes) (with ``num_classes=0``: (B, C'))."""
        x = self.forward_features(images).mean(dim=(1, 2))  # (B, C') global average pooling
        return self.head(x)


def from_hf_swin(hf_model: nn.Module) -> SwinTransformer:
    """Copy a Hugging Face ``SwinModel`` or ``SwinForImageClassification`` into ``SwinTransformer``.

    ``SwinForImageClassification`` -> logits equal HF's ``logits``. ``SwinModel`` -> a model
    without head whose ``forward`` equals HF's ``pooler_output`` and whose ``forward_features``,
    flattened to (B, H' * W', C'), equals ``last_hidden_state``. Hugging Face's shift mask adds
    -100 where ours adds -inf, so outputs agree to ~e^-100 relative.
    """
    name = type(hf_model).__name__
    if name == "SwinForImageClassification":
        body, classifier = hf_model.swin, hf_model.classifier
    elif name == "SwinModel":
        body, classifier = hf_model, None
    else:
        raise TypeError(f"from_hf_swin expects SwinModel or SwinForImageClassification, got {name}")
    hf = hf_model.config
    problems = []
    if not isinstance(hf.image_size, int) or not isinstance(hf.patch_size, int):
        problems.append("non-square image_size / patch_size")
    if hf.use_absolute_embeddings:
        problems.append("use_absolute_embeddings=True")
    if not hf.qkv_bias:
        problems.append("qkv_bias=False")
    if hf.hidden_act != "gelu":
        problems.append(f"hidden_act={hf.hidden_act!r} (only 'gelu')")
    if problems:
        raise NotImplementedError(f"cannot convert this Swin: {', '.join(problems)}")
    num_classes = classifier.out_features if isinstance(classifier, nn.Linear) else 0
    config = SwinConfig(
        image_size=hf.image_size,
        patch_size=hf.patch_size,
        in_channels=hf.num_channels,
        num_classes=num_classes,
        embed_dim=hf.embed_dim,
        depths=tuple(hf.depths),
        num_heads=tuple(hf.num_heads),
        window_size=hf.window_size,
        mlp_ratio=hf.mlp_ratio,
        drop_path_rate=0.0,
        norm_eps=hf.layer_norm_eps,
    )
    model = SwinTransformer(config=config)

    def linear_or_norm(ours: str, module: nn.Module, sd: dict[str, Tensor]) -> None:
        sd[f"{ours}.weight"] = module.weight
        if module.bias is not None:
            sd[f"{ours}.bias"] = module.bias

    sd: dict[str, Tensor] = {}
    linear_or_norm("patch_embed.proj", body.embeddings.patch_embeddings.projection, sd)
    linear_or_norm("patch_norm", body.embeddings.norm, sd)
    for i, stage in enumerate(body.encoder.layers):
        for j, block in enumerate(stage.blocks):
            ours = f"layers.{i}.blocks.{j}"
            attn = block.attention
            table = attn.relative_position_bias.relative_position_bias_table
            if (
                table.shape
                != model.get_parameter(f"{ours}.attn.relative_position_bias_table").shape
            ):
                raise NotImplementedError(
                    f"stage {i} of this Swin is not larger than its window; Hugging Face keeps the "
                    "full window there and the paper shrinks it, so the weights do not match"
                )
            sd[f"{ours}.attn.relative_position_bias_table"] = table
            for name_ours, module in (
                ("norm1", block.layernorm_before),
                ("norm2", block.layernorm_after),
                ("attn.attn.q_proj", attn.q_proj),
                ("attn.attn.k_proj", attn.k_proj),
                ("attn.attn.v_proj", attn.v_proj),
                ("attn.attn.out_proj", attn.o_proj),
                ("mlp.fc1", block.mlp.fc1),
                ("mlp.fc2", block.mlp.fc2),
            ):
                linear_or_norm(f"{ours}.{name_ours}", module, sd)
        if stage.downsample is not None:
            linear_or_norm(f"layers.{i}.downsample.norm", stage.downsample.norm, sd)
            linear_or_norm(f"layers.{i}.downsample.reduction", stage.downsample.reduction, sd)
    linear_or_norm("norm", body.layernorm, sd)
    if num_classes:
        linear_or_norm("head", classifier, sd)
    model.load_state_dict({k: v.detach().clone() for k, v in sd.items()})
    return model.eval()


def from_timm(model: SwinTransformer, state_dict: dict[str, Tensor]) -> SwinTransformer:
    """Load a timm ``SwinTransformer`` state dict (timm >= 0.9 layout) into ``model``.

    Key mapping (timm -> course_lib; everything else keeps its name)::

        patch_embed.norm.*                     -> patch_norm.*
        layers.i.downsample.*  (start of i)    -> layers.{i-1}.downsample.*  (end of i - 1)
        layers.i.blocks.j.attn.qkv.*           -> layers.i.blocks.j.attn.attn.{q,k,v}_proj.*
        layers.i.blocks.j.attn.proj.*          -> layers.i.blocks.j.attn.attn.out_proj.*
        head.fc.*                              -> head.*

    ``relative_position_index`` and ``attn_mask`` buffers are recomputed, not loaded. ``model``
    must have the checkpoint's sizes and ``image_size``: both shrink the window of a stage that
    is not larger than it (and skip its shift). Where a map must be both padded and shifted,
    timm shifts before padding while the authors' detection code, Hugging Face and course_lib
    pad first: outputs then differ; checkpoints at their own resolution never pad.
    """

    def convert(key: str, value: Tensor) -> dict[str, Tensor]:
        m = re.fullmatch(r"(layers\.\d+\.blocks\.\d+\.attn\.)qkv\.(weight|bias)", key)
        if m:
            return split_chunks(m[1] + "attn.", m[2], value, ("q_proj", "k_proj", "v_proj"))
        m = re.fullmatch(r"layers\.(\d+)\.downsample\.(.*)", key)
        if m:
            return {f"layers.{int(m[1]) - 1}.downsample.{m[2]}": value}
        key = re.sub(r"\.attn\.proj\.", ".attn.attn.out_proj.", key)
        key = re.sub(r"^patch_embed\.norm\.", "patch_norm.", key)
        return {re.sub(r"^head\.fc\.", "head.", key): value}

    ignore = (r"relative_position_index$", r"attn_mask$")
    return load_converted(model, state_dict, convert, source="timm", ignore=ignore)


#: course_lib.interop.from_hf dispatches on these Hugging Face class names.
HF_CONVERTERS = {"SwinModel": from_hf_swin, "SwinForImageClassification": from_hf_swin}
#: course_lib.interop.from_timm_state_dict loads timm checkpoints with this function.
TIMM_LOADER = from_timm


PRESETS: dict[str, Callable[..., nn.Module]] = {
    # Sec. 3.3 of the paper (ImageNet-1k head, 224 px, window 7).
    "swin-t": preset(SwinTransformer, SwinConfig()),
    "swin-s": preset(SwinTransformer, SwinConfig(depths=(2, 2, 18, 2), drop_path_rate=0.3)),
    "swin-b": preset(
        SwinTransformer,
        SwinConfig(
            embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32), drop_path_rate=0.5
        ),
    ),
    # Tiny models for the sklearn digits (upsampled to 1 x 16 x 16: a 4x4 token map) and for tests.
    "swin-digits": preset(
        SwinTransformer,
        SwinConfig(
            image_size=16,
            patch_size=4,
            in_channels=1,
            num_classes=10,
            embed_dim=32,
            depths=(2, 2),
            num_heads=(2, 4),
            window_size=2,
            drop_path_rate=0.0,
        ),
    ),
    "swin-tiny": preset(
        SwinTransformer,
        SwinConfig(
            image_size=16,
            patch_size=2,
            in_channels=3,
            num_classes=10,
            embed_dim=16,
            depths=(2, 2),
            num_heads=(1, 2),
            window_size=2,
            drop_path_rate=0.0,
        ),
    ),
}

# Overrides that make every preset tiny (the generic model test in tests/test_models_generic.py).
TINY: dict[str, Any] = dict(
    image_size=16, patch_size=2, embed_dim=8, depths=(2, 2), num_heads=(1, 2), window_size=2,
    num_classes=5,
)  # fmt: skip


def example_batch(
    model: SwinTransformer, *, batch_size: int = 2
) -> tuple[dict[str, Tensor], tuple[int, ...]]:
    """Deterministic random images for ``model(**inputs)`` and the shape of the logits."""
    cfg = model.config
    generator = torch.Generator().manual_seed(0)
    shape = (batch_size, cfg.in_channels, cfg.image_size, cfg.image_size)
    images = torch.randn(shape, generator=generator)
    return {"images": images}, (batch_size, cfg.num_classes)
