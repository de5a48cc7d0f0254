"""The instructor's path on the fixture assignment: the Gradescope zip as Gradescope runs it, and
nbgrader's release -> submit -> collect -> grade -> formgrader -> feedback -> export."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "grader" / "fixtures" / "grader"))
import corpus  # noqa: E402
import time_limits

from autograder.integrations.gradescope import level_for, student_identity  # noqa: E402

A, NB = corpus.ASSIGNMENT, corpus.NOTEBOOK
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return corpus.make_course(
        tmp_path_factory.mktemp("course"), cache=corpus.shared_dir(tmp_path_factory, "release")
    )


def _env(**extra: str) -> dict:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, **extra}


def _reference(course: Path) -> nbformat.NotebookNode:
    release = nbformat.read(course / "assignments" / A / NB, as_version=4)
    return corpus._with_solutions(release, **corpus.reference_sources())


# ---------------------------------------------------------------------------------------------
# Gradescope
# ---------------------------------------------------------------------------------------------


def test_gradescope_identity_and_visibility_rules(tmp_path):
    assert student_identity(tmp_path) == "submission"
    meta = {"users": [{"email": "a@b.c", "id": 4711, "name": "A B"}]}
    (tmp_path / "submission_metadata.json").write_text(json.dumps(meta))
    assert student_identity(tmp_path) == "gs-4711"
    (tmp_path / "submission_metadata.json").write_text(json.dumps({"users": [{"email": "x@y"}]}))
    assert student_identity(tmp_path) == "gs-x@y"
    config = {"visibility": "after_due_date", "tests": {"*multihead*": "hidden"}}
    assert level_for("test_fx.py::test_attention_values", config) == "after_due_date"
    assert level_for("test_fx.py::test_multihead_matches", config) == "hidden"


def _gradescope_run(zip_path: Path, root: Path, notebook: bytes | None, user: int) -> dict:
    """Lay out ``root`` as Gradescope does and run ``run_autograder`` (no setup.sh: no network)."""
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")  # Gradescope unpacks the zip *into* /autograder/source
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    if notebook is not None:
        (root / "submission" / "my_attention.ipynb").write_bytes(notebook)
    meta = {"users": [{"id": user, "email": f"s{user}@uni.edu"}], "created_at": "2026-11-24"}
    (root / "submission_metadata.json").write_text(json.dumps(meta))
    out = time_limits.run(
        ["bash", str(root / "run_autograder")],
        env=_env(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable),
        capture_output=True, text=True, cpu=1200, cwd=root,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads((root / "results" / "results.json").read_text())


@pytest.mark.slow
def test_gradescope_zip_works_as_uploaded(course, tmp_path):
    archive = tmp_path / "gs.zip"
    corpus.cli(
        "--course-dir", str(course), "gradescope", A, "--out", str(archive),
        "--visibility", "after_published", "--test-visibility", "*multihead*=after_due_date",
    )  # fmt: skip
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
    # the zip's top level is /autograder/source: no source/ folder of its own
    assert {"setup.sh", "run_autograder", "requirements.txt", "gradescope.json"} <= names
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert f"autograder/suites/{A}/test_fx_attention.py" in names
    assert f"assignments/{A}/{NB}" in names and "course_lib/__init__.py" in names
    assert not any(
        n.startswith(("source/", "solutions", "grading", "autograder/samples")) for n in names
    )
    with zipfile.ZipFile(archive) as zf:
        setup = zf.read("setup.sh").decode()
    assert '"$HERE/requirements.txt"' in setup and "python3.11" in setup

    reference = nbformat.writes(_reference(course)).encode()
    results = _gradescope_run(archive, tmp_path / "ref", reference, user=4711)
    assert results["score"] == 8 and len(results["tests"]) == 8  # 7 tests + written answers
    graded = [t for t in results["tests"] if t["max_score"]]
    assert all(t["status"] == "passed" for t in graded)
    levels = {t["name"]: t["visibility"] for t in graded}
    assert {v for k, v in levels.items() if "multihead" in k} == {"after_due_date"}
    assert {v for k, v in levels.items() if "multihead" not in k} == {"after_published"}
    assert results["visibility"] == "after_published"  # the score too, not only the tests
    written = results["tests"][-1]
    assert written["output_format"] == "html" and "explain_scaling" in written["output"]
    assert "YOUR ANSWER HERE" in written["output"]  # the reference leaves the written answer
    assert "CANARY" not in json.dumps(results)

    blank = (course / "assignments" / A / NB).read_bytes()
    results = _gradescope_run(archive, tmp_path / "blank", blank, user=4712)
    assert results["score"] == 0 and all(t["score"] == 0 for t in results["tests"])

    results = _gradescope_run(archive, tmp_path / "broken", b'{"cells": [', user=4713)
    assert results["score"] == 0
    assert "JSON" in results["output"] or "notebook" in results["output"], results["output"]
    assert all(t["status"] == "failed" for t in results["tests"] if t["max_score"])


# ---------------------------------------------------------------------------------------------
# nbgrader end to end
# ---------------------------------------------------------------------------------------------

COURSE_ID = "attention-and-transformers"


def _nbgrader(cwd: Path, *args: str, home: Path, ok: bool = True) -> subprocess.CompletedProcess:
    out = time_limits.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=cwd, env=_env(HOME=str(home), COURSE_ID=COURSE_ID), capture_output=True, text=True,
        cpu=600,
    )  # fmt: skip
    if ok:
        assert out.returncode == 0, f"nbgrader {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out


def _with_student_work(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """What a student hands in: outputs in their cells and a cell of their own."""
    nb = nbformat.from_dict(json.loads(nbformat.writes(nb)))
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade_id") == (
            "attention"
        ):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="fitted 0.5012\n")]
    mine = nbformat.v4.new_code_cell("print('my experiment', 42)")
    mine.outputs = [nbformat.v4.new_output("stream", name="stdout", text="my experiment 42\n")]
    nb.cells.append(mine)
    return nb


@pytest.mark.slow
def test_nbgrader_release_submit_collect_grade_feedback_export(course, tmp_path):
    from nbgrader.api import Gradebook

    exchange, home = tmp_path / "exchange", tmp_path / "home"
    exchange.mkdir(mode=0o777)
    home.mkdir()
    config = course / "nbgrader_config.py"
    text = config.read_text()
    if "# end-to-end test" not in text:
        text += (
            f'\n# end-to-end test\nc.Exchange.root = "{exchange}"\n'
            f'c.Exchange.cache = "{tmp_path / "cache"}"\n'
            f'c.Autograder.due_dates = {{"{A}": "2020-01-01 00:00:00 UTC"}}\n'
        )
        config.write_text(text)
    grading = course / "grading"

    # release to the exchange; two students fetch, work, submit
    _nbgrader(course, "release_assignment", A, "--force", home=home)
    work = {"alice": _with_student_work(_reference(course)), "bob": None}
    for student, nb in work.items():
        folder = tmp_path / "students" / student
        folder.mkdir(parents=True)
        (folder / "nbgrader_config.py").write_text(
            f'c = get_config()\nc.Exchange.root = "{exchange}"\n'
            f'c.Exchange.cache = "{tmp_path / "cache"}"\n'
            f'c.CourseDirectory.course_id = "{COURSE_ID}"\n'
        )
        _nbgrader(folder, "fetch_assignment", A, f"--student={student}", home=home)
        if nb is not None:
            nbformat.write(nb, folder / A / NB)
        _nbgrader(folder, "submit", A, f"--student={student}", home=home)

    # collect from the exchange, and a Canvas download through zip_collect
    _nbgrader(course, "collect", A, home=home)
    for student in work:
        assert (grading / "submitted" / student / A / "timestamp.txt").is_file()
    archive = grading / "downloaded" / A / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "submissions.zip", "w") as zf:
        zf.writestr(f"smithjohn_LATE_12345_67890_{NB}", nbformat.writes(_reference(course)))
        zf.writestr("smithjohn_12345_67891_helpers.txt", "not collected")
    _nbgrader(course, "zip_collect", A, home=home)
    assert (grading / "submitted" / "12345" / A / NB).is_file()

    # grade: the course's grader writes the gradebook and the autograded notebooks
    out = corpus.cli("--course-dir", str(course), "grade", A, "--jobs", "1", "--quiet")
    assert "Warning" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert re.search(r"alice\s+8 / 8", out.stdout) and re.search(r"bob\s+0 / 8", out.stdout)
    assert re.search(r"12345\s+8 / 8", out.stdout)
    assert "late: alice" in out.stdout
    # the lateness reaches report.json and the class report's lateness histogram
    report = json.loads((course / "autograder_out" / A / "report.json").read_text())
    alice = next(r for r in report["rows"] if r["student"] == "alice")
    assert alice["seconds_late"] > 0 and alice["timestamp"], alice.get("seconds_late")
    insight = json.loads((course / "autograder_out" / A / "insight.json").read_text())
    assert any(h > 0 for h in insight["hours_late"]), insight["hours_late"]
    autograded = grading / "autograded" / "alice" / A
    for name in ("timestamp.txt", "submission_secret.txt"):
        assert (autograded / name).read_text() == (
            grading / "submitted" / "alice" / A / name
        ).read_text()
    cells = nbformat.read(autograded / NB, as_version=4).cells
    added = [c for c in cells if c.metadata.get("autograder", {}).get("added_by_student")]
    assert len(added) == 1 and "not graded" in added[0].source
    assert "my experiment 42" in added[0].outputs[0]["text"]
    attention = next(
        c for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == "attention"
    )
    assert "not graded" in attention.outputs[0]["text"] and "0.5012" in attention.outputs[1]["text"]

    # formgrader's view: everyone autograded, nobody "needs autograding"; lateness recorded
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    api = NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)
    (course / "solutions" / "_authoring").mkdir(exist_ok=True)  # helpers, not an assignment
    assert api.get_source_assignments() == {A}
    subs = {s["student"]: s for s in api.get_submissions(A)}
    assert set(subs) == {"alice", "bob", "12345"}
    assert all(s["autograded"] for s in subs.values()), subs
    assert subs["alice"]["score"] == 8 and subs["bob"]["score"] == 0
    with Gradebook(cfg.CourseDirectory.db_url, COURSE_ID) as gb:
        assert gb.find_submission(A, "alice").total_seconds_late > 0
        grade = gb.find_grade("explain_scaling", A.replace(".ipynb", ""), A, "alice")
        grade.manual_score = 1.5  # a hand-grader scores the written answer
        gb.db.commit()

    # stock `nbgrader autograde` (formgrader's button) runs our grader, not the student's kernel
    _nbgrader(course, "autograde", A, "--student=bob", "--force", home=home)
    with Gradebook(cfg.CourseDirectory.db_url, COURSE_ID) as gb:
        assert gb.find_submission(A, "bob").score == 0
    bob = nbformat.read(grading / "autograded" / "bob" / A / NB, as_version=4)
    assert "**Autograder:** 0 / 8" in bob.cells[0].source

    # feedback: generate, release, and the student fetches it
    _nbgrader(course, "generate_feedback", A, home=home)
    assert (grading / "feedback" / "alice" / A / NB.replace(".ipynb", ".html")).is_file()
    _nbgrader(course, "release_feedback", A, home=home)
    _nbgrader(tmp_path / "students" / "alice", "fetch_feedback", A, "--student=alice", home=home)
    fetched = list((tmp_path / "students" / "alice" / A / "feedback").rglob("*.html"))
    assert fetched, "alice received no feedback"

    # export: autograded and manual points per student
    exported = _nbgrader(course, "export", "--to", str(tmp_path / "grades.csv"), home=home)
    assert "SAWarning" not in exported.stderr and "SADeprecationWarning" not in exported.stderr
    rows = {r["student_id"]: r for r in csv.DictReader(open(tmp_path / "grades.csv"))}
    assert float(rows["alice"]["autograded"]) == 8 and float(rows["alice"]["manual"]) == 1.5
    assert float(rows["alice"]["score"]) == 9.5 and float(rows["alice"]["max_score"]) == 10
    assert float(rows["alice"]["seconds_late"]) > 0 and float(rows["bob"]["autograded"]) == 0


@pytest.mark.parametrize(
    ("lms", "path", "student", "file_id"),
    [
        ("canvas", "smithjohn_12345_67890_a2_self_attention.ipynb", "12345",
         "a2_self_attention.ipynb"),
        ("canvas", "smithjohn_LATE_12345_67890_a2_self_attention-1.ipynb", "12345",
         "a2_self_attention-1.ipynb"),
        ("moodle", "John Smith_4242_assignsubmission_file_/a2_self_attention.ipynb", "4242",
         "a2_self_attention.ipynb"),
        ("moodle", "John Smith_4242_assignsubmission_file_helpers.py", "4242", "helpers.py"),
        ("blackboard", "A2 Self_jsmith_attempt_2026-11-24-10-15-30_a2_self_attention.ipynb",
         "jsmith", "a2_self_attention.ipynb"),
    ],
)  # fmt: skip
def test_lms_file_name_patterns_match_whole_upload_names(monkeypatch, lms, path, student, file_id):
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.integrations.lms import LmsCollector

    monkeypatch.setenv("COURSE_LMS", lms)
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    plugin = LmsCollector(config=cfg)
    found = plugin.match(path)
    assert found is not None and found["student_id"] == student and found["file_id"] == file_id
    assert plugin.match(f"submissions/{path}") is None  # anchored to the upload's own name
    assert plugin.collect(f"/srv/x/{path}".replace(".ipynb", ".txt").replace(".py", ".txt")) is None


# ---------------------------------------------------------------------------------------------
# Fairness and written answers
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_fairness_flags_a_sample_whose_score_depends_on_the_student(course, tmp_path):
    samples = course / "autograder" / "samples" / A
    samples.mkdir(parents=True, exist_ok=True)
    release = nbformat.read(course / "assignments" / A / NB, as_version=4)
    ref = corpus.reference_sources()
    # right only when the first query entry is positive: passes for some students' inputs
    lucky = ref["attention"].replace(
        "scores = q @ k", "scores = (1 if q.flatten()[0] > 0 else 2) * q @ k", 1
    )
    assert lucky != ref["attention"]
    nbformat.write(corpus._with_solutions(release, attention=lucky), samples / "lucky.ipynb")
    nbformat.write(
        corpus._with_solutions(release, attention=ref["attention"]), samples / "steady.ipynb"
    )
    out_json = tmp_path / "fairness.json"
    out = corpus.cli(
        "--course-dir", str(course), "fairness", A, "--names", "4", "--jobs", "1", "--quiet",
        "--out", str(out_json), check=False,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    rows = {r["submission"]: r for r in json.loads(out_json.read_text())}
    assert set(rows) == {"reference", "blank", "lucky", "steady"}
    for name in ("reference", "blank", "steady"):
        assert rows[name]["fair"] and len(rows[name]["scores"]) == 4, rows[name]
    assert not rows["lucky"]["fair"] and rows["lucky"]["min"] < rows["lucky"]["max"]
    assert rows["lucky"]["varying_tests"] and "VARIES" in out.stdout


def test_written_answers_page_escapes_html(course, tmp_path):
    from autograder.course.layout import Course
    from autograder.tools.written import answers_html

    release = nbformat.read(course / "assignments" / A / NB, as_version=4)
    for cell in release.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "explain_scaling":
            cell.source = "The variance grows like $D$. <script>alert(1)</script> **bold**"
    folder = tmp_path / "sub"
    folder.mkdir()
    nbformat.write(release, folder / "renamed.ipynb")
    page = answers_html(Course(course), A, folder, "<alice>")
    assert "<strong>bold</strong>" in page and "$D$" in page
    assert "<script>" not in page and "&lt;alice&gt;" in page
    assert "explain_scaling" in page and "2 points" in page


def test_autograded_notebook_keeps_the_students_outputs_and_added_cells(tmp_path):
    from autograder.integrations.bookkeeping import keep_student_work

    def cell(kind: str, source: str, gid: str | None = None, **meta: bool):
        new = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        c = new(source)
        if gid:
            c.metadata["nbgrader"] = {"grade_id": gid, **meta}
        return c

    graded = nbformat.v4.new_notebook()
    graded.cells = [
        cell("markdown", "**Autograder:** 4 / 8"),
        cell("markdown", "# Task"),
        cell("code", "def f(): return 1", "f", solution=True),
        cell("code", "check(f)", "check_f", grade=True),
        cell("code", "plot(f)"),
    ]
    graded.cells[3].outputs = [nbformat.v4.new_output("stream", name="stdout", text="passed\n")]
    student = nbformat.from_dict(json.loads(nbformat.writes(graded)))
    student.cells = student.cells[1:]  # no summary in the student's copy
    student.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    student.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="fake\n")]
    student.cells[3].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 10**6)]
    student.cells.insert(2, cell("markdown", "My notes: exponent 1.98"))
    student.cells.append(cell("code", "print('extra')"))
    a, s = tmp_path / "graded.ipynb", tmp_path / "student.ipynb"
    nbformat.write(graded, a)
    nbformat.write(student, s)
    assert keep_student_work(a, s)
    out = nbformat.read(a, as_version=4)
    sources = [c.source for c in out.cells]
    assert len(out.cells) == 7 and sources[0].startswith("**Autograder:**")
    assert sources[3].startswith("*[added by the student: not graded]*") and "1.98" in sources[3]
    assert sources[-1].startswith("# [added by the student: not graded]")
    assert all(c.metadata["autograder"]["not_graded"] for c in (out.cells[3], out.cells[-1]))
    solution = out.cells[2]
    assert "not graded" in solution.outputs[0]["text"] and solution.outputs[1]["text"] == "42\n"
    assert [o["text"] for o in out.cells[4].outputs] == ["passed\n"]  # the check's own results
    plot = out.cells[5].outputs[1]["text"]
    assert len(plot) < 30_000 and plot.endswith("[... cut]")
    nbformat.validate(out)
    (tmp_path / "bad.ipynb").write_text("{")
    assert not keep_student_work(a, tmp_path / "bad.ipynb")


# ---------------------------------------------------------------------------------------------
# The pages graders open: formgrader and generate_feedback (issue 28, section 5)
# ---------------------------------------------------------------------------------------------


def _hostile_autograded() -> nbformat.NotebookNode:
    """What a notebook under grading/autograded/ could carry if a student's bytes reached it."""
    v4 = nbformat.v4
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJ"
    png += "RU5ErkJggg=="
    image = v4.new_output(
        "display_data",
        data={"image/png": png, "text/plain": "<Figure>"},
        metadata={"image/png": {"width": "1 onerror=alert(1)", "height": 30}},
    )
    html_out = v4.new_output(
        "display_data",
        data={
            "text/html": "<img src=x onerror=alert(1)>",
            "image/svg+xml": "<svg onload=alert(1)/>",
            "application/javascript": "alert(1)",
            "text/markdown": "[m](javascript:alert(1))",
        },
    )
    code = v4.new_code_cell(
        "x = 1",
        outputs=[image, html_out],
        metadata={
            "nbgrader": {
                "grade": False,
                "solution": True,
                "grade_id": '"><script>alert(1)</script>',
                "locked": False,
            }
        },
    )
    written = v4.new_markdown_cell(
        "My answer <script>alert(1)</script> and [x](javascript&#58;alert(1)), "
        "[y](&#106;avascript:alert(1)), <javascript:alert(1)>, <a href='javascript:alert(1)'>a</a>"
        "\n\n<img src=x onerror=alert(1)>\n\n<details open ontoggle=alert(1)>d</details>\n\n"
        "$a < b$ and **bold**",
        metadata={
            "nbgrader": {
                "grade": True,
                "solution": True,
                "grade_id": "explain",
                "points": 2,
                "score": 0,
                "locked": False,
            }
        },
    )
    raw = v4.new_raw_cell("<script>alert(1)</script>")
    return v4.new_notebook(cells=[v4.new_markdown_cell("# Task\nIntro text."), code, written, raw])


