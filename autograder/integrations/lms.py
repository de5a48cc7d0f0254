"""``nbgrader zip_collect`` from an LMS download: a course extractor and collector.

Students control the files they upload, so every name and byte of an LMS download is untrusted;
the instructor's own zip is the only archive that is unpacked. The two plug-ins below, named in
``nbgrader_config.py``:

- :class:`CourseExtractor` unpacks each zip in ``archive/`` (the LMS's download) into
  ``extracted/<zip name>/``, member by member: a nested archive (a student's ``.zip``, whatever it
  holds) is copied as a file, never unpacked; a member whose path is absolute, holds ``..`` or is
  deeper than :data:`MAX_DEPTH` is not extracted; a name component longer than
  :data:`MAX_NAME_BYTES` is shortened (its start, where the LMS puts the student's id, and its
  extension are kept); bytes are counted as they are written, against caps per member, per
  student and for the class. Whatever goes wrong with one member (a bad CRC, an encrypted entry,
  a cap) becomes a note for the student the upload's name belongs to, and the rest of the class is
  collected. Each file gets its zip entry's time (read in ``zip_timezone``, UTC by default: a zip
  stores local times without a zone); loose files keep the download's time.
- :class:`LmsCollector` matches the course's pattern (``named_regexp``) against the *upload name*
  (the member's path inside the LMS's zip), whole, from its first character: a file inside an
  upload (``smithjohn_12345_1_work/doejane_23456_2_a2.ipynb``) cannot claim another student's id.
  Ids and file names must be plain names. When the name holds no ``timestamp`` it returns the
  file's time, so ``zip_collect`` writes ``timestamp.txt`` with the LMS's time. It records, per
  student, the LMS's own verdict (``(?P<late>...)``: Canvas's ``LATE_``), the name in the file name
  (``(?P<name>...)``) and the extractor's notes in ``<downloaded>/<assignment>/lms.json``;
  ``grade`` reports the verdict and the notes and gives a student without a name in the gradebook
  the LMS's.

Trusted: reads the instructor's download; file names and contents come from students and are only
matched, counted and copied.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import zipfile
import zlib
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from nbgrader.plugins import ExtractorPlugin, FileNameCollectorPlugin
from traitlets import Integer, List, Unicode

LMS_FILE = "lms.json"
MB = 1024**2
MAX_NAME_BYTES = 143  # per name component: room for nbgrader's folders within 255 (and eCryptfs)
MAX_DEPTH = 8  # folders in an upload name
MAX_MEMBERS = 50_000  # entries in one LMS zip
MAX_NOTES = 10  # per student
ARCHIVES = (".zip", ".gz", ".tgz", ".tar", ".bz2", ".xz", ".7z", ".rar")
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}")  # a student id names a folder
PLAIN_NAME = re.compile(r"[\w .'-]{1,80}")  # formgrader writes names into its pages unescaped


def _size(n: int) -> str:
    return f"{n / MB:.0f} MB" if n >= MB else f"{n} bytes"


def shorten(part: str) -> str:
    """``part`` if it fits :data:`MAX_NAME_BYTES`, else its start, a digest and its extension."""
    raw = part.encode("utf-8", "surrogateescape")
    if len(raw) <= MAX_NAME_BYTES:
        return part
    stem, ext = os.path.splitext(part)
    if not 0 < len(ext) <= 16:
        stem, ext = part, ""
    tag = "~" + hashlib.sha256(raw).hexdigest()[:10]
    keep = MAX_NAME_BYTES - len(ext.encode("utf-8", "surrogateescape")) - len(tag)
    return stem.encode("utf-8", "surrogateescape")[:keep].decode("utf-8", "ignore") + tag + ext


def plain_name(name: str) -> bool:
    """A single file name that stays in its folder."""
    return (
        name not in ("", ".", "..")
        and "/" not in name
        and "\x00" not in name
        and len(name.encode("utf-8", "surrogateescape")) <= MAX_NAME_BYTES
    )


def match_upload(pattern: str, upload: str) -> dict | None:
    """The pattern's groups for the whole ``upload`` name, or None; ids and files plain names."""
    found = re.fullmatch(pattern, upload) if pattern else None
    if found is None:
        return None
    groups = found.groupdict()
    student, file_id = groups.get("student_id"), groups.get("file_id")
    if not (isinstance(student, str) and SAFE_ID.fullmatch(student)):
        return None
    if not (isinstance(file_id, str) and plain_name(file_id)):
        return None
    if groups.get("name") is not None and not PLAIN_NAME.fullmatch(groups["name"]):
        groups["name"] = None  # collected, but no markup becomes the student's name
    return groups


