"""The notebooks behind the launch buttons (Colab, Binder) run for any reader.

Each launch notebook is its page's code behind one cell that installs ``course_lib`` from the
public wheel the site ships; the pages themselves run in every build (``execute_pages.py`` and the
book build fail on an error). So a launch notebook runs wherever that wheel is the library the
pages ran with: every notebook is checked to be its page plus the install cell, the wheel against
the repository's ``course_lib`` file by file, the built book is scanned for the answer keys'
statements, and at least one notebook per chapter (the encoder-decoder, multi-head attention, the
book's Transformer blocks, BERT's inputs, GPT's cache, ViT, and the appendix's data-parallel
training, whose torchrun script the notebook writes itself) runs top to bottom in a fresh
environment that has the wheel and nothing of this repository, as on Colab. "Download > .ipynb"
gives the same notebook as the launch buttons (issue 39), and the wheel asks for a range of torch
versions, so that installing it on Colab keeps the reader's torch.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path

import fresh_env
import jupytext
import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL = 'find_spec("course_lib")'
RUN = [
    "chapters/01_seq2seq_attention/01_encoder_decoder",
    "chapters/02_attention_layer/09_multi_head",
    "chapters/03_transformer/02_blocks",
    "chapters/04_pretraining/01_bert_inputs",
    "chapters/04_pretraining/06_kv_cache",
    "chapters/05_vision/02_vit",
    "chapters/06_appendix_gpu/04_data_parallel",
]


def _every_page() -> list[str]:
    """Every notebook page of the table of contents (``make launch-notebooks`` runs them all)."""
    import importlib.util

    path = REPO / "book" / "scripts" / "execute_pages.py"
    spec = importlib.util.spec_from_file_location("execute_pages", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    book = REPO / "book"
    return [p.relative_to(book).with_suffix("").as_posix() for p in module.toc_pages(book)]


# `make launch-notebooks` (LAUNCH_NOTEBOOKS=all): every notebook, not one per chapter
if os.environ.get("LAUNCH_NOTEBOOKS") == "all":
    RUN = _every_page()
RAW_MYST = re.compile(r"\{[\w:.-]+\}`|^\s*(?:`{3,}|:{3,})\{|^\s*\([\w-]+\)=\s*$", re.M)


def test_at_least_one_launch_notebook_per_chapter_runs():
    chapters = {p.name for p in (REPO / "book" / "chapters").glob("[0-9][0-9]_*") if p.is_dir()}
    assert chapters <= {name.split("/")[1] for name in RUN}, "a chapter without a notebook in RUN"


def _launch_notebooks(html_dir: Path) -> dict[str, Path]:
    folder = html_dir / "_notebooks"
    return {p.relative_to(folder).with_suffix("").as_posix(): p for p in folder.rglob("*.ipynb")}


def _code(cells) -> list[str]:
    return [c["source"] if isinstance(c["source"], str) else "".join(c["source"]) for c in cells]


@pytest.fixture(scope="module")
def wheel(html_dir) -> Path:
    wheels = sorted((html_dir / "_notebooks").glob("course_lib-*.whl"))
    assert len(wheels) == 1, f"expected the site's wheel in _notebooks/, found {wheels}"
    return wheels[0]


def test_every_launch_notebook_is_its_page_behind_an_install_cell(html_dir):
    notebooks = _launch_notebooks(html_dir)
    assert len(notebooks) >= 40, "every page with code has a launch notebook"
    problems = []
    for name, path in sorted(notebooks.items()):
        cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
        code = _code([c for c in cells if c["cell_type"] == "code"])
        page = jupytext.read(REPO / "book" / f"{name}.md")
        if not code or INSTALL not in code[0] or "pip" not in code[0]:
            problems.append(f"{name}: the first cell does not install course_lib")
        elif code[1:] != _code([c for c in page.cells if c.cell_type == "code"]):
            problems.append(f"{name}: its code cells are not the page's")
    assert not problems, "\n".join(problems)


def test_download_ipynb_is_the_launch_notebook(html_dir):
    """The page's "Download > .ipynb" (_sources/<page>.ipynb) is the launch notebook, byte for
    byte: the install cell first, no raw MyST ({cite:p}, {doc}, :::{dropdown},
    {literalinclude}), and the page's download button links to it."""
    problems = []
    for name, path in sorted(_launch_notebooks(html_dir).items()):
        download = html_dir / "_sources" / f"{name}.ipynb"
        if not download.exists() or download.read_bytes() != path.read_bytes():
            problems.append(f"{name}: _sources/{name}.ipynb is not the launch notebook")
            continue
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        markdown = _code([c for c in cells if c["cell_type"] == "markdown"])
        problems += [f"{name}: raw MyST {m[0]!r}" for t in markdown for m in RAW_MYST.finditer(t)]
        page = (html_dir / f"{name}.html").read_text(encoding="utf-8")
        if f"_sources/{name}.ipynb" not in page:
            problems.append(f"{name}: the page's download button does not offer the notebook")
    assert not problems, "\n".join(problems)


