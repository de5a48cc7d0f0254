"""Hidden tests, A5 parts 3-4: windows, the shifted-window mask, patch merging, channel
attention (13 points). CANARY-HIDDEN-A5-3b8d40f6
"""

from __future__ import annotations

import pytest
import torch
from a5_helpers import ATTENTION, close, draw, randomise
from torch import Tensor

from course_lib.checks.core import check_not_constant
from course_lib.models.davit import ChannelAttention
from course_lib.vision import PatchMerging, shifted_window_mask, window_partition

pytestmark = pytest.mark.forbid(*ATTENTION)


def grid(rng) -> tuple[int, int]:
    """Windows per column and per row: at least 2 x 2 and not square, so that any mix-up of
    rows and columns shows."""
    rows = draw(rng, 2, 3)
    return rows, rows + draw(rng, 1, 2)


def feature_map(rng, ws: int) -> Tensor:
    rows, cols = grid(rng)
    shape = (draw(rng, 1, 3), ws * rows, ws * cols, draw(rng, 1, 5))
    return torch.randn(*shape, generator=rng)


@pytest.mark.points(1, cell="check_window_partition")
def test_window_partition(student, rng):
    ws = draw(rng, 2, 4)
    x = feature_map(rng, ws)
    close(student.window_partition(x, ws), window_partition(x, ws),
          f"window_partition(x {tuple(x.shape)}, {ws})")  # fmt: skip


@pytest.mark.points(1, cell="check_window_partition")
def test_window_reverse(student, rng):
    ws = draw(rng, 2, 4)
    x = feature_map(rng, ws)
    B, H, W, C = x.shape
    close(student.window_reverse(window_partition(x, ws), ws, H, W), x,
          f"window_reverse(windows, {ws}, {H}, {W})")  # fmt: skip


@pytest.mark.points(1, cell="check_window_partition")
def test_windows_round_trip_on_wide_maps(student, rng):
    ws = draw(rng, 2, 3)
    x = torch.randn(2, ws, ws * draw(rng, 3, 5), draw(rng, 1, 3), generator=rng)  # one row
    windows = student.window_partition(x, ws)
    close(windows, window_partition(x, ws), f"window_partition of a {ws} x {x.shape[2]} map")
    back = student.window_reverse(windows, ws, x.shape[1], x.shape[2])
    close(back, x, "window_reverse(window_partition(x)) == x")


@pytest.mark.points(2, cell="check_shifted_window_mask")
def test_shifted_window_mask(student, rng):
    for _ in range(2):
        ws = draw(rng, 2, 5)
        shift = draw(rng, 1, ws - 1)
        rows, cols = grid(rng)
        H, W = ws * rows, ws * cols
        got = student.shifted_window_mask(H, W, ws, shift)
        want = shifted_window_mask(H, W, ws, shift)
        name = f"shifted_window_mask({H}, {W}, {ws}, {shift})"
        assert isinstance(got, Tensor) and tuple(got.shape) == tuple(want.shape), (
            f"{name} should be a tensor of shape {tuple(want.shape)} = (nW, N, N)"
        )
        assert got.dtype == torch.bool, f"{name} should be a boolean keep-mask"
        assert torch.equal(got, want), (
            f"{name} differs from the expected mask in {int((got != want).sum())} entries"
        )


