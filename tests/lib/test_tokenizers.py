"""Byte-level BPE: exact round trips, the merge rule against a naive re-count, special tokens."""

import functools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.tokenizers import (
    SPECIAL_TOKENS,
    BPETokenizer,
    count_pairs,
    learn_merges,
    merge_pair,
    pretokenize,
)

CORPUS = [
    "The cat sat on the mat. The dog sat on the log!",
    "low lower lowest newer newest wider widest",
    "Attention is all you need; attention weights sum to 1.",
    "[CLS] the red circle is left of the blue square [SEP] [PAD] [PAD]",
    "naïve café — 東京 😀😀 \n\t tabs\tand  spaces_with_underscores 2024-03-05",
] * 3


@functools.cache
def trained() -> BPETokenizer:
    return BPETokenizer.train(CORPUS, vocab_size=len(SPECIAL_TOKENS) + 256 + 60, progress=False)


def naive_merges(words, counts, num_merges, first_id, min_frequency=2):
    """Algorithm 1 of Sennrich et al. literally: recount every pair after every merge."""
    words = [list(w) for w in words]
    merges = []
    for k in range(num_merges):
        pairs = count_pairs(words, counts)
        if not pairs:
            break
        pair = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[pair] < min_frequency:
            break
        merges.append(pair)
        words = [merge_pair(w, pair, first_id + k) for w in words]
    return merges


def test_merge_pair_left_to_right():
    assert merge_pair([1, 2, 1, 2, 3], (1, 2), 9) == [9, 9, 3]
    assert merge_pair([5, 5, 5], (5, 5), 9) == [9, 5]
    assert merge_pair([], (1, 2), 9) == []


def test_sennrich_example_merges():
    # The paper's dictionary {low: 5, lower: 2, newest: 6, widest: 3} with end-of-word symbol 0.
    vocab = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    words = [[ord(c) for c in w] + [0] for w in vocab]
    merges = learn_merges(words, list(vocab.values()), num_merges=5, first_id=1000)
    symbols = {0: "</w>"}
    for k, (a, b) in enumerate(merges):
        symbols[1000 + k] = symbols.get(a, chr(a)) + symbols.get(b, chr(b))
    learned = [symbols[1000 + k] for k in range(5)]
    # Ties (count 9 for "es"/"st"/"t</w>") go to the smallest pair of ids; after "es" is merged
    # "we" drops from 8 to 2, which only an up-to-date (incremental) count sees.
    assert learned == ["es", "t</w>", "est</w>", "lo", "low"]


def test_incremental_counts_equal_naive_recount():
    rng = random.Random(0)
    words = [[rng.randrange(6) for _ in range(rng.randrange(1, 12))] for _ in range(300)]
    counts = [rng.randrange(1, 5) for _ in words]
    fast = learn_merges(words, counts, num_merges=80, first_id=100)
    assert len(fast) > 40
    assert fast == naive_merges(words, counts, 80, 100)


def test_training_is_deterministic_and_order_independent():
    shuffled = CORPUS[:]
    random.Random(1).shuffle(shuffled)
    again = BPETokenizer.train(shuffled, vocab_size=trained().vocab_size, progress=False)
    assert again.merges == trained().merges


def test_vocab_layout_and_merges_are_frequent_pieces():
    tok = trained()
    assert tok.vocab_size == len(SPECIAL_TOKENS) + 256 + 60
    assert [tok.token_to_id(s) for s in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    assert tok.pad_id == 0
    assert tok.token_bytes(len(SPECIAL_TOKENS) + ord("a")) == b"a"
    learned = {tok.token_bytes(i) for i in range(len(SPECIAL_TOKENS) + 256, tok.vocab_size)}
    assert b" the" in learned and b" sat" in learned
    assert len(tok.encode("The cat sat on the mat.")) < len("The cat sat on the mat.") / 2


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None, derandomize=True)
def test_pretokenize_partitions_text(text):
    assert "".join(pretokenize(text)) == text


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None, derandomize=True)
def test_round_trip_any_unicode(text):
    tok = trained()
    for allowed in (True, False):
        ids = tok.encode(text, allowed_special=allowed)
        assert all(0 <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == text


@pytest.mark.parametrize(
    "text", ["😀👩‍👩‍👧\n\r\n\x00", "\t\t  end  ", "[MASK][MASK]x[CLS", "ünïcödé 東京タワー"]
)
def test_round_trip_examples(text):
    assert trained().decode(trained().encode(text)) == text


def test_special_tokens_are_single_ids_and_never_learned():
    tok = trained()
    ids = tok.encode("a[CLS]b [MASK]")
    assert tok.token_to_id("[CLS]") in ids and tok.token_to_id("[MASK]") in ids
    assert ids.count(tok.token_to_id("[CLS]")) == 1
    # the corpus contains "[CLS]" and "[PAD]" but no merge spans or copies them
    for i in range(tok.byte_offset + 256, tok.vocab_size):
        assert b"CLS" not in tok.token_bytes(i) and b"PAD" not in tok.token_bytes(i)
    plain = tok.encode("[CLS]", allowed_special=False)
    assert tok.token_to_id("[CLS]") not in plain and tok.decode(plain) == "[CLS]"
    only_sep = tok.encode("[CLS][SEP]", allowed_special={"[SEP]"})
    assert only_sep[-1] == tok.token_to_id("[SEP]") and tok.token_to_id("[CLS]") not in only_sep
    assert tok.decode(tok.encode("x[SEP]y"), skip_special=True) == "xy"


def test_save_load_round_trip(tmp_path):
    tok = trained()
    path = tmp_path / "bpe.json"
    tok.save(path)
    loaded = BPETokenizer.load(path)
    assert loaded.merges == tok.merges and loaded.special_tokens == tok.special_tokens
    text = " ".join(CORPUS) + " unseen wörds 🚀"
    assert loaded.encode(text) == tok.encode(text)
    assert loaded.decode(loaded.encode(text)) == text


def test_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="at least"):
        BPETokenizer.train(CORPUS, vocab_size=100, progress=False)
    with pytest.raises(ValueError, match="out of range"):
        trained().decode([trained().vocab_size])
    with pytest.raises(KeyError, match="not a special token"):
        trained().token_to_id("[NOPE]")
    with pytest.raises(ValueError, match="unknown tokens"):
        trained().encode("x", allowed_special={"[NOPE]"})
    with pytest.raises(ValueError, match="not a byte or an earlier merge"):
        BPETokenizer(merges=[(6, 10_000)])
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a course_lib BPE"):
        BPETokenizer.load(bad)
