"""Transformer image captioning: a CNN feature grid as memory, a decoder with cross-attention.

The encoder-decoder Transformer of Vaswani et al., 2017 ("Attention Is All You Need", Fig. 1) with
the source sentence replaced by an image: the ``Hg x Wg`` grid of CNN features (the same encoder as
``course_lib.models.captioning``, Xu et al. 2015) is projected to ``d_model`` and used as the memory
that every decoder block reads through cross-attention (queries from the caption, keys and values
from the grid cells). The decoder blocks are ``course_lib.models.transformer.DecoderBlock`` in
its pre-norm form. Captions are generated greedily, one word at a time, under a causal mask.

Shape legend: ``B`` batch, ``T`` caption tokens, ``C`` model width (``d_model``), ``H`` heads,
``Hg x Wg`` the feature grid, ``L = Hg * Wg`` grid cells, ``V`` vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from course_lib.attention import causal_mask
from course_lib.layers import LayerNorm
from course_lib.models import captioning as _captioning
from course_lib.models._family import alias, preset
from course_lib.models.captioning import ConvGridEncoder, greedy_decode
from course_lib.models.transformer import DecoderBlock

__all__ = ["TransformerCaptionConfig", "TransformerCaptioner", "PRESETS"]


@dataclass(frozen=True)
class TransformerCaptionConfig:
    """Hyper-parameters of the transformer captioner (defaults: the synthetic scenes)."""

    vocab_size: int = 19  # len(course_lib.data.scenes.scene_vocab())
    in_channels: int = 3
    channels: int = 64  # width of the CNN grid before the projection to d_model
    cnn_layers: int = 2  # a 32x32 image gives an 8x8 grid
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2  # decoder blocks
    d_ff: int = 256
    max_len: int = 20  # longest caption (EOS included); also the size of the position table
    dropout: float = 0.0
    norm_eps: float = 1e-5
    fused_attn: bool = True  # fused scaled_dot_product_attention when no weights are requested
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    # The contract's names (course_lib.models._family).
    embed_dim = alias("d_model")
    depth = alias("num_layers")

    @property
    def mlp_ratio(self) -> float:
        """d_ff / d_model."""
        return self.d_ff / self.d_model


class TransformerCaptioner(nn.Module):
    """CNN grid encoder + transformer decoder with cross-attention; greedy decoding."""

    def __init__(self, *, config: TransformerCaptionConfig) -> None:
        super().__init__()
        if config.d_model % config.num_heads:
            raise ValueError(
                f"d_model ({config.d_model}) must be divisible by num_heads ({config.num_heads})"
            )
        self.config = config
        self.encoder = ConvGridEncoder(
            in_channels=config.in_channels, channels=config.channels, num_layers=config.cnn_layers
        )
        self.memory_proj = nn.Linear(config.channels, config.d_model)
        self.ln_memory = LayerNorm(config.d_model, eps=config.norm_eps)
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        # Pre-norm blocks of course_lib.models.transformer: causal self-attention,
        # cross-attention to the grid, feed-forward.
        self.blocks = nn.ModuleList(
            DecoderBlock(
                d_model=config.d_model,
                num_heads=config.num_heads,
                d_ff=config.d_ff,
                dropout=config.dropout,
                activation="gelu",
                norm_first=True,
                eps=config.norm_eps,
                fused=config.fused_attn,
            )
            for _ in range(config.num_layers)
        )
        self.ln_f = LayerNorm(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size)

    def encode(self, images: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """images ``(B, C_in, H, W)`` -> memory ``(B, L, C)`` and the grid size ``(Hg, Wg)``."""
        grid = self.encoder(images)  # (B, C_cnn, Hg, Wg)
        Hg, Wg = grid.shape[-2:]
        memory = self.memory_proj(grid.flatten(2).transpose(1, 2))  # (B, L, C)
        return self.ln_memory(memory), (Hg, Wg)

    def decode(
        self, tokens: Tensor, memory: Tensor, *, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """tokens ``(B, T)``, memory ``(B, L, C)`` -> logits ``(B, T, V)``.

        With ``return_attn`` also the last block's cross-attention, mean over heads, ``(B, T, L)``.
        """
        T = tokens.shape[1]
        if T > self.config.max_len:
            raise ValueError(
                f"caption of {T} tokens is longer than max_len={self.config.max_len}; "
                "build the model with a larger max_len"
            )
        positions = torch.arange(T, device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(positions))  # (B, T, C)
        mask = causal_mask(T, device=tokens.device)  # (T, T)
        weights = None
        for i, block in enumerate(self.blocks):
            if return_attn and i == len(self.blocks) - 1:
                x, (_, weights) = block(x, memory, self_mask=mask, return_attn=True)
            else:
                x = block(x, memory, self_mask=mask)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if not return_attn:
            return logits
        return logits, weights.mean(dim=1)  # (B, T, L)

    def forward(
        self, images: Tensor, tokens: Tensor, *, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher forcing: images ``(B, C_in, H, W)``, tokens ``(B, T)`` = BOS + caption[:-1].

        Returns logits ``(B, T, V)``, and with ``return_attn`` the last block's cross-attention
        (mean over heads) as maps ``(B, T, Hg, Wg)``.
        """
        if tokens.dim() != 2 or tokens.shape[0] != images.shape[0]:
            raise ValueError(
                f"tokens must be (B, T) with B = {images.shape[0]}, got {tuple(tokens.shape)}"
            )
        memory, (Hg, Wg) = self.encode(images)
        if not return_attn:
            return self.decode(tokens, memory)
        logits, attn = self.decode(tokens, memory, return_attn=True)
        return logits, attn.unflatten(-1, (Hg, Wg))  # (B, T, Hg, Wg)

    @torch.no_grad()
    def generate(
        self, images: Tensor, *, max_len: int | None = None, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Greedy captions ``(B, T)`` (no BOS; EOS then padding), with attention ``(B, T, Hg, Wg)``.

        The prefix is re-run through the decoder at every step (no KV cache): captions are short.
        """
        cfg = self.config
        memory, (Hg, Wg) = self.encode(images)

        def step(prefix: Tensor) -> tuple[Tensor, Tensor | None]:
            if return_attn:
                logits, attn = self.decode(prefix, memory, return_attn=True)
                return logits[:, -1], attn[:, -1]  # (B, V), (B, L)
            return self.decode(prefix, memory)[:, -1], None

        # The prefix fed to the decoder (BOS + generated words) must fit the position table.
        limit = min(max_len or cfg.max_len, cfg.max_len)
        tokens, attn = greedy_decode(
            step,
            batch_size=images.shape[0],
            max_len=limit,
            bos_id=cfg.bos_id,
            eos_id=cfg.eos_id,
            pad_id=cfg.pad_id,
            device=images.device,
        )
        if not return_attn:
            return tokens
        return tokens, attn.unflatten(-1, (Hg, Wg))  # (B, T, Hg, Wg)


PRESETS: dict[str, Callable[..., nn.Module]] = {
    "caption-transformer": preset(TransformerCaptioner, TransformerCaptionConfig()),
}


# Generic model test protocol (tests/test_models_generic.py).
TINY: dict[str, object] = {
    "channels": 8,
    "cnn_layers": 1,
    "d_model": 16,
    "num_heads": 2,
    "num_layers": 1,
    "d_ff": 32,
}
example_batch = _captioning.example_batch
