"""Visible checks for assignment A5 (patches of any size, a simple ViT, windows of padded maps,
patch expanding, cross-covariance attention, training).

Each ``check_*`` runs the student's code on the inputs recorded in
``recorded/a5_vision_transformers.pt`` (weights included) and compares with the recorded
reference answer; when they differ it names the usual mistake whose recorded answer the student's
equals (padding at the top, rows and columns swapped in the positions, a [CLS]-style first token,
padding keys left in the mask, q and k not normalised). The reference's code is not here, nor
anywhere in ``course_lib``: the answers are data, recorded by the instructor
(``autograder/suites/a5_vision_transformers/a5_record.py``), and the hidden tests draw other
inputs. A failure raises :class:`~course_lib.checks.CheckFailed`; a success prints one line.

Shape legend: B batch, C channels, H x W map (image) size, P patch size, N tokens, ws window
size, nW windows, d head dim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .core import (
    CheckFailed,
    call_student,
    check_close,
    check_gradients,
    check_shape,
    close,
    passed,
    recorded,
)

NOT_DIVISIBLE = (
    "The padding does not reach multiples of the {what}: pad by (-H) % {size} rows and (-W) % "
    "{size} columns. Are the paddings of H and W swapped? F.pad lists the last dimension first: "
    "{pad}"
)


def _recorded() -> dict[str, Any]:
    return recorded("a5_vision_transformers")


_call = call_student


def _load(module: nn.Module, state: dict[str, Tensor], what: str) -> None:
    try:
        module.load_state_dict(state)
    except RuntimeError as error:
        raise CheckFailed(
            f"the reference's weights do not fit your {what} (keep the given __init__): {error}"
        ) from None


def _diagnose(actual: Any, want: Tensor, mistakes: Mapping[str, Tensor], name: str) -> None:
    """Name the usual mistake whose recorded answer ``actual`` equals, whatever its shape."""
    if not isinstance(actual, Tensor) or close(actual, want):
        return
    for description, wrong in mistakes.items():
        if close(actual, wrong):
            raise CheckFailed(f"{name} is wrong: it looks like {description}")


def _check(actual: Any, want: Tensor, mistakes: Mapping[str, Tensor], name: str,
           dims: tuple[str, ...], atol: float = 1e-5) -> None:  # fmt: skip
    _diagnose(actual, want, mistakes, name)
    check_close(actual, want, name=name, dims=dims, atol=atol)


# --------------------------------------------------------------------------------------------
# 1. patchify_padded
# --------------------------------------------------------------------------------------------


def check_patchify_padded(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``patchify_padded(images (B, C, H, W), P)`` -> (B, N, C * P * P), zero-padded at the
    bottom and on the right."""
    for case in _recorded()["patchify_padded"]["cases"]:
        images, P = case["images"], case["patch_size"]
        name = f"patchify_padded(images {tuple(images.shape)}, {P})"
        hint = NOT_DIVISIBLE.format(what="patch size", size="P",
                                    pad="(0, pad_W, 0, pad_H) for (B, C, H, W)")  # fmt: skip
        got = _call(fn, images.clone(), P, what=name, hint=hint)
        _check(got, case["want"], case["mistakes"], name, dims=("B", "N", "C*P*P"))
    passed("patchify_padded pads at the bottom and on the right, as much as needed")


# --------------------------------------------------------------------------------------------
# 2. sincos_2d and SimpleViT
# --------------------------------------------------------------------------------------------


def check_sincos_2d(fn: Callable[..., Tensor]) -> None:
    """``sincos_2d(gh, gw, dim)`` -> (gh * gw, dim) float32; ValueError if dim % 4."""
    d = _recorded()["sincos_2d"]
    (gh, gw), dim = d["grid"], d["dim"]
    name = f"sincos_2d({gh}, {gw}, {dim})"
    got = _call(fn, gh, gw, dim, what=name)
    if isinstance(got, Tensor) and got.dtype != torch.float32:
        raise CheckFailed(f"{name} should be float32, got {got.dtype}")
    _check(got, d["want"], d["mistakes"], name, dims=("gh*gw", "dim"))
    try:
        fn(2, 2, dim + 2)
    except ValueError:
        pass
    except Exception as error:  # noqa: BLE001
        raise CheckFailed(
            f"sincos_2d(2, 2, {dim + 2}) raised {type(error).__name__}, expected ValueError "
            "(dim is not a multiple of 4)"
        ) from None
    else:
        raise CheckFailed(f"sincos_2d(2, 2, {dim + 2}) should raise ValueError (dim % 4 != 0)")
    passed("sincos_2d gives each token its column's and its row's sines and cosines")


