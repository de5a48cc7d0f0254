"""Similarity report: ours against Dolos and copydetect on the corpus, and its time at 150.

1. The corpus (tests/grader/fixtures/similarity: per assignment, A2 and A3, a class of 32
   independent solutions, a past year of 8, 8 independent rewrites as the background, and 13
   disguised copies of the reference (two heavily: helpers, dead code, other vocabulary and
   containers), of peers, of a copy and of the past year; then a class of 8 where 4 hand in the
   reference word for word, the key shared by half the class). Every pair of owners
   (student ~ student, student ~ reference, student ~ past submission) is ranked by each tool;
   the table gives precision and recall at the tool's threshold, the best F1 over all
   thresholds, the weakest copy and the strongest independent pair, and the rank of every true
   copy pair.
2. Dolos (``@dodona/dolos-lib``, tree-sitter, winnowing; npm) and copydetect (pip) see the same
   code: per owner, one .py file with its graded cells as written; the release's graded cells
   are the template (Dolos's ignored file, copydetect's boilerplate). A tool that is not
   installed is skipped. Install them outside the project, e.g.

       npm install --prefix /tmp/simtools @dodona/dolos-lib
       python3.11 -m venv /tmp/simtools/venv && /tmp/simtools/venv/bin/pip install copydetect

   and pass ``--dolos /tmp/simtools --copydetect-python /tmp/simtools/venv/bin/python``.
3. Time of the report (``similarity.run``: units, weights, ranking, the three files) on
   ``--submissions`` (150) A3 notebooks combined from the corpus, against ``grade`` for the same
   batch: measured on ``--grade`` submissions (0: skip) and from the README's figure (100 A4
   submissions in 205 s with ``--jobs 2``).

    .venv/bin/python benchmarks/similarity.py [--dolos DIR] [--copydetect-python PY]
        [--submissions 150] [--grade 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
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

COURSE = Course(corpus.COURSE_ROOT)  # the frozen releases the classes were written for
README_GRADE = (100, 205.0)  # README: 100 A4 submissions graded in 205 s (--jobs 2)


# ---------------------------------------------------------------------------------------------
# Ours
# ---------------------------------------------------------------------------------------------


def ours(klass: corpus.Class, work: Path) -> tuple[list[tuple[str, str, float]], float]:
    subs_dir = klass.write(work / "subs")
    past = klass.write_past(work)
    background = klass.write_background(work)  # the instructor's rewrites: never the key
    start = time.perf_counter()
    builder = S.Builder(COURSE, klass.assignment)
    subs = discover(subs_dir, klass.assignment, list(builder.release_nbs))
    result = S.analyse(builder, subs, past=[past] if klass.past else [], background=[background])
    seconds = time.perf_counter() - start
    return [(m.a, m.b, m.score) for m in result.matches], seconds


# ---------------------------------------------------------------------------------------------
# The same code as files, for the other tools
# ---------------------------------------------------------------------------------------------


def _graded_code(nb: dict, cells: set[str]) -> str:
    parts = []
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if cell["cell_type"] == "code" and gid in cells:
            parts.append("".join(cell["source"]))
    return "\n\n".join(parts) + "\n"


def tool_files(klass: corpus.Class, work: Path) -> tuple[dict[str, Path], Path, list]:
    """owner -> file, the template file, and the pairs to score (as ours compares them)."""
    cells = set(corpus.CLASSES[klass.assignment].CELLS)
    folder = work / "files"
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def put(owner: str, nb: dict) -> None:
        path = folder / f"f{len(files):03d}.py"
        path.write_text(_graded_code(nb, cells))
        files[owner] = path

    for name in sorted(klass.students):
        put(name, json.loads((work / "subs" / f"{name}.ipynb").read_text()))
    for name in sorted(klass.past):
        nb = json.loads((work / corpus.PAST / f"{name}.ipynb").read_text())
        put(f"past: {corpus.PAST}/{name}", nb)
    a = klass.assignment
    put(
        corpus.REFERENCE,
        json.loads((corpus.COURSE_ROOT / "solutions" / a / f"{a}.ipynb").read_text()),
    )
    template = work / "template.py"
    template.write_text(
        _graded_code(
            json.loads((corpus.COURSE_ROOT / "assignments" / a / f"{a}.ipynb").read_text()), cells
        )
    )
    students = sorted(klass.students)
    others = [corpus.REFERENCE] + [f"past: {corpus.PAST}/{n}" for n in sorted(klass.past)]
    pairs = [(x, y) for i, x in enumerate(students) for y in students[i + 1 :]]
    pairs += [(x, o) for x in students for o in others]
    return files, template, pairs


DOLOS_JS = r"""
import { readFileSync, writeFileSync } from "fs";
import { Dolos } from "@dodona/dolos-lib";
const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const dolos = new Dolos({ language: "python", ...spec.options });
const report = await dolos.analyzePaths(spec.files, spec.template);
const out = [];
for (const p of report.allPairs()) {
  out.push([p.leftFile.path, p.rightFile.path, p.similarity]);
}
writeFileSync(process.argv[3], JSON.stringify(out));
"""


def dolos(folder: Path, files, template, pairs, work: Path, options: dict):
    lib = folder / "node_modules" / "@dodona" / "dolos-lib"
    if not lib.exists() or not shutil.which("node"):
        return None
    script = folder / "bench_dolos.mjs"  # beside node_modules, so the import resolves
    script.write_text(DOLOS_JS)
    spec = {"files": [str(p) for p in files.values()], "template": str(template),
            "options": options}  # fmt: skip
    (work / "dolos.json").write_text(json.dumps(spec))
    start = time.perf_counter()
    subprocess.run(
        ["node", str(script), str(work / "dolos.json"), str(work / "dolos_out.json")],
        check=True, capture_output=True,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    owner = {str(p): o for o, p in files.items()}
    got = {}
    for left, right, sim in json.loads((work / "dolos_out.json").read_text()):
        got[frozenset((owner[left], owner[right]))] = sim
    return [(a, b, got.get(frozenset((a, b)), 0.0)) for a, b in pairs], seconds


COPYDETECT_PY = r"""
import json, sys
from copydetect import CodeFingerprint, compare_files
spec = json.load(open(sys.argv[1]))
k, w = spec["k"], spec["w"]
base = CodeFingerprint(spec["template"], k, w, language="python").hashes
fps = {o: CodeFingerprint(p, k, w, boilerplate=list(base), language="python")
       for o, p in spec["files"].items()}
