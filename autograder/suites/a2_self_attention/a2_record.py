"""Record A2's visible-check data: the key's answers, and the answers of the usual mistakes.

CANARY-HIDDEN-A2-c41f08d6: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

    python autograder/suites/a2_self_attention/a2_record.py

writes ``course_lib/checks/recorded/a2_self_attention.pt``: for each check, its cases (inputs,
weights included), the key's answer and ``{message: answer}`` of the usual mistakes. The visible
checks (``course_lib/checks/a2.py``) compare the student's answer with these, so they name the
mistakes without the key's code; the hidden suite draws fresh inputs.
``tests/course/test_a2_key.py`` checks that the file is what this script writes today.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import a2_key as key  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "course_lib" / "checks" / "recorded" / "a2_self_attention.pt"


def _differing(want: Tensor, mistakes: dict[str, Tensor]) -> dict[str, Tensor]:
    """The mistakes whose answer differs from the key's on this case (same shape)."""
    return {
        m: w
        for m, w in mistakes.items()
        if w.shape == want.shape and not torch.allclose(w.double(), want.double(), atol=1e-4)
    }


# --------------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------------


def bilinear() -> dict:
    g = torch.Generator().manual_seed(20)
    cases = []
    for batch, N_Q, N_X, D_q, D_k in [((2,), 5, 5, 4, 4), ((), 4, 3, 3, 5), ((2, 3), 3, 6, 5, 2)]:
        q = torch.randn(*batch, N_Q, D_q, generator=g)
        k = torch.randn(*batch, N_X, D_k, generator=g)
        W = torch.randn(D_q, D_k, generator=g)
        plain = q @ W @ k.transpose(-2, -1)
        mistakes = {
            "the scores are not scaled: divide q W k^T by sqrt(D_k)": plain,
            "the scores are divided by D_k instead of sqrt(D_k)": plain / D_k,
            "the scores are divided by sqrt(D_q), the query size: scale by sqrt(D_k), the size "
            "of the keys that q W is compared with": plain / math.sqrt(D_q),
            "the scores are divided by the square root of the number of keys: scale by "
            "sqrt(D_k)": plain / math.sqrt(N_X),
        }
        if D_q == D_k:
            mistakes["W is transposed: the score is q W k^T with W of shape (D_q, D_k)"] = (
                q @ W.T @ k.transpose(-2, -1) / math.sqrt(D_k)
            )
        if N_Q == N_X:
            transposed = plain.transpose(-2, -1) / math.sqrt(D_k)
            mistakes[
                "the scores are transposed (one row per key): E[..., i, j] scores query i "
                "against key j"
            ] = transposed
        want = key.bilinear_scores(q, k, W)
        cases.append({"q": q, "k": k, "W": W, "want": want,
                      "mistakes": _differing(want, mistakes)})  # fmt: skip
    return {"cases": cases}


def additive() -> dict:
    g = torch.Generator().manual_seed(21)
    cases = []
    for batch, N_Q, N_X, D_q, D_k, A in [((2,), 4, 4, 3, 5, 6), ((), 3, 4, 2, 3, 4),
                                         ((2, 2), 3, 5, 4, 2, 5)]:  # fmt: skip
        q = torch.randn(*batch, N_Q, D_q, generator=g)
        k = torch.randn(*batch, N_X, D_k, generator=g)
        W_q, W_k = torch.randn(D_q, A, generator=g), torch.randn(D_k, A, generator=g)
        w = torch.randn(A, generator=g)
        pre = (q @ W_q)[..., :, None, :] + (k @ W_k)[..., None, :, :]  # (..., N_Q, N_X, A)
        mistakes = {
            "the tanh is missing: e_ij = w . tanh(q_i W_q + k_j W_k)": pre @ w,
            "the tanh is applied after the dot product with w: e_ij = w . tanh(q_i W_q + "
            "k_j W_k), tanh first": torch.tanh(pre @ w),
            "a ReLU is used instead of the tanh": torch.relu(pre) @ w,
            "w is left out (the hidden units are summed): e_ij = w . tanh(...)": torch.tanh(
                pre
            ).sum(-1),
            "the scores are divided by sqrt(A) (additive scores are not scaled)": torch.tanh(pre)
            @ w
            / math.sqrt(A),
        }
        if N_Q == N_X:
            swapped = (q @ W_q)[..., None, :, :] + (k @ W_k)[..., :, None, :]
            mistakes["the scores are transposed (queries along the columns): put the query "
                     "axis at -3 and the key axis at -2 before the tanh"] = (
                torch.tanh(swapped) @ w
            )  # fmt: skip
        want = key.additive_scores(q, k, W_q, W_k, w)
        cases.append({"q": q, "k": k, "W_q": W_q, "W_k": W_k, "w": w, "want": want,
                      "mistakes": _differing(want, mistakes)})  # fmt: skip
    return {"cases": cases}


