"""Runnable notebooks behind the launch buttons (issue 17).

Colab cannot open a MyST Markdown page, and neither Colab nor Binder has ``course_lib``. So for
every page that is a notebook this extension writes ``_notebooks/<page>.ipynb`` into the built
site, made from the page's source with myst-nb's reader (the cells the build executes):

- a first cell installs the course library when it cannot be imported (Colab), and does nothing
  where it can (Binder, a clone of the repository);
- the Markdown is made readable outside the book: admonitions become quotes, dropdowns
  ``<details>``, figures images from the published site, ``{doc}``/``{numref}`` links to the
  site's pages ("Figure 2.3"), citations their keys;
- ``literalinclude`` (the library's source) becomes a pointer to the book's page.

The same notebook is what the page's "Download > .ipynb" button gives (``_sources/<page>.ipynb``,
where sphinx-book-theme would put the executed MyST notebook, raw roles and no install cell).

The launch buttons of sphinx-book-theme are rewritten to open these files on the branch that the
Pages workflow (``.github/workflows/pages.yml``) deploys the site to (``launch_site_branch``,
``gh-pages``): Colab at ``/github/<org>/<repo>/blob/gh-pages/_notebooks/<page>.ipynb``, Binder at
``/v2/gh/<org>/<repo>/gh-pages?labpath=_notebooks/<page>.ipynb``. For Binder the build also writes
``binder/requirements.txt`` (the course library) and ``.nojekyll`` (GitHub Pages then serves the
folders whose names start with ``_``).

The first cell installs the public wheel of the course library, which the site ships
(``_notebooks/course_lib-<version>-py3-none-any.whl``, built by
``autograder.course.embargo.build_wheel``: ``course_lib`` as in the repository, the visible
checks' recorded answers included; the answer keys live beside the hidden suites, never in it),
from the site: the launch buttons work whether or not the instructor's repository is public. The
wheel is built once per content of the library and ``pyproject.toml``, and kept beside the
execution cache.

Settings (``sphinx.config`` in ``_config.yml``): ``launch_site_branch``, ``launch_site_url``
(default ``https://<org>.github.io/<repo>/``), ``launch_install`` (overrides the default,
``course_lib @ <site>/_notebooks/<wheel>``).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import shutil
import tempfile
from pathlib import Path
from urllib.parse import quote

from author_year import citation  # book/_ext, beside this file

NOTEBOOKS = "_notebooks"
FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:.-]+)\}[ \t]*(?P<arg>.*?)\s*$")
ROLE = re.compile(r"\{(?P<name>[\w:.-]+)\}`(?P<content>[^`]+)`")
ADMONITIONS = {
    "note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error",
    "seealso", "admonition",
}  # fmt: skip
DROPPED = {"bibliography", "toctree", "tableofcontents", "eval-rst", "glossary", "raw"}

INSTALL_CELL = """\
# Colab and other fresh environments: install the course library unless it is already there.
import importlib.util
import subprocess
import sys

PACKAGE = {spec}
if importlib.util.find_spec("course_lib") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", PACKAGE], check=True)
"""


def _repo(app) -> tuple[str, str, str]:
    """(repository URL, org, repo) from the book's ``repository:`` settings."""
    url = app.config.html_theme_options.get("repository_url", "").rstrip("/")
    match = re.search(r"github\.com/([^/]+)/([^/]+?)(?:\.git)?$", url)
    if not match:
        raise ValueError(f"launch_notebooks needs a GitHub repository_url, not {url!r}")
    return url, match.group(1), match.group(2)


def install_spec(app) -> str:
    if app.config.launch_install:
        return app.config.launch_install
    wheel = getattr(app, "_course_wheel", None)
    if wheel is not None:
        return f"course_lib @ {site_url(app)}{NOTEBOOKS}/{wheel.name}"
    url, _, _ = _repo(app)
    branch = app.config.html_theme_options.get("repository_branch") or "main"
    return f"course_lib @ git+{url}@{branch}"


def site_url(app) -> str:
    if app.config.launch_site_url:
        return app.config.launch_site_url.rstrip("/") + "/"
    _, org, repo = _repo(app)
    return f"https://{org}.github.io/{repo}/"


