"""Every assignment: its text source, source notebook, release, hidden suite and samples agree.

For each ``solutions/<name>/<name>.md`` (the one text source of an assignment):

- the committed source notebook is what the text source gives (cell text, ids and metadata), and a
  fresh ``python -m autograder release`` in an empty course (only the text sources, the sample
  patches and the configuration) regenerates the source notebook, the samples and the release
  byte for byte;
- a release holds no solution code and no hidden test (the suite's canary string, its test
  names, its module names), and no text source;
- the points agree: the "What is graded" table states the points of the grade cells, and
  ``python -m autograder check`` (reference 100 %, blank 0, rerun identical) verifies that the
  hidden tests of each grade cell add up to its points;
- ``python -m autograder selfgrade``: every sample gets the score in its ``expected.json``;
- every visible check cell passes on the reference solution and fails with a message on the
  blank release (A1-A3's checks were never run by the test suite before);
- a sample patch fails loudly when its cell or its text is gone.

Grading starts sandboxed worker processes: the slow tests run in one xdist group.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import time_limits

from autograder.course.layout import Course
from autograder.tools.authoring import (
    AuthoringError,
    apply_patch,
    kind_of,
    load_samples,
    notebook_text,
    submission,
    to_notebook,
    to_text,
    unmark,
)
from autograder.tools.mutants import definitions, load_catalogue

ROOT = Path(__file__).resolve().parents[2]
COURSE = Course(ROOT)
ASSIGNMENTS = sorted(
    p.name for p in (ROOT / "solutions").glob("a*_*") if (p / f"{p.name}.md").exists()
)
GRADER = [sys.executable, "-m", "autograder", "--course-dir", str(ROOT)]
# One runner for a small check (three submissions: a second runner costs more to start than it
# saves); two for the bigger suites and for the self-grade.
JOBS = {"a1_rnn_attention": 1, "a2_self_attention": 1, "a3_transformer": 1}
SELFGRADE_LIMITS = ["--jobs", "2", "--quiet"]
EVERY = 8  # make test: every mistake under one name, every eighth under three (make mutants: all)
CANARY = re.compile(r"CANARY-HIDDEN-[A-Za-z0-9-]+")

# No xdist group: the grading runs here are bounded by CPU time (``time_limits``), so the two
# workers share them (one group made this module the critical path of ``make test``).


def run(args: list[str], cwd: Path = ROOT, cpu: float = 1800) -> subprocess.CompletedProcess:
    """A command of the course, bounded by CPU time, not wall time (see ``time_limits``)."""
    return time_limits.run(args, cwd=cwd, cpu=cpu)


def source_notebook(name: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)


def release_notebook(name: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "assignments" / name / f"{name}.ipynb", as_version=4)


def solution_lines(name: str) -> list[str]:
    """Distinctive lines from inside the source's BEGIN/END SOLUTION regions."""
    lines, inside = [], False
    for cell in source_notebook(name).cells:
        for line in cell.source.split("\n"):
            stripped = line.strip()
            if stripped == "### BEGIN SOLUTION":
                inside = True
            elif stripped == "### END SOLUTION":
                inside = False
            elif inside and len(stripped) >= 25 and not stripped.startswith("#"):
                lines.append(stripped)
    return lines


def test_there_are_assignments():
    assert len(ASSIGNMENTS) >= 5, ASSIGNMENTS


# --------------------------------------------------------------------------------------------
# text source -> source notebook -> release
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_source_notebook_is_the_text_source(name):
    """No hand edit of the generated notebook: text, ids and metadata all come from the .md,
    and the .md is what the builder would write back (it round-trips)."""
    text = (ROOT / "solutions" / name / f"{name}.md").read_text(encoding="utf-8")
    nb = to_notebook(text, name)
    committed = (ROOT / "solutions" / name / f"{name}.ipynb").read_text(encoding="utf-8")
    assert nbformat.writes(nb) + "\n" == committed, (
        f"solutions/{name}/{name}.ipynb is not generated from {name}.md: edit the .md and run "
        f"`python -m autograder build {name}`"
    )
    assert to_text(nb) == text, f"{name}.md is not in the builder's canonical form"


