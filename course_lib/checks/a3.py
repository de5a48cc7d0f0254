"""Visible checks for assignment A3 (RMSNorm, pre-norm blocks, label smoothing, beam search).

Each ``check_*`` runs the student's code on the inputs recorded in
``recorded/a3_transformer.pt`` (weights included) and compares with the recorded reference
answer; when they differ it names the usual mistake whose recorded answer the student's equals
(the mean subtracted in RMSNorm, a post-norm block, a memory that is normalised too, padding
counted in the loss, scores that are not accumulated in the beam). The reference's code is not
here, nor anywhere in ``course_lib``: the answers are data, recorded by the instructor
(``autograder/suites/a3_transformer/a3_record.py``), and the hidden tests draw other inputs. A
failure raises :class:`~course_lib.checks.CheckFailed`; a success prints one line.

The student's modules use the reference's parameter names: ``RMSNorm.weight``;
``PreNormEncoderBlock.norm1/self_attn/norm2/ff``; ``PreNormDecoderBlock.norm1/self_attn/norm2/
cross_attn/norm3/ff``.

Shape legend: B batch, S source tokens, T target tokens, C channels (d_model), H heads,
V vocabulary, K beams.
"""

from __future__ import annotations

from collections.abc import Callable
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
    return recorded("a3_transformer")


_call = call_student


def _pair(out: Any, what: str) -> tuple:
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailed(f"{what} should return a tuple of 2, got {type(out).__name__}")
    return out


def _load(module: nn.Module, state: dict[str, Tensor], what: str) -> None:
    try:
        module.load_state_dict(state)
    except RuntimeError as error:
        raise CheckFailed(
            f"the reference's weights do not fit your {what} (keep the given __init__): {error}"
        ) from None


def _diagnose(actual: Tensor, want: Tensor, mistakes: dict[str, Tensor], name: str) -> None:
    """Name the usual mistake whose recorded answer ``actual`` equals (values only)."""
    if actual.shape == want.shape and not close(actual, want):
        for description, wrong in mistakes.items():
            if close(actual, wrong):
                raise CheckFailed(f"{name} is wrong: it looks like {description}")


# --------------------------------------------------------------------------------------------
# RMSNorm
# --------------------------------------------------------------------------------------------


def check_rms_norm(norm_cls: type[nn.Module]) -> None:
    """``RMSNorm(dim, eps=...)(x (..., C))`` equals ``nn.RMSNorm(dim, eps=...)``."""
    d = _recorded()["rms_norm"]
    mine = _call(norm_cls, d["dim"], eps=d["eps"], what=f"RMSNorm({d['dim']}, eps={d['eps']})")
    _load(mine, d["state"], "RMSNorm")
    y = _call(mine, d["x"], what="RMSNorm.forward(x)")
    check_close(y, d["want"], name="RMSNorm(x)", mistakes=d["mistakes"], atol=1e-5)
    y.sum().backward()
    check_gradients({"weight": mine.weight})
    passed("RMSNorm equals nn.RMSNorm")


# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------


def check_encoder_block(block_cls: type[nn.Module]) -> None:
    """``PreNormEncoderBlock(d_model, num_heads, d_ff)(x, mask)`` -> (x, weights), pre-norm."""
    d = _recorded()["encoder_block"]
    mine = _call(block_cls, **d["sizes"], what="PreNormEncoderBlock(...)")
    _load(mine, d["state"], "PreNormEncoderBlock")
    mine.eval()
    with torch.no_grad():
        out = _call(mine, d["x"], d["keep"], what="PreNormEncoderBlock.forward(x, mask)")
        y, w = _pair(out, "PreNormEncoderBlock.forward")
    check_shape(y, tuple(d["want"].shape), name="PreNormEncoderBlock(x)", dims=("B", "S", "C"))
    _diagnose(y, d["want"], d["mistakes"], "PreNormEncoderBlock(x)")
    check_shape(w, tuple(d["want_weights"].shape), name="the attention-weight tensor",
                dims=("B", "H", "S", "S"))  # fmt: skip
    check_close(w, d["want_weights"], name="the attention-weight tensor",
                mistakes=d["weight_mistakes"])  # fmt: skip
    check_close(y, d["want"], name="PreNormEncoderBlock(x)")
    passed("PreNormEncoderBlock matches the reference pre-norm block")


def check_decoder_block(block_cls: type[nn.Module]) -> None:
    """``PreNormDecoderBlock(...)(y, memory, self_mask, memory_mask)`` -> (y, (self w, cross w))."""
    d = _recorded()["decoder_block"]
    mine = _call(block_cls, **d["sizes"], what="PreNormDecoderBlock(...)")
    _load(mine, d["state"], "PreNormDecoderBlock")
    mine.eval()
    y, memory, causal, keep = d["y"], d["memory"], d["causal"], d["keep"]
    with torch.no_grad():
        out = _call(mine, y, memory, causal, keep, what="PreNormDecoderBlock.forward(...)")
        out, weights = _pair(out, "PreNormDecoderBlock.forward")
        w_self, w_cross = _pair(weights, "the weights of PreNormDecoderBlock.forward")
    name = "PreNormDecoderBlock(y, memory)"
    check_shape(out, tuple(d["want"].shape), name=name, dims=("B", "T", "C"))
    _diagnose(out, d["want"], d["mistakes"], name)
    check_shape(w_cross, tuple(d["want_cross"].shape), name="the cross-attention weight tensor",
                dims=("B", "H", "T", "S"))  # fmt: skip
    check_close(w_cross, d["want_cross"], name="the cross-attention weight tensor",
                mistakes=d["weight_mistakes"]["cross"])  # fmt: skip
    check_close(w_self, d["want_self"], name="the (causal) self-attention weight tensor",
                mistakes=d["weight_mistakes"]["self"])  # fmt: skip
    check_close(out, d["want"], name=name)
    with torch.no_grad():
        changed = y.clone()
        changed[:, 2:] += 1.0
        later, _ = _call(mine, changed, memory, causal, keep, what="PreNormDecoderBlock.forward")
    if not close(later[:, :2], out[:, :2]):
        raise CheckFailed(
            "changing target positions 2 and 3 changed the outputs at positions 0 and 1: "
            "the decoder sees the future (pass self_mask to the self-attention)"
        )
    passed("PreNormDecoderBlock matches the reference and never looks ahead")


