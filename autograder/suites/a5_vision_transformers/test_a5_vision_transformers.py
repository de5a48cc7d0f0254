"""Hidden tests of A5 (patches of any size, a simple ViT, windows of padded maps, patch
expanding, cross-covariance attention, training), 28 points.

CANARY-HIDDEN-A5-3b8d40f6: planted so the tests can assert that nothing a student receives
(release, feedback) contains this suite.

Sizes and inputs come from ``rng`` (seeded per assignment, student and test); weights are drawn
here (LayerNorm gains included, so that they matter) and loaded into the student's modules by
name. Expectations come from the answer key beside this file (``a5_key.py``), which the project's
tests check against a strided convolution, loops over windows and tokens and XCiT's formula
written per head. Maps and images always mix an odd and an even side, with different amounts of
padding on the two axes, so that swapped axes never pass.
"""

from __future__ import annotations

import a5_key as key
import pytest
import torch
from torch import Tensor, nn

from course_lib.checks import check_close
from course_lib.checks.core import check_not_constant

CANARY = "CANARY-HIDDEN-A5-3b8d40f6"
ATTENTION = ("sdpa", "multihead_attention")
THRESHOLD = 0.93


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def close(actual: object, expected: Tensor, name: str, atol: float = 1e-5) -> None:
    check_close(actual, expected, name=name, atol=atol, rtol=1e-4)


def perturb(module: nn.Module, rng: torch.Generator) -> nn.Module:
    """Random weights; LayerNorm gains around 1 (at exactly 1 a missing norm could hide). The
    module in float64, as the student's is graded: rounding never decides a test."""
    module = module.double()
    with torch.no_grad():
        for name, p in module.named_parameters():
            base = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(base + 0.5 * torch.randn(p.shape, generator=rng, dtype=p.dtype))
    return module.eval()


def load(mine, reference: nn.Module):
    """The student's module in float64 with the reference's weights, in eval mode."""
    mine.double()
    mine.load_state_dict(reference.state_dict())
    mine.eval()
    return mine


def mixed_sides(rng: torch.Generator, size: int, *, pad: bool = True) -> tuple[int, int]:
    """(H, W), one odd and one even, neither a multiple of ``size`` when ``pad`` (size >= 3), and
    padded by different amounts, so a swap of the axes changes the result or fails."""
    for _ in range(1000):
        H, W = draw(rng, size + 1, 3 * size + 2), draw(rng, size + 1, 3 * size + 2)
        mixed = H % 2 != W % 2
        ph, pw = (-H) % size, (-W) % size
        if mixed and (not pad or (ph and pw and ph != pw)):
            return H, W
    raise AssertionError("no sizes found")  # never: sizes exist for every size >= 3


def raised(call) -> str | None:
    """The type name of the exception the student's code raised in ``call()``, or None."""
    from autograder.host.proxy import StudentError

    try:
        call()
    except StudentError as error:
        return error.kind
    return None


# --------------------------------------------------------------------------------------------
# 1. patchify_padded (3)
# --------------------------------------------------------------------------------------------


@pytest.mark.points(2, cell="check_patchify_padded")
def test_patchify_padded_pads_bottom_and_right(student, rng):
    for _ in range(2):
        P = draw(rng, 3, 4)
        H, W = mixed_sides(rng, P)
        # B > 1 and C > 1 under every name: the order of images and of (C, P, P) shows
        images = torch.randn(draw(rng, 2, 3), draw(rng, 2, 3), H, W, generator=rng)
        close(student.patchify_padded(images, P), key.patchify_padded(images, P),
              f"patchify_padded(images {tuple(images.shape)}, {P})")  # fmt: skip


@pytest.mark.points(1, cell="check_patchify_padded")
def test_patchify_padded_pads_only_what_is_needed(student, rng):
    P = draw(rng, 2, 4)
    gh, gw = draw(rng, 1, 3), draw(rng, 2, 4)
    for H, W in ((P * gh, P * gw), (P * gh, P * gw + draw(rng, 1, P - 1))):
        images = torch.randn(draw(rng, 1, 2), draw(rng, 2, 3), H, W, generator=rng)
        close(student.patchify_padded(images, P), key.patchify_padded(images, P),
              f"patchify_padded(images {tuple(images.shape)}, {P}) (a side that is a multiple "
              "of P)")  # fmt: skip


# --------------------------------------------------------------------------------------------
# 2. sincos_2d (3) and SimpleViT (4)
# --------------------------------------------------------------------------------------------


