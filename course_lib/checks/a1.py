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
        }  # fmt: skip
        check_close(h, h_ref, name="h", mistakes={
            "the GRU reads the padding (the backward direction starts on [PAD] tokens): pack "
            "the batch with pack_padded_sequence(..., enforce_sorted=False)": out_unpacked
            * keep[:, :, None]})  # fmt: skip
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
    check_close(a, _masked_softmax(e, empty), name="masked_softmax with a fully masked row")
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
    c_ref, a_ref = ref(s, h, mask=mask)
    check_close(out[1], a_ref.detach(), name="the attention weights", dims=("B", "T"))
    check_close(out[0], c_ref.detach(), name="the context", dims=("B", "C"))
    out[0].sum().backward()
    check_gradients({f"{n}.weight": getattr(att, n).weight for n in ("query_proj", "key_proj")})
    passed("BahdanauAttention matches course_lib.attention.AdditiveAttention")


def _manual_step(dec, y, s, h, mask, *, cell_order="ec", out_order="sce", query="prev"):
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
    parts = {"s": s_new, "c": c, "e": e}
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
                )
            },
        )
        check_close(logits, ref_logits, name="the logits", dims=("B", "V"), mistakes={
            "the output layer's input is not [s_t; c_t; e] in this order": _manual_step(
                dec, y, s, h, mask, out_order="esc")[0]})  # fmt: skip
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
    check_close(weights, ref_weights, name="the attention weights")
    check_close(logits, ref_logits, name="the logits")
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
    passed("sequence_loss is right")


def check_greedy_decode(fn: Callable[..., Any], model_cls: type[nn.Module], *, seed: int = 0):
    """``greedy_decode(model, src, src_lengths, max_len)`` -> (tokens (B, <= max_len),
    weights (B, T_out, T)), as ``course_lib.models.seq2seq.Seq2Seq.greedy_decode``."""
    torch.manual_seed(seed)
    model = _student_model(model_cls, **SIZES).double().eval()
    ref = _reference_model(model, SIZES).double().eval()
    with torch.no_grad():  # make [EOS] likely, so that sequences end at different steps
        bias = ref.decoder.out.bias
        bias[EOS] += 1.5
        model.decoder.out.bias.copy_(bias)
    g = torch.Generator().manual_seed(seed)
    src, lengths = _padded_batch(g, [7, 3, 5, 6, 2, 4], SIZES["src_vocab_size"])
    with torch.no_grad():
        out = _call(fn, model, src, lengths, 8, what="greedy_decode(model, src, src_lengths, 8)")
        ref_tokens, ref_weights = ref.greedy_decode(
            src, src_lengths=lengths, max_len=8, return_attention=True
        )
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailed("greedy_decode should return (tokens, weights)")
    tokens, weights = out
    if isinstance(tokens, Tensor) and tokens.dim() == 2 and (tokens[:, 0] == BOS).all():
        raise CheckFailed("the tokens start with [BOS]: return only the generated tokens")
    if isinstance(tokens, Tensor) and tokens.shape == ref_tokens.shape:
        after = ((ref_tokens == EOS).cumsum(1) - (ref_tokens == EOS).long()) > 0
        if not torch.equal(tokens[after], ref_tokens[after]) and torch.equal(
            tokens[~after], ref_tokens[~after]
        ):
            raise CheckFailed("after a sequence's [EOS] every further token must be [PAD] (0)")
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
    passed("greedy_decode matches the reference (arg-max feedback, [EOS], [PAD] after it)")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
