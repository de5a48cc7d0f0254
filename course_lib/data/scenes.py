"""Synthetic scenes: 2-3 coloured shapes on a small canvas, with captions derived from the boxes.

A stand-in for image captioning with attention (Xu et al. 2015, "Show, Attend and Tell") and for
image-text matching (Lu et al. 2019, "ViLBERT"): the caption "red circle left of blue square" is
true of the picture by construction, each word is linked to the object it names
(``token_object``), and the boxes let a chapter check whether the attention for "circle" lands on
the circle. Drawn with numpy alone; images are float RGB in [0, 1] on a black background.

Geometry: pixel (row y, column x); a box is ``(x0, y0, x1, y1)`` with exclusive ``x1``, ``y1``,
the tight box of the drawn pixels. "A left of B" means ``A.x1 <= B.x0`` (A ends before B starts),
"A above B" means ``A.y1 <= B.y0`` (rows grow downwards). Boxes never touch, so at least one
relation holds for every pair; the caption uses the one with the widest gap.

Shape legend: ``B`` batch, ``S`` canvas side, ``T`` caption tokens, ``N`` objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from .vocab import Vocab, pad_sequences

COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.9, 0.1, 0.1),
    "green": (0.1, 0.75, 0.2),
    "blue": (0.15, 0.3, 1.0),
    "yellow": (0.95, 0.85, 0.1),
    "purple": (0.6, 0.2, 0.8),
    "white": (1.0, 1.0, 1.0),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
#: Relation phrase -> its opposite (swapping the two objects).
RELATIONS: dict[str, str] = {
    "left of": "right of",
    "right of": "left of",
    "above": "below",
    "below": "above",
}
CAPTION_WORDS: tuple[str, ...] = (*COLOURS, *SHAPES, "left", "right", "of", "above", "below", "and")

Box = tuple[int, int, int, int]


@dataclass(frozen=True)
class SceneObject:
    colour: str
    shape: str
    box: Box  # (x0, y0, x1, y1), x1 and y1 exclusive


@dataclass(frozen=True)
class Scene:
    image: Tensor  # (3, S, S) float in [0, 1]
    objects: tuple[SceneObject, ...]
    caption: tuple[str, ...]  # words: ("red", "circle", "left", "of", "blue", "square")
    token_object: tuple[int, ...]  # per caption word: index into objects, -1 for other words


def scene_vocab() -> Vocab:
    """Word vocabulary of every caption (the same for every seed and size)."""
    return Vocab(CAPTION_WORDS)


def relation(a: Box, b: Box) -> str | None:
    """The relation phrase that holds for "a <relation> b" with the widest gap, or None."""
    gaps = {
        "left of": b[0] - a[2],
        "right of": a[0] - b[2],
        "above": b[1] - a[3],
        "below": a[1] - b[3],
    }
    name, gap = max(gaps.items(), key=lambda item: item[1])  # first of equal gaps wins
    return name if gap >= 0 else None


def relation_holds(a: Box, rel: str, b: Box) -> bool:
    """Whether "a <rel> b" is true for boxes ``a`` and ``b``."""
    if rel == "left of":
        return a[2] <= b[0]
    if rel == "right of":
        return b[2] <= a[0]
    if rel == "above":
        return a[3] <= b[1]
    if rel == "below":
        return b[3] <= a[1]
    raise ValueError(f"unknown relation {rel!r}; expected one of {list(RELATIONS)}")


def _shape_mask(shape: str, x0: int, y0: int, side: int, canvas: int) -> np.ndarray:
    """Boolean (S, S) mask of a shape inscribed in the square at (x0, y0) of the given side."""
    ys, xs = np.mgrid[0:canvas, 0:canvas] + 0.5  # pixel centres
    inside = (xs >= x0) & (xs < x0 + side) & (ys >= y0) & (ys < y0 + side)
    cx, cy, r = x0 + side / 2, y0 + side / 2, side / 2
    if shape == "square":
        return inside
    if shape == "circle":
        return inside & ((xs - cx) ** 2 + (ys - cy) ** 2 <= r**2)
    if shape == "triangle":  # apex at the top centre, base along the bottom edge
        half_width = (ys - y0) / side * r
        return inside & (np.abs(xs - cx) <= half_width + 0.25)
    raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")


def _tight_box(mask: np.ndarray) -> Box:
    rows, cols = np.nonzero(mask)
    return int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1


def _separated(a: tuple[int, int, int], b: tuple[int, int, int], gap: int) -> bool:
    (ax, ay, asz), (bx, by, bsz) = a, b
    return (
        ax + asz + gap <= bx or bx + bsz + gap <= ax or ay + asz + gap <= by or by + bsz + gap <= ay
    )


def generate_scene(
    rng: np.random.Generator,
    *,
    size: int = 32,
    n_objects: int = 2,
    noise: float = 0.0,
    caption_order: str = "random",
) -> Scene:
    """One random scene with ``n_objects`` shapes of distinct colours; see the module docstring.

    The caption chains the objects in random order (``caption_order="random"``), or left to right
    by box centre (``"left_to_right"``), which makes the caption a function of the image: what a
    captioning model needs for exact-match accuracy to be reachable.
    """
    if caption_order not in ("random", "left_to_right"):
        raise ValueError(
            f"caption_order must be 'random' or 'left_to_right', got {caption_order!r}"
        )
    if size < 16:
        raise ValueError(f"size must be >= 16 pixels, got {size}")
    if not 1 <= n_objects <= 3:
        raise ValueError(f"n_objects must be 1, 2 or 3, got {n_objects}")
    min_side, max_side = max(5, round(size * 0.22)), max(5, round(size * 0.32))
    while True:  # rejection sampling; a restart is rare
        squares: list[tuple[int, int, int]] = []
        for _ in range(100 * n_objects):
            side = int(rng.integers(min_side, max_side + 1))
            x, y = (int(v) for v in rng.integers(0, size - side + 1, size=2))
            if all(_separated((x, y, side), other, gap=1) for other in squares):
                squares.append((x, y, side))
                if len(squares) == n_objects:
                    break
        if len(squares) == n_objects:
            break
    colours = [str(c) for c in rng.choice(list(COLOURS), size=n_objects, replace=False)]
    shapes = [str(s) for s in rng.choice(SHAPES, size=n_objects)]
    image = np.zeros((3, size, size), dtype=np.float32)
    objects = []
    for (x, y, side), colour, shape in zip(squares, colours, shapes):
        mask = _shape_mask(shape, x, y, side, size)
        image[:, mask] = np.asarray(COLOURS[colour], dtype=np.float32)[:, None]
        objects.append(SceneObject(colour, shape, _tight_box(mask)))
    if caption_order == "left_to_right":
        objects.sort(key=lambda o: (o.box[0] + o.box[2], o.box[1] + o.box[3]))
    if noise > 0:
        image = np.clip(image + rng.normal(0.0, noise, image.shape), 0.0, 1.0).astype(np.float32)
    caption: list[str] = []
    token_object: list[int] = []
    for i in range(n_objects - 1):  # a chain of clauses: obj0 rel obj1 and obj1 rel obj2
        rel = relation(objects[i].box, objects[i + 1].box)
        assert rel is not None, "boxes are separated by construction"
        if caption:
            caption.append("and")
            token_object.append(-1)
        rel_words = rel.split()
        caption += [objects[i].colour, objects[i].shape, *rel_words]
        caption += [objects[i + 1].colour, objects[i + 1].shape]
        token_object += [i, i, *([-1] * len(rel_words)), i + 1, i + 1]
    if n_objects == 1:
        caption, token_object = [objects[0].colour, objects[0].shape], [0, 0]
    return Scene(torch.from_numpy(image), tuple(objects), tuple(caption), tuple(token_object))


def generate_scenes(
    n: int,
    seed: int,
    *,
    size: int = 32,
    min_objects: int = 2,
    max_objects: int = 3,
    noise: float = 0.0,
    caption_order: str = "random",
) -> list[Scene]:
    """``n`` scenes with ``min_objects``..``max_objects`` shapes each, deterministic in ``seed``."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if not 1 <= min_objects <= max_objects <= 3:
        raise ValueError(f"need 1 <= min_objects <= max_objects <= 3, got {min_objects}, "
                         f"{max_objects}")  # fmt: skip
    from tqdm.auto import tqdm

    rng = np.random.default_rng(seed)
    return [
        generate_scene(
            rng,
            size=size,
            n_objects=int(rng.integers(min_objects, max_objects + 1)),
            noise=noise,
            caption_order=caption_order,
        )
        for _ in tqdm(range(n), desc="scenes", leave=False, disable=n < 5000)  # ~1 s per 2000
    ]


