"""Visible checks for assignment 5 (vision transformers): patches, ViT, Swin's windows, DaViT.

Each ``check_*`` runs the student's function or module on small fixed inputs, compares it with the
reference in ``course_lib`` (``course_lib.vision``, ``course_lib.models.vit`` and ``.davit``) and,
when it differs, names the likely mistake (patch pixels laid out (P, P, C), windows numbered column
by column, the 2x2 neighbours of patch merging concatenated in reading order, channel attention
scaled by the full width, ...). Passing them is a hint, not the grade.

The references are imported inside the functions, so importing this module loads no model code.

Shape legend: ``B`` batch, ``C`` channels, ``H x W`` image or feature map, ``P`` patch size, ``N``
patches or tokens, ``T = N + 1`` tokens with [CLS], ``ws`` window size, ``nW`` windows, ``G``
channel groups of ``Cg`` channels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .core import CheckFailed, check_close, check_shape, passed


def _vision() -> Any:
    from course_lib import vision

    return vision


def _load(student: nn.Module, state: dict[str, Tensor]) -> None:
    try:
        student.load_state_dict(state)
    except RuntimeError as error:
        raise CheckFailed(f"keep the attribute names given in __init__: {error}") from None


def check_patchify(fn: Callable[..., Any]) -> None:
    """``patchify`` against ``course_lib.vision.patchify`` on a 3-channel, non-square image."""
    images = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(0))
    P = 2
    want = _vision().patchify(images, P)
    B, C, H, W = images.shape
    grid = images.reshape(B, C, H // P, P, W // P, P)
    mistakes = {
        "each patch is flattened as (P, P, C) instead of (C, P, P) (permute the channel axis "
        "before the two pixel axes, like a Conv2d kernel)": grid.permute(0, 2, 4, 3, 5, 1).reshape(
            B, -1, C * P * P
        ),
        "the patches are numbered column by column instead of row by row": grid.permute(
            0, 4, 2, 1, 3, 5
        ).reshape(B, -1, C * P * P),
        "the image was reshaped without moving the axes (a plain reshape mixes pixels of "
        "different patches)": images.reshape(B, -1, C * P * P),
        "the pixels inside each patch are transposed (column index before row index); keep "
        "the order (C, P_row, P_col)": grid.permute(0, 2, 4, 1, 5, 3).reshape(B, -1, C * P * P),
    }
    check_close(fn(images, P), want, name="patchify(images (2, 3, 4, 6), 2)",
                mistakes=mistakes, dims=("B", "N", "C*P*P"))  # fmt: skip
    try:
        fn(torch.zeros(1, 1, 5, 4), 2)
    except ValueError:
        pass
    except Exception as error:
        raise CheckFailed(
            f"a 5x4 image with patch_size=2 raised {type(error).__name__}: check the sizes first "
            "and raise a ValueError that names them"
        ) from None
    else:
        raise CheckFailed("a 5x4 image with patch_size=2 should raise a ValueError")
    passed("patchify passes the visible checks")


def check_patch_embed(fn: Callable[..., Any]) -> None:
    """``patch_embed`` (patchify + matrix product) equals the strided convolution."""
    g = torch.Generator().manual_seed(0)
    images = torch.randn(2, 3, 8, 4, generator=g)
    weight, bias = torch.randn(5, 3, 2, 2, generator=g), torch.randn(5, generator=g)
    want = F.conv2d(images, weight, bias, stride=2).flatten(2).transpose(1, 2)  # (B, N, E)
    got = fn(images, weight, bias, 2)
    patches = _vision().patchify(images, 2)  # (B, N, C*P*P)
    mistakes = {
        "the bias is missing": want - bias,
        "the weight (E, C, P, P) is reshaped to (C*P*P, E) instead of flattened to "
        "(E, C*P*P) and transposed": patches @ weight.reshape(-1, 5) + bias,
        "the weight is flattened in the order (P, P, C); flatten it in the order (C, P, P) of "
        "the patches (weight.flatten(1))": patches @ weight.permute(0, 2, 3, 1).flatten(1).T + bias,
    }
    check_close(got, want, name="patch_embed(images, weight, bias, 2)", atol=1e-5,
                dims=("B", "N", "E"), mistakes=mistakes)  # fmt: skip
    passed("patch_embed equals the convolution with kernel = stride = P")


def vit_state(reference: nn.Module) -> dict[str, Tensor]:
    """course_lib's ViT weights under the assignment's names (the patch embedding is a Linear)."""
    state = dict(reference.state_dict())
    weight = state.pop("patch_embed.proj.weight")
    state["patch_embed.weight"] = weight.flatten(1)  # (E, C, P, P) -> (E, C*P*P)
    state["patch_embed.bias"] = state.pop("patch_embed.proj.bias")
    return state


def reference_vit(**sizes: Any) -> nn.Module:
    from course_lib.models.vit import VisionTransformer, ViTConfig

    config = ViTConfig(**sizes)
    model = VisionTransformer(config=config).eval()
    with torch.no_grad():  # non-zero [CLS] and position embeddings, so forgetting one shows
        model.cls_token.normal_()
        model.pos_embed.normal_()
    return model


def check_vit(cls: type) -> None:
    """``ViT.forward`` equals course_lib's ViT with the same weights; attention on request."""
    sizes = dict(image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=16, depth=2,
                 num_heads=2, mlp_dim=32)  # fmt: skip
    torch.manual_seed(0)
    reference = reference_vit(**sizes)
    mine = cls(**sizes).eval()
    _load(mine, vit_state(reference))
    images = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, maps = reference(images, return_attn=True)
        tokens = reference.forward_features(images)  # (B, T, C)
        mistakes = {
            "the tokens are averaged instead of reading the [CLS] token":
                reference.head(tokens[:, 1:].mean(1)),
            "the final LayerNorm is missing": reference.head(_no_final_norm(reference, images)),
            "the last token is classified; the head reads the [CLS] token (position 0)":
                reference.head(tokens[:, -1]),
            "the [CLS] token is appended after the patches; put it in front (position 0)":
                _vit_variant(reference, images, cls_first=False),
            "the position embedding is not added to the [CLS] token; add all N + 1 of them "
            "after prepending it": _vit_variant(reference, images, position="patches"),
            "the position embeddings are missing (add self.pos_embed after prepending [CLS])":
                _vit_variant(reference, images, position="none"),
        }  # fmt: skip
        got = mine(images)
        if isinstance(got, tuple):
            raise CheckFailed("ViT(images) should return only the logits (return_attn=False)")
        check_close(got, want, name="ViT logits", atol=1e-4, mistakes=mistakes,
                    dims=("B", "num_classes"))  # fmt: skip
        out = mine(images, return_attn=True)
        if not isinstance(out, tuple) or len(out) != 2 or len(out[1]) != 2:
            raise CheckFailed(
                "ViT(images, return_attn=True) should return (logits, [w_1, w_2]): the attention "
                "weights of every block, in order"
            )
        check_close(out[1][-1], maps[-1], name="the last block's attention weights",
                    dims=("B", "H", "T", "T"))  # fmt: skip
    passed("ViT.forward passes the visible checks")


