"""Generic visible checks: shapes and values, with messages that say what is wrong and why.

These run in the student's notebook. They hold no hidden test and no grading logic: passing them
is a hint that an implementation is on track, not the grade.

Shape legend used in messages: B batch, T tokens (T_q queries, T_k keys), D head dim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

RECORDED = Path(__file__).resolve().parent / "recorded"


class CheckFailed(AssertionError):
    """A visible check failed; the message names the mistake and how to fix it."""


def passed(what: str) -> None:
    """Print the one-line success message of a check cell."""
    print(f"\N{CHECK MARK} {what}")


@cache
def recorded(assignment: str) -> dict[str, Any]:
    """The reference answers recorded for ``assignment``'s visible checks
    (``recorded/<assignment>.pt``, written by the recorder beside its hidden suite)."""
    return torch.load(RECORDED / f"{assignment}.pt", weights_only=True)


def call_student(
    fn: Callable[..., Any], *args: Any, what: str, hint: str = "", **kwargs: Any
) -> Any:
    """Call the student's code; turn a crash into a message that says where to look."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(
            f"{what} is not implemented yet (it raises NotImplementedError)"
        ) from None
    except CheckFailed:
        raise
    except Exception as error:  # noqa: BLE001 (any error of the student's code is reported)
        raise CheckFailed(
            f"{what} raised {type(error).__name__}: {error}" + (f". {hint}" if hint else "")
        ) from error


def _fmt_shape(shape: Sequence[Any]) -> str:
    return "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"


def check_shape(
    actual: Any,
    expected: Sequence[int | None],
    *,
    name: str = "output",
    dims: Sequence[str] | None = None,
) -> None:
    """Check that ``actual`` is a tensor of shape ``expected`` (``None`` matches any size).

    ``dims`` names the dimensions for the message, e.g. ``("B", "T_q", "D")``.
    """
    if not isinstance(actual, Tensor):
        raise CheckFailed(
            f"{name} should be a torch.Tensor of shape {_fmt_shape(expected)}, "
            f"got {type(actual).__name__}"
            + (": did you forget a `return`?" if actual is None else "")
        )
    got = tuple(actual.shape)
    want = tuple(expected)
    named = f" = ({', '.join(dims)})" if dims else ""
    if len(got) != len(want):
        raise CheckFailed(
            f"wrong number of dimensions in {name}: got {len(got)}, {got}, expected {len(want)}: "
            f"{_fmt_shape(want)}{named}. Check for a missing or extra unsqueeze / squeeze / "
            "reduction."
        )
    wrong = [i for i, (g, w) in enumerate(zip(got, want)) if w is not None and g != w]
    if not wrong:
        return
    hint = ""
    if sorted(got) == sorted(w for w in want if w is not None) and None not in want:
        hint = " The sizes are all there but in another order: is something transposed?"
    details = ", ".join(
        f"dimension {i}{f' ({dims[i]})' if dims else ''} is {got[i]}, expected {want[i]}"
        for i in wrong
    )
    raise CheckFailed(
        f"wrong shape for {name}: got {got}, expected {_fmt_shape(want)}{named}: {details}.{hint}"
    )


def _where(diff: Tensor) -> str:
    index = torch.nonzero(diff == diff.max())[0].tolist()
    return "[" + ", ".join(map(str, index)) + "]"


def close(actual: Tensor, expected: Tensor, *, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """``torch.allclose`` that is False (not an error) for different shapes or dtypes."""
    if not isinstance(actual, Tensor) or actual.shape != expected.shape:
        return False
    if actual.is_complex() != expected.is_complex():
        return False  # ``.double()`` would silently drop an imaginary part
    if actual.is_complex():
        return bool(torch.allclose(actual.cdouble(), expected.cdouble(), atol=atol, rtol=rtol))
    return bool(torch.allclose(actual.double(), expected.double(), atol=atol, rtol=rtol))


def check_close(
    actual: Any,
    expected: Tensor,
    *,
    name: str = "output",
    atol: float = 1e-5,
    rtol: float = 1e-4,
    mistakes: Mapping[str, Tensor] | None = None,
    dims: Sequence[str] | None = None,
) -> None:
    """Check ``actual`` against ``expected``; diagnose it if it equals a known wrong answer.

    ``mistakes`` maps a description of a common error (e.g. "the scores are divided by D instead
    of sqrt(D)") to the output that error produces on the same inputs.
    """
    check_shape(actual, tuple(expected.shape), name=name, dims=dims)
    if actual.is_complex() and not expected.is_complex():
        raise CheckFailed(
            f"{name} is a complex tensor ({actual.dtype}), expected real values ({expected.dtype}):"
            " keep the computation real (no torch.fft or complex casts), or take .real"
        )
    if (actual.is_floating_point() or actual.is_complex()) and not torch.isfinite(actual).all():
        bad = ~torch.isfinite(actual)
        kind = "NaN" if torch.isnan(actual).any() else "inf"
        raise CheckFailed(
            f"{name} contains {kind} ({int(bad.sum())} of {actual.numel()} values, first at "
            f"{_where(bad.double())}). A softmax over a row that is all -inf gives NaN; "
            "dividing by zero gives inf."
        )
    if close(actual, expected, atol=atol, rtol=rtol):
        return
    for description, wrong in (mistakes or {}).items():
        if close(actual, wrong, atol=atol, rtol=rtol):
            raise CheckFailed(f"wrong values in {name}: this is what you get when {description}")
    diff = (actual.double() - expected.double()).abs()
    raise CheckFailed(
        f"wrong values in {name}: largest difference {diff.max().item():.3g} "
        f"at index {_where(diff)} (got {actual.flatten()[diff.argmax()].item():.5g}, expected "
        f"{expected.flatten()[diff.argmax()].item():.5g}); tolerance atol={atol:g}, rtol={rtol:g}."
    )


def check_not_constant(actual: Any, *, name: str = "output", what: str = "its input") -> None:
    """Check that ``actual`` is a finite tensor whose values are not all the same.

    Property tests (invariance, causality, padding) are passed by any constant function; this
    is the non-degeneracy half of such a test: the output has to depend on ``what``.
    """
    if not isinstance(actual, Tensor):
        raise CheckFailed(f"{name} should be a torch.Tensor, got {type(actual).__name__}")
    if actual.is_complex():
        raise CheckFailed(f"{name} is a complex tensor ({actual.dtype}), expected real values")
    values = actual.detach().double().flatten()
    if values.numel() and not torch.isfinite(values).all():
        raise CheckFailed(f"{name} contains NaN or inf")
    if values.numel() < 2 or bool((values == values[0]).all()):
        raise CheckFailed(
            f"{name} is the same everywhere ({values[0].item() if values.numel() else 'empty'}): "
            f"it should depend on {what}"
        )


def check_gradients(inputs: Mapping[str, Tensor]) -> None:
    """After ``backward()``: every named input received a finite, non-zero gradient."""
    for name, tensor in inputs.items():
        if tensor.grad is None:
            raise CheckFailed(
                f"no gradient reached {name}: is something detached (.detach(), .item(), "
                "numpy, torch.no_grad()) or replaced by a new tensor?"
            )
        if not torch.isfinite(tensor.grad).all():
            raise CheckFailed(f"the gradient of {name} contains NaN or inf")
        if not tensor.grad.abs().sum() > 0:
            raise CheckFailed(f"the gradient of {name} is all zeros: does the output depend on it?")
