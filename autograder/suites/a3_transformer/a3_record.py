"""Record A3's visible-check data: the key's answers, and the answers of the usual mistakes.

CANARY-HIDDEN-A3-95ae27f0: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

    python autograder/suites/a3_transformer/a3_record.py

writes ``course_lib/checks/recorded/a3_transformer.pt``: for each check, its inputs (weights
included), the key's answer and, in order, ``{message: answer}`` of the usual mistakes. The
visible checks (``course_lib/checks/a3.py``) compare the student's answer with these, so they name
the mistakes without the key's code; the hidden suite draws fresh inputs.
``tests/course/test_a3_key.py`` checks that the file is what this script writes today.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import a3_key as key  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "course_lib" / "checks" / "recorded" / "a3_transformer.pt"
PAD, BOS, EOS = 0, 1, 2


def _perturbed(module: nn.Module, g: torch.Generator) -> nn.Module:
    """Weights drawn from ``g``, norm gains off 1 (at 1, swapped norms would hide)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            base = 1.0 if "norm" in name else 0.0
            p.copy_(base + 0.5 * torch.randn(p.shape, generator=g))
    return module.eval()


def _state(module: nn.Module) -> dict[str, Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


# --------------------------------------------------------------------------------------------
# RMSNorm
# --------------------------------------------------------------------------------------------


def rms_norm() -> dict:
    g = torch.Generator().manual_seed(30)
    C, eps = 6, 0.1  # eps large enough that eps in the wrong place shows
    ref = _perturbed(key.RMSNorm(C, eps=eps), g)
    x = torch.randn(2, 3, C, generator=g) * 2 + 1
    w = ref.weight.detach()
    ms = x.pow(2).mean(-1, keepdim=True)
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    with torch.no_grad():
        mistakes = {
            "the mean is subtracted (that is LayerNorm without its bias): RMSNorm does not "
            "centre, it divides x itself by sqrt(mean(x^2) + eps)": (x - mean)
            / torch.sqrt(var + eps)
            * w,
            "it divides by the standard deviation: RMSNorm divides by the root mean square, "
            "sqrt(mean(x^2) + eps), with no mean subtracted anywhere": x
            / torch.sqrt(var + eps)
            * w,
            "eps is added to the root mean square instead of the mean square: divide by "
            "sqrt(mean(x^2) + eps)": x / (ms.sqrt() + eps) * w,
            "eps is left out: divide by sqrt(mean(x^2) + eps)": x / ms.sqrt() * w,
            "the square root is missing: divide by sqrt(mean(x^2) + eps), not mean(x^2) + eps": x
            / (ms + eps)
            * w,
            "the squares are summed, not averaged: the mean over the C features, "
            "mean(x^2, dim=-1)": x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w,
            "the statistics are taken over the batch axis: normalise each token over its last "
            "dimension (dim=-1, keepdim=True)": x / torch.sqrt(x.pow(2).mean(0) + eps) * w,
            "the statistics are taken over the whole tensor: normalise each token over its last "
            "dimension (dim=-1, keepdim=True)": x / torch.sqrt(x.pow(2).mean() + eps) * w,
            "the weight (gamma) is not applied: ... * weight": x / torch.sqrt(ms + eps),
        }
        return {"dim": C, "eps": eps, "state": _state(ref), "x": x, "want": ref(x),
                "mistakes": mistakes}  # fmt: skip


# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------

SIZES = dict(d_model=8, num_heads=2, d_ff=12)


def encoder_block() -> dict:
    g = torch.Generator().manual_seed(31)
    ref = _perturbed(key.PreNormEncoderBlock(**SIZES), g)
    x = torch.randn(3, 5, 8, generator=g)
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    keep = keep[:, None, None, :]  # (B, 1, 1, S)
    n1, n2, ff, attn = ref.norm1, ref.norm2, ref.ff, ref.self_attn
    with torch.no_grad():
        want, want_w = ref(x, keep)

        def pre(x0, a_in=n1, f_in=n2, mask=keep, res=(True, True), from_norm=(False, False)):
            h = a_in(x0) if a_in is not None else x0
            a = attn(h, mask=mask)
            x1 = (h if from_norm[0] else x0) + a if res[0] else a
            h1 = f_in(x1)
            f = ff(h1)
            return (h1 if from_norm[1] else x1) + f if res[1] else f

        h_post = n1(x + attn(x, mask=keep))
        mistakes = {
            "this is the post-norm block, Norm(x + f(x)) (the book's): a pre-norm block adds "
            "f(Norm(x)) to x, x = x + attention(norm1(x))": n2(h_post + ff(h_post)),
            "the residual adds the normalised x: x = x + attention(norm1(x)), not "
            "norm1(x) + attention(norm1(x))": pre(x, from_norm=(True, False)),
            "x is overwritten by its normalised copy before each sub-layer (x = norm1(x), then "
            "x = norm2(x)), so both residuals add the normalised x: keep x and normalise a "
            "copy, x = x + attention(norm1(x)), then x = x + ff(norm2(x))": pre(
                x, from_norm=(True, True)
            ),
            "the residual of the self-attention is missing: x = x + attention(norm1(x))": pre(
                x, res=(False, True)
            ),
            "the residual of the feed-forward is missing: x = x + ff(norm2(x))": pre(
                x, res=(True, False)
            ),
            "norm1 and norm2 are swapped: norm1 before the attention, norm2 before the "
            "feed-forward": pre(x, a_in=n2, f_in=n1),
            "the self-attention reads x, not norm1(x): normalise each sub-layer's input": pre(
                x, a_in=None
            ),
            "the padding mask is not passed to the self-attention (mask=mask)": pre(x, mask=None),
        }
        weight_mistakes = {
            "the padding mask is not passed to the self-attention (mask=mask)": attn(
                n1(x), return_weights=True
            )[1],
            "the self-attention reads x, not norm1(x): normalise each sub-layer's input": attn(
                x, mask=keep, return_weights=True
            )[1],
            "norm1 and norm2 are swapped: norm1 before the attention, norm2 before the "
            "feed-forward": attn(n2(x), mask=keep, return_weights=True)[1],
        }
    return {"sizes": dict(SIZES), "state": _state(ref), "x": x, "keep": keep, "want": want,
            "want_weights": want_w, "mistakes": mistakes,
            "weight_mistakes": weight_mistakes}  # fmt: skip


def decoder_block() -> dict:
    g = torch.Generator().manual_seed(32)
    ref = _perturbed(key.PreNormDecoderBlock(**SIZES), g)
    y, memory = torch.randn(3, 4, 8, generator=g), torch.randn(3, 6, 8, generator=g)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    keep = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=torch.bool)
    keep = keep[:, None, None, :]  # (B, 1, 1, S)
    n1, n2, n3, ff, sa, ca = ref.norm1, ref.norm2, ref.norm3, ref.ff, ref.self_attn, ref.cross_attn

    def run(self_mask=causal, memory_mask=keep, kv="memory", norms=(n1, n2, n3),
            res=(1, 1, 1), from_norm=False, order="sc"):  # fmt: skip
        out = y
        for step in order + "f":
            if step == "s":
                h = norms[0](out)
                a = sa(h, mask=self_mask)
                r = res[0]
            elif step == "c":
                h = norms[1](out)
                source = {"memory": memory, "y": h, "normed": norms[1](memory)}[kv]
                a = ca(h, source, source, mask=memory_mask if kv != "y" else None)
                r = res[1]
            else:
                h = norms[2](out)
                a = ff(h)
                r = res[2]
            out = ((h if from_norm else out) + a) if r else a
        return out

    with torch.no_grad():
        want, (want_self, want_cross) = ref(y, memory, causal, keep)
        p1 = n1(y + sa(y, mask=causal))
        p2 = n2(p1 + ca(p1, memory, memory, mask=keep))
        mistakes = {
            "the cross-attention reads the decoder (y) instead of the memory: its keys and "
            "values are the encoder output, memory": run(kv="y"),
            "the memory is normalised too: only the queries are, cross_attn(norm2(y), memory, "
            "memory); the memory arrives normalised": run(kv="normed"),
            "the self-attention is not causal: the decoder sees the future (pass self_mask to "
            "the self-attention)": run(self_mask=None),
            "the source padding is not masked in the cross-attention (pass memory_mask to "
            "cross_attn)": run(memory_mask=None),
            "this is the post-norm block, Norm(y + f(y)) (the book's): a pre-norm block adds "
            "f(Norm(y)) to y": n3(p2 + ff(p2)),
            "the residual adds the normalised y: y = y + f(norm(y)), not norm(y) + f(norm(y))": run(
                from_norm=True
            ),
            "the residual of the self-attention is missing: y = y + attention(norm1(y))": run(
                res=(0, 1, 1)
            ),
            "the residual of the cross-attention is missing: y = y + cross_attn(norm2(y), "
            "memory, memory)": run(res=(1, 0, 1)),
            "the residual of the feed-forward is missing: y = y + ff(norm3(y))": run(res=(1, 1, 0)),
            "norm2 and norm3 are swapped: norm1 before the self-attention, norm2 before the "
            "cross-attention, norm3 before the feed-forward": run(norms=(n1, n3, n2)),
            "norm1 and norm2 are swapped: norm1 before the self-attention, norm2 before the "
            "cross-attention": run(norms=(n2, n1, n3)),
            "the cross-attention comes first: the order is self-attention, cross-attention, "
            "feed-forward": run(order="cs"),
        }
        weight_mistakes = {
            "self": {
                "the self-attention is not causal: the decoder sees the future (pass self_mask)":
                    sa(n1(y), return_weights=True)[1],
            },
            "cross": {
                "the source padding is not masked in the cross-attention (pass memory_mask)":
                    ca(n2(y + sa(n1(y), mask=causal)), memory, memory, return_weights=True)[1],
            },
        }  # fmt: skip
    return {"sizes": dict(SIZES), "state": _state(ref), "y": y, "memory": memory,
            "causal": causal, "keep": keep, "want": want, "want_self": want_self,
            "want_cross": want_cross, "mistakes": mistakes,
            "weight_mistakes": weight_mistakes}  # fmt: skip


