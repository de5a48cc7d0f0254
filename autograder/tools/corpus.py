"""``corpus``: correct work written by people who never read the key scores full marks.

    python -m autograder corpus a3_transformer --names 8      # make test: 8 names
    python -m autograder corpus --all --names 20              # make fairness: the full sweep

The independent corpus, ``autograder/samples/<name>/independent/*.yml``, holds correct variants of
every graded function, written from the student material only (the released notebook, the book
and ``course_lib``) by authors who were not shown the key, the hidden suite or the samples: loops,
einsum, float64 inside, other valid algorithms, other tie orders, printing and plotting inside
the function. Each file is a catalogue in the samples' format (whole cells by ``grade_id``), every
entry ``equivalent: true``::

    loops_everywhere:
      description: explicit loops over batch and time
      equivalent: true
      cells:
        luong_align:
          code: |
            def luong_align(...): ...

Each variant is graded under ``--names`` student names and its visible checks are run in order
(as ``mutants`` does for its correct rewrites). With ``--pool P`` the names rotate through P
names (variant ``i`` under names ``i * N .. i * N + N - 1`` mod P): each variant costs N gradings
and the corpus as a whole meets all P names. ``--trained K`` runs the tests of a trained model
(A5's ``check_train_vit``: every such grading trains the ViT twice) under K of each variant's
names only, rotating through the pool, and passes them without running under the others
(``make test``: A5 under 8 names, trained under 1). A variant that loses any point under any
name, or that fails a visible check, is a test (or check) judging something the notebook does not
state: the report names the test, the student and the message. The coverage table counts the
variants per graded cell (the issue's bar: at least 8). Rows go to ``grading/corpus-<name>.json``;
exit status 1 when any variant loses a point or fails a check, or a cell has fewer than
``--min-variants`` variants.
"""

from __future__ import annotations

import json
from pathlib import Path

from autograder.course.layout import Course
from autograder.host.options import Options
from autograder.host.pool import Runners
from autograder.tools.authoring import AuthoringError, kind_of, source_path, to_notebook
from autograder.tools.mutants import grade_catalogue

KEYS = {"description", "equivalent", "cells"}


def corpus_files(course: Course, name: str) -> list[Path]:
    return sorted((course.samples_dir(name) / "independent").glob("*.yml"))


def with_corpus(course: Course) -> list[str]:
    """The assignments that have an independent corpus."""
    root = course.root / "autograder" / "samples"
    return sorted({p.parent.parent.name for p in root.glob("*/independent/*.yml")})


def load_corpus(course: Course, name: str) -> dict[str, dict]:
    """``author/variant -> spec`` from every file of ``name``'s corpus, checked."""
    import yaml

    out: dict[str, dict] = {}
    for path in corpus_files(course, name):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise AuthoringError(f"{path}: a mapping of variant name -> description, cells")
        for variant, spec in data.items():
            where = f"{path}: {variant}"
            if not isinstance(spec, dict) or set(spec) - KEYS or "cells" not in spec:
                raise AuthoringError(f"{where}: keys {sorted(KEYS)}")
            if spec.get("equivalent") is not True:
                raise AuthoringError(f"{where}: the corpus holds correct work (equivalent: true)")
            out[f"{path.stem}/{variant}"] = spec
    return out


def coverage(course: Course, name: str, corpus: dict[str, dict]) -> dict[str, int]:
    """Variants per graded solution cell (the cells a check cell grades)."""
    nb = to_notebook(source_path(course, name).read_text(encoding="utf-8"), name)
    cells = [c.id for c in nb.cells if c.cell_type == "code" and kind_of(c) == "solution"]
    counts = {cell: 0 for cell in cells}
    for spec in corpus.values():
        for cell in spec["cells"]:
            if cell not in counts:
                raise AuthoringError(f"{name}: the corpus names {cell!r}, not a solution cell")
            counts[cell] += 1
    return counts


