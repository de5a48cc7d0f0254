"""The sandbox: the only code that runs student code, and the only folder whose modules import
nothing of the grader but :mod:`autograder.wire` (``tests/grader/test_boundaries.py`` enforces it).

- :mod:`~autograder.sandbox.zygote`: the fork server, inside the namespaces and the read-only root;
- :mod:`~autograder.sandbox.worker`: one per notebook, runs the student's code and serves calls;
- :mod:`~autograder.sandbox.detector`: forbidden-call detection around each call;
- :mod:`~autograder.sandbox.audit`, :mod:`~autograder.sandbox.limits`,
  :mod:`~autograder.sandbox.namespaces`, :mod:`~autograder.sandbox.reaping`: the mechanisms.
"""
