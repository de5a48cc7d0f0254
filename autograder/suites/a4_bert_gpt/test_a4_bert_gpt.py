"""Hidden tests of A4 (tokenizers, whole-word masking, grouped-query attention with a cache,
min-p and repetition-penalty sampling, generation), 42 points.

CANARY-HIDDEN-A4-7c2e91d0: planted so the tests can assert that nothing a student receives
(release, feedback) contains this suite.

Sizes and inputs come from ``rng`` (seeded per assignment, student and test). Expectations come
from the answer key beside this file (``a4_key.py``), which the project's tests check against
Hugging Face's WordPiece, ``F.scaled_dot_product_attention(enable_gqa=True)``, a full
recomputation and exact distributions. Random functions are graded on frequencies: every
frequency within five standard deviations (plus three draws) of its probability, so a right
answer passes under every seed. Generation runs on the book's GPT, built in the worker, so that
it is graded on its own. Failure messages say what is wrong and where, never the expected values.
"""

from __future__ import annotations

import math
from collections import Counter

import a4_key as key
import pytest
import torch
from a4_record import corpus_merges
from torch import Tensor

from course_lib.checks import check_close
from course_lib.data.corpus import generate_corpus
from course_lib.tokenizers import learn_merges, pretokenize

CANARY = "CANARY-HIDDEN-A4-7c2e91d0"
ATTENTION = (
    "sdpa",
    "multihead_attention",
    "course_lib.attention",
    "course_lib.layers",
    "course_lib.models.gpt.CausalSelfAttention",
    "course_lib.models.transformer",
)
BOOK_SAMPLING = (
    "course_lib.models.gpt.sample_next_token",
    "course_lib.models.gpt.top_k_filter",
    "course_lib.models.gpt.top_p_filter",
    "course_lib.models.gpt.GPT.generate",
)
BOOK_BPE = ("course_lib.tokenizers.BPETokenizer",)
HF_TOKENIZERS = ("tokenizers",)
DRAWS = 40_000


def raised(call) -> str | None:
    """The type name of the exception the student's code raised in ``call()``, or None."""
    from autograder.host.proxy import StudentError

    try:
        call()
    except StudentError as error:
        return error.kind
    return None


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def as_ids(value: object, what: str) -> list[int]:
    if isinstance(value, Tensor):
        value = value.tolist()
    assert isinstance(value, list | tuple), f"{what} should return a list of ints"
    return [int(i) for i in value]


def frequencies_match(ids: object, probs: Tensor, what: str, sigmas: float = 5.0) -> None:
    """Frequencies of ``ids`` (N, 1) agree with ``probs`` (V,) within ``sigmas``."""
    assert isinstance(ids, Tensor), f"{what} should return a tensor of ids"
    assert ids.dim() == 2 and ids.shape[1] == 1, (
        f"{what} should have shape (B, 1), got {tuple(ids.shape)}"
    )
    n, V = ids.shape[0], probs.numel()
    flat = ids.flatten().long()
    assert ((flat >= 0) & (flat < V)).all(), f"{what} returned ids outside [0, {V})"
    freq = torch.bincount(flat, minlength=V).double() / n
    p = probs.double()
    impossible = (p == 0) & (freq > 0)
    assert not impossible.any(), (
        f"{what} sampled tokens that the filters remove: {impossible.nonzero().flatten().tolist()}"
    )
    bad = (freq - p).abs() > sigmas * (p * (1 - p) / n).sqrt() + 3 / n
    assert not bad.any(), (
        f"{what}: the sampled frequencies of tokens {bad.nonzero().flatten().tolist()[:5]} "
        f"differ from the distribution these options give ({n} draws)"
    )


def rate(count: int, n: int, p: float, what: str, sigmas: float = 5.0) -> None:
    assert n > 0 and abs(count / n - p) <= sigmas * (p * (1 - p) / n) ** 0.5 + 1 / n, (
        f"{what}: {count} of {n} ({count / max(n, 1):.4f}), which is too far from the rule's "
        "probability"
    )


# --------------------------------------------------------------------------------------------
# BPE (4)
# --------------------------------------------------------------------------------------------


def random_text(rng: torch.Generator, length: int) -> str:
    """Words from a mixed alphabet: ASCII, accents, CJK, emoji, digits, punctuation, whitespace."""
    alphabet = list("aaabcdeeefghiilmnoorsttu") + list("éüñ日本🦊🙂") + list("0123456789.,!?-'")
    words: list[str] = []
    while sum(len(w) for w in words) < length:
        words.append(
            "".join(alphabet[draw(rng, 0, len(alphabet) - 1)] for _ in range(draw(rng, 1, 7)))
        )
        words.append([" ", " ", " ", "  ", "\n", "\t", " \n"][draw(rng, 0, 6)])
    return "".join(words)


def learned(text: str, n: int) -> list[tuple[int, int]]:
    counts = Counter(pretokenize(text))
    words = [list(w.encode("utf-8")) for w in counts]
    return learn_merges(words, list(counts.values()), num_merges=n, first_id=256)


@pytest.mark.points(1, cell="check_bpe_encode")
@pytest.mark.forbid(*BOOK_BPE)
def test_bpe_encode_corpus_merges(student, rng):
    merges = corpus_merges(draw(rng, 40, 120))
    sentences = generate_corpus(5, seed=draw(rng, 0, 10**6))
    text = " ".join(sentences) + " " + random_text(rng, 40)
    # one more merge: the commonest pair of tokens that meet where one pre-token ends and the
    # next begins (merges never cross pre-tokens: an encoding of the whole text would apply it)
    pieces = [key.bpe_encode(piece, merges) for piece in pretokenize(text)]
    boundaries = Counter((a[-1], b[0]) for a, b in zip(pieces, pieces[1:]))
    merges = [*merges, boundaries.most_common(1)[0][0]]
    got = as_ids(student.bpe_encode(text, merges), "bpe_encode")
    assert got == key.bpe_encode(text, merges), (
        f"bpe_encode of corpus sentences and mixed text with {len(merges)} merges differs from "
        "the reference (apply the merges in the order learned, inside each pre-token)"
    )


@pytest.mark.points(1, cell="check_bpe_encode")
@pytest.mark.forbid(*BOOK_BPE)
def test_bpe_encode_merges_learned_on_mixed_text(student, rng):
    merges = learned(random_text(rng, 600), draw(rng, 30, 80))
    text = random_text(rng, 200)
    got = as_ids(student.bpe_encode(text, merges), "bpe_encode")
    assert got == key.bpe_encode(text, merges), (
        "bpe_encode of new text (accents, CJK, emoji, digits, whitespace) with merges learned "
        "on other text differs from the reference"
    )