@pytest.mark.slow
def test_release_regenerates_byte_for_byte(tmp_path):
    """From the text sources alone, ``release`` writes the committed source notebooks, samples
    and releases."""
    for path in ("nbgrader_config.py", "pyproject.toml"):
        shutil.copy(ROOT / path, tmp_path / path)
    (tmp_path / "course_lib").symlink_to(ROOT / "course_lib")  # first-party for ruff's isort
    for name in ASSIGNMENTS:
        (tmp_path / "solutions" / name).mkdir(parents=True)
        shutil.copy(ROOT / "solutions" / name / f"{name}.md", tmp_path / "solutions" / name)
        (tmp_path / "autograder" / "samples" / name).mkdir(parents=True)
        for part in ("samples.yml", "expected.json"):
            shutil.copy(ROOT / "autograder" / "samples" / name / part,
                        tmp_path / "autograder" / "samples" / name / part)  # fmt: skip
        if (ROOT / "autograder" / "samples" / name / "independent").is_dir():  # a source too
            shutil.copytree(ROOT / "autograder" / "samples" / name / "independent",
                            tmp_path / "autograder" / "samples" / name / "independent")  # fmt: skip
    out = run([*GRADER[:-1], str(tmp_path), "release", *ASSIGNMENTS], cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in ASSIGNMENTS:
        fresh_samples = tmp_path / "autograder" / "samples" / name
        generated = [
            Path("solutions") / name / f"{name}.ipynb",
            Path("assignments") / name / f"{name}.ipynb",
            *(p.relative_to(tmp_path) for p in fresh_samples.rglob("*") if p.is_file()),
        ]
        committed_samples = ROOT / "autograder" / "samples" / name
        committed = [p.relative_to(ROOT) for p in committed_samples.rglob("*") if p.is_file()]
        committed = [p for p in committed if not any(part.startswith(".") for part in p.parts)]
        assert sorted(committed) == sorted(p for p in generated if p.parts[0] == "autograder"), (
            f"autograder/samples/{name} holds files the builder does not write"
        )
        for rel in generated:
            assert (tmp_path / rel).read_bytes() == (ROOT / rel).read_bytes(), (
                f"{rel} differs from a fresh build: run `make release` and commit"
            )
        released = sorted(p.name for p in (tmp_path / "assignments" / name).iterdir())
        assert released == [f"{name}.ipynb"], f"the release of {name} holds {released}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_release_has_no_solution_and_no_hidden_test(name):
    release = ROOT / "assignments" / name
    files = sorted(p for p in release.rglob("*") if p.is_file())
    assert [p.name for p in files] == [f"{name}.ipynb"], f"unexpected files in {release}: {files}"
    text = files[0].read_text(encoding="utf-8")
    secrets = solution_lines(name)
    steps = [c for c in source_notebook(name).cells if kind_of(c) == "solution"]
    # not vacuous: a distinctive line per graded step at least (a scaffolded assignment has one)
    assert steps and len(secrets) >= len(steps), "the source should have solution code to leak"
    leaked = [line for line in secrets if line in text]
    assert not leaked, f"solution code in the release of {name}: {leaked[:3]}"
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    suite = sorted((ROOT / "autograder" / "suites" / name).glob("*.py"))
    canaries = {m for p in suite for m in CANARY.findall(p.read_text(encoding="utf-8"))}
    assert len(canaries) == 1, f"the hidden suite of {name} has canaries {canaries}"
    (canary,) = canaries
    for path in suite:  # in every module, so that any one of them leaking shows
        source = path.read_text(encoding="utf-8")
        assert canary in source, f"canary not planted in {path.name}"
        assert path.stem not in text, f"the hidden module {path.stem} is named in the release"
        for test in re.findall(r"^def (test_\w+)", source, flags=re.M):
            assert test not in text, f"hidden test {test} is named in the release of {name}"
    assert canary not in text, f"the hidden suite's canary appears in the release of {name}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_release_cells_match_the_source(name):
    """Every graded cell of the source is in the release, with its points; stubs replace
    solutions, so the release raises NotImplementedError where the student must write code."""
    source = {c.metadata["nbgrader"]["grade_id"]: c for c in source_notebook(name).cells
              if "nbgrader" in c.metadata}  # fmt: skip
    seen = {}
    for cell in release_notebook(name).cells:
        meta = cell.metadata.get("nbgrader", {})
        if "grade_id" in meta:
            seen[meta["grade_id"]] = cell
            assert meta.get("points") == source[meta["grade_id"]].metadata["nbgrader"].get("points")
        if meta.get("solution") and cell.cell_type == "code":
            assert "raise NotImplementedError()" in cell.source, meta["grade_id"]
    assert set(seen) == set(source)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_points_table_agrees_with_the_grade_cells(name):
    """The points are declared once, in the cells' options; the "What is graded" table that
    students read states the same totals (and, where it has one row per step, the same sums)."""
    cells = source_notebook(name).cells
    auto = sum(c.metadata["nbgrader"]["points"] for c in cells if kind_of(c) == "check")
    manual = sum(c.metadata["nbgrader"]["points"] for c in cells if kind_of(c) == "written")
    assert auto > 0 and manual > 0, name
    table = next(c.source for c in cells if "## What is graded" in c.source)
    total = f"**{auto + manual:g}** ({auto:g} automatic + {manual:g} by hand)"
    assert total in table, f"{name}: the table does not state {total}"
    rows = re.findall(r"^\| (.+?) \| (hidden tests|by hand) \| ([\d.]+) \|$", table, re.M)
    if rows:
        assert sum(float(p) for _, kind, p in rows if kind == "hidden tests") == auto, name
        assert sum(float(p) for _, kind, p in rows if kind == "by hand") == manual, name


# --------------------------------------------------------------------------------------------
# samples
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_samples_are_patches_of_existing_cells(name):
    """Each sample changes at least one solution cell, and each patch changes its cell."""
    nb = source_notebook(name)
    samples = load_samples(COURSE, name)
    expected = json.loads((COURSE.samples_dir(name) / "expected.json").read_text())
    assert set(samples) == set(expected) - {"reference", "blank"} == {"partial", "broken", "cheat"}
    solutions = {c.id: unmark(c.source) for c in nb.cells if kind_of(c) in ("solution", "written")}
    for sample, spec in samples.items():
        assert spec["cells"], f"{name}/{sample} patches nothing"
        for gid, patch in spec["cells"].items():
            assert gid in solutions, f"{name}/{sample}: {gid} is not a solution cell"
            patched = apply_patch(solutions[gid], patch, f"{name}/{sample}/{gid}")
            assert patched != solutions[gid], f"{name}/{sample}: the patch of {gid} changes nothing"


def test_a_stale_patch_fails_loudly():
    nb = source_notebook("a3_transformer")
    with pytest.raises(AuthoringError, match="no solution cells named"):
        submission(nb, {"no_such_cell": {"code": "x = 1"}}, "test")
    with pytest.raises(AuthoringError, match="no longer in the cell"):
        submission(nb, {"rms_norm": {"replace": [{"old": "not there", "new": ""}]}}, "test")
    with pytest.raises(AuthoringError, match="either code or replace"):
        submission(nb, {"rms_norm": {"code": "x", "replace": []}}, "test")


def test_a_malformed_text_source_fails_loudly():
    head = "```{code-cell} ipython3\n"
    for text, message in [
        (f"{head}:kind: check\n:grade_id: c\n\nx = 1\n```\n", "need points"),
        (f"{head}:kind: solution\n:grade_id: s\n\nx = 1\n```\n", "no ### BEGIN SOLUTION"),
        (f"{head}:kind: sulotion\n:grade_id: s\n\nx = 1\n```\n", "unknown kind"),
        (f"{head}:kind: provided\n\nx = 1\n```\n", "needs a grade_id"),
        (f"{head}:grade: 3\n\nx = 1\n```\n", "unknown options"),
        ('+++ {"grade_id": "a"}\n\nA\n\n+++ {"grade_id": "a"}\n\nB\n', "duplicate"),
    ]:
        with pytest.raises(AuthoringError, match=message):
            to_notebook(text)


# --------------------------------------------------------------------------------------------
# visible checks
# --------------------------------------------------------------------------------------------


def check_cells(nb: nbformat.NotebookNode) -> dict[str, str]:
    return {c.id: c.source for c in nb.cells if c.cell_type == "code" and kind_of(c) == "check"}


# checks of a trained model (the training cell is an experiment the tests do not run)
TRAINED = {"check_train_vit"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_visible_checks_pass_the_reference_and_fail_the_blank_with_a_message(name):
    """The check cells run in order in one namespace, as in the notebook (a check cell may use
    what an earlier one computed). On the blank release each check must fail with a message: a
    CheckFailed, or the stub's own NotImplementedError."""
    from course_lib.checks import CheckFailed

    reference = source_notebook(name)
    blank = release_notebook(name)
    ref_ns, blank_ns = definitions(reference, name), definitions(blank, name)
    cells = check_cells(reference)
    assert cells == check_cells(blank), "the release's check cells differ from the source's"
    failures, ran = [], 0
    for gid, code in cells.items():
        if gid in TRAINED:
            continue
        ran += 1
        code = compile(code, f"{name}/{gid}", "exec")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(code, ref_ns)
        except Exception as error:  # noqa: BLE001 (collect every failing check)
            failures.append(f"{gid} fails the reference: {type(error).__name__}: {error}")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(code, blank_ns)
        except CheckFailed as error:
            if len(str(error)) < 20:
                failures.append(f"{gid}: the blank gets a terse message {str(error)!r}")
        except NotImplementedError:
            pass  # the traceback ends in the student's stub, which says what to do
        except Exception as error:  # noqa: BLE001
            failures.append(f"{gid}: the blank gets {type(error).__name__}: {error}, no message")
        else:
            failures.append(f"{gid} passes the blank release")
    assert ran >= 1 and not failures, "\n".join(failures)


def sample_definitions(name: str, sample: str) -> dict:
    return definitions(nbformat.read(COURSE.samples_dir(name) / f"{sample}.ipynb", 4), sample)


@pytest.mark.slow
def test_a4_visible_checks_name_the_mistakes_of_the_samples():
    from course_lib.checks import CheckFailed, a4

    partial = sample_definitions("a4_bert_gpt", "partial")
    with pytest.raises(CheckFailed, match="for each token, not once per word"):
        a4.check_whole_word_mask(partial["whole_word_mask"])
    with pytest.raises(CheckFailed, match="the threshold is min_p itself"):
        a4.check_min_p_filter(partial["min_p_filter"])
    with pytest.raises(CheckFailed, match="tiled"):
        a4.check_grouped_attention(partial["GroupedCausalSelfAttention"])


@pytest.mark.slow
def test_a5_visible_checks_name_the_mistakes_of_the_samples():
    import torch

    from course_lib.checks import CheckFailed, a5

    partial = sample_definitions("a5_vision_transformers", "partial")
    with pytest.raises(CheckFailed, match="column first"):
        a5.check_patch_expanding(partial["PatchExpanding"])
    with pytest.raises(CheckFailed, match=r"divided by sqrt\(d\)"):
        a5.check_xca(partial["XCAttention"])
    with pytest.raises(CheckFailed, match="attends to itself"):
        a5.check_shifted_window_mask(partial["shifted_window_mask_padded"])

    class Untrained(torch.nn.Module):
        def forward(self, images):
            return torch.zeros(images.shape[0], 10)

    with pytest.raises(CheckFailed, match="below 93%"):
        a5.check_test_accuracy(Untrained(), torch.zeros(20, 1, 8, 8), torch.arange(20) % 10)


def test_check_cells_import_their_checks_and_load_no_model():
    """Each check cell imports what it calls from its course_lib.checks module, and importing
    those modules loads no reference model: a model module with ``@torch.no_grad()`` methods,
    once loaded in the grader's worker, makes the forbidden-call detector flag every student
    function decorated with ``@torch.no_grad()`` (they share torch's wrapper code object)."""
    modules = set()
    for name in ASSIGNMENTS:
        for gid, source in check_cells(source_notebook(name)).items():
            called = set(re.findall(r"^(check_\w+)\(", source, flags=re.M))
            imports = re.findall(r"from course_lib\.checks\.(\w+) import (.+)", source)
            modules |= {module for module, _ in imports}
            names = {n.strip() for _, line in imports for n in line.split(",")}
            assert called and called <= names, f"{name}/{gid}: {called} not imported"
    code = (
        f"import sys; import {', '.join(f'course_lib.checks.{m}' for m in sorted(modules))}; "
        "print(sorted(m for m in sys.modules if m.startswith('course_lib.models')))"
    )
    out = run([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing the checks loaded {out.stdout.strip()}"


@pytest.mark.slow
def test_new_assignment_scaffold_passes_check_at_once(tmp_path):
    """``make new-assignment`` in an empty course: lint-clean files, ``check`` and ``selfgrade``
    pass, the visible check passes the reference and names the partial sample's mistake."""
    import importlib.util

    from course_lib.checks import CheckFailed

    for path in ("nbgrader_config.py", "pyproject.toml"):
        shutil.copy(ROOT / path, tmp_path / path)
    # a course is a copy of this repository: its course_lib is the one its check cells import
    shutil.copytree(
        ROOT / "course_lib", tmp_path / "course_lib", ignore=shutil.ignore_patterns("__pycache__")
    )
    name = "a9_scaffold_example"
    cli = [*GRADER[:-1], str(tmp_path)]
    out = run(
        [sys.executable, "-m", "autograder", "--course-dir", str(tmp_path), "new-assignment", name]
    )
    assert out.returncode == 0, out.stdout + out.stderr
    again = run(
        [sys.executable, "-m", "autograder", "--course-dir", str(tmp_path), "new-assignment", name]
    )
    assert again.returncode != 0 and "exists already" in again.stderr, "overwrote an assignment"
    # its answer key beside the hidden suite, which the schedule requires
    from autograder.course.embargo import plan

    key = tmp_path / "autograder" / "suites" / name / "a9_key.py"
    assert plan(tmp_path).keys[name] == key.resolve()
    for args in (["check"], ["format", "--check"]):
        lint = run([str(Path(sys.executable).parent / "ruff"), *args, "."], cwd=tmp_path)
        assert lint.returncode == 0, lint.stdout + lint.stderr
    out = run([*cli, "check", name, "--jobs", "1", "--quiet"], cwd=tmp_path)
    assert out.returncode == 0 and f"check {name}: passed" in out.stdout, out.stdout + out.stderr
    out = run([*cli, "selfgrade", name, "--jobs", "1", "--quiet", "--out", "rows.json"], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    # its mutant catalogue: every mistake loses points under both names and is named
    out = run([*cli, "mutants", name, "--names", "2", "--strict", "--jobs", "1"], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 mistakes, 1 correct rewrites" in out.stdout, out.stdout
    assert "kill rate 100%" in out.stdout and "named rate 100%" in out.stdout, out.stdout

    spec = importlib.util.spec_from_file_location(
        "course_lib.checks.a9", tmp_path / "course_lib" / "checks" / "a9.py"
    )
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    course = Course(tmp_path)
    reference = definitions(nbformat.read(course.source_dir(name) / f"{name}.ipynb", 4), name)
    checks.check_softmax(reference["softmax"])
    partial = definitions(nbformat.read(course.samples_dir(name) / "partial.ipynb", 4), name)
    with pytest.raises(CheckFailed, match="subtract the maximum"):
        checks.check_softmax(partial["softmax"])
    blank = definitions(nbformat.read(course.release_dir(name) / f"{name}.ipynb", 4), name)
    with pytest.raises(CheckFailed, match="not implemented yet"):
        checks.check_softmax(blank["softmax"])


@pytest.mark.parametrize(
    "name", [n for n in ASSIGNMENTS if (COURSE.suite_dir(n) / "mutants.yml").exists()]
)
def test_mutant_catalogue_applies_and_each_mutant_changes_the_code(name):
    """Every mutant of ``python -m autograder mutants`` patches existing text (the patch fails
    loudly otherwise), changes the code, and the correct rewrites pass every visible check."""
    from autograder.tools.mutants import first_failure

    nb = source_notebook(name)
    reference = submission(nb, {}, "reference")
    catalogue = load_catalogue(COURSE, name)
    # three usual mistakes per graded step (solutions/_authoring/README.md), as the scaffold has
    steps = sum(kind_of(c) == "check" for c in nb.cells)
    assert sum(not spec.get("equivalent") for spec in catalogue.values()) >= 3 * steps, name
    for mutant, spec in catalogue.items():
        patched = submission(nb, spec["cells"], mutant)
        assert [c.source for c in patched.cells] != [c.source for c in reference.cells], mutant
        if spec.get("equivalent"):
            assert first_failure(patched, mutant, TRAINED) is None, f"{mutant} fails a check"


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [n for n in ASSIGNMENTS if (COURSE.suite_dir(n) / "mutants.yml").exists()]
)
def test_mutants_are_killed_under_every_name_and_named(name, tmp_path):
    """``python -m autograder mutants <name> --names 3 --every 8 --strict``: every catalogued
    mistake loses points under the first student name, every eighth (catalogue order) under each
    of three names, the visible checks name at least 80 % of them, and no correct rewrite loses
    a point or fails a check under any of the three. ``make mutants`` runs the full sweep (every
    mistake under every name)."""
    out_path = tmp_path / "mutants.json"
    args = ["mutants", name, "--names", "3", "--every", str(EVERY), "--strict", "--jobs", "2"]
    args.append("--quiet")
    out = run([*GRADER, *args, "--out", str(out_path)])
    assert out_path.exists(), out.stdout[-4000:] + out.stderr[-4000:]
    table = json.loads(out_path.read_text())
    real = [r for r in table if not r["equivalent"]]
    problems = [
        f"{r['mutant']}: lost {r['lost']} under the names; tests failed under the first: "
        + (", ".join(r["failed_tests"]) or "none")
        for r in real
        if not r["killed"]
    ]
    problems += [
        f"{r['mutant']} (a correct rewrite): lost {r['lost']}, first message {r['message']!r}"
        for r in table
        if r["equivalent"] and (any(r["lost"]) or r["message"])
    ]
    named = sum(r["named"] for r in real) / len(real)
    if named < 0.8:
        problems += [
            f"{r['mutant']}: not named (phrase {r['phrase']!r}), first message {r['message']!r}"
            for r in real
            if not r["named"]
        ]
    assert not problems, f"{name}: named rate {named:.0%}\n" + "\n".join(problems)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]


@pytest.mark.slow
def test_grading_under_several_names_gives_each_name_its_own_row(tmp_path):
    """What ``mutants`` and ``fairness`` do, ``Grader.grade(subs, names=...)`` (each submission
    read and its suite collected once, each name's tests in a process forked from there with a
    worker of its own), gives every name exactly the row that grading under that name alone
    gives, for the reference and three mistakes of one catalogue."""
    from autograder.host.grader import Grader
    from autograder.host.intake import Submission
    from autograder.host.options import Options
    from autograder.tools.fairness import student_names

    name = "a2_self_attention"
    catalogue = load_catalogue(COURSE, name)
    mistakes = [m for m, spec in catalogue.items() if not spec.get("equivalent")][:3]
    people = student_names(3)
    with Grader(COURSE, name, Options(jobs=2, progress=False)) as grader:
        subs = []
        for mutant in ["reference", *mistakes]:
            cells = catalogue[mutant]["cells"] if mutant in catalogue else {}
            nb = submission(source_notebook(name), cells, mutant)
            folder = tmp_path / mutant
            folder.mkdir()
            paths = {}
            for notebook in grader.release:
                (folder / notebook).write_text(notebook_text(nb), encoding="utf-8")
                paths[notebook] = folder / notebook
            subs.append(Submission(mutant, paths, list(paths.values()), folder))
        together = grader.grade(subs, names=people)
        alone = grader.grade(
            [dataclasses.replace(sub, student=p, id="") for sub in subs for p in people]
        )
    assert len(together) == len(alone) == len(subs) * len(people)
    for row in together + alone:  # what grading cost (the row's and each test's) is not a result
        row.pop("seconds")
        for test in row["tests"].values():
            test.pop("seconds", None)
    for one, other in zip(together, alone):
        assert one == other, f"{one['student']}: {json.dumps(one)[:3000]}"
    messages = {r["student"]: r["tests"] for r in together[len(people) : 2 * len(people)]}
    assert len({json.dumps(t, sort_keys=True) for t in messages.values()}) > 1, (
        "the names drew the same inputs: the comparison shows nothing"
    )
    assert max(r["score"] for r in together) > min(r["score"] for r in together)


# --------------------------------------------------------------------------------------------
# grading: reference, blank, samples
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_autograder_check_and_the_samples(name):
    """``check <name> --samples``: reference 100 %, blank release 0, a second run identical, the
    hidden tests of each grade cell add up to its points, and every sample gets its score in
    expected.json (``selfgrade`` without grading the reference and the blank twice); the
    samples span the range: the partial one is neither all nor nothing."""
    jobs = ["--jobs", str(JOBS.get(name, 2)), "--quiet"]
    out = run([*GRADER, "check", name, "--samples", *jobs])
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert f"check {name}: passed" in out.stdout
    rows = {
        line.split()[1]: line.split()
        for line in out.stdout.splitlines()
        if line.startswith(name + " ") and line.split()[-1] == "ok"
    }
    for sub in ("reference", "blank", "partial", "broken", "cheat"):
        assert sub in rows, f"{name}/{sub} was not graded as expected:\n{out.stdout}"
    score, top = (float(x) for x in rows["partial"][2].split("/"))
    assert 0 < score < top, out.stdout
    assert float(rows["broken"][2].split("/")[0]) < top, out.stdout


@pytest.mark.slow
def test_selfgrade_writes_a_row_per_submission(tmp_path):
    """``selfgrade`` (what ``make`` runs; the scores themselves are checked above, per
    assignment) writes one row per submission with its expected score, for the cheapest
    assignment, and exits 1 with a MISMATCH row when a score differs from expected.json."""
    import shutil

    name = "a1_rnn_attention"
    rows_path = tmp_path / "rows.json"
    out = run([*GRADER, "selfgrade", name, "--out", str(rows_path), *SELFGRADE_LIMITS])
    rows = json.loads(rows_path.read_text())
    table = "\n".join(
        f"{r['assignment']} {r['submission']}: {r['score']} / {r['max_score']} "
        f"(expected {r['expected']}) {r.get('details', '')}"
        for r in rows
    )
    assert out.returncode == 0, table + out.stderr[-2000:]
    assert [r["submission"] for r in rows] == [
        "reference", "blank", "broken", "cheat", "partial"
    ], table  # fmt: skip
    assert all(r["ok"] and r["expected"] == r["score"] for r in rows), table
    # a course whose expected.json is wrong for one sample: that row says MISMATCH, exit 1
    course = tmp_path / "course"
    for part in ("solutions", "assignments", "autograder/suites", "autograder/samples"):
        shutil.copytree(ROOT / part / name, course / part / name)
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    expected = json.loads((course / "autograder/samples" / name / "expected.json").read_text())
    expected["partial"] = {"points": expected["partial"]["points"] + 1}
    (course / "autograder/samples" / name / "expected.json").write_text(json.dumps(expected))
    elsewhere = [*GRADER[:-1], str(course)]  # the same command line, --course-dir the copy
    out = run([*elsewhere, "selfgrade", name, "--out", str(tmp_path / "bad.json"),
               *SELFGRADE_LIMITS])  # fmt: skip
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "MISMATCH" in out.stdout and "partial" in out.stdout, out.stdout[-3000:]


@pytest.mark.slow
def test_loading_notes_name_the_students_cells_only(tmp_path):
    """A3's given plot cell reads ``val_set``, which its (dropped) training cell binds: the
    grader's loader fails on it for every student, and that is not the student's business (it
    was a note on every A3 feedback); a statement of the student's own that fails to load is."""
    from autograder.host.grader import Grader
    from autograder.host.intake import Submission
    from autograder.host.options import Options

    name = "a3_transformer"
    nb = source_notebook(name)
    cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    cell.source += "\n\nALIAS = name_defined_nowhere\n"
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / f"{name}.ipynb").write_text(nbformat.writes(nb), encoding="utf-8")
    paths = {f"{name}.ipynb": folder / f"{name}.ipynb"}
    with Grader(COURSE, name, Options(jobs=1, progress=False)) as grader:
        (row,) = grader.grade([Submission("student", paths, list(paths.values()), folder)])
    loading = [n for n in row["notes"] if n.startswith("while loading your code")]
    assert len(loading) == 1 and "name_defined_nowhere" in loading[0], row["notes"]
    assert row["score"] == row["max_score"], row["notes"]