def check_simple_vit(vit_cls: type[nn.Module]) -> None:
    """``SimpleViT(**sizes)(images)`` -> logits; ``return_attn=True`` -> (logits, [weights])."""
    d = _recorded()["simple_vit"]
    mine = _call(vit_cls, **d["sizes"], what="SimpleViT(...)")
    _load(mine, d["state"], "SimpleViT")
    mine.eval()
    images = d["images"]
    name = f"SimpleViT(images {tuple(images.shape)}) logits"
    hint = ("The grid has ceil(H / P) rows and ceil(W / P) columns of patches, one position "
            "per patch")  # fmt: skip
    with torch.no_grad():
        logits = _call(mine, images, what=f"SimpleViT.forward(images {tuple(images.shape)})",
                       hint=hint)  # fmt: skip
    _check(logits, d["want"], d["mistakes"], name, dims=("B", "num_classes"), atol=1e-4)
    with torch.no_grad():
        out = _call(mine, images, return_attn=True, what="SimpleViT.forward(return_attn=True)")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailed("SimpleViT(images, return_attn=True) should return (logits, maps)")
    maps = out[1]
    if not isinstance(maps, list | tuple) or len(maps) != len(d["want_maps"]):
        raise CheckFailed(
            f"SimpleViT(images, return_attn=True)[1] should be a list of the {len(d['want_maps'])} "
            "blocks' attention weights"
        )
    check_close(out[0], d["want"], name="the logits with return_attn=True", atol=1e-4)
    for layer, (got, want) in enumerate(zip(maps, d["want_maps"])):
        check_close(got, want, name=f"the attention weights of block {layer}",
                    dims=("B", "H", "N", "N"), atol=1e-4)  # fmt: skip
    mine.train()
    _call(mine, images, what="SimpleViT.forward(images)").sum().backward()
    check_gradients({"patch_embed.weight": mine.patch_embed.weight,
                     "head.weight": mine.head.weight})  # fmt: skip
    passed("SimpleViT classifies the mean token, with 2-D sin-cos positions")


# --------------------------------------------------------------------------------------------
# 3. Windows of padded maps, the mask, patch expanding
# --------------------------------------------------------------------------------------------


def check_window_partition_padded(partition: Callable[..., Tensor],
                                  reverse: Callable[..., Tensor]) -> None:  # fmt: skip
    """``window_partition_padded(x (B, H, W, C), ws)`` -> (B * nW, ws, ws, C) and
    ``window_reverse_cropped(windows, ws, H, W)`` -> (B, H, W, C)."""
    for case in _recorded()["windows"]["cases"]:
        x, ws = case["x"], case["window_size"]
        B, H, W, C = x.shape
        name = f"window_partition_padded(x {tuple(x.shape)}, {ws})"
        hint = NOT_DIVISIBLE.format(what="window size", size="ws",
                                    pad="(0, 0, 0, pad_W, 0, pad_H) for (B, H, W, C)")  # fmt: skip
        got = _call(partition, x.clone(), ws, what=name, hint=hint)
        _check(got, case["want"], case["mistakes"], name, dims=("B*nW", "ws", "ws", "C"))
        name = f"window_reverse_cropped(windows {tuple(case['want'].shape)}, {ws}, {H}, {W})"
        back = _call(reverse, case["want"].clone(), ws, H, W, what=name)
        _check(back, x, case["reverse_mistakes"], name, dims=("B", "H", "W", "C"))
    passed("windows of padded maps, and back without the padding")


