"""The independent corpus: correct work the key's authors did not write scores full marks.

``autograder/samples/<name>/independent/*.yml`` holds correct variants of every graded function,
written from the student material only (``autograder/tools/corpus.py``). ``make test`` grades each
variant under 8 student names (A5's training test under 1 of them, rotating through the 8:
``TRAINED``), and runs its visible checks: a lost point or a failed check is
a test judging something the notebook does not state.
``make fairness`` runs the sweep under 20.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import time_limits

from autograder.course.layout import Course
from autograder.tools.corpus import coverage, load_corpus, with_corpus

ROOT = Path(__file__).resolve().parents[2]
COURSE = Course(ROOT)
GRADER = [sys.executable, "-m", "autograder", "--course-dir", str(ROOT)]
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").glob("a*_*") if p.is_dir())


def test_every_assignment_has_a_corpus_of_eight_variants_per_graded_cell():
    assert with_corpus(COURSE) == ASSIGNMENTS
    for name in ASSIGNMENTS:
        counts = coverage(COURSE, name, load_corpus(COURSE, name))
        thin = {c: n for c, n in counts.items() if n < 8 and c != "train_vit"}
        assert not thin, f"{name}: fewer than 8 independent variants of {thin}"


# Student names per variant in make test, sized to CI's 90 minutes on 2 cores: every variant under
# all 8 names (A3's 9 variants about 6 min on 2 cores, A4's 8 about 4). A5's every grading with
# its training test trains the ViT twice (45 of 46 test seconds, report.json's per-test
# "seconds"): A5's variants are graded under the 8 names with that test passed without running,
# and with it under 1 of them (TRAINED), rotating so that the trainings meet all 8. The corpus
# does not write train_vit (the reference's trains each variant's SimpleViT).
# `make fairness` grades every variant under 20, trained under all.
POOL = 8
TRAINED = {"a5_vision_transformers": 1}


@pytest.mark.slow
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_independent_variants_lose_nothing_under_every_name(name, tmp_path):
    trained = TRAINED.get(name, 0)
    out = time_limits.run(
        [
            *GRADER,
            "corpus",
            name,
            "--names",
            str(POOL),
            "--pool",
            str(POOL),
            "--trained",
            str(trained),
            "--jobs",
            "2",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        cpu=3000,
    )
    report = tmp_path / f"corpus-{name}.json"
    assert report.exists(), out.stdout[-4000:] + out.stderr[-4000:]
    rows = json.loads(report.read_text())["rows"]
    wrong = [
        f"{r['mutant']}: lost {r['lost']} per name; {r['failures']}; check: {r['message']}"
        for r in rows
        if any(r["lost"]) or r["message"]
    ]
    assert not wrong, f"{name}: correct variants that lose points\n" + "\n".join(wrong)
    for r in rows:
        assert len(set(r["names"])) == POOL, f"{name}: {r['mutant']} met only {r['names']}"
    if trained:
        met = {n for r in rows for n in r["trained_names"]}
        assert len(met) == POOL, f"{name}: the trainings met {sorted(met)}, not {POOL} names"
        assert all(len(r["trained_names"]) == trained for r in rows)
        slowest = max(max(r["seconds"].values()) for r in rows)
        assert slowest > 2.0, f"{name}: no test took over 2 s: did the trainings run? {slowest}"
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]


@pytest.mark.slow
def test_an_independent_a3_scores_full_marks_through_the_gradescope_zip(tmp_path):
    """Issue 34: a correct A3 written by someone who never read the key scored 15 of 16 through
    the Gradescope zip (float rounding ordered the beam's tied hypotheses). Two independent A3s
    with their own tie orders (a heap in float64, a student's own sort), each a whole notebook
    of the author's code, score full marks at /autograder under two Gradescope users each."""
    from test_instructor_workflow import _gradescope_run

    from autograder.tools.authoring import notebook_text, source_path, submission, to_notebook

    name = "a3_transformer"
    archive = tmp_path / "gs.zip"
    out = time_limits.run(
        [*GRADER, "gradescope", name, "--out", str(archive)],
        capture_output=True,
        text=True,
        cpu=120,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    source = to_notebook(source_path(COURSE, name).read_text(encoding="utf-8"), name)
    variants = load_corpus(COURSE, name)
    for variant in ("author_a3/float64_inside_heap", "author_a3/printing_student_sort"):
        spec = variants[variant]
        assert set(spec["cells"]) == {"rms_norm", "encoder_block", "decoder_block",
                                      "label_smoothing", "beam_search"}  # fmt: skip
        text = notebook_text(submission(source, spec["cells"], variant)).encode()
        for user in (5001, 5002):
            where = tmp_path / f"{variant.split('/')[1]}-{user}"
            results = _gradescope_run(archive, where, text, user=user)
            lost = [t for t in results["tests"] if t["max_score"] and t["score"] < t["max_score"]]
            assert not lost, f"{variant} as user {user}: " + "; ".join(
                f"{t['name']}: {t.get('output', '')[:300]}" for t in lost
            )
            assert results["score"] == 16, (variant, user, results["score"])