def launch_urls(app, pagename: str) -> dict[str, str]:
    """{"Colab": url, "Binder": url} of the page's notebook on the site's branch."""
    _, org, repo = _repo(app)
    branch = app.config.launch_site_branch
    path = f"{NOTEBOOKS}/{pagename}.ipynb"
    theme = app.config.html_theme_options.get("launch_buttons", {})
    colab = theme.get("colab_url", "https://colab.research.google.com").rstrip("/")
    binder = theme.get("binderhub_url", "https://mybinder.org").rstrip("/")
    return {
        "Colab": f"{colab}/github/{org}/{repo}/blob/{branch}/{quote(path)}",
        "Binder": f"{binder}/v2/gh/{org}/{repo}/{branch}?labpath={quote(path)}",
    }


# --- MyST to Jupyter Markdown -------------------------------------------------------------------


class _Converter:
    def __init__(self, app, pagename: str):
        self.app, self.pagename = app, pagename
        self.site = site_url(app)

    # roles
    def _bibfile(self) -> Path:
        names = getattr(self.app.config, "bibtex_bibfiles", None) or ["references.bib"]
        srcdir = getattr(self.app, "srcdir", None) or Path(__file__).resolve().parent.parent
        return Path(srcdir) / names[0]

    def _doc_link(self, content: str) -> str:
        match = re.match(r"(?P<text>.*?)\s*<(?P<target>[^>]+)>$", content)
        text, target = (match["text"], match["target"]) if match else ("", content)
        if target.startswith("/"):
            docname = target.lstrip("/")
        else:
            docname = posixpath.normpath(posixpath.join(posixpath.dirname(self.pagename), target))
        if not text:
            title = self.app.env.titles.get(docname)
            text = title.astext() if title is not None else docname
        return f"[{text}]({self.site}{docname}.html)"

    def _ref_link(self, content: str, numbered: bool) -> str:
        match = re.match(r"(?P<text>.*?)\s*<(?P<target>[^>]+)>$", content)
        text, label = (match["text"], match["target"]) if match else ("", content)
        std = self.app.env.get_domain("std")
        docname, anchor = std.labels.get(label, (None, None, None))[:2]
        if docname is None:
            docname, anchor = std.anonlabels.get(label, (None, None))
        if docname is None:
            return text or label
        if not text and numbered:
            figtype = "figure" if label.startswith("fig") else "table"
            numbers = self.app.env.toc_fignumbers.get(docname, {}).get(figtype, {}).get(anchor)
            kind = "Figure" if figtype == "figure" else "Table"
            text = f"{kind} {'.'.join(map(str, numbers))}" if numbers else kind
        elif not text:
            text = std.labels.get(label, (None, None, label))[2] or label
        return f"[{text}]({self.site}{docname}.html#{anchor})"

    def role(self, match: re.Match) -> str:
        name, content = match["name"], match["content"]
        if name.startswith("cite"):  # author-year, as the book shows it
            keys = [k.strip() for k in content.split(",") if k.strip()]
            textual = name not in ("cite:p", "cite:ps", "cite")
            return citation(keys, self._bibfile(), textual=textual)
        if name == "doc":
            return self._doc_link(content)
        if name in ("numref", "ref"):
            return self._ref_link(content, numbered=name == "numref")
        if name in ("math", "eq"):
            return f"${content}$" if name == "math" else content
        return re.sub(r"\s*<[^>]+>$", "", content)

    # directives
    def directive(self, name: str, arg: str, body: str) -> str:
        options, body = _split_options(body)
        if name in DROPPED:
            return ""
        if name in ADMONITIONS:
            title = (
                arg if name == "admonition" else (name.capitalize() + (f": {arg}" if arg else ""))
            )
            text = self.markdown(body)
            quoted = "\n".join(f"> {line}" if line else ">" for line in text.splitlines())
            return f"> **{title}**\n>\n{quoted}"
        if name == "dropdown":
            return f"<details><summary>{arg}</summary>\n\n{self.markdown(body)}\n\n</details>"
        if name in ("figure", "image"):
            src = self._image_url(arg)
            alt = options.get("alt", "")
            caption = self.markdown(body).strip()
            return f"![{alt}]({src})" + (f"\n\n*{caption}*" if caption else "")
        if name == "literalinclude":
            what = options.get("pyobject")
            source = posixpath.basename(arg)
            shown = f"`{what}` from `{source}`" if what else f"`{source}`"
            link = f"{self.site}{self.pagename}.html"
            return (
                f"> The book shows the course library's source here: {shown} ([the page]({link}))."
            )
        if name == "rubric":  # an unnumbered heading
            return f"**{arg}**"
        if name in ("math",):
            return f"$$\n{body.strip()}\n$$"
        if name in ("code-block", "code", "sourcecode"):
            return f"```{arg}\n{body.rstrip()}\n```"
        return self.markdown(body)

    def _image_url(self, arg: str) -> str:
        if re.match(r"https?://", arg):
            return arg
        if arg.startswith("/"):
            rel = arg.lstrip("/")
        else:
            rel = posixpath.normpath(posixpath.join(posixpath.dirname(self.pagename), arg))
        name = getattr(self.app.builder, "images", {}).get(rel, posixpath.basename(rel))
        return f"{self.site}_images/{quote(name)}"

    def markdown(self, text: str) -> str:
        lines, out, i = text.splitlines(), [], 0
        while i < len(lines):
            line = lines[i]
            match = FENCE.match(line)
            if match:
                fence = match["fence"]
                j = i + 1
                while j < len(lines) and not re.match(
                    rf"^{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]
                ):
                    j += 1
                body = "\n".join(lines[i + 1 : j])
                out.append(self.directive(match["name"], match["arg"], body))
                i = j + 1
                continue
            if re.match(r"^\((\S+)\)=\s*$", line) or re.match(r"^%", line):
                i += 1  # MyST targets and comments
                continue
            out.append(ROLE.sub(self.role, line))
            i += 1
        return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