class _LiveParts(__import__("html.parser").parser.HTMLParser):
    """Scripts, event-handler attributes and script URLs in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts, self.handlers, self.urls, self._in_script = [], [], [], False

    def handle_starttag(self, tag, attrs):
        self._in_script = tag == "script"
        for name, value in attrs:
            value = value or ""
            if name.startswith("on"):
                self.handlers.append(f"<{tag} {name}={value}>")
            bare = "".join(c for c in value if c > " ").lower()
            if name in ("href", "src", "action", "formaction", "xlink:href", "data") and (
                bare.startswith(("javascript:", "vbscript:", "data:text/html"))
            ):
                self.urls.append(f"<{tag} {name}={value}>")

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)

    def handle_endtag(self, tag):
        self._in_script = False


def _course_exporters() -> dict:
    """The HTMLExporters nbgrader's feedback and formgrader make with the course's config."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    feedback = GenerateFeedback(coursedir=CourseDirectory(config=cfg), config=cfg)
    exporter = feedback.exporter_class(parent=feedback, config=feedback.config)
    formgrade = Config(cfg)
    formgrade.HTMLExporter.template_name = "formgrade"
    formgrade.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    return {"feedback": exporter, "formgrader": HTMLExporter(config=formgrade)}


def test_pages_render_a_hostile_notebook_inert():
    """An image whose metadata width is ``1 onerror=alert(1)``, a Markdown ``<script>``, a
    ``[x](javascript&#58;...)`` link (and their cousins) through the course's feedback and
    formgrader exporters: no live script, event handler or script URL on either page."""
    resources = {"assignment_id": "a", "notebook_id": "n", "submission_id": "s", "index": 0,
                 "total": 1, "base_url": "", "student": "s", "last_name": "L",
                 "first_name": "F", "notebook_path": "p",
                 "nbgrader": {"notebook": "n", "score": 0, "max_score": 2,
                              "late_penalty": 0}}  # fmt: skip
    for name, exporter in _course_exporters().items():
        benign, _ = exporter.from_notebook_node(
            nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("hello")]),
            resources=dict(resources),
        )
        page, _ = exporter.from_notebook_node(_hostile_autograded(), resources=dict(resources))
        live, baseline = _LiveParts(), _LiveParts()
        live.feed(page)
        baseline.feed(benign)
        added = [h for h in live.handlers if h not in baseline.handlers]  # the template's own
        assert not added, (name, added)
        assert not live.urls, (name, live.urls)
        # the template's own scripts (the feedback page's inline MathJax) are the baseline's
        assert [s for s in live.scripts if "alert" in s and s not in baseline.scripts] == [], name
        assert len(live.scripts) == len(baseline.scripts), name
        assert "My answer" in page and "<strong>bold</strong>" in page, name  # still shown
        assert "data:image/png;base64" in page, name  # the image is still shown


