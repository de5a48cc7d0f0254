"""A3's answer key (``autograder/suites/a3_transformer/a3_key.py``) against independent oracles.

- ``RMSNorm`` equals ``torch.nn.RMSNorm`` (values and gradients);
- the pre-norm blocks equal ``course_lib``'s pre-norm blocks once its LayerNorms are replaced by
  the key's RMSNorm (the same wiring, written independently), and never look ahead;
- ``label_smoothed_cross_entropy`` equals ``F.cross_entropy(label_smoothing=...,
  ignore_index=...)``;
- ``beam_search`` with a beam as wide as every prefix equals an exhaustive search on tiny
  vocabularies, its 1-best at ``beam_size=1`` is the best hypothesis along the arg-max path (derived
  by hand), and the K hypotheses come best first;
- (the recorded answers of the visible checks: test_recorded_answers.py).
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from keys import load
from torch import nn

key = load("a3_transformer", "a3_key")


def tiny_model(seed: int, V: int = 5, dtype=torch.float64):
    from course_lib.models import create

    torch.manual_seed(seed)
    model = create("transformer-tiny", src_vocab_size=7, tgt_vocab_size=V, d_model=8,
                   num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=12,
                   share_embeddings=False, tie_embeddings=False)  # fmt: skip
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # peaked distributions: the search matters
    return model.to(dtype).eval()


def exhaustive_search(model, src, *, top, max_new_tokens, pad_id=0, bos_id=1, eos_id=2):
    """Every hypothesis scored one by one; the ``top`` best, best first, as beam_search."""
    src_mask = src != pad_id
    memory = model.encode(src, src_mask)
    V = model.config.tgt_vocab_size
    words = [v for v in range(V) if v != eos_id]
    found = []
    with torch.no_grad():
        for b in range(src.shape[0]):
            scored = []
            for n in range(max_new_tokens + 1):
                for body in itertools.product(words, repeat=n):
                    ids = [*body, eos_id] if n < max_new_tokens else list(body)
                    seq = torch.tensor([[bos_id, *ids]])
                    logits = model.decode(seq[:, :-1], memory[b : b + 1], src_mask[b : b + 1])
                    log_p = logits[0].log_softmax(dim=-1)
                    scored.append((log_p.gather(1, seq[0, 1:, None]).sum().item(), ids))
            found.append(sorted(scored, key=lambda s: -s[0])[:top])
    return found


@pytest.mark.parametrize("seed", range(3))
def test_rms_norm_equals_torch(seed):
    g = torch.Generator().manual_seed(seed)
    C = 3 + seed * 4
    ref = nn.RMSNorm(C, eps=1e-6)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(C, generator=g))
    mine = key.RMSNorm(C)
    mine.load_state_dict(ref.state_dict())
    x = (torch.randn(2, 5, C, generator=g) * 3 + 1).requires_grad_(True)
    x2 = x.detach().clone().requires_grad_(True)
    torch.testing.assert_close(mine(x), ref(x2))
    dy = torch.randn(2, 5, C, generator=g)
    mine(x).backward(dy)
    ref(x2).backward(dy)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(mine.weight.grad, ref.weight.grad)


def _with_rms_norms(block: nn.Module) -> nn.Module:
    for name, child in list(block.named_children()):
        if name.startswith("norm"):
            setattr(block, name, key.RMSNorm(child.weight.numel()))
    return block


@pytest.mark.parametrize("seed", range(3))
def test_pre_norm_blocks_equal_course_lib_pre_norm_wiring(seed):
    from course_lib.models import transformer

    g = torch.Generator().manual_seed(seed)
    sizes = dict(d_model=8, num_heads=2, d_ff=12)
    extra = dict(dropout=0.0, activation="relu", norm_first=True, fused=False)
    for ref_cls, mine_cls in ((transformer.EncoderBlock, key.PreNormEncoderBlock),
                              (transformer.DecoderBlock, key.PreNormDecoderBlock)):  # fmt: skip
        ref = _with_rms_norms(ref_cls(**sizes, **extra)).eval()
        with torch.no_grad():
            for p in ref.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        mine = mine_cls(**sizes)
        mine.load_state_dict(ref.state_dict())
        x = torch.randn(3, 4, 8, generator=g)
        memory = torch.randn(3, 6, 8, generator=g)
        keep = torch.rand(3, 1, 1, 6, generator=g) > 0.3
        keep[..., 0] = True
        causal = torch.ones(4, 4, dtype=torch.bool).tril()
        with torch.no_grad():
            if mine_cls is key.PreNormEncoderBlock:
                want, want_w = ref(x, keep[..., :4], return_attn=True)
                got, got_w = mine(x, keep[..., :4])
            else:
                want, want_w = ref(x, memory, causal, keep, return_attn=True)
                got, got_w = mine(x, memory, causal, keep)
                changed = x.clone()
                changed[:, 2:] += 1.0
                torch.testing.assert_close(
                    mine(changed, memory, causal, keep)[0][:, :2], got[:, :2]
                )
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_w, want_w)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.35])
def test_label_smoothed_cross_entropy_equals_torch(smoothing):
    g = torch.Generator().manual_seed(int(smoothing * 100))
    logits = torch.randn(3, 5, 7, generator=g, requires_grad=True)
    target = torch.randint(0, 7, (3, 5), generator=g)
    target[0, :2] = 0
    want = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=0,
                           label_smoothing=smoothing)  # fmt: skip
    got = key.label_smoothed_cross_entropy(logits, target, smoothing, ignore_index=0)
    torch.testing.assert_close(got, want)
    (g1,) = torch.autograd.grad(got, logits)
    (g2,) = torch.autograd.grad(want, logits)
    torch.testing.assert_close(g1, g2)


@pytest.mark.parametrize("seed", range(3))
def test_a_beam_as_wide_as_every_prefix_is_an_exhaustive_search(seed):
    V, max_new = 5, 3
    model = tiny_model(seed, V)
    src = torch.tensor([[3, 4, 5, 6], [6, 5, 0, 0]])
    K = (V - 1) ** max_new  # every prefix of max_new - 1 words fits into the beam
    tokens, scores = key.beam_search(model, src, beam_size=K, max_new_tokens=max_new)
    want = exhaustive_search(model, src, top=K, max_new_tokens=max_new)
    for b, best in enumerate(want):
        torch.testing.assert_close(
            scores[b], torch.tensor([s for s, _ in best], dtype=scores.dtype)
        )
        for k, (_, ids) in enumerate(best):
            row = tokens[b, k].tolist()
            assert row[: len(ids)] == ids and set(row[len(ids) :]) <= {0}, (b, k)


@pytest.mark.parametrize("V, max_new", [(4, 4), (5, 3), (6, 3)])
def test_the_hidden_exhaustive_case_is_exhaustive_without_pad(V, max_new):
    """The hidden suite's exhaustive case: [PAD] shifted by -1e4 and K = (V - 2)^(max_new - 1),
    every prefix of max_new - 1 words other than [EOS] and [PAD]: the K best hypotheses there
    are (none holding [PAD]), best first."""
    hidden = load("a3_transformer", "a3_record")
    model = tiny_model(V, V)
    with torch.no_grad():
        model.decoder_layers[-1].norm3.weight.abs_().add_(0.5)  # shift_logit divides by it
    hidden.shift_logit(model, 0, -1e4)
    src = torch.tensor([[3, 4, 5, 6], [6, 5, 0, 0]])
    K = (V - 2) ** (max_new - 1)
    tokens, scores = key.beam_search(model, src, beam_size=K, max_new_tokens=max_new)
    want = exhaustive_search(model, src, top=K, max_new_tokens=max_new)
    for b, best in enumerate(want):
        assert all(0 not in ids for _, ids in best)
        torch.testing.assert_close(
            scores[b], torch.tensor([s for s, _ in best], dtype=scores.dtype)
        )


def one_beam(model, src, max_new_tokens, pad_id=0, bos_id=1, eos_id=2):
    """Beam search of width 1, derived by hand: follow the arg-max among the tokens other than
    [EOS]; every prefix of that path followed by [EOS], and the whole path, are the hypotheses."""
    src_mask = src != pad_id
    memory = model.encode(src, src_mask)
    out = []
    with torch.no_grad():
        for b in range(src.shape[0]):
            path, score, best = [bos_id], 0.0, (float("-inf"), [])
            for _ in range(max_new_tokens):
                seq = torch.tensor([path])
                log_p = model.decode(seq, memory[b : b + 1], src_mask[b : b + 1])[0, -1]
                log_p = log_p.log_softmax(dim=-1)
                best = max(best, (score + log_p[eos_id].item(), [*path[1:], eos_id]))
                log_p[eos_id] = float("-inf")
                score += log_p.max().item()
                path.append(int(log_p.argmax()))
            out.append(max(best, (score, path[1:])))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_beam_size_one_is_the_best_on_the_arg_max_path_and_beams_come_best_first(seed):
    model = tiny_model(seed, V=9)
    src = torch.tensor([[3, 4, 5, 6], [6, 5, 0, 0], [4, 4, 4, 0]])
    tokens, scores = key.beam_search(model, src, beam_size=1, max_new_tokens=6)
    for b, (score, ids) in enumerate(one_beam(model, src, 6)):
        assert tokens[b, 0, : len(ids)].tolist() == ids and (tokens[b, 0, len(ids) :] == 0).all()
        assert abs(scores[b, 0].item() - score) < 1e-9
    for K in (2, 4, 8):
        _, wider = key.beam_search(model, src, beam_size=K, max_new_tokens=6)
        assert (wider[:, :-1] >= wider[:, 1:]).all(), "best first"
