"""Attention, from Bahdanau's additive scores to multi-head and chunked (online-softmax) attention.

Follows the lecture's notation. With queries Q (N_Q x D_Q), keys K (N_X x D_Q) and values
V (N_X x D_V):

    E = Q K^T / sqrt(D_Q)        similarities (scaled dot products)
    A = softmax(E, dim=1)        each query's weights over the inputs (rows sum to 1)
    Y = A V                      outputs, one per query

References:
- Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by Jointly Learning to Align and
  Translate": additive scores e_i = v^T tanh(W_s s + W_h h_i).
- Vaswani et al. (2017), "Attention Is All You Need": scaled dot-product and multi-head attention.
- Milakov & Gimelshein (2018), "Online normalizer calculation for softmax", and Dao et al. (2022),
  "FlashAttention": softmax over key chunks with a running max and sum, so that the T_q x T_k score
  matrix is never stored.

Masks are boolean KEEP masks: True means "this query may attend to this key". A query whose keys
are all masked gets zero weights and a zero output (never NaN), in every floating dtype.

Shape legend: B batch, T tokens (T_q queries, T_k keys), C channels (embed_dim), H heads,
D head dim (D_v for values).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "AdditiveAttention",
    "AttentionLayer",
    "MultiHeadAttention",
    "SelfAttention",
    "causal_mask",
    "chunked_attention",
    "dot_product_attention",
    "masked_softmax",
    "padding_mask",
    "scaled_dot_product_attention",
]


# --------------------------------------------------------------------------------------------
# Masks
# --------------------------------------------------------------------------------------------


def causal_mask(
    T: int, *, T_k: int | None = None, device: torch.device | str | None = None
) -> Tensor:
    """Boolean keep-mask of shape (T, T_k) that lets query i see keys j <= i.

    With ``T_k`` > ``T`` (decoding with cached keys) the T queries are the *last* T positions, so
    query i sees keys j <= i + (T_k - T). True on and below the (shifted) diagonal.
    """
    T_k = T if T_k is None else T_k
    if T < 0 or T_k < T:
        raise ValueError(f"causal_mask needs 0 <= T <= T_k, got T={T}, T_k={T_k}")
    return torch.ones(T, T_k, dtype=torch.bool, device=device).tril(diagonal=T_k - T)


def padding_mask(lengths: Tensor | list[int], T: int) -> Tensor:
    """Boolean keep-mask of shape (B, T): True for the first ``lengths[b]`` (real) tokens.

    To use it as an attention mask over keys, index it as ``mask[:, None, :]`` (B, 1, T_k) for
    single-head attention or ``mask[:, None, None, :]`` (B, 1, 1, T_k) for multi-head attention.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {tuple(lengths.shape)}")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > T):
        raise ValueError(f"lengths must lie in [0, T={T}], got {lengths.tolist()}")
    return torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]  # (B, T)


