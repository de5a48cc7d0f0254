"""Make the HTML book self-contained and quiet in the browser console.

- MathJax 3 ships inside the ``sphinx-mathjax-offline`` package (pinned in pyproject.toml); its
  CommonHTML build (1.2 MB, with the web fonts it loads on demand) is copied to
  ``_static/mathjax/`` so pages typeset math offline and need no CDN. The SVG build would be
  2.1 MB on every page with math.
- sphinx-thebe 0.3 adds its configuration script twice on Sphinx 7, which the browser reports as a
  redeclared ``const``; duplicates of identical inline scripts are dropped here.
- Nothing unused ships (issue 17: the first load of a page stays under 3 MB): source maps
  (``*.map``, 3.3 MB, only a developer's browser tools read them) and the ``sourceMappingURL``
  comments that point to them; Font Awesome's 1.5 MB ``fontawesome.js``, which only redraws the
  icons that the theme's CSS already draws with the Font Awesome web fonts; and the TrueType
  copies of those fonts (every browser that runs the theme loads the WOFF2 ones).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import sphinx

# The distribution's folder name has a hyphen, so it is found on disk rather than imported.
MATHJAX = next(
    Path(p) / "sphinx-mathjax-offline" / "static" / "mathjax"
    for p in map(str, Path(sphinx.__file__).parents[1:2])
)
MATHJAX_PARTS = ["tex-chtml.js", "output/chtml/fonts/woff-v2"]
FONTAWESOME_JS = re.compile(
    r'\s*<script[^>]*src="[^"]*_static/scripts/fontawesome\.js[^"]*"[^>]*>\s*</script>'
)
SOURCE_MAP = re.compile(r"\n?(//# sourceMappingURL=\S+|/\*# sourceMappingURL=\S+?\s*\*/)\s*$")
TTF_FALLBACK = re.compile(r',\s*url\([^)]*\.ttf\)\s*format\("truetype"\)')


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


def _drop_unused_assets(app, exception):
    """Delete source maps, fontawesome.js and TrueType fonts, and every reference to them."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    static = out / "_static"
    for path in static.rglob("*.map"):
        path.unlink()
    for path in [*static.rglob("*.js"), *static.rglob("*.css")]:
        if "mathjax" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        new = TTF_FALLBACK.sub("", SOURCE_MAP.sub("", text)) if path.suffix == ".css" else text
        if path.suffix == ".js":
            new = SOURCE_MAP.sub("", text)
        if new != text:
            path.write_text(new, encoding="utf-8", errors="surrogateescape")
    for path in out.rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        new = FONTAWESOME_JS.sub("", text)
        if new != text:
            path.write_text(new, encoding="utf-8")
    for path in [
        static / "scripts" / "fontawesome.js",
        *(static / "vendor" / "fontawesome").rglob("*.ttf"),
    ]:
        path.unlink(missing_ok=True)


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
    app.connect("build-finished", _drop_unused_assets)
    app.connect("html-page-context", _drop_duplicate_inline_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
