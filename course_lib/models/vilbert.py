"""ViLBERT: two Transformer streams, text and image regions, joined by co-attention.

Lu et al. 2019, "ViLBERT: Pretraining Task-Agnostic Visiolinguistic Representations for
Vision-and-Language Tasks". The text stream is BERT; the image stream reads a sequence of region
features (detector boxes in the paper, here also a CNN grid) embedded together with their 5-d
location ``(x0, y0, x1, y1, area)`` and prefixed by an ``[IMG]`` token (mean feature, whole-image
box). The streams meet in co-attentional layers (Figure 2b): each stream computes queries from its
own states and keys and values from the *other* stream, then Add & Norm and a feed-forward network
as in a Transformer layer. Image-text alignment (Section 3.2) multiplies the pooled ``[CLS]`` and
``[IMG]`` vectors element-wise and classifies the product as aligned or not.

Layout here: ``num_text_layers`` BERT layers on the text alone, then ``num_co_layers`` times
[co-attention, one self-attention layer per stream].

Shapes: ``B`` batch, ``T`` text tokens, ``R`` image regions (``R + 1`` with ``[IMG]``), ``F`` region
feature size, ``C`` text channels, ``Cv`` image channels, ``Cb`` pooled (bi-modal) channels,
``H`` heads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import MultiHeadAttention
from course_lib.layers import FeedForward, LayerNorm
from course_lib.models._family import alias, preset
from course_lib.models.bert import BertConfig, BertEmbeddings, BertLayer


@dataclass(frozen=True)
class ViLBertConfig:
    """Sizes of both streams: ``v_`` fields are the image stream, ``bi_`` the pooled pair."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    num_text_layers: int = 6  # text-only BERT layers before the first co-attention
    v_feature_size: int = 2048  # F: size of one region feature
    v_hidden_size: int = 1024
    v_num_attention_heads: int = 8
    v_intermediate_size: int = 1024
    num_co_layers: int = 6
    bi_hidden_size: int = 1024
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    fused_attn: bool = True

    # The contract's names (course_lib.models._family); the fields keep BERT's names.
    embed_dim = alias("hidden_size")
    num_heads = alias("num_attention_heads")
    norm_eps = alias("layer_norm_eps")

    @property
    def depth(self) -> int:
        """num_text_layers + num_co_layers (of the text stream)."""
        return self.num_text_layers + self.num_co_layers

    @property
    def mlp_ratio(self) -> float:
        """intermediate_size / hidden_size (of the text stream)."""
        return self.intermediate_size / self.hidden_size

    def text_config(self) -> BertConfig:
        """The text stream as a :class:`BertConfig`."""
        return BertConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_position_embeddings,
            dropout=self.dropout,
            layer_norm_eps=self.layer_norm_eps,
            fused_attn=self.fused_attn,
        )

    def image_config(self) -> BertConfig:
        """The image stream's self-attention layers as a :class:`BertConfig`."""
        return replace(
            self.text_config(),
            hidden_size=self.v_hidden_size,
            num_attention_heads=self.v_num_attention_heads,
            intermediate_size=self.v_intermediate_size,
        )


class ViLBertOutput(NamedTuple):
    """What :class:`ViLBert` returns."""

    alignment_logits: Tensor  # (B, 2): [not aligned, aligned]
    text: Tensor  # (B, T, C)
    image: Tensor  # (B, R + 1, Cv), position 0 is [IMG]
    co_attentions: list[tuple[Tensor, Tensor]] | None  # per co-layer: text->image, image->text


def grid_regions(feature_map: Tensor) -> tuple[Tensor, Tensor]:
    """Turn a CNN feature map (B, F, h, w) into regions (B, h*w, F) and boxes (B, h*w, 5).

    Regions are the grid cells in row-major order; each box is ``(x0, y0, x1, y1, area)`` of the
    cell in image coordinates normalised to [0, 1], ViLBERT's 5-d location.
    """
    B, F, h, w = feature_map.shape
    regions = feature_map.flatten(2).transpose(1, 2)  # (B, h*w, F)
    ys, xs = torch.meshgrid(
        torch.arange(h, device=feature_map.device), torch.arange(w, device=feature_map.device),
        indexing="ij",
    )  # fmt: skip
    x0, y0 = xs.flatten() / w, ys.flatten() / h  # (h*w,) each
    boxes = torch.stack([x0, y0, x0 + 1 / w, y0 + 1 / h, torch.full_like(x0, 1 / (h * w))], -1)
    return regions, boxes.to(feature_map.dtype).expand(B, h * w, 5)


