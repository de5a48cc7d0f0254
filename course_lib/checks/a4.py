"""Visible checks for assignment A4 (tokenizers, whole-word masking, grouped-query attention with
a cache, min-p and repetition-penalty sampling, generation).

Each ``check_*`` runs the student's code on the inputs recorded in ``recorded/a4_bert_gpt.pt``
(weights included) and compares with the recorded reference answer; when they differ it names
the usual mistake whose recorded answer the student's equals. Random functions are checked on
frequencies: the student's draws against the recorded exact distributions (the reference's and
the usual mistakes'), and the rules of whole-word masking measured on the student's own output.
The reference's code is not here, nor anywhere in ``course_lib``: the answers are data,
recorded by the instructor (``autograder/suites/a4_bert_gpt/a4_record.py``), and the hidden
tests draw other inputs. A failure raises :class:`~course_lib.checks.CheckFailed`; a success
prints one line.

Shape legend: B batch, T new tokens, S tokens seen so far, C channels, H query heads,
G key/value heads, D head dim, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .core import CheckFailed, call_student, check_close, check_shape, passed, recorded


def _recorded() -> dict[str, Any]:
    return recorded("a4_bert_gpt")


_call = call_student


def _ids(value: Any, what: str) -> list[int]:
    if isinstance(value, Tensor):
        value = value.tolist()
    if not isinstance(value, list | tuple) or not all(isinstance(i, int) for i in value):
        raise CheckFailed(f"{what} should return a list of ints, got {type(value).__name__}")
    return list(value)


def _pair(out: Any, what: str) -> tuple:
    if not isinstance(out, tuple | list) or len(out) != 2:
        raise CheckFailed(f"{what} should return a tuple of 2, got {type(out).__name__}")
    return tuple(out)


def _load(module: nn.Module, state: dict[str, Tensor], what: str) -> None:
    try:
        module.load_state_dict(state)
    except RuntimeError as error:
        raise CheckFailed(
            f"the reference's weights do not fit your {what} (keep the given __init__): {error}"
        ) from None


def _unchanged(before: Tensor, after: Tensor, what: str, name: str) -> None:
    if not torch.equal(before, after):
        raise CheckFailed(
            f"{what} changed its argument {name} in place: leave the inputs unchanged (work on "
            "a copy, or build a new tensor)"
        )


def _same_list(got: list, want: list, mistakes: dict[str, list], what: str) -> None:
    if got == want:
        return
    for description, wrong in mistakes.items():
        if got == wrong:
            raise CheckFailed(f"{what} is wrong: {description}")
    raise CheckFailed(f"{what} gave\n{got}\nexpected\n{want}")


def _frequencies(ids: Any, V: int, n: int, what: str) -> Tensor:
    check_shape(ids, (n, 1), name=f"the ids of {what}", dims=("B", "1"))
    flat = ids.flatten().long()
    if ((flat < 0) | (flat >= V)).any():
        raise CheckFailed(f"{what} returned ids outside [0, {V})")
    return torch.bincount(flat, minlength=V).double() / n


def _agrees(freq: Tensor, probs: Tensor, n: int, sigmas: float = 5.0) -> bool:
    """Frequencies within ``sigmas`` standard deviations (+ 3 draws) of ``probs``, and no draw
    where ``probs`` is 0."""
    p = probs.double()
    if ((p == 0) & (freq > 0)).any():
        return False
    return bool(((freq - p).abs() <= sigmas * (p * (1 - p) / n).sqrt() + 3 / n).all())


def _check_distribution(freq: Tensor, case: dict, n: int, what: str) -> None:
    if _agrees(freq, case["want"], n):
        return
    for description, wrong in case["mistakes"].items():
        if _agrees(freq, wrong, n):
            raise CheckFailed(f"{what}: the frequencies match a mistake: {description}")
    raise CheckFailed(
        f"{what}: the sampled frequencies {[round(f, 3) for f in freq.tolist()]} differ from "
        f"the expected distribution {[round(p, 3) for p in case['want'].tolist()]} ({n} draws)"
    )


# --------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------


def check_bpe_encode(fn: Callable[..., Any]) -> None:
    """``bpe_encode(text, merges)`` equals the reference on text with accents, CJK and emoji."""
    d = _recorded()["bpe"]
    merges = [tuple(p) for p in d["merges"]]
    got = _ids(_call(fn, d["text"], merges, what="bpe_encode(text, merges)"), "bpe_encode")
    _same_list(got, d["want"], d["mistakes"], f"bpe_encode({d['text']!r})")
    passed("bpe_encode matches the reference")


def check_bpe_decode(fn: Callable[..., Any]) -> None:
    """``bpe_decode(ids, merges)`` gives the text back, U+FFFD where a character is cut."""
    d = _recorded()["bpe"]
    merges = [tuple(p) for p in d["merges"]]
    got = _call(
        fn,
        d["decode_ids"],
        merges,
        what="bpe_decode of ids that cut a character",
        hint="decode with errors='replace'",
    )
    want = d["decode_want"]
    if got != want:
        for description, wrong in d["decode_mistakes"].items():
            if got == wrong:
                raise CheckFailed(f"bpe_decode of ids that cut a character: {description}")
        raise CheckFailed(f"bpe_decode of ids that cut a character gave {got!r}, expected {want!r}")
    text = d["text"]
    got = _call(fn, d["want"], merges, what="bpe_decode(ids, merges)")
    if got != text:
        raise CheckFailed(f"bpe_decode(bpe_encode(text)) gave {got!r}, expected {text!r}")
    passed("bpe_decode gives the text back")


def check_wordpiece_encode(fn: Callable[..., Any]) -> None:
    """``wordpiece_encode(text, vocab)`` equals the reference: longest match first, ``##``,
    [UNK] for a whole word."""
    d = _recorded()["wordpiece"]
    vocab = dict(d["vocab"])
    got = _ids(
        _call(fn, d["text"], vocab, what="wordpiece_encode(text, vocab)"), "wordpiece_encode"
    )
    pieces = {i: p for p, i in vocab.items()}
    if got != d["want"]:
        for description, wrong in d["mistakes"].items():
            if got == wrong:
                raise CheckFailed(f"wordpiece_encode({d['text']!r}) is wrong: {description}")
        raise CheckFailed(
            f"wordpiece_encode({d['text']!r}) gave {[pieces.get(i, i) for i in got]}, expected "
            f"{[pieces[i] for i in d['want']]}"
        )
    passed("wordpiece_encode matches the reference")


# --------------------------------------------------------------------------------------------
# Whole-word masking: the rules, measured on the student's output
# --------------------------------------------------------------------------------------------


def _rate_ok(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return n > 0 and abs(count / n - p) <= sigmas * (p * (1 - p) / n) ** 0.5 + 1 / n


def check_whole_word_mask(fn: Callable[..., Any]) -> None:
    """``whole_word_mask(ids, is_subword, ...)``: whole words chosen with probability ``prob``,
    special tokens never, then 80 / 10 / 10 token by token; labels at the chosen positions."""
    d = _recorded()["whole_word"]
    ids, is_subword, prob = d["ids"], d["is_subword"], d["prob"]
    V, mask_id, special = d["vocab_size"], d["mask_id"], d["special_ids"]
    what = f"whole_word_mask(ids, is_subword, prob={prob})"

    def run(seed: int) -> tuple[Tensor, Tensor]:
        mine, mine_subword = ids.clone(), is_subword.clone()
        out = _call(
            fn,
            mine,
            mine_subword,
            vocab_size=V,
            mask_id=mask_id,
            special_ids=list(special),
            prob=prob,
            generator=torch.Generator().manual_seed(seed),
            what=what,
        )
        _unchanged(ids, mine, "whole_word_mask", "ids")
        _unchanged(is_subword, mine_subword, "whole_word_mask", "is_subword")
        inputs, labels = _pair(out, what)
        check_shape(inputs, tuple(ids.shape), name="the inputs", dims=("B", "T"))
        check_shape(labels, tuple(ids.shape), name="the labels", dims=("B", "T"))
        return inputs.long(), labels.long()

    inputs, labels = run(0)
    again, _ = run(0)
    if not torch.equal(inputs, again):
        raise CheckFailed(
            "two calls with generators seeded alike gave different inputs: draw every random "
            "number from generator"
        )
    is_special = torch.isin(ids, torch.tensor(list(special) + [mask_id]))
    stray = (labels != -100) & (labels != ids) & (labels != inputs)
    if stray.any():
        raise CheckFailed(
            f"the labels hold {sorted(set(labels[stray].tolist()))[:5]} at tokens that are not "
            "chosen: labels are -100 everywhere a token is not chosen (and the original id where "
            "it is)"
        )
    chosen = labels != -100
    if (chosen & is_special).any() or (inputs[is_special] != ids[is_special]).any():
        hit = sorted(set(ids[(chosen | (inputs != ids)) & is_special].tolist()))
        raise CheckFailed(
            f"special tokens {hit} were chosen or changed: special_ids (and mask_id) are never "
            "chosen, wherever they sit in the vocabulary"
        )
    if (labels[chosen] != ids[chosen]).any():
        raise CheckFailed("the labels at chosen positions must be the ORIGINAL ids")
    if ((inputs != ids) & ~chosen).any():
        raise CheckFailed(
            "some tokens changed without a label: every changed token is chosen (labels hold "
            "the original id there, -100 elsewhere)"
        )
    # words: a start (not a continuation, not special) and the continuations after it
    starts = ~is_subword & ~is_special
    word = starts.flatten().long().cumsum(0).view(ids.shape) - 1
    pieces = ~is_special
    n_words = int(starts.sum())
    chosen_pieces = torch.zeros(n_words, dtype=torch.float64).index_add_(
        0, word[pieces], chosen[pieces].double()
    )
    sizes = torch.zeros(n_words, dtype=torch.float64).index_add_(
        0, word[pieces], torch.ones(int(pieces.sum()), dtype=torch.float64)
    )
    if ((chosen_pieces > 0) & (chosen_pieces < sizes)).any():
        raise CheckFailed(
            "some words are chosen in part: choose whole words (a piece and the ## pieces after "
            "it) with probability prob, then all their tokens"
        )
    n_chosen_words = int((chosen_pieces > 0).sum())
    if not _rate_ok(n_chosen_words, n_words, prob):
        raise CheckFailed(
            f"{n_chosen_words / n_words:.3f} of the words were chosen, expected prob={prob}: "
            "draw one number per word"
            + (
                " (a word of several pieces is chosen more often when each piece gets a draw)"
                if n_chosen_words > n_words * prob
                else ""
            )
        )
    n = int(chosen.sum())
    masked = int((inputs[chosen] == mask_id).sum())
    if not _rate_ok(masked, n, 0.8):
        raise CheckFailed(
            f"{masked / n:.3f} of the chosen tokens became [MASK], expected 0.8 (80 / 10 / 10)"
        )
    replaced = chosen & (inputs != mask_id) & (inputs != ids)
    if torch.isin(inputs[replaced], torch.tensor(list(special) + [mask_id])).any():
        raise CheckFailed(
            "a random replacement took a special id: draw it from the ids in [0, vocab_size) "
            "that are not special"
        )
    ordinary = V - len(set(special) | {mask_id})
    if not _rate_ok(int(replaced.sum()), n, 0.1 * (1 - 1 / ordinary)):
        raise CheckFailed(
            f"{int(replaced.sum()) / n:.3f} of the chosen tokens became a different token, "
            "expected about 0.1 (a random ordinary token 10 % of the time)"
        )
    # the 80 / 10 / 10 decision is per token: two-piece chosen words, both [MASK] 64 % of the time
    two = (sizes == 2) & (chosen_pieces == 2)
    both = torch.zeros(n_words, dtype=torch.float64).index_add_(
        0, word[pieces], (inputs[pieces] == mask_id).double()
    )
    if not _rate_ok(int((both[two] == 2).sum()), int(two.sum()), 0.64):
        raise CheckFailed(
            f"{float((both[two] == 2).double().mean()):.3f} of the chosen two-piece words have "
            "both pieces [MASK], expected 0.8 x 0.8 = 0.64: draw the 80 / 10 / 10 decision for "
            "each token, not once per word"
        )
    passed("whole_word_mask chooses whole words and splits 80 / 10 / 10 token by token")


def check_segment_ids(fn: Callable[..., Any]) -> None:
    """``segment_ids(ids, sep_id, pad_id)``: 0 through the first [SEP], 1 after, 0 at padding."""
    d = _recorded()["segments"]
    got = _call(fn, d["ids"], sep_id=d["sep_id"], pad_id=d["pad_id"], what="segment_ids(ids)")
    check_shape(got, tuple(d["want"].shape), name="segment_ids(ids)", dims=("B", "T"))
    if not torch.equal(got.long(), d["want"]):
        for description, wrong in d["mistakes"].items():
            if torch.equal(got.long(), wrong):
                raise CheckFailed(f"segment_ids is wrong: {description}")
        raise CheckFailed(f"segment_ids gave\n{got.tolist()}\nexpected\n{d['want'].tolist()}")
    passed("segment_ids matches the reference")


# --------------------------------------------------------------------------------------------
# Grouped-query attention and its cache
# --------------------------------------------------------------------------------------------


def _gqa(module_cls: type[nn.Module], d: dict) -> nn.Module:
    sizes = d["sizes"]
    mine = _call(
        module_cls, **sizes, what="GroupedCausalSelfAttention(n_embd=16, n_head=4, n_kv_head=2)"
    )
    _load(mine, d["state"], "GroupedCausalSelfAttention")
    return mine.eval()


def _attend(mine: nn.Module, x: Tensor, past: Any, what: str) -> tuple[Tensor, tuple]:
    with torch.no_grad():
        y, kv = _pair(_call(mine, x, past, what=what), what)
        k, v = _pair(kv, f"the cache of {what}")
    return y, (k, v)


def check_grouped_attention(module_cls: type[nn.Module]) -> None:
    """``GroupedCausalSelfAttention(n_embd, n_head, n_kv_head)(x)`` -> (y, (k, v)) equals the
    reference (H = 4 query heads sharing G = 2 key/value heads)."""
    d = _recorded()["gqa"]
    mine = _gqa(module_cls, d)
    y, (k, v) = _attend(mine, d["x"], None, "GroupedCausalSelfAttention(x)")
    check_shape(y, tuple(d["want"].shape), name="y", dims=("B", "T", "C"))
    for name, got, want in (("keys", k, d["k"]), ("values", v, d["v"])):
        if isinstance(got, Tensor) and got.dim() == 4 and got.shape[1] != want.shape[1]:
            raise CheckFailed(
                f"the returned {name} have {got.shape[1]} heads: the cache holds the G = "
                f"{want.shape[1]} key/value heads, not the heads repeated to H"
            )
    # the output first: a usual mistake (heads split without a transpose) shows in y by name
    check_close(y, d["want"], name="GroupedCausalSelfAttention(x)", mistakes=d["mistakes"])
    for name, got, want in (("keys", k, d["k"]), ("values", v, d["v"])):
        check_close(got, want, name=f"the returned {name}", dims=("B", "G", "S", "D"))
    passed("GroupedCausalSelfAttention matches the reference")


def check_kv_cache(module_cls: type[nn.Module]) -> None:
    """Feeding the tokens one at a time and in chunks with ``past_kv`` gives the outputs of one
    call on the whole sequence, and the cache holds G heads of all tokens."""
    d = _recorded()["gqa"]
    mine = _gqa(module_cls, d)
    x = d["x"]
    for what, case in d["pieces"].items():
        cuts = case["cuts"]
        past, ys = None, []
        for start, end in zip([0, *cuts], [*cuts, x.shape[1]]):
            call = f"GroupedCausalSelfAttention(x[:, {start}:{end}], past_kv)"
            y, past = _attend(mine, x[:, start:end], past, call)
            ys.append(y)
        got = torch.cat(ys, dim=1)
        check_close(
            got,
            case["want"],
            name=f"the outputs computed {what} with the cache",
            mistakes=case["mistakes"],
        )
        check_shape(
            past[0],
            tuple(d["k"].shape),
            name=f"the cached keys after all tokens {what}",
            dims=("B", "G", "S", "D"),
        )
    passed("the cache gives the outputs of a full recomputation")


# --------------------------------------------------------------------------------------------
# min-p, repetition penalty, sampling
# --------------------------------------------------------------------------------------------


def _same_filter(got: Any, d: dict, what: str) -> None:
    want = d["want"]
    check_shape(got, tuple(want.shape), name=what)
    kept, mine = torch.isfinite(want), torch.isfinite(got)
    if torch.equal(mine, kept) and torch.equal(got[kept], want[kept]):
        if (got[~kept] == float("-inf")).all():
            return
        raise CheckFailed(f"{what}: the logits that are filtered out must be -inf")
    for description, wrong in d["mistakes"].items():
        if torch.equal(mine, torch.isfinite(wrong)):
            raise CheckFailed(f"{what} keeps the wrong tokens: {description}")
    if torch.equal(mine, kept):
        raise CheckFailed(
            f"{what} changed the values of the logits it keeps: keep them as they are"
        )
    raise CheckFailed(
        f"{what} keeps {int(mine.sum())} tokens, expected {int(kept.sum())} (or not the same ones)"
    )


def check_min_p_filter(fn: Callable[..., Tensor]) -> None:
    """``min_p_filter(logits (..., V), min_p)`` keeps p >= min_p * max p, the rest -inf."""
    d = _recorded()["min_p"]
    logits = d["logits"]
    mine = logits.clone()
    got = _call(fn, mine, d["min_p"], what=f"min_p_filter(logits, {d['min_p']})")
    _unchanged(logits, mine, "min_p_filter", "logits")
    _same_filter(got, d, f"min_p_filter(logits {tuple(logits.shape)}, min_p={d['min_p']})")
    top = _call(fn, logits.clone(), 1.0, what="min_p_filter(logits, 1.0)")
    best = logits.masked_fill(logits < logits.amax(dim=-1, keepdim=True), float("-inf"))
    if not isinstance(top, Tensor) or not torch.equal(torch.isfinite(top), torch.isfinite(best)):
        raise CheckFailed(
            "min_p_filter(logits, min_p=1.0) must keep the most probable token of each row: "
            "keep the tokens whose probability is at least min_p * max p (>=, not >)"
        )
    passed("min_p_filter keeps the tokens at least min_p times as probable as the best")


def check_repetition_penalty(fn: Callable[..., Tensor]) -> None:
    """``repetition_penalty(logits (B, V), prev_ids (B, T), penalty)`` equals the reference."""
    d = _recorded()["penalty"]
    logits, prev = d["logits"].clone(), d["prev_ids"].clone()
    got = _call(
        fn, logits, prev, d["penalty"], what=f"repetition_penalty(logits, prev_ids, {d['penalty']})"
    )
    _unchanged(d["logits"], logits, "repetition_penalty", "logits")
    _unchanged(d["prev_ids"], prev, "repetition_penalty", "prev_ids")
    check_close(
        got, d["want"], name="the penalised logits", mistakes=d["mistakes"], dims=("B", "V")
    )
    passed("repetition_penalty matches the reference")


def _reproducible(call: Callable[[torch.Generator], Any], what: str) -> None:
    """``call(generator)`` gives the same ids for generators seeded alike, other ids for
    another seed: the draws come from ``generator``."""
    runs = [call(torch.Generator().manual_seed(seed)) for seed in (7, 7, 8)]
    if not all(isinstance(r, Tensor) and r.shape == runs[0].shape for r in runs):
        raise CheckFailed(f"{what} should return tensors of one shape for the same inputs")
    if not torch.equal(runs[0], runs[1]):
        raise CheckFailed(
            f"two calls of {what} with generators seeded alike gave different ids: sample with "
            "torch.multinomial(..., generator=generator), never from the global random state"
        )
    if torch.equal(runs[0], runs[2]):
        raise CheckFailed(
            f"calls of {what} with generators seeded differently gave the same ids: draw from "
            "the generator given, not from a fixed seed"
        )


def check_sample_next_token(fn: Callable[..., Tensor]) -> None:
    """``sample_next_token(logits, prev_ids, temperature=..., penalty=..., min_p=...)`` samples
    from the recorded distributions."""
    d = _recorded()["sampling"]
    n = d["draws"]
    for case in d["cases"]:
        V = case["logits"].numel()
        logits = case["logits"].expand(n, V).clone()
        prev = case["prev_ids"]
        prev = None if prev is None else prev.expand(n, prev.numel()).clone()
        options = ", ".join(f"{k}={v}" for k, v in case["kwargs"].items())
        what = f"sample_next_token({case['what']})"
        ids = _call(
            fn,
            logits,
            prev,
            **case["kwargs"],
            generator=torch.Generator().manual_seed(0),
            what=f"sample_next_token(logits, prev_ids, {options})",
        )
        _unchanged(case["logits"].expand(n, V), logits, "sample_next_token", "logits")
        _check_distribution(_frequencies(ids, V, n, what), case, n, what)
    flat = torch.zeros(300, 8)  # every draw uncertain: seeds that differ give other ids
    _reproducible(
        lambda g: _call(fn, flat.clone(), None, generator=g, what="sample_next_token"),
        "sample_next_token(logits, generator=g)",
    )
    passed("sample_next_token samples from the right distributions")


def _book_gpt(d: dict) -> nn.Module:
    """The book's GPT (``course_lib.models``) with the recorded weights, in float64."""
    from course_lib.models import create

    model = create("gpt-tiny", **d["sizes"]).double().eval()
    model.load_state_dict(d["state"])
    return model


