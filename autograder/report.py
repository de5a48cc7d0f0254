"""What grading writes: the class table, per-student feedback and Gradescope ``results.json``.

Everything a student receives is built from test names, points, the failure messages the tests
chose to show and the student's own output: never from the hidden suite's source.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .grade import safe_name


def write_all(
    out: Path, assignment: str, rows: list[dict], tests: list[dict], sandbox: dict
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {"assignment": assignment, "sandbox": sandbox, "tests": tests, "rows": rows}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    write_csv(out / "grades.csv", rows, tests)
    for row in rows:
        folder = out / "feedback" / safe_name(row["student"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "feedback.md").write_text(feedback_markdown(assignment, row))
        (folder / "results.json").write_text(json.dumps(gradescope_results(row), indent=1))


def write_csv(path: Path, rows: list[dict], tests: list[dict]) -> None:
    columns = [t["nodeid"] for t in tests]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["student", "status", "score", "max_score", "percent", *columns, "sha256", "reason"]
        )
        for row in rows:
            shas = ";".join(
                f"{name}={info['sha256']}" for name, info in sorted(row["notebooks"].items())
            ) or ";".join(f["sha256"] for f in row["files"] if "sha256" in f)
            writer.writerow(
                [
                    row["student"],
                    row["status"],
                    _num(row["score"]),
                    _num(row["max_score"]),
                    row["percent"],
                    *[_num(row["tests"][c]["points"]) for c in columns],
                    shas,
                    row["reason"] or "",
                ]
            )


def _num(x: float) -> str:
    return f"{x:g}"


def feedback_markdown(assignment: str, row: dict) -> str:
    lines = [
        f"# {assignment}: feedback for {row['student']}",
        "",
        f"**Autograded score: {_num(row['score'])} / {_num(row['max_score'])}**"
        + (" (written answers are graded separately)" if row.get("manual_pending") else ""),
        "",
    ]
    if row["reason"]:
        lines += [f"> {row['reason']}", ""]
    for info in (v for _, v in sorted(row["notebooks"].items())):
        lines.append(f"- graded `{info['file']}` (SHA-256 `{info['sha256']}`)")
    if row["notebooks"]:
        lines.append("")
    by_cell: dict[str, list[dict]] = {}
    for result in row["tests"].values():
        by_cell.setdefault(result["cell"] or "(no cell)", []).append(result)
    for cell in row["cells"].values():
        results = by_cell.get(cell["grade_id"], [])
        lines.append(f"## `{cell['grade_id']}`: {_num(cell['score'])} / {_num(cell['max_score'])}")
        lines.append("")
        for result in results:
            mark = "passed" if result["status"] == "passed" else "FAILED"
            lines.append(
                f"- {mark} `{result['nodeid']}` "
                f"({_num(result['points'])} / {_num(result['max_points'])})"
            )
            if result["message"]:
                lines.append("")
                lines.append("  ```")
                lines.extend("  " + m for m in result["message"].splitlines()[:30])
                lines.append("  ```")
        lines.append("")
    if row["notes"]:
        lines += ["## Notes", ""] + [f"- {note}" for note in row["notes"][:40]] + [""]
    return "\n".join(lines)


def gradescope_results(row: dict) -> dict:
    tests = []
    for result in row["tests"].values():
        output = result["message"]
        if result.get("output") and result["status"] != "passed":
            output += "\n\nyour code printed:\n" + result["output"]
        tests.append(
            {
                "name": result["nodeid"],
                "score": result["points"],
                "max_score": result["max_points"],
                "status": "passed" if result["status"] == "passed" else "failed",
                "output": output,
                "visibility": "visible",
            }
        )
    summary = [row["reason"]] if row["reason"] else []
    summary += row["notes"][:20]
    return {
        "score": row["score"],
        "execution_time": row.get("seconds", 0),
        "output": "\n".join(summary),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
