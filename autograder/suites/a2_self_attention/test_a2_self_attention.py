"""Hidden tests of A2 (variants of the attention layer), 23 points.

CANARY-HIDDEN-A2-c41f08d6: planted so the tests can assert that nothing a student receives
(release, feedback) contains this suite.

Sizes and inputs come from ``rng`` (seeded per assignment, student and test); weights are drawn
here and loaded into the student's modules by name. Expectations come from the answer key beside
this file (``a2_key.py``), which the project's tests check against independent oracles
(``nn.MultiheadAttention`` with repeated key/value heads, the complex-number form of RoPE, loops
over query/key pairs); grouped-query attention with as many key/value heads as query heads is
also compared with ``nn.MultiheadAttention`` here.
"""

from __future__ import annotations

import math

import a2_key as key
import numpy as np
import pytest
import torch
from torch import nn

from course_lib.checks import check_close
from course_lib.checks.core import check_not_constant

CANARY = "CANARY-HIDDEN-A2-c41f08d6"
FUSED = ("sdpa", "multihead_attention", "course_lib.attention.MultiHeadAttention")


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def batch_shape(rng, ndim: int) -> tuple[int, ...]:
    """``ndim`` leading batch dimensions (fixed by the test, the same under every name), each of
    size 2 or 3 (at size 1, a transpose of the wrong axes or a broadcast would hide)."""
    return tuple(draw(rng, 2, 3) for _ in range(ndim))


def raised(call) -> str | None:
    """The type name of the exception the student's code raised in ``call()``, or None."""
    from autograder.host.proxy import StudentError

    try:
        call()
    except StudentError as error:
        return error.kind
    return None


def as64(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.double() for t in tensors]


# --------------------------------------------------------------------------------------------
# 1. Bilinear scores (2)
# --------------------------------------------------------------------------------------------


def bilinear_inputs(rng, ndim, *, square=False):
    D_q = draw(rng, 2, 7)
    D_k = D_q if square else next(d for d in range(draw(rng, 2, 7), 20) if d != D_q)
    N_Q, N_X = draw(rng, 1, 6), draw(rng, 2, 7)
    N_X += N_X == D_k  # the number of keys differs from the key size
    batch = batch_shape(rng, ndim)
    q = torch.randn(*batch, N_Q, D_q, generator=rng)
    k = torch.randn(*batch, N_X, D_k, generator=rng)
    return q, k, torch.randn(D_q, D_k, generator=rng)


@pytest.mark.points(1, cell="check_bilinear_scores")
def test_bilinear_scores(student, rng):
    for ndim in (0, 2):  # "any number of leading batch dimensions"
        q, k, W = bilinear_inputs(rng, ndim)
        got = student.bilinear_scores(q, k, W)
        check_close(got.double(), key.bilinear_scores(*as64(q, k, W)), name=f"bilinear_scores "
                    f"with q {tuple(q.shape)}, k {tuple(k.shape)}, W {tuple(W.shape)}",
                    atol=1e-5)  # fmt: skip


@pytest.mark.points(1, cell="check_bilinear_scores")
def test_bilinear_scores_square_w_and_gradients(student, rng):
    for ndim in (1, 3):
        q, k, W = bilinear_inputs(rng, ndim, square=True)
        dy = torch.randn(*q.shape[:-1], k.shape[-2], generator=rng)
        got = student.bilinear_scores.backward(q, k, W, grad_output=dy)
        leaves = [t.double().requires_grad_(True) for t in (q, k, W)]
        key.bilinear_scores(*leaves).backward(dy.double())
        check_close(got.output.double(), key.bilinear_scores(*as64(q, k, W)),
                    name=f"the scores with a square W, q {tuple(q.shape)}", atol=1e-5)  # fmt: skip
        for name, mine, leaf in zip(("q", "k", "W"), got.inputs, leaves):
            check_close(mine.double(), leaf.grad, name=f"the gradient with respect to {name}",
                        atol=1e-4)  # fmt: skip


# --------------------------------------------------------------------------------------------
# 2. Additive scores (3)
# --------------------------------------------------------------------------------------------


