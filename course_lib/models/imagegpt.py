"""ImageGPT: a causal transformer over the raster sequence of palette-quantised pixels.

Chen et al., 2020, "Generative Pretraining from Pixels" (ICML). Each pixel is replaced by the index
of its nearest colour in a small palette (the paper clusters RGB values with k-means, k = 512; for
greyscale digits a fixed set of evenly spaced grey levels does the same job), the image is read in
raster order into a sequence of ``T = H * W`` tokens, and a GPT-style decoder models
``p(x) = prod_t p(x_t | x_<t)`` (Sec. 2.1, the autoregressive objective). A start-of-sequence token
is prepended so that the first pixel also gets a prediction. Completing the lower half of an image
from its upper half is sampling the remaining tokens one at a time (Sec. 4, Fig. 1).

Shape legend: ``B`` batch, ``T`` pixel tokens (raster order), ``C`` model width (or colour channels
for images and palettes), ``K`` palette size, ``N`` pixels, ``H x W`` the image.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.models._family import alias, preset
from course_lib.models.gpt import GPT, GPTConfig, KVCache, sample_next_token

__all__ = [
    "ImageGPTConfig",
    "ImageGPT",
    "grey_palette",
    "kmeans_palette",
    "quantize",
    "dequantize",
    "bits_per_pixel",
    "PRESETS",
]


# ---------------------------------------------------------------- palettes and quantisation


def grey_palette(levels: int, *, low: float = 0.0, high: float = 1.0) -> Tensor:
    """``levels`` evenly spaced grey values from ``low`` to ``high``: a palette ``(K, 1)``."""
    if levels < 2:
        raise ValueError(f"a palette needs at least 2 levels, got {levels}")
    return torch.linspace(low, high, levels)[:, None]


def kmeans_palette(pixels: Tensor, k: int, *, seed: int = 0, iters: int = 25) -> Tensor:
    """Cluster pixel colours ``(N, C)`` into a palette ``(K, C)`` with k-means (k-means++ start).

    Deterministic for a given ``seed`` (a private ``torch.Generator``; the global RNG is untouched).
    The palette is sorted by its first channel, so equal inputs give equal token ids.
    """
    if pixels.dim() != 2:
        raise ValueError(f"pixels must be (N, C), got shape {tuple(pixels.shape)}")
    pixels = pixels.float()
    N = pixels.shape[0]
    if not 1 <= k <= N:
        raise ValueError(f"k must be between 1 and the number of pixels ({N}), got {k}")
    generator = torch.Generator().manual_seed(seed)
    # k-means++: each new centre drawn with probability proportional to squared distance.
    centres = pixels[torch.randint(N, (1,), generator=generator)]  # (1, C)
    for _ in range(1, k):
        d2 = torch.cdist(pixels, centres).min(dim=1).values ** 2  # (N,)
        if float(d2.sum()) == 0.0:  # fewer distinct colours than k: repeat one
            index = torch.randint(N, (1,), generator=generator)
        else:
            index = torch.multinomial(d2 / d2.sum(), 1, generator=generator)
        centres = torch.cat([centres, pixels[index]], dim=0)
    for _ in range(iters):
        assign = torch.cdist(pixels, centres).argmin(dim=1)  # (N,)
        sums = torch.zeros_like(centres).index_add_(0, assign, pixels)  # (K, C)
        counts = torch.bincount(assign, minlength=k).to(pixels.dtype)[:, None]  # (K, 1)
        # An empty cluster keeps its centre instead of collapsing to 0/0.
        new = torch.where(counts > 0, sums / counts.clamp(min=1), centres)
        if torch.equal(new, centres):
            break
        centres = new
    return centres[centres[:, 0].argsort()]


def quantize(images: Tensor, palette: Tensor) -> Tensor:
    """images ``(B, C, H, W)`` -> tokens ``(B, H*W)``: nearest palette colour, raster order."""
    if images.dim() != 4 or palette.dim() != 2 or images.shape[1] != palette.shape[1]:
        raise ValueError(
            f"expected images (B, C, H, W) and palette (K, C) with the same C, got "
            f"{tuple(images.shape)} and {tuple(palette.shape)}"
        )
    pixels = images.flatten(2).transpose(1, 2)  # (B, T, C)
    d2 = ((pixels[:, :, None, :] - palette.to(pixels)[None, None]) ** 2).sum(-1)  # (B, T, K)
    return d2.argmin(dim=-1)  # (B, T)


def dequantize(tokens: Tensor, palette: Tensor, *, height: int, width: int) -> Tensor:
    """tokens ``(B, H*W)`` -> images ``(B, C, H, W)`` made of palette colours."""
    if tokens.shape[-1] != height * width:
        raise ValueError(
            f"{tokens.shape[-1]} tokens cannot form a {height}x{width} image ({height * width})"
        )
    colours = palette[tokens]  # (B, T, C)
    return colours.transpose(1, 2).unflatten(-1, (height, width))  # (B, C, H, W)


# ------------------------------------------------------------------------------ the model


@dataclass(frozen=True)
class ImageGPTConfig:
    """Hyper-parameters of ImageGPT (defaults: 8x8 digits with an 8-level grey palette)."""

    palette_size: int = 8  # K; token K is the start-of-sequence token
    height: int = 8
    width: int = 8
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    norm_eps: float = 1e-5
    fused_attn: bool = True

    # The contract's names (course_lib.models._family); the fields keep GPT-2's names.
    embed_dim = alias("n_embd")
    depth = alias("n_layer")
    num_heads = alias("n_head")

    @property
    def mlp_ratio(self) -> float:
        """4.0: the GPT's MLP is 4 x n_embd wide."""
        return 4.0

    @property
    def seq_len(self) -> int:
        return self.height * self.width


