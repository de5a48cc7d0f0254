"""Visible checks for assignment A1 (a GRU encoder-decoder with Bahdanau attention on dates).

Each ``check_*`` runs the student's function or module on small random inputs, compares it with
``course_lib``'s reference (:mod:`course_lib.models.seq2seq`, :mod:`course_lib.attention`) given the
same weights, and when it differs, tries the usual mistakes to say which one was made. A failure
raises :class:`~course_lib.checks.CheckFailed`; a success prints one line. No hidden test lives
here: the grade comes from the instructor's suite, with other inputs.

The student's modules use these parameter names (those of the reference, except that the encoder
is one bidirectional ``nn.GRU`` where the reference runs two one-directional GRUs):

- ``Encoder``: ``embedding``, ``rnn`` (``nn.GRU(..., bidirectional=True, batch_first=True)``);
- ``BahdanauAttention``: ``query_proj`` (W_s), ``key_proj`` (W_h and the bias b), ``score`` (v);
- ``AttentionDecoder``: ``embedding``, ``init_state``, ``attention``, ``cell``, ``out``;
- ``Seq2Seq``: ``encoder``, ``decoder``.

Shape legend: B batch, T source tokens (T_in), T_out target tokens, E embedding dim, H encoder
hidden size per direction, C = 2H encoder state dim, S decoder state dim, A attention dim,
V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .core import CheckFailed, check_close, check_gradients, check_shape, close, passed

PAD, BOS, EOS = 0, 1, 2

# --------------------------------------------------------------------------------------------
# Parameter names: the student's layout <-> course_lib's reference layout
# --------------------------------------------------------------------------------------------


def reference_encoder_state(student_state: Mapping[str, Tensor], prefix: str = "") -> dict:
    """Rename a student encoder's ``rnn.*_reverse`` weights to the reference's ``rnn_backward.*``.

    Keys outside ``prefix`` are kept as they are, so a whole Seq2Seq state dict can be passed.
    """
    out = {}
    for key, value in student_state.items():
        name = key[len(prefix) :] if key.startswith(prefix) else None
        if name is not None and name.startswith("rnn.") and name.endswith("_reverse"):
            key = f"{prefix}rnn_backward.{name[len('rnn.') : -len('_reverse')]}"
        out[key] = value
    return out


def student_encoder_state(reference_state: Mapping[str, Tensor], prefix: str = "") -> dict:
    """Inverse of :func:`reference_encoder_state`: ``rnn_backward.X`` -> ``rnn.X_reverse``."""
    out = {}
    for key, value in reference_state.items():
        name = key[len(prefix) :] if key.startswith(prefix) else None
        if name is not None and name.startswith("rnn_backward."):
            key = f"{prefix}rnn.{name[len('rnn_backward.') :]}_reverse"
        out[key] = value
    return out


def _reference():
    from course_lib.models import seq2seq

    return seq2seq


def _call(fn: Callable[..., Any], *args: Any, what: str, hint: str = "", **kwargs: Any) -> Any:
    """Call the student's code; turn a crash into a message that says where to look."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(
            f"{what} is not implemented yet (it raises NotImplementedError)"
        ) from None
    except CheckFailed:
        raise
    except Exception as error:  # noqa: BLE001 (any error of the student's code is reported)
        raise CheckFailed(
            f"{what} raised {type(error).__name__}: {error}" + (f". {hint}" if hint else "")
        ) from error


def _need(module: nn.Module, name: str, kind: type, what: str) -> None:
    if not isinstance(getattr(module, name, None), kind):
        raise CheckFailed(
            f"{what} needs the attribute self.{name} (an {kind.__name__}) as in the given "
            "__init__; the parameter names are how the grader loads weights into your module"
        )


def _padded_batch(g: torch.Generator, lengths: list[int], vocab: int) -> tuple[Tensor, Tensor]:
    lengths_t = torch.tensor(lengths)
    T = max(lengths)
    src = torch.randint(3, vocab, (len(lengths), T), generator=g)
    keep = torch.arange(T)[None, :] < lengths_t[:, None]
    return src.masked_fill(~keep, PAD), lengths_t


