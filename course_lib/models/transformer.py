"""The Transformer encoder-decoder of Vaswani et al. (2017), "Attention Is All You Need".

Section 3.1 and Figure 1: an encoder of N blocks (self-attention, then a position-wise
feed-forward network) and a decoder of N blocks (masked self-attention, cross-attention whose
queries come from the decoder and whose keys and values come from the encoder output, then the
feed-forward network). Every sub-layer is wrapped as LayerNorm(x + Sublayer(x)) (post-norm, the
paper's and the lectures' form); ``norm_first=True`` gives x + Sublayer(LayerNorm(x)) (pre-norm,
Xiong et al. 2020), which adds a final LayerNorm after each stack. Embeddings are multiplied by
sqrt(d_model) and summed with sinusoidal positional encodings (Section 3.4-3.5); the output
projection can share the target embedding matrix (``tie_embeddings``), and the source embedding
can share it too (``share_embeddings``; the paper shares all three, Press & Wolf 2017).

Decoding: ``greedy_decode`` and ``beam_search`` (with the length penalty of Wu et al. 2016 that
the paper uses, lp(Y) = ((5 + |Y|) / 6)^alpha). With weights copied, the encoder, the decoder and
the whole model equal ``torch.nn.Transformer`` (tests/test_transformer.py).

Shape legend: B batch, S source tokens, T target tokens, C channels (d_model), H heads,
L layers, V vocabulary, K beams.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from course_lib.attention import MultiHeadAttention, causal_mask
from course_lib.layers import FeedForward, LayerNorm
from course_lib.models._family import alias, preset
from course_lib.positional import sinusoidal_positional_encoding


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters; the defaults are the paper's base model (Table 3)."""

    src_vocab_size: int = 37000
    tgt_vocab_size: int = 37000
    d_model: int = 512
    num_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    activation: Literal["relu", "gelu"] = "relu"
    norm_first: bool = False  # False: post-norm as in the paper; True: pre-norm
    tie_embeddings: bool = True  # output projection = target embedding matrix
    share_embeddings: bool = True  # source embedding = target embedding (needs equal vocabularies)
    layer_norm_eps: float = 1e-5
    fused_attn: bool = True  # torch's fused SDPA kernel; False = the lecture's manual path
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    # The contract's names (course_lib.models._family); d_model and d_ff are Table 3's names.
    embed_dim = alias("d_model")
    norm_eps = alias("layer_norm_eps")

    @property
    def depth(self) -> int:
        """num_encoder_layers + num_decoder_layers."""
        return self.num_encoder_layers + self.num_decoder_layers

    @property
    def mlp_ratio(self) -> float:
        """d_ff / d_model."""
        return self.d_ff / self.d_model

    def __post_init__(self) -> None:
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}"
            )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}; set share_embeddings=False"
            )


def _attend(
    attn: MultiHeadAttention, x: Tensor, memory: Tensor | None, mask: Tensor | None, weights: bool
) -> tuple[Tensor, Tensor | None]:
    """attn(x, memory, memory) (memory None: self-attention) -> (output, weights or None)."""
    out = attn(x, memory, memory, mask=mask, return_weights=weights)
    return out if weights else (out, None)


