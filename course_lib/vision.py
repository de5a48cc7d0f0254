"""Tensor plumbing shared by the vision transformers (ViT, Swin, DaViT).

Pure functions with their shapes in the docstring, plus the few small layers the families share:

* ``patchify`` / ``PatchEmbed``: cut an image into ``P x P`` patches and project each to a vector
  (ViT, Dosovitskiy et al. 2021, Eq. 1). The convolution with kernel = stride = ``P`` and the
  reshape-then-linear form are the same linear map; ``PatchEmbed`` holds one set of weights and
  can run either form.
* ``window_partition`` / ``window_reverse`` / ``shifted_window_mask`` /
  ``window_relative_position_index`` / ``PatchMerging``: the pieces of Swin (Liu et al. 2021,
  Sec. 3.2 and Fig. 4), reused by DaViT's spatial window attention. (The 1-D, clipped offsets of
  text models are ``course_lib.positional.relative_position_index``.)
* ``DropPath``: stochastic depth (Huang et al. 2016), as used by Swin and DaViT.

Shape legend: ``B`` batch, ``C`` channels, ``H x W`` image or feature-map size, ``P`` patch size,
``N`` tokens, ``ws`` window size, ``nW`` windows per image.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "DropPath",
    "PatchEmbed",
    "PatchMerging",
    "pad_to_multiple",
    "patchify",
    "shifted_window_mask",
    "unpatchify",
    "window_partition",
    "window_relative_position_index",
    "window_reverse",
]


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut ``images`` (B, C, H, W) into non-overlapping patches: (B, N, C * P * P).

    Patches are numbered row by row (``N = (H / P) * (W / P)``). Each patch vector is laid out
    channel first, ``(C, P, P)`` flattened, which is the order of a ``Conv2d`` kernel's weights.
    """
    B, C, H, W = images.shape
    if H % patch_size or W % patch_size:
        raise ValueError(
            f"image size {H}x{W} is not divisible by patch_size={patch_size}; "
            "resize or pad the images, or choose a patch size that divides both sides"
        )
    gh, gw = H // patch_size, W // patch_size
    x = images.reshape(B, C, gh, patch_size, gw, patch_size)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, gh, gw, C, P, P)
    return x.reshape(B, gh * gw, C * patch_size * patch_size)  # (B, N, C*P*P)


def unpatchify(patches: Tensor, patch_size: int, height: int, width: int) -> Tensor:
    """Inverse of ``patchify``: (B, N, C * P * P) -> (B, C, H, W)."""
    B, N, D = patches.shape
    gh, gw = height // patch_size, width // patch_size
    C = D // (patch_size * patch_size)
    if gh * gw != N or C * patch_size * patch_size != D:
        raise ValueError(
            f"{N} patches of size {D} do not tile a {height}x{width} image "
            f"with patch_size={patch_size}"
        )
    x = patches.reshape(B, gh, gw, C, patch_size, patch_size)
    x = x.permute(0, 3, 1, 4, 2, 5)  # (B, C, gh, P, gw, P)
    return x.reshape(B, C, height, width)


