"""A1's answer key (``autograder/suites/a1_rnn_attention/a1_key.py``) against independent oracles.

- ``luong_align`` equals Luong et al.'s three scores written per example and per source position
  (Python loops), with a softmax over the real positions only; a row without one is all zeros;
- ``CoverageAttention`` equals the same formula looped over positions, and with zero coverage the
  book's ``AdditiveAttention`` (Bahdanau) given the same weights;
- ``coverage_loss`` equals a loop over the steps that accumulates the coverage;
- ``InputFeedingDecoder`` equals a step written from the GRU's gate equations (the weights of its
  ``torch.nn.GRUCell``) and the loops above; ``Seq2Seq`` equals that step looped over time with the
  attentional vector carried by hand;
- ``sequence_loss`` equals -log softmax at the targets averaged over the real tokens;
- (the recorded answers of the visible checks: test_recorded_answers.py).
"""

from __future__ import annotations

import math

import pytest
import torch
from keys import load
from torch import nn

key = load("a1_rnn_attention", "a1_key")


def loop_softmax(scores: list[float], keep: list[bool]) -> list[float]:
    real = [s for s, k in zip(scores, keep) if k]
    if not real:
        return [0.0] * len(scores)
    top = max(real)
    total = sum(math.exp(s - top) for s in real)
    return [math.exp(s - top) / total if k else 0.0 for s, k in zip(scores, keep)]


def loop_align(h_t, h_s, mask, method, W_a=None, v_a=None) -> torch.Tensor:
    B, T, _ = h_s.shape
    out = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        scores = []
        for s in range(T):
            q, k = h_t[b].double(), h_s[b, s].double()
            if method == "dot":
                scores.append(float(q @ k))
            elif method == "general":
                scores.append(float(q @ (W_a.double() @ k)))
            else:
                pair = torch.cat([q, k])
                scores.append(float(v_a.double() @ torch.tanh(W_a.double() @ pair)))
        out[b] = torch.tensor(loop_softmax(scores, mask[b].tolist()), dtype=torch.float64)
    return out


def keep_mask(lengths: list[int], T: int) -> torch.Tensor:
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("method", ["dot", "general", "concat"])
@pytest.mark.parametrize("seed", range(2))
def test_luong_align_equals_loops(method, seed):
    g = torch.Generator().manual_seed(seed)
    B, T, S, A = 4, 5, 3, 4
    C = S if method == "dot" else 6
    h_t, h_s = torch.randn(B, S, generator=g), torch.randn(B, T, C, generator=g) * 2
    W_a = {"dot": None, "general": torch.randn(S, C, generator=g),
           "concat": torch.randn(A, S + C, generator=g)}[method]  # fmt: skip
    v_a = torch.randn(A, generator=g) if method == "concat" else None
    mask = keep_mask([5, 2, 4, 0], T)
    got = key.luong_align(h_t, h_s, mask, method, W_a, v_a)
    torch.testing.assert_close(got.double(), loop_align(h_t, h_s, mask, method, W_a, v_a))
    assert torch.all(got[3] == 0) and torch.all(got[~mask] == 0)


def loop_coverage_attention(ref, s, h, mask, coverage):
    B, T, _ = h.shape
    v = ref.score.weight[0]
    w_c = ref.coverage_proj.weight[:, 0]
    weights = torch.zeros(B, T)
    for b in range(B):
        scores = []
        for i in range(T):
            inner = ref.key_proj.weight @ h[b, i] + ref.key_proj.bias
            inner = inner + ref.query_proj.weight @ s[b] + w_c * coverage[b, i]
            scores.append(float(v @ torch.tanh(inner)))
        weights[b] = torch.tensor(loop_softmax(scores, mask[b].tolist()))
    return (weights[:, :, None] * h).sum(1), weights


@pytest.mark.parametrize("seed", range(3))
def test_coverage_attention_equals_loops_and_the_books_additive_attention(seed):
    from course_lib.attention import AdditiveAttention

    g = torch.Generator().manual_seed(seed)
    ref = key.CoverageAttention(query_dim=3, key_dim=5, attention_dim=4)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    s, h = torch.randn(3, 3, generator=g), torch.randn(3, 6, 5, generator=g)
    mask = keep_mask([6, 3, 5], 6)
    coverage = torch.rand(3, 6, generator=g) * 2
    with torch.no_grad():
        got = ref(s, h, mask, coverage)
        want = loop_coverage_attention(ref, s, h, mask, coverage)
        torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-4)
        book = AdditiveAttention(query_dim=3, key_dim=5, hidden_dim=4)
        book.load_state_dict({k: v for k, v in ref.state_dict().items() if "coverage" not in k})
        zero = ref(s, h, mask, torch.zeros(3, 6))
        want = book(s, h, mask=mask)
        torch.testing.assert_close(zero[0], want[0])
        torch.testing.assert_close(zero[1], want[1])


