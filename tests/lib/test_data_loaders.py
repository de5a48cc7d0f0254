"""Real-data loaders, on small fixture files written here (no network: URLs are file:// URLs)."""

import gzip
import io
import pickle
import struct
import tarfile

import numpy as np
import pytest
import torch

from course_lib.data import fetch, load_cifar10, load_mnist, load_tiny_shakespeare, read_idx


def write_idx(path, array: np.ndarray, code: int, compress: bool) -> None:
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    path.write_bytes(gzip.compress(payload) if compress else payload)


@pytest.fixture
def mnist_dir(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "mnist"
    folder.mkdir()
    data = {}
    for split, n, compress in (("train", 6, True), ("t10k", 4, False)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        suffix = ".gz" if compress else ""
        write_idx(folder / f"{split}-images-idx3-ubyte{suffix}", images, 0x08, compress)
        write_idx(folder / f"{split}-labels-idx1-ubyte{suffix}", labels, 0x08, compress)
        data[split] = (images, labels)
    return folder, data


def test_tiny_shakespeare_from_path_and_url(tmp_path):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n"
    source = tmp_path / "input.txt"
    source.write_text(text)
    assert load_tiny_shakespeare(source) == text
    cache = tmp_path / "cache"
    assert load_tiny_shakespeare(source.as_uri(), cache_dir=cache) == text
    assert (cache / "input.txt").read_text() == text
    source.unlink()  # a second call is served from the cache
    assert load_tiny_shakespeare(source.as_uri(), cache_dir=cache) == text


def test_missing_files_and_failed_downloads(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*URL"):
        load_tiny_shakespeare(tmp_path / "nope.txt")
    cache = tmp_path / "cache"
    with pytest.raises(ConnectionError, match="offline"):
        fetch((tmp_path / "missing.bin").as_uri(), cache_dir=cache)
    assert list(cache.iterdir()) == []  # no partial download left behind
    with pytest.raises(IsADirectoryError):
        load_tiny_shakespeare(tmp_path)


def test_read_idx_types_and_errors(tmp_path):
    for code, dtype in ((0x0C, np.int32), (0x0D, np.float32), (0x0B, np.int16)):
        array = (np.arange(24).reshape(2, 3, 4) - 7).astype(dtype)
        write_idx(tmp_path / "a.idx", array, code, compress=bool(code % 2))
        out = read_idx(tmp_path / "a.idx")
        assert out.dtype == dtype and out.shape == (2, 3, 4)
        np.testing.assert_array_equal(out, array)
    (tmp_path / "bad.idx").write_bytes(b"\x12\x34\x08\x01" + b"\x00" * 8)
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad.idx")
    write_idx(tmp_path / "short.idx", np.zeros((3, 2), np.uint8), 0x08, compress=False)
    (tmp_path / "short.idx").write_bytes((tmp_path / "short.idx").read_bytes()[:-1])
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / "short.idx")


def test_mnist_from_directory_and_url(mnist_dir, tmp_path):
    folder, data = mnist_dir
    for split, key in (("train", "train"), ("test", "t10k")):
        images, labels = load_mnist(folder, split=split)
        assert images.dtype == torch.uint8 and labels.dtype == torch.int64
        np.testing.assert_array_equal(images.numpy(), data[key][0])
        np.testing.assert_array_equal(labels.numpy(), data[key][1])
    cache = tmp_path / "cache"
    images, labels = load_mnist(folder.as_uri() + "/", split="train", cache_dir=cache)
    np.testing.assert_array_equal(images.numpy(), data["train"][0])
    assert sorted(p.name for p in cache.iterdir()) == [
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
    ]
    (folder / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels"):
        load_mnist(folder, split="test")
    with pytest.raises(ValueError, match="split"):
        load_mnist(folder, split="validation")


def cifar_batch(rng, n):
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n).tolist()
    return {b"batch_label": b"fixture", b"data": data, b"labels": labels}


def test_cifar10_from_tar_and_directory(tmp_path):
    rng = np.random.default_rng(1)
    batches = {"data_batch_2": cifar_batch(rng, 3), "data_batch_1": cifar_batch(rng, 2),
               "test_batch": cifar_batch(rng, 4)}  # fmt: skip
    archive = tmp_path / "cifar-10-python.tar.gz"
    folder = tmp_path / "extracted" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    with tarfile.open(archive, "w:gz") as tar:
        for name, batch in batches.items():
            payload = pickle.dumps(batch, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
            (folder / name).write_bytes(payload)
    expected = np.concatenate([batches["data_batch_1"][b"data"], batches["data_batch_2"][b"data"]])
    for source in (archive, folder.parent, archive.as_uri()):
        images, labels = load_cifar10(source, split="train", cache_dir=tmp_path / "cache")
        assert images.shape == (5, 3, 32, 32) and images.dtype == torch.uint8
        # rows are 1024 red values, then green, then blue, each in row-major 32 x 32 order
        np.testing.assert_array_equal(images[0, 1].numpy().ravel(), expected[0, 1024:2048])
        np.testing.assert_array_equal(images.numpy().reshape(5, -1), expected)
        assert (
            labels.tolist()
            == batches["data_batch_1"][b"labels"] + batches["data_batch_2"][b"labels"]
        )
        test_images, test_labels = load_cifar10(source, split="test", cache_dir=tmp_path / "cache")
        assert test_images.shape == (4, 3, 32, 32) and len(test_labels) == 4
    (folder / "test_batch").unlink()
    with pytest.raises(FileNotFoundError, match="test_batch"):
        load_cifar10(folder, split="test")
    (folder / "data_batch_1").write_bytes(pickle.dumps({b"nothing": 1}))
    with pytest.raises(ValueError, match="not a CIFAR-10 batch"):
        load_cifar10(folder, split="train")
