"""Loaders for the standard small data sets, from a local path or a URL.

Nothing here runs on import and nothing is downloaded unless you pass a URL: a URL's file is cached
under ``cache_dir`` (default ``$COURSE_LIB_CACHE`` or ``~/.cache/course_lib``) and fetched only if
missing. The course itself runs offline on the generated data sets; these are for readers who want
the real thing:

* tiny-shakespeare (Karpathy's char-rnn text, ~1 MB) for character-level language models;
* MNIST (LeCun et al. 1998) in its original IDX files;
* CIFAR-10 (Krizhevsky 2009) in its "python version" pickled batches.

>>> text = load_tiny_shakespeare(TINY_SHAKESPEARE_URL)  # doctest: +SKIP
>>> images, labels = load_mnist(MNIST_URL, split="test")  # doctest: +SKIP

Shape legend: ``N`` examples.
"""

from __future__ import annotations

import gzip
import os
import pickle
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch import Tensor

TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"  # base: the four file names follow
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"

MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip

# IDX type code -> big-endian numpy dtype
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def default_cache_dir() -> Path:
    """``$COURSE_LIB_CACHE`` if set, else ``~/.cache/course_lib``."""
    return Path(os.environ.get("COURSE_LIB_CACHE", Path.home() / ".cache" / "course_lib"))


def is_url(source: str | os.PathLike) -> bool:
    return isinstance(source, str) and urllib.parse.urlparse(source).scheme in (
        "http", "https", "ftp", "file",
    )  # fmt: skip


def fetch(
    source: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None, hint: str = ""
) -> Path:
    """The local path of ``source``: an existing path as is, a URL downloaded into ``cache_dir``
    (only if not already there). Raises ``FileNotFoundError`` for a missing path and
    ``ConnectionError`` (saying what to do offline) when a download fails."""
    if not is_url(source):
        path = Path(source).expanduser()
        if not path.exists():
            raise FileNotFoundError(
                f"{path} does not exist. Pass the path of a downloaded copy or a URL{hint}."
            )
        return path
    url = str(source)
    name = Path(urllib.parse.urlparse(url).path).name or "download"
    target = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = target / name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    from tqdm.auto import tqdm

    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{name}.", suffix=".part")
    try:
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(url, timeout=60) as response,
        ):
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=name, leave=False) as bar:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
        shutil.move(partial, target)  # complete files only: an interrupted download leaves none
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        Path(partial).unlink(missing_ok=True)
        raise ConnectionError(
            f"could not download {url} ({err}). If you are offline, download it on another "
            f"machine and pass its local path instead, or copy it to {target}."
        ) from err
    return target