@pytest.mark.points(1, cell="check_bpe_decode")
@pytest.mark.forbid(*BOOK_BPE)
def test_bpe_decode_round_trip(student, rng):
    merges = learned(random_text(rng, 600), draw(rng, 30, 80))
    text = random_text(rng, 200)
    ids = key.bpe_encode(text, merges)
    got = student.bpe_decode(ids, merges)
    assert got == text, "bpe_decode(bpe_encode(text)) does not give the text back"


@pytest.mark.points(1, cell="check_bpe_decode")
@pytest.mark.forbid(*BOOK_BPE)
def test_bpe_decode_cut_characters(student, rng):
    merges = learned(random_text(rng, 600), draw(rng, 20, 60))
    emoji = list("🦊".encode())
    ids = key.bpe_encode(random_text(rng, 30), merges)
    accent = list("é".encode())  # two byte ids: one character only once joined
    ids = ids + accent + emoji[: draw(rng, 1, 3)] + [32] + key.bpe_encode("日本", merges)[:1]
    got = student.bpe_decode(ids, merges)
    assert got == key.bpe_decode(ids, merges), (
        "bpe_decode of ids that cut characters in half: join all the bytes, then decode once as "
        "UTF-8 with errors='replace'"
    )


# --------------------------------------------------------------------------------------------
# WordPiece (5)
# --------------------------------------------------------------------------------------------


def wp_setup(rng: torch.Generator, letters: str = "abcde"):
    """A vocabulary of short pieces (some with ##) and words over a small alphabet."""
    pieces = {"[UNK]", "[PAD]"}
    for _ in range(draw(rng, 15, 40)):
        n = draw(rng, 1, 4)
        piece = "".join(letters[draw(rng, 0, len(letters) - 1)] for _ in range(n))
        pieces.add(piece if draw(rng, 0, 2) == 0 else "##" + piece)
    for c in letters[:-1]:  # most single letters, so that most words are encodable
        pieces.update({c, "##" + c})
    order = sorted(pieces)
    perm = torch.randperm(len(order), generator=rng).tolist()
    vocab = {order[i]: j for j, i in enumerate(perm)}
    return vocab


def wp_text(rng: torch.Generator, letters: str = "abcde", words: int = 30) -> str:
    out = []
    for _ in range(words):
        out.append("".join(letters[draw(rng, 0, len(letters) - 1)] for _ in range(draw(rng, 1, 8))))
        out.append([" ", " ", "  ", "\n", "\t"][draw(rng, 0, 4)])
    return "".join(out)


def unknown_word(rng: torch.Generator) -> str:
    """A word that no vocabulary of ``wp_setup`` covers: covered letters, then a 'z'."""
    return "".join("abcd"[draw(rng, 0, 3)] for _ in range(draw(rng, 1, 4))) + "z"


@pytest.mark.points(2, cell="check_wordpiece_encode")
@pytest.mark.forbid(*HF_TOKENIZERS)
def test_wordpiece_random_vocabularies(student, rng):
    for _ in range(3):
        vocab = wp_setup(rng)
        # one word no pieces cover, under every name (the drawn words may all be covered)
        text = wp_text(rng) + unknown_word(rng) + " " + wp_text(rng, words=5)
        got = as_ids(student.wordpiece_encode(text, vocab), "wordpiece_encode")
        assert got == key.wordpiece_encode(text, vocab), (
            f"wordpiece_encode of {len(text.split())} words with a vocabulary of {len(vocab)} "
            "entries differs from the reference (longest match first, ## on continuations)"
        )


@pytest.mark.points(1, cell="check_wordpiece_encode")
@pytest.mark.forbid(*HF_TOKENIZERS)
def test_wordpiece_unknown_words(student, rng):
    vocab = wp_setup(rng)
    # no entry but "e" holds an 'e': a word with an 'e' after its first letter is [UNK]
    vocab = {p: i for p, i in vocab.items() if "e" not in p or p == "e"}
    vocab = {p: i for i, p in enumerate(sorted(vocab))}
    text = wp_text(rng) + " abce dae e " + wp_text(rng, words=5)
    got = as_ids(student.wordpiece_encode(text, vocab), "wordpiece_encode")
    want = key.wordpiece_encode(text, vocab)
    assert got == want, (
        "wordpiece_encode of words some of which no pieces can cover: such a word is ONE [UNK] "
        "(the pieces matched before the failure are dropped)"
    )


@pytest.mark.points(1, cell="check_wordpiece_encode")
@pytest.mark.forbid(*HF_TOKENIZERS)
def test_wordpiece_longest_match_is_greedy(student, rng):
    n = draw(rng, 3, 6)
    # 'a' * n: the longest first piece wins even when a shorter one would leave a better rest
    vocab = {"[UNK]": 0, "a" * n: 1, "a": 2, "##a": 3, "a" * (n - 1): 4, "##" + "a" * 2: 5}
    text = " ".join("a" * draw(rng, 1, 2 * n) for _ in range(8))
    got = as_ids(student.wordpiece_encode(text, vocab), "wordpiece_encode")
    assert got == key.wordpiece_encode(text, vocab), (
        "wordpiece_encode of words of repeated letters: take the LONGEST entry at each position, "
        "first pieces without ##, continuations with it"
    )


@pytest.mark.points(1, cell="check_wordpiece_encode")
@pytest.mark.forbid(*HF_TOKENIZERS)
def test_wordpiece_other_unk_token_and_whitespace(student, rng):
    vocab = wp_setup(rng)
    vocab["<unk>"] = vocab.pop("[UNK]")
    text = "\n\t " + wp_text(rng, words=12) + unknown_word(rng) + "  \n"
    got = as_ids(student.wordpiece_encode(text, vocab, unk_token="<unk>"), "wordpiece_encode")
    assert got == key.wordpiece_encode(text, vocab, unk_token="<unk>"), (
        "wordpiece_encode with unk_token='<unk>' and tabs, newlines and runs of spaces differs "
        "from the reference (cut at any whitespace; use the unk_token given)"
    )


# --------------------------------------------------------------------------------------------
# Whole-word masking (6)
# --------------------------------------------------------------------------------------------


