"""Tests of `course_lib` alone: the reference implementations against their oracles. This area
never imports the grader (`tests/grader/test_boundaries.py` checks it), so `pytest tests/lib` is
the fast loop while working on the library."""
