"""Visible checks for assignment 4 (BERT and GPT): tokenizer, masking, embeddings, GPT, sampling.

Each ``check_*`` runs the student's function or class on small fixed inputs, compares it with the
reference in ``course_lib`` and, when it differs, names the likely mistake (merges applied out of
order, special tokens masked, no causal mask, a cache whose mask ignores the cached positions, a
nucleus that drops the token crossing p, ...). Passing them is a hint, not the grade.

Shape legend: ``B`` batch, ``T`` new tokens, ``S`` cached tokens, ``C`` channels, ``H`` heads,
``D`` head dim, ``V`` vocabulary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from course_lib import tokenizers as bpe

from .core import CheckFailed, check_close, check_shape, passed


def _gpt() -> Any:
    """``course_lib.models.gpt``, imported on first use: importing this module loads no model
    code, so a notebook that imports the checks keeps its namespace free of reference models."""
    from course_lib.models import gpt

    return gpt


def _bert() -> Any:
    from course_lib.models import bert

    return bert


SAMPLE_TEXT = (
    "the cat sees the dog . the dog sees the cat . a little fox sleeps near the old barn .\n"
    "two little foxes sleep . the old barn is red ! numbers 2024 and 42 ; café, naïve 🦊"
)
UNICODE_TEXTS = ("naïve café 🦊🦊 über", "  two  spaces\n\ttab", "日本語のテキスト", "", "a")


def _as_pairs(merges: Any) -> list[tuple[int, int]]:
    try:
        return [(int(a), int(b)) for a, b in merges]
    except (TypeError, ValueError):
        raise CheckFailed(
            f"merges should be a list of (first, second) pairs of ints, got {merges!r:.200}"
        ) from None


def reference_merges(text: str, num_merges: int) -> list[tuple[int, int]]:
    """The merges of the assignment's rules (ids 0..255 are bytes, merge k is id 256 + k)."""
    words = Counter(bpe.pretokenize(text))
    return bpe.learn_merges(
        [list(w.encode("utf-8")) for w in words], list(words.values()),
        num_merges=num_merges, first_id=256,
    )  # fmt: skip


def _merges_of_words(words: list[str], num_merges: int) -> list[tuple[int, int]]:
    counts = Counter(words)
    return bpe.learn_merges(
        [list(w.encode("utf-8")) for w in counts], list(counts.values()),
        num_merges=num_merges, first_id=256,
    )  # fmt: skip


def reference_encode(text: str, merges: list[tuple[int, int]]) -> list[int]:
    return bpe.BPETokenizer(merges=merges, special_tokens=()).encode(text, allowed_special=False)


def check_count_pairs(fn: Callable[..., Any]) -> None:
    """``count_pairs(words, counts)`` on words with repeated and overlapping pairs."""
    words, counts = [[1, 2, 1, 2], [2, 2, 2], [7], []], [3, 1, 5, 2]
    got = fn(words, counts)
    if not isinstance(got, dict):
        raise CheckFailed(f"count_pairs should return a dict, got {type(got).__name__}")
    got = {tuple(k): v for k, v in got.items() if v}
    expected = dict(bpe.count_pairs(words, counts))
    if got == {(1, 2): 2, (2, 1): 1, (2, 2): 2}:
        raise CheckFailed("count_pairs ignores counts: word i occurs counts[i] times")
    short = fn([[3, 4, 5]], [1])
    if (
        got != expected
        and isinstance(short, dict)
        and {k: v for k, v in short.items() if v} == {(3, 4): 1}
    ):
        raise CheckFailed(
            "count_pairs misses the last pair of each word: pair every id with the next one, "
            "zip(word, word[1:])"
        )
    if got != expected:
        raise CheckFailed(
            f"count_pairs({words}, {counts}) returned {got}, expected {expected}. Every adjacent "
            "pair is counted, overlapping ones too ([2, 2, 2] has the pair (2, 2) twice)."
        )
    passed("count_pairs passes the visible checks")


