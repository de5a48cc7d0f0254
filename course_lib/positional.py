"""Positional information for attention, which by itself ignores token order.

- Sinusoidal encodings (Vaswani et al., 2017, Sec. 3.5): PE[t, 2k] = sin(omega_k t),
  PE[t, 2k + 1] = cos(omega_k t), with omega_k = 1 / 10000^(2k / d).
- A learned absolute table (as in BERT and GPT-2): one trainable vector per position.
- A learned relative-position bias: a trainable number per head and per clipped distance j - i,
  added to the attention scores. It simplifies Shaw, Uszkoreit & Vaswani, 2018 ("Self-Attention
  with Relative Position Representations"), who add learned vectors to the keys (and values),
  and T5 (Raffel et al., 2020), whose scalar biases bucket distances logarithmically.

Shape legend: B batch, T tokens (T_q queries, T_k keys), C channels, H heads.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = [
    "LearnedPositionalEmbedding",
    "RelativePositionBias",
    "relative_position_index",
    "sinusoidal_positional_encoding",
]


def sinusoidal_positional_encoding(
    T: int,
    d: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Sinusoidal position table of shape (T, d).

    Column 2k holds sin(omega_k t) and column 2k + 1 holds cos(omega_k t), omega_k = 1/base^(2k/d).
    An odd ``d`` is allowed: the last column is then a sine without its cosine partner.
    """
    if T < 0 or d < 1:
        raise ValueError(f"need T >= 0 and d >= 1, got T={T}, d={d}")
    t = torch.arange(T, dtype=torch.float64, device=device)[:, None]  # (T, 1)
    two_k = torch.arange(0, d, 2, dtype=torch.float64, device=device)  # 2k = 0, 2, 4, ...
    omega = base ** (-two_k / d)  # (ceil(d/2),)
    angles = t * omega  # (T, ceil(d/2))
    pe = torch.empty(T, d, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d // 2])
    return pe.to(dtype)


class LearnedPositionalEmbedding(nn.Module):
    """A trainable table ``weight`` (max_len, dim); forward adds rows offset .. offset+T-1 to x.

    forward(x (B, T, dim), *, offset=0) -> (B, T, dim).
    """

    def __init__(self, max_len: int, dim: int, *, init_std: float = 0.02) -> None:
        super().__init__()
        self.max_len, self.dim = max_len, dim
        self.weight = nn.Parameter(torch.randn(max_len, dim) * init_std)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        T = x.shape[1]
        if x.shape[-1] != self.dim:
            raise ValueError(f"expected x of shape (B, T, {self.dim}), got {tuple(x.shape)}")
        if offset < 0 or offset + T > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + T - 1} exceed the table of max_len={self.max_len}; "
                "use shorter sequences or build the embedding with a larger max_len"
            )
        return x + self.weight[offset : offset + T]  # (B, T, dim)


def relative_position_index(
    T_q: int, T_k: int, max_distance: int, *, offset: int = 0, device=None
) -> Tensor:
    """Index (T_q, T_k) into a table of 2 * max_distance + 1 distances.

    Entry (i, j) is clip(j - (i + offset), -max_distance, max_distance) + max_distance, where query
    i sits at position i + offset (offset = T_k - T_q when decoding with cached keys). Swin's 2-D
    table over the token pairs of a window is ``course_lib.vision.window_relative_position_index``.
    """
    i = torch.arange(T_q, device=device)[:, None] + offset
    j = torch.arange(T_k, device=device)[None, :]
    return (j - i).clamp(-max_distance, max_distance) + max_distance  # (T_q, T_k)


class RelativePositionBias(nn.Module):
    """Learned scalar bias per head and per clipped relative distance j - i.

    forward(T_q, T_k=T_q, *, offset=0) -> bias (H, T_q, T_k), to add to the attention scores
    (e.g. ``MultiHeadAttention(..., attn_bias=bias)``, which broadcasts it over the batch).
    Distances beyond ``max_distance`` share the bias of +-max_distance.
    """

    def __init__(self, *, num_heads: int, max_distance: int, init_std: float = 0.02) -> None:
        super().__init__()
        if num_heads < 1 or max_distance < 0:
            raise ValueError(
                f"need num_heads >= 1, max_distance >= 0; got {num_heads}, {max_distance}"
            )
        self.num_heads, self.max_distance = num_heads, max_distance
        self.weight = nn.Parameter(torch.randn(2 * max_distance + 1, num_heads) * init_std)

    def forward(self, T_q: int, T_k: int | None = None, *, offset: int = 0) -> Tensor:
        T_k = T_q if T_k is None else T_k
        idx = relative_position_index(
            T_q, T_k, self.max_distance, offset=offset, device=self.weight.device
        )
        return self.weight[idx].permute(2, 0, 1)  # (T_q, T_k, H) -> (H, T_q, T_k)
