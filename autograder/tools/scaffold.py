"""``make new-assignment NAME=a6_topic``: scaffold a complete assignment that passes
``python -m autograder check`` at once.

    python -m autograder new-assignment a6_topic [--course-dir DIR]

Writes, and refuses to overwrite any of them:

- ``solutions/<name>/<name>.md``: the text source, one graded step (a numerically stable
  ``softmax``), its check cell (2 points) and one written question (1 point);
- ``autograder/suites/<name>/test_<name>.py``: the hidden suite, with a canary string and two
  1-point tests on the check cell;
- ``autograder/suites/<name>/<aN>_key.py``: the answer key beside it, which the hidden tests
  compare with (graded answers live here, never in ``course_lib``, which students get whole;
  ``python -m autograder embargo scan`` looks for its statements in what students get);
- ``autograder/suites/<name>/rules.yml``: the rule table (each rule the notebook states, quoted,
  and the tests that grade it; ``python -m autograder rules <name>``);
- ``autograder/suites/<name>/mutants.yml``: three usual mistakes and one correct rewrite for
  ``python -m autograder mutants <name>`` (each mistake loses points and its check names it);
- ``course_lib/checks/<aN>.py``: the visible check the check cell calls;
- ``autograder/samples/<name>/samples.yml`` and ``expected.json``: three sample submissions
  (partial, broken, cheat) and their expected scores;

lists the assignment in ``course.yml`` as ``unreleased`` (the student bundle holds it once it is
set to ``released``), then builds the source notebook and the samples and makes the release
(``python -m autograder release <name>``). The text source is in the builder's canonical form and
the assignment passes the project's own tests (``tests/course``) as it is. Replace the example
step with yours, keeping the pattern: a solution cell, its check cell with points, hidden tests
marked with the same ``cell=`` adding up to them, a visible check that names the usual mistakes.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
from pathlib import Path

from autograder.course.layout import Course

SOURCE = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3 (ipykernel)
  language: python
  name: python3
---

+++ {{"grade_id": "intro"}}

# {title}

One paragraph on what students build and why.

**Learning goals.** After this assignment you can
1. write a numerically stable softmax.

+++ {{"grade_id": "grading"}}

## What is graded

| step | graded by | points |
|---|---|---|
| 1. `softmax` | hidden tests | 2 |
| Q1 stability | by hand | 1 |
| **total** | | **3** (2 automatic + 1 by hand) |

Each step has a *visible check* below it; the grade comes from *hidden tests* run by the
instructor on your notebook. Only imports, functions, classes and constants are graded.

```{{code-cell}} ipython3
:kind: provided
:grade_id: setup

import torch
from torch import Tensor
```

+++ {{"grade_id": "softmax_md"}}

## 1. Softmax (2 points)

$\\mathrm{{softmax}}(x)_i = e^{{x_i - m}} / \\sum_j e^{{x_j - m}}$ with $m = \\max_j x_j$, over the
last dimension. Do not call `torch.softmax`.

```{{code-cell}} ipython3
:kind: solution
:grade_id: softmax

def softmax(x: Tensor) -> Tensor:
    """Softmax over the last dimension, stable for large inputs. x (..., N) -> (..., N)."""
    ### BEGIN SOLUTION
    z = (x - x.amax(dim=-1, keepdim=True)).exp()
    return z / z.sum(dim=-1, keepdim=True)
    ### END SOLUTION
```

```{{code-cell}} ipython3
:kind: check
:grade_id: check_softmax
:points: 2

from course_lib.checks.{module} import check_softmax

check_softmax(softmax)
```

+++ {{"grade_id": "q1_question"}}

**Q1 (1 point).** Why subtract the maximum before exponentiating?

+++ {{"kind": "written", "grade_id": "q1", "points": 1}}

### BEGIN SOLUTION
The result is the same (the factor $e^{{-m}}$ cancels), but $e^{{x}}$ overflows to infinity for
$x > 88$ in float32; after the shift every exponent is at most 0.
### END SOLUTION
'''

SUITE = '''"""Hidden tests of {title}, 2 points.