# --------------------------------------------------------------------------------------------
# Label-smoothed cross-entropy
# --------------------------------------------------------------------------------------------


def label_smoothing() -> dict:
    g = torch.Generator().manual_seed(33)
    V, eps = 7, 0.2
    logits = torch.randn(3, 5, V, generator=g) * 2
    target = torch.randint(3, V, (3, 5), generator=g)
    target[1, 3:] = PAD
    target[2, 4:] = PAD
    keep = target != PAD
    log_p = logits.log_softmax(-1)
    nll = -log_p.gather(-1, target[..., None])[..., 0]
    uniform = -log_p.mean(-1)
    others = (-log_p.sum(-1) - nll) / (V - 1)
    loss = (1 - eps) * nll + eps * uniform
    raw = -logits.gather(-1, target[..., None])[..., 0]
    log_p0 = logits.log_softmax(0)
    nll0 = -log_p0.gather(-1, target[..., None])[..., 0]
    mistakes = {
        "the padding positions are counted: take the mean over the positions whose target is "
        "not ignore_index": loss.mean(),
        "the padding positions are left out of the sum but counted in the mean: divide by the "
        "number of positions whose target is not ignore_index": (loss * keep).sum() / keep.numel(),
        "the loss is summed, not averaged: the mean over the positions whose target is not "
        "ignore_index": loss[keep].sum(),
        "there is no smoothing: the loss is (1 - smoothing) * (-log p_target) + smoothing * "
        "mean_v(-log p_v)": nll[keep].mean(),
        "the factor (1 - smoothing) on -log p_target is missing": (nll + eps * uniform)[
            keep
        ].mean(),
        "the smoothing is spread over the V - 1 wrong tokens only: spread it over all V tokens "
        "(the right one included), smoothing * mean_v(-log p_v)": ((1 - eps) * nll + eps * others)[
            keep
        ].mean(),
        "smoothing and 1 - smoothing are swapped: (1 - smoothing) * (-log p_target) + smoothing "
        "* mean_v(-log p_v)": (eps * nll + (1 - eps) * uniform)[keep].mean(),
        "the log-softmax is taken over the wrong axis: normalise over the vocabulary, dim=-1": (
            (1 - eps) * nll0 + eps * -log_p0.mean(-1)
        )[keep].mean(),
        "raw logits are used instead of log-probabilities: take log_softmax(dim=-1) first": (
            (1 - eps) * raw + eps * -logits.mean(-1)
        )[keep].mean(),
        "the smoothing term sums -log p_v over the vocabulary: it is the mean, smoothing * "
        "mean_v(-log p_v) (smoothing / V on each token)": ((1 - eps) * nll + eps * V * uniform)[
            keep
        ].mean(),
    }
    want = key.label_smoothed_cross_entropy(logits, target, eps, ignore_index=PAD)
    # F.cross_entropy's ignore_index, -100: no token id, so it must never index the vocabulary
    target_100 = target.masked_fill(~keep, -100)
    want_100 = key.label_smoothed_cross_entropy(logits, target_100, eps, ignore_index=-100)
    return {"logits": logits, "target": target, "smoothing": eps, "ignore_index": PAD,
            "want": want, "mistakes": mistakes, "target_100": target_100,
            "want_100": want_100}  # fmt: skip


