"""Shared pytest set-up.

`make test` runs the suite with two xdist workers on machines that may have only two cores; with
torch's default of one thread per core each worker's idle OpenMP threads spin while the other
worker computes, which made the suite several times slower. One intra-op thread per worker (unless
the caller sets COURSE_TEST_THREADS) keeps the cores busy with useful work. Plots use the
non-interactive backend.
"""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

# A host without namespaces (a container without CAP_SYS_ADMIN): the grader refuses `auto` there,
# so the tests ask for the fallback by name, as an instructor would (the namespace-only promises
# are skipped by the tests that check them).
from autograder.sandbox.namespaces import available  # noqa: E402

if not available():
    os.environ.setdefault("AUTOGRADER_SANDBOX", "fallback")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("COURSE_TEST_THREADS", "1")))