def _open_maybe_gzip(path: Path) -> IO[bytes]:
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gzipped else open(path, "rb")


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzipped or not, into an array of its stored shape.

    Layout: two zero bytes, a type code (0x08 = uint8 ...), the number of dimensions, each
    dimension as a big-endian uint32, then the data in row-major order.
    """
    with _open_maybe_gzip(Path(path)) as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number {data[:4]!r})")
    ndim = data[3]
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    offset = 4 + 4 * ndim
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - offset != expected:
        raise ValueError(
            f"{path}: header says shape {shape} ({expected} bytes) but {len(data) - offset} "
            f"bytes follow; the file is truncated or corrupt"
        )
    return (
        np.frombuffer(data, dtype=dtype, offset=offset)
        .reshape(shape)
        .astype(dtype.newbyteorder("="))
    )


def load_tiny_shakespeare(
    source: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None
) -> str:
    """The text of tiny-shakespeare from a local file or a URL (e.g. ``TINY_SHAKESPEARE_URL``).

    For a character model: ``vocab = Vocab.build([text])``, ``ids = vocab.encode(text)``, then
    ``course_lib.data.corpus.TokenBlockDataset(ids, block_size)``.
    """
    path = fetch(source, cache_dir=cache_dir, hint=f" such as {TINY_SHAKESPEARE_URL}")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory; pass the text file (input.txt) itself")
    return path.read_text(encoding="utf-8")


def _check_split(split: str) -> None:
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")


def load_mnist(
    source: str | os.PathLike, *, split: str = "train", cache_dir: str | os.PathLike | None = None
) -> tuple[Tensor, Tensor]:
    """MNIST ``images (N, 28, 28)`` uint8 and ``labels (N,)`` int64.

    ``source`` is a directory holding the IDX files (``train-images-idx3-ubyte.gz`` ...; gzipped or
    not) or a base URL such as ``MNIST_URL`` that the file names are appended to. Divide the
    images by 255 for floats in [0, 1].
    """
    _check_split(split)
    paths = []
    for name in MNIST_FILES[split]:
        if is_url(source):
            base = str(source) if str(source).endswith("/") else f"{source}/"
            paths.append(fetch(base + name, cache_dir=cache_dir))
            continue
        folder = fetch(source, hint=f" such as {MNIST_URL}")
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a directory; pass the folder of the files")
        candidates = [folder / name, folder / name.removesuffix(".gz")]
        found = next((p for p in candidates if p.exists()), None)
        if found is None:
            raise FileNotFoundError(f"{folder} has neither {name} nor {name.removesuffix('.gz')}")
        paths.append(found)
    images, labels = read_idx(paths[0]), read_idx(paths[1])
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(f"MNIST files disagree: images {images.shape}, labels {labels.shape}")
    return torch.from_numpy(images.astype(np.uint8)), torch.from_numpy(labels.astype(np.int64))


def _cifar_batches(path: Path, split: str) -> Iterator[tuple[str, IO[bytes]]]:
    """Yield ``(name, file)`` of the batch files of ``split`` in a tar(.gz) or a directory."""
    pattern = re.compile(r"data_batch_(\d+)" if split == "train" else r"test_batch")

    def key(name: str) -> int:
        match = pattern.fullmatch(Path(name).name)
        return int(match.group(1)) if match and match.groups() else 0

    if path.is_dir():
        files = [p for p in sorted(path.rglob("*")) if pattern.fullmatch(p.name)]
        for file in sorted(files, key=lambda p: key(p.name)):
            with open(file, "rb") as f:
                yield file.name, f
        return
    with tarfile.open(path, "r:*") as tar:
        members = [
            m for m in tar.getmembers() if m.isfile() and pattern.fullmatch(Path(m.name).name)
        ]
        for member in sorted(members, key=lambda m: key(m.name)):
            f = tar.extractfile(member)
            assert f is not None
            yield member.name, f


def load_cifar10(
    source: str | os.PathLike, *, split: str = "train", cache_dir: str | os.PathLike | None = None
) -> tuple[Tensor, Tensor]:
    """CIFAR-10 ``images (N, 3, 32, 32)`` uint8 and ``labels (N,)`` int64 (names in
    ``CIFAR10_CLASSES``).

    ``source`` is ``cifar-10-python.tar.gz`` (a path, or a URL such as ``CIFAR10_URL``) or the
    directory it extracts to. The batches are Python pickles, and unpickling runs code chosen by
    whoever wrote the file: only load files from a source you trust (the official archive).
    """
    _check_split(split)
    path = fetch(source, cache_dir=cache_dir, hint=f" such as {CIFAR10_URL}")
    images, labels = [], []
    for name, f in _cifar_batches(path, split):
        # encoding="bytes": the batches were pickled by Python 2; keys come back as bytes
        batch: dict[bytes, Any] = pickle.load(f, encoding="bytes")  # noqa: S301 (see docstring)
        if b"data" not in batch or b"labels" not in batch:
            raise ValueError(f"{name} is not a CIFAR-10 batch (keys {sorted(batch)})")
        images.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch[b"labels"], dtype=np.int64))
    if not images:
        wanted = "data_batch_1 ... data_batch_5" if split == "train" else "test_batch"
        raise FileNotFoundError(f"no CIFAR-10 {split} batches ({wanted}) found in {path}")
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))