{canary}: planted so the tests can assert that nothing a student receives
(release, feedback) contains this suite.
"""

from __future__ import annotations

import {module}_key as key
import pytest
import torch

from course_lib.checks import check_close

pytestmark = pytest.mark.forbid("softmax")
CANARY = "{canary}"


@pytest.mark.points(1, cell="check_softmax")
def test_softmax_matches_the_key(student, rng):
    x = torch.randn(3, 7, generator=rng) * 3
    check_close(student.softmax(x), key.softmax(x), name="softmax(x)")


@pytest.mark.points(1, cell="check_softmax")
def test_softmax_is_stable_for_large_inputs(student, rng):
    x = torch.randn(2, 5, generator=rng) + 1000.0
    out = student.softmax(x)
    assert torch.isfinite(out).all(), "softmax of inputs near 1000 is not finite: subtract the max"
    check_close(out, key.softmax(x), name="softmax(x + 1000)")
'''

KEY = '''"""The answer key of {title}.

Instructors only: it lives beside the hidden suite, never in course_lib.

{canary}: planted so the tests can assert that nothing a student receives
(release, feedback, bundle) contains this file.

The hidden tests compute their expectations with it; check it against an independent oracle
(here ``torch.softmax``) in the project's tests.
"""

from __future__ import annotations

from torch import Tensor


def softmax(x: Tensor) -> Tensor:
    """Softmax over the last dimension, stable for large inputs. x (..., N) -> (..., N)."""
    z = (x - x.amax(dim=-1, keepdim=True)).exp()
    return z / z.sum(dim=-1, keepdim=True)
'''

RULES = """\
# Each rule the notebook states, quoted from the student notebook, and the hidden tests that grade
# it (python -m autograder rules <name>; check fails on a rule word with no entry).
- rule: "over the last dimension"
  tests: [test_softmax_matches_the_key]
  points: 1
- rule: "stable for large inputs"
  tests: [test_softmax_is_stable_for_large_inputs]
  points: 1
- rule: "Do not call `torch.softmax`"
  tests: [test_softmax_matches_the_key, test_softmax_is_stable_for_large_inputs]
  points: 2
"""

CHECKS = '''"""Visible checks of {title}.

The check cells of ``{name}.ipynb`` import them.

A failed check raises :class:`CheckFailed` whose message names the mistake.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .core import CheckFailed, check_close, passed


def check_softmax(softmax: Callable[[Tensor], Tensor]) -> None:
    """``softmax(x)`` equals ``torch.softmax(x, dim=-1)``, also for large inputs."""
    x = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    try:
        out = softmax(x)
    except NotImplementedError:
        raise CheckFailed("softmax is not implemented yet (it raises NotImplementedError)") from (
            None
        )
    check_close(
        out,
        torch.softmax(x, dim=-1),
        name="softmax(x)",
        mistakes={{
            "the softmax is over the first dimension, not the last": torch.softmax(x, 0),
            "the exponentials are not divided by their sum": (x - x.amax(-1, True)).exp(),
        }},
    )
    big = softmax(x + 1000.0)
    if not torch.isfinite(big).all():
        raise CheckFailed("softmax(x + 1000) is not finite: subtract the maximum before exp")
    passed("softmax")
