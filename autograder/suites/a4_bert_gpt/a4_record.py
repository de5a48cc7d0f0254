"""Record A4's visible-check data: the key's answers, and the answers of the usual mistakes.

CANARY-HIDDEN-A4-7c2e91d0: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

    python autograder/suites/a4_bert_gpt/a4_record.py

writes ``course_lib/checks/recorded/a4_bert_gpt.pt``: for each check, its inputs (weights
included), the key's answer and, in order, ``{message: answer}`` of the usual mistakes (for the
random functions: the exact distributions, the key's and the mistakes'). The visible checks
(``course_lib/checks/a4.py``) compare the student's answer with these, so they name the mistakes
without the key's code; the hidden suite draws fresh inputs.
``tests/course/test_a4_key.py`` checks that the file is what this script writes today.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import a4_key as key  # noqa: E402

from course_lib.data.corpus import generate_corpus  # noqa: E402
from course_lib.tokenizers import learn_merges, merge_pair, pretokenize  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "course_lib" / "checks" / "recorded" / "a4_bert_gpt.pt"


def _state(module: nn.Module) -> dict[str, Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


# --------------------------------------------------------------------------------------------
# BPE
# --------------------------------------------------------------------------------------------

BPE_TEXT = "the little foxes sleep in the barn .\n  a cat sees a banana, naïve 日本 🦊!"


def corpus_merges(n: int = 60) -> list[tuple[int, int]]:
    counts = Counter(pretokenize("\n".join(generate_corpus(300, seed=1))))
    words = [list(w.encode("utf-8")) for w in counts]
    return learn_merges(words, list(counts.values()), num_merges=n, first_id=256)


def bpe_leftmost(word: list[int], merges: list) -> list[int]:
    """``word`` merged by the leftmost pair that has a merge, again and again."""
    rank = {tuple(pair): k for k, pair in enumerate(merges)}
    while True:
        pair = next((p for p in zip(word, word[1:]) if p in rank), None)
        if pair is None:
            return word
        word = merge_pair(word, pair, 256 + rank[pair])


def bpe_variant(text: str, merges: list, mistake: str) -> list[int]:
    """The key's encoding with one usual mistake."""
    pieces = [text] if mistake == "no_pretokenize" else pretokenize(text)
    order = list(enumerate(merges))
    if mistake == "reversed":
        order = order[::-1]
    ids: list[int] = []
    for piece in pieces:
        word = list(piece.encode("utf-8"))
        if mistake == "latin1":
            word = [min(ord(c), 255) for c in piece]
        if mistake == "leftmost":
            ids.extend(bpe_leftmost(word, merges))
            continue
        for k, pair in order:
            if mistake == "stop_at_absent" and tuple(pair) not in set(zip(word, word[1:])):
                break
            new = 255 + k if mistake == "id_offset" else 256 + k
            if mistake == "first_only":
                for i in range(len(word) - 1):
                    if (word[i], word[i + 1]) == tuple(pair):
                        word = word[:i] + [new] + word[i + 2 :]
                        break
            else:
                word = merge_pair(word, tuple(pair), new)
        ids.extend(word)
    return ids


BPE_MISTAKES = {
    "reversed": "the merges are applied latest first: apply them in the order they were "
    "learned (merge 0 first)",
    "first_only": "only the first occurrence of a pair is merged: replace every occurrence "
    "(merge_pair does)",
    "id_offset": "merge k creates id 255 + k: it creates id 256 + k",
    "latin1": "the ids are characters, not UTF-8 bytes: start from piece.encode('utf-8')",
    "no_pretokenize": "a merge joined the end of one pre-token to the start of the next ('e' "
    "and ' ' in 'the little'): pretokenize the text first and merge inside each pre-token",
    "leftmost": "the leftmost pair that has a merge is merged first: merge the pair of the "
    "pre-token with the lowest merge number (the merge learned first), then look again",
    "stop_at_absent": "it stops at the first merge whose pair is not in the pre-token: skip "
    "that merge and go on, a later merge can still apply",
}