def crop_regions(images: Tensor, boxes: Tensor, *, size: int = 8) -> tuple[Tensor, Tensor]:
    """Per-object regions, as a detector hands them to ViLBERT: crop every box and resize it.

    ``images`` (B, 3, S, S) and pixel ``boxes`` (B, N, 4) as ``(x0, y0, x1, y1)`` with exclusive
    ends give features (B, N, 3 * size * size), each box sampled bilinearly on a size x size grid
    of bin centres (RoIAlign with one sample per bin), and 5-d locations (B, N, 5) normalised to
    [0, 1]. Padded boxes (all zero) give meaningless features; mask them out.
    """
    B, N, _ = boxes.shape
    S_y, S_x = images.shape[-2:]
    steps = (torch.arange(size, device=images.device, dtype=images.dtype) + 0.5) / size  # (size,)
    x0, y0, x1, y1 = boxes.to(images.dtype).unbind(-1)  # (B, N) each, in pixels
    xs = x0[..., None] + steps * (x1 - x0)[..., None]  # (B, N, size) sample columns
    ys = y0[..., None] + steps * (y1 - y0)[..., None]  # (B, N, size) sample rows
    grid = torch.stack(  # grid_sample wants (x, y) in [-1, 1], pixel i spanning [i, i + 1)
        [
            (2 * xs / S_x - 1)[:, :, None, :].expand(B, N, size, size),
            (2 * ys / S_y - 1)[:, :, :, None].expand(B, N, size, size),
        ],
        dim=-1,
    )  # (B, N, size, size, 2)
    crops = F.grid_sample(
        images.repeat_interleave(N, dim=0), grid.flatten(0, 1), align_corners=False
    )  # (B * N, 3, size, size)
    features = crops.reshape(B, N, -1)  # (B, N, 3 * size * size)
    area = (x1 - x0) * (y1 - y0) / (S_x * S_y)
    locations = torch.stack([x0 / S_x, y0 / S_y, x1 / S_x, y1 / S_y, area], dim=-1)  # (B, N, 5)
    return features, locations


class ImageEmbeddings(nn.Module):
    """Region features (B, R, F) and boxes (B, R, 5) -> [IMG] + regions, embedded (B, R + 1, Cv)."""

    def __init__(self, config: ViLBertConfig) -> None:
        super().__init__()
        self.feature_proj = nn.Linear(config.v_feature_size, config.v_hidden_size)
        self.location_proj = nn.Linear(5, config.v_hidden_size)
        self.norm = LayerNorm(config.v_hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, features: Tensor, boxes: Tensor, mask: Tensor | None = None) -> Tensor:
        """``mask`` (B, R) marks real regions; the [IMG] feature is their mean."""
        keep = torch.ones_like(features[..., 0]) if mask is None else mask.to(features.dtype)
        mean = (features * keep[..., None]).sum(1) / keep.sum(1, keepdim=True).clamp(
            min=1
        )  # (B, F)
        whole = features.new_tensor([0.0, 0.0, 1.0, 1.0, 1.0]).expand(len(features), 5)  # (B, 5)
        features = torch.cat([mean[:, None], features], dim=1)  # (B, R + 1, F)
        boxes = torch.cat([whole[:, None], boxes], dim=1)  # (B, R + 1, 5)
        x = self.feature_proj(features) + self.location_proj(boxes)  # (B, R + 1, Cv)
        return self.dropout(self.norm(x))


