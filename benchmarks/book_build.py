"""How long the book takes to build: a cold build, a warm rebuild into a new folder, per page.

Runs the same commands as ``make book`` (``book/scripts/execute_pages.py``, which executes the
pages in parallel into the cache, then ``jupyter-book build book --warningiserror --nitpick
--keep-going``) three times, each into a folder of its own under ``--output``:

1. **cold**: a fresh output folder and an empty execution cache; every page is executed, then
   Sphinx renders everything (CI's ``make test`` on a fresh clone does this);
2. **warm**: a fresh output folder, the execution cache of the cold build: nothing is executed,
   Sphinx reads and writes every page (a build with ``--path-output`` elsewhere, from the cache
   that ``make book`` filled: ``execute.cache`` in ``book/_config.yml``,
   ``book/_ext/build_cache.py``);
3. **no-op**: the warm build's folder again, nothing changed. This is what ``make test`` does
   after ``make``: it builds into ``book/_build`` as ``make book`` does.

The cache is kept apart from the book's own (``BOOK_EXECUTION_CACHE``), so the benchmark neither
uses nor disturbs it. Per-page execution times come from the execution cache (jupyter-cache
records each notebook's execution seconds); the CPU seconds all the kernels used are sampled
with psutil. On an idle machine the two sums agree (each page runs on one thread); on a busy one
the execution time grows and the CPU time does not.

Targets (issue 17): cold build <= 8 min on 2 CPU cores; a warm rebuild <= 3 min (``make test``
after ``make`` now does the no-op build, issue 24). ``--cpus 2`` (the default where the
machine has more) pins the builds to two cores.

    .venv/bin/python benchmarks/book_build.py                  # a cold build takes minutes
    .venv/bin/python benchmarks/book_build.py --output /tmp/bb --keep
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
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
TARGETS = {"cold": 480.0, "warm": 180.0}
EXECUTED = re.compile(r"(?P<doc>\S+?\.(?:md|ipynb)): Executed notebook in (?P<s>[\d.]+) seconds")


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


def build(output: Path, log: Path, cache: Path, cpus: int | None = None) -> tuple[float, str]:
    """Run one build into ``output`` with the execution cache ``cache``; returns (wall seconds,
    combined log). Raises on failure. ``cpus`` pins the build (and its kernels) to that many cores.

    Afterwards ``build.kernel_cpu`` holds the CPU seconds that all its kernels used.
    """
    # As `make book`: the pages are executed in parallel into the cache first
    # (book/scripts/execute_pages.py), then the build renders them.
    build_book = [
        _jupyter_book(), "build", str(BOOK), "--warningiserror", "--nitpick", "--keep-going",
        "--path-output", str(output),
    ]  # fmt: skip
    execute = [sys.executable, str(BOOK / "scripts" / "execute_pages.py")]
    command = ["bash", "-c", f"{shlex.join(execute)} && {shlex.join(build_book)}"]
    env = {
        **os.environ,
        "PYTHONWARNINGS": os.environ.get("PYTHONWARNINGS", ""),
        "BOOK_EXECUTION_CACHE": str(cache),
    }
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = (lambda: os.sched_setaffinity(0, cores[:cpus])) if cpus and len(cores) > cpus else None
    start = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True,
                                   env=env, cwd=REPO, preexec_fn=pin)  # fmt: skip
        with KernelCPU(process.pid) as sampler:
            process.wait()
    seconds = time.perf_counter() - start
    text = log.read_text()
    # the pages run in parallel kernels (execute_pages.py), which cannot be told apart by page
    build.kernel_cpu = sum(sampler.in_start_order())
    done = process
    if done.returncode != 0:
        tail = "\n".join(text.splitlines()[-40:])
        raise SystemExit(f"build failed (exit {done.returncode}); full log: {log}\n{tail}")
    return seconds, text


def _page(path: str) -> str:
    """A page's name relative to the book's chapters folder (``02_attention_layer/01_x.md``)."""
    path = Path(path).resolve()
    for root in (BOOK / "chapters", BOOK):
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix()
    return path.name


def chapter_times(log_text: str) -> dict[str, float]:
    """{page: execution seconds} from a build log."""
    return {_page(m["doc"]): float(m["s"]) for m in EXECUTED.finditer(log_text)}


def cache_times(cache: Path) -> dict[str, float]:
    """{page: execution seconds} from a jupyter-cache folder (what myst-nb recorded)."""
    from jupyter_cache import get_cache

    times = {}
    for record in get_cache(str(cache)).list_cache_records():
        seconds = (record.data or {}).get("execution_seconds")
        if seconds is not None:
            times[_page(record.uri)] = float(seconds)
    return times


def _verdict(seconds: float, target: float) -> str:
    return "ok" if seconds <= target else "OVER"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="build folder (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the build folder")
    parser.add_argument("--cpus", type=int, default=2, help="cores to pin the builds to (0: all)")
    parser.add_argument("--book", type=Path, default=BOOK, help="the book's folder (default: book)")
    args = parser.parse_args(argv)
    globals()["BOOK"] = args.book.resolve()

    output = args.output or Path(tempfile.mkdtemp(prefix="book-build-"))
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    cache = output / "jupyter_cache"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    used = min(cores, args.cpus) if args.cpus else cores
    print(f"book build benchmark: {used} of {cores} CPU cores, load average {load:.1f} at start")
    print(f"output: {output}\n")
    try:
        cold, cold_log = build(output / "cold", output / "cold.log", cache, args.cpus)
        kernel_cpu = build.kernel_cpu
        per_page = cache_times(cache) or chapter_times(cold_log)
        warm, warm_log = build(output / "warm", output / "warm.log", cache, args.cpus)
        noop, _ = build(output / "warm", output / "noop.log", cache, args.cpus)
    finally:
        if not args.keep and args.output is None:
            shutil.rmtree(output, ignore_errors=True)
    reexecuted = chapter_times(warm_log)

    print(f"{'page':<48} {'execution (s)':>14}")
    for name, seconds in sorted(per_page.items()):
        print(f"{name:<48} {seconds:>14.1f}")
    print(f"{'all pages (' + str(len(per_page)) + ')':<48} {sum(per_page.values()):>14.1f}")
    print(f"{'CPU time of their kernels (sampled)':<48} {kernel_cpu:>14.1f}")
    print()
    print(f"{'build':<48} {'wall (s)':>14}  target")
    print(f"{'cold (empty cache, fresh folder)':<48} {cold:>14.1f}  <= {TARGETS['cold']:.0f} s "
          f"on 2 cores: {_verdict(cold, TARGETS['cold'])}")  # fmt: skip
    print(f"{'warm (cache kept, fresh folder: make test)':<48} {warm:>14.1f}  <= "
          f"{TARGETS['warm']:.0f} s: {_verdict(warm, TARGETS['warm'])}")  # fmt: skip
    print(f"{'no-op (nothing changed)':<48} {noop:>14.1f}")
    if reexecuted:
        print(f"\nwarning: the warm rebuild re-executed {sorted(reexecuted)}")
    ok = cold <= TARGETS["cold"] and warm <= TARGETS["warm"] and not reexecuted
    print("\nall targets met" if ok else "\nsome targets missed (see OVER above)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
