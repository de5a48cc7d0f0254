"""The built book, in a real browser (headless Chromium): pages load cleanly, math is typeset,
images are present, internal links resolve, search works; nothing scrolls sideways at 1400 px or
at 400 px; every figure has a number, a caption and alt text; every launch button opens a
notebook that exists in the build and installs course_lib first; no page is longer than 12
screens at 1400 px; the landing page's first load stays under 3 MB. One browser session visits
every page once (both widths on the same load), saves a screenshot of each page at each width in
build_artifacts/screenshots/{1400,400}/ and a table of page lengths and problems in
build_artifacts/screenshots/pages.tsv (also printed: `pytest -s` or `-rA`).

Uses the book built by `make test` (build_artifacts/book-smoke) or `make` (book/_build); builds it
if neither exists. Needs Debian's chromium and chromium-driver (`.ci/run` installs them); without
them the tests skip, unless REQUIRE_BROWSER=1 (set by `.ci/run`) turns that into a failure.
"""

from __future__ import annotations

import functools
import http.server
import json
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

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "build_artifacts" / "screenshots"
#: The desktop and the phone width (CSS px), the screen height, and the longest page allowed.
DESKTOP, PHONE, SCREEN_HEIGHT, MAX_SCREENS = 1400, 400, 900, 12
FIRST_LOAD_LIMIT = 3_000_000  # bytes: HTML + CSS + JS + fonts + images of the landing page
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.xdist_group("browser")


def _built_html() -> Path | None:
    if os.environ.get("BOOK_HTML"):  # a given build, e.g. BOOK_HTML=/tmp/out/_build/html
        return Path(os.environ["BOOK_HTML"])
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
        "--hide-scrollbars",
        f"--window-size={DESKTOP},{SCREEN_HEIGHT}",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    _desktop(driver)
    yield driver
    driver.quit()


def _desktop(driver) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": DESKTOP, "height": SCREEN_HEIGHT, "deviceScaleFactor": 1, "mobile": False},
    )


def _phone(driver) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": PHONE, "height": SCREEN_HEIGHT, "deviceScaleFactor": 1, "mobile": True},
    )


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
#: fit-math.js (book/_static) has scaled the display equations to the current width.
MATH_FITTED = """
return window.bookMathFitted === true || document.querySelector('mjx-container') === null
  || !Array.from(document.scripts).some(s => /fit-math/.test(s.src));
"""

#: Elements wider than their box at the current width: [what, scrollWidth, clientWidth, text].
OVERFLOW = """
const found = [];
const doc = document.documentElement;
if (doc.scrollWidth > doc.clientWidth + 1)
  found.push(['document', doc.scrollWidth, doc.clientWidth, '']);
const selector = 'pre, div.highlight, .cell_output, div.math, mjx-container[display="true"]';
document.querySelectorAll(selector).forEach(el => {
  if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) {
    const what = el.tagName.toLowerCase() + (el.classList.length ? '.' + el.classList[0] : '');
    const text = (el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 50);
    found.push([what, el.scrollWidth, el.clientWidth, text]);
  }
});
return found;
"""

#: Every figure of the article: number, caption, alt texts; and images outside any figure.
FIGURES = """
const article = document.querySelector('article') || document.querySelector('main')
  || document.body;
const figures = Array.from(article.querySelectorAll('figure')).map(f => {
  const number = f.querySelector('.caption-number');
  const caption = f.querySelector('figcaption');
  let text = caption ? caption.textContent : '';
  if (number) text = text.replace(number.textContent, '');
  return {
    id: f.id || (f.querySelector('[id]') || {}).id || '',
    number: number ? number.textContent.trim() : '',
    caption: text.trim().slice(0, 80),
    images: Array.from(f.querySelectorAll('img')).map(i => [i.getAttribute('src') || '',
                                                          i.getAttribute('alt') || '']),
  };
});
const loose = Array.from(article.querySelectorAll('img'))
  .filter(i => !i.closest('figure')).map(i => i.getAttribute('src') || '');
return {figures: figures, loose: loose};
"""

PAGE_HEIGHT = "return [document.documentElement.scrollHeight, window.innerHeight];"


def _alt_is_a_path(alt: str, src: str) -> bool:
    alt = alt.strip()
    return (
        not alt
        or alt == src
        or alt == Path(src).name
        or bool(re.search(r"\.(png|svg|jpe?g|gif|webp)$", alt, re.I))
        or ("/" in alt and " " not in alt)
    )


