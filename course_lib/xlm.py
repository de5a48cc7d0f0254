"""Translation language modelling (TLM): masked-LM batches built from parallel sentences.

Lample & Conneau 2019, "Cross-lingual Language Model Pretraining" (XLM), Section 3.3 and Figure 1:
a sentence and its translation are concatenated into one stream, tokens are masked on *both*
sides, and to predict a masked word the model may look at the other language. Each token carries a
language id (added as a language embedding), and the positions restart at 0 for the second
sentence, so that position embeddings help align the two sides. Each sentence is wrapped in
separators, like XLM's ``</s> ... </s>``; we use ``[SEP]``.

A model for these batches is ``course_lib.models.bert.BertForMaskedLM`` with
``num_languages=2``: ``model(**batch.model_inputs())`` gives logits (B, T, V) for
``cross_entropy`` against ``batch.labels``. :func:`joint_vocab` builds one vocabulary for both
languages of ``course_lib.data.corpus.generate_parallel``.

Shape legend: ``B`` batch, ``T`` tokens (the longest concatenated pair).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from course_lib.data.vocab import BERT_SPECIALS, Vocab
from course_lib.masking import IGNORE_INDEX, mask_tokens

__all__ = ["TLMBatch", "joint_vocab", "tlm_batch", "tlm_pair"]


@dataclass(frozen=True)
class TLMBatch:
    """A padded TLM batch; every field is (B, T)."""

    input_ids: Tensor  # masked tokens
    labels: Tensor  # original token where masked, IGNORE_INDEX elsewhere
    position_ids: Tensor  # 0.. for the first sentence, 0.. again for the second
    language_ids: Tensor  # language of each token
    attention_mask: Tensor  # bool, True for real tokens

    def model_inputs(self) -> dict[str, Tensor]:
        """Keyword arguments for a BERT model with language embeddings (everything but labels)."""
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "language_ids": self.language_ids,
            "attention_mask": self.attention_mask,
        }


def joint_vocab(*sentence_sets: Iterable[str]) -> Vocab:
    """One word vocabulary (with BERT's special tokens) over sentences of several languages."""
    return Vocab.build(
        (s.split() for sentences in sentence_sets for s in sentences), specials=BERT_SPECIALS
    )


def tlm_pair(
    source: Sequence[int],
    target: Sequence[int],
    *,
    sep_id: int,
    languages: tuple[int, int] = (0, 1),
) -> tuple[Tensor, Tensor, Tensor]:
    """Concatenate one translation pair, unmasked: ``[SEP] source [SEP] [SEP] target [SEP]``.

    Returns token ids, position ids and language ids, each of shape (len(source) + len(target) + 4).
    """
    a, b = [sep_id, *source, sep_id], [sep_id, *target, sep_id]
    ids = torch.tensor(a + b)
    positions = torch.cat([torch.arange(len(a)), torch.arange(len(b))])  # restart for the target
    langs = torch.tensor([languages[0]] * len(a) + [languages[1]] * len(b))
    return ids, positions, langs


def tlm_batch(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    vocab_size: int,
    mask_id: int,
    sep_id: int,
    pad_id: int = 0,
    special_ids: Iterable[int] = (),
    languages: tuple[int, int] = (0, 1),
    prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> TLMBatch:
    """Build a masked TLM batch from ``(source ids, target ids)`` pairs.

    Tokens on both sides are masked with BERT's 15% / 80-10-10 rule
    (:func:`course_lib.masking.mask_tokens`); separators, padding and ``special_ids`` never are.
    Padding gets position 0 and the first language, and is excluded by ``attention_mask``.
    """
    if len(pairs) == 0:
        raise ValueError("tlm_batch needs at least one (source, target) pair")
    rows = [tlm_pair(src, tgt, sep_id=sep_id, languages=languages) for src, tgt in pairs]
    T = max(len(ids) for ids, _, _ in rows)
    B = len(rows)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    positions = torch.zeros(B, T, dtype=torch.long)
    langs = torch.full((B, T), languages[0], dtype=torch.long)
    for i, (row_ids, row_pos, row_lang) in enumerate(rows):
        n = len(row_ids)
        ids[i, :n], positions[i, :n], langs[i, :n] = row_ids, row_pos, row_lang
    lengths = torch.tensor([len(row_ids) for row_ids, _, _ in rows])
    attention_mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    inputs, labels = mask_tokens(
        ids,
        vocab_size=vocab_size,
        mask_id=mask_id,
        special_ids={*special_ids, sep_id, pad_id, mask_id},
        prob=prob,
        generator=generator,
    )
    labels = labels.masked_fill(~attention_mask, IGNORE_INDEX)
    return TLMBatch(inputs, labels, positions, langs, attention_mask)
