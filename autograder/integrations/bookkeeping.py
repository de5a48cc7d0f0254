"""nbgrader's bookkeeping around a grading run (after
:func:`autograder.integrations.gradebook.record`).

- ``timestamp.txt`` and ``submission_secret.txt`` (written by ``nbgrader submit``) are carried from
  ``submitted/<student>/<assignment>/`` into ``autograded/`` (so ``generate_feedback`` copies them
  into ``feedback/`` and ``release_feedback`` can sign the feedback), and the submission time goes
  into the gradebook: formgrader then lists the student as autograded, not "needs autograding".
- A due date in the course config (``c.Autograder.due_dates = {"a2_self_attention":
  "2026-12-01 23:59 UTC"}`` in ``nbgrader_config.py``) is stored as the assignment's due date; a
  due date set with ``nbgrader db assignment add --duedate`` or in formgrader is kept otherwise.
  Lateness is ``timestamp - duedate`` (nbgrader's ``total_seconds_late``); it is printed and
  exported.
- Points changed after students submitted (a grade cell's ``points`` in the submitted notebook's
  nbgrader metadata, as the release was when the student fetched it, differ from the release's
  now): ``grade`` grades with the release's points and prints one warning per changed cell, with
  the submissions concerned (:func:`points_drift`, :func:`drift_warnings`).
- The autograded notebook keeps what the student saw: their outputs (marked as the student's,
  not graded) and the cells they added (marked "added by the student: not graded" in the cell and
  in ``metadata.autograder``), beside the graded code, so hand-graders see everything.
"""

from __future__ import annotations

import copy
import sys
import warnings
from datetime import UTC
from pathlib import Path
from typing import Any

import nbformat

from autograder.course.layout import Course
from autograder.course.notebook import NotebookError, read_regular

CARRIED = ("timestamp.txt", "submission_secret.txt")
NOT_GRADED = "added by the student: not graded"
OUTPUT_NOTE = "[the student's own output when they ran this cell; not graded]\n"
MAX_TEXT = 20_000  # characters per text output kept
MAX_DATA = 2_000_000  # characters per rich output (e.g. a base64 PNG)
MAX_TOTAL = 20_000_000  # characters of the student's outputs kept per notebook
MAX_SMALL = 4096  # bytes of timestamp.txt, submission_secret.txt
SAFE_MIME = ("text/plain", "image/png", "image/jpeg", "image/gif")  # shown, never run
MAX_SIZE = 10_000  # pixels: an image's width or height kept from an output's metadata


def quiet_sqlalchemy() -> None:
    """nbgrader 0.9's queries trigger SQLAlchemy 2 deprecation warnings, one per row: silence."""
    warnings.filterwarnings("ignore", module=r"nbgrader(\.|$)")
    try:
        from sqlalchemy.exc import SADeprecationWarning, SAWarning

        warnings.filterwarnings("ignore", category=SAWarning)
        warnings.filterwarnings("ignore", category=SADeprecationWarning)
    except ImportError:  # pragma: no cover
        pass


def course_config(root: Path) -> dict:
    """The ``Autograder`` section of the course's ``nbgrader_config.py`` (a plain dict)."""
    path = root / "nbgrader_config.py"
    if not path.exists():
        return {}
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(path.name, path=str(root)).load_config()
    section = config.get("Autograder", {})
    return {key: section[key] for key in section}


def due_date(root: Path, assignment: str) -> Any:
    from nbgrader.utils import parse_utc

    value = (course_config(root).get("due_dates") or {}).get(assignment)
    return parse_utc(value) if value else None


