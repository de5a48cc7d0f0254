"""Vision Transformer (ViT): an image is a sequence of patches fed to a Transformer encoder.

Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words: Transformers for Image Recognition at
Scale" (ICLR). The model is Eq. 1-4 of the paper:

    z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos          (patch embedding, [CLS], 1-D positions)
    z'_l = MSA(LN(z_{l-1})) + z_{l-1}                        (pre-norm encoder block)
    z_l = MLP(LN(z'_l)) + z'_l
    y = LN(z_L^0)                                            (the [CLS] token classifies)

Presets ``vit-b/16``, ``vit-l/16`` and ``vit-h/14`` are Table 1 (86M, 307M, 632M parameters with a
1000-class head). ``cls_attention_maps`` and ``attention_rollout`` (Abnar & Zuidema, 2020,
"Quantifying Attention Flow in Transformers") turn the attention weights into pictures.

Shape legend: ``B`` batch, ``T`` tokens (N patches + 1 [CLS]), ``C`` channels, ``H`` heads,
``L`` layers, ``gh x gw`` patch grid.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from course_lib.attention import MultiHeadAttention
from course_lib.layers import FeedForward
from course_lib.models._family import alias, load_converted, preset, split_chunks
from course_lib.vision import PatchEmbed

__all__ = [
    "PRESETS",
    "TINY",
    "EncoderBlock",
    "VisionTransformer",
    "ViTConfig",
    "attention_rollout",
    "cls_attention_maps",
    "example_batch",
    "from_hf_vit",
    "from_timm",
]


@dataclass(frozen=True)
class ViTConfig:
    """Hyper-parameters of a ViT (defaults: ViT-B/16 at 224 px, ImageNet-1k head)."""

    image_size: int = 224
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000  # 0: no head, forward returns the (pre-logits) [CLS] features
    dim: int = 768  # C, "Hidden size D" in Table 1
    depth: int = 12  # "Layers"
    num_heads: int = 12
    mlp_dim: int = 3072
    dropout: float = 0.0
    representation_size: int | None = None  # pre-training "MLP with one hidden layer" (tanh)
    norm_eps: float = 1e-6
    patch_form: Literal["conv", "linear"] = "conv"
    fused_attn: bool = True  # torch's fused SDPA kernel; False = the lecture's manual path

    # The contract's names (course_lib.models._family); dim and mlp_dim are A5's names.
    embed_dim = alias("dim")

    @property
    def mlp_ratio(self) -> float:
        """mlp_dim / dim."""
        return self.mlp_dim / self.dim

    def __post_init__(self) -> None:
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size={self.image_size} is not divisible by patch_size={self.patch_size}"
            )
        if self.dim % self.num_heads:
            raise ValueError(f"dim={self.dim} is not divisible by num_heads={self.num_heads}")


class EncoderBlock(nn.Module):
    """Pre-norm Transformer encoder block (Eq. 2-3): (B, T, C) -> (B, T, C)."""

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        mlp_dim: int,
        dropout: float = 0.0,
        norm_eps: float = 1e-6,
        fused_attn: bool = True,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = MultiHeadAttention(dim, num_heads, dropout=dropout, fused=fused_attn)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = FeedForward(dim, mlp_dim, dropout=dropout, activation="gelu")
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, *, return_attn: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """x (B, T, C) -> (B, T, C), or with ``return_attn`` also the weights (B, H, T, T)."""
        h = self.norm1(x)
        if return_attn:
            h, weights = self.attn(h, return_weights=True)
        else:
            h = self.attn(h)
        x = x + self.dropout(h)
        x = x + self.mlp(self.norm2(x))
        return (x, weights) if return_attn else x


class VisionTransformer(nn.Module):
    """ViT classifier: images (B, C_in, H, W) -> logits (B, num_classes)."""

    def __init__(self, *, config: ViTConfig) -> None:
        super().__init__()
        self.config = cfg = config
        self.patch_embed = PatchEmbed(
            in_channels=cfg.in_channels,
            embed_dim=cfg.dim,
            patch_size=cfg.patch_size,
            form=cfg.patch_form,
        )
        num_patches = (cfg.image_size // cfg.patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, cfg.dim))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            EncoderBlock(
                dim=cfg.dim,
                num_heads=cfg.num_heads,
                mlp_dim=cfg.mlp_dim,
                dropout=cfg.dropout,
                norm_eps=cfg.norm_eps,
                fused_attn=cfg.fused_attn,
            )
            for _ in range(cfg.depth)
        )
        self.norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        rep = cfg.representation_size
        self.pre_logits = nn.Linear(cfg.dim, rep) if rep else None
        head_in = rep or cfg.dim
        self.head = nn.Linear(head_in, cfg.num_classes) if cfg.num_classes else nn.Identity()

    def forward_features(
        self, images: Tensor, *, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """All tokens after the final LayerNorm: (B, T, C), [CLS] first.

        With ``return_attn`` also the list of L attention weights, each (B, H, T, T).
        """
        size = (self.config.image_size, self.config.image_size)
        if tuple(images.shape[-2:]) != size:
            raise ValueError(
                f"this ViT was built for {size[0]}x{size[1]} images, got "
                f"{tuple(images.shape[-2:])}; resize the images or build it with image_size=..."
            )
        x = self.patch_embed(images)  # (B, N, C)
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, C)
        x = torch.cat([cls, x], dim=1) + self.pos_embed  # (B, T, C)
        x = self.dropout(x)
        maps = []
        for block in self.blocks:
            if return_attn:
                x, weights = block(x, return_attn=True)
                maps.append(weights)
            else:
                x = block(x)
        x = self.norm(x)
        return (x, maps) if return_attn else x

    def forward(
        self, images: Tensor, *, return_attn: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """images (B, C_in, H, W) -> logits (B, num_classes) (with ``num_classes=0``: features).

        With ``return_attn`` also the list of L attention weights, each (B, H, T, T).
        """
        out = self.forward_features(images, return_attn=return_attn)
        x, maps = out if return_attn else (out, None)
        y = x[:, 0]  # (B, C) the [CLS] token
        if self.pre_logits is not None:
            y = torch.tanh(self.pre_logits(y))
        y = self.head(y)
        return (y, maps) if return_attn else y


def cls_attention_maps(weights: Tensor, grid_size: tuple[int, int]) -> Tensor:
    """How much [CLS] attends to each patch: (..., T, T) -> (..., gh, gw).

    ``weights`` is one layer's attention (B, H, T, T) or a rollout (B, T, T); the [CLS] row is
    taken and its [CLS] column dropped, the rest laid out on the patch grid.
    """
    gh, gw = grid_size
    if weights.shape[-1] != gh * gw + 1:
        raise ValueError(
            f"weights over {weights.shape[-1]} tokens do not match a {gh}x{gw} grid plus [CLS]"
        )
    return weights[..., 0, 1:].reshape(*weights.shape[:-2], gh, gw)


def attention_rollout(
    weights: Sequence[Tensor],
    *,
    head_fusion: Literal["mean", "max", "min"] = "mean",
    residual: bool = True,
) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020): list of L tensors (B, H, T, T) -> (B, T, T).

    Heads are fused (mean by default), the residual path is added as ``A' = (A + I) / 2`` and the
    rows re-normalised, and the layers are multiplied, ``R = A'_L ... A'_2 A'_1``. Row ``i`` of
    ``R`` says how much of token ``i``'s final representation flows from each input token.
    """
    if len(weights) == 0:
        raise ValueError("attention_rollout needs the weights of at least one layer")
    fuse = {"mean": lambda a: a.mean(1), "max": lambda a: a.amax(1), "min": lambda a: a.amin(1)}
    if head_fusion not in fuse:
        raise ValueError(f"head_fusion must be one of {sorted(fuse)}, got {head_fusion!r}")
    rollout = None
    for layer in weights:
        a = fuse[head_fusion](layer)  # (B, T, T)
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        a = a / a.sum(dim=-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout  # (B, T, T)
    return rollout


def from_hf_vit(hf_model: nn.Module) -> VisionTransformer:
    """Copy a Hugging Face ``ViTModel`` / ``ViTForImageClassification`` into ``VisionTransformer``.

    ``ViTForImageClassification`` -> logits equal HF's ``logits``. ``ViTModel`` -> a model without
    head (``num_classes=0``) whose ``forward`` equals HF's ``pooler_output`` (or the [CLS] token of
    ``last_hidden_state`` when HF has no pooler) and ``forward_features`` equals
    ``last_hidden_state``. HF's LayerNorm epsilon (1e-12 by default) is carried over.
    """
    name = type(hf_model).__name__
    if name == "ViTForImageClassification":
        body, classifier = hf_model.vit, hf_model.classifier
    elif name == "ViTModel":
        body, classifier = hf_model, None
    else:
        raise TypeError(f"from_hf_vit expects ViTModel or ViTForImageClassification, got {name}")
    hf = hf_model.config
    problems = []
    image_size, patch_size = hf.image_size, hf.patch_size
    if not isinstance(image_size, int) or not isinstance(patch_size, int):
        problems.append("non-square image_size / patch_size")
    if not hf.qkv_bias:
        problems.append("qkv_bias=False")
    if hf.hidden_act != "gelu":
        problems.append(f"hidden_act={hf.hidden_act!r} (only 'gelu')")
    if body.pooler is not None and hf.pooler_act != "tanh":
        problems.append(f"pooler_act={hf.pooler_act!r} (only 'tanh')")
    if problems:
        raise NotImplementedError(f"cannot convert this ViT: {', '.join(problems)}")

    num_classes = 0
    if classifier is not None and isinstance(classifier, nn.Linear):
        num_classes = classifier.out_features
    config = ViTConfig(
        image_size=image_size,
        patch_size=patch_size,
        in_channels=hf.num_channels,
        num_classes=num_classes,
        dim=hf.hidden_size,
        depth=hf.num_hidden_layers,
        num_heads=hf.num_attention_heads,
        mlp_dim=hf.intermediate_size,
        representation_size=body.pooler.dense.out_features if body.pooler is not None else None,
        norm_eps=hf.layer_norm_eps,
    )
    hf_layers = body.layers if hasattr(body, "layers") else body.encoder.layer
    sd = {
        "patch_embed.proj.weight": body.embeddings.patch_embeddings.projection.weight,
        "patch_embed.proj.bias": body.embeddings.patch_embeddings.projection.bias,
        "cls_token": body.embeddings.cls_token,
        "pos_embed": body.embeddings.position_embeddings,
        "norm.weight": body.layernorm.weight,
        "norm.bias": body.layernorm.bias,
    }
    for i, layer in enumerate(hf_layers):
        parts = {
            "norm1": layer.layernorm_before,
            "norm2": layer.layernorm_after,
            "attn.q_proj": layer.attention.q_proj,
            "attn.k_proj": layer.attention.k_proj,
            "attn.v_proj": layer.attention.v_proj,
            "attn.out_proj": layer.attention.o_proj,
            "mlp.fc1": layer.mlp.fc1,
            "mlp.fc2": layer.mlp.fc2,
        }
        for ours, module in parts.items():
            sd[f"blocks.{i}.{ours}.weight"] = module.weight
            sd[f"blocks.{i}.{ours}.bias"] = module.bias
    if body.pooler is not None:
        sd["pre_logits.weight"] = body.pooler.dense.weight
        sd["pre_logits.bias"] = body.pooler.dense.bias
    if num_classes:
        sd["head.weight"], sd["head.bias"] = classifier.weight, classifier.bias
    model = VisionTransformer(config=config)
    model.load_state_dict({k: v.detach().clone() for k, v in sd.items()})
    return model.eval()


def from_timm(model: VisionTransformer, state_dict: dict[str, Tensor]) -> VisionTransformer:
    """Load a timm ``VisionTransformer`` state dict (class token, ``global_pool="token"``).

    Key mapping (timm -> course_lib; everything else keeps its name)::

        blocks.i.attn.qkv.{weight,bias}  -> blocks.i.attn.{q,k,v}_proj.*  (rows split in 3)
        blocks.i.attn.proj.*             -> blocks.i.attn.out_proj.*

    ``model`` must have the checkpoint's sizes (e.g. ``create("vit-b/16")`` for
    ``vit_base_patch16_224``); timm variants with layer scale, QK-norm, register tokens or a
    ``fc_norm`` head have keys without a place here and raise ``KeyError``.
    """

    def convert(key: str, value: Tensor) -> dict[str, Tensor]:
        m = re.fullmatch(r"(blocks\.\d+\.attn\.)qkv\.(weight|bias)", key)
        if m:
            return split_chunks(m[1], m[2], value, ("q_proj", "k_proj", "v_proj"))
        return {re.sub(r"\.attn\.proj\.", ".attn.out_proj.", key): value}

    return load_converted(model, state_dict, convert, source="timm")


#: course_lib.interop.from_hf dispatches on these Hugging Face class names.
HF_CONVERTERS = {"ViTModel": from_hf_vit, "ViTForImageClassification": from_hf_vit}
#: course_lib.interop.from_timm_state_dict loads timm checkpoints with this function.
TIMM_LOADER = from_timm


PRESETS: dict[str, Callable[..., nn.Module]] = {
    # Table 1 of the paper (ImageNet-1k head, 224 px).
    "vit-b/16": preset(VisionTransformer, ViTConfig()),
    "vit-l/16": preset(
        VisionTransformer, ViTConfig(dim=1024, depth=24, num_heads=16, mlp_dim=4096)
    ),
    "vit-h/14": preset(
        VisionTransformer, ViTConfig(patch_size=14, dim=1280, depth=32, num_heads=16, mlp_dim=5120)
    ),
    # Tiny models for the sklearn digits (upsampled to 1 x 16 x 16: 4x4 patches) and for tests.
    "vit-digits": preset(
        VisionTransformer,
        ViTConfig(
            image_size=16,
            patch_size=4,
            in_channels=1,
            num_classes=10,
            dim=48,
            depth=4,
            num_heads=3,
            mlp_dim=96,
        ),
    ),
    "vit-tiny": preset(
        VisionTransformer,
        ViTConfig(
            image_size=16,
            patch_size=4,
            in_channels=3,
            num_classes=10,
            dim=32,
            depth=2,
            num_heads=2,
            mlp_dim=64,
        ),
    ),
}

# Overrides that make every preset tiny (the generic model test in tests/test_models_generic.py).
TINY: dict[str, Any] = dict(
    image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32, num_classes=5,
    representation_size=12,
)  # fmt: skip


def example_batch(
    model: VisionTransformer, *, batch_size: int = 2
) -> tuple[dict[str, Tensor], tuple[int, ...]]:
    """Deterministic random images for ``model(**inputs)`` and the shape of the logits."""
    cfg = model.config
    generator = torch.Generator().manual_seed(0)
    shape = (batch_size, cfg.in_channels, cfg.image_size, cfg.image_size)
    images = torch.randn(shape, generator=generator)
    return {"images": images}, (batch_size, cfg.num_classes)
