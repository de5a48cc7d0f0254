"""Grading throughput: ``nbgrader autograde`` against ``python -m autograder grade --jobs 2``.

Both grade the same submissions, in nbgrader's ``submitted/`` layout of a throwaway course folder,
in one run: by default 40 of the grader's fixture assignment (tests/grader/fixtures/grader:
reference,
partial, wrong-scaling and blank notebooks); with ``--assignment a2_self_attention`` copies of a
real assignment's reference, blank release and samples (autograder/samples/<name>/).
nbgrader starts a kernel per notebook and executes every cell
(imports, visible checks, demos); the grader forks warm sandboxed workers and runs the hidden
suite. The table gives submissions per minute and the ratio (target: >= 8x), the load average
during each run, and how many submissions each left ungraded: nbgrader's whole run is timed
whatever its exit status (it exits 1 when one notebook kills its kernel).

    .venv/bin/python benchmarks/grading.py [--submissions 40] [--jobs 2] [--skip-nbgrader]
    .venv/bin/python benchmarks/grading.py --assignment a2_self_attention --submissions 100
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # time_limits, which the corpus runs commands with
sys.path.insert(0, str(REPO / "tests" / "grader" / "fixtures" / "grader"))

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


def build_real(root: Path, name: str, n: int) -> None:
    """A throwaway course holding one real assignment, released, and ``n`` submissions: half the
    reference, then the blank release and each sample in turn."""
    root.mkdir(parents=True)
    shutil.copy(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
    shutil.copytree(REPO / "solutions" / name, root / "solutions" / name)
    shutil.copytree(REPO / "autograder" / "suites" / name, root / "autograder" / "suites" / name)
    shutil.copytree(REPO / "autograder" / "samples" / name, root / "autograder" / "samples" / name)
    run([sys.executable, "-m", "autograder", "--course-dir", str(root), "release", name], REPO,
        "release")  # fmt: skip
    notebook = f"{name}.ipynb"
    others = [root / "assignments" / name / notebook]
    others += sorted((root / "autograder" / "samples" / name).rglob("*.ipynb"))
    for i in range(n):
        reference = root / "solutions" / name / notebook
        source = reference if i % 2 == 0 else others[i // 2 % len(others)]
        folder = root / "grading" / "submitted" / f"student{i:03d}" / name
        folder.mkdir(parents=True)
        shutil.copy(source, folder / notebook)


def run(cmd: list[str], cwd: Path, label: str, *, strict: bool = True) -> dict:
    """Time ``cmd``: wall and CPU seconds, its exit status and output. ``strict``: stop the
    benchmark if it fails; otherwise the time counts whatever the exit status (nbgrader exits 1
    when one notebook of the batch fails, e.g. a sample that kills its kernel)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env["NBGRADER_STOCK_AUTOGRADE"] = "1"  # the stock in-kernel autograde, for the comparison
    load = os.getloadavg()[0]
    cpu, start = cpu_seconds(), time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if strict and out.returncode not in (0, 3):  # 3: the run finished, some rows are faults
        raise SystemExit(f"{label} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return {"wall": wall, "cpu": cpu_seconds() - cpu, "rc": out.returncode,
            "load": (load + os.getloadavg()[0]) / 2, "log": out.stdout + out.stderr}  # fmt: skip


ERROR_NAMES = re.compile(r"\b(DeadKernelError|CellTimeoutError|CellExecutionError|TimeoutError)\b")


def nbgrader_failures(root: Path, name: str, n: int, log: str) -> tuple[int, str]:
    """How many submissions nbgrader left without an autograded notebook (it removes the output
    of a failed one), and the errors its log names most often."""
    done = sum(1 for _ in (root / "grading" / "autograded").glob(f"*/{name}/*.ipynb"))
    causes: dict[str, int] = {}
    for error in ERROR_NAMES.findall(log):
        causes[error] = causes.get(error, 0) + 1
    said = ", ".join(f"{k} x{v}" for k, v in sorted(causes.items(), key=lambda kv: -kv[1]))
    return n - done, said