def additive_inputs(rng, ndim, *, square=False):
    D_q, D_k, A = draw(rng, 2, 6), draw(rng, 2, 6), draw(rng, 2, 8)
    N_Q = draw(rng, 2, 6)
    N_X = N_Q if square else next(n for n in range(draw(rng, 2, 7), 20) if n != N_Q)
    batch = batch_shape(rng, ndim)
    q = torch.randn(*batch, N_Q, D_q, generator=rng)
    k = torch.randn(*batch, N_X, D_k, generator=rng)
    W_q, W_k = torch.randn(D_q, A, generator=rng), torch.randn(D_k, A, generator=rng)
    return q, k, W_q, W_k, torch.randn(A, generator=rng)


@pytest.mark.points(1, cell="check_additive_scores")
def test_additive_scores(student, rng):
    for ndim in (0, 2):  # any leading batch dimensions
        args = additive_inputs(rng, ndim)
        check_close(student.additive_scores(*args).double(), key.additive_scores(*as64(*args)),
                    name=f"additive_scores with q {tuple(args[0].shape)}, k "
                    f"{tuple(args[1].shape)}", atol=1e-5)  # fmt: skip


@pytest.mark.points(1, cell="check_additive_scores")
def test_additive_scores_as_many_queries_as_keys(student, rng):
    args = additive_inputs(rng, 1, square=True)
    check_close(student.additive_scores(*args).double(), key.additive_scores(*as64(*args)),
                name="additive_scores with as many queries as keys (query i in row i)",
                atol=1e-5)  # fmt: skip


@pytest.mark.points(1, cell="check_additive_scores")
def test_additive_scores_gradients(student, rng):
    args = additive_inputs(rng, 3)
    dy = torch.randn(*args[0].shape[:-1], args[1].shape[-2], generator=rng)
    got = student.additive_scores.backward(*args, grad_output=dy)
    leaves = [t.double().requires_grad_(True) for t in args]
    key.additive_scores(*leaves).backward(dy.double())
    for name, mine, leaf in zip(("q", "k", "W_q", "W_k", "w"), got.inputs, leaves):
        check_close(mine.double(), leaf.grad, name=f"the gradient with respect to {name} "
                    f"(q {tuple(args[0].shape)})", atol=1e-4)  # fmt: skip


# --------------------------------------------------------------------------------------------
# 3. Masks (3)
# --------------------------------------------------------------------------------------------


def lengths_for(rng, T):
    B = draw(rng, 2, 4)
    lengths = torch.randint(1, T + 1, (B,), generator=rng)
    lengths[0], lengths[1] = T, draw(rng, 1, T - 1)  # one complete, one padded
    return lengths


def same_mask(got, want, what):
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bool, f"{what}: not a bool tensor"
    assert tuple(got.shape) == tuple(want.shape), (
        f"{what}: shape {tuple(got.shape)}, expected (B, T, T) = {tuple(want.shape)}"
    )
    wrong = (got != want).nonzero()
    assert not len(wrong), f"{what}: {len(wrong)} wrong entries, the first at {wrong[0].tolist()}"


@pytest.mark.points(1, cell="check_combine_masks")
def test_padding_and_causal(student, rng):
    T = draw(rng, 3, 9)
    lengths = lengths_for(rng, T)
    for causal in (True, False):
        what = f"combine_masks({lengths.tolist()}, {T}, causal={causal}, window=None)"
        got = student.combine_masks(lengths, T, causal=causal, window=None)
        same_mask(got, key.combine_masks(lengths, T, causal=causal), what)
    # the defaults: causal=True, window=None
    what = f"combine_masks({lengths.tolist()}, {T}) (the defaults, causal=True, window=None)"
    same_mask(student.combine_masks(lengths, T), key.combine_masks(lengths, T), what)
    what = f"combine_masks({lengths.tolist()}, {T}, causal=False) (window=None by default)"
    got = student.combine_masks(lengths, T, causal=False)
    same_mask(got, key.combine_masks(lengths, T, causal=False), what)


@pytest.mark.points(1, cell="check_combine_masks")
def test_causal_window(student, rng):
    T = draw(rng, 4, 10)
    lengths, window = lengths_for(rng, T), draw(rng, 2, T - 2)  # at 1, a token sees itself only
    what = f"combine_masks({lengths.tolist()}, {T}, causal=True, window={window})"
    got = student.combine_masks(lengths, T, causal=True, window=window)
    same_mask(got, key.combine_masks(lengths, T, causal=True, window=window), what)


