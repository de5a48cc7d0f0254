"""A5's answer key (``autograder/suites/a5_vision_transformers/a5_key.py``) against independent
oracles.

- ``patchify_padded`` followed by one matrix product equals a strided ``F.conv2d`` on the image
  copied into a zero canvas (the convolution form of the patch embedding);
- ``sincos_2d`` equals the formula evaluated entry by entry with ``math.sin`` / ``math.cos``;
- ``SimpleViT`` equals a forward pass assembled from the convolution embedding, the entry-by-entry
  positions and the blocks, and never depends on the padding's position among the images;
- ``window_partition_padded`` equals slicing the zero canvas window by window in a loop, and
  ``window_reverse_cropped`` undoes it;
- ``shifted_window_mask_padded`` equals Swin's own construction (region slices on the padded map,
  ``torch.roll`` of the padding map), pair by pair, and the book's mask where nothing is padded;
- ``PatchExpanding`` equals a loop that places each chunk of C/2 channels, then ``F.layer_norm``;
- ``XCAttention`` equals XCiT's formula written per image and head, ``V A^T`` with
  ``A = softmax(tau * Q_hat^T K_hat)``;
- the recommended training defaults clear the grader's bar on the mean of two splits (slow);
- (the recorded answers of the visible checks: test_recorded_answers.py).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from keys import load

key = load("a5_vision_transformers", "a5_key")


def canvas(x: torch.Tensor, multiple: int, *, channels_last: bool) -> torch.Tensor:
    """``x`` copied into the top-left corner of zeros whose sides are multiples of ``multiple``."""
    H, W = (x.shape[1], x.shape[2]) if channels_last else (x.shape[-2], x.shape[-1])
    Hp, Wp = math.ceil(H / multiple) * multiple, math.ceil(W / multiple) * multiple
    if channels_last:
        out = torch.zeros(x.shape[0], Hp, Wp, x.shape[3], dtype=x.dtype)
        out[:, :H, :W] = x
    else:
        out = torch.zeros(*x.shape[:-2], Hp, Wp, dtype=x.dtype)
        out[..., :H, :W] = x
    return out


SIDES = [(7, 10, 4), (6, 7, 3), (5, 8, 2), (9, 4, 4), (8, 12, 4)]


@pytest.mark.parametrize(("H", "W", "P"), SIDES)
def test_patchify_padded_is_the_strided_convolution_on_a_zero_canvas(H, W, P):
    g = torch.Generator().manual_seed(H * 100 + W)
    images = torch.randn(2, 3, H, W, generator=g, dtype=torch.float64)
    weight = torch.randn(5, 3, P, P, generator=g, dtype=torch.float64)
    bias = torch.randn(5, generator=g, dtype=torch.float64)
    want = F.conv2d(canvas(images, P, channels_last=False), weight, bias, stride=P)
    got = key.patchify_padded(images, P) @ weight.flatten(1).T + bias
    torch.testing.assert_close(got, want.flatten(2).transpose(1, 2))


@pytest.mark.parametrize(("gh", "gw", "dim", "temperature"), [(3, 5, 16, 1e4), (4, 2, 8, 100.0),
                                                               (1, 6, 24, 1e4)])  # fmt: skip
def test_sincos_2d_is_the_formula_entry_by_entry(gh, gw, dim, temperature):
    F_ = dim // 4
    got = key.sincos_2d(gh, gw, dim, temperature)
    assert got.shape == (gh * gw, dim) and got.dtype == torch.float32
    for r in range(gh):
        for c in range(gw):
            row = got[r * gw + c]
            for f in range(F_):
                omega = temperature ** (-f / F_)
                want = [math.sin(c * omega), math.cos(c * omega), math.sin(r * omega),
                        math.cos(r * omega)]  # fmt: skip
                for block, value in enumerate(want):
                    assert abs(row[block * F_ + f].item() - value) < 1e-5, (r, c, f, block)
    with pytest.raises(ValueError):
        key.sincos_2d(2, 2, dim + 2)


def perturbed(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            base = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(base + 0.5 * torch.randn(p.shape, generator=g))
    return module.eval()


@pytest.mark.parametrize(("H", "W", "P"), [(7, 6, 2), (8, 11, 3), (4, 4, 2)])
def test_simple_vit_is_the_convolution_embedding_positions_blocks_and_mean(H, W, P):
    sizes = dict(patch_size=P, in_channels=2, num_classes=4, dim=8, depth=2, num_heads=2,
                 mlp_dim=12)  # fmt: skip
    model = perturbed(key.SimpleViT(**sizes), H + W)
    images = torch.rand(3, 2, H, W, generator=torch.Generator().manual_seed(1))
    weight = model.patch_embed.weight.reshape(8, 2, P, P)
    with torch.no_grad():
        x = F.conv2d(canvas(images, P, channels_last=False), weight, model.patch_embed.bias,
                     stride=P)  # fmt: skip
        gh, gw = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)  # (B, N, C)
        positions = torch.tensor(
            [
                [
                    f(a * 1e4 ** (-i / 2))
                    for f, a in ((math.sin, c), (math.cos, c), (math.sin, r), (math.cos, r))
                    for i in range(2)
                ]
                for r in range(gh)
                for c in range(gw)
            ]
        )
        positions = positions.reshape(gh * gw, 4, 2).reshape(gh * gw, 8)  # blocks of F = 2
        x = x + positions
        for block in model.blocks:
            x, _ = block(x)
        want = model.head(F.layer_norm(x, (8,), model.norm.weight, model.norm.bias, 1e-6).mean(1))
        got = model(images)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        # each image on its own: the batch does not mix
        torch.testing.assert_close(model(images[1:2]), got[1:2], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("H", "W", "ws"), SIDES)
def test_windows_are_the_canvas_sliced_window_by_window(H, W, ws):
    x = torch.randn(2, H, W, 3, generator=torch.Generator().manual_seed(H + W))
    padded = canvas(x, ws, channels_last=True)
    rows, cols = padded.shape[1] // ws, padded.shape[2] // ws
    want = torch.stack([padded[b, i * ws : (i + 1) * ws, j * ws : (j + 1) * ws]
                        for b in range(2) for i in range(rows) for j in range(cols)])  # fmt: skip
    got = key.window_partition_padded(x, ws)
    assert torch.equal(got, want)
    assert torch.equal(key.window_reverse_cropped(got, ws, H, W), x)


def swin_mask(H: int, W: int, ws: int, s: int) -> torch.Tensor:
    """Swin's construction (region slices on the padded map, torch.roll of a padding map),
    compared pair by pair in a loop."""
    Hp, Wp = math.ceil(H / ws) * ws, math.ceil(W / ws) * ws
    label = torch.zeros(Hp, Wp, dtype=torch.long)
    if s:
        slices = (slice(0, -ws), slice(-ws, -s), slice(-s, None))
    else:
        slices = (slice(0, -ws), slice(-ws, None))
    count = 0
    for hs in slices:
        for wsl in slices:
            label[hs, wsl] = count
            count += 1
    real = torch.zeros(Hp, Wp, dtype=torch.bool)
    real[:H, :W] = True
    real = torch.roll(real, shifts=(-s, -s), dims=(0, 1))  # what the rolled map holds
    N = ws * ws
    windows = []
    for i in range(Hp // ws):
        for j in range(Wp // ws):
            cells = [(i * ws + a, j * ws + b) for a in range(ws) for b in range(ws)]
            keep = torch.zeros(N, N, dtype=torch.bool)
            for q, (qy, qx) in enumerate(cells):
                for k, (ky, kx) in enumerate(cells):
                    same = label[qy, qx] == label[ky, kx]
                    keep[q, k] = bool(q == k or (same and real[ky, kx]))
            windows.append(keep)
    return torch.stack(windows)


MASKS = [(7, 10, 4, 2), (6, 7, 3, 1), (5, 8, 4, 0), (9, 4, 4, 3), (5, 5, 3, 2), (8, 12, 4, 2)]


@pytest.mark.parametrize(("H", "W", "ws", "s"), MASKS)
def test_the_mask_is_swins_construction_pair_by_pair(H, W, ws, s):
    assert torch.equal(key.shifted_window_mask_padded(H, W, ws, s), swin_mask(H, W, ws, s))


@pytest.mark.parametrize(("H", "W", "ws", "s"), [(8, 12, 4, 2), (6, 9, 3, 1), (4, 8, 4, 0)])
def test_without_padding_the_mask_is_the_books(H, W, ws, s):
    from course_lib.vision import shifted_window_mask

    assert torch.equal(key.shifted_window_mask_padded(H, W, ws, s),
                       shifted_window_mask(H, W, ws, s))  # fmt: skip


def test_patch_expanding_places_each_chunk_in_a_loop():
    C, B, H, W = 6, 2, 3, 4
    layer = perturbed(key.PatchExpanding(dim=C), 7)
    x = torch.randn(B, H, W, C, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        expanded = x @ layer.expand.weight.T  # (B, H, W, 2C)
        want = torch.zeros(B, 2 * H, 2 * W, C // 2)
        for i in range(H):
            for j in range(W):
                for dy in range(2):
                    for dx in range(2):
                        k = 2 * dy + dx
                        want[:, 2 * i + dy, 2 * j + dx] = expanded[
                            :, i, j, k * C // 2 : (k + 1) * C // 2
                        ]
        want = F.layer_norm(want, (C // 2,), layer.norm.weight, layer.norm.bias, 1e-5)
        torch.testing.assert_close(layer(x), want)


def test_xca_is_the_formula_per_image_and_head():
    C, h = 12, 3
    d = C // h
    layer = perturbed(key.XCAttention(dim=C, num_heads=h), 9)
    with torch.no_grad():
        layer.temperature.copy_(torch.tensor([0.5, 1.5, 3.0]).view(h, 1, 1))
    x = torch.randn(2, 9, C, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    layer = layer.double()
    with torch.no_grad():
        got, weights = layer(x, return_attn=True)
        Wq, Wk, Wv = layer.qkv.weight.split(C)
        bq, bk, bv = layer.qkv.bias.split(C)
        for b in range(2):
            heads = []
            for head in range(h):
                cols = slice(head * d, (head + 1) * d)
                Q = x[b] @ Wq[cols].T + bq[cols]  # (N, d)
                K = x[b] @ Wk[cols].T + bk[cols]
                V = x[b] @ Wv[cols].T + bv[cols]
                Q_hat = Q / Q.norm(dim=0, keepdim=True)  # each channel over the tokens
                K_hat = K / K.norm(dim=0, keepdim=True)
                A = torch.softmax(layer.temperature[head, 0, 0] * Q_hat.T @ K_hat, dim=1)
                torch.testing.assert_close(weights[b, head], A)
                heads.append(V @ A.T)  # (N, d)
            want = torch.cat(heads, dim=1) @ layer.proj.weight.T + layer.proj.bias
            torch.testing.assert_close(got[b], want)


@pytest.mark.slow
def test_the_recommended_defaults_clear_the_bar_over_two_splits():
    from course_lib.data.digits import load_digits_tensors, stratified_split

    torch.set_num_threads(1)
    images, labels = load_digits_tensors()
    accuracies = []
    for split in (18, 19):  # the weakest split of 20 with the old 30-epoch recipe (94.4 %), and
        # its neighbour; 15 epochs at 3e-3 give 94.7 % and 95.0 % there
        train, test = stratified_split(labels, seed=split)
        model = key.train_vit(images[train], labels[train])
        with torch.no_grad():
            accuracies.append((model(images[test]).argmax(-1) == labels[test]).float().mean())
    assert sum(accuracies) / 2 >= 0.93 + 0.01, accuracies
