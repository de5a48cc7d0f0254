"""Shared helpers of the hidden A4 suite (trusted process only; never released).

CANARY-HIDDEN-A4-7c2e91d0: planted so the project's tests can assert that no hidden test text
reaches a student.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import Tensor

from course_lib import tokenizers as bpe
from course_lib.models import gpt as ref_gpt

CANARY = "CANARY-HIDDEN-A4-7c2e91d0"
# course_lib's byte-pair encoding: the student writes these by hand.
TOKENIZER_REFERENCES = (
    "course_lib.tokenizers.learn_merges",
    "course_lib.tokenizers.count_pairs",
    "course_lib.tokenizers.merge_pair",
    "course_lib.tokenizers.BPETokenizer",
)
ATTENTION = ("sdpa", "multihead_attention", "transformer_modules", "course_lib")


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """A random int in [low, high] (inclusive) from the test's generator."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def reference_merges(text: str, num_merges: int) -> list[tuple[int, int]]:
    words = Counter(bpe.pretokenize(text))
    return bpe.learn_merges(
        [list(w.encode("utf-8")) for w in words], list(words.values()),
        num_merges=num_merges, first_id=256,
    )  # fmt: skip


def tokenizer(merges: list[tuple[int, int]]) -> bpe.BPETokenizer:
    return bpe.BPETokenizer(merges=merges, special_tokens=())


def as_pairs(value: object, what: str) -> list[tuple[int, int]]:
    assert isinstance(value, (list, tuple)), f"{what} should return a list, got {type(value)}"
    try:
        return [(int(a), int(b)) for a, b in value]
    except (TypeError, ValueError):
        raise AssertionError(f"{what} should return a list of (first, second) pairs") from None


def as_ids(value: object, what: str) -> list[int]:
    if isinstance(value, Tensor):
        value = value.tolist()
    assert isinstance(value, (list, tuple)), f"{what} should return a list of ints"
    return [int(i) for i in value]


def random_text(rng: torch.Generator, length: int) -> str:
    """Words from a mixed alphabet: ASCII, accents, CJK, emoji, digits, punctuation, whitespace."""
    alphabet = list("aaabcdeeefghiilmnoorsttu") + list("éüñ日本🦊🙂") + list("0123456789.,!?-'")
    words = []
    while sum(len(w) for w in words) < length:
        n = draw(rng, 1, 7)
        word = "".join(alphabet[draw(rng, 0, len(alphabet) - 1)] for _ in range(n))
        words.append(word)
        words.append([" ", " ", " ", "  ", "\n", "\t", " \n"][draw(rng, 0, 6)])
    return "".join(words)


def reference_gpt(rng: torch.Generator, **overrides: int) -> ref_gpt.GPT:
    """A course_lib GPT (manual attention path) with random sizes and weights, in eval mode."""
    n_head = draw(rng, 2, 4)  # several heads (sqrt(C) != sqrt(D)) and layers (per-layer caches)
    sizes = dict(
        vocab_size=draw(rng, 20, 60), block_size=draw(rng, 24, 40), n_layer=draw(rng, 2, 3),
        n_head=n_head, n_embd=n_head * 2 * draw(rng, 2, 5),
    )  # fmt: skip
    sizes.update(overrides)
    torch.manual_seed(draw(rng, 0, 10**6))
    model = ref_gpt.GPT(config=ref_gpt.GPTConfig(**sizes, fused_attn=False)).eval()
    with torch.no_grad():  # larger weights than GPT-2's init: logits far apart, no near-ties
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3, generator=rng)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1, generator=rng)
    return model


def sizes_of(model: ref_gpt.GPT) -> dict[str, int]:
    c = model.config
    return dict(vocab_size=c.vocab_size, block_size=c.block_size, n_layer=c.n_layer,
                n_head=c.n_head, n_embd=c.n_embd)  # fmt: skip


def student_gpt(student, reference: ref_gpt.GPT):
    """The student's GPT with the reference's weights, in eval mode."""
    model = student.GPT(**sizes_of(reference))
    model.load_state_dict(reference.state_dict())
    model.eval()
    return model


def close(actual: object, expected: Tensor, name: str, atol: float = 1e-5) -> None:
    from course_lib.checks import check_close

    check_close(actual, expected, name=name, atol=atol, rtol=1e-4)


def frequencies_match(ids: object, probs: Tensor, what: str, sigmas: float = 5.0) -> None:
    """Empirical frequencies of ``ids`` (N, 1) agree with ``probs`` (V,) within ``sigmas``."""
    assert isinstance(ids, Tensor), f"{what} should return a tensor of ids"
    assert ids.dim() == 2 and ids.shape[1] == 1, (
        f"{what} should have shape (B, 1), got {tuple(ids.shape)}"
    )
    n = ids.shape[0]
    V = probs.numel()
    flat = ids.flatten().long()
    assert ((flat >= 0) & (flat < V)).all(), f"{what} returned ids outside [0, {V})"
    freq = torch.bincount(flat, minlength=V).double() / n
    p = probs.double()
    impossible = (p == 0) & (freq > 0)
    assert not impossible.any(), (
        f"{what} sampled tokens that have probability 0 after filtering: "
        f"{impossible.nonzero().flatten().tolist()}"
    )
    tolerance = sigmas * (p * (1 - p) / n).sqrt() + 3 / n  # + 3 draws: rare tokens are Poisson
    bad = (freq - p).abs() > tolerance
    assert not bad.any(), (
        f"{what}: the sampled frequencies differ from the expected distribution at tokens "
        f"{bad.nonzero().flatten().tolist()[:5]} (got "
        f"{[round(f, 4) for f in freq[bad].tolist()[:5]]}, expected "
        f"{[round(q, 4) for q in p[bad].tolist()[:5]]}, {n} draws)"
    )


def expected_probs(logits: Tensor, temperature: float = 1.0, top_k=None, top_p=None) -> Tensor:
    z = logits / temperature
    if top_k is not None:
        z = ref_gpt.top_k_filter(z, top_k)
    if top_p is not None:
        z = ref_gpt.top_p_filter(z, top_p)
    return torch.softmax(z.double(), dim=-1)


def raised(call) -> str | None:
    """The type name of the exception the student's code raised in ``call()``, or None."""
    from autograder.host.proxy import StudentError

    try:
        call()
    except StudentError as error:
        return error.kind
    return None
