"""Captioners with a Transformer *encoder* over the image: a CNN grid or ViT patches.

``course_lib.models.transformer_captioning`` feeds the CNN grid straight to the decoder's
cross-attention. The lectures' Transformer captioner has the full encoder-decoder of Vaswani et
al. (2017): a stack of self-attention blocks first lets every grid cell see every other cell, and
the decoder cross-attends to that contextualised memory. Two stems produce the image tokens:

* ``stem="cnn"``: the CoordConv CNN of ``course_lib.models.captioning`` (Xu et al. 2015), its
  ``Hg x Wg`` grid projected to ``d_model``. The two coordinate channels it appends to the image
  are the only position signal; the encoder adds none.
* ``stem="patches"``: a Vision Transformer encoder (Dosovitskiy et al. 2021) with no CNN at all:
  ``P x P`` patches, one shared linear map (``course_lib.vision.PatchEmbed``), a learned position
  embedding per patch, no ``[CLS]`` (the decoder reads every patch token). The captioner is then
  built only from Transformers.

Encoder and decoder blocks are the pre-norm blocks of ``course_lib.models.transformer`` with GELU.
The decoder, greedy generation and attention maps are those of
``transformer_captioning.TransformerCaptioner`` (inherited).

Shape legend: ``B`` batch, ``T`` caption tokens, ``C`` model width (``d_model``), ``Hg x Wg`` the
token grid, ``L = Hg * Wg`` image tokens, ``V`` vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from course_lib.layers import LayerNorm
from course_lib.models import captioning as _captioning
from course_lib.models._family import alias, preset
from course_lib.models.captioning import ConvGridEncoder
from course_lib.models.transformer import DecoderBlock, EncoderBlock
from course_lib.models.transformer_captioning import TransformerCaptioner
from course_lib.vision import PatchEmbed

__all__ = ["EncoderCaptionConfig", "EncoderDecoderCaptioner", "PRESETS"]


@dataclass(frozen=True)
class EncoderCaptionConfig:
    """Hyper-parameters of the encoder-decoder captioner (defaults: the synthetic scenes)."""

    vocab_size: int = 19  # len(course_lib.data.scenes.scene_vocab())
    in_channels: int = 3
    image_size: int = 32
    stem: str = "patches"  # "patches" (ViT) or "cnn" (CoordConv CNN grid)
    patch_size: int = 4  # patches stem: a 32x32 image gives 8x8 tokens
    channels: int = 64  # cnn stem: width of the CNN grid before the projection
    cnn_layers: int = 2  # cnn stem: a 32x32 image gives an 8x8 grid
    d_model: int = 64
    num_heads: int = 4
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    d_ff: int = 256
    max_len: int = 20  # longest caption (EOS included); also the size of the position table
    dropout: float = 0.0
    norm_eps: float = 1e-5
    fused_attn: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    embed_dim = alias("d_model")

    @property
    def depth(self) -> int:
        """num_encoder_layers + num_decoder_layers."""
        return self.num_encoder_layers + self.num_decoder_layers

    @property
    def mlp_ratio(self) -> float:
        """d_ff / d_model."""
        return self.d_ff / self.d_model

    def __post_init__(self) -> None:
        if self.stem not in ("patches", "cnn"):
            raise ValueError(f"stem must be 'patches' or 'cnn', got {self.stem!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )

    @property
    def grid_side(self) -> int:
        """Tokens per side of the image grid."""
        if self.stem == "patches":
            return self.image_size // self.patch_size
        return self.image_size // 2**self.cnn_layers


class EncoderDecoderCaptioner(TransformerCaptioner):
    """Image stem + Transformer encoder + Transformer decoder with cross-attention."""

    def __init__(self, *, config: EncoderCaptionConfig) -> None:
        nn.Module.__init__(self)  # the parent's CNN-only encoder is replaced, not built
        self.config = config
        C = config.d_model
        block = dict(
            d_model=C,
            num_heads=config.num_heads,
            d_ff=config.d_ff,
            dropout=config.dropout,
            activation="gelu",
            norm_first=True,
            eps=config.norm_eps,
            fused=config.fused_attn,
        )
        if config.stem == "patches":
            self.patch_embed = PatchEmbed(
                in_channels=config.in_channels, embed_dim=C, patch_size=config.patch_size
            )
            L = config.grid_side**2
            self.pos_embed = nn.Parameter(torch.randn(1, L, C) * 0.02)  # learned, one per patch
        else:
            self.cnn = ConvGridEncoder(
                in_channels=config.in_channels,
                channels=config.channels,
                num_layers=config.cnn_layers,
            )
            self.memory_proj = nn.Linear(config.channels, C)
        self.encoder_blocks = nn.ModuleList(
            EncoderBlock(**block) for _ in range(config.num_encoder_layers)
        )
        self.ln_memory = LayerNorm(C, eps=config.norm_eps)
        # The decoder: the attribute names TransformerCaptioner.decode reads.
        self.wte = nn.Embedding(config.vocab_size, C)
        self.wpe = nn.Embedding(config.max_len, C)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(DecoderBlock(**block) for _ in range(config.num_decoder_layers))
        self.ln_f = LayerNorm(C, eps=config.norm_eps)
        self.lm_head = nn.Linear(C, config.vocab_size)

    def image_tokens(self, images: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """images ``(B, C_in, H, W)`` -> tokens ``(B, L, C)`` before the encoder, ``(Hg, Wg)``."""
        if self.config.stem == "patches":
            tokens = self.patch_embed(images)  # (B, L, C)
            Hg, Wg = self.patch_embed.grid_size(*images.shape[-2:])
            if tokens.shape[1] != self.pos_embed.shape[1]:
                raise ValueError(
                    f"{Hg}x{Wg} patches, but the position table has {self.pos_embed.shape[1]}; "
                    f"build the model with image_size={images.shape[-1]}"
                )
            return self.drop(tokens + self.pos_embed), (Hg, Wg)
        grid = self.cnn(images)  # (B, C_cnn, Hg, Wg), CoordConv: positions are in the features
        Hg, Wg = grid.shape[-2:]
        return self.memory_proj(grid.flatten(2).transpose(1, 2)), (Hg, Wg)

    def encode(
        self, images: Tensor, *, return_attn: bool = False
    ) -> tuple[Tensor, tuple[int, int]] | tuple[Tensor, tuple[int, int], list[Tensor]]:
        """images -> memory ``(B, L, C)`` and ``(Hg, Wg)``; with ``return_attn`` also the
        encoder's self-attention weights, one ``(B, H, L, L)`` per block."""
        x, grid = self.image_tokens(images)
        maps = []
        for block in self.encoder_blocks:
            if return_attn:
                x, w = block(x, return_attn=True)
                maps.append(w)
            else:
                x = block(x)
        memory = self.ln_memory(x)
        return (memory, grid, maps) if return_attn else (memory, grid)


PRESETS: dict[str, Callable[..., nn.Module]] = {
    "caption-vit": preset(EncoderDecoderCaptioner, EncoderCaptionConfig()),
    "caption-cnn-encoder": preset(EncoderDecoderCaptioner, EncoderCaptionConfig(stem="cnn")),
}


# Generic model test protocol (tests/test_models_generic.py).
TINY: dict[str, object] = {
    "image_size": 8,
    "patch_size": 4,
    "channels": 8,
    "cnn_layers": 1,
    "d_model": 16,
    "num_heads": 2,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "d_ff": 32,
}


def example_batch(
    model: nn.Module, *, batch_size: int = 2
) -> tuple[dict[str, Tensor], tuple[int, ...]]:
    """Dummy images of ``image_size`` and teacher-forcing tokens, as in ``captioning``."""
    inputs, shape = _captioning.example_batch(model, batch_size=batch_size)
    cfg = model.config
    generator = torch.Generator().manual_seed(1)
    side = cfg.image_size
    inputs["images"] = torch.rand(batch_size, cfg.in_channels, side, side, generator=generator)
    return inputs, shape