def corpus(
    course: Course,
    names: list[str],
    options: Options,
    out_dir: Path,
    *,
    people: int = 8,
    pool: int = 0,
    min_variants: int = 8,
    skip_cells: frozenset[str] = frozenset({"train_vit"}),
    trained: int = 0,
) -> int:
    """Grade the corpus of each of ``names`` under ``people`` names (rotating through ``pool``).
    With ``0 < trained < people`` the tests of a trained model (``mutants.SKIP``: A5's
    ``check_train_vit``, two trainings a grading) run under ``trained`` of each variant's names
    only; under the others they pass without running, everything else is graded under all."""
    status = 0
    partial = 0 < trained < people
    with Runners(course, options, [course.suite_dir(n) for n in names]) as runners:
        for name in names:
            catalogue = load_corpus(course, name)
            if not catalogue:
                print(f"corpus {name}: no variants in {course.samples_dir(name) / 'independent'}")
                status = 1
                continue
            counts = coverage(course, name, catalogue)
            table, top = grade_catalogue(
                course,
                name,
                options,
                catalogue,
                names=trained if partial else people,
                runners=runners,
                pool=pool,
            )
            if partial:
                # runners=None: the grader starts its own runners inside mutants.skipping()
                untrained, _ = grade_catalogue(
                    course, name, options, catalogue, names=people, pool=pool, checks=False
                )
                table = [merge(a, b) for a, b in zip(table, untrained, strict=True)]
            out = out_dir / f"corpus-{name}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"coverage": counts, "rows": table}, indent=1))
            status |= report(
                name, table, top, counts, people, pool, min_variants, skip_cells, trained
            )
    return status


def merge(trained: dict, untrained: dict) -> dict:
    """One variant's row from its grading with the trained-model tests and without them."""
    assert trained["mutant"] == untrained["mutant"]
    lost = untrained["lost"] + trained["lost"]
    return {
        **trained,
        "names": untrained["names"] + trained["names"],
        "trained_names": trained["names"],
        "lost": lost,
        "seed_dependent": len(set(lost)) > 1,
        "failed_tests": sorted({*trained["failed_tests"], *untrained["failed_tests"]}),
        "failures": {**untrained["failures"], **trained["failures"]},
        "seconds": trained["seconds"],  # per test, the most under any name of the trained grading
    }


def report(
    name: str,
    table: list[dict],
    top: float,
    counts: dict[str, int],
    people: int,
    pool: int,
    min_variants: int,
    skip_cells: frozenset[str],
    trained: int = 0,
) -> int:
    wrong = [r for r in table if any(r["lost"]) or r["message"]]
    thin = {c: n for c, n in counts.items() if n < min_variants and c not in skip_cells}
    met = len({n for r in table for n in r.get("names", [])})
    under = f"each under {people} of {pool} names in rotation" if pool > people else ""
    print(f"corpus {name}: {len(table) - 1} independent variants, "
          f"{under or f'under {people} names'} ({met} names in all)")  # fmt: skip
    if 0 < trained < people:
        print(f"  the tests of a trained model under {trained} name(s) per variant, rotating")
    print("  variants per graded cell: " + ", ".join(f"{c} {n}" for c, n in counts.items()))
    for r in wrong:
        lost = ",".join(f"{x:g}" for x in r["lost"])
        print(f"  LOSES {r['mutant']}: lost {lost} of {top:g} (per name)")
        for test, message in r.get("failures", {}).items():
            print(f"      {test}: {message[:200]}")
        if r["message"]:
            print(f"      visible check: {r['message'][:200]}")
    if thin:
        print(f"  fewer than {min_variants} variants: {', '.join(thin)}")
    print(
        f"corpus {name}: {len(table) - 1 - len(wrong)}/{len(table) - 1} at full marks under "
        f"every name and passing every visible check"
    )
    return 1 if wrong or thin else 0
