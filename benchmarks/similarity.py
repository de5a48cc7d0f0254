"""Similarity report: precision and recall on the A2 corpus, and its time at 100 submissions.

1. The corpus (tests/fixtures/similarity: independent solutions in different styles and disguised
   copies of the references and of each other): precision and recall of the flagged pairs at
   several thresholds, and the margin between the weakest copy and the strongest independent pair.
2. ``--tools-python PY``: the same corpus through copydetect and compare50 (installed in another
   environment, e.g. a scratch venv: they cannot share ours, see the note in the docstring of
   autograder/similarity.py), on the raw cells and, for copydetect, on our normalised tokens.
3. Time of ``similarity.run`` for ``--submissions`` (100) notebooks combined from the corpus,
   against ``python -m autograder grade --jobs 2`` on ``--grade`` (10) of them, extrapolated.

    .venv/bin/python benchmarks/similarity.py [--submissions 100] [--grade 10] [--tools-python PY]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "grader" / "fixtures" / "similarity"))

import similarity_corpus as corpus  # noqa: E402

from autograder.course.layout import Course  # noqa: E402
from autograder.host.intake import discover  # noqa: E402
from autograder.tools import similarity as S  # noqa: E402

COURSE = Course(REPO)
RELEASE = COURSE.release_dir(corpus.ASSIGNMENT) / corpus.NOTEBOOK
THRESHOLDS = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8]


def corpus_units(folder: Path):
    corpus.write(folder, RELEASE)
    builder = S.Builder(COURSE, corpus.ASSIGNMENT)
    subs = discover(folder, corpus.ASSIGNMENT, list(builder.release_nbs))
    students = {s.student: builder.submission(s) for s in subs}
    refs = builder.references()
    return builder, S.by_cell(students), refs


def table(title: str, scored, per_cell, refs, thresholds) -> None:
    origin = corpus.origins()
    print(f"\n{title}")
    head = ("threshold", "copies", "flagged", "false", "precision", "recall")
    print("{:>10} {:>7} {:>8} {:>6} {:>10} {:>7}".format(*head))
    for t in thresholds:
        r = corpus.evaluate(scored, per_cell, refs, origin, t)
        print(
            f"{t:>10.3g} {r['tp'] + r['fn']:>7} {r['tp']:>8} {r['fp']:>6} "
            f"{r['precision']:>10.3f} {r['recall']:>7.3f}"
        )
    by_key = {(c, a.owner, b.owner): s for c, a, b, s in scored}
    copy_scores = [by_key[k] for k in r["copies"]]
    other = [by_key[k] for k in r["independent"]]
    if copy_scores and other:
        print(
            f"  weakest copy pair {min(copy_scores):.3g}, strongest independent pair "
            f"{max(other):.3g} (separable: {min(copy_scores) > max(other)})"
        )


# ---------------------------------------------------------------------------------------------
# copydetect and compare50, run by another interpreter
# ---------------------------------------------------------------------------------------------

DRIVER = r"""
import json, sys
spec = json.load(open(sys.argv[1]))
out = {}
tool, opts = spec["tool"], spec["options"]
if tool == "copydetect":
    from copydetect import CodeFingerprint, compare_files
    for cell, info in spec["cells"].items():
        base = CodeFingerprint(info["base"], opts["k"], opts["w"], language="python").hashes
        fps = {o: CodeFingerprint(p, opts["k"], opts["w"], boilerplate=list(base),
                                  language="python") for o, p in info["files"].items()}
        for a, b in info["pairs"]:
            _, sims, _ = compare_files(fps[a], fps[b])
            out[f"{cell}|{a}|{b}"] = float(max(sims))
else:
    from compare50 import _api, _data, passes
    pass_ = getattr(passes, opts["pass"])
    pre = _data.Preprocessor(pass_.preprocessors)
    for cell, info in spec["cells"].items():
        subs = {o: _data.Submission(p, [p], preprocessor=pre) for o, p in info["files"].items()}
        base = _data.Submission(info["base"], [info["base"]], preprocessor=pre)
        scores = pass_.comparator.score(list(subs.values()), [], set(base.files))
        by = {(s.sub_a.id, s.sub_b.id): s.score for s in scores}
        for a, b in info["pairs"]:
            x, y = subs[a].id, subs[b].id
            out[f"{cell}|{a}|{b}"] = float(by.get((x, y), by.get((y, x), 0)))
