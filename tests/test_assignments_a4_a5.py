"""Assignments A4-A5: the committed releases, the hidden suites and the sample submissions agree.

- the committed release equals a fresh ``python -m autograder release`` of the source;
- a release holds no solution code and no hidden test (canary strings planted in the suites);
- ``python -m autograder check <name>``: reference 100 %, blank release 0, rerun identical;
- ``python -m autograder selfgrade``: every sample gets the score in its ``expected.json``;
- the source notebooks are the ones their generator writes (no hand edits that drift);
- the visible checks pass the reference solution and name the usual mistakes, and importing them
  loads no reference model into a student's kernel (or the grader's worker).

Grading starts sandboxed worker processes: these tests run in the same xdist group as A1-A3's,
one after another.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
AUTHORING = ROOT / "solutions" / "_authoring"
ASSIGNMENTS = ("a4_bert_gpt", "a5_vision_transformers")
CANARIES = {
    "a4_bert_gpt": "CANARY-HIDDEN-A4-7c2e91d0",
    "a5_vision_transformers": "CANARY-HIDDEN-A5-3b8d40f6",
}
GRADER = [sys.executable, "-m", "autograder", "--course-dir", str(ROOT)]
LIMITS = ["--jobs", "2", "--quiet"]

pytestmark = pytest.mark.xdist_group("assignments")


def run(args: list[str], cwd: Path = ROOT, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def source_notebook(name: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)


def solution_lines(name: str) -> list[str]:
    """Distinctive lines from inside the source's BEGIN/END SOLUTION regions."""
    lines, inside = [], False
    for cell in source_notebook(name).cells:
        for line in cell.source.split("\n"):
            stripped = line.strip()
            if stripped == "### BEGIN SOLUTION":
                inside = True
            elif stripped == "### END SOLUTION":
                inside = False
            elif inside and len(stripped) >= 25 and not stripped.startswith("#"):
                lines.append(stripped)
    return lines


@pytest.fixture(scope="module")
def authoring():
    """The generator modules (``solutions/_authoring/<name>.py``) and nbtools."""
    sys.path.insert(0, str(AUTHORING))
    try:
        yield {name: importlib.import_module(name) for name in (*ASSIGNMENTS, "nbtools")}
    finally:
        sys.path.remove(str(AUTHORING))


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_release_has_no_solution_and_no_hidden_test(name):
    release = ROOT / "assignments" / name
    files = sorted(p for p in release.rglob("*") if p.is_file())
    assert [p.name for p in files] == [f"{name}.ipynb"], f"unexpected files in {release}: {files}"
    text = files[0].read_text(encoding="utf-8")
    secrets = solution_lines(name)
    assert len(secrets) >= 10, "the source should have solution code to leak"  # not vacuous
    leaked = [line for line in secrets if line in text]
    assert not leaked, f"solution code in the release of {name}: {leaked[:3]}"
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    suite = ROOT / "autograder" / "tests" / name
    canary = CANARIES[name]
    suite_files = sorted(suite.glob("*.py"))
    assert all(canary in p.read_text() for p in suite_files), "canary not planted everywhere"
    assert canary not in text, f"the hidden suite's canary appears in the release of {name}"
    for path in suite_files:  # and no test function's or helper's name either
        for test in re.findall(r"^def (test_\w+)", path.read_text(), flags=re.M):
            assert test not in text, f"hidden test {test} is named in the release of {name}"
        assert path.stem not in text, f"the hidden module {path.stem} is named in the release"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_release_cells_match_the_source(name):
    """Every graded cell of the source is in the release, with its points; stubs replace
    solutions, so the release raises NotImplementedError where the student must write code."""
    source = {c.metadata["nbgrader"]["grade_id"]: c for c in source_notebook(name).cells
              if "nbgrader" in c.metadata}  # fmt: skip
    release = nbformat.read(ROOT / "assignments" / name / f"{name}.ipynb", as_version=4)
    seen = {}
    for cell in release.cells:
        meta = cell.metadata.get("nbgrader", {})
        if "grade_id" in meta:
            seen[meta["grade_id"]] = cell
            assert meta.get("points") == source[meta["grade_id"]].metadata["nbgrader"].get("points")
        if meta.get("solution") and cell.cell_type == "code":
            assert "raise NotImplementedError()" in cell.source, meta["grade_id"]
    assert set(seen) == set(source)


