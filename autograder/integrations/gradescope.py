"""``gradescope``: a Gradescope autograder zip that runs the same hidden suite.

Gradescope unpacks the uploaded zip *into* ``/autograder/source``, runs ``setup.sh`` there once
when it builds the image, copies ``run_autograder`` to ``/autograder/run_autograder`` and runs it
for every submission (the student's files in ``/autograder/submission``, who submitted in
``/autograder/submission_metadata.json``; it reads ``/autograder/results/results.json``). So the
zip's top level is::

    setup.sh  run_autograder  requirements.txt  gradescope.json
    autograder/  (the grader, with tests/<assignment>/ holding only this hidden suite)
    course_lib/  assignments/<assignment>/  (the release notebooks: the trusted reference)

``setup.sh`` installs Python 3.11 (the course's version: ``tomllib``, the pinned wheels) from the
deadsnakes PPA when the image lacks it (Gradescope's Ubuntu 22.04 base ships 3.10; on a 24.04 base
``python3.11`` is also taken from the PPA), makes a virtual environment in ``/autograder/venv`` and
installs ``requirements.txt`` (the course's exact pins): torch first, from the CPU wheel index
only (``--index-url``; setup fails, loudly, if that index cannot be reached, rather than take
PyPI's CUDA build), then the rest from PyPI. ``AUTOGRADER_SETUP_PYTHON`` and
``AUTOGRADER_TORCH_INDEX`` replace the interpreter and the index (a test runs it offline).

``run_autograder`` runs ``python -m autograder gradescope-run``, which grades the submission under
the student's Gradescope identity (``users[0].id``, else the e-mail: each student draws their own
seeded inputs), applies the per-test visibility from ``gradescope.json``, adds the written answers
(rendered as HTML, for Gradescope's manual grading) and writes ``results.json``. If anything
fails, the student gets a 0 with a message rather than Gradescope's generic error. Set
``AUTOGRADER_ROOT`` to run it outside Gradescope (a scratch root with ``source/`` and
``submission/``), and ``AUTOGRADER_PYTHON`` to use another interpreter than the venv's.

Seeds: each zip carries its own secret salt (``gradescope.json``'s ``salt``: 32 random bytes drawn
when the zip is built, never in the repository), so the inputs a student's tests draw cannot be
computed from public data (the grader's source, the student's id). Where Gradescope's
``submission_metadata.json`` gives the attempt (``previous_submissions``), the salt used is
derived from the zip's and the attempt's number, so each resubmission draws new inputs and
harvesting expected values across attempts gains nothing. Workers never see it (the zygote
clears the environment; ``/autograder/source`` is outside the sandbox's root, or closed to the
workers' uid in fallback mode as root).

Visibility (Gradescope's ``visible``, ``after_due_date``, ``after_published`` or ``hidden``): a
default for every test plus ``fnmatch`` patterns on the test's node id, from
``autograder/suites/<assignment>/gradescope.json`` (``{"visibility": "visible", "tests":
{"*hidden*": "after_due_date"}}``) and the command's ``--visibility`` / ``--test-visibility``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import secrets
import stat
import tomllib
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path

from autograder.course.layout import PACKAGE_ROOT, Course, SetupError

LEVELS = ("visible", "after_due_date", "after_published", "hidden")
CONFIG = "gradescope.json"

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, in /autograder/source (the unpacked zip), when it builds the image.
# Python 3.11 is the course's version; Gradescope's Ubuntu 22.04 base ships 3.10, so take 3.11
# from the deadsnakes PPA unless the image already has it.
set -euxo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${AUTOGRADER_SETUP_PYTHON:-python3.11}"
if ! command -v "$PY" >/dev/null 2>&1; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y software-properties-common
  add-apt-repository -y ppa:deadsnakes/ppa
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y python3.11 python3.11-venv
fi
TORCH_INDEX="${AUTOGRADER_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
"$PY" -m venv "$ROOT/venv"
PIP=("$ROOT/venv/bin/python" -m pip --disable-pip-version-check)
# torch alone, from the CPU wheel index only: --index-url, never --extra-index-url, and no pip
# configuration (an extra index or find-links in a pip.conf or PIP_* variable would let pip take
# PyPI's multi-GB CUDA build when the CPU index is unreachable)
TORCH="$(grep -E '^torch==' "$HERE/requirements.txt")"
if ! PIP_CONFIG_FILE=/dev/null "${PIP[@]}" --isolated install --index-url "$TORCH_INDEX" "$TORCH"
then
  echo "setup.sh: torch could not be installed from the CPU wheel index $TORCH_INDEX;" >&2
  echo "refusing to fall back on PyPI's CUDA build" >&2
  exit 1
fi
# the rest from PyPI; torch is already satisfied, so nothing here can replace it
"${PIP[@]}" install -r "$HERE/requirements.txt"
"$ROOT/venv/bin/python" -c "import sys, torch; sys.exit(torch.version.cuda is not None)" || {
  echo "setup.sh: a CUDA build of torch was installed; the course runs on the CPU build" >&2
  exit 1
}
"""

