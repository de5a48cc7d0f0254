"""Hidden tests, A4 part 2: BERT's masking, segments and embeddings (11 points).

Masking is graded statistically: tens of thousands of tokens per call, frequencies compared with
15 % and 80 / 10 / 10 within five standard deviations (a correct solution fails with probability
below 1e-5 per test), the seed fixed by the grader. CANARY-HIDDEN-A4-7c2e91d0
"""

from __future__ import annotations

import math

import pytest
import torch
from a4_helpers import close, draw, raised
from torch import Tensor

from course_lib.models import bert as ref_bert

pytestmark = pytest.mark.forbid(
    "course_lib", "course_lib.data.corpus.mask_for_mlm", "course_lib.xlm"
)


def batch_with_specials(rng: torch.Generator, V: int, specials: dict[str, int], B: int, T: int):
    """[CLS] a ... [SEP] b ... [SEP] [PAD] ... rows of ordinary ids drawn uniformly."""
    ordinary = torch.tensor([i for i in range(V) if i not in specials.values()])
    ids = ordinary[torch.randint(len(ordinary), (B, T), generator=rng)]
    for row in range(B):
        length = draw(rng, T // 2, T)
        middle = draw(rng, 2, length - 2)
        ids[row, 0] = specials["cls"]
        ids[row, middle] = specials["sep"]
        ids[row, length - 1] = specials["sep"]
        ids[row, length:] = specials["pad"]
    return ids


def masked_call(student, rng, *, prob: float | None = None, B: int = 128, T: int = 256):
    V = draw(rng, 300, 3000)
    chosen_ids = torch.randperm(V, generator=rng)[:5].tolist()  # specials anywhere in the vocab
    specials = dict(zip(("pad", "cls", "sep", "mask", "unk"), chosen_ids))
    ids = batch_with_specials(rng, V, specials, B, T)
    kwargs = dict(vocab_size=V, mask_id=specials["mask"], special_ids=sorted(specials.values()))
    if prob is not None:
        kwargs["prob"] = prob
    out = student.mask_tokens(ids, **kwargs)
    assert isinstance(out, (tuple, list)) and len(out) == 2, (
        "mask_tokens should return (inputs, labels)"
    )
    inputs, labels = out
    for name, t in (("inputs", inputs), ("labels", labels)):
        assert isinstance(t, Tensor), f"{name} should be a tensor, got {type(t).__name__}"
        assert tuple(t.shape) == tuple(ids.shape), (
            f"{name} has shape {tuple(t.shape)}, expected {tuple(ids.shape)} (the shape of ids)"
        )
        assert not t.is_floating_point(), f"{name} should hold integer ids, got {t.dtype}"
    special = torch.isin(ids, torch.tensor(sorted(specials.values())))
    return ids, inputs.long(), labels.long(), special, specials, V


def within(observed: float, p: float, n: int, what: str, sigmas: float = 5.0) -> None:
    tolerance = sigmas * math.sqrt(p * (1 - p) / n)
    assert abs(observed - p) <= tolerance, (
        f"{what}: {observed:.2%} over {n} tokens, expected {p:.2%} (+/- {tolerance:.2%})"
    )


@pytest.mark.points(1, cell="check_mask_tokens")
def test_labels_and_untouched_positions(student, rng):
    ids, inputs, labels, _, _, _ = masked_call(student, rng)
    chosen = labels != -100
    assert chosen.any(), "no token was chosen: labels are -100 everywhere"
    assert torch.equal(labels[chosen], ids[chosen]), (
        "labels must hold the original id at every chosen position"
    )
    assert torch.equal(inputs[~chosen], ids[~chosen]), (
        "inputs changed at positions whose label is -100: only chosen tokens may change, and "
        "every chosen position (also one left unchanged) needs its label"
    )


@pytest.mark.points(1, cell="check_mask_tokens")
def test_special_tokens_never_chosen(student, rng):
    ids, inputs, labels, special, _, _ = masked_call(student, rng)
    chosen = labels != -100
    assert not chosen[special].any(), (
        f"{int(chosen[special].sum())} special tokens ([CLS], [SEP], [PAD], ...) were chosen; "
        "special ids can be anywhere in the vocabulary, compare with special_ids"
    )
    assert torch.equal(inputs[special], ids[special]), "special tokens were changed in inputs"


@pytest.mark.points(1, cell="check_mask_tokens")
def test_selection_rate(student, rng):
    for prob in (None, 0.35):
        ids, inputs, labels, special, _, _ = masked_call(student, rng, prob=prob)
        chosen = labels != -100
        n = int((~special).sum())
        within(chosen[~special].float().mean().item(), prob or 0.15, n,
               f"fraction of ordinary tokens chosen with prob={prob or 0.15}")  # fmt: skip


@pytest.mark.points(2, cell="check_mask_tokens")
def test_eighty_ten_ten(student, rng):
    ids, inputs, labels, special, specials, V = masked_call(student, rng, B=160)
    chosen = labels != -100
    n = int(chosen.sum())
    candidates = V - len(specials)
    masked = inputs == specials["mask"]
    kept = inputs == ids
    randomised = ~masked & ~kept
    assert not (masked & ~chosen).any(), "[MASK] appears at a position that was not chosen"
    within(masked[chosen].float().mean().item(), 0.8, n, "chosen tokens replaced by [MASK]")
    p_random = 0.1 * (1 - 1 / candidates)  # a random draw may hit the original token
    within(randomised[chosen].float().mean().item(), p_random, n,
           "chosen tokens replaced by a different random token")  # fmt: skip
    within(kept[chosen].float().mean().item(), 1 - 0.8 - p_random, n,
           "chosen tokens left unchanged")  # fmt: skip


@pytest.mark.points(1, cell="check_mask_tokens")
def test_random_replacements_uniform_over_ordinary_ids(student, rng):
    V = 24
    specials = sorted(torch.randperm(V, generator=rng)[:4].tolist())  # one is [MASK]
    mask_id = specials[draw(rng, 0, 3)]
    ordinary = torch.tensor([i for i in range(V) if i not in specials])
    ids = ordinary[torch.randint(len(ordinary), (200, 500), generator=rng)]
    inputs, labels = student.mask_tokens(ids, vocab_size=V, mask_id=mask_id, special_ids=specials)
    inputs, labels = inputs.long(), labels.long()
    chosen = labels != -100
    replaced = inputs[chosen & (inputs != mask_id) & (inputs != ids)]
    assert replaced.numel() > 100, f"only {replaced.numel()} random replacements in 100,000 tokens"
    bad = torch.isin(replaced, torch.tensor(specials))
    assert not bad.any(), (
        f"random replacements included special ids {sorted(set(replaced[bad].tolist()))}: draw "
        "them from the ordinary ids only"
    )
    counts = torch.bincount(replaced, minlength=V)[ordinary].double()
    expected = replaced.numel() / len(ordinary)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 60.0, (  # 19 degrees of freedom: P(chi2 > 60) < 1e-5
        f"random replacements are not uniform over the {len(ordinary)} ordinary ids (chi-square "
        f"{chi2:.0f} with {len(ordinary) - 1} degrees of freedom)"
    )


def reference_segments(ids: Tensor, sep: int, pad: int) -> Tensor:
    out = torch.zeros_like(ids)
    for r, row in enumerate(ids.tolist()):
        seps = 0
        for t, token in enumerate(row):
            out[r, t] = 0 if token == pad else int(seps >= 1)
            seps += token == sep
    return out


def segment_batch(rng: torch.Generator, *, single: bool) -> tuple[Tensor, int, int]:
    V = draw(rng, 20, 100)
    cls, sep, pad = (torch.randperm(V - 1, generator=rng)[:3] + 1).tolist()  # id 0 is ordinary
    ordinary = torch.tensor([i for i in range(V) if i not in (cls, sep, pad)])
    rows = []
    for _ in range(draw(rng, 3, 8)):
        a = ordinary[torch.randint(len(ordinary), (draw(rng, 1, 5),), generator=rng)].tolist()
        b = ordinary[torch.randint(len(ordinary), (draw(rng, 1, 5),), generator=rng)].tolist()
        rows.append([cls, *a, sep] + ([] if single else [*b, sep]))
    T = max(len(row) for row in rows) + draw(rng, 1, 4)  # every row ends in padding
    return torch.tensor([row + [pad] * (T - len(row)) for row in rows]), sep, pad


@pytest.mark.points(1, cell="check_segment_ids")
def test_segment_ids_pairs(student, rng):
    ids, sep, pad = segment_batch(rng, single=False)
    got = student.segment_ids(ids, sep_id=sep, pad_id=pad)
    want = reference_segments(ids, sep, pad)
    assert isinstance(got, Tensor) and tuple(got.shape) == tuple(ids.shape), (
        f"segment_ids should return a tensor shaped like input_ids {tuple(ids.shape)}"
    )
    assert torch.equal(got.long(), want), (
        f"segment ids differ from the expected ones (sep_id={sep}, pad_id={pad}), e.g. row "
        f"{(got.long() != want).any(1).nonzero()[0].item()}"
    )


@pytest.mark.points(1, cell="check_segment_ids")
def test_segment_ids_single_segment_and_unpadded_rows(student, rng):
    ids, sep, pad = segment_batch(rng, single=True)
    got = student.segment_ids(ids, sep_id=sep, pad_id=pad)
    assert torch.equal(got.long(), torch.zeros_like(ids)), (
        "rows with a single segment ([CLS] a [SEP] [PAD] ...) should be all 0"
    )
    pairs, sep, pad = segment_batch(rng, single=False)
    row = pairs[:1, : int((pairs[0] != pad).sum())]  # one pair without padding
    got = student.segment_ids(row, sep_id=sep, pad_id=pad)
    assert torch.equal(got.long(), reference_segments(row, sep, pad)), (
        f"wrong segment ids for a pair without padding: {got.tolist()}"
    )


def reference_embeddings(rng: torch.Generator):
    C = 4 * draw(rng, 2, 6)
    V, P = draw(rng, 20, 80), draw(rng, 12, 30)
    config = ref_bert.BertConfig(vocab_size=V, hidden_size=C, num_attention_heads=4,
                                 max_position_embeddings=P, dropout=0.0)  # fmt: skip
    torch.manual_seed(draw(rng, 0, 10**6))
    reference = ref_bert.BertEmbeddings(config).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.normal_(0.0, 1.0, generator=rng)
    return reference, dict(vocab_size=V, hidden_size=C, max_position_embeddings=P)


def student_embeddings(student, reference, sizes):
    mine = student.BertEmbeddings(**sizes, dropout=0.0)
    mine.load_state_dict(reference.state_dict())
    mine.eval()
    return mine


@pytest.mark.points(2, cell="check_bert_embeddings")
def test_embeddings_match_reference(student, rng):
    reference, sizes = reference_embeddings(rng)
    mine = student_embeddings(student, reference, sizes)
    B, T = draw(rng, 1, 4), draw(rng, 2, sizes["max_position_embeddings"])
    ids = torch.randint(sizes["vocab_size"], (B, T), generator=rng)
    types = torch.randint(2, (B, T), generator=rng)
    with torch.no_grad():
        want = reference(ids, types)
    close(mine(ids, types), want, "BertEmbeddings(input_ids, token_type_ids)")


@pytest.mark.points(1, cell="check_bert_embeddings")
def test_embeddings_defaults_and_length_limit(student, rng):
    reference, sizes = reference_embeddings(rng)
    mine = student_embeddings(student, reference, sizes)
    P = sizes["max_position_embeddings"]
    ids = torch.randint(sizes["vocab_size"], (2, P), generator=rng)
    with torch.no_grad():
        want = reference(ids)
    close(mine(ids), want, "BertEmbeddings(input_ids) (segment 0 by default, all positions)")
    error = raised(lambda: mine(torch.zeros(1, P + 1, dtype=torch.long)))
    assert error == "ValueError", (
        f"{P + 1} tokens with max_position_embeddings={P} should raise ValueError, "
        f"{'got ' + error if error else 'nothing was raised'}"
    )
