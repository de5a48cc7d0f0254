"""``mutants``: do the hidden tests catch the usual mistakes, and do the visible checks name them?

    python -m autograder mutants a3_transformer [--names 3] [--jobs 2] [--strict]
    python -m autograder mutants --all --names 5 --strict   # every catalogue, then one table

The catalogue ``autograder/suites/<name>/mutants.yml`` lists mistakes as patches of the reference
solution, in the format of the samples (``autograder/authoring.py``)::

    unbiased_variance:
      phrase: unbiased              # what a good visible-check message must say (case-insensitive)
      cells:
        layer_norm:
          replace:
          - old: var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
            new: var = x.var(dim=-1, keepdim=True)
    rsqrt:
      equivalent: true              # a correct rewrite: must lose nothing and pass every check
      cells: ...

Every mutant is graded with the hidden suite under ``--names`` student names (each draws its own
seeded inputs) in one batch: the mutant is prepared and the suite collected once, then run once per
name (``Grader.grade(..., names=...)``). ``--every N`` grades only every N-th mistake (catalogue
order) under all the names and the others under the first name (the reference and the correct
rewrites always under all): ``make test`` samples so, ``make mutants`` runs the full sweep. Its
visible checks run in order, as in the notebook, and the first failure's message is kept. The
report gives, per mutant, the points lost under each name, whether the score depends on the seed,
the first message and whether it contains the phrase; then the kill rate (non-equivalent mutants
that lose points under *every* name graded) and the named rate. Rows go to
``grading/mutants-<name>.json``. Exit status 1 when an equivalent mutant loses points or fails a
check, or (with ``--strict``) when the kill rate is below 100 % or the named rate below 80 %.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import tempfile
from pathlib import Path
from unittest import mock

import nbformat

from autograder.course.layout import Course
from autograder.course.notebook import keep_statement
from autograder.host.grader import Grader
from autograder.host.intake import Submission
from autograder.host.options import Options
from autograder.host.pool import Runners
from autograder.tools.authoring import (
    AuthoringError,
    kind_of,
    notebook_text,
    source_path,
    submission,
    to_notebook,
)

TOLERANCE = 1e-6
SKIP = {"check_train_vit"}  # checks of a trained model: the training cell is not run


def skipping() -> contextlib.AbstractContextManager:
    """The hidden tests of the ``SKIP`` cells pass without running (see plugin.py): no training.
    Set before the runners start (they read it)."""
    return mock.patch.dict(os.environ, {"AUTOGRADER_MUTANTS_SKIP_CELLS": ",".join(sorted(SKIP))})


def load_catalogue(course: Course, name: str) -> dict[str, dict]:
    import yaml

    path = course.suite_dir(name) / "mutants.yml"
    if not path.exists():
        raise AuthoringError(f"no mutant catalogue {path}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for mutant, spec in data.items():
        keys = set(spec) if isinstance(spec, dict) else {"?"}
        if keys - {"phrase", "equivalent", "cells", "description"} or "cells" not in keys:
            raise AuthoringError(f"{path}: {mutant}: keys phrase, equivalent, cells, description")
        if not spec.get("equivalent") and not spec.get("phrase"):
            raise AuthoringError(f"{path}: {mutant}: a mistake needs the phrase a message must say")
    return data


def catalogued(course: Course) -> list[str]:
    """The assignments that have a mutant catalogue."""
    return sorted(
        p.parent.name for p in (course.root / "autograder" / "suites").glob("*/mutants.yml")
    )


def rates(table: list[dict]) -> dict:
    """Counts and rates of a report's rows (the reference row counts as a correct rewrite)."""
    real = [r for r in table if not r["equivalent"]]
    equivalent = [r for r in table if r["equivalent"]]
    return {
        "mistakes": len(real),
        "rewrites": len(equivalent) - 1,
        "kill": sum(r["killed"] for r in real) / len(real) if real else 1.0,
        "named": sum(r["named"] for r in real) / len(real) if real else 1.0,
        "not_killed": [r["mutant"] for r in real if not r["killed"]],
        "seed_dependent": [r["mutant"] for r in table if r["seed_dependent"]],
        "not_named": [r["mutant"] for r in real if not r["named"]],
        "wrong_rewrites": [r["mutant"] for r in equivalent if any(r["lost"]) or r["message"]],
    }