out = []
for a, b in spec["pairs"]:
    _, sims, _ = compare_files(fps[a], fps[b])
    out.append([a, b, float(max(sims))])
json.dump(out, open(sys.argv[2], "w"))
"""


def copydetect(python: str | None, files, template, pairs, work: Path, k: int, w: int):
    if python is None:
        try:
            import copydetect as _  # noqa: F401

            python = sys.executable
        except ImportError:
            return None
    spec = {"files": {o: str(p) for o, p in files.items()}, "template": str(template),
            "pairs": pairs, "k": k, "w": w}  # fmt: skip
    (work / "cd.json").write_text(json.dumps(spec))
    start = time.perf_counter()
    done = subprocess.run(
        [python, "-c", COPYDETECT_PY, str(work / "cd.json"), str(work / "cd_out.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        print(f"copydetect failed: {done.stderr[-500:]}", file=sys.stderr)
        return None
    seconds = time.perf_counter() - start
    return [tuple(x) for x in json.loads((work / "cd_out.json").read_text())], seconds


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def best_f1(klass, ranked) -> tuple[float, float, float, float]:
    """(F1, threshold, precision, recall) at the best threshold."""
    best = (0.0, 0.0, 0.0, 0.0)
    for t in sorted({s for _, _, s in ranked if s > 0}):
        r = corpus.evaluate(klass, ranked, t)
        f1 = 2 * r["precision"] * r["recall"] / (r["precision"] + r["recall"] or 1)
        if f1 > best[0]:
            best = (f1, t, r["precision"], r["recall"])
    return best


def summary(klass, tool: str, ranked, threshold: float, seconds: float, ranks: dict) -> None:
    ranked = sorted(ranked, key=lambda x: (-x[2], x[0], x[1]))
    r = corpus.evaluate(klass, ranked, threshold)
    f1, t, p, rc = best_f1(klass, ranked)
    worst = max(c[0] for c in r["copies"])
    print(
        f"{tool:<34} {threshold:>6.2f} {r['precision']:>5.2f} {r['recall']:>5.2f} "
        f"{r['weakest_copy']:>6.2f} {r['strongest_independent']:>6.2f} {worst:>5} "
        f"{r['first_independent_rank']:>5}   {f1:.2f} (at {t:.2f}: P {p:.2f} R {rc:.2f})"
        f" {seconds:>6.1f}"
    )
    for rank, a, b, _ in r["copies"]:
        ranks.setdefault((a, b), {})[tool] = rank


def compare_tools(args, klass: corpus.Class, work: Path) -> None:
    print(f"\n## {klass.assignment}: {len(klass.students)} submissions "
          f"({corpus.N_INDEPENDENT} independent), {len(klass.past)} past, 1 reference")  # fmt: skip
    print(f"{'tool':<34} {'thresh':>6} {'P':>5} {'R':>5} {'weak':>6} {'indep':>6} "
          f"{'worst':>5} {'1stI':>5}   best F1 (threshold: P, R)  seconds")  # fmt: skip
    ranks: dict = {}
    ranked, seconds = ours(klass, work)
    summary(klass, "ours", ranked, S.THRESHOLD, seconds, ranks)
    files, template, pairs = tool_files(klass, work)
    runs = [
        ("Dolos 3.5 (defaults k=23, w=17)", {}, 0.5),
        ("Dolos 3.5 (k=12, w=6)", {"kgramLength": 12, "kgramsInWindow": 6}, 0.5),
        ("Dolos 3.5 (k=12, w=6, max 30 %)",
         {"kgramLength": 12, "kgramsInWindow": 6, "maxFingerprintPercentage": 0.3}, 0.5),
    ]  # fmt: skip
    if args.dolos:
        for title, options, threshold in runs:
            got = dolos(Path(args.dolos), files, template, pairs, work, options)
            if got is None:
                print(f"{title}: skipped (no @dodona/dolos-lib under {args.dolos} or no node)")
                break
            summary(klass, title, got[0], threshold, got[1], ranks)
    else:
        print("Dolos: skipped (--dolos DIR with node_modules/@dodona/dolos-lib)")
    for title, k, w, threshold in [("copydetect 0.5 (defaults k=25, w=1)", 25, 1, 0.33),
                                   ("copydetect 0.5 (k=10, w=3)", 10, 3, 0.5)]:  # fmt: skip
        got = copydetect(args.copydetect_python, files, template, pairs, work, k, w)
        if got is None:
            print("copydetect: skipped (not importable; --copydetect-python PY)")
            break
        summary(klass, title, got[0], threshold, got[1], ranks)
    tools = sorted({t for v in ranks.values() for t in v}, key=lambda t: (t != "ours", t))
    print(f"\nrank of every true copy pair ({klass.assignment})")
    print(f"{'pair':<34} " + " ".join(f"{t[:16]:>16}" for t in tools))
    for (a, b), by in sorted(ranks.items(), key=lambda x: x[1].get("ours", 0)):
        print(f"{a + ' ~ ' + b:<34} " + " ".join(f"{by.get(t, '-'):>16}" for t in tools))


# ---------------------------------------------------------------------------------------------
# Time at 150 submissions
# ---------------------------------------------------------------------------------------------


def combined(klass: corpus.Class, folder: Path, n: int, seed: int = 0) -> None:
    """``n`` notebooks, each graded cell taken from a random corpus submission."""
    rng = random.Random(seed)
    names = sorted(klass.students)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        mix = corpus.Student(f"x{i:03d}", f"x{i:03d}")
        for gid in corpus.CLASSES[klass.assignment].CELLS:
            cell = klass.students[rng.choice(names)].cells[gid]
            # a comment of its own: no two notebooks share a cell, nothing is cached
            mix.cells[gid] = corpus.Cell([*cell.bodies[:-1], cell.bodies[-1] + f"# {i}\n"],
                                         cell.prefix)  # fmt: skip
        klass.students[mix.name] = mix
        klass.write(folder, [mix.name])
        del klass.students[mix.name]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timing(args, work: Path) -> None:
    klass = corpus.build("a3_transformer")
    n = args.submissions
    folder = work / "many"
    combined(klass, folder, n)
    subs = discover(folder, klass.assignment, [f"{klass.assignment}.ipynb"])
    start, cpu = time.perf_counter(), time.process_time()
    result = S.run(COURSE, klass.assignment, subs, work / "out")
    sim, sim_cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"\n## time: {n} A3 submissions")
    print(f"{'what':<46} {'n':>5} {'seconds':>8} {'per submission':>15}")
    print(f"{'similarity report (three files written)':<46} {n:>5} {sim:>8.2f} {sim / n:>15.3f}")
    print(f"  {len(result.flagged)} pairs flagged, {sim_cpu:.1f} CPU s")
    per = README_GRADE[1] / README_GRADE[0]
    print(f"{'grade --jobs 2 (README: 100 A4 in 205 s)':<46} {n:>5} {per * n:>8.1f} {per:>15.3f}")
    if args.grade:
        few = work / "few"
        few.mkdir()
        for p in sorted(folder.iterdir())[: args.grade]:
            shutil.copy(p, few / p.name)
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        cmd = [sys.executable, "-m", "autograder", "grade", klass.assignment,
               "--submissions", str(few), "--out", str(work / "gout"), "--jobs", "2",
               "--quiet", "--no-gradebook", "--no-similarity"]  # fmt: skip
        start, cpu = time.perf_counter(), _children_cpu()
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        g, g_cpu = time.perf_counter() - start, _children_cpu() - cpu
        if done.returncode not in (0, 3):
            print(done.stdout[-1500:], done.stderr[-1500:])
        else:
            per = g / args.grade
            what = f"grade --jobs 2 (measured on {args.grade}, A3)"
            print(f"{what:<46} {n:>5} {per * n:>8.1f} {per:>15.3f}")
            each = g_cpu / args.grade
            print(f"  grade: {each:.2f} CPU s per submission; similarity / grade in CPU time "
                  f"at {n}: {100 * sim_cpu / (each * n):.1f} %")  # fmt: skip
    print(
        f"similarity / grade at {n}: {100 * sim / (per * n):.1f} % of the wall time (budget 10 %)"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dolos", default=os.environ.get("DOLOS_DIR"),
                        help="a folder holding node_modules/@dodona/dolos-lib")  # fmt: skip
    parser.add_argument("--copydetect-python", help="an interpreter with copydetect")
    parser.add_argument("--submissions", type=int, default=150)
    parser.add_argument("--grade", type=int, default=0, help="grade this many to time grade")
    parser.add_argument("--skip-tools", action="store_true", help="only the timing")
    args = parser.parse_args()
    print(f"ours: threshold {S.THRESHOLD}, k={S.K}, window={S.WINDOW}; "
          "P, R at the tool's threshold; weak: weakest copy pair; indep: strongest independent "
          "pair; worst: the lowest rank of a copy pair; 1stI: the rank of the first "
          "independent pair")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-similarity-") as tmp:
        tmp = Path(tmp)
        if not args.skip_tools:
            for assignment in corpus.CLASSES:
                compare_tools(args, corpus.build(assignment), tmp / assignment)
                # a key shared by half the class: 4 of 8 hand in the reference word for word
                compare_tools(args, corpus.shared_key(assignment), tmp / f"{assignment}-shared")
        timing(args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
