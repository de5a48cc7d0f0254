"""The embargo (course.yml): answer keys stay with the instructor until the solutions are out.

- the schedule: a wrong state, an unknown assignment or object is an error naming the line;
- the graded objects are derived from the assignments, and provided code (A3's
  MultiHeadAttention) stays usable; an assignment whose key lives beside its hidden suite (all
  five: reader-first) grades no course_lib object, so its chapter's code (the attention layers;
  LayerNorm, the Transformer; BPE training, masking, GPT; patchify, the windows, the ViT) is
  whole in every edition, while the key's statements are still scanned for; the repository's
  embargo is empty, so the machinery below is exercised with a schedule whose `also` embargoes
  two of the book's objects for A4 (EXAMPLE);
- the stub keeps signature and docstring and raises NotImplementedError naming the part;
- setting A4 to solutions-released brings its code back (wheel and book);
- the book's student edition shows no embargoed statement, the instructor edition does (a small
  Sphinx project with the book's extension; the full book is built by `make book`);
- the student bundle: no embargoed statement, no hidden-suite canary, no instructor-only file; its
  wheel, installed in a fresh virtual environment, fails every visible check of the blank releases
  with a message and passes every check with the reference answers pasted in (the check cells of
  each notebook, run in order; training runs are not: `check_train_vit` needs a trained model).
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import zipfile
from pathlib import Path

import fresh_env
import pytest
import time_limits
from fresh_env import run_notebook

from autograder.course import embargo
from autograder.course.embargo import ScheduleError, plan, read_schedule, stub_source

ROOT = Path(__file__).resolve().parents[2]
KNOWN = embargo.known_assignments(ROOT)
ALL_RELEASED = "assignments:\n" + "".join(f"  {a}: released\n" for a in KNOWN)


def schedule(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "course.yml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def repo_plan():
    return plan(ROOT)


# Every assignment is reader-first, so the repository embargoes nothing; `also` still embargoes
# a named object, which is how these tests exercise the stubs, the book's boxes and the release.
EXAMPLE_A4 = (
    "  a4_bert_gpt:\n    state: {state}\n    also:\n"
    "      - course_lib.masking.mask_tokens: whole_word_mask\n"
    "      - course_lib.models.bert.BertEmbeddings.forward: segment_ids\n"
)


def example(state: str = "released") -> str:
    return ALL_RELEASED.replace("  a4_bert_gpt: released\n", EXAMPLE_A4.format(state=state))


@pytest.fixture(scope="module")
def example_schedule(tmp_path_factory):
    return schedule(tmp_path_factory.mktemp("example"), example())


@pytest.fixture(scope="module")
def example_plan(example_schedule):
    return plan(ROOT, example_schedule)


def test_the_repository_schedule_releases_every_assignment_and_no_solution():
    """Every assignment is listed (``new-assignment`` adds a new one as unreleased); the five
    assignments of the term are released and no solution is."""
    found = read_schedule(ROOT / "course.yml", KNOWN)
    assert sorted(a.name for a in found) == KNOWN
    states = {a.name: a.state for a in found}
    assert "solutions-released" not in states.values()
    term = [n for n in KNOWN if n.split("_")[0] in ("a1", "a2", "a3", "a4", "a5")]
    assert len(term) == 5 and {states[n] for n in term} == {"released"}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (ALL_RELEASED.replace("a3_transformer: released", "a3_transformer: relased"), 4,
         "unknown state 'relased'"),
        (ALL_RELEASED + "  a9_nothing: released\n", 7, "unknown assignment 'a9_nothing'"),
        ("assignments:\n  a3_transformer:\n    state: released\n    also:\n"
         "      - course_lib.layers.NoSuchThing\n", 5, "unknown object"),
        ("assignments:\n  a3_transformer:\n    stat: released\n", 3, "unknown key 'stat'"),
        ("assignments:\n  a4_bert_gpt:\n    state: released\n    also:\n"
         "      - course_lib.models.gpt.GPT.forward: NoSuchUnit\n", 5,
         "grades no 'NoSuchUnit'"),
        ("assigments:\n  a3_transformer: released\n", 1, "unknown key 'assigments'"),
    ],
)  # fmt: skip
def test_a_mistake_in_the_schedule_names_its_line(tmp_path, text, line, words):
    path = schedule(tmp_path, text)
    with pytest.raises(ScheduleError) as error:
        plan(ROOT, path)
    assert f"{path}:{line}:" in str(error.value) and words in str(error.value), str(error.value)


def test_the_graded_objects_come_from_the_assignments(repo_plan):
    got = {d: i.where for d, i in repo_plan.embargoed.items()}
    # A4 is reader-first too: the book's BPE training, BERT masking and GPT are whole, and with it
    # the repository's embargo is empty
    assert embargo.own_key(ROOT, "a4_bert_gpt") is not None
    assert not [i for i in repo_plan.graded.values() if i.assignment == "a4_bert_gpt"]
    for name in ("course_lib.tokenizers.merge_pair", "course_lib.tokenizers.learn_merges",
                 "course_lib.masking.mask_tokens", "course_lib.models.gpt.GPT.forward",
                 "course_lib.models.gpt.CausalSelfAttention.forward",
                 "course_lib.models.gpt.sample_next_token"):  # fmt: skip
        assert name not in got, name
    assert not any(n.startswith("A4:") for n in repo_plan.notes)
    assert not got
    # A3 is reader-first (its key lives beside its suite): no course_lib object is graded, so the
    # book's chapter 3 code is whole, although A3's beam_search shares a name with the library's
    assert embargo.own_key(ROOT, "a3_transformer") is not None
    assert not [i for i in repo_plan.graded.values() if i.assignment == "a3_transformer"]
    for name in ("course_lib.layers.LayerNorm.forward", "course_lib.layers.FeedForward.forward",
                 "course_lib.models.transformer.EncoderBlock.forward",
                 "course_lib.models.transformer.Transformer.beam_search"):  # fmt: skip
        assert name not in got, name
    assert not any(n.startswith("A3:") for n in repo_plan.notes)
    # A2 too: the book's attention layers, masks, heads and positional encodings are whole
    assert embargo.own_key(ROOT, "a2_self_attention") is not None
    assert not [i for i in repo_plan.graded.values() if i.assignment == "a2_self_attention"]
    for name in ("course_lib.attention.AttentionLayer.forward",
                 "course_lib.attention.SelfAttention.forward", "course_lib.attention.causal_mask",
                 "course_lib.positional.sinusoidal_positional_encoding"):  # fmt: skip
        assert name not in got, name
    assert not any(n.startswith("A2:") for n in repo_plan.notes)
    # A1 too: the book's Bahdanau attention, GRU decoder and sequence-to-sequence model are whole
    assert embargo.own_key(ROOT, "a1_rnn_attention") is not None
    assert not [i for i in repo_plan.graded.values() if i.assignment == "a1_rnn_attention"]
    for name in ("course_lib.attention.AdditiveAttention.forward",
                 "course_lib.attention.masked_softmax", "course_lib.models.seq2seq.Decoder.step",
                 "course_lib.models.seq2seq.Seq2Seq.forward"):  # fmt: skip
        assert name not in got, name
    assert not any(n.startswith("A1:") for n in repo_plan.notes)
    # A5 too (its `also` entries are gone): the book's patches, windows, ViT and DaViT are whole
    assert embargo.own_key(ROOT, "a5_vision_transformers") is not None
    assert not [i for i in repo_plan.graded.values() if i.assignment == "a5_vision_transformers"]
    for name in ("course_lib.vision.patchify", "course_lib.vision.window_partition",
                 "course_lib.vision.window_reverse", "course_lib.vision.shifted_window_mask",
                 "course_lib.vision.PatchMerging.forward",
                 "course_lib.models.vit.VisionTransformer.forward",
                 "course_lib.models.vit.cls_attention_maps",
                 "course_lib.models.davit.ChannelAttention.forward"):  # fmt: skip
        assert name not in got, name
    assert not any(n.startswith("A5:") for n in repo_plan.notes)
    # A3 gives MultiHeadAttention as provided code, and A2 (reader-first) no longer grades it:
    # it (and what it calls) stays usable, with no note to explain why
    assert "course_lib.attention.MultiHeadAttention.forward" not in got
    assert "course_lib.attention.scaled_dot_product_attention" not in got
    assert not any("MultiHeadAttention.forward stays" in n for n in repo_plan.notes)
    # never a method of the same name in a module the assignment does not grade against
    assert "course_lib.models.vit.EncoderBlock.forward" not in got


def test_the_stub_keeps_signature_and_docstring_and_names_the_part(example_plan):
    got = {d: i.where for d, i in example_plan.embargoed.items()}
    assert got["course_lib.masking.mask_tokens"] == "A4, part 2 (BERT's inputs)"  # also: ...: unit
    source = (ROOT / "course_lib" / "masking.py").read_text(encoding="utf-8")
    targets = example_plan.by_module()["course_lib.masking"]
    stub = stub_source(source, targets)
    assert "def mask_tokens(" in stub and "special_ids: Iterable[int]," in stub
    assert "You implement this in A4, part 2 (BERT's inputs)." in stub
    namespace: dict = {"__name__": "course_lib.masking"}
    exec(compile(stub, "masking.py", "exec"), namespace)  # noqa: S102
    import torch

    with pytest.raises(NotImplementedError, match=r"A4, part 2"):
        namespace["mask_tokens"](torch.zeros(2, 3, dtype=torch.long), vocab_size=5, mask_id=1,
                                 special_ids=[0])  # fmt: skip
    masking = __import__("course_lib.masking").masking
    assert namespace["mask_tokens"].__doc__ == masking.mask_tokens.__doc__
    lines = embargo.secrets(example_plan)["course_lib.masking.mask_tokens"]
    assert lines and not any(f" {s} " in f" {' '.join(embargo.tokens(stub))} " for s in lines)


def test_a_key_beside_a_suite_is_scanned_for_until_its_solutions_are_released(tmp_path, repo_plan):
    table = embargo.secrets(repo_plan)
    lines = table["a3_transformer key: RMSNorm.forward"]
    assert lines and table["a3_transformer key: beam_search"]
    solution = ROOT / "solutions" / "a3_transformer" / "a3_transformer.ipynb"
    release = ROOT / "assignments" / "a3_transformer" / "a3_transformer.ipynb"
    assert any(
        "a3_transformer key: RMSNorm.forward" in h for h in embargo.scan(repo_plan, [solution])
    )
    assert not [h for h in embargo.scan(repo_plan, [release]) if "a3_transformer key" in h]
    text = ALL_RELEASED.replace("a3_transformer: released", "a3_transformer: solutions-released")
    released = plan(ROOT, schedule(tmp_path, text))
    assert not [d for d in embargo.secrets(released) if d.startswith("a3_transformer key")]
    # A2's key (grouped-query attention, RoPE, the T5 bias): in its solution, not in its release
    a2_key = "a2_self_attention key: apply_rotary"
    assert table[a2_key] and table["a2_self_attention key: GroupedQueryAttention.forward"]
    a2 = ROOT / "solutions" / "a2_self_attention" / "a2_self_attention.ipynb"
    assert any(a2_key in h for h in embargo.scan(repo_plan, [a2]))
    a2_release = ROOT / "assignments" / "a2_self_attention" / "a2_self_attention.ipynb"
    assert not [h for h in embargo.scan(repo_plan, [a2_release]) if "a2_self_attention key" in h]
    # A1's key (luong_align, coverage, input feeding): in its solution, not in its release
    assert (
        table["a1_rnn_attention key: luong_align"] and table["a1_rnn_attention key: coverage_loss"]
    )
    a1 = ROOT / "solutions" / "a1_rnn_attention" / "a1_rnn_attention.ipynb"
    assert any("a1_rnn_attention key: luong_align" in h for h in embargo.scan(repo_plan, [a1]))
    a1_release = ROOT / "assignments" / "a1_rnn_attention" / "a1_rnn_attention.ipynb"
    assert not [h for h in embargo.scan(repo_plan, [a1_release]) if "a1_rnn_attention key" in h]

    # A5's key (padded windows and mask, the simple ViT, XCA): in its solution, not in its release
    a5_key = "a5_vision_transformers key: shifted_window_mask_padded"
    assert table[a5_key] and table["a5_vision_transformers key: XCAttention.forward"]
    a5 = ROOT / "solutions" / "a5_vision_transformers" / "a5_vision_transformers.ipynb"
    assert any(a5_key in h for h in embargo.scan(repo_plan, [a5]))
    a5_release = ROOT / "assignments" / "a5_vision_transformers" / "a5_vision_transformers.ipynb"
    assert not [
        h for h in embargo.scan(repo_plan, [a5_release]) if "a5_vision_transformers key" in h
    ]
    text = ALL_RELEASED.replace(
        "a5_vision_transformers: released", "a5_vision_transformers: solutions-released"
    )
    released = plan(ROOT, schedule(tmp_path, text))
    assert not [d for d in embargo.secrets(released) if d.startswith("a5_vision_transformers key")]
    # A4's key (WordPiece, whole-word masking, grouped-query attention, min-p): in its solution,
    # not in its release
    a4_key = "a4_bert_gpt key: wordpiece_encode"
    assert table[a4_key] and table["a4_bert_gpt key: GroupedCausalSelfAttention.forward"]
    a4 = ROOT / "solutions" / "a4_bert_gpt" / "a4_bert_gpt.ipynb"
    assert any(a4_key in h for h in embargo.scan(repo_plan, [a4]))
    a4_release = ROOT / "assignments" / "a4_bert_gpt" / "a4_bert_gpt.ipynb"
    assert not [h for h in embargo.scan(repo_plan, [a4_release]) if "a4_bert_gpt key" in h]


def test_releasing_the_solutions_of_a4_brings_its_code_back(tmp_path, example_plan):
    released = plan(ROOT, schedule(tmp_path, example("solutions-released")))
    assert any(i.assignment == "a4_bert_gpt" for i in example_plan.embargoed.values())
    assert not [i for i in released.embargoed.values() if i.assignment == "a4_bert_gpt"]
    assert "course_lib.masking" not in released.by_module()
    assert "course_lib.models.bert" not in released.by_module()
    # the wheel is built from this copy: A4's modules (and those of the reader-first A3 and A5)
    # come back byte for byte; what is still embargoed is stubbed
    copy = tmp_path / "course_lib"
    embargo.stub_package(ROOT / "course_lib", copy, released.by_module())
    for rel in ("masking.py", "models/bert.py", "tokenizers.py", "models/gpt.py", "vision.py",
                "models/vit.py", "layers.py", "models/transformer.py"):  # fmt: skip
        assert (copy / rel).read_bytes() == (ROOT / "course_lib" / rel).read_bytes(), rel
    for module in released.by_module():
        rel = Path(*module.split(".")[1:]).with_suffix(".py")
        assert "course_lib.checks.replay" in (copy / rel).read_text(encoding="utf-8"), module
    held = tmp_path / "held"
    embargo.stub_package(ROOT / "course_lib", held, example_plan.by_module())
    for rel in ("masking.py", "models/bert.py"):  # before the release: stubbed
        assert (held / rel).read_bytes() != (ROOT / "course_lib" / rel).read_bytes(), rel


def test_an_unreleased_assignment_is_left_out_of_the_bundle(tmp_path):
    held = plan(ROOT, schedule(tmp_path, example("unreleased")))
    assert "a4_bert_gpt" not in [a.name for a in held.released()]
    assert "course_lib.masking.mask_tokens" in held.embargoed  # still embargoed
    # a reader-first assignment held back: left out, its key still scanned for
    text = ALL_RELEASED.replace(
        "a5_vision_transformers: released", "a5_vision_transformers: unreleased"
    )
    held = plan(ROOT, schedule(tmp_path, text))
    assert "a5_vision_transformers" not in [a.name for a in held.released()]
    assert embargo.secrets(held)["a5_vision_transformers key: XCAttention.forward"]


# ------------------------------------------------------------------------------------------
# The book: a small Sphinx project with the book's extension
# ------------------------------------------------------------------------------------------

BOOK_PAGE = """\
Test
====

