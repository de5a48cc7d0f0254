"""Red-team corpus, issue 35 ("grader-isolation-2"), what was left: originals of torch's file
openers reachable by attribute walks, raw operator getters, the wall-limit message, output
metadata in the autograded notebook, and a ``grade`` that must always exit.

The worker attacks run in a real worker (a fallback-mode zygote: what every host can start)
through the trusted proxy; each failed before its fix."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
import pytest
from fallback_worker import fallback_zygote, student_session

from autograder.host import proxy

CODE = '''
import _imp
import sys
import time
import torch

_BUILTIN = type(len)

def _originals_in(value, where, found):
    """torch's own C openers found in ``value`` (one level into lists, dicts, cells)."""
    items = []
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    for item in items:
        name = getattr(item, "__name__", "")
        if name in ("from_file", "PyTorchFileReader", "PyTorchFileWriter",
                    "_jit_get_operation", "_get_operation_overload"):
            if type(item) is _BUILTIN or isinstance(item, type):
                found.append(f"{where}: {name}")

def reachable_originals():
    """Walk from what student code holds (the meta-path finder, the refusals and wrappers torch
    now holds) through __globals__, __closure__ and defaults to torch's original openers."""
    found = []
    starts = {
        "finder.find_spec": type(sys.meta_path[0]).find_spec,
        "finder.__init__": type(sys.meta_path[0]).__init__,
        "torch.from_file": torch.from_file,
        "PyTorchFileReader": torch._C.PyTorchFileReader,
        "PyTorchFileWriter": torch._C.PyTorchFileWriter,
        "_jit_get_operation": torch._C._jit_get_operation,
        "create_builtin": _imp.create_builtin,
    }
    for where, func in starts.items():
        names = getattr(func, "__glo" + "bals__", None) or {}
        for key, value in list(names.items()):
            _originals_in(value, f"{where}.__globals__[{key}]", found)
        for cell in getattr(func, "__clo" + "sure__", None) or ():
            _originals_in(cell.cell_contents, f"{where}.__closure__", found)
        for value in (getattr(func, "__defaults__", None) or ()):
            _originals_in(value, f"{where}.__defaults__", found)
        _originals_in(getattr(func, "__kwdefaults__", None) or {}, f"{where}.__kwdefaults__",
                      found)
    return sorted(set(found))

def finder_namespace():
    return sorted(getattr(type(sys.meta_path[0]).find_spec, "__glo" + "bals__"))

def raw_operation():
    op, _ = torch._C._jit_get_operation("aten::_scaled_dot_product_attention_math")
    return type(op).__name__

def raw_overload():
    return type(torch._C._get_operation_overload(
        "aten::_scaled_dot_product_attention_math", "")).__name__

def library_ops_still_work():
    a = torch.ops.aten.logaddexp2(torch.ones(2), torch.ones(2))
    b = torch.ops.aten.hypot.default(torch.ones(2), torch.ones(2))
    return float(a.sum() + b.sum())

def checkpoint_in_work_folder():
    torch.save({"x": torch.arange(3)}, "ckpt.pt")
    return torch.load("ckpt.pt")["x"].tolist()

def checkpoint_outside():
    try:
        torch.save(torch.arange(3), "/tmp/ag-rt3-more-outside.pt")
    except PermissionError as error:
        return f"refused: {error}"
    return "written"

def spin_in_c():
    import re
    re.match("(a*)*b", "a" * 64)  # catastrophic backtracking: a loop inside C

def sleep():
    time.sleep(60)
