"""Time limits for the tests that a busy machine cannot trip.

A wall-clock timeout fails a test when the machine is busy with other work: ``make test`` on two
shared cores once failed because an A4 mutation run passed its 900 s timeout. So a subprocess is
bounded here by the CPU time that it and every process it starts use (``cpu`` seconds), and killed
before that only when it *stalls*: no CPU used at all for ``stall`` seconds (a deadlock; a busy
machine still gives a working process some). Waits that cannot be counted in CPU time (a notebook
cell in a kernel, a page in a browser) use :func:`scaled`, which stretches them by the load.
``COURSE_TEST_TIME_SCALE`` multiplies every limit (a slow machine, a debugger).

Import it as ``from time_limits import run, scaled`` (``tests/`` is on the path of every area).
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from typing import Any

import psutil

SCALE = float(os.environ.get("COURSE_TEST_TIME_SCALE") or 1)
POLL = 0.5


def scaled(seconds: int) -> int:
    """``seconds`` for a wall-clock wait, stretched by the load (the 1-minute load average per
    core, when above 1) and by ``COURSE_TEST_TIME_SCALE`` (whole seconds, as nbclient wants)."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return math.ceil(seconds * SCALE * max(1.0, load))


def cpu_seconds(proc: psutil.Process) -> float:
    """CPU time used by ``proc`` and its descendants, the reaped ones included."""
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def run(
    args: list[str],
    *,
    cpu: float,
    stall: float = 300.0,
    input: str | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """``subprocess.run(args, capture_output=True, text=True, **kwargs)``, bounded by CPU time:
    raises ``subprocess.TimeoutExpired`` once the process tree used ``cpu`` CPU seconds, or used
    none for ``stall`` seconds (both times ``COURSE_TEST_TIME_SCALE``), never for wall time."""
    if kwargs.pop("capture_output", True):
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("text", True)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    cpu_limit, stall_limit = cpu * SCALE, stall * SCALE
    with subprocess.Popen(args, **kwargs) as proc:
        watched = psutil.Process(proc.pid)
        used, progress = 0.0, time.monotonic()
        why = ""
        while True:
            try:
                out, err = proc.communicate(input, timeout=POLL)
                done = subprocess.CompletedProcess(args, proc.returncode, out, err)
                if check:
                    done.check_returncode()
                return done
            except subprocess.TimeoutExpired:
                input = None  # sent with the first call
            now_used = cpu_seconds(watched)
            if now_used > used:
                used, progress = now_used, time.monotonic()
            if used > cpu_limit:
                why = f"used {used:.0f} s of CPU (limit {cpu_limit:.0f} s)"
            elif time.monotonic() - progress > stall_limit:
                why = f"used no CPU for {stall_limit:.0f} s (stalled)"
            if why:
                break
        try:
            procs = [*watched.children(recursive=True), watched]
        except psutil.Error:
            procs = [watched]
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(args, cpu_limit, output=f"{why}\n{out or ''}", stderr=err)
