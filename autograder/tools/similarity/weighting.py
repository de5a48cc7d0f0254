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

**The key's evidence is never discounted by the class.** A leaked key is shared by many exactly
because it leaked, so a student ~ reference pair is also scored with
every fingerprint weighing 1 unless the instructor's independent rewrites (the background: the
course's independent corpus by default) hold it too, what people who never saw the key wrote:

    key score = max over the two streams (tokens, shape) of
                sum_cells |a & ref - bg| / (sum_cells min(|a - bg|, |ref - bg|) + PRIOR)

The shape stream (:mod:`.normalise`) survives helpers, dead code and other vocabulary. A pair's
score is the larger of the class-weighted score and the key score; cells without background
have no key score (the class is then the only judge of what is natural). Past submissions
keep the class's weights: eight rewrites do not cover every natural form a past student wrote,
and on the corpus their undiscounted evidence flags about 10 honest students per class.
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
    background: set[int] | None = None  # token fingerprints of the rewrites (None: no rewrites)
    background_shapes: set[int] = field(default_factory=set)  # and of their shapes

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
    rewrites = [u for u in background if u.prints]
    if rewrites:
        cw.background = {h for u in rewrites for h in u.prints}
        cw.background_shapes = {h for u in rewrites for h in u.shapes}
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


def key_evidence(cw: CellWeights, a: Unit, b: Unit) -> tuple[float, float, float, float]:
    """(shared, mass) of the token stream and of the shape stream, each fingerprint weighing 1
    unless the background holds it (see the module's docstring)."""
    bg, bgs = cw.background or set(), cw.background_shapes
    pa, pb = a.prints.keys() - bg, b.prints.keys() - bg
    sa, sb = a.shapes - bgs, b.shapes - bgs
    return len(pa & pb), min(len(pa), len(pb)), len(sa & sb), min(len(sa), len(sb))


@dataclass
class CellMatch:
    key: str
    a: Unit
    b: Unit
    shared: float
    mass: float  # min of the two masses
    natural: bool  # the cell has one natural form
    key_shared: tuple[float, float] = (0.0, 0.0)  # (tokens, shape) shared beyond the background
    key_mass: tuple[float, float] = (0.0, 0.0)  # None of it when the cell has no background

    @property
    def score(self) -> float:
        return max(self.shared / self.mass if self.mass else 0.0, self.key_score)

    @property
    def key_score(self) -> float:
        """The cell's key score (no prior: the per-cell view of the report)."""
        return max((s / m if m else 0.0) for s, m in zip(self.key_shared, self.key_mass))


@dataclass
class Match:
    a: str
    b: str
    kind: str  # "student", "reference" or "past": what ``b`` is
    cells: list[CellMatch]
    score: float = 0.0
    evidence: float = 0.0  # sum of the shared weights
    class_score: float = 0.0  # the class-weighted score
    key_score: float = 0.0  # the score against the key's own code (0: student pairs)

    def rank_key(self) -> tuple:
        return (-self.score, -self.evidence, self.a, self.b)


def _score(cells: list[CellMatch]) -> tuple[float, float]:
    """A cell with one natural form is no evidence either way: left out of both sums."""
    live = [c for c in cells if not c.natural]
    evidence = sum(c.shared for c in live)
    return evidence / (sum(c.mass for c in live) + PRIOR), evidence


def _key_score(cells: list[CellMatch]) -> float:
    """The key score over the cells: the better of the two streams (natural or not)."""
    best = 0.0
    for stream in (0, 1):
        shared = sum(c.key_shared[stream] for c in cells)
        best = max(best, shared / (sum(c.key_mass[stream] for c in cells) + PRIOR))
    return best


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
                options = []
                for u in units:
                    cm = CellMatch(key, ua, u, shared(cw, ua, u), min(cw.of(ua), cw.of(u)),
                                   cw.natural)  # fmt: skip
                    if cw.background is not None and kind == "reference":
                        ts, tm, ss, sm = key_evidence(cw, ua, u)
                        cm.key_shared, cm.key_mass = (ts, ss), (tm, sm)
                    options.append(cm)
                cells.append(max(options, key=lambda c: (c.score, c.shared)))
            match = _finish(Match(a, other, kind, cells))
            match.key_score = _key_score(cells)
            match.score = max(match.class_score, match.key_score)
            matches.append(match)
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
    match.class_score = match.score
    return match


def key_holders(matches: list[Match], threshold: float) -> dict[str, list[str]]:
    """cell key -> the submissions whose code of that cell is the key's (its key score at or
    above ``threshold`` in a pair flagged against the reference), however many they are."""
    out: dict[str, list[str]] = {}
    for m in matches:
        if m.kind != "reference" or m.score < threshold:
            continue
        for c in m.cells:
            if c.key_score >= threshold or (c.mass and c.shared / c.mass >= threshold):
                out.setdefault(c.key, []).append(m.a)
    return {k: sorted(v) for k, v in out.items()}
