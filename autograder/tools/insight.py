"""``insight``: what the class got wrong, at a glance.

    python -m autograder insight a2_self_attention            # after `grade`
    python -m autograder insight a1_rnn_attention a2_self_attention a3_transformer  # trajectory
    python -m autograder insight a2_self_attention --names    # student names on the page

Reads only what ``grade`` wrote (``autograder_out/<name>/report.json``, ``similarity.json``) and
the course's own files (the mistake catalogue, the release); it never runs student code. Writes
``autograder_out/<name>/insight.json`` and ``insight.html``: one self-contained page (matplotlib
SVGs inline, no script, no external request) with

- the score distribution in total and per graded step (median, blank and full counts), and the
  lateness distribution when ``grade`` recorded submission times;
- per hidden test: pass rate and points lost across the class, most points lost first;
- **named mistakes by frequency**: a student's failed tests of one graded step are matched to the
  catalogued mistake (``autograder/suites/<name>/mutants.yml``) whose graded run failed exactly
  the same tests and, of several, to those whose failure messages (numbers taken out) are the
  student's (the signatures come from ``python -m autograder mutants <name>``, which writes
  ``grading/mutants-<name>.json``); mistakes alike in tests and messages stay one group
  ("a or b"); each with the number of students and two anonymised snippets of their code
  (comments and docstrings removed); failures no mistake explains are grouped by their message
  with the numbers taken out;
- the similarity report's top pairs, and the written questions still waiting for a grader.

No student name appears unless ``--names`` is given: submissions are "submission 1, 2, ..." in
the order of the report, so the default page can be shown to a TA or projected in class.
"""

from __future__ import annotations

import ast
import html
import io
import json
import re
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

from autograder.course.layout import Course

NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?", re.IGNORECASE)
TOLERANCE = 1e-6
NOT_DONE = re.compile(r"not implemented|NotImplementedError", re.IGNORECASE)
MAX_SNIPPET_LINES = 14
MAX_NOTEBOOK = 20 * 2**20  # bytes: a bigger file gets no snippet


# ---------------------------------------------------------------------------- reading


def load_report(out: Path) -> dict:
    path = out / "report.json"
    if not path.exists():
        raise FileNotFoundError(f"no {path}: run `python -m autograder grade` first")
    return json.loads(path.read_text(encoding="utf-8"))


def signatures(course: Course, name: str, mutants_json: Path | None) -> dict[str, dict[str, str]]:
    """``mistake -> {test it failed: that test's message, numbers taken out}`` from the
    catalogue's graded run (``mutants``): the tests say which step is wrong, the messages tell
    apart mistakes that fail the same tests (``wrong values`` of one output or another)."""
    path = mutants_json or course.grading_dir / f"mutants-{name}.json"
    if not path.exists():
        return {}
    table = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for row in table:
        if row.get("equivalent") or not row.get("failed_tests"):
            continue
        said = row.get("failures") or {}  # test -> "student: message" (mutants.failures)
        out[row["mutant"]] = {
            t: message_group(said.get(t, "").partition(": ")[2]) for t in row["failed_tests"]
        }
    return out


def test_cell(nodeid: str, tests: dict) -> str:
    """The grade cell of a test (from the report's test table when known)."""
    return tests.get(nodeid, {}).get("cell", "?")


def catalogue(course: Course, name: str) -> dict:
    path = course.suite_dir(name) / "mutants.yml"
    if not path.exists():
        return {}
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def written_cells(course: Course, name: str) -> list[str]:
    path = course.release_dir(name) / f"{name}.ipynb"
    if not path.exists():
        return []
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    return [
        c["metadata"]["nbgrader"]["grade_id"]
        for c in cells
        if c.get("metadata", {}).get("nbgrader", {}).get("grade")
        and c["metadata"]["nbgrader"].get("solution")
        and c.get("cell_type") == "markdown"
    ]


