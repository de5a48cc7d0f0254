"""Evidence weighted by how common it is, and one ranked list of pairs of submissions.

A fingerprint that many submissions of the class share (or the instructor's independent
rewrites, the *background*) is the usual way to write that piece of code, not evidence that one
student copied another: MOSS ignores fingerprints found in more than a few documents, Dolos
weighs them down. Per graded cell, each fingerprint ``h`` gets

    w(h) = 0                                   if df(h) > max(MIN_COMMON, COMMON_SHARE * N)
    w(h) = log((N + 1) / df(h)) / log(N + 1)   otherwise (1 for a fingerprint of one submission)

where ``N`` counts the class's comparable submissions of the cell and the background's, and
``df(h)`` those holding ``h`` (references and past submissions are what copies come from, not
samples of the class, so they do not count). A unit's *mass* is the sum of its fingerprints'
weights: the code of its own that few others wrote. A unit under ``MIN_MASS`` holds nothing
distinctive; a cell where most units do has **one natural form** and is reported as such.

Two owners (students, the reference, a past student) are compared over every cell both have:

    score = sum_cells shared(a, b) / (sum_cells min(mass(a), mass(b)) + PRIOR)

over the cells without one natural form (those are listed as such, never as evidence).

``shared`` is the weight of the fingerprints both hold; ``PRIOR`` (a few fingerprints' worth)
keeps a pair whose only distinctive code is a line or two from scoring 1.0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autograder.tools.similarity.units import Unit

COMMON_SHARE = 0.3  # a fingerprint in more than this share of the class is the usual code ...
MIN_COMMON = 3  # ... once more than this many submissions hold it
MIN_MASS = 4.0  # a unit with less distinctive weight than this has nothing of its own
NATURAL_SHARE = 0.5  # a cell where this share of units has nothing of its own: one natural form
PRIOR = 8.0  # pseudo-mass in the denominator of a pair's score (about two lines of own code)
THRESHOLD = 0.5
REFERENCE = "reference"


@dataclass
class CellWeights:
    """What the class says about one graded cell."""

    key: str
    n: int  # documents: comparable student units and background units
    weight: dict[int, float]  # fingerprint -> weight (0 for the usual code)
    mass: dict[int, float] = field(default_factory=dict)  # id(unit) -> its mass
    usual: int = 0  # student units with nothing distinctive
    students: int = 0  # comparable student units

    @property
    def natural(self) -> bool:
        return self.students > 0 and self.usual >= NATURAL_SHARE * self.students

    def w(self, h: int) -> float:
        return self.weight.get(h, 1.0)  # a fingerprint no student holds (a reference's own)

    def of(self, unit: Unit) -> float:
        got = self.mass.get(id(unit))
        if got is None:
            got = self.mass[id(unit)] = sum(self.w(h) for h in unit.prints)
        return got


def cell_weights(
    key: str,
    students: list[Unit],
    background: list[Unit] = (),
    groups: dict[str, str] | None = None,
) -> CellWeights:
    """``groups``: owner -> group, for submissions already found to be copies of one another
    (or of the same source): a group counts once, so that five copies of the reference do not
    make the reference's code look like the usual way to write it."""
    groups = groups or {}
    docs = [u for u in students if u.comparable] + [u for u in background if u.prints]
    holders: dict[int, set[str]] = {}
    for unit in docs:
        doc = groups.get(unit.owner, unit.owner)
        for h in unit.prints:
            holders.setdefault(h, set()).add(doc)
    df = {h: len(who) for h, who in holders.items()}
    n = len({groups.get(u.owner, u.owner) for u in docs})
    cut = max(MIN_COMMON, COMMON_SHARE * n)
    scale = math.log(n + 1) if n else 1.0
    weight = {h: 0.0 if d > cut else _weight(d, n, scale) for h, d in df.items()}
    cw = CellWeights(key, n, weight)
    live = [u for u in students if u.comparable]
    cw.students = len(live)
    cw.usual = sum(1 for u in live if cw.of(u) < MIN_MASS)
    return cw


def _weight(d: int, n: int, scale: float) -> float:
    return min(1.0, math.log((n + 1) / d) / scale)


def shared(cw: CellWeights, a: Unit, b: Unit) -> float:
    small, big = (a, b) if len(a.prints) <= len(b.prints) else (b, a)
    return sum(cw.w(h) for h in small.prints if h in big.prints)