def masked_softmax(scores: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Softmax of ``scores`` over ``dim`` that ignores positions where the keep-``mask`` is False.

    A slice whose positions are all masked gets zeros instead of NaN. Masked scores are filled
    with the most negative finite number of the dtype (not a magic -1e9, which is -inf in fp16),
    so the softmax stays finite; the fully-masked slices are then zeroed explicitly.
    """
    if mask is None:
        return scores.softmax(dim=dim)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean keep-mask (True = attend), got {mask.dtype}")
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=dim).masked_fill(~mask, 0.0)


# --------------------------------------------------------------------------------------------
# (Scaled) dot-product attention as functions
# --------------------------------------------------------------------------------------------


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    return_weights: bool = False,
    bias: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> Tensor | tuple[Tensor, Tensor]:
    """Scaled dot-product attention Y = softmax(Q K^T / sqrt(D) + bias) V, written out.

    Args:
        q: queries (..., T_q, D). k: keys (..., T_k, D). v: values (..., T_k, D_v).
        mask: boolean keep-mask broadcastable to (..., T_q, T_k); True = may attend.
        return_weights: also return the attention weights A (..., T_q, T_k) (before dropout).
        bias: optional additive float bias broadcastable to (..., T_q, T_k), e.g. a relative
            position bias.
        scale: multiplier of the scores; default 1 / sqrt(D).
        dropout_p: dropout probability on the weights (apply only while training).

    Returns:
        y (..., T_q, D_v), or (y, A) if ``return_weights``. Rows whose keys are all masked give
        zero weights and zero outputs.
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same last dim, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v need the same T_k, got {k.shape[-2]} and {v.shape[-2]}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    E = (q @ k.transpose(-2, -1)) * scale  # (..., T_q, T_k) similarities
    if bias is not None:
        E = E + bias
    A = masked_softmax(E, mask)  # (..., T_q, T_k) each row sums to 1 (or 0 if fully masked)
    A_dropped = F.dropout(A, p=dropout_p) if dropout_p > 0 else A
    y = A_dropped @ v  # (..., T_q, D_v)
    return (y, A) if return_weights else y


def dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *, return_weights: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """Unscaled dot-product attention softmax(Q K^T) V; shapes as in `scaled_dot_product_attention`.

    Kept for teaching: without the 1/sqrt(D) the scores grow with D and the softmax saturates.
    """
    return scaled_dot_product_attention(q, k, v, mask, return_weights=return_weights, scale=1.0)


# --------------------------------------------------------------------------------------------
# Attention modules, in the order of the lecture
# --------------------------------------------------------------------------------------------


class AdditiveAttention(nn.Module):
    """Bahdanau attention: e_i = v^T tanh(W_s s + W_h h_i), a_i = softmax(e)_i, c = sum_i a_i h_i.

    forward(query (B, D_q), keys (B, T, D_k), values (B, T, D_v) = keys, mask (B, T) keep)
    -> (context (B, D_v), weights (B, T)).
    """

    def __init__(self, *, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=False)  # W_s
        self.key_proj = nn.Linear(key_dim, hidden_dim, bias=True)  # W_h (and the MLP's bias)
        self.score = nn.Linear(hidden_dim, 1, bias=False)  # v

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        values = keys if values is None else values
        hidden = torch.tanh(self.query_proj(query)[:, None, :] + self.key_proj(keys))  # (B, T, hid)
        e = self.score(hidden).squeeze(-1)  # (B, T) alignment scores
        a = masked_softmax(e, mask)  # (B, T)
        context = (a[:, :, None] * values).sum(dim=1)  # (B, D_v)
        return context, a


class AttentionLayer(nn.Module):
    """The lecture's general attention layer: queries attend over input vectors X.

    K = X W_K, V = X W_V, E = Q K^T / sqrt(D_Q), A = softmax(E), Y = A V.
    forward(q (B, N_Q, D_Q), x (B, N_X, D_X), mask keep broadcastable to (B, N_Q, N_X))
    -> y (B, N_Q, D_V), or (y, A (B, N_Q, N_X)) with ``return_weights``.
    """

    def __init__(self, *, query_dim: int, input_dim: int, value_dim: int | None = None) -> None:
        super().__init__()
        value_dim = input_dim if value_dim is None else value_dim
        self.k_proj = nn.Linear(input_dim, query_dim, bias=False)  # W_K (D_X x D_Q)
        self.v_proj = nn.Linear(input_dim, value_dim, bias=False)  # W_V (D_X x D_V)

    def forward(
        self, q: Tensor, x: Tensor, mask: Tensor | None = None, *, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        k, v = self.k_proj(x), self.v_proj(x)  # (B, N_X, D_Q), (B, N_X, D_V)
        return scaled_dot_product_attention(q, k, v, mask, return_weights=return_weights)


class SelfAttention(nn.Module):
    """Single-head self-attention: Q = X W_Q, K = X W_K, V = X W_V, then attention.

    forward(x (B, T, D_X), mask keep broadcastable to (B, T, T))
    -> y (B, T, D_V), or (y, A (B, T, T)) with ``return_weights``.
    Without positional information it is permutation equivariant.
    """

    def __init__(
        self,
        *,
        input_dim: int,
        query_dim: int | None = None,
        value_dim: int | None = None,
        bias: bool = False,
    ) -> None:
        super().__init__()
        query_dim = input_dim if query_dim is None else query_dim
        value_dim = input_dim if value_dim is None else value_dim
        self.q_proj = nn.Linear(input_dim, query_dim, bias=bias)  # W_Q
        self.k_proj = nn.Linear(input_dim, query_dim, bias=bias)  # W_K
        self.v_proj = nn.Linear(input_dim, value_dim, bias=bias)  # W_V

    def forward(
        self, x: Tensor, mask: Tensor | None = None, *, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, D_Q), ..., (B, T, D_V)
        return scaled_dot_product_attention(q, k, v, mask, return_weights=return_weights)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: H heads of size D = C / H, then an output projection.

    head_h = Attention(Q W_Q^h, K W_K^h, V W_V^h);  Y = concat(head_1, ..., head_H) W_O.

    forward(query (B, T_q, C), key (B, T_k, kdim) = query, value (B, T_k, vdim) = key,
    mask bool keep broadcastable to (B, H, T_q, T_k), *, attn_bias float broadcastable to the same,
    causal, return_weights) -> y (B, T_q, C), or (y, A (B, H, T_q, T_k)).
    ``causal=True`` is the same as AND-ing ``causal_mask(T_q, T_k=T_k)`` into the mask, but lets
    the fused path use the kernel's ``is_causal`` (no mask tensor) when nothing else is masked.

    ``fused=True`` calls torch.nn.functional.scaled_dot_product_attention; ``fused=False`` runs the
    manual path written out above. ``return_weights=True`` always runs the manual path.
    Parameter layout matches nn.MultiheadAttention (q/k/v/out projections with biases).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        bias: bool = True,
        dropout: float = 0.0,
        kdim: int | None = None,
        vdim: int | None = None,
        fused: bool = True,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be positive, got {embed_dim}, {num_heads}"
            )
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}; "
                "choose num_heads that divides embed_dim (each head gets embed_dim // num_heads)"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = self.kdim if vdim is None else vdim
        self.dropout, self.fused = dropout, fused
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _split_heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> None:
        for name, x, dim in (("query", query, self.embed_dim), ("key", key, self.kdim),
                             ("value", value, self.vdim)):  # fmt: skip
            if x.dim() != 3 or x.shape[-1] != dim:
                raise ValueError(f"{name} must have shape (B, T, {dim}), got {tuple(x.shape)}")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ValueError(
                f"query/key/value disagree on batch or key length: {tuple(query.shape)}, "
                f"{tuple(key.shape)}, {tuple(value.shape)}"
            )
        if mask is not None:
            if mask.dtype != torch.bool:
                raise TypeError(
                    f"mask must be a boolean keep-mask (True = attend), got {mask.dtype}"
                )
            target = (query.shape[0], self.num_heads, query.shape[1], key.shape[1])
            try:
                ok = mask.dim() <= 4 and torch.broadcast_shapes(mask.shape, target) == target
            except RuntimeError:
                ok = False
            if not ok:
                raise ValueError(
                    f"mask of shape {tuple(mask.shape)} does not broadcast to (B, H, T_q, T_k) = "
                    f"{target}; a padding mask (B, T_k) should be passed as mask[:, None, None, :]"
                )

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        attn_bias: Tensor | None = None,
        causal: bool = False,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value, mask)
        B, T_q, C = query.shape
        T_k = key.shape[1]
        use_fused = self.fused and not return_weights
        is_causal = causal and use_fused and mask is None and attn_bias is None and T_q == T_k
        if causal and not is_causal:
            keep = causal_mask(T_q, T_k=T_k, device=query.device)  # (T_q, T_k)
            mask = keep if mask is None else mask & keep
        q = self._split_heads(self.q_proj(query))  # (B, H, T_q, D)
        k = self._split_heads(self.k_proj(key))  # (B, H, T_k, D)
        v = self._split_heads(self.v_proj(value))  # (B, H, T_k, D)
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if use_fused:
            attn_mask = mask
            if attn_bias is not None:
                attn_mask = attn_bias.to(q.dtype)
                if mask is not None:
                    attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal
            )  # (B, H, T_q, D)
            if mask is not None:  # make "fully masked row -> 0" explicit, whatever the kernel does
                y = y.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        else:
            y, weights = scaled_dot_product_attention(
                q, k, v, mask, return_weights=True, bias=attn_bias, dropout_p=dropout_p
            )  # (B, H, T_q, D), (B, H, T_q, T_k)
        y = y.transpose(1, 2).reshape(B, T_q, C)  # (B, T_q, C) heads concatenated
        y = self.out_proj(y)
        return (y, weights) if return_weights else y