# --------------------------------------------------------------------------------------------
# Masks
# --------------------------------------------------------------------------------------------


def mask_variant(lengths, T, causal, window, mistake=""):
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    L = lengths[:, None, None]
    keep = (j <= L) if mistake == "length" else (j < L)
    if mistake == "queries":
        keep = i < L
    if mistake == "pad_both":
        keep = keep & (i < L)
    if causal or mistake == "always_causal":
        rule = {"causal_flip": j >= i, "causal_strict": j < i}.get(mistake, j <= i)
        keep = keep & rule
    if window is not None:
        if mistake == "window_off":
            keep = keep & ((i - j).abs() <= window)
        elif mistake == "window_narrow":
            keep = keep & ((i - j).abs() < window - 1)
        elif mistake == "window_left":
            keep = keep & (i - j >= 0) & (i - j < window)
        elif mistake != "no_window":
            keep = keep & ((i - j).abs() < window)
    return keep.expand(lengths.shape[0], T, T)


MASK_MISTAKES = {
    "length": "the padding keeps key j <= length: the real keys are j < lengths[b]",
    "queries": "the padding masks the queries (rows) instead of the keys (columns): a row i "
    "keeps the keys j < lengths[b]",
    "causal_flip": "the causal mask is upside down: query i may attend to keys j <= i",
    "causal_strict": "the causal mask hides the diagonal: query i may attend to itself, keep "
    "j <= i (tril, not tril(-1))",
    "pad_both": "the padding masks the queries too: padding masks keys only, a padded query row "
    "still sees the real keys allowed by the other rules",
    "window_narrow": "the window is one too narrow: keep |i - j| < window (window = 2: itself "
    "and one neighbour on each allowed side)",
    "window_off": "the window is one too wide: keep |i - j| < window (window = 1: only itself)",
    "window_left": "the window only looks back even when causal=False: without causality a key "
    "is kept when |i - j| < window, on both sides",
    "no_window": "the window is ignored: keep |i - j| < window",
    "always_causal": "causal=False is ignored: without causality the mask is padding and window "
    "only",
}


def masks() -> dict:
    cases = []
    for T, causal, window in [(6, True, None), (6, True, 2), (6, False, None), (6, False, 3),
                              (5, True, 1)]:  # fmt: skip
        lengths = torch.tensor([T, 4, 1])  # lengths <= T, as the book's padding_mask asks
        want = key.combine_masks(lengths, T, causal=causal, window=window)
        mistakes = {}
        for name, message in MASK_MISTAKES.items():
            wrong = mask_variant(lengths, T, causal, window, name)
            if not torch.equal(wrong, want):
                mistakes[message] = wrong
        cases.append({"lengths": lengths, "T": T, "causal": causal, "window": window,
                      "want": want, "mistakes": mistakes})  # fmt: skip
    return {"cases": cases}


# --------------------------------------------------------------------------------------------
# Grouped-query attention
# --------------------------------------------------------------------------------------------