'''


@pytest.fixture(scope="module")
def zygote():
    with fallback_zygote("ag-scratch-rt3m-", cpu=120) as client:
        yield client


@pytest.fixture(scope="module")
def student(zygote):
    with student_session(zygote, CODE, 600) as pair:
        yield pair


# -- item 4: no original of torch's file openers is reachable ---------------------------------


def test_no_original_opener_is_reachable_by_attribute_walks(student):
    """Before: ``audit._KEPT`` (the original ``torch.from_file``, the storages' ``from_file``,
    ``PyTorchFileReader`` / ``Writer``) through the finder's ``__globals__``, and the originals
    in the wrapped reader's and writer's ``__closure__``."""
    st, state = student
    assert st.reachable_originals() == []
    assert st.finder_namespace() == ["__builtins__"]


@pytest.mark.parametrize("attack", ["raw_operation", "raw_overload"])
def test_raw_operator_getters_are_refused_to_student_code(student, attack):
    """Before: ``torch._C._jit_get_operation`` handed student code a raw operator callable."""
    st, state = student
    state.fatal = []
    try:
        with pytest.raises((proxy.Tampering, proxy.StudentError)) as raised:
            getattr(st, attack)()
        assert "_get_operation" in str(raised.value) or "_jit_get" in str(raised.value)
    finally:
        state.fatal = []


def test_torch_ops_and_checkpoints_still_work(student):
    st, state = student
    assert st.library_ops_still_work() == pytest.approx(2 * (1 + 1) + 2 * 2**0.5)
    assert st.checkpoint_in_work_folder() == [0, 1, 2]
    said = st.checkpoint_outside()
    assert said.startswith("refused") and "outside the work folder" in said
    assert not os.path.exists("/tmp/ag-rt3-more-outside.pt")


# -- item 3: the wall-limit message says how much CPU the call used ---------------------------


@pytest.mark.parametrize(("name", "said"), [("spin_in_c", "spinning"), ("sleep", "sleeping")])
def test_wall_limit_message_tells_spinning_from_sleeping(student, monkeypatch, name, said):
    """Before: a C-level spin stopped by the wall limit read "(waiting or sleeping?)". The wall
    limit is made to come first here (a busy machine does that to a real spin)."""
    st, state = student
    monkeypatch.setattr(proxy, "WALL_FACTOR", 0.0)
    monkeypatch.setattr(proxy, "WALL_SLACK", 3.0)
    with pytest.raises(proxy.CallTimeout) as raised:
        getattr(st, name)()
    message = str(raised.value)
    assert "did not finish within 3 s" in message and "of CPU time" in message, message
    assert said in message, message
    other = "sleeping" if said == "spinning" else "spinning"
    assert other not in message, message


def test_wall_message_reports_cpu_seconds():
    assert "it used 2.9 s of CPU time (spinning" in proxy.wall_message(3, 2.9, 3.0)
    assert "it used 0.0 s of CPU time (waiting or sleeping?)" in proxy.wall_message(3, 0.0, 3.0)


# -- item 2: no student output metadata in the autograded notebook ----------------------------


def test_output_metadata_is_not_copied_into_the_autograded_notebook(tmp_path):
    """Before: an image output's ``width: "1 onerror=..."`` was kept (nbconvert's templates
    write it into the ``<img>`` tag); now only numeric sizes of image types are."""
    from autograder.integrations.bookkeeping import keep_student_work

    png = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
        "rkJggg=="
    )
    code = nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": "a"}})
    autograded = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("summary"), code])
    student_cell = nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": "a"}})
    student_cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={"image/png": png, "text/plain": "<img>"},
            metadata={
                "image/png": {"width": "1 onerror=alert(1)", "height": 40},
                "width": "2 onload=alert(2)",
                "isolated": True,
                "text/html": {"x": "<script>"},
            },
        ),  # fmt: skip
        nbformat.v4.new_output(
            "display_data", data={"image/png": png}, metadata={"image/png": {"width": 12.5}}
        ),
    ]
    added = nbformat.v4.new_markdown_cell("look", attachments={"a.png": {"image/png": png}})
    student = nbformat.v4.new_notebook(cells=[student_cell, added])
    nbformat.write(autograded, tmp_path / "autograded.ipynb")
    nbformat.write(student, tmp_path / "submitted.ipynb")
    assert keep_student_work(tmp_path / "autograded.ipynb", tmp_path / "submitted.ipynb")
    nb = nbformat.read(tmp_path / "autograded.ipynb", as_version=4)
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert [o.metadata for o in images] == [
        {"image/png": {"height": 40}},
        {"image/png": {"width": 12.5}},
    ]
    text = nbformat.writes(nb)
    assert "onerror" not in text and "onload" not in text and "<script>" not in text
    assert not any("attachments" in c for c in nb.cells)


# -- item 1: grade always exits ---------------------------------------------------------------


HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# A similarity step that never returns (the red team's batch: every row written, no
# similarity.*, killed at 400 s): injected through ``sitecustomize`` in the ``grade`` process
# only, where the report's ``run`` is replaced by a sleep once its module is imported.
NEVER_RETURNS = """
import importlib.abc, importlib.util, sys

class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "autograder.tools.similarity.command":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            import time
            module.run = lambda *a, **k: time.sleep(10**6)

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Patch())
"""


@pytest.mark.slow
def test_grade_exits_when_a_step_after_the_rows_never_returns(tmp_path):
    """Three students, ``--no-gradebook``: every row is written, then the similarity step never
    returns. Before: ``grade`` hung (killed here at the limit); now the report is stopped at its
    deadline, said on stderr, and ``grade`` exits 0 with every row."""
    import subprocess

    sys.path.insert(0, str(HERE / "fixtures" / "grader"))
    import corpus
    from time_limits import scaled

    course = corpus.make_course(tmp_path / "course")
    release = nbformat.read(
        course / "assignments" / corpus.ASSIGNMENT / corpus.NOTEBOOK, as_version=4
    )
    subs = tmp_path / "subs"
    for name in ("ann", "bob", "cid"):
        nb = corpus._with_solutions(release, **corpus.reference_sources())
        corpus._write(nb, subs / name / corpus.ASSIGNMENT / corpus.NOTEBOOK)
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(NEVER_RETURNS)
    env = {**os.environ, "AUTOGRADER_SANDBOX": "fallback", "PYTHONPATH": str(inject)}
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "autograder", "--course-dir", str(course), "grade",
        corpus.ASSIGNMENT, "--submissions", str(subs), "--out", str(out), "--no-gradebook",
        "--quiet", "--sandbox", "fallback", "--similarity-timeout", "20",
    ]  # fmt: skip
    start = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=scaled(300)
        )
    except subprocess.TimeoutExpired as hung:
        csv = out / "grades.csv"
        rows = csv.read_text().count("\n") - 1 if csv.exists() else 0
        pytest.fail(f"grade hung after writing {rows} row(s): {hung.stderr!r}")
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert "similarity report skipped: it did not finish within 20 s" in done.stderr
    assert "graded 3 submission(s)" in done.stdout
    assert (out / "grades.csv").read_text().count("\n") == 4
    assert not (out / "similarity.md").exists()
    print(f"grade took {took:.0f} s")


def test_the_watchdog_ends_a_stuck_grade_with_its_stacks():
    """The last bound: whatever hangs after the rows (here a sleep in the main thread) ends the
    command with status 3, the stacks on stderr, and its kill callbacks run."""
    import subprocess

    script = (
        "import time\n"
        "from autograder.commands.grading import Watchdog\n"
        "Watchdog(1.0, 'grade', kill=[lambda: print('killed', flush=True)])\n"
        "time.sleep(120)\n"
    )
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - start < 90
    assert "grader fault: grade did not finish within 1 s after the rows" in done.stderr
    assert "time.sleep" in done.stderr or "line 4" in done.stderr  # the main thread's stack
    assert "killed" in done.stdout