def bpe() -> dict:
    # the learned merges, and one whose pair occurs only across two pre-tokens ('e', ' ')
    merges = [*corpus_merges(), (ord("e"), ord(" "))]
    want = key.bpe_encode(BPE_TEXT, merges)
    mistakes = {}
    for name, message in BPE_MISTAKES.items():
        wrong = bpe_variant(BPE_TEXT, merges, name)
        if wrong != want:
            mistakes[message] = wrong
    # decoding: ids that end in the middle of a character, and a character cut between tokens
    ids = key.bpe_encode("the fox 🦊 naïve", merges)
    fox = list("🦊".encode())
    cut = ids + fox[:2] + [32] + fox[:2]  # a character cut in half, then the text goes on
    vocab = [bytes([i]) for i in range(256)]
    for a, b in merges:
        vocab.append(vocab[a] + vocab[b])
    joined = b"".join(vocab[i] for i in cut)
    decode_mistakes = {
        "the bytes that are not valid UTF-8 are dropped: decode with errors='replace'": (
            joined.decode("utf-8", errors="ignore")
        ),
        "each id is decoded on its own: join the bytes of all ids, then decode once": "".join(
            vocab[i].decode("utf-8", errors="replace") for i in cut
        ),
        "the bytes are decoded as Latin-1: decode them as UTF-8": joined.decode("latin-1"),
    }
    return {
        "merges": [list(p) for p in merges],
        "text": BPE_TEXT,
        "want": want,
        "mistakes": mistakes,
        "decode_ids": cut,
        "decode_want": key.bpe_decode(cut, merges),
        "decode_mistakes": decode_mistakes,
    }


# --------------------------------------------------------------------------------------------
# WordPiece
# --------------------------------------------------------------------------------------------

WP_PIECES = [
    "[UNK]",
    "[PAD]",
    "un",
    "u",
    "##n",
    "##b",
    "##be",
    "##bel",
    "##lie",
    "##li",
    "##e",
    "##v",
    "##able",
    "##a",
    "##ble",
    "the",
    "th",
    "##e",
    "fox",
    "f",
    "##ox",
    "##es",
    "##s",
    "sleep",
    "s",
    "##l",
    "##eep",
    "##ing",
    "barn",
    "b",
    "##ar",
    "##n",
    "owl",
    "o",
    "##w",
]
WP_TEXT = "the  foxes\tsleeping unbelievable bars owly zebra fox"


def wp_vocab() -> dict[str, int]:
    vocab: dict[str, int] = {}
    for piece in WP_PIECES:
        vocab.setdefault(piece, len(vocab))
    return vocab


def wp_variant(text: str, vocab: dict[str, int], mistake: str) -> list[int]:
    unk = vocab["[UNK]"]
    words = text.split(" ") if mistake == "split_space" else text.split()
    ids: list[int] = []
    for word in words:
        pieces, start = [], 0
        while start < len(word):
            ends = (
                range(start + 1, len(word) + 1)
                if mistake == "shortest"
                else range(len(word), start, -1)
            )
            found = None
            for end in ends:
                sub = word[start:end]
                piece = (
                    sub
                    if (start == 0 and mistake != "hash_first") or mistake == "no_hash"
                    else "##" + sub
                )
                if piece in vocab:
                    found = (end, piece)
                    break
            if found is None:
                if mistake == "unk_piece":
                    pieces.append(unk)
                    start += 1
                    continue
                if mistake == "unk_rest":
                    pieces.append(unk)
                else:
                    pieces = [] if mistake == "skip_word" else [unk]
                break
            pieces.append(vocab[found[1]])
            start = found[0]
        ids.extend(pieces)
    return ids


WP_MISTAKES = {
    "shortest": "it takes the shortest match: WordPiece takes the longest vocabulary entry "
    "that matches, then continues after it",
    "no_hash": "the continuations are looked up without ##: a piece that continues a word "
    "is the entry '##' + piece",
    "hash_first": "the first piece of a word has ## too: only the pieces that continue a word do",
    "unk_piece": "only the piece that fails becomes [UNK]: when no entry matches at some "
    "position the WHOLE word is one [UNK]",
    "unk_rest": "the pieces found before a position no entry matches are kept, then one "
    "[UNK]: when no entry matches at some position the WHOLE word is one [UNK], without the "
    "pieces found before",
    "skip_word": "a word no entry matches is dropped: it becomes one [UNK]",
    "split_space": "the text is cut at single spaces only: cut at any whitespace, text.split()",
}


def wordpiece() -> dict:
    vocab = wp_vocab()
    want = key.wordpiece_encode(WP_TEXT, vocab)
    mistakes = {}
    for name, message in WP_MISTAKES.items():
        wrong = wp_variant(WP_TEXT, vocab, name)
        if wrong != want:
            mistakes[message] = wrong
    return {"vocab": vocab, "text": WP_TEXT, "want": want, "mistakes": mistakes}


