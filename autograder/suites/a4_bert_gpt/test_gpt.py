"""Hidden tests, A4 part 3: causal self-attention, GPT forward, key/value cache (11 points).

References come from course_lib's GPT (manual attention path) with the same weights.
CANARY-HIDDEN-A4-7c2e91d0
"""

from __future__ import annotations

import math

import pytest
import torch
from a4_helpers import ATTENTION, close, draw, raised, reference_gpt, student_gpt
from torch import Tensor

from course_lib.models import gpt as ref_gpt

pytestmark = pytest.mark.forbid(*ATTENTION)


def reference_attention(module: ref_gpt.CausalSelfAttention, x: Tensor, past=None):
    """y (B, T, C) and the extended (k, v), computed here from the module's weights."""
    B, T, C = x.shape
    H = module.n_head
    q, k, v = module.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    S = k.shape[2]
    keep = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # query i is at S - T + i
    scores = (q @ k.transpose(-2, -1) / math.sqrt(C // H)).masked_fill(~keep, float("-inf"))
    y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
    return module.c_proj(y), (k, v)


def attention_pair(student, rng):
    model = reference_gpt(rng, n_layer=1)
    reference = model.transformer.h[0].attn
    C, H = model.config.n_embd, model.config.n_head
    mine = student.CausalSelfAttention(n_embd=C, n_head=H)
    mine.load_state_dict(reference.state_dict())
    mine.eval()
    return reference, mine, C, H


def unpack_attention(out, what: str):
    assert isinstance(out, (tuple, list)) and len(out) == 2, f"{what} should return (y, (k, v))"
    y, kv = out
    assert isinstance(kv, (tuple, list)) and len(kv) == 2, f"{what}: the second output is (k, v)"
    return y, kv


@pytest.mark.points(2, cell="check_causal_self_attention")
def test_attention_matches_reference(student, rng):
    reference, mine, C, H = attention_pair(student, rng)
    x = torch.randn(draw(rng, 1, 3), draw(rng, 2, 9), C, generator=rng)
    with torch.no_grad():
        want, _ = reference_attention(reference, x)
    y, _ = unpack_attention(mine(x), "CausalSelfAttention(x)")
    close(y, want, "CausalSelfAttention(x)")


@pytest.mark.points(1, cell="check_causal_self_attention")
def test_attention_with_past_kv(student, rng):
    reference, mine, C, H = attention_pair(student, rng)
    B, S, T = draw(rng, 1, 3), draw(rng, 1, 6), draw(rng, 2, 4)
    past = tuple(torch.randn(B, H, S, C // H, generator=rng) for _ in range(2))
    x = torch.randn(B, T, C, generator=rng)
    with torch.no_grad():
        want, (k, v) = reference_attention(reference, x, past)
    y, kv = unpack_attention(mine(x, past), "CausalSelfAttention(x, past_kv)")
    close(kv[0], k, "the returned keys (past keys followed by the new ones)")
    close(kv[1], v, "the returned values (past values followed by the new ones)")
    close(y, want, f"CausalSelfAttention(x, past_kv) with {S} cached and {T} new tokens")


def unpack_gpt(out, what: str):
    assert isinstance(out, (tuple, list)) and len(out) == 2, f"{what} should return (logits, kv)"
    return out


@pytest.mark.points(2, cell="check_gpt_forward")
def test_gpt_logits_match_reference(student, rng):
    reference = reference_gpt(rng)
    mine = student_gpt(student, reference)
    c = reference.config
    idx = torch.randint(c.vocab_size, (draw(rng, 1, 3), draw(rng, 2, c.block_size)), generator=rng)
    with torch.no_grad():
        want = reference(idx)
    logits, present = unpack_gpt(mine(idx), "GPT(idx)")
    close(logits, want, "GPT logits", atol=1e-4)
    assert len(present) == c.n_layer, f"present_kv should have {c.n_layer} entries (one per block)"


@pytest.mark.points(1, cell="check_gpt_forward")
def test_gpt_is_causal(student, rng):
    reference = reference_gpt(rng)
    mine = student_gpt(student, reference)
    c = reference.config
    T = draw(rng, 6, c.block_size)
    t = draw(rng, 1, T - 1)
    idx = torch.randint(c.vocab_size, (2, T), generator=rng)
    changed = idx.clone()
    changed[:, t:] = (
        changed[:, t:] + torch.randint(1, c.vocab_size, (2, T - t), generator=rng)
    ) % c.vocab_size
    before, _ = unpack_gpt(mine(idx), "GPT(idx)")
    after, _ = unpack_gpt(mine(changed), "GPT(idx)")
    assert torch.allclose(before[:, :t], after[:, :t], atol=1e-5), (
        f"changing the tokens at positions {t}.. changed the logits at positions < {t}: a token "
        "must not see its future (causal mask)"
    )
    assert not torch.allclose(before[:, t:], after[:, t:], atol=1e-5), (
        "changing tokens did not change the logits at their own positions"
    )


@pytest.mark.points(1, cell="check_gpt_forward")
def test_gpt_rejects_too_long_input(student, rng):
    reference = reference_gpt(rng)
    mine = student_gpt(student, reference)
    c = reference.config
    error = raised(lambda: mine(torch.zeros(1, c.block_size + 1, dtype=torch.long)))
    assert error == "ValueError", (
        f"{c.block_size + 1} tokens with block_size={c.block_size} should raise ValueError, "
        f"{'got ' + error if error else 'nothing was raised'}"
    )


def run_in_pieces(mine, idx: Tensor, cuts: list[int]):
    past, pieces = None, []
    for start, end in zip([0, *cuts], [*cuts, idx.shape[1]]):
        logits, past = unpack_gpt(mine(idx[:, start:end], past), "GPT(idx, past_kv)")
        pieces.append(logits)
    return torch.cat(pieces, dim=1), past


@pytest.mark.points(2, cell="check_kv_cache")
def test_cache_one_token_at_a_time(student, rng):
    reference = reference_gpt(rng)
    mine = student_gpt(student, reference)
    c = reference.config
    B, T = draw(rng, 1, 3), draw(rng, 4, c.block_size)
    idx = torch.randint(c.vocab_size, (B, T), generator=rng)
    with torch.no_grad():
        want = reference(idx)
    got, past = run_in_pieces(mine, idx, list(range(1, T)))
    close(got, want, "logits computed one token at a time with the cache", atol=1e-4)
    D = c.n_embd // c.n_head
    assert len(past) == c.n_layer and tuple(past[0][0].shape) == (B, c.n_head, T, D), (
        f"after {T} tokens each layer's cached keys should have shape {(B, c.n_head, T, D)}"
    )


@pytest.mark.points(2, cell="check_kv_cache")
def test_cache_in_chunks(student, rng):
    reference = reference_gpt(rng)
    mine = student_gpt(student, reference)
    c = reference.config
    T = draw(rng, 8, c.block_size)
    idx = torch.randint(c.vocab_size, (draw(rng, 1, 3), T), generator=rng)
    first = draw(rng, 1, T - 5)  # then a chunk of at least 2 tokens after a cache
    second = draw(rng, first + 2, T - 2)
    cuts = [first, second, draw(rng, second + 1, T - 1)]
    with torch.no_grad():
        want = reference(idx)
    got, _ = run_in_pieces(mine, idx, cuts)
    close(got, want, f"logits computed in chunks (cut at {cuts}) with the cache", atol=1e-4)
