"""Visible checks for assignment A3 (the Transformer, from LayerNorm to greedy decoding).

Each ``check_*`` compares the student's module with ``course_lib``'s reference
(:mod:`course_lib.layers`, :mod:`course_lib.models.transformer`) given the same weights, and names
the usual mistake when they differ: the unbiased variance or eps outside the square root in
LayerNorm, pre-norm instead of post-norm, a missing residual, cross-attention reading the decoder
instead of the memory, unscaled embeddings, a decoder that sees the future. A failure raises
:class:`~course_lib.checks.CheckFailed`; a success prints one line. No hidden test lives here.

The student's modules use the reference's parameter names: ``LayerNorm.weight/bias``;
``FeedForward.fc1/fc2``; ``EncoderBlock.self_attn/ff/norm1/norm2``;
``DecoderBlock.self_attn/cross_attn/ff/norm1/norm2/norm3``; ``Transformer.src_embed/tgt_embed/
encoder_layers/decoder_layers/out_proj``.

Shape legend: B batch, S source tokens, T target tokens, C channels (d_model), H heads,
L layers, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .core import CheckFailed, check_close, check_gradients, check_shape, close, passed

PAD, BOS, EOS = 0, 1, 2


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


def _pair(out: Any, what: str, n: int = 2) -> tuple:
    if not isinstance(out, tuple) or len(out) != n:
        raise CheckFailed(f"{what} should return a tuple of {n}, got {type(out).__name__}")
    return out


def _load(module: nn.Module, reference: nn.Module, what: str) -> None:
    try:
        module.load_state_dict(reference.state_dict())
    except RuntimeError as error:
        raise CheckFailed(
            f"the reference's weights do not fit your {what} (keep the given __init__): {error}"
        ) from None


def _reference():
    from course_lib.models import transformer

    return transformer


def _block_kwargs(**sizes: int) -> dict:
    return dict(**sizes, dropout=0.0, activation="relu", norm_first=False, fused=False)


# --------------------------------------------------------------------------------------------
# LayerNorm, feed-forward
# --------------------------------------------------------------------------------------------


def _perturb(module: nn.Module, g: torch.Generator) -> None:
    """LayerNorm gains and biases off 1 and 0 (at 1 and 0, swapped or missing norms hide)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def check_layer_norm(norm_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``LayerNorm(dim, eps=...)(x (..., C))`` equals ``nn.LayerNorm(dim, eps=...)``."""
    g = torch.Generator().manual_seed(seed)
    C, eps = 6, 0.1  # eps large enough that eps in the wrong place shows
    mine = _call(norm_cls, C, eps=eps, what="LayerNorm(6, eps=0.1)")
    ref = nn.LayerNorm(C, eps=eps)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(C, generator=g))
        ref.bias.copy_(torch.randn(C, generator=g))
    _load(mine, ref, "LayerNorm")
    x = torch.randn(2, 3, C, generator=g) * 2 + 1
    y = _call(mine, x, what="LayerNorm.forward(x)")
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    with torch.no_grad():
        want = ref(x)
        w, b = ref.weight, ref.bias
        everything = (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps)
        mistakes = {
            "the variance is unbiased (divides by C - 1): LayerNorm uses the biased variance, "
            "mean((x - mu)^2)": (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b,
            "eps is added to the standard deviation instead of the variance: divide by "
            "sqrt(var + eps)": (x - mean) / (var.sqrt() + eps) * w + b,
            "eps is left out: divide by sqrt(var + eps)": (x - mean) / var.sqrt() * w + b,
            "the statistics are taken over the batch axis: normalise each token over its last "
            "dimension (dim=-1, keepdim=True)": (x - x.mean(0))
            / torch.sqrt(x.var(0, unbiased=False) + eps)
            * w
            + b,
            "the statistics are taken over the whole tensor: normalise each token over its last "
            "dimension (dim=-1, keepdim=True)": everything * w + b,
            "weight (gamma) and bias (beta) are not applied": nn.functional.layer_norm(
                x, (C,), eps=eps
            ),
            "the bias (beta) is not added: ... * weight + bias": (want - b),
            "the mean is not subtracted: normalise x - mean": x / torch.sqrt(var + eps) * w + b,
        }
    check_close(y, want, name="LayerNorm(x)", mistakes=mistakes, atol=1e-5)
    y.sum().backward()
    check_gradients({"weight": mine.weight, "bias": mine.bias})
    passed("LayerNorm equals nn.LayerNorm")


def check_feed_forward(ffn_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``FeedForward(dim, hidden_dim)(x)`` = fc2(relu(fc1(x)))."""
    from course_lib.layers import FeedForward

    torch.manual_seed(seed)
    mine = _call(ffn_cls, 5, 7, what="FeedForward(5, 7)")
    ref = FeedForward(5, 7, activation="relu")
    _load(mine, ref, "FeedForward")
    x = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        y = _call(mine, x, what="FeedForward.forward(x)")
        fc1, fc2 = ref.fc1, ref.fc2
        check_close(y, ref(x), name="FFN(x)", mistakes={
            "the activation is GELU: the paper's FFN uses ReLU": fc2(nn.functional.gelu(fc1(x))),
            "the activation is missing: fc2(relu(fc1(x)))": fc2(fc1(x)),
            "ReLU is applied after fc2: it goes between fc1 and fc2": torch.relu(fc2(fc1(x))),
        })  # fmt: skip
    passed("FeedForward is right")


# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------


def _padding(g: torch.Generator, B: int, S: int) -> Tensor:
    lengths = torch.randint(1, S + 1, (B,), generator=g)
    lengths[0] = S
    lengths[-1] = max(1, S - 2)
    return torch.arange(S)[None, :] < lengths[:, None]  # (B, S)


def check_encoder_block(block_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``EncoderBlock(d_model, num_heads, d_ff)(x, mask)`` -> (x, weights), post-norm."""
    transformer = _reference()
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    sizes = dict(d_model=8, num_heads=2, d_ff=12)
    mine = _call(block_cls, **sizes, what="EncoderBlock(...)")
    ref = transformer.EncoderBlock(**_block_kwargs(**sizes)).eval()
    _perturb(ref, g)
    _load(mine, ref, "EncoderBlock")
    pre = transformer.EncoderBlock(**{**_block_kwargs(**sizes), "norm_first": True}).eval()
    pre.load_state_dict(ref.state_dict())
    x = torch.randn(3, 5, 8, generator=g)
    keep = _padding(g, 3, 5)[:, None, None, :]
    with torch.no_grad():
        y, w = _pair(_call(mine, x, keep, what="EncoderBlock.forward(x, mask)"), "forward")
        want, want_w = ref(x, keep, return_attn=True)
        n1, n2, ff, attn = ref.norm1, ref.norm2, ref.ff, ref.self_attn
        a = attn(x, mask=keep)
        h = n1(x + a)
        h0 = n1(x + attn(x))
        h2 = n2(x + a)
        mistakes = {
            "this is the pre-norm block x + f(LayerNorm(x)); the paper's is post-norm, "
            "LayerNorm(x + f(x))": pre(x, keep),
            "the residual connections are missing: LayerNorm(x + Sublayer(x))": n2(ff(n1(a))),
            "the residual of the self-attention is missing: norm1(x + attention(x))": n2(
                n1(a) + ff(n1(a))
            ),
            "the residual of the feed-forward is missing: norm2(x + ff(x))": n2(ff(h)),
            "norm1 and norm2 are swapped: norm1 follows the attention, norm2 the feed-forward": (
                n1(h2 + ff(h2))
            ),
            "the padding mask is not passed to the self-attention (mask=mask)": n2(h0 + ff(h0)),
        }
        check_shape(y, tuple(want.shape), name="EncoderBlock(x)", dims=("B", "S", "C"))
        if not close(y, want):
            for description, wrong in mistakes.items():
                if close(y, wrong):
                    raise CheckFailed(f"EncoderBlock(x) is wrong: it looks like {description}")
        check_shape(w, (3, 2, 5, 5), name="the attention-weight tensor", dims=("B", "H", "S", "S"))
        check_close(w, want_w, name="the attention-weight tensor", mistakes={
            "the padding mask is not passed to the self-attention (mask=mask)":
                attn(x, return_weights=True)[1],
        })  # fmt: skip
        check_close(y, want, name="EncoderBlock(x)")
    passed("EncoderBlock matches the reference post-norm block")


def check_decoder_block(block_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``DecoderBlock(...)(y, memory, self_mask, memory_mask)`` -> (y, (self w, cross w))."""
    transformer = _reference()
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    sizes = dict(d_model=8, num_heads=2, d_ff=12)
    mine = _call(block_cls, **sizes, what="DecoderBlock(...)")
    ref = transformer.DecoderBlock(**_block_kwargs(**sizes)).eval()
    _perturb(ref, g)
    _load(mine, ref, "DecoderBlock")
    pre = transformer.DecoderBlock(**{**_block_kwargs(**sizes), "norm_first": True}).eval()
    pre.load_state_dict(ref.state_dict())
    y, memory = torch.randn(3, 4, 8, generator=g), torch.randn(3, 6, 8, generator=g)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    keep = _padding(g, 3, 6)[:, None, None, :]
    with torch.no_grad():
        out = _call(mine, y, memory, causal, keep, what="DecoderBlock.forward(...)")
        out, weights = _pair(out, "DecoderBlock.forward")
        w_self, w_cross = _pair(weights, "the weights of DecoderBlock.forward")
        want, (want_self, want_cross) = ref(y, memory, causal, keep, return_attn=True)
        n1, n2, n3, ff = ref.norm1, ref.norm2, ref.norm3, ref.ff
        sa, ca = ref.self_attn, ref.cross_attn

        def run(self_mask=causal, kv=None, memory_mask=keep, res=(1, 1, 1), norms=(0, 1, 2)):
            norm = (n1, n2, n3)
            a = sa(y, mask=self_mask)
            y1 = norm[norms[0]](res[0] * y + a)
            source = memory if kv is None else y1
            a = ca(y1, source, source, mask=memory_mask)
            y2 = norm[norms[1]](res[1] * y1 + a)
            return norm[norms[2]](res[2] * y2 + ff(y2))

        a = ca(y, memory, memory, mask=keep)
        c1 = n2(y + a)
        c2 = n1(c1 + sa(c1, mask=causal))
        mistakes = {
            "the cross-attention reads the decoder (y) instead of the memory: its keys and "
            "values are the encoder output, memory": run(kv="y", memory_mask=None),
            "the self-attention is not causal: the decoder sees the future (pass self_mask to "
            "the self-attention)": run(self_mask=None),
            "the source padding is not masked in the cross-attention (pass memory_mask to "
            "cross_attn)": run(memory_mask=None),
            "this is the pre-norm block: the paper's is post-norm, LayerNorm(y + f(y))": pre(
                y, memory, causal, keep
            ),
            "the residual connections are missing: LayerNorm(y + Sublayer(y))": run(res=(0, 0, 0)),
            "the residual of the self-attention is missing: norm1(y + attention(y))": run(
                res=(0, 1, 1)
            ),
            "the residual of the cross-attention is missing: norm2(y + cross(y, memory))": run(
                res=(1, 0, 1)
            ),
            "the residual of the feed-forward is missing: norm3(y + ff(y))": run(res=(1, 1, 0)),
            "norm2 and norm3 are swapped: norm1 after the self-attention, norm2 after the "
            "cross-attention, norm3 after the feed-forward": run(norms=(0, 2, 1)),
            "norm1 and norm2 are swapped: norm1 after the self-attention, norm2 after the "
            "cross-attention": run(norms=(1, 0, 2)),
            "the cross-attention comes first: the order is self-attention, cross-attention, "
            "feed-forward": n3(c2 + ff(c2)),
        }
        check_shape(out, tuple(want.shape), name="DecoderBlock(y, memory)", dims=("B", "T", "C"))
        if not close(out, want):
            for description, wrong in mistakes.items():
                if close(out, wrong):
                    raise CheckFailed(
                        f"DecoderBlock(y, memory) is wrong: it looks like {description}"
                    )
        check_shape(
            w_cross,
            (3, 2, 4, 6),
            name="the cross-attention weight tensor",
            dims=("B", "H", "T", "S"),
        )
        check_close(w_cross, want_cross, name="the cross-attention weight tensor", mistakes={
            "the source padding is not masked in the cross-attention (pass memory_mask)":
                ca(n1(y + sa(y, mask=causal)), memory, memory, return_weights=True)[1],
        })  # fmt: skip
        check_close(w_self, want_self, name="the (causal) self-attention weight tensor", mistakes={
            "the self-attention is not causal: the decoder sees the future (pass self_mask)":
                sa(y, return_weights=True)[1],
        })  # fmt: skip
        check_close(out, want, name="DecoderBlock(y, memory)")
        changed = y.clone()
        changed[:, 2:] += 1.0
        out2, _ = mine(changed, memory, causal, keep)
        if not close(out2[:, :2], out[:, :2]):
            raise CheckFailed(
                "changing target positions 2 and 3 changed the outputs at positions 0 and 1: "
                "the decoder sees the future (pass self_mask to the self-attention)"
            )
    passed("DecoderBlock matches the reference and never looks ahead")


# --------------------------------------------------------------------------------------------
# Whole model, greedy decoding
# --------------------------------------------------------------------------------------------

SIZES = dict(src_vocab_size=13, tgt_vocab_size=11, d_model=8, num_heads=2, num_layers=2, d_ff=12)


def reference_model(sizes: dict) -> nn.Module:
    """course_lib's Transformer configured like the assignment's (post-norm, ReLU, untied)."""
    transformer = _reference()
    config = transformer.TransformerConfig(
        src_vocab_size=sizes["src_vocab_size"],
        tgt_vocab_size=sizes["tgt_vocab_size"],
        d_model=sizes["d_model"],
        num_heads=sizes["num_heads"],
        num_encoder_layers=sizes["num_layers"],
        num_decoder_layers=sizes["num_layers"],
        d_ff=sizes["d_ff"],
        dropout=0.0,
        activation="relu",
        norm_first=False,
        tie_embeddings=False,
        share_embeddings=False,
        fused_attn=False,
    )
    return transformer.Transformer(config=config).eval()


def _batch(g: torch.Generator, sizes: dict, B: int = 3, S: int = 6, T: int = 4):
    src = torch.randint(3, sizes["src_vocab_size"], (B, S), generator=g)
    src = src.masked_fill(~_padding(g, B, S), PAD)
    tgt_in = torch.randint(3, sizes["tgt_vocab_size"], (B, T), generator=g)
    tgt_in[:, 0] = BOS
    return src, tgt_in


def _variant(ref: nn.Module, src: Tensor, tgt_in: Tensor, **how: Any) -> Tensor:
    """The reference's logits under one mistake (keyword arguments: what goes wrong)."""
    from course_lib.positional import sinusoidal_positional_encoding

    C = ref.config.d_model
    keep_src = (src == PAD) if how.get("inverted_padding") else (src != PAD)

    def embed(ids: Tensor, embedding: nn.Embedding) -> Tensor:
        pe = sinusoidal_positional_encoding(ids.shape[1], C, dtype=embedding.weight.dtype)
        return embedding(ids) * how.get("scale", C**0.5) + (0 if how.get("no_pe") else pe)

    x = embed(src, ref.src_embed)
    for layer in ref.encoder_layers:
        x = layer(x, None if how.get("no_encoder_mask") else keep_src[:, None, None, :])
    memory = ref.encoder_norm(x)
    T = tgt_in.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool)
    causal = how["causal"](causal) if "causal" in how else causal.tril()
    y = embed(tgt_in, ref.src_embed if how.get("src_embed_for_target") else ref.tgt_embed)
    memory_keep = None if how.get("no_cross_mask") else keep_src[:, None, None, :]
    for layer in ref.decoder_layers:
        y = layer(y, memory, causal, memory_keep)
    return ref.out_proj(ref.decoder_norm(y))


def check_transformer(model_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``Transformer(...)(src, tgt_in)`` -> (logits, {"encoder", "decoder_self", "cross"})."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    mine = _call(model_cls, **SIZES, what="Transformer(...)")
    ref = reference_model(SIZES)
    _perturb(ref, g)
    _load(mine, ref, "Transformer")
    src, tgt_in = _batch(g, SIZES)
    C = SIZES["d_model"]
    with torch.no_grad():
        logits, weights = _pair(_call(mine, src, tgt_in, what="Transformer(src, tgt_in)"), "")
        want, want_w = ref(src, tgt_in, return_attn=True)
        V = SIZES["tgt_vocab_size"]
        check_shape(logits, (3, 4, V), name="the logits tensor", dims=("B", "T", "V"))
        mistakes = {
            "the causal mask is inverted: keep position t's keys 0..t, torch.ones(T, T).tril()":
                dict(causal=lambda m: m.triu()),
            "the causal mask hides the diagonal: position t must see itself, tril() not "
            "tril(-1)": dict(causal=lambda m: m.tril(-1)),
            "the causal mask is missing: the decoder sees the future": dict(causal=lambda m: m),
            "the embeddings are multiplied by d_model instead of sqrt(d_model)": dict(scale=C),
            "the embeddings are not multiplied by sqrt(d_model)": dict(scale=1.0),
            "the embeddings are divided by sqrt(d_model) instead of multiplied": dict(
                scale=C**-0.5),
            "the positional encoding is not added to the embeddings": dict(no_pe=True),
            "the padding mask is inverted: keep = src != pad_id (True for real tokens)": dict(
                inverted_padding=True),
            "the source padding is not masked in the encoder's self-attention": dict(
                no_encoder_mask=True),
            "the source padding is not masked in the cross-attention (pass src_mask[:, None, "
            "None, :] to the decoder blocks)": dict(no_cross_mask=True),
            "the target is embedded with src_embed: use tgt_embed for the target": dict(
                src_embed_for_target=True),
        }  # fmt: skip
        if not close(logits, want, atol=1e-4):
            for description, how in mistakes.items():
                if close(logits, _variant(ref, src, tgt_in, **how), atol=1e-4):
                    raise CheckFailed(f"the logits are wrong: it looks like {description}")
        if not isinstance(weights, dict) or set(weights) != set(want_w):
            raise CheckFailed(f"the weights should be a dict with the keys {sorted(want_w)}")
        for name in ("encoder", "decoder_self", "cross"):
            check_shape(weights[name], tuple(want_w[name].shape), name=f'weights["{name}"]',
                        dims=("L", "B", "H", "T_q", "T_k"))  # fmt: skip
            check_close(weights[name], want_w[name], name=f'weights["{name}"]')
        check_close(logits, want, name="the logits tensor", atol=1e-4)
    passed("Transformer matches the reference (logits and every attention map)")


def shift_logit(ref: nn.Module, token: int, delta: float) -> None:
    """Add exactly ``delta`` to every logit of ``token`` (post-norm reference: the decoder ends
    with y = gamma * z + beta, sum(z) = 0; with beta = gamma, (1 / gamma) . y = C always)."""
    norm = ref.decoder_layers[-1].norm3
    with torch.no_grad():
        norm.bias.copy_(norm.weight)
        ref.out_proj.weight[token] += delta / norm.weight / norm.weight.numel()


def _greedy(model: nn.Module, src: Tensor, max_new: int, mistake: str = "") -> Tensor:
    """Greedy decoding with the reference model, optionally with one usual mistake."""
    src_mask = src != PAD
    memory = model.encode(src, src_mask)
    tokens = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    steps = max_new - 1 if mistake == "short" else max_new
    for _ in range(steps):
        logits = model.decode(tokens, memory, src_mask)
        next_id = logits[:, 0 if mistake == "first" else -1].argmax(-1)
        if mistake != "no_pad":
            next_id = next_id.masked_fill(done, PAD)
        tokens = torch.cat([tokens, next_id[:, None]], dim=1)
        done |= next_id == EOS
        if mistake != "no_stop" and (done.any() if mistake == "any" else done.all()):
            break
    return tokens if mistake == "bos" else tokens[:, 1:]


GREEDY_MISTAKES = {
    "first": "it takes the arg-max of the FIRST position's logits: use the last position, "
    "logits[:, -1]",
    "no_pad": "a sequence goes on after its [EOS]: put [PAD] (model.pad_id) after [EOS]",
    "any": "it stops when the first sequence emits [EOS]: go on until every sequence has "
    "its [EOS] (done.all())",
    "no_stop": "it goes on after every sequence has its [EOS]: stop once all are done",
    "short": "it produces one token too few: generate up to max_new_tokens tokens",
    "bos": "the output starts with [BOS]: return only the generated tokens, tokens[:, 1:]",
}


def check_greedy_decode(fn: Callable[..., Tensor], model_cls: type[nn.Module], *, seed: int = 0):
    """``greedy_decode(model, src, max_new_tokens)`` equals the reference's greedy decoding, on
    sequences that end at different steps, on sequences that never end and on ones that end at
    once."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    mine = _call(model_cls, **SIZES, what="Transformer(...)").double().eval()
    ref = reference_model(SIZES).double()
    _perturb(ref, g)
    src, _ = _batch(g, SIZES, B=5)
    shift_logit(ref, PAD, -1e4)  # [PAD] only ever comes after [EOS]
    start = {k: v.clone() for k, v in ref.state_dict().items()}
    cases = []
    for delta in (0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, 3.0):  # ends at different steps
        ref.load_state_dict(start)
        shift_logit(ref, EOS, delta)
        with torch.no_grad():
            want = ref.greedy_decode(src, max_new_tokens=7)
        if (want[:, :-1] == EOS).any() and (want != want[:, :1]).any() and want.shape[1] > 2:
            cases.append(("sequences that end at different steps", delta))
            break
    cases += [("sequences that never emit [EOS]", -1e4), ("sequences that emit [EOS] first", 1e4)]
    for what, delta in cases:
        ref.load_state_dict(start)
        shift_logit(ref, EOS, delta)
        _load(mine, ref, "Transformer")
        with torch.no_grad():
            tokens = _call(fn, mine, src, 7, what="greedy_decode(model, src, 7)")
            want = ref.greedy_decode(src, max_new_tokens=7)
            if isinstance(tokens, Tensor) and tokens.shape == want.shape:
                if torch.equal(tokens.long(), want):
                    continue
            for mistake, description in GREEDY_MISTAKES.items():
                wrong = _greedy(ref, src, 7, mistake)
                if isinstance(tokens, Tensor) and tokens.shape == wrong.shape:
                    if torch.equal(tokens.long(), wrong):
                        raise CheckFailed(f"greedy_decode on {what}: {description}")
            name = f"the token tensor for {what}"
            check_shape(tokens, tuple(want.shape), name=name, dims=("B", "T"))
            raise CheckFailed(
                f"the tokens for {what} differ from the reference's:\n{tokens.tolist()}\n"
                f"expected\n{want.tolist()}\n(take the arg-max of the LAST position's logits; "
                "[PAD] after [EOS])"
            )
    passed("greedy_decode matches the reference")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