def _clauses(caption: Sequence[str]) -> list[tuple[str, str, str, str, str]]:
    """Split caption words into (colour, shape, relation, colour, shape) clauses."""
    clauses, words = [], list(caption)
    while words:
        n_rel = 2 if len(words) > 2 and words[2] in ("left", "right") else 1
        clause, words = words[: 4 + n_rel], words[4 + n_rel :]
        if len(clause) != 4 + n_rel or (words and words.pop(0) != "and"):
            raise ValueError(f"not a scene caption: {' '.join(caption)!r}")
        rel = " ".join(clause[2 : 2 + n_rel])
        clauses.append((clause[0], clause[1], rel, clause[-2], clause[-1]))
    return clauses


def caption_is_true(objects: Sequence[SceneObject], caption: Sequence[str]) -> bool:
    """Whether every clause of ``caption`` names objects that exist and a relation that holds."""
    if len(caption) == 2:  # a one-object caption: "red circle"
        return any((o.colour, o.shape) == tuple(caption) for o in objects)
    by_name = {(o.colour, o.shape): o for o in objects}
    for colour_a, shape_a, rel, colour_b, shape_b in _clauses(caption):
        a, b = by_name.get((colour_a, shape_a)), by_name.get((colour_b, shape_b))
        if a is None or b is None or rel not in RELATIONS or not relation_holds(a.box, rel, b.box):
            return False
    return True