def _merge_first(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """``ids`` with only the first occurrence of ``pair`` merged (a usual mistake)."""
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return [*ids[:i], new_id, *ids[i + 2 :]]
    return list(ids)


def check_merge_pair(fn: Callable[..., Any]) -> None:
    """``merge_pair`` on overlapping runs, at the ends, and with nothing to merge."""
    cases = [
        ([5, 5, 5], (5, 5), 9, [9, 5]),
        ([5, 5, 5, 5], (5, 5), 9, [9, 9]),
        ([1, 2, 3, 1, 2], (1, 2), 7, [7, 3, 7]),
        ([1, 3, 2], (1, 2), 7, [1, 3, 2]),
        ([], (1, 2), 7, []),
    ]
    for ids, pair, new_id, want in cases:
        original = list(ids)
        got = fn(ids, pair, new_id)
        if ids != original:
            raise CheckFailed("merge_pair modified its input list; build and return a new list")
        if want and got is not None and list(got) == want[:-1]:
            raise CheckFailed(
                f"merge_pair({original}, {pair}, {new_id}) returned {got}, expected {want}: the "
                "last id is dropped; copy the final id when no pair starts there"
            )
        if (
            got is not None
            and list(got) != want
            and list(got) == _merge_first(original, pair, new_id)
        ):
            raise CheckFailed(
                f"merge_pair({original}, {pair}, {new_id}) returned {got}, expected {want}: only "
                "the first occurrence of the pair is merged; keep scanning after a merge"
            )
        if got is None or list(got) != want:
            raise CheckFailed(
                f"merge_pair({original}, {pair}, {new_id}) returned {got}, expected {want}: scan "
                "left to right and skip both ids of a merged pair, so occurrences never overlap"
            )
    passed("merge_pair passes the visible checks")


def check_learn_merges(fn: Callable[..., Any]) -> None:
    """``learn_merges`` against the reference: order, ties, early stop, UTF-8 bytes."""
    expected = reference_merges(SAMPLE_TEXT, 40)
    got = _as_pairs(fn(SAMPLE_TEXT, 40))
    if got != expected and got == _merges_of_words(SAMPLE_TEXT.split(), 40):
        raise CheckFailed(
            "learn_merges learns from text.split(): pre-tokenize with pretokenize(text), whose "
            "pieces keep their leading space, and count each distinct piece"
        )
    if got[:1] != expected[:1]:
        if got and got[0] == (ord("t"), ord("h")):
            raise CheckFailed(
                f"the first merge is {got[0]} ('t', 'h') but ({ord(' ')}, {ord('t')}) (' ', 't') "
                "is as frequent: pre-tokens keep their leading space (use pretokenize), and ties "
                "go to the smallest pair"
            )
        raise CheckFailed(f"the first merge should be {expected[0]}, got {got[:1]}")
    for k, (mine, theirs) in enumerate(zip(got, expected)):
        if mine != theirs:
            raise CheckFailed(
                f"merge {k} is {mine}, expected {theirs} (merges 0..{k - 1} agree). Check: the "
                "count of every pair is recomputed after each merge; ties go to the smallest "
                "pair (min over (-count, pair)); new ids are 256 + k"
            )
    if len(got) != len(expected):
        raise CheckFailed(
            f"learn_merges returned {len(got)} merges, expected {len(expected)}: stop when the "
            "most frequent pair occurs fewer than 2 times"
            if len(got) > len(expected)
            else "too few merges: keep merging while some pair occurs at least twice"
        )
    unicode_text = "naïve café 日本 🦊🦊 " * 3
    if _as_pairs(fn(unicode_text, 20)) != reference_merges(unicode_text, 20):
        raise CheckFailed(
            f"learn_merges({unicode_text!r}, 20) differs from the expected merges: start from "
            "the UTF-8 bytes of each pre-token (list(piece.encode('utf-8'))), not its characters"
        )
    tiny = _as_pairs(fn("ab ab", 10))
    if tiny != reference_merges("ab ab", 10):
        raise CheckFailed(
            f"learn_merges('ab ab', 10) returned {tiny}, expected "
            f"{reference_merges('ab ab', 10)}: stop early when no pair occurs twice"
        )
    passed("learn_merges passes the visible checks")


def check_bpe_encode(encode: Callable[..., Any]) -> None:
    """``bpe_encode`` against the reference tokenizer, with merges from the reference learner."""
    merges = reference_merges(SAMPLE_TEXT, 60)
    spaces = reference_merges("a    b    c    d", 3)  # merge 0 joins two spaces
    cases = [(t, merges) for t in ("the cats sleep near 2 barns.", *UNICODE_TEXTS, SAMPLE_TEXT)]
    for text, merges in [("x  y", spaces), *sorted(cases, key=lambda c: not c[0].isascii())]:
        got, want = encode(text, merges), reference_encode(text, merges)
        if got is None or list(got) != want:
            got = list(got or [])
            hint = ""
            if got == list(text.encode("utf-8")):
                hint = " It returned the raw bytes: no merge was applied."
            elif not text.isascii() and any(ord(c) in got for c in text if not c.isascii()):
                hint = " It holds character codes: start from the UTF-8 bytes (piece.encode())."
            elif len(got) < len(want):
                hint = " It has fewer tokens: are merges applied across pre-token boundaries?"
            raise CheckFailed(
                f"bpe_encode({text!r:.60}) returned {got[:20]}..., expected {want[:20]}...: "
                f"apply the merges in the order they were learned, within each pre-token.{hint}"
            )
    passed("bpe_encode passes the visible checks")


def check_bpe_decode(decode: Callable[..., Any]) -> None:
    """``bpe_decode(bpe_encode(s)) == s`` and invalid UTF-8 becomes U+FFFD."""
    merges = reference_merges(SAMPLE_TEXT, 60)
    for text in (SAMPLE_TEXT, *UNICODE_TEXTS):
        got = decode(reference_encode(text, merges), merges)
        if got != text:
            raise CheckFailed(
                f"bpe_decode(ids of {text!r:.60}) returned {got!r:.80}: join the bytes of every "
                "id (merge k = bytes of its first + second id) and decode the joined bytes once"
            )
    fox = decode(list("🦊".encode()), merges)  # four byte ids, one character
    if fox != "🦊":
        raise CheckFailed(
            f"bpe_decode of the four byte ids of '🦊' returned {fox!r}: decoding each id on its "
            "own cuts characters; decode the joined bytes once"
        )
    first_byte_of_fox = list("🦊".encode())[:1]
    try:
        cut = decode(first_byte_of_fox, merges)
    except UnicodeDecodeError:
        raise CheckFailed(
            'bpe_decode raised UnicodeDecodeError on a cut character: decode with errors="replace"'
        ) from None
    if cut != "\ufffd":
        raise CheckFailed(
            f"bpe_decode of half a character should give '\\ufffd', got {cut!r}: decode with "
            'errors="replace"'
        )
    passed("bpe_decode passes the visible checks (exact round trip)")


# ---------------------------------------------------------------------------------- masking


def _fraction(mask: Tensor, of: Tensor) -> float:
    return float(mask[of].float().mean()) if of.any() else 0.0


def check_mask_tokens(fn: Callable[..., Any], *, seed: int = 0) -> None:
    """``mask_tokens``: shapes, labels, specials, 15 % and 80/10/10 on 40,000 tokens."""
    V, mask_id, specials = 60, 3, [0, 1, 2, 3]
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, V, (100, 400), generator=g)
    ids[:, 0], ids[:, -1], ids[:, -60:-1] = 1, 2, 0  # [CLS] ... [SEP] padding
    original = ids.clone()
    out = fn(ids, vocab_size=V, mask_id=mask_id, special_ids=specials,
             generator=torch.Generator().manual_seed(1))  # fmt: skip
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailed("mask_tokens should return a pair (inputs, labels)")
    inputs, labels = out
    check_shape(inputs, tuple(ids.shape), name="inputs", dims=("B", "T"))
    check_shape(labels, tuple(ids.shape), name="labels", dims=("B", "T"))
    if not torch.equal(ids, original):
        raise CheckFailed("mask_tokens modified ids in place: work on a copy (ids.clone())")
    chosen = labels != -100
    if chosen.all():
        raise CheckFailed(
            "labels are set at every position: they hold -100 wherever the token was not chosen"
        )
    if not torch.equal(labels[chosen], ids[chosen]):
        raise CheckFailed("labels must hold the ORIGINAL id at chosen positions (not the input)")
    if not torch.equal(inputs[~chosen], ids[~chosen]):
        raise CheckFailed(
            "inputs changed at positions whose label is -100: only chosen tokens are corrupted, "
            "and every chosen position needs its label (also the 10% left unchanged)"
        )
    special = torch.isin(ids, torch.tensor(specials))
    if chosen[special].any():
        raise CheckFailed("special tokens ([CLS], [SEP], [PAD], ...) were chosen: never mask them")
    rate = _fraction(chosen, ~special)
    if abs(rate - 0.15) > 0.015:
        hint = " (that is about 0.15 * 0.8: are labels set only where [MASK] is?)"
        raise CheckFailed(
            f"{rate:.1%} of the ordinary tokens were chosen, expected 15%"
            + (hint if abs(rate - 0.12) < 0.01 else "")
        )
    masked = inputs == mask_id
    kept = inputs == ids
    randomised = chosen & ~masked & ~kept
    for what, frac, want in (
        ("replaced by [MASK]", _fraction(masked, chosen), 0.8),
        ("replaced by a random token", _fraction(randomised, chosen), 0.1),
        ("left unchanged", _fraction(kept, chosen), 0.1),
    ):
        if abs(frac - want) > 0.03:
            raise CheckFailed(
                f"{frac:.1%} of the chosen tokens were {what}, expected about {want:.0%}: draw "
                "one more uniform number per chosen token and split [0, 0.8), [0.8, 0.9), [0.9, 1)"
            )
    if torch.isin(inputs[randomised], torch.tensor(specials)).any():
        raise CheckFailed("a random replacement was a special token: draw only ordinary ids")
    _, high = fn(ids, vocab_size=V, mask_id=mask_id, special_ids=specials, prob=0.4,
                 generator=torch.Generator().manual_seed(2))  # fmt: skip
    rate = _fraction(high != -100, ~special)
    if abs(rate - 0.4) > 0.02:
        raise CheckFailed(f"with prob=0.4, {rate:.1%} of the ordinary tokens were chosen: use prob")
    again = fn(ids, vocab_size=V, mask_id=mask_id, special_ids=specials,
               generator=torch.Generator().manual_seed(1))  # fmt: skip
    if not (torch.equal(again[0], inputs) and torch.equal(again[1], labels)):
        raise CheckFailed("the same seeded generator gave a different mask: use `generator`")
    passed("mask_tokens passes the visible checks (15%, 80/10/10, no special tokens)")