def solution_code(notebook: Path, cell_id: str) -> str | None:
    """The code of one cell of a submitted notebook (by id or grade_id), or None."""
    try:  # plain JSON: nbformat's validation is not needed to read one cell's text
        if notebook.stat().st_size > MAX_NOTEBOOK:
            return None
        cells = json.loads(notebook.read_text(encoding="utf-8", errors="replace"))["cells"]
        for cell in cells:
            meta = cell.get("metadata") or {}
            ident = (meta.get("nbgrader") or {}).get("grade_id") or cell.get("id")
            if ident == cell_id and cell.get("cell_type") == "code":
                source = cell.get("source", "")
                return "".join(source) if isinstance(source, list) else str(source)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # a broken file has no snippet
    return None


def anonymised(source: str) -> str:
    """Code without comments and docstrings (where a name could hide), at most a few lines."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        lines = [line.split("#", 1)[0].rstrip() for line in source.splitlines()]
        return "\n".join(line for line in lines if line.strip())[:1500]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Pass()
    lines = [line for line in ast.unparse(tree).splitlines() if line.strip() != "pass"]
    if len(lines) > MAX_SNIPPET_LINES:
        lines = lines[:MAX_SNIPPET_LINES] + ["..."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- analysis


def message_group(message: str) -> str:
    """A failure message with its numbers and shapes taken out, so alike failures group."""
    first = (message or "(no message)").strip().splitlines()[0] if message else "(no message)"
    return NUMBER.sub("#", first)[:200]


def analyse(
    course: Course,
    name: str,
    report: dict,
    *,
    mutants_json: Path | None = None,
    submissions: Path | None = None,
    show_names: bool = False,
    paths: dict[str, list[Path]] | None = None,
) -> dict:
    tests = {t["nodeid"]: t for t in report.get("tests", [])}
    rows = [r for r in report.get("rows", []) if r.get("submitted", True)]
    graded = [r for r in rows if r.get("status") == "graded"]
    label = {
        r["student"]: (r["student"] if show_names else f"submission {i + 1}")
        for i, r in enumerate(rows)
    }
    sigs = signatures(course, name, mutants_json)
    # a mistake's signature per graded step: the tests of that step it fails
    by_cell: dict[tuple[str, frozenset], list[str]] = defaultdict(list)
    for mistake, failed in sigs.items():
        split: dict[str, set] = defaultdict(set)
        for test in failed:
            split[test_cell(test, tests)].add(test)
        for cell, subset in split.items():
            by_cell[(cell, frozenset(subset))].append(mistake)

    def which(cell: str, failed: set, said: dict[str, str]) -> list[str]:
        """The catalogued mistakes that fail exactly ``failed`` of ``cell``; of several, those
        whose messages (numbers out) are the student's, when any are."""
        mistakes = by_cell.get((cell, frozenset(failed)), [])
        alike = [m for m in mistakes if all(sigs[m].get(t) == said[t] for t in failed)]
        return alike or mistakes

    cat = catalogue(course, name)

    max_total = max((r.get("max_score", 0) for r in rows), default=0)
    totals = [r.get("score", 0.0) for r in graded]
    steps: dict[str, list[float]] = defaultdict(list)
    step_max: dict[str, float] = {}
    for r in graded:
        for cell in r.get("cells", {}).values():
            steps[cell["grade_id"]].append(cell["score"])
            step_max[cell["grade_id"]] = cell["max_score"]

    per_test = []
    for nodeid, meta in tests.items():
        results = [r["tests"].get(nodeid) for r in graded if r.get("tests")]
        results = [x for x in results if x]
        if not results:
            continue
        passed = sum(x["points"] >= x["max_points"] - TOLERANCE for x in results)
        lost = sum(x["max_points"] - x["points"] for x in results)
        per_test.append({
            "test": nodeid.split("::")[-1], "cell": meta.get("cell"),
            "pass_rate": passed / len(results), "points_lost": round(lost, 6),
            "students": len(results),
        })  # fmt: skip
    per_test.sort(key=lambda t: (-t["points_lost"], t["test"]))

    named: dict[str, dict] = {}
    unmatched: dict[tuple[str, str], dict] = {}
    for r in graded:
        failed_by_cell: dict[str, set] = defaultdict(set)
        for nodeid, x in (r.get("tests") or {}).items():
            if x["points"] < x["max_points"] - TOLERANCE:
                failed_by_cell[x.get("cell") or tests.get(nodeid, {}).get("cell", "?")].add(nodeid)
        for cell, failed in failed_by_cell.items():
            messages = [r["tests"][t].get("message") or "" for t in failed]
            if all(NOT_DONE.search(m) for m in messages):
                entry = unmatched.setdefault(
                    (cell, "not attempted"),
                    {"cell": cell, "message": "not attempted (NotImplementedError)",
                     "students": [], "tests": set()},
                )  # fmt: skip
                entry["students"].append(r["student"])
                entry["tests"] |= failed
                continue
            said = {t: message_group(r["tests"][t].get("message", "")) for t in failed}
            mistakes = which(cell, failed, said)
            if mistakes:
                title = " or ".join(sorted(mistakes))
                entry = named.setdefault(title, {
                    "mistakes": sorted(mistakes), "cell": cell, "students": [],
                    "tests": sorted(failed),
                    "description": "; ".join(
                        str(cat.get(m, {}).get("description") or cat.get(m, {}).get("phrase") or "")
                        for m in sorted(mistakes)),
                })  # fmt: skip
                entry["students"].append(r["student"])
                continue
            messages = sorted(message_group(r["tests"][t].get("message", "")) for t in failed)
            key = (cell, messages[0])
            entry = unmatched.setdefault(
                key, {"cell": cell, "message": messages[0], "students": [], "tests": set()}
            )
            entry["students"].append(r["student"])
            entry["tests"] |= failed

    files = {r["student"]: r for r in rows}

    def notebooks_of(student: str) -> list[Path]:
        if paths is not None:
            return [p for p in paths.get(student, []) if p]
        found = []
        for nb in (files.get(student, {}).get("notebooks") or {}).values():
            for base in (submissions / student, submissions) if submissions else ():
                if (base / str(nb.get("file", ""))).is_file():
                    found.append(base / str(nb.get("file", "")))
                    break
        return found

    def snippets(students: list[str], cells: list[str]) -> list[dict]:
        out = []
        for student in students:
            if len(out) == 2:
                break
            for path in notebooks_of(student)[:1]:
                code = [solution_code(path, c) for c in cells]
                code = [anonymised(c) for c in code if c]
                if code:
                    out.append({"from": label[student], "code": "\n\n".join(code)})
        return out

    mistakes_table = []
    for title, entry in named.items():
        cells = sorted({c for m in entry["mistakes"] for c in (cat.get(m, {}).get("cells") or {})})
        mistakes_table.append({
            "mistake": title, "mistakes": entry["mistakes"], "description": entry["description"],
            "step": entry["cell"],
            "count": len(entry["students"]), "share": len(entry["students"]) / max(1, len(graded)),
            "tests": entry["tests"], "examples": snippets(entry["students"], cells),
            "students": [label[s] for s in entry["students"]] if show_names else [],
        })  # fmt: skip
    mistakes_table.sort(key=lambda m: (-m["count"], m["mistake"]))
    other = [
        {"step": e["cell"], "message": e["message"], "count": len(e["students"]),
         "share": len(e["students"]) / max(1, len(graded)), "tests": sorted(e["tests"]),
         "students": [label[s] for s in e["students"]] if show_names else []}
        for e in unmatched.values()
    ]  # fmt: skip
    other.sort(key=lambda m: (-m["count"], m["message"]))

    similarity = []
    sim_path = Path(report.get("_out", "")) / "similarity.json"
    if sim_path.is_file():
        sim = json.loads(sim_path.read_text(encoding="utf-8"))
        for pair in sim.get("pairs", [])[:5]:
            similarity.append({
                "a": label.get(pair["a"], pair["a"] if pair["a"] == "reference" else "another"),
                "b": label.get(pair["b"], pair["b"] if pair["b"] == "reference" else "another"),
                "score": pair["score"], "kind": pair.get("kind", ""),
            })  # fmt: skip
    written = written_cells(course, name)
    pending = sum(bool(r.get("manual_pending")) for r in rows)
    late = [r["seconds_late"] / 3600 for r in rows if r.get("seconds_late") is not None]
    return {
        "assignment": name,
        "submissions": len(rows),
        "graded": len(graded),
        "not_graded": len(rows) - len(graded),
        "max_score": max_total,
        "total": summary(totals, max_total),
        "totals": totals,
        "steps": {s: {**summary(v, step_max[s]), "scores": v} for s, v in steps.items()},
        "tests": per_test,
        "mistakes": mistakes_table,
        "other_failures": other,
        "signatures_from": str(mutants_json or course.grading_dir / f"mutants-{name}.json")
        if sigs
        else None,
        "similarity": similarity,
        "written": {"questions": written, "submissions_waiting": pending if written else 0},
        "hours_late": late,
        "names_shown": show_names,
    }