def _shot_name(rel: str) -> str:
    return rel.removesuffix(".html").replace("/", "__") + ".png"


@pytest.fixture(scope="module")
def survey(html_dir, server, browser):
    """Visit every page once: measurements at 1400 px, then at 400 px, and screenshots at both.

    Returns {page: {...}} and writes build_artifacts/screenshots/pages.tsv.
    """
    pages = _pages(html_dir)
    assert pages, f"no pages in {html_dir}"
    for width in (DESKTOP, PHONE):
        (SCREENSHOTS / str(width)).mkdir(parents=True, exist_ok=True)
    results = {}
    for page in pages:
        rel = page.relative_to(html_dir).as_posix()
        info = results[rel] = {"problems": []}
        _desktop(browser)
        browser.get(urljoin(server, rel))
        _wait(browser, "return document.readyState === 'complete'")
        if not _wait(browser, MATHJAX_IDLE, timeout=30):
            info["problems"].append("MathJax did not finish")
        _wait(browser, MATH_FITTED, timeout=5)
        counts = browser.execute_script(
            "return [document.querySelectorAll('.math').length,"
            " document.querySelectorAll('mjx-container').length,"
            " document.querySelectorAll('mjx-merror, .MathJax_Error').length,"
            " Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
            "   .map(i => i.getAttribute('src'))]"
        )
        n_math, n_typeset, n_errors, missing_images = counts
        if n_math and not n_typeset:
            info["problems"].append(f"{n_math} math elements, none typeset")
        if n_errors:
            info["problems"].append(f"{n_errors} MathJax errors")
        if missing_images:
            info["problems"].append(f"images not loaded: {missing_images}")
        for entry in browser.get_log("browser"):
            if entry["level"] == "SEVERE":
                info["problems"].append(f"console error: {entry['message']}")
        info["overflow_1400"] = browser.execute_script(OVERFLOW)
        info["figures"] = browser.execute_script(FIGURES)
        height, screen = browser.execute_script(PAGE_HEIGHT)
        info["screens_1400"] = height / screen
        browser.save_screenshot(str(SCREENSHOTS / str(DESKTOP) / _shot_name(rel)))
        _phone(browser)
        browser.execute_script("window.bookMathFitted = false; window.scrollTo(0, 0);")
        time.sleep(0.15)
        _wait(browser, MATH_FITTED, timeout=5)
        info["overflow_400"] = browser.execute_script(OVERFLOW)
        height, screen = browser.execute_script(PAGE_HEIGHT)
        info["screens_400"] = height / screen
        browser.save_screenshot(str(SCREENSHOTS / str(PHONE) / _shot_name(rel)))
    _desktop(browser)
    lines = ["page\tscreens@1400\tscreens@400\toverflow@1400\toverflow@400\tfigures"]
    for rel, info in results.items():
        lines.append(
            f"{rel}\t{info['screens_1400']:.1f}\t{info['screens_400']:.1f}\t"
            f"{len(info['overflow_1400'])}\t{len(info['overflow_400'])}\t"
            f"{len(info['figures']['figures'])}"
        )
    (SCREENSHOTS / "pages.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n" + "\n".join(line.replace("\t", "  ") for line in lines))
    return results


def test_every_page_loads_cleanly_with_math_and_images(survey):
    problems = [f"{rel}: {p}" for rel, info in survey.items() for p in info["problems"]]
    assert not problems, "\n".join(problems)


def _overflow_report(survey, key: str) -> list[str]:
    report = []
    for rel, info in survey.items():
        for what, scroll, client, text in info[key][:6]:
            report.append(f"{rel}: {what} is {scroll} px wide in a {client} px box: {text!r}")
    return report


def test_nothing_scrolls_sideways_at_1400_px(survey):
    report = _overflow_report(survey, "overflow_1400")
    assert not report, "horizontal overflow at 1400 px:\n" + "\n".join(report)


def test_nothing_scrolls_sideways_at_400_px(survey):
    report = _overflow_report(survey, "overflow_400")
    assert not report, "horizontal overflow at 400 px:\n" + "\n".join(report)


