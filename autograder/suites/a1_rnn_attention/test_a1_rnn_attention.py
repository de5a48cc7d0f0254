"""Hidden tests of A1 (GRU encoder-decoder with Bahdanau attention), 22 points.

CANARY-HIDDEN-A1-7d3b2e91: planted so the tests can assert that nothing a student receives
(release, feedback) contains this suite.

Every test draws its sizes and inputs from ``rng`` (seeded per assignment, student and test), loads
weights drawn in this trusted process into the student's modules by name, and compares with
``course_lib``'s reference (:mod:`course_lib.models.seq2seq`, :mod:`course_lib.attention`) or with
plain torch. The student's code may not call any of ``course_lib``'s reference implementations.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import AdditiveAttention, masked_softmax
from course_lib.checks import check_close
from course_lib.checks.a1 import reference_encoder_state, student_encoder_state, varied_eos
from course_lib.checks.core import check_not_constant
from course_lib.models.seq2seq import Decoder, Encoder, Seq2Seq, Seq2SeqConfig

pytestmark = pytest.mark.forbid("course_lib")
CANARY = "CANARY-HIDDEN-A1-7d3b2e91"
PAD, BOS, EOS = 0, 1, 2


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def padded(rng: torch.Generator, B: int, T: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids (B >= 2, T >= 2) padded with PAD after random lengths in [1, T]; one source has
    length T and another is shorter, so that padding always matters."""
    lengths = torch.randint(1, T + 1, (B,), generator=rng)
    full, short = torch.randperm(B, generator=rng)[:2].tolist()
    lengths[full], lengths[short] = T, draw(rng, 1, T - 1)
    src = torch.randint(3, vocab, (B, T), generator=rng)
    keep = torch.arange(T)[None, :] < lengths[:, None]
    return src.masked_fill(~keep, PAD), lengths


def keep_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    return torch.arange(T)[None, :] < lengths[:, None]


# --------------------------------------------------------------------------------------------
# 1. Encoder (3)
# --------------------------------------------------------------------------------------------


def encoder_pair(student, rng):
    V, E, H = draw(rng, 8, 20), draw(rng, 3, 8), draw(rng, 3, 8)
    ref = Encoder(vocab_size=V, embed_dim=E, hidden_dim=H, bidirectional=True).eval()
    mine = student.Encoder(vocab_size=V, embed_dim=E, hidden_dim=H)
    mine.load_state_dict(student_encoder_state(ref.state_dict()))
    mine.eval()
    src, lengths = padded(rng, draw(rng, 2, 5), draw(rng, 3, 9), V)
    return ref, mine, src, lengths, H


@pytest.mark.points(1, cell="check_encoder")
def test_encoder_shapes(student, rng):
    _, mine, src, lengths, H = encoder_pair(student, rng)
    out = mine(src, lengths)
    assert isinstance(out, tuple) and len(out) == 2, "Encoder.forward should return (h, c)"
    h, c = out
    B, T = src.shape
    assert tuple(h.shape) == (B, T, 2 * H), f"h has shape {tuple(h.shape)}, expected (B, T, 2H)"
    assert tuple(c.shape) == (B, 2 * H), f"c has shape {tuple(c.shape)}, expected (B, 2H)"


@pytest.mark.points(1, cell="check_encoder")
def test_encoder_matches_reference(student, rng):
    ref, mine, src, lengths, _ = encoder_pair(student, rng)
    h, c = mine(src, lengths)
    with torch.no_grad():
        h_ref, c_ref = ref(src, lengths)
    check_close(h, h_ref, name="the encoder states h", atol=1e-5)
    check_close(c, c_ref, name="the final state c", atol=1e-5)


@pytest.mark.points(1, cell="check_encoder")
def test_encoder_ignores_padding(student, rng):
    _, mine, src, lengths, _ = encoder_pair(student, rng)
    keep = keep_mask(lengths, src.shape[1])
    noisy = torch.where(keep, src, torch.randint(3, 8, src.shape, generator=rng))
    h, c = mine(src, lengths)
    h2, c2 = mine(noisy, lengths)
    check_close(h2, h, name="h when the padding positions hold other tokens", atol=1e-5)
    check_close(c2, c, name="c when the padding positions hold other tokens", atol=1e-5)
    pad_states = h[~keep]
    assert torch.all(pad_states == 0), "h must be zero at the padding positions"
    check_not_constant(h[keep], name="h at the real tokens", what="the source tokens")


