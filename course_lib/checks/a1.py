"""Visible checks for assignment A1 (Luong's global attention, input feeding, coverage).

Each ``check_*`` runs the student's code on the inputs recorded in ``recorded/a1_rnn_attention.pt``
(weights included) and compares with the recorded reference answer; when they differ it names the
usual mistake whose recorded answer the student's equals (the mask applied after the softmax, the
concat score's halves swapped, the coverage of the current step counted, a decoder that attends
with its previous state or forgets to feed its attentional vector back). The reference's code is
not here, nor anywhere in ``course_lib``: the answers are data, recorded by the instructor
(``autograder/suites/a1_rnn_attention/a1_record.py``), and the hidden tests draw other inputs.
``check_sequence_loss`` compares with ``F.cross_entropy``. A failure raises
:class:`~course_lib.checks.CheckFailed`; a success prints one line.

The student's modules use the reference's parameter names: ``CoverageAttention.query_proj``
(W_s), ``key_proj`` (W_h and b), ``coverage_proj`` (w_c), ``score`` (v);
``InputFeedingDecoder.embedding/init_state/cell/attention/combine/out``; ``Seq2Seq.encoder``
(the book's ``course_lib.models.seq2seq.Encoder``) and ``decoder``.

Shape legend: B batch, T source tokens, T_out target tokens, S decoder state, C encoder state,
A attention size, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
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

PAD, BOS, EOS = 0, 1, 2


def _recorded() -> dict[str, Any]:
    return recorded("a1_rnn_attention")


_call = call_student


def _tuple(out: Any, n: int, what: str) -> tuple:
    if not isinstance(out, tuple) or len(out) != n:
        raise CheckFailed(f"{what} should return a tuple of {n}, got {type(out).__name__}")
    return out


def _load(module: nn.Module, state: dict[str, Tensor], what: str) -> None:
    try:
        module.load_state_dict(state)
    except RuntimeError as error:
        raise CheckFailed(
            f"the reference's weights do not fit your {what} (keep the given __init__): {error}"
        ) from None


def _compare(
    got: Sequence[Any],
    want: Sequence[Tensor],
    mistakes: dict[str, Sequence[Tensor]],
    names: Sequence[str],
    dims: Sequence[Sequence[str]],
    what: str,
) -> None:
    """Compare several outputs; when one differs, name the mistake that gives them all."""
    for out, ref, name, dim in zip(got, want, names, dims):
        check_shape(out, tuple(ref.shape), name=name, dims=dim)
    if all(close(out.detach(), ref, atol=1e-5) for out, ref in zip(got, want)):
        return
    for description, wrong in mistakes.items():
        if all(close(out.detach(), w, atol=1e-5) for out, w in zip(got, wrong)):
            raise CheckFailed(f"{what} is wrong: it looks like {description}")
    for out, ref, name in zip(got, want, names):
        check_close(out.detach(), ref, name=name, atol=1e-5)


# --------------------------------------------------------------------------------------------
# 1. luong_align
# --------------------------------------------------------------------------------------------


def check_luong_align(fn: Callable[..., Tensor]) -> None:
    """``luong_align(h_t, h_s, mask, method, W_a, v_a)`` -> a (B, T) for dot, general, concat."""
    d = _recorded()["luong_align"]
    for method, case in d["cases"].items():
        what = f'luong_align(h_t, h_s, mask, "{method}", ...)'
        h_t = d["h_t"].clone().requires_grad_(True)
        a = _call(fn, h_t, case["h_s"], d["mask"], method, case["W_a"], case["v_a"], what=what)
        name = f'the weights of "{method}"'
        check_shape(a, tuple(case["want"].shape), name=name, dims=("B", "T"))
        if torch.isfinite(a).all() and not close(a.detach(), case["want"]):
            for description, wrong in case["mistakes"].items():
                if close(a.detach(), wrong):
                    raise CheckFailed(f"{what} is wrong: it looks like {description}")
        check_close(a.detach(), case["want"], name=name)
        a[:3].pow(2).sum().backward()  # rows 0-2 have real positions
        check_gradients({"h_t": h_t})
    if not torch.all(a[~d["mask"]] == 0):
        raise CheckFailed("padding positions must get weight exactly 0")
    passed("luong_align is right for dot, general and concat, with padding and an empty row")


# --------------------------------------------------------------------------------------------
# 2. CoverageAttention
# --------------------------------------------------------------------------------------------


def check_coverage_attention(cls: type[nn.Module]) -> None:
    """``CoverageAttention(...)(s, h, mask, coverage)`` -> (context (B, C), a (B, T))."""
    d = _recorded()["coverage_attention"]
    mine = _call(cls, **d["sizes"], what="CoverageAttention(...)")
    _load(mine, d["state"], "CoverageAttention")
    what = "CoverageAttention.forward(s, h, mask, coverage)"
    out = _call(mine, d["s"], d["h"], d["mask"], d["coverage"], what=what)
    context, a = _tuple(out, 2, what)
    want_c, want_a = d["want"]
    if isinstance(a, Tensor) and isinstance(context, Tensor):
        if a.shape == want_c.shape and context.shape == want_a.shape:
            raise CheckFailed(f"{what} returns (a, context): the order is (context, a)")
    _compare((context, a), d["want"], d["mistakes"], ("the context", "the attention weights"),
             (("B", "C"), ("B", "T")), what)  # fmt: skip
    context.sum().backward()
    check_gradients({name: p for name, p in mine.named_parameters()})
    passed("CoverageAttention matches the reference")


# --------------------------------------------------------------------------------------------
# 3. coverage_loss
# --------------------------------------------------------------------------------------------


def check_coverage_loss(fn: Callable[..., Tensor]) -> None:
    """``coverage_loss(weights (B, T_out, T), tgt_mask (B, T_out))`` -> scalar."""
    d = _recorded()["coverage_loss"]
    weights = d["weights"].clone().requires_grad_(True)
    loss = _call(fn, weights, d["tgt_mask"], what="coverage_loss(weights, tgt_mask)")
    if not isinstance(loss, Tensor):
        raise CheckFailed(f"coverage_loss should return a tensor, got {type(loss).__name__}")
    check_close(loss.detach(), d["want"], name="the coverage loss", mistakes=d["mistakes"])
    loss.backward()
    check_gradients({"weights": weights})
    passed("coverage_loss is right")


# --------------------------------------------------------------------------------------------
# 4. InputFeedingDecoder
# --------------------------------------------------------------------------------------------


def check_decoder_step(cls: type[nn.Module]) -> None:
    """``InputFeedingDecoder(...)(y_prev, s_prev, feed_prev, h, mask)`` -> (logits, s, feed, a)."""
    d = _recorded()["decoder"]
    mine = _call(cls, **d["sizes"], what="InputFeedingDecoder(...)")
    _load(mine, d["state"], "InputFeedingDecoder")
    mine.eval()
    what = "InputFeedingDecoder.forward(y_prev, s_prev, feed_prev, h, mask)"
    out = _call(mine, d["y"], d["s_prev"], d["feed_prev"], d["h"], d["mask"], what=what)
    out = _tuple(out, 4, what)
    names = ("the logits", "the new state s", "the attentional vector feed", "the weights a")
    dims = (("B", "V"), ("B", "S"), ("B", "S"), ("B", "T"))
    _compare(out, d["want"], d["mistakes"], names, dims, what)
    out[0].sum().backward()
    check_gradients({name: p for name, p in mine.named_parameters() if name != "init_state.weight"
                     and name != "init_state.bias"})  # fmt: skip
    passed("InputFeedingDecoder matches the reference step")


# --------------------------------------------------------------------------------------------
# 5. Seq2Seq
# --------------------------------------------------------------------------------------------


def check_seq2seq(cls: type[nn.Module]) -> None:
    """``Seq2Seq(...)(src, src_lengths, tgt_in)`` -> (logits (B, T_out, V), weights)."""
    d = _recorded()["seq2seq"]
    mine = _call(cls, **d["sizes"], what="Seq2Seq(...)")
    _load(mine, d["state"], "Seq2Seq")
    mine.eval()
    what = "Seq2Seq.forward(src, src_lengths, tgt_in)"
    out = _tuple(_call(mine, d["src"], d["lengths"], d["tgt_in"], what=what), 2, what)
    _compare(out, d["want"], d["mistakes"], ("the logits", "the attention weights"),
             (("B", "T_out", "V"), ("B", "T_out", "T")), what)  # fmt: skip
    out[0].sum().backward()
    check_gradients({name: p for name, p in mine.named_parameters()
                     if not name.startswith("encoder.embedding")})  # fmt: skip
    passed("Seq2Seq matches the reference, teacher-forced with input feeding")


# --------------------------------------------------------------------------------------------
# 6. sequence_loss
# --------------------------------------------------------------------------------------------


def check_sequence_loss(fn: Callable[..., Tensor], *, seed: int = 0) -> None:
    """``sequence_loss(logits (B, T_out, V), tgt_out (B, T_out), pad_id)`` -> mean CE."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, 7, generator=g)
    tgt = torch.randint(3, 7, (3, 5), generator=g)
    tgt[1, 3:] = PAD
    tgt[2, 1:] = PAD
    loss = _call(fn, logits, tgt, PAD, what="sequence_loss(logits, tgt_out, pad_id)")
    flat = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="none").view(3, 5)
    real = tgt != PAD
    expected = flat[real].mean()
    check_close(loss, expected, name="the loss", mistakes={
        "the padding positions are counted: ignore them (ignore_index=pad_id)": flat.mean(),
        "the loss is summed, not averaged over the real tokens": flat[real].sum(),
        "the padding losses are zeroed but the mean runs over all positions: divide by the "
        "number of real tokens (ignore_index=pad_id does it)": (flat * real).mean(),
        "each sequence is averaged first, then the sequences: average over all real tokens "
        "at once": (flat * real).sum(1).div(real.sum(1)).mean(),
    })  # fmt: skip
    pad_id = 3  # another vocabulary's [PAD]
    tgt = tgt.masked_fill(~real, pad_id).masked_fill(real & (tgt == pad_id), 4)
    loss = _call(fn, logits, tgt, pad_id, what="sequence_loss(logits, tgt_out, pad_id=3)")
    flat = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="none").view(3, 5)
    check_close(loss, flat[real].mean(), name="the loss with pad_id=3", mistakes={
        "the padding id is hard-coded: ignore pad_id (ignore_index=pad_id), not 0":
            F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=0),
        "the padding positions are counted: ignore them (ignore_index=pad_id)": flat.mean(),
    })  # fmt: skip
    passed("sequence_loss is right")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