class ImageGPT(nn.Module):
    """A :class:`~course_lib.models.gpt.GPT` over ``K`` palette tokens plus a start token.

    ``forward(tokens)`` shifts the pixels right behind the start token, so ``logits[:, t]`` scores
    pixel ``x_t`` given ``x_<t`` and every pixel, the first included, gets a prediction.
    """

    def __init__(self, *, config: ImageGPTConfig) -> None:
        super().__init__()
        if config.palette_size < 2:
            raise ValueError(f"palette_size must be >= 2, got {config.palette_size}")
        self.config = config
        self.sos_id = config.palette_size
        self.gpt = GPT(
            config=GPTConfig(
                vocab_size=config.palette_size + 1,  # +1: the start-of-sequence token
                block_size=config.seq_len,
                n_layer=config.n_layer,
                n_head=config.n_head,
                n_embd=config.n_embd,
                dropout=config.dropout,
                activation="gelu",
                layer_norm_eps=config.norm_eps,
                fused_attn=config.fused_attn,
            )
        )

    def _check_tokens(self, tokens: Tensor) -> None:
        cfg = self.config
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens must be an int64 tensor (B, T), got {tokens.dtype} {tuple(tokens.shape)}; "
                "use quantize(images, palette) to make them"
            )
        if tokens.shape[1] > cfg.seq_len:
            raise ValueError(
                f"{tokens.shape[1]} tokens exceed the {cfg.height}x{cfg.width} image "
                f"({cfg.seq_len} pixels)"
            )
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= cfg.palette_size):
            raise ValueError(f"tokens must be palette indices in [0, {cfg.palette_size})")

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens ``(B, T)`` with ``T <= H*W`` -> logits ``(B, T, K)``; position t sees ``x_<t``."""
        self._check_tokens(tokens)
        sos = torch.full_like(tokens[:, :1], self.sos_id)
        inputs = torch.cat([sos, tokens[:, :-1]], dim=1)  # (B, T): shifted right by one
        return self.gpt(inputs)[..., : self.config.palette_size]  # (B, T, K): drop the SOS logit

    def loss(self, tokens: Tensor) -> Tensor:
        """Mean negative log-likelihood, in nats per pixel, of tokens ``(B, T)``."""
        logits = self(tokens)  # (B, T, K)
        return F.cross_entropy(logits.flatten(0, 1), tokens.flatten())

    @torch.no_grad()
    def complete(
        self,
        given: Tensor,
        *,
        temperature: float = 1.0,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Sample the rest of each image: given tokens ``(B, T0)`` -> all tokens ``(B, H*W)``.

        The first ``T0`` tokens come back unchanged (``T0 = H*W // 2`` completes the lower half from
        the upper half); ``greedy`` takes the most likely colour. Uses the GPT's key/value cache.
        Call ``model.eval()`` first if the model has dropout.
        """
        self._check_tokens(given)
        cfg = self.config
        B = given.shape[0]
        cache = KVCache(
            self.gpt.config,
            batch_size=B,
            max_len=cfg.seq_len,
            device=given.device,
            dtype=self.gpt.lm_head.weight.dtype,
        )
        tokens = given
        context = torch.cat([torch.full_like(given[:, :1], self.sos_id), given], dim=1)
        while tokens.shape[1] < cfg.seq_len:
            logits = self.gpt(context, cache=cache)[:, -1, : cfg.palette_size]  # (B, K)
            next_token = sample_next_token(
                logits, temperature=temperature, greedy=greedy, generator=generator
            )  # (B, 1)
            tokens = torch.cat([tokens, next_token], dim=1)
            context = next_token
        return tokens


@torch.no_grad()
def bits_per_pixel(model: ImageGPT, tokens: Tensor, *, batch_size: int = 256) -> float:
    """Average negative log2-likelihood per pixel of tokens ``(N, H*W)`` under ``model``."""
    total, count = 0.0, 0
    for start in range(0, tokens.shape[0], batch_size):
        chunk = tokens[start : start + batch_size]
        total += float(model.loss(chunk)) * chunk.numel()
        count += chunk.numel()
    return total / count / math.log(2)


PRESETS: dict[str, Callable[..., nn.Module]] = {
    "imagegpt-digits": preset(ImageGPT, ImageGPTConfig()),
}


# Generic model test protocol (tests/test_models_generic.py).
TINY: dict[str, object] = {"height": 4, "width": 4, "n_layer": 1, "n_head": 2, "n_embd": 16}


def example_batch(
    model: ImageGPT, *, batch_size: int = 2
) -> tuple[dict[str, Tensor], tuple[int, ...]]:
    """Random palette tokens ``(B, H*W)`` and the expected logits shape ``(B, H*W, K)``."""
    cfg = model.config
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(cfg.palette_size, (batch_size, cfg.seq_len), generator=generator)
    return {"tokens": tokens}, (batch_size, cfg.seq_len, cfg.palette_size)
