"""Shared helpers of the hidden A5 suite (trusted process only; never released).

CANARY-HIDDEN-A5-3b8d40f6: planted so the project's tests can assert that no hidden test text
reaches a student.
"""

from __future__ import annotations

import torch
from torch import Tensor

CANARY = "CANARY-HIDDEN-A5-3b8d40f6"
# patchify and patch_embed are the reshape form: no convolution, no unfold
NO_CONVOLUTION = (
    "torch.nn.functional.conv2d",
    "torch.conv2d",
    "torch.nn.Conv2d",
    "torch.nn.functional.unfold",
    "torch.nn.Unfold",
    "torch.Tensor.unfold",
    "aten::convolution",
    "aten::im2col",
    "aten::unfold",
)
ATTENTION = ("sdpa", "multihead_attention", "transformer_modules", "course_lib")


def draw(rng: torch.Generator, low: int, high: int) -> int:
    """A random int in [low, high] (inclusive) from the test's generator."""
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def close(actual: object, expected: Tensor, name: str, atol: float = 1e-5) -> None:
    from course_lib.checks import check_close

    check_close(actual, expected, name=name, atol=atol, rtol=1e-4)


def raised(call) -> str | None:
    """The type name of the exception the student's code raised in ``call()``, or None."""
    from autograder.host.proxy import StudentError

    try:
        call()
    except StudentError as error:
        return error.kind
    return None


def randomise(module: torch.nn.Module, rng: torch.Generator, std: float = 0.5) -> None:
    """Random weights everywhere (LayerNorm gains and biases too), so a missing piece shows."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std, generator=rng)
