"""The release policy (course.yml): which assignments students get, and no answer key with them.

- the schedule: a wrong state, an unknown assignment or key is an error naming the line; `also`
  (which named course_lib objects to hold back) is retired, and says so;
- every assignment's answer key lives beside its hidden suite (reader-first): one without is an
  error of the schedule, since nothing else would keep its answers out of the book;
- the scan: each key's graded statements are found in a file, a page, a wheel or a zip archive
  (the source notebooks hold them, the releases do not) until the assignment's solutions are
  released; a statement that course_lib also has is not a secret;
- the student bundle: no statement of a key, no hidden-suite canary, no instructor-only file; its
  wheel (the public course_lib; tests/book/test_launch_notebooks.py compares the site's wheel with
  the repository byte for byte), installed in a fresh virtual environment, fails every visible
  check of the blank releases with a message and passes every check with the reference answers
  pasted in (the check cells of each notebook, run in order; training runs are not:
  `check_train_vit` needs a trained model).
"""

from __future__ import annotations

import html
import json
import re
import textwrap
import zipfile
from pathlib import Path

import fresh_env
import pytest
import time_limits
from fresh_env import run_notebook

from autograder.course import embargo
from autograder.course.embargo import ScheduleError, plan, read_schedule

ROOT = Path(__file__).resolve().parents[2]
KNOWN = embargo.known_assignments(ROOT)
ALL_RELEASED = "assignments:\n" + "".join(f"  {a}: released\n" for a in KNOWN)
# two graded units of each assignment, whose bodies in its key are secrets
UNITS = {
    "a1_rnn_attention": ("luong_align", "coverage_loss"),
    "a2_self_attention": ("apply_rotary", "GroupedQueryAttention.forward"),
    "a3_transformer": ("RMSNorm.forward", "beam_search"),
    "a4_bert_gpt": ("wordpiece_encode", "GroupedCausalSelfAttention.forward"),
    "a5_vision_transformers": ("shifted_window_mask_padded", "XCAttention.forward"),
}


def schedule(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "course.yml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def released(tmp_path: Path, name: str, state: str) -> embargo.Plan:
    """The repository's plan with ``name`` set to ``state``."""
    text = ALL_RELEASED.replace(f"  {name}: released\n", f"  {name}: {state}\n")
    return plan(ROOT, schedule(tmp_path, text))


@pytest.fixture(scope="module")
def repo_plan():
    return plan(ROOT)


def test_the_repository_schedule_releases_every_assignment_and_no_solution():
    """Every assignment is listed (``new-assignment`` adds a new one as unreleased); the five
    assignments of the term are released and no solution is."""
    found = read_schedule(ROOT / "course.yml", KNOWN)
    assert sorted(a.name for a in found) == KNOWN
    states = {a.name: a.state for a in found}
    assert "solutions-released" not in states.values()
    term = [n for n in KNOWN if n.split("_")[0] in ("a1", "a2", "a3", "a4", "a5")]
    assert len(term) == 5 and {states[n] for n in term} == {"released"}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (ALL_RELEASED.replace("a3_transformer: released", "a3_transformer: relased"), 4,
         "unknown state 'relased'"),
        (ALL_RELEASED + "  a9_nothing: released\n", 7, "unknown assignment 'a9_nothing'"),
        (ALL_RELEASED + "  a3_transformer: unreleased\n", 7, "listed twice"),
        ("assignments:\n  a3_transformer:\n    stat: released\n", 3, "unknown key 'stat'"),
        ("assignments:\n  a3_transformer:\n    state: released\n", 2, ""),  # the long form
        ("assignments:\n  a4_bert_gpt:\n    state: released\n    also:\n"
         "      - course_lib.masking.mask_tokens\n", 4, "'also' is retired"),
        ("assigments:\n  a3_transformer: released\n", 1, "unknown key 'assigments'"),
    ],
)  # fmt: skip
def test_a_mistake_in_the_schedule_names_its_line(tmp_path, text, line, words):
    path = schedule(tmp_path, text)
    if not words:
        assert [(a.name, a.state, a.line) for a in plan(ROOT, path).assignments] == [
            ("a3_transformer", "released", line)
        ]
        return
    with pytest.raises(ScheduleError) as error:
        plan(ROOT, path)
    assert f"{path}:{line}:" in str(error.value) and words in str(error.value), str(error.value)
    if "also" in words:  # and why
        assert "beside its hidden suite" in str(error.value)


