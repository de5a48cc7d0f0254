"""Record A1's visible-check data: the key's answers, and the answers of the usual mistakes.

CANARY-HIDDEN-A1-7d3b2e91: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

    python autograder/suites/a1_rnn_attention/a1_record.py

writes ``course_lib/checks/recorded/a1_rnn_attention.pt``: for each check, its inputs (weights
included), the key's answer and ``{message: answer}`` of the usual mistakes. The visible checks
(``course_lib/checks/a1.py``) compare the student's answer with these, so they name the mistakes
without the key's code; the hidden suite draws fresh inputs. ``tests/course/test_a1_key.py``
checks that the file is what this script writes today.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import a1_key as key  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "course_lib" / "checks" / "recorded" / "a1_rnn_attention.pt"
PAD, BOS, EOS = 0, 1, 2


def _perturbed(module: nn.Module, g: torch.Generator, scale: float = 0.7) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g))
    return module.eval()


def _state(module: nn.Module) -> dict[str, Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def _keep(lengths: list[int], T: int) -> Tensor:
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]


def _softmax_then_mask(e: Tensor, mask: Tensor) -> Tensor:
    return e.softmax(-1) * mask


# --------------------------------------------------------------------------------------------
# 1. luong_align
# --------------------------------------------------------------------------------------------

AFTER = "the mask is applied after the softmax: fill the masked scores before it (the book's "
AFTER += "masked_softmax), so that padding takes no probability mass"
NO_MASK = "the padding is not masked: padding positions must get weight 0 (masked_softmax(e, mask))"
SCORES = "the scores are returned, not the weights: a_t = masked softmax of the scores"
EMPTY = "a row without any real position gets weights, not all zeros: after the softmax of the "
EMPTY += "filled scores, zero the masked positions (the book's masked_softmax does both)"


def luong_align() -> dict:
    g = torch.Generator().manual_seed(10)
    B, T, S, C, A = 4, 5, 4, 6, 3
    mask = _keep([5, 3, 4, 0], T)  # the last row has no real position
    h_t = torch.randn(B, S, generator=g)
    h_s = torch.randn(B, T, C, generator=g) * mask[:, :, None]
    h_dot = torch.randn(B, T, S, generator=g) * mask[:, :, None]
    W_general = torch.randn(S, C, generator=g) * 0.6
    W_concat = torch.randn(A, S + C, generator=g) * 0.6
    v_a = torch.randn(A, generator=g)
    cases = {}
    scores = {
        "dot": (h_dot @ h_t[:, :, None]).squeeze(-1),
        "general": (h_s @ W_general.T @ h_t[:, :, None]).squeeze(-1),
        "concat": torch.tanh((h_t @ W_concat[:, :S].T)[:, None, :] + h_s @ W_concat[:, S:].T) @ v_a,
    }
    inputs = {
        "dot": dict(h_s=h_dot, W_a=None, v_a=None),
        "general": dict(h_s=h_s, W_a=W_general, v_a=None),
        "concat": dict(h_s=h_s, W_a=W_concat, v_a=v_a),
    }
    for method, e in scores.items():
        mistakes = {
            NO_MASK: e.softmax(-1),
            AFTER: _softmax_then_mask(e, mask),
            SCORES: e,
            EMPTY: e.masked_fill(~mask, -1e9).softmax(-1),
            "the scores are divided by sqrt(d): Luong's scores are not scaled (that is the "
            "Transformer's scaled dot product)": key._masked_softmax(
                e / math.sqrt(h_t.shape[-1]), mask
            ),
            "the softmax runs over the batch axis: normalise over the source positions, "
            "dim=-1": key._masked_softmax(e.T, mask.T).T,
        }
        if method == "concat":
            hs = inputs["concat"]["h_s"]
            mistakes["the concatenation is in the wrong order: W_a multiplies [h_t; h_s], h_t "
                      "first (W_a[:, :S] for h_t)"] = key._masked_softmax(
                torch.tanh((h_t @ W_concat[:, C:].T)[:, None, :] + hs @ W_concat[:, :C].T)
                @ v_a, mask)  # fmt: skip
            mistakes["the tanh is missing: v_a^T tanh(W_a [h_t; h_s])"] = key._masked_softmax(
                ((h_t @ W_concat[:, :S].T)[:, None, :] + hs @ W_concat[:, S:].T) @ v_a, mask
            )
            mistakes["v_a is not applied: the score is v_a^T tanh(W_a [h_t; h_s]), a dot "
                     "product with v_a"] = key._masked_softmax(
                torch.tanh((h_t @ W_concat[:, :S].T)[:, None, :] + hs @ W_concat[:, S:].T)
                .sum(-1), mask)  # fmt: skip
        want = key.luong_align(h_t, inputs[method]["h_s"], mask, method, inputs[method]["W_a"],
                               inputs[method]["v_a"])  # fmt: skip
        cases[method] = {**inputs[method], "want": want, "mistakes": mistakes}
    return {"h_t": h_t, "mask": mask, "cases": cases}


# --------------------------------------------------------------------------------------------
# 2. CoverageAttention
# --------------------------------------------------------------------------------------------

COVERAGE_SIZES = dict(query_dim=3, key_dim=5, attention_dim=4)


def coverage_attention() -> dict:
    g = torch.Generator().manual_seed(20)
    ref = _perturbed(key.CoverageAttention(**COVERAGE_SIZES), g, scale=0.8)
    with torch.no_grad():
        ref.coverage_proj.weight.mul_(3.0)  # coverage that matters
    B, T = 3, 6
    mask = _keep([6, 4, 5], T)
    s = torch.randn(B, 3, generator=g)
    h = torch.randn(B, T, 5, generator=g) * mask[:, :, None]
    coverage = torch.rand(B, T, generator=g) * 2 * mask
    with torch.no_grad():
        want = ref(s, h, mask, coverage)
        inner = ref.key_proj(h) + ref.query_proj(s)[:, None, :]
        cov = ref.coverage_proj(coverage[:, :, None])
        e = ref.score(torch.tanh(inner + cov)).squeeze(-1)

        def out(a: Tensor) -> list[Tensor]:
            return [(a[:, :, None] * h).sum(1), a]

        mistakes = {
            "the coverage is not used: add w_c * coverage_i inside the tanh (coverage_proj)": out(
                key._masked_softmax(ref.score(torch.tanh(inner)).squeeze(-1), mask)
            ),
            "the coverage term is added after the tanh: it goes inside, tanh(W_h h_i + W_s s + "
            "w_c cov_i + b)": out(
                key._masked_softmax(ref.score(torch.tanh(inner) + cov).squeeze(-1), mask)
            ),
            NO_MASK: out(e.softmax(-1)),
            AFTER: out(_softmax_then_mask(e, mask)),
            "the coverage is subtracted: it is added, + w_c cov_i": out(
                key._masked_softmax(ref.score(torch.tanh(inner - cov)).squeeze(-1), mask)
            ),
        }
    return {"sizes": dict(COVERAGE_SIZES), "state": _state(ref), "s": s, "h": h, "mask": mask,
            "coverage": coverage, "want": list(want), "mistakes": mistakes}  # fmt: skip


# --------------------------------------------------------------------------------------------
# 3. coverage_loss
# --------------------------------------------------------------------------------------------


def coverage_loss() -> dict:
    g = torch.Generator().manual_seed(30)
    B, T_out, T = 3, 5, 4
    weights = (torch.randn(B, T_out, T, generator=g) * 2).softmax(-1)
    tgt_mask = _keep([5, 3, 4], T_out)
    cov = weights.cumsum(1) - weights
    per = torch.minimum(weights, cov).sum(-1)
    cov_src = weights.cumsum(-1) - weights
    mistakes = {
        "the coverage includes the current step: cov_t sums the steps BEFORE t only "
        "(every step's loss is then 1)": torch.minimum(weights, weights.cumsum(1))
        .sum(-1)[tgt_mask]
        .mean(),
        "the maximum is taken: the loss is sum_i min(a_{t,i}, cov_{t,i})": torch.maximum(
            weights, cov
        )
        .sum(-1)[tgt_mask]
        .mean(),
        "the padding steps are counted: average over the steps where tgt_mask is True": per.mean(),
        "the loss is summed over the steps, not averaged: the mean over the real steps": per[
            tgt_mask
        ].sum(),
        "each sequence is averaged first, then the sequences: average over all real steps "
        "at once": ((per * tgt_mask).sum(1) / tgt_mask.sum(1)).mean(),
        "the sum is divided by the batch size B: divide by the number of real steps (the mean "
        "over all of them)": per[tgt_mask].sum() / B,
        "the coverage sums over the source positions: it sums earlier STEPS, over dim=1 "
        "(T_out)": torch.minimum(weights, cov_src).sum(-1)[tgt_mask].mean(),
        "the product a * cov is used: the loss is sum_i min(a_{t,i}, cov_{t,i})": (weights * cov)
        .sum(-1)[tgt_mask]
        .mean(),
    }
    want = key.coverage_loss(weights, tgt_mask)
    return {"weights": weights, "tgt_mask": tgt_mask, "want": want, "mistakes": mistakes}


# --------------------------------------------------------------------------------------------
# 4. InputFeedingDecoder
# --------------------------------------------------------------------------------------------

DECODER_SIZES = dict(vocab_size=7, embed_dim=3, hidden_dim=4, context_dim=6)


def decoder_variant(dec: nn.Module, y, s_prev, feed_prev, h, mask, mistake: str = ""):
    """The key's decoder step with one usual mistake: [logits, s, feed, a]."""
    e = dec.embedding(y)
    fed = torch.zeros_like(feed_prev) if mistake == "no_feed" else feed_prev
    x = torch.cat([fed, e], -1) if mistake == "cell_order" else torch.cat([e, fed], -1)
    s = dec.cell(x, s_prev)
    query = s_prev if mistake == "prev_state" else s
    a = key.luong_align(query, h, mask, "general", W_a=dec.attention.weight)
    c = (a[:, :, None] * h).sum(1)
    both = torch.cat([s, c], -1) if mistake == "combine_order" else torch.cat([c, s], -1)
    combined = dec.combine(both)
    feed = combined if mistake == "no_tanh" else torch.tanh(combined)
    logits = dec.out(s if mistake == "logits_from_state" else feed)
    if mistake == "feeds_state":
        feed = s
    return [logits, s, feed, a]


