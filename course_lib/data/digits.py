"""scikit-learn's bundled handwritten digits (1,797 images of 8x8 pixels, 10 classes) as tensors.

The data ship inside scikit-learn (``sklearn.datasets.load_digits``, a copy of the UCI "Optical
Recognition of Handwritten Digits" test set), so nothing is downloaded. Small enough to train a
tiny Vision Transformer (Dosovitskiy et al. 2021) on a laptop CPU in a minute; upsampled to 16 or 32
pixels they give patch grids of a more familiar size.

Shape legend: ``B`` batch, ``S`` image side (8, or the upsampled size).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

NUM_CLASSES = 10
DIGITS_SIZE = 8


@lru_cache(maxsize=1)
def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # imported here: sklearn is slow to import

    bunch = load_digits()
    return bunch.images.astype(np.float32) / 16.0, bunch.target.astype(np.int64)


def load_digits_tensors(
    *, size: int = DIGITS_SIZE, mode: str = "bilinear"
) -> tuple[Tensor, Tensor]:
    """All digits: ``images (1797, 1, S, S)`` float in [0, 1] and ``labels (1797,)`` int64.

    ``size`` > 8 upsamples with ``torch.nn.functional.interpolate`` (``mode`` "bilinear" or
    "nearest"); bilinear interpolation mixes neighbours convexly, so values stay in [0, 1].
    """
    if not isinstance(size, int) or size < DIGITS_SIZE:
        raise ValueError(f"size must be an int >= {DIGITS_SIZE} (upsampling only), got {size!r}")
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"mode must be 'bilinear' or 'nearest', got {mode!r}")
    images, labels = _raw_digits()
    x = torch.from_numpy(images.copy()).unsqueeze(1)  # (N, 1, 8, 8)
    if size != DIGITS_SIZE:
        kwargs = {"align_corners": False} if mode == "bilinear" else {}
        x = F.interpolate(x, size=(size, size), mode=mode, **kwargs).clamp_(
            0.0, 1.0
        )  # (N, 1, S, S)
    return x, torch.from_numpy(labels.copy())


def stratified_split(
    labels: Tensor | np.ndarray, *, test_fraction: float = 0.2, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """Indices ``(train, test)`` with ``round(test_fraction * count)`` test items of every class.

    Deterministic in ``seed``; both index tensors are sorted.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be strictly between 0 and 1, got {test_fraction}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_test = int(round(test_fraction * len(members)))
        test.append(members[:n_test])
        train.append(members[n_test:])
    return (
        torch.from_numpy(np.sort(np.concatenate(train))),
        torch.from_numpy(np.sort(np.concatenate(test))),
    )


class DigitsDataset(Dataset):
    """One split of the digits: items ``(image (1, S, S) float in [0, 1], label int64 scalar)``.

    ``split`` is "train", "test" or "all"; the split is stratified and fixed by ``seed``.
    """

    def __init__(
        self,
        *,
        split: str = "train",
        seed: int = 0,
        size: int = DIGITS_SIZE,
        test_fraction: float = 0.2,
        mode: str = "bilinear",
    ):
        if split not in ("train", "test", "all"):
            raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
        images, labels = load_digits_tensors(size=size, mode=mode)
        if split != "all":
            train, test = stratified_split(labels, test_fraction=test_fraction, seed=seed)
            index = train if split == "train" else test
            images, labels = images[index], labels[index]
        self.images, self.labels = images, labels  # (N, 1, S, S), (N,)
        self.split, self.size = split, size

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.images[index], self.labels[index]


def digits_loaders(
    batch_size: int,
    seed: int = 0,
    size: int = DIGITS_SIZE,
    *,
    test_fraction: float = 0.2,
    mode: str = "bilinear",
    num_workers: int = 0,
) -> tuple[DataLoader, DataLoader]:
    """``(train_loader, test_loader)`` of :class:`DigitsDataset` batches
    ``(images (B, 1, S, S), labels (B,))``; the training order is shuffled reproducibly from
    ``seed``, the test order is fixed."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    common = {"seed": seed, "size": size, "test_fraction": test_fraction, "mode": mode}
    train = DigitsDataset(split="train", **common)
    test = DigitsDataset(split="test", **common)
    generator = torch.Generator().manual_seed(seed)
    return (
        DataLoader(
            train, batch_size=batch_size, shuffle=True, generator=generator, num_workers=num_workers
        ),
        DataLoader(test, batch_size=batch_size, shuffle=False, num_workers=num_workers),
    )
