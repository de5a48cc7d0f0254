"""Hidden tests of A3 (RMSNorm, pre-norm blocks, label smoothing, beam search), 16 points.

CANARY-HIDDEN-A3-95ae27f0: planted so the tests can assert that nothing a student receives
(release, feedback) contains this suite.

Sizes and inputs come from ``rng`` (seeded per assignment, student and test); weights are drawn
here (norm gains included, so that they matter) and loaded into the student's modules by name.
Expectations come from the answer key beside this file (``a3_key.py``), which the project's tests
check against ``torch.nn.RMSNorm``, ``F.cross_entropy(label_smoothing=...)`` and an exhaustive
search. The beam search runs on the book's model (``course_lib.models``, built in the worker),
so that it is graded on its own, whatever the student's blocks do. Its cases are drawn until no
two extensions are near a tie where the beam drops some, and each catalogued mistake changes the
result (``beam_case``), so that a mistake costs the same points under every student name. The
hypotheses are judged by their scores (teacher-forced on the reference model), so hypotheses of
equal score may come in any order, as the notebook leaves it.
"""

from __future__ import annotations

import a3_key as key
import pytest
import torch
from a3_record import CUT_MARGIN, beam_variant, cut_gap, shift_logit
from torch import nn

from course_lib.checks import CheckFailed, check_close
from course_lib.checks.a3 import compare_hypotheses, score_tolerance
from course_lib.checks.core import check_not_constant

CANARY = "CANARY-HIDDEN-A3-95ae27f0"
PAD, BOS, EOS = 0, 1, 2
RMS_NORM = ("torch.nn.RMSNorm", "torch.nn.functional.rms_norm", "torch.rms_norm",
            "aten::rms_norm*", "aten::_fused_rms_norm*")  # fmt: skip
CROSS_ENTROPY = ("torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss",
                 "torch.nn.CrossEntropyLoss", "torch.nn.NLLLoss", "aten::nll_loss*",
                 "aten::cross_entropy_loss*")  # fmt: skip
REFERENCE_DECODING = ("course_lib.models.transformer.Transformer.beam_search",
                      "course_lib.models.transformer.Transformer.greedy_decode")  # fmt: skip