# ---------------------------------------------------------------------------------------------
# Pairs of owners, evidence aggregated over cells
# ---------------------------------------------------------------------------------------------


@dataclass
class CellMatch:
    key: str
    a: Unit
    b: Unit
    shared: float
    mass: float  # min of the two masses
    natural: bool  # the cell has one natural form

    @property
    def score(self) -> float:
        return self.shared / self.mass if self.mass else 0.0


@dataclass
class Match:
    a: str
    b: str
    kind: str  # "student", "reference" or "past": what ``b`` is
    cells: list[CellMatch]
    score: float = 0.0
    evidence: float = 0.0  # sum of the shared weights

    def rank_key(self) -> tuple:
        return (-self.score, -self.evidence, self.a, self.b)


def _score(cells: list[CellMatch]) -> tuple[float, float]:
    """A cell with one natural form is no evidence either way: left out of both sums."""
    live = [c for c in cells if not c.natural]
    evidence = sum(c.shared for c in live)
    return evidence / (sum(c.mass for c in live) + PRIOR), evidence


def rank(
    students: dict[str, dict[str, Unit]],
    others: dict[str, list[Unit]],
    weights: dict[str, CellWeights],
) -> list[Match]:
    """Every pair of owners (student ~ student, student ~ reference, student ~ past), most
    similar first. ``others``: per cell, the reference units and past submissions' units."""
    owners = sorted(students)
    index = {o: i for i, o in enumerate(owners)}
    # student ~ student through an inverted index of the weighted fingerprints: a pair that
    # shares nothing of weight is never visited
    acc: dict[tuple[int, int], dict[str, float]] = {}
    for key, cw in weights.items():
        postings: dict[int, list[int]] = {}
        for owner in owners:
            unit = students[owner].get(key)
            if unit is None or not unit.comparable:
                continue
            for h in unit.prints:
                if cw.w(h) > 0:
                    postings.setdefault(h, []).append(index[owner])
        for h, holders in postings.items():
            if len(holders) < 2:
                continue
            wh = cw.w(h)
            for i, x in enumerate(holders):
                for y in holders[i + 1 :]:
                    cell = acc.setdefault((x, y), {})
                    cell[key] = cell.get(key, 0.0) + wh
    matches = []
    for i, a in enumerate(owners):
        for j in range(i + 1, len(owners)):
            b = owners[j]
            found = acc.get((i, j), {})
            cells = []
            for key, cw in weights.items():
                ua, ub = students[a].get(key), students[b].get(key)
                if ua is None or ub is None or not (ua.comparable and ub.comparable):
                    continue
                cells.append(
                    CellMatch(
                        key, ua, ub, found.get(key, 0.0), min(cw.of(ua), cw.of(ub)), cw.natural
                    )  # fmt: skip
                )
            matches.append(_finish(Match(a, b, "student", cells)))
    # student ~ reference (the best of its units per cell) and student ~ past submission
    groups: dict[str, dict[str, list[Unit]]] = {}
    for key, units in others.items():
        for u in units:
            if not u.prints:
                continue
            name = REFERENCE if u.kind == "reference" else u.owner
            groups.setdefault(name, {}).setdefault(key, []).append(u)
    for other, per_cell in sorted(groups.items()):
        kind = "reference" if other == REFERENCE else "past"
        for a in owners:
            cells = []
            for key, units in per_cell.items():
                ua, cw = students[a].get(key), weights.get(key)
                if ua is None or not ua.comparable or cw is None:
                    continue
                best = max(
                    (CellMatch(key, ua, u, shared(cw, ua, u), min(cw.of(ua), cw.of(u)),
                               cw.natural) for u in units),
                    key=lambda c: (c.score, c.shared),
                )  # fmt: skip
                cells.append(best)
            matches.append(_finish(Match(a, other, kind, cells)))
    matches.sort(key=Match.rank_key)
    return matches


def copy_groups(matches: list[Match], threshold: float) -> dict[str, str]:
    """owner -> group: the connected parts of the pairs at or above ``threshold`` (a student
    flagged against the reference or a past submission joins that source's group)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x] = parent.get(parent[x], parent[x])
        return x

    for m in matches:
        if m.score < threshold:
            break
        ra, rb = find(m.a), find(m.b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {o: find(o) for o in list(parent)}


def _finish(match: Match) -> Match:
    match.score, match.evidence = _score(match.cells)
    return match
