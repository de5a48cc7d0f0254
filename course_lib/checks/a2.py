"""Visible checks for assignment A2 (the attention layer, step by step).

Each ``check_*`` runs the student's code on small random inputs, compares it with ``course_lib``'s
reference or PyTorch's own modules given the same weights, and names the usual mistake when the
result is wrong (scaling by D instead of sqrt(D), the mask after the softmax, heads split with a
plain reshape, PyTorch's inverted mask convention, sine and cosine swapped, ...). A failure raises
:class:`~course_lib.checks.CheckFailed`; a success prints one line. No hidden test lives here.

Shape legend: B batch, T tokens (T_q queries, T_k keys), N_Q queries, N_X inputs, C channels,
H heads, D head dim (D_V for values).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .attention import check_causal_mask, copy_from_torch_mha, diagnose_attention
from .core import CheckFailed, check_close, check_gradients, check_shape, close, passed


def _call(fn: Callable[..., Any], *args: Any, what: str, hint: str = "", **kwargs: Any) -> Any:
    """Call the student's code; turn a crash into a message that says where to look."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(
            f"{what} is not implemented yet (it raises NotImplementedError)"
        ) from None
    except CheckFailed:
        raise
    except Exception as error:  # noqa: BLE001 (any error of the student's code is reported)
        raise CheckFailed(
            f"{what} raised {type(error).__name__}: {error}" + (f". {hint}" if hint else "")
        ) from error


def _pair(out: Any, what: str) -> tuple[Any, Any]:
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailed(
            f"{what} should return a pair (output, weights), got {type(out).__name__}"
        )
    return out


def _attention(q, k, v, mask=None, scale=None, dim=-1):
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=dim).nan_to_num(0.0)
    return weights @ v, weights


# --------------------------------------------------------------------------------------------
# 1-2. Dot-product attention
# --------------------------------------------------------------------------------------------


def check_dot_product_attention(fn: Callable[[Tensor, Tensor], Any], *, seed: int = 0) -> None:
    """``dot_product_attention(q (D,), X (N, D))`` -> (y (D,), a (N,))."""
    g = torch.Generator().manual_seed(seed)
    q, X = torch.randn(4, generator=g), torch.randn(6, 4, generator=g)
    y, a = _pair(_call(fn, q, X, what="dot_product_attention(q, X)"), "dot_product_attention")
    e = X @ q
    check_close(a, e.softmax(0), name="the weights a", dims=("N",), mistakes={
        "a is not normalised: apply a softmax to the scores": e,
        "the scores are scaled by 1/sqrt(D): this first step uses plain dot products":
            (e / 2).softmax(0),
    })  # fmt: skip
    check_close(y, e.softmax(0) @ X, name="the output y", dims=("D",), mistakes={
        "y is the plain average of the inputs: weight each x_i by a_i": X.mean(0),
        "y sums the inputs without the weights: weight each x_i by a_i": X.sum(0),
    })  # fmt: skip
    passed("dot_product_attention is right")


def check_scaled_dot_product_attention(fn: Callable[..., Any], *, seed: int = 0) -> None:
    """``scaled_dot_product_attention(q, k, v, mask=None)`` -> (y, weights), any batch shape."""
    diagnose_attention(fn, returns_weights=True, seed=seed)
    diagnose_attention(fn, returns_weights=True, batch=(2, 3), seed=seed + 1)
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g), torch.randn(5, 2)
    y, w = _pair(_call(fn, q, k, v, what="attention without batch dims"), "attention")
    want_y, want_w = _attention(q, k, v)
    check_close(y, want_y, name="the output for q (N_Q, D) without batch dimensions")
    causal = torch.ones(3, 5, dtype=torch.bool).tril()
    y, w = _pair(_call(fn, q, k, v, causal, what="attention with a (N_Q, N_X) mask"), "attention")
    check_close(w, _attention(q, k, v, causal)[1], name="the weights with a (N_Q, N_X) mask")
    passed("scaled_dot_product_attention passes all visible checks")


# --------------------------------------------------------------------------------------------
# 3-4. Layers with projections
# --------------------------------------------------------------------------------------------


def _linear_names(module: nn.Module, names: tuple[str, ...], what: str) -> None:
    for name in names:
        if not isinstance(getattr(module, name, None), nn.Linear):
            raise CheckFailed(
                f"{what} needs the nn.Linear attribute self.{name} of the given __init__"
            )


