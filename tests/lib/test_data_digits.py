"""scikit-learn digits as tensors: shapes, ranges, a stratified split, upsampling."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib.data import DigitsDataset, digits_loaders, load_digits_tensors, stratified_split


def test_tensors_match_sklearn():
    from sklearn.datasets import load_digits

    raw = load_digits()
    images, labels = load_digits_tensors()
    assert images.shape == (1797, 1, 8, 8) and images.dtype == torch.float32
    assert labels.shape == (1797,) and labels.dtype == torch.int64
    assert images.min() == 0.0 and images.max() == 1.0
    np.testing.assert_allclose(images[:, 0].numpy() * 16, raw.images, atol=1e-5)
    assert labels.tolist() == raw.target.tolist()


@pytest.mark.parametrize("size", [16, 32])
def test_upsampling(size):
    small, _ = load_digits_tensors()
    big, _ = load_digits_tensors(size=size)
    assert big.shape == (1797, 1, size, size)
    assert 0.0 <= big.min() and big.max() <= 1.0
    # averaging the upsampled image back down gives (nearly) the original
    back = F.avg_pool2d(big, size // 8)
    corr = np.corrcoef(back.flatten().numpy(), small.flatten().numpy())[0, 1]
    assert corr > 0.95
    nearest, _ = load_digits_tensors(size=size, mode="nearest")
    assert torch.equal(nearest[:, :, :: size // 8, :: size // 8], small)


def test_stratified_split():
    _, labels = load_digits_tensors()
    train, test = stratified_split(labels, test_fraction=0.2, seed=0)
    assert len(set(train.tolist()) & set(test.tolist())) == 0
    assert sorted(train.tolist() + test.tolist()) == list(range(1797))
    counts = torch.bincount(labels, minlength=10)
    test_counts = torch.bincount(labels[test], minlength=10)
    assert test_counts.tolist() == [round(0.2 * c) for c in counts.tolist()]
    again, _ = stratified_split(labels, test_fraction=0.2, seed=0)
    other, _ = stratified_split(labels, test_fraction=0.2, seed=1)
    assert torch.equal(train, again) and not torch.equal(train, other)


def test_datasets_and_loaders():
    train, test = DigitsDataset(split="train"), DigitsDataset(split="test")
    assert len(train) + len(test) == 1797 == len(DigitsDataset(split="all"))
    image, label = test[0]
    assert image.shape == (1, 8, 8) and 0 <= int(label) < 10
    a, b = digits_loaders(64, seed=3, size=16)
    x, y = next(iter(a))
    assert x.shape == (64, 1, 16, 16) and y.shape == (64,)
    x2, y2 = next(iter(digits_loaders(64, seed=3, size=16)[0]))
    assert torch.equal(y, y2) and torch.equal(x, x2)  # shuffling is seeded
    assert len(b.dataset) == len(test)


def test_bad_arguments():
    with pytest.raises(ValueError, match="size"):
        load_digits_tensors(size=4)
    with pytest.raises(ValueError, match="mode"):
        load_digits_tensors(size=16, mode="bicubic")
    with pytest.raises(ValueError, match="split"):
        DigitsDataset(split="val")
    with pytest.raises(ValueError, match="test_fraction"):
        stratified_split(np.zeros(10), test_fraction=1.0)
    with pytest.raises(ValueError, match="batch_size"):
        digits_loaders(0)