def wwm_inputs(rng: torch.Generator, *, B: int = 2000, T: int = 24, V: int | None = None):
    """Rows of words (a start and its ## pieces) around special tokens drawn anywhere in the
    vocabulary; [MASK] itself occurs in the rows, without being listed as special."""
    V = V or draw(rng, 30, 60)
    perm = torch.randperm(V, generator=rng).tolist()
    special, mask_id = perm[:3], perm[3]
    ordinary = torch.tensor(perm[4:])
    ids = ordinary[torch.randint(len(ordinary), (B, T), generator=rng)]
    cls, sep, pad = special
    ids[:, 0] = cls
    ids[:, -1] = sep
    middle = draw(rng, 5, T - 6)
    ids[:, middle] = sep
    ids[torch.rand(B, generator=rng) < 0.3, -4:-1] = pad
    is_special = torch.isin(ids, torch.tensor(special))
    is_subword = (torch.rand(B, T, generator=rng) < 0.45) & ~is_special
    is_subword[:, 1] = False
    is_subword[:, middle + 1] = False
    ids[torch.rand(B, T, generator=rng) < 0.02] = mask_id  # a [MASK] already in the input
    is_subword[ids == mask_id] = False
    after_mask = torch.zeros_like(is_subword)
    after_mask[:, 1:] = ids[:, :-1] == mask_id
    is_subword &= ~after_mask  # a continuation follows a piece of its word
    return dict(ids=ids, is_subword=is_subword, V=V, special=special, mask_id=mask_id)


def run_wwm(student, d: dict, prob: float) -> tuple[Tensor, Tensor]:
    out = student.whole_word_mask.unmodified(
        d["ids"],
        d["is_subword"],
        vocab_size=d["V"],
        mask_id=d["mask_id"],
        special_ids=list(d["special"]),
        prob=prob,
    )
    assert isinstance(out, tuple | list) and len(out) == 2, (
        "whole_word_mask returns (inputs, labels)"
    )
    inputs, labels = out
    for name, t in (("inputs", inputs), ("labels", labels)):
        assert isinstance(t, Tensor) and t.shape == d["ids"].shape, (
            f"the {name} of whole_word_mask should be a tensor shaped like ids (B, T)"
        )
    return inputs.long(), labels.long()


def words_of(d: dict) -> tuple[Tensor, Tensor, Tensor]:
    ids = d["ids"]
    is_special = torch.isin(ids, torch.tensor([*d["special"], d["mask_id"]]))
    starts = ~d["is_subword"] & ~is_special
    word = starts.flatten().long().cumsum(0).view(ids.shape) - 1
    return is_special, word, starts


@pytest.mark.points(1, cell="check_whole_word_mask")
def test_whole_words_and_special_tokens(student, rng):
    d = wwm_inputs(rng)
    inputs, labels = run_wwm(student, d, 0.4)
    ids = d["ids"]
    is_special, word, starts = words_of(d)
    chosen = labels != -100
    assert not (chosen & is_special).any() and torch.equal(inputs[is_special], ids[is_special]), (
        "a special token (one of special_ids, or mask_id itself) was chosen or changed"
    )
    pieces = ~is_special
    n = int(starts.sum())
    count = torch.zeros(n, dtype=torch.float64).index_add_(0, word[pieces], chosen[pieces].double())
    size = torch.zeros(n, dtype=torch.float64).index_add_(
        0, word[pieces], torch.ones(int(pieces.sum()), dtype=torch.float64)
    )
    assert not ((count > 0) & (count < size)).any(), (
        "some words were chosen in part: a chosen word has all its tokens chosen"
    )


@pytest.mark.points(1, cell="check_whole_word_mask")
def test_words_are_chosen_with_probability_prob(student, rng):
    d = wwm_inputs(rng)
    prob = float(torch.empty(()).uniform_(0.1, 0.5, generator=rng))
    _, labels = run_wwm(student, d, prob)
    is_special, word, starts = words_of(d)
    chosen_start = (labels != -100) & starts
    rate(int(chosen_start.sum()), int(starts.sum()), prob, f"the words chosen with prob={prob:.3f}")
    inputs, labels = student.whole_word_mask.unmodified(  # prob left at its default, 0.15
        d["ids"], d["is_subword"], vocab_size=d["V"], mask_id=d["mask_id"],
        special_ids=list(d["special"]),
    )  # fmt: skip
    chosen_start = (torch.as_tensor(labels).long() != -100) & starts
    rate(int(chosen_start.sum()), int(starts.sum()), 0.15, "the words chosen with the default prob")


@pytest.mark.points(1, cell="check_whole_word_mask")
def test_chosen_tokens_split_80_10_10(student, rng):
    d = wwm_inputs(rng, B=4000, T=40, V=draw(rng, 10, 12))
    inputs, labels = run_wwm(student, d, 0.5)
    ids = d["ids"]
    chosen = labels != -100
    n = int(chosen.sum())
    K = d["V"] - 4  # the ordinary ids a random replacement may take
    rate(
        int((inputs[chosen] == d["mask_id"]).sum()), n, 0.8, "the chosen tokens that became [MASK]"
    )
    rate(
        int((inputs[chosen] == ids[chosen]).sum()),
        n,
        0.1 + 0.1 / K,
        "the chosen tokens left as they are (10 %, plus the random ones that drew themselves)",
    )


@pytest.mark.points(1, cell="check_whole_word_mask")
def test_the_80_10_10_decision_is_per_token(student, rng):
    d = wwm_inputs(rng, B=4000, T=30)
    inputs, labels = run_wwm(student, d, 0.5)
    is_special, word, starts = words_of(d)
    pieces = ~is_special
    n = int(starts.sum())
    ones = torch.ones(int(pieces.sum()), dtype=torch.float64)
    size = torch.zeros(n, dtype=torch.float64).index_add_(0, word[pieces], ones)
    chosen = torch.zeros(n, dtype=torch.float64).index_add_(
        0, word[pieces], (labels[pieces] != -100).double()
    )
    masked = torch.zeros(n, dtype=torch.float64).index_add_(
        0, word[pieces], (inputs[pieces] == d["mask_id"]).double()
    )
    two = (size == 2) & (chosen == 2)
    rate(
        int((masked[two] == 2).sum()),
        int(two.sum()),
        0.64,
        "the chosen two-piece words with both pieces [MASK] (0.8 x 0.8: one decision per token)",
    )


