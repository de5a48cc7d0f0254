"""Shared vision plumbing (course_lib.vision) against brute-force constructions."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.vision import (
    DropPath,
    PatchEmbed,
    PatchMerging,
    pad_to_multiple,
    patchify,
    shifted_window_mask,
    unpatchify,
    window_partition,
    window_relative_position_index,
    window_reverse,
)

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)


def test_patchify_takes_patches_row_by_row_in_conv_weight_order():
    torch.manual_seed(0)
    images = torch.randn(2, 3, 8, 12)
    P = 4
    patches = patchify(images, P)
    assert patches.shape == (2, (8 // P) * (12 // P), 3 * P * P)
    n = 0
    for r in range(8 // P):
        for c in range(12 // P):
            expected = images[:, :, r * P : (r + 1) * P, c * P : (c + 1) * P].reshape(2, -1)
            torch.testing.assert_close(patches[:, n], expected, rtol=0, atol=0)
            n += 1
    torch.testing.assert_close(unpatchify(patches, P, 8, 12), images, rtol=0, atol=0)


def test_patchify_rejects_indivisible_images():
    with pytest.raises(ValueError, match="not divisible by patch_size=4"):
        patchify(torch.zeros(1, 3, 10, 8), 4)


@pytest.mark.parametrize("patch_size", [1, 2, 4])
def test_patch_embed_conv_and_linear_forms_agree(patch_size):
    torch.manual_seed(0)
    embed = PatchEmbed(in_channels=3, embed_dim=16, patch_size=patch_size)
    images = torch.randn(2, 3, 8, 8)
    conv, linear = embed.conv_form(images), embed.linear_form(images)
    assert conv.shape == (2, (8 // patch_size) ** 2, 16)
    torch.testing.assert_close(conv, linear, rtol=1e-5, atol=1e-5)
    # The linear form is exactly "flatten the patch, multiply by E" (Eq. 1 of the ViT paper).
    E = embed.proj.weight.flatten(1).T  # (C_in*P*P, C)
    torch.testing.assert_close(linear, patchify(images, patch_size) @ E + embed.proj.bias)
    embed.form = "linear"
    torch.testing.assert_close(embed(images), conv, rtol=1e-5, atol=1e-5)


def test_patch_embed_clear_errors():
    embed = PatchEmbed(in_channels=3, embed_dim=8, patch_size=4)
    with pytest.raises(ValueError, match="not divisible by patch_size=4"):
        embed(torch.zeros(1, 3, 9, 8))
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        embed(torch.zeros(1, 1, 8, 8))
    with pytest.raises(ValueError, match="form must be"):
        PatchEmbed(in_channels=3, embed_dim=8, patch_size=4, form="fft")


@SETTINGS
@given(
    B=st.integers(1, 2),
    ws=st.integers(1, 4),
    gh=st.integers(1, 3),
    gw=st.integers(1, 3),
    C=st.integers(1, 3),
)
def test_window_partition_round_trip_and_content(B, ws, gh, gw, C):
    H, W = gh * ws, gw * ws
    x = torch.arange(B * H * W * C, dtype=torch.float32).reshape(B, H, W, C)
    windows = window_partition(x, ws)
    assert windows.shape == (B * gh * gw, ws, ws, C)
    for b, i, j in itertools.product(range(B), range(gh), range(gw)):
        expected = x[b, i * ws : (i + 1) * ws, j * ws : (j + 1) * ws]
        assert torch.equal(windows[(b * gh + i) * gw + j], expected)
    assert torch.equal(window_reverse(windows, ws, H, W), x)


def test_window_partition_rejects_indivisible_maps():
    with pytest.raises(ValueError, match="pad_to_multiple"):
        window_partition(torch.zeros(1, 5, 4, 2), 2)


@SETTINGS
@given(H=st.integers(1, 9), W=st.integers(1, 9), m=st.integers(1, 4))
def test_pad_to_multiple(H, W, m):
    x = torch.randn(2, H, W, 3)
    y = pad_to_multiple(x, m)
    assert y.shape[1] % m == 0 and y.shape[2] % m == 0
    assert y.shape[1] - H < m and y.shape[2] - W < m
    assert torch.equal(y[:, :H, :W], x)
    assert y[:, H:].abs().sum() == 0 and y[:, :, W:].abs().sum() == 0


def _mask_by_original_distance(H: int, W: int, ws: int, shift: int) -> torch.Tensor:
    """Independent oracle: after the cyclic shift, two tokens of a window may attend iff they were
    within one window's reach (|dy| < ws and |dx| < ws) in the original, unrolled image."""
    # The token at rolled position (y, x) came from original position ((y + s) % H, (x + s) % W).
    nW, N = (H // ws) * (W // ws), ws * ws
    mask = torch.zeros(nW, N, N, dtype=torch.bool)
    for w in range(nW):
        wy, wx = divmod(w, W // ws)
        tokens = [(wy * ws + a, wx * ws + b) for a in range(ws) for b in range(ws)]
        for p, (y1, x1) in enumerate(tokens):
            for q, (y2, x2) in enumerate(tokens):
                oy1, ox1 = (y1 + shift) % H, (x1 + shift) % W
                oy2, ox2 = (y2 + shift) % H, (x2 + shift) % W
                mask[w, p, q] = abs(oy1 - oy2) < ws and abs(ox1 - ox2) < ws
    return mask


@SETTINGS
@given(ws=st.integers(2, 4), gh=st.integers(2, 3), gw=st.integers(2, 3), data=st.data())
def test_shift_mask_forbids_exactly_the_cross_region_pairs(ws, gh, gw, data):
    shift = data.draw(st.integers(1, ws - 1))
    H, W = gh * ws, gw * ws
    mask = shifted_window_mask(H, W, ws, shift)
    assert mask.shape == ((H // ws) * (W // ws), ws * ws, ws * ws)
    assert torch.equal(mask, _mask_by_original_distance(H, W, ws, shift))
    # Only the windows on the bottom row or right column mix regions.
    for w in range(mask.shape[0]):
        wy, wx = divmod(w, W // ws)
        interior = wy < H // ws - 1 and wx < W // ws - 1
        assert bool(mask[w].all()) == interior


def test_shift_mask_without_shift_keeps_everything():
    assert shifted_window_mask(8, 8, 4, 0).all()
    with pytest.raises(ValueError, match="shift_size"):
        shifted_window_mask(8, 8, 4, 4)


@pytest.mark.parametrize("ws", [1, 2, 3, 7])
def test_window_relative_position_index_brute_force(ws):
    index = window_relative_position_index(ws)
    N = ws * ws
    assert index.shape == (N, N)
    offsets = {}
    for i, j in itertools.product(range(N), range(N)):
        (yi, xi), (yj, xj) = divmod(i, ws), divmod(j, ws)
        dy, dx = yi - yj, xi - xj
        assert index[i, j] == (dy + ws - 1) * (2 * ws - 1) + (dx + ws - 1)
        offsets.setdefault(int(index[i, j]), set()).add((dy, dx))
    # every entry of the ((2 ws - 1)^2)-row table is used, each by exactly one offset
    assert sorted(offsets) == list(range((2 * ws - 1) ** 2))
    assert all(len(v) == 1 for v in offsets.values())


@pytest.mark.parametrize("H,W", [(4, 6), (5, 3)])
def test_patch_merging_concatenation_order_and_padding(H, W):
    torch.manual_seed(0)
    C = 3
    merge = PatchMerging(dim=C)
    with torch.no_grad():
        merge.norm.weight.normal_()
        merge.norm.bias.normal_()
    x = torch.randn(2, H, W, C)
    y = merge(x)
    Ho, Wo = (H + 1) // 2, (W + 1) // 2
    assert y.shape == (2, Ho, Wo, 2 * C)
    assert merge.reduction.bias is None and merge.reduction.in_features == 4 * C

    def pixel(b, r, c):
        return x[b, r, c] if r < H and c < W else torch.zeros(C)

    for b, i, j in itertools.product(range(2), range(Ho), range(Wo)):
        r, c = 2 * i, 2 * j
        # order: (0, 0), (1, 0), (0, 1), (1, 1) = x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], ...
        cat = torch.cat(
            [pixel(b, r, c), pixel(b, r + 1, c), pixel(b, r, c + 1), pixel(b, r + 1, c + 1)]
        )
        expected = merge.reduction(merge.norm(cat))
        torch.testing.assert_close(y[b, i, j], expected, rtol=1e-5, atol=1e-5)


def test_drop_path():
    x = torch.randn(64, 5, 3) + 3.0
    layer = DropPath(0.25)
    assert torch.equal(layer.eval()(x), x)
    torch.manual_seed(0)
    y = layer.train()(x)
    per_sample = [torch.equal(y[i], torch.zeros_like(x[i])) or torch.allclose(y[i], x[i] / 0.75)
                  for i in range(64)]  # fmt: skip
    assert all(per_sample)
    dropped = sum(bool((y[i] == 0).all()) for i in range(64))
    assert 4 <= dropped <= 32  # about a quarter of 64
    with pytest.raises(ValueError, match="drop-path"):
        DropPath(1.0)
