"""similarity.md, similarity.html and similarity.json: one ranked list of pairs, the cells with
one natural form, a side-by-side view of each flagged pair and what could not be compared.

Every name and line of code comes from a student: escaped for the format it lands in."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from autograder.tools.similarity.fingerprints import K
from autograder.tools.similarity.units import Unit
from autograder.tools.similarity.weighting import CellMatch, CellWeights, Match, key_holders

MAX_DETAILS = 40  # side-by-side views
MAX_LISTED = 200  # pairs in the table and the JSON beyond the flagged ones: none
# rows of the ranked table in .md and .html (similarity.json keeps every flagged pair): a group of
# n identical submissions (a key shared by half a class of 1,000) is n (n - 1) / 2 pairs, and the
# table would not open; the groups section gathers them instead
MAX_TABLE = 300


def matched_lines(cw: CellWeights, cm: CellMatch) -> tuple[set, set]:
    """The (block, line) of either side covered by shared fingerprints that carry weight."""
    common = {h for h in cm.a.prints.keys() & cm.b.prints.keys() if cw.w(h) > 0}
    return _lines(cm.a, common), _lines(cm.b, common)


def _lines(unit: Unit, hashes: set[int]) -> set[tuple[int, int]]:
    lines = set()
    for h in hashes:
        for pos in unit.prints.get(h, []):
            for t in range(pos, min(pos + K, len(unit.tags))):
                lines.add(unit.tags[t])
    return lines


def _side(unit: Unit, lines: set[tuple[int, int]]) -> list[tuple[str, list[tuple[str, bool]]]]:
    shown = []
    for i, block in enumerate(unit.blocks):
        rows = [(text, (i, n) in lines) for n, text in enumerate(block.source.split("\n"), 1)]
        if i == 0 or any(hit for _, hit in rows):
            shown.append((block.label, rows))
    return shown


def _cell_name(key: str) -> str:
    return key.split("::", 1)[-1]


def _evidence(m: Match) -> list[CellMatch]:
    """The cells that carry the pair's evidence, strongest first (natural forms carry none)."""
    return sorted(
        (c for c in m.cells if (c.shared > 0 and not c.natural) or c.key_score > 0),
        key=lambda c: (-c.score, -c.shared),
    )


def _summary(m: Match) -> str:
    parts = [f"{_cell_name(c.key)} {c.score:.2f}" for c in _evidence(m)[:6]]
    return ", ".join(parts) or "-"


def _not_compared(units: list[Unit]) -> list[Unit]:
    return [u for u in units if u.reason]


def write_reports(
    out: Path,
    assignment: str,
    matches: list[Match],
    weights: dict[str, CellWeights],
    per_cell: dict[str, list[Unit]],
    threshold: float,
) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    flagged = [m for m in matches if m.score >= threshold]
    args = (assignment, flagged, weights, per_cell, threshold)
    (out / "similarity.md").write_text(_markdown(*args), encoding="utf-8")
    (out / "similarity.html").write_text(_html(*args), encoding="utf-8")
    data = {
        "threshold": threshold,
        "pairs": [
            {
                "a": m.a,
                "b": m.b,
                "kind": m.kind,
                "score": round(m.score, 3),
                "evidence": round(m.evidence, 2),
                "cells": {
                    _cell_name(c.key): round(c.score, 3) for c in _evidence(m) if c.score > 0
                },
            }
            for m in flagged
        ],
        "natural": sorted(_cell_name(k) for k, cw in weights.items() if cw.natural),
        "key": {_cell_name(k): v for k, v in key_holders(flagged, threshold).items()},
    }
    (out / "similarity.json").write_text(json.dumps(data, indent=1))
    return out / "similarity.md", out / "similarity.html"