@pytest.mark.points(1, cell="check_whole_word_mask")
def test_random_replacements_are_uniform_over_ordinary_ids(student, rng):
    d = wwm_inputs(rng, B=4000, T=40, V=draw(rng, 10, 14))
    inputs, labels = run_wwm(student, d, 0.6)
    ids = d["ids"]
    chosen = labels != -100
    other = chosen & (inputs != d["mask_id"]) & (inputs != ids)
    special = torch.tensor([*d["special"], d["mask_id"]])
    assert not torch.isin(inputs[other], special).any(), (
        "a random replacement took a special id (or mask_id)"
    )
    ordinary = [i for i in range(d["V"]) if i not in special.tolist()]
    got = torch.bincount(inputs[other], minlength=d["V"])[ordinary]
    m = int(got.sum())
    for i, c in zip(ordinary, got.tolist()):
        # a replacement is uniform over the K ordinary ids, minus the original token itself
        assert c > 0, f"the random replacements never drew the ordinary id {i}"
    expected = m / len(ordinary)
    spread = (got.double() - expected).abs().max().item()
    assert spread <= 6 * expected**0.5 + 0.2 * expected, (
        "the random replacements are not uniform over the ordinary ids"
    )


@pytest.mark.points(1, cell="check_whole_word_mask")
def test_labels_and_the_generator(student, rng):
    d = wwm_inputs(rng, B=300)
    inputs, labels = run_wwm(student, d, 0.4)
    ids = d["ids"]
    chosen = labels != -100
    assert torch.equal(labels[chosen], ids[chosen]), "the labels at chosen positions are the ids"
    assert not ((inputs != ids) & ~chosen).any(), "a token changed without a label"
    seed = draw(rng, 0, 10**6)
    runs = []
    for _ in range(2):
        g = student.build("torch.Generator")
        g.manual_seed(seed)
        out = student.whole_word_mask(
            d["ids"],
            d["is_subword"],
            vocab_size=d["V"],
            mask_id=d["mask_id"],
            special_ids=list(d["special"]),
            prob=0.4,
            generator=g,
        )
        runs.append(out[0])
    assert torch.equal(runs[0], runs[1]), (
        "two calls with generators seeded alike gave different inputs: draw every random number "
        "from generator"
    )


# --------------------------------------------------------------------------------------------
# Segments (1)
# --------------------------------------------------------------------------------------------


@pytest.mark.points(1, cell="check_segment_ids")
def test_segment_ids(student, rng):
    B, T = draw(rng, 3, 6), draw(rng, 8, 16)
    sep, pad = draw(rng, 1, 5), 0
    ids = torch.randint(6, 30, (B, T), generator=rng)
    for b in range(B):
        n = draw(rng, 4, T)
        first = draw(rng, 1, n - 2)
        ids[b, first] = sep
        if b % 3 != 2:  # some rows have one [SEP] only
            ids[b, n - 1] = sep
        ids[b, n:] = pad
    got = student.segment_ids.unmodified(ids, sep_id=sep, pad_id=pad)
    assert isinstance(got, Tensor) and got.shape == ids.shape, "segment_ids returns (B, T)"
    assert torch.equal(got.long(), key.segment_ids(ids, sep_id=sep, pad_id=pad)), (
        "segment_ids differs from the reference on pairs, single segments and padding"
    )


# --------------------------------------------------------------------------------------------
# Grouped-query attention (8) and its cache (5)
# --------------------------------------------------------------------------------------------


def gqa_pair(student, rng, *, H=None, G=None):
    # by default a real grouping, 1 < G < H: at G = 1 or G = H every assignment of query heads to
    # key/value heads is the same, so a mistake in it would lose points under some names only
    # (test_gqa_multi_query_and_multi_head grades G = 1 and G = H, under every name)
    if H is None:
        G = G or draw(rng, 2, 3)
        H = G * draw(rng, 2, 3)
    D = draw(rng, 2, 4)
    sizes = dict(n_embd=H * D, n_head=H, n_kv_head=G)
    ref = key.GroupedCausalSelfAttention(**sizes).double()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(0.6 * torch.randn(p.shape, generator=rng, dtype=p.dtype))
    ref.eval()
    mine = student.GroupedCausalSelfAttention(**sizes)
    mine.double()  # float64 on both sides: rounding never decides (scores reach about 80)
    mine.load_state_dict(ref.state_dict())
    mine.eval()
    return ref, mine, sizes


def unpack(out, what: str):
    assert isinstance(out, tuple | list) and len(out) == 2, f"{what} returns (y, (k, v))"
    y, kv = out
    assert isinstance(kv, tuple | list) and len(kv) == 2, f"{what}: the second output is (k, v)"
    return y, tuple(kv)


def x_for(rng, sizes, B=None, T=None):
    B = B or draw(rng, 1, 3)
    T = T or draw(rng, 2, 8)
    return torch.randn(B, T, sizes["n_embd"], generator=rng, dtype=torch.float64)


@pytest.mark.points(2, cell="check_grouped_attention")
@pytest.mark.forbid(*ATTENTION)
def test_gqa_values(student, rng):
    ref, mine, sizes = gqa_pair(student, rng)
    x = x_for(rng, sizes)
    with torch.no_grad():
        want, _ = ref(x)
    y, _ = unpack(mine(x), "GroupedCausalSelfAttention(x)")
    check_close(
        y,
        want,
        name=f"GroupedCausalSelfAttention(x) with H={sizes['n_head']}, G={sizes['n_kv_head']}",
        atol=1e-5,
    )


@pytest.mark.points(2, cell="check_grouped_attention")
@pytest.mark.forbid(*ATTENTION)
def test_gqa_consecutive_query_heads_share_a_group(student, rng):
    G = draw(rng, 2, 3)
    ref, mine, sizes = gqa_pair(student, rng, H=G * draw(rng, 2, 3), G=G)
    x = x_for(rng, sizes)
    with torch.no_grad():
        want, _ = ref(x)
    y, _ = unpack(mine(x), "GroupedCausalSelfAttention(x)")
    check_close(
        y,
        want,
        name=f"the output with H={sizes['n_head']} query heads in G={G} groups "
        "(query head h reads key/value head h // (H / G))",
        atol=1e-5,
    )


@pytest.mark.points(1, cell="check_grouped_attention")
@pytest.mark.forbid(*ATTENTION)
def test_gqa_multi_query_and_multi_head(student, rng):
    H = draw(rng, 2, 4)
    for G in (1, H):
        ref, mine, sizes = gqa_pair(student, rng, H=H, G=G)
        x = x_for(rng, sizes)
        with torch.no_grad():
            want, _ = ref(x)
        y, _ = unpack(mine(x), "GroupedCausalSelfAttention(x)")
        check_close(y, want, name=f"the output with n_kv_head={G}, n_head={H}", atol=1e-5)