# --------------------------------------------------------------------------------------------
# Beam search
# --------------------------------------------------------------------------------------------

BEAM_MISTAKES = {
    "no_sum": "the scores are not accumulated: a hypothesis's score is the sum of its "
    "log-probabilities, scores[:, :, None] + log_probs",
    "logits": "the scores add raw logits: add the log-softmax of the last position's logits",
    "first": "it scores the FIRST position's logits: use the last position, logits[:, -1]",
    "eos_live": "a hypothesis that ended with [EOS] stays live and is extended: once recorded as "
    "finished, its [EOS] extension must leave the live candidates (score -inf)",
    "eos_score": "a finished hypothesis's score leaves out log p([EOS]): include the [EOS] "
    "token's log-probability",
    "no_final": "the live hypotheses are dropped after max_new_tokens steps: they count as "
    "finished too (without [EOS])",
    "all_live": "all K rows start live with score 0: only row 0 ([BOS]) may, the others start "
    "at -inf, or the beam fills with copies of one hypothesis",
    "unsorted": "the hypotheses are not sorted: return each sentence's K best, best first",
    "bos": "the hypotheses start with [BOS]: return only the generated tokens",
    "length_norm": "the scores are divided by the hypothesis length: a hypothesis's score is its "
    "summed log-probability, with no length normalisation",
    "tiled": "the decoder's rows read the wrong sentence's memory: row b * K + k is hypothesis "
    "k of sentence b, so repeat each sentence's memory and mask K times in place, "
    "repeat_interleave(K, dim=0) (repeat(K, 1, 1) gives row i sentence i % B)",
}


