"""Intake: finding the submissions in a folder (nbgrader's ``submitted/``, per-student folders,
loose notebooks) and naming them safely. Trusted; reads files, never runs them."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.course.layout import SetupError

MAX_FILES = 200


@dataclass
class Submission:
    student: str
    notebooks: dict[str, Path | None]
    files: list[Path]
    base: Path
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    id: str = ""  # a safe, unique folder name for this student's outputs (see safe_name)
    submitted: bool = True  # False: an entry of the folder that is not a submission

    def __post_init__(self) -> None:
        self.id = self.id or safe_name(self.student)


# ---------------------------------------------------------------------------------------------
# Result records (report.json holds them as dicts)
# ---------------------------------------------------------------------------------------------


_UNSAFE = re.compile(r"[^A-Za-z0-9_.@+-]")


def safe_name(student: str) -> str:
    """A folder name for ``student``: the id itself when it is already safe, else a slug and a
    short hash of the id (so ``kim lee`` and ``kim_lee`` never share a folder)."""
    slug = _UNSAFE.sub("_", student)[:80].strip(".") or "_"
    if slug == student and slug not in (".", ".."):
        return slug
    digest = hashlib.sha256(student.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug}-{digest}"


# ---------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------


IGNORED_ENTRIES = {".ipynb_checkpoints", ".DS_Store", "__MACOSX", "Thumbs.db"}
# nbgrader's bookkeeping files belong in <student>/<assignment>/; at the top of the submissions
# folder they are never a student's notebook (an older grader left them there)
BOOKKEEPING = {"timestamp.txt", "submission_secret.txt"}


def discover(folder: Path, assignment: str, release: list[str]) -> list[Submission]:
    """Submissions in ``folder``, its layout recognised entry by entry: nbgrader's
    ``<student>/<assignment>/``, a per-student folder of notebooks, or one notebook file per
    student (named after the student). Every other entry gets a row that says why it is not
    graded; hidden entries (``.name``) are skipped."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SetupError(f"submissions folder {folder} does not exist")
    found: list[Submission] = []
    used: set[str] = set()

    def unique(student: str, **kwargs: Any) -> Submission:
        sub = Submission(student, **kwargs)
        candidate, n = sub.id, 2
        while candidate.lower() in used:  # case-insensitive filesystems too
            candidate, n = f"{sub.id}-{n}", n + 1
        used.add(candidate.lower())
        if candidate != sub.id:
            sub.student = f"{student}-{n - 1}"
        sub.id = candidate
        return sub

    entries = [
        e
        for e in sorted(folder.iterdir())
        if not e.name.startswith(".")
        and e.name not in IGNORED_ENTRIES
        and not (e.name in BOOKKEEPING and e.is_file())
    ]
    for entry in entries:
        try:
            info = entry.lstat()
        except OSError as error:
            sub = unique(entry.name, notebooks={}, files=[], base=folder, submitted=False)
            sub.error = f"{entry.name!r} cannot be read ({error.strerror})"
            found.append(sub)
            continue
        if stat.S_ISLNK(info.st_mode) or not (
            stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)
        ):
            what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a file or folder"
            sub = unique(entry.stem, notebooks={}, files=[], base=folder)
            sub.error = f"{entry.name} is {what}: refused (submit the notebook file itself)"
            found.append(sub)
        elif stat.S_ISDIR(info.st_mode):
            inner = entry / assignment
            if _is_dir(inner):
                found.append(folder_submission(entry.name, inner, release, unique=unique))
            elif _lexists(inner):
                sub = unique(entry.name, notebooks={}, files=[], base=folder)
                sub.error = f"{entry.name}/{assignment} is not a folder: refused"
                found.append(sub)
            elif any(_is_file_entry(p) for p in _children(entry)) or not _children(entry):
                found.append(folder_submission(entry.name, entry, release, unique=unique))
            else:
                names = ", ".join(sorted(p.name for p in _children(entry))[:5])
                sub = unique(entry.name, notebooks={}, files=[], base=folder, submitted=False)
                sub.error = (
                    f"no submission of {assignment}: the folder {entry.name} holds only folders "
                    f"({names}), none named {assignment}"
                )
                found.append(sub)
        else:
            sub = unique(entry.stem, notebooks={}, files=[entry], base=folder)
            if len(release) == 1:
                sub.notebooks[release[0]] = entry
            else:
                sub.notebooks = {name: (entry if entry.name == name else None) for name in release}
            if entry.suffix != ".ipynb":
                sub.error = f"{entry.name} is not a notebook: submit the .ipynb file"
            found.append(sub)
    return found


def _lexists(path: Path) -> bool:
    return os.path.lexists(path)


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _is_file_entry(path: Path) -> bool:
    """A file, a link or anything else that is not a folder (a folder's own files)."""
    return not _is_dir(path)


def _children(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.name not in IGNORED_ENTRIES]
    except OSError:
        return []


def _walk(folder: Path) -> tuple[list[Path], list[Path]]:
    """Regular files under ``folder`` and everything else (links, pipes, devices), without
    following links."""
    files, refused = [], []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_ENTRIES)
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                refused.append(Path(root) / d)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in sorted(names):
            if name in IGNORED_ENTRIES:
                continue
            path = Path(root) / name
            try:
                regular = stat.S_ISREG(path.lstat().st_mode)
            except OSError:
                regular = False
            (files if regular else refused).append(path)
        if len(files) > 10 * MAX_FILES:
            break
    return sorted(files), refused


def folder_submission(
    student: str,
    folder: Path,
    release: list[str],
    unique: Callable[..., Submission] | None = None,
) -> Submission:
    files, refused = _walk(folder)
    make = unique or Submission
    sub = make(student, notebooks={}, files=files[:MAX_FILES], base=folder)
    if len(files) > MAX_FILES:
        sub.notes.append(f"{len(files)} files submitted; only the first {MAX_FILES} were recorded")
    if refused:
        names = ", ".join(str(p.relative_to(folder)) for p in refused[:5])
        sub.notes.append(f"links and special files refused (not read): {names}")
    top = [p for p in files if p.parent == folder and p.suffix == ".ipynb"]
    for name in release:
        path = folder / name
        sub.notebooks[name] = path if _lexists(path) else None
    missing = [n for n, p in sub.notebooks.items() if p is None]
    spare = [p for p in top if p.name not in sub.notebooks]
    if len(missing) == 1 and len(spare) == 1:
        sub.notebooks[missing[0]] = spare[0]
        sub.notes.append(f"graded {spare[0].name} in place of the expected {missing[0]}")
    bookkeeping = {folder / "timestamp.txt", folder / "submission_secret.txt"}  # nbgrader's own
    extra = [p for p in files if p not in sub.notebooks.values() and p not in bookkeeping]
    if extra:
        names = ", ".join(str(p.relative_to(folder)) for p in extra[:8])
        more = f" and {len(extra) - 8} more" if len(extra) > 8 else ""
        sub.notes.append(
            f"extra files ignored: {names}{more} (only the notebook's code is graded; files "
            "next to it, such as a course_lib.py or autograder.py, are never imported)"
        )
    if not files and not refused:
        sub.error = "empty submission folder: no notebook was submitted"
    return sub


# ---------------------------------------------------------------------------------------------
# Preparation (trusted, nothing executed)
# ---------------------------------------------------------------------------------------------
