"""Nothing on a page contradicts another (issue 39), checked on the sources without a build.

- "exercise N" points to the exercise with that number, and the sentence is about it;
- a link whose text is a page's title does not double the title's punctuation ("models??");
- no two works cited render the same label ("Wang et al., 2019" for GLUE and SuperGLUE);
- the numbers the book states on more than one page agree (GPT-3's size, context, memory);
- a page that prints a fully masked row says why it is zeros;
- the notebooks made from the pages (the launch buttons' and "Download > .ipynb") carry no raw
  MyST, and the wheel they install asks for a torch range, not the course's exact pin;
- the print style unfolds folded code without an animation, fits equations, and lets a
  dropdown start on the page it belongs to.
"""

from __future__ import annotations

import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BOOK = REPO / "book"
CHAPTERS = BOOK / "chapters"
PAGES = sorted([BOOK / "intro.md", *CHAPTERS.rglob("[0-9][0-9]_*.md")])
WORD = re.compile(r"[a-z][a-z-]{3,}")
STOP = {"with", "from", "what", "when", "without", "over", "into", "that", "this", "their"}


def _rel(page: Path) -> str:
    return page.relative_to(BOOK).as_posix()


def _prose(text: str) -> str:
    """The page without its code cells and code blocks (their text is code, not claims)."""
    return re.sub(r"^(`{3,})\{code-cell\}.*?^\1\s*$", "", text, flags=re.S | re.M)