.. literalinclude:: {lib}/vision.py
   :language: python
   :pyobject: patchify

.. literalinclude:: {lib}/masking.py
   :language: python
   :pyobject: mask_tokens

.. literalinclude:: {lib}/models/bert.py
   :language: python
   :pyobject: BertEmbeddings.forward

.. literalinclude:: {lib}/layers.py
   :language: python
   :pyobject: LayerNorm

.. literalinclude:: {lib}/gpu.py
   :language: python
   :pyobject: get_device

.. embargo:: course_lib.masking.mask_tokens

   Secret prose: the forward pass subtracts the mean.
"""


def build_book(tmp_path: Path, edition: str, schedule_path: Path | None = None) -> str:
    src = tmp_path / f"src-{edition}"
    src.mkdir()
    lib = os.path.relpath(ROOT / "course_lib", src)
    (src / "index.rst").write_text(BOOK_PAGE.format(lib=lib), encoding="utf-8")
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        f"extensions = ['embargo_edition']\ncourse_root = {str(ROOT)!r}\n"
        f"course_schedule = {str(schedule_path or '')!r}\n",
        encoding="utf-8",
    )
    out = tmp_path / f"html-{edition}"
    env = {**os.environ, "COURSE_EDITION": edition}
    run = time_limits.run(
        [sys.executable, "-m", "sphinx", "-q", "-W", "-b", "html", str(src), str(out)],
        capture_output=True, text=True, env=env, cpu=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return str(out / "index.html")


@pytest.mark.slow
def test_the_student_edition_of_the_book_shows_no_embargoed_statement(
    tmp_path, example_plan, example_schedule
):
    student = build_book(tmp_path, "student", example_schedule)
    instructor = build_book(tmp_path, "instructor", example_schedule)
    assert embargo.scan(example_plan, [Path(student)]) == []
    hits = embargo.scan(example_plan, [Path(instructor)])
    assert any("masking.mask_tokens" in h for h in hits)
    assert any("BertEmbeddings.forward" in h for h in hits)
    text = embargo._text_of(Path(student))  # the page's text, without tags
    assert text.count("You implement this in A4, part 2 (BERT's inputs)") == 2
    assert "def get_device" in text  # not graded: shown in full
    # A3 is reader-first: the book shows LayerNorm whole, in the student edition too
    assert "You implement this in A3" not in text and "var = " in text
    # A5 too: patchify whole
    assert "You implement this in A5" not in text and "x.permute(0, 2, 4, 1, 3, 5)" in text
    assert "Secret prose" not in text and "Secret prose" in embargo._text_of(Path(instructor))
    # A4's solutions released: its code comes back in the student edition
    released = tmp_path / "released"
    released.mkdir()
    back = build_book(released, "student", schedule(released, example("solutions-released")))
    assert any("masking.mask_tokens" in h for h in embargo.scan(example_plan, [Path(back)]))
    assert "You implement this in A4" not in Path(back).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------
# The student bundle
# ------------------------------------------------------------------------------------------


def canaries() -> set[str]:
    found = set()
    for path in (ROOT / "autograder" / "suites").rglob("*.py"):
        found |= set(re.findall(r"CANARY-[A-Z0-9-]+", path.read_text(encoding="utf-8")))
    return found


def bundle_texts(folder: Path):
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        yield str(path.relative_to(folder)), path.read_bytes()
        if path.suffix in (".whl", ".zip"):
            with zipfile.ZipFile(path) as archive:
                for name in archive.namelist():
                    yield f"{path.name}!{name}", archive.read(name)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, repo_plan):
    out = tmp_path_factory.mktemp("bundle") / "student"
    archive = embargo.build_bundle(repo_plan, out)
    return out, archive


@pytest.mark.slow
@pytest.mark.xdist_group("embargo")
def test_the_bundle_holds_no_answer_key_and_nothing_instructor_only(bundle, repo_plan):
    out, archive = bundle
    assert archive.exists() and (out / "README.md").exists()
    assert sorted(p.name for p in (out / "assignments").iterdir()) == KNOWN
    assert embargo.scan(repo_plan, [out, archive]) == []
    secret_canaries = canaries()
    assert len(secret_canaries) >= 3, "the hidden suites plant canaries"
    for name, data in bundle_texts(out):
        parts = re.split(r"[/!]", name)
        assert not set(parts) & {"solutions", "autograder", "grading", ".git", "samples"}, name
        text = data.decode("utf-8", "replace")
        assert not [c for c in secret_canaries if c in text], name
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, name
    wheel = next(out.glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    # nothing is embargoed any more, so no stub replays recorded check data
    assert not repo_plan.embargoed
    assert not any(n.startswith("course_lib/checks/data/") and n.endswith(".pt") for n in names)
    assert "course_lib/checks/recorded/a3_transformer.pt" in names  # A3's checks' answers
    assert "course_lib/checks/recorded/a2_self_attention.pt" in names  # A2's checks' answers
    assert "course_lib/checks/recorded/a1_rnn_attention.pt" in names  # A1's checks' answers
    assert "course_lib/checks/recorded/a5_vision_transformers.pt" in names  # A5's
    assert "course_lib/checks/recorded/a4_bert_gpt.pt" in names  # A4's checks' answers


STUDENT_ENV = fresh_env.ENV


@pytest.fixture(scope="module")
def student_python(bundle, tmp_path_factory):
    """A fresh virtual environment with the bundle's wheel; torch & co. from the course's venv."""
    out, _ = bundle
    venv = tmp_path_factory.mktemp("venv") / "student"
    return fresh_env.python_with_wheel(next(out.glob("*.whl")), venv)


def run_checks(python: Path, notebook: Path) -> list[dict]:
    run = time_limits.run(
        [str(python), str(ROOT / "tests" / "course" / "student_checks.py"), str(notebook)],
        capture_output=True, text=True, cpu=1200, cwd=notebook.parent,
        env={**STUDENT_ENV, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


TRAINED = {"check_train_vit"}  # needs the notebook's training run


@pytest.mark.slow
@pytest.mark.xdist_group("embargo")
@pytest.mark.parametrize("name", KNOWN)
def test_the_student_wheel_runs_the_checks_blank_and_with_the_reference(
    student_python, bundle, name
):
    out, _ = bundle
    blank = run_checks(student_python, out / "assignments" / name / f"{name}.ipynb")
    reference = run_checks(student_python, ROOT / "solutions" / name / f"{name}.ipynb")
    assert len(blank) >= 5 and [r["cell"] for r in blank] == [r["cell"] for r in reference]
    wrong = [r for r in blank if r["cell"] not in TRAINED and r["status"] != "failed"]
    assert not wrong, f"blank answers should fail every check with a message: {wrong}"
    assert all(len(r["message"]) >= 20 for r in blank if r["status"] == "failed")
    wrong = [r for r in reference if r["cell"] not in TRAINED and r["status"] != "passed"]
    assert not wrong, f"the reference answers should pass every check: {wrong}"


@pytest.mark.slow
@pytest.mark.xdist_group("embargo")
def test_a3_runs_top_to_bottom_on_the_student_wheel(student_python, bundle, tmp_path, monkeypatch):
    """A3 (reader-first: its checks answer from recorded data) in a Jupyter kernel, top to bottom,
    training included: the reference answers raise nothing; blank answers fail each check with its
    message, and the other errors are the student's own stubs (or what they leave undefined),
    never the library."""
    out, _ = bundle
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    name = "a3_transformer"
    assert run_notebook(student_python, tmp_path, ROOT / "solutions" / name / f"{name}.ipynb") == []
    errors = run_notebook(student_python, tmp_path, out / "assignments" / name / f"{name}.ipynb")
    checks = [e for e in errors if e[0].startswith("check_")]
    assert len(checks) == 5 and all(e[1] == "CheckFailed" for e in checks), checks
    others = [e for e in errors if not e[0].startswith("check_")]
    assert all(e[1] in ("NotImplementedError", "NameError") for e in others), others
    assert not [e for e in errors if "You implement this in" in e[2]], errors