def _lms_path(app: object) -> Path | None:
    try:
        folder = app.coursedir.format_path(
            app.downloaded_directory, ".", app.coursedir.assignment_id
        )
    except AttributeError:  # a plug-in used on its own (a test)
        return None
    return Path(folder) / LMS_FILE


class CourseExtractor(ExtractorPlugin):
    zip_ext = List([".zip"], help="archives in archive/ that are LMS downloads").tag(config=True)
    zip_timezone = Unicode("UTC", help="the zone of the zip entries' times").tag(config=True)
    max_member_bytes = Integer(64 * MB, help="bytes per extracted file").tag(config=True)
    max_student_bytes = Integer(128 * MB, help="bytes per student").tag(config=True)
    max_total_bytes = Integer(4096 * MB, help="bytes for the class").tag(config=True)
    named_regexp = Unicode(
        "", help="the collector's pattern, to attribute notes and caps (default: the collector's)"
    ).tag(config=True)

    def extract(self, archive_path: str, extracted_path: str) -> None:
        self.uploads: dict[str, str] = {}  # extracted file -> its upload name
        self._notes: dict[str, list[str]] = {}  # student id (or upload name) -> notes
        self._students: set[str] = set()  # keys of _notes that are student ids
        self._spent: dict[str, int] = {}
        self._total = 0
        self._zone = ZoneInfo(self.zip_timezone)
        archive, extracted = Path(archive_path), Path(extracted_path)
        count = 0
        for root, folders, names in os.walk(archive):
            folders.sort()
            for name in sorted(names):
                count += 1
                path = Path(root, name)
                relative = path.relative_to(archive)
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    self.log.warning("skipped %s: not a regular file", relative)
                elif path.suffix.lower() in self.zip_ext:
                    self._unpack(path, extracted / relative.parent / shorten(path.stem))
                else:  # loose: copied as it is, with the download's time
                    info = os.stat(path)
                    self._file(relative.as_posix(), lambda path=path: open(path, "rb"),
                               info.st_size, extracted, info.st_mtime)  # fmt: skip
        if not count:
            self.log.warning("No files found in directory: %s", archive_path)
        self._record()

    def student_notes(self) -> dict[str, list[str]]:
        """The notes of this extraction, per student id."""
        return {key: notes for key, notes in self._notes.items() if key in self._students}

    def _pattern(self) -> str:
        collector = getattr(self.parent, "collector_plugin_inst", None)
        return self.named_regexp or getattr(collector, "named_regexp", "") or ""

    def _owner(self, upload: str) -> str:
        found = match_upload(self._pattern(), upload)
        if found:
            self._students.add(found["student_id"])
            return found["student_id"]
        return upload.split("/")[0]

    def _note(self, owner: str, upload: str, text: str) -> None:
        notes = self._notes.setdefault(owner, [])
        who = f"student {owner}" if owner in self._students else "no student's name"
        self.log.warning("upload %r (%s): %s", upload[:120], who, text)
        if len(notes) < MAX_NOTES:
            notes.append(f"{upload[:80]!r}: {text}")
        elif len(notes) == MAX_NOTES:
            notes.append("more files had problems (see zip_collect's log)")

    def _unpack(self, path: Path, into: Path) -> None:
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError, ValueError) as error:
            self.log.error(
                "%s is not a zip (%s): nothing in it was collected; download it from the LMS "
                "again", path.name, error,
            )  # fmt: skip
            return
        with zf:
            members = zf.infolist()
            if len(members) > MAX_MEMBERS:
                self.log.error("%s has %d entries, over %d: not unpacked", path.name,
                               len(members), MAX_MEMBERS)  # fmt: skip
                return
            for info in members:
                if info.is_dir():
                    continue
                try:
                    when = datetime(*info.date_time, tzinfo=self._zone).timestamp()
                except ValueError:
                    when = None
                self._file(info.filename, lambda info=info: zf.open(info), info.file_size,
                           into, when)  # fmt: skip

    def _room(self, owner: str) -> tuple[int, str]:
        caps = [
            (self.max_member_bytes, f"over the {_size(self.max_member_bytes)} limit per file"),
            (self.max_student_bytes - self._spent.get(owner, 0),
             f"over the {_size(self.max_student_bytes)} per-student limit"),
            (self.max_total_bytes - self._total,
             f"over the {_size(self.max_total_bytes)} limit for the class "
             "(CourseExtractor.max_total_bytes)"),
        ]  # fmt: skip
        return min(caps, key=lambda cap: cap[0])

    def _file(self, upload: str, opener, declared: int, into: Path, when: float | None) -> None:
        parts = upload.split("/")
        safe = [shorten(p) for p in parts]
        owner = self._owner("/".join(safe))
        if (
            upload.startswith("/")
            or len(parts) > MAX_DEPTH
            or any(p in ("", ".", "..") or "\x00" in p for p in parts)
        ):
            return self._note(owner, upload, "not extracted: its path is absolute, holds '..' "
                              f"or is deeper than {MAX_DEPTH} folders")  # fmt: skip
        target = into.joinpath(*safe)
        room, why = self._room(owner)
        if declared > room:
            return self._note(owner, upload, f"not extracted: {_size(declared)}, {why}")
        written, reason = 0, None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            return self._note(owner, upload, "not extracted: a file of the same name came first")
        except OSError as error:
            return self._note(owner, upload, f"not extracted: {error.strerror}")
        try:
            with os.fdopen(fd, "wb") as out, opener() as source:
                while chunk := source.read(min(MB, room - written + 1)):
                    written += len(chunk)
                    if written > room:  # the header lied: count what really comes out
                        reason = f"not extracted: {why}"
                        break
                    out.write(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError,
                NotImplementedError, ValueError) as error:  # fmt: skip
            reason = f"not extracted: cannot be read from the download ({type(error).__name__})"
        if reason:
            target.unlink(missing_ok=True)
            return self._note(owner, upload, reason)
        self._spent[owner] = self._spent.get(owner, 0) + written
        self._total += written
        if when is not None:
            os.utime(target, (when, when), follow_symlinks=False)
        self.uploads[os.path.normpath(target)] = "/".join(safe)
        if safe != parts:
            self._note(owner, upload, f"name shortened to {'/'.join(safe)!r}")
        if parts[-1].lower().endswith(ARCHIVES):
            self._note(owner, upload, "an archive inside the upload is not unpacked: upload "
                       "the notebook itself")  # fmt: skip

    def _record(self) -> None:
        path = _lms_path(self.parent)
        notes = self.student_notes()
        if path is None or not notes:
            return
        data = read_lms(path.parent.parent, path.parent.name)
        for student, said in notes.items():
            entry = data.get(student) if isinstance(data.get(student), dict) else {}
            data[student] = {**entry, "notes": said}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")