class EncoderBlock(nn.Module):
    """Self-attention and feed-forward sub-layers, each with a residual connection and LayerNorm.

    forward(x (B, S, C), mask keep broadcastable to (B, H, S, S), *, return_attn)
    -> x (B, S, C), or (x, weights (B, H, S, S)).
    """

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        fused: bool = True,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, fused=fused)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = LayerNorm(d_model, eps=eps)
        self.norm2 = LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, *, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        if self.norm_first:
            a, w = _attend(self.self_attn, self.norm1(x), None, mask, return_attn)
            x = x + self.dropout(a)
            x = x + self.ff(self.norm2(x))
        else:
            a, w = _attend(self.self_attn, x, None, mask, return_attn)
            x = self.norm1(x + self.dropout(a))
            x = self.norm2(x + self.ff(x))
        return (x, w) if return_attn else x


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, feed-forward.

    forward(y (B, T, C), memory (B, S, C), self_mask keep (.., T, T), memory_mask keep
    (.., T or 1, S), *, return_attn) -> y (B, T, C), or (y, (self weights (B, H, T, T),
    cross weights (B, H, T, S))).
    """

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        fused: bool = True,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, fused=fused)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, fused=fused)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = LayerNorm(d_model, eps=eps)
        self.norm2 = LayerNorm(d_model, eps=eps)
        self.norm3 = LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        *,
        return_attn: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        # cross-attention: queries from the decoder, keys and values from the encoder output
        if self.norm_first:
            a, w_self = _attend(self.self_attn, self.norm1(y), None, self_mask, return_attn)
            y = y + self.dropout(a)
            a, w_cross = _attend(self.cross_attn, self.norm2(y), memory, memory_mask, return_attn)
            y = y + self.dropout(a)
            y = y + self.ff(self.norm3(y))
        else:
            a, w_self = _attend(self.self_attn, y, None, self_mask, return_attn)
            y = self.norm1(y + self.dropout(a))
            a, w_cross = _attend(self.cross_attn, y, memory, memory_mask, return_attn)
            y = self.norm2(y + self.dropout(a))
            y = self.norm3(y + self.ff(y))
        return (y, (w_self, w_cross)) if return_attn else y


def _block_kwargs(config: TransformerConfig) -> dict[str, Any]:
    return dict(
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        dropout=config.dropout,
        activation=config.activation,
        norm_first=config.norm_first,
        eps=config.layer_norm_eps,
        fused=config.fused_attn,
    )


class Transformer(nn.Module):
    """Encoder-decoder: forward(src (B, S), tgt_in (B, T)) -> logits (B, T, V).

    ``tgt_in`` starts with ``[BOS]`` (teacher forcing); ``src_mask`` (B, S) is a boolean keep-mask,
    by default ``src != pad_id``. With ``return_attn=True`` also a dict of weights, each stacked
    over layers: ``"encoder"`` (L, B, H, S, S), ``"decoder_self"`` (L, B, H, T, T) and
    ``"cross"`` (L, B, H, T, S).
    """

    def __init__(self, *, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        C = config.d_model
        self.tgt_embed = nn.Embedding(config.tgt_vocab_size, C)
        self.src_embed = (
            self.tgt_embed if config.share_embeddings else nn.Embedding(config.src_vocab_size, C)
        )
        block = _block_kwargs(config)
        self.encoder_layers = nn.ModuleList(
            EncoderBlock(**block) for _ in range(config.num_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderBlock(**block) for _ in range(config.num_decoder_layers)
        )
        # pre-norm leaves the residual stream un-normalised, so each stack ends with a LayerNorm
        eps = config.layer_norm_eps
        self.encoder_norm = LayerNorm(C, eps=eps) if config.norm_first else nn.Identity()
        self.decoder_norm = LayerNorm(C, eps=eps) if config.norm_first else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)
        self.out_proj = nn.Linear(C, config.tgt_vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        # embeddings ~ N(0, 1/C), so that after the sqrt(C) scaling they have unit variance
        nn.init.normal_(self.tgt_embed.weight, std=C**-0.5)
        nn.init.normal_(self.src_embed.weight, std=C**-0.5)
        if config.tie_embeddings:
            self.out_proj.weight = self.tgt_embed.weight

    def embed(self, ids: Tensor, embedding: nn.Embedding) -> Tensor:
        """Token ids (B, T) -> embedding * sqrt(C) + sinusoidal position (B, T, C)."""
        C = self.config.d_model
        pe = sinusoidal_positional_encoding(
            ids.shape[1], C, dtype=embedding.weight.dtype, device=ids.device
        )  # (T, C)
        return self.dropout(embedding(ids) * math.sqrt(C) + pe)

    def _src_mask(self, src: Tensor, src_mask: Tensor | None) -> Tensor:
        if src.dim() != 2:
            raise ValueError(f"src must be token ids of shape (B, S), got {tuple(src.shape)}")
        mask = src != self.config.pad_id if src_mask is None else src_mask
        if mask.dtype != torch.bool or mask.shape != src.shape:
            raise ValueError(
                f"src_mask must be a boolean keep-mask of shape {tuple(src.shape)}, got "
                f"{mask.dtype} {tuple(mask.shape)}"
            )
        return mask

    def encode(
        self, src: Tensor, src_mask: Tensor | None = None, *, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Source ids (B, S) -> memory (B, S, C) [, encoder weights (L, B, H, S, S)]."""
        keep = self._src_mask(src, src_mask)[:, None, None, :]  # (B, 1, 1, S)
        x = self.embed(src, self.src_embed)
        weights = []
        for layer in self.encoder_layers:
            x = layer(x, keep, return_attn=return_attn)
            if return_attn:
                x, w = x
                weights.append(w)
        x = self.encoder_norm(x)
        return (x, torch.stack(weights)) if return_attn else x

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        *,
        return_attn: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor, Tensor]:
        """Target prefix ids (B, T), memory (B, S, C), keep-mask (B, S) -> logits (B, T, V)
        [, decoder self weights (L, B, H, T, T), cross weights (L, B, H, T, S)]."""
        T = tgt_in.shape[1]
        self_keep = causal_mask(T, device=tgt_in.device)  # (T, T): position t sees 0..t
        memory_keep = src_mask[:, None, None, :]  # (B, 1, 1, S)
        y = self.embed(tgt_in, self.tgt_embed)
        w_self, w_cross = [], []
        for layer in self.decoder_layers:
            y = layer(y, memory, self_keep, memory_keep, return_attn=return_attn)
            if return_attn:
                y, (ws, wc) = y
                w_self.append(ws)
                w_cross.append(wc)
        logits = self.out_proj(self.decoder_norm(y))  # (B, T, V)
        if return_attn:
            return logits, torch.stack(w_self), torch.stack(w_cross)
        return logits

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        *,
        src_mask: Tensor | None = None,
        return_attn: bool = False,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        src_mask = self._src_mask(src, src_mask)
        if not return_attn:
            return self.decode(tgt_in, self.encode(src, src_mask), src_mask)
        memory, w_enc = self.encode(src, src_mask, return_attn=True)
        logits, w_self, w_cross = self.decode(tgt_in, memory, src_mask, return_attn=True)
        return logits, {"encoder": w_enc, "decoder_self": w_self, "cross": w_cross}

    @torch.no_grad()
    def greedy_decode(
        self, src: Tensor, *, src_mask: Tensor | None = None, max_new_tokens: int = 50
    ) -> Tensor:
        """Arg-max decoding: ids (B, <= max_new_tokens) without ``[BOS]``, ``[EOS]`` included,
        ``[PAD]`` after it."""
        cfg = self.config
        src_mask = self._src_mask(src, src_mask)
        memory = self.encode(src, src_mask)
        tokens = torch.full((src.shape[0], 1), cfg.bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_new_tokens):
            logits = self.decode(tokens, memory, src_mask)[:, -1]  # (B, V)
            next_id = logits.argmax(dim=-1).masked_fill(done, cfg.pad_id)  # (B,)
            tokens = torch.cat([tokens, next_id[:, None]], dim=1)
            done |= next_id == cfg.eos_id
            if done.all():
                break
        return tokens[:, 1:]

    @torch.no_grad()
    def beam_search(
        self,
        src: Tensor,
        *,
        src_mask: Tensor | None = None,
        beam_size: int = 4,
        max_new_tokens: int = 50,
        length_penalty: float = 0.0,
    ) -> tuple[Tensor, Tensor]:
        """Beam search per source sentence.

        Returns ids (B, <= max_new_tokens) as in ``greedy_decode`` and the summed log-probability
        of each returned sequence (B,). Hypotheses are ranked by log p(Y) / lp(Y) with
        lp(Y) = ((5 + |Y|) / 6)^length_penalty (0 = raw log-probability; the paper uses 0.6).
        ``beam_size=1`` with ``length_penalty=0`` returns the greedy sequence.
        """
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        src_mask = self._src_mask(src, src_mask)
        memory = self.encode(src, src_mask)
        results = [
            self._beam_search_one(
                memory[b : b + 1], src_mask[b : b + 1], beam_size, max_new_tokens, length_penalty
            )
            for b in range(src.shape[0])
        ]
        T = max(len(seq) for seq, _ in results)
        tokens = torch.full((len(results), T), self.config.pad_id, dtype=torch.long)
        for b, (seq, _) in enumerate(results):
            tokens[b, : len(seq)] = seq
        scores = torch.tensor([score for _, score in results])
        return tokens.to(src.device), scores.to(memory.dtype)

    def _beam_search_one(
        self, memory: Tensor, src_mask: Tensor, K: int, max_new_tokens: int, alpha: float
    ) -> tuple[Tensor, float]:
        """Beam search for one sentence: memory (1, S, C) -> (ids (n,), summed log-prob)."""
        cfg = self.config

        def rank(score: float, length: int) -> float:
            return score / ((5 + length) / 6) ** alpha

        live = torch.full((1, 1), cfg.bos_id, dtype=torch.long, device=memory.device)  # (K, t)
        live_scores = [0.0]
        finished: list[tuple[float, float, Tensor]] = []  # (rank, log-prob, ids without BOS)
        for _ in range(max_new_tokens):
            k = live.shape[0]
            logits = self.decode(live, memory.expand(k, -1, -1), src_mask.expand(k, -1))
            log_probs = logits[:, -1].float().log_softmax(dim=-1)  # (k, V)
            candidates = torch.tensor(live_scores, device=log_probs.device)[:, None] + log_probs
            V = candidates.shape[1]
            top_scores, top_index = candidates.flatten().topk(min(2 * K, candidates.numel()))
            keep_rows, keep_tokens, keep_scores = [], [], []
            for score, index in zip(top_scores.tolist(), top_index.tolist()):
                row, token = divmod(index, V)
                if token == cfg.eos_id:  # a complete hypothesis leaves the beam
                    ids = torch.cat([live[row, 1:], live.new_tensor([token])])
                    finished.append((rank(score, len(ids)), score, ids))
                    continue
                keep_rows.append(row)
                keep_tokens.append(token)
                keep_scores.append(score)
                if len(keep_rows) == K:
                    break
            if not keep_rows:
                break
            live = torch.cat([live[keep_rows], live.new_tensor(keep_tokens)[:, None]], dim=1)
            live_scores = keep_scores
            # Log-probabilities only decrease as a sequence grows, so without a length penalty
            # no live hypothesis can overtake the best finished one any more.
            if alpha == 0 and finished and max(f[1] for f in finished) >= max(live_scores):
                break
        for ids, score in zip(live[:, 1:], live_scores):
            finished.append((rank(score, len(ids)), score, ids))
        _, score, ids = max(finished, key=lambda f: f[0])
        return ids, score


