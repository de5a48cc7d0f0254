"""Sequence-to-sequence GRUs: the fixed-context encoder-decoder and Bahdanau attention.

- Sutskever, Vinyals & Le (2014), "Sequence to Sequence Learning with Neural Networks", and
  Cho et al. (2014), "Learning Phrase Representations using RNN Encoder-Decoder for Statistical
  Machine Translation": an encoder RNN reads the source into one vector c = h_T and a decoder RNN
  writes the target from it. In Cho et al.'s decoder c enters every step:
  s_t = g(y_{t-1}, s_{t-1}, c) and p(y_t | ...) = f(s_t, y_{t-1}, c). Everything the decoder knows
  about the source passes through c, whatever the source length: the *bottleneck*.
- Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by Jointly Learning to Align and
  Translate", Section 3: the context is recomputed at every step from all encoder states,
  c_t = sum_i a_{t,i} h_i with a_t = softmax_i(v^T tanh(W_s s_{t-1} + W_h h_i)), and
  s_t = g(y_{t-1}, s_{t-1}, c_t); the weights a_{t,i} are the heatmaps of the lecture.

One decoder implements both: with ``attention=False`` every c_t is the fixed c. As in the papers the
encoder of "seq2seq-bahdanau" is bidirectional (h_i = [forward h_i; backward h_i]) and that of
"seq2seq-gru" is not. The initial decoder state is s_0 = tanh(W_init c), with c the final encoder
state(s). Training uses teacher forcing (the true y_{t-1} is fed); ``greedy_decode`` feeds back the
model's own arg-max.

Shape legend: B batch, T_in source tokens, T_out target tokens, E embedding dim, C encoder state
dim (hidden_dim, times 2 if bidirectional), S decoder state dim (hidden_dim), V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import AdditiveAttention, masked_softmax, padding_mask
from course_lib.models._family import preset


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Hyper-parameters of a GRU encoder-decoder (defaults: the character-level dates task)."""

    src_vocab_size: int = 71
    tgt_vocab_size: int = 15
    embed_dim: int = 32
    hidden_dim: int = 64
    attention: bool = True  # Bahdanau attention; False = fixed context c = h_T
    attention_dim: int = 64  # width of the additive-attention MLP
    bidirectional: bool = True
    dropout: float = 0.0
    pad_id: int = 0  # source and target padding id
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "embed_dim", "hidden_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse the first ``lengths[b]`` steps of each row of x (B, T, ...); padding stays put.

    ``reverse_padded(reverse_padded(x, n), n) == x``. A left-to-right RNN over the result reads
    each sequence from its last real token to its first, which is the backward RNN.
    """
    t = torch.arange(x.shape[1], device=x.device)[None, :]  # (1, T)
    n = lengths.to(x.device)[:, None]  # (B, 1)
    index = torch.where(t < n, n - 1 - t, t)  # (B, T)
    return x[torch.arange(x.shape[0], device=x.device)[:, None], index]  # (B, T, ...)


class Encoder(nn.Module):
    """Embedding + GRU over the source (and a second GRU reading it backwards if bidirectional).

    forward(src (B, T_in), lengths (B,)) -> (h (B, T_in, C) all states, zero at padding;
    c (B, C) final state: forward h_T, concatenated with backward h_1 if bidirectional).
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        bidirectional: bool = False,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRU(embed_dim, hidden_dim, batch_first=True)
        self.rnn_backward = (
            nn.GRU(embed_dim, hidden_dim, batch_first=True) if bidirectional else None
        )

    def forward(self, src: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        x = self.dropout(self.embedding(src))  # (B, T_in, E)
        # Padding comes last, so a left-to-right GRU's state at a real token has not seen any
        # padding yet: run it over the padded batch and read h_T at each sequence's last token.
        h, _ = self.rnn(x)  # (B, T_in, hidden)
        last = (lengths - 1).to(src.device)
        rows = torch.arange(src.shape[0], device=src.device)
        c = h[rows, last]  # (B, hidden) h_T
        if self.rnn_backward is not None:
            h_back, _ = self.rnn_backward(reverse_padded(x, lengths))
            h_back = reverse_padded(h_back, lengths)  # (B, T_in, hidden) back in source order
            c = torch.cat([c, h_back[:, 0]], dim=-1)  # (B, C) backward h_1 read the whole source
            h = torch.cat([h, h_back], dim=-1)  # (B, T_in, C)
        keep = padding_mask(lengths.to(src.device), src.shape[1])  # (B, T_in)
        return h * keep[:, :, None], c


class Decoder(nn.Module):
    """GRU decoder, one step at a time; Bahdanau attention when ``attention_dim`` is given.

    step(y_prev (B,), s_prev (B, S), h (B, T_in, C), mask (B, T_in), c (B, C), keys = W_h h)
    -> (logits (B, V), s (B, S), a (B, T_in) or None).
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        context_dim: int,
        attention_dim: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.init_state = nn.Linear(context_dim, hidden_dim)  # s_0 = tanh(W_init c)
        self.attention = (
            None
            if attention_dim is None
            else AdditiveAttention(
                query_dim=hidden_dim, key_dim=context_dim, hidden_dim=attention_dim
            )
        )
        self.cell = nn.GRUCell(embed_dim + context_dim, hidden_dim)  # g
        self.out = nn.Linear(hidden_dim + context_dim + embed_dim, vocab_size)  # f

    def initial_state(self, c: Tensor) -> Tensor:
        """s_0 (B, S) from the final encoder state c (B, C)."""
        return torch.tanh(self.init_state(c))

    def precompute(self, h: Tensor) -> Tensor | None:
        """W_h h_i for all i (B, T_in, attention_dim), or None without attention.

        It does not depend on the decoder state, so it is computed once per source instead of at
        every step (as Bahdanau et al. 2015 note in their appendix on the alignment model).
        """
        return None if self.attention is None else self.attention.key_proj(h)

    def attend(
        self, s_prev: Tensor, h: Tensor, keys: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """c_t = sum_i a_{t,i} h_i, a_t = softmax_i(v^T tanh(W_s s_{t-1} + W_h h_i)).

        The same as ``self.attention(s_prev, h, mask=mask)`` with W_h h precomputed (``keys``).
        Returns (c_t (B, C), a_t (B, T_in)).
        """
        att = self.attention
        hidden = torch.tanh(att.query_proj(s_prev)[:, None, :] + keys)  # (B, T_in, attention_dim)
        e = att.score(hidden).squeeze(-1)  # (B, T_in) alignment scores e_{t,i}
        a = masked_softmax(e, mask)  # (B, T_in)
        c = (a[:, None, :] @ h).squeeze(1)  # (B, 1, T_in) @ (B, T_in, C) -> (B, C)
        return c, a

    def step(
        self,
        y_prev: Tensor,
        s_prev: Tensor,
        h: Tensor,
        mask: Tensor,
        c: Tensor,
        keys: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        e = self.dropout(self.embedding(y_prev))  # (B, E)
        a = None
        if self.attention is not None:
            keys = self.precompute(h) if keys is None else keys
            c, a = self.attend(s_prev, h, keys, mask)  # c_t (B, C), a_t (B, T_in)
        s = self.cell(torch.cat([e, c], dim=-1), s_prev)  # s_t = g(y_{t-1}, s_{t-1}, c_t)
        logits = self.out(self.dropout(torch.cat([s, c, e], dim=-1)))  # (B, V)
        return logits, s, a


class Seq2Seq(nn.Module):
    """Encoder-decoder: forward(src (B, T_in), tgt_in (B, T_out)) -> logits (B, T_out, V).

    ``tgt_in`` starts with ``[BOS]`` (teacher forcing). ``src_lengths`` (B,) default to the number
    of non-padding tokens; padding must come after the real tokens.
    """

    def __init__(self, *, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(
            vocab_size=config.src_vocab_size,
            embed_dim=config.embed_dim,
            hidden_dim=config.hidden_dim,
            bidirectional=config.bidirectional,
            dropout=config.dropout,
            pad_id=config.pad_id,
        )
        context_dim = config.hidden_dim * (2 if config.bidirectional else 1)
        self.decoder = Decoder(
            vocab_size=config.tgt_vocab_size,
            embed_dim=config.embed_dim,
            hidden_dim=config.hidden_dim,
            context_dim=context_dim,
            attention_dim=config.attention_dim if config.attention else None,
            dropout=config.dropout,
        )

    def encode(
        self, src: Tensor, src_lengths: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Source ids (B, T_in) -> (h (B, T_in, C), c (B, C), keep-mask (B, T_in))."""
        if src.dim() != 2:
            raise ValueError(f"src must be token ids of shape (B, T_in), got {tuple(src.shape)}")
        if src_lengths is None:
            src_lengths = (src != self.config.pad_id).sum(dim=1)
        if (src_lengths < 1).any():
            raise ValueError("every source needs at least one token (found a length-0 source)")
        h, c = self.encoder(src, src_lengths)
        return h, c, padding_mask(src_lengths.to(src.device), src.shape[1])

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        *,
        src_lengths: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor | None]:
        """Teacher-forced logits (B, T_out, V); with ``return_attention`` also the weights
        (B, T_out, T_in) (None for the fixed-context model)."""
        h, c, mask = self.encode(src, src_lengths)
        s = self.decoder.initial_state(c)  # (B, S)
        keys = self.decoder.precompute(h)
        all_logits, all_weights = [], []
        for t in range(tgt_in.shape[1]):
            logits, s, a = self.decoder.step(tgt_in[:, t], s, h, mask, c, keys)
            all_logits.append(logits)
            all_weights.append(a)
        logits = torch.stack(all_logits, dim=1)  # (B, T_out, V)
        if not return_attention:
            return logits
        return logits, _stack_weights(all_weights)

    @torch.no_grad()
    def greedy_decode(
        self,
        src: Tensor,
        *,
        src_lengths: Tensor | None = None,
        max_len: int = 32,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor | None]:
        """Arg-max decoding: token ids (B, <= max_len) without ``[BOS]``, ``[EOS]`` included,
        ``[PAD]`` after it; with ``return_attention`` also the weights (B, T_out, T_in) or None."""
        cfg = self.config
        h, c, mask = self.encode(src, src_lengths)
        s = self.decoder.initial_state(c)
        keys = self.decoder.precompute(h)
        y = torch.full((src.shape[0],), cfg.bos_id, dtype=torch.long, device=src.device)  # (B,)
        done = torch.zeros_like(y, dtype=torch.bool)
        tokens, weights = [], []
        for _ in range(max_len):
            logits, s, a = self.decoder.step(y, s, h, mask, c, keys)
            y = logits.argmax(dim=-1).masked_fill(done, cfg.pad_id)  # (B,)
            tokens.append(y)
            weights.append(a)
            done |= y == cfg.eos_id
            if done.all():
                break
        tokens = torch.stack(tokens, dim=1)  # (B, T_out)
        return (tokens, _stack_weights(weights)) if return_attention else tokens

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        """Mean cross-entropy over real target tokens of a ``seq2seq_collate`` batch."""
        logits = self(batch["src"], batch["tgt_in"], src_lengths=batch.get("src_lengths"))
        return F.cross_entropy(
            logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=self.config.pad_id
        )


