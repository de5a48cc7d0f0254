"""Shared layers of the Transformer block: layer normalisation and the position-wise MLP.

- LayerNorm (Ba, Kiros & Hinton, 2016): for each token x in R^C,
  mu = (1/C) sum_c x_c,  sigma^2 = (1/C) sum_c (x_c - mu)^2,
  y = gamma * (x - mu) / sqrt(sigma^2 + eps) + beta, with gamma = ``weight``, beta = ``bias``.
  Equal to torch.nn.LayerNorm(C, eps=eps).
- FeedForward (Vaswani et al., 2017, Sec. 3.3): FFN(x) = fc2(act(fc1(x))), applied to every token.

Shape legend: B batch, T tokens, C channels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["FeedForward", "LayerNorm"]


class LayerNorm(nn.Module):
    """Layer normalisation over the last dim, written out; forward(x (..., C)) -> (..., C)."""

    def __init__(self, dim: int, *, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))  # gamma
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None  # beta

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.dim:
            raise ValueError(f"expected last dim {self.dim}, got input of shape {tuple(x.shape)}")
        mu = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = (x - mu).pow(2).mean(dim=-1, keepdim=True)  # (..., 1) biased: divides by C
        y = (x - mu) * torch.rsqrt(var + self.eps) * self.weight
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, bias={self.bias is not None}"


_ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's "gelu_new"
    "relu": F.relu,
}


class FeedForward(nn.Module):
    """Position-wise MLP fc2(act(fc1(x))) with dropout; forward(x (..., C)) -> (..., C)."""

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        *,
        dropout: float = 0.0,
        activation: str = "gelu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}"
            )
        self.activation = activation
        self.fc1 = nn.Linear(dim, hidden_dim, bias=bias)
        self.fc2 = nn.Linear(hidden_dim, dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.fc2(_ACTIVATIONS[self.activation](self.fc1(x))))

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"
