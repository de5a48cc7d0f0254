"""The answer key of A4 (instructors only: it lives beside the hidden suite, never in course_lib).

CANARY-HIDDEN-A4-7c2e91d0: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

The hidden tests compute their expectations with it; ``a4_record.py`` runs it on the visible
checks' inputs and records the answers as data (``course_lib/checks/recorded/a4_bert_gpt.pt``);
``tests/course/test_a4_key.py`` checks it against independent oracles (Hugging Face
``tokenizers``' WordPiece, ``F.scaled_dot_product_attention(enable_gqa=True)``, a full
recomputation without cache, loops over rows and exact distributions).

Shape legend: B batch, T new tokens, S tokens seen so far (cache included), C channels,
H query heads, G key/value heads, D head dim, V vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from course_lib.models.gpt import KVCache
from course_lib.tokenizers import merge_pair, pretokenize

# --------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------


def bpe_encode(text: str, merges: list[tuple[int, int]]) -> list[int]:
    """Token ids of ``text`` under ``merges`` (ids 0..255 are bytes, merge k is id 256 + k)."""
    rank = {tuple(pair): k for k, pair in enumerate(merges)}
    ids: list[int] = []
    for piece in pretokenize(text):
        word = list(piece.encode("utf-8"))
        while len(word) >= 2:
            pair = min(zip(word, word[1:]), key=lambda p: rank.get(p, math.inf))
            if pair not in rank:
                break
            word = merge_pair(word, pair, 256 + rank[pair])
        ids.extend(word)
    return ids


def bpe_decode(ids: list[int], merges: list[tuple[int, int]]) -> str:
    """The text of ``ids``; bytes that are not valid UTF-8 become U+FFFD."""
    vocab = [bytes([i]) for i in range(256)]
    for first, second in merges:
        vocab.append(vocab[first] + vocab[second])
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")


def wordpiece_encode(text: str, vocab: dict[str, int], *, unk_token: str = "[UNK]") -> list[int]:
    """WordPiece ids of ``text`` cut at whitespace: longest match first, continuations ``##``,
    a word with a position no piece matches is one ``unk_token``."""
    ids: list[int] = []
    for word in text.split():
        pieces: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    break
                end -= 1
            if end == start:
                pieces = [vocab[unk_token]]
                break
            pieces.append(vocab[piece])
            start = end
        ids.extend(pieces)
    return ids


# --------------------------------------------------------------------------------------------
# BERT's inputs
# --------------------------------------------------------------------------------------------


def whole_word_mask(
    ids: Tensor,
    is_subword: Tensor,
    *,
    vocab_size: int,
    mask_id: int,
    special_ids: list[int],
    prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Whole-word masking: each word (a piece and the ``##`` pieces after it) chosen with
    probability ``prob``; each chosen token then [MASK] / random / kept, 80 / 10 / 10."""
    special = torch.tensor(sorted(set(special_ids) | {mask_id}))
    is_special = torch.isin(ids, special)
    starts = ~is_subword & ~is_special  # the first piece of each word
    word = starts.flatten().long().cumsum(0).view(ids.shape) - 1  # word index of every token
    word_chosen = torch.rand(int(starts.sum()), generator=generator) < prob
    chosen = word_chosen[word.clamp(min=0)] & ~is_special
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special] = False
    candidates = ordinary.nonzero().squeeze(1)
    action = torch.rand(ids.shape, generator=generator)
    random_ids = candidates[torch.randint(len(candidates), ids.shape, generator=generator)]
    inputs = ids.clone().long()
    inputs[chosen & (action < 0.8)] = mask_id
    to_random = chosen & (action >= 0.8) & (action < 0.9)
    inputs[to_random] = random_ids[to_random]
    labels = torch.where(chosen, ids.long(), torch.full_like(inputs, -100))
    return inputs, labels


def segment_ids(input_ids: Tensor, *, sep_id: int, pad_id: int) -> Tensor:
    """0 up to and including the first [SEP], 1 after it, 0 at padding: (B, T) long."""
    is_sep = (input_ids == sep_id).long()
    seps_before = is_sep.cumsum(dim=1) - is_sep
    return (seps_before >= 1).long().masked_fill(input_ids == pad_id, 0)