def mismatched_caption(
    scene: Scene, rng: np.random.Generator, *, others: Sequence[Scene] = ()
) -> tuple[str, ...]:
    """A caption that is false for ``scene``: a flipped relation, a wrong colour or shape, or
    (if ``others`` are given) another scene's caption. Hard negatives for image-text matching."""
    words = list(scene.caption)
    for _ in range(100):
        kind = rng.choice(["relation", "colour", "shape", "other"][: 4 if others else 3])
        candidate = list(words)
        if kind == "other":
            candidate = list(others[int(rng.integers(len(others)))].caption)
        elif kind == "relation" and len(words) > 2:
            clauses = _clauses(words)
            k = int(rng.integers(len(clauses)))
            a_colour, a_shape, rel, b_colour, b_shape = clauses[k]
            clauses[k] = (a_colour, a_shape, RELATIONS[rel], b_colour, b_shape)
            candidate = " and ".join(" ".join(c) for c in clauses).split()
        else:
            positions = [i for i, o in enumerate(scene.token_object) if o >= 0]
            i = positions[int(rng.integers(len(positions)))]
            pool = COLOURS if words[i] in COLOURS else SHAPES
            candidate[i] = str(rng.choice([w for w in pool if w != words[i]]))
        if not caption_is_true(scene.objects, candidate):
            return tuple(candidate)
    raise RuntimeError("could not build a false caption for this scene")


def _encode_scene(scene: Scene, vocab: Vocab) -> dict[str, Tensor]:
    return {
        "image": scene.image,  # (3, S, S)
        "caption": torch.tensor(vocab.encode(scene.caption, add_bos=True, add_eos=True)),
        "token_object": torch.tensor([-1, *scene.token_object, -1]),  # aligned with caption
        "boxes": torch.tensor([o.box for o in scene.objects], dtype=torch.float32),  # (N, 4)
        "colours": torch.tensor([list(COLOURS).index(o.colour) for o in scene.objects]),
        "shapes": torch.tensor([SHAPES.index(o.shape) for o in scene.objects]),
    }


