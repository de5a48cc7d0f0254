"""Check data: the visible checks know the references' outputs, not their code.

In the student edition of ``course_lib`` (``python -m autograder embargo``), the body of each
object that an assignment grades is replaced, while its solutions are embargoed, by a call to
:func:`replay`. When the bundle is built, the instructor's edition runs every visible check with
the reference answers and records each call of an embargoed object: a digest of its arguments (the
inputs, the module's weights and settings) and what it returned. ``replay`` looks the call up in
``course_lib/checks/data/<module>.pt``: a check that calls the reference on its own inputs (the
expected output, or the output of a usual mistake such as a pre-norm block) gets the recorded
answer, so its diagnoses stay the same; any other call raises ``NotImplementedError`` naming where
the student implements the object. The hidden tests draw fresh inputs: the recorded answers are
worth nothing there.
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

import torch
from torch import nn

DATA = Path(__file__).resolve().parent / "data"
_TABLE: dict[str, Any] | None = None
_SIMPLE = (int, float, bool, str, bytes, type(None))


def digest(value: Any) -> str:
    """A stable digest of arguments: tensors by content, modules by weights and settings."""
    h = hashlib.sha256()
    _feed(h, value, 0, None)
    return h.hexdigest()


def structure(value: Any) -> tuple[str, list[torch.Tensor]]:
    """The digest of everything but the floating-point values, and those values in order."""
    h, floats = hashlib.sha256(), []
    _feed(h, value, 0, floats)
    return h.hexdigest(), floats


def _feed(h: Any, value: Any, depth: int, floats: list | None) -> None:  # noqa: C901
    """Hash ``value``; with a list ``floats``, collect float tensors and hash only their shape."""
    if depth > 12:
        h.update(b"<deep>")
        return
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        if floats is not None and t.is_floating_point():
            floats.append(t.clone())
        else:
            h.update(t.numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, nn.Module):
        h.update(f"M{type(value).__module__}.{type(value).__qualname__}".encode())
        for name, tensor in value.state_dict().items():
            h.update(name.encode())
            _feed(h, tensor, depth + 1, floats)
        for name, module in value.named_modules():
            h.update(f"m{name}:{type(module).__qualname__}:{module.training}".encode())
            for key, item in sorted(vars(module).items()):
                if key.startswith("_") or isinstance(item, torch.Tensor | nn.Module):
                    continue
                h.update(key.encode())
                _feed(h, item, depth + 1, floats)
    elif isinstance(value, torch.Generator):
        _feed(h, value.get_state(), depth + 1, None)
    elif isinstance(value, _SIMPLE):
        h.update(f"{type(value).__name__}:{value!r}".encode())
    elif isinstance(value, list | tuple):
        h.update(f"{type(value).__name__}{len(value)}".encode())
        for item in value:
            _feed(h, item, depth + 1, floats)
    elif isinstance(value, dict):
        h.update(f"d{len(value)}".encode())
        for key in sorted(value, key=repr):
            _feed(h, key, depth + 1, floats)
            _feed(h, value[key], depth + 1, floats)
    elif isinstance(value, torch.dtype | torch.device):
        h.update(str(value).encode())
    elif callable(value):
        h.update(
            f"f{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}".encode()
        )
    elif hasattr(value, "__dataclass_fields__"):
        _feed(h, {k: getattr(value, k) for k in value.__dataclass_fields__}, depth + 1, floats)
    else:
        h.update(f"o{type(value).__qualname__}".encode())


def key(qualname: str, arguments: dict[str, Any]) -> str:
    """The exact key of a call: its arguments bit for bit."""
    return f"{qualname}:{digest(list(arguments.items()))}"


def near_key(qualname: str, arguments: dict[str, Any]) -> tuple[str, list[torch.Tensor]]:
    """The key of a call up to its floating-point values (compared with a tolerance)."""
    digest_, floats = structure(list(arguments.items()))
    return f"{qualname}:~{digest_}", floats


def table() -> dict[str, Any]:
    """``{"exact": {key: entry}, "near": {near key: [{"floats", "key"}]}}`` of every data file."""
    global _TABLE
    if _TABLE is None:
        _TABLE = {"exact": {}, "near": {}}
        for path in sorted(DATA.glob("*.pt")) if DATA.is_dir() else []:
            data = torch.load(path, weights_only=True)
            _TABLE["exact"].update(data["exact"])
            for name, candidates in data["near"].items():
                _TABLE["near"].setdefault(name, []).extend(candidates)
    return _TABLE


def _nearest(candidates: list[dict], floats: list[torch.Tensor]) -> str | None:
    """The key of the candidate whose float arguments are all close to ``floats``."""
    best, best_gap = None, float("inf")
    for candidate in candidates:
        recorded = candidate["floats"]
        if len(recorded) != len(floats):
            continue
        gap = 0.0
        for a, b in zip(floats, recorded, strict=True):
            if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True):
                gap = float("inf")
                break
            if a.numel():
                gap = max(gap, (a.double() - b.double()).abs().max().item())
        if gap < best_gap:
            best, best_gap = candidate["key"], gap
    return best


def replay(qualname: str, where: str, arguments: dict[str, Any]) -> Any:
    """The recorded output of ``qualname`` on these arguments; else ``NotImplementedError``.

    A call matches a record bit for bit, or else (another CPU, another BLAS: the last bits of an
    input that went through a matrix product differ) the record whose floating-point arguments
    are all within a relative 1e-4.
    """
    data = table()
    entry = data["exact"].get(key(qualname, arguments))
    if entry is None:
        name, floats = near_key(qualname, arguments)
        nearest = _nearest(data["near"].get(name, []), floats)
        entry = data["exact"].get(nearest) if nearest else None
    if entry is None:
        raise NotImplementedError(
            f"You implement this in {where}. (The student edition of course_lib answers only "
            "the visible checks' own calls.)"
        )
    if entry.get("rng") is not None:
        torch.set_rng_state(entry["rng"])
    output = entry["output"]
    if entry.get("type") == "Counter":
        return Counter(output)
    if entry.get("type") == "OrderedDict":
        return OrderedDict(output)
    return output
