"""Command line: ``python -m course_lib info`` (environment report) and ``summary``."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import json
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (distribution name, import name, needed for) — what a complete course environment has.
REQUIRED = [
    ("torch", "torch", "everything"),
    ("numpy", "numpy", "everything"),
    ("matplotlib", "matplotlib", "plots"),
    ("tqdm", "tqdm", "progress bars"),
    ("scikit-learn", "sklearn", "the digits data set"),
    ("jupyterlab", "jupyterlab", "opening assignments"),
    ("nbgrader", "nbgrader", "assignments and grading"),
    ("jupyter-book", "jupyter_book", "building the book"),
    ("transformers", "transformers", "oracle tests and loading real checkpoints"),
]


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _device_line() -> str:
    try:
        import torch
    except ImportError:
        return "unknown (torch is not installed)"
    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda})"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps (Apple GPU)"
    return f"cpu ({torch.get_num_threads()} threads)"


def info() -> int:
    """Print versions, the device that would be used and whether the environment is complete."""
    print("Attention and Transformers: environment report")
    print(f"  python       {platform.python_version()} ({sys.executable})")
    print(f"  platform     {platform.platform()}")
    import course_lib

    print(f"  course_lib   {course_lib.__version__} ({Path(course_lib.__file__).parent})")
    missing = []
    for dist, module, purpose in REQUIRED:
        version = _version(dist)
        ok = version is not None and importlib.util.find_spec(module) is not None
        if not ok:
            missing.append(f"{dist} (for {purpose})")
        print(f"  {dist:<12} {version if ok else 'MISSING'}")
    print(f"  device       {_device_line()}")
    if missing:
        print("environment: INCOMPLETE, missing " + ", ".join(missing))
        print("  fix: run `make` in the course repository, or `pip install -e '.[dev]'`")
        return 1
    print("environment: complete")
    return 0


def summary() -> int:
    """Summarise what `make` produced and where (printed at the end of the main job)."""
    print("\n=== Course build summary ===")
    index = REPO / "book" / "_build" / "html" / "index.html"
    pages = list((REPO / "book" / "_build" / "html").rglob("*.html")) if index.exists() else []
    status = f"{index.relative_to(REPO)} ({len(pages)} pages)" if index.exists() else "not built"
    print(f"book:        {status}")
    releases = sorted(p.name for p in (REPO / "assignments").glob("a*_*") if p.is_dir())
    print(f"releases:    {', '.join(releases) if releases else 'none yet'} (in assignments/)")
    report = REPO / "grading" / "selfgrade.json"
    if report.exists():
        rows = json.loads(report.read_text())
        print("self-grade:")
        for row in rows:
            mark = "ok" if row.get("ok") else "MISMATCH"
            print(
                f"  {row['assignment']:<24} {row['submission']:<12} "
                f"{row['score']:>6.1f}/{row['max_score']:<6.1f} "
                f"expected {row['expected']:<6} {mark}"
            )
    else:
        print("self-grade:  no assignments graded yet")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, device and whether the environment is complete")
    sub.add_parser("summary", help="what `make` built and where")
    args = parser.parse_args(argv)
    return {"info": info, "summary": summary}[args.command]()


if __name__ == "__main__":
    sys.exit(main())