def _stack_weights(weights: list[Tensor | None]) -> Tensor | None:
    if not weights or weights[0] is None:
        return None
    return torch.stack(weights, dim=1)  # (B, T_out, T_in)


#: Contract names (course_lib.models._family) that do not apply to this recurrent family: it has
#: additive attention (no heads, no fused kernel), no blocks and no LayerNorm; its ``embed_dim``
#: is the width of the word embeddings.
CONTRACT_EXEMPT = ("depth", "num_heads", "mlp_ratio", "norm_eps", "fused_attn")


PRESETS: dict[str, Callable[..., nn.Module]] = {
    # Cho et al. 2014 (RNNencdec in Bahdanau et al.): one direction, fixed context
    "seq2seq-gru": preset(Seq2Seq, Seq2SeqConfig(attention=False, bidirectional=False)),
    # Bahdanau et al. 2015 (RNNsearch): bidirectional encoder, additive attention
    "seq2seq-bahdanau": preset(Seq2Seq, Seq2SeqConfig(attention=True, bidirectional=True)),
}

#: Overrides that make every preset tiny (see tests/test_models_generic.py).
TINY: dict[str, Any] = {"embed_dim": 8, "hidden_dim": 12, "attention_dim": 10}


def example_batch(model: Seq2Seq, *, batch_size: int = 2) -> tuple[dict[str, Any], tuple[int, ...]]:
    """Dummy inputs for ``model(**inputs)`` (second source padded) and the logits' shape."""
    cfg = model.config
    generator = torch.Generator().manual_seed(0)
    T_in, T_out = 7, 5
    src = torch.randint(3, cfg.src_vocab_size, (batch_size, T_in), generator=generator)
    lengths = torch.full((batch_size,), T_in)
    lengths[1::2] = T_in - 3
    src = src.masked_fill(~padding_mask(lengths, T_in), cfg.pad_id)
    tgt_in = torch.randint(3, cfg.tgt_vocab_size, (batch_size, T_out), generator=generator)
    tgt_in[:, 0] = cfg.bos_id
    inputs = {"src": src, "tgt_in": tgt_in, "src_lengths": lengths}
    return inputs, (batch_size, T_out, cfg.tgt_vocab_size)
