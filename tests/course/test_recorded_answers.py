"""The recorded answers that the visible checks diagnose from (``course_lib/checks/recorded/``)
are what each assignment's key computes today: a change to a key without running its recorder
(``python autograder/suites/<name>/aN_record.py``) fails here."""

from __future__ import annotations

import pytest
import torch
from keys import ASSIGNMENTS, SUITES, load


def same(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}/{i}")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        if a.is_floating_point():
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=where)
        else:
            assert torch.equal(a, b), where
    else:
        assert a == b, where


def test_every_assignment_has_a_key_and_a_recorder():
    assert len(ASSIGNMENTS) >= 5, ASSIGNMENTS
    for name in ASSIGNMENTS:
        prefix = name.split("_")[0]
        assert (SUITES / name / f"{prefix}_record.py").exists(), name


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_recorded_answers_are_the_keys(name):
    record = load(name, f"{name.split('_')[0]}_record")
    recorded = torch.load(record.OUT, weights_only=True)
    fresh = record.record()
    assert recorded.keys() == fresh.keys()
    same(recorded, fresh, f"{name}: recorded")