class LmsCollector(FileNameCollectorPlugin):
    def match(self, upload: str) -> dict | None:
        """The pattern's groups for an upload name (the path inside the LMS's zip), or None."""
        return match_upload(self.named_regexp, upload)

    def collect(self, submitted_file: str) -> dict | None:
        if os.path.splitext(submitted_file)[1] not in self.valid_ext:
            return None
        uploads = getattr(getattr(self.parent, "extractor_plugin_inst", None), "uploads", None)
        if uploads is None:  # used on its own: the file's name is the upload's
            upload = os.path.basename(submitted_file)
        else:
            upload = uploads.get(os.path.normpath(submitted_file))
            if upload is None:
                self.log.warning("skipped %s: not extracted from the download", submitted_file)
                return None
        found = self.match(upload)
        if not found:
            self.log.warning("skipped %r: not an upload name of this LMS", upload)
            return None
        if found.get("timestamp"):
            from nbgrader.utils import parse_utc

            try:
                parse_utc(found["timestamp"])
            except (ValueError, OverflowError):
                found["timestamp"] = None
        if not found.get("timestamp"):
            when = datetime.fromtimestamp(os.stat(submitted_file).st_mtime, tz=UTC)
            found["timestamp"] = when.strftime("%Y-%m-%d %H:%M:%S UTC")
        self._record(found)
        return found

    def _record(self, found: dict) -> None:
        path = _lms_path(self.parent)
        if path is None:
            return
        if not hasattr(self, "_students"):
            self._students = read_lms(path.parent.parent, path.parent.name)
            self._fresh: set[str] = set()
        extractor = getattr(self.parent, "extractor_plugin_inst", None)
        notes = extractor.student_notes() if hasattr(extractor, "student_notes") else {}
        student = str(found["student_id"])
        entry = self._students.get(student, {}) if student in self._fresh else {}
        if student in notes:
            entry["notes"] = notes[student]
        entry["late"] = bool(entry.get("late")) or bool(found.get("late"))
        entry["timestamp"] = max(entry.get("timestamp", ""), found["timestamp"])
        if found.get("name"):
            entry["name"] = found["name"]
        self._students[student] = entry
        self._fresh.add(student)
        path.write_text(json.dumps(self._students, indent=1, sort_keys=True), encoding="utf-8")


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