def test_every_figure_has_a_number_a_caption_and_alt_text(survey):
    problems = []
    for rel, info in survey.items():
        for figure in info["figures"]["figures"]:
            name = figure["id"] or "a figure"
            if not re.fullmatch(r"Figure \d+(\.\d+)*\.?", figure["number"]):
                problems.append(f"{rel}: {name} has no number ({figure['number']!r})")
            if not figure["caption"]:
                problems.append(f"{rel}: {name} has no caption")
            for src, alt in figure["images"]:
                if _alt_is_a_path(alt, src):
                    problems.append(f"{rel}: {name}: alt text {alt!r} is missing or a file name")
        for src in info["figures"]["loose"]:
            problems.append(f"{rel}: image {src} is not in a numbered figure")
    assert not problems, "\n".join(problems)


def test_pages_are_at_most_12_screens_at_1400_px(survey):
    long = {rel: info["screens_1400"] for rel, info in survey.items()}
    long = {rel: n for rel, n in long.items() if n > MAX_SCREENS}
    assert not long, f"pages longer than {MAX_SCREENS} screens of {DESKTOP}x{SCREEN_HEIGHT}:\n" + (
        "\n".join(f"{rel}: {n:.1f} screens" for rel, n in sorted(long.items()))
    )


def test_screenshots_of_every_page_at_both_widths(survey):
    missing = []
    for rel in survey:
        for width in (DESKTOP, PHONE):
            out = SCREENSHOTS / str(width) / _shot_name(rel)
            if not out.exists() or out.stat().st_size < 5_000:
                missing.append(str(out))
    assert not missing, f"screenshots missing or empty: {missing}"


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


def test_first_load_of_the_landing_page_is_under_3_mb(html_dir, server, browser):
    maps = sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.map"))
    assert not maps, f"source maps shipped: {maps}"
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.clearBrowserCache", {})
    landing = "index.html"  # Jupyter Book's index.html only redirects to the root page
    refresh = re.search(r'http-equiv="Refresh"[^>]*url=([^"]+)"', (html_dir / landing).read_text())
    landing = refresh.group(1) if refresh else landing
    browser.get(urljoin(server, landing))
    _wait(browser, "return document.readyState === 'complete'")
    _wait(browser, MATHJAX_IDLE, timeout=30)
    total, resources = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        document.fonts.ready.then(() => setTimeout(() => {
          const nav = performance.getEntriesByType('navigation')[0];
          const res = performance.getEntriesByType('resource');
          done([(nav ? nav.decodedBodySize : 0)
                + res.reduce((s, r) => s + (r.decodedBodySize || 0), 0),
                res.map(r => [r.name, r.decodedBodySize]).sort((a, b) => b[1] - a[1])]);
        }, 300));
        """
    )
    biggest = "\n".join(f"{size:>10,} {name}" for name, size in resources[:8])
    assert total <= FIRST_LOAD_LIMIT, f"first load of {landing}: {total:,} bytes\n{biggest}"


# --- launch buttons and notebooks (parsed HTML, no browser) -----------------------------------

LAUNCH = re.compile(r"https://(colab\.research\.google\.com|mybinder\.org)/")


def _launch_target(html_dir: Path, href: str) -> Path | None:
    """The file in the build that a Colab or Binder link opens (the site's branch is the build)."""
    url = urlparse(href)
    if url.netloc == "colab.research.google.com":
        match = re.match(r"/github/[^/]+/[^/]+/blob/[^/]+/(.+)$", url.path)
        return html_dir / unquote(match.group(1)) if match else None
    if url.netloc == "mybinder.org":
        match = re.search(r"(?:^|&)(?:labpath|filepath)=([^&]+)", url.query)
        if match:
            return html_dir / unquote(match.group(1))
        match = re.search(r"(?:^|&)urlpath=(?:lab/)?tree/([^&]+)", url.query)
        return html_dir / unquote(match.group(1)) if match else None
    return None


def _is_notebook_page(page: Path) -> bool:
    return 'class="cell docutils container"' in page.read_text(encoding="utf-8")


def test_launch_buttons_open_notebooks_that_install_course_lib(html_dir):
    problems, checked = [], 0
    for page in _pages(html_dir):
        rel = page.relative_to(html_dir).as_posix()
        links = [h for h in _parse(page).hrefs if LAUNCH.match(h)]
        if _is_notebook_page(page):
            for name in ("colab.research.google.com", "mybinder.org"):
                if not any(name in h for h in links):
                    problems.append(f"{rel}: no {name} launch button")
        for href in links:
            target = _launch_target(html_dir, href)
            if target is None or target.suffix != ".ipynb" or not target.exists():
                problems.append(f"{rel}: {href} does not open an .ipynb of the build")
                continue
            notebook = json.loads(target.read_text(encoding="utf-8"))
            first = notebook["cells"][0]
            source = "".join(first["source"])
            if first["cell_type"] != "code" or not re.search(
                r"find_spec\(\"course_lib\"\)[\s\S]*pip\", \"install", source
            ):
                problems.append(
                    f"{rel}: the first cell of {target.name} does not install course_lib"
                )
            package = re.search(r"^PACKAGE = (\".*\")$", source, flags=re.M)
            spec = json.loads(package.group(1)) if package else ""
            if "/_notebooks/" in spec:  # the student wheel, shipped with the site
                wheel = html_dir / "_notebooks" / spec.rsplit("/", 1)[-1]
                if not wheel.is_file():
                    problems.append(f"{rel}: {target.name} installs {spec}, not in the build")
            checked += 1
    assert checked, "no launch buttons found"
    assert not problems, "\n".join(problems)


def test_student_launch_notebooks_install_the_student_wheel_from_the_site(html_dir):
    """In the student edition (pages show "You implement this in ..." boxes), the notebooks
    behind the launch buttons install the student wheel shipped in ``_notebooks/`` (graded
    bodies stubbed), never the instructor's repository, and that wheel holds no answer."""
    from autograder.course import embargo

    if not any("You implement this in" in p.read_text(encoding="utf-8") for p in _pages(html_dir)):
        pytest.skip("the instructor edition (no embargoed object): it installs from the repository")
    wheels = sorted((html_dir / "_notebooks").glob("course_lib-*+student-py3-none-any.whl"))
    assert len(wheels) == 1, f"expected one student wheel in _notebooks/, found {wheels}"
    assert embargo.scan(embargo.plan(REPO), wheels) == []
    for notebook in sorted((html_dir / "_notebooks").rglob("*.ipynb")):
        first = "".join(json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]["source"])
        assert f"/_notebooks/{wheels[0].name}" in first and "git+" not in first, notebook
    requirements = (html_dir / "binder" / "requirements.txt").read_text(encoding="utf-8")
    assert f"/_notebooks/{wheels[0].name}" in requirements and "git+" not in requirements