# --------------------------------------------------------------------------------------------
# Whole-word masking: the inputs (the check measures frequencies on the student's output)
# --------------------------------------------------------------------------------------------


def whole_word() -> dict:
    g = torch.Generator().manual_seed(40)
    V, mask_id = 40, 7
    special = [0, 19, 33]  # [PAD]-like, [CLS]-like, [SEP]-like, anywhere in the vocabulary
    B, T = 2000, 12
    ordinary = [i for i in range(V) if i not in special and i != mask_id]
    ids = torch.tensor(ordinary)[torch.randint(len(ordinary), (B, T), generator=g)]
    ids[:, 0], ids[:, -1] = 19, 33
    ids[:, 5] = 33  # a separator inside the row
    ids[torch.rand(B, generator=g) < 0.3, -3:] = 0  # padding at the end of some rows
    is_subword = torch.rand(B, T, generator=g) < 0.45
    special_t = torch.tensor(special + [mask_id])
    is_special = torch.isin(ids, special_t)
    is_subword &= ~is_special
    is_subword[:, 1] = False  # the first word of a row starts it
    ids[torch.rand(B, T, generator=g) < 0.03] = mask_id  # a [MASK] already in the input
    after_mask = torch.zeros_like(is_subword)
    after_mask[:, 1:] = ids[:, :-1] == mask_id
    is_subword &= (ids != mask_id) & ~after_mask  # a continuation follows a piece of its word
    is_subword[:, 6] = False  # and the first after a separator
    return {
        "ids": ids,
        "is_subword": is_subword,
        "vocab_size": V,
        "mask_id": mask_id,
        "special_ids": special,
        "prob": 0.3,
    }


# --------------------------------------------------------------------------------------------
# Segments
# --------------------------------------------------------------------------------------------


def segments() -> dict:
    SEP, PAD = 3, 0
    ids = torch.tensor(
        [
            [2, 5, 6, SEP, 7, 8, 9, SEP, PAD, PAD],
            [2, 5, SEP, 6, 7, SEP, PAD, PAD, PAD, PAD],
            [2, 5, 6, 7, 8, SEP, PAD, PAD, PAD, PAD],
            [2, 9, SEP, 5, 6, 7, 8, 9, 5, SEP],
        ]
    )
    is_sep = (ids == SEP).long()
    seps = is_sep.cumsum(1)
    want = key.segment_ids(ids, sep_id=SEP, pad_id=PAD)
    mistakes = {
        "the first [SEP] is in segment 1: it closes segment 0 (count the [SEP]s strictly "
        "before each token)": (seps >= 1).long().masked_fill(ids == PAD, 0),
        "the padding is not segment 0": (seps - is_sep >= 1).long(),
        "the second [SEP] is in segment 0: it closes segment 1": ((seps - is_sep >= 1) & (seps < 2))
        .long()
        .masked_fill(ids == PAD, 0),
    }
    return {"ids": ids, "sep_id": SEP, "pad_id": PAD, "want": want, "mistakes": mistakes}


# --------------------------------------------------------------------------------------------
# Grouped-query attention
# --------------------------------------------------------------------------------------------

GQA_SIZES = dict(n_embd=16, n_head=4, n_kv_head=2)


def gqa_variant(ref: key.GroupedCausalSelfAttention, x: Tensor, past=None, mistake: str = ""):
    """The key's forward with one usual mistake: (y, (k, v))."""
    B, T, C = x.shape
    H, G = ref.n_head, ref.n_kv_head
    D = C // H
    q = ref.q_proj(x).view(B, T, H, D).transpose(1, 2)
    k = ref.k_proj(x).view(B, T, G, D).transpose(1, 2)
    v = ref.v_proj(x).view(B, T, G, D).transpose(1, 2)
    if mistake == "split_no_transpose":  # (B, T, C) viewed as (B, heads, T, D) directly
        q, k, v = (
            proj(x).reshape(B, n, T, D)
            for proj, n in ((ref.q_proj, H), (ref.k_proj, G), (ref.v_proj, G))
        )
    if past is not None:
        if mistake == "cat_order":
            k, v = torch.cat([k, past[0]], 2), torch.cat([v, past[1]], 2)
        else:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
    S = k.shape[2]
    if mistake == "repeat":
        k_all, v_all = k.repeat(1, H // G, 1, 1), v.repeat(1, H // G, 1, 1)
    else:
        k_all, v_all = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
    scale = {"scale_c": math.sqrt(C), "no_scale": 1.0}.get(mistake, math.sqrt(D))
    scores = q @ k_all.transpose(-2, -1) / scale
    keep = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
    if mistake == "no_offset":
        keep = torch.ones(T, S, dtype=torch.bool).tril()
    elif mistake == "strict":
        keep = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T - 1)
        keep[:, 0] = True  # (no row without a key)
    if mistake != "no_mask" and not (mistake == "mask_only_full" and past is not None):
        scores = scores.masked_fill(~keep, float("-inf"))
    w = torch.softmax(scores, dim=-2 if mistake == "softmax_dim" else -1)
    y = w @ v_all  # (B, H, T, D)
    if mistake != "merge_no_transpose":
        y = y.transpose(1, 2)  # (B, T, H, D)
    y = y.reshape(B, T, C)
    y = y if mistake == "no_o_proj" else ref.o_proj(y)
    if mistake == "cache_repeated":
        return y, (k_all, v_all)
    if mistake == "cache_new_only":
        return y, (k[:, :, -T:], v[:, :, -T:])
    return y, (k, v)