class PatchEmbed(nn.Module):
    """Linear patch embedding (ViT Eq. 1): images (B, C_in, H, W) -> tokens (B, N, C).

    ``form="conv"`` runs a ``Conv2d`` with kernel = stride = ``patch_size``; ``form="linear"`` runs
    ``patchify`` followed by a matrix product with the same weights, flattened. Both forms are
    always available as ``conv_form`` and ``linear_form``.
    """

    def __init__(
        self,
        *,
        in_channels: int,
        embed_dim: int,
        patch_size: int,
        form: Literal["conv", "linear"] = "conv",
    ) -> None:
        super().__init__()
        if form not in ("conv", "linear"):
            raise ValueError(f"form must be 'conv' or 'linear', got {form!r}")
        self.patch_size = patch_size
        self.form = form
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size)

    def grid_size(self, height: int, width: int) -> tuple[int, int]:
        """Patches per column and per row for an image of ``height x width``."""
        return height // self.patch_size, width // self.patch_size

    def conv_form(self, images: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, N, C) through the strided convolution."""
        x = self.proj(images)  # (B, C, H/P, W/P)
        return x.flatten(2).transpose(1, 2)  # (B, N, C)

    def linear_form(self, images: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, N, C) through ``patchify`` and one matrix product."""
        patches = patchify(images, self.patch_size)  # (B, N, C_in*P*P)
        return F.linear(patches, self.proj.weight.flatten(1), self.proj.bias)  # (B, N, C)

    def forward(self, images: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, N, C); H and W must be multiples of ``patch_size``."""
        if images.ndim != 4 or images.shape[1] != self.proj.in_channels:
            raise ValueError(
                f"expected images of shape (B, {self.proj.in_channels}, H, W), "
                f"got {tuple(images.shape)}"
            )
        H, W = images.shape[-2:]
        if H % self.patch_size or W % self.patch_size:
            raise ValueError(
                f"image size {H}x{W} is not divisible by patch_size={self.patch_size}; "
                "resize or pad the images, or choose a patch size that divides both sides"
            )
        return self.conv_form(images) if self.form == "conv" else self.linear_form(images)


def pad_to_multiple(x: Tensor, multiple: int) -> Tensor:
    """Zero-pad a channels-last map (B, H, W, C) bottom/right to multiples of ``multiple``.

    Returns (B, H', W', C) with ``H' = ceil(H / multiple) * multiple`` (same for ``W'``); crop with
    ``x[:, :H, :W]`` afterwards.
    """
    H, W = x.shape[1:3]
    pad_h, pad_w = (-H) % multiple, (-W) % multiple
    if pad_h or pad_w:
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
    return x


def window_partition(x: Tensor, window_size: int) -> Tensor:
    """Split (B, H, W, C) into non-overlapping windows: (B * nW, ws, ws, C).

    Windows are numbered row by row within each image, images one after another. H and W must be
    multiples of ``window_size`` (see ``pad_to_multiple``).
    """
    B, H, W, C = x.shape
    if H % window_size or W % window_size:
        raise ValueError(
            f"feature map {H}x{W} is not divisible by window_size={window_size}; "
            "pad it first with pad_to_multiple"
        )
    x = x.reshape(B, H // window_size, window_size, W // window_size, window_size, C)
    x = x.transpose(2, 3)  # (B, H/ws, W/ws, ws, ws, C)
    return x.reshape(-1, window_size, window_size, C)  # (B*nW, ws, ws, C)


def window_reverse(windows: Tensor, window_size: int, height: int, width: int) -> Tensor:
    """Inverse of ``window_partition``: (B * nW, ws, ws, C) -> (B, H, W, C)."""
    C = windows.shape[-1]
    gh, gw = height // window_size, width // window_size
    x = windows.reshape(-1, gh, gw, window_size, window_size, C)
    x = x.transpose(2, 3)  # (B, H/ws, ws, W/ws, ws, C)
    return x.reshape(-1, height, width, C)  # (B, H, W, C)


def shifted_window_mask(
    height: int, width: int, window_size: int, shift_size: int, *, device=None
) -> Tensor:
    """Keep-mask for attention inside the windows of a cyclically shifted map: (nW, N, N) bool.

    After ``torch.roll(x, (-shift, -shift))`` the windows on the bottom and right edges hold tokens
    that were far apart in the image. Each axis splits into three regions, ``[0, L - ws)``,
    ``[L - ws, L - shift)`` and ``[L - shift, L)`` (Swin Fig. 4); two tokens of a window may attend
    to each other (True) only if they lie in the same region along both axes. ``N = ws * ws``.
    """
    if not 0 <= shift_size < window_size:
        raise ValueError(f"need 0 <= shift_size < window_size, got {shift_size}, {window_size}")

    def regions(length: int) -> Tensor:
        idx = torch.arange(length, device=device)
        return (idx >= length - window_size).long() + (idx >= length - shift_size).long()

    label = regions(height)[:, None] * 3 + regions(width)[None, :]  # (H, W)
    label = window_partition(label[None, :, :, None], window_size)  # (nW, ws, ws, 1)
    label = label.reshape(-1, window_size * window_size)  # (nW, N)
    return label[:, :, None] == label[:, None, :]  # (nW, N, N)


def window_relative_position_index(window_size: int) -> Tensor:
    """2-D index into a ((2 ws - 1)^2, H) bias table for every token pair of a window: (N, N) long.

    Tokens are numbered row by row; pair (i, j) with offset ``(dy, dx) = pos_i - pos_j`` (each in
    ``[-(ws - 1), ws - 1]``) gets ``(dy + ws - 1) * (2 ws - 1) + (dx + ws - 1)`` (Swin Sec. 3.2).
    """
    coords = torch.stack(
        torch.meshgrid(torch.arange(window_size), torch.arange(window_size), indexing="ij")
    ).flatten(1)  # (2, N)
    offset = coords[:, :, None] - coords[:, None, :] + (window_size - 1)  # (2, N, N)
    return offset[0] * (2 * window_size - 1) + offset[1]  # (N, N)


class PatchMerging(nn.Module):
    """Swin's downsampling: concatenate each 2x2 neighbourhood, LayerNorm(4C), Linear(4C -> 2C).

    (B, H, W, C) -> (B, ceil(H/2), ceil(W/2), 2C); odd sizes are zero-padded. The four neighbours
    are concatenated in the order x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2].
    """

    def __init__(self, *, dim: int, out_dim: int | None = None, norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim, eps=norm_eps)
        self.reduction = nn.Linear(4 * dim, out_dim or 2 * dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        x = pad_to_multiple(x, 2)
        x0 = x[:, 0::2, 0::2]  # (B, H/2, W/2, C) top-left of each 2x2
        x1 = x[:, 1::2, 0::2]  # bottom-left
        x2 = x[:, 0::2, 1::2]  # top-right
        x3 = x[:, 1::2, 1::2]  # bottom-right
        x = torch.cat([x0, x1, x2, x3], dim=-1)  # (B, H/2, W/2, 4C)
        return self.reduction(self.norm(x))  # (B, H/2, W/2, 2C)


class DropPath(nn.Module):
    """Stochastic depth: in training, zero a residual branch for a random subset of the samples.

    Kept samples are scaled by ``1 / (1 - p)`` so the expectation is unchanged; identity in eval.
    Works on any shape whose first dimension is the batch.
    """

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"drop-path probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand((x.shape[0],) + (1,) * (x.ndim - 1), device=x.device) >= self.p
        return x * keep.to(x.dtype) / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"
