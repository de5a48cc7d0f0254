"""Grading throughput: ``nbgrader autograde`` against ``python -m autograder grade --jobs 2``.

Both grade the same 40 submissions of the grader's fixture assignment (tests/fixtures/grader:
reference, partial, wrong-scaling and blank notebooks), in nbgrader's ``submitted/`` layout of a
throwaway course folder, in one run. nbgrader starts a kernel per notebook and executes every cell
(imports, visible checks, demos); the grader forks warm sandboxed workers and runs the hidden
suite. The table gives submissions per minute and the ratio (target: >= 4x).

    .venv/bin/python benchmarks/grading.py [--submissions 40] [--jobs 2] [--skip-nbgrader]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "grader"))

import corpus  # noqa: E402
import nbformat  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build(root: Path, n: int) -> None:
    corpus.make_course(root)
    release = nbformat.read(
        root / "assignments" / corpus.ASSIGNMENT / corpus.NOTEBOOK, as_version=4
    )
    ref = corpus.reference_sources()
    wrong = ref["attention"].replace("/ math.sqrt(q.shape[-1])", "/ q.shape[-1]")
    kinds = [
        ("reference", {"attention": ref["attention"], "multihead": ref["multihead"]}),
        ("partial", {"attention": ref["attention"]}),
        ("wrong_scale", {"attention": wrong, "multihead": ref["multihead"]}),
        ("blank", {}),
    ]
    weights = [0.5, 0.25, 0.125, 0.125]
    plan = [k for k, w in zip(kinds, weights) for _ in range(round(w * n))][:n]
    while len(plan) < n:
        plan.append(kinds[0])
    for i, (_, sources) in enumerate(plan):
        folder = root / "grading" / "submitted" / f"student{i:02d}" / corpus.ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(corpus._with_solutions(release, **sources), folder / corpus.NOTEBOOK)


def run(cmd: list[str], cwd: Path, label: str) -> tuple[float, float]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env["NBGRADER_STOCK_AUTOGRADE"] = "1"  # the stock in-kernel autograde, for the comparison
    cpu, start = cpu_seconds(), time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{label} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return wall, cpu_seconds() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--submissions", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-nbgrader", action="store_true")
    args = parser.parse_args()
    n = args.submissions
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        root = Path(tmp) / "course"
        print(f"building a course with {n} submissions in {root} ...", flush=True)
        build(root, n)
        rows = []
        if not args.skip_nbgrader:
            print("nbgrader autograde (serial, one kernel per notebook) ...", flush=True)
            wall, cpu = run(
                [sys.executable, "-m", "nbgrader", "autograde", corpus.ASSIGNMENT, "--force"],
                root,
                "nbgrader autograde",
            )
            rows.append(("nbgrader autograde", wall, cpu))
        print(f"python -m autograder grade --jobs {args.jobs} ...", flush=True)
        wall, cpu = run(
            [sys.executable, "-m", "autograder", "--course-dir", str(root), "grade",
             corpus.ASSIGNMENT, "--jobs", str(args.jobs), "--quiet", "--out",
             str(Path(tmp) / "out")],
            REPO,
            "autograder grade",
        )  # fmt: skip
        rows.append((f"autograder grade --jobs {args.jobs}", wall, cpu))
        shutil.rmtree(root, ignore_errors=True)
    base, base_cpu = rows[0][1], rows[0][2]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{n} submissions, {os.cpu_count()} CPUs, load average now {load}")
    print(
        f"{'grader':<28} {'wall s':>8} {'CPU s':>8} {'subs/min':>9} {'speed-up':>9} "
        f"{'CPU ratio':>10}"
    )
    for label, wall, cpu in rows:
        print(
            f"{label:<28} {wall:8.1f} {cpu:8.1f} {60 * n / wall:9.1f} {base / wall:8.1f}x "
            f"{base_cpu / cpu:9.1f}x"
        )
    print(
        "(CPU s counts every process of the run; on a busy machine the CPU ratio is the "
        "steadier measure of work saved)"
    )
    if len(rows) == 2:
        verdict = "meets" if base / rows[1][1] >= 4 else "misses"
        print(f"\ntarget >= 4x nbgrader's throughput: {verdict} it ({base / rows[1][1]:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
