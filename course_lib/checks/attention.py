"""Visible checks for attention that recognise the usual mistakes.

``diagnose_attention(fn)`` runs a student's ``fn(q, k, v, mask=None)`` on small random inputs and,
when the output is wrong, compares it with the outputs of the common wrong implementations:

- scores divided by D (or not scaled at all) instead of sqrt(D);
- softmax over the query axis instead of the key axis;
- the mask applied after the softmax (weights no longer sum to 1), ignored, or inverted;
- the attention weights returned instead of the weighted sum of values;
- NaN for a query whose keys are all masked.

Masks are boolean keep-masks (True = may attend), as in ``course_lib.attention``. Shape legend: B
batch, T_q queries, T_k keys, D query/key dim, D_v value dim, C embed dim, H heads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .core import CheckFailed, check_close, check_gradients, check_shape, passed


def _attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float | None = None,
    softmax_dim: int = -1,
    mask_mode: str = "before",
) -> tuple[Tensor, Tensor]:
    """Attention with switchable mistakes; the defaults are the correct computation."""
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(d) if scale is None else scale)
    if mask is not None and mask_mode == "unzeroed":  # the finite fill, without zeroing after
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    if mask is not None and mask_mode == "before":
        scores = scores.masked_fill(~mask, float("-inf"))
    if mask is not None and mask_mode == "inverted":
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=softmax_dim)
    if mask is not None and mask_mode in ("before", "inverted"):
        keep = mask if mask_mode == "before" else ~mask
        weights = weights.masked_fill(~keep, 0.0)
    if mask is not None and mask_mode == "after":
        weights = weights * mask
    return weights @ v, weights


def attention_mistakes(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> dict[str, Tensor]:
    """Description of each common mistake -> the output it gives on these inputs.

    Pass it as ``check_close(..., mistakes=attention_mistakes(q, k, v, mask))`` so a wrong output
    is explained, in a visible check or in a hidden test.
    """
    d = q.shape[-1]
    out = {
        f"the scores are divided by D = {d} instead of sqrt(D) = {math.sqrt(d):.3g} (the "
        "variance of q.k grows like D, so its standard deviation grows like sqrt(D))": _attention(
            q, k, v, mask, scale=1 / d
        )[0],
        "the scores are not scaled: divide q @ k^T by math.sqrt(d_k)": _attention(
            q, k, v, mask, scale=1.0
        )[0],
        "the softmax runs over the query axis: use dim=-1 so each query's weights over the keys "
        "sum to 1": _attention(q, k, v, mask, softmax_dim=-2)[0],
    }
    if k.shape[-2] != d:
        n = k.shape[-2]
        out[f"the scores are divided by sqrt({n}), the number of keys: divide by sqrt(D) = "
            f"sqrt(q.shape[-1]) = {math.sqrt(d):.3g}"] = _attention(
            q, k, v, mask, scale=1 / math.sqrt(n)
        )[0]  # fmt: skip
    if mask is not None:
        out["the mask is applied after the softmax, so the kept weights no longer sum to 1: fill "
            "the masked scores with -inf before the softmax"] = _attention(
            q, k, v, mask, mask_mode="after"
        )[0]  # fmt: skip
        out["the mask is ignored"] = _attention(q, k, v, None)[0]
        out["a query whose keys are all masked (a fully masked row) gets uniform weights: set "
            "its weights to 0 after the softmax (masked_fill(~mask, 0.0))"] = _attention(
            q, k, v, mask, mask_mode="unzeroed"
        )[0]  # fmt: skip
        out["the mask is inverted: True means 'may attend' (a keep-mask), so fill where "
            "~mask"] = _attention(q, k, v, mask, mask_mode="inverted")[0]  # fmt: skip
    return out


def _unpack(result: Any, returns_weights: bool, name: str) -> tuple[Any, Any]:
    if returns_weights:
        if not isinstance(result, tuple) or len(result) != 2:
            raise CheckFailed(
                f"{name} should return (output, weights), got {type(result).__name__}"
            )
        return result
    return result, None


def diagnose_attention(
    fn: Callable[..., Any],
    *,
    batch: tuple[int, ...] = (2,),
    t_q: int = 3,
    t_k: int = 5,
    d: int = 8,
    d_v: int = 6,
    masked: bool = True,
    returns_weights: bool = False,
    seed: int = 0,
    atol: float = 1e-5,
) -> None:
    """Check ``fn(q, k, v, mask=None)`` -> y (or (y, weights)) and explain what is wrong.

    q (*batch, T_q, D), k (*batch, T_k, D), v (*batch, T_k, D_v), mask (*batch, T_q, T_k) bool;
    y (*batch, T_q, D_v), weights (*batch, T_q, T_k).
    """
    name = getattr(fn, "__name__", "attention")
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, t_q, d, generator=g)
    k = torch.randn(*batch, t_k, d, generator=g)
    v = torch.randn(*batch, t_k, d_v, generator=g)
    dims = (["B"] if len(batch) == 1 else [f"B{i}" for i in range(len(batch))]) + ["T_q", "D_v"]

    result = fn(q, k, v)
    y, w = _unpack(result, returns_weights, name)
    expected, weights = _attention(q, k, v)
    if isinstance(y, Tensor) and tuple(y.shape) == tuple(weights.shape) and t_k != d_v:
        raise CheckFailed(
            f"{name}(q, k, v) returned a tensor of shape {tuple(y.shape)} = (..., T_q, T_k): "
            "these look like the attention weights; multiply them by v to get the output"
        )
    check_close(y, expected, name=f"{name}(q, k, v)", atol=atol,
                mistakes=attention_mistakes(q, k, v), dims=dims)  # fmt: skip
    if returns_weights:
        check_close(w, weights, name=f"the weights of {name}(q, k, v)", atol=atol)

    if masked:
        lengths = torch.randint(1, t_k + 1, batch, generator=g)
        mask = (torch.arange(t_k) < lengths[..., None])[..., None, :].expand(*batch, t_q, t_k)
        mask = mask.clone()
        mask[(0,) * len(batch) + (0,)] = False  # one query sees no key at all
        y, w = _unpack(fn(q, k, v, mask), returns_weights, name)
        expected, weights = _attention(q, k, v, mask)
        if isinstance(y, Tensor) and y.shape == expected.shape and torch.isnan(y).any():
            raise CheckFailed(
                f"{name}(q, k, v, mask) gives NaN for a query whose keys are all masked (a softmax "
                "over a row of -inf). Such a query should get zero weights and a zero output: "
                "e.g. set its weights to 0 after the softmax (masked_fill(~mask, 0.0))."
            )
        check_close(y, expected, name=f"{name}(q, k, v, mask)", atol=atol,
                    mistakes=attention_mistakes(q, k, v, mask), dims=dims)  # fmt: skip
        if returns_weights:
            check_close(w, weights, name=f"the weights of {name}(q, k, v, mask)", atol=atol)

    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    y, _ = _unpack(fn(q, k, v), returns_weights, name)
    if not isinstance(y, Tensor) or not y.requires_grad:
        raise CheckFailed(f"{name}'s output is not differentiable: is something detached?")
    y.sum().backward()
    check_gradients({"q": q, "k": k, "v": v})
    passed(f"{name} passes the visible checks (shape, values, masking, gradients)")


def diagnose_softmax(fn: Callable[[Tensor], Tensor], *, seed: int = 0) -> None:
    """Check ``fn(x) -> softmax(x, dim=-1)``: rows sum to 1, right axis, stable for large x."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, 5, generator=g)
    check_close(
        fn(x),
        torch.softmax(x, dim=-1),
        name="softmax(x)",
        mistakes={
            "the softmax runs over the wrong axis: normalise over the last one (dim=-1)":
                torch.softmax(x, dim=-2),
            "the exponentials are not normalised (divide by their sum)": x.exp(),
        },
    )  # fmt: skip
    big = x * 100 + 1000
    y = fn(big)
    if not torch.isfinite(y).all():
        raise CheckFailed(
            "softmax(x) overflows for large x (exp(1000) = inf): subtract each row's max before "
            "exponentiating; it does not change the result"
        )
    check_close(y, torch.softmax(big, dim=-1), name="softmax(100 x + 1000)")
    passed("softmax passes the visible checks")


