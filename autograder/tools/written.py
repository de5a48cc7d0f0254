"""``written``: each student's answers to the hand-graded cells, one HTML page per student.

For graders who do not use formgrader (Gradescope's manual grading, a PDF for an LMS): the page
lists every manually graded cell (its ``grade_id`` and points) with the student's text rendered
from Markdown (raw HTML escaped, so a submission cannot script the grader's browser) or, for a
code answer, its source and text outputs. ``python -m autograder written <assignment>`` writes
``grading/written/<assignment>/<student>.html``; the Gradescope autograder shows the same page as
its "Written answers" entry.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from autograder.course.layout import Course
from autograder.course.notebook import NotebookError, read_notebook

STYLE = (
    "body{font-family:sans-serif;max-width:50em;margin:2em auto;line-height:1.45}"
    "section{border-top:1px solid #ccc;padding:.5em 0}pre{background:#f6f6f6;padding:.5em;"
    "white-space:pre-wrap}h2{font-size:1.05em}"
)


_URL_ATTRIBUTE = re.compile(r'\b(href|src)="([^"]*)"', re.I)
_SAFE_SCHEMES = ("http://", "https://", "mailto:", "#")


def _inert_urls(page: str) -> str:
    """Links and images keep only web, mail, fragment and relative URLs: whatever the Markdown
    renderer lets through, no ``javascript:`` (however encoded) reaches the grader's browser."""

    def fix(match: re.Match) -> str:
        bare = "".join(c for c in html.unescape(match.group(2)) if c > " ").lower()
        relative = ":" not in bare.split("/", 1)[0]
        keep = bare.startswith(_SAFE_SCHEMES) or relative
        return f'{match.group(1)}="{match.group(2) if keep else "#"}"'

    return _URL_ATTRIBUTE.sub(fix, page)


def _markdown(text: str) -> str:
    try:
        import mistune
    except ImportError:  # nbconvert's dependency; plain text if it is missing
        return f"<pre>{html.escape(text)}</pre>"
    return _inert_urls(mistune.create_markdown(escape=True)(text))


def _cell_html(cell: dict) -> str:
    if cell.get("cell_type") == "markdown":
        return _markdown(cell.get("source", ""))
    parts = [f"<pre>{html.escape(cell.get('source', ''))}</pre>"]
    for out in cell.get("outputs", []):
        if not isinstance(out, dict):
            continue
        data = out.get("data") if isinstance(out.get("data"), dict) else {}
        text = out.get("text") or data.get("text/plain", "")
        if isinstance(text, list):
            text = "".join(t for t in text if isinstance(t, str))
        if isinstance(text, str) and text:
            parts.append(f"<pre>{html.escape(text[:5000])}</pre>")
    return "\n".join(parts)


def answers(course: Course, assignment: str, folder: Path) -> list[dict]:
    """The manually graded cells with the student's answer (``None`` when missing)."""
    from autograder.host.intake import folder_submission

    release = sorted(p.name for p in course.release_dir(assignment).glob("*.ipynb"))
    sub = folder_submission("student", Path(folder), release)
    manual = [c for c in course.grade_cells(assignment).values() if not c.autograded]
    found: list[dict] = []
    for cell in manual:
        path = sub.notebooks.get(cell.notebook)
        answer = None
        if path is not None:
            try:  # the grader's bounded reader: no link, device, FIFO or oversized file
                read = read_notebook(path)
            except NotebookError:  # unreadable notebook: the autograded report says why
                read = None
            for student_cell in read.cells if read else []:
                if student_cell.nbgrader.get("grade_id") == cell.grade_id:
                    raw = read.raw["cells"][student_cell.index]
                    outputs = raw.get("outputs") if isinstance(raw.get("outputs"), list) else []
                    answer = {"cell_type": student_cell.cell_type,
                              "source": student_cell.source, "outputs": outputs}  # fmt: skip
                    break
        found.append(
            {"grade_id": cell.grade_id, "notebook": cell.notebook, "points": cell.points,
             "cell": answer}
        )  # fmt: skip
    return found


def answers_html(course: Course, assignment: str, folder: Path, student: str) -> str | None:
    """One page with the student's written answers; ``None`` if the assignment has none."""
    items = answers(course, assignment, folder)
    if not items:
        return None
    body = [f"<h1>{html.escape(assignment)}: written answers of {html.escape(student)}</h1>"]
    for item in items:
        title = f"{item['grade_id']} ({item['notebook']}, {item['points']:g} points)"
        content = _cell_html(item["cell"]) if item["cell"] else "<p><em>no answer found</em></p>"
        body.append(f"<section><h2>{html.escape(title)}</h2>\n{content}</section>")
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(assignment)}"
        f"</title><style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_all(course: Course, assignment: str, submissions: Path, out: Path) -> int:
    """One page per student folder (nbgrader's ``<student>/<assignment>/`` or ``<student>/``)."""
    from autograder.host.intake import safe_name

    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for entry in sorted(Path(submissions).iterdir()):
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        folder = entry / assignment if (entry / assignment).is_dir() else entry
        page = answers_html(course, assignment, folder, entry.name)
        if page is None:
            print(f"{assignment} has no hand-graded cells")
            return 0
        (out / f"{safe_name(entry.name)}.html").write_text(page)
        count += 1
    print(f"wrote {count} page(s) of written answers to {out}")
    return count