def test_every_answer_key_lives_beside_its_hidden_suite(repo_plan):
    assert sorted(repo_plan.keys) == KNOWN
    for name, key in repo_plan.keys.items():
        suite = ROOT / "autograder" / "suites" / name
        assert key == suite / f"{name.split('_')[0]}_key.py", key
        assert (suite / f"test_{name}.py").is_file(), name


def test_an_assignment_without_a_key_beside_its_suite_is_an_error(tmp_path):
    """Nothing but the key's place keeps graded answers out of the book and the bundle (which
    hold the whole course_lib): an assignment whose suite has no key is refused."""
    course = tmp_path / "course"
    (course / "solutions" / "a7_example").mkdir(parents=True)
    suite = course / "autograder" / "suites" / "a7_example"
    suite.mkdir(parents=True)
    (suite / "test_a7_example.py").write_text("def test_nothing():\n    pass\n")
    path = schedule(course, "assignments:\n  a7_example: unreleased\n")
    with pytest.raises(ScheduleError) as error:
        plan(course, path)
    message = str(error.value)
    assert f"{path}:2:" in message and "a7_example has no answer key" in message, message
    assert "graded answers must live beside the hidden suite" in message, message
    assert str(Path("autograder", "suites", "a7_example", "a7_key.py")) in message, message
    (suite / "a7_key.py").write_text("def f(x):\n    return x\n")
    assert plan(course, path).keys["a7_example"] == (suite / "a7_key.py").resolve()


@pytest.mark.parametrize("name", sorted(UNITS))
def test_a_key_is_scanned_for_until_its_solutions_are_released(tmp_path, repo_plan, name):
    table = embargo.secrets(repo_plan)
    for unit in UNITS[name]:
        assert table[f"{name} key: {unit}"], unit
    found = f"{name} key: {UNITS[name][0]}"
    solution = ROOT / "solutions" / name / f"{name}.ipynb"
    release = ROOT / "assignments" / name / f"{name}.ipynb"
    assert any(found in h for h in embargo.scan(repo_plan, [solution]))
    assert not [h for h in embargo.scan(repo_plan, [release]) if f"{name} key" in h]
    after = released(tmp_path, name, "solutions-released")
    assert not [d for d in embargo.secrets(after) if d.startswith(f"{name} key")]
    assert not [h for h in embargo.scan(after, [solution]) if f"{name} key" in h]
    # an assignment held back: left out of the bundle, its key still scanned for
    held = released(tmp_path, name, "unreleased")
    assert name not in [a.name for a in held.released()]
    assert embargo.secrets(held)[found]


def test_a_statement_course_lib_also_has_is_no_secret(repo_plan):
    source = repo_plan.keys["a2_self_attention"].read_text(encoding="utf-8")
    body = embargo._body_statements(source, "GroupedQueryAttention.forward")
    shared = "B , T , C = x . shape"  # the book's attention layers unpack shapes the same way
    assert shared in body
    secret = embargo.secrets(repo_plan)["a2_self_attention key: GroupedQueryAttention.forward"]
    assert shared not in secret and set(secret) < set(body)


def test_the_scan_finds_a_planted_statement_in_a_file_a_page_a_wheel_and_a_zip(tmp_path, repo_plan):
    unit = "a3_transformer key: RMSNorm.forward"
    statement = embargo.secrets(repo_plan)[unit][0]
    code = statement.replace(" . ", ".").replace(" ( ", "(").replace(" )", ")")
    assert embargo.tokens(code) == statement.split()
    page = "<pre>" + " ".join(f"<span>{html.escape(t)}</span>" for t in code.split()) + "</pre>"
    planted = {"notes.py": code, "page.html": page, "notes.md": f"```\n{code}\n```"}
    for name, text in planted.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    for archive in ("course_lib-0.1.0-py3-none-any.whl", "bundle.zip"):
        with zipfile.ZipFile(tmp_path / archive, "w") as z:
            z.writestr("course_lib/layers.py", f"def f(x):\n    {code}\n")
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "notes.py").write_text("rms = x.norm()\n", encoding="utf-8")
    hits = embargo.scan(repo_plan, [tmp_path])
    found = {Path(h.split(":", 1)[0]).name for h in hits if unit in h}
    assert found == {*planted, "course_lib-0.1.0-py3-none-any.whl", "bundle.zip"}, hits
    assert embargo.scan(repo_plan, [clean]) == []


# ------------------------------------------------------------------------------------------
# The student bundle
# ------------------------------------------------------------------------------------------