def overview(outs: list[tuple[str, Path]]) -> None:
    """One table for several assignments, from their report files."""
    print(f"\n{'assignment':<24}  mistakes  rewrites  killed  named  rewrites losing points")
    for name, out in outs:
        r = rates(json.loads(out.read_text(encoding="utf-8")))
        wrong = ", ".join(r["wrong_rewrites"]) or "none"
        print(f"{name:<24}  {r['mistakes']:>8}  {r['rewrites']:>8}  {r['kill']:>6.0%}  "
              f"{r['named']:>5.0%}  {wrong}")  # fmt: skip


def definitions(nb: nbformat.NotebookNode, label: str) -> dict:
    """The notebook's imports, functions, classes and constants (what the grader runs), executed
    statement by statement in a fresh namespace (a statement that needs an experiment's data
    fails and is dropped, as in the grader). Only for trusted code: references and mutants."""
    namespace: dict = {"__name__": f"visible_{label}"}
    for cell in nb.cells:
        if cell.cell_type != "code" or kind_of(cell) not in ("solution", "provided"):
            continue
        try:
            body = ast.parse(cell.source).body
        except SyntaxError:
            continue
        for stmt in body:
            if keep_statement(stmt):
                with contextlib.suppress(Exception):
                    exec(compile(ast.Module([stmt], []), f"{label}/{cell.id}", "exec"), namespace)
    return namespace


