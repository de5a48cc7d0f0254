"""Generated corpus (agreement, documents, NSP, MLM masking, LM blocks) and the parallel corpus."""

import pytest
import torch
from torch.utils.data import DataLoader

from course_lib.data import (
    NSPDataset,
    ParallelDataset,
    TokenBlockDataset,
    corpus_vocab,
    generate_corpus,
    generate_documents,
    generate_parallel,
    generate_parallel_examples,
    mask_for_mlm,
    nsp_pairs,
    pseudo_vocab,
)
from course_lib.data.corpus import (
    ADJECTIVES,
    ANIMALS,
    INTRANSITIVE,
    OBJECTS,
    PREPOSITIONS,
    TRANSITIVE,
    TRANSLATION_LEXICON,
)

SINGULAR_VERBS = {*TRANSITIVE, *INTRANSITIVE, "is"}
PLURAL_VERBS = {v[0] for v in TRANSITIVE.values()} | {v[0] for v in INTRANSITIVE.values()} | {"are"}
PLURAL_NOUNS = {v[0] for v in (*ANIMALS.values(), *OBJECTS.values())}
SINGULAR_NOUNS = {*ANIMALS, *OBJECTS}


def test_determinism():
    assert generate_corpus(100, seed=0) == generate_corpus(100, seed=0)
    assert generate_corpus(100, seed=0) != generate_corpus(100, seed=1)
    assert generate_documents(10, seed=2) == generate_documents(10, seed=2)
    assert generate_parallel(50, seed=3) == generate_parallel(50, seed=3)
    assert generate_parallel(50, seed=3) != generate_parallel(50, seed=4)
    assert len(generate_corpus(37, seed=5)) == 37


def test_grammar_agreement():
    vocab = corpus_vocab()
    for sentence in generate_corpus(600, seed=6):
        words = sentence.split()
        assert words[-1] == "." and vocab.unk_id not in vocab.encode(words)
        # determiner-noun agreement and a/an
        for det, nxt in zip(words, words[1:]):
            if det in ("a", "an"):
                assert (det == "an") == (nxt[0] in "aeiou"), sentence
        # the subject is everything before the first verb; its noun decides the verb's number
        verb_at = next(i for i, w in enumerate(words) if w in SINGULAR_VERBS | PLURAL_VERBS)
        subject = words[:verb_at]
        plural = subject[-1] in PLURAL_NOUNS or subject[-1] == "they"
        assert subject[-1] in SINGULAR_NOUNS | PLURAL_NOUNS | {"it", "they"}, sentence
        assert (words[verb_at] in PLURAL_VERBS) == plural, sentence
        if subject[0] in ("a", "an"):
            assert not plural
        if subject[0] in ("some", "two", "three"):
            assert plural
        # adjective order: opinion < size < age < colour
        ranks = [ADJECTIVES[w][0] for w in subject if w in ADJECTIVES]
        assert ranks == sorted(ranks)


def test_documents_follow_one_animal():
    for document in generate_documents(30, seed=7, min_sentences=2, max_sentences=4):
        assert 2 <= len(document) <= 4
        hero = document[0].split()
        noun = next(w for w in hero if w in SINGULAR_NOUNS | PLURAL_NOUNS)
        for sentence in document[1:]:
            first = sentence.split()[:1] + sentence.split()[1:2]
            assert first[0] in ("it", "they") or first == ["the", noun], (document, sentence)


def test_nsp_pairs():
    documents = generate_documents(40, seed=8)
    pairs = nsp_pairs(documents, seed=0)
    consecutive = {(a, b) for d in documents for a, b in zip(d, d[1:])}
    where = {s: i for i, d in enumerate(documents) for s in d}
    assert len(pairs) == sum(len(d) - 1 for d in documents)
    for a, b, is_next in pairs:
        if is_next:
            assert (a, b) in consecutive
        else:
            assert where[a] != where[b]
    negatives = sum(not p[2] for p in pairs) / len(pairs)
    assert 0.35 < negatives < 0.65
    with pytest.raises(ValueError, match="two documents"):
        nsp_pairs(documents[:1], seed=0)