class CoAttentionLayer(nn.Module):
    """Co-TRM: text queries attend to image keys/values and image queries to text keys/values."""

    def __init__(self, config: ViLBertConfig) -> None:
        super().__init__()
        C, Cv, eps, p = (
            config.hidden_size,
            config.v_hidden_size,
            config.layer_norm_eps,
            config.dropout,
        )
        fused = config.fused_attn
        self.text_cross = MultiHeadAttention(
            C, config.num_attention_heads, kdim=Cv, vdim=Cv, dropout=p, fused=fused
        )
        self.image_cross = MultiHeadAttention(
            Cv, config.v_num_attention_heads, kdim=C, vdim=C, dropout=p, fused=fused
        )
        self.text_norm, self.image_norm = LayerNorm(C, eps=eps), LayerNorm(Cv, eps=eps)
        self.text_mlp = FeedForward(C, config.intermediate_size, dropout=p)
        self.image_mlp = FeedForward(Cv, config.v_intermediate_size, dropout=p)
        self.text_mlp_norm, self.image_mlp_norm = LayerNorm(C, eps=eps), LayerNorm(Cv, eps=eps)
        self.dropout = nn.Dropout(p)

    def forward(
        self,
        text: Tensor,
        image: Tensor,
        text_mask: Tensor | None = None,
        image_mask: Tensor | None = None,
        *,
        return_attn: bool = False,
    ) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor] | None]:
        """text (B, T, C), image (B, R+1, Cv), keep-masks (B, T) and (B, R+1) -> same shapes.

        With ``return_attn`` also the weights text->image (B, H, T, R+1) and image->text
        (B, Hv, R+1, T).
        """
        to_image = None if image_mask is None else image_mask[:, None, None, :]  # (B, 1, 1, R+1)
        to_text = None if text_mask is None else text_mask[:, None, None, :]  # (B, 1, 1, T)
        t = self.text_cross(text, image, image, mask=to_image, return_weights=return_attn)
        i = self.image_cross(image, text, text, mask=to_text, return_weights=return_attn)
        weights = (t[1], i[1]) if return_attn else None
        t, i = (t[0], i[0]) if return_attn else (t, i)
        text = self.text_norm(text + self.dropout(t))  # both use the *input* states of the other
        image = self.image_norm(image + self.dropout(i))
        text = self.text_mlp_norm(text + self.text_mlp(text))
        image = self.image_mlp_norm(image + self.image_mlp(image))
        return text, image, weights


class ViLBert(nn.Module):
    """Text ids (B, T) + regions (B, R, F) with boxes (B, R, 5) -> :class:`ViLBertOutput`."""

    def __init__(self, *, config: ViLBertConfig) -> None:
        super().__init__()
        self.config = config
        text_config, image_config = config.text_config(), config.image_config()
        self.text_embeddings = BertEmbeddings(text_config)
        self.image_embeddings = ImageEmbeddings(config)
        self.text_layers = nn.ModuleList(
            BertLayer(text_config) for _ in range(config.num_text_layers)
        )
        self.co_layers = nn.ModuleList(
            CoAttentionLayer(config) for _ in range(config.num_co_layers)
        )
        self.text_after_co = nn.ModuleList(
            BertLayer(text_config) for _ in range(config.num_co_layers)
        )
        self.image_after_co = nn.ModuleList(
            BertLayer(image_config) for _ in range(config.num_co_layers)
        )
        self.text_pooler = nn.Linear(config.hidden_size, config.bi_hidden_size)
        self.image_pooler = nn.Linear(config.v_hidden_size, config.bi_hidden_size)
        self.alignment = nn.Linear(config.bi_hidden_size, 2)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: Tensor,
        region_features: Tensor,
        region_boxes: Tensor,
        *,
        attention_mask: Tensor | None = None,
        region_mask: Tensor | None = None,
        return_attn: bool = False,
    ) -> ViLBertOutput:
        """``attention_mask`` (B, T) / ``region_mask`` (B, R): True for real tokens / regions."""
        if region_features.shape[-1] != self.config.v_feature_size:
            raise ValueError(
                f"region_features has {region_features.shape[-1]} features per region, the config "
                f"expects v_feature_size={self.config.v_feature_size}"
            )
        text = self.text_embeddings(input_ids)  # (B, T, C)
        image = self.image_embeddings(region_features, region_boxes, region_mask)  # (B, R+1, Cv)
        text_mask = None if attention_mask is None else attention_mask.bool()
        image_mask = None
        if region_mask is not None:  # [IMG] is always there
            image_mask = torch.cat([torch.ones_like(region_mask[:, :1]), region_mask], 1).bool()
        to_text = None if text_mask is None else text_mask[:, None, None, :]  # (B, 1, 1, T)
        to_image = None if image_mask is None else image_mask[:, None, None, :]  # (B, 1, 1, R+1)
        for layer in self.text_layers:
            text, _ = layer(text, to_text)
        co_attentions = [] if return_attn else None
        for co, text_layer, image_layer in zip(
            self.co_layers, self.text_after_co, self.image_after_co
        ):
            text, image, weights = co(text, image, text_mask, image_mask, return_attn=return_attn)
            text, _ = text_layer(text, to_text)
            image, _ = image_layer(image, to_image)
            if co_attentions is not None:
                co_attentions.append(weights)
        pooled_text = torch.tanh(self.text_pooler(text[:, 0]))  # (B, Cb) from [CLS]
        pooled_image = torch.tanh(self.image_pooler(image[:, 0]))  # (B, Cb) from [IMG]
        logits = self.alignment(pooled_text * pooled_image)  # (B, 2)
        return ViLBertOutput(logits, text, image, co_attentions)


