"""What grading writes: the class table, per-student feedback and Gradescope ``results.json``.

Everything a student receives is built from test names, points, the failure messages the tests
chose to show and the student's own output: never from the hidden suite's source.

Rows are written as they are graded (:class:`ReportWriter`): each row's feedback folder at once,
one line appended to ``grades.csv`` and to ``report.rows.jsonl``, and ``report.json`` replaced
every few seconds and at the end, so a crash later in the run loses nothing already graded.
Text that comes from student code (messages, printed output, file names, student ids) is written
so that it cannot act: escaped in Markdown, inside code fences longer than any run of backticks
it holds, truncated; CSV cells that a spreadsheet would read as a formula get a leading ``'``.
Files are written with encodings that cannot fail.
"""

from __future__ import annotations

import csv
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from autograder.course.notebook import clean_text
from autograder.host.intake import safe_name

MAX_MESSAGE_LINES = 30
MAX_LINE = 300
MAX_INLINE = 500
REPORT_EVERY = 5.0  # seconds between rewrites of report.json while grading
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def clean(value: Any) -> Any:
    """``value`` with every string free of lone surrogates (JSON-able, encodable)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, with an encoding that cannot fail."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
    os.replace(tmp, path)


def folder_name(row: dict) -> str:
    return row.get("id") or safe_name(row["student"])


class ReportWriter:
    """Writes ``report.json``, ``grades.csv`` and ``feedback/<id>/`` under ``out`` row by row."""

    def __init__(self, out: Path, assignment: str, tests: list[dict], sandbox: dict):
        self.out, self.assignment = Path(out), assignment
        self.tests, self.sandbox = clean(tests), clean(sandbox)
        self.rows: list[dict] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.out.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.out / "report.rows.jsonl"
        self.jsonl.write_text("")
        self._flush()

    def add(self, row: dict) -> None:
        """Write one graded row now; a failure is recorded in ``errors``, never raised."""
        with self.lock:
            row = clean({k: v for k, v in row.items() if k != "answers"})
            self.rows.append(row)
            try:
                write_feedback(self.out, self.assignment, row)
            except Exception as error:  # one row's files must not stop the others
                self.errors.append(f"feedback for {row['student']!r}: {error}")
            try:
                with open(self.jsonl, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                _append_csv(self.out / "grades.csv", row, self.tests)
                if time.monotonic() - self.flushed > REPORT_EVERY:
                    self._flush(csv_too=False)
            except Exception as error:
                self.errors.append(f"report for {row['student']!r}: {error}")

    def finish(self, rows: list[dict] | None = None) -> None:
        """Rewrite the tables with ``rows`` (the final order), or the rows added so far."""
        with self.lock:
            if rows is not None:
                self.rows = [clean({k: v for k, v in r.items() if k != "answers"}) for r in rows]
            try:
                self._flush()
                self.jsonl.unlink(missing_ok=True)  # report.json holds every row now
            except Exception as error:
                self.errors.append(f"report: {error}")

    def _flush(self, csv_too: bool = True) -> None:
        report = {
            "assignment": self.assignment,
            "sandbox": self.sandbox,
            "tests": self.tests,
            "rows": self.rows,
        }
        _write(self.out / "report.json", json.dumps(report, indent=1))
        if csv_too:
            write_csv(self.out / "grades.csv", self.rows, self.tests)
        self.flushed = time.monotonic()


def write_all(
    out: Path, assignment: str, rows: list[dict], tests: list[dict], sandbox: dict
) -> list[str]:
    """Every output at once (for callers that have all rows); returns the write errors."""
    writer = ReportWriter(out, assignment, tests, sandbox)
    for row in rows:
        writer.add(row)
    writer.finish()
    return writer.errors


def write_feedback(out: Path, assignment: str, row: dict) -> None:
    folder = Path(out) / "feedback" / folder_name(row)
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "feedback.md", feedback_markdown(assignment, row))
    _write(folder / "results.json", json.dumps(clean(gradescope_results(row)), indent=1))


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: formulas (``=``, ``+``, ``-``, ``@``, tab, CR)
    get a leading ``'``."""
    if isinstance(value, str):
        value = clean_text(value)
        if value.startswith(FORMULA_START):
            return "'" + value
    return value