@pytest.mark.points(1, cell="check_grouped_attention")
@pytest.mark.forbid(*ATTENTION)
def test_gqa_returns_the_grouped_keys_and_values(student, rng):
    ref, mine, sizes = gqa_pair(student, rng)
    x = x_for(rng, sizes)
    with torch.no_grad():
        _, (k, v) = ref(x)
    _, (mk, mv) = unpack(mine(x), "GroupedCausalSelfAttention(x)")
    check_close(mk, k, name="the returned keys (B, G, S, D)", atol=1e-5)
    check_close(mv, v, name="the returned values (B, G, S, D)", atol=1e-5)


@pytest.mark.points(1, cell="check_grouped_attention")
@pytest.mark.forbid(*ATTENTION)
def test_gqa_is_causal(student, rng):
    _, mine, sizes = gqa_pair(student, rng)
    x = x_for(rng, sizes, T=draw(rng, 4, 8))
    t = draw(rng, 1, x.shape[1] - 1)
    changed = x.clone()
    changed[:, t:] = torch.randn(changed[:, t:].shape, generator=rng, dtype=x.dtype) * 2
    first, _ = unpack(mine(x), "GroupedCausalSelfAttention(x)")
    second, _ = unpack(mine(changed), "GroupedCausalSelfAttention(x)")
    check_close(
        second[:, :t],
        first[:, :t],
        name=f"the outputs before position {t} when later tokens change",
        atol=1e-5,
    )
    assert not torch.allclose(second[:, t:], first[:, t:], atol=1e-5), (
        "changing tokens did not change the outputs at their own positions"
    )


@pytest.mark.points(1, cell="check_grouped_attention")
@pytest.mark.forbid(*ATTENTION)
def test_gqa_gradients(student, rng):
    ref, mine, sizes = gqa_pair(student, rng)
    mine.train()
    x = x_for(rng, sizes)
    dy = torch.randn(x.shape, generator=rng, dtype=x.dtype)
    got = mine.backward(x, grad_output=dy)
    leaf = x.clone().requires_grad_(True)
    ref(leaf)[0].backward(dy)
    check_close(got.inputs[0], leaf.grad, name="the gradient with respect to x", atol=1e-4)
    for name, p in ref.named_parameters():
        assert got.params.get(name) is not None, f"no gradient reached {name}"
        check_close(got.params[name], p.grad, name=f"the gradient of {name}", atol=1e-4)


def in_pieces(mine, x: Tensor, cuts: list[int]):
    past, ys = None, []
    for start, end in zip([0, *cuts], [*cuts, x.shape[1]]):
        y, past = unpack(mine(x[:, start:end], past), "GroupedCausalSelfAttention(x, past_kv)")
        ys.append(y)
    return torch.cat(ys, dim=1), past


@pytest.mark.points(2, cell="check_kv_cache")
@pytest.mark.forbid(*ATTENTION)
def test_cache_one_token_at_a_time(student, rng):
    ref, mine, sizes = gqa_pair(student, rng)
    x = x_for(rng, sizes, T=draw(rng, 4, 9))
    with torch.no_grad():
        want, _ = ref(x)
    got, _ = in_pieces(mine, x, list(range(1, x.shape[1])))
    check_close(
        got, want, name="the outputs computed one token at a time with the cache", atol=1e-5
    )


@pytest.mark.points(2, cell="check_kv_cache")
@pytest.mark.forbid(*ATTENTION)
def test_cache_in_chunks(student, rng):
    ref, mine, sizes = gqa_pair(student, rng)
    T = draw(rng, 8, 12)
    x = x_for(rng, sizes, T=T)
    first = draw(rng, 1, T - 6)
    second = draw(rng, first + 2, T - 3)  # a chunk of at least 2 tokens after a cache
    cuts = [first, second, draw(rng, second + 2, T - 1)]
    with torch.no_grad():
        want, _ = ref(x)
    got, _ = in_pieces(mine, x, cuts)
    check_close(
        got, want, name=f"the outputs computed in chunks (cut at {cuts}) with the cache", atol=1e-5
    )


@pytest.mark.points(1, cell="check_kv_cache")
@pytest.mark.forbid(*ATTENTION)
def test_cache_holds_the_grouped_heads_of_every_token(student, rng):
    ref, mine, sizes = gqa_pair(student, rng)
    T = draw(rng, 5, 9)
    x = x_for(rng, sizes, T=T)
    with torch.no_grad():
        _, (k, v) = ref(x)
    _, (mk, mv) = in_pieces(mine, x, [draw(rng, 1, T - 3), T - 1])
    check_close(
        mk, k, name="the cached keys after all tokens, fed in pieces (B, G, S, D)", atol=1e-5
    )
    check_close(mv, v, name="the cached values after all tokens, fed in pieces", atol=1e-5)


# --------------------------------------------------------------------------------------------
# min-p (3), repetition penalty (3)
# --------------------------------------------------------------------------------------------


def same_filter(got: object, want: Tensor, what: str) -> None:
    assert isinstance(got, Tensor) and tuple(got.shape) == tuple(want.shape), (
        f"{what} should return a tensor shaped like the logits"
    )
    kept = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), kept), f"{what} does not keep the right tokens"
    assert torch.equal(got[kept], want[kept]), f"{what} changed the values of the kept logits"
    assert (got[~kept] == float("-inf")).all(), f"{what}: filtered logits must be -inf"


def min_p_on_logits(logits: Tensor, min_p: float) -> Tensor:
    """The usual mistake of comparing the logits, not the probabilities, with min_p times the
    largest: the tests draw inputs where it keeps other tokens."""
    return logits.masked_fill(logits < min_p * logits.amax(-1, keepdim=True), float("-inf"))


def min_p_inputs(rng, shape):
    """Logits whose probabilities stay clear of the threshold (no ties at the boundary), where
    comparing the logits instead keeps other tokens, and where an absolute threshold
    (``probs >= min_p``, without scaling by the top probability) drops a token the rule keeps,
    clear of rounding: both mistakes cost the same under every name (the absolute threshold
    passed under 2 names of 20 when a draw had no such token)."""
    while True:
        logits = torch.randn(*shape, generator=rng) * 2
        mp = float(torch.empty(()).uniform_(0.02, 0.5, generator=rng))
        probs = logits.double().softmax(-1)
        ratio = probs / probs.amax(-1, keepdim=True)
        on_logits = torch.isfinite(min_p_on_logits(logits, mp))
        absolute = ((ratio > mp + 1e-4) & (probs < mp - 1e-4)).any()
        clear = ((ratio - mp).abs() > 1e-4).all()
        if clear and absolute and not torch.equal(on_logits, ratio >= mp):
            return logits, mp


