"""The pytest plugin that runs a hidden suite against one submission (trusted process only).

Markers (register nothing yourself; the grader loads this plugin):

``@pytest.mark.points(n, cell="grade_id")``
    The test is worth ``n`` points (all or nothing), counted towards the notebook's nbgrader grade
    cell ``grade_id``. Required on every test.
``@pytest.mark.cell("grade_id")``
    Default grade cell for ``points`` markers without ``cell=`` (put it in ``pytestmark``).
``@pytest.mark.forbid("sdpa", "torch.nn.MultiheadAttention", ...)``
    Calls the student's code must not make in this test (see :mod:`autograder.wire.forbid`).
    Markers on the module, class and function add up.
``@pytest.mark.notebook("name.ipynb")``
    For assignments with several notebooks: which one ``student`` refers to.
``@pytest.mark.call_timeout(seconds)``
    Per-call limit in CPU seconds for this test (default: the grader's ``--timeout``, 10).

Fixtures: ``student`` (:class:`autograder.host.proxy.Student`), ``seed`` (an int derived from the
assignment, the student and the test), ``rng`` (a ``torch.Generator`` seeded with it). Before each
test ``torch``, ``random`` and ``numpy`` are seeded with ``seed`` too.

Failure messages shown to students come from the exception only (assertion messages you write,
the student's own traceback); pytest's report, which quotes the test's source, is never used.
Tests run with ``--assert=plain``: give every ``assert`` a message, or use the helpers of
:mod:`course_lib.checks`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from autograder.host import proxy
from autograder.host.scan import Reference, ScanResult, forbidden_hits
from autograder.wire.forbid import expand, validate

# Set by the runner before pytest.main(); see autograder.host.runner.
CONTEXT: dict[str, Any] = {}
STATE = proxy.TestState()
_SESSIONS: dict[str, proxy.WorkerSession] = {}
_RESULTS: dict[str, dict] = {}
_MANIFEST: list[dict] = []
_ERRORS: list[str] = []

MARKERS = (
    "points(n, cell=None): points the test is worth and the grade cell they count towards",
    "cell(grade_id): default grade cell for the tests it marks",
    "forbid(*names): calls the student's code must not make in this test",
    "notebook(name): which notebook of the assignment the test grades",
    "call_timeout(seconds): per-call time limit for this test",
)


def derive_seed(salt: str, assignment: str, student: str, test: str) -> int:
    digest = hashlib.sha256("\0".join((salt, assignment, student, test)).encode()).hexdigest()
    return int(digest[:15], 16)


def describe(item: pytest.Item) -> dict:
    """The manifest entry of one test: points, cell, forbidden calls, notebook, timeout."""
    entry: dict[str, Any] = {"nodeid": item.nodeid, "name": item.name, "errors": []}
    points = item.get_closest_marker("points")
    if points is None or not points.args:
        entry["errors"].append(f"{item.nodeid}: no @pytest.mark.points(n) marker")
        entry["points"] = 0.0
    else:
        value = points.args[0]
        if not isinstance(value, (int, float)) or value < 0:
            entry["errors"].append(f"{item.nodeid}: points must be a number >= 0, got {value!r}")
            value = 0
        entry["points"] = float(value)
    cell = points.kwargs.get("cell") if points is not None else None
    if cell is None:
        marker = item.get_closest_marker("cell")
        cell = marker.args[0] if marker is not None and marker.args else None
    if cell is None:
        entry["errors"].append(f"{item.nodeid}: no grade cell (points(..., cell=) or cell())")
    entry["cell"] = cell
    forbid: list[str] = []
    for marker in item.iter_markers("forbid"):
        forbid.extend(marker.args)
    for message in validate(forbid):
        entry["errors"].append(f"{item.nodeid}: {message}")
    entry["forbid"] = expand(list(dict.fromkeys(forbid)))
    notebook = item.get_closest_marker("notebook")
    entry["notebook"] = notebook.args[0] if notebook is not None and notebook.args else None
    timeout = item.get_closest_marker("call_timeout")
    entry["timeout"] = float(timeout.args[0]) if timeout is not None and timeout.args else None
    return entry


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _ERRORS.append(f"collecting {report.nodeid or 'the suite'} failed:\n{report.longreprtext}")


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    _MANIFEST.clear()
    _MANIFEST.extend(describe(item) for item in items)
    # `mutants` only: tests of these cells (a model's training) pass without running
    skipped = set(filter(None, os.environ.get("AUTOGRADER_MUTANTS_SKIP_CELLS", "").split(",")))
    for item, entry in zip(items, _MANIFEST):
        if entry["cell"] in skipped:
            item.runtest = lambda: None
    if CONTEXT.get("mode") == "collect":
        errors = _ERRORS + [e for entry in _MANIFEST for e in entry["errors"]]
        Path(CONTEXT["manifest_path"]).write_text(
            json.dumps({"tests": _MANIFEST, "errors": errors}, indent=1)
        )
        config.hook.pytest_deselected(items=list(items))
        items[:] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """Several runs (student names) of one submission: the suite is collected once, here; each
    run gets a process forked from this state (see ``Runner.each_run``) and a worker of its own."""
    runs = CONTEXT.get("runs") or []
    if CONTEXT.get("mode") != "grade" or len(runs) < 2:
        return None  # pytest's own loop, in this process
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    CONTEXT["each_run"](runs, lambda run: _run(session, run))
    return True


def _run(session: pytest.Session, run: dict) -> None:
    """One run, in its own process: the tests in order, then the workers' notes."""
    CONTEXT.update(run)
    for i, item in enumerate(session.items):
        following = session.items[i + 1] if i + 1 < len(session.items) else None
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=following)
        if session.shouldfail or session.shouldstop:
            break
    _close_sessions()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _close_sessions()
    if CONTEXT.get("mode") == "collect" and not Path(CONTEXT["manifest_path"]).exists():
        Path(CONTEXT["manifest_path"]).write_text(json.dumps({"tests": [], "errors": _ERRORS}))