def _ext(name: str):
    sys.path.insert(0, str(BOOK / "_ext"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


@cache
def _exercises(page: Path) -> dict[int, str]:
    """{number: the exercise's text} of an exercises page (a numbered list)."""
    text = page.read_text(encoding="utf-8")
    items = re.split(r"^(\d+)\. ", text, flags=re.M)
    return {int(n): body for n, body in zip(items[1::2], items[2::2], strict=True)}


def _title_words(body: str) -> set[str]:
    title = re.match(r"\s*\*([^*]+)\*", body)  # "*KV cache memory.*"
    text = title[1] if title else body.split(".")[0]
    return {w for w in WORD.findall(text.lower()) if w not in STOP}


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_an_exercise_reference_points_to_that_exercise(page):
    """ "(exercise 4)" on 4.6 pointed to *Temperature*; the memory exercise is 5. Each mention
    names the exercises page it means (or is in a chapter with one) and its paragraph shares a
    word with that exercise's title."""
    text = _prose(page.read_text(encoding="utf-8"))
    chapter = page.parent if page.parent != CHAPTERS else page.with_suffix("")
    own = sorted(chapter.glob("*_exercises.md"))
    problems = []
    for paragraph in re.split(r"\n\s*\n", text):
        for match in re.finditer(r"\b[Ee]xercises? (\d+)\b(?: of \{doc\}`([^`]+)`)?", paragraph):
            number, target = int(match[1]), match[2]
            if target:
                exercises = (page.parent / f"{target}.md").resolve()
            elif page.name.endswith("_exercises.md"):
                exercises = page
            else:
                assert len(own) == 1, f"{_rel(page)}: say which exercises page {match[0]!r} means"
                exercises = own[0]
            listed = _exercises(exercises)
            if number not in listed:
                problems.append(f"{match[0]!r}: {exercises.name} has no exercise {number}")
                continue
            words = _title_words(listed[number])
            said = set(WORD.findall(paragraph.lower()))
            if not words & said:
                problems.append(
                    f"{match[0]!r} is in a paragraph about none of {sorted(words)} "
                    f"(exercise {number} of {exercises.name}: {listed[number][:60]!r})"
                )
    assert not problems, f"{_rel(page)}:\n" + "\n".join(problems)


@cache
def _titles() -> dict[Path, str]:
    titles = {}
    for page in PAGES:
        match = re.search(r"^# (.+)$", _prose(page.read_text(encoding="utf-8")), re.M)
        if match:
            titles[page.resolve()] = match[1].strip()
    return titles


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_a_title_link_does_not_double_its_punctuation(page):
    """{doc}`07_model_sizes`? rendered "How big are these models??"."""
    doubled = []
    for target, mark in re.findall(r"\{doc\}`([^`<]+)`([?.!:])", page.read_text("utf-8")):
        title = _titles().get((page.parent / f"{target}.md").resolve(), "")
        if title[-1:] in "?.!:" and title:
            doubled.append(f"{{doc}}`{target}`{mark} reads {title + mark!r}")
    assert not doubled, f"{_rel(page)}: {doubled}"


def test_no_two_works_render_the_same_citation_label():
    """The references list and every citation in the text use one label per work: "Wang et
    al., 2019a" and "2019b", never the same "Wang et al., 2019" for GLUE and SuperGLUE."""
    author_year = _ext("author_year")
    bib = BOOK / "references.bib"
    entries = author_year._entries(bib)
    years = author_year._years(list(entries.values()))
    labels: dict[str, list[str]] = {}
    for key, entry in entries.items():
        labels.setdefault(
            f"{author_year.authors_and_year(entry)[0]}, {years[entry.key]}", []
        ).append(key)
    same = {label: keys for label, keys in labels.items() if len(keys) > 1}
    assert not same, f"works with the same label: {same}"
    for key, entry in entries.items():  # the notebooks' citations are the list's labels
        label = f"{author_year.authors_and_year(entry)[0]}, {years[entry.key]}"
        assert author_year.citation([key], bib, textual=False) == f"({label})"
    # the text's citations take the list's year (2019a), not the entry's year field
    config = (BOOK / "_config.yml").read_text(encoding="utf-8")
    style = re.search(r"^\s*bibtex_reference_style:\s*(\S+)", config, re.M)[1]
    assert style == "author_year_labelled", (
        f"bibtex_reference_style is {style!r}: sphinxcontrib-bibtex's own author-year styles "
        "print the year field, so two works by the same authors in one year read alike"
    )
    assert "author_year_labelled" in (BOOK / "_ext" / "author_year.py").read_text("utf-8")


# --- numbers the book states on more than one page ----------------------------------------------

P4 = "chapters/04_pretraining"
#: fact -> [(page, pattern with one group)]; every pattern matches, and every match agrees.
FACTS = {
    "GPT-3's parameters (billions)": [
        (f"{P4}/07_model_sizes.md", r"\*\*(\d+)B parameters\*\*"),
        (f"{P4}/07_model_sizes.md", r"\| GPT-3 (\d+)B \|"),
        (f"{P4}/07_model_sizes.md", r"model has (\d+)B \{cite"),
        (f"{P4}/10_exercises.md", r"GPT-3 (\d+)B"),
    ],
    "GPT-3's context (tokens)": [
        (f"{P4}/07_model_sizes.md", r"a context of (\d+)\s"),
        (f"{P4}/07_model_sizes.md", r"the (\d+)-token context"),
        (f"{P4}/10_exercises.md", r"context of (\d+) tokens"),
    ],
    "BERT's masking rate (%)": [
        (f"{P4}/01_bert_inputs.md", r"random (\d+)% of the tokens"),
        (f"{P4}/10_exercises.md", r"mask (\d+)% of the tokens"),
    ],
    "GPT-3's layers": [
        (f"{P4}/07_model_sizes.md", r"\*\*(\d+) layers"),
        (f"{P4}/07_model_sizes.md", r"\| layers \| \d+ \| \d+ \| (\d+) \|"),
    ],
}


@pytest.mark.parametrize("fact", FACTS)
def test_a_number_stated_on_two_pages_is_the_same(fact):
    found = []
    for page, pattern in FACTS[fact]:
        values = re.findall(pattern, (BOOK / page).read_text(encoding="utf-8"))
        assert values, f"{page} no longer states {fact} as /{pattern}/: update FACTS"
        found += [(page, v) for v in values]
    assert len({v for _, v in found}) == 1, f"{fact} differs between pages: {found}"


def test_gpt3_memory_and_gpu_count_follow_from_its_size():
    """4.7: 175B parameters in 16 bits take "about 325 GiB, more than four 80 GB GPUs hold";
    4.6 must not say that such a model's conversations fit on one GPU."""
    text = (BOOK / P4 / "07_model_sizes.md").read_text(encoding="utf-8")
    params = int(re.search(r"model has (\d+)B \{cite", text)[1]) * 10**9
    gib = int(re.search(r"16-bit weights alone take about (\d+) GiB", text)[1])
    assert abs(gib - 2 * params / 2**30) / gib < 0.01, (gib, 2 * params / 2**30)
    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
    gpus, size = re.search(r"more than\s+(\w+)\s+(\d+) GB GPUs", text).groups()
    gpus = words.get(gpus) or int(gpus)
    assert gpus * int(size) * 10**9 < 2 * params <= (gpus + 1) * int(size) * 10**9
    claims = []
    for page in PAGES:
        prose = re.sub(r"\s+", " ", _prose(page.read_text(encoding="utf-8")))
        for sentence in re.split(r"(?<=[.!?]) ", prose):
            if re.search(r"GPT-3|175B", sentence) and re.search(r"\bone GPU\b", sentence):
                if not re.search(r"\bnot\b|n't\b|\bno\b", sentence):
                    claims.append(f"{_rel(page)}: {sentence}")
    assert not claims, "a GPT-3-sized model does not fit on one GPU:\n" + "\n".join(claims)


FULLY_MASKED = re.compile(
    r"\[False(?:, False)+\]|torch\.zeros\([^)]*dtype=torch\.bool\)|zeros_like\([^)]*bool"
)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_a_page_that_prints_a_fully_masked_row_says_it_is_zeros(page):
    """A.3 printed a row of zeros right after saying masked scores are filled with the most
    negative number; the rule (a fully masked row gets zero weights) was only on 2.8."""
    text = page.read_text(encoding="utf-8")
    cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", text, re.S | re.M)
    if not any(FULLY_MASKED.search(c) and "masked_softmax" in c for c in cells):
        pytest.skip("prints no fully masked row")
    prose = re.sub(r"\s+", " ", _prose(text))
    assert re.search(r"(fully|all\*?)\W+(?:\w+\W+){0,4}masked[^.]*\bzero", prose), (
        f"{_rel(page)} prints a fully masked row: say that it gets zero weights (and why)"
    )


# --- the notebooks and the wheel ----------------------------------------------------------------

RAW_MYST = re.compile(r"\{[\w:.-]+\}`|^\s*(?:`{3,}|:{3,})\{|^\s*\([\w-]+\)=\s*$", re.M)


class _StubApp:
    """Enough of Sphinx for the launch notebooks' Markdown converter."""

    class _Std:
        labels: dict = {}
        anonlabels: dict = {}

    class _Env:
        titles: dict = {}
        toc_fignumbers: dict = {}

        def get_domain(self, name):
            return _StubApp._Std()

    env = _Env()
    srcdir = str(BOOK)
    builder = type("B", (), {"images": {}})()

    class config:
        launch_site_url = "https://example.org/book"
        html_theme_options = {"repository_url": "https://github.com/o/r"}
        bibtex_bibfiles = ["references.bib"]


def test_the_notebooks_made_from_the_pages_carry_no_raw_myst():
    """Every Markdown cell of every page, converted as the launch (and download) notebooks are:
    no {cite:p}, {doc}, :::{dropdown}, {literalinclude} or (label)= is left."""
    from myst_nb.core.read import read_myst_markdown_notebook

    launch = _ext("launch_notebooks")
    raw = []
    for page in PAGES:
        notebook = read_myst_markdown_notebook(page.read_text(encoding="utf-8"), path=page)
        converter = launch._Converter.__new__(launch._Converter)
        converter.app, converter.site = _StubApp(), "https://example.org/book/"
        converter.pagename = page.relative_to(BOOK).with_suffix("").as_posix()
        for cell in notebook.cells:
            if cell.cell_type == "markdown":
                out = converter.markdown(cell.source)
                raw += [f"{_rel(page)}: {m[0]!r}" for m in RAW_MYST.finditer(out)]
    assert not raw, "raw MyST in the notebooks:\n" + "\n".join(raw)


def test_the_download_button_gives_the_launch_notebook():
    """sphinx-book-theme's "Download > .ipynb" serves _sources/<page>.ipynb: the extension
    writes the launch notebook there too (the built site is checked in
    test_launch_notebooks.py)."""
    source = (BOOK / "_ext" / "launch_notebooks.py").read_text(encoding="utf-8")
    assert re.search(r'for folder in \(NOTEBOOKS, "_sources"\)', source)
    assert 'context["ipynb_source"]' in source


def test_the_wheel_asks_for_a_torch_range_and_the_course_pins_it():
    """The launch notebooks' install cell must not replace a Colab reader's torch: the wheel's
    requirement (``[project] dependencies``) is a range; the course's environment (``dev``)
    keeps the exact CPU pin."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    torch = [d for d in project["dependencies"] if re.match(r"torch\b", d)]
    assert len(torch) == 1 and ">=" in torch[0] and "==" not in torch[0], torch
    assert any(re.fullmatch(r"torch==[\d.]+", d) for d in project["optional-dependencies"]["dev"])


# --- print --------------------------------------------------------------------------------------


def _print_css() -> str:
    css = (BOOK / "_static" / "book.css").read_text(encoding="utf-8")
    blocks = re.findall(r"@media print\s*\{(.*?)\n\}", css, re.S)
    assert blocks, "book.css has no @media print block"
    return "\n".join(blocks)


def test_print_css_unfolds_code_fits_equations_and_keeps_dropdowns_in_place():
    css = re.sub(r"/\*.*?\*/", "", _print_css(), flags=re.S)
    assert re.search(r"animation:\s*none\s*!important", css), "no fade-in when printing"
    assert re.search(r"opacity:\s*1\s*!important", css), "folded content prints opaque"
    assert "details::details-content" in css, "closed <details> print their content"
    assert re.search(r"mjx-container[^{]*\{[^}]*overflow[^}]*visible", css), "no equation scroll"
    assert re.search(r"break-before:\s*auto", css) and re.search(r"break-inside:\s*auto", css)
    js = (BOOK / "_static" / "book.js").read_text(encoding="utf-8")
    assert "beforeprint" in js and "fitEquationsForPrint" in js, "equations are scaled to fit"