def check_attention_layer(layer_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``AttentionLayer(query_dim, input_dim, value_dim)(q, x, mask)`` -> (y, weights)."""
    from course_lib.attention import AttentionLayer

    torch.manual_seed(seed)
    layer = _call(layer_cls, query_dim=4, input_dim=6, value_dim=3, what="AttentionLayer(...)")
    _linear_names(layer, ("k_proj", "v_proj"), "AttentionLayer")
    ref = AttentionLayer(query_dim=4, input_dim=6, value_dim=3)
    ref.load_state_dict(layer.state_dict())
    g = torch.Generator().manual_seed(seed)
    q, x = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 6, generator=g)
    mask = torch.rand(2, 3, 5, generator=g) > 0.3
    for m in (None, mask):
        y, w = _pair(_call(layer, q, x, m, what="AttentionLayer.forward(q, x, mask)"), "forward")
        want_y, want_w = ref(q, x, m, return_weights=True)
        if isinstance(y, Tensor) and y.dim() == 3 and y.shape[-1] in (4, 6):
            raise CheckFailed(
                f"y has {y.shape[-1]} channels, expected D_V = 3: the values must be V = X W_V, "
                f"i.e. self.v_proj(x) (not x itself or self.k_proj(x))"
            )
        check_shape(y, (2, 3, 3), name="y", dims=("B", "N_Q", "D_V"))
        k, v = layer.k_proj(x).detach(), layer.v_proj(x).detach()
        mistakes = {"the scores are not divided by sqrt(D_Q)": _attention(q, k, v, m, scale=1.0)[1]}
        if m is not None:
            mistakes["the mask is ignored: pass it on to scaled_dot_product_attention"] = (
                _attention(q, k, v)[1]
            )
            mistakes["the mask is inverted: True means 'may attend'"] = _attention(q, k, v, ~m)[1]
        check_close(w, want_w.detach(), name="the weights", mistakes=mistakes)
        check_close(y, want_y.detach(), name="y")
    y.sum().backward()
    check_gradients({"k_proj.weight": layer.k_proj.weight, "v_proj.weight": layer.v_proj.weight})
    passed("AttentionLayer matches course_lib.attention.AttentionLayer")


def check_self_attention(attention_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``SelfAttention(input_dim, query_dim, value_dim)(x, mask)`` -> (y, weights)."""
    from course_lib.attention import SelfAttention

    torch.manual_seed(seed)
    att = _call(attention_cls, input_dim=6, query_dim=4, value_dim=5, what="SelfAttention(...)")
    _linear_names(att, ("q_proj", "k_proj", "v_proj"), "SelfAttention")
    ref = SelfAttention(input_dim=6, query_dim=4, value_dim=5)
    ref.load_state_dict(att.state_dict())
    x = torch.randn(2, 7, 6, generator=torch.Generator().manual_seed(seed))
    y, w = _pair(_call(att, x, what="SelfAttention.forward(x)"), "SelfAttention.forward")
    want_y, want_w = ref(x, return_weights=True)
    check_shape(w, (2, 7, 7), name="the weights", dims=("B", "T", "T"))
    q, k, v = (p(x).detach() for p in (att.q_proj, att.k_proj, att.v_proj))
    check_close(w, want_w.detach(), name="the weights", mistakes={
        "the keys are used as queries: Q = X W_Q": _attention(k, k, v)[1],
        "the scores are not divided by sqrt(D) = sqrt(query_dim)": _attention(
            q, k, v, scale=1.0)[1],
        "the scores are divided by D = 4 instead of sqrt(D) = 2": _attention(
            q, k, v, scale=1 / 4)[1],
        "the softmax runs over the query axis: use dim=-1 so each query's weights over the "
        "keys sum to 1": _attention(q, k, v, dim=-2)[1],
    })  # fmt: skip
    check_close(y, want_y.detach(), name="y", dims=("B", "T", "D_V"))
    y.sum().backward()
    check_gradients({f"{n}.weight": getattr(att, n).weight for n in ("q_proj", "k_proj", "v_proj")})
    passed("SelfAttention matches course_lib.attention.SelfAttention")


# --------------------------------------------------------------------------------------------
# 5. Masks
# --------------------------------------------------------------------------------------------


def check_masks(
    causal_fn: Callable[[int], Tensor],
    padding_fn: Callable[[Tensor, int], Tensor],
    attention_cls: type[nn.Module],
    *,
    seed: int = 0,
) -> None:
    """``causal_mask(T)`` (T, T), ``padding_mask(lengths, T)`` (B, T), and causality of
    ``SelfAttention`` under the causal mask."""
    check_causal_mask(_call(causal_fn, 5, what="causal_mask(5)"), 5)
    lengths = torch.tensor([3, 5, 1])
    pad = _call(padding_fn, lengths, 5, what="padding_mask(lengths, 5)")
    expected = torch.arange(5)[None, :] < lengths[:, None]
    check_shape(pad, (3, 5), name="padding_mask", dims=("B", "T"))
    if pad.dtype != torch.bool:
        raise CheckFailed(f"padding_mask should be boolean (True = real token), got {pad.dtype}")
    if torch.equal(pad, ~expected):
        raise CheckFailed("padding_mask is inverted: True marks the real tokens (keep-mask)")
    if torch.equal(pad, torch.arange(5)[None, :] <= lengths[:, None]):
        raise CheckFailed(
            "padding_mask is off by one: it keeps lengths[b] + 1 positions. Positions "
            "0 .. lengths[b] - 1 are real: use arange(T) < lengths[:, None]"
        )
    if not torch.equal(pad, expected):
        raise CheckFailed(
            f"padding_mask([3, 5, 1], 5) should be\n{expected.int()}\ngot\n{pad.int()}"
        )
    torch.manual_seed(seed)
    att = attention_cls(input_dim=4)
    x = torch.randn(1, 6, 4, generator=torch.Generator().manual_seed(seed))
    changed = x.clone()
    changed[:, 4:] += 1.0
    with torch.no_grad():
        y1, w1 = att(x, causal_fn(6))
        y2, _ = att(changed, causal_fn(6))
    if not close(y1[:, :4], y2[:, :4]):
        raise CheckFailed(
            "with a causal mask, changing tokens 4 and 5 changed the outputs at positions 0-3: "
            "future tokens leak into the past (is the mask used, and is it applied before the "
            "softmax?)"
        )
    if not torch.allclose(w1[0].triu(1), torch.zeros(6, 6)):
        raise CheckFailed("with a causal mask, the weights above the diagonal must be exactly 0")
    passed("causal_mask and padding_mask are right, and causal self-attention ignores the future")


# --------------------------------------------------------------------------------------------
# 6-7. Heads and multi-head attention
# --------------------------------------------------------------------------------------------


def check_heads(split_fn: Callable[..., Tensor], merge_fn: Callable[[Tensor], Tensor]) -> None:
    """``split_heads(x (B, T, C), H)`` -> (B, H, T, D); ``merge_heads`` inverts it."""
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)
    heads = _call(split_fn, x, 4, what="split_heads(x, 4)")
    expected = x.view(2, 3, 4, 2).transpose(1, 2)
    check_close(heads, expected, name="split_heads(x (2, 3, 8), 4)", dims=("B", "H", "T", "D"),
                mistakes={
        "the channels were reshaped straight to (B, H, T, D): that mixes tokens into heads. "
        "View as (B, T, H, D), then transpose(1, 2)": x.reshape(2, 4, 3, 2),
        "head h should own the contiguous channels h*D .. h*D + D - 1, not every H-th one":
            x.view(2, 3, 2, 4).permute(0, 3, 1, 2)})  # fmt: skip
    merged = _call(merge_fn, expected, what="merge_heads(heads)")
    check_close(merged, x, name="merge_heads(split_heads(x))", dims=("B", "T", "C"), mistakes={
        "the heads were reshaped without moving the head axis back behind the tokens first "
        "(transpose(1, 2), then reshape)": expected.reshape(2, 3, 8)})  # fmt: skip
    passed("split_heads and merge_heads are right")