BLOCKS = ("course_lib.models", "course_lib.layers", "transformer_modules")


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def perturb(module: nn.Module, rng: torch.Generator) -> nn.Module:
    """Random weights; norm gains around 1 (at exactly 1, swapped norms would hide)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            base = 1.0 if "norm" in name else 0.0
            p.copy_(base + 0.4 * torch.randn(p.shape, generator=rng))
    return module.eval()


def padding(rng: torch.Generator, B: int, S: int) -> torch.Tensor:
    """Keep-mask (B, S): random lengths, the first row complete and the second shorter."""
    lengths = torch.randint(1, S + 1, (B,), generator=rng)
    lengths[0], lengths[1] = S, draw(rng, 1, S - 1)
    return torch.arange(S)[None, :] < lengths[:, None]


def block_sizes(rng):
    H = draw(rng, 1, 3)
    return dict(d_model=H * draw(rng, 4 if H == 1 else 2, 4), num_heads=H, d_ff=draw(rng, 4, 16))


# --------------------------------------------------------------------------------------------
# RMSNorm (2)
# --------------------------------------------------------------------------------------------


def rms_norm_pair(student, rng, leading=2):
    """``leading`` dimensions before C (x (..., C)), fixed by the test, each of size 2 to 4."""
    C = draw(rng, 4, 12)
    eps = 0.1  # large enough that eps outside the square root (or no eps) is always visible
    ref = perturb(nn.ModuleDict({"norm": key.RMSNorm(C, eps=eps)}), rng)["norm"]
    mine = student.RMSNorm(C, eps=eps)
    mine.load_state_dict(ref.state_dict())
    shape = [draw(rng, 2, 4) for _ in range(leading)] + [C]
    x = torch.randn(*shape, generator=rng) * draw(rng, 1, 5) + draw(rng, -3, 3)
    return ref, mine, x


@pytest.mark.points(1, cell="check_rms_norm")
@pytest.mark.forbid(*RMS_NORM)
def test_rms_norm_values(student, rng):
    for leading in (0, 1, 3):  # x (..., C): one token, a sequence, a batch of head-like axes
        ref, mine, x = rms_norm_pair(student, rng, leading)
        with torch.no_grad():
            check_close(mine(x).double(), ref(x.double()), name=f"RMSNorm(x of shape "
                        f"{tuple(x.shape)})", atol=1e-5)  # fmt: skip


@pytest.mark.points(1, cell="check_rms_norm")
@pytest.mark.forbid(*RMS_NORM)
def test_rms_norm_gradients(student, rng):
    ref, mine, x = rms_norm_pair(student, rng)
    dy = torch.randn(x.shape, generator=rng)
    got = mine.backward(x, grad_output=dy)
    leaf = x.clone().requires_grad_(True)
    ref(leaf).backward(dy)
    check_close(got.inputs[0], leaf.grad, name="the gradient with respect to x", atol=1e-4)
    assert got.params.get("weight") is not None, "no gradient reached weight"
    check_close(got.params["weight"], ref.weight.grad, name="the gradient of weight", atol=1e-4)


# --------------------------------------------------------------------------------------------
# Encoder block (2), decoder block (3)
# --------------------------------------------------------------------------------------------


def encoder_pair(student, rng):
    sizes = block_sizes(rng)
    ref = perturb(key.PreNormEncoderBlock(**sizes), rng)
    mine = student.PreNormEncoderBlock(**sizes)
    mine.load_state_dict(ref.state_dict())
    B, S = draw(rng, 2, 4), draw(rng, 2, 7)
    x = torch.randn(B, S, sizes["d_model"], generator=rng) * 2
    return ref, mine, x


@pytest.mark.points(1, cell="check_encoder_block")
@pytest.mark.forbid(*BLOCKS)
def test_encoder_block(student, rng):
    ref, mine, x = encoder_pair(student, rng)
    keep = padding(rng, *x.shape[:2])[:, None, None, :]
    out = mine(x, keep)
    assert isinstance(out, tuple) and len(out) == 2, "PreNormEncoderBlock returns (x, weights)"
    with torch.no_grad():
        want, want_w = ref(x, keep)
    check_close(out[0], want, name="PreNormEncoderBlock(x, padding mask)", atol=1e-5)
    check_close(out[1], want_w, name="the attention-weight tensor with a padding mask", atol=1e-5)


@pytest.mark.points(1, cell="check_encoder_block")
@pytest.mark.forbid(*BLOCKS)
def test_encoder_block_gradients(student, rng):
    ref, mine, x = encoder_pair(student, rng)
    dy = torch.randn(x.shape, generator=rng)
    got = mine.backward(x, grad_output=dy)
    ref(x)[0].backward(dy)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


def decoder_pair(student, rng):
    sizes = block_sizes(rng)
    ref = perturb(key.PreNormDecoderBlock(**sizes), rng)
    mine = student.PreNormDecoderBlock(**sizes)
    mine.load_state_dict(ref.state_dict())
    B, T, S = draw(rng, 2, 4), draw(rng, 2, 6), draw(rng, 2, 7)
    y = torch.randn(B, T, sizes["d_model"], generator=rng) * 2
    memory = torch.randn(B, S, sizes["d_model"], generator=rng) * 2
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    keep = padding(rng, B, S)[:, None, None, :]
    return ref, mine, (y, memory, causal, keep)


@pytest.mark.points(1, cell="check_decoder_block")
@pytest.mark.forbid(*BLOCKS)
def test_decoder_block(student, rng):
    ref, mine, args = decoder_pair(student, rng)
    out = mine(*args)
    assert isinstance(out, tuple) and len(out) == 2, (
        "PreNormDecoderBlock returns (y, (w_self, w_cross))"
    )
    with torch.no_grad():
        want, _ = ref(*args)
    check_close(out[0], want, name="PreNormDecoderBlock(y, memory, masks)", atol=1e-5)


@pytest.mark.points(1, cell="check_decoder_block")
@pytest.mark.forbid(*BLOCKS)
def test_decoder_block_weights(student, rng):
    ref, mine, args = decoder_pair(student, rng)
    _, weights = mine(*args)
    assert isinstance(weights, tuple) and len(weights) == 2, "the weights are (w_self, w_cross)"
    with torch.no_grad():
        _, (want_self, want_cross) = ref(*args)
    check_close(weights[0], want_self, name="the self-attention weight tensor", atol=1e-5)
    check_close(weights[1], want_cross, name="the cross-attention weight tensor", atol=1e-5)


@pytest.mark.points(1, cell="check_decoder_block")
@pytest.mark.forbid(*BLOCKS)
def test_decoder_block_is_causal(student, rng):
    _, mine, (y, memory, causal, keep) = decoder_pair(student, rng)
    t = draw(rng, 1, y.shape[1] - 1)
    changed = y.clone()
    changed[:, t:] = torch.randn(changed[:, t:].shape, generator=rng) * 3
    first, _ = mine(y, memory, causal, keep)
    second, _ = mine(changed, memory, causal, keep)
    check_close(second[:, :t], first[:, :t], name=f"the output tensor before position {t} "
                "when later target positions change", atol=1e-5)  # fmt: skip
    check_not_constant(first, name="the output tensor", what="the target positions")


# --------------------------------------------------------------------------------------------
# Label-smoothed cross-entropy (3)
# --------------------------------------------------------------------------------------------


def loss_inputs(rng, *, ignore_index=PAD, flat=False):
    V = draw(rng, 4, 12)
    shape = (draw(rng, 3, 12),) if flat else (draw(rng, 2, 4), draw(rng, 3, 6))
    logits = torch.randn(*shape, V, generator=rng) * draw(rng, 1, 3)
    target = torch.randint(0, V, shape, generator=rng)
    target = target.masked_fill(target == ignore_index, (ignore_index + 1) % V)
    pad = torch.rand(shape, generator=rng) < 0.3
    pad.view(-1)[0] = False
    pad.view(-1)[-1] = True
    target = target.masked_fill(pad, ignore_index)
    smoothing = float(torch.rand((), generator=rng)) * 0.4 + 0.05
    return logits, target, smoothing


def loss_check(student, logits, target, eps, ignore, what, **kwargs):
    """The student's loss on float32 logits against the key's in float64 (within float32's
    rounding at these magnitudes)."""
    got = student.label_smoothed_cross_entropy(logits, target, *kwargs.pop("args", ()), **kwargs)
    want = key.label_smoothed_cross_entropy(logits.double(), target, eps, ignore_index=ignore)
    assert isinstance(got, torch.Tensor), f"{what}: the loss should be a tensor"
    check_close(got.double(), want, name=what, atol=1e-5, rtol=1e-5)


@pytest.mark.points(1, cell="check_label_smoothing")
@pytest.mark.forbid(*CROSS_ENTROPY)
def test_label_smoothing_values(student, rng):
    logits, target, eps = loss_inputs(rng)
    loss_check(student, logits, target, eps, PAD, f"the loss (smoothing={eps:.3f}, padding "
               "ignored)", args=(eps,), ignore_index=PAD)  # fmt: skip
    # the defaults: smoothing=0.1, ignore_index=0
    loss_check(student, logits, target, 0.1, PAD, "the loss with the default smoothing and "
               "ignore_index (0.1 and 0)")  # fmt: skip


@pytest.mark.points(1, cell="check_label_smoothing")
@pytest.mark.forbid(*CROSS_ENTROPY)
def test_label_smoothing_gradients(student, rng):
    logits, target, eps = loss_inputs(rng)
    fn = student.label_smoothed_cross_entropy
    got = fn.backward(logits, target, eps, ignore_index=PAD, grad_output=torch.tensor(1.0))
    leaf = logits.double().requires_grad_(True)
    key.label_smoothed_cross_entropy(leaf, target, eps, ignore_index=PAD).backward()
    check_close(got.inputs[0].double(), leaf.grad, name="the gradient with respect to the "
                "logits", atol=1e-6, rtol=1e-5)  # fmt: skip


@pytest.mark.points(1, cell="check_label_smoothing")
@pytest.mark.forbid(*CROSS_ENTROPY)
def test_label_smoothing_other_shapes_and_ignore_index(student, rng):
    # F.cross_entropy's default ignore_index, -100, which is no token id, under every name
    logits, target, eps = loss_inputs(rng, ignore_index=-100, flat=True)
    loss_check(student, logits, target, eps, -100, "the loss of (N, V) logits with "
               "ignore_index=-100", args=(eps,), ignore_index=-100)  # fmt: skip
    # and an ignore_index that is a token id other than 0, on (B, T, V) float32 logits
    ignore = draw(rng, 1, 3)
    logits, target, eps = loss_inputs(rng, ignore_index=ignore)
    got = student.label_smoothed_cross_entropy(logits, target, eps, ignore_index=ignore)
    want = key.label_smoothed_cross_entropy(logits.double(), target, eps, ignore_index=ignore)
    check_close(got.double(), want, name=f"the loss of (B, T, V) float32 logits with "
                f"ignore_index={ignore}", atol=1e-5, rtol=1e-5)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Beam search (6)
# --------------------------------------------------------------------------------------------


def beam_draw(rng, *, V=None, eos_shift=None):
    """A drawn model (float64, eval) with its overrides, and sources with padding."""
    from course_lib.models import create

    V = V or draw(rng, 6, 8)
    overrides = dict(src_vocab_size=draw(rng, 6, 10), tgt_vocab_size=V, d_model=8, num_heads=2,
                     num_encoder_layers=1, num_decoder_layers=draw(rng, 1, 2), d_ff=12,
                     share_embeddings=False, tie_embeddings=False, fused_attn=False)  # fmt: skip
    model = create("transformer-tiny", **overrides)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.2 * torch.randn(p.shape, generator=rng))  # peaked: the search matters
            if "norm" in name and name.endswith("weight"):
                p.abs_().add_(0.5)  # no gain near zero (shift_logit divides by it)
    shift_logit(model, PAD, -1e4)  # [PAD] only after a hypothesis ends
    shift = (
        float(torch.empty(()).uniform_(-1.0, 2.5, generator=rng))
        if eos_shift is None
        else eos_shift
    )
    shift_logit(model, EOS, shift)
    B, S = draw(rng, 2, 4), draw(rng, 3, 6)
    src = torch.randint(3, overrides["src_vocab_size"], (B, S), generator=rng)
    src = src.masked_fill(~padding(rng, B, S), PAD)
    return model.double().eval(), src, overrides


def beam_copy(student, ref, overrides):
    """The same model built in the worker, from the preset's factory."""
    # the preset's factory, looked up in the worker (whose sandbox lists no package folders)
    factory = student.build("course_lib.models.transformer.PRESETS.get", "transformer-tiny")
    mine = factory(**overrides)
    mine.load_state_dict(ref.state_dict())
    mine.double()
    mine.eval()
    return mine