def test_nsp_dataset_and_mlm_masking():
    ds = NSPDataset(60, seed=9)
    v = ds.vocab
    item = ds[0]
    ids, types = item["input_ids"].tolist(), item["token_type_ids"].tolist()
    a, b, is_next = ds.pairs[0]
    assert ids == [v.cls_id, *v.encode(a.split()), v.sep_id, *v.encode(b.split()), v.sep_id]
    assert types == [0] * (len(a.split()) + 2) + [1] * (len(b.split()) + 1)
    assert int(item["is_next"]) == is_next
    batch = next(iter(DataLoader(ds, batch_size=len(ds), collate_fn=ds.collate)))
    assert (batch["attention_mask"].sum(1) == batch["lengths"]).all()
    assert (batch["input_ids"][~batch["attention_mask"]] == v.pad_id).all()

    input_ids = batch["input_ids"]
    g = torch.Generator().manual_seed(0)
    corrupted, labels = mask_for_mlm(input_ids, vocab=v, generator=g)
    chosen = labels != -100
    special = torch.isin(input_ids, torch.tensor(sorted(v.special_ids)))
    assert not (chosen & special).any()
    assert torch.equal(labels[chosen], input_ids[chosen])
    assert torch.equal(corrupted[~chosen], input_ids[~chosen])
    rate = chosen.sum() / (~special).sum()
    assert 0.12 < rate < 0.18
    masked = (corrupted[chosen] == v.mask_id).float().mean()
    assert 0.72 < masked < 0.88
    again = mask_for_mlm(input_ids, vocab=v, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again[0], corrupted) and torch.equal(again[1], labels)


def test_token_blocks():
    ids = torch.arange(23)
    ds = TokenBlockDataset(ids, block_size=5)
    assert len(ds) == 4
    x, y = ds[3]
    assert x.tolist() == [15, 16, 17, 18, 19] and y.tolist() == [16, 17, 18, 19, 20]
    overlapping = TokenBlockDataset(ids, block_size=5, stride=2)
    assert len(overlapping) == 9 and overlapping[8][1][-1] == 21
    with pytest.raises(IndexError):
        ds[4]
    with pytest.raises(ValueError, match="block_size"):
        TokenBlockDataset(torch.arange(4), block_size=4)


def test_parallel_alignment():
    pv, ev = pseudo_vocab(), corpus_vocab()
    for e in generate_parallel_examples(300, seed=10):
        src, tgt = e.source.split(), e.target.split()
        assert ev.unk_id not in ev.encode(src) and pv.unk_id not in pv.encode(tgt)
        aligned = {}
        for i, j in e.alignment:
            assert i not in aligned
            aligned[i] = j
            if src[i] in PREPOSITIONS:  # the preposition is a suffix of the place noun
                assert tgt[j] == TRANSLATION_LEXICON[src[i + 2]] + PREPOSITIONS[src[i]], e
            else:
                assert tgt[j].split("-")[0] == TRANSLATION_LEXICON[src[i]], (e, i, j)
            if src[i] in PLURAL_NOUNS and src[i] not in SINGULAR_NOUNS:
                assert "-n-" in tgt[j]
            if src[i] in SINGULAR_NOUNS:
                assert "-n-" not in tgt[j]
        assert set(range(len(src))) - set(aligned) == {i for i, w in enumerate(src) if w == "the"}
        # subject first (case -ka), verb last before the full stop
        verb = next(i for i, w in enumerate(src) if w in SINGULAR_VERBS | PLURAL_VERBS)
        assert aligned[verb] == len(tgt) - 2 and tgt[-1] == "."
        assert tgt[-2].endswith("-an") == (src[verb] in PLURAL_VERBS)
        assert [t for t in tgt if t.endswith("-ka")] == [tgt[aligned[verb - 1]]]


def test_parallel_dataset():
    ds = ParallelDataset(20, seed=11)
    batch = next(iter(DataLoader(ds, batch_size=20, collate_fn=ds.collate)))
    for row, e in zip(batch["tgt_out"], ds.examples):
        assert ds.tgt_vocab.decode_str(row, sep=" ") == e.target
    for row, e in zip(batch["src"], ds.examples):
        assert ds.src_vocab.decode_str(row, sep=" ") == e.source


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_sentences"):
        generate_corpus(-1, 0)
    with pytest.raises(ValueError, match="min_sentences"):
        generate_documents(3, 0, min_sentences=0)
    with pytest.raises(ValueError, match="mask_prob"):
        mask_for_mlm(
            torch.zeros(2, 3, dtype=torch.long), vocab=corpus_vocab(bert=True), mask_prob=2
        )