@torch.no_grad()
def beam_variant(model, src, K, max_new, mistake=""):
    """The key's beam search with one usual mistake (``BEAM_MISTAKES``): (tokens, scores)."""
    B = src.shape[0]
    src_mask = src != PAD
    memory = model.encode(src, src_mask)
    if mistake == "tiled":
        memory, src_mask = memory.repeat(K, 1, 1), src_mask.repeat(K, 1)
    else:
        memory, src_mask = memory.repeat_interleave(K, dim=0), src_mask.repeat_interleave(K, dim=0)
    tokens = torch.full((B * K, 1), BOS, dtype=torch.long)
    scores = torch.full((B, K), float("-inf"), dtype=torch.float64)
    scores[:, 0 if mistake != "all_live" else slice(None)] = 0.0
    finished = [[] for _ in range(B)]
    for _ in range(max_new):
        logits = model.decode(tokens, memory, src_mask)[:, 0 if mistake == "first" else -1]
        V = logits.shape[-1]
        log_probs = logits.double() if mistake == "logits" else logits.double().log_softmax(-1)
        log_probs = log_probs.view(B, K, V)
        candidates = log_probs.clone() if mistake == "no_sum" else scores[:, :, None] + log_probs
        prefixes = tokens.view(B, K, -1)[:, :, 1:].tolist()
        for b in range(B):
            for k in range(K):
                s = (scores[b, k] if mistake == "eos_score" else candidates[b, k, EOS]).item()
                if candidates[b, k, EOS].item() > float("-inf"):
                    finished[b].append((s, prefixes[b][k] + [EOS]))
        if mistake != "eos_live":
            candidates[:, :, EOS] = float("-inf")
        scores, index = candidates.view(B, K * V).topk(K, dim=-1)
        rows = index // V + torch.arange(B)[:, None] * K
        tokens = torch.cat([tokens[rows.flatten()], (index % V).view(-1, 1)], dim=1)
    prefixes = tokens.view(B, K, -1)[:, :, 1:].tolist()
    if mistake != "no_final":
        for b in range(B):
            for k in range(K):
                if scores[b, k] > float("-inf"):
                    finished[b].append((scores[b, k].item(), prefixes[b][k]))
    if mistake == "length_norm":
        finished = [[(s / len(ids), ids) for s, ids in found] for found in finished]
    if mistake == "unsorted":
        best = [found[:K] for found in finished]
    else:
        best = [sorted(found, key=lambda f: -f[0])[:K] for found in finished]
    if mistake == "bos":
        best = [[(s, [BOS, *ids]) for s, ids in found] for found in best]
    T = max(len(ids) for found in best for _, ids in found)
    out = torch.full((B, K, T), PAD, dtype=torch.long)
    out_scores = torch.full((B, K), float("-inf"), dtype=torch.float64)
    for b, found in enumerate(best):
        for k, (score, ids) in enumerate(found):
            out[b, k, : len(ids)] = torch.tensor(ids)
            out_scores[b, k] = score
    return out, out_scores


