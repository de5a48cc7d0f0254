"""Attention family against independent oracles (PyTorch kernels and modules) and properties."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from course_lib.attention import (
    AdditiveAttention,
    AttentionLayer,
    MultiHeadAttention,
    SelfAttention,
    causal_mask,
    chunked_attention,
    dot_product_attention,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
PROPERTY = settings(max_examples=15, deadline=None, derandomize=True)


def _qkv(*shape_q, T_k=None, D_v=None, dtype=torch.float32, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    *lead, T_q, D = shape_q
    T_k = T_q if T_k is None else T_k
    D_v = D if D_v is None else D_v
    q = torch.randn(*lead, T_q, D, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(*lead, T_k, D, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(*lead, T_k, D_v, generator=g, dtype=torch.float64).to(dtype)
    return tuple(x.requires_grad_(grad) for x in (q, k, v))


def _random_keep_mask(B, T_q, T_k, seed):
    """Causal mask AND a random padding mask over keys; every query keeps at least key 0."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T_k + 1, (B,), generator=g)
    keep = causal_mask(T_q, T_k=T_k)[None] & padding_mask(lengths, T_k)[:, None, :]
    return keep[:, None]  # (B, 1, T_q, T_k), broadcast over heads


# ---------------------------------------------------------------------------- masks


def test_causal_mask_is_lower_triangular_and_shifts_for_cached_keys():
    m = causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    assert torch.equal(
        m, torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]).bool()
    )
    # 2 new queries after 3 cached keys: they sit at positions 3 and 4
    assert torch.equal(
        causal_mask(2, T_k=5), torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]).bool()
    )
    with pytest.raises(ValueError, match="T_k"):
        causal_mask(5, T_k=3)


def test_padding_mask_marks_real_tokens():
    m = padding_mask(torch.tensor([2, 0, 3]), 3)
    assert torch.equal(m, torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]]).bool())
    with pytest.raises(ValueError, match="lengths"):
        padding_mask([4], 3)


# ---------------------------------------------------------------------------- functional SDPA


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sdpa_matches_torch_with_causal_and_padding_masks(dtype, tol, seed):
    q, k, v = _qkv(3, 2, 9, 8, T_k=11, D_v=5, dtype=dtype, seed=seed)
    keep = _random_keep_mask(3, 9, 11, seed)
    y, A = scaled_dot_product_attention(q, k, v, keep, return_weights=True)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    torch.testing.assert_close(y, expected, atol=tol, rtol=0)
    assert A.shape == (3, 2, 9, 11)
    assert not A.masked_select(~keep.expand_as(A)).any()  # masked keys get exactly zero weight
    # and without a mask
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v),
        F.scaled_dot_product_attention(q, k, v),
        atol=tol,
        rtol=0,
    )


def test_sdpa_scale_bias_and_unscaled_variant_match_torch():
    q, k, v = _qkv(2, 6, 4, dtype=torch.float64)
    bias = torch.randn(6, 6, dtype=torch.float64)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, bias=bias, scale=0.3),
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3),
    )
    torch.testing.assert_close(
        dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, scale=1.0)
    )


def test_sdpa_gradcheck_float64():
    q, k, v = _qkv(2, 4, 3, T_k=5, dtype=torch.float64, grad=True)
    keep = _random_keep_mask(2, 4, 5, seed=3)[:, 0]  # (B, T_q, T_k)
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, keep), (q, k, v)
    )


def test_sdpa_gradients_match_torch():
    q, k, v = _qkv(2, 2, 7, 4, dtype=torch.float64, grad=True)
    keep = _random_keep_mask(2, 7, 7, seed=5)
    grads = torch.autograd.grad(scaled_dot_product_attention(q, k, v, keep).pow(2).sum(), (q, k, v))
    expected = torch.autograd.grad(
        F.scaled_dot_product_attention(q, k, v, attn_mask=keep).pow(2).sum(), (q, k, v)
    )
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=0)


