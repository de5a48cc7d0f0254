"""The answer key of A2 (instructors only: it lives beside the hidden suite, never in course_lib).

CANARY-HIDDEN-A2-c41f08d6: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

The hidden tests compute their expectations with it; ``a2_record.py`` runs it on the visible
checks' inputs and records the answers as data
(``course_lib/checks/recorded/a2_self_attention.pt``);
``tests/course/test_a2_key.py`` checks it against independent oracles (``nn.MultiheadAttention``
with repeated key/value heads, the complex-number form of RoPE, loops over query/key pairs,
``numpy.polyfit``).

Shape legend: B batch, T tokens (N_Q queries, N_X keys), C channels, H query heads, G key/value
heads, D head dim, A hidden size of the additive score.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def bilinear_scores(q: Tensor, k: Tensor, W: Tensor) -> Tensor:
    """E = q W k^T / sqrt(D_k): q (..., N_Q, D_q), k (..., N_X, D_k), W (D_q, D_k)."""
    return (q @ W) @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])  # (..., N_Q, N_X)


def additive_scores(q: Tensor, k: Tensor, W_q: Tensor, W_k: Tensor, w: Tensor) -> Tensor:
    """e_ij = w . tanh(q_i W_q + k_j W_k): q (..., N_Q, D_q), k (..., N_X, D_k), W_q (D_q, A),
    W_k (D_k, A), w (A,) -> (..., N_Q, N_X)."""
    hidden = torch.tanh(
        (q @ W_q)[..., :, None, :] + (k @ W_k)[..., None, :, :]
    )  # (..., N_Q, N_X, A)
    return hidden @ w  # (..., N_Q, N_X)


def combine_masks(
    lengths: Tensor, T: int, *, causal: bool = True, window: int | None = None
) -> Tensor:
    """Keep-mask (B, T, T): key j < lengths[b]; j <= i if causal; |i - j| < window if given."""
    i = torch.arange(T, device=lengths.device)[:, None]  # (T, 1) queries
    j = torch.arange(T, device=lengths.device)[None, :]  # (1, T) keys
    keep = j < lengths[:, None, None]  # (B, 1, T) padded keys
    if causal:
        keep = keep & (j <= i)
    if window is not None:
        keep = keep & ((i - j).abs() < window)
    return keep.expand(lengths.shape[0], T, T)


class GroupedQueryAttention(nn.Module):
    """H query heads share G key/value heads: query head h reads key/value head h // (H / G)."""

    def __init__(self, *, embed_dim: int, num_heads: int, num_kv_heads: int):
        super().__init__()
        if embed_dim % num_heads or num_heads % num_kv_heads:
            raise ValueError("num_heads must divide embed_dim and num_kv_heads num_heads")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        B, T, C = x.shape
        H, G, D = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.q_proj(x).unflatten(-1, (H, D)).movedim(2, 1)  # (B, H, T, D)
        k = self.k_proj(x).unflatten(-1, (G, D)).movedim(2, 1)  # (B, G, T, D)
        v = self.v_proj(x).unflatten(-1, (G, D)).movedim(2, 1)  # (B, G, T, D)
        group = H // G  # query heads per key/value head
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, T, D)
        energy = q @ k.transpose(-2, -1) * D**-0.5  # (B, H, T, T)
        if mask is not None:
            energy = energy.masked_fill(~mask, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        if mask is not None:
            attention = attention.masked_fill(~mask, 0.0)  # rows with no key: zeros
        heads = (attention @ v).transpose(1, 2).flatten(2)  # (B, T, C) heads concatenated
        return self.out_proj(heads), attention


def rotary_angles(T: int, D: int, *, offset: int = 0, base: float = 10000.0) -> Tensor:
    """Angles (T, D / 2) in float64: (offset + t) * base^(-2k / D)."""
    t = torch.arange(offset, offset + T, dtype=torch.float64)[:, None]  # (T, 1)
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D / 2,)
    return t * theta  # (T, D / 2)


def apply_rotary(x: Tensor, *, offset: int = 0, base: float = 10000.0) -> Tensor:
    """Rotate each pair (x[..., 2k], x[..., 2k + 1]) of the token at position offset + t by the
    angle (offset + t) * base^(-2k / D). x (..., T, D), D even -> same shape and dtype."""
    angles = rotary_angles(x.shape[-2], x.shape[-1], offset=offset, base=base)
    cos = angles.cos().to(x.device, x.dtype)  # (T, D / 2)
    sin = angles.sin().to(x.device, x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, D / 2)
    out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return out.flatten(-2)  # (..., T, D)


def t5_relative_bucket(
    relative_position: Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """T5's bucket of each offset j - i (Raffel et al. 2020; as in Mesh TensorFlow)."""
    bucket = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)  # keys to the right share bucket 0
    exact = num_buckets // 2
    far = (
        exact
        + (
            torch.log(distance.float() / exact)
            / math.log(max_distance / exact)
            * (num_buckets - exact)
        ).long()
    )
    far = far.clamp(max=num_buckets - 1)
    return bucket + torch.where(distance < exact, distance, far)


class T5RelativeBias(nn.Module):
    """A learned scalar per head and per bucket of the offset j - (i + offset), added to scores."""

    def __init__(
        self,
        *,
        num_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ):
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bidirectional = bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, scores: Tensor, *, offset: int = 0) -> Tensor:
        T_q, T_k = scores.shape[-2:]
        i = torch.arange(T_q, device=scores.device)[:, None] + offset
        j = torch.arange(T_k, device=scores.device)[None, :]
        bucket = t5_relative_bucket(j - i, bidirectional=self.bidirectional,
                                    num_buckets=self.num_buckets,
                                    max_distance=self.max_distance)  # fmt: skip
        bias = self.relative_attention_bias(bucket).permute(2, 0, 1)  # (H, T_q, T_k)
        return scores + bias


def fit_power_law(n: list[float], y: list[float]) -> tuple[float, float]:
    """Least squares on log y = p log n + log c: (p, c)."""
    log_n = torch.log(torch.as_tensor(n, dtype=torch.float64))
    log_y = torch.log(torch.as_tensor(y, dtype=torch.float64))
    A = torch.stack([log_n, torch.ones_like(log_n)], dim=1)  # (N, 2)
    p, log_c = torch.linalg.lstsq(A, log_y[:, None]).solution[:, 0].tolist()
    return p, math.exp(log_c)