def summary(values: list[float], top: float) -> dict:
    if not values:
        return {"median": None, "blank": 0, "full": 0, "max": top}
    return {
        "median": statistics.median(values),
        "blank": sum(v <= TOLERANCE for v in values),
        "full": sum(v >= top - TOLERANCE for v in values),
        "max": top,
    }


# ---------------------------------------------------------------------------- plots


def svg(fig, alt: str) -> str:
    """A matplotlib figure as inline SVG with alt text (role="img", aria-label, <title>)."""
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    alt_html = html.escape(alt, quote=True)
    text = text.replace(
        "<svg ", f'<svg role="img" aria-label="{alt_html}" class="plot" ', 1
    ).replace(">", f"><title>{alt_html}</title>", 1)
    return re.sub(r'(width|height)="[\d.]+pt"', "", text, count=2)


def histogram(values: list[float], top: float, title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 2.6))
    bins = max(1, min(24, int(round(top)) + 1)) if top else 10
    ax.hist(values, bins=bins, range=(0, top or 1), color="#3b6ea8", edgecolor="white")
    if values:
        ax.axvline(statistics.median(values), color="#c0392b", linestyle="--", label="median")
        ax.legend(frameon=False)
    ax.set_xlabel("points")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title)
    median = f"{statistics.median(values):g}" if values else "none"
    return svg(fig, f"{title}: histogram of {len(values)} scores out of {top:g}; median {median}")