def test_sdpa_rejects_bad_inputs():
    q, k, v = _qkv(2, 4, 3)
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 4))
    with pytest.raises(ValueError, match="last dim"):
        scaled_dot_product_attention(q, k[..., :2], v)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_fully_masked_rows_give_zeros_not_nan(dtype):
    q, k, v = _qkv(2, 2, 5, 8, dtype=dtype, grad=dtype in (torch.float32, torch.float64))
    keep = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    keep[0, :, 1] = False  # query 1 of batch 0 sees nothing
    keep[1, :, :, :] = False  # batch 1 sees nothing at all
    rows = ~keep.any(-1)  # (B, 1, T_q)
    rows = rows.expand(2, 2, 5)
    y, A = scaled_dot_product_attention(q, k, v, keep, return_weights=True)
    y_chunked = chunked_attention(q, k, v, keep, chunk_size=2)
    for out in (y, A, y_chunked):
        assert out.dtype == dtype and not out.isnan().any()
        assert (out[rows] == 0).all()
    assert (y[~rows] != 0).any() and (y_chunked[~rows] != 0).any()
    if q.requires_grad:
        y = scaled_dot_product_attention(q, k, v, keep) + chunked_attention(q, k, v, keep)
        grads = torch.autograd.grad(y.sum(), (q, k, v))
        assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fused", [True, False])
def test_mha_fully_masked_rows_are_zero_before_out_proj(dtype, fused):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, fused=fused).to(dtype)
    nn.init.eye_(mha.out_proj.weight)
    nn.init.zeros_(mha.out_proj.bias)
    x = torch.randn(2, 5, 8).to(dtype)
    keep = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    keep[0, :, 1] = False
    keep[1] = False
    y = mha(x, mask=keep)
    assert not y.isnan().any()
    assert (y[0, 1] == 0).all() and (y[1] == 0).all()
    assert (y[0, 0] != 0).any()


# ---------------------------------------------------------------------------- lecture modules


def test_additive_attention_matches_the_bahdanau_formula():
    torch.manual_seed(0)
    att = AdditiveAttention(query_dim=3, key_dim=4, hidden_dim=6).double()
    s, h = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64)
    values = torch.randn(2, 5, 7, dtype=torch.float64)
    mask = padding_mask([5, 3], 5)
    context, a = att(s, h, values, mask)
    W_s, W_h, b_h = att.query_proj.weight, att.key_proj.weight, att.key_proj.bias
    v_att = att.score.weight[0]
    for b in range(2):
        e = torch.stack([v_att @ torch.tanh(W_s @ s[b] + W_h @ h[b, i] + b_h) for i in range(5)])
        n = int(mask[b].sum())
        expected_a = torch.zeros(5, dtype=torch.float64)
        expected_a[:n] = torch.exp(e[:n]) / torch.exp(e[:n]).sum()
        torch.testing.assert_close(a[b], expected_a)
        torch.testing.assert_close(context[b], expected_a @ values[b])
    context_keys, _ = att(s, h)  # values default to the keys
    assert context_keys.shape == (2, 4)


def test_attention_layer_follows_the_lecture_equations():
    torch.manual_seed(0)
    layer = AttentionLayer(query_dim=4, input_dim=6, value_dim=5).double()
    q, x = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 7, 6, dtype=torch.float64)
    y, A = layer(q, x, return_weights=True)
    K, V = x @ layer.k_proj.weight.T, x @ layer.v_proj.weight.T  # K = X W_K, V = X W_V
    E = q @ K.transpose(1, 2) / math.sqrt(4)
    expected_A = torch.exp(E) / torch.exp(E).sum(-1, keepdim=True)
    torch.testing.assert_close(A, expected_A)
    torch.testing.assert_close(y, expected_A @ V)


def test_self_attention_matches_torch_sdpa():
    torch.manual_seed(0)
    sa = SelfAttention(input_dim=6, query_dim=4, value_dim=3).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    expected = F.scaled_dot_product_attention(
        sa.q_proj(x), sa.k_proj(x), sa.v_proj(x), attn_mask=causal_mask(5)
    )
    torch.testing.assert_close(sa(x, causal_mask(5)), expected)


# ---------------------------------------------------------------------------- multi-head attention


