"""One execution cache for every build of the book, wherever its output goes.

``execute.cache`` in ``_config.yml`` is a path relative to the book's folder
(``_build/.jupyter_cache``, where ``make book`` keeps it). myst-nb would resolve a relative path
against the current directory; this extension resolves it against the book instead, so that
every build (``make book`` and ``make test`` into ``book/_build``, a build with ``--path-output``
elsewhere, the benchmark's) reads and fills the same cache: nothing is executed twice. The
environment variable ``BOOK_EXECUTION_CACHE`` overrides the path (``benchmarks/book_build.py``
measures a cold build with an empty cache that way).
"""

from __future__ import annotations

import os
from pathlib import Path


def _resolve(app, config) -> None:
    override = os.environ.get("BOOK_EXECUTION_CACHE")
    path = override or getattr(config, "nb_execution_cache_path", "")
    if path and not Path(path).is_absolute():
        path = str((Path(app.srcdir) / path).resolve())
    if path:
        config.nb_execution_cache_path = path


def setup(app):
    app.connect("config-inited", _resolve, priority=400)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
