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


def check_layer_norm(norm_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``LayerNorm(dim, eps=...)(x (..., C))`` equals ``nn.LayerNorm(dim, eps=...)``."""
    g = torch.Generator().manual_seed(seed)
    C, eps = 6, 1e-3
    mine = _call(norm_cls, C, eps=eps, what="LayerNorm(6, eps=1e-3)")
    ref = nn.LayerNorm(C, eps=eps)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(C, generator=g))
        ref.bias.copy_(torch.randn(C, generator=g))
    _load(mine, ref, "LayerNorm")
    x = torch.randn(2, 3, C, generator=g) * 3 + 1
    y = _call(mine, x, what="LayerNorm.forward(x)")
    mean = x.mean(-1, keepdim=True)
    with torch.no_grad():
        want = ref(x)
        w, b = ref.weight, ref.bias
        mistakes = {
            "the variance is unbiased (divides by C - 1): LayerNorm uses the biased variance, "
            "mean((x - mu)^2)": (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b,
            "eps is added to the standard deviation instead of the variance: divide by "
            "sqrt(var + eps)": (x - mean)
            / (x.var(-1, unbiased=False, keepdim=True).sqrt() + eps)
            * w
            + b,
            "the statistics are taken over the batch axis: normalise each token over its last "
            "dimension (dim=-1, keepdim=True)": (x - x.mean(0))
            / torch.sqrt(x.var(0, unbiased=False) + eps)
            * w
            + b,
            "weight (gamma) and bias (beta) are not applied": nn.functional.layer_norm(
                x, (C,), eps=eps
            ),
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
        check_close(y, ref(x), name="FFN(x)", mistakes={
            "the activation is GELU: the paper's FFN uses ReLU": mine.fc2(
                nn.functional.gelu(mine.fc1(x))),
            "the activation is missing": mine.fc2(mine.fc1(x)),
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
    sizes = dict(d_model=8, num_heads=2, d_ff=12)
    mine = _call(block_cls, **sizes, what="EncoderBlock(...)")
    ref = transformer.EncoderBlock(**_block_kwargs(**sizes)).eval()
    _load(mine, ref, "EncoderBlock")
    pre = transformer.EncoderBlock(**{**_block_kwargs(**sizes), "norm_first": True}).eval()
    pre.load_state_dict(ref.state_dict())
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, 8, generator=g)
    keep = _padding(g, 3, 5)[:, None, None, :]
    with torch.no_grad():
        y, w = _pair(_call(mine, x, keep, what="EncoderBlock.forward(x, mask)"), "forward")
        want, want_w = ref(x, keep, return_attn=True)
        check_shape(w, (3, 2, 5, 5), name="the attention weights", dims=("B", "H", "S", "S"))
        check_close(w, want_w, name="the attention weights")
        a = ref.self_attn(x, mask=keep)
        check_close(y, want, name="EncoderBlock(x)", mistakes={
            "this is the pre-norm block x + f(LayerNorm(x)); the paper's is post-norm, "
            "LayerNorm(x + f(x))": pre(x, keep),
            "the residual connections are missing: LayerNorm(x + Sublayer(x))": ref.norm2(
                ref.ff(ref.norm1(a))),
        })  # fmt: skip
    passed("EncoderBlock matches the reference post-norm block")


def check_decoder_block(block_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``DecoderBlock(...)(y, memory, self_mask, memory_mask)`` -> (y, (self w, cross w))."""
    transformer = _reference()
    torch.manual_seed(seed)
    sizes = dict(d_model=8, num_heads=2, d_ff=12)
    mine = _call(block_cls, **sizes, what="DecoderBlock(...)")
    ref = transformer.DecoderBlock(**_block_kwargs(**sizes)).eval()
    _load(mine, ref, "DecoderBlock")
    pre = transformer.DecoderBlock(**{**_block_kwargs(**sizes), "norm_first": True}).eval()
    pre.load_state_dict(ref.state_dict())
    g = torch.Generator().manual_seed(seed)
    y, memory = torch.randn(3, 4, 8, generator=g), torch.randn(3, 6, 8, generator=g)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    keep = _padding(g, 3, 6)[:, None, None, :]
    with torch.no_grad():
        out = _call(mine, y, memory, causal, keep, what="DecoderBlock.forward(...)")
        out, weights = _pair(out, "DecoderBlock.forward")
        w_self, w_cross = _pair(weights, "the weights of DecoderBlock.forward")
        want, (want_self, want_cross) = ref(y, memory, causal, keep, return_attn=True)
        check_shape(w_cross, (3, 2, 4, 6), name="the cross weights", dims=("B", "H", "T", "S"))
        check_close(w_self, want_self, name="the self-attention weights (causal)")
        check_close(w_cross, want_cross, name="the cross-attention weights")
        check_close(out, want, name="DecoderBlock(y, memory)", mistakes={
            "this is the pre-norm block: the paper's is post-norm, LayerNorm(y + f(y))":
                pre(y, memory, causal, keep),
        })  # fmt: skip
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


def check_transformer(model_cls: type[nn.Module], *, seed: int = 0) -> None:
    """``Transformer(...)(src, tgt_in)`` -> (logits, {"encoder", "decoder_self", "cross"})."""
    torch.manual_seed(seed)
    mine = _call(model_cls, **SIZES, what="Transformer(...)")
    ref = reference_model(SIZES)
    _load(mine, ref, "Transformer")
    g = torch.Generator().manual_seed(seed)
    src, tgt_in = _batch(g, SIZES)
    with torch.no_grad():
        logits, weights = _pair(_call(mine, src, tgt_in, what="Transformer(src, tgt_in)"), "")
        want, want_w = ref(src, tgt_in, return_attn=True)
        check_shape(logits, (3, 4, SIZES["tgt_vocab_size"]), name="logits", dims=("B", "T", "V"))
        if not isinstance(weights, dict) or set(weights) != set(want_w):
            raise CheckFailed(f"the weights should be a dict with the keys {sorted(want_w)}")
        for name in ("encoder", "decoder_self", "cross"):
            check_shape(weights[name], tuple(want_w[name].shape), name=f'weights["{name}"]',
                        dims=("L", "B", "H", "T_q", "T_k"))  # fmt: skip
            check_close(weights[name], want_w[name], name=f'weights["{name}"]')
        check_close(logits, want, name="the logits", mistakes={
            "the embeddings are not multiplied by sqrt(d_model)":
                _unscaled_logits(ref, src, tgt_in, SIZES["d_model"]),
        })  # fmt: skip
    passed("Transformer matches the reference (logits and every attention map)")


def _unscaled_logits(ref: nn.Module, src: Tensor, tgt_in: Tensor, C: int) -> Tensor:
    original = ref.embed

    def embed(ids: Tensor, embedding: nn.Embedding) -> Tensor:
        return original(ids, embedding) - embedding(ids) * (C**0.5 - 1)

    ref.embed = embed
    try:
        return ref(src, tgt_in)
    finally:
        del ref.embed


def check_greedy_decode(fn: Callable[..., Tensor], model_cls: type[nn.Module], *, seed: int = 0):
    """``greedy_decode(model, src, max_new_tokens)`` equals the reference's greedy decoding."""
    torch.manual_seed(seed)
    mine = _call(model_cls, **SIZES, what="Transformer(...)").double().eval()
    ref = reference_model(SIZES).double()
    _load(mine, ref, "Transformer")
    g = torch.Generator().manual_seed(seed)
    src, _ = _batch(g, SIZES, B=5)
    with torch.no_grad():
        tokens = _call(fn, mine, src, 7, what="greedy_decode(model, src, 7)")
        want = ref.greedy_decode(src, max_new_tokens=7)
    if isinstance(tokens, Tensor) and tokens.dim() == 2 and (tokens[:, 0] == BOS).all():
        raise CheckFailed("the output starts with [BOS]: return only the generated tokens")
    check_shape(tokens, tuple(want.shape), name="the tokens", dims=("B", "T"))
    if not torch.equal(tokens.long(), want):
        raise CheckFailed(
            f"the tokens differ from the reference's:\n{tokens.tolist()}\nexpected\n"
            f"{want.tolist()}\n(take the arg-max of the LAST position's logits; [PAD] after [EOS])"
        )
    passed("greedy_decode matches the reference")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