def check_causal_mask(mask: Any, T: int) -> None:
    """A (T, T) boolean keep-mask, True on and below the diagonal."""
    check_shape(mask, (T, T), name="the causal mask", dims=("T", "T"))
    expected = torch.ones(T, T, dtype=torch.bool).tril()
    if mask.dtype != torch.bool:
        raise CheckFailed(
            f"the causal mask should be boolean (True = may attend), got {mask.dtype}; "
            "an additive float mask is a different convention"
        )
    if torch.equal(mask, ~expected):
        raise CheckFailed("the causal mask is inverted: True must mean 'may attend' (j <= i)")
    if torch.equal(mask, expected.T):
        raise CheckFailed("the causal mask is transposed: query i (row) may see keys j <= i")
    if torch.equal(mask, expected & ~torch.eye(T, dtype=torch.bool)):
        raise CheckFailed("the causal mask hides the diagonal: a token may attend to itself")
    if not torch.equal(mask, expected):
        raise CheckFailed("the causal mask should be True exactly on and below the diagonal")
    passed("causal mask is right")


def copy_from_torch_mha(module: nn.Module, reference: nn.MultiheadAttention) -> None:
    """Copy a batch-first ``nn.MultiheadAttention``'s weights into a module with ``q_proj``,
    ``k_proj``, ``v_proj`` and ``out_proj`` linear layers."""
    w_q, w_k, w_v = reference.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = reference.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for proj, w, b in ((module.q_proj, w_q, b_q), (module.k_proj, w_k, b_k),
                           (module.v_proj, w_v, b_v)):  # fmt: skip
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        module.out_proj.weight.copy_(reference.out_proj.weight)
        module.out_proj.bias.copy_(reference.out_proj.bias)


def diagnose_multihead(
    module: nn.Module, *, embed_dim: int, num_heads: int, seed: int = 0, atol: float = 1e-5
) -> None:
    """Check a multi-head self-attention module against ``nn.MultiheadAttention``.

    ``module(x, mask=None)`` with x (B, T, C) must equal ``nn.MultiheadAttention(C, H,
    batch_first=True)`` with the same weights (copied into ``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj``); a keep-mask (T, T) corresponds to torch's ``attn_mask=~mask``.
    """
    torch.manual_seed(seed)
    reference = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True).eval()
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        if not isinstance(getattr(module, name, None), nn.Linear):
            raise CheckFailed(f"the module needs an nn.Linear attribute {name!r}")
    copy_from_torch_mha(module, reference)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, embed_dim, generator=g)
    with torch.no_grad():
        expected = reference(x, x, x, need_weights=False)[0]
        got = module(x)
    check_shape(got, (2, 5, embed_dim), name="output", dims=("B", "T", "C"))
    check_close(got, expected, name="multi-head output", atol=atol)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        expected = reference(x, x, x, attn_mask=~mask, need_weights=False)[0]
        got = module(x, mask)
    check_close(got, expected, name="multi-head output with a causal mask", atol=atol)
    passed("multi-head attention matches nn.MultiheadAttention")