@pytest.mark.points(1, cell="check_combine_masks")
def test_two_sided_window(student, rng):
    T = draw(rng, 4, 10)
    lengths, window = lengths_for(rng, T), draw(rng, 2, T - 2)
    what = f"combine_masks({lengths.tolist()}, {T}, causal=False, window={window})"
    got = student.combine_masks(lengths, T, causal=False, window=window)
    same_mask(got, key.combine_masks(lengths, T, causal=False, window=window), what)


# --------------------------------------------------------------------------------------------
# 4. Grouped-query attention (5)
# --------------------------------------------------------------------------------------------


def gqa_sizes(rng, G=None):
    """embed_dim, H and G: by default a real grouping, 1 < G < H."""
    if G is None:
        H, G = [(4, 2), (6, 2), (6, 3), (8, 2), (8, 4)][draw(rng, 0, 4)]
    else:
        H = draw(rng, 2, 6)
        G = H if G == "H" else G
    D = draw(rng, 2, 4)
    return H * D, H, G


def gqa_pair(student, rng, G=None):
    C, H, G = gqa_sizes(rng, G)
    # in float64 on both sides: float32 rounding never decides a test (gradients reach 400,
    # where float32 differs by 4e-4 between two correct orders of summation)
    ref = key.GroupedQueryAttention(embed_dim=C, num_heads=H, num_kv_heads=G).double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(0.6 * torch.randn(p.shape, generator=rng, dtype=p.dtype))
    mine = student.GroupedQueryAttention(embed_dim=C, num_heads=H, num_kv_heads=G)
    mine.double()
    mine.load_state_dict(ref.state_dict())
    T = draw(rng, 3, 7)
    x = torch.randn(draw(rng, 1, 3), T, C, generator=rng, dtype=torch.float64)
    return ref, mine, x, (C, H, G)


def gqa_out(out, what):
    assert isinstance(out, tuple) and len(out) == 2, f"{what} should return (y, weights)"
    return out


@pytest.mark.points(1, cell="check_grouped_query_attention")
@pytest.mark.forbid(*FUSED)
def test_gqa_groups(student, rng):
    ref, mine, x, (C, H, G) = gqa_pair(student, rng)
    for bad in (dict(embed_dim=C + 1, num_heads=H, num_kv_heads=G),
                dict(embed_dim=C, num_heads=H, num_kv_heads=H - 1)):  # fmt: skip
        kind = raised(lambda bad=bad: student.GroupedQueryAttention(**bad))
        assert kind == "ValueError", (
            f"GroupedQueryAttention({', '.join(f'{k}={v}' for k, v in bad.items())}) should "
            f"raise ValueError (keep the given __init__), got {kind or 'no exception'}"
        )
    what = f"GroupedQueryAttention(embed_dim={C}, num_heads={H}, num_kv_heads={G})"
    y, w = gqa_out(mine(x), what)
    with torch.no_grad():
        want, want_w = ref(x)
    check_close(w, want_w, name=f"the weights of {what}", atol=1e-5)
    check_close(y, want, name=f"the output of {what}", atol=1e-5)


@pytest.mark.points(1, cell="check_grouped_query_attention")
@pytest.mark.forbid(*FUSED)
def test_gqa_masks(student, rng):
    ref, mine, x, (C, H, G) = gqa_pair(student, rng)
    B, T = x.shape[:2]
    lengths = torch.randint(2, T + 1, (B,), generator=rng)
    lengths[0] = draw(rng, 2, T - 1)
    keep = (torch.arange(T)[None, :] < lengths[:, None])[:, None, None, :]
    keep = keep & torch.ones(T, T, dtype=torch.bool).tril()  # (B, 1, T, T)
    per_head = torch.rand(B, H, T, T, generator=rng) < 0.6  # "broadcastable to (B, H, T, T)"
    per_head[..., 0] = True  # every query keeps a key
    for mask, shape in ((keep, "(B, 1, T, T)"), (per_head, "(B, H, T, T)")):
        what = f"GroupedQueryAttention(num_heads={H}, num_kv_heads={G}) with a {shape} mask"
        y, w = gqa_out(mine(x, mask), what)
        with torch.no_grad():
            want, want_w = ref(x, mask)
        check_close(w, want_w, name=f"the weights of {what}", atol=1e-5)
        check_close(y, want, name=f"the output of {what}", atol=1e-5)