@pytest.mark.points(1, cell="check_min_p_filter")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_min_p(student, rng):
    logits, mp = min_p_inputs(rng, (draw(rng, 1, 4), draw(rng, 5, 30)))
    got = student.min_p_filter.unmodified(logits, mp)
    same_filter(got, key.min_p_filter(logits, mp), f"min_p_filter(logits, min_p={mp:.3f})")


@pytest.mark.points(1, cell="check_min_p_filter")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_min_p_any_shape(student, rng):
    for shape in ((draw(rng, 5, 20),), (2, 3, draw(rng, 5, 20))):
        logits, mp = min_p_inputs(rng, shape)
        got = student.min_p_filter.unmodified(logits, mp)
        same_filter(
            got,
            key.min_p_filter(logits, mp),
            f"min_p_filter(logits of shape {shape}, min_p={mp:.3f})",
        )


@pytest.mark.points(1, cell="check_min_p_filter")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_min_p_extremes(student, rng):
    V = draw(rng, 5, 20)
    while True:  # no probability within rounding of min_p = 1 (a tie with the top) or of 0.2
        logits = torch.randn(3, V, generator=rng) * 3
        probs = logits.double().softmax(-1)
        ratio = probs / probs.amax(-1, keepdim=True)
        if (((ratio - 0.2).abs() > 1e-4) & ((ratio == 1) | (ratio < 1 - 1e-4))).all():
            break
    every = student.min_p_filter(logits, 0.0)
    same_filter(every, logits, "min_p_filter with min_p=0 (keeps every token)")
    top = student.min_p_filter(logits, 1.0)
    same_filter(
        top,
        key.min_p_filter(logits, 1.0),
        "min_p_filter with min_p=1 (keeps the most probable token)",
    )
    shifted = student.min_p_filter(logits + 7.5, 0.2)
    same_filter(
        shifted,
        key.min_p_filter(logits + 7.5, 0.2),
        "min_p_filter of logits shifted by a constant (the probabilities do not change)",
    )


def penalty_inputs(rng):
    B, V, T = draw(rng, 2, 4), draw(rng, 8, 20), draw(rng, 3, 10)
    logits = torch.randn(B, V, generator=rng) * 2
    prev = torch.randint(V, (B, T), generator=rng)
    prev[:, 1] = prev[:, 0]  # a token seen twice
    theta = float(torch.empty(()).uniform_(1.2, 3.0, generator=rng))
    return logits, prev, theta


@pytest.mark.points(1, cell="check_repetition_penalty")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_repetition_penalty_values(student, rng):
    logits, prev, theta = penalty_inputs(rng)
    got = student.repetition_penalty.unmodified(logits, prev, theta)
    check_close(
        got,
        key.repetition_penalty(logits, prev, theta),
        name=f"repetition_penalty(logits, prev_ids, {theta:.2f})",
        atol=1e-6,
    )


@pytest.mark.points(1, cell="check_repetition_penalty")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_repetition_penalty_signs_and_repeats(student, rng):
    V = draw(rng, 6, 12)
    logits = torch.linspace(-3, 3, V)[None].repeat(2, 1)
    prev = torch.tensor([[0, 0, 0, V - 1, V - 1], [1, V - 2, 1, V - 2, 1]])
    theta = 2.0
    got = student.repetition_penalty.unmodified(logits, prev, theta)
    check_close(
        got,
        key.repetition_penalty(logits, prev, theta),
        name="the penalised logits of tokens seen several times, with negative and "
        "positive logits (divide a positive logit, multiply a negative one, once)",
        atol=1e-6,
    )


@pytest.mark.points(1, cell="check_repetition_penalty")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_repetition_penalty_rows_are_separate(student, rng):
    logits, prev, theta = penalty_inputs(rng)
    prev[0] = prev[0, 0]  # row 0 has seen one token only
    got = student.repetition_penalty.unmodified(logits, prev, theta)
    check_close(
        got,
        key.repetition_penalty(logits, prev, theta),
        name="the penalised logits when the rows have seen different tokens (each row "
        "its own prev_ids)",
        atol=1e-6,
    )
    same = student.repetition_penalty(logits, prev, 1.0)
    check_close(same, logits, name="the logits with penalty=1 (nothing changes)", atol=1e-6)


# --------------------------------------------------------------------------------------------
# sample_next_token (4)
# --------------------------------------------------------------------------------------------


def penalised(logits: Tensor, prev: Tensor, penalty: float, mistake: str | None) -> Tensor:
    """``key.repetition_penalty``, or what one of its usual mistakes (mutants.yml) gives."""
    z = key.repetition_penalty(logits, prev, penalty)
    ones = torch.ones(prev.shape, dtype=logits.dtype)
    times = torch.zeros_like(logits).scatter_add(1, prev.long(), ones)
    seen = times > 0
    if mistake == "penalty_divides_negative_logits":
        z = torch.where(seen, logits / penalty, logits)
    elif mistake == "penalty_inverted":
        z = torch.where(logits > 0, logits * penalty, logits / penalty)
        z = torch.where(seen, z, logits)
    elif mistake == "penalty_per_occurrence":
        factor = penalty**times
        z = torch.where(logits > 0, logits / factor, logits * factor)
    elif mistake == "penalty_left_out":
        z = logits
    return z


# the usual mistakes of sampling (mutants.yml) that a draw must tell apart from the rule
PENALTY_MISTAKES = (
    "penalty_divides_negative_logits",
    "penalty_inverted",
    "penalty_per_occurrence",
    "penalty_left_out",
)
MIN_P_MISTAKES = ("min_p_on_logits", "min_p_absolute", "min_p_left_out", "min_p_first")


def exact(
    logits: Tensor, prev=None, *, temperature=1.0, penalty=1.0, min_p=None, mistake=None
) -> Tensor:
    """The distribution of sample_next_token (or of a usual ``mistake`` in it)."""
    z = logits[None]
    if prev is not None:
        z = penalised(z, prev[None], penalty, mistake)
    if min_p is not None and mistake == "min_p_first":
        z = key.min_p_filter(z, min_p)
    z = z / temperature
    if mistake == "min_p_absolute":  # probabilities compared with min_p itself
        z = z.masked_fill(torch.softmax(z.double(), dim=-1) < min_p, float("-inf"))
    elif mistake == "min_p_on_logits":
        z = min_p_on_logits(z, min_p)
    elif min_p is not None and mistake not in ("min_p_first", "min_p_left_out"):
        z = key.min_p_filter(z, min_p)
    return torch.softmax(z.double(), dim=-1)[0]


