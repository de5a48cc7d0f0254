"""Hidden tests of A1 (Luong's global attention, coverage, input feeding), 22 points.

CANARY-HIDDEN-A1-7d3b2e91: planted so the tests can assert that nothing a student receives
(release, feedback) contains this suite.

Sizes and inputs come from ``rng`` (seeded per assignment, student and test); weights are drawn
here and loaded into the student's modules by name. Expectations come from the answer key beside
this file (``a1_key.py``), which the project's tests check against loops over time and batch,
``torch.nn.GRUCell`` run by hand and ``F.cross_entropy``. The encoder is the book's
(``course_lib.models.seq2seq.Encoder``), given to the student.
"""

from __future__ import annotations

import a1_key as key
import pytest
import torch
from torch import nn

from course_lib.checks import check_close
from course_lib.checks.core import check_not_constant

CANARY = "CANARY-HIDDEN-A1-7d3b2e91"
PAD, BOS, EOS = 0, 1, 2


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def perturb(module: nn.Module, rng: torch.Generator, scale: float = 0.7) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=rng))
    return module.eval()


def random_mask(rng: torch.Generator, B: int, T: int) -> torch.Tensor:
    """Keep-mask (B, T), B >= 2, T >= 2: random lengths in [1, T], the first row complete and the
    second shorter (so that padding always matters)."""
    lengths = torch.randint(1, T + 1, (B,), generator=rng)
    lengths[0], lengths[1] = T, draw(rng, 1, T - 1)
    return torch.arange(T)[None, :] < lengths[:, None]


# --------------------------------------------------------------------------------------------
# 1. luong_align (4)
# --------------------------------------------------------------------------------------------


def align_inputs(rng, method):
    B, T, S = draw(rng, 2, 5), draw(rng, 2, 8), draw(rng, 2, 7)
    C = S if method == "dot" else draw(rng, 2, 8)
    A = draw(rng, 2, 6)
    mask = random_mask(rng, B, T)
    h_t = torch.randn(B, S, generator=rng)
    h_s = torch.randn(B, T, C, generator=rng)
    W_a = {"dot": None, "general": torch.randn(S, C, generator=rng) * 0.6,
           "concat": torch.randn(A, S + C, generator=rng) * 0.6}[method]  # fmt: skip
    v_a = torch.randn(A, generator=rng) if method == "concat" else None
    return h_t, h_s, mask, method, W_a, v_a


def check_align(student, rng, method):
    args = align_inputs(rng, method)
    got = student.luong_align(*args)
    check_close(got, key.luong_align(*args), name=f'the weights of the "{method}" score')


@pytest.mark.points(1, cell="check_luong_align")
def test_luong_align_dot(student, rng):
    check_align(student, rng, "dot")


@pytest.mark.points(1, cell="check_luong_align")
def test_luong_align_general(student, rng):
    check_align(student, rng, "general")
    # "general" is the default method
    h_t, h_s, mask, _, W_a, _ = align_inputs(rng, "general")
    check_close(student.luong_align(h_t, h_s, mask, W_a=W_a),
                key.luong_align(h_t, h_s, mask, "general", W_a),
                name="the weights of luong_align(h_t, h_s, mask, W_a=W_a) (the default method, "
                '"general")')  # fmt: skip


@pytest.mark.points(1, cell="check_luong_align")
def test_luong_align_concat(student, rng):
    check_align(student, rng, "concat")


@pytest.mark.points(1, cell="check_luong_align")
def test_luong_align_padding_empty_rows_and_gradients(student, rng):
    for method in ("dot", "general", "concat"):
        h_t, h_s, mask, _, W_a, v_a = align_inputs(rng, method)
        mask[draw(rng, 1, mask.shape[0] - 1)] = False  # a row without any real position
        check_close(student.luong_align(h_t, h_s, mask, method, W_a, v_a),
                    key.luong_align(h_t, h_s, mask, method, W_a, v_a),
                    name=f'the "{method}" weights with a row without real positions')  # fmt: skip
        # large scores: a magic -1e9 or a mask applied after the softmax shows
        a = student.luong_align(h_t, h_s * 50, mask, method, W_a, v_a)
        assert torch.isfinite(a).all(), f'"{method}": a row without real positions gives NaN/inf'
        assert torch.all(a[~mask] == 0), f'"{method}": padding positions must get weight exactly 0'
        check_close(a.sum(-1), mask.any(-1).to(a.dtype),
                    name=f'the sums of the "{method}" weights with large scores')  # fmt: skip
    args = align_inputs(rng, "concat")
    dy = torch.randn(args[2].shape, generator=rng)
    got = student.luong_align.backward(*args, grad_output=dy)
    leaves = [x.clone().requires_grad_(True) if isinstance(x, torch.Tensor) and
              x.is_floating_point() else x for x in args]  # fmt: skip
    key.luong_align(*leaves).backward(dy)
    for i, name in ((0, "h_t"), (1, "h_s"), (4, "W_a"), (5, "v_a")):
        assert got.inputs[i] is not None, f"no gradient reached {name}"
        check_close(got.inputs[i], leaves[i].grad, name=f"the gradient with respect to {name}",
                    atol=1e-4)  # fmt: skip


