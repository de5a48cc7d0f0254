"""Forbidden calls: how a hidden test says "write this by hand", and how it is enforced.

A test declares ``@pytest.mark.forbid("sdpa", "multihead_attention", "course_lib.attention")``.
Each entry is either a preset below or a spec:

- a dotted Python name: a torch function or method (``torch.nn.functional.softmax``,
  ``torch.Tensor.softmax``), an ``nn.Module`` class (``torch.nn.MultiheadAttention``), a Python
  function, or a whole module (``course_lib.attention``: every function and class in it);
- an ATen operator glob, ``aten::*scaled_dot_product*``.

Enforcement is twofold. In the trusted process a static scan of the code the worker will run
(:mod:`autograder.host.scan`) flags references through any import alias. In the worker, every call
that test makes runs under a ``TorchFunctionMode`` (torch functions, by identity), a
``TorchDispatchMode`` (ATen op names), a global module forward pre-hook (module classes) and a
profile hook (plain Python functions), so indirections such as ``getattr(F, "scaled_" + ...)``,
an alias, or a module that calls the forbidden function internally are caught too.

These watch one thread, inside the student's interpreter, so the sandbox keeps them there and
out of reach (:mod:`autograder.sandbox.audit`): threads are refused (by the kernel where the worker
has a uid of its own), the grader's modules cannot be imported, and the routes to the detector's
objects (``gc``, frames, trace and profile hooks, new code objects) are refused to student code
and reported: such a test fails as tampering.
"""

from __future__ import annotations

import functools
import importlib
import types
from typing import Any

PRESETS: dict[str, tuple[str, ...]] = {
    "sdpa": (
        "torch.nn.functional.scaled_dot_product_attention",
        "aten::*scaled_dot_product*",
    ),
    "multihead_attention": (
        "torch.nn.MultiheadAttention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch._native_multi_head_attention",
        "aten::_native_multi_head_attention",
    ),
    "transformer_modules": (
        "torch.nn.Transformer",
        "torch.nn.TransformerEncoder",
        "torch.nn.TransformerDecoder",
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerDecoderLayer",
    ),
    "layer_norm": (
        "torch.nn.LayerNorm",
        "torch.nn.functional.layer_norm",
        "torch.layer_norm",
        "torch.native_layer_norm",
        "aten::native_layer_norm",
    ),
    "softmax": (
        "torch.softmax",
        "torch.nn.functional.softmax",
        "torch.Tensor.softmax",
        "torch.nn.Softmax",
        "aten::_softmax",
        "aten::_safe_softmax",
    ),
    "rnn_modules": ("torch.nn.GRU", "torch.nn.LSTM", "torch.nn.RNN"),
    "course_lib": (
        "course_lib.attention",
        "course_lib.layers",
        "course_lib.positional",
        "course_lib.masking",
        "course_lib.models",
        "course_lib.vision",
        "course_lib.checks",
    ),
}


def expand(names: list[str] | tuple[str, ...]) -> list[str]:
    """Presets replaced by their specs, duplicates removed, order kept."""
    out: list[str] = []
    for name in names:
        for spec in PRESETS.get(name, (name,)):
            if spec not in out:
                out.append(spec)
    return out


def validate(names: list[str] | tuple[str, ...]) -> list[str]:
    """Error messages for specs that are neither presets, aten globs nor dotted names."""
    bad = []
    for name in names:
        if not isinstance(name, str) or not name:
            bad.append(f"forbid entry {name!r} is not a non-empty string")
        elif name in PRESETS or name.startswith("aten::"):
            continue
        elif not all(part.isidentifier() for part in name.split(".")):
            bad.append(
                f"forbid entry {name!r} is neither a preset ({', '.join(PRESETS)}), an 'aten::' "
                "glob nor a dotted Python name"
            )
    return bad


def resolve(spec: str) -> Any:
    """Import the object a dotted spec names; None if it cannot be found."""
    parts = spec.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


@functools.cache
def is_module_spec(spec: str) -> bool:
    """Whether ``spec`` names a module (imports it; cached, so a process that forks after
    asking answers for its children too)."""
    return isinstance(resolve(spec), types.ModuleType)