GQA_MISTAKES = {
    "repeat": "the key/value heads are tiled (repeat), so query head h reads head h % G: "
    "consecutive query heads share one key/value head, h // (H / G) (repeat_interleave)",
    "scale_c": "the scores are divided by sqrt(C): divide by sqrt(D), D = C / H",
    "no_mask": "there is no causal mask: token i may only attend to positions 0 .. i",
    "softmax_dim": "the softmax runs over the queries: normalise over the keys (dim=-1)",
    "no_o_proj": "the output projection o_proj is missing",
    "strict": "a token does not attend to itself: position i sees 0 .. i, itself included",
    "no_scale": "the scores are not scaled: divide them by sqrt(D), D = C / H",
    "split_no_transpose": "the heads are split with view(B, H, T, D), which mixes tokens and "
    "heads: view the projection as (B, T, H, D), then transpose(1, 2)",
    "merge_no_transpose": "the heads are merged with reshape(B, T, C) straight from (B, H, T, D), "
    "which mixes tokens and heads: transpose(1, 2) back to (B, T, H, D) first",
}
CACHE_MISTAKES = {
    "no_offset": "the causal mask starts at 0 inside a chunk that follows a cache: new token "
    "i sits at position S_past + i (tril(diagonal=S - T))",
    "cat_order": "the new keys and values are put before the cached ones: append them after",
    "mask_only_full": "the causal mask is skipped when a cache is passed: a chunk of several "
    "new tokens after a cache needs it too",
    "cache_new_only": "the returned cache holds only the new tokens: return the keys and "
    "values of all S_past + T tokens",
}


def _perturbed(module: nn.Module, g: torch.Generator) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return module.eval()


def gqa() -> dict:
    g = torch.Generator().manual_seed(41)
    ref = _perturbed(key.GroupedCausalSelfAttention(**GQA_SIZES), g)
    x = torch.randn(2, 6, 16, generator=g)
    with torch.no_grad():
        y, (k, v) = ref(x)
        mistakes = {m: gqa_variant(ref, x, None, name)[0] for name, m in GQA_MISTAKES.items()}
        # the cache: the same tokens one at a time, and as chunks (cut at 2 and 3)
        pieces = {}
        for what, cuts in (("one token at a time", [1, 2, 3, 4, 5]), ("in chunks", [2, 3])):
            runs = {"": None, **{m: name for name, m in CACHE_MISTAKES.items()}}
            outs = {}
            for message, name in runs.items():
                past, ys = None, []
                for start, end in zip([0, *cuts], [*cuts, 6]):
                    yy, past = gqa_variant(ref, x[:, start:end], past, name or "")
                    ys.append(yy)
                outs[message] = torch.cat(ys, dim=1)
            want = outs.pop("")
            pieces[what] = {
                "cuts": cuts,
                "want": want,
                "mistakes": {
                    m: o for m, o in outs.items() if not torch.allclose(o, want, atol=1e-5)
                },
            }
    return {
        "sizes": dict(GQA_SIZES),
        "state": _state(ref),
        "x": x,
        "want": y,
        "k": k,
        "v": v,
        "mistakes": mistakes,
        "pieces": pieces,
    }


# --------------------------------------------------------------------------------------------
# min-p, repetition penalty
# --------------------------------------------------------------------------------------------