def _close_sessions() -> None:
    """Close the workers and write what the grader reports about them (``session_path``)."""
    info = {}
    for name, worker in _SESSIONS.items():
        worker.close()
        info[name] = {
            "load_notes": worker.load_notes,
            "load_failure": worker.load_failure,
            "workers_started": worker.spawns,
        }
    if CONTEXT.get("session_path"):
        Path(CONTEXT["session_path"]).write_text(json.dumps(info))


def _scan_of(notebook: dict) -> ScanResult:
    data = notebook.get("scan") or {}
    refs = [Reference(**r) for r in data.get("references", [])]
    return ScanResult(references=refs, tampering=list(data.get("tampering", [])))


def _notebook_for(entry: dict) -> str:
    name = entry.get("notebook") or CONTEXT.get("default_notebook")
    if name not in CONTEXT.get("notebooks", {}):
        raise proxy.LoadFailed(
            f"the notebook {name!r} for this test was not submitted or unreadable"
        )
    return name


def _session(name: str) -> proxy.WorkerSession:
    if name not in _SESSIONS:
        notebook = CONTEXT["notebooks"][name]
        _SESSIONS[name] = proxy.WorkerSession(
            CONTEXT["zygote"],
            notebook["chunks"],
            state=STATE,
            deadline=CONTEXT["deadline"],
            load_timeout=CONTEXT.get("load_timeout", 30.0),
        )
    return _SESSIONS[name]


@pytest.fixture(autouse=True)
def _autograder_test(request: pytest.FixtureRequest) -> Any:
    entry = describe(request.node)
    STATE.nodeid = request.node.nodeid
    STATE.seed = derive_seed(
        CONTEXT.get("salt", ""),
        CONTEXT.get("assignment", ""),
        CONTEXT.get("student", ""),
        request.node.nodeid,
    )
    STATE.forbid = entry["forbid"]
    STATE.timeout = entry["timeout"] or CONTEXT.get("timeout", 10.0)
    STATE.fatal, STATE.output = [], []
    import numpy as np
    import torch

    torch.manual_seed(STATE.seed)
    random.seed(STATE.seed)
    np.random.seed(STATE.seed % 2**32)
    if time.monotonic() > CONTEXT.get("deadline", float("inf")):
        pytest.fail("not run: the submission's total time limit was exceeded", pytrace=False)
    name = _notebook_for(entry)
    scan = _scan_of(CONTEXT["notebooks"][name])
    if scan.tampering:
        pytest.fail(
            "your code reaches into the grader, the interpreter or a library it must not "
            "change: " + "; ".join(scan.tampering[:3]),
            pytrace=False,
        )
    hits = forbidden_hits(scan, entry["forbid"])
    if hits:
        pytest.fail("forbidden call: " + "; ".join(hits[:3]), pytrace=False)
    session = _session(name)
    if session.load_failure:
        pytest.fail(session.load_failure, pytrace=False)
    yield


@pytest.fixture
def student(request: pytest.FixtureRequest) -> proxy.Student:
    return proxy.Student(_session(_notebook_for(describe(request.node))))


@pytest.fixture
def seed() -> int:
    return STATE.seed


@pytest.fixture
def rng() -> Any:
    import torch

    return torch.Generator().manual_seed(STATE.seed)


def student_message(excinfo: Any) -> str:
    """What the student sees for a failure: never the test's source."""
    error = excinfo.value
    if isinstance(error, proxy.GradingError):
        text = str(error)
    elif isinstance(error, pytest.fail.Exception):
        text = str(error.msg if hasattr(error, "msg") else error)
    elif isinstance(error, pytest.skip.Exception):
        text = f"skipped: {getattr(error, 'msg', '')}"
    elif isinstance(error, AssertionError):
        text = str(error) or "a check failed (no message)"
    elif isinstance(error, MemoryError):
        text = (
            "the grader's process checking this test ran out of its memory limit (a reply from "
            "your code too large to check?)"
        )
    else:
        text = f"{type(error).__name__}: {error}"
    return text[:3000]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    record = _RESULTS.setdefault(item.nodeid, {"failed": False, "message": "", "seconds": 0.0})
    record["seconds"] += report.duration  # setup + call + teardown: what the test cost
    if report.outcome != "passed":
        record["failed"] = True
        if call.excinfo is not None and not record["message"]:
            record["message"] = student_message(call.excinfo)
    if call.when == "teardown":
        _finish(item, record)


def _finish(item: pytest.Item, record: dict) -> None:
    entry = describe(item)
    failed = record["failed"] or bool(STATE.fatal)
    message = record["message"]
    if STATE.fatal and (not record["failed"] or not message):
        message = STATE.fatal[0]
    row = {
        "nodeid": item.nodeid,
        "cell": entry["cell"],
        "max_points": entry["points"],
        "points": 0.0 if failed else entry["points"],
        "status": "failed" if failed else "passed",
        "message": message if failed else "",
        "output": "".join(STATE.output)[:2000],
        "seconds": round(record.get("seconds", 0.0), 3),
    }
    path = CONTEXT.get("results_path")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