def check_generate(fn: Callable[..., Tensor]) -> None:
    """``generate(model, idx, n, penalty=..., greedy=True)`` equals the reference with the book's
    GPT; sampled first tokens follow the distribution; too long raises ValueError."""
    d = _recorded()["generate"]
    model = _book_gpt(d)
    prompt, new, theta = d["prompt"], d["max_new_tokens"], d["penalty"]
    call = f"generate(model, prompt, {new}, penalty={theta}, greedy=True)"
    got = _call(fn, model, prompt.clone(), new, penalty=theta, greedy=True, what=call)
    if not isinstance(got, Tensor):
        raise CheckFailed(f"{call} should return a tensor, got {type(got).__name__}")
    want = d["want"]
    if got.shape != want.shape or not torch.equal(got.long(), want):
        for description, wrong in d["mistakes"].items():
            if got.shape == wrong.shape and torch.equal(got.long(), wrong):
                raise CheckFailed(f"{call}: {description}")
        check_shape(got, tuple(want.shape), name=f"the ids of {call}", dims=("B", "T + n"))
        raise CheckFailed(f"{call} gave\n{got.tolist()}\nexpected\n{want.tolist()}")
    s = d["sampled"]
    n = s["draws"]
    options = dict(penalty=s["penalty"], temperature=s["temperature"], min_p=s["min_p"])
    call = f"generate(model, prompt, 1, {', '.join(f'{k}={v}' for k, v in options.items())})"
    out = _call(
        fn,
        model,
        prompt[:1].expand(n, -1).clone(),
        1,
        **options,
        generator=torch.Generator().manual_seed(0),
        what=call,
    )
    check_shape(out, (n, prompt.shape[1] + 1), name=f"the ids of {call}", dims=("B", "T + 1"))
    freq = _frequencies(out[:, -1:], s["want"].numel(), n, call)
    if not _agrees(freq, s["want"], n):
        raise CheckFailed(
            f"the first sampled token of {call} does not follow the distribution of "
            "sample_next_token with these options: pass prev_ids (the prompt) and the options on"
        )
    limit = model.config.block_size
    too_long = limit - prompt.shape[1] + 1
    try:
        fn(model, prompt.clone(), too_long, greedy=True)
    except ValueError:
        pass
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001
        raise CheckFailed(
            f"generating {too_long} tokens after {prompt.shape[1]} (block_size={limit}) raised "
            f"{type(error).__name__}: {error}; expected a ValueError"
        ) from None
    else:
        raise CheckFailed(
            f"generating {too_long} tokens after a prompt of {prompt.shape[1]} exceeds "
            f"block_size={limit} and should raise a ValueError (the KVCache of T + "
            "max_new_tokens positions does)"
        )
    prompts = prompt[:1].expand(200, -1).clone()
    _reproducible(  # a high temperature: every draw uncertain
        lambda g: _call(fn, model, prompts, 2, temperature=1e4, generator=g, what="generate"),
        "generate(model, prompt, 2, temperature=1e4, generator=g) (pass generator on to "
        "sample_next_token)",
    )
    passed("generate matches the reference with the book's GPT")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