def canaries() -> set[str]:
    found = set()
    for path in (ROOT / "autograder" / "suites").rglob("*.py"):
        found |= set(re.findall(r"CANARY-[A-Z0-9-]+", path.read_text(encoding="utf-8")))
    return found


def bundle_texts(folder: Path):
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        yield str(path.relative_to(folder)), path.read_bytes()
        if path.suffix in (".whl", ".zip"):
            with zipfile.ZipFile(path) as archive:
                for name in archive.namelist():
                    yield f"{path.name}!{name}", archive.read(name)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, repo_plan):
    out = tmp_path_factory.mktemp("bundle") / "student"
    archive = embargo.build_bundle(repo_plan, out)
    return out, archive


@pytest.mark.slow
@pytest.mark.xdist_group("embargo")
def test_the_bundle_holds_no_answer_key_and_nothing_instructor_only(bundle, repo_plan):
    out, archive = bundle
    assert archive.exists() and (out / "README.md").exists()
    assert sorted(p.name for p in (out / "assignments").iterdir()) == KNOWN
    assert embargo.scan(repo_plan, [out, archive]) == []
    secret_canaries = canaries()
    assert len(secret_canaries) >= 3, "the hidden suites plant canaries"
    for name, data in bundle_texts(out):
        parts = re.split(r"[/!]", name)
        assert not set(parts) & {"solutions", "autograder", "grading", ".git", "samples"}, name
        text = data.decode("utf-8", "replace")
        assert not [c for c in secret_canaries if c in text], name
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, name
    wheel = next(out.glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for name in KNOWN:  # the visible checks diagnose from the recorded answers
        assert f"course_lib/checks/recorded/{name}.pt" in names, name


STUDENT_ENV = fresh_env.ENV


@pytest.fixture(scope="module")
def student_python(bundle, tmp_path_factory):
    """A fresh virtual environment with the bundle's wheel; torch & co. from the course's venv."""
    out, _ = bundle
    venv = tmp_path_factory.mktemp("venv") / "student"
    return fresh_env.python_with_wheel(next(out.glob("*.whl")), venv)


def run_checks(python: Path, notebook: Path) -> list[dict]:
    run = time_limits.run(
        [str(python), str(ROOT / "tests" / "course" / "student_checks.py"), str(notebook)],
        capture_output=True, text=True, cpu=1200, cwd=notebook.parent,
        env={**STUDENT_ENV, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


TRAINED = {"check_train_vit"}  # needs the notebook's training run


@pytest.mark.slow
@pytest.mark.xdist_group("embargo")
@pytest.mark.parametrize("name", KNOWN)
def test_the_bundle_wheel_runs_the_checks_blank_and_with_the_reference(
    student_python, bundle, name
):
    out, _ = bundle
    blank = run_checks(student_python, out / "assignments" / name / f"{name}.ipynb")
    reference = run_checks(student_python, ROOT / "solutions" / name / f"{name}.ipynb")
    assert len(blank) >= 5 and [r["cell"] for r in blank] == [r["cell"] for r in reference]
    wrong = [r for r in blank if r["cell"] not in TRAINED and r["status"] != "failed"]
    assert not wrong, f"blank answers should fail every check with a message: {wrong}"
    assert all(len(r["message"]) >= 20 for r in blank if r["status"] == "failed")
    wrong = [r for r in reference if r["cell"] not in TRAINED and r["status"] != "passed"]
    assert not wrong, f"the reference answers should pass every check: {wrong}"


@pytest.mark.slow
@pytest.mark.xdist_group("embargo")
def test_a3_runs_top_to_bottom_on_the_bundle_wheel(student_python, bundle, tmp_path, monkeypatch):
    """A3 (its checks answer from recorded data) in a Jupyter kernel, top to bottom, training
    included: the reference answers raise nothing; blank answers fail each check with its
    message, and the other errors are the student's own stubs (or what they leave undefined),
    never the library."""
    out, _ = bundle
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    name = "a3_transformer"
    assert run_notebook(student_python, tmp_path, ROOT / "solutions" / name / f"{name}.ipynb") == []
    errors = run_notebook(student_python, tmp_path, out / "assignments" / name / f"{name}.ipynb")
    checks = [e for e in errors if e[0].startswith("check_")]
    assert len(checks) == 5 and all(e[1] == "CheckFailed" for e in checks), checks
    others = [e for e in errors if not e[0].startswith("check_")]
    assert all(e[1] in ("NotImplementedError", "NameError") for e in others), others
