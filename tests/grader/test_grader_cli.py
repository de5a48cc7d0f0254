"""The grader's commands on the fixture assignment: release, check, selfgrade, and the
fallback sandbox (no namespaces) on the cheats that matter most for it."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "grader"))
import corpus  # noqa: E402
from test_grader_corpus import CANARY, Listener  # noqa: E402

from autograder.course.layout import GradeCell  # noqa: E402
from autograder.tools.selfcheck import consistency, expected_points  # noqa: E402

pytestmark = pytest.mark.slow
A, NB = corpus.ASSIGNMENT, corpus.NOTEBOOK


@pytest.fixture(scope="session")  # session: xdist may interleave modules on a worker
def course(tmp_path_factory):
    return corpus.make_course(
        tmp_path_factory.mktemp("course"), cache=corpus.shared_dir(tmp_path_factory, "release")
    )


def test_release_is_deterministic_and_leaks_nothing(course):
    released = course / "assignments" / A / NB
    first = released.read_bytes()
    corpus.cli("--course-dir", str(course), "release", A)
    assert released.read_bytes() == first, "regenerating the release changed its bytes"
    text = first.decode()
    assert "raise NotImplementedError()" in text
    for leak in ("### BEGIN SOLUTION", "masked_fill(~mask, 0.0)", CANARY, "def test_"):
        assert leak not in text
    nb = nbformat.reads(text, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_check_passes_for_the_fixture(course):
    out = corpus.cli("--course-dir", str(course), "check", A, "--jobs", "1", "--quiet")
    assert "check fx_attention: passed" in out.stdout
    assert "reference (rerun)" in out.stdout and "sandbox:" in out.stdout


def test_consistency_finds_points_that_do_not_add_up():
    cells = {
        (NB, "check_a"): GradeCell("check_a", NB, 4.0, True),
        (NB, "manual"): GradeCell("manual", NB, 2.0, False),
    }
    tests = [
        {"nodeid": "t.py::a", "cell": "check_a", "points": 3.0, "notebook": None},
        {"nodeid": "t.py::b", "cell": "nowhere", "points": 1.0, "notebook": None},
        {"nodeid": "t.py::c", "cell": "manual", "points": 1.0, "notebook": None},
    ]
    problems = "\n".join(
        consistency(SimpleNamespace(release={NB: []}, tests=tests, grade_cells=cells))
    )
    assert "worth 4 points but its hidden tests add up to 3" in problems
    assert "'nowhere' does not exist" in problems
    assert "'manual' is manually graded" in problems
    assert expected_points(50, 8) == 4 and expected_points({"points": 3}, 8) == 3


def test_selfgrade_compares_samples_with_expected_scores(course):
    samples = course / "autograder" / "samples" / A
    samples.mkdir(parents=True)
    release = nbformat.read(course / "assignments" / A / NB, as_version=4)
    ref = corpus.reference_sources()
    nbformat.write(
        corpus._with_solutions(release, attention=ref["attention"]), samples / "partial.ipynb"
    )
    cheat = corpus._attention_with(
        "import torch.nn.functional as F\nreturn F.scaled_dot_product_attention(q, k, v)"
    )
    nbformat.write(corpus._with_solutions(release, attention=cheat), samples / "cheat.ipynb")
    (samples / "expected.json").write_text(json.dumps({"partial": 50, "cheat": {"points": 3}}))
    out = corpus.cli(
        "--course-dir", str(course), "selfgrade", A, "--jobs", "1", "--quiet", check=False
    )
    assert out.returncode == 1, out.stdout + out.stderr  # the cheat was expected to earn 3
    rows = {
        r["submission"]: r for r in json.loads((course / "grading" / "selfgrade.json").read_text())
    }
    assert set(rows) == {"reference", "blank", "partial", "cheat"}
    assert rows["reference"]["ok"] and rows["reference"]["score"] == 8
    assert rows["blank"]["ok"] and rows["blank"]["score"] == 0
    assert rows["partial"]["ok"] and rows["partial"]["expected"] == 4
    assert not rows["cheat"]["ok"] and rows["cheat"]["score"] == 0
    for row in rows.values():
        assert {"assignment", "submission", "score", "max_score", "expected", "ok"} <= set(row)
    assert "MISMATCH" in out.stdout


FALLBACK = ("reference", "network", "read_hidden", "write_outside", "fork_bomb", "os_exit",
            "sdpa_getattr", "via_multihead_attention", "cheat_grader_api", "thread_sdpa",
            "grader_import_string", "chdir_relative", "sqlite_fifo_fork_exec",
            "from_file_suite")  # fmt: skip


def test_fallback_sandbox_blocks_the_same_cheats(course, tmp_path):
    hidden = course / "autograder" / "suites" / A / "test_fx_attention.py"
    before = hidden.read_bytes()
    listener = Listener()
    everything = tmp_path / "all"
    expected = corpus.build_corpus(
        course / "assignments" / A / NB, everything, hidden_file=hidden, port=listener.port,
        course_root=course,
    )  # fmt: skip
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    for name in FALLBACK:
        shutil.copy(everything / f"{name}.ipynb", chosen / f"{name}.ipynb")
    out_dir = tmp_path / "out"
    run = corpus.cli(
        "--course-dir", str(course), "grade", A, "--submissions", str(chosen), "--out",
        str(out_dir), "--sandbox", "fallback", "--timeout", "2", "--no-gradebook", "--quiet",
        "--jobs", "1",
    )  # fmt: skip
    listener.close()
    assert "socket creation blocked" in run.stdout
    rows = {r["student"]: r for r in json.loads((out_dir / "report.json").read_text())["rows"]}
    for name in FALLBACK:
        assert rows[name]["score"] == expected[name]["points"], (name, rows[name]["tests"])
    assert listener.connections == []
    assert hidden.read_bytes() == before
    assert not (course / "PWNED.txt").exists()


def test_a_grader_file_changed_while_grading_produces_no_results(course, tmp_path):
    """Issue 28, section 3: a shared mapping from a worker running as root rewrote one of the
    grader's modules (imported after grading) and a blank notebook scored full marks. Whatever
    the route, the grader now compares its own files (package and hidden suite) with their
    digests taken before student code ran, before it writes anything: here a trusted test
    plays the write, so the check itself is what is tested."""
    copy = tmp_path / "course"
    shutil.copytree(course, copy, symlinks=True)
    suite = copy / "autograder" / "suites" / A
    planted = suite / "planted_helper.py"
    hidden = suite / "test_fx_attention.py"
    first = "    q, k, v = random_qkv(rng)\n    y = student.attention(q, k, v)\n"
    text = hidden.read_text()
    assert first in text
    write = f"    __import__('pathlib').Path({str(planted)!r}).write_text('x = 1')\n"
    hidden.write_text(text.replace(first, write + first, 1))
    built = tmp_path / "all"
    corpus.build_corpus(copy / "assignments" / A / NB, built, hidden_file=hidden, port=9,
                        course_root=copy)  # fmt: skip
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(built / "reference.ipynb", subs / "reference.ipynb")
    out = tmp_path / "out"
    run = corpus.cli(
        "--course-dir", str(copy), "grade", A, "--submissions", str(subs), "--out", str(out),
        "--timeout", "5", "--no-gradebook", "--quiet", "--jobs", "1", check=False,
    )  # fmt: skip
    assert run.returncode == 2, (run.stdout[-2000:], run.stderr[-2000:])
    assert "the grader's own files changed" in run.stderr and "planted_helper.py" in run.stderr
    assert "no results are written" in run.stderr
    assert not (out / "feedback").exists()
    assert json.loads((out / "report.json").read_text())["rows"] == []


def test_the_gradescope_zip_has_its_own_salt_and_each_attempt_draws_new_seeds(
    course, tmp_path, monkeypatch
):
    """Issue 28, section 3: the zip carried no salt, so every Gradescope seed was computable
    from public data, and a resubmission drew the same inputs. A fake /autograder layout; the
    grade command is stubbed (tests/course/test_instructor_workflow.py runs the real one)."""
    from autograder.course.layout import SetupError
    from autograder.host.plugin import derive_seed
    from autograder.integrations import gradescope

    zips = [tmp_path / "first.zip", tmp_path / "second.zip"]
    for archive in zips:
        corpus.cli("--course-dir", str(course), "gradescope", A, "--out", str(archive))
    salts = [json.loads(zipfile.ZipFile(z).read("gradescope.json"))["salt"] for z in zips]
    assert salts[0] != salts[1] and all(re.fullmatch("[0-9a-f]{64}", s) for s in salts)
    assert not any(salts[0] in p.read_text(errors="ignore") for p in course.rglob("*.json"))

    monkeypatch.setenv("AUTOGRADER_SALT", "restored after the test")
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zips[0]) as zf:
        zf.extractall(root / "source")
    (root / "submission").mkdir()
    used = []

    def grade(argv: list[str]) -> int:  # what the command line's entry point would get
        used.append(os.environ["AUTOGRADER_SALT"])
        Path(argv[argv.index("--gradescope") + 1]).write_text('{"score": 0, "tests": []}')
        return 0

    for previous in ([], [{"score": 0}], [{"score": 0}, {"score": 1}], None):
        meta = {"users": [{"id": 4711}]}
        if previous is not None:
            meta["previous_submissions"] = previous
        (root / "submission_metadata.json").write_text(json.dumps(meta))
        assert gradescope.run(root, grade=grade) == 0
    assert len(set(used[:3])) == 3 and salts[0] not in used[:3]  # one salt per attempt
    assert used[3] == salts[0]  # no attempt listed: the zip's own salt, still secret
    seeds = {derive_seed(salt, A, "gs-4711", "t.py::test") for salt in used}
    assert len(seeds) == 4 and derive_seed("", A, "gs-4711", "t.py::test") not in seeds

    config = json.loads((root / "source" / "gradescope.json").read_text())
    del config["salt"]  # a zip without its salt (edited by hand): refused, and said why
    (root / "source" / "gradescope.json").write_text(json.dumps(config))
    with pytest.raises(SetupError, match="no valid salt"):
        gradescope.run(root, grade=grade)


def test_wall_limit_stops_a_submission_and_says_so(course, tmp_path):
    release = nbformat.read(course / "assignments" / A / NB, as_version=4)
    ref = corpus.reference_sources()
    loop = corpus._attention_with("while True:\n    pass")
    folder = tmp_path / "subs"
    folder.mkdir()
    nbformat.write(
        corpus._with_solutions(release, attention=loop, multihead=ref["multihead"]),
        folder / "spinner.ipynb",
    )
    out_dir = tmp_path / "out"
    corpus.cli(
        "--course-dir", str(course), "grade", A, "--submissions", str(folder), "--out",
        str(out_dir), "--wall", "5", "--timeout", "2", "--jobs", "1", "--no-gradebook", "--quiet",
    )  # fmt: skip
    row = json.loads((out_dir / "report.json").read_text())["rows"][0]
    assert row["score"] == 0  # MultiHead is right, but its tests come after the time ran out
    messages = [t["message"] for t in row["tests"].values()]
    assert any("total time limit" in m for m in messages)
    assert "time limit" in row["reason"]  # a timed-out row says so
    assert row["seconds"] < 60


def test_written_reads_through_the_bounded_reader_and_renders_links_inert(course, tmp_path):
    """Issue 28: a link to a device or a FIFO is refused (no hang, no memory run-out), and a
    written answer's ``javascript:`` link, however encoded, is not live."""
    import os

    from autograder.course.layout import Course
    from autograder.tools.written import write_all

    release = course / "assignments" / corpus.ASSIGNMENT / corpus.NOTEBOOK
    submitted = tmp_path / "submitted"
    for name, target in (("zero", "/dev/zero"), ("fifo", None), ("links", "")):
        folder = submitted / name / corpus.ASSIGNMENT
        folder.mkdir(parents=True)
        if target:
            (folder / corpus.NOTEBOOK).symlink_to(target)
        elif target is None:
            os.mkfifo(folder / corpus.NOTEBOOK)
        else:
            nb = nbformat.read(release, as_version=4)
            for cell in nb.cells:
                if cell.metadata.get("nbgrader", {}).get("grade_id") == "explain_scaling":
                    cell.source = "[a](javascript&#58;alert(1)) [b](JaVaScRiPt:alert(2))"
            nbformat.write(nb, folder / corpus.NOTEBOOK)
    out = tmp_path / "written"
    assert write_all(Course(course), corpus.ASSIGNMENT, submitted, out) == 3
    page = (out / "links.html").read_text().lower()
    assert "javascript" not in page.replace("javascript&amp;#58;", "")
    assert 'href="javascript' not in page
    for name in ("zero", "fifo"):
        assert "no answer found" in (out / f"{name}.html").read_text()
