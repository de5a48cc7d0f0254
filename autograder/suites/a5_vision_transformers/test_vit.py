"""Hidden tests, A5 part 2: the ViT forward pass (4 points). The reference is course_lib's ViT
with the same weights (its Conv2d patch embedding flattened into the assignment's Linear).

CANARY-HIDDEN-A5-3b8d40f6
"""

from __future__ import annotations

import pytest
import torch
from a5_helpers import ATTENTION, close, draw, randomise

from course_lib.models.vit import VisionTransformer, ViTConfig

pytestmark = pytest.mark.forbid(*ATTENTION)


def pair(student, rng):
    heads = draw(rng, 1, 3)
    P = draw(rng, 2, 3)  # P = 1 would hide every patch-order mistake
    sizes = dict(
        image_size=P * draw(rng, 2, 4), patch_size=P, in_channels=1,
        num_classes=draw(rng, 3, 10), dim=heads * 2 * draw(rng, 2, 4), depth=draw(rng, 2, 3),
        num_heads=heads, mlp_dim=draw(rng, 8, 32),
    )  # fmt: skip
    reference = VisionTransformer(config=ViTConfig(**sizes)).eval()
    randomise(reference, rng)
    state = dict(reference.state_dict())
    state["patch_embed.weight"] = state.pop("patch_embed.proj.weight").flatten(1)
    state["patch_embed.bias"] = state.pop("patch_embed.proj.bias")
    mine = student.ViT(**sizes)
    mine.load_state_dict(state)
    mine.eval()
    images = torch.rand(draw(rng, 2, 4), 1, sizes["image_size"], sizes["image_size"], generator=rng)
    return reference, mine, images


@pytest.mark.points(3, cell="check_vit")
def test_vit_logits(student, rng):
    reference, mine, images = pair(student, rng)
    with torch.no_grad():
        want = reference(images)
    close(mine(images), want, f"ViT logits for images {tuple(images.shape)}", atol=1e-4)


@pytest.mark.points(1, cell="check_vit")
def test_vit_attention_weights(student, rng):
    reference, mine, images = pair(student, rng)
    with torch.no_grad():
        want, maps = reference(images, return_attn=True)
    out = mine(images, return_attn=True)
    assert isinstance(out, (tuple, list)) and len(out) == 2, (
        "ViT(images, return_attn=True) should return (logits, list of attention weights)"
    )
    logits, weights = out
    assert isinstance(weights, (list, tuple)) and len(weights) == len(maps), (
        f"expected the attention weights of all {len(maps)} blocks"
    )
    close(logits, want, "the logits with return_attn=True", atol=1e-4)
    for layer, (mine_w, theirs) in enumerate(zip(weights, maps)):
        close(mine_w, theirs, f"the attention weights of block {layer}")
