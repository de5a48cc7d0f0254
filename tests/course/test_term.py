"""A term as an instructor lives it (issue "[instructor-term]"), on the fixture assignment:

- students who skip an assignment: ``grade`` never writes nbgrader's bookkeeping files into the
  root of ``grading/submitted/`` (they read as students named ``timestamp`` on the next grade);
  the gradebook holds exactly the enrolled students, across two grades;
- a Canvas zip (``LATE_`` marker) and a Moodle zip through ``nbgrader zip_collect``, with a due
  date: each submission's time is its upload time in the zip, not the time of extraction;
  Canvas's own verdict is reported; the names in the file names reach formgrader; a roster
  (``nbgrader db student import``) names the others;
- a student's ``import matplotlib`` leaves no ``register_at_fork`` note;
- a regrade after a test change: ``grade`` refuses points that disagree with the notebook (or
  warns, when asked), and a hand-grader's score survives a regrade;
- the export counts an override of an autograded cell in ``autograded`` (as the README says);
- a new assignment from the scaffold is green in the project's own tests at once, and a points
  fix is one edit of the ``.md``;
- Gradescope: ``results.json``'s top-level visibility follows ``--visibility``; ``setup.sh``
  takes torch from the CPU index only and fails loudly without it (run for real, offline, into a
  fresh virtual environment from local indexes: only the PPA step is not run).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest
import time_limits

sys.path.insert(0, str(Path(__file__).parents[1] / "grader" / "fixtures" / "grader"))
import corpus  # noqa: E402

from autograder.host.intake import discover  # noqa: E402
from autograder.integrations.gradescope import SETUP, finish_results, requirements  # noqa: E402
from autograder.tools.authoring import (  # noqa: E402
    AuthoringError,
    _check_table,
    sync_points,
    to_notebook,  # noqa: E402
)

A, NB = corpus.ASSIGNMENT, corpus.NOTEBOOK
REPO = Path(__file__).resolve().parents[2]
COURSE_ID = "attention-and-transformers"
DUE = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _env(**extra: str) -> dict:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "COURSE_ID": COURSE_ID, **extra}


def _nbgrader(course: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    out = time_limits.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course, env=_env(HOME=str(course / "home"), **env), capture_output=True, text=True,
        cpu=600,
    )  # fmt: skip
    assert out.returncode == 0, f"nbgrader {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out


def _notebook(course: Path, *, solved: bool = True, extra_import: str = "") -> str:
    release = nbformat.read(course / "assignments" / A / NB, as_version=4)
    if not solved:
        return nbformat.writes(release)
    sources = corpus.reference_sources()
    sources["attention"] = extra_import + sources["attention"]
    return nbformat.writes(corpus._with_solutions(release, **sources))


def _grade(course: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    return corpus.cli("--course-dir", str(course), "grade", A, "--jobs", "1", "--quiet", *extra,
                      check=check)  # fmt: skip


def _lms_zip(path: Path, entries: dict[str, tuple[tuple[int, ...], str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, (when, text) in entries.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=when), text)


@pytest.mark.slow
def test_a_term_of_skips_lms_downloads_rosters_and_regrades(tmp_path):
    from nbgrader.api import Gradebook

    course = corpus.make_course(tmp_path / "course")
    (course / "home").mkdir()
    with open(course / "nbgrader_config.py", "a") as config:
        config.write(f'\nc.Autograder.due_dates = {{"{A}": "{DUE:%Y-%m-%d %H:%M:%S} UTC"}}\n')
    submitted = course / "grading" / "submitted"
    solved, blank = (
        _notebook(course, extra_import="import matplotlib\n"),
        _notebook(course, solved=False),
    )

    # the exchange's layout: alice on time, carol a day late, bob skipped this assignment
    for student, text, when in (("alice", solved, "2026-11-20 10:00:00.000000 UTC"),
                                ("carol", blank, "2026-11-21 12:00:00.000000 UTC")):  # fmt: skip
        folder = submitted / student / A
        folder.mkdir(parents=True)
        (folder / NB).write_text(text)
        (folder / "timestamp.txt").write_text(when)
    (submitted / "bob" / "a0_other_assignment").mkdir(parents=True)

    # Canvas: John on time, Jane late (LATE_); then Moodle: Ann an hour late
    archive = course / "grading" / "downloaded" / A / "archive"
    _lms_zip(archive / "canvas.zip", {
        f"smithjohn_12345_67890_{NB}": ((2026, 11, 20, 11, 0, 0), solved),
        f"doejane_LATE_23456_67891_{NB}": ((2026, 11, 20, 15, 30, 0), solved),
    })  # fmt: skip
    _nbgrader(course, "zip_collect", A, "--force", COURSE_LMS="canvas")
    (archive / "canvas.zip").unlink()
    _lms_zip(archive / "moodle.zip", {
        f"Ann Lee_4242_assignsubmission_file_/{NB}": ((2026, 11, 20, 13, 0, 0), solved),
    })  # fmt: skip
    _nbgrader(course, "zip_collect", A, "--force", COURSE_LMS="moodle")
    from nbgrader.utils import parse_utc

    for student, hour in (("12345", 11), ("23456", 15.5), ("4242", 13)):
        stamp = parse_utc((submitted / student / A / "timestamp.txt").read_text())
        want = DUE.replace(hour=int(hour), minute=int(hour % 1 * 60), tzinfo=None)  # naive UTC
        assert stamp == want, (student, stamp)

    # the roster names the students the exchange knows only by login
    roster = course / "students.csv"
    roster.write_text("id,first_name,last_name,email\nalice,Alice,Ames,alice@uni.edu\n"
                      "bob,Bob,Berg,bob@uni.edu\ncarol,Carol,Cho,carol@uni.edu\n")  # fmt: skip
    _nbgrader(course, "db", "student", "import", str(roster))

    out = _grade(course)
    for fake in ("timestamp.txt", "submission_secret.txt"):
        assert not (submitted / fake).exists(), f"grade wrote {fake} into submitted/"
    table = csv.DictReader(open(course / "autograder_out" / A / "grades.csv", encoding="utf-8"))
    assert {r["student"]: r["status"] for r in table}["bob"] == "skipped"  # not "error"
    assert "register_at_fork" not in out.stdout + out.stderr
    report = json.loads((course / "autograder_out" / A / "report.json").read_text())
    rows = {r["student"]: r for r in report["rows"]}
    assert not any("register_at_fork" in n for n in rows["alice"]["notes"]), rows["alice"]["notes"]
    assert re.search(r"alice\s+8 / 8", out.stdout) and re.search(r"carol\s+0 / 8", out.stdout)
    assert re.search(r"late: 23456 submitted 3\.5 h after the due date; marked late by the LMS",
                     out.stdout), out.stdout  # fmt: skip
    assert (
        "late: 4242 submitted 1.0 h" in out.stdout and "late: carol submitted 24.0 h" in out.stdout
    )
    assert not re.search(r"late: (alice|12345)\b", out.stdout), out.stdout

    enrolled = {"alice", "bob", "carol", "12345", "23456", "4242"}
    db = f"sqlite:///{course / 'grading' / 'gradebook.db'}"
    for again in (True, False):  # the old bug showed on the grade after the first
        with Gradebook(db, COURSE_ID) as gb:
            assert {s.id for s in gb.students} == enrolled
            late = {s: gb.find_submission(A, s).total_seconds_late for s in enrolled - {"bob"}}
            names = {s.id: (s.first_name, s.last_name) for s in gb.students}
        assert late == {"alice": 0, "12345": 0, "23456": 3.5 * 3600, "4242": 3600,
                        "carol": 24 * 3600}, late  # fmt: skip
        assert names["4242"] == ("Ann", "Lee") and names["alice"] == ("Alice", "Ames"), names
        assert names["12345"] == ("", "smithjohn"), names
        if again:
            _grade(course)
    assert not (submitted / "timestamp.txt").exists()
    # an older grader's leftovers at the root are not students
    (submitted / "timestamp.txt").write_text("2026-11-20 10:00:00 UTC")
    assert "timestamp" not in {s.student for s in discover(submitted, A, [NB])}

    # a hand-grader overrides an autograded cell and scores the written answer
    with Gradebook(db, COURSE_ID) as gb:
        gb.find_grade("explain_scaling", A, A, "alice").manual_score = 1.5
        gb.find_grade("check_multihead", A, A, "alice").manual_score = 3.0  # of 4
        gb.db.commit()

    # a test changes its points: grade refuses (or warns, asked to), nothing is lost
    suite = course / "autograder" / "suites" / A / "test_fx_attention.py"
    original = suite.read_text()
    suite.write_text(original.replace('points(2, cell="check_multihead")',
                                      'points(3, cell="check_multihead")', 1))  # fmt: skip
    refused = _grade(course, check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        "disagrees with its notebook" in refused.stderr and "nothing was graded" in refused.stderr
    )
    assert "check_multihead" in refused.stderr and "add up to 5" in refused.stderr, refused.stderr
    warned = _grade(course, "--points-mismatch", "warn")
    assert "WARNING" in warned.stderr and re.search(r"alice\s+8 / 8", warned.stdout)
    suite.write_text(original.replace("should return a tensor", "must return a tensor"))
    regraded = _grade(course)
    assert "WARNING" not in regraded.stderr and re.search(r"alice\s+8 / 8", regraded.stdout)
    with Gradebook(db, COURSE_ID) as gb:
        assert gb.find_grade("explain_scaling", A, A, "alice").manual_score == 1.5
        assert gb.find_grade("check_multihead", A, A, "alice").manual_score == 3.0

    # the export: the override is in `autograded` (README: "autograded (... overrides included)")
    _nbgrader(course, "export", "--to", str(tmp_path / "grades.csv"))
    exported = {r["student_id"]: r for r in csv.DictReader(open(tmp_path / "grades.csv"))}
    assert set(exported) == enrolled
    alice = exported["alice"]
    assert float(alice["autograded"]) == 7 and float(alice["manual"]) == 1.5, alice
    assert (alice["first_name"], alice["last_name"]) == ("Alice", "Ames")
    assert float(exported["23456"]["seconds_late"]) == 3.5 * 3600
    readme = (REPO / "README.md").read_text()
    assert "override of an autograded cell counts in `autograded`" in readme


# ---------------------------------------------------------------------------------------------
# The rest of the term (issue "[instructor-term-2]")
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_totals_count_only_the_assignments_handed_out(tmp_path):
    """``make release`` builds every assignment, but one that ``course.yml`` lists as
    ``unreleased`` stays out of the gradebook (and leaves it, if an earlier release put it
    there): formgrader's overall score and the export's totals are the released points only."""
    from nbgrader.api import Gradebook
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    course = corpus.make_course(tmp_path / "course", release=False)
    (course / "home").mkdir()
    later = "fx_later"
    shutil.copytree(course / "solutions" / A, course / "solutions" / later)
    schedule = course / "course.yml"
    schedule.write_text(f"assignments:\n  {A}: released\n  {later}: released\n")
    corpus.cli("--course-dir", str(course), "release", A, later)  # as an older release did
    db = f"sqlite:///{course / 'grading' / 'gradebook.db'}"
    with Gradebook(db, COURSE_ID) as gb:
        assert {a.name for a in gb.assignments} == {A, later}
    schedule.write_text(f"assignments:\n  {A}: released\n  {later}: unreleased\n")
    out = corpus.cli("--course-dir", str(course), "release", A, later)
    assert f"{later} is unreleased in course.yml: kept out of the gradebook" in out.stdout
    assert (course / "assignments" / later / NB).is_file()  # built, only not handed out
    with Gradebook(db, COURSE_ID) as gb:
        assert {a.name for a in gb.assignments} == {A}
        released_points = sum(a.max_score for a in gb.assignments)
    assert released_points == 10  # 8 autograded + 2 by hand

    roster = course / "students.csv"
    roster.write_text("id,first_name,last_name,email\nalice,Alice,Ames,a@uni.edu\n")
    _nbgrader(course, "db", "student", "import", str(roster))
    _nbgrader(course, "export", "--to", str(tmp_path / "grades.csv"))
    rows = list(csv.DictReader(open(tmp_path / "grades.csv")))
    assert {r["assignment"] for r in rows} == {A}, rows
    assert sum(float(r["max_score"]) for r in rows if r["student_id"] == "alice") == 10
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    cfg.CourseDirectory.course_id = COURSE_ID
    api = NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)
    assert [s["max_score"] for s in api.get_students() if s["id"] == "alice"] == [10]


def test_the_roster_and_instructor_data_are_git_ignored():
    """README: names live only in git-ignored files. The roster the README tells instructors to
    import, grade tables and the gradebook at the root are ignored; no tracked file is."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    private = ["students.csv", "roster.csv", "grading/roster_2026.csv", "grades.csv",
               "gradebook.db", "marks.xlsx", "instructor/notes.md", "private/extensions.txt",
               "autograder_out/a2_self_attention/grades.csv", "dist/student.zip"]  # fmt: skip
    out = subprocess.run(["git", "check-ignore", "--no-index", *private], cwd=REPO,
                         capture_output=True, text=True)  # fmt: skip
    assert sorted(out.stdout.split()) == sorted(private), out.stdout + out.stderr
    tracked = subprocess.run(["git", "ls-files", "-ci", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True)  # fmt: skip
    assert tracked.stdout == "", f"tracked files the ignore rules would hide:\n{tracked.stdout}"


@pytest.mark.slow
def test_nbgrader_exchange_reaches_the_students_through_the_bundles_config(tmp_path):
    """nbgrader never reads ``NBGRADER_EXCHANGE``: the course's config and the student's
    ``~/.jupyter/nbgrader_config.py`` (the bundle's, as the README says) turn it into
    ``c.Exchange.root``. Released with the variable set, listed and fetched by a student with
    the same variable and the bundle's config: no "Unwritable directory" of the default."""
    from autograder.course.embargo import STUDENT_NBGRADER_CONFIG

    course = corpus.make_course(tmp_path / "course")
    exchange = tmp_path / "srv-exchange"
    exchange.mkdir(mode=0o777)
    env = {"NBGRADER_EXCHANGE": str(exchange)}
    (course / "home").mkdir()
    _nbgrader(course, "release_assignment", A, "--force", **env)
    assert (exchange / COURSE_ID / "outbound" / A / NB).is_file()

    student = tmp_path / "alice"
    (student / ".jupyter").mkdir(parents=True)
    (student / ".jupyter" / "nbgrader_config.py").write_text(STUDENT_NBGRADER_CONFIG)
    work = student / "work"
    work.mkdir()

    def as_student(*args: str) -> subprocess.CompletedProcess:
        student_env = _env(HOME=str(student), **env)
        for key in ("JUPYTER_CONFIG_DIR", "JUPYTER_CONFIG_PATH"):
            student_env.pop(key, None)
        command = [sys.executable, "-m", "nbgrader", *args]
        return time_limits.run(command, cwd=work, env=student_env, capture_output=True,
                               text=True, cpu=600)  # fmt: skip

    listed = as_student("list")
    said = listed.stdout + listed.stderr
    assert listed.returncode == 0 and "Unwritable" not in said and A in said, said
    fetched = as_student("fetch_assignment", A)
    assert fetched.returncode == 0 and (work / A / NB).is_file(), fetched.stderr
    readme = (REPO / "README.md").read_text()
    assert "never from `NBGRADER_EXCHANGE`" in readme and "~/.jupyter/nbgrader_config.py" in readme


def test_points_changed_after_submission_are_named_at_grade_time(tmp_path):
    """The .md and the suite moved a cell to other points and the release was rebuilt after
    students submitted: the submitted notebooks still say the old points. ``grade`` (through
    ``bookkeeping.finish``) warns once per changed cell, naming the submissions."""
    from autograder.integrations.bookkeeping import drift_warnings, points_drift

    release = nbformat.v4.new_notebook()
    for gid, points in (("check_a", 3), ("explain", 2)):
        cell = nbformat.v4.new_code_cell("pass")
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": gid, "points": points}
        release.cells.append(cell)
    nbformat.write(release, tmp_path / NB)
    old = nbformat.from_dict(json.loads(nbformat.writes(release)))
    old.cells[0].metadata["nbgrader"]["points"] = 2
    submitted = tmp_path / "alice" / NB
    submitted.parent.mkdir()
    nbformat.write(old, submitted)
    changed = points_drift(submitted, tmp_path / NB)
    want = (f"points changed since this submission: {NB} check_a is worth 3 in the release, "
            "2 in the submitted notebook (graded out of 3)")  # fmt: skip
    assert changed == [want], changed
    assert points_drift(tmp_path / NB, tmp_path / NB) == []
    hostile = json.loads(nbformat.writes(old))
    hostile["cells"][0]["metadata"]["nbgrader"]["points"] = "many"
    hostile["cells"][1]["metadata"] = "not a dict"
    submitted.write_text(json.dumps(hostile))
    assert points_drift(submitted, tmp_path / NB) == []
    lines = drift_warnings({"alice": changed, "bob": changed, "carol": []})
    assert len(lines) == 1 and lines[0].startswith("WARNING: points changed"), lines
    assert "2 submission(s) (alice, bob)" in lines[0], lines


def test_a_student_who_skipped_is_skipped_not_an_error(tmp_path):
    """README: students who skip an assignment are "simply not graded". Their entry of
    ``submitted/`` (a folder holding only other assignments) becomes a row of ``grades.csv``
    whose status is ``skipped``, not ``error`` (which means a submission nothing could be graded
    of), with no fault and the reason ``no submission of ...``."""
    from autograder.host.grader import prepare

    submitted = tmp_path / "submitted"
    (submitted / "bob" / "a0_other_assignment").mkdir(parents=True)
    (submitted / "carol" / A).mkdir(parents=True)  # an empty hand-in is the student's error
    subs = {s.student: s for s in discover(submitted, A, [NB])}
    release = {NB: []}
    _, bob = prepare(subs["bob"], release)
    assert (bob.status, bob.fault, bob.submitted) == ("skipped", None, False), bob
    assert bob.reason.startswith(f"no submission of {A}"), bob.reason
    _, carol = prepare(subs["carol"], release)
    assert carol.status == "error" and carol.fault == "student", carol


# ---------------------------------------------------------------------------------------------
# A new assignment: green in the project's own tests, points restated from one edit
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_scaffolded_assignment_is_green_in_the_projects_own_tests(tmp_path):
    """``make new-assignment`` in a copy of this repository, then the project's own tests on it
    (the fast ones of tests/course/test_assignments.py for the new assignment, and the schedule
    test; ``test_new_assignment_scaffold_passes_check_at_once`` grades it) and ruff."""
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")
    for folder in ("autograder", "course_lib", "solutions", "assignments"):
        shutil.copytree(REPO / folder, copy / folder, ignore=ignore)
    shutil.copytree(REPO / "tests", copy / "tests", ignore=ignore)  # the project's own tests
    for path in ("course.yml", "nbgrader_config.py", "pyproject.toml"):
        shutil.copy(REPO / path, copy / path)
    name = "a6_term_example"
    env = _env(PYTHONPATH=str(copy))
    out = time_limits.run([sys.executable, "-m", "autograder", "--course-dir", str(copy),
                          "new-assignment", name], cwd=copy, env=env, capture_output=True,
                         text=True, cpu=1200)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{name} is listed as unreleased" in out.stdout and "make lint" in out.stdout
    assert f"  {name}: unreleased" in (copy / "course.yml").read_text()
    new = [
        copy / "solutions" / name,
        copy / "autograder" / "suites" / name,
        copy / "autograder" / "samples" / name,
        copy / "assignments" / name,
        copy / "course_lib" / "checks" / "a6.py",
    ]  # folders, so that ruff.toml excludes apply
    ruff = str(Path(sys.executable).parent / "ruff")
    for args in (["check"], ["format", "--check"]):
        lint = subprocess.run([ruff, *args, *map(str, new)], cwd=copy, capture_output=True,
                              text=True)  # fmt: skip
        assert lint.returncode == 0, lint.stdout + lint.stderr
    tests = time_limits.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
         "tests/course/test_assignments.py", "-k", f"{name} or there_are or check_cells_import",
         "tests/course/test_embargo.py::"
         "test_the_repository_schedule_releases_every_assignment_and_no_solution"],
        cwd=copy, env=env, capture_output=True, text=True, cpu=1200,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    passed = int(re.search(r"(\d+) passed", tests.stdout).group(1))
    assert passed >= 8 and "failed" not in tests.stdout, tests.stdout[-3000:]