# --------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------


def check_encoder(encoder_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``Encoder(vocab_size, embed_dim, hidden_dim)(src (B, T), lengths (B,))`` -> (h, c)."""
    seq2seq = _reference()
    torch.manual_seed(seed)
    V, E, H = 11, 5, 6
    enc = _call(encoder_cls, vocab_size=V, embed_dim=E, hidden_dim=H, what="Encoder(...)")
    _need(enc, "embedding", nn.Embedding, "Encoder")
    _need(enc, "rnn", nn.GRU, "Encoder")
    if not enc.rnn.bidirectional or not enc.rnn.batch_first:
        raise CheckFailed(
            "keep the given self.rnn = nn.GRU(..., batch_first=True, bidirectional=True)"
        )
    ref = seq2seq.Encoder(vocab_size=V, embed_dim=E, hidden_dim=H, bidirectional=True)
    ref.load_state_dict(reference_encoder_state(enc.state_dict()))
    g = torch.Generator().manual_seed(seed)
    src, lengths = _padded_batch(g, [6, 3, 1, 4], V)
    enc.eval()
    with torch.no_grad():
        out = _call(enc, src, lengths, what="Encoder.forward(src, lengths)")
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailed("Encoder.forward should return the pair (h, c)")
        h, c = out
        h_ref, c_ref = ref(src, lengths)
        check_shape(h, (4, 6, 2 * H), name="h", dims=("B", "T", "C = 2H"))
        check_shape(c, (4, 2 * H), name="c", dims=("B", "C = 2H"))
        keep = torch.arange(6)[None, :] < lengths[:, None]
        real = torch.where(keep[:, :, None], h, torch.zeros_like(h))
        if close(real, h_ref) and not close(h, h_ref):
            raise CheckFailed(
                "h is right at the real tokens but not zero at the padding positions; "
                "pad_packed_sequence gives zeros there (or multiply by the padding mask)"
            )
        out_unpacked, h_n = enc.rnn(enc.embedding(src))  # the GRU reading the [PAD]s too
        mistakes = {
            "the GRU reads the padding: its final state is taken after the [PAD] tokens, not at "
            "each sequence's last real token. Pack the batch with pack_padded_sequence(x, "
            "lengths.cpu(), batch_first=True, enforce_sorted=False)": torch.cat(
                [h_n[0], h_n[1]], dim=-1
            ),
            "the two directions are swapped: c = [forward final state; backward final state]":
                torch.cat([c_ref[:, H:], c_ref[:, :H]], dim=-1),
            "c repeats the forward direction: c = [h_n[0]; h_n[1]], forward then backward":
                torch.cat([c_ref[:, :H], c_ref[:, :H]], dim=-1),
            "c repeats the backward direction: c = [h_n[0]; h_n[1]], forward then backward":
                torch.cat([c_ref[:, H:], c_ref[:, H:]], dim=-1),
            "c is read from h at the last position T-1, which is padding for the shorter "
            "sources: take h_n, the forward state after each sequence's last real token": torch.cat(
                [h_ref[:, -1, :H], h_ref[:, 0, H:]], dim=-1
            ),
        }  # fmt: skip
        check_close(h, h_ref, name="h", mistakes={
            "the GRU reads the padding (the backward direction starts on [PAD] tokens): pack "
            "the batch with pack_padded_sequence(..., enforce_sorted=False)": out_unpacked
            * keep[:, :, None],
            "the GRU reads the padding (h is not zero there and the backward direction starts on "
            "[PAD] tokens): pack the batch with pack_padded_sequence(..., enforce_sorted=False)":
            out_unpacked})  # fmt: skip
        check_close(c, c_ref, name="c", mistakes=mistakes)
    passed("Encoder matches the reference (states, final state, padding)")


# --------------------------------------------------------------------------------------------
# Additive scores, masked softmax, context
# --------------------------------------------------------------------------------------------


def _scores(s, h, W_s, W_h, b, v, *, tanh: bool = True) -> Tensor:
    hidden = (s @ W_s.T)[:, None, :] + h @ W_h.T + b  # (B, T, A)
    return (torch.tanh(hidden) if tanh else hidden) @ v  # (B, T)


def check_additive_scores(fn: Callable[..., Tensor], *, seed: int = 0) -> None:
    """``additive_scores(s_prev (B, S), h (B, T, C), W_s (A, S), W_h (A, C), b (A,), v (A,))``."""
    g = torch.Generator().manual_seed(seed)
    B, T, S, C, A = 3, 5, 4, 6, 7
    s, h = torch.randn(B, S, generator=g), torch.randn(B, T, C, generator=g)
    W_s, W_h = torch.randn(A, S, generator=g), torch.randn(A, C, generator=g)
    b, v = torch.randn(A, generator=g), torch.randn(A, generator=g)
    e = _call(
        fn, s, h, W_s, W_h, b, v, what="additive_scores(s_prev, h, W_s, W_h, b, v)",
        hint="W_s has shape (A, S) like an nn.Linear weight, so W_s s_{t-1} is s_prev @ W_s.T",
    )  # fmt: skip
    expected = _scores(s, h, W_s, W_h, b, v)
    check_close(e, expected, name="e", dims=("B", "T"), mistakes={
        "the tanh is missing: f_att is an MLP with one tanh hidden layer": _scores(
            s, h, W_s, W_h, b, v, tanh=False),
        "the bias b is missing": _scores(s, h, W_s, W_h, torch.zeros_like(b), v),
        "the bias b is added outside the tanh: it belongs inside the tanh, with W_s s and W_h h":
            _scores(s, h, W_s, W_h, torch.zeros_like(b), v) + b @ v,
        "the scores went through a softmax: return the raw scores e, the weights come "
        "later": expected.softmax(dim=-1),
    })  # fmt: skip
    passed("additive_scores is right")


def _masked_softmax(e: Tensor, mask: Tensor) -> Tensor:
    return e.masked_fill(~mask, float("-inf")).softmax(dim=-1).nan_to_num(0.0)


def check_masked_softmax(fn: Callable[[Tensor, Tensor], Tensor], *, seed: int = 0) -> None:
    """``masked_softmax(e (..., T), mask (..., T) bool keep)`` -> weights, zero where masked."""
    g = torch.Generator().manual_seed(seed)
    e = torch.randn(4, 6, generator=g) * 3
    lengths = torch.tensor([6, 2, 4, 1])
    mask = torch.arange(6)[None, :] < lengths[:, None]
    a = _call(fn, e, mask, what="masked_softmax(e, mask)")
    expected = _masked_softmax(e, mask)
    if isinstance(a, Tensor) and a.shape == e.shape and torch.isnan(a).any():
        raise CheckFailed(
            "masked_softmax gives NaN: fill masked scores with -inf (or the dtype's minimum) "
            "BEFORE the softmax, and make fully masked rows zeros"
        )
    check_close(a, expected, name="masked_softmax(e, mask)", dims=("B", "T"), mistakes={
        "the mask is applied after the softmax: the weights of the real tokens no longer sum "
        "to 1. Fill the masked scores with -inf before the softmax": e.softmax(-1) * mask,
        "the mask is ignored": e.softmax(-1),
        "the mask is inverted: True marks real tokens (a keep-mask), so fill where ~mask":
            _masked_softmax(e, ~mask),
        "the softmax runs over the batch axis: normalise over the last axis (dim=-1)":
            e.masked_fill(~mask, float("-inf")).softmax(dim=0).nan_to_num(0.0),
    })  # fmt: skip
    empty = mask.clone()
    empty[1] = False
    a = _call(fn, e, empty, what="masked_softmax(e, mask) with a fully masked row")
    if not torch.isfinite(a).all():
        raise CheckFailed(
            "a row whose positions are all masked gives NaN (softmax of a row of -inf); return "
            "zeros for it, e.g. .nan_to_num(0.0) or masked_fill(~mask, 0.0) after the softmax"
        )
    check_close(a, _masked_softmax(e, empty), name="masked_softmax with a fully masked row",
                mistakes={
        "a fully masked row gets uniform weights over its padding: it must come out as zeros "
        "(zero the masked positions after the softmax too, masked_fill(~mask, 0.0))":
            e.masked_fill(~empty, torch.finfo(e.dtype).min).softmax(-1)})  # fmt: skip
    big = e * 1000
    a = _call(fn, big, mask, what="masked_softmax(1000 * e, mask)")
    check_close(
        a,
        _masked_softmax(big, mask),
        name="masked_softmax(1000 * e, mask)",
        mistakes={
            "large scores overflow: use torch.softmax, which subtracts the row maximum": big.exp()
        },
    )
    passed("masked_softmax is right (masking before the softmax, empty rows, large scores)")


def check_attention_context(fn: Callable[[Tensor, Tensor], Tensor], *, seed: int = 0) -> None:
    """``attention_context(a (B, T), h (B, T, C))`` -> c (B, C) = sum_i a_i h_i."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 5, generator=g).softmax(-1)
    h = torch.randn(3, 5, 4, generator=g)
    c = _call(fn, a, h, what="attention_context(a, h)")
    check_close(c, (a[:, :, None] * h).sum(1), name="c", dims=("B", "C"), mistakes={
        "c is the plain average of the states: weight each h_i by a_i": h.mean(1),
        "c sums the states without the weights: weight each h_i by a_i": h.sum(1),
        "c is the mean of a_i h_i over the T positions: the weights already sum to 1, so take "
        "the sum": (a[:, :, None] * h).mean(1),
    })  # fmt: skip
    passed("attention_context is right")


# --------------------------------------------------------------------------------------------
# Attention module, decoder step, the whole model
# --------------------------------------------------------------------------------------------


def check_bahdanau_attention(attention_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``BahdanauAttention(query_dim, key_dim, attention_dim)(s_prev, h, mask)`` -> (c, a)."""
    from course_lib.attention import AdditiveAttention

    torch.manual_seed(seed)
    S, C, A = 4, 6, 5
    att = _call(attention_cls, query_dim=S, key_dim=C, attention_dim=A, what="BahdanauAttention")
    for name in ("query_proj", "key_proj", "score"):
        _need(att, name, nn.Linear, "BahdanauAttention")
    ref = AdditiveAttention(query_dim=S, key_dim=C, hidden_dim=A)
    ref.load_state_dict(att.state_dict())
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(3, S, generator=g)
    h = torch.randn(3, 5, C, generator=g)
    mask = torch.arange(5)[None, :] < torch.tensor([5, 2, 3])[:, None]
    out = _call(att, s, h, mask, what="BahdanauAttention.forward(s_prev, h, mask)")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailed("BahdanauAttention.forward should return the pair (context, weights)")
    c_ref, a_ref = (t.detach() for t in ref(s, h, mask=mask))
    if (
        all(isinstance(t, Tensor) for t in out)
        and out[0].shape == a_ref.shape
        and out[1].shape == c_ref.shape
    ):
        raise CheckFailed(
            "BahdanauAttention.forward returns (weights, context): return (context, weights)"
        )
    with torch.no_grad():
        W_s, W_h = att.query_proj.weight, att.key_proj.weight
        b, v = att.key_proj.bias, att.score.weight[0]
        e = _scores(s, h, W_s, W_h, b, v)
        check_close(out[1], a_ref, name="the attention weights", dims=("B", "T"), mistakes={
            "the mask is ignored: pass the scores and the mask to masked_softmax(e, mask)":
                e.softmax(-1),
            "the bias b = key_proj.bias is missing from the scores":
                _masked_softmax(_scores(s, h, W_s, W_h, torch.zeros_like(b), v), mask),
        })  # fmt: skip
        check_close(out[0], c_ref, name="the context", dims=("B", "C"), mistakes={
            "the context is computed from the raw scores e: use the weights a = "
            "masked_softmax(e, mask)": (e[:, :, None] * h).sum(1),
        })  # fmt: skip
    out[0].sum().backward()
    check_gradients({f"{n}.weight": getattr(att, n).weight for n in ("query_proj", "key_proj")})
    passed("BahdanauAttention matches course_lib.attention.AdditiveAttention")


def _manual_step(
    dec, y, s, h, mask, *, cell_order="ec", out_order="sce", query="prev", out_s="new"
):
    """The reference decoder step with switchable mistakes (defaults: correct)."""
    e = dec.embedding(y)
    att = dec.attention

    def attend(state):
        hid = torch.tanh(att.query_proj(state)[:, None] + att.key_proj(h))
        a = _masked_softmax(att.score(hid).squeeze(-1), mask)
        return (a[:, :, None] * h).sum(1), a

    c, a = attend(s)
    parts = {"e": e, "c": c}
    s_new = dec.cell(torch.cat([parts[k] for k in cell_order], -1), s)
    if query == "new":
        c, a = attend(s_new)
    parts = {"s": s_new if out_s == "new" else s, "c": c, "e": e}
    return dec.out(torch.cat([parts[k] for k in out_order], -1)), s_new, a


def check_decoder_step(decoder_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``AttentionDecoder(...)(y_prev (B,), s_prev (B, S), h (B, T, C), mask (B, T))``
    -> (logits (B, V), s (B, S), a (B, T))."""
    seq2seq = _reference()
    torch.manual_seed(seed)
    V, E, S, C, A = 9, 4, 5, 6, 7
    kwargs = dict(vocab_size=V, embed_dim=E, hidden_dim=S, context_dim=C, attention_dim=A)
    dec = _call(decoder_cls, **kwargs, what="AttentionDecoder(...)")
    parts = {"embedding": nn.Embedding, "init_state": nn.Linear, "attention": nn.Module,
             "cell": nn.GRUCell, "out": nn.Linear}  # fmt: skip
    for name, kind in parts.items():
        _need(dec, name, kind, "AttentionDecoder")
    ref = seq2seq.Decoder(**kwargs)
    ref.load_state_dict(dec.state_dict())
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(3, V, (3,), generator=g)
    s = torch.randn(3, S, generator=g)
    h = torch.randn(3, 5, C, generator=g)
    mask = torch.arange(5)[None, :] < torch.tensor([5, 2, 4])[:, None]
    h = h * mask[:, :, None]
    with torch.no_grad():
        out = _call(dec, y, s, h, mask, what="AttentionDecoder.forward(y_prev, s_prev, h, mask)")
        if not isinstance(out, tuple) or len(out) != 3:
            raise CheckFailed("AttentionDecoder.forward should return (logits, s, a)")
        logits, s_new, a = out
        ref_logits, ref_s, ref_a = ref.step(y, s, h, mask, torch.zeros(3, C))
        check_close(
            a,
            ref_a,
            name="the attention weights a_t",
            dims=("B", "T"),
            mistakes={
                "attention uses the new state s_t; Bahdanau attends with the previous state "
                "s_{t-1}, before the GRU step": _manual_step(dec, y, s, h, mask, query="new")[2]
            },
        )
        check_close(
            s_new,
            ref_s,
            name="the new state s_t",
            dims=("B", "S"),
            mistakes={
                "the GRU cell's input is [c_t; e] instead of [e; c_t] (embedding first)": (
                    _manual_step(dec, y, s, h, mask, cell_order="ce")[1]
                ),
                "the returned state is the previous state s_{t-1}: return the new state s_t "
                "of the GRU cell": s,
            },
        )
        check_close(logits, ref_logits, name="the logits", dims=("B", "V"), mistakes={
            "the output layer's input is not [s_t; c_t; e] in this order": _manual_step(
                dec, y, s, h, mask, out_order="esc")[0],
            "the output layer reads the previous state s_{t-1}: use the new state s_t":
                _manual_step(dec, y, s, h, mask, out_s="prev")[0]})  # fmt: skip
    passed("AttentionDecoder's step matches the reference")


def _student_model(model_cls: type[nn.Module], **sizes: int) -> nn.Module:
    model = _call(model_cls, **sizes, what="Seq2Seq(...)")
    for name in ("encoder", "decoder"):
        _need(model, name, nn.Module, "Seq2Seq")
    return model


def _reference_model(model: nn.Module, sizes: dict) -> nn.Module:
    seq2seq = _reference()
    cfg = seq2seq.Seq2SeqConfig(
        src_vocab_size=sizes["src_vocab_size"],
        tgt_vocab_size=sizes["tgt_vocab_size"],
        embed_dim=sizes["embed_dim"],
        hidden_dim=sizes["hidden_dim"],
        attention_dim=sizes["attention_dim"],
        attention=True,
        bidirectional=True,
    )
    ref = seq2seq.Seq2Seq(config=cfg)
    ref.load_state_dict(reference_encoder_state(model.state_dict(), prefix="encoder."))
    return ref


SIZES = dict(src_vocab_size=13, tgt_vocab_size=9, embed_dim=4, hidden_dim=5, attention_dim=6)


def _decode(
    ref,
    src,
    lengths,
    steps,
    *,
    tgt_in=None,
    init="c",
    masked=True,
    carry=True,
    feed="true",
    pad_after_eos=True,
    remember_eos=True,
):
    """The reference's teacher-forced forward (``tgt_in`` given) or greedy decoding, with
    switchable mistakes (the defaults are right). Returns (tokens or logits, weights)."""
    h, c, mask = ref.encode(src, lengths)
    if not masked:
        mask = torch.ones_like(mask)
    s0 = (
        ref.decoder.initial_state(c)
        if init == "c"
        else torch.zeros_like(ref.decoder.initial_state(c))
    )
    s = s0
    y = torch.full((src.shape[0],), BOS, dtype=torch.long)
    done = torch.zeros_like(y, dtype=torch.bool)
    outs, weights = [], []
    for t in range(steps):
        if tgt_in is not None:
            y = tgt_in[:, t] if feed == "true" else tgt_in[:, max(t - 1, 0)]
        elif feed == "bos":
            y = torch.full_like(y, BOS)
        logits, s_new, a = ref.decoder.step(y, s, h, mask, c)
        s = s_new if carry else s0
        weights.append(a)
        if tgt_in is not None:
            outs.append(logits)
            continue
        y = logits.argmax(-1)
        if pad_after_eos:
            y = y.masked_fill(done, PAD)
        outs.append(y)
        done = (done | (y == EOS)) if remember_eos else (y == EOS)
        if done.all():
            break
    return torch.stack(outs, dim=1), torch.stack(weights, dim=1)


def _teacher_mistakes(ref, src, lengths, tgt_in, which: int) -> dict[str, Tensor]:
    run = lambda **kw: _decode(ref, src, lengths, tgt_in.shape[1], tgt_in=tgt_in, **kw)[which]  # noqa: E731
    return {
        "the decoder starts from zeros: start from s_0 = decoder.initial_state(c)": run(init="0"),
        "the padding mask is not used: pass mask = source_mask(src_lengths, T) to the decoder":
            run(masked=False),
        "the decoder's state is not carried from step to step: feed the new state s_t back":
            run(carry=False),
        "the decoder's input at step t is not tgt_in[:, t] (tgt_in already starts with [BOS] "
        "and is shifted: feed tgt_in[:, t] at step t)": run(feed="previous"),
    }  # fmt: skip


def check_seq2seq(model_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``Seq2Seq(...)(src, src_lengths, tgt_in)`` -> (logits (B, T_out, V), a (B, T_out, T))."""
    torch.manual_seed(seed)
    model = _student_model(model_cls, **SIZES)
    ref = _reference_model(model, SIZES)
    g = torch.Generator().manual_seed(seed)
    src, lengths = _padded_batch(g, [7, 3, 5], SIZES["src_vocab_size"])
    tgt_in = torch.randint(3, SIZES["tgt_vocab_size"], (3, 4), generator=g)
    tgt_in[:, 0] = BOS
    with torch.no_grad():
        out = _call(model, src, lengths, tgt_in, what="Seq2Seq.forward(src, src_lengths, tgt_in)")
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailed("Seq2Seq.forward should return (logits, weights)")
        logits, weights = out
        ref_logits, ref_weights = ref(src, tgt_in, src_lengths=lengths, return_attention=True)
    check_shape(logits, (3, 4, SIZES["tgt_vocab_size"]), name="logits", dims=("B", "T_out", "V"))
    check_shape(weights, (3, 4, 7), name="weights", dims=("B", "T_out", "T"))
    with torch.no_grad():
        check_close(weights, ref_weights, name="the attention weights",
                    mistakes=_teacher_mistakes(ref, src, lengths, tgt_in, 1))  # fmt: skip
        check_close(logits, ref_logits, name="the logits",
                    mistakes=_teacher_mistakes(ref, src, lengths, tgt_in, 0))  # fmt: skip
    passed("Seq2Seq's teacher-forced forward matches the reference")


def check_sequence_loss(fn: Callable[..., Tensor], *, seed: int = 0) -> None:
    """``sequence_loss(logits (B, T_out, V), tgt_out (B, T_out), pad_id)`` -> mean CE."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, 7, generator=g)
    tgt = torch.randint(3, 7, (3, 5), generator=g)
    tgt[1, 3:] = PAD
    tgt[2, 1:] = PAD
    loss = _call(fn, logits, tgt, PAD, what="sequence_loss(logits, tgt_out, pad_id)")
    flat = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="none").view(3, 5)
    real = tgt != PAD
    expected = flat[real].mean()
    check_close(loss, expected, name="the loss", mistakes={
        "the padding positions are counted: ignore them (ignore_index=pad_id)": flat.mean(),
        "the loss is summed, not averaged over the real tokens": flat[real].sum(),
        "each sequence is averaged first, then the sequences: average over all real tokens "
        "at once": (flat * real).sum(1).div(real.sum(1)).mean(),
    })  # fmt: skip
    pad_id = 3  # another vocabulary's [PAD]
    tgt = tgt.masked_fill(~real, pad_id).masked_fill(real & (tgt == pad_id), 4)
    loss = _call(fn, logits, tgt, pad_id, what="sequence_loss(logits, tgt_out, pad_id=3)")
    flat = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="none").view(3, 5)
    check_close(loss, flat[real].mean(), name="the loss with pad_id=3", mistakes={
        "the padding id is hard-coded: ignore pad_id (ignore_index=pad_id), not 0":
            F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=0),
        "the padding positions are counted: ignore them (ignore_index=pad_id)": flat.mean(),
    })  # fmt: skip
    passed("sequence_loss is right")