def scene_collate(batch: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Stack images, pad captions with ``[PAD]`` = 0 and per-object fields with -1 (boxes with 0).

    Returns ``image (B, 3, S, S)``, ``caption (B, T)``, ``caption_lengths (B,)``,
    ``token_object (B, T)``, ``boxes (B, N, 4)``, ``colours (B, N)``, ``shapes (B, N)``,
    ``n_objects (B,)`` and, when present, ``label (B,)`` (image-text matching).
    """
    if len(batch) == 0:
        raise ValueError("scene_collate got an empty batch")
    caption, lengths = pad_sequences([b["caption"] for b in batch], pad_id=0)
    token_object, _ = pad_sequences([b["token_object"] for b in batch], pad_id=-1)
    n_objects = torch.tensor([len(b["boxes"]) for b in batch])
    N = int(n_objects.max())
    boxes = torch.zeros(len(batch), N, 4)  # (B, N, 4)
    colours = torch.full((len(batch), N), -1, dtype=torch.long)  # (B, N)
    shapes = torch.full((len(batch), N), -1, dtype=torch.long)  # (B, N)
    for i, b in enumerate(batch):
        n = len(b["boxes"])
        boxes[i, :n], colours[i, :n], shapes[i, :n] = b["boxes"], b["colours"], b["shapes"]
    out = {
        "image": torch.stack([b["image"] for b in batch]),  # (B, 3, S, S)
        "caption": caption,
        "caption_lengths": lengths,
        "token_object": token_object,
        "boxes": boxes,
        "colours": colours,
        "shapes": shapes,
        "n_objects": n_objects,
    }
    if "label" in batch[0]:
        out["label"] = torch.stack([torch.as_tensor(b["label"]) for b in batch])
    return out


class SceneDataset(Dataset):
    """Scenes as dicts: ``image (3, S, S)``, ``caption (T,)`` wrapped in BOS/EOS,
    ``token_object (T,)``, ``boxes (N, 4)``, ``colours (N,)``, ``shapes (N,)``.

    Use ``DataLoader(ds, batch_size=..., collate_fn=ds.collate)``; see :func:`scene_collate`.
    Keyword arguments are those of :func:`generate_scenes`.
    """

    collate = staticmethod(scene_collate)

    def __init__(self, n: int, seed: int, *, size: int = 32, **kwargs: Any):
        self.scenes = generate_scenes(n, seed, size=size, **kwargs)
        self.vocab = scene_vocab()
        self.size = size

    def __len__(self) -> int:
        return len(self.scenes)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return _encode_scene(self.scenes[index], self.vocab)


class MatchingDataset(Dataset):
    """Image-text matching: each scene with its true caption (``label`` 1) or, with probability
    ``negative_fraction``, a false one from :func:`mismatched_caption` (``label`` 0).

    Items are :class:`SceneDataset` dicts plus ``label``; ``token_object`` of a false caption is
    all -1 (its words need not name objects of the image).
    """

    collate = staticmethod(scene_collate)

    def __init__(
        self, n: int, seed: int, *, size: int = 32, negative_fraction: float = 0.5, **kwargs: Any
    ):
        if not 0.0 <= negative_fraction <= 1.0:
            raise ValueError(f"negative_fraction must be in [0, 1], got {negative_fraction}")
        self.scenes = generate_scenes(n, seed, size=size, **kwargs)
        self.vocab = scene_vocab()
        rng = np.random.default_rng([seed, 1])
        self.captions: list[tuple[str, ...]] = []
        self.labels: list[int] = []
        for scene in self.scenes:
            negative = bool(rng.random() < negative_fraction)
            # another scene's caption is only kept if it is false for this one
            self.captions.append(
                mismatched_caption(scene, rng, others=self.scenes) if negative else scene.caption
            )
            self.labels.append(0 if negative else 1)

    def __len__(self) -> int:
        return len(self.scenes)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        item = _encode_scene(self.scenes[index], self.vocab)
        caption = self.captions[index]
        item["caption"] = torch.tensor(self.vocab.encode(caption, add_bos=True, add_eos=True))
        if self.labels[index] == 0:
            item["token_object"] = torch.full((len(caption) + 2,), -1, dtype=torch.long)
        item["label"] = torch.tensor(self.labels[index])
        return item
