"""Positional encodings: the sinusoidal formula, a learned table and a relative-position bias."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.attention import MultiHeadAttention
from course_lib.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    relative_position_index,
    sinusoidal_positional_encoding,
)


@pytest.mark.parametrize("d", [8, 7, 1])
def test_sinusoidal_matches_the_formula_element_by_element(d):
    T = 12
    pe = sinusoidal_positional_encoding(T, d, dtype=torch.float64)
    assert pe.shape == (T, d) and pe.dtype == torch.float64
    for t in range(T):
        for col in range(d):
            k = col // 2
            omega = 1.0 / 10000 ** (2 * k / d)
            expected = math.sin(omega * t) if col % 2 == 0 else math.cos(omega * t)
            assert pe[t, col].item() == pytest.approx(expected, abs=1e-12)


def test_sinusoidal_values_are_bounded_and_rows_are_distinct():
    pe = sinusoidal_positional_encoding(512, 64)
    assert pe.dtype == torch.float32
    assert pe.abs().max() <= 1.0
    distances = torch.cdist(pe, pe)  # (T, T)
    off_diagonal = distances[~torch.eye(512, dtype=torch.bool)]
    assert off_diagonal.min() > 1e-3  # every position gets its own code


def test_sinusoidal_rejects_bad_sizes():
    with pytest.raises(ValueError, match="d >= 1"):
        sinusoidal_positional_encoding(4, 0)


def test_learned_positional_embedding_adds_its_rows_and_checks_length():
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(10, 4)
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(emb(x), x + emb.weight[:3])
    torch.testing.assert_close(emb(x, offset=7), x + emb.weight[7:10])
    with pytest.raises(ValueError, match="max_len=10"):
        emb(torch.randn(1, 11, 4))
    with pytest.raises(ValueError, match="max_len=10"):
        emb(x, offset=8)
    emb(x).sum().backward()
    assert emb.weight.grad[:3].abs().sum() > 0 and (emb.weight.grad[3:] == 0).all()


def test_relative_position_index_clips_distances():
    idx = relative_position_index(3, 5, max_distance=2)
    expected = torch.tensor([[2, 3, 4, 4, 4], [1, 2, 3, 4, 4], [0, 1, 2, 3, 4]])
    assert torch.equal(idx, expected)


def test_relative_position_bias_shape_and_dependence_on_j_minus_i_only():
    torch.manual_seed(0)
    rpb = RelativePositionBias(num_heads=3, max_distance=4)
    bias = rpb(7, 9)
    assert bias.shape == (3, 7, 9)
    for i in range(7):
        for j in range(9):
            distance = max(-4, min(4, j - i))
            torch.testing.assert_close(bias[:, i, j], rpb.weight[distance + 4])
    # Toeplitz: shifting both positions by one leaves the bias unchanged
    torch.testing.assert_close(bias[:, 1:, 1:], bias[:, :-1, :-1])
    assert not torch.equal(bias[:, 0, 1], bias[:, 1, 0])  # direction matters
    # decoding: 2 queries at positions 7, 8 see the last two rows of the full bias
    torch.testing.assert_close(rpb(2, 9, offset=7), rpb(9)[:, 7:])


def test_relative_position_bias_plugs_into_multi_head_attention():
    torch.manual_seed(0)
    rpb = RelativePositionBias(num_heads=2, max_distance=3)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    y = mha(x, attn_bias=rpb(5))
    y.sum().backward()
    assert y.shape == (2, 5, 8) and rpb.weight.grad.abs().sum() > 0
