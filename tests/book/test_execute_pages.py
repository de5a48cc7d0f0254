"""book/scripts/execute_pages.py: pages run in parallel land where the book build finds them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from time_limits import scaled

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "execute_pages", REPO / "book" / "scripts" / "execute_pages.py"
)
execute_pages = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(execute_pages)

PAGE = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
  language: python
---

# A page

```{code-cell} ipython3
print(6 * 7)
```
"""


def test_every_notebook_page_of_the_toc_is_executed():
    pages = execute_pages.toc_pages()
    names = {p.relative_to(REPO / "book").as_posix() for p in pages}
    toc = (REPO / "book" / "_toc.yml").read_text(encoding="utf-8")
    assert "chapters/02_attention_layer.md" in names
    assert len(pages) >= 40, "every section page with code is executed ahead of the build"
    for name in names:
        assert name.removesuffix(".md") in toc


@pytest.mark.slow
def test_executed_page_is_found_under_the_key_the_build_computes(tmp_path):
    from jupyter_cache import get_cache
    from myst_nb.core.read import read_myst_markdown_notebook

    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    assert execute_pages.execute([page], tmp_path / "cache", jobs=1, timeout=scaled(60)) == []
    cache = get_cache(tmp_path / "cache")
    # myst-nb's build reads the page with the same reader and looks it up by its code cells.
    nb = read_myst_markdown_notebook(page.read_text(encoding="utf-8"), path=str(page))
    pk, merged = cache.merge_match_into_notebook(nb)
    assert merged.cells[-1].outputs[0]["text"] == "42\n"
    # a second run executes nothing
    assert execute_pages.execute([page], tmp_path / "cache", jobs=1) == []
