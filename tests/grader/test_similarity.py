"""The similarity report: copies found through disguises, independent solutions left alone."""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.cli import main
from autograder.course.layout import PACKAGE_ROOT, Course
from autograder.host.intake import discover
from autograder.tools import similarity as S

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "similarity"))
import similarity_corpus as corpus  # noqa: E402

COURSE = Course(PACKAGE_ROOT)
RELEASE = COURSE.release_dir(corpus.ASSIGNMENT) / corpus.NOTEBOOK
SDPA = "a2_self_attention.ipynb::scaled_dot_product_attention"


@pytest.fixture(scope="module")
def builder() -> S.Builder:
    return S.Builder(COURSE, corpus.ASSIGNMENT)


@pytest.fixture(scope="module")
def corpus_run(builder, tmp_path_factory):
    folder = tmp_path_factory.mktemp("subs")
    corpus.write(folder, RELEASE)
    subs = discover(folder, corpus.ASSIGNMENT, list(builder.release_nbs))
    students = {s.student: builder.submission(s) for s in subs}
    refs = builder.references()
    per_cell = S.by_cell(students)
    return S.scores(per_cell, refs), per_cell, refs


def test_every_disguised_copy_is_flagged_and_no_independent_pair(corpus_run):
    scored, per_cell, refs = corpus_run
    result = corpus.evaluate(scored, per_cell, refs, corpus.origins(), S.THRESHOLD)
    assert not result["missed"], f"copies not flagged: {result['missed']}"
    assert not result["false"], f"independent pairs flagged: {result['false']}"
    assert result["tp"] >= 30  # enough copy pairs are long enough to judge
    # the big cells of every submission are long enough to be compared at all
    for key in (SDPA, "a2_self_attention.ipynb::multihead_attention"):
        assert all(u.comparable for u in per_cell[key])


def _tokens(builder: S.Builder, source: str, extra: str = "") -> list[str]:
    cell = next(c for c in builder.release.cells if c.key == SDPA)
    blocks = [("cell", source)] + ([("extra", extra)] if extra else [])
    return builder._unit("x", "student", cell, blocks, 0).tokens


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
    a, b = S.Unit("a", "student", SDPA), S.Unit("b", "student", SDPA)
    a.prints = S.fingerprints(_tokens(builder, disguise, extra))
    b.prints = S.fingerprints(_tokens(builder, REFERENCE))
    assert S.score(a, b) >= 0.9


def test_independent_statements_are_sorted():
    norm = S.Normaliser(S.Release([], {"torch"}, {}, {}))
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
    subs = discover(tmp_path, corpus.ASSIGNMENT, list(builder.release_nbs))
    students = {s.student: builder.submission(s) for s in subs}
    pairs, per_cell = S.compare(students, builder.references())
    assert pairs == []
    for units in per_cell.values():
        assert all(u.tokens == [] and "release" in u.reason for u in units)


def test_cli_report_rows_escaping_and_past(tmp_path, capsys):
    subs, past, out = tmp_path / "subs", tmp_path / "past", tmp_path / "out"
    corpus.write(subs, RELEASE, ["ind_einsum", "copy_ref_rename", "copy_loops"])
    corpus.write(past, RELEASE, ["ind_loops"])
    hostile = subs / "copy_ref_rename.ipynb"
    nb = json.loads(hostile.read_text())
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "scaled_dot_product_attention":
            cell["source"] = "# </pre><script>alert(1)</script>\n" + "".join(cell["source"])
    hostile.write_text(json.dumps(nb))
    (subs / "empty.ipynb").write_text("")
    (subs / "broken.ipynb").write_text('{"cells": [')
    (subs / "<b>odd").mkdir()
    argv = ["similarity", corpus.ASSIGNMENT, "--submissions", str(subs), "--out", str(out)]
    assert main([*argv, "--past", str(past)]) == 0
    md = (out / "similarity.md").read_text()
    page = (out / "similarity.html").read_text()
    data = json.loads((out / "similarity.json").read_text())
    pairs = {(p["cell"].split("::")[1], p["a"], p["b"]) for p in data["pairs"]}
    assert ("scaled_dot_product_attention", "copy_ref_rename", "solution notebook") in pairs
    assert ("scaled_dot_product_attention", "copy_loops", "past: past/ind_loops") in pairs
    assert not any({"ind_einsum", "copy_loops"} == {a, b} for _, a, b in pairs)
    scores = [p["score"] for p in data["pairs"]]
    assert scores == sorted(scores, reverse=True)
    for text in (md, page):
        assert "empty.ipynb is empty" in text and "broken.ipynb is not a notebook" in text
        assert "empty submission folder" in text  # the student folder with no notebook
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<b>odd" not in page and "&lt;b&gt;odd" in page
    assert "<style>" in page and "<link" not in page  # self-contained
    assert _unbalanced(page) == []
    assert "copy_ref_rename ~ solution notebook" in capsys.readouterr().out


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
    subs = discover(tmp_path, corpus.ASSIGNMENT, list(builder.release_nbs))
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

    monkeypatch.setattr(S, "run", boom)
    S.report_safely(COURSE, corpus.ASSIGNMENT, [], tmp_path)
    assert "similarity report skipped: RuntimeError: bad day" in capsys.readouterr().err