# --------------------------------------------------------------------------------------------
# 2-4. Scores, masked softmax, context (2 + 3 + 1)
# --------------------------------------------------------------------------------------------


def score_inputs(rng):
    B, T, S, C, A = (draw(rng, 1, 4), draw(rng, 2, 8), draw(rng, 2, 7), draw(rng, 2, 9),
                     draw(rng, 2, 8))  # fmt: skip
    shapes = ((B, S), (B, T, C), (A, S), (A, C), (A,), (A,))
    return [torch.randn(*shape, generator=rng) for shape in shapes]


def reference_scores(s, h, W_s, W_h, b, v):
    return torch.tanh((s @ W_s.T)[:, None, :] + h @ W_h.T + b) @ v


@pytest.mark.points(1, cell="check_additive_scores")
def test_additive_scores_values(student, rng):
    args = score_inputs(rng)
    check_close(student.additive_scores(*args), reference_scores(*args), name="e", atol=1e-5)


@pytest.mark.points(1, cell="check_additive_scores")
def test_additive_scores_gradients(student, rng):
    args = score_inputs(rng)
    dy = torch.randn(args[1].shape[:2], generator=rng)
    got = student.additive_scores.backward(*args, grad_output=dy)
    leaves = [a.clone().requires_grad_(True) for a in args]
    reference_scores(*leaves).backward(dy)
    for name, mine, ref in zip(("s_prev", "h", "W_s", "W_h", "b", "v"), got.inputs, leaves):
        assert mine is not None, f"no gradient reached {name}"
        check_close(mine, ref.grad, name=f"the gradient with respect to {name}", atol=1e-4)


def random_mask(rng, shape):
    """Keep-mask of a padded batch: rows (..., T) with random lengths in [1, T], T >= 2; the first
    row is complete and the second is not (so that padding always matters)."""
    lengths = torch.randint(1, shape[-1] + 1, shape[:-1], generator=rng)
    flat = lengths.view(-1)
    flat[0], flat[1] = shape[-1], draw(rng, 1, shape[-1] - 1)
    return torch.arange(shape[-1]) < lengths[..., None]


@pytest.mark.points(1, cell="check_masked_softmax")
def test_masked_softmax_all_true(student, rng):
    e = torch.randn(draw(rng, 1, 3), draw(rng, 1, 4), draw(rng, 2, 9), generator=rng) * 3
    mask = torch.ones_like(e, dtype=torch.bool)
    check_close(student.masked_softmax(e, mask), e.softmax(-1), name="masked_softmax(e, all True)")


@pytest.mark.points(1, cell="check_masked_softmax")
def test_masked_softmax_padding(student, rng):
    e = torch.randn(draw(rng, 2, 5), draw(rng, 3, 10), generator=rng) * 3
    mask = random_mask(rng, e.shape)
    a = student.masked_softmax(e, mask)
    check_close(a, masked_softmax(e, mask), name="masked_softmax(e, mask)")
    assert torch.all(a[~mask] == 0), "masked positions must get weight exactly 0"


@pytest.mark.points(1, cell="check_masked_softmax")
def test_masked_softmax_empty_rows_and_large_scores(student, rng):
    e = torch.randn(draw(rng, 3, 6), draw(rng, 3, 8), generator=rng) * 1e4
    mask = random_mask(rng, e.shape)  # row 1 has padding at the end
    e[1, -1] = e.abs().max() + 1e4  # the largest score sits on a padding position
    mask[draw(rng, 2, e.shape[0] - 1)] = False
    a = student.masked_softmax(e, mask)
    assert torch.isfinite(a).all(), "masked_softmax gives NaN or inf (empty row or large scores)"
    check_close(a, masked_softmax(e, mask), name="masked_softmax with an empty row, scores ~1e4")


@pytest.mark.points(1, cell="check_attention_context")
def test_attention_context(student, rng):
    B, T, C = draw(rng, 1, 5), draw(rng, 2, 9), draw(rng, 2, 8)
    a = torch.randn(B, T, generator=rng).softmax(-1)
    h = torch.randn(B, T, C, generator=rng)
    check_close(student.attention_context(a, h), (a[:, :, None] * h).sum(1), name="c")