def torch_state(mha: nn.MultiheadAttention) -> dict[str, torch.Tensor]:
    w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.detach().chunk(3)
    return {
        "q_proj.weight": w_q, "q_proj.bias": b_q, "k_proj.weight": w_k, "k_proj.bias": b_k,
        "v_proj.weight": w_v, "v_proj.bias": b_v,
        "out_proj.weight": mha.out_proj.weight.detach(),
        "out_proj.bias": mha.out_proj.bias.detach(),
    }  # fmt: skip


@pytest.mark.points(1, cell="check_grouped_query_attention")
@pytest.mark.forbid(*FUSED)
def test_gqa_with_as_many_kv_heads_is_multihead_attention(student, rng):
    C, H, _ = gqa_sizes(rng, "H")
    ref = nn.MultiheadAttention(C, H, batch_first=True).double().eval()  # float64, as gqa_pair
    with torch.no_grad():  # torch initialises the biases to zero: make them matter
        ref.in_proj_bias.normal_(generator=rng)
        ref.out_proj.bias.normal_(generator=rng)
    mine = student.GroupedQueryAttention(embed_dim=C, num_heads=H, num_kv_heads=H)
    mine.double()
    mine.load_state_dict(torch_state(ref))
    x = torch.randn(draw(rng, 1, 3), draw(rng, 3, 7), C, generator=rng, dtype=torch.float64)
    y, w = gqa_out(mine(x), f"GroupedQueryAttention(num_heads={H}, num_kv_heads={H})")
    with torch.no_grad():
        want, want_w = ref(x, x, x, need_weights=True, average_attn_weights=False)
    check_close(y, want, name="the output at num_kv_heads = num_heads (multi-head attention)",
                atol=1e-5)  # fmt: skip
    check_close(w, want_w, name="the weights at num_kv_heads = num_heads", atol=1e-5)


@pytest.mark.points(1, cell="check_grouped_query_attention")
@pytest.mark.forbid(*FUSED)
def test_gqa_one_kv_head(student, rng):
    ref, mine, x, (C, H, G) = gqa_pair(student, rng, G=1)
    y, w = gqa_out(mine(x), f"GroupedQueryAttention(num_heads={H}, num_kv_heads=1)")
    with torch.no_grad():
        want, want_w = ref(x)
    check_close(w, want_w, name="the weights at num_kv_heads = 1 (multi-query)", atol=1e-5)
    check_close(y, want, name="the output at num_kv_heads = 1 (multi-query)", atol=1e-5)


@pytest.mark.points(1, cell="check_grouped_query_attention")
@pytest.mark.forbid(*FUSED)
def test_gqa_gradients(student, rng):
    ref, mine, x, (C, H, G) = gqa_pair(student, rng)
    dy = torch.randn(x.shape, generator=rng, dtype=x.dtype)
    got = mine.backward(x, grad_output=dy)
    ref(x)[0].backward(dy)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


# --------------------------------------------------------------------------------------------
# 5. Rotary positions (5)
# --------------------------------------------------------------------------------------------


def rotary_input(rng, ndim):
    D = 2 * draw(rng, 2, 8)
    return torch.randn(*batch_shape(rng, ndim), draw(rng, 2, 9), D, generator=rng)


@pytest.mark.points(1, cell="check_apply_rotary")
def test_rotary_default(student, rng):
    for ndim in (0, 2):  # any leading dimensions; float32 in, float32 out
        x = rotary_input(rng, ndim)
        got = student.apply_rotary(x)
        what = f"apply_rotary(x of shape {tuple(x.shape)}, float32)"
        assert got.dtype == torch.float32, f"{what} has dtype {got.dtype}: return x's dtype"
        check_close(got.double(), key.apply_rotary(x.double()), name=what, atol=1e-5)