# the catalogue's beam mistakes (a3_record.BEAM_MISTAKES, mutants.yml): a drawn case must tell
# each one from the key, or a student with the mistake would lose points under some names only.
# Without [EOS] nothing finishes; with one beam, a finished hypothesis kept live, K rows
# starting live and the memory's order change nothing.
BEAM_MISTAKES = ("no_sum", "logits", "first", "eos_live", "eos_score", "no_final", "all_live",
                 "unsorted", "tiled")  # fmt: skip
WITHOUT_EOS = tuple(m for m in BEAM_MISTAKES if m not in ("eos_live", "eos_score"))
ONE_BEAM = tuple(m for m in BEAM_MISTAKES if m not in ("eos_live", "all_live", "tiled"))
TRIES, FALLBACK_SEED = 40, 29


def tells_apart(ref, src, K, max_new, mistakes, *, scores):
    """Whether every mistake's search fails ``same_hypotheses`` (or, with ``scores``, gives
    other scores)."""
    _, want_scores = key.beam_search(ref, src, beam_size=K, max_new_tokens=max_new)
    for mistake in mistakes:
        try:
            wrong, wrong_scores = beam_variant(ref, src, K, max_new, mistake)
        except (RuntimeError, ValueError):
            continue  # the mistake fails on this case, loudly
        try:
            same_hypotheses(ref, src, wrong, want_scores, max_new, "")
        except AssertionError:
            continue
        if not scores or torch.allclose(wrong_scores, want_scores, rtol=1e-3, atol=1e-2):
            return False
    return True


