"""A blank answer fails its check with a message, not a traceback.

The released notebooks' answers start as ``raise NotImplementedError()``; a check that meets one
(in the student's code) reports it as a :class:`~course_lib.checks.CheckFailed`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .core import CheckFailed


def _wrap(check: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(check)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return check(*args, **kwargs)
        except NotImplementedError as error:
            detail = str(error).strip()
            raise CheckFailed(
                f"{check.__name__}: not implemented yet "
                + (f"({detail})" if detail else "(your code raises NotImplementedError)")
            ) from None

    return run


def report_unimplemented(namespace: dict[str, Any]) -> None:
    """Wrap every public ``check_*`` function of a checks module (call at its end)."""
    for name, value in list(namespace.items()):
        if name.startswith("check_") and callable(value) and not hasattr(value, "__wrapped__"):
            namespace[name] = _wrap(value)
