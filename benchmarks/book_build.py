"""How long the book takes to build: per-chapter execution, a cold build, a cached rebuild.

Runs the same command as ``make book`` (``jupyter-book build book --warningiserror --nitpick
--keep-going``) into a fresh output folder, so nothing is cached, and then twice more:

1. **cold**: empty output folder; every chapter is executed, then Sphinx renders everything;
2. **cached**: the HTML and Sphinx's doctrees are deleted but the execution cache is kept, as
   after a change to the book's text or theme: no notebook is executed;
3. **no-op**: nothing changed at all (the rebuild a writer sees most often).

Per-chapter execution times come from the cold build's log ("Executed notebook in N seconds"),
and the CPU seconds each chapter's kernel used are sampled with psutil while it runs. On an idle
machine the two agree (the chapters run on one thread); on a busy one the wall time grows and the
CPU time does not, so the CPU column is the better estimate of the time on idle cores.

Targets (issue 9): every chapter <= 3 min on 2 CPU cores, cold build <= 15 min, cached rebuild
<= 60 s. Timings are wall-clock and depend on the machine and on its load; the script prints the
CPU count and load average so that a reader can tell a busy machine from a slow build.

    .venv/bin/python benchmarks/book_build.py                  # a cold build takes minutes
    .venv/bin/python benchmarks/book_build.py --output /tmp/bb --keep
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
BOOK = REPO / "book"
TARGETS = {"chapter": 180.0, "cold": 900.0, "cached": 60.0}
EXECUTED = re.compile(r"(?P<doc>\S+?\.(?:md|ipynb)): Executed notebook in (?P<s>[\d.]+) seconds")
EXECUTING = re.compile(r"(?P<doc>\S+?\.(?:md|ipynb)): Executing notebook")


class KernelCPU:
    """Samples the CPU time of every Jupyter kernel started below ``root_pid`` until stopped."""

    def __init__(self, root_pid: int, interval: float = 0.25) -> None:
        self.root, self.interval = psutil.Process(root_pid), interval
        self.kernels: dict[int, tuple[float, float]] = {}  # pid -> (create time, cpu seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                children = self.root.children(recursive=True)
            except psutil.Error:
                return
            for child in children:
                try:
                    if "ipykernel" not in " ".join(child.cmdline()):
                        continue
                    cpu = child.cpu_times()
                    self.kernels[child.pid] = (child.create_time(), cpu.user + cpu.system)
                except psutil.Error:
                    continue  # the kernel just exited; its last sample stands
            self._stop.wait(self.interval)

    def __enter__(self) -> KernelCPU:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def in_start_order(self) -> list[float]:
        return [cpu for _, cpu in sorted(self.kernels.values())]


def _jupyter_book() -> str:
    local = Path(sys.executable).parent / "jupyter-book"
    return str(local) if local.exists() else "jupyter-book"


def build(output: Path, log: Path) -> tuple[float, str]:
    """Run one build into ``output``; returns (wall seconds, combined log). Raises on failure.

    Afterwards ``build.kernel_cpu`` maps each executed chapter to its kernel's CPU seconds.
    """
    command = [
        _jupyter_book(), "build", str(BOOK), "--warningiserror", "--nitpick", "--keep-going",
        "--path-output", str(output),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONWARNINGS": os.environ.get("PYTHONWARNINGS", "")}
    start = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True,
                                   env=env, cwd=REPO)  # fmt: skip
        with KernelCPU(process.pid) as sampler:
            process.wait()
    seconds = time.perf_counter() - start
    text = log.read_text()
    executing = [Path(m["doc"]).name for m in EXECUTING.finditer(text)]
    build.kernel_cpu = dict(zip(executing, sampler.in_start_order()))
    done = process
    if done.returncode != 0:
        tail = "\n".join(text.splitlines()[-40:])
        raise SystemExit(f"build failed (exit {done.returncode}); full log: {log}\n{tail}")
    return seconds, text


def chapter_times(log_text: str) -> dict[str, float]:
    """{chapter file name: execution seconds} from a build log."""
    return {Path(m["doc"]).name: float(m["s"]) for m in EXECUTED.finditer(log_text)}


def _verdict(seconds: float, target: float) -> str:
    return "ok" if seconds <= target else "OVER"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="build folder (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the build folder")
    args = parser.parse_args(argv)

    output = args.output or Path(tempfile.mkdtemp(prefix="book-build-"))
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"book build benchmark: {os.cpu_count()} CPUs, load average {load:.1f} at start")
    print(f"output: {output}\n")
    try:
        cold, cold_log = build(output, output / "cold.log")
        per_chapter = chapter_times(cold_log)
        kernel_cpu = dict(build.kernel_cpu)
        built = output / "_build"
        for stale in ("html", ".doctrees", "jupyter_execute"):
            shutil.rmtree(built / stale, ignore_errors=True)
        cached, cached_log = build(output, output / "cached.log")
        noop, _ = build(output, output / "noop.log")
    finally:
        if not args.keep and args.output is None:
            shutil.rmtree(output, ignore_errors=True)
    reexecuted = chapter_times(cached_log)

    print(f"{'chapter':<34} {'execution (s)':>14} {'kernel CPU (s)':>15}  "
          f"target <= {TARGETS['chapter']:.0f} s")  # fmt: skip
    for name, seconds in sorted(per_chapter.items()):
        cpu = kernel_cpu.get(name, float("nan"))
        verdicts = (
            f"wall {_verdict(seconds, TARGETS['chapter'])}, CPU {_verdict(cpu, TARGETS['chapter'])}"
        )
        print(f"{name:<34} {seconds:>14.1f} {cpu:>15.1f}  {verdicts}")
    print(
        f"{'all chapters':<34} {sum(per_chapter.values()):>14.1f} {sum(kernel_cpu.values()):>15.1f}"
    )
    print()
    print(f"{'build':<34} {'wall (s)':>14}")
    print(f"{'cold (everything executed)':<34} {cold:>14.1f}  target <= {TARGETS['cold']:.0f} s: "
          f"{_verdict(cold, TARGETS['cold'])}")  # fmt: skip
    print(f"{'cached (execution cache kept)':<34} {cached:>14.1f}  target <= "
          f"{TARGETS['cached']:.0f} s: {_verdict(cached, TARGETS['cached'])}")  # fmt: skip
    print(f"{'no-op (nothing changed)':<34} {noop:>14.1f}")
    if reexecuted:
        print(f"\nwarning: the cached rebuild re-executed {sorted(reexecuted)}")
    over = [n for n, s in per_chapter.items() if s > TARGETS["chapter"]]
    ok = not over and cold <= TARGETS["cold"] and cached <= TARGETS["cached"]
    print("\nall targets met" if ok else "\nsome targets missed (see OVER above)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