def gqa_variant(m: key.GroupedQueryAttention, x: Tensor, mask, mistake="") -> tuple:
    B, T, C = x.shape
    H, G, D = m.num_heads, m.num_kv_heads, m.head_dim
    q = m.q_proj(x).view(B, T, H, D).transpose(1, 2)
    k = m.k_proj(x).view(B, T, G, D).transpose(1, 2)
    v = m.v_proj(x).view(B, T, G, D).transpose(1, 2)
    if mistake == "split":
        q = m.q_proj(x).view(B, H, T, D)
        k = m.k_proj(x).view(B, G, T, D)
        v = m.v_proj(x).view(B, G, T, D)
    if mistake == "repeat":
        k, v = k.repeat(1, H // G, 1, 1), v.repeat(1, H // G, 1, 1)
    else:
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
    scale = {"sqrt_c": math.sqrt(C), "none": 1.0, "d": D}.get(mistake, math.sqrt(D))
    scores = q @ k.transpose(-2, -1) / scale
    use_mask = mask is not None and mistake != "no_mask"
    if use_mask:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    if use_mask and mistake == "mask_inverted":
        scores = q @ k.transpose(-2, -1) / scale
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1).masked_fill(mask, 0.0)
    else:
        weights = scores.softmax(dim=-2 if mistake == "softmax_queries" else -1)
        if use_mask:
            weights = weights.masked_fill(~mask, 0.0)
    if mistake == "merge_no_transpose":
        y = (weights @ v).reshape(B, T, C)
    else:
        y = (weights @ v).transpose(1, 2).reshape(B, T, C)
    return (y if mistake == "no_out" else m.out_proj(y)), weights


GQA_MISTAKES = {
    "repeat": "the key/value heads are tiled (repeat), so query head h reads key/value head "
    "h % G: the H / G query heads of a group are neighbours, head h reads key/value head "
    "h // (H / G) (repeat_interleave)",
    "sqrt_c": "the scores are divided by sqrt(C), the model width: divide by sqrt(D), the head "
    "size",
    "none": "the scores are not scaled: divide by sqrt(D), the head size",
    "d": "the scores are divided by D instead of sqrt(D)",
    "no_mask": "the mask is not applied",
    "split": "the heads are split with a plain view to (B, H, T, D): view as (B, T, H, D) "
    "first, then move the head axis in front (transpose(1, 2))",
    "no_out": "the output projection is missing: y = out_proj(concatenated heads)",
    "softmax_queries": "the softmax is taken over the wrong axis (the queries): each query's "
    "weights over the keys sum to 1, softmax(dim=-1)",
    "merge_no_transpose": "the heads are concatenated with a plain reshape of (B, H, T, D): move "
    "the head axis back first, y.transpose(1, 2).reshape(B, T, C)",
    "mask_inverted": "the keep-mask is used the wrong way round: True means the key may be "
    "attended, so fill the scores where the mask is False (~mask)",
}


def gqa() -> dict:
    g = torch.Generator().manual_seed(22)
    C, T = 12, 5
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    padding = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)[:, None, None]
    cases = []
    for H, G, mask in [(6, 2, causal), (4, 4, padding), (4, 1, None)]:
        m = key.GroupedQueryAttention(embed_dim=C, num_heads=H, num_kv_heads=G).eval()
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(0.6 * torch.randn(p.shape, generator=g))
        x = torch.randn(2, T, C, generator=g)
        with torch.no_grad():
            want, want_w = m(x, mask)
            mistakes, weight_mistakes = {}, {}
            for name, message in GQA_MISTAKES.items():
                y, w = gqa_variant(m, x, mask, name)
                if not torch.allclose(y, want, atol=1e-4):
                    mistakes[message] = y
                if not torch.allclose(w, want_w, atol=1e-4):
                    weight_mistakes[message] = w
        state = {k: v.clone() for k, v in m.state_dict().items()}
        cases.append({"num_heads": H, "num_kv_heads": G, "state": state, "x": x, "mask": mask,
                      "want": want, "want_weights": want_w, "mistakes": mistakes,
                      "weight_mistakes": weight_mistakes})  # fmt: skip
    return {"embed_dim": C, "cases": cases}


# --------------------------------------------------------------------------------------------
# Rotary positions
# --------------------------------------------------------------------------------------------


