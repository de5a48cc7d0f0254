"""Hidden tests, A4 part 1: byte-pair encoding (10 points). CANARY-HIDDEN-A4-7c2e91d0"""

from __future__ import annotations

import pytest
import torch
from a4_helpers import (
    TOKENIZER_REFERENCES,
    as_ids,
    as_pairs,
    draw,
    random_text,
    reference_merges,
    tokenizer,
)

from course_lib import tokenizers as bpe
from course_lib.data.corpus import generate_corpus

pytestmark = pytest.mark.forbid("course_lib", *TOKENIZER_REFERENCES)


def corpus_text(rng: torch.Generator, sentences: int) -> str:
    return "\n".join(generate_corpus(sentences, seed=draw(rng, 0, 10**6)))


@pytest.mark.points(1, cell="check_count_pairs")
def test_count_pairs(student, rng):
    words = [[draw(rng, 0, 4) for _ in range(draw(rng, 0, 9))] for _ in range(draw(rng, 5, 15))]
    counts = [draw(rng, 1, 6) for _ in words]
    got = student.count_pairs(words, counts)
    assert isinstance(got, dict), f"count_pairs should return a dict, got {type(got).__name__}"
    got = {tuple(int(i) for i in k): int(v) for k, v in got.items() if v}
    want = dict(bpe.count_pairs(words, counts))
    assert got == want, (
        f"count_pairs(words, counts) is wrong for words={words}, counts={counts}: "
        f"{len(set(got.items()) ^ set(want.items()))} entries differ"
    )


@pytest.mark.points(1, cell="check_merge_pair")
def test_merge_pair(student, rng):
    for trial in range(12):
        ids = [draw(rng, 1, 3) for _ in range(draw(rng, 0, 12))]
        pair = (draw(rng, 1, 3), draw(rng, 1, 3))
        if trial < 3:  # a run of an odd length >= 3 of a doubled id: occurrences would overlap
            a = draw(rng, 1, 3)
            pair = (a, a)
            ids = ids[: draw(rng, 0, 3)] + [a] * (2 * draw(rng, 1, 3) + 1) + [4]
        original = list(ids)
        got = as_ids(student.merge_pair(ids, pair, 99), "merge_pair")
        assert ids == original, "merge_pair modified its input list: return a new list"
        want = bpe.merge_pair(ids, pair, 99)
        assert got == want, f"merge_pair({ids}, {pair}, 99) returned {got}, expected {want}"


@pytest.mark.points(2, cell="check_learn_merges")
def test_learn_merges_on_the_corpus(student, rng):
    text = corpus_text(rng, draw(rng, 150, 300))
    n = draw(rng, 40, 70)
    got = as_pairs(student.learn_merges(text, n), "learn_merges")
    want = reference_merges(text, n)
    for k, (mine, theirs) in enumerate(zip(got, want)):
        assert mine == theirs, f"merge {k} is {mine}, expected {theirs} (the earlier ones agree)"
    assert len(got) == len(want), f"learn_merges returned {len(got)} merges, expected {len(want)}"


@pytest.mark.points(1, cell="check_learn_merges")
def test_learn_merges_ties_and_early_stop(student, rng):
    # Few distinct words, each repeated a small number of times: many ties, and the pairs run
    # out (no pair occurs twice) long before num_merges.
    letters = "abcd"
    words = ["".join(letters[draw(rng, 0, 3)] for _ in range(draw(rng, 2, 5))) for _ in range(6)]
    text = " ".join(w for w in words for _ in range(draw(rng, 1, 3)))
    got = as_pairs(student.learn_merges(text, 500), "learn_merges")
    want = reference_merges(text, 500)
    assert got == want, (
        f"learn_merges({text!r}, 500) returned {got}, expected {want}: ties go to the smallest "
        "pair, and learning stops when no pair occurs at least twice"
    )


@pytest.mark.points(1, cell="check_learn_merges")
def test_learn_merges_unicode(student, rng):
    base = random_text(rng, 80)
    text = " ".join([base] * draw(rng, 2, 4))
    n = draw(rng, 20, 60)
    got = as_pairs(student.learn_merges(text, n), "learn_merges")
    want = reference_merges(text, n)
    assert got == want, (
        "learn_merges differs from the expected merges on text with non-ASCII characters "
        f"(first merges {got[:4]}, expected {want[:4]}): start from the UTF-8 bytes"
    )


@pytest.mark.points(1, cell="check_bpe_encode")
def test_encode_corpus(student, rng):
    merges = reference_merges(corpus_text(rng, 200), draw(rng, 60, 120))
    for sentence in generate_corpus(8, seed=draw(rng, 0, 10**6)):
        got = as_ids(student.bpe_encode(sentence, merges), "bpe_encode")
        want = tokenizer(merges).encode(sentence, allowed_special=False)
        assert got == want, f"bpe_encode({sentence!r}) returned {got}, expected {want}"


@pytest.mark.points(1, cell="check_bpe_encode")
def test_encode_unicode_and_whitespace(student, rng):
    spaces = reference_merges("a" + "    b" * draw(rng, 2, 4), 3)  # merge 0 joins two spaces
    text = f"{random_text(rng, 3).split()[0]}  {random_text(rng, 3).split()[0]}"
    got = as_ids(student.bpe_encode(text, spaces), "bpe_encode")
    want = tokenizer(spaces).encode(text, allowed_special=False)
    assert got == want, f"bpe_encode({text!r}) returned {got}, expected {want} (pre-tokenize)"
    merges = reference_merges(" ".join([random_text(rng, 120)] * 3), draw(rng, 30, 60))
    for _ in range(5):
        text = random_text(rng, draw(rng, 5, 60))
        got = as_ids(student.bpe_encode(text, merges), "bpe_encode")
        want = tokenizer(merges).encode(text, allowed_special=False)
        assert got == want, f"bpe_encode({text!r}) returned {got}, expected {want}"


@pytest.mark.points(1, cell="check_bpe_decode")
def test_round_trip(student, rng):
    merges = reference_merges(" ".join([random_text(rng, 120)] * 3), draw(rng, 30, 60))
    for _ in range(5):
        text = random_text(rng, draw(rng, 0, 60))
        ids = tokenizer(merges).encode(text, allowed_special=False)
        got = student.bpe_decode(ids, merges)
        assert got == text, f"bpe_decode(ids of {text!r}) returned {got!r}"
    raw = list("日🦊é".encode())  # one byte id each: only the joined bytes decode
    got = student.bpe_decode(raw, merges)
    assert got == "日🦊é", f"bpe_decode of the byte ids of '日🦊é' returned {got!r}"


@pytest.mark.points(1, cell="check_bpe_decode")
def test_decode_invalid_utf8(student, rng):
    merges = reference_merges(" ".join([random_text(rng, 120)] * 3), draw(rng, 30, 60))
    vocab = 256 + len(merges)
    for _ in range(5):
        ids = [draw(rng, 128, 255) if draw(rng, 0, 1) else draw(rng, 0, vocab - 1)
               for _ in range(draw(rng, 1, 10))]  # fmt: skip
        got = student.bpe_decode(ids, merges)
        want = tokenizer(merges).decode(ids)
        assert got == want, (
            f"bpe_decode({ids}) returned {got!r}, expected {want!r}: decode the joined bytes "
            'with errors="replace"'
        )