@pytest.mark.points(2, cell="check_sincos_2d")
def test_sincos_2d(student, rng):
    gh = draw(rng, 2, 4)
    gw = gh + draw(rng, 1, 3)  # not square: swapped rows and columns show
    if draw(rng, 0, 1):
        gh, gw = gw, gh
    for dim, temperature in ((4 * draw(rng, 2, 5), None), (4 * draw(rng, 2, 5), 100.0)):
        kwargs = {} if temperature is None else {"temperature": temperature}
        got = student.sincos_2d(gh, gw, dim, **kwargs)
        assert not isinstance(got, Tensor) or got.dtype == torch.float32, (
            f"sincos_2d should return float32, got {got.dtype}"
        )
        close(got, key.sincos_2d(gh, gw, dim, **kwargs),
              f"sincos_2d({gh}, {gw}, {dim}{', temperature=100' if kwargs else ''})")  # fmt: skip


@pytest.mark.points(1, cell="check_sincos_2d")
def test_sincos_2d_rejects_a_dim_that_is_not_a_multiple_of_4(student, rng):
    dim = 4 * draw(rng, 1, 4) + draw(rng, 1, 3)
    error = raised(lambda: student.sincos_2d(2, 3, dim))
    assert error == "ValueError", (
        f"sincos_2d(2, 3, {dim}) should raise ValueError (dim is not a multiple of 4), "
        f"{'got ' + error if error else 'nothing was raised'}"
    )