def autograder_failures(out: Path) -> tuple[int, str]:
    """Rows of grades.csv whose status is not ``graded`` (a broken sample is graded 0 with its
    reason: only a row nothing could be graded for counts)."""
    import csv

    path = out / "grades.csv"
    rows = list(csv.DictReader(open(path, encoding="utf-8"))) if path.exists() else []
    failed = [r for r in rows if r["status"] != "graded"]
    return len(failed), ", ".join(sorted({r["status"] for r in failed}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--submissions", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-nbgrader", action="store_true")
    parser.add_argument("--assignment", help="a real assignment (default: the fixture)")
    args = parser.parse_args()
    n = args.submissions
    name = args.assignment or corpus.ASSIGNMENT
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        root = Path(tmp) / "course"
        print(f"building a course with {n} submissions in {root} ...", flush=True)
        if args.assignment:
            build_real(root, name, n)
        else:
            build(root, n)
        rows = []
        if not args.skip_nbgrader:
            print("nbgrader autograde (serial, one kernel per notebook) ...", flush=True)
            got = run([sys.executable, "-m", "nbgrader", "autograde", name, "--force"], root,
                      "nbgrader autograde", strict=False)  # fmt: skip
            failed, causes = nbgrader_failures(root, name, n, got["log"])
            rows.append(("nbgrader autograde", got, failed, causes))
            print(f"  {got['wall']:.1f} s wall, {got['cpu']:.1f} CPU s, exit {got['rc']}, "
                  f"{failed} failed {causes}", flush=True)  # fmt: skip
        # a snapshot of the grader: it refuses to write results when its own files change during
        # the run, as they may on a machine where the repository is being edited
        snapshot = Path(tmp) / "grader"
        shutil.copytree(REPO / "autograder", snapshot / "autograder",
                        ignore=shutil.ignore_patterns("__pycache__", "samples"))  # fmt: skip
        print(f"python -m autograder grade --jobs {args.jobs} ...", flush=True)
        out = Path(tmp) / "out"
        got = run(
            [sys.executable, "-m", "autograder", "--course-dir", str(root), "grade",
             name, "--jobs", str(args.jobs), "--quiet", "--out", str(out)],
            snapshot,
            "autograder grade",
        )  # fmt: skip
        rows.append((f"autograder grade --jobs {args.jobs}", got, *autograder_failures(out)))
        shutil.rmtree(root, ignore_errors=True)
    base, base_cpu = rows[0][1]["wall"], rows[0][1]["cpu"]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{n} submissions of {name}, {os.cpu_count()} CPUs, load average now {load}")
    print(
        f"{'grader':<28} {'wall s':>8} {'CPU s':>8} {'subs/min':>9} {'speed-up':>9} "
        f"{'CPU ratio':>10} {'load':>5} {'exit':>4} {'failed':>6}"
    )
    for label, got, failed, causes in rows:
        wall, cpu = got["wall"], got["cpu"]
        print(
            f"{label:<28} {wall:8.1f} {cpu:8.1f} {60 * n / wall:9.1f} {base / wall:8.1f}x "
            f"{base_cpu / cpu:9.1f}x {got['load']:5.1f} {got['rc']:>4} {failed:>6}"
            + (f"  ({causes})" if causes else "")
        )
    print(
        "(CPU s counts every process of the run; on a busy machine the CPU ratio is the "
        "steadier measure of work saved. load: the 1-minute load average, mean of its start "
        "and end. failed: submissions left without a grade (nbgrader: no autograded notebook; "
        "the grader: a row whose status is not `graded`); the time counts them all)"
    )
    if len(rows) == 2:
        ratio = base / rows[1][1]["wall"]
        verdict = "meets" if ratio >= 8 else "misses"
        print(f"\ntarget >= 8x nbgrader's throughput: {verdict} it ({ratio:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