# --------------------------------------------------------------------------------------------
# 2. CoverageAttention (3)
# --------------------------------------------------------------------------------------------


def coverage_pair(student, rng):
    sizes = dict(query_dim=draw(rng, 2, 7), key_dim=draw(rng, 2, 8), attention_dim=draw(rng, 2, 7))
    ref = perturb(key.CoverageAttention(**sizes), rng)
    with torch.no_grad():
        ref.coverage_proj.weight.mul_(3.0)  # coverage that matters
    mine = student.CoverageAttention(**sizes)
    mine.load_state_dict(ref.state_dict())
    B, T = draw(rng, 2, 5), draw(rng, 2, 8)
    T += T == sizes["key_dim"]  # T != C: the context and the weights cannot be confused
    mask = random_mask(rng, B, T)
    s = torch.randn(B, sizes["query_dim"], generator=rng)
    h = torch.randn(B, T, sizes["key_dim"], generator=rng)
    coverage = torch.rand(B, T, generator=rng) * draw(rng, 1, 3)
    return ref, mine, (s, h, mask, coverage)


@pytest.mark.points(1, cell="check_coverage_attention")
def test_coverage_attention_values(student, rng):
    ref, mine, args = coverage_pair(student, rng)
    out = mine(*args)
    assert isinstance(out, tuple) and len(out) == 2, "forward should return (context, weights)"
    with torch.no_grad():
        context, a = ref(*args)
    check_close(out[1], a, name="the attention weights")
    check_close(out[0], context, name="the context")


@pytest.mark.points(1, cell="check_coverage_attention")
def test_coverage_attention_uses_coverage_and_ignores_padding(student, rng):
    ref, mine, (s, h, mask, coverage) = coverage_pair(student, rng)
    other = coverage + torch.rand(coverage.shape, generator=rng) * 2
    with torch.no_grad():
        check_close(mine(s, h, mask, other)[1], ref(s, h, mask, other)[1],
                    name="the weights for another coverage")  # fmt: skip
    noisy = torch.where(mask[:, :, None], h, torch.randn(h.shape, generator=rng) * 5)
    first, second = mine(s, h, mask, coverage), mine(s, noisy, mask, coverage)
    check_close(second[0], first[0], name="the context when padded encoder states change")
    assert torch.all(first[1][~mask] == 0), "padding positions must get weight exactly 0"
    check_not_constant(first[0], name="the context", what="the inputs")


@pytest.mark.points(1, cell="check_coverage_attention")
def test_coverage_attention_gradients(student, rng):
    ref, mine, args = coverage_pair(student, rng)
    dc = torch.randn(args[0].shape[0], args[1].shape[-1], generator=rng)
    got = mine.backward(*args, grad_output=dc)
    ref(*args)[0].backward(dc)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


# --------------------------------------------------------------------------------------------
# 3. coverage_loss (3)
# --------------------------------------------------------------------------------------------


def loss_inputs(rng):
    B, T_out, T = draw(rng, 2, 5), draw(rng, 2, 7), draw(rng, 2, 7)
    weights = (torch.randn(B, T_out, T, generator=rng) * draw(rng, 1, 3)).softmax(-1)
    return weights, random_mask(rng, B, T_out)


@pytest.mark.points(1, cell="check_coverage_loss")
def test_coverage_loss_values(student, rng):
    weights, tgt_mask = loss_inputs(rng)
    check_close(student.coverage_loss(weights, tgt_mask), key.coverage_loss(weights, tgt_mask),
                name="the coverage loss")  # fmt: skip