# --------------------------------------------------------------------------------------------
# Label-smoothed cross-entropy
# --------------------------------------------------------------------------------------------


def check_label_smoothing(fn: Callable[..., Tensor]) -> None:
    """``label_smoothed_cross_entropy(logits, target, smoothing, ignore_index)`` equals
    ``F.cross_entropy(..., label_smoothing=smoothing, ignore_index=ignore_index)``."""
    d = _recorded()["label_smoothing"]
    logits = d["logits"].clone().requires_grad_(True)
    what = f"label_smoothed_cross_entropy(logits, target, {d['smoothing']}, ignore_index=0)"
    loss = _call(fn, logits, d["target"], d["smoothing"], ignore_index=d["ignore_index"],
                 what=what)  # fmt: skip
    if not isinstance(loss, Tensor):
        raise CheckFailed(f"{what} should return a tensor, got {type(loss).__name__}")
    check_close(loss, d["want"], name="the loss", mistakes=d["mistakes"], atol=1e-5)
    loss.backward()
    check_gradients({"logits": logits})
    passed("label_smoothed_cross_entropy equals F.cross_entropy with label_smoothing")


# --------------------------------------------------------------------------------------------
# Beam search
# --------------------------------------------------------------------------------------------


def _beam_model(d: dict, case: dict) -> nn.Module:
    """The book's Transformer (``course_lib.models``) with the recorded weights, in float64."""
    from course_lib.models import create

    model = create("transformer-tiny", **d["model"]).double().eval()
    model.load_state_dict(case["state"])
    return model


def check_beam_search(fn: Callable[..., tuple[Tensor, Tensor]]) -> None:
    """``beam_search(model, src, beam_size=K, max_new_tokens=n)`` -> (tokens (B, K, T), scores
    (B, K)) equals the reference's, on hypotheses that end at different steps, on a beam as wide
    as every prefix, and on hypotheses that never emit [EOS]."""
    d = _recorded()["beam_search"]
    runs = []
    for case in d["cases"]:
        model = _beam_model(d, case)
        K, n = case["beam_size"], case["max_new_tokens"]
        call = f"beam_search(model, src, beam_size={K}, max_new_tokens={n})"
        out = _call(fn, model, case["src"], beam_size=K, max_new_tokens=n, what=call)
        tokens, scores = _pair(out, call)
        if not isinstance(tokens, Tensor):
            raise CheckFailed(f"{call} should return tensors, got {type(tokens).__name__}")
        runs.append((case, tokens.long(), scores))

    def same(a: Tensor, b: Tensor) -> bool:
        return a.shape == b.shape and torch.equal(a, b)

    def looks_like(tokens: Tensor, scores: Any, wrong: dict[str, Tensor]) -> bool:
        """The same hypotheses as a mistake's, and its scores when they are comparable."""
        if not same(tokens, wrong["tokens"]):
            return False
        comparable = isinstance(scores, Tensor) and scores.shape == wrong["scores"].shape
        return not comparable or close(scores.double(), wrong["scores"], atol=1e-6)

    def explains(description: str) -> bool:
        """The mistake gives the student's answer on every case (where it is not recorded for a
        case, it gives the right answer there)."""
        for case, tokens, scores in runs:
            wrong = case["mistakes"].get(description)
            right = {"tokens": case["tokens"], "scores": case["scores"]}
            if not looks_like(tokens, scores, wrong or right):
                return False
        return True

    for case, tokens, scores in runs:
        want, what = case["tokens"], case["what"]
        if same(tokens, want):
            check_close(scores, case["scores"].to(scores.dtype) if isinstance(scores, Tensor)
                        else case["scores"], name=f"the scores for {what}", atol=1e-6)  # fmt: skip
            continue
        matching = [m for m, wrong in case["mistakes"].items() if same(tokens, wrong["tokens"])]
        for description in sorted(matching, key=lambda m: not explains(m)):
            raise CheckFailed(f"beam_search on {what}: {description}")
        check_shape(tokens, tuple(want.shape), name=f"the token tensor for {what}",
                    dims=("B", "K", "T"))  # fmt: skip
        raise CheckFailed(
            f"beam_search on {what}: the hypotheses differ from the reference's:\n"
            f"{tokens.tolist()}\n"
            f"expected\n{want.tolist()}\n(score the log-softmax of the LAST position; [EOS] "
            "ends a hypothesis; the K best of all K x V extensions stay live; best first)"
        )
    passed("beam_search matches the reference")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
