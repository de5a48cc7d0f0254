"""Set-up for the tests that grade: a host without namespaces (a container without CAP_SYS_ADMIN)
makes the grader refuse `--sandbox auto`, so these tests ask for the fallback by name, as an
instructor would (the namespace-only promises are skipped by the tests that check them)."""

import os

from autograder.sandbox.namespaces import available

if not available():
    os.environ.setdefault("AUTOGRADER_SANDBOX", "fallback")
