"""The answer key of A1 (instructors only: it lives beside the hidden suite, never in course_lib).

CANARY-HIDDEN-A1-7d3b2e91: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

Luong, Pham & Manning (2015): global attention with the dot, general and concat scores, and
input feeding; Tu et al. (2016) and See, Liu & Manning (2017): a coverage vector in the additive
scores, and the coverage loss. The hidden tests compute their expectations with it;
``a1_record.py`` records its answers on the visible checks' inputs
(``course_lib/checks/recorded/a1_rnn_attention.pt``); ``tests/course/test_a1_key.py`` checks it
against loops over time and batch, ``torch.nn.GRUCell`` run by hand and ``F.cross_entropy``.

Shape legend: B batch, T source tokens, T_out target tokens, S decoder state, C encoder state,
A attention size, E embedding, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.models.seq2seq import Encoder


def _masked_softmax(e: Tensor, mask: Tensor) -> Tensor:
    e = e.masked_fill(~mask, torch.finfo(e.dtype).min)
    return e.softmax(dim=-1).masked_fill(~mask, 0.0)


def luong_align(
    h_t: Tensor,
    h_s: Tensor,
    mask: Tensor,
    method: str = "general",
    W_a: Tensor | None = None,
    v_a: Tensor | None = None,
) -> Tensor:
    """a_t(s) = softmax_s(score(h_t, h_s)) over the real positions: (B, S), (B, T, C) -> (B, T)."""
    if method == "dot":
        e = (h_s @ h_t[:, :, None]).squeeze(-1)  # (B, T)
    elif method == "general":
        e = (h_s @ W_a.T @ h_t[:, :, None]).squeeze(-1)  # h_t^T W_a h_s, (B, T)
    elif method == "concat":
        S = h_t.shape[-1]
        hidden = torch.tanh((h_t @ W_a[:, :S].T)[:, None, :] + h_s @ W_a[:, S:].T)  # (B, T, A)
        e = hidden @ v_a  # (B, T)
    else:
        raise ValueError(f"unknown method {method!r}")
    return _masked_softmax(e, mask)


class CoverageAttention(nn.Module):
    """e_i = v^T tanh(W_h h_i + W_s s + w_c cov_i + b); forward -> (context (B, C), a (B, T))."""

    def __init__(self, *, query_dim: int, key_dim: int, attention_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)  # W_s
        self.key_proj = nn.Linear(key_dim, attention_dim)  # W_h and b
        self.coverage_proj = nn.Linear(1, attention_dim, bias=False)  # w_c
        self.score = nn.Linear(attention_dim, 1, bias=False)  # v

    def forward(
        self, s: Tensor, h: Tensor, mask: Tensor, coverage: Tensor
    ) -> tuple[Tensor, Tensor]:
        hidden = torch.tanh(
            self.key_proj(h)
            + self.query_proj(s)[:, None, :]
            + self.coverage_proj(coverage[..., None])
        )  # (B, T, A)
        a = _masked_softmax(self.score(hidden).squeeze(-1), mask)  # (B, T)
        return (a[:, :, None] * h).sum(dim=1), a


def coverage_loss(weights: Tensor, tgt_mask: Tensor) -> Tensor:
    """Mean over the real target steps of sum_i min(a_{t,i}, c_{t,i}), c_t = sum_{t'<t} a_{t'}."""
    coverage = weights.cumsum(dim=1) - weights  # (B, T_out, T): the steps before t only
    per_step = torch.minimum(weights, coverage).sum(dim=-1)  # (B, T_out)
    return per_step[tgt_mask].mean()


class InputFeedingDecoder(nn.Module):
    """One step of Luong et al.'s decoder with general attention and input feeding."""

    def __init__(self, *, vocab_size: int, embed_dim: int, hidden_dim: int, context_dim: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.init_state = nn.Linear(context_dim, hidden_dim)
        self.cell = nn.GRUCell(embed_dim + hidden_dim, hidden_dim)
        self.attention = nn.Linear(context_dim, hidden_dim, bias=False)  # W_a
        self.combine = nn.Linear(context_dim + hidden_dim, hidden_dim, bias=False)  # W_c
        self.out = nn.Linear(hidden_dim, vocab_size)  # W_s

    def initial_state(self, c: Tensor) -> Tensor:
        return torch.tanh(self.init_state(c))

    def forward(
        self, y_prev: Tensor, s_prev: Tensor, feed_prev: Tensor, h: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        e = self.embedding(y_prev)  # (B, E)
        s = self.cell(torch.cat([e, feed_prev], dim=-1), s_prev)  # (B, S)
        a = luong_align(s, h, mask, "general", W_a=self.attention.weight)  # (B, T)
        c = (a[:, :, None] * h).sum(dim=1)  # (B, C)
        feed = torch.tanh(self.combine(torch.cat([c, s], dim=-1)))  # attentional vector (B, S)
        return self.out(feed), s, feed, a


def source_mask(src_lengths: Tensor, T: int) -> Tensor:
    return torch.arange(T, device=src_lengths.device)[None, :] < src_lengths[:, None]


class Seq2Seq(nn.Module):
    """The book's bidirectional encoder + the input-feeding decoder, teacher-forced."""

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_dim: int = 32,
        hidden_dim: int = 64,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
    ):
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.encoder = Encoder(
            vocab_size=src_vocab_size,
            embed_dim=embed_dim,
            hidden_dim=hidden_dim,
            bidirectional=True,
            pad_id=pad_id,
        )
        self.decoder = InputFeedingDecoder(
            vocab_size=tgt_vocab_size,
            embed_dim=embed_dim,
            hidden_dim=hidden_dim,
            context_dim=2 * hidden_dim,
        )

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        h, c = self.encoder(src, src_lengths)  # (B, T, C), (B, C)
        keep = source_mask(src_lengths, src.shape[1])  # (B, T)
        s = self.decoder.initial_state(c)  # (B, S)
        feed = s.new_zeros(s.shape)  # h~_0 = 0
        all_logits, all_weights = [], []
        for t in range(tgt_in.shape[1]):
            logits, s, feed, a = self.decoder(tgt_in[:, t], s, feed, h, keep)
            all_logits.append(logits)
            all_weights.append(a)
        return torch.stack(all_logits, dim=1), torch.stack(all_weights, dim=1)


def sequence_loss(logits: Tensor, tgt_out: Tensor, pad_id: int = 0) -> Tensor:
    """Mean cross-entropy over the real (non-padding) target tokens."""
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=pad_id)