def test_a_points_fix_is_one_edit_of_the_text_source():
    from autograder.tools.scaffold import SOURCE

    text = SOURCE.format(title="A9: Example", module="a9", name="a9_example")
    nb = to_notebook(
        text.replace(":points: 2", ":points: 3").replace('"points": 1}', '"points": 2}')
    )
    changes = sync_points(nb)
    md = "\n".join(c.source for c in nb.cells)
    assert "## 1. Softmax (3 points)" in md and "| 1. `softmax` | hidden tests | 3 |" in md
    assert "**5** (3 automatic + 2 by hand)" in md and "**Q1 (2 points).**" in md, md
    assert "| Q1 stability | by hand | 2 |" in md and len(changes) == 5, changes
    assert sync_points(nb) == []  # restated once, then stable
    # a part whose table rows group several check cells cannot be restated: named, not guessed
    a4 = (REPO / "solutions" / "a4_bert_gpt" / "a4_bert_gpt.md").read_text()
    nb = to_notebook(a4.replace(":points: 6", ":points: 7", 1))
    sync_points(nb)
    with pytest.raises(AuthoringError, match="part 2: the rows say 7, its check cells 8"):
        _check_table(nb, "a4_bert_gpt.md")


# ---------------------------------------------------------------------------------------------
# Gradescope
# ---------------------------------------------------------------------------------------------