def check_shifted_window_mask(fn: Callable[..., Tensor]) -> None:
    """``shifted_window_mask_padded(H, W, ws, shift)`` -> (nW, N, N) bool keep-mask."""
    for case in _recorded()["shifted_window_mask"]["cases"]:
        H, W, ws, s = case["args"]
        name = f"shifted_window_mask_padded({H}, {W}, {ws}, {s})"
        got = _call(fn, H, W, ws, s, what=name)
        want = case["want"]
        check_shape(got, tuple(want.shape), name=name, dims=("nW", "N", "N"))
        if got.dtype != torch.bool:
            raise CheckFailed(f"{name} should be a boolean keep-mask, got {got.dtype}")
        if torch.equal(got, want):
            continue
        for description, wrong in case["mistakes"].items():
            if torch.equal(got, wrong):
                raise CheckFailed(f"{name} is wrong: it looks like {description}")
        window, query, key = (int(i) for i in torch.nonzero(got != want)[0])
        raise CheckFailed(
            f"{name} differs from the expected mask in {int((got != want).sum())} entries, first "
            f"in window {window}, query {query}, key {key} (tokens numbered row by row in the "
            "window)"
        )
    passed("the shifted-window mask keeps regions apart and hides the padding keys")


def check_patch_expanding(layer_cls: type[nn.Module]) -> None:
    """``PatchExpanding(dim=C)(x (B, H, W, C))`` -> (B, 2H, 2W, C/2)."""
    d = _recorded()["patch_expanding"]
    mine = _call(layer_cls, dim=d["dim"], what=f"PatchExpanding(dim={d['dim']})")
    _load(mine, d["state"], "PatchExpanding")
    x = d["x"]
    name = f"PatchExpanding(x {tuple(x.shape)})"
    got = _call(mine, x, what=name)
    _check(got, d["want"], d["mistakes"], name, dims=("B", "2H", "2W", "C/2"), atol=1e-4)
    got.sum().backward()
    check_gradients({"expand.weight": mine.expand.weight})
    passed("PatchExpanding lays each token's channels out as a 2 x 2 block")


# --------------------------------------------------------------------------------------------
# 4. XCAttention
# --------------------------------------------------------------------------------------------


def check_xca(layer_cls: type[nn.Module]) -> None:
    """``XCAttention(dim, num_heads)(x (B, N, C))`` -> (B, N, C); with ``return_attn=True``
    also the weights (B, heads, d, d)."""
    d = _recorded()["xca"]
    mine = _call(layer_cls, dim=d["dim"], num_heads=d["num_heads"],
                 what=f"XCAttention(dim={d['dim']}, num_heads={d['num_heads']})")  # fmt: skip
    _load(mine, d["state"], "XCAttention")
    mine.eval()
    x = d["x"]
    name = f"XCAttention(x {tuple(x.shape)})"
    with torch.no_grad():
        y = _call(mine, x, what=name)
    _check(y, d["want"], d["mistakes"], name, dims=("B", "N", "C"), atol=1e-4)
    with torch.no_grad():
        out = _call(mine, x, return_attn=True, what="XCAttention(x, return_attn=True)")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailed("XCAttention(x, return_attn=True) should return (y, weights)")
    check_close(out[0], d["want"], name="the output with return_attn=True", atol=1e-4)
    _check(out[1], d["want_weights"], d["weight_mistakes"], "the XCA weights",
           dims=("B", "heads", "d", "d"))  # fmt: skip
    mine.train()
    _call(mine, x, what=name).sum().backward()
    check_gradients({"temperature": mine.temperature, "qkv.weight": mine.qkv.weight})
    passed("XCAttention: normalised cross-covariance attention over channels")


# --------------------------------------------------------------------------------------------
# 5. Training
# --------------------------------------------------------------------------------------------

THRESHOLD = 0.93


def check_test_accuracy(model: nn.Module, images: Tensor, labels: Tensor) -> None:
    """Accuracy of a trained classifier on held-out digits; the grader's bar is 93 % (the mean
    over two splits of its own)."""
    model.eval()
    with torch.no_grad():
        predictions = torch.cat([model(x).argmax(-1) for x in images.split(256)])
    accuracy = (predictions == labels).float().mean().item()
    if accuracy < THRESHOLD:
        raise CheckFailed(
            f"test accuracy {accuracy:.1%} is below {THRESHOLD:.0%}: check the learning rate and "
            "the number of epochs, that the model is in train() mode while training, and that "
            "SimpleViT passes its check"
        )
    passed(f"test accuracy {accuracy:.1%} (the grader requires at least {THRESHOLD:.0%} on "
           "average over two splits of its own)")  # fmt: skip


# A blank answer (NotImplementedError) fails its check with a message.
from ._blank import report_unimplemented  # noqa: E402

report_unimplemented(globals())
