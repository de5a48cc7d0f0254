"""The similarity report: copies ranked above independent work, the one natural way to write a
cell not taken for copying, disguises undone, hostile files reported."""

from __future__ import annotations

import ast
import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.cli import main
from autograder.course.layout import Course
from autograder.host.intake import discover
from autograder.tools import similarity as S

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "similarity"))
import similarity_corpus as corpus  # noqa: E402

W = importlib.import_module("autograder.tools.similarity.weighting")
N = importlib.import_module("autograder.tools.similarity.normalise")
R = importlib.import_module("autograder.tools.similarity.report")
command = importlib.import_module("autograder.tools.similarity.command")

COURSE = Course(corpus.COURSE_ROOT)  # the frozen releases the classes were written for
A2, A3 = "a2_self_attention", "a3_transformer"
RELEASE = COURSE.release_dir(A2) / f"{A2}.ipynb"
SDPA = f"{A2}.ipynb::scaled_dot_product_attention"


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> dict:
    """Per assignment: the class, its submissions and past folder on disk, and a builder."""
    out = {}
    for assignment in (A2, A3):
        klass = corpus.build(assignment)
        folder = tmp_path_factory.mktemp(assignment)
        subs_dir = klass.write(folder / "subs")
        past = klass.write_past(folder)
        builder = S.Builder(COURSE, assignment)
        subs = discover(subs_dir, assignment, list(builder.release_nbs))
        out[assignment] = (klass, builder, subs, past)
    return out


def _analyse(classes, assignment: str) -> tuple[corpus.Class, S.Result]:
    klass, builder, subs, past = classes[assignment]
    return klass, S.analyse(builder, subs, past=[past])


@pytest.fixture(scope="module")
def results(classes) -> dict:
    return {a: _analyse(classes, a) for a in classes}


def _ranked(result: S.Result) -> list[tuple[str, str, float]]:
    return [(m.a, m.b, m.score) for m in result.matches]


@pytest.mark.parametrize("assignment", [A2, A3])
def test_every_copy_pair_ranks_above_every_independent_pair(results, assignment):
    klass, result = results[assignment]
    assert len(klass.students) - len([s for s in klass.students if s.startswith("c_")]) >= 30
    ev = corpus.evaluate(klass, _ranked(result), S.THRESHOLD)
    assert len(ev["copies"]) >= 20
    assert ev["separated"], (ev["copies"][-3:], ev["first_independent_rank"])
    assert ev["precision"] == ev["recall"] == 1.0, (ev["missed"], ev["false"])


@pytest.mark.parametrize("assignment", [A2, A3])
def test_no_independent_student_is_flagged_against_the_reference(results, assignment):
    klass, result = results[assignment]
    flagged = [
        (m.a, round(m.score, 2))
        for m in result.flagged
        if m.b == W.REFERENCE and klass.origin(m.a) != corpus.REFERENCE
    ]
    assert flagged == []
    # while every copy of the reference is
    copies = {m.a for m in result.flagged if m.b == W.REFERENCE}
    assert {"c_ref1", "c_ref2", "c_ref3", "c_ref4", "c_chain"} <= copies


def test_unweighted_evidence_flags_independent_work(classes, monkeypatch):
    """Every fingerprint counted alike (the old report): students who wrote A3's natural forms
    are flagged against the reference; the weighting is what keeps them out."""
    monkeypatch.setattr(W, "_weight", lambda d, n, scale: 1.0)
    monkeypatch.setattr(W, "COMMON_SHARE", float("inf"))
    monkeypatch.setattr(command, "PASSES", 1)
    klass, result = _analyse(classes, A3)
    flagged = [
        m.a for m in result.flagged if m.b == W.REFERENCE and klass.origin(m.a) != corpus.REFERENCE
    ]
    assert len(flagged) >= 3
    # per cell, as the old report listed them: independent students "copied" at 1.0
    natural = [
        c.key
        for m in result.matches
        if m.b == W.REFERENCE and klass.origin(m.a) != corpus.REFERENCE
        for c in m.cells
        if c.score >= 0.99
    ]
    assert f"{A3}.ipynb::encoder_block" in natural