def varied_eos(ref: nn.Module, src: Tensor, lengths: Tensor, max_len: int) -> bool:
    """Tune the reference's output biases (in place) so that greedy decoding is informative: the
    model never predicts [PAD] or [BOS], one sequence emits [EOS] at least two steps before the
    output's last step (so [PAD]s follow it) and another runs at least three steps. Tries [EOS]
    biases in a fixed order; returns False (biases restored) when none works."""
    bias = ref.decoder.out.bias
    with torch.no_grad():
        bias[PAD] = bias[BOS] = -1e4
        base = bias[EOS].item()
        for k in range(80):
            bias[EOS] = base + 0.1 * ((k + 1) // 2) * (1 if k % 2 else -1)
            tokens = ref.greedy_decode(src, src_lengths=lengths, max_len=max_len)
            T = tokens.shape[1]
            ends = torch.where((tokens == EOS).any(1), (tokens == EOS).long().argmax(1), T)
            if T >= 3 and (ends <= T - 3).any() and (ends >= 2).any():
                return True
        bias[EOS] = base
    return False


def check_greedy_decode(fn: Callable[..., Any], model_cls: type[nn.Module], *, seed: int = 0):
    """``greedy_decode(model, src, src_lengths, max_len)`` -> (tokens (B, <= max_len),
    weights (B, T_out, T)), as ``course_lib.models.seq2seq.Seq2Seq.greedy_decode``."""
    g = torch.Generator().manual_seed(seed)
    src, lengths = _padded_batch(g, [7, 3, 5, 6, 2, 4], SIZES["src_vocab_size"])
    for attempt in range(20):  # a model whose sequences end at different steps
        torch.manual_seed(seed + attempt)
        model = _student_model(model_cls, **SIZES).double().eval()
        ref = _reference_model(model, SIZES).double().eval()
        if varied_eos(ref, src, lengths, 8):
            break
    with torch.no_grad():
        model.decoder.out.bias.copy_(ref.decoder.out.bias)
        out = _call(fn, model, src, lengths, 8, what="greedy_decode(model, src, src_lengths, 8)")
        ref_tokens, ref_weights = ref.greedy_decode(
            src, src_lengths=lengths, max_len=8, return_attention=True
        )
        run = lambda **kw: _decode(ref, src, lengths, 8, **kw)[0]  # noqa: E731
        mistakes = {
            "after a sequence's [EOS] every further token must be [PAD] (0)": run(
                pad_after_eos=False),
            "a finished sequence emits [PAD] only once: remember which sequences have produced "
            "[EOS] (done |= y == eos_id) and keep emitting [PAD] for them": run(
                remember_eos=False),
            "[BOS] is fed at every step: feed back the arg-max token of the previous step":
                run(feed="bos"),
            "the decoder starts from zeros: start from s_0 = decoder.initial_state(c)":
                run(init="0"),
        }  # fmt: skip
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailed("greedy_decode should return (tokens, weights)")
    tokens, weights = out
    if isinstance(tokens, Tensor) and tokens.dim() == 2 and (tokens[:, 0] == BOS).all():
        raise CheckFailed("the tokens start with [BOS]: return only the generated tokens")
    if isinstance(tokens, Tensor) and not (
        tokens.shape == ref_tokens.shape and torch.equal(tokens.long(), ref_tokens)
    ):
        for description, wrong in mistakes.items():
            if tokens.shape == wrong.shape and torch.equal(tokens.long(), wrong):
                raise CheckFailed(f"the tokens are wrong: {description}")
    if isinstance(tokens, Tensor) and tokens.dim() == 2 and tokens.shape[1] > ref_tokens.shape[1]:
        raise CheckFailed(
            f"greedy_decode ran {tokens.shape[1]} steps where {ref_tokens.shape[1]} suffice: stop "
            "as soon as every sequence has produced [EOS]"
        )
    check_shape(tokens, tuple(ref_tokens.shape), name="tokens", dims=("B", "T_out"))
    if not torch.equal(tokens.long(), ref_tokens):
        raise CheckFailed(
            f"the tokens differ from the reference's:\n{tokens.tolist()}\nexpected\n"
            f"{ref_tokens.tolist()}\n(feed back the arg-max token, starting from [BOS])"
        )
    check_close(weights, ref_weights, name="the attention weights of greedy_decode")
    with torch.no_grad():  # now every sequence emits [EOS] at once
        model.decoder.out.bias[EOS] = 1e4
        tokens, _ = _call(fn, model, src, lengths, 8, what="greedy_decode with [EOS] first")
    if tuple(tokens.shape) != (src.shape[0], 1):
        raise CheckFailed(
            f"when every sequence emits [EOS] at the first step, greedy_decode should stop "
            f"there and return (B, 1) tokens; it ran {tokens.shape[1]} steps: stop as soon as "
            "every sequence has produced [EOS]"
        )
    passed("greedy_decode matches the reference (arg-max feedback, [EOS], [PAD] after it)")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