@pytest.mark.points(1, cell="check_coverage_loss")
def test_coverage_loss_ignores_padding_steps(student, rng):
    weights, tgt_mask = loss_inputs(rng)
    extra = draw(rng, 1, 3)
    more = torch.randn(weights.shape[0], extra, weights.shape[2], generator=rng).softmax(-1)
    longer = torch.cat([weights, more], dim=1)
    longer_mask = torch.cat([tgt_mask, torch.zeros(tgt_mask.shape[0], extra, dtype=torch.bool)], 1)
    noisy = torch.where(tgt_mask[:, :, None], weights, torch.rand(weights.shape, generator=rng))
    want = key.coverage_loss(weights, tgt_mask)
    check_close(student.coverage_loss(longer, longer_mask), want,
                name="the loss after adding padding steps")  # fmt: skip
    check_close(student.coverage_loss(noisy, tgt_mask), key.coverage_loss(noisy, tgt_mask),
                name="the loss when the padding steps hold other weights")  # fmt: skip


@pytest.mark.points(1, cell="check_coverage_loss")
def test_coverage_loss_gradient(student, rng):
    weights, tgt_mask = loss_inputs(rng)
    got = student.coverage_loss.backward(weights, tgt_mask)
    leaf = weights.clone().requires_grad_(True)
    key.coverage_loss(leaf, tgt_mask).backward()
    assert got.inputs[0] is not None, "no gradient reached the weights"
    check_close(got.inputs[0], leaf.grad, name="the gradient with respect to the weights",
                atol=1e-5)  # fmt: skip


# --------------------------------------------------------------------------------------------
# 4. InputFeedingDecoder (5)
# --------------------------------------------------------------------------------------------


def decoder_pair(student, rng):
    sizes = dict(vocab_size=draw(rng, 5, 12), embed_dim=draw(rng, 2, 6),
                 hidden_dim=draw(rng, 2, 7), context_dim=draw(rng, 2, 8))  # fmt: skip
    ref = perturb(key.InputFeedingDecoder(**sizes), rng)
    mine = student.InputFeedingDecoder(**sizes)
    mine.load_state_dict(ref.state_dict())
    mine.eval()
    B, T, S = draw(rng, 2, 5), draw(rng, 2, 8), sizes["hidden_dim"]
    T += T in (sizes["context_dim"], S)  # the weights cannot be confused with a state
    T += T in (sizes["context_dim"], S)
    mask = random_mask(rng, B, T)
    y = torch.randint(3, sizes["vocab_size"], (B,), generator=rng)
    s = torch.randn(B, S, generator=rng)
    feed = torch.randn(B, S, generator=rng).tanh()
    h = torch.randn(B, T, sizes["context_dim"], generator=rng) * mask[:, :, None]
    return ref, mine, (y, s, feed, h, mask)


NAMES = ("the logits", "the new state s", "the attentional vector feed", "the attention weights")


@pytest.mark.points(2, cell="check_decoder")
def test_decoder_step_matches_reference(student, rng):
    ref, mine, args = decoder_pair(student, rng)
    out = mine(*args)
    assert isinstance(out, tuple) and len(out) == 4, "forward should return (logits, s, feed, a)"
    with torch.no_grad():
        want = ref(*args)
    for i in (3, 1, 2, 0):
        check_close(out[i], want[i], name=NAMES[i], atol=1e-5)


@pytest.mark.points(1, cell="check_decoder")
def test_decoder_step_feeds_back_and_ignores_padding(student, rng):
    ref, mine, (y, s, feed, h, mask) = decoder_pair(student, rng)
    other = torch.randn(feed.shape, generator=rng).tanh()
    with torch.no_grad():
        want = ref(y, s, other, h, mask)
    got = mine(y, s, other, h, mask)
    check_close(got[0], want[0], name="the logits for another feed_prev", atol=1e-5)
    noisy = torch.where(mask[:, :, None], h, torch.randn(h.shape, generator=rng) * 5)
    first, second = mine(y, s, feed, h, mask), mine(y, s, feed, noisy, mask)
    for name, a, b in zip(NAMES, first, second):
        check_close(b, a, name=f"{name} when padded encoder states change", atol=1e-5)
    check_not_constant(first[0], name="the logits", what="the inputs")


@pytest.mark.points(2, cell="check_decoder")
def test_decoder_step_gradients(student, rng):
    ref, mine, args = decoder_pair(student, rng)
    dy = torch.randn(args[0].shape[0], ref.out.out_features, generator=rng)
    got = mine.backward(*args, grad_output=dy)
    ref(*args)[0].backward(dy)
    for name, p in ref.named_parameters():
        if p.grad is None:
            continue  # init_state is not used by a step
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


