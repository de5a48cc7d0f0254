"""Set-up shared by every area of the tests (lib/, grader/, book/, course/).

`make test` runs the suite with two xdist workers on machines that may have only two cores; with
torch's default of one thread per core each worker's idle OpenMP threads spin while the other
worker computes, which made the suite several times slower. One intra-op thread per worker (unless
the caller sets COURSE_TEST_THREADS) keeps the cores busy with useful work. Plots use the
non-interactive backend. Nothing here imports the grader: `pytest tests/lib` never does.
"""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("COURSE_TEST_THREADS", "1")))

from xdist_groups import pytest_collection_modifyitems  # noqa: E402, F401 (a hook)
