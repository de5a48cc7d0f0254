"""Author–year everywhere: the references list labels each paper as the text cites it.

The text cites author–year (``bibtex_reference_style: author_year``: "Vaswani et al. (2017)"),
but pybtex's default labels the list alphabetically ("[VSP+17]"), which a reader cannot match
to the citation. This registers a pybtex style, ``author_year`` (``bibtex_default_style``), whose
labels are the citation's own text ("Vaswani et al., 2017"; "2019a" and "2019b" where two
papers share both) and which sorts the list by author and year. The text's citations take their
year from that label (the referencing style ``author_year_labelled``, ``bibtex_reference_style``),
so a citation reads "Wang et al., 2019a" exactly as the list does, never an ambiguous "2019".
``citation()`` gives the same text for the notebooks behind the launch buttons
(``launch_notebooks.py``), which cannot run Sphinx's roles.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pybtex.backends.plaintext import Backend as PlainText
from pybtex.database import Entry, parse_file
from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.template import node
from sphinxcontrib.bibtex.plugin import register_plugin as register_bibtex_plugin
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle
from sphinxcontrib.bibtex.style.referencing.basic_author_year import (
    BasicAuthorYearParentheticalReferenceStyle,
    BasicAuthorYearTextualReferenceStyle,
)
from sphinxcontrib.bibtex.style.referencing.extra_author import ExtraAuthorReferenceStyle
from sphinxcontrib.bibtex.style.referencing.extra_empty import ExtraEmptyReferenceStyle
from sphinxcontrib.bibtex.style.referencing.extra_label import ExtraLabelReferenceStyle
from sphinxcontrib.bibtex.style.referencing.extra_year import ExtraYearReferenceStyle
from sphinxcontrib.bibtex.style.template import join, join2, post_text, pre_text, reference

_PLAIN = PlainText()  # render_as("text") looks the backend up among the entry points every time


def _last_name(person) -> str:
    return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render(_PLAIN)


def authors_and_year(entry: Entry) -> tuple[str, str]:
    """("Vaswani et al.", "2017"): one author, two joined by "and", three or more "et al."."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_name(p) for p in persons if str(p) != "others"]
    if not names:
        authors = entry.fields.get("title", entry.key)
    elif len(names) == 1 and len(persons) == 1:
        authors = names[0]
    elif len(names) == 2 and len(persons) == 2:
        authors = f"{names[0]} and {names[1]}"
    else:
        authors = f"{names[0]} et al."
    return authors, entry.fields.get("year", "n.d.")


def _years(entries: list[Entry]) -> dict[str, str]:
    """Each entry's year, with a letter where two share authors and year ("2019a", "2019b", in
    the order of their titles), so that every label is unique."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for entry in entries:
        groups.setdefault(authors_and_year(entry), []).append(entry)
    years = {}
    for (_authors, year), group in groups.items():
        group.sort(key=lambda e: e.fields.get("title", "").lower())
        for i, entry in enumerate(group):
            years[entry.key] = year + ("abcdefghijklmnopqrstuvwxyz"[i] if len(group) > 1 else "")
    return years


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        years = _years(entries)
        for entry in entries:
            yield f"{authors_and_year(entry)[0]}, {years[entry.key]}"


class AuthorYearStyle(UnsrtStyle):
    default_label_style = "author_year"
    default_sorting_style = "author_year_title"


@node
def label_year(children, data):
    """The year as the references list labels the entry ("2019a"), from its label."""
    assert not children
    return Text(data["formatted_entry"].label.rpartition(", ")[2])


class _Parenthetical(BasicAuthorYearParentheticalReferenceStyle):
    def inner(self, role_name):
        author = self.person.author_or_editor_or_title(full="s" in role_name)
        return join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
            pre_text, reference[join(sep=self.author_year_sep)[author, label_year]], post_text
        ]


class _Textual(BasicAuthorYearTextualReferenceStyle):
    def inner(self, role_name):
        author = self.person.author_or_editor_or_title(full="s" in role_name)
        citation = join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
            pre_text, reference[label_year], post_text
        ]
        return join(sep=self.text_reference_sep)[
            author, join[self.bracket.left, citation, self.bracket.right]
        ]


class LabelledAuthorYearReferenceStyle(AuthorYearReferenceStyle):
    """sphinxcontrib-bibtex's ``author_year``, with the year of the list's label."""

    def __post_init__(self):
        self.styles.extend(
            [
                _Parenthetical(
                    bracket=self.bracket_parenthetical,
                    person=self.person,
                    author_year_sep=self.author_year_sep,
                    pre_text_sep=self.pre_text_sep,
                    post_text_sep=self.post_text_sep,
                ),
                _Textual(
                    bracket=self.bracket_textual,
                    person=self.person,
                    text_reference_sep=self.text_reference_sep,
                    pre_text_sep=self.pre_text_sep,
                    post_text_sep=self.post_text_sep,
                ),
                ExtraAuthorReferenceStyle(bracket=self.bracket_author, person=self.person),
                ExtraLabelReferenceStyle(bracket=self.bracket_label),
                ExtraYearReferenceStyle(bracket=self.bracket_year),
                ExtraEmptyReferenceStyle(),
            ]
        )
        # GroupReferenceStyle's own set-up, without AuthorYearReferenceStyle's list
        super(AuthorYearReferenceStyle, self).__post_init__()


@functools.cache
def _entries(bibfile: Path) -> dict[str, Entry]:
    return {key.lower(): entry for key, entry in parse_file(str(bibfile)).entries.items()}


@functools.cache
def _bib_years(bibfile: Path) -> dict[str, str]:
    return _years(list(_entries(bibfile).values()))


def citation(keys: list[str], bibfile: Path, *, textual: bool) -> str:
    """What ``{cite:p}`` (``textual=False``) or ``{cite:t}`` shows for ``keys``:
    "(Bahdanau et al., 2015; Vaswani et al., 2017)" or "Vaswani et al. (2017)". An unknown key
    is shown as it is."""
    entries = _entries(Path(bibfile))
    years = _bib_years(Path(bibfile))
    parts = []
    for key in keys:
        entry = entries.get(key.lower())
        if entry is None:
            parts.append((key, ""))
        else:
            parts.append((authors_and_year(entry)[0], years[entry.key]))
    if textual:
        return ", ".join(f"{a} ({y})" if y else a for a, y in parts)
    return "(" + "; ".join(f"{a}, {y}" if y else a for a, y in parts) + ")"


def setup(app):
    register_plugin("pybtex.style.labels", "author_year", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    register_bibtex_plugin(
        "sphinxcontrib.bibtex.style.referencing",
        "author_year_labelled",
        LabelledAuthorYearReferenceStyle,
    )
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