class ConvGridEncoder(nn.Module):
    """A small CNN for the synthetic scenes: images (B, 3, S, S) -> grid regions and boxes.

    Three stride-2 convolutions turn an S x S image into an (S/8) x (S/8) grid of ``out_features``
    channels, returned as ``grid_regions`` gives them: (B, R, F) features and (B, R, 5) boxes.
    """

    def __init__(self, *, out_features: int, channels: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, channels, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(channels, out_features, 3, stride=2, padding=1),
        )  # fmt: skip

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        return grid_regions(self.net(images))  # (B, R, F), (B, R, 5)


PRESETS: dict[str, Callable[..., nn.Module]] = {
    "vilbert-tiny": preset(
        ViLBert,
        ViLBertConfig(
            vocab_size=64,
            hidden_size=32,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
            num_text_layers=1,
            v_feature_size=32,
            v_hidden_size=32,
            v_num_attention_heads=2,
            v_intermediate_size=64,
            num_co_layers=1,
            bi_hidden_size=32,
            dropout=0.0,
        ),  # fmt: skip
    ),
    # the paper's sizes: BERT-base text stream, 1024-wide image stream over 2048-d detector features
    "vilbert-base": preset(ViLBert, ViLBertConfig()),
}

#: Overrides that make every preset tiny (tests/test_models_generic.py).
TINY = dict(
    vocab_size=64, hidden_size=16, num_attention_heads=2, intermediate_size=32,
    max_position_embeddings=32, num_text_layers=1, v_feature_size=12, v_hidden_size=16,
    v_num_attention_heads=2, v_intermediate_size=32, num_co_layers=1, bi_hidden_size=16,
)  # fmt: skip


def example_batch(model: ViLBert, *, batch_size: int = 2) -> tuple[dict[str, Tensor], tuple[int]]:
    """Deterministic text, regions (with padding on both sides) and the logits' shape (B, 2)."""
    config, T, R = model.config, 6, 4
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(config.vocab_size, (batch_size, T), generator=generator)
    features = torch.randn(batch_size, R, config.v_feature_size, generator=generator)
    boxes = torch.rand(batch_size, R, 5, generator=generator)
    attention_mask = torch.ones(batch_size, T, dtype=torch.bool)
    attention_mask[0, -2:] = False
    region_mask = torch.ones(batch_size, R, dtype=torch.bool)
    region_mask[-1, -1] = False
    inputs = dict(
        input_ids=input_ids, region_features=features, region_boxes=boxes,
        attention_mask=attention_mask, region_mask=region_mask,
    )  # fmt: skip
    return inputs, (batch_size, 2)