# --------------------------------------------------------------------------------------------
# 5. Attention module (2)
# --------------------------------------------------------------------------------------------


def attention_pair(student, rng):
    S, C, A = draw(rng, 2, 8), draw(rng, 2, 8), draw(rng, 2, 8)
    ref = AdditiveAttention(query_dim=S, key_dim=C, hidden_dim=A)
    mine = student.BahdanauAttention(query_dim=S, key_dim=C, attention_dim=A)
    mine.load_state_dict(ref.state_dict())
    B, T = draw(rng, 2, 5), draw(rng, 2, 9)
    T += T == C  # T != C: the context (B, C) and the weights (B, T) cannot be confused
    s, h = torch.randn(B, S, generator=rng), torch.randn(B, T, C, generator=rng)
    return ref, mine, s, h, random_mask(rng, (B, T))


@pytest.mark.points(1, cell="check_bahdanau_attention")
def test_attention_module_matches_reference(student, rng):
    ref, mine, s, h, mask = attention_pair(student, rng)
    out = mine(s, h, mask)
    assert isinstance(out, tuple) and len(out) == 2, "forward should return (context, weights)"
    with torch.no_grad():
        c_ref, a_ref = ref(s, h, mask=mask)
    check_close(out[1], a_ref, name="the attention weights")
    check_close(out[0], c_ref, name="the context")


@pytest.mark.points(1, cell="check_bahdanau_attention")
def test_attention_module_gradients(student, rng):
    ref, mine, s, h, mask = attention_pair(student, rng)
    dc = torch.randn(s.shape[0], h.shape[-1], generator=rng)
    got = mine.backward(s, h, mask, grad_output=dc)
    ref(s, h, mask=mask)[0].backward(dc)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


# --------------------------------------------------------------------------------------------
# 6. Decoder step (3)
# --------------------------------------------------------------------------------------------


def decoder_pair(student, rng):
    sizes = dict(vocab_size=draw(rng, 5, 15), embed_dim=draw(rng, 2, 6),
                 hidden_dim=draw(rng, 2, 7), context_dim=draw(rng, 2, 8),
                 attention_dim=draw(rng, 2, 7))  # fmt: skip
    ref = Decoder(**sizes).eval()
    mine = student.AttentionDecoder(**sizes)
    mine.load_state_dict(ref.state_dict())
    B, T = draw(rng, 2, 5), draw(rng, 2, 8)
    T += T == sizes["context_dim"]  # T != C: the context and the weights cannot be confused
    y = torch.randint(3, sizes["vocab_size"], (B,), generator=rng)
    s = torch.randn(B, sizes["hidden_dim"], generator=rng)
    h = torch.randn(B, T, sizes["context_dim"], generator=rng)
    mask = random_mask(rng, (B, T))
    return ref, mine, (y, s, h * mask[:, :, None], mask)


@pytest.mark.points(2, cell="check_decoder")
def test_decoder_step_matches_reference(student, rng):
    ref, mine, (y, s, h, mask) = decoder_pair(student, rng)
    out = mine(y, s, h, mask)
    assert isinstance(out, tuple) and len(out) == 3, "forward should return (logits, s, a)"
    with torch.no_grad():
        expected = ref.step(y, s, h, mask, torch.zeros(s.shape[0], h.shape[-1]))
    for name, mine_t, ref_t in zip(("the attention weights", "the new state", "the logits"),
                                   (out[2], out[1], out[0]), expected[::-1]):  # fmt: skip
        check_close(mine_t, ref_t, name=name, atol=1e-5)


@pytest.mark.points(1, cell="check_decoder")
def test_decoder_step_ignores_padding(student, rng):
    _, mine, (y, s, h, mask) = decoder_pair(student, rng)
    noisy = torch.where(mask[:, :, None], h, torch.randn(h.shape, generator=rng) * 5)
    first, second = mine(y, s, h, mask), mine(y, s, noisy, mask)
    for name, a, b in zip(("logits", "state", "weights"), first, second):
        check_close(b, a, name=f"the {name} when padded encoder states change", atol=1e-5)
    check_not_constant(first[0], name="the logits", what="the inputs")


