"""The appendix is numbered A, A.1, A.2 … (its figures A.1, A.2 …), not as a sixth chapter.

Jupyter Book numbers the parts of the table of contents continuously (sphinx-multitoc-numbering),
so the "Appendix" part's first entry became chapter 6. After Sphinx has assigned the numbers
(``env-get-updated``), this replaces the leading number of every document under each entry of a
part whose caption is ``appendix_captions`` (default "Appendix") with a letter: section numbers,
figure and table numbers, and the numbers the navigation shows. Sphinx joins numbers with
``'.'.join(map(str, ...))``, so a letter in the tuple prints as "A.1".
"""

from __future__ import annotations

import string

from docutils import nodes
from sphinx import addnodes


def _appendix_docs(env, captions: list[str]) -> list[list[str]]:
    """For each entry of an appendix part, in order: the entry's document and all below it."""
    found = []
    root = env.config.root_doc
    if root not in env.tocs:
        return found
    doctree = env.get_doctree(root)
    for toctree in doctree.findall(addnodes.toctree):
        if toctree.get("caption") not in captions:
            continue
        for _title, ref in toctree["entries"]:
            docs = [ref]
            for child in env.toctree_includes.get(ref, []):
                docs.append(child)
                docs.extend(env.toctree_includes.get(child, []))
            found.append(docs)
    return found


def _relabel(number, letter: str):
    if not number or not isinstance(number[0], int):
        return number
    return type(number)([letter, *number[1:]])


def letter_the_appendix(app, env) -> list[str]:
    changed = []
    groups = _appendix_docs(env, app.config.appendix_captions)
    for letter, docs in zip(string.ascii_uppercase, groups):
        for doc in docs:
            secnums = env.toc_secnumbers.get(doc)
            if secnums:
                for anchor, number in secnums.items():
                    secnums[anchor] = _relabel(number, letter)
            for figtype in env.toc_fignumbers.get(doc, {}).values():
                for figure_id, number in figtype.items():
                    figtype[figure_id] = _relabel(number, letter)
            toc = env.tocs.get(doc)
            if toc is not None:
                for reference in toc.findall(nodes.reference):
                    if reference.get("secnumber"):
                        reference["secnumber"] = _relabel(reference["secnumber"], letter)
            title = env.titles.get(doc)
            if title is not None and title.get("secnumber"):
                title["secnumber"] = _relabel(title["secnumber"], letter)
            changed.append(doc)
    return changed


def setup(app):
    app.add_config_value("appendix_captions", ["Appendix"], "env")
    # after Sphinx's TocTreeCollector (priority 500) has assigned the numbers
    app.connect("env-get-updated", letter_the_appendix, priority=900)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
