"""A worker in fallback mode for the red-team tests: a zygote of its own, and a student session
holding one cell of code (``test_redteam_v3.py``, ``test_redteam_v3_more.py``)."""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator

import autograder.sandbox.zygote as zygote_module
from autograder.host import proxy
from autograder.wire import protocol


@contextlib.contextmanager
def fallback_zygote(prefix: str, cpu: int) -> Iterator[proxy.ZygoteClient]:
    scratch = tempfile.mkdtemp(prefix=prefix)
    claimed = zygote_module.claim_uid_block() if os.geteuid() == 0 else None
    config = {
        "mode": "fallback", "hide": [], "protect": [], "limits": {"cpu": cpu},
        "uid_base": claimed[0] if claimed else None, "scratch": scratch,
        "preimport": [m for m in zygote_module.PREIMPORTS if m != "torch._dynamo"],
    }  # fmt: skip
    pid, sock = zygote_module.start_zygote(config)
    sock.settimeout(180)
    ready = protocol.recv(sock)
    sock.settimeout(None)
    assert ready.get("ready"), ready
    try:
        yield proxy.ZygoteClient(sock)
    finally:
        sock.close()
        os.waitpid(pid, 0)
        shutil.rmtree(scratch, ignore_errors=True)
        if claimed:
            os.close(claimed[1])


@contextlib.contextmanager
def student_session(
    zygote: proxy.ZygoteClient, code: str, seconds: float
) -> Iterator[tuple[proxy.Student, proxy.TestState]]:
    state = proxy.TestState(seed=1, timeout=20.0)
    body = list(range(len(ast.parse(code).body)))
    session = proxy.WorkerSession(
        zygote, [("cell 1", code, body)], state=state, deadline=time.monotonic() + seconds
    )
    try:
        yield proxy.Student(session), state
    finally:
        session.close()