def check_segment_ids(fn: Callable[..., Any]) -> None:
    """``segment_ids`` on pairs of different lengths, with padding and a single segment."""
    cls, sep, pad = 1, 2, 0
    ids = torch.tensor([
        [cls, 7, 8, sep, 9, 9, sep, pad, pad],
        [cls, 7, sep, 9, 9, 9, 9, 9, sep],
        [cls, 7, 8, 8, sep, pad, pad, pad, pad],
    ])  # fmt: skip
    want = torch.tensor([
        [0, 0, 0, 0, 1, 1, 1, 0, 0],
        [0, 0, 0, 1, 1, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 0, 0, 0, 0],
    ])  # fmt: skip
    got = fn(ids, sep_id=sep, pad_id=pad)
    check_shape(got, tuple(ids.shape), name="segment ids", dims=("B", "T"))
    if not torch.equal(got.long(), want):
        bad = (got.long() != want).nonzero()[0].tolist()
        raise CheckFailed(
            f"segment ids differ at (row, position) {bad}: got {got[bad[0]].tolist()}, expected "
            f"{want[bad[0]].tolist()}. The first [SEP] still belongs to segment 0; padding is 0."
        )
    other = ids.clone()
    for old, new in ((pad, 5), (sep, 3), (cls, 4)):
        other[ids == old] = new
    other[ids == 7] = 0  # an ordinary token with id 0
    got = fn(other, sep_id=3, pad_id=5)
    if not torch.equal(torch.as_tensor(got).long(), want):
        raise CheckFailed(
            "with sep_id=3 and pad_id=5 (and an ordinary token 0) the segment ids are "
            f"{torch.as_tensor(got).tolist()}, expected {want.tolist()}: compare with the "
            "sep_id and pad_id arguments"
        )
    passed("segment_ids passes the visible checks")