DECODER_MISTAKES = {
    "prev_state": "it attends with the previous state s_{t-1} (Bahdanau's order): Luong's "
    "decoder updates the state first and attends with the NEW state s_t",
    "no_feed": "feed_prev is not used: input feeding gives the cell [e(y_{t-1}); feed_prev]",
    "cell_order": "the cell's input is [feed_prev; e(y_{t-1})]: the order is [e(y_{t-1}); "
    "feed_prev]",
    "combine_order": "combine gets [s_t; c_t]: the order is [c_t; s_t]",
    "no_tanh": "the tanh of the attentional vector is missing: feed = tanh(combine([c_t; s_t]))",
    "logits_from_state": "the logits come from the state s_t: they come from the attentional "
    "vector, out(feed)",
    "feeds_state": "the state s_t is returned as feed: feed is the attentional vector "
    "tanh(combine([c_t; s_t]))",
}


def decoder() -> dict:
    g = torch.Generator().manual_seed(40)
    ref = _perturbed(key.InputFeedingDecoder(**DECODER_SIZES), g)
    B, T = 3, 5
    mask = _keep([5, 3, 4], T)
    y = torch.tensor([3, 5, 6])
    s_prev = torch.randn(B, 4, generator=g)
    feed_prev = torch.randn(B, 4, generator=g).tanh()
    h = torch.randn(B, T, 6, generator=g) * mask[:, :, None]
    args = (y, s_prev, feed_prev, h, mask)
    with torch.no_grad():
        want = list(ref(*args))
        mistakes = {
            msg: decoder_variant(ref, *args, name) for name, msg in DECODER_MISTAKES.items()
        }
    return {"sizes": dict(DECODER_SIZES), "state": _state(ref), "y": y, "s_prev": s_prev,
            "feed_prev": feed_prev, "h": h, "mask": mask, "want": want,
            "mistakes": mistakes}  # fmt: skip


