"""Tests of the book: its sources' structure, the diagrams, page execution and (with Chromium) the
built pages in a browser. The browser tests load the pages `make book` (or `make test`) built."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import time_limits

REPO = Path(__file__).resolve().parents[2]


def _built_html() -> Path | None:
    if os.environ.get("BOOK_HTML"):  # a given build, e.g. BOOK_HTML=/tmp/out/_build/html
        return Path(os.environ["BOOK_HTML"])
    built = REPO / "book" / "_build" / "html"
    return built if (built / "index.html").exists() else None


@pytest.fixture(scope="module")
def html_dir(tmp_path_factory) -> Path:
    built = _built_html()
    if built is not None:
        return built
    out = tmp_path_factory.mktemp("book")
    jb = Path(sys.executable).parent / "jupyter-book"
    time_limits.run(
        [
            str(jb),
            "build",
            str(REPO / "book"),
            "--path-output",
            str(out),
            "--warningiserror",
            "--keep-going",
        ],
        check=True,
        capture_output=False,
        cpu=3600,
    )
    return out / "_build" / "html"