def finish(course: Course, assignment: str, subs: list, rows: list[dict]) -> list[dict]:
    """Carry files and times, set the due date, keep the students' work; return late rows."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.utils import parse_utc

    from autograder.integrations.gradebook import nbgrader_settings
    from autograder.integrations.lms import PLAIN_NAME, read_lms, split_name

    quiet_sqlalchemy()
    settings = nbgrader_settings(course.root)
    due = due_date(course.root, assignment)
    lms = read_lms(Path(settings["downloaded"]), assignment)  # what zip_collect recorded
    late: list[dict] = []
    drift: dict[str, list[str]] = {}
    by_id = {getattr(s, "id", s.student): s for s in subs}
    with Gradebook(settings["db_url"], settings["course_id"]) as gb:
        if due is not None:
            gb.update_or_create_assignment(assignment, duedate=due)
        for row in rows:
            key = row.get("id") or row["student"]  # the safe id names folders and gradebook rows
            sub = by_id.get(key)
            if sub is None or row.get("submitted") is False or not getattr(sub, "submitted", True):
                continue  # an entry of the folder that is not a submission: nothing to keep
            base = Path(sub.base)
            submitted = Path(settings["submitted"])
            if _inside(base, submitted) and base.resolve() != submitted.resolve():
                # nbgrader's own bookkeeping files, as its collect writes them, in the student's
                # <student>/<assignment>/ folder (never in submitted/ itself, where they would
                # read as students named "timestamp"); the student's files are never written to
                _complete(base, sub)
            dest = Path(settings["autograded"]) / key / assignment
            dest.mkdir(parents=True, exist_ok=True)
            for name in CARRIED:
                if base.resolve() != dest.resolve():
                    carry(base / name, dest / name)
            _complete(dest, sub)
            try:
                submission = gb.find_submission(assignment, key)
            except MissingEntry:
                continue
            stamp = _small(dest / "timestamp.txt")
            if stamp is not None:
                try:
                    submission.timestamp = parse_utc(stamp.strip())
                except (ValueError, OverflowError):
                    row["notes"].append(f"unreadable timestamp.txt: {stamp[:40]!r}")
            gb.db.commit()
            seconds = submission.total_seconds_late
            row["timestamp"] = submission.timestamp.isoformat() if submission.timestamp else None
            row["seconds_late"] = float(seconds or 0)
            from_lms = lms.get(key) if isinstance(lms.get(key), dict) else {}
            student = submission.student
            name = from_lms.get("name")
            plain = isinstance(name, str) and PLAIN_NAME.fullmatch(name)  # formgrader shows it raw
            if plain and not (student.first_name or student.last_name):
                student.first_name, student.last_name = split_name(str(from_lms["name"]))
                gb.db.commit()  # formgrader shows the LMS's name, not "None, None"
            for note in (from_lms.get("notes") or [])[:12]:  # what zip_collect could not take
                row["notes"].append(f"upload: {str(note)[:300]}")
                print(f"  upload: {row['student']}: {str(note)[:300]}")
            if from_lms.get("late"):
                row["lms_late"] = True
                row["notes"].append("the LMS marked this submission late")
            if (seconds and seconds > 0) or from_lms.get("late"):
                late.append(row)
            for name, path in sub.notebooks.items():
                if path is not None and _regular(Path(path)):
                    changed = points_drift(Path(path), course.release_dir(assignment) / name)
                    drift.setdefault(row["student"], []).extend(changed)
                    row["notes"].extend(changed)
                if path is not None and _regular(Path(path)) and (dest / name).is_file():
                    try:
                        keep_student_work(dest / name, Path(path))
                    except Exception as exc:  # a hostile notebook costs its own extras only
                        row["notes"].append(f"student outputs not kept: {type(exc).__name__}")
    for line in drift_warnings(drift):
        print(line, file=sys.stderr)
    for row in late:
        hours = row["seconds_late"] / 3600
        said = "; marked late by the LMS" if row.get("lms_late") else ""
        if hours > 0:
            print(f"  late: {row['student']} submitted {hours:.1f} h after the due date{said}")
        else:
            here = "no due date is set here" if due is None else "on time by the due date here"
            print(f"  late: {row['student']} was marked late by the LMS ({here})")
    return late


def _grade_points(nb: Any) -> dict[str, float]:
    """grade_id -> points of each grade cell, read defensively (a student's file)."""
    found: dict[str, float] = {}
    for cell in nb.get("cells", []) if isinstance(nb, dict) else []:
        meta = _nbgrader_meta(cell) if isinstance(cell, dict) else {}
        gid = meta.get("grade_id")
        if meta.get("grade") and isinstance(gid, str) and gid and gid not in found:
            try:
                found[gid] = float(meta.get("points") or 0)
            except (TypeError, ValueError):
                continue
    return found


def points_drift(submitted: Path, release: Path) -> list[str]:
    """One warning per grade cell whose points in the submitted notebook (nbgrader's metadata,
    as the release was when the student fetched it) differ from the release's now: the points
    were changed after the student submitted, and the student's notebook says otherwise."""
    import json

    try:
        theirs = _grade_points(json.loads(read_regular(submitted).decode("utf-8", "replace")))
        ours = _grade_points(json.loads(release.read_text(encoding="utf-8")))
    except (NotebookError, OSError, ValueError):
        return []  # an unreadable submission: its row already says why
    return [
        f"points changed since this submission: {release.name} {gid} is worth {ours[gid]:g} in "
        f"the release, {points:g} in the submitted notebook (graded out of {ours[gid]:g})"
        for gid, points in theirs.items()
        if gid in ours and abs(points - ours[gid]) > 1e-9
    ]


def drift_warnings(drift: dict[str, list[str]], names: int = 8) -> list[str]:
    """``grade``'s warnings for :func:`points_drift`: one line per changed cell, with the
    submissions concerned (``drift[student]`` = that student's warnings)."""
    by_cell: dict[str, list[str]] = {}
    for student, changed in drift.items():
        for said in changed:
            by_cell.setdefault(said, []).append(student)
    lines = []
    for said, students in by_cell.items():
        shown = ", ".join(students[:names]) + (", ..." if len(students) > names else "")
        lines.append(f"WARNING: {said}: {len(students)} submission(s) ({shown}); rebuild "
                     "feedback and tell the students")  # fmt: skip
    return lines


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def _complete(base: Path, sub: Any) -> None:
    """A submission collected without the exchange (``zip_collect``, a copy) has no
    ``timestamp.txt`` or ``submission_secret.txt``; nbgrader's feedback commands need both. The
    timestamp is the newest notebook's modification time (a zip keeps its entries' times)."""
    import secrets
    from datetime import datetime

    stamp, secret = base / "timestamp.txt", base / "submission_secret.txt"
    if not stamp.exists():
        times = [p.stat().st_mtime for p in sub.notebooks.values() if p is not None and p.exists()]
        if times:
            when = datetime.fromtimestamp(max(times), tz=UTC)
            stamp.write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
    if not secret.exists():
        secret.write_text(secrets.token_hex(64))


# ---------------------------------------------------------------------------------------------
# The student's outputs and added cells
# ---------------------------------------------------------------------------------------------


def _trim(outputs: list, budget: list[int]) -> list:
    """Copies of ``outputs``, each cut to size, while ``budget[0]`` characters remain."""
    kept = []
    for out in outputs:
        out = copy.deepcopy(out)
        if "metadata" in out:  # an image's ``width: "1 onerror=..."`` would become an attribute
            out["metadata"] = _sizes(out["metadata"])
        if "text" in out:
            text = "".join(out["text"]) if isinstance(out["text"], list) else out["text"]
            out["text"] = text[:MAX_TEXT] + ("\n[... cut]" if len(text) > MAX_TEXT else "")
        data = out.get("data")
        if isinstance(data, dict):
            for key in list(data):
                if key not in SAFE_MIME:  # HTML, SVG, JavaScript, Markdown would run or render
                    del data[key]
                    continue
                value = data[key]
                if len(value if isinstance(value, str) else str(value)) > MAX_DATA:
                    del data[key]
            if not data:
                continue
        size = len(str(out))
        if size > budget[0]:
            kept.append(nbformat.v4.new_output("stream", name="stdout", text="[output cut]\n"))
            break
        budget[0] -= size
        kept.append(out)
    return kept


def _sizes(meta: Any) -> dict:
    """An output's metadata as kept for graders: an image's numeric ``width`` and ``height``
    (at the top or per image MIME type, where nbconvert looks), nothing else."""

    def numeric(value: Any) -> dict:
        if not isinstance(value, dict):
            return {}
        return {
            k: v
            for k, v in value.items()
            if k in ("width", "height") and type(v) in (int, float) and 0 < v <= MAX_SIZE
        }

    kept: dict = numeric(meta)
    if isinstance(meta, dict):
        for mime in SAFE_MIME:
            sizes = numeric(meta.get(mime))
            if sizes:
                kept[mime] = sizes
    return kept


def _note(outputs: list) -> list:
    if not outputs:
        return []
    return [nbformat.v4.new_output("stream", name="stdout", text=OUTPUT_NOTE), *outputs]


def _regular(path: Path) -> bool:
    """A regular file, not a link (a student's link could point at any host file)."""
    return path.is_file() and not path.is_symlink()


def _small(path: Path) -> str | None:
    """A bookkeeping file of the student's folder, through the grader's bounded reader."""
    try:
        return read_regular(path, max_bytes=MAX_SMALL).decode("utf-8", "replace")
    except NotebookError:
        return None


def carry(source: Path, dest: Path) -> bool:
    """Copy a bookkeeping file (``timestamp.txt``, ``submission_secret.txt``) if it is a small
    regular file: a student's link, FIFO or 8 GB file is not copied."""
    text = _small(source)
    if text is None:
        return False
    dest.write_text(text, encoding="utf-8")
    return True


def _nbgrader_meta(cell: Any) -> dict:
    """The cell's nbgrader metadata, or ``{}`` where a hostile notebook put something else."""
    meta = cell.get("metadata")
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


def _grade_id(cell: Any) -> str | None:
    gid = _nbgrader_meta(cell).get("grade_id")
    return gid if isinstance(gid, str) and gid else None


def keep_student_work(autograded: Path, submitted: Path) -> bool:
    """Add the student's outputs and added cells to the autograded notebook (in place)."""
    try:  # the student's file through the grader's bounded reader (no link, FIFO, device)
        text = read_regular(submitted).decode("utf-8", "replace")
        student = nbformat.reads(text, as_version=4)
        nb = nbformat.read(autograded, as_version=4)
    except Exception:  # an unreadable submission: the report says why, nothing to keep
        return False
    index_of: dict[str, int] = {}
    plain: dict[str, list[int]] = {}
    for i, cell in enumerate(nb.cells):
        gid = _grade_id(cell)
        if gid:
            index_of.setdefault(gid, i)
        elif i > 0:  # cell 0 is the autograder's summary
            plain.setdefault(cell.source, []).append(i)
    added: dict[int, list] = {}
    anchor = 0
    ids = {c.get("id") for c in nb.cells}
    budget = [MAX_TOTAL]
    for cell in student.cells:
        gid = _grade_id(cell)
        outputs = _trim(cell.get("outputs", []), budget) if cell.cell_type == "code" else []
        if gid and gid in index_of:
            anchor = index_of[gid]
            target = nb.cells[anchor]
            target_meta = _nbgrader_meta(target)
            is_check = target_meta.get("grade") and not target_meta.get("solution")
            if target.cell_type == "code" and outputs and not is_check:
                target.outputs = _note(outputs) + list(target.get("outputs", []))
            continue
        if not gid and plain.get(cell.source):
            anchor = plain[cell.source].pop(0)
            if nb.cells[anchor].cell_type == "code" and outputs:
                nb.cells[anchor].outputs = _note(outputs)
            continue
        new = copy.deepcopy(cell)
        new.metadata.pop("nbgrader", None)
        new.pop("attachments", None)  # never copied (README: pages graders open)
        new.metadata["autograder"] = {"not_graded": True, "added_by_student": True}
        if new.cell_type == "code":
            new.source = f"# [{NOT_GRADED}]\n{new.source}"
            new.outputs, new.execution_count = outputs, None
        else:
            from autograder.integrations.gradebook import (
                inert_markdown,  # the student's text, shown but never run
            )

            new.source = f"*[{NOT_GRADED}]*\n\n{inert_markdown(new.source)}"
            new.metadata.pop("format", None)
            new.metadata.pop("raw_mimetype", None)
        base_id = str(new.get("id") or "student")
        new_id, n = f"{base_id}-student"[:60], 2
        while new_id in ids:
            new_id, n = f"{base_id}-student{n}"[:60], n + 1
        ids.add(new_id)
        if nb.nbformat_minor >= 5:
            new["id"] = new_id
        else:
            new.pop("id", None)
        added.setdefault(anchor, []).append(new)
    if not added and not any(c.get("outputs") for c in student.cells):
        return False
    cells = []
    for i, cell in enumerate(nb.cells):
        cells.append(cell)
        cells.extend(added.get(i, []))
    nb.cells = cells
    nbformat.write(nb, autograded)
    return True