# --------------------------------------------------------------------------------------------
# 5. Seq2Seq
# --------------------------------------------------------------------------------------------

MODEL_SIZES = dict(src_vocab_size=9, tgt_vocab_size=7, embed_dim=3, hidden_dim=4)

SEQ2SEQ_MISTAKES = {
    "no_feed": "the attentional vector is not carried: feed each step's feed to the next step "
    "(zeros only at the first)",
    "feed_is_state": "the first attentional vector is s_0: it starts at zeros",
    "no_init": "the decoder starts from zeros: s_0 = decoder.initial_state(c)",
    "state_not_carried": "the state is not carried from step to step: feed each step's new "
    "state to the next",
    "no_mask": "the source padding is not masked: pass source_mask(src_lengths, T) to the decoder",
    "own_predictions": "the decoder is fed its own predictions: with teacher forcing the input "
    "at step t is the true previous token tgt_in[:, t]",
}


def seq2seq_variant(model: nn.Module, src, lengths, tgt_in, mistake: str = ""):
    h, c = model.encoder(src, lengths)
    T = src.shape[1]
    mask = torch.ones(src.shape, dtype=torch.bool) if mistake == "no_mask" else _mask(lengths, T)
    s0 = model.decoder.initial_state(c)
    s = torch.zeros_like(s0) if mistake == "no_init" else s0
    feed = s0.clone() if mistake == "feed_is_state" else torch.zeros_like(s0)
    logits, weights = [], []
    y = tgt_in[:, 0]
    for t in range(tgt_in.shape[1]):
        y = y if mistake == "own_predictions" else tgt_in[:, t]
        out, s_new, feed_new, a = model.decoder(y, s, feed, h, mask)
        y = out.argmax(-1)
        s = s if mistake == "state_not_carried" else s_new
        feed = feed if mistake == "no_feed" else feed_new
        logits.append(out)
        weights.append(a)
    return [torch.stack(logits, 1), torch.stack(weights, 1)]


