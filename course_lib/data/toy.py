"""Toy sequence-to-sequence tasks: copy, reverse and sort a sequence of symbols.

The smallest tasks on which an encoder-decoder with attention visibly beats one without: the
attention of a trained model is the identity (copy), the anti-diagonal (reverse) or a permutation
(sort), and it is easy to read off a heatmap. Symbols are the integers ``0 .. n_symbols - 1``,
written as the tokens ``"0"``, ``"1"``, ... after the special tokens of :class:`Vocab`.

Shape legend: ``B`` batch, ``T`` tokens.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset

from .vocab import Vocab, seq2seq_collate

TOY_TASKS: tuple[str, ...] = ("copy", "reverse", "sort")


def toy_target(task: str, source: Sequence[int]) -> list[int]:
    """The answer to ``task`` for ``source``: the same, reversed or sorted symbols."""
    if task == "copy":
        return list(source)
    if task == "reverse":
        return list(reversed(source))
    if task == "sort":
        return sorted(source)
    raise ValueError(f"unknown toy task {task!r}; expected one of {TOY_TASKS}")


def toy_vocab(n_symbols: int = 10) -> Vocab:
    """Special tokens, then the symbols ``"0" .. str(n_symbols - 1)``."""
    if not isinstance(n_symbols, int) or n_symbols < 1:
        raise ValueError(f"n_symbols must be a positive int, got {n_symbols!r}")
    return Vocab(str(s) for s in range(n_symbols))


def generate_toy(
    task: str,
    n: int,
    seed: int,
    *,
    n_symbols: int = 10,
    min_len: int = 1,
    max_len: int = 10,
) -> list[tuple[list[int], list[int]]]:
    """``n`` pairs ``(source symbols, target symbols)`` with lengths uniform in
    ``min_len..max_len`` and symbols uniform in ``0..n_symbols - 1``."""
    toy_target(task, [])  # validates the task name
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got {min_len}, {max_len}")
    if not isinstance(n_symbols, int) or n_symbols < 1:
        raise ValueError(f"n_symbols must be a positive int, got {n_symbols!r}")
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        source = [rng.randrange(n_symbols) for _ in range(rng.randint(min_len, max_len))]
        pairs.append((source, toy_target(task, source)))
    return pairs


class ToyDataset(Dataset):
    """A toy task as ``(src ids (T,), tgt ids (T + 2,))`` LongTensors, targets in BOS ... EOS.

    ``DataLoader(ds, batch_size=..., collate_fn=ds.collate)`` gives the dict of
    :func:`course_lib.data.vocab.seq2seq_collate`. Keyword arguments are those of
    :func:`generate_toy`.
    """

    def __init__(self, task: str, n: int, seed: int, *, n_symbols: int = 10, **kwargs: int):
        self.task = task
        self.pairs = generate_toy(task, n, seed, n_symbols=n_symbols, **kwargs)
        self.vocab = toy_vocab(n_symbols)
        self._src = [torch.tensor(self.vocab.encode(map(str, s))) for s, _ in self.pairs]
        self._tgt = [
            torch.tensor(self.vocab.encode(map(str, t), add_bos=True, add_eos=True))
            for _, t in self.pairs
        ]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self._src[index], self._tgt[index]

    def collate(self, batch: Sequence[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
        return seq2seq_collate(batch, src_pad_id=self.vocab.pad_id, tgt_pad_id=self.vocab.pad_id)

    def decode(self, ids: Tensor | Sequence[int]) -> list[int]:
        """Symbols of an id sequence, dropping special tokens and stopping at ``[EOS]``."""
        return [int(token) for token in self.vocab.decode(ids) if token.isdigit()]
