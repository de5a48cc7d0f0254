"""Execute the book's pages in parallel into the execution cache that every build reads.

Jupyter Book 1 executes pages one after the other while Sphinx reads them; the pages train small
models on one thread each, so a 2-core machine sits half idle. This script runs first (``make
book``, ``make test``): it hands every page in the table of contents to jupyter-cache's
``local-parallel`` executor, one kernel per core, and stores the executed notebooks in the cache
that ``_config.yml`` names (``execute.cache``, or ``BOOK_EXECUTION_CACHE``; see
``_ext/build_cache.py``). The build then finds every page in the cache and executes nothing.

Pages are read with myst-nb's own reader, so the cache key (the code cells) is the one the build
computes. A page already in the cache is not run again. A page that fails here is left to the
build, which executes it again and reports the error in the usual way; this script never fails
a build by itself.

    .venv/bin/python book/scripts/execute_pages.py [--jobs 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path

import yaml

BOOK = Path(__file__).resolve().parent.parent
READER = {"name": "myst_nb_md", "type": "plugin"}


def toc_pages(book: Path = BOOK) -> list[Path]:
    """Every Markdown page the table of contents lists that is a notebook (jupytext header)."""
    toc = yaml.safe_load((book / "_toc.yml").read_text(encoding="utf-8"))
    files: list[str] = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []))
            walk(entry.get("chapters", []))

    walk(toc.get("parts", []))
    walk(toc.get("chapters", []))
    pages = []
    for name in files:
        path = book / f"{name}.md"
        if path.exists() and "kernelspec:" in path.read_text(encoding="utf-8")[:1000]:
            pages.append(path)
    return pages


def cache_path(book: Path = BOOK) -> Path:
    override = os.environ.get("BOOK_EXECUTION_CACHE")
    if override:
        return Path(override).resolve()
    config = yaml.safe_load((book / "_config.yml").read_text(encoding="utf-8"))
    path = Path((config.get("execute") or {}).get("cache") or "_build/.jupyter_cache")
    return path if path.is_absolute() else (book / path).resolve()


def execute(pages: list[Path], cache_dir: Path, jobs: int, timeout: int = 1200) -> list[Path]:
    """Execute the pages not yet in the cache at ``cache_dir``, ``jobs`` at a time; returns the
    pages that failed (left to the build)."""
    from jupyter_cache import get_cache
    from jupyter_cache.executors.basic import ExecutionWorkerLocalMProc, ProcessData

    cache = get_cache(cache_dir)
    for page in pages:
        cache.add_nb_to_project(str(page), read_data=READER)
    wanted = {str(p) for p in pages}
    todo = [r for r in cache.list_unexecuted() if r.uri in wanted]
    if not todo:
        print(f"execute_pages: all {len(pages)} pages are in the cache")
        return []
    print(f"execute_pages: running {len(todo)} of {len(pages)} pages, {jobs} at a time")
    start = time.perf_counter()
    # jupyter-cache's "local-parallel" worker, one page at a time per process (its own Pool.map
    # hands out pages in chunks, which leaves a core idle behind a chunk of slow pages).
    work = [ProcessData(r.pk, r.uri, cache, timeout, False) for r in todo]
    failed = []
    with multiprocessing.Pool(jobs) as pool:
        for status, uri in pool.imap_unordered(ExecutionWorkerLocalMProc(), work, chunksize=1):
            print(f"  {'ok' if status == 0 else 'error'} {uri}", flush=True)
            if status != 0:
                failed.append(Path(uri))
    print(
        f"execute_pages: {len(todo) - len(failed)} executed, {len(failed)} left to the build "
        f"(it runs them again and shows the error), {time.perf_counter() - start:.0f} s"
    )
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    args = parser.parse_args(argv)
    execute([p.resolve() for p in toc_pages()], cache_path(), args.jobs, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