def test_gradescope_top_level_visibility_follows_the_default():
    results = {"score": 3, "visibility": "visible", "tests": [{"name": "t.py::test_a"}]}
    config = {"visibility": "after_due_date", "tests": {"*_b": "hidden"}}
    out = finish_results(results, config, None)
    assert out["visibility"] == "after_due_date" and out["tests"][0]["visibility"] == (
        "after_due_date"
    )


def test_gradescope_written_answers_follow_the_visibility_too():
    results = {"score": 3, "tests": [{"name": "t.py::test_a"}, {"name": "t.py::test_b"}]}
    config = {"visibility": "after_due_date", "tests": {"*_b": "hidden"}}
    out = finish_results(results, config, "<p>my answer</p>")
    levels = {t["name"]: t["visibility"] for t in out["tests"]}
    assert levels == {"t.py::test_a": "after_due_date", "t.py::test_b": "hidden",
                      "Written answers (graded by hand)": "after_due_date"}, levels  # fmt: skip


def _wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> None:
    """A minimal pure-Python wheel in ``folder/<name>/`` with the index page pip reads there."""
    project = folder / name
    project.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    path = project / f"{dist}-py3-none-any.whl"
    meta = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in {**files, **meta}.items():
            zf.writestr(arc, text)
        zf.writestr(f"{dist}.dist-info/RECORD", "".join(f"{a},,\n" for a in [*files, *meta])
                    + f"{dist}.dist-info/RECORD,,\n")  # fmt: skip
    (project / "index.html").write_text(f'<a href="{path.name}">{path.name}</a>\n')