def test_student_files_are_read_through_the_bounded_reader(tmp_path):
    """The student's notebook (outputs kept for graders), timestamp.txt and
    submission_secret.txt, and the digests in report.json: a link to a host file, a FIFO or an
    8 GB file is refused, never followed, waited on or copied."""
    from autograder.course.notebook import sha256_file
    from autograder.integrations.bookkeeping import carry, keep_student_work

    v4 = nbformat.v4
    host = tmp_path / "host.ipynb"  # a file of the host the student's link points at
    shown = v4.new_output("stream", name="stdout", text="HOST SECRET")
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell("x", outputs=[shown])]), host)
    autograded = tmp_path / "autograded.ipynb"
    nbformat.write(v4.new_notebook(cells=[v4.new_markdown_cell("s"), v4.new_code_cell("x")]),
                   autograded)  # fmt: skip
    link = tmp_path / "submitted.ipynb"
    link.symlink_to(host)
    assert keep_student_work(autograded, link) is False
    assert "HOST SECRET" not in autograded.read_text()
    big = tmp_path / "timestamp.txt"
    with open(big, "wb") as f:
        f.truncate(8 * 1024**3)  # sparse: 8 GB that take no disk
    assert not carry(big, tmp_path / "copied.txt") and not (tmp_path / "copied.txt").exists()
    assert not carry(link, tmp_path / "copied.txt")
    (tmp_path / "ok.txt").write_text("2026-11-20 10:00:00 UTC")
    assert carry(tmp_path / "ok.txt", tmp_path / "copied.txt")
    fifo = tmp_path / "fifo.ipynb"
    os.mkfifo(fifo)
    assert keep_student_work(autograded, fifo) is False  # not opened: nothing waits on it
    assert not carry(fifo, tmp_path / "fifo.txt")
    with pytest.raises(OSError):
        sha256_file(fifo)
    with pytest.raises(OSError):
        sha256_file(link)