# --------------------------------------------------------------------------------------------
# 7. Whole model (3) and 8. loss (2)
# --------------------------------------------------------------------------------------------


def model_pair(student, rng, dtype=torch.float32):
    sizes = dict(src_vocab_size=draw(rng, 8, 16), tgt_vocab_size=draw(rng, 5, 10),
                 embed_dim=draw(rng, 2, 6), hidden_dim=draw(rng, 2, 6),
                 attention_dim=draw(rng, 2, 6))  # fmt: skip
    ref = Seq2Seq(config=Seq2SeqConfig(**sizes, attention=True, bidirectional=True)).eval()
    mine = student.Seq2Seq(**sizes)
    mine.load_state_dict(student_encoder_state(ref.state_dict(), prefix="encoder."))
    if dtype == torch.float64:
        ref, mine = ref.double(), mine.double()
    return ref, mine.eval(), sizes


def teacher_batch(rng, sizes):
    B = draw(rng, 2, 5)
    src, lengths = padded(rng, B, draw(rng, 3, 9), sizes["src_vocab_size"])
    tgt_in = torch.randint(3, sizes["tgt_vocab_size"], (B, draw(rng, 2, 6)), generator=rng)
    tgt_in[:, 0] = BOS
    return src, lengths, tgt_in


@pytest.mark.points(1, cell="check_seq2seq")
def test_seq2seq_logits(student, rng):
    ref, mine, sizes = model_pair(student, rng)
    src, lengths, tgt_in = teacher_batch(rng, sizes)
    out = mine(src, lengths, tgt_in)
    assert isinstance(out, tuple) and len(out) == 2, "forward should return (logits, weights)"
    with torch.no_grad():
        logits = ref(src, tgt_in, src_lengths=lengths)
    check_close(out[0], logits, name="the teacher-forced logits", atol=1e-5)


@pytest.mark.points(1, cell="check_seq2seq")
def test_seq2seq_weights(student, rng):
    ref, mine, sizes = model_pair(student, rng)
    src, lengths, tgt_in = teacher_batch(rng, sizes)
    _, weights = mine(src, lengths, tgt_in)
    with torch.no_grad():
        _, expected = ref(src, tgt_in, src_lengths=lengths, return_attention=True)
    check_close(weights, expected, name="the attention weights (B, T_out, T)", atol=1e-5)


