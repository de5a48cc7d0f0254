"""`python -m course_lib info` is the first thing a student runs."""

import sys

import time_limits


def test_info_reports_versions_device_and_completeness():
    out = time_limits.run(
        [sys.executable, "-m", "course_lib", "info"], capture_output=True, text=True, cpu=240
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for needle in ("python", "torch", "numpy", "device", "environment: complete"):
        assert needle in out.stdout, f"{needle!r} missing from:\n{out.stdout}"
    assert any(d in out.stdout for d in ("cpu (", "cuda (", "mps ("))


def test_summary_runs():
    out = time_limits.run(
        [sys.executable, "-m", "course_lib", "summary"], capture_output=True, text=True, cpu=120
    )
    assert out.returncode == 0, out.stderr
    assert "book:" in out.stdout and "releases:" in out.stdout