def beam_case(student, rng, sizes, mistakes, *, scores=False, eos_shift=None):
    """(ref, mine, src, K, max_new): drawn until no two extensions are near a tie where the
    beam drops some (``cut_gap``: every correct search keeps the same hypotheses) and the case
    tells every catalogued mistake from the key (``sizes(rng) -> (V, K, max_new)``); after
    ``TRIES`` draws, from a fixed generator's."""
    fallback = torch.Generator().manual_seed(FALLBACK_SEED)
    for attempt in range(2 * TRIES):
        gen = rng if attempt < TRIES else fallback
        V, K, max_new = sizes(gen)
        ref, src, overrides = beam_draw(gen, V=V, eos_shift=eos_shift)
        if cut_gap(ref, src, K, max_new) > CUT_MARGIN and tells_apart(
            ref, src, K, max_new, mistakes, scores=scores
        ):
            break
    else:
        raise AssertionError("no beam case without near ties (the suite's draws are broken)")
    return ref, beam_copy(student, ref, overrides), src, K, max_new


def run_beam(student, mine, src, K, max_new):
    out = student.beam_search(mine, src, beam_size=K, max_new_tokens=max_new)
    assert isinstance(out, tuple) and len(out) == 2, "beam_search returns (tokens, scores)"
    return out


def same_hypotheses(ref, src, tokens, want_scores, max_new, what):
    """The K best hypotheses of every sentence, best first: each scored by teacher forcing on
    the reference model, the k-th must score the key's k-th (within the tolerance of its
    magnitude). The notebook leaves the order of equal scores open, and which of two hypotheses
    tied at the K-th place is kept: any is accepted."""
    try:
        compare_hypotheses(ref, src, tokens, want_scores, max_new_tokens=max_new, what=what)
    except CheckFailed as failure:
        raise AssertionError(str(failure)) from None


