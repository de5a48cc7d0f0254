"""A2's answer key (``autograder/suites/a2_self_attention/a2_key.py``) against independent oracles.

- ``bilinear_scores`` and ``additive_scores`` equal a loop over batch elements and query/key pairs;
- ``combine_masks`` equals the three rules checked entry by entry;
- ``GroupedQueryAttention`` equals ``torch.nn.MultiheadAttention`` whose key and value weights
  are the grouped heads repeated (any G, masks included), and G = H is multi-head attention;
- ``apply_rotary`` equals the complex-number form of RoPE (pairs as complex numbers times
  e^{i m theta}), keeps lengths, and its scores depend on offsets only;
- ``T5RelativeBias`` equals a loop over query/key pairs with T5's bucket formula in scalar Python,
  and Hugging Face's ``T5Attention._relative_position_bucket`` when ``transformers`` is installed;
  its buckets do not depend on whether the logarithm is taken in float32 or float64 for the
  sizes the hidden suite draws;
- ``fit_power_law`` equals ``numpy.polyfit`` in log-log space;
- (the recorded answers of the visible checks: test_recorded_answers.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from keys import load
from torch import nn

key = load("a2_self_attention", "a2_key")


@pytest.mark.parametrize("seed", range(3))
def test_score_functions_equal_loops_over_pairs(seed):
    g = torch.Generator().manual_seed(seed)
    B, N_Q, N_X, D_q, D_k, A = 2, 3, 4, 5, 3, 6
    q, k = torch.randn(B, N_Q, D_q, generator=g), torch.randn(B, N_X, D_k, generator=g)
    W = torch.randn(D_q, D_k, generator=g)
    W_q, W_k, w = (torch.randn(D_q, A, generator=g), torch.randn(D_k, A, generator=g),
                   torch.randn(A, generator=g))  # fmt: skip
    bilinear = torch.empty(B, N_Q, N_X)
    additive = torch.empty(B, N_Q, N_X)
    for b in range(B):
        for i in range(N_Q):
            for j in range(N_X):
                bilinear[b, i, j] = q[b, i] @ W @ k[b, j] / math.sqrt(D_k)
                additive[b, i, j] = w @ torch.tanh(q[b, i] @ W_q + k[b, j] @ W_k)
    torch.testing.assert_close(key.bilinear_scores(q, k, W), bilinear)
    torch.testing.assert_close(key.additive_scores(q, k, W_q, W_k, w), additive)
    # any leading dimensions, none included
    torch.testing.assert_close(key.bilinear_scores(q[0], k[0], W), bilinear[0])
    torch.testing.assert_close(key.additive_scores(q[None], k[None], W_q, W_k, w)[0], additive)


@pytest.mark.parametrize(("causal", "window"), [(True, None), (False, None), (True, 2),
                                                (False, 3), (True, 1)])  # fmt: skip
def test_combine_masks_entry_by_entry(causal, window):
    lengths, T = torch.tensor([7, 4, 1, 0]), 7
    got = key.combine_masks(lengths, T, causal=causal, window=window)
    assert got.dtype == torch.bool and got.shape == (4, T, T)
    for b, length in enumerate(lengths.tolist()):
        for i in range(T):
            for j in range(T):
                want = j < length and (not causal or j <= i)
                want = want and (window is None or abs(i - j) < window)
                assert bool(got[b, i, j]) == want, (b, i, j)


def _mha_from_gqa(gqa: key.GroupedQueryAttention) -> nn.MultiheadAttention:
    """nn.MultiheadAttention with the grouped key/value heads repeated for their query heads."""
    C, H, G, D = gqa.q_proj.in_features, gqa.num_heads, gqa.num_kv_heads, gqa.head_dim

    def repeated(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(G, D, -1).repeat_interleave(H // G, dim=0).reshape(H * D, *t.shape[1:])

    mha = nn.MultiheadAttention(C, H, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([gqa.q_proj.weight, repeated(gqa.k_proj.weight),
                                            repeated(gqa.v_proj.weight)]))  # fmt: skip
        mha.in_proj_bias.copy_(torch.cat([gqa.q_proj.bias, repeated(gqa.k_proj.bias[:, None])[:, 0],
                                          repeated(gqa.v_proj.bias[:, None])[:, 0]]))  # fmt: skip
        mha.out_proj.weight.copy_(gqa.out_proj.weight)
        mha.out_proj.bias.copy_(gqa.out_proj.bias)
    return mha.eval()


@pytest.mark.parametrize(("H", "G"), [(4, 2), (6, 3), (6, 2), (4, 1), (3, 3)])
def test_grouped_query_attention_equals_torch_with_repeated_heads(H, G):
    g = torch.Generator().manual_seed(H * 10 + G)
    C, T = 2 * H, 5
    gqa = key.GroupedQueryAttention(embed_dim=C, num_heads=H, num_kv_heads=G).eval()
    with torch.no_grad():
        for p in gqa.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    mha = _mha_from_gqa(gqa)
    x = torch.randn(3, T, C, generator=g)
    keep = (torch.arange(T) < torch.tensor([5, 3, 2])[:, None])[:, None, None, :]
    keep = keep & torch.ones(T, T, dtype=torch.bool).tril()  # (B, 1, T, T)
    with torch.no_grad():
        for mask in (None, keep):
            got, got_w = gqa(x, mask)
            torch_mask = None if mask is None else (~mask).expand(3, H, T, T).reshape(3 * H, T, T)
            want, want_w = mha(x, x, x, attn_mask=torch_mask, average_attn_weights=False)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(got_w, want_w, atol=1e-5, rtol=1e-4)


def test_multi_query_attention_shares_one_key_and_value_head():
    g = torch.Generator().manual_seed(0)
    gqa = key.GroupedQueryAttention(embed_dim=8, num_heads=4, num_kv_heads=1).eval()
    assert gqa.k_proj.out_features == gqa.v_proj.out_features == 2
    x = torch.randn(2, 5, 8, generator=g)
    with torch.no_grad():
        gqa.q_proj.weight.copy_(gqa.q_proj.weight[:2].repeat(4, 1))  # four equal query heads
        gqa.q_proj.bias.copy_(gqa.q_proj.bias[:2].repeat(4))
        _, weights = gqa(x)
    for h in range(1, 4):
        torch.testing.assert_close(weights[:, h], weights[:, 0])


def rope_complex(x: torch.Tensor, offset: int, base: float) -> torch.Tensor:
    """RoFormer's complex form: pair k as a complex number times e^{i m theta_k}."""
    T, D = x.shape[-2:]
    m = torch.arange(offset, offset + T, dtype=torch.float64)
    theta = torch.tensor([base ** (-2 * k / D) for k in range(D // 2)], dtype=torch.float64)
    turn = torch.exp(1j * torch.outer(m, theta))  # (T, D / 2)
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], D // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).reshape(x.shape).to(x.dtype)


@pytest.mark.parametrize(("offset", "base"), [(0, 10000.0), (7, 100.0), (250, 500.0)])
def test_apply_rotary_equals_the_complex_form(offset, base):
    g = torch.Generator().manual_seed(offset)
    x = torch.randn(2, 3, 9, 12, generator=g)
    got = key.apply_rotary(x, offset=offset, base=base)
    assert got.dtype == x.dtype and got.shape == x.shape
    torch.testing.assert_close(got, rope_complex(x, offset, base))
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1))
    q, k = x[0, 0], x[1, 1]
    near = key.apply_rotary(q, offset=offset) @ key.apply_rotary(k, offset=3).T
    far = key.apply_rotary(q, offset=offset + 40) @ key.apply_rotary(k, offset=43).T
    torch.testing.assert_close(near, far, atol=1e-4, rtol=1e-4)