@pytest.mark.slow
def test_setup_sh_takes_torch_from_the_cpu_index_only_and_fails_loudly(tmp_path):
    """``setup.sh`` run for real (bash, a fresh venv, pip) against two local indexes: a "CPU
    index" with a CPU torch and a "PyPI" with every other pin and a CUDA torch of the same
    version. With the CPU index it installs the CPU torch; with the CPU index unreachable it
    fails, saying so, where ``--extra-index-url`` silently took the CUDA build. Not run here:
    the deadsnakes PPA step (the test's interpreter is given as AUTOGRADER_SETUP_PYTHON)."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "setup.sh").write_text(SETUP)
    (source / "requirements.txt").write_text(requirements())
    assert subprocess.run(["bash", "-n", str(source / "setup.sh")]).returncode == 0
    commands = [line for line in SETUP.splitlines() if not line.lstrip().startswith("#")]
    assert not any("--extra-index-url" in line for line in commands)
    pins = dict(line.split("==") for line in requirements().split())
    cpu, pypi = tmp_path / "cpu", tmp_path / "pypi"

    def torch_files(cuda: str | None) -> dict[str, str]:
        return {"torch/__init__.py": "from . import version\n",
                "torch/version.py": f"cuda = {cuda!r}\n"}  # fmt: skip

    _wheel(cpu, "torch", pins["torch"] + "+cpu", torch_files(None))
    _wheel(pypi, "torch", pins["torch"], torch_files("12.8"))
    for name, version in pins.items():
        if name != "torch":
            _wheel(pypi, name, version, {f"fake_{name.replace('-', '_')}.py": ""})

    def setup(root: Path, torch_index: str) -> subprocess.CompletedProcess:
        env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
        # the machine's own pip configuration (extra indexes, find-links) is the test's too:
        # setup.sh must ignore it for torch; the rest comes from the fake PyPI
        env.update(PIP_FIND_LINKS=str(tmp_path / "no-wheels"))
        env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_SETUP_PYTHON=sys.executable,
                   AUTOGRADER_TORCH_INDEX=torch_index, PIP_INDEX_URL=pypi.as_uri() + "/",
                   PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")  # fmt: skip
        env.pop("VIRTUAL_ENV", None)
        return time_limits.run(["bash", str(source / "setup.sh")], cwd=source, env=env,
                              capture_output=True, text=True, cpu=1200)  # fmt: skip

    good = setup(tmp_path / "good", cpu.as_uri() + "/")
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-3000:]
    python = tmp_path / "good" / "venv" / "bin" / "python"
    version = subprocess.run([str(python), "-c", "import torch, importlib.metadata as m; "
                              "print(m.version('torch'), torch.version.cuda)"],
                             capture_output=True, text=True)  # fmt: skip
    assert version.stdout.split() == [pins["torch"] + "+cpu", "None"], version
    bad = setup(tmp_path / "bad", (tmp_path / "unreachable").as_uri() + "/")
    assert bad.returncode != 0, bad.stdout[-3000:] + bad.stderr[-3000:]
    assert "refusing to fall back on PyPI's CUDA build" in bad.stderr
    python = tmp_path / "bad" / "venv" / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import torch"]).returncode != 0  # no CUDA torch


# ---------------------------------------------------------------------------------------------
# Notes an honest student must not get
# ---------------------------------------------------------------------------------------------


def test_a_constant_built_from_a_dropped_statement_is_dropped_too():
    """A5's training cell: ``images`` comes from a call the grader does not run, so the
    subscripts after it must not run either (they gave full-marks work a NameError note)."""
    from autograder.course.notebook import CodeChunk, extract

    cell = (
        "images, labels = load_digits_tensors()\n"
        "train_images, train_labels = images[:10], labels[:10]\n"
        "SCALE = 2.0\n"
        "y = SCALE * 3\n"
    )
    extracted, notes = extract(CodeChunk("train_run", cell, "student"))
    assert extracted.keep == [2, 3], extracted.keep
    assert "line 2: train_images" in notes[0], notes
    provided, notes = extract(CodeChunk("train_run", cell, "release"))
    assert provided.keep == [2, 3] and "line 2: train_images" in provided.dropped[1]
    assert notes == [], "the release's own cell is not the student's business"


def test_matplotlib_imports_under_the_workers_refusals():
    """The worker's Python-level refusals leave ``import matplotlib`` working: its font cache
    registers an at-fork callback, which the worker accepts and drops (nothing forks there)."""
    code = (
        "import os\n"
        "from autograder.sandbox.audit import refuse_builtins\n"
        "refuse_builtins()\n"
        "import matplotlib.font_manager\n"
        "try:\n"
        "    os.fork()\n"
        "except PermissionError:\n"
        "    print('fork refused')\n"
    )
    out = time_limits.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cpu=240, env=_env(MPLBACKEND="Agg"))  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "fork refused", out.stdout + out.stderr


def test_the_lms_extractor_keeps_upload_times_of_zipped_and_loose_files(tmp_path):
    from autograder.integrations.lms import CourseExtractor, LmsCollector

    archive, extracted = tmp_path / "archive", tmp_path / "extracted"
    _lms_zip(archive / "canvas.zip", {
        f"doejane_LATE_23456_67891_{NB}": ((2026, 11, 20, 15, 30, 0), "{}"),
        "nested/smithjohn_12345_67890_helpers.py": ((2026, 11, 19, 8, 0, 0), ""),
    })  # fmt: skip
    loose = archive / f"leeann_4242_1_{NB}"
    loose.write_text("{}")
    os.utime(loose, (0, DUE.timestamp()))
    extracted.mkdir()
    CourseExtractor(zip_timezone="Europe/Berlin").extract(str(archive), str(extracted))
    got = {
        p.name: datetime.fromtimestamp(p.stat().st_mtime, tz=UTC)
        for p in extracted.rglob("*")
        if p.is_file()
    }
    assert got == {
        f"doejane_LATE_23456_67891_{NB}": datetime(2026, 11, 20, 14, 30, tzinfo=UTC),  # CET
        "smithjohn_12345_67890_helpers.py": datetime(2026, 11, 19, 7, 0, tzinfo=UTC),
        f"leeann_4242_1_{NB}": DUE,
    }, got
    collector = LmsCollector(named_regexp=CANVAS)
    found = collector.collect(str(extracted / "canvas" / f"doejane_LATE_23456_67891_{NB}"))
    assert found["student_id"] == "23456" and found["late"] == "LATE_"
    assert found["timestamp"] == "2026-11-20 14:30:00 UTC"


# ---------------------------------------------------------------------------------------------
# Intake from an LMS: one hostile upload costs its student only (issue 28, section 5)
# ---------------------------------------------------------------------------------------------

CANVAS = r"^(?P<name>[^/_]+)_(?P<late>LATE_)?(?P<student_id>\d+)_\d+_(?P<file_id>[^/]+)$"
WHEN = (2026, 11, 20, 11, 0, 0)


def _zip_bytes(entries: dict[str, bytes]) -> bytes:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=WHEN), data)
    return buffer.getvalue()


def _hostile_download(archive: Path, honest: str) -> None:
    """A Canvas download: two honest students and one hostile upload per class of attack."""
    nested = _zip_bytes({"../../../../escaped.ipynb": b"{}", f"doejane_23456_1_{NB}": b"{}"})
    bomb = zipfile.ZipInfo(f"bomber_30004_4_{NB}", date_time=WHEN)
    bomb.compress_type = zipfile.ZIP_DEFLATED
    archive.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive / "canvas.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in {
            f"smithjohn_12345_67890_{NB}": honest,
            f"doejane_23456_67891_{NB}": honest,
            "nester_30001_1_work.zip": nested,  # ../ members, and another student's Canvas name
            "faker_30002_2_.zip": b"not a zip at all",
            f"longname_30003_3_{'x' * 300}.ipynb": honest,
            f"<img src=x onerror=alert(1)>_30005_5_{NB}": honest,  # a name formgrader would show
            "../../../../../escaped_top.ipynb": b"{}",
        }.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=WHEN), data)
        with zf.open(bomb, "w") as f:  # 24 MiB of zeros: 24 KB in the zip
            for _ in range(24):
                f.write(bytes(1024**2))
    (archive / "broken.zip").write_bytes(b"PK\x03\x04 truncated")  # the instructor's bad file


def test_hostile_lms_uploads_cost_their_students_only(tmp_path):
    """nbgrader zip_collect with the course's configuration: a nested zip with ``../`` members and
    another student's Canvas name, a ``.zip`` that is not one, a 300-character name and a zip
    bomb (caps lowered on the command line) each become a note for that student; the class is
    collected; nothing is written outside ``extracted/``; nobody is filed under another id."""
    course = corpus.make_course(tmp_path / "course")
    (course / "home").mkdir()
    honest = _notebook(course)
    downloaded = course / "grading" / "downloaded" / A
    _hostile_download(downloaded / "archive", honest)
    out = _nbgrader(
        course, "zip_collect", A, "--CourseExtractor.max_member_bytes=8388608", COURSE_LMS="canvas"
    )
    submitted = course / "grading" / "submitted"
    students = sorted(p.name for p in submitted.iterdir())
    assert students == ["12345", "23456", "30003", "30005"], (students, out.stderr)
    for student in ("12345", "23456"):
        assert sorted(p.name for p in (submitted / student / A).iterdir()) == [
            NB,
            "timestamp.txt",
        ]
        assert (submitted / student / A / NB).read_text() == honest  # not the nested copy
    long_one = [p.name for p in (submitted / "30003" / A).iterdir() if p.suffix == ".ipynb"]
    assert len(long_one) == 1 and len(long_one[0]) < 160, long_one
    assert not list(course.rglob("escaped*")), "a member escaped extracted/"
    sizes = sum(p.stat().st_size for p in (course / "grading").rglob("*") if p.is_file())
    assert sizes < 8 * 1024**2, sizes
    notes = json.loads((downloaded / "lms.json").read_text())
    said = {student: " ".join(entry.get("notes", [])) for student, entry in notes.items()}
    assert "not unpacked" in said["30001"] and "work.zip" in said["30001"], said
    assert "not unpacked" in said["30002"], said
    assert "shortened" in said["30003"], said
    assert "8 MB" in said["30004"] and "limit" in said["30004"], said
    assert not said.get("12345") and not said.get("23456"), said
    assert notes["12345"]["name"] == "smithjohn" and "name" not in notes["30005"], notes
    log = out.stdout + out.stderr
    assert "broken.zip" in log and "not a zip" in log, log
    assert "escaped_top.ipynb" in log, log


def test_the_course_extractor_caps_members_students_and_the_class(tmp_path):
    from autograder.integrations.lms import CourseExtractor

    archive, extracted = tmp_path / "archive", tmp_path / "extracted"
    archive.mkdir()
    with zipfile.ZipFile(archive / "canvas.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for name in ("a_1_1_x.py", "a_1_2_y.py", "a_1_3_z.py", "b_2_1_x.py", "c_3_1_x.py",
                     "d_4_1_x.py"):  # fmt: skip
            zf.writestr(zipfile.ZipInfo(name, date_time=WHEN), b"#" * 600)
    extracted.mkdir()
    extractor = CourseExtractor(
        max_member_bytes=1000, max_student_bytes=1500, max_total_bytes=2800,
        named_regexp=CANVAS,
    )  # fmt: skip
    extractor.extract(str(archive), str(extracted))
    kept = sorted(p.name for p in extracted.rglob("*.py"))
    assert kept == ["a_1_1_x.py", "a_1_2_y.py", "b_2_1_x.py", "c_3_1_x.py"], kept
    notes = extractor.student_notes()
    assert "per-student limit" in " ".join(notes["1"]), notes
    assert "class" in " ".join(notes["4"]) and "2" not in notes, notes


@pytest.mark.parametrize(
    ("lms", "upload", "student"),
    [
        ("canvas", f"smithjohn_12345_67890_{NB}", "12345"),
        ("canvas", f"smithjohn_12345_67890_work/doejane_23456_67891_{NB}", None),  # inside one
        ("moodle", f"Ann Lee_4242_assignsubmission_file_/{NB}", "4242"),
        ("moodle", f"Ann Lee_4242_assignsubmission_file_/Bob Roe_5555_assignsubmission_file_/{NB}",
         None),
        ("canvas", f"Ann Lee_4242_assignsubmission_file_/doejane_23456_67891_{NB}", None),
        ("blackboard", f"A2_jsmith_attempt_2026-11-24-10-15-30_{NB}", "jsmith"),
        ("blackboard", f"A2_.._attempt_2026-11-24-10-15-30_{NB}", None),  # not a folder name
        ("blackboard", "A2_jsmith_attempt_2026-11-24-10-15-30_..", None),
    ],
)  # fmt: skip
def test_lms_patterns_are_anchored_to_the_upload_name(monkeypatch, lms, upload, student):
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.integrations.lms import LmsCollector

    monkeypatch.setenv("COURSE_LMS", lms)
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    found = LmsCollector(config=cfg).match(upload)
    assert (found["student_id"] if found else None) == student, found