@pytest.mark.parametrize("seed", range(3))
def test_coverage_loss_equals_a_loop_over_steps(seed):
    g = torch.Generator().manual_seed(seed)
    B, T_out, T = 3, 6, 5
    weights = (torch.randn(B, T_out, T, generator=g) * 2).softmax(-1)
    tgt_mask = keep_mask([6, 2, 4], T_out)
    total, count = 0.0, 0
    for b in range(B):
        coverage = [0.0] * T
        for t in range(T_out):
            step = sum(min(float(weights[b, t, i]), coverage[i]) for i in range(T))
            if tgt_mask[b, t]:
                total, count = total + step, count + 1
            coverage = [c + float(weights[b, t, i]) for i, c in enumerate(coverage)]
    got = key.coverage_loss(weights, tgt_mask)
    assert abs(got.item() - total / count) < 1e-6
    first = key.coverage_loss(weights[:, :1], torch.ones(B, 1, dtype=torch.bool))
    assert first.item() == 0.0  # nothing is covered before the first step


def gru_by_hand(cell: nn.GRUCell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The GRU's gate equations (PyTorch's convention), with the weights of ``cell``."""
    W_ir, W_iz, W_in = cell.weight_ih.chunk(3)
    W_hr, W_hz, W_hn = cell.weight_hh.chunk(3)
    b_ir, b_iz, b_in = cell.bias_ih.chunk(3)
    b_hr, b_hz, b_hn = cell.bias_hh.chunk(3)
    r = torch.sigmoid(x @ W_ir.T + b_ir + h @ W_hr.T + b_hr)
    z = torch.sigmoid(x @ W_iz.T + b_iz + h @ W_hz.T + b_hz)
    n = torch.tanh(x @ W_in.T + b_in + r * (h @ W_hn.T + b_hn))
    return (1 - z) * n + z * h


def step_by_hand(dec, y, s_prev, feed_prev, h, mask):
    e = dec.embedding.weight[y]
    s = gru_by_hand(dec.cell, torch.cat([e, feed_prev], -1), s_prev)
    a = loop_align(s, h, mask, "general", dec.attention.weight).float()
    c = torch.stack([sum(a[b, i] * h[b, i] for i in range(h.shape[1])) for b in range(h.shape[0])])
    feed = torch.tanh(torch.cat([c, s], -1) @ dec.combine.weight.T)
    return feed @ dec.out.weight.T + dec.out.bias, s, feed, a


def random_weights(module: nn.Module, g: torch.Generator) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.7)
    return module.eval()


@pytest.mark.parametrize("seed", range(3))
def test_input_feeding_step_equals_the_gate_equations(seed):
    g = torch.Generator().manual_seed(seed)
    dec = random_weights(
        key.InputFeedingDecoder(vocab_size=7, embed_dim=3, hidden_dim=4, context_dim=6), g
    )
    mask = keep_mask([5, 2, 4], 5)
    y, s = torch.tensor([3, 4, 6]), torch.randn(3, 4, generator=g)
    feed, h = torch.randn(3, 4, generator=g).tanh(), torch.randn(3, 5, 6, generator=g)
    args = (y, s, feed, h, mask)
    with torch.no_grad():
        for got, want in zip(dec(*args), step_by_hand(dec, *args)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("seed", range(2))
def test_seq2seq_equals_the_step_looped_by_hand(seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = random_weights(
        key.Seq2Seq(src_vocab_size=9, tgt_vocab_size=7, embed_dim=3, hidden_dim=4), g
    )
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 7, 3, 0, 0], [5, 5, 4, 6, 0]])
    lengths = torch.tensor([5, 3, 4])
    tgt_in = torch.tensor([[1, 3, 4, 5], [1, 6, 6, 3], [1, 4, 5, 6]])
    with torch.no_grad():
        logits, weights = model(src, lengths, tgt_in)
        h, c = model.encoder(src, lengths)
        mask = keep_mask(lengths.tolist(), 5)
        s = torch.tanh(c @ model.decoder.init_state.weight.T + model.decoder.init_state.bias)
        feed = torch.zeros(3, 4)
        for t in range(tgt_in.shape[1]):
            out, s, feed, a = step_by_hand(model.decoder, tgt_in[:, t], s, feed, h, mask)
            torch.testing.assert_close(logits[:, t], out, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(weights[:, t], a, atol=1e-5, rtol=1e-4)


def test_sequence_loss_equals_the_mean_negative_log_likelihood():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g)
    tgt = torch.randint(3, 7, (3, 5), generator=g)
    tgt[1, 3:] = 0
    tgt[2, 1:] = 0
    terms = [
        -logits[b, t].log_softmax(-1)[tgt[b, t]].item()
        for b in range(3)
        for t in range(5)
        if tgt[b, t] != 0
    ]
    assert abs(key.sequence_loss(logits, tgt, 0).item() - sum(terms) / len(terms)) < 1e-5
