"""The built book, in a real browser (headless Chromium): pages load cleanly, math is typeset,
images are present, internal links resolve, search works. Screenshots land in
build_artifacts/screenshots/ for a human to look at.

Uses the book built by `make test` (build_artifacts/book-smoke) or `make` (book/_build); builds it
if neither exists. Needs Debian's chromium and chromium-driver (`.ci/run` installs them); without
them the tests skip, unless REQUIRE_BROWSER=1 (set by `.ci/run`) turns that into a failure.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

REPO = Path(__file__).resolve().parent.parent
SCREENSHOTS = REPO / "build_artifacts" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.xdist_group("browser")


def _built_html() -> Path | None:
    candidates = [
        REPO / "build_artifacts" / "book-smoke" / "_build" / "html",
        REPO / "book" / "_build" / "html",
    ]
    built = [c for c in candidates if (c / "index.html").exists()]
    return max(built, key=lambda c: (c / "index.html").stat().st_mtime) if built else None


@pytest.fixture(scope="module")
def html_dir(tmp_path_factory) -> Path:
    built = _built_html()
    if built is not None:
        return built
    out = tmp_path_factory.mktemp("book")
    jb = Path(sys.executable).parent / "jupyter-book"
    subprocess.run(
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
        timeout=1800,
    )
    return out / "_build" / "html"


def _pages(html_dir: Path) -> list[Path]:
    skip = {"genindex.html", "search.html"}
    return sorted(
        p
        for p in html_dir.rglob("*.html")
        if p.name not in skip and "_static" not in p.parts and "_sources" not in p.parts
    )


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])
        if tag in ("img", "script") and attrs.get("src"):
            self.srcs.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.srcs.append(attrs["href"])


@functools.cache
def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def test_no_broken_internal_links(html_dir):
    broken = []
    for page in _pages(html_dir):
        parsed = _parse(page)
        for ref in parsed.hrefs + parsed.srcs:
            url = urlparse(ref)
            if url.scheme or ref.startswith(("//", "mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(html_dir)} -> {ref}")
            elif (
                url.fragment and target.suffix == ".html" and url.fragment not in _parse(target).ids
            ):
                broken.append(f"{page.relative_to(html_dir)} -> {ref} (no such anchor)")
    assert not broken, "broken internal links:\n" + "\n".join(broken)


@pytest.fixture(scope="module")
def server(html_dir):
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        message = "chromium / chromedriver not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-quic",
        "--no-first-run",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _wait(driver, script: str, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if driver.execute_script(script):
            return True
        time.sleep(0.1)
    return False


MATHJAX_IDLE = """
if (typeof MathJax === 'undefined' || !MathJax.startup || !MathJax.startup.promise)
  return document.querySelector('.math') === null;
if (!window.__mjQueued) {
  window.__mjQueued = true;
  MathJax.startup.promise.then(function () { window.__mjDone = true; });
}
return window.__mjDone === true;
"""


def test_every_page_loads_cleanly_with_math_and_images(html_dir, server, browser):
    problems = []
    pages = _pages(html_dir)
    assert pages, f"no pages in {html_dir}"
    for page in pages:
        rel = page.relative_to(html_dir).as_posix()
        browser.get(urljoin(server, rel))
        _wait(browser, "return document.readyState === 'complete'")
        if not _wait(browser, MATHJAX_IDLE, timeout=30):
            problems.append(f"{rel}: MathJax did not finish")
        n_math = browser.execute_script("return document.querySelectorAll('.math').length")
        n_typeset = browser.execute_script(
            "return document.querySelectorAll('mjx-container').length"
        )
        n_errors = browser.execute_script(
            "return document.querySelectorAll('mjx-merror, .MathJax_Error').length"
        )
        if n_math and not n_typeset:
            problems.append(f"{rel}: {n_math} math elements, none typeset")
        if n_errors:
            problems.append(f"{rel}: {n_errors} MathJax errors")
        missing_images = browser.execute_script(
            "return Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
            ".map(i => i.getAttribute('src'))"
        )
        if missing_images:
            problems.append(f"{rel}: images not loaded: {missing_images}")
        for entry in browser.get_log("browser"):
            if entry["level"] == "SEVERE":
                problems.append(f"{rel}: console error: {entry['message']}")
    assert not problems, "\n".join(problems)


def test_search_finds_attention(server, browser):
    browser.get(urljoin(server, "search.html?q=attention"))
    found = _wait(
        browser,
        "return document.querySelectorAll('#search-results li, ul.search li').length > 0",
        30,
    )
    assert found, "the search page returned no results for 'attention'"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_screenshots_of_front_page_and_chapters(html_dir, server, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pages = [p.relative_to(html_dir).as_posix() for p in _pages(html_dir)]
    chapters = [p for p in pages if re.match(r"(chapters/)?\d\d", Path(p).name)] or [
        p for p in pages if p not in ("index.html", "intro.html")
    ]
    # the preface (00_) has no figures; screenshot the first two chapters with content
    chapters = [p for p in chapters if not Path(p).name.startswith("00_")] or chapters
    wanted = ["intro.html"] + chapters[:2]
    for rel in wanted:
        browser.get(urljoin(server, rel))
        _wait(browser, MATHJAX_IDLE, timeout=30)
        out = SCREENSHOTS / (Path(rel).stem + ".png")
        assert browser.save_screenshot(str(out)), f"could not save {out}"
        assert out.stat().st_size > 10_000, f"{out} looks empty"


def _chapter_pages(html_dir: Path) -> list[Path]:
    return [p for p in _pages(html_dir) if re.match(r"\d\d_", p.name)]


def test_chapter_pages_have_launch_buttons_and_notebook_downloads(html_dir):
    chapters = _chapter_pages(html_dir)
    if not chapters:
        pytest.skip("no chapter pages built yet")
    problems = []
    for page in chapters:
        rel = page.relative_to(html_dir)
        hrefs = _parse(page).hrefs
        if not any("colab.research.google.com" in h for h in hrefs):
            problems.append(f"{rel}: no Colab launch button")
        if not any("mybinder.org" in h for h in hrefs):
            problems.append(f"{rel}: no Binder launch button")
        downloads = [h for h in hrefs if urlparse(h).path.endswith(".ipynb") and "_sources" in h]
        if not downloads:
            problems.append(f"{rel}: no .ipynb download")
        for href in downloads:
            target = (page.parent / unquote(urlparse(href).path)).resolve()
            if not target.exists() or '"cells"' not in target.read_text(encoding="utf-8"):
                problems.append(f"{rel}: the .ipynb download {href} is missing or not a notebook")
    assert not problems, "\n".join(problems)


def test_every_chapter_figure_was_rendered(html_dir):
    """Executed chapters carry their figures: each page with a training chapter has images."""
    chapters = [p for p in _chapter_pages(html_dir) if not p.name.startswith("00_")]
    if not chapters:
        pytest.skip("no chapter pages built yet")
    empty = [p.name for p in chapters if "<img" not in p.read_text(encoding="utf-8")]
    assert not empty, f"chapter pages without a single figure: {empty}"