def _copy_to_torch(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        if ref._qkv_same_embed_dim:
            ref.in_proj_weight.copy_(
                torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
            )
        else:
            ref.q_proj_weight.copy_(ours.q_proj.weight)
            ref.k_proj_weight.copy_(ours.k_proj.weight)
            ref.v_proj_weight.copy_(ours.v_proj.weight)
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_from_torch(ref: nn.MultiheadAttention, ours: MultiHeadAttention) -> None:
    C = ours.embed_dim
    with torch.no_grad():
        if ref._qkv_same_embed_dim:
            w_q, w_k, w_v = ref.in_proj_weight.split(C)
        else:
            w_q, w_k, w_v = ref.q_proj_weight, ref.k_proj_weight, ref.v_proj_weight
        b_q, b_k, b_v = ref.in_proj_bias.split(C)
        for proj, w, b in (
            (ours.q_proj, w_q, b_q),
            (ours.k_proj, w_k, b_k),
            (ours.v_proj, w_v, b_v),
        ):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        ours.out_proj.bias.copy_(ref.out_proj.bias)


@pytest.mark.parametrize("direction", ["ours_to_torch", "torch_to_ours"])
@pytest.mark.parametrize("fused", [True, False])
def test_mha_matches_torch_multihead_attention(direction, fused):
    torch.manual_seed(0)
    B, T, C, H = 3, 6, 12, 3
    ours = MultiHeadAttention(C, H, fused=fused).double().eval()
    ref = nn.MultiheadAttention(C, H, batch_first=True).double().eval()
    if direction == "ours_to_torch":
        _copy_to_torch(ours, ref)
    else:
        nn.init.normal_(ref.in_proj_bias)  # torch initialises biases to 0: make the copy count
        _copy_from_torch(ref, ours)
    x = torch.randn(B, T, C, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 1])
    keep = causal_mask(T)[None, None] & padding_mask(lengths, T)[:, None, None, :]  # (B, 1, T, T)

    y_ref, A_ref = ref(
        x, x, x, attn_mask=~causal_mask(T), key_padding_mask=~padding_mask(lengths, T),
        need_weights=True, average_attn_weights=False,
    )  # fmt: skip
    y = ours(x, mask=keep)
    y_w, A = ours(x, mask=keep, return_weights=True)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(y_w, y_ref)
    torch.testing.assert_close(A, A_ref)
    _, A_avg = ref(x, x, x, attn_mask=~causal_mask(T), key_padding_mask=~padding_mask(lengths, T))
    torch.testing.assert_close(A.mean(dim=1), A_avg)


def test_mha_cross_attention_with_kdim_vdim_matches_torch():
    torch.manual_seed(0)
    ours = MultiHeadAttention(8, 2, kdim=5, vdim=3).double()
    ref = nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True).double()
    _copy_to_torch(ours, ref)
    query = torch.randn(2, 4, 8, dtype=torch.float64)
    key, value = (
        torch.randn(2, 7, 5, dtype=torch.float64),
        torch.randn(2, 7, 3, dtype=torch.float64),
    )
    lengths = torch.tensor([7, 2])
    y_ref, A_ref = ref(
        query, key, value, key_padding_mask=~padding_mask(lengths, 7), average_attn_weights=False
    )
    y, A = ours(query, key, value, padding_mask(lengths, 7)[:, None, None, :], return_weights=True)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(A, A_ref)
    ours.fused = True
    torch.testing.assert_close(
        ours(query, key, value, padding_mask(lengths, 7)[:, None, None]), y_ref
    )


def test_mha_manual_path_equals_fused_path_with_mask_and_bias_and_gradients():
    torch.manual_seed(0)
    fused = MultiHeadAttention(16, 4, fused=True).double()
    manual = MultiHeadAttention(16, 4, fused=False).double()
    manual.load_state_dict(fused.state_dict())
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    keep = causal_mask(7)[None, None] & padding_mask([7, 5], 7)[:, None, None, :]
    bias = torch.randn(4, 7, 7, dtype=torch.float64)
    for kwargs in ({}, {"mask": keep}, {"attn_bias": bias}, {"mask": keep, "attn_bias": bias}):
        y_f, y_m = fused(x, **kwargs), manual(x, **kwargs)
        torch.testing.assert_close(y_f, y_m, atol=1e-12, rtol=0)
        g_f = torch.autograd.grad(y_f.sum(), list(fused.parameters()))
        g_m = torch.autograd.grad(y_m.sum(), list(manual.parameters()))
        for a, b in zip(g_f, g_m):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


@pytest.mark.parametrize("fused", [True, False])
def test_mha_causal_flag_equals_causal_mask(fused):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, fused=fused).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    torch.testing.assert_close(mha(x, causal=True), mha(x, mask=causal_mask(6)))
    pad = padding_mask([6, 3], 6)[:, None, None, :]
    torch.testing.assert_close(mha(x, mask=pad, causal=True), mha(x, mask=pad & causal_mask(6)))
    memory = torch.randn(2, 9, 8, dtype=torch.float64)  # more keys than queries: bottom-right
    torch.testing.assert_close(
        mha(x, memory, causal=True), mha(x, memory, mask=causal_mask(6, T_k=9))
    )


