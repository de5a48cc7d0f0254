"""Hidden tests, A5 part 1: patchify and the patch embedding (5 points).

CANARY-HIDDEN-A5-3b8d40f6
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from a5_helpers import NO_CONVOLUTION, close, draw, raised

from course_lib.vision import patchify

pytestmark = pytest.mark.forbid("course_lib", *NO_CONVOLUTION)


def random_images(rng, *, channels=(2, 4), patch=(2, 4)):
    P = draw(rng, *patch)
    C = draw(rng, *channels)
    gh = draw(rng, 2, 3)  # at least 2 x 2 patches, not square: any patch order shows
    shape = (draw(rng, 1, 3), C, P * gh, P * (gh + draw(rng, 1, 2)))
    return torch.randn(*shape, generator=rng), P


@pytest.mark.points(2, cell="check_patchify")
def test_patchify_matches_reference(student, rng):
    for _ in range(2):
        images, P = random_images(rng)
        close(student.patchify(images, P), patchify(images, P),
              f"patchify(images {tuple(images.shape)}, {P})")  # fmt: skip


@pytest.mark.points(1, cell="check_patchify")
def test_patchify_rejects_sizes_not_divisible(student, rng):
    P = draw(rng, 2, 4)
    images = torch.zeros(1, 1, P * draw(rng, 1, 3), P * draw(rng, 1, 3) + draw(rng, 1, P - 1))
    error = raised(lambda: student.patchify(images, P))
    assert error == "ValueError", (
        f"patchify of a {tuple(images.shape[-2:])} image with patch_size={P} should raise "
        f"ValueError, {'got ' + error if error else 'nothing was raised'}"
    )


@pytest.mark.points(2, cell="check_patch_embed")
def test_patch_embed_equals_convolution(student, rng):
    images, P = random_images(rng)
    E = draw(rng, 3, 12)
    weight = torch.randn(E, images.shape[1], P, P, generator=rng)
    bias = torch.randn(E, generator=rng)
    want = F.conv2d(images, weight, bias, stride=P).flatten(2).transpose(1, 2)
    name = "patch_embed(images, weight, bias, P) against the strided convolution"
    close(student.patch_embed(images, weight, bias, P), want, name, atol=1e-4)