def _split_options(body: str) -> tuple[dict[str, str], str]:
    """A directive's ``:key: value`` lines or ``---`` YAML block, and the rest of its body."""
    lines = body.splitlines()
    options: dict[str, str] = {}
    if lines and lines[0].strip() == "---":
        end = next((k for k in range(1, len(lines)) if lines[k].strip() == "---"), 0)
        for line in lines[1:end]:
            key, _, value = line.partition(":")
            options[key.strip()] = value.strip()
        return options, "\n".join(lines[end + 1 :])
    k = 0
    while k < len(lines) and re.match(r"^:[\w-]+:", lines[k]):
        key, value = re.match(r"^:([\w-]+):\s*(.*)$", lines[k]).groups()
        options[key] = value
        k += 1
    return options, "\n".join(lines[k:])


# --- notebooks and buttons ----------------------------------------------------------------------


def make_notebook(app, pagename: str) -> dict:
    """The page as a runnable notebook (nbformat 4 JSON), install cell first."""
    import nbformat
    from myst_nb.core.read import read_myst_markdown_notebook

    source = Path(app.env.doc2path(pagename))
    if source.suffix == ".ipynb":
        notebook = nbformat.read(source, as_version=4)
    else:  # the parser the build uses, so that the notebook has the page's cells
        notebook = read_myst_markdown_notebook(source.read_text(encoding="utf-8"), path=source)
    converter = _Converter(app, pagename)
    cells = [
        nbformat.v4.new_code_cell(
            INSTALL_CELL.format(spec=json.dumps(install_spec(app))).rstrip(),
            metadata={"tags": ["install"]},
        )
    ]
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            text = converter.markdown(cell.source)
            if text.strip():
                cells.append(nbformat.v4.new_markdown_cell(text))
        elif cell.cell_type == "code":
            metadata = {k: v for k, v in cell.metadata.items() if k in ("tags",)}
            cells.append(nbformat.v4.new_code_cell(cell.source, metadata=metadata))
    page_url = f"{site_url(app)}{pagename}.html"
    if cells[1:] and cells[1].cell_type == "markdown":
        cells[1].source += f"\n\n*From the book: [{page_url}]({page_url}).*"
    result = nbformat.v4.new_notebook(cells=cells)
    result.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "colab": {"provenance": []},
    }
    for index, cell in enumerate(result.cells):
        cell["id"] = f"cell-{index}"
    nbformat.validate(result)
    return result