def _vit_variant(
    model: nn.Module, images: Tensor, *, cls_first: bool = True, position: str = "all"
) -> Tensor:
    """Logits of ``model`` with the [CLS] token appended last, or position embeddings added to
    the patches only / not at all."""
    x = model.patch_embed(images)  # (B, N, C)
    cls = model.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, C)
    if position == "patches":
        x = x + model.pos_embed[:, 1:]
    x = torch.cat([cls, x], dim=1) if cls_first else torch.cat([x, cls], dim=1)  # (B, T, C)
    if position == "all":
        x = x + model.pos_embed
    for block in model.blocks:
        x = block(x)
    return model.head(model.norm(x)[:, 0 if cls_first else -1])


def _no_final_norm(model: nn.Module, images: Tensor) -> Tensor:
    x = model.patch_embed(images)
    x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + model.pos_embed
    for block in model.blocks:
        x = block(x)
    return x[:, 0]


def check_window_partition(partition: Callable[..., Any], reverse: Callable[..., Any]) -> None:
    """``window_partition`` / ``window_reverse`` against course_lib, on a 4 x 6 map."""
    x = torch.arange(2 * 4 * 6 * 3, dtype=torch.float32).reshape(2, 4, 6, 3)
    want = _vision().window_partition(x, 2)
    B, H, W, C = x.shape
    column_major = x.reshape(B, H // 2, 2, W // 2, 2, C).permute(0, 3, 1, 2, 4, 5)
    check_close(partition(x, 2), want, name="window_partition(x (2, 4, 6, 3), 2)",
                dims=("B*nW", "ws", "ws", "C"),
                mistakes={"the windows are numbered column by column (number them row by row)":
                          column_major.reshape(-1, 2, 2, C),
                          "a plain reshape mixes rows of different windows: swap the window-row "
                          "and in-window-row axes first": x.reshape(-1, 2, 2, C),
                          "each window is transposed (its rows and columns swapped)":
                          want.transpose(1, 2)})  # fmt: skip
    check_close(reverse(want, 2, 4, 6), x, name="window_reverse(windows, 2, 4, 6)",
                dims=("B", "H", "W", "C"))  # fmt: skip
    passed("window_partition and window_reverse pass the visible checks")


def check_shifted_window_mask(fn: Callable[..., Any]) -> None:
    """``shifted_window_mask`` against course_lib for a few sizes and shifts."""
    for height, width, ws, shift in ((4, 4, 2, 1), (6, 4, 2, 1), (6, 6, 3, 1), (8, 8, 4, 2)):
        want = _vision().shifted_window_mask(height, width, ws, shift)
        got = fn(height, width, ws, shift)
        name = f"shifted_window_mask({height}, {width}, {ws}, {shift})"
        check_shape(got, tuple(want.shape), name=name, dims=("nW", "N", "N"))
        if got.dtype != torch.bool:
            raise CheckFailed(f"{name} should be a boolean keep-mask (True = may attend)")
        if torch.equal(got, ~want):
            raise CheckFailed(f"{name} is inverted: True means 'may attend'")
        if not torch.equal(got, want):
            bad = (got != want).nonzero()[0].tolist()
            raise CheckFailed(
                f"{name} differs at (window, query, key) {bad}: after the roll, tokens of one "
                "window may attend to each other only if they come from the same region "
                "[0, L - ws), [L - ws, L - shift), [L - shift, L) along both axes"
            )
    if not fn(4, 4, 2, 0).all():
        raise CheckFailed("with shift_size=0 nothing is masked: the mask should be all True")
    passed("shifted_window_mask passes the visible checks")


def check_patch_merging(cls: type) -> None:
    """``PatchMerging`` against course_lib's, even and odd map sizes."""
    torch.manual_seed(0)
    reference = _vision().PatchMerging(dim=4)
    with torch.no_grad():
        for p in reference.norm.parameters():
            p.normal_()
    mine = cls(dim=4)
    _load(mine, reference.state_dict())
    x = torch.randn(2, 4, 6, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = reference(x)
        x0, x1, x2, x3 = x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]
        reading = reference.reduction(reference.norm(torch.cat([x0, x2, x1, x3], dim=-1)))
        no_norm = reference.reduction(torch.cat([x0, x1, x2, x3], dim=-1))
        check_close(mine(x), want, name="PatchMerging(x (2, 4, 6, 4))", atol=1e-5,
                    dims=("B", "H/2", "W/2", "2C"),
                    mistakes={"the four neighbours are concatenated in reading order; Swin's "
                              "order is x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], "
                              "x[1::2, 1::2]": reading,
                              "the LayerNorm is missing": no_norm})  # fmt: skip
        odd = torch.randn(1, 5, 3, 4, generator=torch.Generator().manual_seed(1))
        try:
            got = mine(odd)
        except Exception as error:
            raise CheckFailed(
                f"PatchMerging on a 5 x 3 map raised {type(error).__name__}: {error}. Zero-pad an "
                "odd height or width first, at the bottom / right: F.pad(x, (0, 0, 0, W % 2, 0, "
                "H % 2)) pads (C, W, H) from the last dimension"
            ) from None
        top_left = F.pad(odd, (0, 0, 1, 0, 1, 0))
        x0, x1 = top_left[:, 0::2, 0::2], top_left[:, 1::2, 0::2]
        x2, x3 = top_left[:, 0::2, 1::2], top_left[:, 1::2, 1::2]
        padded_top_left = reference.reduction(reference.norm(torch.cat([x0, x1, x2, x3], -1)))
        check_close(got, reference(odd), name="PatchMerging on a 5 x 3 map (zero-pad the bottom "
                    "row and right column first)", atol=1e-5,
                    mistakes={"the map is padded at the top / left; pad the bottom row and right "
                              "column": padded_top_left})  # fmt: skip
    passed("PatchMerging passes the visible checks")


def check_channel_attention(cls: type) -> None:
    """``ChannelAttention`` against course_lib.models.davit.ChannelAttention."""
    from course_lib.models.davit import ChannelAttention

    torch.manual_seed(0)
    reference = ChannelAttention(dim=12, num_groups=3).eval()
    mine = cls(dim=12, num_groups=3).eval()
    _load(mine, reference.state_dict())
    x = torch.randn(2, 7, 12, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, weights = reference(x, return_attn=True)
        q, k, v = reference.qkv(x).reshape(2, 7, 3, 3, 4).permute(2, 0, 3, 1, 4)  # (B, G, N, Cg)
        qi, ki, vi = reference.qkv(x).reshape(2, 7, 3, 4, 3).permute(2, 0, 4, 1, 3)

        def channel(scale: float, dim: int = -1, transpose: bool = True, q=q, k=k, v=v) -> Tensor:
            a = (q.transpose(-2, -1) @ k * scale).softmax(dim=dim)
            y = v @ (a.transpose(-2, -1) if transpose else a)  # (B, G, N, Cg)
            return reference.proj(y.transpose(1, 2).reshape(2, 7, 12))

        tokens = (q @ k.transpose(-2, -1) / 2).softmax(-1) @ v  # spatial attention per group
        mistakes = {
            "the scores are scaled by 1/sqrt(C) (the full width) instead of 1/sqrt(Cg) (the "
            "channels of one group)": channel(12**-0.5),
            "the softmax runs over the wrong axis of the Cg x Cg matrix": channel(0.5, dim=-2),
            "the scores are scaled by 1/sqrt(N) (the tokens) instead of 1/sqrt(Cg) (the "
            "channels of one group)": channel(7**-0.5),
            "the scores are not scaled: divide them by sqrt(Cg) (Cg = channels per group)": (
                channel(1.0)
            ),
            "the weights are applied without a transpose: output channel i is sum_j A[i, j] "
            "v_j, so y = v @ A.transpose(-2, -1)": channel(0.5, transpose=False),
            "the groups are interleaved (channel c in group c % G); group g holds the channels "
            "g * Cg .. (g + 1) * Cg - 1 of q, k and v": channel(0.5, q=qi, k=ki, v=vi),
            "the tokens attend to each other (N x N); in channel attention the channels do "
            "(Cg x Cg), scores summed over the tokens": reference.proj(
                tokens.transpose(1, 2).reshape(2, 7, 12)
            ),
        }
        got = mine(x)
        if isinstance(got, tuple):
            raise CheckFailed("ChannelAttention(x) should return only y (return_attn=False)")
        check_close(got, want, name="ChannelAttention(x (2, 7, 12)), 3 groups", atol=1e-5,
                    mistakes=mistakes, dims=("B", "N", "C"))  # fmt: skip
        out = mine(x, return_attn=True)
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailed("ChannelAttention(x, return_attn=True) should return (y, weights)")
        check_close(out[1], weights, name="the channel attention weights",
                    dims=("B", "G", "Cg", "Cg"))  # fmt: skip
    passed("ChannelAttention passes the visible checks")


def check_cls_attention_map(fn: Callable[..., Any]) -> None:
    """``cls_attention_map`` against course_lib.models.vit.cls_attention_maps."""
    from course_lib.models.vit import cls_attention_maps

    weights = torch.rand(2, 3, 17, 17, generator=torch.Generator().manual_seed(0)).softmax(-1)
    want = cls_attention_maps(weights, (4, 4))
    mistakes = {
        "the [CLS] column was taken (how much each token attends TO [CLS]) instead of the "
        "[CLS] row (how much [CLS] attends to each patch)": weights[..., 1:, 0].reshape(2, 3, 4, 4),
        "the slice keeps the [CLS] column and drops the last patch (take weights[..., 0, 1:])": (
            weights[..., 0, :-1].reshape(2, 3, 4, 4)
        ),
        "the grid is filled column by column; patches are numbered row by row": (
            weights[..., 0, 1:].reshape(2, 3, 4, 4).transpose(-2, -1)
        ),
    }
    check_close(fn(weights, (4, 4)), want, name="cls_attention_map(weights, (4, 4))",
                mistakes=mistakes, dims=("B", "H", "gh", "gw"))  # fmt: skip
    passed("cls_attention_map passes the visible checks")


def check_test_accuracy(model: nn.Module, images: Tensor, labels: Tensor) -> None:
    """Accuracy of a trained classifier on held-out digits; at least 95 % is required."""
    model.eval()
    with torch.no_grad():
        predictions = torch.cat([model(x).argmax(-1) for x in images.split(256)])
    accuracy = (predictions == labels).float().mean().item()
    if accuracy < 0.95:
        raise CheckFailed(
            f"test accuracy {accuracy:.1%} is below 95%: check the learning rate and the number "
            "of epochs, that the model is in train() mode while training, and that the ViT "
            "passes its check"
        )
    passed(f"test accuracy {accuracy:.1%} (at least 95% needed)")


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