def visible(want: Tensor, mistaken: Tensor, n: int) -> bool:
    """Whether ``n`` draws from ``mistaken`` fail ``frequencies_match`` against ``want`` under
    every seed (one token six standard deviations beyond the test's bound, or one that ``want``
    rules out and ``mistaken`` draws about twelve times or more)."""
    sd = lambda p: (p * (1 - p) / n).sqrt()  # noqa: E731
    far = (mistaken - want).abs() > 5 * sd(want) + 3 / n + 6 * sd(mistaken)
    impossible = (want == 0) & (mistaken * n > 12)
    return bool((far | impossible).any())


def tells_apart(n: int, mistakes, **inputs) -> bool:
    """Whether ``n`` draws with ``exact(**inputs)`` tell the rule from each of ``mistakes``."""
    want = exact(**inputs)
    return all(visible(want, exact(**inputs, mistake=m), n) for m in mistakes)


def sample(student, rng, logits, prev=None, **options):
    V = logits.numel()
    rows = logits.expand(DRAWS, V).clone()
    prev_rows = None if prev is None else prev.expand(DRAWS, prev.numel()).clone()
    return student.sample_next_token.unmodified(rows, prev_rows, **options)


@pytest.mark.points(0.5, cell="check_sample_next_token")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_sample_temperature(student, rng):
    for temperature in (0.5, 1.8):
        logits = torch.randn(draw(rng, 6, 15), generator=rng) * 1.5
        ids = sample(student, rng, logits, temperature=temperature)
        frequencies_match(
            ids,
            exact(logits, temperature=temperature),
            f"sample_next_token(temperature={temperature})",
        )


@pytest.mark.points(1, cell="check_sample_next_token")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_sample_min_p_after_the_temperature(student, rng):
    while True:  # logits where min-p before the temperature (or on logits) draws otherwise
        logits = torch.randn(draw(rng, 6, 15), generator=rng) * 1.5
        t, mp = 1.8, float(torch.empty(()).uniform_(0.1, 0.4, generator=rng))
        if tells_apart(DRAWS, MIN_P_MISTAKES, logits=logits, temperature=t, min_p=mp):
            break
    ids = sample(student, rng, logits, temperature=t, min_p=mp)
    frequencies_match(
        ids,
        exact(logits, temperature=t, min_p=mp),
        f"sample_next_token(temperature={t}, min_p={mp:.3f}) (the temperature first, then min-p)",
    )


@pytest.mark.points(1, cell="check_sample_next_token")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_sample_with_the_penalty(student, rng):
    while True:  # the most likely token seen twice; logits where each usual mistake shows
        V = draw(rng, 6, 15)
        logits = torch.randn(V, generator=rng) * 1.5
        top, bottom = int(logits.argmax()), int(logits.argmin())
        prev = torch.tensor([top, bottom, draw(rng, 0, V - 1), top])
        theta = float(torch.empty(()).uniform_(1.5, 3.0, generator=rng))
        if tells_apart(DRAWS, PENALTY_MISTAKES, logits=logits, prev=prev, penalty=theta):
            break
    ids = sample(student, rng, logits, prev, penalty=theta)
    frequencies_match(
        ids, exact(logits, prev, penalty=theta), f"sample_next_token(prev_ids, penalty={theta:.2f})"
    )


