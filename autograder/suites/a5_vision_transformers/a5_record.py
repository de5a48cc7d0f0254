"""Record A5's visible-check data: the key's answers, and the answers of the usual mistakes.

CANARY-HIDDEN-A5-3b8d40f6: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

    python autograder/suites/a5_vision_transformers/a5_record.py

writes ``course_lib/checks/recorded/a5_vision_transformers.pt``: for each check, its inputs
(weights included), the key's answer and ``{message: answer}`` of the usual mistakes. The visible
checks (``course_lib/checks/a5.py``) compare the student's answer with these, so they name the
mistakes without the key's code; the hidden suite draws fresh inputs.
``tests/course/test_a5_key.py`` checks that the file is what this script writes today.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import a5_key as key  # noqa: E402

from course_lib.vision import patchify, window_partition, window_reverse  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "course_lib" / "checks" / "recorded" / "a5_vision_transformers.pt"


def _perturbed(module: nn.Module, g: torch.Generator) -> nn.Module:
    """Weights drawn from ``g``; LayerNorm gains around 1 but not 1, so a missing norm shows."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            base = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(base + 0.5 * torch.randn(p.shape, generator=g))
    return module.eval()


def _state(module: nn.Module) -> dict[str, Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def _ceil(length: int, multiple: int) -> int:
    return math.ceil(length / multiple) * multiple


# --------------------------------------------------------------------------------------------
# patchify_padded
# --------------------------------------------------------------------------------------------


def patchify_mistakes(images: Tensor, P: int) -> dict[str, Tensor]:
    H, W = images.shape[-2:]
    ph, pw = (-H) % P, (-W) % P
    out = {
        "the images are padded at the top and on the left: pad at the bottom and on the right, "
        "F.pad(images, (0, pad_W, 0, pad_H))": patchify(F.pad(images, (pw, 0, ph, 0)), P),
        "a side that is already a multiple of P gets a whole patch of zeros more: pad by "
        "(-H) % P, which is 0 then, not P - H % P": patchify(
            F.pad(images, (0, P - W % P, 0, P - H % P)), P
        ),
        "the images are cropped to whole patches, not padded: pad up to ceil(H / P) * P": patchify(
            images[..., : H - H % P, : W - W % P], P
        ),
        "the patch pixels are flattened in the order (P, P, C): flatten each patch as (C, P, P), "
        "as patchify does": _patchify_channels_last(F.pad(images, (0, pw, 0, ph)), P),
        "the patches are numbered column by column: number them row by row": _patchify_by_columns(
            F.pad(images, (0, pw, 0, ph)), P
        ),
    }
    want = key.patchify_padded(images, P)
    return {m: a for m, a in out.items() if a.shape != want.shape or not torch.equal(a, want)}


def _patchify_channels_last(images: Tensor, P: int) -> Tensor:
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // P, P, W // P, P).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, (H // P) * (W // P), C * P * P)


def _patchify_by_columns(images: Tensor, P: int) -> Tensor:
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // P, P, W // P, P).permute(0, 4, 2, 1, 3, 5)
    return x.reshape(B, (H // P) * (W // P), C * P * P)


def patchify_padded() -> dict:
    g = torch.Generator().manual_seed(50)
    cases = []
    for shape, P in [((2, 3, 7, 10), 4), ((1, 2, 6, 7), 3)]:  # odd and even sides mixed
        images = torch.randn(*shape, generator=g)
        cases.append({"images": images, "patch_size": P, "want": key.patchify_padded(images, P),
                      "mistakes": patchify_mistakes(images, P)})  # fmt: skip
    return {"cases": cases}


# --------------------------------------------------------------------------------------------
# sincos_2d
# --------------------------------------------------------------------------------------------


def sincos_variant(gh: int, gw: int, dim: int, mistake: str, temperature: float = 1e4) -> Tensor:
    F_ = dim // 4
    f = torch.arange(F_, dtype=torch.float32)
    exponent = {"big_vision": f / (F_ - 1), "positive": -f / F_, "half": f / (2 * F_)}
    omega = temperature ** (-exponent.get(mistake, f / F_))
    indexing = "xy" if mistake == "xy" else "ij"
    if indexing == "xy":
        cols, rows = torch.meshgrid(torch.arange(gw), torch.arange(gh), indexing="ij")
    else:
        rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    r = rows.reshape(-1, 1).float() * omega
    c = cols.reshape(-1, 1).float() * omega
    if mistake == "rows_first":
        return torch.cat([r.sin(), r.cos(), c.sin(), c.cos()], dim=1)
    if mistake == "interleaved":
        return torch.stack([c.sin(), c.cos(), r.sin(), r.cos()], dim=-1).flatten(1)
    if mistake == "per_axis_interleaved":  # the book's 1-D table for each axis, side by side
        return torch.cat([torch.stack([c.sin(), c.cos()], dim=-1).flatten(1),
                          torch.stack([r.sin(), r.cos()], dim=-1).flatten(1)], dim=1)  # fmt: skip
    if mistake == "sin_cos_per_axis_swapped":
        return torch.cat([c.sin(), r.sin(), c.cos(), r.cos()], dim=1)
    return torch.cat([c.sin(), c.cos(), r.sin(), r.cos()], dim=1)


SINCOS_MISTAKES = {
    "rows_first": "the rows come first: the column's sines and cosines come first, "
    "[sin(c omega), cos(c omega), sin(r omega), cos(r omega)]",
    "xy": "the tokens are numbered column by column (meshgrid indexing='xy'?): number them row "
    "by row, indexing='ij'",
    "interleaved": "sines and cosines are interleaved channel by channel: concatenate four blocks "
    "of F channels each",
    "per_axis_interleaved": "each axis's sines and cosines alternate, as in the 1-D "
    "sinusoidal_positional_encoding (sin, cos, sin, cos, ...): here each axis has a block of F "
    "sines, then a block of F cosines",
    "sin_cos_per_axis_swapped": "the blocks are ordered sin(c), sin(r), cos(c), cos(r): the order "
    "is sin(c omega), cos(c omega), sin(r omega), cos(r omega)",
    "big_vision": "the frequencies use the exponent f / (F - 1): omega_f = temperature ** (-f / F)",
    "positive": "the frequencies grow: omega_f = temperature ** (-f / F), with a minus sign",
    "half": "the frequencies use the exponent f / (2F) (dim / 2 frequencies?): "
    "omega_f = temperature ** (-f / F) with F = dim / 4",
}


def sincos_2d() -> dict:
    gh, gw, dim = 3, 5, 16
    want = key.sincos_2d(gh, gw, dim)
    mistakes = {message: sincos_variant(gh, gw, dim, name)
                for name, message in SINCOS_MISTAKES.items()}  # fmt: skip
    return {"grid": (gh, gw), "dim": dim, "want": want, "mistakes": mistakes}


# --------------------------------------------------------------------------------------------
# SimpleViT
# --------------------------------------------------------------------------------------------

VIT_SIZES = dict(patch_size=2, in_channels=2, num_classes=5, dim=16, depth=2, num_heads=2,
                 mlp_dim=24)  # fmt: skip


def vit_variant(model: key.SimpleViT, images: Tensor, mistake: str) -> Tensor:
    H, W = images.shape[-2:]
    P = model.patch_size
    gh, gw = math.ceil(H / P), math.ceil(W / P)
    x = model.patch_embed(key.patchify_padded(images, P))
    if mistake == "transposed_grid":
        x = x + key.sincos_2d(gw, gh, model.dim)
    elif mistake != "no_positions":
        x = x + key.sincos_2d(gh, gw, model.dim)
    for block in model.blocks:
        x, _ = block(x)
    if mistake == "first_token":
        return model.head(model.norm(x)[:, 0])
    if mistake == "norm_after_mean":
        return model.head(model.norm(x.mean(dim=1)))
    if mistake == "no_norm":
        return model.head(x.mean(dim=1))
    if mistake == "sum":
        return model.head(model.norm(x).sum(dim=1))
    return model.head(model.norm(x).mean(dim=1))


VIT_MISTAKES = {
    "first_token": "the first token is classified, as a [CLS] token would be: the simple ViT has "
    "no [CLS]; classify the mean of all tokens",
    "norm_after_mean": "the final LayerNorm is applied after the mean: normalise every token, "
    "then average, head(norm(x).mean(dim=1))",
    "no_norm": "the final LayerNorm is missing: head(norm(x).mean(dim=1))",
    "sum": "the tokens are summed, not averaged: head(norm(x).mean(dim=1))",
    "no_positions": "the position embeddings are not added: x = patch_embed(patches) + "
    "sincos_2d(grid_height, grid_width, dim)",
    "transposed_grid": "the positions of a transposed grid are added: sincos_2d(grid_height, "
    "grid_width, ...) with ceil(H / P) rows and ceil(W / P) columns",
}


def simple_vit() -> dict:
    g = torch.Generator().manual_seed(51)
    ref = _perturbed(key.SimpleViT(**VIT_SIZES), g)
    images = torch.rand(3, 2, 7, 6, generator=g)  # odd and even sides, neither a multiple of P
    with torch.no_grad():
        want, maps = ref(images, return_attn=True)
        mistakes = {message: vit_variant(ref, images, name)
                    for name, message in VIT_MISTAKES.items()}  # fmt: skip
    return {"sizes": dict(VIT_SIZES), "state": _state(ref), "images": images, "want": want,
            "want_maps": maps, "mistakes": mistakes}  # fmt: skip


# --------------------------------------------------------------------------------------------
# Windows of padded maps
# --------------------------------------------------------------------------------------------


def partition_mistakes(x: Tensor, ws: int) -> dict[str, Tensor]:
    H, W = x.shape[1:3]
    ph, pw = (-H) % ws, (-W) % ws
    by_columns = F.pad(x, (0, 0, 0, pw, 0, ph))
    B, Hp, Wp, C = by_columns.shape
    by_columns = by_columns.reshape(B, Hp // ws, ws, Wp // ws, ws, C).permute(0, 3, 1, 2, 4, 5)
    out = {
        "the map is padded at the top and on the left: pad at the bottom and on the right, "
        "F.pad(x, (0, 0, 0, pad_W, 0, pad_H))": window_partition(
            F.pad(x, (0, 0, pw, 0, ph, 0)), ws
        ),
        "a side that is already a multiple of ws gets a whole window of zeros more: pad by "
        "(-H) % ws, not ws - H % ws": window_partition(
            F.pad(x, (0, 0, 0, ws - W % ws, 0, ws - H % ws)), ws
        ),
        "the map is cropped to whole windows, not padded: pad up to ceil(H / ws) * ws": (
            window_partition(x[:, : H - H % ws, : W - W % ws], ws)
        ),
        "the windows are numbered column by column: number them row by row": by_columns.reshape(
            -1, ws, ws, C
        ),
        "the padded map is cut into windows with a plain reshape: a window is then ws * ws "
        "pixels in reading order, not a ws x ws square; reshape to (B, Hp / ws, ws, Wp / ws, "
        "ws, C), swap the in-window-row and window-column axes (transpose(2, 3)), then reshape "
        "to (B * nW, ws, ws, C), as window_partition does": F.pad(x, (0, 0, 0, pw, 0, ph)).reshape(
            -1, ws, ws, C
        ),
    }
    want = key.window_partition_padded(x, ws)
    return {m: a for m, a in out.items() if a.shape != want.shape or not torch.equal(a, want)}


def reverse_mistakes(windows: Tensor, ws: int, H: int, W: int) -> dict[str, Tensor]:
    Hp, Wp = _ceil(H, ws), _ceil(W, ws)
    padded = window_reverse(windows, ws, Hp, Wp)
    C = windows.shape[-1]
    by_columns = windows.reshape(-1, Wp // ws, Hp // ws, ws, ws, C).permute(0, 2, 3, 1, 4, 5)
    out = {
        "the padding is not cropped: return x[:, :height, :width]": padded,
        "the map is cropped from the top and left: the padding is at the bottom and on the "
        "right, keep x[:, :height, :width]": padded[:, Hp - H :, Wp - W :],
        "the windows are put back column by column: windows are numbered row by row": (
            by_columns.reshape(-1, Hp, Wp, C)[:, :H, :W]
        ),
        "the windows are put back with a plain reshape: reshape to (B, Hp / ws, Wp / ws, ws, "
        "ws, C), swap the window-column and in-window-row axes back (transpose(2, 3)), then "
        "reshape to (B, Hp, Wp, C), as window_reverse does": (
            windows.reshape(-1, Hp, Wp, C)[:, :H, :W]
        ),
    }
    want = key.window_reverse_cropped(windows, ws, H, W)
    return {m: a for m, a in out.items() if a.shape != want.shape or not torch.equal(a, want)}


def windows() -> dict:
    g = torch.Generator().manual_seed(52)
    cases = []
    for shape, ws in [((2, 7, 10, 3), 4), ((1, 6, 5, 2), 3)]:  # odd and even sides mixed
        x = torch.randn(*shape, generator=g)
        H, W = shape[1:3]
        parts = key.window_partition_padded(x, ws)
        cases.append({"x": x, "window_size": ws, "want": parts,
                      "mistakes": partition_mistakes(x, ws),
                      "reverse_mistakes": reverse_mistakes(parts, ws, H, W)})  # fmt: skip
    return {"cases": cases}


# --------------------------------------------------------------------------------------------
# The shifted-window mask of a padded map
# --------------------------------------------------------------------------------------------


def mask_variant(H: int, W: int, ws: int, s: int, mistake: str) -> Tensor:
    Hp, Wp = _ceil(H, ws), _ceil(W, ws)

    def regions(length: int) -> Tensor:
        index = torch.arange(length)
        return (index >= length - ws).long() + (index >= length - s).long()

    def real(length: int, padded: int) -> Tensor:
        index = torch.arange(padded)
        if mistake == "not_rolled":
            return index < length
        if mistake == "rolled_back":
            return (index - s) % padded < length
        return (index + s) % padded < length

    if mistake == "unpadded_regions":  # regions of H x W, the padding labelled region 0
        label = regions(H)[:, None] * 3 + regions(W)[None, :]
        label = F.pad(label, (0, Wp - W, 0, Hp - H))
    elif mistake == "rolled_regions":  # the labels rolled with the map: read at (i + s) mod Lp
        label = regions(Hp)[:, None] * 3 + regions(Wp)[None, :]
        label = torch.roll(label, (-s, -s), dims=(0, 1))
    else:
        label = regions(Hp)[:, None] * 3 + regions(Wp)[None, :]
    is_real = real(H, Hp)[:, None] & real(W, Wp)[None, :]
    label = window_partition(label[None, :, :, None], ws).reshape(-1, ws * ws)
    is_real = window_partition(is_real[None, :, :, None], ws).reshape(-1, ws * ws)
    keep = label[:, :, None] == label[:, None, :]
    if mistake == "queries":
        keep = keep & is_real[:, :, None]
    elif mistake != "no_padding":
        keep = keep & is_real[:, None, :]
    if mistake == "no_diagonal":
        return keep
    return keep | torch.eye(ws * ws, dtype=torch.bool)


MASK_MISTAKES = {
    "no_padding": "padding keys are not masked: a query may attend to key b only if b is a real "
    "token of the image",
    "queries": "the padding queries are masked, not the padding keys: mask the columns (keys) "
    "of padding tokens, keep[w, a, b] needs b to be real",
    "no_diagonal": "a token may not attend to itself when it is padding: every token always "
    "attends to itself (the diagonal is True)",
    "unpadded_regions": "the regions are measured on the unpadded lengths: the three regions of "
    "an axis split the padded length Lp",
    "not_rolled": "the padding is where it was before the roll: rolled position i came from "
    "(i + shift) mod Lp of the padded map",
    "rolled_back": "the padding is rolled the wrong way: rolled position i came from "
    "(i + shift) mod Lp, not (i - shift) mod Lp",
    "rolled_regions": "the region labels are rolled with the map (read at the source position "
    "(i + shift) mod Lp): as in the book, the regions are fixed slices of the rolled map, "
    "position i of the rolled map lies in the region of i itself",
}


def shifted_window_mask() -> dict:
    cases = []
    for H, W, ws, s in [(7, 10, 4, 2), (5, 6, 3, 1), (5, 8, 4, 0)]:
        want = key.shifted_window_mask_padded(H, W, ws, s)
        mistakes = {}
        for name, message in MASK_MISTAKES.items():
            wrong = mask_variant(H, W, ws, s, name)
            if not torch.equal(wrong, want):
                mistakes[message] = wrong
        cases.append({"args": (H, W, ws, s), "want": want, "mistakes": mistakes})
    return {"cases": cases}


# --------------------------------------------------------------------------------------------
# PatchExpanding
# --------------------------------------------------------------------------------------------


def expanding_variant(layer: key.PatchExpanding, x: Tensor, mistake: str) -> Tensor:
    B, H, W, C = x.shape
    y = layer.expand(x)
    if mistake == "merging_order":  # chunk 2 dx + dy
        y = y.reshape(B, H, W, 2, 2, C // 2).permute(0, 1, 4, 2, 3, 5)
    elif mistake == "channels_first":  # (c, dy, dx)
        y = y.reshape(B, H, W, C // 2, 2, 2).permute(0, 1, 4, 2, 5, 3)
    elif mistake != "no_permute":
        y = y.reshape(B, H, W, 2, 2, C // 2).permute(0, 1, 3, 2, 4, 5)
    y = y.reshape(B, 2 * H, 2 * W, C // 2)
    return y if mistake == "no_norm" else layer.norm(y)


EXPANDING_MISTAKES = {
    "merging_order": "the 2 x 2 block is laid out column first (patch merging's order): chunk "
    "2 dy + dx goes to row 2i + dy, column 2j + dx",
    "channels_first": "the 2C channels are read as (C/2, 2, 2): they are four chunks of C/2 "
    "channels, (2, 2, C/2)",
    "no_permute": "the expanded tokens are reshaped to (B, 2H, 2W, C/2) without moving the "
    "block axes: permute (B, H, dy, W, dx, C/2) first",
    "no_norm": "the LayerNorm is missing: norm over the C/2 channels of the output",
}


def patch_expanding() -> dict:
    g = torch.Generator().manual_seed(53)
    ref = _perturbed(key.PatchExpanding(dim=6), g)
    x = torch.randn(2, 3, 4, 6, generator=g)
    with torch.no_grad():
        want = ref(x)
        mistakes = {message: expanding_variant(ref, x, name)
                    for name, message in EXPANDING_MISTAKES.items()}  # fmt: skip
    return {"dim": 6, "state": _state(ref), "x": x, "want": want, "mistakes": mistakes}


# --------------------------------------------------------------------------------------------
# XCAttention
# --------------------------------------------------------------------------------------------


def xca_variant(layer: key.XCAttention, x: Tensor, mistake: str) -> tuple[Tensor, Tensor]:
    B, N, C = x.shape
    h = layer.num_heads
    d = C // h
    if mistake == "heads_interleaved":
        qkv = layer.qkv(x).reshape(B, N, 3, d, h).permute(2, 0, 4, 3, 1)
    else:
        qkv = layer.qkv(x).reshape(B, N, 3, h, d).permute(2, 0, 3, 4, 1)  # (3, B, h, d, N)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if mistake == "channel_norm":
        q, k = F.normalize(q, dim=-2), F.normalize(k, dim=-2)
    elif mistake != "no_norm":
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    scores = q @ k.transpose(-2, -1)
    if mistake == "sqrt_d":
        scores = scores / math.sqrt(d)
    elif mistake == "both":
        scores = scores * layer.temperature / math.sqrt(d)
    elif mistake == "no_temperature":
        pass
    else:
        scores = scores * layer.temperature
    weights = torch.softmax(scores, dim=-2 if mistake == "softmax_axis" else -1)
    y = (weights.transpose(-2, -1) if mistake == "transposed" else weights) @ v
    y = y.permute(0, 3, 1, 2).reshape(B, N, C)
    return (y if mistake == "no_proj" else layer.proj(y)), weights


XCA_MISTAKES = {
    "no_norm": "q and k are not L2-normalised: normalise each channel over the N tokens, "
    "F.normalize(q, dim=-1) on (B, heads, d, N)",
    "channel_norm": "q and k are normalised over the channels: normalise each channel over the "
    "N tokens",
    "sqrt_d": "the scores are divided by sqrt(d): XCA multiplies them by the learned temperature "
    "instead",
    "both": "the scores are scaled by both the temperature and 1 / sqrt(d): multiply by the "
    "temperature only",
    "no_temperature": "the scores are not multiplied by the learned temperature: "
    "A = softmax(temperature * q_hat^T k_hat), one temperature per head",
    "softmax_axis": "the softmax runs over the wrong axis: each row A[i, :] (the last axis) sums "
    "to 1",
    "transposed": "A is applied transposed: y[n, i] = sum_j A[i, j] v[n, j], that is weights @ v "
    "on (B, heads, d, N)",
    "no_proj": "the output projection is missing: y = proj(heads side by side)",
    "heads_interleaved": "the heads are interleaved: head h holds the channels h d ... "
    "(h + 1) d - 1 of Q, K and V",
}


def xca() -> dict:
    g = torch.Generator().manual_seed(54)
    ref = _perturbed(key.XCAttention(dim=12, num_heads=3), g)
    with torch.no_grad():
        ref.temperature.copy_(torch.tensor([0.7, 2.5, 4.0]).view(3, 1, 1))
    x = torch.randn(2, 7, 12, generator=g)  # N > d
    with torch.no_grad():
        want, weights = ref(x, return_attn=True)
        mistakes, weight_mistakes = {}, {}
        for name, message in XCA_MISTAKES.items():
            y, w = xca_variant(ref, x, name)
            mistakes[message] = y
            if not torch.allclose(w, weights):
                weight_mistakes[message] = w
    return {"dim": 12, "num_heads": 3, "state": _state(ref), "x": x, "want": want,
            "want_weights": weights, "mistakes": mistakes,
            "weight_mistakes": weight_mistakes}  # fmt: skip


def record() -> dict:
    return {
        "patchify_padded": patchify_padded(),
        "sincos_2d": sincos_2d(),
        "simple_vit": simple_vit(),
        "windows": windows(),
        "shifted_window_mask": shifted_window_mask(),
        "patch_expanding": patch_expanding(),
        "xca": xca(),
    }


if __name__ == "__main__":
    data = record()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, OUT)
    for case in data["shifted_window_mask"]["cases"]:
        print(f"mask {case['args']}: {len(case['mistakes'])} of {len(MASK_MISTAKES)} differ")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
