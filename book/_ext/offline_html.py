"""Make the HTML book self-contained and quiet in the browser console.

- MathJax 3 ships inside the ``sphinx-mathjax-offline`` package (pinned in pyproject.toml); its
  single-file SVG build (fonts included) is copied to ``_static/mathjax/`` so pages typeset math
  offline and need no CDN.
- sphinx-thebe 0.3 adds its configuration script twice on Sphinx 7, which the browser reports as a
  redeclared ``const``; duplicates of identical inline scripts are dropped here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import sphinx

# The distribution's folder name has a hyphen, so it is found on disk rather than imported.
MATHJAX = next(
    Path(p) / "sphinx-mathjax-offline" / "static" / "mathjax"
    for p in map(str, Path(sphinx.__file__).parents[1:2])
)
MATHJAX_PARTS = ["tex-svg.js"]


def _copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    if not MATHJAX.exists():
        raise FileNotFoundError(
            f"MathJax not found at {MATHJAX}: pip install sphinx-mathjax-offline"
        )
    target = Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        src, dst = MATHJAX / part, target / part
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def _drop_duplicate_inline_scripts(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for script in context.get("script_files", []):
        body = getattr(script, "attributes", {}).get("body")
        if body:
            if body in seen:
                continue
            seen.add(body)
        kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("build-finished", _copy_mathjax)
    app.connect("html-page-context", _drop_duplicate_inline_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