def _mha(
    m: nn.Module, H: int, query, key, value, mask=None, *, out=True, scale=None, split="heads"
):
    """Multi-head attention from ``m``'s projections, with switchable mistakes."""

    def heads(t: Tensor) -> Tensor:
        B, T, C = t.shape
        if split == "reshape":
            return t.reshape(B, H, T, C // H)
        return t.view(B, T, H, C // H).transpose(1, 2)

    q, k, v = heads(m.q_proj(query)), heads(m.k_proj(key)), heads(m.v_proj(value))
    y, w = _attention(q, k, v, mask, scale=scale)
    y = y.transpose(1, 2).reshape(query.shape)
    return (m.out_proj(y) if out else y), w


def _mha_mistakes(m: nn.Module, H: int, x: Tensor, mask=None) -> tuple[dict, dict]:
    """(mistakes for the weights, mistakes for the output) of multi-head self-attention."""
    C = x.shape[-1]
    cases = {
        "the output projection is missing: Y = [head_1 ... head_H] W_O, i.e. "
        "self.out_proj(merge_heads(y))": dict(out=False),
        f"the scores are divided by sqrt(C) = sqrt({C}), the model width: each head divides by "
        f"sqrt(D), its own head dim D = C / H = {C // H}": dict(scale=1 / math.sqrt(C)),
        "the heads are split with a plain reshape to (B, H, T, D), which mixes tokens into "
        "heads: view as (B, T, H, D), then transpose(1, 2) (use split_heads)": dict(
            split="reshape"),
    }  # fmt: skip
    runs = {text: _mha(m, H, x, x, x, mask, **kw) for text, kw in cases.items()}
    return {t: r[1] for t, r in runs.items()}, {t: r[0] for t, r in runs.items()}


def check_multihead_attention(mha_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``MultiHeadAttention(embed_dim, num_heads)(query, key, value, mask)`` equals
    ``nn.MultiheadAttention(batch_first=True)`` with the same weights."""
    torch.manual_seed(seed)
    C, H = 12, 3
    mine = _call(mha_cls, embed_dim=C, num_heads=H, what="MultiHeadAttention(...)")
    _linear_names(mine, ("q_proj", "k_proj", "v_proj", "out_proj"), "MultiHeadAttention")
    ref = nn.MultiheadAttention(C, H, batch_first=True).eval()
    copy_from_torch_mha(mine, ref)
    g = torch.Generator().manual_seed(seed)
    x, mem = torch.randn(2, 5, C, generator=g), torch.randn(2, 7, C, generator=g)
    with torch.no_grad():
        y, w = _pair(_call(mine, x, what="MultiHeadAttention(x)"), "MultiHeadAttention")
        want_y, want_w = ref(x, x, x, average_attn_weights=False)
        if isinstance(w, Tensor) and w.dim() == 3 and close(w, want_w.mean(1)):
            raise CheckFailed(
                "the weights are averaged over heads: return them per head (B, H, T_q, T_k)"
            )
        check_shape(w, (2, H, 5, 5), name="the weights", dims=("B", "H", "T_q", "T_k"))
        w_mistakes, y_mistakes = _mha_mistakes(mine, H, x)
        check_close(w, want_w, name="the per-head weights", mistakes={
            "the weights are averaged over heads: return them per head (B, H, T_q, T_k)":
                want_w.mean(1, keepdim=True).expand_as(want_w), **w_mistakes})  # fmt: skip
        check_close(y, want_y, name="the output (self-attention)", mistakes=y_mistakes)
        y, _ = _pair(_call(mine, x, mem, mem, what="MultiHeadAttention(x, memory, memory)"), "")
        check_close(y, ref(x, mem, mem)[0], name="the output with keys and values from memory",
                    mistakes={"the keys/values ignore the key and value arguments":
                              ref(x, x, x)[0]})  # fmt: skip
        keep = torch.ones(5, 5, dtype=torch.bool).tril()
        y, _ = _pair(_call(mine, x, mask=keep, what="MultiHeadAttention(x, mask=causal)"), "")
        check_close(
            y,
            ref(x, x, x, attn_mask=~keep)[0],
            name="the output with a causal mask",
            mistakes={
                "the mask is inverted (ours: True = may attend; PyTorch's "
                "attn_mask: True = may NOT attend)": ref(x, x, x, attn_mask=keep)[0],
                "the mask is inverted: ours is a keep-mask (True = may attend), pass it on as "
                "it is": _mha(mine, H, x, x, x, ~keep)[0],
            },
        )
    passed("MultiHeadAttention matches nn.MultiheadAttention")  # fmt: skip


# --------------------------------------------------------------------------------------------
# 8-9. Positional encoding, power-law fit
# --------------------------------------------------------------------------------------------


def check_positional_encoding(fn: Callable[[int, int], Tensor]) -> None:
    """``sinusoidal_positional_encoding(T, d)`` -> (T, d) float32, Vaswani et al. Section 3.5."""
    from course_lib.positional import sinusoidal_positional_encoding as reference

    pe = _call(fn, 10, 8, what="sinusoidal_positional_encoding(10, 8)")
    want = reference(10, 8)
    if isinstance(pe, Tensor) and pe.dtype != torch.float32:
        raise CheckFailed(f"the table should be float32, got {pe.dtype} (use .float())")
    t = torch.arange(10.0)[:, None]
    omega = 10000.0 ** (-torch.arange(0, 8, 2) / 8)
    half = torch.cat([torch.sin(t * omega), torch.cos(t * omega)], dim=1)
    swapped = torch.stack([torch.cos(t * omega), torch.sin(t * omega)], dim=2).view(10, 8)

    def table(t: Tensor, omega: Tensor) -> Tensor:
        return torch.stack([torch.sin(t * omega), torch.cos(t * omega)], dim=2).view(len(t), -1)

    wrong_k = table(t, 10000.0 ** (-torch.arange(4) / 8))
    others = {
        "the positions start at 1: the first row is position 0 (sin 0 = 0, cos 0 = 1), the "
        "last T - 1": table(t + 1, omega),
        "the frequencies grow with k: omega_k = 1 / 10000^(2k / d), a negative exponent":
            table(t, 10000.0 ** (torch.arange(0, 8, 2) / 8)),
    }  # fmt: skip
    for base in (1000.0, 100.0, 100000.0, 10.0):
        others[f"the base is {base:g}, not 10000: omega_k = 1 / 10000^(2k / d)"] = table(
            t, base ** (-torch.arange(0, 8, 2) / 8)
        )
    check_close(pe, want, name="PE (10, 8)", atol=1e-5, dims=("T", "d"), mistakes={
        "the sines fill the first half and the cosines the second: interleave them (even "
        "columns sin, odd columns cos)": half,
        "sine and cosine are swapped: even columns get the sine": swapped,
        "the frequency uses k instead of 2k: omega_k = 1 / 10000^(2k / d)": wrong_k,
        **others,
    })  # fmt: skip
    check_close(_call(fn, 300, 64, what="PE(300, 64)"), reference(300, 64), name="PE (300, 64)",
                atol=1e-4)  # fmt: skip
    passed("sinusoidal_positional_encoding matches the paper's formula")


def check_fit_power_law(fn: Callable[..., Any]) -> None:
    """``fit_power_law(n, y)`` -> (p, c) with y ~ c n^p (least squares on logs)."""
    import numpy as np

    n = [16.0, 32.0, 64.0, 128.0]
    out = _call(fn, n, [3.0 * x**1.5 for x in n], what="fit_power_law(n, 3 n^1.5)")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailed("fit_power_law should return the pair (p, c)")
    p, c = (float(v) for v in out)
    if abs(p - 1.5) > 1e-6 or abs(c - 3.0) > 1e-5:
        hint = " (did you return log c instead of c?)" if abs(c - math.log(3.0)) < 1e-5 else ""
        semi = np.polyfit(np.log(n), [3.0 * x**1.5 for x in n], 1)
        if abs(p - semi[0]) < 1e-6 * max(1.0, abs(semi[0])):
            hint = " (y is not logged: fit log y = p log n + log c)"
        raise CheckFailed(f"fit_power_law(n, 3 n^1.5) gave p = {p:.6g}, c = {c:.6g}; "
                          f"expected p = 1.5, c = 3{hint}")  # fmt: skip
    noisy = [2.0 * x**2 * f for x, f in zip(n, (1.1, 0.9, 1.05, 0.95))]
    p, c = (float(v) for v in _call(fn, n, noisy, what="fit_power_law(n, noisy)"))

    want_p, want_logc = np.polyfit(np.log(n), np.log(noisy), 1)
    inv_p, b = np.polyfit(np.log(noisy), np.log(n), 1)
    if abs(p - 1 / inv_p) < 1e-6:
        raise CheckFailed(
            "on noisy data the fit regresses log n on log y: fit log y on log n (y is the "
            "response, p the slope of log y against log n)"
        )
    if abs(p - want_p) > 1e-6 or c <= 0 or abs(math.log(c) - want_logc) > 1e-6:
        raise CheckFailed(
            f"on noisy data fit_power_law gave p = {p:.6g}, c = {c:.6g}; the least-squares line "
            f"through (log n, log y) has p = {want_p:.6g}, c = {math.exp(want_logc):.6g}"
        )
    passed("fit_power_law is right")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
