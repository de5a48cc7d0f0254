"""Hidden tests of A2 (the attention layer, step by step), 23 points.

CANARY-HIDDEN-A2-c41f08d6: planted so the tests can assert that nothing a student receives
(release, feedback) contains this suite.

Sizes and inputs come from ``rng`` (seeded per assignment, student and test). References are
computed here with plain torch, ``torch.nn.MultiheadAttention`` and ``course_lib``; the student's
code may call none of the fused or reference attention implementations.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from course_lib.attention import AttentionLayer, SelfAttention
from course_lib.checks import check_close
from course_lib.checks.core import check_not_constant
from course_lib.positional import sinusoidal_positional_encoding

pytestmark = pytest.mark.forbid("sdpa", "multihead_attention", "course_lib")
CANARY = "CANARY-HIDDEN-A2-c41f08d6"


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def reference(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def pair(out, what):
    assert isinstance(out, tuple) and len(out) == 2, f"{what} should return (output, weights)"
    return out


# --------------------------------------------------------------------------------------------
# 1-2. Dot-product attention (2 + 4)
# --------------------------------------------------------------------------------------------


@pytest.mark.points(1, cell="check_dot_product_attention")
def test_dot_product_values(student, rng):
    D, N = draw(rng, 2, 6), draw(rng, 7, 12)
    q, X = torch.randn(D, generator=rng), torch.randn(N, D, generator=rng)
    y, a = pair(student.dot_product_attention(q, X), "dot_product_attention")
    check_close(a, (X @ q).softmax(0), name="the weights a")
    check_close(y, (X @ q).softmax(0) @ X, name="the output y")


@pytest.mark.points(1, cell="check_dot_product_attention")
def test_dot_product_gradients(student, rng):
    D, N = draw(rng, 7, 12), draw(rng, 2, 6)
    q, X = torch.randn(D, generator=rng), torch.randn(N, D, generator=rng)
    dy = torch.randn(D, generator=rng)
    got = student.dot_product_attention.backward(q, X, grad_output=dy)
    q_ref, X_ref = q.clone().requires_grad_(True), X.clone().requires_grad_(True)
    ((X_ref @ q_ref).softmax(0) @ X_ref).backward(dy)
    check_close(got.inputs[0], q_ref.grad, name="the gradient with respect to q", atol=1e-4)
    check_close(got.inputs[1], X_ref.grad, name="the gradient with respect to X", atol=1e-4)


def qkv(rng, batch, min_queries=1, min_keys=2):
    N_Q, N_X = draw(rng, min_queries, 6), draw(rng, min_keys, 7)
    D, D_V = draw(rng, 2, 9), draw(rng, 1, 6)
    D += D == N_X  # D != N_X: scaling by the number of keys must show
    q = torch.randn(*batch, N_Q, D, generator=rng)
    k = torch.randn(*batch, N_X, D, generator=rng)
    v = torch.randn(*batch, N_X, D_V, generator=rng)
    return q, k, v


@pytest.mark.points(1, cell="check_scaled_dot_product_attention")
def test_sdpa_unbatched(student, rng):
    q, k, v = qkv(rng, ())
    y, w = pair(student.scaled_dot_product_attention(q, k, v), "scaled_dot_product_attention")
    want_y, want_w = reference(q, k, v)
    check_close(w, want_w, name="the weights (no batch dimensions)")
    check_close(y, want_y, name="the output (no batch dimensions)")


@pytest.mark.points(1, cell="check_scaled_dot_product_attention")
def test_sdpa_batched(student, rng):
    q, k, v = qkv(rng, (draw(rng, 1, 3), draw(rng, 1, 3)))
    y, w = pair(student.scaled_dot_product_attention(q, k, v), "scaled_dot_product_attention")
    want_y, want_w = reference(q, k, v)
    check_close(w, want_w, name="the weights (two batch dimensions)")
    check_close(y, want_y, name="the output (two batch dimensions)")


@pytest.mark.points(1, cell="check_scaled_dot_product_attention")
def test_sdpa_broadcast_mask(student, rng):
    B = draw(rng, 2, 4)
    q, k, v = qkv(rng, (B,))
    N_X = k.shape[-2]
    lengths = torch.randint(1, N_X + 1, (B,), generator=rng)
    lengths[0], lengths[-1] = draw(rng, 1, N_X - 1), N_X  # one row padded, one complete
    mask = (torch.arange(N_X) < lengths[:, None])[:, None, :]  # (B, 1, N_X), broadcast over queries
    y, w = pair(student.scaled_dot_product_attention(q, k, v, mask), "attention with a mask")
    want_y, want_w = reference(q, k, v, mask)
    check_close(w, want_w, name="the weights with a (B, 1, N_X) padding mask")
    check_close(y, want_y, name="the output with a (B, 1, N_X) padding mask")


@pytest.mark.points(1, cell="check_scaled_dot_product_attention")
def test_sdpa_fully_masked_rows(student, rng):
    q, k, v = qkv(rng, (draw(rng, 1, 3),), min_queries=2, min_keys=3)
    mask = torch.rand(*q.shape[:-1], k.shape[-2], generator=rng) > 0.5
    mask[..., 1:, :2] = True  # every other query sees at least two keys
    mask[..., 1, -1] = False  # and one of them does not see every key
    mask[..., 0, :] = False
    got = student.scaled_dot_product_attention.backward(q, k, v, mask)
    y, w = got.output
    assert torch.isfinite(y).all() and torch.isfinite(w).all(), (
        "a query whose keys are all masked gives NaN or inf (it should get zero weights)"
    )
    want_y, want_w = reference(q, k, v, mask)
    check_close(w, want_w, name="the weights with fully masked rows")
    check_close(y, want_y, name="the output with fully masked rows")
    for name, grad in zip("qkv", got.inputs):
        assert grad is not None and torch.isfinite(grad).all(), (
            f"the gradient of {name} is not finite"
        )


# --------------------------------------------------------------------------------------------
# 3-4. Layers (2 + 2)
# --------------------------------------------------------------------------------------------


def layer_pair(student, rng):
    D_Q, D_X = draw(rng, 2, 8), draw(rng, 2, 8)
    D_V = next(d for d in range(draw(rng, 2, 8), 20) if d not in (D_Q, D_X))  # values projected
    ref = AttentionLayer(query_dim=D_Q, input_dim=D_X, value_dim=D_V)
    mine = student.AttentionLayer(query_dim=D_Q, input_dim=D_X, value_dim=D_V)
    mine.load_state_dict(ref.state_dict())
    B, N_Q, N_X = draw(rng, 1, 3), draw(rng, 1, 5), draw(rng, 2, 7)
    N_X += N_X == D_Q  # the number of keys differs from the head dim
    q, x = torch.randn(B, N_Q, D_Q, generator=rng), torch.randn(B, N_X, D_X, generator=rng)
    return ref, mine, q, x


@pytest.mark.points(1, cell="check_attention_layer")
def test_attention_layer_values(student, rng):
    ref, mine, q, x = layer_pair(student, rng)
    mask = torch.rand(q.shape[0], q.shape[1], x.shape[1], generator=rng) > 0.3
    mask[..., 0] = True  # every query sees a key ...
    mask[0, 0, -1] = False  # ... and the mask matters
    for m in (None, mask):
        y, w = pair(mine(q, x, m), "AttentionLayer.forward")
        with torch.no_grad():
            want_y, want_w = ref(q, x, m, return_weights=True)
        check_close(w, want_w, name="the weights")
        check_close(y, want_y, name="the output")


@pytest.mark.points(1, cell="check_attention_layer")
def test_attention_layer_gradients(student, rng):
    ref, mine, q, x = layer_pair(student, rng)
    dy = torch.randn(q.shape[0], q.shape[1], ref.v_proj.out_features, generator=rng)
    got = mine.backward(q, x, grad_output=dy)
    ref(q, x).backward(dy)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


def self_pair(student, rng):
    D_X, D_Q, D_V = draw(rng, 2, 8), draw(rng, 2, 8), draw(rng, 2, 8)
    ref = SelfAttention(input_dim=D_X, query_dim=D_Q, value_dim=D_V)
    mine = student.SelfAttention(input_dim=D_X, query_dim=D_Q, value_dim=D_V)
    mine.load_state_dict(ref.state_dict())
    T = draw(rng, 2, 8)
    T += T == D_Q  # the number of keys differs from the head dim
    x = torch.randn(draw(rng, 1, 3), T, D_X, generator=rng)
    return ref, mine, x


@pytest.mark.points(1, cell="check_self_attention")
def test_self_attention_values(student, rng):
    ref, mine, x = self_pair(student, rng)
    y, w = pair(mine(x), "SelfAttention.forward")
    with torch.no_grad():
        want_y, want_w = ref(x, return_weights=True)
    check_close(w, want_w, name="the weights")
    check_close(y, want_y, name="the output")


@pytest.mark.points(1, cell="check_self_attention")
def test_self_attention_gradients(student, rng):
    ref, mine, x = self_pair(student, rng)
    dy = torch.randn(*x.shape[:2], ref.v_proj.out_features, generator=rng)
    got = mine.backward(x, grad_output=dy)
    ref(x).backward(dy)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


# --------------------------------------------------------------------------------------------
# 5. Masks (3)
# --------------------------------------------------------------------------------------------


@pytest.mark.points(1, cell="check_masks")
def test_causal_mask(student, rng):
    T = draw(rng, 2, 12)
    mask = student.causal_mask(T)
    assert isinstance(mask, torch.Tensor) and mask.dtype == torch.bool, "causal_mask must be bool"
    expected = torch.ones(T, T, dtype=torch.bool).tril()
    assert mask.shape == (T, T) and torch.equal(mask, expected), (
        f"causal_mask({T}) should be True exactly where j <= i"
    )


@pytest.mark.points(1, cell="check_masks")
def test_padding_mask(student, rng):
    B, T = draw(rng, 1, 5), draw(rng, 1, 10)
    lengths = torch.randint(0, T + 1, (B,), generator=rng)
    lengths[0] = draw(rng, 0, T - 1)  # one padded row
    mask = student.padding_mask(lengths, T)
    assert isinstance(mask, torch.Tensor) and mask.dtype == torch.bool, "padding_mask must be bool"
    expected = torch.arange(T)[None, :] < lengths[:, None]
    assert mask.shape == (B, T) and torch.equal(mask, expected), (
        f"padding_mask({lengths.tolist()}, {T}) is wrong"
    )


@pytest.mark.points(1, cell="check_masks")
def test_causal_self_attention_ignores_the_future(student, rng):
    D, T = draw(rng, 2, 8), draw(rng, 3, 9)
    mine = student.SelfAttention(input_dim=D)
    x = torch.randn(2, T, D, generator=rng)
    t = draw(rng, 1, T - 1)
    changed = x.clone()
    changed[:, t:] = torch.randn(2, T - t, D, generator=rng) * 3
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    y1, w1 = mine(x, student.causal_mask(T))
    y2, _ = mine(changed, mask)
    check_close(
        y2[:, :t], y1[:, :t], name=f"the outputs before position {t} when later tokens change"
    )
    assert torch.all(w1.triu(1) == 0), "weights above the diagonal must be exactly 0"
    # not passed by a constant function: the outputs depend on the tokens, the weights are a
    # distribution over the visible positions, and positions from t on see the change
    check_not_constant(y1, name="the causal self-attention output", what="the tokens")
    check_close(w1.sum(-1), torch.ones(w1.shape[:-1]), name="the sum of each row of weights")
    assert not torch.allclose(y2[:, t:], y1[:, t:]), (
        f"the outputs from position {t} on did not change when the tokens there changed"
    )


# --------------------------------------------------------------------------------------------
# 6-7. Heads (2) and multi-head attention (5)
# --------------------------------------------------------------------------------------------


@pytest.mark.points(1, cell="check_heads")
def test_split_heads(student, rng):
    H, D = draw(rng, 2, 4), draw(rng, 2, 5)
    x = torch.randn(draw(rng, 1, 3), draw(rng, 2, 6), H * D, generator=rng)
    expected = x.view(*x.shape[:2], H, D).transpose(1, 2)
    check_close(student.split_heads(x, H), expected, name=f"split_heads(x, {H})")


@pytest.mark.points(1, cell="check_heads")
def test_merge_heads(student, rng):
    B, H, T, D = draw(rng, 1, 3), draw(rng, 2, 4), draw(rng, 2, 6), draw(rng, 1, 5)
    x = torch.randn(B, H, T, D, generator=rng)
    check_close(student.merge_heads(x), x.transpose(1, 2).reshape(B, T, H * D), name="merge_heads")


def torch_state(mha: nn.MultiheadAttention) -> dict[str, torch.Tensor]:
    w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.detach().chunk(3)
    return {
        "q_proj.weight": w_q, "q_proj.bias": b_q, "k_proj.weight": w_k, "k_proj.bias": b_k,
        "v_proj.weight": w_v, "v_proj.bias": b_v,
        "out_proj.weight": mha.out_proj.weight.detach(),
        "out_proj.bias": mha.out_proj.bias.detach(),
    }  # fmt: skip


def mha_pair(student, rng):
    H = draw(rng, 2, 4)
    C = H * draw(rng, 2, 4)  # head dim D >= 2: sqrt(D) != D, heads are more than one channel
    ref = nn.MultiheadAttention(C, H, batch_first=True).eval()
    with torch.no_grad():  # torch initialises the biases to zero: make them matter
        ref.in_proj_bias.normal_(generator=rng)
        ref.out_proj.bias.normal_(generator=rng)
    mine = student.MultiHeadAttention(embed_dim=C, num_heads=H)
    mine.load_state_dict(torch_state(ref))
    T = draw(rng, 3, 7)
    T += T == C // H  # the number of keys differs from the head dim
    x = torch.randn(draw(rng, 1, 3), T, C, generator=rng)
    return ref, mine, x, H


@pytest.mark.points(1, cell="check_multihead_attention")
def test_mha_self_attention(student, rng):
    ref, mine, x, _ = mha_pair(student, rng)
    y, _ = pair(mine(x), "MultiHeadAttention.forward")
    with torch.no_grad():
        check_close(y, ref(x, x, x, need_weights=False)[0], name="the output", atol=1e-5)


@pytest.mark.points(1, cell="check_multihead_attention")
def test_mha_cross_attention(student, rng):
    ref, mine, x, H = mha_pair(student, rng)
    T_k = draw(rng, 2, 8)  # more than one key: the scaling matters
    T_k += T_k == x.shape[2] // H  # and their number differs from the head dim
    key = torch.randn(x.shape[0], T_k, x.shape[2], generator=rng)
    value = torch.randn(x.shape[0], T_k, x.shape[2], generator=rng)
    y, w = pair(mine(x, key, value), "MultiHeadAttention.forward")
    with torch.no_grad():
        want = ref(x, key, value, need_weights=False)[0]
    check_close(y, want, name="the output with separate keys and values", atol=1e-5)


@pytest.mark.points(1, cell="check_multihead_attention")
def test_mha_causal_mask(student, rng):
    ref, mine, x, _ = mha_pair(student, rng)
    T = x.shape[1]
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    y, _ = pair(mine(x, mask=keep), "MultiHeadAttention.forward")
    with torch.no_grad():
        want = ref(x, x, x, attn_mask=~keep, need_weights=False)[0]
    check_close(y, want, name="the output with a causal (T, T) keep-mask", atol=1e-5)


@pytest.mark.points(1, cell="check_multihead_attention")
def test_mha_padding_mask(student, rng):
    ref, mine, x, _ = mha_pair(student, rng)
    B, T = x.shape[:2]
    lengths = torch.randint(1, T + 1, (B,), generator=rng)
    lengths[0] = draw(rng, 2, T - 1)  # padded, but more than one key: the scaling matters
    pad = torch.arange(T)[None, :] < lengths[:, None]  # (B, T) True = real token
    y, _ = pair(mine(x, mask=pad[:, None, None, :]), "MultiHeadAttention.forward")
    with torch.no_grad():
        want = ref(x, x, x, key_padding_mask=~pad, need_weights=False)[0]
    check_close(y, want, name="the output with a (B, 1, 1, T) padding mask", atol=1e-5)


@pytest.mark.points(1, cell="check_multihead_attention")
def test_mha_weights_per_head(student, rng):
    ref, mine, x, H = mha_pair(student, rng)
    _, w = pair(mine(x), "MultiHeadAttention.forward")
    with torch.no_grad():
        want = ref(x, x, x, need_weights=True, average_attn_weights=False)[1]
    check_close(w, want, name="the per-head weights (B, H, T_q, T_k)", atol=1e-5)


# --------------------------------------------------------------------------------------------
# 8-9. Positional encoding (2), power-law fit (1)
# --------------------------------------------------------------------------------------------


@pytest.mark.points(1, cell="check_positional_encoding")
def test_positional_encoding_small(student, rng):
    T, d = draw(rng, 1, 30), 2 * draw(rng, 2, 8)  # d >= 4: two frequencies
    pe = student.sinusoidal_positional_encoding(T, d)
    assert isinstance(pe, torch.Tensor) and pe.dtype == torch.float32, "the table must be float32"
    check_close(pe, sinusoidal_positional_encoding(T, d), name=f"PE({T}, {d})", atol=1e-5)


@pytest.mark.points(1, cell="check_positional_encoding")
def test_positional_encoding_large(student, rng):
    T, d = draw(rng, 200, 600), 2 * draw(rng, 16, 64)
    pe = student.sinusoidal_positional_encoding(T, d)
    check_close(pe, sinusoidal_positional_encoding(T, d), name=f"PE({T}, {d})", atol=2e-4)


@pytest.mark.points(1, cell="check_fit_power_law")
def test_fit_power_law(student, rng):
    n = sorted({draw(rng, 8, 4096) for _ in range(8)})
    p_true, c_true = 0.5 + 2 * torch.rand(1, generator=rng).item(), 0.1 + torch.rand(1).item()
    noise = (1 + 0.2 * (torch.rand(len(n), generator=rng) - 0.5)).tolist()
    y = [c_true * x**p_true * f for x, f in zip(n, noise)]
    out = student.fit_power_law(n, y)
    assert isinstance(out, (tuple, list)) and len(out) == 2, "fit_power_law returns (p, c)"
    p, c = (float(v) for v in out)
    want_p, want_logc = np.polyfit(np.log(n), np.log(y), 1)
    assert abs(p - want_p) < 1e-6, f"fitted exponent {p:.6g}, expected {want_p:.6g}"
    assert c > 0 and abs(math.log(c) - want_logc) < 1e-6, (
        f"fitted constant {c:.6g}, expected {math.exp(want_logc):.6g}"
    )
