"""Hidden tests, A4 part 4: top-k, top-p, sampling, generation (10 points).

Sampling is graded on distributions: 40,000 draws per call, every token's frequency within five
standard deviations of its probability, and no draw outside the filtered support.
CANARY-HIDDEN-A4-7c2e91d0
"""

from __future__ import annotations

import pytest
import torch
from a4_helpers import (
    ATTENTION,
    draw,
    expected_probs,
    frequencies_match,
    raised,
    reference_gpt,
    student_gpt,
)
from torch import Tensor

from course_lib.models import gpt as ref_gpt

pytestmark = pytest.mark.forbid("course_lib")
DRAWS = 40_000


def same_filter(got: object, want: Tensor, what: str) -> None:
    assert isinstance(got, Tensor), f"{what} should return a tensor"
    assert tuple(got.shape) == tuple(want.shape), f"{what} has shape {tuple(got.shape)}"
    kept = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), kept), (
        f"{what} keeps {int(torch.isfinite(got).sum())} tokens, expected {int(kept.sum())} (or "
        "not the same ones)"
    )
    assert torch.equal(got[kept], want[kept]), f"{what} changed the values of the kept logits"
    assert (got[~kept] == float("-inf")).all(), f"{what}: filtered logits must be -inf"


@pytest.mark.points(1, cell="check_top_k_filter")
def test_top_k(student, rng):
    for shape in ((draw(rng, 1, 4), draw(rng, 5, 30)), (2, 3, draw(rng, 5, 30))):
        logits = torch.randn(*shape, generator=rng) * 3
        k = draw(rng, 1, shape[-1])
        original = logits.clone()
        got = student.top_k_filter(logits, k)
        assert torch.equal(logits, original), "top_k_filter changed its input: return a new tensor"
        same_filter(got, ref_gpt.top_k_filter(logits, k),
                    f"top_k_filter(logits {shape}, k={k})")  # fmt: skip


@pytest.mark.points(1, cell="check_top_k_filter")
def test_top_k_ties_and_large_k(student, rng):
    logits = torch.randint(0, 4, (3, draw(rng, 8, 16)), generator=rng).float()
    k = draw(rng, 2, 5)
    same_filter(student.top_k_filter(logits, k), ref_gpt.top_k_filter(logits, k),
                f"top_k_filter with ties at the k-th value (k={k}): keep them all")  # fmt: skip
    V = logits.shape[-1]
    same_filter(student.top_k_filter(logits, V + 3), logits, f"top_k_filter with k={V + 3} > V")


@pytest.mark.points(1, cell="check_top_p_filter")
def test_top_p(student, rng):
    for _ in range(3):
        logits = torch.randn(draw(rng, 1, 4), draw(rng, 5, 30), generator=rng) * 2
        p = float(torch.rand((), generator=rng)) * 0.9 + 0.05
        original = logits.clone()
        got = student.top_p_filter(logits, p)
        assert torch.equal(logits, original), "top_p_filter changed its input: return a new tensor"
        same_filter(got, ref_gpt.top_p_filter(logits, p), f"top_p_filter(logits, p={p:.3f})")


@pytest.mark.points(1, cell="check_top_p_filter")
def test_top_p_keeps_the_crossing_token(student, rng):
    V = draw(rng, 4, 10)
    probs = torch.softmax(torch.randn(V, generator=rng) * 2, dim=0)
    cumulative = probs.sort(descending=True).values.cumsum(0)
    j = draw(rng, 0, V - 2)
    p = float((cumulative[j] + (cumulative[j - 1] if j else 0.0)) / 2)  # strictly inside
    logits = probs.log()[None]
    what = f"top_p_filter(logits, p={p:.4f}): {j + 1} most probable tokens expected"
    same_filter(student.top_p_filter(logits, p), ref_gpt.top_p_filter(logits, p), what)
    top1 = student.top_p_filter(logits, 1e-4)
    assert int(torch.isfinite(top1).sum()) == 1 and torch.isfinite(top1[0, probs.argmax()]), (
        "top_p_filter with a tiny p must keep exactly the most probable token"
    )


def draws(student, rng, **kwargs):
    V = draw(rng, 8, 20)
    logits = torch.randn(V, generator=rng) * 1.5
    ids = student.sample_next_token(logits.expand(DRAWS, V).clone(), **kwargs)
    return ids, logits


@pytest.mark.points(1, cell="check_sample_next_token")
def test_sample_temperature(student, rng):
    for temperature in (0.5, 2.0):
        ids, logits = draws(student, rng, temperature=temperature)
        frequencies_match(ids, expected_probs(logits, temperature),
                          f"sample_next_token(temperature={temperature})")  # fmt: skip


