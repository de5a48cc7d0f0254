"""The answer key of A5 (instructors only: it lives beside the hidden suite, never in course_lib).

CANARY-HIDDEN-A5-3b8d40f6: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

The hidden tests compute their expectations with it; ``a5_record.py`` runs it on the visible
checks' inputs and records the answers as data (``course_lib/checks/recorded/
a5_vision_transformers.pt``); ``tests/course/test_a5_key.py`` checks it against independent
oracles (a strided convolution, loops over windows and tokens, XCiT's formula written per head).

Shape legend: B batch, C channels, H x W map (image) size, P patch size, N tokens, ws window
size, nW windows, h heads, d head dim.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.vision import pad_to_multiple, patchify, window_partition, window_reverse


def patchify_padded(images: Tensor, patch_size: int) -> Tensor:
    """(B, C, H, W) zero-padded bottom / right to multiples of P, then patchify: (B, N, C*P*P)."""
    H, W = images.shape[-2:]
    P = patch_size
    padded = F.pad(images, (0, (-W) % P, 0, (-H) % P))  # (B, C, Hp, Wp)
    return patchify(padded, P)


def sincos_2d(grid_height: int, grid_width: int, dim: int, temperature: float = 10000.0) -> Tensor:
    """Fixed 2-D positions (Beyer et al. 2022): (gh * gw, dim), rows of the grid one after another.

    With F = dim / 4 and omega_f = temperature ** (-f / F): token (r, c) gets
    [sin(c omega), cos(c omega), sin(r omega), cos(r omega)].
    """
    if dim % 4:
        raise ValueError(f"dim={dim} is not a multiple of 4")
    F_ = dim // 4
    omega = temperature ** (-torch.arange(F_, dtype=torch.float32) / F_)  # (F,)
    r, c = torch.meshgrid(torch.arange(grid_height), torch.arange(grid_width), indexing="ij")
    r = r.reshape(-1, 1).float() * omega  # (N, F)
    c = c.reshape(-1, 1).float() * omega  # (N, F)
    return torch.cat([c.sin(), c.cos(), r.sin(), r.cos()], dim=1)  # (N, dim)


class Attention(nn.Module):
    """Multi-head self-attention that also returns its weights (the notebook's given code)."""

    def __init__(self, *, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        B, T, C = x.shape
        H = self.num_heads
        q, k, v = (
            p(x).view(B, T, H, C // H).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )  # (B, H, T, D) each
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // H), dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(B, T, C)
        return self.out_proj(y), weights


class MLP(nn.Module):
    def __init__(self, *, dim: int, hidden_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm encoder block (the notebook's given code)."""

    def __init__(self, *, dim: int, num_heads: int, mlp_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim=dim, num_heads=num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = MLP(dim=dim, hidden_dim=mlp_dim)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        a, weights = self.attn(self.norm1(x))
        x = x + a
        x = x + self.mlp(self.norm2(x))
        return x, weights


class SimpleViT(nn.Module):
    """Beyer et al. 2022: no [CLS], fixed 2-D sin-cos positions, mean-pooled tokens."""

    def __init__(
        self,
        *,
        patch_size: int = 2,
        in_channels: int = 1,
        num_classes: int = 10,
        dim: int = 64,
        depth: int = 2,
        num_heads: int = 4,
        mlp_dim: int = 128,
    ):
        super().__init__()
        self.patch_size = patch_size
        self.dim = dim
        self.patch_embed = nn.Linear(in_channels * patch_size * patch_size, dim)
        self.blocks = nn.ModuleList(
            Block(dim=dim, num_heads=num_heads, mlp_dim=mlp_dim) for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images: Tensor, return_attn: bool = False):
        H, W = images.shape[-2:]
        P = self.patch_size
        gh, gw = -(-H // P), -(-W // P)
        x = self.patch_embed(patchify_padded(images, P))  # (B, N, C)
        x = x + sincos_2d(gh, gw, self.dim).to(x.dtype)
        maps = []
        for block in self.blocks:
            x, weights = block(x)
            maps.append(weights)
        logits = self.head(self.norm(x).mean(dim=1))  # (B, num_classes)
        return (logits, maps) if return_attn else logits


def window_partition_padded(x: Tensor, window_size: int) -> Tensor:
    """(B, H, W, C) zero-padded bottom / right to multiples of ws, then cut: (B * nW, ws, ws, C)."""
    return window_partition(pad_to_multiple(x, window_size), window_size)


def window_reverse_cropped(windows: Tensor, window_size: int, height: int, width: int) -> Tensor:
    """Inverse of window_partition_padded: (B * nW, ws, ws, C) -> (B, H, W, C), padding cropped."""
    Hp = -(-height // window_size) * window_size
    Wp = -(-width // window_size) * window_size
    return window_reverse(windows, window_size, Hp, Wp)[:, :height, :width]


def shifted_window_mask_padded(
    height: int, width: int, window_size: int, shift_size: int
) -> Tensor:
    """Keep-mask (nW, N, N) for the windows of an H x W map padded to (Hp, Wp), rolled by
    (-shift, -shift): same region along both axes (regions of the padded lengths) and the key a
    real token (not padding), or the query itself."""
    ws, s = window_size, shift_size
    Hp, Wp = -(-height // ws) * ws, -(-width // ws) * ws

    def regions(length: int) -> Tensor:
        index = torch.arange(length)
        return (index >= length - ws).long() + (index >= length - s).long()

    def real(length: int, padded: int) -> Tensor:  # rolled position i held (i + s) mod Lp
        return (torch.arange(padded) + s) % padded < length

    label = regions(Hp)[:, None] * 3 + regions(Wp)[None, :]  # (Hp, Wp)
    is_real = real(height, Hp)[:, None] & real(width, Wp)[None, :]  # (Hp, Wp)
    label = window_partition(label[None, :, :, None], ws).reshape(-1, ws * ws)  # (nW, N)
    is_real = window_partition(is_real[None, :, :, None], ws).reshape(-1, ws * ws)  # (nW, N)
    keep = (label[:, :, None] == label[:, None, :]) & is_real[:, None, :]  # (nW, N, N)
    return keep | torch.eye(ws * ws, dtype=torch.bool)


class PatchExpanding(nn.Module):
    """Swin-Unet's upsampling (Cao et al. 2021): Linear C -> 2C, each token's 2C channels laid
    out as a 2 x 2 block of C/2 channels (chunk 2 dy + dx at (2i + dy, 2j + dx)), LayerNorm(C/2).
    (B, H, W, C) -> (B, 2H, 2W, C/2)."""

    def __init__(self, *, dim: int):
        super().__init__()
        self.expand = nn.Linear(dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(dim // 2)

    def forward(self, x: Tensor) -> Tensor:
        B, H, W, C = x.shape
        x = self.expand(x).reshape(B, H, W, 2, 2, C // 2)  # (B, H, W, dy, dx, C/2)
        x = x.permute(0, 1, 3, 2, 4, 5).reshape(B, 2 * H, 2 * W, C // 2)
        return self.norm(x)


class XCAttention(nn.Module):
    """Cross-covariance attention (El-Nouby et al. 2021): (B, N, C) -> (B, N, C); weights
    (B, h, d, d) = softmax(temperature * q_hat^T k_hat), q and k L2-normalised over the tokens."""

    def __init__(self, *, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.temperature = nn.Parameter(torch.ones(num_heads, 1, 1))
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, return_attn: bool = False):
        B, N, C = x.shape
        h = self.num_heads
        qkv = self.qkv(x).reshape(B, N, 3, h, C // h).permute(2, 0, 3, 4, 1)  # (3, B, h, d, N)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)  # unit length over the N tokens
        weights = torch.softmax(q @ k.transpose(-2, -1) * self.temperature, dim=-1)  # (B, h, d, d)
        y = (weights @ v).permute(0, 3, 1, 2).reshape(B, N, C)  # (B, N, C)
        y = self.proj(y)
        return (y, weights) if return_attn else y


def train_vit(images: Tensor, labels: Tensor, *, epochs: int = 15, seed: int = 0) -> SimpleViT:
    """The recommended defaults: AdamW, one-cycle learning rate, batches of 64."""
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    model = SimpleViT()
    batch_size, lr = 64, 3e-3
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    steps = epochs * math.ceil(len(labels) / batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr, total_steps=steps, pct_start=0.1
    )
    order = torch.Generator().manual_seed(seed)
    model.train()
    for _ in tqdm(range(epochs), desc="training the ViT", unit="epoch", disable=True):
        for batch in torch.randperm(len(labels), generator=order).split(batch_size):
            loss = F.cross_entropy(model(images[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    return model.eval()
