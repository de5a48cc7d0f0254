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
    y = _call(mine, d["x"], what="RMSNorm.forward(x)",
              hint="The root mean square is one number per token: keep the last axis "
              "(mean(dim=-1, keepdim=True)) so that x / rms broadcasts")  # fmt: skip
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
    what = f"label_smoothed_cross_entropy(logits, target, {d['smoothing']}, ignore_index=-100)"
    loss = _call(fn, d["logits"], d["target_100"], d["smoothing"], ignore_index=-100, what=what,
                 hint="A target equal to ignore_index (here -100, F.cross_entropy's default) "
                 "is no token id: replace it by a valid id (e.g. 0) before gather or one_hot, "
                 "then leave those positions out of the mean")  # fmt: skip
    check_close(loss, d["want_100"], name="the loss with ignore_index=-100", atol=1e-5)
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


SCORE_RTOL = 1e-5  # scores within 1e-5 * (1 + |score|) tie: float32 arithmetic stays inside


def score_tolerance(scores: Tensor) -> Tensor:
    """How far a summed log-probability may be from the float64 truth at its magnitude."""
    return SCORE_RTOL * (1.0 + scores.abs())


def _hypotheses(
    tokens: Tensor, max_new_tokens: int, *, pad_id: int, eos_id: int
) -> list[list[list[int]]] | str:
    """Per sentence, the K hypotheses of ``tokens`` (B, K, T) as token lists (through [EOS], or
    max_new_tokens tokens without it), or what is wrong with their layout."""
    T = tokens.shape[-1]
    found: list[list[list[int]]] = []
    for b, rows in enumerate(tokens.tolist()):
        found.append([])
        for k, row in enumerate(rows):
            end = row.index(eos_id) + 1 if eos_id in row else max_new_tokens
            ids, rest = row[:end], row[end:]
            if len(ids) < end:
                return (
                    f"hypothesis {k} of sentence {b} has no [EOS] and only {T} tokens: a "
                    f"hypothesis without [EOS] has max_new_tokens = {max_new_tokens} tokens"
                )
            if len(ids) > max_new_tokens:
                return (f"hypothesis {k} of sentence {b} is longer than max_new_tokens = "
                        f"{max_new_tokens}: {ids}")  # fmt: skip
            if any(t != pad_id for t in rest):
                return (f"hypothesis {k} of sentence {b} has tokens other than pad_id after it "
                        f"ended: {row} (pad_id after [EOS])")  # fmt: skip
            found[b].append(ids)
    longest = max((len(ids) for rows in found for ids in rows), default=0)
    if T != longest:
        return (
            f"the token tensor has T = {T}, the longest hypothesis returned has {longest} "
            "tokens (T is the longest hypothesis returned, pad_id after shorter ones)"
        )
    return found


@torch.no_grad()
def hypothesis_scores(
    model: nn.Module, src: Tensor, found: list[list[list[int]]], *, pad_id: int = 0,
    bos_id: int = 1,
) -> Tensor:  # fmt: skip
    """The summed log-probability (float64) of every hypothesis, teacher-forced: (B, K)."""
    B, K = len(found), len(found[0])
    T = max(len(ids) for rows in found for ids in rows)
    seq = torch.full((B * K, T + 1), pad_id, dtype=torch.long)
    seq[:, 0] = bos_id
    length = torch.zeros(B * K, dtype=torch.long)
    for i, ids in enumerate(ids for rows in found for ids in rows):
        seq[i, 1 : len(ids) + 1] = torch.tensor(ids, dtype=torch.long)
        length[i] = len(ids)
    src_mask = src != pad_id
    memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)
    logits = model.decode(seq[:, :-1], memory, src_mask.repeat_interleave(K, dim=0))
    log_p = logits.double().log_softmax(dim=-1).gather(-1, seq[:, 1:, None])[..., 0]
    counted = torch.arange(T)[None, :] < length[:, None]  # (B*K, T)
    return (log_p * counted).sum(dim=-1).view(B, K)


