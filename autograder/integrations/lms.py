"""``nbgrader zip_collect`` from an LMS download, with the LMS's submission times.

nbgrader extracts the LMS's zip with times of the extraction and, unless the file name holds a
timestamp (Blackboard's does), writes no ``timestamp.txt``: every submission then looks as late as
the day it was collected. Canvas and Moodle keep each submission's upload time as its zip entry's
time, and Canvas marks a late one ``LATE_`` in the file name. The two plug-ins below, named in
``nbgrader_config.py``, keep both:

- :class:`TimedExtractor` extracts as nbgrader does, then gives each extracted file its zip
  entry's time (read in ``zip_timezone``, UTC by default: a zip stores local times without a
  zone);
- :class:`LmsCollector` matches file names as nbgrader's :class:`FileNameCollectorPlugin` does
  (``named_regexp``); when the name holds no ``timestamp`` it returns the file's time, so
  ``zip_collect`` writes ``timestamp.txt`` with the LMS's time. It records, per student, the
  LMS's own verdict (``(?P<late>...)`` in the pattern: Canvas's ``LATE_``) and the name in the file
  name (``(?P<name>...)``) in ``<downloaded>/<assignment>/lms.json``; ``grade`` reports the
  verdict beside the lateness it computes and gives a student without a name in the gradebook the
  LMS's.

Trusted: reads the instructor's download; file names come from students but are only matched.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from nbgrader.plugins import ExtractorPlugin, FileNameCollectorPlugin
from traitlets import Unicode

LMS_FILE = "lms.json"


class TimedExtractor(ExtractorPlugin):
    zip_timezone = Unicode("UTC", help="the zone of the zip entries' times").tag(config=True)

    def extract(self, archive_path: str, extracted_path: str) -> None:
        super().extract(archive_path, extracted_path)
        zone = ZoneInfo(self.zip_timezone)
        for root, _, names in os.walk(archive_path):
            relative = os.path.relpath(root, archive_path)
            for name in names:
                stem, ext = os.path.splitext(name)
                if ext == ".zip" and ext in self.zip_ext:
                    into = Path(extracted_path, relative, stem)  # nbgrader's create_own_folder
                    restore_times(Path(root, name), into, zone)
                elif ext not in self.zip_ext:  # copied as it is: keep the download's time
                    copied = Path(extracted_path, relative, name)
                    if copied.is_file() and not copied.is_symlink():
                        shutil.copystat(Path(root, name), copied)


def restore_times(archive: Path, into: Path, zone: ZoneInfo) -> int:
    """Give each file extracted from ``archive`` into ``into`` its zip entry's time."""
    done = 0
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            target = into.joinpath(*Path(info.filename).parts)
            if info.is_dir() or ".." in Path(info.filename).parts or not target.is_file():
                continue
            when = datetime(*info.date_time, tzinfo=zone).timestamp()
            os.utime(target, (when, when), follow_symlinks=False)
            done += 1
    return done


class LmsCollector(FileNameCollectorPlugin):
    def collect(self, submitted_file: str) -> dict | None:
        found = super().collect(submitted_file)
        if not found:
            return found
        if not found.get("timestamp"):
            when = datetime.fromtimestamp(os.stat(submitted_file).st_mtime, tz=UTC)
            found["timestamp"] = when.strftime("%Y-%m-%d %H:%M:%S UTC")
        self._record(found)
        return found

    def _record(self, found: dict) -> None:
        path = self._lms_file()
        if path is None:
            return
        if not hasattr(self, "_students"):
            try:
                self._students = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self._students = {}
            self._fresh: set[str] = set()
        student = str(found["student_id"])
        entry = self._students.get(student, {}) if student in self._fresh else {}
        entry["late"] = bool(entry.get("late")) or bool(found.get("late"))
        entry["timestamp"] = max(entry.get("timestamp", ""), found["timestamp"])
        if found.get("name"):
            entry["name"] = found["name"]
        self._students[student] = entry
        self._fresh.add(student)
        path.write_text(json.dumps(self._students, indent=1, sort_keys=True), encoding="utf-8")

    def _lms_file(self) -> Path | None:
        app = self.parent
        try:
            folder = app.coursedir.format_path(
                app.downloaded_directory, ".", app.coursedir.assignment_id
            )
        except AttributeError:  # used on its own (a test of the patterns)
            return None
        return Path(folder) / LMS_FILE


def read_lms(downloaded: Path, assignment: str) -> dict[str, dict]:
    """What :class:`LmsCollector` recorded for ``assignment`` (``{}`` if nothing)."""
    try:
        data = json.loads((Path(downloaded) / assignment / LMS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def split_name(name: str) -> tuple[str, str]:
    """(first, last) from an LMS's display name ("John Smith"; Canvas's "smithjohn" is last)."""
    first, _, last = name.strip().rpartition(" ")
    return first, last
