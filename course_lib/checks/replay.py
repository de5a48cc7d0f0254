"""Check data: the visible checks know the references' outputs, not their code.

In the student edition of ``course_lib`` (``python -m autograder.embargo``), the body of each
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


def digest(value: Any, rounded: bool = False) -> str:
    """A stable digest of arguments: tensors by content, modules by weights and settings.

    ``rounded``: floating-point tensors in half precision, so that an input that went through a
    matrix product (whose last bits depend on the CPU and its BLAS) still finds its record on
    another machine.
    """
    h = hashlib.sha256()
    _feed(h, value, 0, rounded)
    return h.hexdigest()


def _feed(h: Any, value: Any, depth: int, rounded: bool) -> None:  # noqa: C901 (one case per kind of value)
    if depth > 12:
        h.update(b"<deep>")
        return
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        elif rounded and t.is_floating_point():
            t = t.to(torch.float16)
        h.update(t.numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, nn.Module):
        h.update(f"M{type(value).__module__}.{type(value).__qualname__}".encode())
        for name, tensor in value.state_dict().items():
            h.update(name.encode())
            _feed(h, tensor, depth + 1, rounded)
        for name, module in value.named_modules():
            h.update(f"m{name}:{type(module).__qualname__}:{module.training}".encode())
            for key, item in sorted(vars(module).items()):
                if key.startswith("_") or isinstance(item, torch.Tensor | nn.Module):
                    continue
                h.update(key.encode())
                _feed(h, item, depth + 1, rounded)
    elif isinstance(value, torch.Generator):
        _feed(h, value.get_state(), depth + 1, rounded)
    elif isinstance(value, _SIMPLE):
        h.update(f"{type(value).__name__}:{value!r}".encode())
    elif isinstance(value, list | tuple):
        h.update(f"{type(value).__name__}{len(value)}".encode())
        for item in value:
            _feed(h, item, depth + 1, rounded)
    elif isinstance(value, dict):
        h.update(f"d{len(value)}".encode())
        for key in sorted(value, key=repr):
            _feed(h, key, depth + 1, rounded)
            _feed(h, value[key], depth + 1, rounded)
    elif isinstance(value, torch.dtype | torch.device):
        h.update(str(value).encode())
    elif callable(value):
        h.update(
            f"f{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}".encode()
        )
    elif hasattr(value, "__dataclass_fields__"):
        _feed(h, {k: getattr(value, k) for k in value.__dataclass_fields__}, depth + 1, rounded)
    else:
        h.update(f"o{type(value).__qualname__}".encode())


def key(qualname: str, arguments: dict[str, Any], rounded: bool = False) -> str:
    return f"{qualname}:{'~' if rounded else ''}{digest(list(arguments.items()), rounded)}"


def table() -> dict[str, Any]:
    global _TABLE
    if _TABLE is None:
        _TABLE = {}
        for path in sorted(DATA.glob("*.pt")) if DATA.is_dir() else []:
            _TABLE.update(torch.load(path, weights_only=True))
    return _TABLE


def replay(qualname: str, where: str, arguments: dict[str, Any]) -> Any:
    """The recorded output of ``qualname`` on these arguments; else ``NotImplementedError``."""
    entry = table().get(key(qualname, arguments))
    if entry is None:  # the same call up to the last bits (another CPU, another BLAS)
        entry = table().get(key(qualname, arguments, rounded=True))
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