def compare_hypotheses(
    model: nn.Module,
    src: Tensor,
    tokens: Any,
    want_scores: Tensor,
    *,
    max_new_tokens: int,
    what: str,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
) -> Tensor:
    """Whether ``tokens`` (B, K, T) are K best hypotheses per sentence, best first, as the
    reference's scores ``want_scores`` (B, K) say: each hypothesis is scored by teacher forcing
    and the k-th must score the reference's k-th (within ``score_tolerance``), so hypotheses of
    (nearly) equal score may come in any order, and either of two tied at the K-th place may be
    kept. Raises CheckFailed with what differs; returns the hypotheses' scores."""
    B, K = want_scores.shape
    if not isinstance(tokens, Tensor) or tokens.dim() != 3 or tuple(tokens.shape[:2]) != (B, K):
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise CheckFailed(f"{what}: the tokens should be a tensor (B, K, T) = ({B}, {K}, T), "
                          f"got {shape}")  # fmt: skip
    V = getattr(getattr(model, "config", None), "tgt_vocab_size", None)
    if tokens.numel() and (tokens.min() < 0 or (V is not None and tokens.max() >= V)):
        raise CheckFailed(f"{what}: token ids outside the vocabulary [0, {V}): {tokens.tolist()}")
    found = _hypotheses(tokens.long(), max_new_tokens, pad_id=pad_id, eos_id=eos_id)
    if isinstance(found, str):
        raise CheckFailed(f"{what}: {found}")
    for b, rows in enumerate(found):
        if len({tuple(ids) for ids in rows}) < len(rows):
            raise CheckFailed(f"{what}: sentence {b} has the same hypothesis twice: {rows}")
    got = hypothesis_scores(model, src, found, pad_id=pad_id, bos_id=bos_id)
    want = want_scores.double()
    bad = ((got - want).abs() > score_tolerance(want)).nonzero().tolist()
    if bad:
        b, k = bad[0]
        listing = "\n".join(f"  {s:.6f} {ids}" for s, ids in zip(got[b].tolist(), found[b]))
        raise CheckFailed(
            f"{what}: the hypotheses differ from the reference's: sentence {b}'s hypothesis {k} "
            f"scores {got[b, k].item():.6f} (its summed log-probability), the reference's "
            f"{k}-th best {want[b, k].item():.6f}. Yours, with their scores:\n{listing}\n"
            f"the reference's scores: {[round(s, 6) for s in want[b].tolist()]}"
        )
    return got


def check_beam_search(fn: Callable[..., tuple[Tensor, Tensor]]) -> None:
    """``beam_search(model, src, beam_size=K, max_new_tokens=n)`` -> (tokens (B, K, T), scores
    (B, K)) finds the reference's K best hypotheses, on hypotheses that end at different steps,
    on a beam as wide as every prefix, and on hypotheses that never emit [EOS]. Hypotheses of
    equal score may come in either order."""
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
        runs.append((model, case, tokens.long(), scores))

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
        for _, case, tokens, scores in runs:
            wrong = case["mistakes"].get(description)
            right = {"tokens": case["tokens"], "scores": case["scores"]}
            if not looks_like(tokens, scores, wrong or right):
                return False
        return True

    def name_the_mistake(case: dict, tokens: Tensor, scores: Any, *, by_scores: bool) -> None:
        matching = [m for m, wrong in case["mistakes"].items()
                    if (looks_like if by_scores else lambda t, _, w: same(t, w["tokens"]))(
                        tokens, scores, wrong)]  # fmt: skip
        for description in sorted(matching, key=lambda m: not explains(m)):
            raise CheckFailed(f"beam_search on {case['what']}: {description}")

    for model, case, tokens, scores in runs:
        what = case["what"]
        try:
            true_scores = compare_hypotheses(model, case["src"], tokens, case["scores"],
                                             max_new_tokens=case["max_new_tokens"],
                                             what=f"beam_search on {what}")  # fmt: skip
        except CheckFailed as failure:
            name_the_mistake(case, tokens, scores, by_scores=False)
            raise CheckFailed(
                f"{failure}\n(score the log-softmax of the LAST position; [EOS] ends a "
                "hypothesis; the K best of all K x V extensions stay live; best first)"
            ) from None
        check_shape(scores, tuple(case["scores"].shape), name=f"the scores for {what}",
                    dims=("B", "K"))  # fmt: skip
        if ((scores.double() - true_scores).abs() > score_tolerance(true_scores)).any():
            name_the_mistake(case, tokens, scores, by_scores=True)
            raise CheckFailed(
                f"beam_search on {what}: the scores are not the hypotheses' summed "
                f"log-probabilities (each token's log-softmax, [EOS] included):\n"
                f"{scores.tolist()}\nexpected\n{true_scores.tolist()}"
            )
    passed("beam_search finds the reference's K best hypotheses")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
