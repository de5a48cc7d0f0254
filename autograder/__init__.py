"""The trusted grader: hidden pytest suites run against sandboxed student code (instructors only).

Writing an assignment's hidden suite
====================================

Put ordinary pytest files in ``autograder/suites/<assignment>/test_*.py`` (conftest.py and helper
modules are fine; nothing here is ever released or shown to students). Each test::

    import pytest, torch
    from course_lib.checks import attention_mistakes, check_close

    pytestmark = [pytest.mark.cell("check_attention"), pytest.mark.forbid("sdpa", "course_lib")]

    @pytest.mark.points(1)
    def test_attention_values(student, rng):
        q, k, v = (torch.randn(2, 5, 8, generator=rng) for _ in range(3))
        expected = my_reference(q, k, v)                # computed here, in the trusted process
        check_close(student.attention(q, k, v), expected, name="attention(q, k, v)",
                    mistakes=attention_mistakes(q, k, v))

Markers (:mod:`autograder.host.plugin`): ``points(n, cell=grade_id)`` (required; all or nothing),
``cell(grade_id)`` (default cell), ``forbid(*names)`` (:mod:`autograder.wire.forbid`: presets
``sdpa``,
``multihead_attention``, ``transformer_modules``, ``layer_norm``, ``softmax``, ``rnn_modules``,
``course_lib``; or dotted names / ``aten::`` globs), ``notebook(name)``, ``call_timeout(s)``.
The points of the tests of a grade cell must add up to that cell's ``points`` in the notebook
(``check`` verifies it).

Fixtures: ``student`` (:class:`autograder.host.proxy.Student`: ``student.fn(*args)``,
``student.Cls(...)`` -> :class:`~autograder.host.proxy.Remote` with ``remote(x)``,
``remote.method(...)``, ``remote.get(attr)``, ``remote.backward(x, grad_output=...)``,
``student.fn.backward(...)``, ``student.fn.unmodified(*args)`` (an ``AssertionError`` naming
each argument the call changed in place) and ``student.fn.tracked(*args)`` (value and the names),
``student.has(name)``, ``student.get(name)``,
``student.build("course_lib.models.x.Cls", ..., state_dict=sd)`` to put a library object in the
worker for the student's code), ``rng`` (a seeded
``torch.Generator``), ``seed``. Only plain data crosses: tensors, numbers, strings, dtypes and
nested lists / tuples / dicts.

Messages: students see the exception message only (tests run with ``--assert=plain``): give every
``assert`` a message, or use :mod:`course_lib.checks`, whose messages diagnose mistakes.

Commands: ``python -m autograder {release,grade,check,selfgrade,fairness,gradescope,written,...}``
(see ``--help`` and the README's "For instructors").
"""