def t5_bucket_scalar(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """The bucket of one offset j - i, written from the T5 paper and Mesh TensorFlow."""
    bucket, n = 0, num_buckets
    if bidirectional:
        n //= 2
        bucket = n if rel > 0 else 0
        d = abs(rel)
    else:
        d = max(-rel, 0)
    exact = n // 2
    if d < exact:
        return bucket + d
    far = exact + int(math.log(d / exact) / math.log(max_distance / exact) * (n - exact))
    return bucket + min(far, n - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(8, 20), (12, 32), (32, 128)])
def test_t5_relative_bias_equals_a_loop_over_pairs(bidirectional, num_buckets, max_distance):
    g = torch.Generator().manual_seed(num_buckets)
    H, T_q, T_k, offset = 3, 6, 150, 140
    bias = key.T5RelativeBias(num_heads=H, num_buckets=num_buckets, max_distance=max_distance,
                              bidirectional=bidirectional)  # fmt: skip
    with torch.no_grad():
        bias.relative_attention_bias.weight.copy_(torch.randn(num_buckets, H, generator=g))
        scores = torch.randn(2, H, T_q, T_k, generator=g)
        got = bias(scores, offset=offset)
    table = bias.relative_attention_bias.weight.detach()
    want = scores.clone()
    for i in range(T_q):
        for j in range(T_k):
            b = t5_bucket_scalar(j - (i + offset), bidirectional, num_buckets, max_distance)
            want[:, :, i, j] += table[b]
    torch.testing.assert_close(got, want)


def test_t5_buckets_equal_hugging_face_and_do_not_depend_on_the_log_precision():
    rel = torch.arange(-300, 301)[None, :]
    try:
        from transformers.models.t5.modeling_t5 import T5Attention
    except ImportError:  # pragma: no cover (transformers is a dev dependency)
        T5Attention = None  # noqa: N806
    for nb, md in [(8, 16), (8, 20), (10, 24), (12, 32), (16, 40), (16, 64), (32, 128)]:
        for bidirectional in (True, False):
            mine = key.t5_relative_bucket(rel, bidirectional=bidirectional, num_buckets=nb,
                                          max_distance=md)  # fmt: skip
            n = nb // 2 if bidirectional else nb
            d = rel.abs() if bidirectional else (-rel).clamp(min=0)
            exact = n // 2
            far64 = exact + (torch.log(d.double() / exact) / math.log(md / exact)
                             * (n - exact)).long()  # fmt: skip
            far32 = exact + (torch.log(d.float() / exact) / math.log(md / exact)
                             * (n - exact)).long()  # fmt: skip
            assert torch.equal(far64[d >= exact], far32[d >= exact]), (nb, md)
            if T5Attention is not None:
                want = T5Attention._relative_position_bucket(
                    rel, bidirectional=bidirectional, num_buckets=nb, max_distance=md
                )
                assert torch.equal(mine, want), (nb, md, bidirectional)


def test_fit_power_law_equals_numpy():
    n = [8.0, 30.0, 100.0, 700.0, 4000.0]
    y = [3.0, 40.0, 300.0, 9000.0, 2.5e5]
    p, c = key.fit_power_law(n, y)
    want_p, want_log_c = np.polyfit(np.log(n), np.log(y), 1)
    assert abs(p - want_p) < 1e-9 and abs(math.log(c) - want_log_c) < 1e-9