def _csv_header(tests: list[dict]) -> list:
    columns = [t["nodeid"] for t in tests]
    return ["student", "status", "score", "max_score", "percent", *columns, "sha256", "reason",
            "flags"]  # fmt: skip


def _append_csv(path: Path, row: dict, tests: list[dict]) -> None:
    with open(path, "a", newline="", encoding="utf-8", errors="backslashreplace") as f:
        csv.writer(f).writerow([csv_cell(x) for x in _csv_line(row, tests)])


def write_csv(path: Path, rows: list[dict], tests: list[dict]) -> None:
    lines = [_csv_header(tests)] + [_csv_line(row, tests) for row in rows]
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        writer = csv.writer(f)
        for line in lines:
            writer.writerow([csv_cell(x) for x in line])
    os.replace(tmp, path)


def _csv_line(row: dict, tests: list[dict]) -> list:
    columns = [t["nodeid"] for t in tests]
    shas = ";".join(
        f"{name}={info['sha256']}" for name, info in sorted(row["notebooks"].items())
    ) or ";".join(f["sha256"] for f in row["files"] if "sha256" in f)
    test_points = []
    for c in columns:
        result = row["tests"].get(c)
        test_points.append(_num(result["points"]) if result else "")
    return [
        row["student"],
        row["status"],
        _num(row["score"]),
        _num(row["max_score"]),
        row["percent"],
        *test_points,
        shas,
        row["reason"] or "",
        "; ".join(row.get("flags") or []),
    ]


def _num(x: float) -> str:
    return f"{x:g}"


# -- Markdown that student text cannot break out of ----------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")


def md_text(text: Any, limit: int = MAX_INLINE) -> str:
    """``text`` as inert Markdown on one line: HTML escaped, Markdown syntax backslashed,
    line breaks flattened, truncated."""
    text = clean_text(str(text))
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    if text[:1] in ("-", "+", "="):
        text = "\\" + text  # no list item or heading underline at the start
    return re.sub(r"^(\d+)([.)])", r"\1\\\2", text)  # nor a numbered item


def md_code(text: Any, limit: int = MAX_INLINE) -> str:
    """``text`` as an inline code span (one line, truncated) that its backticks cannot close."""
    text = " ".join(clean_text(str(text)).split())[:limit]
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}"


def md_block(text: str, indent: str = "") -> list[str]:
    """``text`` as a fenced code block (lines truncated) that no line of it can close."""
    lines = [line[:MAX_LINE] for line in clean_text(text).splitlines()[:MAX_MESSAGE_LINES]]
    longest = max((len(run) for run in re.findall(r"`+|~+", "\n".join(lines))), default=0)
    fence = "`" * max(3, longest + 1)
    return [indent + fence] + [indent + line for line in lines] + [indent + fence]


# -- Hidden-test messages: what is wrong and where, never the expected values -------------------

_EXPECTED = re.compile(r"\b(expected|should be|wanted|largest difference)(:?\s*)", re.I)
_SHAPE_WORDS = ("shape", "dimension", "size", "dims", "ndim")
HIDDEN_VALUE = "[not shown]"


def _value_end(text: str, start: int) -> int:
    """Where the value that starts at ``text[start]`` ends: a bracketed group (nested), a quoted
    string, or a number; ``start`` if none starts there."""
    if start >= len(text):
        return start
    head = text[start]
    if head in "([{":
        depth = 0
        for i in range(start, min(len(text), start + 100_000)):
            if text[i] in "([{":
                depth += 1
            elif text[i] in ")]}":
                depth -= 1
                if depth == 0:
                    return i + 1
        return len(text)
    if head in "'\"":
        end = text.find(head, start + 1)
        return end + 1 if end > 0 else len(text)
    match = re.match(
        r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?%?(?: ?\(\+/- [^)]*\))?", text[start:]
    )
    return start + match.end() if match else start


