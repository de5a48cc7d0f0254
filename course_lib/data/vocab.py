"""Vocabularies (token <-> id) and collate functions that pad a batch and keep the lengths.

Every data set in ``course_lib.data`` numbers its tokens with a :class:`Vocab` whose special tokens
come first: ``[PAD]`` is always id 0, so a padded batch can be built with ``torch.full(..., 0)`` and
a keep-mask recovered as ``ids != vocab.pad_id`` (or from the lengths with
``course_lib.attention.padding_mask(lengths, T)``).

Shape legend: ``B`` batch, ``T`` tokens (longest sequence in the batch).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

PAD, BOS, EOS, UNK = "[PAD]", "[BOS]", "[EOS]", "[UNK]"
CLS, SEP, MASK = "[CLS]", "[SEP]", "[MASK]"
#: Special tokens for sequence-to-sequence and language-model data (ids 0..3).
DEFAULT_SPECIALS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
#: Special tokens for BERT-style data: the defaults plus ``[CLS]``, ``[SEP]``, ``[MASK]`` (4..6).
BERT_SPECIALS: tuple[str, ...] = (*DEFAULT_SPECIALS, CLS, SEP, MASK)


class Vocab:
    """An ordered list of tokens: the special tokens first (``[PAD]`` = 0), then the others.

    >>> v = Vocab(["a", "b"])
    >>> v.encode(["a", "b", "zz"], add_bos=True, add_eos=True)
    [1, 4, 5, 3, 2]
    >>> v.decode([1, 4, 5, 3, 2])
    ['a', 'b', '[UNK]']
    """

    def __init__(self, tokens: Iterable[str], *, specials: Sequence[str] = DEFAULT_SPECIALS):
        specials = tuple(specials)
        if not specials or specials[0] != PAD:
            raise ValueError(
                f"specials must start with {PAD!r} (so that pad id is 0), got {specials}"
            )
        self.specials = specials
        self.itos: list[str] = []
        self.stoi: dict[str, int] = {}
        for token in (*specials, *tokens):
            if not isinstance(token, str):
                raise TypeError(f"tokens must be str, got {type(token).__name__}: {token!r}")
            if token not in self.stoi:
                self.stoi[token] = len(self.itos)
                self.itos.append(token)
        self._special_ids = frozenset(self.stoi[s] for s in specials)
        # what decode(strip_special=True) drops: every special token except [UNK]
        self._strip_ids = frozenset(self.stoi[s] for s in specials if s != UNK)

    @classmethod
    def build(
        cls,
        sequences: Iterable[Iterable[str]],
        *,
        min_freq: int = 1,
        specials: Sequence[str] = DEFAULT_SPECIALS,
    ) -> Vocab:
        """A vocabulary of every token seen at least ``min_freq`` times, most frequent first.

        Ties are broken alphabetically, so the result does not depend on the order of the data.
        Pass a string per sequence to get a character vocabulary.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        counts = Counter(token for sequence in sequences for token in sequence)
        kept = sorted(
            (t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t)
        )
        return cls(kept, specials=specials)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Vocab) and self.itos == other.itos and self.specials == other.specials
        )

    def __repr__(self) -> str:
        preview = ", ".join(self.itos[len(self.specials) : len(self.specials) + 8])
        return f"Vocab(size={len(self)}, specials={list(self.specials)}, tokens=[{preview}, ...])"

    def _special(self, token: str) -> int:
        if token not in self.stoi:
            raise KeyError(
                f"this vocabulary has no {token} token; build it with specials=BERT_SPECIALS "
                f"(or include {token!r} in specials)"
            )
        return self.stoi[token]

    pad_id = property(lambda self: self._special(PAD), doc="Id of ``[PAD]`` (always 0).")
    bos_id = property(lambda self: self._special(BOS), doc="Id of ``[BOS]``.")
    eos_id = property(lambda self: self._special(EOS), doc="Id of ``[EOS]``.")
    unk_id = property(lambda self: self._special(UNK), doc="Id of ``[UNK]``.")
    cls_id = property(lambda self: self._special(CLS), doc="Id of ``[CLS]`` (BERT vocabularies).")
    sep_id = property(lambda self: self._special(SEP), doc="Id of ``[SEP]`` (BERT vocabularies).")
    mask_id = property(
        lambda self: self._special(MASK), doc="Id of ``[MASK]`` (BERT vocabularies)."
    )

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of all special tokens."""
        return self._special_ids

    def token_to_id(self, token: str) -> int:
        """The id of ``token``, or ``unk_id`` for an unknown token."""
        if token in self.stoi:
            return self.stoi[token]
        return self.unk_id

    def id_to_token(self, index: int) -> str:
        if not 0 <= index < len(self.itos):
            raise IndexError(f"id {index} is out of range for a vocabulary of size {len(self)}")
        return self.itos[index]

    def encode(
        self, tokens: Iterable[str], *, add_bos: bool = False, add_eos: bool = False
    ) -> list[int]:
        """Ids of ``tokens`` (unknown tokens map to ``[UNK]``), optionally wrapped in BOS/EOS.

        A string is a sequence of characters, so ``vocab.encode("1992")`` encodes characters.
        """
        ids = [self.token_to_id(t) for t in tokens]
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(
        self,
        ids: Iterable[int] | Tensor,
        *,
        strip_special: bool = True,
        stop_at_eos: bool = True,
    ) -> list[str]:
        """Tokens of ``ids`` (a list or a 1-D tensor).

        With ``stop_at_eos`` everything from the first ``[EOS]`` on is dropped (what a greedy
        decoder wants); with ``strip_special`` the remaining special tokens (``[PAD]``,
        ``[BOS]``...) too, except ``[UNK]``, which stays visible.
        """
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(f"decode takes one sequence (1-D), got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        eos = self.stoi.get(EOS)
        tokens = []
        for index in ids:
            index = int(index)
            if stop_at_eos and index == eos:
                break
            if strip_special and index in self._strip_ids:
                continue
            tokens.append(self.id_to_token(index))
        return tokens

    def decode_str(self, ids: Iterable[int] | Tensor, *, sep: str = "", **kwargs: bool) -> str:
        """``sep.join(self.decode(ids, ...))``: ``sep=""`` for characters, ``" "`` for words."""
        return sep.join(self.decode(ids, **kwargs))

    def to_dict(self) -> dict[str, Any]:
        return {"specials": list(self.specials), "tokens": self.itos[len(self.specials) :]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Vocab:
        return cls(data["tokens"], specials=data["specials"])

    def save(self, path: str | Path) -> None:
        """Write the vocabulary as JSON (``{"specials": [...], "tokens": [...]}``)."""
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        """Read a vocabulary written by :meth:`save`."""
        return cls.from_dict(json.loads(Path(path).read_text()))


def _as_long(sequence: Sequence[int] | Tensor) -> Tensor:
    tensor = torch.as_tensor(sequence, dtype=torch.long)
    if tensor.dim() != 1:
        raise ValueError(f"each sequence must be 1-D, got shape {tuple(tensor.shape)}")
    return tensor


def pad_sequences(
    sequences: Sequence[Sequence[int] | Tensor], *, pad_id: int = 0, max_len: int | None = None
) -> tuple[Tensor, Tensor]:
    """Right-pad id sequences into one LongTensor.

    Returns ``(padded (B, T), lengths (B,))`` with ``T = max(lengths)`` (or ``max_len`` if given,
    which must not be shorter than the longest sequence).
    """
    if len(sequences) == 0:
        raise ValueError("pad_sequences got an empty batch")
    tensors = [_as_long(s) for s in sequences]
    lengths = torch.tensor([len(t) for t in tensors], dtype=torch.long)
    T = int(lengths.max())
    if max_len is not None:
        if max_len < T:
            raise ValueError(f"max_len={max_len} is shorter than the longest sequence ({T})")
        T = max_len
    padded = torch.full((len(tensors), T), pad_id, dtype=torch.long)  # (B, T)
    for row, tensor in zip(padded, tensors):
        row[: len(tensor)] = tensor
    return padded, lengths


def _is_sequence(value: object) -> bool:
    if isinstance(value, Tensor):
        return value.dim() == 1
    return isinstance(value, list | tuple) and all(isinstance(v, int) for v in value)


def pad_collate(batch: Sequence[Any], *, pad_id: int = 0) -> Any:
    """Collate a list of examples, padding every id sequence and adding its lengths.

    * examples that are sequences of ids -> ``(padded (B, T), lengths (B,))``;
    * tuples -> a tuple with one entry per field: ``(padded, lengths)`` for sequence fields,
      a stacked tensor for the others (labels, images);
    * dicts -> a dict where a sequence field ``k`` becomes ``k`` (padded) plus ``k_lengths``.
    """
    if len(batch) == 0:
        raise ValueError("pad_collate got an empty batch")
    first = batch[0]

    def field(values: list[Any]) -> Any:
        if _is_sequence(values[0]):
            return pad_sequences(values, pad_id=pad_id)
        return torch.stack([torch.as_tensor(v) for v in values])

    if isinstance(first, Mapping):
        out: dict[str, Any] = {}
        for key in first:
            collated = field([example[key] for example in batch])
            if isinstance(collated, tuple):
                out[key], out[f"{key}_lengths"] = collated
            else:
                out[key] = collated
        return out
    if _is_sequence(first):
        return pad_sequences(batch, pad_id=pad_id)
    if isinstance(first, tuple | list):
        return tuple(field([example[i] for example in batch]) for i in range(len(first)))
    raise TypeError(f"pad_collate cannot collate examples of type {type(first).__name__}")


def make_collate(pad_id: int = 0) -> Callable[[Sequence[Any]], Any]:
    """``pad_collate`` with a fixed ``pad_id``, ready for ``DataLoader(collate_fn=...)``."""
    return partial(pad_collate, pad_id=pad_id)


def seq2seq_collate(
    batch: Sequence[tuple[Sequence[int] | Tensor, Sequence[int] | Tensor]],
    *,
    src_pad_id: int = 0,
    tgt_pad_id: int = 0,
) -> dict[str, Tensor]:
    """Collate ``(src ids, tgt ids)`` pairs whose targets are wrapped in ``[BOS] ... [EOS]``.

    Returns a dict with
    ``src (B, T_src)``, ``src_lengths (B,)``,
    ``tgt_in (B, T_tgt)`` = target without its last token (teacher-forcing input, starts at BOS),
    ``tgt_out (B, T_tgt)`` = target without its first token (what to predict, ends at EOS),
    ``tgt_lengths (B,)`` = number of real positions in ``tgt_in``/``tgt_out``.
    Padding positions of ``tgt_out`` hold ``tgt_pad_id``: use ``ignore_index=tgt_pad_id`` in the
    loss.
    """
    if len(batch) == 0:
        raise ValueError("seq2seq_collate got an empty batch")
    src, src_lengths = pad_sequences([s for s, _ in batch], pad_id=src_pad_id)
    targets = [_as_long(t) for _, t in batch]
    if min(len(t) for t in targets) < 2:
        raise ValueError("each target needs at least [BOS] and [EOS] (length >= 2)")
    tgt_in, tgt_lengths = pad_sequences([t[:-1] for t in targets], pad_id=tgt_pad_id)
    tgt_out, _ = pad_sequences([t[1:] for t in targets], pad_id=tgt_pad_id)
    return {
        "src": src,
        "src_lengths": src_lengths,
        "tgt_in": tgt_in,
        "tgt_out": tgt_out,
        "tgt_lengths": tgt_lengths,
    }


def make_seq2seq_collate(
    src_pad_id: int = 0, tgt_pad_id: int = 0
) -> Callable[[Sequence[Any]], dict[str, Tensor]]:
    """``seq2seq_collate`` with fixed pad ids, ready for ``DataLoader(collate_fn=...)``."""
    return partial(seq2seq_collate, src_pad_id=src_pad_id, tgt_pad_id=tgt_pad_id)