def min_p() -> dict:
    g = torch.Generator().manual_seed(42)
    logits = torch.randn(2, 3, 12, generator=g) * 2
    mp = 0.15
    probs = logits.softmax(-1)
    inf = float("-inf")
    want = key.min_p_filter(logits, mp)
    mistakes = {
        "the threshold is min_p itself: it is min_p times the largest probability": (
            logits.masked_fill(probs < mp, inf)
        ),
        "the logits are compared, not the probabilities: keep p >= min_p * max p": (
            logits.masked_fill(logits < mp * logits.amax(-1, keepdim=True), inf)
        ),
        "it keeps the tokens that should go and drops the others": logits.masked_fill(
            probs >= mp * probs.amax(-1, keepdim=True), inf
        ),
        "the softmax runs over the wrong dimension: use the last dimension, dim=-1": (
            logits.masked_fill(
                logits.softmax(0) < mp * logits.softmax(0).amax(-1, keepdim=True), inf
            )
        ),
    }
    return {"logits": logits, "min_p": mp, "want": want, "mistakes": mistakes}


def penalty() -> dict:
    g = torch.Generator().manual_seed(43)
    logits = torch.randn(3, 10, generator=g) * 2
    prev = torch.tensor([[1, 4, 4, 7, 1], [0, 2, 2, 2, 9], [3, 5, 8, 5, 3]])
    theta = 1.5
    want = key.repetition_penalty(logits, prev, theta)
    divided, counted, everyone, inverted = (
        logits.clone(),
        logits.clone(),
        logits.clone(),
        (logits.clone()),
    )
    for b in range(3):
        for t in set(prev[b].tolist()):
            divided[b, t] = logits[b, t] / theta
            z = logits[b, t]
            inverted[b, t] = z * theta if z > 0 else z / theta
        for t in prev[b].tolist():
            z = counted[b, t]
            counted[b, t] = z / theta if z > 0 else z * theta
    for t in set(prev.flatten().tolist()):
        z = logits[:, t]
        everyone[:, t] = torch.where(z > 0, z / theta, z * theta)
    mistakes = {
        "every logit of a seen token is divided by the penalty: a negative logit is multiplied "
        "by it (dividing would make the token more likely)": divided,
        "a token is penalised once per occurrence: once, however often it occurs": counted,
        "the tokens of every row are penalised in every row: each row has its own prev_ids": (
            everyone
        ),
        "a positive logit is multiplied and a negative one divided: the other way round": (
            inverted
        ),
    }
    return {
        "logits": logits,
        "prev_ids": prev,
        "penalty": theta,
        "want": want,
        "mistakes": mistakes,
    }


# --------------------------------------------------------------------------------------------
# sample_next_token: exact distributions
# --------------------------------------------------------------------------------------------


def _probs(z: Tensor) -> Tensor:
    return torch.softmax(z.double(), dim=-1)


def sampling() -> dict:
    g = torch.Generator().manual_seed(44)
    V = 10
    logits = torch.randn(V, generator=g) * 1.5
    prev = torch.tensor([int(logits.argmax()), int(logits.argmin()), 3])
    settings = [
        ("temperature=0.6", dict(temperature=0.6)),
        ("temperature=1.7, min_p=0.2", dict(temperature=1.7, min_p=0.2)),
        (
            "penalty=2.0 on three seen tokens, temperature=1.3, min_p=0.1",
            dict(penalty=2.0, temperature=1.3, min_p=0.1, prev=True),
        ),
    ]
    cases = []
    for what, s in settings:
        t, mp, theta = s.get("temperature", 1.0), s.get("min_p"), s.get("penalty", 1.0)
        z = logits[None]
        p = prev[None] if s.get("prev") else None
        want = key.sample_next_token(
            z, p, temperature=t, penalty=theta, min_p=mp, generator=torch.Generator().manual_seed(0)
        )
        del want  # a draw; the exact distribution is what is recorded

        def dist(temperature=t, min_p=mp, pen=theta, min_p_first=False, use_prev=True, z=z, p=p):
            zz = z
            if p is not None and use_prev:
                zz = key.repetition_penalty(zz, p, pen)
            if min_p_first and min_p is not None:
                zz = key.min_p_filter(zz, min_p)
            zz = zz / temperature
            if min_p is not None and not min_p_first:
                zz = key.min_p_filter(zz, min_p)
            return _probs(zz)[0]

        mistakes = {
            "the logits are multiplied by the temperature: divide them by it": dist(
                temperature=1 / t
            ),
            "the temperature is left out: divide the logits by it": dist(temperature=1.0),
        }
        if mp is not None:
            mistakes["min-p is applied before the temperature: the temperature comes first"] = dist(
                min_p_first=True
            )
            mistakes["min_p is left out: filter after the temperature"] = dist(min_p=None)
        if p is not None:
            mistakes["the repetition penalty is left out: apply it first, on prev_ids"] = dist(
                use_prev=False
            )
        want = dist()
        mistakes = {m: d for m, d in mistakes.items() if (d - want).abs().max() > 0.02}
        one_hot = torch.zeros(V, dtype=torch.float64)
        one_hot[int(want.argmax())] = 1.0
        mistakes["it takes the arg-max: sample with torch.multinomial"] = one_hot
        cases.append(
            {
                "what": what,
                "logits": logits,
                "prev_ids": prev if s.get("prev") else None,
                "kwargs": {
                    k: v
                    for k, v in dict(temperature=t, penalty=theta, min_p=mp).items()
                    if v is not None
                },
                "want": want,
                "mistakes": mistakes,
            }
        )
    return {"draws": 20_000, "cases": cases}