def test_mha_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(1, 6, 8)
    mha.eval()
    torch.testing.assert_close(mha(x), mha(x))
    mha.train()
    assert not torch.allclose(mha(x), mha(x))


def test_mha_validates_inputs_with_clear_errors():
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        MultiHeadAttention(10, 3)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"mask\[:, None, None, :\]"):
        mha(x, mask=torch.ones(2, 5, dtype=torch.bool).repeat(1, 1)[:, :4])
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(x, mask=torch.ones(3, 1, 5, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean"):
        mha(x, mask=torch.ones(5, 5))
    with pytest.raises(ValueError, match=r"\(B, T, 8\)"):
        mha(torch.randn(2, 5, 6))


# ---------------------------------------------------------------------------- chunked attention


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 16, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_chunked_attention_equals_naive_attention(chunk_size, causal):
    q, k, v = _qkv(2, 3, 13, 8, D_v=5, dtype=torch.float64, grad=True)  # T=13: chunks don't divide
    expected = scaled_dot_product_attention(q, k, v, causal_mask(13) if causal else None)
    y = chunked_attention(q, k, v, chunk_size=chunk_size, causal=causal)
    torch.testing.assert_close(y, expected, atol=1e-12, rtol=0)
    g = torch.autograd.grad(y.pow(2).sum(), (q, k, v))
    g_expected = torch.autograd.grad(expected.pow(2).sum(), (q, k, v))
    for a, b in zip(g, g_expected):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_chunked_attention_with_keep_mask_and_cached_keys():
    q, k, v = _qkv(3, 2, 5, 4, T_k=11, dtype=torch.float64)
    keep = _random_keep_mask(3, 5, 11, seed=7)  # causal over cached keys AND padding
    torch.testing.assert_close(
        chunked_attention(q, k, v, keep, chunk_size=3),
        scaled_dot_product_attention(q, k, v, keep),
        atol=1e-12,
        rtol=0,
    )
    torch.testing.assert_close(
        chunked_attention(q, k, v, chunk_size=4, causal=True),
        scaled_dot_product_attention(q, k, v, causal_mask(5, T_k=11)),
        atol=1e-12,
        rtol=0,
    )


def test_chunked_attention_combines_keep_mask_with_causal():
    q, k, v = _qkv(3, 2, 9, 4, dtype=torch.float64)
    pad = padding_mask([9, 5, 2], 9)[:, None, None, :]  # (B, 1, 1, T_k)
    torch.testing.assert_close(
        chunked_attention(q, k, v, pad, chunk_size=4, causal=True),
        scaled_dot_product_attention(q, k, v, pad & causal_mask(9)),
        atol=1e-12,
        rtol=0,
    )


@pytest.mark.parametrize("chunk_size", [1, 5, 16])
def test_chunked_attention_per_query_mask_causal_cached_keys_with_gradients(chunk_size):
    q, k, v = _qkv(2, 3, 5, 4, T_k=12, D_v=6, dtype=torch.float64, grad=True, seed=4)
    keep = torch.rand(2, 1, 5, 12, generator=torch.Generator().manual_seed(4)) < 0.7
    y = chunked_attention(q, k, v, keep, chunk_size=chunk_size, causal=True)
    expected = scaled_dot_product_attention(q, k, v, keep & causal_mask(5, T_k=12))
    torch.testing.assert_close(y, expected, atol=1e-12, rtol=0)
    upstream = torch.randn_like(y)
    grads = torch.autograd.grad(y, (q, k, v), upstream)
    expected_grads = torch.autograd.grad(expected, (q, k, v), upstream)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=0)


def test_chunked_attention_gradcheck_and_half_precision():
    q, k, v = _qkv(1, 2, 6, 3, dtype=torch.float64, grad=True)
    keep = padding_mask([6, 4], 6)[:, None, :]
    assert torch.autograd.gradcheck(
        lambda q, k, v: chunked_attention(q, k, v, keep, chunk_size=4, causal=True), (q, k, v)
    )
    q, k, v = _qkv(2, 9, 8, dtype=torch.bfloat16)
    y = chunked_attention(q, k, v, chunk_size=4)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(
        y.float(), scaled_dot_product_attention(q.float(), k.float(), v.float()), atol=2e-2, rtol=0
    )


def test_chunked_attention_never_stores_a_T_by_T_tensor_for_backward():
    """Tensors kept for backward are O(T D), unlike the naive path which keeps (T, T) weights."""
    T, D = 256, 8
    q, k, v = _qkv(1, T, D, grad=True)
    saved: list[int] = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        chunked_attention(q, k, v, chunk_size=32, causal=True)
    assert saved and max(saved) <= T * D
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        scaled_dot_product_attention(q, k, v, causal_mask(T))
    assert max(saved) >= T * T  # the oracle of this test: the naive path does store T x T


def test_chunked_attention_rejects_bad_inputs():
    q, k, v = _qkv(2, 5, 4)
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_attention(q, k, v, chunk_size=0)
    with pytest.raises(ValueError, match="leading dims"):
        chunked_attention(q, k[None], v)
    with pytest.raises(ValueError, match="broadcast"):
        chunked_attention(q, k, v, torch.ones(3, 5, 5, dtype=torch.bool))


# ---------------------------------------------------------------------------- properties


@PROPERTY
@given(T=st.integers(2, 8), seed=st.integers(0, 10_000), fused=st.booleans())
def test_self_attention_without_positions_is_permutation_equivariant(T, seed, fused):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, 2, fused=fused).double()
    sa = SelfAttention(input_dim=8).double()
    x = torch.randn(2, T, 8, dtype=torch.float64)
    perm = torch.randperm(T)
    for layer in (mha, sa):
        torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm])