@pytest.mark.points(1, cell="check_sample_next_token")
def test_sample_top_k(student, rng):
    k = draw(rng, 2, 6)
    ids, logits = draws(student, rng, top_k=k)
    frequencies_match(ids, expected_probs(logits, top_k=k), f"sample_next_token(top_k={k})")


@pytest.mark.points(1, cell="check_sample_next_token")
def test_sample_top_p(student, rng):
    p = float(torch.rand((), generator=rng)) * 0.6 + 0.3
    ids, logits = draws(student, rng, top_p=p)
    frequencies_match(ids, expected_probs(logits, top_p=p), f"sample_next_token(top_p={p:.3f})")


@pytest.mark.points(1, cell="check_sample_next_token")
def test_sample_all_three_in_order(student, rng):
    t = 1.7
    for _ in range(200):  # inputs where another order keeps other tokens
        V = draw(rng, 8, 20)
        logits = torch.randn(V, generator=rng) * 1.5
        k, p = draw(rng, 3, 7), float(torch.rand((), generator=rng)) * 0.4 + 0.4
        support = torch.isfinite(ref_gpt.top_p_filter(ref_gpt.top_k_filter(logits / t, k), p))
        others = (
            ref_gpt.top_k_filter(ref_gpt.top_p_filter(logits / t, p), k),  # top-p first
            ref_gpt.top_p_filter(ref_gpt.top_k_filter(logits, k), p),  # temperature last
        )
        if all(not torch.equal(torch.isfinite(z), support) for z in others):
            break
    ids = student.sample_next_token(logits.expand(DRAWS, V).clone(), temperature=t, top_k=k,
                                    top_p=p)  # fmt: skip
    frequencies_match(ids, expected_probs(logits, t, top_k=k, top_p=p),
                      f"sample_next_token(temperature={t}, top_k={k}, top_p={p:.3f}) (divide by "
                      "the temperature first, then top-k, then top-p)")  # fmt: skip


@pytest.mark.points(1, cell="check_generate")
@pytest.mark.forbid(*ATTENTION)
def test_generate_greedy(student, rng):
    reference = reference_gpt(rng)
    mine = student_gpt(student, reference)
    c = reference.config
    T, new = draw(rng, 2, 6), draw(rng, 4, 12)  # a prompt of 2+: its last position matters
    prompt = torch.randint(c.vocab_size, (draw(rng, 1, 3), T), generator=rng)
    want = reference.generate(prompt, new, greedy=True)
    got = student.generate(mine, prompt, new, greedy=True)
    assert isinstance(got, Tensor) and tuple(got.shape) == tuple(want.shape), (
        f"generate should return ids of shape {tuple(want.shape)} (prompt + new tokens)"
    )
    assert torch.equal(got, want), (
        f"greedy generation gave {got.tolist()}, expected {want.tolist()}"
    )


@pytest.mark.points(1, cell="check_generate")
@pytest.mark.forbid(*ATTENTION)
def test_generate_top_k_one_and_length_limit(student, rng):
    reference = reference_gpt(rng)
    mine = student_gpt(student, reference)
    c = reference.config
    prompt = torch.randint(c.vocab_size, (2, draw(rng, 2, 5)), generator=rng)
    new = c.block_size - prompt.shape[1]
    want = reference.generate(prompt, new, greedy=True)
    got = student.generate(mine, prompt, new, top_k=1, temperature=0.7)
    assert isinstance(got, Tensor) and torch.equal(got, want), (
        "sampling with top_k=1 up to exactly block_size tokens should give the greedy tokens"
    )
    t, k = (0.5, draw(rng, 3, 6)) if draw(rng, 0, 1) else (1.6, draw(rng, 3, 6))
    with torch.no_grad():
        last = reference(prompt[:1])[0, -1]
    got = student.generate(mine, prompt[:1].expand(8000, -1).clone(), 1, temperature=t, top_k=k)
    frequencies_match(got[:, -1:], expected_probs(last, t, top_k=k),
                      f"the first token of generate(..., temperature={t}, top_k={k}) (pass the "
                      "sampling options on to sample_next_token)")  # fmt: skip
    error = raised(lambda: student.generate(mine, prompt, new + 1, greedy=True))
    assert error == "ValueError", (
        f"generating past block_size={c.block_size} should raise ValueError, "
        f"{'got ' + error if error else 'nothing was raised'}"
    )