def _is_notebook(app, pagename: str) -> bool:
    return "kernelspec" in app.env.metadata.get(pagename, {})


def _write_notebook_and_fix_buttons(app, pagename, templatename, context, doctree):
    if app.builder.format != "html" or doctree is None or not _is_notebook(app, pagename):
        return
    text = json.dumps(make_notebook(app, pagename), indent=1)
    # the launch buttons' notebook, and the one "Download > .ipynb" gives (sphinx-book-theme
    # copied the executed MyST notebook there: raw roles, no install cell); the same file
    for folder in (NOTEBOOKS, "_sources"):
        target = Path(app.outdir) / folder / f"{pagename}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    context["ipynb_source"] = f"{pagename}.ipynb"
    urls = launch_urls(app, pagename)
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            if button.get("text") in urls:
                button["url"] = urls[button["text"]]


# --- the wheel ----------------------------------------------------------------------------------

WHEEL_INPUTS = ("course_lib/**/*", "pyproject.toml", "autograder/course/embargo.py")


def _wheel_key(root: Path) -> str:
    digest = hashlib.sha256()
    files = {f for pattern in WHEEL_INPUTS for f in root.glob(pattern) if f.is_file()}
    for f in sorted(f for f in files if "__pycache__" not in f.parts):
        digest.update(f.relative_to(root).as_posix().encode())
        digest.update(hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _build_wheel(app) -> None:
    """Build (or reuse) the public wheel of course_lib that the launch notebooks install."""
    if app.config.launch_install or app.builder.format != "html":
        return
    from autograder.course.embargo import build_wheel

    root = Path(app.srcdir).parent.resolve()
    cache_path = getattr(app.config, "nb_execution_cache_path", "") or app.doctreedir
    folder = Path(cache_path).parent / ".course_lib_wheel" / _wheel_key(root)
    wheels = sorted(folder.glob("course_lib-*.whl"))
    if not wheels:
        with tempfile.TemporaryDirectory(prefix="book-wheel-") as tmp:
            made = build_wheel(root, Path(tmp))
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(made, folder / made.name)
        wheels = sorted(folder.glob("course_lib-*.whl"))
    app._course_wheel = wheels[-1]


def _write_site_files(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    wheel = getattr(app, "_course_wheel", None)
    if wheel is not None:
        (out / NOTEBOOKS).mkdir(exist_ok=True)
        for stale in (out / NOTEBOOKS).glob("course_lib-*.whl"):  # an earlier build's wheel
            stale.unlink()
        shutil.copy2(wheel, out / NOTEBOOKS / wheel.name)
    (out / ".nojekyll").write_text("")
    binder = out / "binder"
    binder.mkdir(exist_ok=True)
    (binder / "requirements.txt").write_text(
        "# Binder builds the site's branch with these; the notebooks are in _notebooks/.\n"
        "--extra-index-url https://download.pytorch.org/whl/cpu\n"
        f"{install_spec(app)}\njupyterlab\n",
        encoding="utf-8",
    )


def _rewrite_all_when_the_install_changes(app, env, added, changed, removed) -> list[str]:
    """Every page's notebook carries the install cell: when what it installs changes (a new
    wheel name), every page is written again, not only the edited ones."""
    install = install_spec(app)
    if getattr(env, "course_launch_install", None) == install:
        return []
    env.course_launch_install = install
    return sorted(env.found_docs)


def setup(app):
    app.add_config_value("launch_site_branch", "gh-pages", "html")
    app.add_config_value("launch_site_url", "", "html")
    app.add_config_value("launch_install", "", "html")
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", _write_notebook_and_fix_buttons, priority=600)
    app.connect("builder-inited", _build_wheel)
    app.connect("env-get-outdated", _rewrite_all_when_the_install_changes)
    app.connect("build-finished", _write_site_files)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