@torch.no_grad()
def cut_gap(model, src, K, max_new) -> float:
    """The smallest gap, relative to 1 + |score|, between the K-th and the (K + 1)-th best
    extension at the steps where the beam drops some (every step but the last, whose cut is the
    final one: a tie there lets either hypothesis be returned, which the tests accept). Cuts
    among hypotheses holding [PAD] (score under -1e3) never reach the answer and are skipped."""
    B = src.shape[0]
    src_mask = src != PAD
    memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)
    src_mask = src_mask.repeat_interleave(K, dim=0)
    tokens = torch.full((B * K, 1), BOS, dtype=torch.long)
    scores = torch.full((B, K), float("-inf"), dtype=torch.float64)
    scores[:, 0] = 0.0
    gap = float("inf")
    for _ in range(max_new - 1):
        log_probs = model.decode(tokens, memory, src_mask)[:, -1].double().log_softmax(-1)
        V = log_probs.shape[-1]
        candidates = scores[:, :, None] + log_probs.view(B, K, V)
        candidates[:, :, EOS] = float("-inf")
        ranked = candidates.view(B, K * V).sort(dim=-1, descending=True).values
        kth, next_ = ranked[:, K - 1], ranked[:, K]
        counted = kth > -1e3
        if counted.any():
            gap = min(gap, ((kth - next_) / (1 + kth.abs()))[counted].min().item())
        scores, index = candidates.view(B, K * V).topk(K, dim=-1)
        rows = index // V + torch.arange(B)[:, None] * K
        tokens = torch.cat([tokens[rows.flatten()], (index % V).view(-1, 1)], dim=1)
    return gap