# --------------------------------------------------------------------------------------------
# 5. Seq2Seq (5)
# --------------------------------------------------------------------------------------------


def model_pair(student, rng):
    sizes = dict(src_vocab_size=draw(rng, 8, 16), tgt_vocab_size=draw(rng, 5, 10),
                 embed_dim=draw(rng, 2, 6), hidden_dim=draw(rng, 2, 6))  # fmt: skip
    ref = perturb(key.Seq2Seq(**sizes), rng, scale=0.8)
    mine = student.Seq2Seq(**sizes)
    mine.load_state_dict(ref.state_dict())
    mine.eval()
    B, T = draw(rng, 2, 5), draw(rng, 3, 9)
    keep = random_mask(rng, B, T)
    src = torch.randint(3, sizes["src_vocab_size"], (B, T), generator=rng).masked_fill(~keep, PAD)
    tgt_in = torch.randint(3, sizes["tgt_vocab_size"], (B, draw(rng, 2, 6)), generator=rng)
    tgt_in[:, 0] = BOS
    return ref, mine, (src, keep.sum(1), tgt_in)


@pytest.mark.points(2, cell="check_seq2seq")
def test_seq2seq_logits(student, rng):
    ref, mine, args = model_pair(student, rng)
    out = mine(*args)
    assert isinstance(out, tuple) and len(out) == 2, "forward should return (logits, weights)"
    with torch.no_grad():
        logits, _ = ref(*args)
    check_close(out[0], logits, name="the teacher-forced logits", atol=1e-5)


@pytest.mark.points(1, cell="check_seq2seq")
def test_seq2seq_weights(student, rng):
    ref, mine, args = model_pair(student, rng)
    _, weights = mine(*args)
    with torch.no_grad():
        _, expected = ref(*args)
    check_close(weights, expected, name="the attention weights (B, T_out, T)", atol=1e-5)


@pytest.mark.points(2, cell="check_seq2seq")
def test_seq2seq_gradients(student, rng):
    ref, mine, args = model_pair(student, rng)
    dy = torch.randn(*args[2].shape, ref.decoder.out.out_features, generator=rng)
    got = mine.backward(*args, grad_output=dy)
    ref(*args)[0].backward(dy)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


# --------------------------------------------------------------------------------------------
# 6. sequence_loss (2)
# --------------------------------------------------------------------------------------------


def ce_inputs(rng, pad_id):
    B, T, V = draw(rng, 2, 5), draw(rng, 3, 7), draw(rng, 4, 9)
    logits = torch.randn(B, T, V, generator=rng)
    tgt = torch.randint(0, V, (B, T), generator=rng)
    tgt[tgt == pad_id] = (pad_id + 1) % V
    return logits, tgt.masked_fill(~random_mask(rng, B, T), pad_id)


@pytest.mark.points(1, cell="check_sequence_loss")
def test_sequence_loss_values(student, rng):
    pad_id = draw(rng, 1, 3)  # not 0: the other test uses 0
    logits, tgt = ce_inputs(rng, pad_id)
    check_close(student.sequence_loss(logits, tgt, pad_id), key.sequence_loss(logits, tgt, pad_id),
                name="the loss")  # fmt: skip


@pytest.mark.points(1, cell="check_sequence_loss")
def test_sequence_loss_ignores_extra_padding(student, rng):
    logits, tgt = ce_inputs(rng, PAD)
    extra = draw(rng, 1, 4)
    longer_logits = torch.cat([logits, torch.randn(*logits.shape[:1], extra, logits.shape[2],
                                                   generator=rng)], dim=1)  # fmt: skip
    longer_tgt = torch.cat([tgt, torch.full((tgt.shape[0], extra), PAD)], dim=1)
    dy = student.sequence_loss.backward(logits, tgt, PAD)
    check_close(student.sequence_loss(longer_logits, longer_tgt, PAD),
                key.sequence_loss(logits, tgt, PAD),
                name="the loss after adding padding positions")  # fmt: skip
    assert dy.inputs[0] is not None and torch.isfinite(dy.inputs[0]).all(), (
        "the loss is not differentiable with respect to the logits"
    )
    check_close(student.sequence_loss(longer_logits, longer_tgt),
                key.sequence_loss(logits, tgt, PAD),
                name="the loss with the default pad_id (0)")  # fmt: skip