# --------------------------------------------------------------------------------------------
# Chunked attention with an online softmax (FlashAttention's idea in plain PyTorch)
# --------------------------------------------------------------------------------------------


def _chunk_keep(
    mask: Tensor | None, causal: bool, T_q: int, T_k: int, i0: int, start: int, stop: int, device
) -> Tensor | None:
    """Keep-mask of queries [i0, T_q) for keys [start, stop): (..., T_q - i0, stop - start).

    None when nothing is masked.
    """
    keep = None
    if mask is not None:
        keep = mask if mask.shape[-1] == 1 else mask[..., start:stop]
        if keep.dim() >= 2 and keep.shape[-2] != 1:
            keep = keep[..., i0:, :]
    if causal:  # query i (at position i + T_k - T_q) sees key j <= i + T_k - T_q
        i = torch.arange(i0, T_q, device=device)[:, None] + (T_k - T_q)
        c = torch.arange(start, stop, device=device)[None, :] <= i  # (T_q - i0, chunk)
        keep = c if keep is None else keep & c
    return keep


def _first_query(causal: bool, T_q: int, T_k: int, start: int) -> int:
    """First query that can see key ``start``: with a causal mask, earlier queries are skipped."""
    return max(0, start - (T_k - T_q)) if causal else 0


class _ChunkedAttention(torch.autograd.Function):
    """Exact attention over key chunks; saves only q, k, v, y and the row log-sum-exp L (T_q).

    Inside forward/backward autograd is off, so the (T_q, chunk) buffers are updated in place:
    at most two of them exist at a time.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, chunk_size, scale):  # noqa: D102
        T_q, T_k = q.shape[-2], k.shape[-2]
        m = q.new_full((*q.shape[:-1], 1), float("-inf"))  # running max      (..., T_q, 1)
        l = q.new_zeros((*q.shape[:-1], 1))  # running sum of exp(s - m)      (..., T_q, 1)
        acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))  # running sum p V   (..., T_q, D_v)
        for start in range(0, T_k, chunk_size):
            stop = min(start + chunk_size, T_k)
            i0 = _first_query(causal, T_q, T_k, start)
            if i0 >= T_q:  # causal: no query sees these keys (nor later ones)
                break
            m_i, l_i, acc_i = m[..., i0:, :], l[..., i0:, :], acc[..., i0:, :]  # views
            s = (q[..., i0:, :] @ k[..., start:stop, :].transpose(-2, -1)).mul_(scale)
            keep = _chunk_keep(mask, causal, T_q, T_k, i0, start, stop, q.device)
            if keep is not None:
                s.masked_fill_(~keep, float("-inf"))  # (..., T_q - i0, chunk)
            m_new = torch.maximum(m_i, s.amax(dim=-1, keepdim=True))
            m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # rows with nothing seen yet
            p = s.sub_(m_safe).exp_()  # exp(s - m), exactly 0 where masked
            alpha = (m_i - m_safe).exp_()  # rescales what was accumulated under the old max
            l_i.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))
            acc_i.mul_(alpha).add_(p @ v[..., start:stop, :])  # (..., T_q - i0, D_v)
            m_i.copy_(m_new)
        empty = l == 0  # fully-masked rows
        y = acc / l.masked_fill(empty, 1.0)
        L = (m + torch.log(l)).masked_fill(empty, float("inf"))  # exp(s - inf) = 0 in backward
        ctx.save_for_backward(q, k, v, y, L, mask)
        ctx.causal, ctx.chunk_size, ctx.scale = causal, chunk_size, scale
        return y

    @staticmethod
    def backward(ctx, dy):  # noqa: D102
        q, k, v, y, L, mask = ctx.saved_tensors
        T_q, T_k = q.shape[-2], k.shape[-2]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        delta = (dy * y).sum(dim=-1, keepdim=True)  # (..., T_q, 1) = rowsum(dA * A)
        for start in range(0, T_k, ctx.chunk_size):
            stop = min(start + ctx.chunk_size, T_k)
            i0 = _first_query(ctx.causal, T_q, T_k, start)
            if i0 >= T_q:
                break
            q_i, dy_i = q[..., i0:, :], dy[..., i0:, :]
            k_c, v_c = k[..., start:stop, :], v[..., start:stop, :]
            s = (q_i @ k_c.transpose(-2, -1)).mul_(ctx.scale)  # recomputed scores
            keep = _chunk_keep(mask, ctx.causal, T_q, T_k, i0, start, stop, q.device)
            if keep is not None:
                s.masked_fill_(~keep, float("-inf"))
            a = s.sub_(
                L[..., i0:, :]
            ).exp_()  # this chunk's attention weights (..., T_q - i0, chunk)
            dv[..., start:stop, :] = a.transpose(-2, -1) @ dy_i
            da = dy_i @ v_c.transpose(-2, -1)  # (..., T_q - i0, chunk)
            ds = da.sub_(delta[..., i0:, :]).mul_(a).mul_(ctx.scale)  # softmax backward
            dq[..., i0:, :] += ds @ k_c
            dk[..., start:stop, :] = ds.transpose(-2, -1) @ q_i
        return dq, dk, dv, None, None, None, None


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    chunk_size: int = 128,
    causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """Exact scaled dot-product attention computed over key chunks with an online softmax.

    Keeps, per query, a running max m, a running sum l of exp(score - m) and a running weighted
    sum of values; each new chunk of keys rescales them by exp(m_old - m_new). Only (T_q, chunk)
    scores exist at a time, so memory grows linearly in T, in the forward pass AND in the
    backward pass: a custom autograd function saves just q, k, v, y and the per-row log-sum-exp,
    and recomputes each chunk's scores in backward (as FlashAttention does). With ``causal=True``
    the queries that cannot see a chunk are skipped, which halves the work.

    Args:
        q (..., T_q, D), k (..., T_k, D), v (..., T_k, D_v) with equal leading dims.
        mask: optional boolean keep-mask broadcastable to (..., T_q, T_k). Note that a full
            (T_q, T_k) mask is itself quadratic (1 byte per entry); prefer ``causal=True``, which
            builds each chunk's mask on the fly.
        chunk_size: number of keys per chunk.
        causal: query i attends to keys j <= i + (T_k - T_q).
        scale: score multiplier, default 1 / sqrt(D).

    Returns:
        y (..., T_q, D_v), equal to `scaled_dot_product_attention` up to rounding.
    """
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "chunked_attention needs q (..., T_q, D), k (..., T_k, D), v (..., T_k, D_v) with the "
            f"same leading dims; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if causal and q.shape[-2] > k.shape[-2]:
        raise ValueError("causal chunked attention needs T_q <= T_k")
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a boolean keep-mask (True = attend), got {mask.dtype}")
        target = (*q.shape[:-1], k.shape[-2])
        try:
            torch.broadcast_shapes(mask.shape, target)
        except RuntimeError as err:
            raise ValueError(f"mask {tuple(mask.shape)} does not broadcast to {target}") from err
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    y = _ChunkedAttention.apply(
        q.to(compute), k.to(compute), v.to(compute), mask, causal, chunk_size, scale
    )
    return y.to(q.dtype)