RUN = """#!/usr/bin/env bash
# Gradescope copies this to /autograder/run_autograder and runs it for every submission.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
[ -x "$PY" ] || PY=python3
mkdir -p "$ROOT/results"
cd "$ROOT/source"
export PYTHONPATH="$ROOT/source"
"$PY" -m autograder --course-dir "$ROOT/source" gradescope-run --root "$ROOT"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  echo '{"score": 0, "output": "The autograder failed; please tell the course staff."}' \\
    > "$ROOT/results/results.json"
fi
exit $status
"""

RUNTIME_PACKAGES = ("torch", "numpy", "tqdm", "pytest", "matplotlib", "scikit-learn", "nbformat",
                    "mistune")  # fmt: skip


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


def visibility_config(
    suite: Path, default: str | None = None, patterns: list[str] | None = None
) -> dict:
    """The suite's ``gradescope.json`` overridden by ``default`` and ``PATTERN=LEVEL`` strings."""
    config: dict = {"visibility": "visible", "tests": {}}
    path = suite / CONFIG
    if path.exists():
        loaded = json.loads(path.read_text())
        config["visibility"] = loaded.get("visibility", "visible")
        config["tests"].update(loaded.get("tests", {}))
    if default:
        config["visibility"] = default
    for item in patterns or []:
        pattern, _, level = item.rpartition("=")
        if not pattern:
            raise SetupError(f"--test-visibility wants PATTERN=LEVEL, got {item!r}")
        config["tests"][pattern] = level
    for level in [config["visibility"], *config["tests"].values()]:
        if level not in LEVELS:
            raise SetupError(f"visibility {level!r} is not one of {', '.join(LEVELS)}")
    return config


def build(
    course: Course,
    assignment: str,
    out: Path,
    *,
    suite: Path | None = None,
    visibility: str | None = None,
    test_visibility: list[str] | None = None,
) -> Path:
    suite = Path(suite or course.suite_dir(assignment))
    release = course.release_dir(assignment)
    for what, path in (("hidden suite", suite), ("release", release)):
        if not path.is_dir():
            raise SetupError(f"no {what} for {assignment!r} at {path}")
    config = {"assignment": assignment, **visibility_config(suite, visibility, test_visibility)}
    config["salt"] = secrets.token_hex(32)  # this zip's own: drawn now, never in the repository
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        _add_text(zf, "setup.sh", SETUP, executable=True)
        _add_text(zf, "run_autograder", RUN, executable=True)
        _add_text(zf, "requirements.txt", requirements())
        _add_text(zf, CONFIG, json.dumps(config, indent=1) + "\n")
        _add_tree(zf, PACKAGE_ROOT / "autograder", "autograder", skip=("suites", "samples"))
        _add_tree(zf, suite, f"autograder/suites/{assignment}")
        _add_tree(zf, PACKAGE_ROOT / "course_lib", "course_lib")
        _add_tree(zf, release, f"assignments/{assignment}")
    print(f"wrote {out}: upload it as the Gradescope autograder (Ubuntu 22.04 base, Python 3.11)")
    return out


# ---------------------------------------------------------------------------------------------
# Inside Gradescope: `python -m autograder gradescope-run`
# ---------------------------------------------------------------------------------------------


