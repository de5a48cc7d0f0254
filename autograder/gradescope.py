"""``gradescope``: a Gradescope autograder zip that runs the same hidden suite.

The zip holds ``setup.sh`` (builds a virtual environment with the course's pinned packages),
``run_autograder`` (grades ``/autograder/submission`` and writes
``/autograder/results/results.json``) and ``source/``: the grader, the course library, the
assignment's release notebooks and its hidden suite. Gradescope runs one container per
submission, which is how a course grades past one machine.
"""

from __future__ import annotations

import stat
import sys
import tomllib
import zipfile
from pathlib import Path

from .course import PACKAGE_ROOT, Course

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once when the autograder image is built.
set -euxo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
if ! command -v python3.11 >/dev/null 2>&1; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y software-properties-common
  add-apt-repository -y ppa:deadsnakes/ppa
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y python3.11 python3.11-venv
fi
python3.11 -m venv "$ROOT/venv"
"$ROOT/venv/bin/pip" install --upgrade pip
"$ROOT/venv/bin/pip" install -r "$ROOT/source/requirements.txt" \\
  --extra-index-url https://download.pytorch.org/whl/cpu
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for every submission: grade it, write results/results.json.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PY="${{AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}}"
[ -x "$PY" ] || PY=python3
mkdir -p "$ROOT/results"
cd "$ROOT/source"
"$PY" -m autograder --course-dir "$ROOT/source" grade {assignment} \\
  --submissions "$ROOT/submission" --student submission --no-gradebook --jobs 1 \\
  --out "$ROOT/results/grader" --gradescope "$ROOT/results/results.json"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  echo '{{"score": 0, "output": "The autograder failed; please tell the course staff."}}' \\
    > "$ROOT/results/results.json"
fi
exit $status
"""

RUNTIME_PACKAGES = ("torch", "numpy", "tqdm", "pytest", "matplotlib", "scikit-learn", "nbformat")


def requirements() -> str:
    pins: dict[str, str] = {}
    pyproject = PACKAGE_ROOT / "pyproject.toml"
    if pyproject.exists():
        project = tomllib.loads(pyproject.read_text())["project"]
        specs = project["dependencies"] + [
            s for group in project.get("optional-dependencies", {}).values() for s in group
        ]
        for spec in specs:
            name = spec.split("==")[0].strip().lower()
            pins[name] = spec
    import importlib.metadata as md

    lines = []
    for name in RUNTIME_PACKAGES:
        if name in pins:
            lines.append(pins[name])
        else:
            try:
                lines.append(f"{name}=={md.version(name)}")
            except md.PackageNotFoundError:
                lines.append(name)
    return "\n".join(lines) + "\n"


def _add_tree(
    zf: zipfile.ZipFile, folder: Path, prefix: str, *, skip: tuple[str, ...] = ()
) -> None:
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part in ("__pycache__", ".ipynb_checkpoints") for part in rel.parts):
            continue
        if rel.parts and rel.parts[0] in skip:
            continue
        if path.is_file() and path.suffix not in (".pyc",):
            zf.write(path, f"{prefix}/{rel.as_posix()}")


def _add_text(zf: zipfile.ZipFile, name: str, text: str, *, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
    zf.writestr(info, text)


def build(course: Course, assignment: str, out: Path, *, suite: Path | None = None) -> Path:
    suite = Path(suite or course.suite_dir(assignment))
    release = course.release_dir(assignment)
    for what, path in (("hidden suite", suite), ("release", release)):
        if not path.is_dir():
            raise SystemExit(f"error: no {what} for {assignment!r} at {path}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        _add_text(zf, "setup.sh", SETUP, executable=True)
        _add_text(zf, "run_autograder", RUN.format(assignment=assignment), executable=True)
        _add_text(zf, "source/requirements.txt", requirements())
        _add_tree(zf, PACKAGE_ROOT / "autograder", "source/autograder", skip=("tests", "samples"))
        _add_tree(zf, suite, f"source/autograder/tests/{assignment}")
        _add_tree(zf, PACKAGE_ROOT / "course_lib", "source/course_lib")
        _add_tree(zf, release, f"source/assignments/{assignment}")
    print(f"wrote {out} (upload it as the Gradescope autograder; python {sys.version.split()[0]})")
    return out
