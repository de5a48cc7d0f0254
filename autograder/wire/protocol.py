"""The wire format between the trusted grader and a sandboxed worker: framed, plain data only.

Every message is one ``torch.save`` payload behind an 8-byte length. The receiving side always
loads with ``torch.load(weights_only=True)``, so only tensors, numbers, strings, bytes, ``None``,
dtypes, devices, sizes and nested lists / tuples / dicts can cross; an arbitrary pickle (a class
the student defined, a tensor subclass, a function) is refused by the loader.

Before anything is decoded, a message is checked (:func:`check_archive`): at most
``MAX_RECORDS`` archive entries, none compressed (``torch.save`` never compresses; a deflated
storage is how a 1 MB message becomes 1 GB), their sizes adding up to the message's. After the
restricted unpickler ran, :func:`check_plain` walks the result as the receiver will (a shared list
counts once per reference): at most ``MAX_NODES`` values, ``MAX_DEPTH`` levels and ``MAX_BYTES``
of tensor data, so a small pickle of shared nested lists cannot expand into gigabytes.

Objects that are not plain data (an ``nn.Module`` the student's code built, an optimizer, a
generator) stay in the worker; what crosses is a marker ``{REMOTE_KEY: id, "type": "Cls"}`` that
the trusted side turns into a :class:`autograder.host.proxy.Remote` handle.
"""

from __future__ import annotations

import io
import socket
import struct
import zipfile
from typing import Any

import torch

REMOTE_KEY = "__autograder_remote__"
HEADER = struct.Struct(">Q")
MAX_MESSAGE = 512 * 1024**2  # a reply larger than this is refused (e.g. a 10 GB tensor)
MAX_DEPTH = 32
MAX_RECORDS = 20_000  # archive entries (one per tensor storage, plus a few)
MAX_NODES = 2_000_000  # values in a decoded message, counting shared ones once per reference
MAX_BYTES = 1024**3  # tensor data in a decoded message, shared storages counted per reference


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed plain-data message."""


def dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def check_archive(data: bytes) -> None:
    """Refuse an archive whose decoding could cost more than its size (before decoding it)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        raise ProtocolError(f"message is not a torch.save archive ({error})") from None
    if len(infos) > MAX_RECORDS:
        raise ProtocolError(f"message has {len(infos)} records (at most {MAX_RECORDS})")
    total = 0
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise ProtocolError(f"message record {info.filename[-40:]!r} is compressed")
        total += info.file_size
    if total > len(data):
        raise ProtocolError("message records add up to more than the message")
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
        raise ProtocolError("message has duplicate records")


def check_plain(obj: Any, *, nodes: int = MAX_NODES, data: int = MAX_BYTES) -> None:
    """Refuse a decoded message that, walked as a tree (a shared list counts once per reference),
    holds more than ``nodes`` values, ``MAX_DEPTH`` + 2 levels or ``data`` bytes of tensors.
    Sizes are computed once per distinct object, so the cost is that of the message, not of
    the tree it stands for."""
    limit = MAX_DEPTH + 2
    memo: dict[int, tuple[int, int, int]] = {}  # id -> (values, tensor bytes, height)

    def measure(value: Any, depth: int) -> tuple[int, int, int]:
        if depth > limit:
            raise ProtocolError("message is nested too deeply")
        known = memo.get(id(value))
        if known is not None:
            if depth + known[2] > limit:
                raise ProtocolError("message is nested too deeply")
            return known
        if isinstance(value, torch.Tensor):
            logical = value.numel() * value.element_size()  # a stride-0 view is not small
            result = (1, max(value.untyped_storage().nbytes(), logical), 0)
        elif isinstance(value, (dict, list, tuple)):
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            count, size, height = 1, 0, 0
            for child in children:
                n, b, h = measure(child, depth + 1)
                count, size, height = count + n, size + b, max(height, h + 1)
                if count > nodes:
                    raise ProtocolError(f"message holds more than {nodes} values")
                if size > data:
                    raise ProtocolError(f"message holds more than {data} bytes of tensors")
            result = (count, size, height)
        else:
            return (1, 0, 0)
        memo[id(value)] = result
        return result

    measure(obj, 0)


def loads(data: bytes) -> Any:
    check_archive(data)
    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as error:  # the loader refuses anything but plain data
        raise ProtocolError(f"message is not plain data: {type(error).__name__}: {error}") from None
    check_plain(obj)
    return obj


def send(sock: socket.socket, obj: Any) -> None:
    payload = dumps(obj)
    sock.sendall(HEADER.pack(len(payload)) + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket, *, limit: int = MAX_MESSAGE) -> Any:
    (size,) = HEADER.unpack(_recv_exact(sock, HEADER.size))
    if size > limit:
        raise ProtocolError(f"message of {size} bytes exceeds the {limit}-byte limit")
    return loads(_recv_exact(sock, size))


def plain_tensor(t: torch.Tensor) -> torch.Tensor:
    """A detached, compact, plain ``torch.Tensor`` (no subclass, no shared oversized storage)."""
    t = t.detach()
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous() or t.untyped_storage().nbytes() != t.numel() * t.element_size():
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def to_plain(obj: Any, keep: Any, depth: int = 0) -> Any:
    """Convert ``obj`` to plain data; ``keep(obj) -> marker`` is called for everything else."""
    if depth > MAX_DEPTH:
        raise ValueError("value is nested too deeply to send")
    if isinstance(obj, torch.Tensor):
        return plain_tensor(obj)
    if obj is None or type(obj) in (bool, int, float, complex, str, bytes):
        return obj
    if isinstance(obj, (torch.dtype, torch.device, torch.Size)):
        return obj
    for base in (bool, int, float, complex, str, bytes):  # enums, str subclasses, ...
        if isinstance(obj, base):
            return base(obj)
    module = type(obj).__module__
    if module == "numpy":
        import numpy as np

        if isinstance(obj, np.ndarray):
            return plain_tensor(torch.from_numpy(np.ascontiguousarray(obj)))
        if isinstance(obj, np.generic):
            return obj.item()
    if isinstance(obj, dict) and not any(REMOTE_KEY == k for k in obj):
        return {to_plain(k, keep, depth + 1): to_plain(v, keep, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [to_plain(v, keep, depth + 1) for v in obj]
        return items if isinstance(obj, list) else tuple(items)
    return keep(obj)


def remote_marker(handle: int, obj: Any) -> dict:
    cls = type(obj)
    return {REMOTE_KEY: handle, "type": f"{cls.__module__}.{cls.__qualname__}"}


def is_remote_marker(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get(REMOTE_KEY), int)