def groups(flagged: list[Match]) -> list[tuple[list[str], int]]:
    """Submissions joined by flagged student ~ student pairs (the connected components), with
    the number of flagged pairs inside each; groups of three or more, largest first."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    students = [m for m in flagged if m.kind == "student"]
    for m in students:
        parent[root(m.a)] = root(m.b)
    members: dict[str, list[str]] = {}
    for x in list(parent):
        members.setdefault(root(x), []).append(x)
    pairs: dict[str, int] = {}
    for m in students:
        pairs[root(m.a)] = pairs.get(root(m.a), 0) + 1
    found = [(sorted(who), pairs.get(r, 0)) for r, who in members.items() if len(who) >= 3]
    return sorted(found, key=lambda g: (-len(g[0]), g[0]))


def _group_lines(flagged: list[Match]) -> list[str]:
    return [
        f"{len(who)} submissions, {n} flagged pairs among them: {', '.join(who)}"
        for who, n in groups(flagged)
    ]


def _more_line(flagged: list[Match]) -> str:
    return (
        f"{len(flagged) - MAX_TABLE} more flagged pairs are not listed here: similarity.json "
        "has every one, and Groups below gathers the submissions they join."
    )


def _natural_text(cw: CellWeights, holders: list[str] = ()) -> str:
    text = (
        f"{cw.usual} of {cw.students} submissions hold nothing that few others wrote: "
        "the code has one natural form, so matches between students here are not evidence"
    )
    if holders:
        text += f"; {len(holders)} of them contain the key's code (see Shared with the key)"
    return text


def _key_lines(flagged: list[Match], threshold: float) -> list[str]:
    """One line per cell: "5 submissions contain the key's decoder: a, b, ..."."""
    lines = []
    for key, who in sorted(key_holders(flagged, threshold).items(), key=lambda x: -len(x[1])):
        many = len(who) > 1
        n = f"{len(who)} submission{'s' if many else ''} contain{'' if many else 's'}"
        lines.append(f"{n} the key's {_cell_name(key)}: {', '.join(who)}")
    return lines


def _skipped(per_cell: dict[str, list[Unit]]) -> list[tuple[str, str]]:
    """(owner, "reason (cells)"), one line per owner and reason."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for key, units in per_cell.items():
        for u in _not_compared(units):
            grouped.setdefault((u.owner, u.reason), []).append(_cell_name(key))
    return [(o, f"{r} ({', '.join(cells)})") for (o, r), cells in grouped.items()]


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _md(text: str) -> str:
    return re.sub(r"([\\`*_\[\]<>|#])", r"\\\1", str(text)).replace("\n", " ")


def _md_code(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}python\n{text}\n{fence}"


_INTRO = (
    "Pairs of submissions (and submission ~ reference, ~ past submission) ranked by the code "
    "they share that few others in the class wrote, over all graded cells: a fingerprint most "
    "of the class shares weighs nothing. The score is that shared weight over the smaller "
    "side's; pairs at or above {t:g} are listed. This flags code to look at; it changes no score."
)


_KEY_NOTE = (
    "The key's code counts however many submissions hold it (a leaked key is common because it "
    "leaked), unless the instructor's independent rewrites hold it too."
)


_GROUP_NOTE = (
    "Submissions joined by flagged pairs, three or more together: each holds code flagged with "
    "another member's (a chain may join two that are not flagged with each other)."
)