# --------------------------------------------------------------------------------------------
# Grouped-query causal self-attention with a cache
# --------------------------------------------------------------------------------------------


class GroupedCausalSelfAttention(nn.Module):
    """Causal self-attention with ``n_kv_head`` key/value heads shared by groups of
    ``n_head // n_kv_head`` query heads (Ainslie et al. 2023), and a cache of the grouped keys
    and values."""

    def __init__(self, *, n_embd: int, n_head: int, n_kv_head: int):
        super().__init__()
        if n_embd % n_head or n_head % n_kv_head:
            raise ValueError("n_embd must be divisible by n_head, n_head by n_kv_head")
        self.n_head, self.n_kv_head = n_head, n_kv_head
        D = n_embd // n_head
        self.q_proj = nn.Linear(n_embd, n_embd)
        self.k_proj = nn.Linear(n_embd, n_kv_head * D)
        self.v_proj = nn.Linear(n_embd, n_kv_head * D)
        self.o_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: Tensor, past_kv: tuple[Tensor, Tensor] | None = None):
        B, T, C = x.shape
        H, G = self.n_head, self.n_kv_head
        D = C // H
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, G, D).transpose(1, 2)  # (B, G, T, D)
        v = self.v_proj(x).view(B, T, G, D).transpose(1, 2)  # (B, G, T, D)
        if past_kv is not None:
            k = torch.cat([past_kv[0], k], dim=2)  # (B, G, S, D)
            v = torch.cat([past_kv[1], v], dim=2)
        S = k.shape[2]
        k_all = k.repeat_interleave(H // G, dim=1)  # (B, H, S, D): head h reads group h // (H/G)
        v_all = v.repeat_interleave(H // G, dim=1)
        keep = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        scores = q @ k_all.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, S)
        scores = scores.masked_fill(~keep, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v_all  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.o_proj(y), (k, v)


# --------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------


def min_p_filter(logits: Tensor, min_p: float) -> Tensor:
    """Keep the tokens whose probability is at least ``min_p`` times the largest (Nguyen et al.
    2024); set the other logits to -inf. Last dimension, any shape."""
    probs = torch.softmax(logits.double(), dim=-1)
    keep = probs >= min_p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(~keep, float("-inf"))


def repetition_penalty(logits: Tensor, prev_ids: Tensor, penalty: float) -> Tensor:
    """logits (B, V), prev_ids (B, T): each token that occurs in its row's ``prev_ids`` has a
    positive logit divided by ``penalty``, a negative one multiplied by it (Keskar et al. 2019)."""
    seen = torch.zeros(logits.shape, dtype=torch.bool).scatter(1, prev_ids.long(), True)
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def sample_next_token(
    logits: Tensor,
    prev_ids: Tensor | None = None,
    *,
    temperature: float = 1.0,
    penalty: float = 1.0,
    min_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One id per row of ``logits`` (B, V): penalty, temperature, min-p, then a draw: (B, 1)."""
    if prev_ids is not None:
        logits = repetition_penalty(logits, prev_ids, penalty)
    logits = logits / temperature
    if min_p is not None:
        logits = min_p_filter(logits, min_p)
    probs = torch.softmax(logits.double(), dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    penalty: float = 1.0,
    min_p: float | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Extend ``idx`` (B, T) by ``max_new_tokens`` with the book's GPT and its KVCache,
    penalising every token already in the row (prompt and generated)."""
    B, T = idx.shape
    dtype = model.lm_head.weight.dtype
    cache = KVCache(model.config, batch_size=B, max_len=T + max_new_tokens, dtype=dtype)
    context = idx
    for _ in range(max_new_tokens):
        last = model(context, cache=cache)[:, -1, :]  # (B, V)
        if greedy:
            next_id = repetition_penalty(last, idx, penalty).argmax(dim=-1, keepdim=True)
        else:
            next_id = sample_next_token(
                last,
                idx,
                temperature=temperature,
                penalty=penalty,
                min_p=min_p,
                generator=generator,
            )
        idx = torch.cat([idx, next_id], dim=1)
        context = next_id
    return idx