@pytest.mark.points(1, cell="check_sample_next_token")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_sample_all_together_row_by_row(student, rng):
    theta, t, mp = 2.5, 0.8, 0.05
    while True:  # logits where each usual mistake shows in one of the two rows
        V = draw(rng, 6, 12)
        logits = torch.randn(2, V, generator=rng) * 1.5
        prev = torch.stack([logits[0].topk(2).indices, logits[1].topk(2).indices.flip(0)])
        prev[1, 0] = int(logits[1].argmin())
        options = dict(temperature=t, penalty=theta, min_p=mp)
        if all(
            any(
                tells_apart(DRAWS // 2, [m], logits=logits[b], prev=prev[b], **options)
                for b in range(2)
            )
            for m in PENALTY_MISTAKES + MIN_P_MISTAKES
            if m != "penalty_per_occurrence"  # no token is seen twice here
        ):
            break
    rows = logits.repeat_interleave(DRAWS // 2, dim=0)
    prev_rows = prev.repeat_interleave(DRAWS // 2, dim=0)
    ids = student.sample_next_token.unmodified(
        rows, prev_rows, temperature=t, penalty=theta, min_p=mp
    )
    assert isinstance(ids, Tensor) and tuple(ids.shape) == (DRAWS, 1), (
        "sample_next_token returns one id per row, (B, 1)"
    )
    for b in range(2):
        part = ids[b * (DRAWS // 2) : (b + 1) * (DRAWS // 2)]
        frequencies_match(
            part,
            exact(logits[b], prev[b], temperature=t, penalty=theta, min_p=mp),
            f"sample_next_token(penalty={theta}, temperature={t}, min_p={mp}) "
            f"in row block {b} (each row its own logits and prev_ids)",
        )


def same_draws(student, call, what: str, seed: int) -> None:
    """``call(generator)`` twice with generators seeded ``seed`` gives the same ids, and once with
    another seed other ids: the draws come from ``generator``, not from the global random state
    (which the worker keeps, and which moves between the calls)."""
    runs = []
    for s in (seed, seed, seed + 1):
        g = student.build("torch.Generator")
        g.manual_seed(s)
        runs.append(call(g))
    assert all(isinstance(r, Tensor) and r.shape == runs[0].shape for r in runs), (
        f"{what} should return tensors of the same shape for the same inputs"
    )
    assert torch.equal(runs[0], runs[1]), (
        f"two calls of {what} with generators seeded alike gave different ids: sample with "
        "torch.multinomial and generator (draw every random number from generator)"
    )
    assert not torch.equal(runs[0], runs[2]), (
        f"calls of {what} with generators seeded differently gave the same ids: sample from "
        "generator, not from a fixed seed or the global random state"
    )


@pytest.mark.points(0.5, cell="check_sample_next_token")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_sample_uses_the_generator(student, rng):
    V = draw(rng, 6, 15)
    logits = (torch.randn(V, generator=rng) * 0.5).expand(300, V).clone()  # no certain draw
    # no penalty and no min-p: this test grades the generator only
    same_draws(
        student,
        lambda g: student.sample_next_token(logits, temperature=1.3, generator=g),
        "sample_next_token(logits, prev_ids, ..., generator=g)",
        draw(rng, 0, 10**6),
    )


# --------------------------------------------------------------------------------------------
# generate (3), with the book's GPT
# --------------------------------------------------------------------------------------------


def gpt_ref(rng):
    """The book's GPT with drawn weights (float64) and its sizes."""
    from course_lib.models import create

    sizes = dict(
        vocab_size=draw(rng, 10, 20),
        block_size=draw(rng, 10, 16),
        n_layer=1,
        n_head=2,
        n_embd=2 * draw(rng, 2, 4),
        fused_attn=False,
    )
    ref = create("gpt-tiny", **sizes).double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=rng, dtype=p.dtype) * 0.8)
    return ref, sizes


def gpt_setup(student, rng, ref_and_sizes=None):
    """The book's GPT with drawn weights: ``ref`` here and the same in the worker (float64)."""
    ref, sizes = ref_and_sizes or gpt_ref(rng)
    factory = student.build("course_lib.models.gpt.PRESETS.get", "gpt-tiny")
    mine = factory(**sizes)
    mine.double()
    mine.load_state_dict(ref.state_dict())
    mine.eval()
    return ref, mine, sizes


@torch.no_grad()
def greedy(ref, prompt: Tensor, new: int, penalty: float, mistake: str | None = None) -> Tensor:
    """Greedy generation without a cache (with a usual ``mistake`` in the penalty)."""
    idx = prompt
    for _ in range(new):
        last = penalised(ref(idx)[:, -1], idx, penalty, mistake)  # (B, V)
        idx = torch.cat([idx, last.argmax(-1, keepdim=True)], dim=1)
    return idx


@pytest.mark.points(1, cell="check_generate")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_generate_greedy_with_the_penalty(student, rng):
    while True:  # weights and prompts where the usual penalty mistakes change the tokens
        ref, sizes = gpt_ref(rng)
        T = draw(rng, 2, 5)
        new = sizes["block_size"] - T - draw(rng, 0, 2)
        prompt = torch.randint(sizes["vocab_size"], (draw(rng, 2, 3), T), generator=rng)
        theta = float(torch.empty(()).uniform_(2.0, 4.0, generator=rng))
        want = greedy(ref, prompt, new, theta)
        mistakes = ("penalty_inverted", "penalty_per_occurrence", "penalty_left_out")
        if all(not torch.equal(greedy(ref, prompt, new, theta, m), want) for m in mistakes):
            break
    ref, mine, sizes = gpt_setup(student, rng, (ref, sizes))
    want = key.generate(ref, prompt, new, greedy=True, penalty=theta)
    got = student.generate.unmodified(mine, prompt, new, greedy=True, penalty=theta)
    assert isinstance(got, Tensor) and tuple(got.shape) == tuple(want.shape), (
        "generate should return the prompts followed by the new tokens, (B, T + max_new_tokens)"
    )
    assert torch.equal(got.long(), want), (
        f"greedy generation of {new} tokens with penalty={theta:.2f} differs from the reference "
        "(penalise every token already in the row, the prompt's and the generated ones)"
    )


@pytest.mark.points(1, cell="check_generate")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_generate_samples_with_the_options(student, rng):
    t, theta, n = 1.4, 2.0, 8000
    found = False
    while not found:  # weights and a prompt (a token seen twice) where each usual mistake shows
        ref, sizes = gpt_ref(rng)
        for _ in range(10):
            prompt = torch.randint(sizes["vocab_size"], (1, draw(rng, 2, 5)), generator=rng)
            prompt[0, -1] = prompt[0, 0]
            with torch.no_grad():
                last = ref(prompt)[0, -1]
            # min-p between the second most likely token's probability p2 and p2 / p_max: min-p
            # keeps that token and a threshold that is not scaled by p_max removes it, under
            # every name (a fixed min_p = 0.05 told them apart only when a token fell between)
            top2 = exact(last, prompt[0], temperature=t, penalty=theta).topk(2).values
            mp = round(float(top2[1] / top2[0].sqrt()), 4)
            options = dict(temperature=t, penalty=theta, min_p=mp)
            # (min-p's threshold above shows min_p_absolute and min_p_left_out)
            mistakes = PENALTY_MISTAKES + ("min_p_on_logits", "min_p_first")
            found = tells_apart(n, mistakes, logits=last, prev=prompt[0], **options)
            if found:
                break
    ref, mine, sizes = gpt_setup(student, rng, (ref, sizes))
    got = student.generate(
        mine, prompt.expand(n, -1).clone(), 2, temperature=t, penalty=theta, min_p=mp
    )
    assert isinstance(got, Tensor) and tuple(got.shape) == (n, prompt.shape[1] + 2), (
        "generate should return the prompts followed by the new tokens"
    )
    frequencies_match(
        got[:, -2:-1],
        exact(last, prompt[0], temperature=t, penalty=theta, min_p=mp),
        f"the first token of generate(..., temperature={t}, penalty={theta}, "
        f"min_p={mp}) (pass the prompt and the options on)",
    )
    # a temperature at which 200 rows drawn twice agree by chance with probability < 1e-9
    hot = next(
        h
        for h in (2.0, 8.0, 50.0, 1e4)
        if 200 * math.log(float((exact(last, temperature=h) ** 2).sum())) < math.log(1e-9)
    )
    prompts = prompt.expand(200, -1).clone()
    same_draws(
        student,
        lambda g: student.generate(mine, prompts, 2, temperature=hot, generator=g),
        "generate(..., generator=g) (pass generator on to sample_next_token)",
        draw(rng, 0, 10**6),
    )


@pytest.mark.points(1, cell="check_generate")
@pytest.mark.forbid(*BOOK_SAMPLING)
def test_generate_up_to_block_size_and_no_further(student, rng):
    ref, mine, sizes = gpt_setup(student, rng)
    prompt = torch.randint(sizes["vocab_size"], (2, draw(rng, 2, 5)), generator=rng)
    new = sizes["block_size"] - prompt.shape[1]
    want = key.generate(ref, prompt, new, greedy=True)
    got = student.generate(mine, prompt, new, greedy=True)
    assert isinstance(got, Tensor) and torch.equal(got.long(), want), (
        "greedy generation up to exactly block_size tokens differs from the reference"
    )
    error = raised(lambda: student.generate(mine, prompt, new + 1, greedy=True))
    assert error == "ValueError", (
        f"generating {new + 1} tokens after a prompt of {prompt.shape[1]} (block_size="
        f"{sizes['block_size']}) should raise ValueError, "
        f"{'got ' + error if error else 'nothing was raised'}"
    )