def _markdown(assignment, flagged, weights, per_cell, threshold) -> str:
    lines = [f"# Similarity: {_md(assignment)}", "", _INTRO.format(t=threshold), ""]
    lines += ["## Ranked pairs", ""]
    if not flagged:
        lines += ["No pair at or above the threshold.", ""]
    else:
        lines += ["| rank | score | submission | similar to | kind | cells (score) |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for i, m in enumerate(flagged[:MAX_TABLE], 1):
            lines.append(
                f"| {i} | {m.score:.2f} | {_md(m.a)} | {_md(m.b)} | {m.kind} | {_md(_summary(m))} |"
            )
        lines.append("")
        if len(flagged) > MAX_TABLE:
            lines += [_md(_more_line(flagged)), ""]
    holders = key_holders(flagged, threshold)
    shared_key = _key_lines(flagged, threshold)
    if shared_key:
        lines += ["## Shared with the key", "", _KEY_NOTE, ""]
        lines += [f"- {_md(line)}" for line in shared_key]
        lines.append("")
    grouped = _group_lines(flagged)
    if grouped:
        lines += ["## Groups", "", _GROUP_NOTE, ""]
        lines += [f"- {_md(line)}" for line in grouped]
        lines.append("")
    natural = [(k, cw) for k, cw in weights.items() if cw.natural]
    if natural:
        lines += ["## Cells with one natural form", ""]
        lines += [
            f"- {_md(_cell_name(k))}: {_md(_natural_text(cw, holders.get(k, [])))}"
            for k, cw in natural
        ]
        lines.append("")
    if flagged:
        lines += ["## Side by side", ""]
    for i, m in enumerate(flagged[:MAX_DETAILS], 1):
        lines += [f"### {i}. {_md(m.a)} ~ {_md(m.b)}: {m.score:.2f}", ""]
        for cm in _evidence(m):
            cw = weights[cm.key]
            note = " (one natural form)" if cm.natural else ""
            lines += [f"#### {_md(_cell_name(cm.key))}: {cm.score:.2f}{note}", ""]
            for unit, hits in zip((cm.a, cm.b), matched_lines(cw, cm)):
                for label, rows in _side(unit, hits):
                    text = "\n".join(("> " if hit else "  ") + t for t, hit in rows)
                    lines += [f"{_md(unit.owner)}, {_md(label)} (matching lines marked >):", ""]
                    lines += [_md_code(text), ""]
    skipped = _skipped(per_cell)
    if skipped:
        lines += ["## Not compared", ""]
        lines += [f"- {_md(owner)}: {_md(why)}" for owner, why in skipped]
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# HTML (self-contained)
# ---------------------------------------------------------------------------------------------

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}
.pair{display:flex;gap:1em;margin-bottom:1em}.side{flex:1;min-width:0}
pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:13px}
.hit{background:#ffe08a;display:block}.skip{color:#777}"""


def _html(assignment, flagged, weights, per_cell, threshold) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Similarity: {e(assignment)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Similarity: {e(assignment)}</h1>",
        f"<p>{e(_INTRO.format(t=threshold))} Matching lines are highlighted.</p>",
        "<h2>Ranked pairs</h2>",
    ]
    if not flagged:
        parts.append("<p>No pair at or above the threshold.</p>")
    else:
        parts.append("<table><tr><th>rank</th><th>score</th><th>submission</th>"
                     "<th>similar to</th><th>kind</th><th>cells (score)</th></tr>")  # fmt: skip
        for i, m in enumerate(flagged[:MAX_TABLE], 1):
            link = f"<a href='#pair{i}'>{i}</a>" if i <= MAX_DETAILS else str(i)
            parts.append(
                f"<tr><td>{link}</td><td>{m.score:.2f}</td>"
                f"<td>{e(m.a)}</td><td>{e(m.b)}</td><td>{e(m.kind)}</td>"
                f"<td>{e(_summary(m))}</td></tr>"
            )
        parts.append("</table>")
        if len(flagged) > MAX_TABLE:
            parts.append(f"<p>{e(_more_line(flagged))}</p>")
    holders = key_holders(flagged, threshold)
    shared_key = _key_lines(flagged, threshold)
    if shared_key:
        parts.append(f"<h2>Shared with the key</h2><p>{e(_KEY_NOTE)}</p><ul>")
        parts += [f"<li>{e(line)}</li>" for line in shared_key]
        parts.append("</ul>")
    grouped = _group_lines(flagged)
    if grouped:
        parts.append(f"<h2>Groups</h2><p>{e(_GROUP_NOTE)}</p><ul>")
        parts += [f"<li>{e(line)}</li>" for line in grouped]
        parts.append("</ul>")
    natural = [(k, cw) for k, cw in weights.items() if cw.natural]
    if natural:
        parts.append("<h2>Cells with one natural form</h2><ul>")
        parts += [
            f"<li>{e(_cell_name(k))}: {e(_natural_text(cw, holders.get(k, [])))}</li>"
            for k, cw in natural
        ]
        parts.append("</ul>")
    if flagged:
        parts.append("<h2>Side by side</h2>")
    for i, m in enumerate(flagged[:MAX_DETAILS], 1):
        parts.append(f"<h3 id='pair{i}'>{i}. {e(m.a)} ~ {e(m.b)}: {m.score:.2f}</h3>")
        for cm in _evidence(m):
            note = " (one natural form)" if cm.natural else ""
            parts.append(f"<h4>{e(_cell_name(cm.key))}: {cm.score:.2f}{e(note)}</h4>")
            parts.append("<div class='pair'>")
            for unit, hits in zip((cm.a, cm.b), matched_lines(weights[cm.key], cm)):
                parts.append(f"<div class='side'><b>{e(unit.owner)}</b>")
                for label, rows in _side(unit, hits):
                    body = "".join(
                        f"<span class='hit'>{e(t) or ' '}</span>" if hit else e(t) + "\n"
                        for t, hit in rows
                    )
                    parts.append(f"<div>{e(label)}</div><pre>{body}</pre>")
                parts.append("</div>")
            parts.append("</div>")
    skipped = _skipped(per_cell)
    if skipped:
        parts.append("<h2 class='skip'>Not compared</h2><ul class='skip'>")
        parts += [f"<li>{e(owner)}: {e(why)}</li>" for owner, why in skipped]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