def test_cells_with_one_natural_form_are_reported_as_such(results, tmp_path):
    klass, result = results[A3]
    natural = {k.split("::")[1] for k, cw in result.weights.items() if cw.natural}
    assert {"encoder_block", "decoder_block"} <= natural
    assert "beam_search" not in natural and "label_smoothing" not in natural
    # an independent student who wrote the encoder block as the reference does: no evidence
    match = next(
        m
        for m in result.matches
        if m.b == W.REFERENCE
        and klass.origin(m.a) != corpus.REFERENCE
        and any(c.key.endswith("encoder_block") and c.a.prints == c.b.prints for c in m.cells)
    )
    cell = next(c for c in match.cells if c.key.endswith("encoder_block"))
    assert cell.natural and cell.mass < W.MIN_MASS
    assert match.score < S.THRESHOLD
    R.write_reports(tmp_path, A3, result.matches, result.weights, result.per_cell, S.THRESHOLD)
    md = (tmp_path / "similarity.md").read_text()
    assert "## Cells with one natural form" in md and "encoder\\_block" in md
    data = json.loads((tmp_path / "similarity.json").read_text())
    assert "encoder_block" in data["natural"]
    ranks = [p["score"] for p in data["pairs"]]
    assert ranks == sorted(ranks, reverse=True) and min(ranks) >= S.THRESHOLD


def test_groups_of_copies_count_once(classes):
    """Five copies of the reference make its code common in the class; counted as one group, it
    weighs as the reference's own again."""
    klass, builder, subs, past = classes[A3]
    one = command.PASSES
    try:
        command.PASSES = 1
        single = S.analyse(builder, subs, past=[past])
    finally:
        command.PASSES = one
    again = S.analyse(builder, subs, past=[past])

    def score(result, a):
        return next(m.score for m in result.matches if m.a == a and m.b == W.REFERENCE)

    assert score(again, "c_ref2") > score(single, "c_ref2")


def test_a_class_of_three_with_and_without_background(classes, tmp_path):
    """The issue's held-out case: an independent solution, a disguised copy of the reference and
    one of the independent solution. The two copies lead; the independent student is not flagged
    against the reference; the instructor's rewrites (``background``) name A3's natural forms."""
    klass, builder = classes[A3][0], classes[A3][1]
    source = klass.students["c_peer1"].how.split(":")[0].removeprefix("copy of ")
    subs_dir = klass.write(tmp_path / "subs", [source, "c_ref1", "c_peer1"])
    rewrites = [n for n in sorted(klass.students) if n.startswith("s") and n != source][:20]
    background = klass.write(tmp_path / "background", rewrites)
    subs = discover(subs_dir, A3, list(builder.release_nbs))
    for folders in ([], [background]):
        result = S.analyse(builder, subs, background=folders)
        top = {(m.a, m.b) for m in result.matches[:2]}
        assert top == {("c_peer1", source), ("c_ref1", W.REFERENCE)}, result.matches[:3]
        assert {(m.a, m.b) for m in result.flagged} == top
    natural = {k.split("::")[1] for k, cw in result.weights.items() if cw.natural}
    assert {"encoder_block", "decoder_block"} <= natural


# ---------------------------------------------------------------------------------------------
# The normaliser
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def builder() -> S.Builder:
    return S.Builder(COURSE, A2)


def _tokens(builder: S.Builder, source: str, extra: str = "") -> list[str]:
    cell = next(c for c in builder.release.cells if c.key == SDPA)
    blocks = [("cell", source)] + ([("extra", extra)] if extra else [])
    return builder._unit("x", "student", cell, blocks, 0).tokens


def _containment(a: list[str], b: list[str]) -> float:
    pa, pb = S.fingerprints(a), S.fingerprints(b)
    return len(pa.keys() & pb.keys()) / min(len(pa), len(pb))