def rotary_variant(x: Tensor, offset: int, base: float, mistake: str = "") -> Tensor:
    T, D = x.shape[-2:]
    t = torch.arange(T, dtype=torch.float64)[:, None]
    t = t + (0 if mistake == "no_offset" else offset) + (1 if mistake == "from_one" else 0)
    exponent = {"k_over_d": torch.arange(D // 2) / D, "positive": -torch.arange(0, D, 2) / D}.get(
        mistake, torch.arange(0, D, 2) / D
    )
    angles = t * base ** (-exponent.double())
    if mistake == "negated":
        angles = -angles
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if mistake == "halves":
        first, second = x[..., : D // 2], x[..., D // 2 :]
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    if mistake == "out_halves":
        return torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


ROTARY_MISTAKES = {
    "halves": "the pairs are the two halves (x[..., k], x[..., k + D/2]): RoFormer rotates "
    "neighbouring pairs (x[..., 2k], x[..., 2k + 1])",
    "negated": "the rotation goes the other way: y_2k = x_2k cos - x_2k+1 sin, y_2k+1 = x_2k sin "
    "+ x_2k+1 cos",
    "k_over_d": "the frequencies are base^(-k / D): theta_k = base^(-2k / D)",
    "positive": "the frequencies grow with k: theta_k = base^(-2k / D), a minus sign",
    "no_offset": "the offset is ignored: the token in row t sits at position offset + t",
    "from_one": "the positions start at 1: the first row sits at position offset",
    "out_halves": "the rotated pairs are put back as two halves (all y_2k, then all y_2k+1): "
    "interleave them again, pair k in coordinates 2k and 2k + 1 (stack on a last axis, then "
    "flatten)",
}


def rotary() -> dict:
    g = torch.Generator().manual_seed(23)
    cases = []
    for shape, offset, base in [((2, 6, 8), 0, 10000.0), ((2, 3, 4, 6), 5, 100.0),
                                ((7, 4), 2, 10.0)]:  # fmt: skip
        x = torch.randn(*shape, generator=g)
        want = key.apply_rotary(x, offset=offset, base=base)
        mistakes = {message: rotary_variant(x, offset, base, name)
                    for name, message in ROTARY_MISTAKES.items()}  # fmt: skip
        cases.append({"x": x, "offset": offset, "base": base, "want": want,
                      "mistakes": _differing(want, mistakes)})  # fmt: skip
    return {"cases": cases}


# --------------------------------------------------------------------------------------------
# T5 relative bias
# --------------------------------------------------------------------------------------------


def t5_variant(module: key.T5RelativeBias, scores: Tensor, offset: int, mistake: str) -> Tensor:
    T_q, T_k = scores.shape[-2:]
    shift = {"no_offset": 0, "offset_subtracted": -offset}.get(mistake, offset)
    i = torch.arange(T_q)[:, None] + shift
    j = torch.arange(T_k)[None, :]
    rel = (i - j) if mistake == "flipped" else (j - i)
    nb, md = module.num_buckets, module.max_distance
    bidirectional = module.bidirectional or mistake == "always_bidirectional"
    bucket = torch.zeros_like(rel)
    if bidirectional:
        nb //= 2
        bucket = bucket + ((rel < 0) if mistake == "upper_left" else (rel > 0)).long() * nb
        distance = rel.abs()
    else:
        distance = rel.abs() if mistake == "decoder_abs" else (-rel).clamp(min=0)
        if mistake == "decoder_half_buckets":
            nb //= 2
    exact = nb // 2
    far = exact + (torch.log(distance.float() / exact) / math.log(md / exact) * (nb - exact)).long()
    if mistake != "no_cap":
        far = far.clamp(max=nb - 1)
    bucket = (bucket + torch.where(distance < exact, distance, far)).clamp(
        max=module.num_buckets - 1
    )
    bias = module.relative_attention_bias(bucket)  # (T_q, T_k, H)
    if mistake == "reshape":
        bias = bias.reshape(-1, T_q, T_k)
    else:
        bias = bias.permute(2, 0, 1)
    return bias.expand_as(scores) if mistake == "bias_only" else scores + bias


T5_MISTAKES = {
    "flipped": "the offset is i - j: T5 buckets the offset j - i (keys to the right are positive)",
    "always_bidirectional": "bidirectional=False is ignored: a causal (decoder) bias gives every "
    "key to the right bucket 0 and all num_buckets to the keys on the left",
    "no_offset": "the offset is ignored: query i sits at position i + offset",
    "offset_subtracted": "the offset is subtracted: query i sits at position i + offset (after "
    "a cache of offset tokens), key j at j",
    "decoder_abs": "the decoder's distance is |j - i|: unidirectional, every key to the right "
    "shares bucket 0, d = max(i - j, 0)",
    "decoder_half_buckets": "the decoder (bidirectional=False) uses num_buckets // 2 buckets, "
    "as each half of the encoder's does: its keys on the left get all num_buckets",
    "reshape": "the (T_q, T_k, H) lookup is reshaped to (H, T_q, T_k), which mixes heads and "
    "positions: move the head axis in front with permute(2, 0, 1)",
    "bias_only": "it returns the bias alone: return scores + bias",
    "no_cap": "the far buckets are not capped: distances past max_distance share the last "
    "bucket of their half, min(bucket, n - 1)",
    "upper_left": "the keys to the LEFT get the upper half: the keys to the right (j - i > 0) "
    "get buckets n .. 2n - 1",
}


def t5() -> dict:
    g = torch.Generator().manual_seed(24)
    cases = []
    for H, nb, md, bidirectional, shape, offset in [
        (3, 8, 20, True, (2, 3, 5, 7), 0),
        (2, 10, 24, True, (1, 2, 30, 30), 0),
        (3, 12, 32, False, (2, 3, 4, 40), 36),
    ]:
        m = key.T5RelativeBias(num_heads=H, num_buckets=nb, max_distance=md,
                               bidirectional=bidirectional)  # fmt: skip
        with torch.no_grad():
            m.relative_attention_bias.weight.copy_(torch.randn(nb, H, generator=g))
            scores = torch.randn(*shape, generator=g)
            want = m(scores, offset=offset)
            mistakes = {message: t5_variant(m, scores, offset, name)
                        for name, message in T5_MISTAKES.items()}  # fmt: skip
        cases.append({"num_heads": H, "num_buckets": nb, "max_distance": md,
                      "bidirectional": bidirectional, "state": {k: v.clone() for k, v in
                      m.state_dict().items()}, "scores": scores, "offset": offset,
                      "want": want, "mistakes": _differing(want, mistakes)})  # fmt: skip
    return {"cases": cases}


# --------------------------------------------------------------------------------------------
# Power law
# --------------------------------------------------------------------------------------------


def power_law() -> dict:
    n = [128.0, 256.0, 512.0, 1024.0, 2048.0]
    y = [0.9, 3.1, 13.0, 49.0, 205.0]
    p, c = key.fit_power_law(n, y)
    two_point = math.log(y[-1] / y[0]) / math.log(n[-1] / n[0])
    mistakes = {
        "it returns log c instead of c: c = exp(intercept)": torch.tensor([p, math.log(c)]),
        "it returns (c, p): the order is (p, c)": torch.tensor([c, p]),
        "the exponent is the slope between the first and the last point: fit all points by "
        "least squares": torch.tensor([two_point, y[0] / n[0] ** two_point]),
    }
    return {"n": n, "y": y, "want": torch.tensor([p, c]), "mistakes": mistakes}


def record() -> dict:
    return {
        "bilinear": bilinear(),
        "additive": additive(),
        "masks": masks(),
        "gqa": gqa(),
        "rotary": rotary(),
        "t5": t5(),
        "power_law": power_law(),
    }


if __name__ == "__main__":
    data = record()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, OUT)
    for name, part in data.items():
        for i, case in enumerate(part.get("cases", [part])):
            print(f"{name} case {i}: {len(case['mistakes'])} mistakes differ")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