@pytest.mark.points(1, cell="check_seq2seq")
def test_seq2seq_gradients(student, rng):
    ref, mine, sizes = model_pair(student, rng)
    src, lengths, tgt_in = teacher_batch(rng, sizes)
    dy = torch.randn(*tgt_in.shape, sizes["tgt_vocab_size"], generator=rng)
    got = mine.backward(src, lengths, tgt_in, grad_output=dy)
    ref.train()
    ref(src, tgt_in, src_lengths=lengths).backward(dy)
    grads = reference_encoder_state(got.params, prefix="encoder.")
    for name, p in ref.named_parameters():
        assert grads.get(name) is not None, f"no gradient reached {name}"
        check_close(grads[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


def loss_inputs(rng, pad_id):
    B, T, V = draw(rng, 2, 5), draw(rng, 3, 7), draw(rng, 4, 9)
    logits = torch.randn(B, T, V, generator=rng)
    tgt = torch.randint(0, V, (B, T), generator=rng)
    tgt[tgt == pad_id] = (pad_id + 1) % V
    lengths = torch.randint(1, T + 1, (B,), generator=rng)
    lengths[0], lengths[1] = T, draw(rng, 1, T - 1)  # one full target, one padded
    return logits, tgt.masked_fill(~keep_mask(lengths, T), pad_id)


@pytest.mark.points(1, cell="check_sequence_loss")
def test_sequence_loss_values(student, rng):
    pad_id = draw(rng, 1, 3)  # not 0: the other test uses 0
    logits, tgt = loss_inputs(rng, pad_id)
    expected = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=pad_id)
    check_close(student.sequence_loss(logits, tgt, pad_id), expected, name="the loss")


@pytest.mark.points(1, cell="check_sequence_loss")
def test_sequence_loss_ignores_extra_padding(student, rng):
    logits, tgt = loss_inputs(rng, PAD)
    extra = draw(rng, 1, 4)
    longer_logits = torch.cat([logits, torch.randn(*logits.shape[:1], extra, logits.shape[2],
                                                   generator=rng)], dim=1)  # fmt: skip
    longer_tgt = torch.cat([tgt, torch.full((tgt.shape[0], extra), PAD)], dim=1)
    dy = student.sequence_loss.backward(logits, tgt, PAD)
    check_close(
        student.sequence_loss(longer_logits, longer_tgt, PAD),
        student.sequence_loss(logits, tgt, PAD),
        name="the loss after adding padding positions",
    )
    loss = student.sequence_loss(logits, tgt, PAD)
    assert isinstance(loss, torch.Tensor) and loss.numel() == 1 and float(loss) > 0, (
        "the loss of random logits should be a positive number"
    )
    assert dy.inputs[0] is not None and torch.isfinite(dy.inputs[0]).all(), (
        "the loss is not differentiable with respect to the logits"
    )


# --------------------------------------------------------------------------------------------
# 9. Greedy decoding (3)
# --------------------------------------------------------------------------------------------


def set_eos_bias(ref, mine, value: float) -> None:
    with torch.no_grad():
        ref.decoder.out.bias[EOS] += value
    mine.load_state_dict(student_encoder_state(ref.state_dict(), prefix="encoder."))


@pytest.mark.points(2, cell="check_greedy_decode")
def test_greedy_decode_matches_reference(student, rng):
    for _ in range(50):  # sequences that end at different steps, [PAD]s after an early [EOS]
        ref, mine, sizes = model_pair(student, rng, dtype=torch.float64)
        src, lengths = padded(rng, draw(rng, 4, 8), draw(rng, 3, 9), sizes["src_vocab_size"])
        max_len = draw(rng, 5, 9)
        with torch.no_grad():  # logits that depend strongly on the state: varied tokens
            ref.decoder.out.weight.mul_(4.0)
        if varied_eos(ref, src, lengths, max_len):
            break
    else:
        raise AssertionError("no informative model drawn (a bug of this test)")
    set_eos_bias(ref, mine, 0.0)
    out = student.greedy_decode(mine, src, lengths, max_len)
    assert isinstance(out, tuple) and len(out) == 2, "greedy_decode should return (tokens, weights)"
    tokens, weights = out
    expected, expected_weights = ref.greedy_decode(
        src, src_lengths=lengths, max_len=max_len, return_attention=True
    )
    assert isinstance(tokens, torch.Tensor) and tokens.shape == expected.shape, (
        f"tokens have shape {tuple(getattr(tokens, 'shape', ()))}, expected {tuple(expected.shape)}"
    )
    assert torch.equal(tokens.long(), expected), (
        f"the greedy tokens differ from the reference's:\n{tokens.tolist()}\nexpected\n"
        f"{expected.tolist()}"
    )
    check_close(weights, expected_weights, name="the attention weights of greedy decoding")


@pytest.mark.points(1, cell="check_greedy_decode")
def test_greedy_decode_stopping(student, rng):
    ref, mine, sizes = model_pair(student, rng, dtype=torch.float64)
    src, lengths = padded(rng, draw(rng, 2, 5), draw(rng, 3, 7), sizes["src_vocab_size"])
    max_len = draw(rng, 3, 7)
    set_eos_bias(ref, mine, -1e4)  # never [EOS]: runs exactly max_len steps
    tokens, _ = student.greedy_decode(mine, src, lengths, max_len)
    assert tokens.shape == (src.shape[0], max_len), (
        f"without [EOS] greedy_decode should run max_len={max_len} steps, got {tuple(tokens.shape)}"
    )
    set_eos_bias(ref, mine, 2e4)  # always [EOS] first: stops after one step
    tokens, _ = student.greedy_decode(mine, src, lengths, max_len)
    assert tokens.shape == (src.shape[0], 1) and torch.all(tokens == EOS), (
        "when every sequence emits [EOS] at the first step, greedy_decode should stop and return "
        f"a (B, 1) tensor of [EOS]; got {tokens.tolist()}"
    )
