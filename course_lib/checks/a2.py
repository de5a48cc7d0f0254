"""Visible checks for assignment A2 (scores, masks, grouped-query attention, RoPE, T5's bias).

Each ``check_*`` runs the student's code on the inputs recorded in
``recorded/a2_self_attention.pt`` (weights included) and compares with the recorded reference
answer; when they differ it names the usual mistake whose recorded answer the student's equals
(scores scaled by the wrong size, a tanh in the wrong place, a window one too wide, key/value
heads tiled instead of grouped, the two halves rotated instead of neighbouring pairs, an offset
taken the wrong way round). The reference's code is not here, nor anywhere in ``course_lib``:
the answers are data, recorded by the instructor (``autograder/suites/a2_self_attention/
a2_record.py``), and the hidden tests draw other inputs. A failure raises
:class:`~course_lib.checks.CheckFailed`; a success prints one line.

Shape legend: B batch, T tokens (N_Q queries, N_X keys), C channels, H query heads, G key/value
heads, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from .core import (
    CheckFailed,
    call_student,
    check_close,
    check_gradients,
    check_shape,
    close,
    passed,
    recorded,
)


def _recorded() -> dict[str, Any]:
    return recorded("a2_self_attention")


_call = call_student


def _tensor(out: Any, what: str) -> Tensor:
    if not isinstance(out, Tensor):
        raise CheckFailed(f"{what} should return a tensor, got {type(out).__name__}")
    return out


def _load(module: nn.Module, state: dict[str, Tensor], what: str) -> None:
    try:
        module.load_state_dict(state)
    except RuntimeError as error:
        raise CheckFailed(
            f"the reference's weights do not fit your {what} (keep the given __init__): {error}"
        ) from None


def _shape(batch: tuple[int, ...]) -> str:
    return f"{len(batch)} batch dimension{'s' if len(batch) != 1 else ''}"


_ANY_BATCH = (
    "q and k may have any number of leading batch dimensions (none, one, two...): index "
    "from the end, e.g. transpose k's last two axes with k.transpose(-2, -1) (k.mT), not "
    "transpose(1, 2) or .T"
)
_ANY_BATCH_ADDITIVE = (
    "q and k may have any number of leading batch dimensions (none, one, two...): insert the "
    "new axes from the end, (q @ W_q)[..., :, None, :] and (k @ W_k)[..., None, :, :], not "
    "[:, :, None, :]"
)


# --------------------------------------------------------------------------------------------
# 1. Bilinear (general) scores
# --------------------------------------------------------------------------------------------


def check_bilinear_scores(fn: Callable[..., Tensor]) -> None:
    """``bilinear_scores(q, k, W)`` = q W k^T / sqrt(D_k), any leading dimensions."""
    for case in _recorded()["bilinear"]["cases"]:
        q, k, W = case["q"].clone().requires_grad_(True), case["k"], case["W"]
        D_q, D_k = W.shape
        what = f"bilinear_scores(q, k, W) with q {tuple(q.shape)}, k {tuple(k.shape)}"
        E = _tensor(_call(fn, q, k, W, what=what, hint=_ANY_BATCH), what)
        name = f"the scores E ({_shape(q.shape[:-2])}, D_q={D_q}, D_k={D_k})"
        check_close(E, case["want"], name=name, mistakes=case["mistakes"],
                    dims=("...", "N_Q", "N_X"))  # fmt: skip
        E.sum().backward()
        check_gradients({"q": q})
    passed("bilinear_scores matches the reference")


# --------------------------------------------------------------------------------------------
# 2. Additive scores
# --------------------------------------------------------------------------------------------


def check_additive_scores(fn: Callable[..., Tensor]) -> None:
    """``additive_scores(q, k, W_q, W_k, w)`` = w . tanh(q_i W_q + k_j W_k) for every pair."""
    for case in _recorded()["additive"]["cases"]:
        q, k = case["q"].clone().requires_grad_(True), case["k"]
        what = f"additive_scores(q, k, W_q, W_k, w) with q {tuple(q.shape)}, k {tuple(k.shape)}"
        E = _tensor(_call(fn, q, k, case["W_q"], case["W_k"], case["w"], what=what,
                          hint=_ANY_BATCH_ADDITIVE), what)  # fmt: skip
        check_close(E, case["want"], name=f"the scores E ({_shape(q.shape[:-2])})",
                    mistakes=case["mistakes"], dims=("...", "N_Q", "N_X"))  # fmt: skip
        E.sum().backward()
        check_gradients({"q": q})
    passed("additive_scores matches the reference")


# --------------------------------------------------------------------------------------------
# 3. Masks
# --------------------------------------------------------------------------------------------


def check_combine_masks(fn: Callable[..., Tensor]) -> None:
    """``combine_masks(lengths, T, causal=..., window=...)`` -> bool keep-mask (B, T, T)."""
    from course_lib.attention import scaled_dot_product_attention

    for case in _recorded()["masks"]["cases"]:
        lengths, T, causal, window = case["lengths"], case["T"], case["causal"], case["window"]
        what = f"combine_masks({lengths.tolist()}, {T}, causal={causal}, window={window})"
        keep = _tensor(_call(fn, lengths, T, causal=causal, window=window, what=what), what)
        if keep.dtype != torch.bool:
            raise CheckFailed(f"{what} has dtype {keep.dtype}: a keep-mask is boolean")
        check_shape(keep, tuple(case["want"].shape), name=what, dims=("B", "T", "T"))
        if torch.equal(keep, case["want"]):
            continue
        for description, wrong in case["mistakes"].items():
            if torch.equal(keep, wrong):
                raise CheckFailed(f"{what} is wrong: it looks like {description}")
        b, i, j = (keep != case["want"]).nonzero()[0].tolist()
        raise CheckFailed(
            f"{what} is wrong at [{b}, {i}, {j}] (sequence {b}, query {i}, key {j}): it says "
            f"{bool(keep[b, i, j])}. Keep key j when j < lengths[b], j <= i (causal) and "
            "|i - j| < window (window given)"
        )
    # the mask in use: rows with no key left give zeros, never NaN (the book's masked softmax)
    lengths = _recorded()["masks"]["cases"][-1]["lengths"]
    keep = fn(lengths, 5, causal=True, window=1)
    x = torch.randn(len(lengths), 5, 4, generator=torch.Generator().manual_seed(0))
    y, weights = scaled_dot_product_attention(x, x, x, keep[:, None], return_weights=True)
    if not torch.isfinite(y).all():
        raise CheckFailed("attention under your mask gives NaN or inf")
    passed("combine_masks matches the reference; fully masked rows attend to nothing")


# --------------------------------------------------------------------------------------------
# 4. Grouped-query attention
# --------------------------------------------------------------------------------------------


_FUSED_FUNCTIONS = {
    "scaled_dot_product_attention": "torch.nn.functional.scaled_dot_product_attention",
    "multi_head_attention_forward": "torch.nn.functional.multi_head_attention_forward",
    "_native_multi_head_attention": "nn.MultiheadAttention's fused kernel",
}


@contextmanager
def _fused_calls() -> Iterator[list[str]]:
    """Record the calls the assignment does not allow in GroupedQueryAttention: PyTorch's fused
    attention (however it was imported), ``nn.MultiheadAttention`` and the book's
    ``MultiHeadAttention`` (the book's ``scaled_dot_product_attention`` is allowed)."""
    from torch.overrides import TorchFunctionMode

    from course_lib.attention import MultiHeadAttention

    used: list[str] = []

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            name = _FUSED_FUNCTIONS.get(getattr(func, "__name__", ""))
            if name is not None and name not in used:
                used.append(name)
            return func(*args, **(kwargs or {}))

    classes = {nn.MultiheadAttention: "nn.MultiheadAttention",
               MultiHeadAttention: "the book's MultiHeadAttention"}  # fmt: skip
    originals = {cls: cls.forward for cls in classes}

    def spying(cls: type[nn.Module]) -> Callable[..., Any]:
        def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if classes[cls] not in used:
                used.append(classes[cls])
            return originals[cls](self, *args, **kwargs)

        return forward

    try:
        for cls in classes:
            cls.forward = spying(cls)  # type: ignore[method-assign]
        with Spy():
            yield used
    finally:
        for cls, forward in originals.items():
            cls.forward = forward  # type: ignore[method-assign]


def check_grouped_query_attention(module_cls: type[nn.Module]) -> None:
    """``GroupedQueryAttention(embed_dim=C, num_heads=H, num_kv_heads=G)(x, mask)`` ->
    (y (B, T, C), weights (B, H, T, T)), at G < H, G = H (multi-head) and G = 1 (multi-query)."""
    d = _recorded()["gqa"]
    C = d["embed_dim"]
    for case in d["cases"]:
        H, G = case["num_heads"], case["num_kv_heads"]
        what = f"GroupedQueryAttention(embed_dim={C}, num_heads={H}, num_kv_heads={G})"
        mine = _call(module_cls, embed_dim=C, num_heads=H, num_kv_heads=G, what=what)
        _load(mine, case["state"], what)
        mine.eval()
        mask = case["mask"]
        kind = "no mask" if mask is None else f"a mask of shape {tuple(mask.shape)}"
        with _fused_calls() as used:
            out = _call(mine, case["x"], mask, what=f"{what}.forward(x, mask)")
        if used:
            raise CheckFailed(
                f"{what}.forward uses {used[0]}, which is not allowed here (the hidden tests "
                "detect it and give this step no points): write the heads' plumbing yourself, "
                "with the book's scaled_dot_product_attention(q, k, v, mask, return_weights=True) "
                "or masked_softmax"
            )
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailed(f"{what}.forward should return (y, weights)")
        y, w = out
        B, _, T, _ = case["want_weights"].shape
        if isinstance(w, Tensor) and tuple(w.shape) == (B, T, T):
            raise CheckFailed(
                f"the weights of {what} have shape {tuple(w.shape)}: return one "
                "weight map per query head, (B, H, T, T), not their average"
            )
        check_close(y, case["want"], name=f"the output of {what} with {kind}",
                    mistakes=case["mistakes"], dims=("B", "T", "C"))  # fmt: skip
        check_close(w, case["want_weights"], name=f"the weights of {what} with {kind}",
                    mistakes=case["weight_mistakes"], dims=("B", "H", "T", "T"))  # fmt: skip
        y.sum().backward()
        check_gradients({n: p for n, p in mine.named_parameters()})
    passed("GroupedQueryAttention matches the reference (grouped, multi-head, multi-query)")


# --------------------------------------------------------------------------------------------
# 5. Rotary positions
# --------------------------------------------------------------------------------------------


def check_apply_rotary(fn: Callable[..., Tensor]) -> None:
    """``apply_rotary(x, offset=..., base=...)`` rotates each pair (2k, 2k + 1) of row t by
    (offset + t) * base^(-2k / D)."""
    for case in _recorded()["rotary"]["cases"]:
        x, offset, base = case["x"], case["offset"], case["base"]
        what = f"apply_rotary(x of shape {tuple(x.shape)}, offset={offset}, base={base:g})"
        y = _tensor(_call(fn, x, offset=offset, base=base, what=what), what)
        if y.dtype != x.dtype:
            raise CheckFailed(f"{what} has dtype {y.dtype}: return x's dtype ({x.dtype})")
        check_close(y, case["want"], name=what, mistakes=case["mistakes"], atol=1e-5)
    x = _recorded()["rotary"]["cases"][0]["x"][0]  # (T, D)
    q, k = fn(x, offset=3, base=100.0), fn(x, offset=7, base=100.0)
    q2, k2 = fn(x, offset=10, base=100.0), fn(x, offset=14, base=100.0)
    check_close(q2 @ k2.T, q @ k.T, name="the scores q k^T after moving both by 7 positions",
                atol=1e-4)  # fmt: skip
    passed("apply_rotary matches the reference; its scores depend on offsets only")


# --------------------------------------------------------------------------------------------
# 6. T5 relative bias
# --------------------------------------------------------------------------------------------


def check_t5_relative_bias(module_cls: type[nn.Module]) -> None:
    """``T5RelativeBias(num_heads=H, num_buckets=..., max_distance=..., bidirectional=...)
    (scores, offset=...)`` = scores + the bucketed bias (H, T_q, T_k)."""
    for case in _recorded()["t5"]["cases"]:
        H, nb, md, bi = (case[k] for k in ("num_heads", "num_buckets", "max_distance",
                                           "bidirectional"))  # fmt: skip
        what = (f"T5RelativeBias(num_heads={H}, num_buckets={nb}, max_distance={md}, "
                f"bidirectional={bi})")  # fmt: skip
        mine = _call(module_cls, num_heads=H, num_buckets=nb, max_distance=md,
                     bidirectional=bi, what=what)  # fmt: skip
        _load(mine, case["state"], what)
        scores, offset = case["scores"], case["offset"]
        call = f"{what}(scores of shape {tuple(scores.shape)}, offset={offset})"
        try:
            out = _tensor(_call(mine, scores, offset=offset, what=call), call)
        except CheckFailed as failure:
            if "index out of range" in str(failure):
                raise CheckFailed(
                    f"{call} looks up a bucket past the table: the far buckets are not capped. "
                    "Distances past max_distance share the last bucket of their half, "
                    "min(bucket, n - 1)"
                ) from None
            raise
        bias = case["want"] - scores  # (..., H, T_q, T_k), the same for every batch element
        if out.shape != bias.shape and out.shape == bias.shape[-3:] and close(out, bias[0, ...]):
            raise CheckFailed(f"{call} is wrong: it returns the bias alone: return scores + bias")
        check_close(out, case["want"], name=call, mistakes=case["mistakes"])
        out.sum().backward()
        check_gradients({"relative_attention_bias.weight": mine.relative_attention_bias.weight})
    passed("T5RelativeBias matches the reference")


# --------------------------------------------------------------------------------------------
# 7. Power law
# --------------------------------------------------------------------------------------------


def check_fit_power_law(fn: Callable[..., tuple[float, float]]) -> None:
    """``fit_power_law(n, y)`` -> (p, c), least squares in log-log space."""
    d = _recorded()["power_law"]
    out = _call(fn, d["n"], d["y"], what="fit_power_law(n, y)")
    if not isinstance(out, tuple | list) or len(out) != 2:
        raise CheckFailed("fit_power_law should return a pair (p, c)")
    try:
        got = torch.tensor([float(v) for v in out], dtype=d["want"].dtype)
    except (TypeError, ValueError):
        raise CheckFailed("fit_power_law should return two numbers (p, c)") from None
    check_close(got, d["want"], name="(p, c)", mistakes=d["mistakes"], atol=1e-5)
    passed("fit_power_law matches the least-squares fit")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