@PROPERTY
@given(T=st.integers(2, 10), cut=st.integers(1, 9), seed=st.integers(0, 10_000))
def test_causal_outputs_do_not_depend_on_future_tokens(T, cut, seed):
    cut = min(cut, T - 1)
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, 2, fused=False).double()
    x = torch.randn(1, T, 8, dtype=torch.float64)
    x_changed = x.clone()
    x_changed[:, cut:] = torch.randn(1, T - cut, 8, dtype=torch.float64)
    keep = causal_mask(T)
    torch.testing.assert_close(mha(x, mask=keep)[:, :cut], mha(x_changed, mask=keep)[:, :cut])
    q, k, v = x, x, x
    y = chunked_attention(q, k, v, chunk_size=3, causal=True)
    y_changed = chunked_attention(x_changed, x_changed, x_changed, chunk_size=3, causal=True)
    torch.testing.assert_close(y[:, :cut], y_changed[:, :cut])


@PROPERTY
@given(T_q=st.integers(1, 7), T_k=st.integers(1, 7), seed=st.integers(0, 10_000))
def test_softmax_rows_sum_to_one_and_fully_masked_rows_are_zero(T_q, T_k, seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, T_q, T_k, generator=g) * 30
    keep = torch.rand(2, T_q, T_k, generator=g) < 0.5
    A = masked_softmax(scores, keep)
    has_keys = keep.any(-1)
    torch.testing.assert_close(A.sum(-1)[has_keys], torch.ones(int(has_keys.sum())))
    assert (A[~has_keys] == 0).all() and (A[~keep] == 0).all() and (A >= 0).all()
    q, k, v = _qkv(2, T_q, 4, T_k=T_k, seed=seed)
    y, W = scaled_dot_product_attention(q, k, v, keep, return_weights=True)
    assert (y[~has_keys] == 0).all() and not y.isnan().any()
    assert (chunked_attention(q, k, v, keep, chunk_size=2)[~has_keys] == 0).all()
    torch.testing.assert_close(W.sum(-1)[has_keys], torch.ones(int(has_keys.sum())))


# ---------------------------------------------------------------------------- benchmark script


def _load_benchmark():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "attention.py"
    spec = importlib.util.spec_from_file_location("benchmark_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_quick_mode_runs_on_tiny_sizes():
    bench = _load_benchmark()
    rows = bench.attention_sweep(lengths=[16, 32], batch=1, heads=2, head_dim=8, repeats=1)
    assert {r["path"] for r in rows} == {"naive", "chunked", "sdpa"}
    assert all(r["max_err"] < 1e-4 for r in rows if r["ms"] is not None)
    modules = bench.mha_comparison(lengths=[16], batch=1, embed_dim=16, heads=2, repeats=1)
    assert {r["module"] for r in modules} >= {"MultiHeadAttention(fused)", "nn.MultiheadAttention"}
    three = bench.three_ways(lengths=[8, 16], batch=2, channels=16, repeats=1)
    assert {r["model"] for r in three} == {"GRU", "Conv1d stack", "self-attention"}
    assert all(r["params"] > 0 and r["ms_per_seq"] > 0 for r in three)
    text = bench.format_table(rows, ["path", "T", "ms"])
    assert "naive" in text and "sdpa" in text