def student_identity(root: Path) -> str:
    """The submitter's Gradescope user id (else e-mail, else name); ``submission`` if unknown."""
    try:
        meta = json.loads((root / "submission_metadata.json").read_text())
        user = (meta.get("users") or [{}])[0]
        for key in ("id", "email", "name"):
            if user.get(key) not in (None, ""):
                return f"gs-{user[key]}"
    except (OSError, ValueError, AttributeError, IndexError, TypeError):
        pass
    return "submission"


def attempt_number(root: Path) -> int | None:
    """Which attempt this submission is (0 for the first), from the number of previous
    submissions Gradescope lists in ``submission_metadata.json``; None where it lists none."""
    try:
        meta = json.loads((root / "submission_metadata.json").read_text())
        previous = meta.get("previous_submissions")
    except (OSError, ValueError, AttributeError):
        return None
    return len(previous) if isinstance(previous, list) else None


def attempt_salt(config: dict, attempt: int | None) -> str:
    """The salt the seeds are drawn with: the zip's own, and the attempt's number where known."""
    salt = config.get("salt")
    if not isinstance(salt, str) or not re.fullmatch(r"[0-9a-f]{64}", salt):
        raise SetupError(
            f"{CONFIG} in the autograder zip has no valid salt (64 hex digits): without it every "
            "student's seeds are computable from public data; rebuild the zip with `python -m "
            "autograder gradescope <assignment>` and upload it again"
        )
    if attempt is None:
        return salt
    return hashlib.sha256(f"{salt}\0attempt {attempt}".encode()).hexdigest()


def level_for(nodeid: str, config: dict) -> str:
    level = config.get("visibility", "visible")
    for pattern, value in config.get("tests", {}).items():
        if fnmatch.fnmatch(nodeid, pattern) or fnmatch.fnmatch(nodeid.split("::")[-1], pattern):
            level = value
    return level


def finish_results(results: dict, config: dict, written_html: str | None) -> dict:
    # the whole result (score included) follows the default level, as each test does
    results["visibility"] = config.get("visibility", "visible")
    for test in results.get("tests", []):
        test["visibility"] = level_for(test["name"], config)
    if written_html:
        name = "Written answers (graded by hand)"
        results.setdefault("tests", []).append(
            {
                "name": name,
                "score": 0,
                "max_score": 0,
                "status": "passed",
                "output": written_html,
                "output_format": "html",
                "visibility": level_for(name, config),  # like every test: --visibility
            }
        )
    return results


def run(root: Path, grade: Callable[[list[str]], int]) -> int:
    """Grade the one submission in ``root``; ``grade`` is the command line's entry point (the
    command layer passes it in, so that this integration never imports the command line)."""
    source = root / "source"
    results_dir = root / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    results_path = results_dir / "results.json"
    config = json.loads((source / CONFIG).read_text())
    assignment = config["assignment"]
    student = student_identity(root)
    os.environ["AUTOGRADER_SALT"] = attempt_salt(config, attempt_number(root))  # for `grade`
    from autograder.sandbox.namespaces import available

    # Gradescope runs each submission in a throwaway container that holds only this zip (no
    # other student's work, no gradebook); where its Docker profile forbids namespaces, the
    # fallback is asked for by name here, and the grade output says what it cannot guarantee.
    sandbox = os.environ.get("AUTOGRADER_SANDBOX") or ("auto" if available() else "fallback")
    status = grade(
        ["--course-dir", str(source), "grade", assignment,
         "--submissions", str(root / "submission"), "--student", student, "--no-gradebook",
         "--jobs", "1", "--quiet", "--out", str(results_dir / "grader"),
         "--sandbox", sandbox, "--gradescope", str(results_path)]
    )  # fmt: skip
    if not results_path.exists():
        return status or 1
    written = None
    try:
        from autograder.tools.written import answers_html

        written = answers_html(Course(source), assignment, root / "submission", student)
        if written:
            (results_dir / "written_answers.html").write_text(written)
    except Exception:  # the written answers must never cost the autograded score
        traceback.print_exc()
    results = finish_results(json.loads(results_path.read_text()), config, written)
    results_path.write_text(json.dumps(results, indent=1))
    return status