'''

SAMPLES = """# Sample submissions of {name}: the reference solution with these cells patched
# (grade_id -> whole cell `code`, or `replace` old -> new). `python -m autograder build
# {name}` writes the notebooks; expected.json holds their expected scores.
partial:
  description: no max subtraction (overflows for large inputs), so the stability test fails
  cells:
    softmax:
      replace:
      - old: z = (x - x.amax(dim=-1, keepdim=True)).exp()
        new: z = x.exp()
broken:
  description: a syntax error; nothing can be graded
  lint: false
  cells:
    softmax:
      replace:
      - old: "def softmax(x: Tensor) -> Tensor:"
        new: "def softmax(x: Tensor) -> Tensor"
cheat:
  description: calls torch.softmax, which the hidden tests forbid
  cells:
    softmax:
      code: |
        def softmax(x: Tensor) -> Tensor:
            return torch.softmax(x, dim=-1)
"""

MUTANTS = """# Usual mistakes in {name}, as patches of the reference (the format of samples.yml),
# for `python -m autograder mutants {name} --names 3 --strict`: each mistake must lose points in
# the hidden suite under every student name, and the first failing visible check must contain
# its `phrase`; an `equivalent: true` entry is a correct rewrite that must lose nothing.
no_max_subtraction:
  phrase: subtract the maximum
  cells:
    softmax:
      replace:
      - old: z = (x - x.amax(dim=-1, keepdim=True)).exp()
        new: z = x.exp()
first_dimension:
  phrase: first dimension
  cells:
    softmax:
      replace:
      - old: z = (x - x.amax(dim=-1, keepdim=True)).exp()
        new: z = (x - x.amax(dim=0, keepdim=True)).exp()
      - old: return z / z.sum(dim=-1, keepdim=True)
        new: return z / z.sum(dim=0, keepdim=True)
not_normalised:
  phrase: not divided by their sum
  cells:
    softmax:
      replace:
      - old: return z / z.sum(dim=-1, keepdim=True)
        new: return z
logsumexp:
  equivalent: true
  cells:
    softmax:
      replace:
      - old: z = (x - x.amax(dim=-1, keepdim=True)).exp()
        new: z = (x - x.logsumexp(dim=-1, keepdim=True)).exp()
      - old: return z / z.sum(dim=-1, keepdim=True)
        new: return z
"""

EXPECTED = {"broken": {"points": 0}, "cheat": {"points": 0}, "partial": {"points": 1}}
NAME = re.compile(r"a\d+_[a-z0-9_]+")


def files(course: Course, name: str) -> dict[Path, str]:
    module = name.split("_")[0]
    words = name.split("_")
    title = f"{words[0].upper()}: {' '.join(words[1:]).capitalize()}"
    canary = f"CANARY-HIDDEN-{words[0].upper()}-{secrets.token_hex(4)}"
    fmt = dict(name=name, title=title, module=module, canary=canary)
    expected = json.dumps(EXPECTED, indent=1, sort_keys=True) + "\n"
    from autograder.tools.authoring import to_notebook, to_text

    source = to_text(to_notebook(SOURCE.format(**fmt)))  # the builder's canonical form
    return {
        course.source_dir(name) / f"{name}.md": source,
        course.suite_dir(name) / f"test_{name}.py": SUITE.format(**fmt),
        course.suite_dir(name) / f"{module}_key.py": KEY.format(**fmt),
        course.root / "course_lib" / "checks" / f"{module}.py": CHECKS.format(**fmt),
        course.suite_dir(name) / "mutants.yml": MUTANTS.format(**fmt),
        course.suite_dir(name) / "rules.yml": RULES,
        course.samples_dir(name) / "samples.yml": SAMPLES.format(**fmt),
        course.samples_dir(name) / "expected.json": expected,
    }


def scaffold(course: Course, name: str) -> int:
    if not NAME.fullmatch(name):
        print(f"error: {name!r}: an assignment is named a<N>_<topic> (a6_vision_language)")
        return 2
    todo = files(course, name)
    taken = [p for p in todo if p.exists()] + [
        p for p in (course.source_dir(name), course.suite_dir(name)) if p.exists()
    ]
    if taken:
        print(f"error: {name} exists already: {', '.join(map(str, taken))}", file=sys.stderr)
        return 1
    for path, text in todo.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(course.root)}")
    schedule = schedule_unreleased(course, name)
    from autograder.tools.release import release

    status = release(course, [name])  # builds the source notebook and the samples first
    if status == 0:
        print(
            f"next: python -m autograder check {name}; python -m autograder selfgrade {name}; "
            f"python -m autograder mutants {name} --strict; make lint; make test-course; "
            f"then edit solutions/{name}/{name}.md (see solutions/_authoring/README.md)"
        )
        print(schedule)
    return status


def schedule_unreleased(course: Course, name: str) -> str:
    """List ``name`` in ``course.yml`` as ``unreleased`` (held back from the student bundle until
    the instructor releases it); returns what to tell the instructor."""
    from autograder.course.embargo import SCHEDULE_FILE, ScheduleError, read_schedule

    path = course.root / SCHEDULE_FILE
    before = path.read_text(encoding="utf-8") if path.exists() else "assignments:\n"
    line = f"  {name}: unreleased  # set to released when students should get it\n"
    path.write_text(before + ("" if before.endswith("\n") else "\n") + line, encoding="utf-8")
    try:
        read_schedule(path)
    except ScheduleError as error:
        path.write_text(before, encoding="utf-8")
        return (
            f"course.yml: could not list {name} ({error}); add `{name}: unreleased` under "
            "`assignments:` yourself, or `make student-bundle` leaves it out"
        )
    return (
        f"course.yml: {name} is listed as unreleased, so `make student-bundle` leaves it out; "
        "set it to `released` when students should get it"
    )
