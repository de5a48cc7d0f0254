"""The pages graders and students open: formgrader's and ``nbgrader generate_feedback``'s HTML.

Both render a notebook of ``grading/autograded/`` with nbconvert's ``HTMLExporter`` (formgrader
serves it on the Jupyter origin, where a script could drive the API and the terminals). The
course's grader builds those notebooks from the release, with the student's text made inert;
:class:`InertPage`, named in ``nbgrader_config.py`` for every ``HTMLExporter`` the course's
nbgrader makes (``sanitize_html`` is set there too), makes the page safe whatever notebook reaches
it:

- Markdown cells are rendered here and cleaned (an allow-list of tags and attributes; URLs only
  web, mail and relative; every other tag shown as text), then handed to the template as one raw
  HTML block, which Markdown passes through unchanged: nbgrader's ``formgrade`` and ``feedback``
  templates render Markdown cells without nbconvert's ``sanitize_html``.
- Raw cells are escaped (the template writes a raw cell's source into the page as it is); cell
  attachments are dropped.
- Outputs keep plain text and PNG, JPEG and GIF images; their metadata keeps only numeric widths
  and heights (nbconvert writes ``width=...`` unquoted: ``1 onerror=...`` was an attribute).
- A ``grade_id`` that is not a plain name (the templates put it into attributes) is replaced.
"""

from __future__ import annotations

import html
import re

import bleach
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.preprocessors import Preprocessor

TAGS = frozenset(
    "a abbr b blockquote br code del details div em h1 h2 h3 h4 h5 h6 hr i img li ol p pre s span "
    "strong sub summary sup table tbody td th thead tr ul".split()
)
ATTRIBUTES = {"a": ["href", "title"], "img": ["src", "alt", "title"], "td": ["align"],
              "th": ["align"]}  # fmt: skip
SAFE_MIME = ("text/plain", "image/png", "image/jpeg", "image/gif")
PLAIN_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")
MAX_SIZE_DIGITS = 5


def inert_html(markdown: str) -> str:
    """``markdown`` rendered and cleaned, as one HTML block Markdown leaves as it is."""
    page = bleach.clean(
        markdown2html_mistune(markdown), tags=TAGS, attributes=ATTRIBUTES,
        protocols={"http", "https", "mailto"}, strip=False, strip_comments=True,
    )  # fmt: skip
    # a blank line would end the HTML block and hand the rest to Markdown again
    lines = [line if line.strip() else "&#32;" for line in page.splitlines()]
    return "<div>\n" + "\n".join(lines) + "\n</div>"


def _size(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and 0 < value < 10**MAX_SIZE_DIGITS:
        return int(value)
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value) if 0 < len(value) <= MAX_SIZE_DIGITS else None
    return None


def _output(output: dict) -> dict | None:
    data = output.get("data")
    if isinstance(data, dict):
        output["data"] = {k: v for k, v in data.items() if k in SAFE_MIME}
        if not output["data"]:
            return None
    metadata = output.get("metadata")
    kept: dict = {}
    if isinstance(metadata, dict):
        for mime in SAFE_MIME[1:]:
            sizes = metadata.get(mime)
            if isinstance(sizes, dict):
                plain = {k: _size(sizes.get(k)) for k in ("width", "height")}
                plain = {k: v for k, v in plain.items() if v is not None}
                if plain:
                    kept[mime] = plain
    if "metadata" in output or kept:
        output["metadata"] = kept
    return output


class InertPage(Preprocessor):
    """Make a notebook safe to render as a page (see the module's docstring)."""

    enabled = True

    def preprocess(self, nb, resources):
        for index, cell in enumerate(nb.cells):
            self.inert_cell(cell, index)
        return nb, resources

    def inert_cell(self, cell, index: int) -> None:
        cell.pop("attachments", None)
        meta = cell.get("metadata")
        nbgrader = meta.get("nbgrader") if isinstance(meta, dict) else None
        if isinstance(nbgrader, dict) and "grade_id" in nbgrader:
            gid = nbgrader.get("grade_id")
            if not (isinstance(gid, str) and PLAIN_ID.fullmatch(gid)):
                nbgrader["grade_id"] = f"cell-{index}"
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if cell.get("cell_type") == "markdown":
            cell["source"] = inert_html(source)
        elif cell.get("cell_type") == "raw":
            cell["source"] = html.escape(source)
        elif cell.get("cell_type") == "code":
            outputs = [_output(o) for o in cell.get("outputs", []) if isinstance(o, dict)]
            cell["outputs"] = [o for o in outputs if o is not None]

    def preprocess_cell(self, cell, resources, index):  # preprocess() does the work
        return cell, resources