CUT_MARGIN = 1e-6  # no two extensions nearer at a cut: every correct search keeps the same beam
BEAM_MODEL = dict(src_vocab_size=9, tgt_vocab_size=7, d_model=8, num_heads=2,
                  num_encoder_layers=1, num_decoder_layers=1, d_ff=12, share_embeddings=False,
                  tie_embeddings=False, fused_attn=False)  # fmt: skip


def shift_logit(model: nn.Module, token: int, delta: float) -> None:
    """Add exactly ``delta`` to every logit of ``token`` (post-norm: the decoder ends with
    y = gamma * z + beta, sum(z) = 0; with beta = gamma, (1 / gamma) . y = C always)."""
    norm = model.decoder_layers[-1].norm3
    with torch.no_grad():
        norm.bias.copy_(norm.weight)
        model.out_proj.weight[token] += delta / norm.weight / norm.weight.numel()


def beam_model(seed: int, eos_shift: float = 0.0) -> nn.Module:
    from course_lib.models import create

    torch.manual_seed(seed)
    model = create("transformer-tiny", **BEAM_MODEL).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # peaked distributions, where the search matters
        for norm in (m for n, m in model.named_modules() if n.endswith(("norm1", "norm2"))):
            norm.weight.abs_().add_(0.5)
        model.decoder_layers[-1].norm3.weight.abs_().add_(0.5)  # no zero gain to divide by
    shift_logit(model, PAD, -1e4)  # [PAD] only after a hypothesis ends
    shift_logit(model, EOS, eos_shift)
    return model


def beam_search() -> dict:
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 7, 3, 0, 0], [5, 5, 4, 6, 0]])
    cases = []
    for what, seed, shift, K, max_new in [
        ("hypotheses that end at different steps", 40, 1.5, 3, 5),
        ("a beam as wide as every prefix (an exhaustive search)", 41, 1.0, 25, 3),
        ("hypotheses that never emit [EOS]", 42, -1e4, 2, 4),
    ]:
        model = beam_model(seed, shift)
        assert cut_gap(model, src, K, max_new) > CUT_MARGIN, f"a near tie in the beam: {what}"
        tokens, scores = key.beam_search(model, src, beam_size=K, max_new_tokens=max_new)
        mistakes = {}
        for name, message in BEAM_MISTAKES.items():
            wrong, wrong_scores = beam_variant(model, src, K, max_new, name)
            same_tokens = wrong.shape == tokens.shape and torch.equal(wrong, tokens)
            if not same_tokens or not torch.allclose(wrong_scores, scores, atol=1e-6):
                mistakes[message] = {"tokens": wrong, "scores": wrong_scores}
        cases.append({"what": what, "seed": seed, "eos_shift": shift, "beam_size": K,
                      "max_new_tokens": max_new, "state": _state(model), "src": src,
                      "tokens": tokens, "scores": scores, "mistakes": mistakes})  # fmt: skip
    return {"model": dict(BEAM_MODEL), "cases": cases}


def record() -> dict:
    return {
        "rms_norm": rms_norm(),
        "encoder_block": encoder_block(),
        "decoder_block": decoder_block(),
        "label_smoothing": label_smoothing(),
        "beam_search": beam_search(),
    }


if __name__ == "__main__":
    data = record()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, OUT)
    for case in data["beam_search"]["cases"]:
        print(f"beam search, {case['what']}: {len(case['mistakes'])} of "
              f"{len(BEAM_MISTAKES)} mistakes differ")  # fmt: skip
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