json.dump(out, open(sys.argv[2], "w"))
"""


def run_tool(python: str, tool: str, options: dict, per_cell, refs, work: Path, normalised=False):
    spec = {"tool": tool, "options": options, "cells": {}}
    pairs = []
    for key, units in per_cell.items():
        live = [u for u in units if u.comparable]
        others = [u for u in refs.get(key, []) if u.prints]
        folder = work / tool / key.replace(":", "_")
        folder.mkdir(parents=True, exist_ok=True)
        files = {}
        for u in live + others:
            path = folder / f"{len(files)}.py"
            if normalised:
                path.write_text(" ".join(u.tokens))
            else:
                path.write_text(u.blocks[0].source)  # the graded cell as the student wrote it
            files[u.owner] = str(path)
        cell = next(c for c in S.load_release(COURSE, corpus.ASSIGNMENT).cells if c.key == key)
        base = folder / "base.py"
        base.write_text(cell.base if not normalised else "")
        info = {"files": files, "base": str(base), "pairs": []}
        for i, a in enumerate(live):
            for b in live[i + 1 :] + others:
                info["pairs"].append((a.owner, b.owner))
                pairs.append((key, a, b))
        spec["cells"][key] = info
    (work / "spec.json").write_text(json.dumps(spec))
    start = time.perf_counter()
    subprocess.run(
        [python, "-c", DRIVER, str(work / "spec.json"), str(work / "out.json")], check=True
    )
    seconds = time.perf_counter() - start
    got = json.loads((work / "out.json").read_text())
    return [(k, a, b, got[f"{k}|{a.owner}|{b.owner}"]) for k, a, b in pairs], seconds


# ---------------------------------------------------------------------------------------------
# Timing at 100 submissions
# ---------------------------------------------------------------------------------------------


def combined(folder: Path, n: int, seed: int = 0) -> None:
    """``n`` notebooks, each cell taken from a random corpus submission."""
    rng = random.Random(seed)
    release = json.loads(RELEASE.read_text())
    books = {name: corpus.notebook(release, name) for name in corpus.students()}
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        nb = json.loads(json.dumps(release))
        for j, cell in enumerate(nb["cells"]):
            gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
            if gid and cell["metadata"]["nbgrader"].get("solution"):
                donor = books[rng.choice(sorted(books))]
                same = [
                    c
                    for c in donor["cells"]
                    if c["metadata"].get("nbgrader", {}).get("grade_id") == gid
                ]
                cell = json.loads(json.dumps(same[0]))
                # unique text (a comment): no two notebooks share a cell, nothing is cached
                cell["source"] = "".join(cell["source"]) + f"\n# student {i}\n"
                nb["cells"][j] = cell
        (folder / f"student{i:03d}.ipynb").write_text(json.dumps(nb))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--submissions", type=int, default=100)
    parser.add_argument("--grade", type=int, default=10, help="graded for the comparison (0: skip)")
    parser.add_argument("--tools-python", help="an interpreter with copydetect and compare50")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-similarity-") as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        builder, per_cell, refs = corpus_units(tmp / "corpus")
        scored = S.scores(per_cell, refs)
        ours = time.perf_counter() - start
        n_sub = len(corpus.students())
        table(f"ours: {n_sub} corpus submissions, {ours:.2f} s", scored, per_cell, refs, THRESHOLDS)
        print(f"  chosen threshold {S.THRESHOLD} (k={S.K}, window={S.WINDOW}, "
              f"min_tokens={S.MIN_TOKENS})")  # fmt: skip
        if args.tools_python:
            runs = [
                ("copydetect 0.5.0 (defaults k=25, w=6), raw cells", "copydetect",
                 {"k": 25, "w": 6}, False, [0.2, 0.33, 0.5, 0.7]),
                ("copydetect 0.5.0 (k=10, w=3), raw cells", "copydetect",
                 {"k": 10, "w": 3}, False, [0.3, 0.4, 0.5, 0.6, 0.7]),
                ("copydetect 0.5.0 (k=10, w=3), on our normalised tokens", "copydetect",
                 {"k": 10, "w": 3}, True, [0.3, 0.4, 0.5, 0.6, 0.7]),
                ("compare50 1.2.15 'structure' pass (raw score: shared fingerprints)",
                 "compare50", {"pass": "structure"}, False, [1, 2, 3, 4, 6, 8]),
            ]  # fmt: skip
            for i, (title, tool, options, normalised, ts) in enumerate(runs):
                got, seconds = run_tool(
                    args.tools_python, tool, options, per_cell, refs, tmp / f"t{i}", normalised
                )
                table(f"{title}: {seconds:.2f} s", got, per_cell, refs, ts)
        n = args.submissions
        folder = tmp / "many"
        combined(folder, n)
        subs = discover(folder, corpus.ASSIGNMENT, [corpus.NOTEBOOK])
        start, cpu = time.perf_counter(), time.process_time()
        pairs = S.run(COURSE, corpus.ASSIGNMENT, subs, tmp / "out")
        sim_time, sim_cpu = time.perf_counter() - start, time.process_time() - cpu
        size = sum(p.stat().st_size for p in (tmp / "out").iterdir()) / 1024
        print(f"\n{'what':<44} {'submissions':>11} {'seconds':>8} {'per submission':>15}")
        print(
            f"{'similarity (reports included)':<44} {n:>11} {sim_time:>8.2f} {sim_time / n:>15.3f}"
        )
        print(f"  {len(pairs)} pairs flagged; reports {size:.0f} KiB; {sim_cpu:.2f} CPU s")
        if args.grade:
            few = tmp / "few"
            few.mkdir()
            for p in sorted(folder.iterdir())[: args.grade]:
                (few / p.name).write_bytes(p.read_bytes())
            env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
            cmd = [sys.executable, "-m", "autograder", "grade", corpus.ASSIGNMENT,
                   "--submissions", str(few), "--out", str(tmp / "gout"), "--jobs", "2",
                   "--quiet", "--no-gradebook", "--no-similarity"]  # fmt: skip
            start, cpu = time.perf_counter(), _children_cpu()
            done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
            grade_time, grade_cpu = time.perf_counter() - start, _children_cpu() - cpu
            if done.returncode not in (0, 3):
                print(done.stdout[-2000:], done.stderr[-2000:])
                return 1
            per = grade_time / args.grade
            what = "grade --jobs 2 (measured)"
            print(f"{what:<44} {args.grade:>11} {grade_time:>8.2f} {per:>15.3f}")
            print(f"{'grade --jobs 2 (extrapolated)':<44} {n:>11} {per * n:>8.1f} {per:>15.3f}")
            each = grade_cpu / args.grade
            print(f"  grade used {grade_cpu:.1f} CPU s for {args.grade} ({each:.2f} each)")
            wall_pct, cpu_pct = 100 * sim_time / (per * n), 100 * sim_cpu / (each * n)
            print(
                f"similarity / grade at {n}: {wall_pct:.1f} % of the wall time, "
                f"{cpu_pct:.1f} % of the CPU time (budget 10 %)"
            )
        print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