REFERENCE = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
"""


@pytest.mark.parametrize(
    "disguise, extra",
    [
        (  # renamed, reformatted, commented, annotated, an import alias
            '''
import torch.nn.functional as fn
def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask=None) -> tuple:
    """My own work."""
    s = (q @ k.transpose(-2, -1)
         / math.sqrt(q.shape[-1]))  # logits
    if not (mask is None):
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    else:
        pass
    p = torch.softmax(s, dim=-1)
    if mask is not None:
        p = p.masked_fill(~mask, 0.0)
    return p @ v, p
''',
            "",
        ),
        (  # a helper function in a cell of its own
            """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = logits(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
""",
            "def logits(a, b):\n    return a @ b.transpose(-2, -1) / math.sqrt(a.shape[-1])\n",
        ),
    ],
)
def test_normalisation_defeats_disguises(builder, disguise, extra):
    assert _tokens(builder, disguise, extra)[:20] == _tokens(builder, REFERENCE)[:20]
    assert _containment(_tokens(builder, disguise, extra), _tokens(builder, REFERENCE)) >= 0.9


def test_independent_statements_are_sorted():
    norm = N.Normaliser(N.Release([], {"torch"}, {}, {}))
    one = norm.normalise(
        ast.parse("a = torch.ones(3)\nb = torch.zeros(2)\nc = a + b\nb = c * 2").body
    )
    two = norm.normalise(
        ast.parse("y = torch.zeros(2)\nx = torch.ones(3)\nz = x + y\ny = z * 2").body
    )
    assert [ast.unparse(s) for s in one] == [ast.unparse(s) for s in two]
    # dependent statements keep their order: the last one reads the third
    three = norm.normalise(ast.parse("c = a + b\nb = c * 2\nd = torch.ones(1)").body)
    assert [ast.unparse(s) for s in three][-2:] == ["v = v + v", "v = 2 * v"]
    # writes to parts of one tensor commute; reading it afterwards does not
    four = "pe = torch.zeros(4)\npe[1::2] = torch.cos(x)\npe[0::2] = torch.sin(x)\nreturn pe"
    five = "pe = torch.zeros(4)\npe[0::2] = torch.sin(x)\npe[1::2] = torch.cos(x)\nreturn pe"
    body = [ast.parse("def f(x):\n" + textwrap.indent(t, "    ")).body[0] for t in (four, five)]
    a, b = (ast.unparse(norm.normalise([f])[0]) for f in body)
    assert a == b and a.endswith("return v")


def test_import_aliases_are_expanded(builder):
    body = "    s = q @ k.transpose(-2, -1)\n    w = {}.softmax(s, dim=-1)\n    return w @ v, w\n"
    head = "def scaled_dot_product_attention(q, k, v, mask=None):\n"
    release_alias = _tokens(builder, head + body.format("F"))
    own_alias = _tokens(builder, "import torch.nn.functional as nnf\n" + head + body.format("nnf"))
    inside = _tokens(builder, head + "    import torch\n" + body.format("torch.nn.functional"))
    assert release_alias == own_alias == inside
    assert "torch.nn.functional.softmax" in release_alias


def test_the_release_code_never_counts(builder, tmp_path):
    for name in ("blank1", "blank2"):
        (tmp_path / f"{name}.ipynb").write_bytes(RELEASE.read_bytes())
    subs = discover(tmp_path, A2, list(builder.release_nbs))
    result = S.analyse(builder, subs)
    assert result.flagged == []
    for units in result.per_cell.values():
        assert all(u.tokens == [] and "release" in u.reason for u in units)


# ---------------------------------------------------------------------------------------------
# The command and its files
# ---------------------------------------------------------------------------------------------


def test_cli_report_rows_escaping_and_past(classes, tmp_path, capsys):
    klass = classes[A2][0]
    subs, out = tmp_path / "subs", tmp_path / "out"
    names = sorted(n for n in klass.students if not n.startswith("c_"))[:12]
    klass.write(subs, [*names, "c_ref1", "c_past1"])
    past = klass.write_past(tmp_path)
    hostile = subs / "c_ref1.ipynb"
    nb = json.loads(hostile.read_text())
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "scaled_dot_product_attention":
            cell["source"] = "# </pre><script>alert(1)</script>\n" + "".join(cell["source"])
    hostile.write_text(json.dumps(nb))
    (subs / "empty.ipynb").write_text("")
    (subs / "broken.ipynb").write_text('{"cells": [')
    (subs / "<b>odd").mkdir()
    rewrites = [n for n in sorted(klass.students) if n.startswith("s")][20:26]  # not in subs
    background = klass.write(tmp_path / "rewrites", rewrites)
    argv = ["--course-dir", str(corpus.COURSE_ROOT), "similarity", A2, "--submissions", str(subs)]
    argv += ["--out", str(out)]
    assert main([*argv, "--past", str(past), "--background", str(background)]) == 0
    md = (out / "similarity.md").read_text()
    page = (out / "similarity.html").read_text()
    data = json.loads((out / "similarity.json").read_text())
    pairs = {(p["a"], p["b"]) for p in data["pairs"]}
    assert ("c_ref1", "reference") in pairs
    source = klass.students["c_past1"].how.split(":")[0].removeprefix("copy of ")
    assert ("c_past1", f"past: past/{source}") in pairs
    assert all(not (a in names and b in names) for a, b in pairs)
    scores = [p["score"] for p in data["pairs"]]
    assert scores == sorted(scores, reverse=True)
    for text in (md, page):
        assert "empty.ipynb is empty" in text and "broken.ipynb is not a notebook" in text
        assert "empty submission folder" in text  # the student folder with no notebook
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<b>odd" not in page and "&lt;b&gt;odd" in page
    assert "<style>" in page and "<link" not in page  # self-contained
    assert _unbalanced(page) == []
    assert "c_ref1 ~ reference" in capsys.readouterr().out


def test_hostile_cells_get_a_row(builder, tmp_path):
    release = json.loads(RELEASE.read_text())
    nested = (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n    return "
        + "(" * 5000
        + ("q" + ")" * 5000)
    )
    sources = {
        "nested": nested,
        "huge": "x = 1\n" * 50_000,
        "bash": "%%bash\nrm -rf /\n",
        "nul": "def scaled_dot_product_attention(q, k, v, mask=None):\n    return q\x00\n",
    }
    for name, source in sources.items():
        nb = json.loads(json.dumps(release))
        for cell in nb["cells"]:
            if (
                cell["metadata"].get("nbgrader", {}).get("grade_id")
                == "scaled_dot_product_attention"
            ):
                cell["source"] = source
        (tmp_path / f"{name}.ipynb").write_text(json.dumps(nb))
    subs = discover(tmp_path, A2, list(builder.release_nbs))
    units = {s.student: builder.submission(s)[SDPA] for s in subs}
    assert "over the 256 KB limit" in units["huge"].reason
    for name in ("nested", "bash", "nul"):
        assert units[name].reason and not units[name].prints, (name, units[name].reason)


def _unbalanced(page: str) -> list[str]:
    """Tags left open or closed out of order (the page is hand-written HTML)."""
    from html.parser import HTMLParser

    stack: list[str] = []
    bad: list[str] = []

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag not in ("meta", "br"):
                stack.append(tag)

        def handle_endtag(self, tag):
            if stack and stack[-1] == tag:
                stack.pop()
            else:
                bad.append(tag)

    Parser().feed(page)
    return stack + bad


def test_grade_report_section_never_fails_grading(monkeypatch, tmp_path, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("bad day")

    monkeypatch.setattr(command, "run", boom)
    S.report_safely(COURSE, A2, [], tmp_path)
    assert "similarity report skipped: RuntimeError: bad day" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The key's evidence: never discounted by the class, only by the instructor's rewrites
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def with_background(classes, tmp_path_factory) -> dict:
    """Per assignment: the corpus class with the instructor's independent rewrites."""
    out = {}
    for assignment, (klass, builder, subs, past) in classes.items():
        bg = klass.write_background(tmp_path_factory.mktemp(f"{assignment}-bg"))
        out[assignment] = (klass, S.analyse(builder, subs, past=[past], background=[bg]))
    return out


@pytest.mark.parametrize("assignment", [A2, A3])
def test_heavy_disguises_of_the_key_are_flagged_and_independent_students_are_not(
    with_background, assignment
):
    klass, result = with_background[assignment]
    against_key = {m.a: m for m in result.matches if m.b == W.REFERENCE}
    for name in corpus.HEAVY:  # helpers, dead code, other vocabulary and containers
        assert against_key[name].score >= S.THRESHOLD, (name, against_key[name].score)
    independent = [
        (m.a, round(m.score, 2)) for m in result.flagged if klass.origin(m.a) != klass.origin(m.b)
    ]
    assert independent == []


@pytest.mark.parametrize("assignment", [A2, A3])
@pytest.mark.parametrize("copies", [4, 6])
def test_a_key_shared_by_most_of_the_class_is_flagged(assignment, copies, tmp_path, monkeypatch):
    """Half (or three quarters) of a class of 8 hand in the reference word for word: each is
    flagged against the key, with one line per cell in the report; nobody else is. The copies
    are one group of the report, and a table longer than ``MAX_TABLE`` stops there (a key shared
    by half a class of 1,000 is 125,000 pairs: the table was 93 MB of HTML)."""
    klass = corpus.shared_key(assignment, 8, copies)
    klass.background = dict(list(klass.background.items())[:3])  # the class outweighs them
    builder = S.Builder(COURSE, assignment)
    subs = discover(klass.write(tmp_path / "subs"), assignment, list(builder.release_nbs))
    bg = klass.write_background(tmp_path)
    result = S.analyse(builder, subs, background=[bg])
    keyed = {m.a for m in result.flagged if m.b == W.REFERENCE}
    assert keyed == {n for n in klass.students if n.startswith("k")}
    assert all(m.key_score >= S.THRESHOLD for m in result.flagged if m.b == W.REFERENCE)
    assert all(klass.origin(m.a) == klass.origin(m.b) for m in result.flagged)
    monkeypatch.setattr(R, "MAX_TABLE", 5)
    R.write_reports(tmp_path, assignment, result.matches, result.weights, result.per_cell,
                    S.THRESHOLD)  # fmt: skip
    md = (tmp_path / "similarity.md").read_text()
    assert "## Shared with the key" in md
    assert f"{copies} submissions contain the key's" in md
    data = json.loads((tmp_path / "similarity.json").read_text())
    assert all(len(who) == copies for who in data["key"].values()) and data["key"]
    copied = sorted(n for n in klass.students if n.startswith("k"))
    inside = [m for m in result.flagged if m.kind == "student"]
    assert {m.a for m in inside} | {m.b for m in inside} == set(copied)
    assert R.groups(result.flagged) == [(copied, len(inside))]
    assert f"{copies} submissions, {len(inside)} flagged pairs among them: " in md
    rows = [line for line in md.splitlines() if line.startswith("| ") and "score" not in line]
    assert len(rows) == 5 and len(data["pairs"]) == len(result.flagged) > 5
    assert f"{len(result.flagged) - 5} more flagged pairs are not listed here" in md
    page = (tmp_path / "similarity.html").read_text()
    assert page.count("<tr><td>") == 5 and "<h2>Groups</h2>" in page


A1 = "a1_rnn_attention"


def test_live_a1_key_file_and_independent_corpus(tmp_path):
    """The issue's case on the course as it is: 4 of 8 students hand in the solution; the key
    file is among the references; the independent corpus is the default background; the
    independent variants, judged against the other variants as background, are not flagged."""
    nbformat = pytest.importorskip("nbformat")
    from autograder.tools.authoring import submission
    from autograder.tools.corpus import load_corpus

    course = Course(corpus.REPO)
    solution = nbformat.read(str(corpus.REPO / "solutions" / A1 / f"{A1}.ipynb"), as_version=4)
    variants = load_corpus(course, A1)
    subs, bg = tmp_path / "subs", tmp_path / "bg"
    subs.mkdir(), bg.mkdir()
    for i in range(4):
        nbformat.write(submission(solution, {}, "key"), str(subs / f"key{i}.ipynb"))
    for i, name in enumerate(sorted(variants)):
        cells = {g: {"code": c["code"]} for g, c in variants[name]["cells"].items()}
        folder = subs if i < 4 else bg
        nbformat.write(submission(solution, cells, name), str(folder / f"ind{i}.ipynb"))
    builder = S.Builder(course, A1)
    owners = {u.owner for units in builder.references().values() for u in units}
    assert "key (a1_key.py)" in owners
    found = discover(subs, A1, list(builder.release_nbs))
    for background in ([], [bg]):  # the default (the yml corpus), the other variants
        result = S.analyse(builder, found, background=background)
        keyed = {m.a for m in result.flagged if m.b == W.REFERENCE}
        assert keyed == {f"key{i}" for i in range(4)}, background
        assert all(m.a.startswith("key") and m.b.startswith(("key", "ref")) for m in result.flagged)


def test_dead_code_and_vocabulary(builder):
    plain = REFERENCE
    disguised = """
def scaled_dot_product_attention(q, k, v, mask=None):
    debug = False
    scores = torch.matmul(q, torch.transpose(k, -2, -1)) / math.sqrt(q.size(-1))
    _probe = scores
    if debug:
        print(scores)
    if mask is not None:
        scores = torch.masked_fill(scores, mask.logical_not(), torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    if mask is not None:
        weights = torch.where(~mask, 0.0, weights)
    assert True
    return (torch.matmul(weights, v), weights)
"""
    cell = next(c for c in builder.release.cells if c.key == SDPA)
    a = builder._unit("a", "student", cell, [("cell", plain)], 0)
    b = builder._unit("b", "student", cell, [("cell", disguised)], 0)
    assert "print" not in b.tokens and "debug" not in " ".join(b.tokens)
    assert a.shapes == b.shapes and a.prints != b.prints