def hide_expected(message: str) -> str:
    """A hidden test's failure message without the values it expected (``expected 0.731``,
    ``expected [5, 17]``, ``largest difference 0.2``): a student who resubmits must not harvest
    the answer key from the feedback. Shapes stay (``expected (2, 3, 8)`` after "shape"), and
    so do the test's words: what is wrong, and where."""
    out, pos = [], 0
    for match in _EXPECTED.finditer(message):
        if match.start() < pos:
            continue
        start = match.end()
        while start < len(message) and message[start] in " \n":
            start += 1
        end = _value_end(message, start)
        quoted = end > start and message[start] in "'\""
        if end == start or not (quoted or any(c.isdigit() for c in message[start:end])):
            continue
        before = message[max(0, match.start() - 60) : match.start()].lower()
        if not quoted and any(word in before for word in _SHAPE_WORDS):
            continue
        out.append(message[pos:start] + HIDDEN_VALUE)
        pos = end
    return "".join(out) + message[pos:]


def feedback_markdown(assignment: str, row: dict) -> str:
    lines = [
        f"# {md_text(assignment)}: feedback for {md_text(row['student'], 120)}",
        "",
        f"**Autograded score: {_num(row['score'])} / {_num(row['max_score'])}**"
        + (" (written answers are graded separately)" if row.get("manual_pending") else ""),
        "",
    ]
    if row["reason"]:
        lines += [f"> {md_text(row['reason'])}", ""]
    for info in (v for _, v in sorted(row["notebooks"].items())):
        lines.append(f"- graded {md_code(info['file'])} (SHA-256 `{md_text(info['sha256'])}`)")
    if row["notebooks"]:
        lines.append("")
    by_cell: dict[str, list[dict]] = {}
    for result in row["tests"].values():
        by_cell.setdefault(result["cell"] or "(no cell)", []).append(result)
    for cell in row["cells"].values():
        results = by_cell.get(cell["grade_id"], [])
        lines.append(
            f"## {md_code(cell['grade_id'])}: {_num(cell['score'])} / {_num(cell['max_score'])}"
        )
        lines.append("")
        for result in results:
            mark = "passed" if result["status"] == "passed" else "FAILED"
            lines.append(
                f"- {mark} {md_code(result['nodeid'])} "
                f"({_num(result['points'])} / {_num(result['max_points'])})"
            )
            if result["message"]:
                lines.append("")
                lines.extend(md_block(hide_expected(result["message"]), indent="  "))
        lines.append("")
    if row["notes"]:
        lines += ["## Notes", ""] + [f"- {md_text(note)}" for note in row["notes"][:40]] + [""]
    return "\n".join(lines)


def _truncate(text: str, limit: int = 20_000) -> str:
    text = clean_text(text)
    return text if len(text) <= limit else text[:limit] + "\n… (truncated)"


def gradescope_results(row: dict) -> dict:
    tests = []
    for result in row["tests"].values():
        output = hide_expected(result["message"])
        if result.get("output") and result["status"] != "passed":
            output += "\n\nyour code printed:\n" + result["output"]
        tests.append(
            {
                "name": result["nodeid"],
                "score": result["points"],
                "max_score": result["max_points"],
                "status": "passed" if result["status"] == "passed" else "failed",
                "output": _truncate(output),
                "output_format": "text",
                "visibility": "visible",
            }
        )
    summary = [row["reason"]] if row["reason"] else []
    summary += row["notes"][:20]
    return {
        "score": row["score"],
        "execution_time": row.get("seconds", 0),
        "output": _truncate("\n".join(summary)),
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