# --------------------------------------------------------------------------------------------
# generate, with the book's GPT
# --------------------------------------------------------------------------------------------

GPT_SIZES = dict(vocab_size=12, block_size=12, n_layer=1, n_head=2, n_embd=8, fused_attn=False)


def book_gpt(seed: int) -> nn.Module:
    from course_lib.models import create

    g = torch.Generator().manual_seed(seed)
    model = create("gpt-tiny", **GPT_SIZES).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.8)
    return model


@torch.no_grad()
def generate_variant(model, idx, new, theta, mistake=""):
    """Greedy generation with the penalty and one usual mistake."""
    out = idx
    for _ in range(new):
        last = model(out)[:, -1]
        seen = {"prompt_only": idx, "new_only": out[:, idx.shape[1] :], "none": out[:, :0]}.get(
            mistake, out
        )
        z = key.repetition_penalty(last, seen, theta) if seen.shape[1] else last
        out = torch.cat([out, z.argmax(-1, keepdim=True)], dim=1)
    return out[:, idx.shape[1] :] if mistake == "only_new" else out


GENERATE_MISTAKES = {
    "none": "the greedy tokens ignore the repetition penalty: take the arg-max of the "
    "penalised logits",
    "prompt_only": "only the prompt's tokens are penalised: the generated ones count too",
    "new_only": "only the generated tokens are penalised: the prompt's count too",
    "only_new": "it returns only the new tokens: return the prompts followed by them",
}


def generation() -> dict:
    model = book_gpt(45)
    prompt = torch.tensor([[1, 5, 5, 9], [3, 3, 3, 3], [11, 0, 2, 7]])
    theta, new = 3.0, 6
    want = key.generate(model, prompt, new, greedy=True, penalty=theta)
    mistakes = {}
    for name, message in GENERATE_MISTAKES.items():
        wrong = generate_variant(model, prompt, new, theta, name)
        if wrong.shape != want.shape or not torch.equal(wrong, want):
            mistakes[message] = wrong
    with torch.no_grad():
        last = model(prompt[:1])[0, -1]
    first = _probs(
        key.min_p_filter(key.repetition_penalty(last[None], prompt[:1], 1.5) / 1.4, 0.05)
    )[0]
    return {
        "sizes": dict(GPT_SIZES),
        "state": _state(model),
        "prompt": prompt,
        "penalty": theta,
        "max_new_tokens": new,
        "want": want,
        "mistakes": mistakes,
        "sampled": {
            "penalty": 1.5,
            "temperature": 1.4,
            "min_p": 0.05,
            "draws": 6000,
            "want": first,
        },
    }


def record() -> dict:
    return {
        "bpe": bpe(),
        "wordpiece": wordpiece(),
        "whole_word": whole_word(),
        "segments": segments(),
        "gqa": gqa(),
        "min_p": min_p(),
        "penalty": penalty(),
        "sampling": sampling(),
        "generate": generation(),
    }


if __name__ == "__main__":
    data = record()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, OUT)
    for part in ("bpe", "wordpiece", "gqa", "min_p", "penalty", "generate"):
        print(f"{part}: {len(data[part]['mistakes'])} mistakes differ")
    for what, case in data["gqa"]["pieces"].items():
        print(f"cache {what}: {len(case['mistakes'])} of {len(CACHE_MISTAKES)} mistakes differ")
    for case in data["sampling"]["cases"]:
        print(f"sampling {case['what']}: {len(case['mistakes'])} mistakes differ")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
