"""Synthetic scenes: captions, boxes and labels checked against the pixels themselves."""

import re

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from course_lib.data import (
    COLOURS,
    SHAPES,
    MatchingDataset,
    SceneDataset,
    caption_is_true,
    generate_scene,
    generate_scenes,
    mismatched_caption,
    scene_vocab,
)

CLAUSE = re.compile(r"(\w+) (\w+) (left of|right of|above|below) (\w+) (\w+)")


def colour_box(image: torch.Tensor, colour: str):
    """Tight box (x0, y0, x1, y1) of the pixels that have exactly ``colour``, from the image."""
    rgb = torch.tensor(COLOURS[colour]).view(3, 1, 1)
    mask = (image == rgb).all(dim=0)
    rows, cols = torch.nonzero(mask, as_tuple=True)
    if len(rows) == 0:
        return None, mask
    box = (int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1)
    return box, mask


def shape_from_pixels(mask: torch.Tensor, box) -> str:
    """Classify a shape by how much of its box it fills: square 1, circle ~pi/4, triangle ~1/2."""
    x0, y0, x1, y1 = box
    fill = mask.sum().item() / ((x1 - x0) * (y1 - y0))
    return "square" if fill > 0.97 else "circle" if fill > 0.72 else "triangle"


def caption_true_from_pixels(image: torch.Tensor, caption: str) -> bool:
    """Check each clause of a caption against shapes and boxes measured on the image."""
    for clause in caption.split(" and "):
        match = CLAUSE.fullmatch(clause)
        assert match, clause
        colour_a, shape_a, rel, colour_b, shape_b = match.groups()
        (a, mask_a), (b, mask_b) = colour_box(image, colour_a), colour_box(image, colour_b)
        if a is None or b is None:
            return False
        if shape_from_pixels(mask_a, a) != shape_a or shape_from_pixels(mask_b, b) != shape_b:
            return False
        holds = {
            "left of": a[2] <= b[0],
            "right of": b[2] <= a[0],
            "above": a[3] <= b[1],
            "below": b[3] <= a[1],
        }[rel]
        if not holds:
            return False
    return True


@pytest.fixture(scope="module")
def scenes():
    return generate_scenes(150, seed=0, size=32)


def test_determinism():
    a, b = generate_scenes(5, seed=1), generate_scenes(5, seed=1)
    assert all(torch.equal(x.image, y.image) and x.caption == y.caption for x, y in zip(a, b))
    c = generate_scenes(5, seed=2)
    assert any(not torch.equal(x.image, y.image) for x, y in zip(a, c))


@pytest.mark.parametrize("size", [32, 48])
def test_images_and_objects(size):
    for scene in generate_scenes(40, seed=3, size=size):
        image = scene.image
        assert image.shape == (3, size, size) and image.dtype == torch.float32
        assert 0.0 <= image.min() and image.max() <= 1.0
        assert 2 <= len(scene.objects) <= 3
        assert len({o.colour for o in scene.objects}) == len(scene.objects)
        covered = torch.zeros(size, size, dtype=torch.bool)
        for obj in scene.objects:
            box, mask = colour_box(image, obj.colour)
            assert box == obj.box  # the box is the tight box of that colour's pixels
            x0, y0, x1, y1 = box
            assert mask[y0:y1, x0:x1].any() and not (mask & covered).any()
            covered |= mask
            fill = mask.sum().item() / ((x1 - x0) * (y1 - y0))
            assert shape_from_pixels(mask, box) == obj.shape, (obj, fill)
            assert obj.shape != "triangle" or 0.45 <= fill <= 0.7, (obj, fill)
            assert obj.shape != "circle" or fill <= 0.9, (obj, fill)
        assert (image[:, ~covered] == 0).all()  # only the objects are drawn
        boxes = [o.box for o in scene.objects]
        for i, a in enumerate(boxes):  # boxes do not overlap
            for b in boxes[i + 1 :]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def test_captions_match_the_geometry(scenes):
    relations = set()
    for scene in scenes:
        caption = " ".join(scene.caption)
        assert caption_true_from_pixels(scene.image, caption), caption
        assert caption.count(" and ") == len(scene.objects) - 2
        relations |= {m.group(3) for m in CLAUSE.finditer(caption)}
        for word, k in zip(scene.caption, scene.token_object):
            if word in COLOURS:
                assert scene.objects[k].colour == word
            elif word in SHAPES:
                assert scene.objects[k].shape == word
            else:
                assert k == -1
    assert relations == {"left of", "right of", "above", "below"}


def test_mismatched_captions_are_false(scenes):
    rng = np.random.default_rng(0)
    for scene in scenes[:80]:
        wrong = mismatched_caption(scene, rng, others=scenes)
        assert not caption_is_true(scene.objects, wrong)
        assert not caption_true_from_pixels(scene.image, " ".join(wrong)), wrong
        assert caption_is_true(scene.objects, scene.caption)


def test_scene_dataset_collate():
    ds = SceneDataset(12, seed=4, size=32)
    v = scene_vocab()
    item = ds[0]
    assert item["caption"][0] == v.bos_id and item["caption"][-1] == v.eos_id
    assert v.decode(item["caption"]) == list(ds.scenes[0].caption)
    assert len(item["token_object"]) == len(item["caption"])
    batch = next(iter(DataLoader(ds, batch_size=12, collate_fn=ds.collate)))
    assert batch["image"].shape == (12, 3, 32, 32)
    n = batch["n_objects"]
    assert n.tolist() == [len(s.objects) for s in ds.scenes]
    assert batch["boxes"].shape == (12, int(n.max()), 4)
    for i, scene in enumerate(ds.scenes):
        T = int(batch["caption_lengths"][i])
        assert T == len(scene.caption) + 2 and (batch["caption"][i, T:] == 0).all()
        assert (batch["token_object"][i, T:] == -1).all()
        assert batch["boxes"][i, : n[i]].tolist() == [list(o.box) for o in scene.objects]
        assert (batch["colours"][i, n[i] :] == -1).all()


def test_matching_dataset_labels():
    ds = MatchingDataset(60, seed=5, negative_fraction=0.5)
    assert 15 <= sum(ds.labels) <= 45
    for scene, caption, label in zip(ds.scenes, ds.captions, ds.labels):
        assert caption_true_from_pixels(scene.image, " ".join(caption)) == bool(label)
    batch = ds.collate([ds[i] for i in range(8)])
    assert batch["label"].tolist() == ds.labels[:8]


def test_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="size"):
        generate_scene(rng, size=8)
    with pytest.raises(ValueError, match="n_objects"):
        generate_scene(rng, n_objects=4)
    with pytest.raises(ValueError, match="min_objects"):
        generate_scenes(3, 0, min_objects=3, max_objects=2)
    with pytest.raises(ValueError, match="negative_fraction"):
        MatchingDataset(3, 0, negative_fraction=2.0)


def test_left_to_right_captions():
    random_order = generate_scenes(30, seed=6)
    ordered = generate_scenes(30, seed=6, caption_order="left_to_right")
    for a, b in zip(random_order, ordered):
        assert torch.equal(a.image, b.image) and set(a.objects) == set(b.objects)
        centres = [o.box[0] + o.box[2] for o in b.objects]
        assert centres == sorted(centres)
        assert caption_true_from_pixels(b.image, " ".join(b.caption))
        assert b.caption[:2] == (b.objects[0].colour, b.objects[0].shape)
    with pytest.raises(ValueError, match="caption_order"):
        generate_scenes(1, 0, caption_order="sorted")