PRESETS: dict[str, Callable[..., nn.Module]] = {
    # Vaswani et al. 2017, Table 3: base (65M parameters) and big (213M), shared 37k BPE vocabulary
    "transformer-base": preset(Transformer, TransformerConfig()),
    "transformer-big": preset(
        Transformer, TransformerConfig(d_model=1024, num_heads=16, d_ff=4096, dropout=0.3)
    ),
    "transformer-tiny": preset(
        Transformer,
        TransformerConfig(
            src_vocab_size=64,
            tgt_vocab_size=64,
            d_model=32,
            num_heads=4,
            num_encoder_layers=2,
            num_decoder_layers=2,
            d_ff=64,
            dropout=0.0,
        ),
    ),
}

#: Overrides that make every preset tiny (see tests/test_models_generic.py).
TINY: dict[str, Any] = {
    "src_vocab_size": 40,
    "tgt_vocab_size": 40,
    "d_model": 16,
    "num_heads": 2,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "d_ff": 32,
}


def example_batch(
    model: Transformer, *, batch_size: int = 2
) -> tuple[dict[str, Any], tuple[int, ...]]:
    """Dummy inputs for ``model(**inputs)`` (second source padded) and the logits' shape."""
    cfg = model.config
    generator = torch.Generator().manual_seed(0)
    S, T = 7, 5
    src = torch.randint(3, cfg.src_vocab_size, (batch_size, S), generator=generator)
    src[1::2, -3:] = cfg.pad_id
    tgt_in = torch.randint(3, cfg.tgt_vocab_size, (batch_size, T), generator=generator)
    tgt_in[:, 0] = cfg.bos_id
    return {"src": src, "tgt_in": tgt_in}, (batch_size, T, cfg.tgt_vocab_size)
