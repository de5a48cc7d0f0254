"""Visible checks for the assignments: student-safe, no hidden tests, messages that diagnose.

Use them in an assignment's check cells::

    from course_lib.checks import check_close, check_shape, diagnose_attention

    diagnose_attention(attention)                    # explains the usual mistakes
    check_close(y, expected, name="y", mistakes={"you forgot the bias": y_without_bias})

A failed check raises :class:`CheckFailed` (an ``AssertionError``) whose message names the mistake
(a wrong shape, scores divided by D instead of sqrt(D), a mask applied after the softmax, a
softmax over the wrong axis, ...) and how to fix it. The grade comes from hidden tests run by the
instructor's grader, with fresh random inputs; these checks only help.
"""

from .attention import (
    attention_mistakes,
    check_causal_mask,
    copy_from_torch_mha,
    diagnose_attention,
    diagnose_multihead,
    diagnose_softmax,
)
from .core import CheckFailed, check_close, check_gradients, check_shape, close, passed

__all__ = [
    "CheckFailed",
    "attention_mistakes",
    "check_causal_mask",
    "check_close",
    "check_gradients",
    "check_shape",
    "close",
    "copy_from_torch_mha",
    "diagnose_attention",
    "diagnose_multihead",
    "diagnose_softmax",
    "passed",
]