def _mask(lengths: Tensor, T: int) -> Tensor:
    return torch.arange(T)[None, :] < lengths[:, None]


def seq2seq() -> dict:
    g = torch.Generator().manual_seed(50)
    torch.manual_seed(50)
    ref = _perturbed(key.Seq2Seq(**MODEL_SIZES), g, scale=0.8)
    src = torch.tensor([[3, 4, 5, 6, 7, 8], [8, 7, 3, 4, 0, 0], [5, 5, 4, 6, 3, 0]])
    lengths = torch.tensor([6, 4, 5])
    tgt_in = torch.tensor([[BOS, 3, 4, 5], [BOS, 6, 6, 3], [BOS, 4, 5, 6]])
    with torch.no_grad():
        want = list(ref(src, lengths, tgt_in))
        mistakes = {
            msg: seq2seq_variant(ref, src, lengths, tgt_in, name)
            for name, msg in SEQ2SEQ_MISTAKES.items()
        }
    return {"sizes": dict(MODEL_SIZES), "state": _state(ref), "src": src, "lengths": lengths,
            "tgt_in": tgt_in, "want": want, "mistakes": mistakes}  # fmt: skip


def record() -> dict:
    return {
        "luong_align": luong_align(),
        "coverage_attention": coverage_attention(),
        "coverage_loss": coverage_loss(),
        "decoder": decoder(),
        "seq2seq": seq2seq(),
    }


if __name__ == "__main__":
    data = record()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, OUT)
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