def vit_pair(student, rng):
    heads = draw(rng, 1, 3)
    P = draw(rng, 2, 3)
    # dim >= 8: at dim = 4 sincos_2d has one frequency per axis, where the sin/cos layout and
    # the frequencies' order cannot be wrong, so those mistakes scored by name
    # in_channels > 1: patches flattened as (P, P, C) instead of (C, P, P) show
    sizes = dict(patch_size=P, in_channels=draw(rng, 2, 3), num_classes=draw(rng, 3, 10),
                 dim=8 * heads * draw(rng, 1, 2), depth=draw(rng, 1, 2), num_heads=heads,
                 mlp_dim=draw(rng, 8, 24))  # fmt: skip
    reference = perturb(key.SimpleViT(**sizes), rng)
    mine = load(student.SimpleViT(**sizes), reference)
    while True:  # a grid that is not square; with P = 2, one side padded and the other not
        H, W = mixed_sides(rng, 3) if P == 3 else mixed_sides(rng, 4, pad=False)
        if -(-H // P) != -(-W // P):
            break
    images = torch.rand(draw(rng, 2, 3), sizes["in_channels"], H, W, generator=rng,
                        dtype=torch.float64)  # fmt: skip
    return reference, mine, images


@pytest.mark.points(3, cell="check_simple_vit")
@pytest.mark.forbid(*ATTENTION)
def test_simple_vit_logits(student, rng):
    reference, mine, images = vit_pair(student, rng)
    with torch.no_grad():
        want = reference(images)
    close(mine(images), want, f"SimpleViT logits for images {tuple(images.shape)}", atol=1e-4)


@pytest.mark.points(1, cell="check_simple_vit")
@pytest.mark.forbid(*ATTENTION)
def test_simple_vit_attention_weights(student, rng):
    reference, mine, images = vit_pair(student, rng)
    with torch.no_grad():
        want, maps = reference(images, return_attn=True)
    out = mine(images, return_attn=True)
    assert isinstance(out, (tuple, list)) and len(out) == 2, (
        "SimpleViT(images, return_attn=True) should return (logits, list of attention weights)"
    )
    logits, weights = out
    assert isinstance(weights, (list, tuple)) and len(weights) == len(maps), (
        f"expected the attention weights of all {len(maps)} blocks"
    )
    close(logits, want, "the logits with return_attn=True", atol=1e-4)
    for layer, (mine_w, theirs) in enumerate(zip(weights, maps)):
        close(mine_w, theirs, f"the attention weights of block {layer}", atol=1e-4)


# --------------------------------------------------------------------------------------------
# 3. Windows of padded maps (4), the mask (3), PatchExpanding (3)
# --------------------------------------------------------------------------------------------


def padded_map(rng, ws: int) -> Tensor:
    H, W = mixed_sides(rng, ws)
    return torch.randn(draw(rng, 2, 3), H, W, draw(rng, 2, 4), generator=rng)  # B, C > 1


@pytest.mark.points(2, cell="check_window_partition_padded")
def test_window_partition_padded(student, rng):
    for _ in range(2):
        ws = draw(rng, 3, 4)
        x = padded_map(rng, ws)
        close(student.window_partition_padded(x, ws), key.window_partition_padded(x, ws),
              f"window_partition_padded(x {tuple(x.shape)}, {ws})")  # fmt: skip


@pytest.mark.points(1, cell="check_window_partition_padded")
def test_window_reverse_cropped(student, rng):
    ws = draw(rng, 3, 4)
    x = padded_map(rng, ws)
    B, H, W, C = x.shape
    windows = key.window_partition_padded(x, ws)
    close(student.window_reverse_cropped(windows, ws, H, W), x,
          f"window_reverse_cropped(windows {tuple(windows.shape)}, {ws}, {H}, {W})")  # fmt: skip


@pytest.mark.points(1, cell="check_window_partition_padded")
def test_windows_round_trip_when_one_side_is_a_multiple(student, rng):
    ws = draw(rng, 2, 4)
    # at least two windows along each side: with one row of windows, windows numbered row by
    # row and column by column are the same, so that mistake scored by name
    H, W = ws * draw(rng, 2, 3), ws * draw(rng, 1, 2) + draw(rng, 1, ws - 1)
    if draw(rng, 0, 1):
        H, W = W, H
    x = torch.randn(2, H, W, draw(rng, 2, 3), generator=rng)
    windows = student.window_partition_padded(x, ws)
    close(windows, key.window_partition_padded(x, ws),
          f"window_partition_padded of a {H} x {W} map, window {ws}")  # fmt: skip
    back = student.window_reverse_cropped(windows, ws, H, W)
    close(back, x, "window_reverse_cropped(window_partition_padded(x)) == x")


def check_mask(got: object, want: Tensor, name: str) -> None:
    assert isinstance(got, Tensor) and tuple(got.shape) == tuple(want.shape), (
        f"{name} should be a tensor of shape {tuple(want.shape)} = (nW, N, N)"
    )
    assert got.dtype == torch.bool, f"{name} should be a boolean keep-mask"
    assert torch.equal(got, want), (
        f"{name} differs from the expected mask in {int((got != want).sum())} entries"
    )


@pytest.mark.points(2, cell="check_shifted_window_mask")
def test_shifted_window_mask_padded(student, rng):
    for _ in range(2):
        ws = draw(rng, 3, 5)
        shift = draw(rng, 1, ws - 1)
        H, W = mixed_sides(rng, ws)
        name = f"shifted_window_mask_padded({H}, {W}, {ws}, {shift})"
        check_mask(student.shifted_window_mask_padded(H, W, ws, shift),
                   key.shifted_window_mask_padded(H, W, ws, shift), name)  # fmt: skip


@pytest.mark.points(1, cell="check_shifted_window_mask")
def test_shifted_window_mask_without_shift_or_without_padding(student, rng):
    ws = draw(rng, 3, 5)
    H, W = mixed_sides(rng, ws)
    cases = [(H, W, ws, 0), (ws * draw(rng, 1, 2), ws * draw(rng, 2, 3), ws, draw(rng, 1, ws - 1))]
    for args in cases:
        name = f"shifted_window_mask_padded{args}"
        check_mask(student.shifted_window_mask_padded(*args),
                   key.shifted_window_mask_padded(*args), name)  # fmt: skip


def expanding_pair(student, rng):
    C = 2 * draw(rng, 3, 5)  # a LayerNorm over C/2 = 2 channels only ever gives +-1
    reference = perturb(key.PatchExpanding(dim=C), rng)
    mine = load(student.PatchExpanding(dim=C), reference)
    H = draw(rng, 1, 3)
    x = torch.randn(draw(rng, 2, 3), H, H + draw(rng, 1, 2), C, generator=rng, dtype=torch.float64)
    return reference, mine, x


@pytest.mark.points(2, cell="check_patch_expanding")
def test_patch_expanding(student, rng):
    reference, mine, x = expanding_pair(student, rng)
    with torch.no_grad():
        want = reference(x)
    close(mine(x), want, f"PatchExpanding(x {tuple(x.shape)})", atol=1e-4)


@pytest.mark.points(1, cell="check_patch_expanding")
def test_patch_expanding_each_token_becomes_its_own_block(student, rng):
    reference, mine, x = expanding_pair(student, rng)
    B, H, W, C = x.shape
    i, j = draw(rng, 0, H - 1), draw(rng, 0, W - 1)
    changed = x.clone()
    changed[:, i, j] += torch.randn(B, C, generator=rng, dtype=x.dtype)
    diff = (mine(changed) - mine(x)).abs().sum(dim=(0, 3)) > 1e-6  # (2H, 2W)
    block = torch.zeros(2 * H, 2 * W, dtype=torch.bool)
    block[2 * i : 2 * i + 2, 2 * j : 2 * j + 2] = True
    assert torch.equal(diff, block), (
        f"changing input token ({i}, {j}) should change exactly the 2 x 2 output block at rows "
        f"{2 * i}-{2 * i + 1}, columns {2 * j}-{2 * j + 1}"
    )


# --------------------------------------------------------------------------------------------
# 4. XCAttention (4)
# --------------------------------------------------------------------------------------------


def xca_pair(student, rng):
    heads = draw(rng, 2, 3)
    C = heads * draw(rng, 2, 4)
    reference = perturb(key.XCAttention(dim=C, num_heads=heads), rng)
    with torch.no_grad():
        reference.temperature.copy_(0.5 + 3 * torch.rand(heads, 1, 1, generator=rng))
    mine = load(student.XCAttention(dim=C, num_heads=heads), reference)
    x = torch.randn(draw(rng, 2, 3), draw(rng, 6, 20), C, generator=rng, dtype=torch.float64)
    return reference, mine, x


@pytest.mark.points(2, cell="check_xca")
@pytest.mark.forbid(*ATTENTION)
def test_xca_output(student, rng):
    reference, mine, x = xca_pair(student, rng)
    with torch.no_grad():
        want = reference(x)
    close(mine(x), want, f"XCAttention(x {tuple(x.shape)}), {reference.num_heads} heads",
          atol=1e-4)  # fmt: skip


@pytest.mark.points(1, cell="check_xca")
@pytest.mark.forbid(*ATTENTION)
def test_xca_weights(student, rng):
    reference, mine, x = xca_pair(student, rng)
    with torch.no_grad():
        want, weights = reference(x, return_attn=True)
    out = mine(x, return_attn=True)
    assert isinstance(out, (tuple, list)) and len(out) == 2, (
        "XCAttention(x, return_attn=True) should return (y, weights)"
    )
    close(out[0], want, "the output with return_attn=True", atol=1e-4)
    close(out[1], weights, "the XCA weights (B, heads, d, d)", atol=1e-5)


@pytest.mark.points(1, cell="check_xca")
@pytest.mark.forbid(*ATTENTION)
def test_xca_is_token_permutation_equivariant(student, rng):
    reference, mine, x = xca_pair(student, rng)
    order = torch.randperm(x.shape[1], generator=rng)
    y = mine(x)
    name = "XCAttention(x[:, perm]) against XCAttention(x)[:, perm]"
    close(mine(x[:, order]), y[:, order], name, atol=1e-4)
    with torch.no_grad():
        close(y, reference(x), f"XCAttention(x {tuple(x.shape)})", atol=1e-4)
    check_not_constant(y, name="XCAttention(x)", what="x")


# --------------------------------------------------------------------------------------------
# 5. Training (4)
# --------------------------------------------------------------------------------------------


@pytest.mark.points(4, cell="check_train_vit")
@pytest.mark.forbid("course_lib.data", "sklearn.datasets")
@pytest.mark.call_timeout(60)
def test_train_vit_reaches_93_percent_over_two_splits(student, seed):
    from course_lib.data.digits import load_digits_tensors, stratified_split

    images, labels = load_digits_tensors()
    accuracies = []
    for split in (seed, seed + 1):
        train, test = stratified_split(labels, seed=split)
        model = student.train_vit(images[train], labels[train])
        logits = torch.cat([model(images[test][i : i + 180]) for i in range(0, len(test), 180)])
        assert tuple(logits.shape) == (len(test), 10), (
            f"the trained model should return logits of shape (N, 10), got {tuple(logits.shape)}"
        )
        accuracies.append((logits.argmax(-1) == labels[test]).float().mean().item())
    mean = sum(accuracies) / 2
    assert mean >= THRESHOLD, (
        f"the trained ViT reaches {mean:.1%} on average over the grader's two held-out sets, "
        f"below {THRESHOLD:.0%} (train on the data passed in, return the model in eval mode)"
    )