@pytest.mark.points(1, cell="check_apply_rotary")
def test_rotary_offset_and_base(student, rng):
    x = rotary_input(rng, 1)
    offset, base = draw(rng, 1, 200), float(draw(rng, 10, 1000))
    got = student.apply_rotary(x, offset=offset, base=base)
    check_close(got.double(), key.apply_rotary(x.double(), offset=offset, base=base),
                name=f"apply_rotary(x, offset={offset}, base={base:g})", atol=1e-4)  # fmt: skip


@pytest.mark.points(1, cell="check_apply_rotary")
def test_rotary_dtype_and_gradients(student, rng):
    x = rotary_input(rng, 3).double()
    offset = draw(rng, 0, 50)
    dy = torch.randn(x.shape, dtype=torch.float64, generator=rng)
    got = student.apply_rotary.backward(x, offset=offset, grad_output=dy)
    assert got.output.dtype == torch.float64, "apply_rotary of a float64 x should be float64"
    check_close(got.output, key.apply_rotary(x, offset=offset), name="apply_rotary in float64",
                atol=1e-5)  # fmt: skip
    leaf = x.clone().requires_grad_(True)
    key.apply_rotary(leaf, offset=offset).backward(dy)
    check_close(got.inputs[0], leaf.grad, name="the gradient with respect to x", atol=1e-5)


@pytest.mark.points(1, cell="check_apply_rotary")
def test_rotary_keeps_lengths_and_scores_depend_on_offsets_only(student, rng):
    D, T = 2 * draw(rng, 2, 8), draw(rng, 3, 8)
    q, k = torch.randn(T, D, generator=rng), torch.randn(T, D, generator=rng)
    a, b, shift = draw(rng, 0, 30), draw(rng, 0, 30), draw(rng, 1, 40)
    q1, k1 = student.apply_rotary(q, offset=a), student.apply_rotary(k, offset=b)
    q2 = student.apply_rotary(q, offset=a + shift)
    k2 = student.apply_rotary(k, offset=b + shift)
    check_close(q1.norm(dim=-1), q.norm(dim=-1), name="the length of each rotated query",
                atol=1e-4)  # fmt: skip
    check_close(q2 @ k2.T, q1 @ k1.T, name=f"the scores after moving queries and keys by {shift}",
                atol=1e-4)  # fmt: skip
    check_not_constant(q1 @ k1.T - q @ k.T, name="the change of the scores", what="the positions")