def test_the_wheel_keeps_the_readers_torch(wheel):
    """The install cell runs pip on the reader's machine (Colab has its own torch): the wheel
    asks for a range of torch versions, never the course's exact pin."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    torch = re.findall(r"^Requires-Dist: torch\b(.*)$", metadata, re.M)
    assert torch and ">=" in torch[0] and "==" not in torch[0], torch


def test_the_site_wheel_is_the_library_the_pages_ran_with(wheel, html_dir):
    """Every answer key lives beside its hidden suite, so the wheel readers install is the
    repository's ``course_lib``, byte for byte, and every launch notebook installs it from the
    site (never the instructor's repository)."""
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n: archive.read(n) for n in archive.namelist() if n.startswith("course_lib/")}
    ours = {
        p.relative_to(REPO).as_posix(): p.read_bytes()
        for p in (REPO / "course_lib").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    missing = sorted(n for n in ours if n.endswith(".py") and n not in shipped)
    changed = sorted(n for n in shipped if n in ours and shipped[n] != ours[n])
    assert not missing and not changed, f"missing {missing}, changed {changed}"
    version = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M)[1]
    assert wheel.name == f"course_lib-{version}-py3-none-any.whl"
    for notebook in sorted((html_dir / "_notebooks").rglob("*.ipynb")):
        first = "".join(json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]["source"])
        assert f"/_notebooks/{wheel.name}" in first and "git+" not in first, notebook
    requirements = (html_dir / "binder" / "requirements.txt").read_text(encoding="utf-8")
    assert f"/_notebooks/{wheel.name}" in requirements and "git+" not in requirements


def test_the_built_book_holds_no_statement_of_an_answer_key(html_dir):
    """Pages, their sources, the launch notebooks and the wheel: no statement of a key beside a
    hidden suite (until its solutions are released)."""
    from autograder.course import embargo

    assert embargo.scan(embargo.plan(REPO), [html_dir]) == []


@pytest.fixture(scope="module")
def reader_python(wheel, tmp_path_factory) -> Path:
    """A fresh environment with the site's wheel (torch & co. from the course's venv)."""
    return fresh_env.python_with_wheel(wheel, tmp_path_factory.mktemp("launch") / "venv")


@pytest.mark.slow
@pytest.mark.parametrize("name", RUN)
def test_a_launch_notebook_runs_top_to_bottom_in_a_fresh_environment(
    name, html_dir, reader_python, tmp_path, monkeypatch
):
    kernels, cwd = tmp_path / "kernels", tmp_path / "content"  # cwd: no repository around
    cwd.mkdir()
    monkeypatch.setenv("JUPYTER_PATH", str(kernels))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    notebook = _launch_notebooks(html_dir)[name]
    assert fresh_env.run_notebook(reader_python, kernels, notebook, cwd=cwd) == []