def first_failure(nb: nbformat.NotebookNode, label: str, skip: set[str]) -> str | None:
    """Run the check cells in order in the notebook's namespace; the first failure's message."""
    namespace = definitions(nb, label)
    for cell in nb.cells:
        if cell.cell_type != "code" or kind_of(cell) != "check" or cell.id in skip:
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(cell.source, f"{label}/{cell.id}", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 (any failure is the student's first message)
            return f"{cell.id}: {type(error).__name__}: {error}"
    return None


def mutants(
    course: Course,
    name: str,
    options: Options,
    out: Path,
    *,
    names: int = 3,
    strict: bool = False,
    every: int = 1,
    runners: Runners | None = None,
) -> int:
    """Grade ``name``'s catalogue (``runners``: warm runners shared with other assignments,
    started under :func:`skipping`)."""
    catalogue = load_catalogue(course, name)
    table, top = grade_catalogue(
        course, name, options, catalogue, names=names, every=every, runners=runners
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=1), encoding="utf-8")
    return report(name, table, top, strict)


def grade_catalogue(
    course: Course,
    name: str,
    options: Options,
    catalogue: dict[str, dict],
    *,
    names: int = 3,
    every: int = 1,
    runners: Runners | None = None,
    pool: int = 0,
    checks: bool = True,
) -> tuple[list[dict], float]:
    """Grade the reference and each entry of ``catalogue`` (patches of the reference) under
    ``names`` student names (every ``every``-th mistake only under the first), run the visible
    checks of each; the rows of the report and the points at stake. With ``pool`` > ``names``
    the names rotate: entry ``i`` is graded under names ``i * names .. i * names + names - 1``
    (mod ``pool``) of ``pool`` names, so the catalogue as a whole meets every one of them at the
    cost of ``names`` per entry. ``checks=False`` leaves the visible checks out (``message`` "").
    Runners passed in run the tests of ``SKIP`` cells; the grader's own (``runners=None``),
    started inside ``skipping()``, pass them without running."""
    import torch

    from autograder.tools.fairness import student_names

    source = to_notebook(source_path(course, name).read_text(encoding="utf-8"), name)
    skip = SKIP
    names = max(1, names)
    people = student_names(max(names, pool))
    rows = []
    with (
        skipping(),
        tempfile.TemporaryDirectory(prefix="mutants-") as tmp,
        Grader(course, name, options, runners=runners) as g,
    ):
        release = list(g.release)
        subs, everyone = [], []
        mistakes = 0
        for mutant, spec in {"reference": {"cells": {}}, **catalogue}.items():
            if mutant == "reference" or spec.get("equivalent"):
                everyone.append(True)
            else:
                everyone.append(mistakes % max(1, every) == 0)
                mistakes += 1
            nb = submission(source, spec["cells"], f"{name}: {mutant}")
            folder = Path(tmp) / mutant.replace("/", "--")
            folder.mkdir()
            notebooks = {}
            for notebook in release:
                (folder / notebook).write_text(notebook_text(nb), encoding="utf-8")
                notebooks[notebook] = folder / notebook
            subs.append(Submission(mutant, notebooks, list(notebooks.values()), folder))
            rows.append({"mutant": mutant, "nb": nb, **spec})
        graded: list[list[dict]] = [[] for _ in subs]
        groups: dict[tuple[str, ...], list[int]] = {}  # names -> the entries graded under them
        for i, flag in enumerate(everyone):
            first = (i * names) % len(people) if len(people) > names else 0
            who = tuple(people[(first + j) % len(people)] for j in range(names if flag else 1))
            groups.setdefault(who, []).append(i)
        for who, picked in groups.items():
            batch = g.grade([subs[i] for i in picked], names=list(who))
            for j, i in enumerate(picked):
                graded[i] = batch[j * len(who) : (j + 1) * len(who)]
    top = graded[0][0]["max_score"]
    reference = graded[0][0]["tests"]
    table = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors; more threads only spin against other processes
    try:
        messages = [first_failure(row["nb"], row["mutant"], skip) if checks else "" for row in rows]
    finally:
        torch.set_num_threads(threads)
    for row, group, message in zip(rows, graded, messages):
        lost = [round(top - r["score"], 6) for r in group]
        phrase = row.get("phrase") or ""
        table.append(
            {
                "mutant": row["mutant"],
                "equivalent": bool(row.get("equivalent")) or row["mutant"] == "reference",
                "names": [r.get("student", "?") for r in group],
                "lost": lost,
                "killed": all(x > TOLERANCE for x in lost),
                "seed_dependent": len(set(lost)) > 1,
                "message": message,
                "phrase": phrase,
                "named": bool(message and phrase and phrase.lower() in message.lower()),
                "failed_tests": sorted(
                    test
                    for test, result in group[0].get("tests", {}).items()
                    if result["points"] < reference[test]["points"] - TOLERANCE
                ),
                "failures": failures(group, reference),
                "seconds": {
                    test: round(max(seconds(r, test) for r in group), 3)
                    for test in group[0].get("tests", {})
                },
            }
        )
    return table, top


def seconds(row: dict, test: str) -> float:
    return row.get("tests", {}).get(test, {}).get("seconds") or 0.0


def failures(group: list[dict], reference: dict) -> dict[str, str]:
    """``test -> 'student: message'`` for each test that loses points under some name."""
    out: dict[str, str] = {}
    for row in group:
        for test, result in row.get("tests", {}).items():
            if test not in out and result["points"] < reference[test]["points"] - TOLERANCE:
                out[test] = f"{row.get('student', '?')}: {(result.get('message') or '')[:300]}"
    return out


def report(name: str, table: list[dict], top: float, strict: bool) -> int:
    width = max(len(r["mutant"]) for r in table)
    print(f"{'mutant':<{width}}  lost (per name)   killed  named  first visible-check message")
    for r in table:
        lost = ",".join(f"{x:g}" for x in r["lost"])
        killed = "equiv" if r["equivalent"] else ("yes" if r["killed"] else "NO")
        if r["seed_dependent"]:
            killed += "~"
        named = "-" if r["equivalent"] else ("yes" if r["named"] else "no")
        message = (r["message"] or "(all checks pass)").replace("\n", " ")
        print(f"{r['mutant']:<{width}}  {lost:<16}  {killed:<6}  {named:<5}  {message[:110]}")
    r = rates(table)
    kill, named, wrong, varying = r["kill"], r["named"], r["wrong_rewrites"], r["seed_dependent"]
    print(
        f"mutants {name}: {r['mistakes']} mistakes, {r['rewrites']} correct rewrites, "
        f"out of {top:g} points; kill rate {kill:.0%} (under every name), named rate {named:.0%}"
    )
    if varying:
        print(f"  seed-dependent scores (~): {', '.join(varying)}")
    if r["not_killed"]:
        print(f"  mistakes that keep every point under some name: {', '.join(r['not_killed'])}")
    if r["not_named"]:
        print(f"  mistakes the visible checks do not name: {', '.join(r['not_named'])}")
    if wrong:
        print(f"  error: correct rewrites that lose points or fail a check: {', '.join(wrong)}")
    failed = bool(wrong) or (strict and (kill < 1.0 or named < 0.8))
    return 1 if failed else 0