@pytest.mark.points(1, cell="check_apply_rotary")
def test_rotary_pairs(student, rng):
    """Only pair (2k, 2k + 1) of x moves into pair (2k, 2k + 1) of the output."""
    D, T = 2 * draw(rng, 3, 8), draw(rng, 2, 6)
    k = draw(rng, 1, D // 2 - 1)  # pair 0 turns by the angle m whatever the frequencies
    x = torch.zeros(T, D)
    x[:, 2 * k : 2 * k + 2] = torch.randn(T, 2, generator=rng)
    offset = draw(rng, 1, 20)
    got = student.apply_rotary(x, offset=offset)
    check_close(got, key.apply_rotary(x, offset=offset), name=f"apply_rotary of x nonzero "
                f"only in the pair ({2 * k}, {2 * k + 1})", atol=1e-5)  # fmt: skip


# --------------------------------------------------------------------------------------------
# 6. T5 relative bias (4)
# --------------------------------------------------------------------------------------------

BUCKETS = [(8, 16), (8, 20), (10, 24), (12, 32), (16, 40), (16, 64), (32, 128)]


def t5_pair(student, rng, *, bidirectional):
    H = draw(rng, 2, 4)
    nb, md = BUCKETS[draw(rng, 0, len(BUCKETS) - 1)]
    args = dict(num_heads=H, num_buckets=nb, max_distance=md, bidirectional=bidirectional)
    ref = key.T5RelativeBias(**args)
    with torch.no_grad():
        ref.relative_attention_bias.weight.copy_(torch.randn(nb, H, generator=rng))
    mine = student.T5RelativeBias(**args)
    mine.load_state_dict(ref.state_dict())
    return ref, mine, args


def t5_scores(rng, H, T_q, T_k, ndim=1):
    return torch.randn(*batch_shape(rng, ndim), H, T_q, T_k, generator=rng)


@pytest.mark.points(1, cell="check_t5_relative_bias")
def test_t5_bidirectional(student, rng):
    ref, mine, args = t5_pair(student, rng, bidirectional=True)
    for ndim in (0, 2):  # scores (..., H, T_q, T_k)
        scores = t5_scores(rng, args["num_heads"], draw(rng, 2, 12), draw(rng, 2, 12), ndim)
        with torch.no_grad():
            check_close(mine(scores), ref(scores), name=f"T5RelativeBias({args}) on short "
                        f"offsets, scores of shape {tuple(scores.shape)}")  # fmt: skip


@pytest.mark.points(1, cell="check_t5_relative_bias")
def test_t5_bidirectional_far(student, rng):
    ref, mine, args = t5_pair(student, rng, bidirectional=True)
    # distances past max_distance under every name: the far buckets stop at n - 1
    T = args["max_distance"] + draw(rng, 2, 20)
    scores = t5_scores(rng, args["num_heads"], T, T)
    with torch.no_grad():
        check_close(mine(scores), ref(scores),
                    name=f"T5RelativeBias({args}) on offsets up to {T - 1}")  # fmt: skip


@pytest.mark.points(1, cell="check_t5_relative_bias")
def test_t5_unidirectional(student, rng):
    ref, mine, args = t5_pair(student, rng, bidirectional=False)
    T = args["max_distance"] + draw(rng, 2, 20)  # past max_distance: capped at n - 1
    scores = t5_scores(rng, args["num_heads"], T, T)
    with torch.no_grad():
        check_close(mine(scores), ref(scores), name=f"T5RelativeBias({args}) on offsets up to "
                    f"{T - 1}")  # fmt: skip


@pytest.mark.points(1, cell="check_t5_relative_bias")
def test_t5_offset_and_gradients(student, rng):
    """New queries after a cache of keys: a decoder's (unidirectional) bias. At least two new
    queries, so that some keys lie ahead of some query under every name (with one query, the
    last position, no key does, and |j - i| equals the decoder's distance)."""
    ref, mine, args = t5_pair(student, rng, bidirectional=False)
    T_q, T_k = draw(rng, 2, 4), draw(rng, 10, 60)
    offset = T_k - T_q
    scores = t5_scores(rng, args["num_heads"], T_q, T_k)
    dy = torch.randn(scores.shape, generator=rng)
    got = mine.backward(scores, offset=offset, grad_output=dy)
    ref(scores, offset=offset).backward(dy)
    check_close(got.output, ref(scores, offset=offset).detach(),
                name=f"T5RelativeBias({args})(scores, offset={offset})")  # fmt: skip
    name = "relative_attention_bias.weight"
    assert got.params.get(name) is not None, f"no gradient reached {name}"
    check_close(got.params[name], ref.relative_attention_bias.weight.grad,
                name=f"the gradient of {name}", atol=1e-4)  # fmt: skip


# --------------------------------------------------------------------------------------------
# 7. Power-law fit (1)
# --------------------------------------------------------------------------------------------


@pytest.mark.points(1, cell="check_fit_power_law")
def test_fit_power_law(student, rng):
    n = sorted({draw(rng, 8, 4096) for _ in range(8)})
    p_true, c_true = 0.5 + 2 * torch.rand(1, generator=rng).item(), 0.1 + torch.rand(1).item()
    noise = (1 + 0.2 * (torch.rand(len(n), generator=rng) - 0.5)).tolist()
    y = [c_true * x**p_true * f for x, f in zip(n, noise)]
    out = student.fit_power_law(n, y)
    assert isinstance(out, tuple | list) and len(out) == 2, "fit_power_law returns (p, c)"
    p, c = (float(v) for v in out)
    want_p, want_c = key.fit_power_law(n, y)
    # float32 logarithms (torch.tensor(n) is float32) are as right as float64 ones: the
    # tolerances are float32's at these magnitudes (log n <= 8.4), far below any wrong fit's
    assert abs(p - want_p) < 1e-4, f"the fitted exponent p is wrong: {p}, expected {want_p}"
    assert c > 0 and abs(math.log(c) - math.log(want_c)) < 1e-3 * (1 + abs(math.log(want_c))), (
        f"the fitted constant c is wrong: {c}, expected {want_c}"
    )
    assert abs(want_p - np.polyfit(np.log(n), np.log(y), 1)[0]) < 1e-9
