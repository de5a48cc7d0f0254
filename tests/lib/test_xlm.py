"""Translation-language-modelling batches (Lample & Conneau 2019) on the parallel corpus."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.data.corpus import generate_parallel
from course_lib.masking import IGNORE_INDEX
from course_lib.models import create
from course_lib.xlm import joint_vocab, tlm_batch, tlm_pair


@pytest.fixture(scope="module")
def data():
    pairs = generate_parallel(200, seed=0)
    vocab = joint_vocab([en for en, _ in pairs], [xx for _, xx in pairs])
    encoded = [(vocab.encode(en.split()), vocab.encode(xx.split())) for en, xx in pairs]
    batch = tlm_batch(
        encoded, vocab_size=len(vocab), mask_id=vocab.mask_id, sep_id=vocab.sep_id,
        special_ids=vocab.special_ids, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    return vocab, encoded, batch


def test_tlm_pair_layout():
    ids, positions, langs = tlm_pair([10, 11], [20, 21, 22], sep_id=5, languages=(3, 4))
    assert ids.tolist() == [5, 10, 11, 5, 5, 20, 21, 22, 5]
    assert positions.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4]  # restart for the translation
    assert langs.tolist() == [3, 3, 3, 3, 4, 4, 4, 4, 4]


def test_batch_concatenates_both_languages_with_reset_positions(data):
    vocab, encoded, batch = data
    B, T = batch.input_ids.shape
    assert B == len(encoded) and T == max(len(s) + len(t) + 4 for s, t in encoded)
    for i, (src, tgt) in enumerate(encoded):
        n_src, n = len(src) + 2, len(src) + len(tgt) + 4
        assert batch.attention_mask[i].tolist() == [True] * n + [False] * (T - n)
        assert batch.language_ids[i, :n].tolist() == [0] * n_src + [1] * (n - n_src)
        assert batch.position_ids[i, :n].tolist() == [*range(n_src), *range(n - n_src)]
        original, _, _ = tlm_pair(src, tgt, sep_id=vocab.sep_id)
        labels = batch.labels[i, :n]
        masked = labels != IGNORE_INDEX
        assert torch.equal(labels[masked], original[masked])  # labels are the true tokens
        assert torch.equal(batch.input_ids[i, :n][~masked], original[~masked])
        assert (original[masked] != vocab.sep_id).all()
    assert (batch.labels[~batch.attention_mask] == IGNORE_INDEX).all()


def test_both_sides_are_masked(data):
    vocab, _, batch = data
    masked = batch.labels != IGNORE_INDEX
    real = batch.attention_mask
    for lang in (0, 1):
        side = masked & (batch.language_ids == lang) & batch.attention_mask
        assert side.any()
    rate = masked.sum() / (real.sum() - 4 * len(real))  # separators are never masked
    assert 0.12 < rate < 0.18
    assert (batch.input_ids[masked] == vocab.mask_id).float().mean() > 0.7  # 80% [MASK]


def test_a_bert_with_language_embeddings_trains_on_tlm_batches(data):
    vocab, _, batch = data
    torch.manual_seed(0)
    model = create("bert-tiny-mlm", vocab_size=len(vocab), num_languages=2)
    logits = model(**batch.model_inputs())  # (B, T, V)
    assert logits.shape == (*batch.input_ids.shape, len(vocab))
    loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten())
    loss.backward()
    assert torch.isfinite(loss)
    assert model.bert.embeddings.language_embeddings.weight.grad.abs().sum() > 0


def test_empty_batch_is_rejected():
    with pytest.raises(ValueError, match="at least one"):
        tlm_batch([], vocab_size=10, mask_id=3, sep_id=2)