@pytest.mark.slow
def test_release_equals_regenerated(tmp_path):
    """A fresh ``autograder release`` in a copy of the course gives the committed bytes."""
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    for name in ASSIGNMENTS:
        shutil.copytree(ROOT / "solutions" / name, tmp_path / "solutions" / name)
    out = run([sys.executable, "-m", "autograder", "--course-dir", str(tmp_path), "release",
               *ASSIGNMENTS], cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    for name in ASSIGNMENTS:
        fresh = (tmp_path / "assignments" / name / f"{name}.ipynb").read_bytes()
        committed = (ROOT / "assignments" / name / f"{name}.ipynb").read_bytes()
        assert fresh == committed, (
            f"assignments/{name} differs from a fresh release: run `make release` and commit"
        )


def test_sources_are_what_the_generator_writes(authoring):
    """solutions/*/ and the samples are generated by solutions/_authoring/build.py."""
    for name in ASSIGNMENTS:
        module = authoring[name]
        nb = module.build()
        committed = source_notebook(name)
        assert [(c.id, c.cell_type, c.metadata.get("nbgrader")) for c in nb.cells] == [
            (c.id, c.cell_type, c.metadata.get("nbgrader")) for c in committed.cells
        ], f"solutions/{name} was edited by hand: rerun build.py {name}"
        auto, manual = nb.totals()
        assert auto > 0 and manual > 0, name
        # the points table in the notebook's "What is graded" cell matches the grade cells
        grading = next(c.source for c in committed.cells if c.id == "grading")
        assert f"**{auto + manual:g}** ({auto:g} automatic + {manual:g} by hand)" in grading
        expected = json.loads(
            (ROOT / "autograder" / "samples" / name / "expected.json").read_text()
        )
        assert set(expected) == set(module.SAMPLES), name


def exec_solution(name: str, authoring) -> dict:
    """The reference solution's definitions (solution and provided definition cells), executed
    here; experiment cells that train or plot are skipped."""
    namespace: dict = {"__name__": f"reference_{name}"}
    skip = {"train_gpt", "train_run", "cls_plot"}
    for cell in authoring[name].build().cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or meta.get("grade_id") in skip:
            continue
        if not (meta.get("solution") or meta.get("locked")):
            continue  # scratch cells
        exec(compile(authoring["nbtools"].unmark(cell.source), name, "exec"), namespace)
    return namespace


def check_cells(name: str) -> dict[str, str]:
    """grade_id -> source of the visible check cells."""
    return {c.id: c.source for c in source_notebook(name).cells
            if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}  # fmt: skip


@pytest.mark.slow
def test_a4_visible_checks_pass_the_reference_and_diagnose_mistakes(authoring):
    from course_lib.checks import CheckFailed, a4

    ns = exec_solution("a4_bert_gpt", authoring)
    a4.check_count_pairs(ns["count_pairs"])
    a4.check_merge_pair(ns["merge_pair"])
    a4.check_learn_merges(ns["learn_merges"])
    a4.check_bpe_encode(ns["bpe_encode"])
    a4.check_bpe_decode(ns["bpe_decode"])
    a4.check_mask_tokens(ns["mask_tokens"])
    a4.check_segment_ids(ns["segment_ids"])
    a4.check_bert_embeddings(ns["BertEmbeddings"])
    a4.check_causal_self_attention(ns["CausalSelfAttention"])
    a4.check_gpt_forward(ns["GPT"])
    a4.check_kv_cache(ns["GPT"])
    a4.check_top_k_filter(ns["top_k_filter"])
    a4.check_top_p_filter(ns["top_p_filter"])
    a4.check_sample_next_token(ns["sample_next_token"])
    a4.check_generate(ns["generate"], ns["GPT"])

    partial = {}
    exec(authoring["a4_bert_gpt"].PARTIAL["mask_tokens"], {**ns}, partial)
    with pytest.raises(CheckFailed, match="replaced by \\[MASK\\]"):
        a4.check_mask_tokens(partial["mask_tokens"])
    exec(authoring["a4_bert_gpt"].PARTIAL["top_p_filter"], {**ns}, partial)
    with pytest.raises(CheckFailed, match="crosses p"):
        a4.check_top_p_filter(partial["top_p_filter"])

    def no_early_stop(text, num_merges):  # merges pairs that occur once
        merges = ns["learn_merges"](text, num_merges)
        return merges + [(1, 2)] * 3

    with pytest.raises(CheckFailed, match="fewer than 2 times"):
        a4.check_learn_merges(no_early_stop)


@pytest.mark.slow
def test_a5_visible_checks_pass_the_reference_and_diagnose_mistakes(authoring):
    from course_lib.checks import CheckFailed, a5

    ns = exec_solution("a5_vision_transformers", authoring)
    a5.check_patchify(ns["patchify"])
    a5.check_patch_embed(ns["patch_embed"])
    a5.check_vit(ns["ViT"])
    a5.check_window_partition(ns["window_partition"], ns["window_reverse"])
    a5.check_shifted_window_mask(ns["shifted_window_mask"])
    a5.check_patch_merging(ns["PatchMerging"])
    a5.check_channel_attention(ns["ChannelAttention"])
    a5.check_cls_attention_map(ns["cls_attention_map"])

    module = authoring["a5_vision_transformers"]
    wrong: dict = {}
    for gid in ("patchify", "patch_merging", "channel_attention"):
        exec(module.PARTIAL[gid], {**ns}, wrong)
    with pytest.raises(CheckFailed, match=r"\(P, P, C\) instead of \(C, P, P\)"):
        a5.check_patchify(wrong["patchify"])
    with pytest.raises(CheckFailed, match="reading order"):
        a5.check_patch_merging(wrong["PatchMerging"])
    with pytest.raises(CheckFailed, match="full width"):
        a5.check_channel_attention(wrong["ChannelAttention"])
    with pytest.raises(CheckFailed, match="inverted"):
        a5.check_shifted_window_mask(lambda *args: ~ns["shifted_window_mask"](*args))

    class Untrained(torch.nn.Module):
        def forward(self, images):
            return torch.zeros(images.shape[0], 10)

    with pytest.raises(CheckFailed, match="below 95%"):
        a5.check_test_accuracy(Untrained(), torch.zeros(20, 1, 8, 8), torch.arange(20) % 10)


def test_check_cells_import_their_checks_and_load_no_model():
    """Each check cell imports what it calls from course_lib.checks.a4 / a5, and importing those
    modules loads no reference model: a model module with ``@torch.no_grad()`` methods, once
    loaded in the grader's worker, makes the forbidden-call detector flag every student function
    decorated with ``@torch.no_grad()`` (they share torch's wrapper code object)."""
    for name, module in (("a4_bert_gpt", "a4"), ("a5_vision_transformers", "a5")):
        for gid, source in check_cells(name).items():
            called = set(re.findall(r"^(check_\w+)\(", source, flags=re.M))
            imported = set(re.findall(rf"from course_lib\.checks\.{module} import (.+)", source))
            names = {n.strip() for line in imported for n in line.split(",")}
            assert called and called <= names, f"{name}/{gid}: {called} not imported"
    code = (
        "import sys, course_lib.checks.a4, course_lib.checks.a5; "
        "print(sorted(m for m in sys.modules if m.startswith('course_lib.models')))"
    )
    out = run([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing the checks loaded {out.stdout.strip()}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_autograder_check(name):
    """Reference 100 %, blank release 0, a second run identical, suite consistent with the
    notebook's grade cells."""
    out = run([*GRADER, "check", name, *LIMITS])
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert f"check {name}: passed" in out.stdout


@pytest.mark.slow
def test_samples_get_their_expected_scores(tmp_path):
    out = run([*GRADER, "selfgrade", *ASSIGNMENTS, "--out", str(tmp_path / "rows.json"), *LIMITS])
    rows = json.loads((tmp_path / "rows.json").read_text())
    table = "\n".join(
        f"{r['assignment']} {r['submission']}: {r['score']} / {r['max_score']} "
        f"(expected {r['expected']}) {r.get('details', '')}"
        for r in rows
    )
    assert out.returncode == 0, table + out.stderr[-2000:]
    by_key = {(r["assignment"], r["submission"]): r for r in rows}
    for name in ASSIGNMENTS:  # reference, blank and the three samples of every assignment
        for sub in ("reference", "blank", "partial", "broken", "cheat"):
            assert (name, sub) in by_key, f"{name}/{sub} was not graded:\n{table}"
        # the samples span the range: none is all or nothing by accident
        top = by_key[(name, "reference")]["max_score"]
        assert all(0 < by_key[(name, s)]["score"] < top for s in ("partial", "broken", "cheat"))