def test_site_has_binder_requirements_and_nojekyll(html_dir):
    requirements = html_dir / "binder" / "requirements.txt"
    assert requirements.exists() and "course_lib" in requirements.read_text()
    assert (html_dir / ".nojekyll").exists(), "GitHub Pages would hide the _folders"


def _chapter_pages(html_dir: Path) -> list[Path]:
    return [p for p in _pages(html_dir) if re.match(r"\d\d_", p.name)]


def test_notebook_pages_have_notebook_downloads(html_dir):
    problems = []
    for page in _chapter_pages(html_dir):
        if not _is_notebook_page(page):
            continue
        rel = page.relative_to(html_dir)
        hrefs = _parse(page).hrefs
        downloads = [h for h in hrefs if urlparse(h).path.endswith(".ipynb") and "_sources" in h]
        if not downloads:
            problems.append(f"{rel}: no .ipynb download")
        for href in downloads:
            target = (page.parent / unquote(urlparse(href).path)).resolve()
            if not target.exists() or '"cells"' not in target.read_text(encoding="utf-8"):
                problems.append(f"{rel}: the .ipynb download {href} is missing or not a notebook")
    assert not problems, "\n".join(problems)


def test_every_chapter_has_rendered_figures(html_dir):
    """Executed chapters carry their figures: each chapter (landing and section pages) has some."""
    chapters = [p for p in _chapter_pages(html_dir) if p.parent.name == "chapters"]
    if not chapters:
        pytest.skip("no chapter pages built yet")
    empty = []
    for chapter in chapters:
        if chapter.name.startswith(("00_", "06_")):
            continue
        pages = [chapter, *sorted(chapter.with_suffix("").glob("*.html"))]
        if not any("<img" in p.read_text(encoding="utf-8") for p in pages):
            empty.append(chapter.name)
    assert not empty, f"chapters without a single figure: {empty}"