@pytest.mark.points(1, cell="check_shifted_window_mask")
def test_shifted_window_mask_without_shift(student, rng):
    ws = draw(rng, 2, 5)
    H, W = ws * draw(rng, 1, 3), ws * draw(rng, 1, 3)
    got = student.shifted_window_mask(H, W, ws, 0)
    N = ws * ws
    assert isinstance(got, Tensor) and tuple(got.shape) == ((H // ws) * (W // ws), N, N), (
        "with shift_size=0 the mask still has shape (nW, N, N)"
    )
    assert got.dtype == torch.bool and bool(got.all()), "with shift_size=0 nothing is masked"


def merging_pair(student, rng, C: int):
    reference = PatchMerging(dim=C)
    randomise(reference, rng)
    mine = student.PatchMerging(dim=C)
    mine.load_state_dict(reference.state_dict())
    return reference, mine


@pytest.mark.points(1, cell="check_patch_merging")
def test_patch_merging_shape(student, rng):
    C = draw(rng, 2, 6)
    _, mine = merging_pair(student, rng, C)
    H, W = 2 * draw(rng, 1, 4), 2 * draw(rng, 1, 4)
    out = mine(torch.randn(2, H, W, C, generator=rng))
    assert isinstance(out, Tensor) and tuple(out.shape) == (2, H // 2, W // 2, 2 * C), (
        f"PatchMerging on (2, {H}, {W}, {C}) should give (2, {H // 2}, {W // 2}, {2 * C})"
    )


@pytest.mark.points(1, cell="check_patch_merging")
def test_patch_merging_values(student, rng):
    C = draw(rng, 2, 6)
    reference, mine = merging_pair(student, rng, C)
    x = torch.randn(draw(rng, 1, 3), 2 * draw(rng, 1, 4), 2 * draw(rng, 1, 4), C, generator=rng)
    with torch.no_grad():
        want = reference(x)
    close(mine(x), want, f"PatchMerging(x {tuple(x.shape)})", atol=1e-4)


@pytest.mark.points(1, cell="check_patch_merging")
def test_patch_merging_odd_sizes(student, rng):
    C = draw(rng, 2, 6)
    reference, mine = merging_pair(student, rng, C)
    x = torch.randn(2, 2 * draw(rng, 1, 3) + 1, 2 * draw(rng, 1, 3) + 1, C, generator=rng)
    with torch.no_grad():
        want = reference(x)
    close(mine(x), want, f"PatchMerging on an odd map {tuple(x.shape)} (zero-padded)", atol=1e-4)


def channel_pair(student, rng):
    G = draw(rng, 2, 4)  # C != Cg, so 1/sqrt(C) and 1/sqrt(Cg) differ
    C = G * draw(rng, 2, 5)
    reference = ChannelAttention(dim=C, num_groups=G).eval()
    randomise(reference, rng)
    mine = student.ChannelAttention(dim=C, num_groups=G)
    mine.load_state_dict(reference.state_dict())
    mine.eval()
    x = torch.randn(draw(rng, 1, 3), draw(rng, 6, 20), C, generator=rng)  # N > Cg
    return reference, mine, x


@pytest.mark.points(2, cell="check_channel_attention")
def test_channel_attention_output(student, rng):
    reference, mine, x = channel_pair(student, rng)
    with torch.no_grad():
        want = reference(x)
    close(mine(x), want, f"ChannelAttention(x {tuple(x.shape)}), {reference.num_groups} groups",
          atol=1e-4)  # fmt: skip


@pytest.mark.points(1, cell="check_channel_attention")
def test_channel_attention_weights(student, rng):
    reference, mine, x = channel_pair(student, rng)
    with torch.no_grad():
        want, weights = reference(x, return_attn=True)
    out = mine(x, return_attn=True)
    assert isinstance(out, (tuple, list)) and len(out) == 2, (
        "ChannelAttention(x, return_attn=True) should return (y, weights)"
    )
    close(out[0], want, "the output with return_attn=True", atol=1e-4)
    close(out[1], weights, "the channel attention weights (B, G, Cg, Cg)")


@pytest.mark.points(1, cell="check_channel_attention")
def test_channel_attention_is_token_permutation_equivariant(student, rng):
    _, mine, x = channel_pair(student, rng)
    order = torch.randperm(x.shape[1], generator=rng)
    y = mine(x)
    y_permuted = mine(x[:, order])
    name = "ChannelAttention(x[:, perm]) against ChannelAttention(x)[:, perm]"
    close(y_permuted, y[:, order], name, atol=1e-4)
    check_not_constant(y, name="ChannelAttention(x)", what="x")