def check_bert_embeddings(cls: type) -> None:
    """``BertEmbeddings`` against the reference ``course_lib.models.bert.BertEmbeddings``."""
    config = _bert().BertConfig(
        vocab_size=30, hidden_size=16, num_attention_heads=4, max_position_embeddings=12,
        dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    reference = _bert().BertEmbeddings(config).eval()
    for p in reference.norm.parameters():  # non-trivial LayerNorm weights
        nn.init.normal_(p)
    mine = cls(vocab_size=30, hidden_size=16, max_position_embeddings=12, dropout=0.0).eval()
    try:
        mine.load_state_dict(reference.state_dict())
    except RuntimeError as error:
        raise CheckFailed(f"keep the attribute names given in __init__: {error}") from None
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(30, (2, 7), generator=g)
    types = torch.randint(2, (2, 7), generator=g)
    with torch.no_grad():
        emb = reference
        no_pos = emb.norm(emb.word_embeddings(ids) + emb.token_type_embeddings(types))
        no_seg = emb.norm(emb.word_embeddings(ids) + emb.position_embeddings(torch.arange(7)))
        no_norm = (emb.word_embeddings(ids) + emb.position_embeddings(torch.arange(7))
                   + emb.token_type_embeddings(types))  # fmt: skip
        from_one = emb.norm(emb.word_embeddings(ids) + emb.position_embeddings(torch.arange(1, 8))
                            + emb.token_type_embeddings(types))  # fmt: skip
        check_close(mine(ids, types), reference(ids, types), name="BertEmbeddings(ids, types)",
                    mistakes={"the position embeddings are missing": no_pos,
                              "the segment embeddings are missing": no_seg,
                              "the LayerNorm is missing": no_norm,
                              "the positions start at 1; they start at 0": from_one})  # fmt: skip
        check_close(mine(ids), reference(ids), name="BertEmbeddings(ids) (segment 0 everywhere)")
    try:
        mine(torch.zeros(1, 13, dtype=torch.long))
    except ValueError:
        pass
    except Exception as error:
        raise CheckFailed(
            f"13 tokens with max_position_embeddings=12 raised {type(error).__name__}; raise a "
            "ValueError that names the limit"
        ) from None
    else:
        raise CheckFailed("13 tokens with max_position_embeddings=12 should raise a ValueError")
    passed("BertEmbeddings passes the visible checks")


# -------------------------------------------------------------------------------------- GPT


def _reference_gpt(**sizes: int) -> nn.Module:
    config = _gpt().GPTConfig(**sizes, fused_attn=False)
    return _gpt().GPT(config=config).eval()


def _load(student: nn.Module, reference: nn.Module) -> None:
    try:
        student.load_state_dict(reference.state_dict())
    except RuntimeError as error:
        raise CheckFailed(f"keep the attribute names given in __init__: {error}") from None


def _attention_mistakes(ref: nn.Module, x: Tensor) -> dict[str, Tensor]:
    B, T, C = x.shape
    H = ref.n_head
    q, k, v = ref.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()

    def attend(scale: float, keep: Tensor | None, dim: int = -1, qkv=(q, k, v)) -> Tensor:
        q, k, v = qkv
        scores = q @ k.transpose(-2, -1) * scale
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
        y = torch.softmax(scores, dim=dim) @ v
        return ref.c_proj(y.transpose(1, 2).reshape(B, T, C))

    d = C // H
    flat = tuple(t.reshape(B, H, T, C // H) for t in ref.c_attn(x).split(C, dim=2))

    def heads_without_transpose() -> Tensor:
        scores = (flat[0] @ flat[1].transpose(-2, -1) * d**-0.5).masked_fill(~causal, -torch.inf)
        return ref.c_proj((torch.softmax(scores, dim=-1) @ flat[2]).reshape(B, T, C))

    return {
        "there is no causal mask (a token sees its future)": attend(d**-0.5, None),
        "the mask is transposed or inverted: query i may attend to keys j <= i":
            attend(d**-0.5, causal.T),
        f"the scores are divided by D = {d} instead of sqrt(D)": attend(1 / d, causal),
        "the scores are divided by sqrt(C) (the model width) instead of sqrt(D) (the head "
        "dim)": attend(C**-0.5, causal),
        "the softmax runs over the queries (dim=-2); normalise each query's scores over the "
        "keys (dim=-1)": attend(d**-0.5, causal, dim=-2),
        "the heads are split with a plain reshape to (B, H, T, D); view as (B, T, H, D) and "
        "transpose(1, 2) (and back before c_proj)": heads_without_transpose(),
    }  # fmt: skip


def check_causal_self_attention(cls: type) -> None:
    """``CausalSelfAttention(x)`` and its returned keys and values against the reference."""
    torch.manual_seed(0)
    ref = (
        _gpt()
        .CausalSelfAttention(_gpt().GPTConfig(n_embd=24, n_head=2, n_layer=1, fused_attn=False))
        .eval()
    )
    with torch.no_grad():  # larger weights: every mistake moves the output well past atol
        for p in ref.parameters():
            p.mul_(10.0)
    mine = cls(n_embd=24, n_head=2).eval()
    _load(mine, ref)
    x = torch.randn(2, 6, 24, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = mine(x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailed("forward should return (y, (k, v))")
        y, kv = out
        if isinstance(y, Tensor) and torch.isnan(y[:, 0]).any():
            raise CheckFailed(
                "CausalSelfAttention(x) is NaN at the first position: its query has no key left, "
                "the mask hides the diagonal (query i attends to keys 0 .. i, itself included)"
            )
        check_close(y, ref(x), name="CausalSelfAttention(x)", atol=1e-5,
                    mistakes=_attention_mistakes(ref, x), dims=("B", "T", "C"))  # fmt: skip
        k_ref = ref.c_attn(x).split(24, dim=2)[1].view(2, 6, 2, 12).transpose(1, 2)
        if not isinstance(kv, (tuple, list)) or len(kv) != 2:
            raise CheckFailed("the second output should be the pair (k, v)")
        check_close(kv[0], k_ref, name="the returned keys", dims=("B", "H", "S+T", "D"))
        _check_attention_with_past(mine, ref)
    passed("CausalSelfAttention passes the visible checks")


def _check_attention_with_past(mine: nn.Module, ref: nn.Module) -> None:
    """3 new tokens after 4 cached ones: keys [past, new], new token i attends to 0 .. 4 + i."""
    g = torch.Generator().manual_seed(1)
    B, S, T, C, H = 2, 4, 3, 24, 2
    past = (torch.randn(B, H, S, C // H, generator=g), torch.randn(B, H, S, C // H, generator=g))
    x = torch.randn(B, T, C, generator=g)
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in ref.c_attn(x).split(C, dim=2))
    k_all, v_all = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)

    def attend(keep: Tensor) -> Tensor:
        scores = (q @ k_all.transpose(-2, -1) / (C // H) ** 0.5).masked_fill(~keep, -torch.inf)
        y = torch.softmax(scores, dim=-1) @ v_all
        return ref.c_proj(y.transpose(1, 2).reshape(B, T, C))

    out = mine(x, past)
    if not isinstance(out, tuple) or len(out) != 2 or len(out[1]) != 2:
        raise CheckFailed("forward(x, past_kv) should return (y, (k, v))")
    y, (k_got, _) = out
    if isinstance(k_got, Tensor) and torch.allclose(k_got, torch.cat([k, past[0]], dim=2)):
        raise CheckFailed(
            "the returned keys put the new ones before the past ones: torch.cat([past_k, k], "
            "dim=2), the cached tokens come first"
        )
    check_close(k_got, k_all, name="the keys returned with past_kv (past, then new)",
                dims=("B", "H", "S+T", "D"))  # fmt: skip
    ones = torch.ones(T, S + T, dtype=torch.bool)
    check_close(y, attend(ones.tril(S)), name=f"CausalSelfAttention(x, past_kv) ({S} cached, "
                f"{T} new tokens)", atol=1e-5, mistakes={
                    "the causal mask ignores the cached positions: new token i sits at S + i "
                    "and attends to keys 0 .. S + i (tril(diagonal=S - T) on a (T, S + T) mask)":
                    attend(ones.tril()),
                    "no mask is applied with a cache: several new tokens need the causal mask "
                    "too": attend(ones)})  # fmt: skip


def check_gpt_forward(cls: type) -> None:
    """``GPT.forward`` equals the reference GPT (same weights); the past ignores the future."""
    sizes = dict(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16)
    torch.manual_seed(0)
    reference = _reference_gpt(**sizes)
    mine = cls(**sizes).eval()
    _load(mine, reference)
    idx = torch.randint(40, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = mine(idx)
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailed("GPT.forward should return (logits, present_kv)")
        logits, present = out
        mistakes = {
            "the final LayerNorm ln_f is missing (lm_head(ln_f(x)))": _gpt_variant(
                reference, idx, ln_f=False
            ),
            "the position embeddings are missing (wte(idx) + wpe(positions))": _gpt_variant(
                reference, idx, positions=False
            ),
        }
        check_close(logits, reference(idx), name="GPT logits", atol=1e-4, dims=("B", "T", "V"),
                    mistakes=mistakes)  # fmt: skip
        if len(present) != 2:
            raise CheckFailed(
                f"present_kv should hold one (k, v) per block (2), got {len(present)}"
            )
        changed = idx.clone()
        changed[:, 7:] = (changed[:, 7:] + 1) % 40
        if not torch.allclose(mine(changed)[0][:, :7], logits[:, :7], atol=1e-5):
            raise CheckFailed("changing tokens 7.. changed the logits of positions 0..6: the "
                              "causal mask does not work")  # fmt: skip
    try:
        mine(torch.zeros(1, 17, dtype=torch.long))
    except ValueError:
        pass
    except Exception as error:
        raise CheckFailed(
            f"17 tokens with block_size=16 raised {type(error).__name__}: check S + T against "
            "block_size first and raise a ValueError"
        ) from None
    else:
        raise CheckFailed("17 tokens with block_size=16 should raise a ValueError")
    passed("GPT.forward passes the visible checks (logits, causality)")


def _gpt_variant(model: nn.Module, idx: Tensor, *, ln_f: bool = True, positions: bool = True):
    """The reference's logits without its final LayerNorm or without position embeddings."""
    t = model.transformer
    x = t.wte(idx) + (t.wpe(torch.arange(idx.shape[1])) if positions else 0)
    for block in t.h:
        x = block(x)
    return model.lm_head(t.ln_f(x) if ln_f else x)


def check_kv_cache(cls: type) -> None:
    """Logits with the cache (one token at a time, then chunks) equal a full forward pass."""
    sizes = dict(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16)
    torch.manual_seed(0)
    mine = cls(**sizes).eval()
    _load(mine, _reference_gpt(**sizes))
    idx = torch.randint(40, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full, _ = mine(idx)
        past, steps = None, []
        for t in range(12):
            logits, past = mine(idx[:, t : t + 1], past)
            steps.append(logits)
        check_shape(past[0][0], (2, 2, 12, 8), name="cached keys", dims=("B", "H", "S", "D"))
        full_keys = [kv[0] for kv in mine(idx)[1]]
        step_keys = [kv[0] for kv in past]
        if torch.allclose(step_keys[0], full_keys[0], atol=1e-5) and not torch.allclose(
            step_keys[1], full_keys[1], atol=1e-5
        ):
            raise CheckFailed(
                "with the cache, layer 0's keys agree with a full pass but layer 1's do not: "
                "pass each block its own cache, past_kv[layer]"
            )
        restart = "the positions restart at 0 with a cache (they start at S)"
        check_close(torch.cat(steps, dim=1), full, name="logits fed one token at a time",
                    atol=1e-4, mistakes={restart: _no_offset(mine, idx)})  # fmt: skip
        past, chunks = None, []
        for start, end in ((0, 5), (5, 8), (8, 12)):
            logits, past = mine(idx[:, start:end], past)
            chunks.append(logits)
        check_close(torch.cat(chunks, dim=1), full, name="logits fed in chunks of 5, 3, 4",
                    atol=1e-4)  # fmt: skip
    passed("the key/value cache gives the same logits as a full forward pass")


def _no_offset(model: nn.Module, idx: Tensor) -> Tensor:
    wpe = model.transformer.wpe
    saved = wpe.weight.detach().clone()
    try:  # what a model whose every step uses position 0 would output
        out, past = [], None
        for t in range(idx.shape[1]):
            with torch.no_grad():
                wpe.weight[:] = saved[0]
            logits, past = model(idx[:, t : t + 1], past)
            out.append(logits)
        return torch.cat(out, dim=1)
    finally:
        with torch.no_grad():
            wpe.weight[:] = saved


# --------------------------------------------------------------------------------- sampling


def _check_filtered(got: Any, want: Tensor, name: str, mistakes: dict[str, Tensor]) -> None:
    """Same kept tokens (finite logits) with the same values; -inf elsewhere."""
    check_shape(got, tuple(want.shape), name=name)
    kept = torch.isfinite(want)
    if torch.isnan(got).any():
        raise CheckFailed(f"{name} contains NaN")
    if torch.equal(torch.isfinite(got), kept) and torch.equal(got[kept], want[kept]):
        if (got[~kept] == float("-inf")).all():
            return
        raise CheckFailed(f"{name}: filtered-out logits must be -inf (their probability is 0)")
    for description, wrong in mistakes.items():
        if torch.equal(torch.isfinite(got), torch.isfinite(wrong)):
            raise CheckFailed(f"{name} is wrong: it matches what you get when {description}")
    raise CheckFailed(
        f"{name} keeps the tokens {torch.isfinite(got).int().tolist()} (1 = kept), expected "
        f"{kept.int().tolist()}; kept logits must keep their values"
    )


def _call_filter(fn: Callable[..., Any], logits: Tensor, arg: Any, name: str) -> Any:
    """``fn(logits, arg)`` on a copy; the copy must come back unchanged."""
    x = logits.clone()
    out = fn(x, arg)
    if not torch.equal(x, logits):
        raise CheckFailed(
            f"{name} modified its input logits in place: return a new tensor (masked_fill, not "
            "masked_fill_)"
        )
    return out


def check_top_k_filter(fn: Callable[..., Any]) -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 5.0, 4.0], [0.0, -1.0, 2.0, 2.5, 1.0]])
    for k in (1, 2, 3, 5, 9):
        name = f"top_k_filter(logits, k={k})"
        try:
            got = _call_filter(fn, logits, k, name)
        except CheckFailed:
            raise
        except Exception as error:
            raise CheckFailed(
                f"{name} raised {type(error).__name__}: {error}. k may be larger than V (keep "
                "everything then): use min(k, V)"
            ) from None
        smallest = logits.topk(min(k, 5), largest=False).values[..., -1:]
        kth = logits.topk(min(k, 5)).values[..., -1:]
        _check_filtered(got, _gpt().top_k_filter(logits, min(k, 5)), name,
                        {"you keep the k smallest logits (topk(largest=True))":
                         logits.masked_fill(logits > smallest, float("-inf")),
                         "you keep k - 1 tokens: logits <= kth also drops the k-th largest "
                         "(mask logits < kth)": logits.masked_fill(logits <= kth, -torch.inf)},
                        )  # fmt: skip
    ties = torch.tensor([[3.0, 2.0, 1.0, 2.0, 0.0]])
    got = _call_filter(fn, ties, 2, "top_k_filter")
    if not torch.equal(torch.isfinite(got), torch.isfinite(_gpt().top_k_filter(ties, 2))):
        raise CheckFailed(
            f"top_k_filter({ties.tolist()}, k=2) keeps {torch.isfinite(got).int().tolist()}, "
            "expected [[1, 1, 0, 1, 0]]: ties at the k-th value are all kept (mask the logits "
            "below the k-th largest value)"
        )
    passed("top_k_filter passes the visible checks")


def check_top_p_filter(fn: Callable[..., Any]) -> None:
    probs = torch.tensor([[0.5, 0.05, 0.3, 0.15], [0.25, 0.26, 0.24, 0.25]])
    logits = probs.log()
    for p in (0.1, 0.5, 0.6, 0.79, 0.85, 0.96, 1.0):
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        crossing = sorted_probs.cumsum(-1) > p  # also drops the token that crosses p
        strict = logits.masked_fill(crossing.scatter(-1, order, crossing), float("-inf"))
        before = sorted_probs.cumsum(-1) - sorted_probs >= p  # the right mask, in sorted order
        low, low_order = probs.sort(dim=-1)
        ascending = low.cumsum(-1) - low >= p
        on_logits = logits.sort(dim=-1, descending=True).values
        raw = on_logits.cumsum(-1) - on_logits >= p
        name = f"top_p_filter(logits, p={p})"
        _check_filtered(_call_filter(fn, logits, p, name), _gpt().top_p_filter(logits, p), name,
                        {"the token whose probability crosses p is dropped; keep the smallest "
                         "set whose mass reaches p": strict,
                         "the mask is left in sorted order: scatter it back to vocabulary order "
                         "(mask.scatter(-1, order, mask))": logits.masked_fill(before, -torch.inf),
                         "the tokens are sorted in ascending order: sort from the most probable "
                         "down (descending=True)":
                         logits.masked_fill(ascending.scatter(-1, low_order, ascending),
                                            -torch.inf),
                         "the cumulative sum runs over logits: take the probabilities first "
                         "(softmax of the sorted logits)":
                         logits.masked_fill(raw.scatter(-1, order, raw), -torch.inf)},
                        )  # fmt: skip
    passed("top_p_filter passes the visible checks")


def _histogram(ids: Any, V: int, n: int) -> Tensor:
    check_shape(ids, (n, 1), name="sample_next_token(logits)", dims=("B", "1"))
    return torch.bincount(ids.flatten().long(), minlength=V).double() / n


def check_sample_next_token(fn: Callable[..., Any]) -> None:
    """Empirical distributions of 20,000 draws against softmax(filtered logits / temperature)."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 1.5])
    n, V = 20_000, 6
    rows = logits.expand(n, V).clone()
    first = fn(rows, generator=torch.Generator().manual_seed(0))
    again = fn(rows, generator=torch.Generator().manual_seed(0))
    if isinstance(first, Tensor) and isinstance(again, Tensor) and not torch.equal(first, again):
        raise CheckFailed(
            "the same seeded generator gave different samples: pass generator=generator to "
            "torch.multinomial"
        )
    for kwargs in ({}, {"temperature": 0.5}, {"temperature": 2.0}, {"top_k": 3},
                   {"top_p": 0.7}, {"temperature": 2.0, "top_p": 0.7},
                   {"top_k": 3, "top_p": 0.75}):  # fmt: skip
        g = torch.Generator().manual_seed(0)
        freq = _histogram(fn(rows, generator=g, **kwargs), V, n)
        z = logits / kwargs.get("temperature", 1.0)
        if "top_k" in kwargs:
            z = _gpt().top_k_filter(z, kwargs["top_k"])
        if "top_p" in kwargs:
            z = _gpt().top_p_filter(z, kwargs["top_p"])
        want = torch.softmax(z, dim=-1).double()
        order = ""
        if "top_p" in kwargs and "temperature" in kwargs:
            order = " Divide by the temperature BEFORE the top-p filter."
        elif "top_p" in kwargs and "top_k" in kwargs:
            order = " Apply top-k first, then top-p to what is left."
        if (freq[want == 0] > 0).any():
            raise CheckFailed(f"with {kwargs} a filtered-out token was sampled.{order}")
        worst = (freq - want).abs().max().item()
        if worst > 0.02:
            hint = ""
            if "top_p" in kwargs and "temperature" in kwargs:
                hint = " Divide by the temperature BEFORE the top-p filter."
            elif "top_p" in kwargs and "top_k" in kwargs:
                hint = " Apply top-k first, then top-p to what is left."
            elif kwargs.get("temperature", 1.0) != 1.0:
                hint = " Sample from softmax(logits / temperature): divide the logits first."
            elif (freq == 1).any():
                hint = " It always returns the same token: sample with torch.multinomial."
            raise CheckFailed(
                f"with {kwargs} the sampled frequencies {[round(f, 3) for f in freq.tolist()]} "
                f"are far from the probabilities {[round(w, 3) for w in want.tolist()]}.{hint}"
            )
    passed("sample_next_token samples the right distributions")


def check_generate(fn: Callable[..., Any], cls: type) -> None:
    """Greedy generation equals the reference GPT's; top_k=1 sampling equals greedy; the
    sampling options reach the sampler."""
    sizes = dict(vocab_size=40, block_size=24, n_layer=2, n_head=2, n_embd=16)
    torch.manual_seed(0)
    reference = _reference_gpt(**sizes)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # larger weights than GPT-2's init: the next token depends on context
        for p in reference.parameters():
            p.normal_(0.0, 0.3 if p.dim() > 1 else 0.1, generator=g)
    mine = cls(**sizes).eval()
    _load(mine, reference)
    prompt = torch.randint(40, (2, 5), generator=torch.Generator().manual_seed(0))
    want = reference.generate(prompt, 10, greedy=True)
    try:
        got = fn(mine, prompt, 10, greedy=True)
    except ValueError as error:
        raise CheckFailed(
            f"generate(model, prompt, 10) raised ValueError ({error}): with the cache, feed only "
            "the new token at each step (model(next_id, past_kv))"
        ) from None
    if isinstance(got, Tensor) and got.dim() == 2 and got.shape[1] != 15:
        raise CheckFailed(
            f"generate(model, prompt, 10) added {got.shape[1] - 5} tokens: the prompt plus "
            "exactly max_new_tokens = 10"
        )
    check_shape(got, (2, 15), name="generate(model, prompt, 10)", dims=("B", "T + new"))
    calls: list[tuple[int, bool]] = []

    class Recorder(nn.Module):  # the student's model, recording what each call receives
        def __init__(self) -> None:
            super().__init__()
            self.inner, self.block_size = mine, mine.block_size

        def forward(self, idx: Tensor, past_kv: Any = None) -> Any:
            calls.append((idx.shape[1], past_kv is not None))
            return self.inner(idx, past_kv)

    fn(Recorder(), prompt, 4, greedy=True)
    if any(not cached for _, cached in calls[1:]):
        raise CheckFailed(
            "after the prompt, generate calls the model without past_kv: pass the cache back, "
            "model(next_id, past_kv)"
        )
    if not torch.equal(got[:, :5], prompt):
        raise CheckFailed("the output should start with the prompt")
    if not torch.equal(got, want):
        for description, wrong in (
            ("the next token is read from the first position: take the last position's "
             "logits, logits[:, -1]", _greedy(mine, prompt, 10, position=0)),
            ("each new token goes through the model without the cache: pass past_kv back, "
             "model(next_id, past_kv)", _greedy(mine, prompt, 10, cache=False)),
        ):  # fmt: skip
            if torch.equal(got, wrong):
                raise CheckFailed(f"greedy generation is wrong: {description}")
        raise CheckFailed(f"greedy generation gave {got[0].tolist()}, expected {want[0].tolist()}")
    top1 = fn(mine, prompt, 10, top_k=1, generator=torch.Generator().manual_seed(0))
    if not torch.equal(top1, want):
        raise CheckFailed("sampling with top_k=1 should give the greedy tokens")
    n = 4000
    many = fn(mine, prompt[:1].expand(n, 5), 1, temperature=0.6, top_k=5,
              generator=torch.Generator().manual_seed(0))  # fmt: skip
    with torch.no_grad():
        z = reference(prompt[:1])[0, -1] / 0.6
        p = torch.softmax(_gpt().top_k_filter(z, 5), dim=-1).double()
    freq = torch.bincount(many[:, -1].long(), minlength=40).double() / n
    if (freq - p).abs().max() > 0.04:
        raise CheckFailed(
            "generate(..., temperature=0.6, top_k=5) samples its first token from the wrong "
            "distribution: pass temperature, top_k, top_p and generator on to sample_next_token"
        )
    try:
        fn(mine, prompt, 20, greedy=True)
    except ValueError:
        pass
    else:
        raise CheckFailed("5 + 20 tokens with block_size=24 should raise a ValueError")
    passed("generate passes the visible checks")


def _greedy(model: nn.Module, prompt: Tensor, n: int, *, position: int = -1, cache: bool = True):
    """Greedy ids of ``model`` read at ``position``, with or without the cache."""
    idx = prompt
    with torch.no_grad():
        logits, past = model(prompt)
        for _ in range(n):
            next_id = logits[:, position].argmax(dim=-1, keepdim=True)  # (B, 1)
            idx = torch.cat([idx, next_id], dim=1)
            logits, past = model(next_id, past) if cache else model(next_id)
    return idx


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