def same_scores(scores, want, what):
    assert isinstance(scores, torch.Tensor) and scores.shape == want.shape, (
        f"{what}: the scores should be a tensor (B, K) = {tuple(want.shape)}"
    )
    bad = (scores.double() - want).abs() > score_tolerance(want)
    assert not bad.any(), (
        f"{what}: the scores (summed log-probabilities, [EOS] included) differ from the "
        f"reference's:\n{scores.tolist()}\nexpected\n{want.tolist()}"
    )


@pytest.mark.points(2, cell="check_beam_search")
@pytest.mark.forbid(*REFERENCE_DECODING)
def test_beam_search_hypotheses(student, rng):
    sizes = lambda gen: (None, draw(gen, 2, 4), draw(gen, 3, 5))  # noqa: E731
    ref, mine, src, K, max_new = beam_case(student, rng, sizes, BEAM_MISTAKES)
    _, want = key.beam_search(ref, src, beam_size=K, max_new_tokens=max_new)
    tokens, _ = run_beam(student, mine, src, K, max_new)
    same_hypotheses(ref, src, tokens, want, max_new, f"beam_size={K}, max_new_tokens={max_new}")


@pytest.mark.points(1, cell="check_beam_search")
@pytest.mark.forbid(*REFERENCE_DECODING)
def test_beam_search_scores(student, rng):
    sizes = lambda gen: (None, draw(gen, 2, 4), draw(gen, 3, 5))  # noqa: E731
    ref, mine, src, K, max_new = beam_case(student, rng, sizes, BEAM_MISTAKES, scores=True)
    _, want = key.beam_search(ref, src, beam_size=K, max_new_tokens=max_new)
    tokens, scores = run_beam(student, mine, src, K, max_new)
    what = f"beam_size={K}, max_new_tokens={max_new}"
    same_hypotheses(ref, src, tokens, want, max_new, what)
    same_scores(scores, want, what)


@pytest.mark.points(1, cell="check_beam_search")
@pytest.mark.forbid(*REFERENCE_DECODING)
def test_beam_search_as_wide_as_every_prefix(student, rng):
    def sizes(gen):
        V = draw(gen, 4, 6)
        max_new = 4 if V == 4 else 3
        # every prefix of max_new - 1 words (tokens other than [EOS] and [PAD]) fits into the
        # beam: exhaustive (tests/course/test_a3_key.py), and no hypothesis holding [PAD] (whose
        # scores, near -1e4 apiece, tie in float64) is among the K best
        return V, (V - 2) ** (max_new - 1), max_new

    ref, mine, src, K, max_new = beam_case(student, rng, sizes, BEAM_MISTAKES)
    _, want = key.beam_search(ref, src, beam_size=K, max_new_tokens=max_new)
    tokens, _ = run_beam(student, mine, src, K, max_new)
    same_hypotheses(ref, src, tokens, want, max_new,
                    f"an exhaustive search (beam_size={K}, max_new_tokens={max_new})")  # fmt: skip


@pytest.mark.points(1, cell="check_beam_search")
@pytest.mark.forbid(*REFERENCE_DECODING)
def test_beam_search_without_eos(student, rng):
    sizes = lambda gen: (None, draw(gen, 2, 3), draw(gen, 2, 4))  # noqa: E731
    ref, mine, src, K, max_new = beam_case(student, rng, sizes, WITHOUT_EOS, eos_shift=-1e4)
    _, want = key.beam_search(ref, src, beam_size=K, max_new_tokens=max_new)
    tokens, _ = run_beam(student, mine, src, K, max_new)
    same_hypotheses(ref, src, tokens, want, max_new,
                    f"hypotheses that never emit [EOS] (max_new_tokens={max_new})")  # fmt: skip


@pytest.mark.points(1, cell="check_beam_search")
@pytest.mark.forbid(*REFERENCE_DECODING)
def test_beam_search_one_beam(student, rng):
    sizes = lambda gen: (None, 1, draw(gen, 3, 6))  # noqa: E731
    ref, mine, src, _, max_new = beam_case(student, rng, sizes, ONE_BEAM, scores=True)
    _, want = key.beam_search(ref, src, beam_size=1, max_new_tokens=max_new)
    tokens, scores = run_beam(student, mine, src, 1, max_new)
    what = f"beam_size=1, max_new_tokens={max_new}"
    same_hypotheses(ref, src, tokens, want, max_new, what)
    same_scores(scores, want, what)