def bars(labels: list[str], values: list[float], title: str, xlabel: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 0.42 * len(labels) + 1.0))
    ax.barh(range(len(labels)), values, color="#c0392b")
    ax.set_yticks(range(len(labels)), [label[:48] for label in labels])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.xaxis.get_major_locator().set_params(integer=True)
    alt = f"{title}: " + "; ".join(f"{a} {b:g}" for a, b in zip(labels, values))
    return svg(fig, alt)


def trajectory(reports: list[dict]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    names = [r["assignment"] for r in reports]
    medians = [
        100 * r["total"]["median"] / r["max_score"] if r["total"]["median"] is not None else 0
        for r in reports
    ]
    lows = [100 * _quantile(r["totals"], 0.25) / r["max_score"] for r in reports]
    highs = [100 * _quantile(r["totals"], 0.75) / r["max_score"] for r in reports]
    x = list(range(len(names)))
    ax.fill_between(x, lows, highs, color="#3b6ea8", alpha=0.25, label="middle half")
    ax.plot(x, medians, marker="o", color="#3b6ea8", label="median")
    ax.set_xticks(x, names, rotation=15)
    ax.set_ylim(0, 100)
    ax.set_ylabel("score (%)")
    ax.legend(frameon=False)
    alt = "class median per assignment: " + "; ".join(
        f"{n} {m:.0f} %" for n, m in zip(names, medians)
    )
    return svg(fig, alt)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------------------- page

STYLE = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:auto;padding:1rem;line-height:1.45}
table{border-collapse:collapse;width:100%;font-size:.92rem;display:block;overflow-x:auto}
td,th{border-bottom:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
pre{background:#f5f5f5;padding:.5rem;overflow-x:auto;font-size:.85rem}
svg.plot{max-width:100%;height:auto}
.bar{background:#c0392b;height:.7rem;display:inline-block}
"""


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def page(data: dict) -> str:
    name = data["assignment"]
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">",
        f"<title>What the class got wrong: {esc(name)}</title><style>{STYLE}</style></head><body>",
        f"<h1>What the class got wrong: {esc(name)}</h1>",
        f"<p>{data['graded']} graded submissions"
        + (f" ({data['not_graded']} not graded)" if data["not_graded"] else "")
        + f"; total out of {data['max_score']:g}: median {fmt(data['total']['median'])}, "
        f"{data['total']['blank']} at 0, {data['total']['full']} at full marks. "
        + ("Student names are shown." if data["names_shown"] else "No student names are shown.")
        + "</p>",
    ]
    top = data["mistakes"][:2]
    if top:
        out.append(
            "<p><strong>To re-teach first:</strong> "
            + "; ".join(
                f"{esc(m['mistake'])} in <code>{esc(m['step'])}</code> ({m['share']:.0%} of "
                "the class)"
                for m in top
            )
            + ".</p>"
        )
    out.append("<h2>Named mistakes</h2>")
    if data["mistakes"]:
        labels = [f"{m['step']}: {m['mistake']}" for m in data["mistakes"][:12]]
        out.append(
            bars(
                labels,
                [m["count"] for m in data["mistakes"][:12]],
                "Named mistakes",
                "students",
            )
        )
        out.append("<table><tr><th>mistake</th><th>step</th><th>students</th><th>what it is</th>"
                   "<th>examples</th></tr>")  # fmt: skip
        for m in data["mistakes"]:
            examples = "".join(
                f"<p>{esc(e['from'])}</p><pre>{esc(e['code'])}</pre>" for e in m["examples"]
            )
            who = f"<br>{esc(', '.join(m['students']))}" if m["students"] else ""
            out.append(
                f"<tr><td>{esc(m['mistake'])}</td><td><code>{esc(m['step'])}</code></td>"
                f"<td>{m['count']} ({m['share']:.0%}){who}</td><td>{esc(m['description'])}</td>"
                f"<td>{examples}</td></tr>"
            )
        out.append("</table>")
    elif data["signatures_from"] is None:
        out.append(
            f"<p>No mistake signatures: run <code>python -m autograder mutants {esc(name)}"
            "</code> once to name the catalogued mistakes.</p>"
        )
    else:
        out.append("<p>No catalogued mistake in this class.</p>")
    out.append("<h2>Other failures, grouped by message</h2>")
    if data["other_failures"]:
        out.append("<table><tr><th>step</th><th>students</th><th>message</th></tr>")
        for m in data["other_failures"][:30]:
            who = f"<br>{esc(', '.join(m['students']))}" if m["students"] else ""
            out.append(
                f"<tr><td><code>{esc(m['step'])}</code></td><td>{m['count']} "
                f"({m['share']:.0%}){who}</td><td>{esc(m['message'])}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>None.</p>")
    out.append("<h2>Scores</h2>")
    out.append(histogram(data["totals"], data["max_score"], "Total score"))
    out.append("<table><tr><th>step</th><th>median</th><th>at 0</th><th>full marks</th></tr>")
    for step, s in data["steps"].items():
        out.append(
            f"<tr><td><code>{esc(step)}</code></td><td>{fmt(s['median'])} / {s['max']:g}</td>"
            f"<td>{s['blank']}</td><td>{s['full']}</td></tr>"
        )
    out.append("</table>")
    for step, s in data["steps"].items():
        out.append(histogram(s["scores"], s["max"], f"Step {step}"))
    if data["hours_late"]:
        out.append(histogram_late(data["hours_late"]))
    else:
        out.append("<p>Lateness: no submission times were recorded (graded without a due date "
                   "or with --no-gradebook).</p>")  # fmt: skip
    out.append("<h2>Hidden tests, most points lost first</h2>")
    out.append("<table><tr><th>test</th><th>step</th><th>pass rate</th><th>points lost</th></tr>")
    for t in data["tests"]:
        out.append(
            f"<tr><td><code>{esc(t['test'])}</code></td><td><code>{esc(t['cell'])}</code></td>"
            f"<td>{t['pass_rate']:.0%}</td><td>{t['points_lost']:g}</td></tr>"
        )
    out.append("</table>")
    out.append("<h2>Similarity and written answers</h2>")
    if data["similarity"]:
        out.append("<p>Most similar pairs (details in similarity.html beside this page):</p><ul>")
        for p in data["similarity"]:
            out.append(f"<li>{esc(p['a'])} and {esc(p['b'])}: {p['score']:.2f}</li>")
        out.append("</ul><p><a href='similarity.html'>similarity.html</a></p>")
    else:
        out.append("<p>No similarity report beside this page.</p>")
    w = data["written"]
    if w["questions"]:
        out.append(
            f"<p>Written questions {esc(', '.join(w['questions']))}: "
            f"{w['submissions_waiting']} submissions wait for a grader (formgrader).</p>"
        )
    out.append("</body></html>")
    return "\n".join(out)


def histogram_late(hours: list[float]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 2.4))
    ax.hist(hours, bins=12, color="#7f8c8d", edgecolor="white")
    ax.set_xlabel("hours after the due date (negative: early)")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    late = sum(h > 0 for h in hours)
    return svg(fig, f"Lateness: {late} of {len(hours)} submissions after the due date")


def fmt(value) -> str:
    return "-" if value is None else f"{value:g}"


def trajectory_page(reports: list[dict]) -> str:
    rows = "".join(
        f"<tr><td>{esc(r['assignment'])}</td><td>{r['graded']}</td>"
        f"<td>{fmt(r['total']['median'])} / {r['max_score']:g}</td>"
        f"<td>{esc(r['mistakes'][0]['mistake'] if r['mistakes'] else '-')}</td></tr>"
        for r in reports
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "style-src 'unsafe-inline'\">"
        f"<title>The class over the term</title><style>{STYLE}</style></head><body>"
        "<h1>The class over the term</h1>"
        + trajectory(reports)
        + "<table><tr><th>assignment</th><th>graded</th><th>median</th>"
        "<th>commonest named mistake</th></tr>" + rows + "</table></body></html>"
    )


# ---------------------------------------------------------------------------- command


def insight(
    course: Course,
    names: list[str],
    *,
    out_root: Path | None = None,
    mutants_json: Path | None = None,
    submissions: Path | None = None,
    show_names: bool = False,
) -> int:
    started = time.perf_counter()
    reports = []
    for name in names:
        out = (out_root / name) if (out_root and len(names) > 1) else (out_root or None)
        out = out or course.root / "autograder_out" / name
        report = load_report(out)
        report["_out"] = str(out)
        data = analyse(
            course, name, report, mutants_json=mutants_json,
            submissions=submissions if submissions else course.submitted_dir,
            show_names=show_names,
        )  # fmt: skip
        (out / "insight.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
        (out / "insight.html").write_text(page(data), encoding="utf-8")
        reports.append(data)
        print(f"insight {name}: {data['graded']} graded; median {fmt(data['total']['median'])} "
              f"/ {data['max_score']:g}; {out / 'insight.html'}")  # fmt: skip
        for m in data["mistakes"][:3]:
            print(f"  {m['share']:>4.0%} {m['step']}: {m['mistake']}")
        if data["signatures_from"] is None:
            print(f"  (no mistake signatures: run `python -m autograder mutants {name}` once)")
    if len(reports) > 1:
        root = out_root or course.root / "autograder_out"
        (root / "insight-term.html").write_text(trajectory_page(reports), encoding="utf-8")
        print(f"insight: the class over {len(reports)} assignments in {root / 'insight-term.html'}")
    print(f"insight: {time.perf_counter() - started:.1f} s")
    return 0


def after_grading(course: Course, name: str, out: Path, subs: list) -> None:
    """The class report at the end of ``grade`` (never fails the grading: a problem is said)."""
    try:
        report = load_report(out)
        report["_out"] = str(out)
        paths = {s.student: [p for p in s.notebooks.values() if p] for s in subs}
        data = analyse(course, name, report, paths=paths)
        (out / "insight.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
        (out / "insight.html").write_text(page(data), encoding="utf-8")
    except Exception as error:  # noqa: BLE001 (a report, never a grade)
        print(f"class report skipped: {type(error).__name__}: {error}")
        return
    print(f"what the class got wrong: {out / 'insight.html'}")
    for m in data["mistakes"][:3]:
        print(f"  {m['share']:>4.0%} {m['step']}: {m['mistake']}")
    if data["signatures_from"] is None:
        print(f"  (to name the catalogued mistakes: `python -m autograder mutants {name}` once)")


def by_cell_counts(data: dict) -> Counter:
    """``mistake -> students`` (tests use it to compare with a known class)."""
    return Counter({m["mistake"]: m["count"] for m in data["mistakes"]})
