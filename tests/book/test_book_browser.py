"""The built book, in a real browser (headless Chromium): pages load cleanly, math is typeset,
images are present, internal links resolve, search works; nothing scrolls sideways at 1400 px,
and at 400 px only code, outputs, wide equations, tables and figures do, each in its own box
(code keeps its indentation, equations are not shrunk below 85 %); the menu and "Contents"
buttons open at both widths; tick labels are at least 9 px at 1400 px; inline math is not a Tab
stop; buttons have names and a focus ring; printing shows folded code; sections are numbered from
N.1; no output shows an object's memory address; every figure has a number, a caption and alt
text; every launch button opens a notebook that exists in the build, installs course_lib first
and cites author-year; no page is longer than 12 screens at 1400 px; the landing page's first
load stays under 3 MB. One browser session visits every page once (both widths on the same
load), saves a screenshot of each page at each width in build_artifacts/screenshots/{1400,400}/
and a table of page lengths and problems in build_artifacts/screenshots/pages.tsv (also printed:
`pytest -s` or `-rA`); five pages on a phone go to build_artifacts/screenshots/phone/.

Uses the book built by `make` or `make test` (book/_build; BOOK_HTML names another build); builds
it if there is none. Needs Debian's chromium and chromium-driver (`.ci/run` installs them); without
them the tests skip, unless REQUIRE_BROWSER=1 (set by `.ci/run`) turns that into a failure.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest
from time_limits import scaled

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "build_artifacts" / "screenshots"
#: The desktop and the phone width (CSS px), the screen height, and the longest page allowed.
DESKTOP, PHONE, SCREEN_HEIGHT, MAX_SCREENS = 1400, 400, 900, 12
FIRST_LOAD_LIMIT = 3_000_000  # bytes: HTML + CSS + JS + fonts + images of the landing page
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.xdist_group("browser")


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


def _open(driver, server: str, page: str) -> None:
    """Load ``page`` of the site and wait until it has loaded."""
    driver.get(urljoin(server, page))
    _wait(driver, "return document.readyState === 'complete'")


def _wait(driver, script: str, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + scaled(timeout)  # a busy machine renders slowly
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
#: With arguments[0] true (a phone), an element that scrolls in its own box (overflow-x auto or
#: scroll: code, a wide equation, a table's or a figure's container) is not counted.
OVERFLOW = """
const scrollBoxes = arguments[0] === true;
const found = [];
const doc = document.documentElement;
if (doc.scrollWidth > doc.clientWidth + 1)
  found.push(['document', doc.scrollWidth, doc.clientWidth, '']);
const selector = 'pre, div.highlight, .cell_output, div.math, mjx-container[display="true"], '
  + 'figure, .pst-scrollable-table-container, article table';
document.querySelectorAll(selector).forEach(el => {
  const scrolls = ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  if (scrollBoxes && scrolls) return;
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

#: Font size (px) of every display equation, in page order.
DISPLAY_MATH_SIZES = """
return Array.from(document.querySelectorAll('mjx-container[display="true"]')).map(el => {
  const box = el.getBoundingClientRect();
  const transform = el.offsetWidth ? box.width / el.offsetWidth : 1;  // a scale() counts too
  return [parseFloat(getComputedStyle(el).fontSize) * transform,
          (el.textContent || '').trim().slice(0, 50)];
});
"""

#: Code blocks that wrap (indentation and names broken) or are cut off instead of scrolling.
CODE_THAT_WRAPS = """
const found = [];
document.querySelectorAll('article pre').forEach(pre => {
  const style = getComputedStyle(pre);
  const text = (pre.textContent || '').trim().split('\\n')[0].slice(0, 50);
  if (!['pre', 'nowrap'].includes(style.whiteSpace))
    found.push(`white-space: ${style.whiteSpace}: ${text}`);
  else if (pre.scrollWidth > pre.clientWidth + 1 && !['auto', 'scroll'].includes(style.overflowX))
    found.push(`wider than its box and overflow-x: ${style.overflowX}: ${text}`);
});
return found;
"""

#: Table cells whose words may break anywhere (a scrolling table keeps its words whole).
CELLS_THAT_BREAK_WORDS = """
return Array.from(document.querySelectorAll('article td, article th')).filter(cell => {
  const style = getComputedStyle(cell);
  return style.overflowWrap === 'anywhere' || style.wordBreak === 'break-all';
}).map(cell => (cell.textContent || '').trim().slice(0, 40));
"""

#: Inline formulas that are Tab stops.
TABBABLE_INLINE_MATH = """
return Array.from(document.querySelectorAll('mjx-container:not([display="true"])'))
  .filter(el => el.tabIndex >= 0).map(el => (el.textContent || '').trim().slice(0, 30));
"""

#: Buttons (and the navigation's expand arrows) without an accessible name.
NAMELESS_BUTTONS = """
return Array.from(document.querySelectorAll('button, summary, [role="button"]')).filter(el =>
  !(el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') || el.title
    || (el.textContent || '').trim())
).map(el => el.outerHTML.slice(0, 100));
"""

#: For every SVG image of the page: [figure, smallest tick label, smallest text] in CSS px as
#: shown (the SVG's font size times the image's scale). A tick label's size is its text's, not
#: its exponent's (the 2 of 10² is smaller). Async: call with execute_async_script.
SVG_TEXT_SIZES = """
const done = arguments[arguments.length - 1];
function fontSize(el) {
  for (let node = el; node && node.getAttribute; node = node.parentNode) {
    const style = node.getAttribute('style') || '';
    const m = style.match(/font-size:\\s*([\\d.]+)px/) || style.match(/font:[^;]*?([\\d.]+)px/);
    if (m) return parseFloat(m[1]);
    if (node.getAttribute('font-size')) return parseFloat(node.getAttribute('font-size'));
  }
  return 0;
}
// each text's size is its largest part, or (every=true, for tick labels) its smallest: the
// exponent of a log axis's 10^3 is a tspan at 70 % of the label's size
function smallest(nodes, every = false) {
  let small = null;
  nodes.forEach(node => {
    const sizes = [node, ...node.querySelectorAll('tspan')].filter(t => t.textContent.trim())
      .map(fontSize).filter(size => size > 0);
    const size = every ? Math.min(...sizes) : Math.max(...sizes);
    if (sizes.length) small = Math.min(small === null ? Infinity : small, size);
  });
  return small;
}
const article = document.querySelector('article') || document.body;
const images = Array.from(article.querySelectorAll('img'))
  .filter(i => /\\.svg([?#]|$)/.test(i.getAttribute('src') || '') && i.clientWidth > 0);
Promise.all(images.map(img => fetch(img.src).then(r => r.text()).then(source => {
  const svg = new DOMParser().parseFromString(source, 'image/svg+xml').documentElement;
  const box = (svg.getAttribute('viewBox') || '').trim().split(/[\\s,]+/).map(Number);
  const width = box.length === 4 ? box[2] : parseFloat(svg.getAttribute('width'));
  const scale = img.getBoundingClientRect().width / width;
  const ticks = smallest(Array.from(svg.querySelectorAll('g[id^="xtick_"], g[id^="ytick_"]'))
    .map(tick => tick.querySelector('text')).filter(Boolean), true);
  const text = smallest(Array.from(svg.querySelectorAll('text')));
  const figure = img.closest('figure');
  const number = figure && figure.querySelector('.caption-number');
  return [number ? number.textContent.trim() : img.getAttribute('src'),
          ticks === null ? null : ticks * scale, text === null ? null : text * scale];
}))).then(done, error => done([[`could not read an SVG: ${error}`, 0, 0]]));
"""
#: Tick labels at 1400 px, and any text of a figure on a phone (wide figures scroll in their box).
MIN_TICK_PX, MIN_PHONE_FIGURE_TEXT_PX = 9.0, 7.0
#: A display equation on a phone is at least this fraction of its size at 1400 px.
MIN_MATH_SCALE = 0.85


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
        _open(browser, server, rel)
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
        info["overflow_1400"] = browser.execute_script(OVERFLOW, False)
        info["figures"] = browser.execute_script(FIGURES)
        info["math_1400"] = browser.execute_script(DISPLAY_MATH_SIZES)
        info["svg_text_1400"] = browser.execute_async_script(SVG_TEXT_SIZES)
        info["tabbable_math"] = browser.execute_script(TABBABLE_INLINE_MATH)
        info["nameless_buttons"] = browser.execute_script(NAMELESS_BUTTONS)
        height, screen = browser.execute_script(PAGE_HEIGHT)
        info["screens_1400"] = height / screen
        browser.save_screenshot(str(SCREENSHOTS / str(DESKTOP) / _shot_name(rel)))
        _phone(browser)
        browser.execute_script("window.bookMathFitted = false; window.scrollTo(0, 0);")
        time.sleep(0.15)
        _wait(browser, MATH_FITTED, timeout=5)
        info["overflow_400"] = browser.execute_script(OVERFLOW, True)
        info["math_400"] = browser.execute_script(DISPLAY_MATH_SIZES)
        info["code_400"] = browser.execute_script(CODE_THAT_WRAPS)
        info["cells_400"] = browser.execute_script(CELLS_THAT_BREAK_WORDS)
        info["svg_text_400"] = browser.execute_async_script(SVG_TEXT_SIZES)
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
            if not re.fullmatch(r"Figure (\d+|[A-Z])(\.\d+)*\.?", figure["number"]):
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


def test_code_keeps_its_indentation_on_a_phone(survey):
    """At 400 px code and outputs do not wrap (a wrapped line loses its indentation and splits
    names: ``sinusoidal_positional_encodi`` / ``ng``): they scroll in their own box."""
    problems = [f"{rel}: {p}" for rel, info in survey.items() for p in info["code_400"]]
    assert not problems, "\n".join(problems[:20])


def test_no_display_equation_is_shrunk_below_85_percent_on_a_phone(survey):
    """A display equation too wide for a phone scrolls in its box; it may shrink a little first,
    never below 85 % of its size at 1400 px (fit-math.js once took 2.10's equation to 57 %)."""
    problems = []
    for rel, info in survey.items():
        for (desktop, text), (phone, _) in zip(info["math_1400"], info["math_400"]):
            if desktop > 0 and phone / desktop < MIN_MATH_SCALE:
                problems.append(f"{rel}: {phone / desktop:.0%} of its size: {text!r}")
    assert not problems, "\n".join(problems)


def test_table_cells_keep_their_words_whole(survey):
    """A wide table scrolls in its box; its cells never break a word anywhere (``overflow-wrap:
    anywhere`` let a table squeeze its cells until words broke in the middle)."""
    problems = [f"{rel}: {cell!r}" for rel, info in survey.items() for cell in info["cells_400"]]
    assert not problems, "\n".join(problems[:20])


def test_tick_labels_are_at_least_9_px_at_1400_px(survey):
    """Every tick label of every plot is at least 9 CSS px where the page shows it at 1400 px:
    the SVG's font size times the image's scale (a 14-inch figure shrunk into the column once
    showed 6.8 px labels), every part of it (log axes' exponents were 6 px)."""
    problems = []
    for rel, info in survey.items():
        for figure, ticks, _ in info["svg_text_1400"]:
            if ticks is not None and ticks < MIN_TICK_PX:
                problems.append(f"{rel}: {figure}: tick labels {ticks:.1f} px")
    assert not problems, "\n".join(problems)


def test_figures_are_readable_on_a_phone(survey):
    """At 400 px no text of a figure is below 7 px: a wide figure (an architecture diagram, four
    heatmaps in a row) is shown larger and scrolls in its own box instead of shrinking."""
    problems = []
    for rel, info in survey.items():
        for figure, _, text in info["svg_text_400"]:
            if text is not None and text < MIN_PHONE_FIGURE_TEXT_PX:
                problems.append(f"{rel}: {figure}: text {text:.1f} px")
    assert not problems, "\n".join(problems)


def test_inline_math_is_not_in_the_tab_order(survey):
    """MathJax made every inline formula a Tab stop (36 on page 2.1 before its first link)."""
    problems = [
        f"{rel}: {len(info['tabbable_math'])} inline formulas, e.g. {info['tabbable_math'][0]!r}"
        for rel, info in survey.items()
        if info["tabbable_math"]
    ]
    assert not problems, "\n".join(problems)


def test_every_button_has_an_accessible_name(survey):
    """Copy buttons and the navigation's expand arrows had no name for a screen reader."""
    problems = [f"{rel}: {b}" for rel, info in survey.items() for b in info["nameless_buttons"]]
    assert not problems, "\n".join(problems[:20])


PHONE_SHOTS = [
    "chapters/02_attention_layer/09_multi_head.html",
    "chapters/02_attention_layer/05_positional_encodings.html",
    "chapters/03_transformer/02_blocks.html",
    "chapters/04_pretraining/04_tasks_benchmarks.html",
    "chapters/05_vision/05_swin_windows.html",
]


def test_phone_screenshots_of_five_pages(html_dir, server, browser):
    """Five pages with code, wide equations, tables and wide figures, at 400x800, for a person
    to look at: build_artifacts/screenshots/phone/ (the first screen, then the page's widest
    equation, code block, table and figure, each scrolled into view)."""
    out = SCREENSHOTS / "phone"
    out.mkdir(parents=True, exist_ok=True)
    taken = []
    try:
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": PHONE, "height": 800, "deviceScaleFactor": 1, "mobile": True},
        )
        for rel in PHONE_SHOTS:
            if not (html_dir / rel).exists():
                continue
            _open(browser, server, rel)
            _wait(browser, MATHJAX_IDLE, timeout=30)
            _wait(browser, MATH_FITTED, timeout=5)
            name = _shot_name(rel).removesuffix(".png")
            browser.save_screenshot(str(out / f"{name}.png"))
            taken.append(name)
            for what, selector in (
                ("math", 'mjx-container[display="true"]'),
                ("code", "article div.cell_input pre"),
                ("table", "article table"),
                ("figure", "article figure"),
            ):
                widest = browser.execute_script(
                    "const all = Array.from(document.querySelectorAll(arguments[0]));"
                    "all.sort((a, b) => b.scrollWidth - a.scrollWidth);"
                    "if (all[0]) all[0].scrollIntoView({block: 'center'}); return !!all[0];",
                    selector,
                )
                if widest:
                    time.sleep(0.2)
                    browser.save_screenshot(str(out / f"{name}--{what}.png"))
    finally:
        _desktop(browser)
    assert len(taken) == len(PHONE_SHOTS), f"pages missing: {set(PHONE_SHOTS) - set(taken)}"


MENUS = """
const modal = id => { const d = document.getElementById(id); return !!(d && d.open); };
const primary = document.getElementById('pst-primary-sidebar');
const secondary = document.getElementById('pst-secondary-sidebar');
const shown = el => !!el && getComputedStyle(el).visibility !== 'hidden'
  && el.getBoundingClientRect().right > 0 && el.getBoundingClientRect().width > 0;
return {primaryModal: modal('pst-primary-sidebar-modal'),
        secondaryModal: modal('pst-secondary-sidebar-modal'),
        primaryShown: shown(primary), secondaryShown: shown(secondary)};
"""


def _visible_button(browser, selector: str):
    buttons = [b for b in browser.find_elements("css selector", selector) if b.is_displayed()]
    return buttons[0] if buttons else None


def test_menu_and_contents_buttons_open_at_both_widths(server, browser):
    """The themes wire only the first, hidden, copy of each toggle (pydata-sphinx-theme 0.17.1
    with sphinx-book-theme 1.3.0): the buttons a reader sees did nothing. On a phone the menu
    and "Contents" buttons open their drawers; on a desktop the menu button hides the sidebar
    and shows it again, and the page's contents are shown beside the text."""
    page = urljoin(server, "chapters/02_attention_layer/01_dot_product.html")
    try:
        _phone(browser)
        for selector, opened in (
            (".primary-toggle", "primaryModal"),
            (".secondary-toggle", "secondaryModal"),
        ):
            browser.get(page)
            _wait(browser, "return document.readyState === 'complete'")
            button = _visible_button(browser, selector)
            assert button is not None, f"no visible {selector} at {PHONE} px"
            button.click()
            time.sleep(0.4)
            state = browser.execute_script(MENUS)
            assert state[opened], f"{selector} at {PHONE} px opened nothing: {state}"
        _desktop(browser)
        browser.get(page)
        _wait(browser, "return document.readyState === 'complete'")
        assert browser.execute_script(MENUS)["secondaryShown"], "no page contents at 1400 px"
        button = _visible_button(browser, ".primary-toggle")
        assert button is not None, f"no visible menu button at {DESKTOP} px"
        assert browser.execute_script(MENUS)["primaryShown"]
        button.click()
        time.sleep(0.6)  # the sidebar slides out
        assert not browser.execute_script(MENUS)["primaryShown"], "the menu button hid nothing"
        button.click()
        time.sleep(0.6)
        assert browser.execute_script(MENUS)["primaryShown"], "the menu button did not reopen"
    finally:
        _desktop(browser)


def test_header_buttons_show_a_focus_ring(server, browser):
    """Reached with Tab, every button of the page's header bar shows a focus ring (an outline
    or a box shadow); four of them showed none."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    _open(browser, server, "chapters/02_attention_layer/01_dot_product.html")
    ring = """
    const el = document.activeElement;
    if (!el || !el.closest('.bd-header-article')) return null;
    const s = getComputedStyle(el);
    const outline = s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0;
    return [el.className || el.tagName, outline || s.boxShadow !== 'none'];
    """
    seen, without = set(), []
    browser.execute_script("document.activeElement && document.activeElement.blur()")
    for _ in range(60):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        found = browser.execute_script(ring)
        if found and found[0] not in seen:
            seen.add(found[0])
            if not found[1]:
                without.append(found[0])
    assert seen, "Tab never reached the header's buttons"
    assert not without, f"no focus ring on: {without}"


def test_search_is_one_tab_stop_at_both_widths(server, browser):
    """Tabbing through the header and the menu reaches Search once, at 1400 px and on a phone
    (the theme's second search field, at the top of the sidebar, made it two)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    name = """
    const el = document.activeElement;
    if (!el || el === document.body) return '';
    return (el.getAttribute('aria-label') || el.getAttribute('title') || el.innerText || '')
      .trim().split('\\n')[0];
    """
    try:
        for width, set_width in ((DESKTOP, _desktop), (PHONE, _phone)):
            set_width(browser)
            _open(browser, server, "chapters/02_attention_layer/01_dot_product.html")
            browser.execute_script("document.activeElement && document.activeElement.blur()")
            names = []
            for _ in range(30):
                ActionChains(browser).send_keys(Keys.TAB).perform()
                names.append(browser.execute_script(name))
            searches = [n for n in names if n.lower().startswith("search")]
            assert len(searches) == 1, (
                f"at {width} px, Search is {len(searches)} Tab stops: {names}"
            )
    finally:
        _desktop(browser)


def test_printing_shows_folded_code_and_numbered_titles(server, browser):
    """Printed, a page shows its folded setup code and its title with the section number."""
    _open(browser, server, "chapters/02_attention_layer/01_dot_product.html")
    try:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
        hidden, title = browser.execute_script(
            """
            window.dispatchEvent(new Event('beforeprint'));  // what printing fires first
            // A folded cell prints when its <details> is open and nothing hides its input.
            const folded = Array.from(document.querySelectorAll('article details .cell_input'));
            const hidden = folded.filter(el => !el.closest('details').open
                                               || getComputedStyle(el).display === 'none'
                                               || getComputedStyle(el).visibility === 'hidden');
            const titles = Array.from(document.querySelectorAll('h1'))
              .filter(h => h.checkVisibility()).map(h => h.innerText.trim());
            return [hidden.length + ' of ' + folded.length, titles[0] || ''];
            """
        )
    finally:
        browser.execute_script("window.dispatchEvent(new Event('afterprint'))")
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    assert hidden.startswith("0 of ") and not hidden.endswith(" 0"), f"hidden folds: {hidden}"
    assert re.match(r"\d+\.\d+\. ", title), f"printed title without its number: {title!r}"


#: Pages whose library sources have lines longer than the column at 1400 px (``KVCache.update``).
WRAPPING_PAGES = (
    "chapters/04_pretraining/06_kv_cache.html",
    "chapters/02_attention_layer/09_multi_head.html",
)
WRAPPED_ROWS = r"""
// For each .book-line of the library's sources that wraps: the x of its first non-space
// character, the x where each of its visual rows starts, and the width of one character.
const out = [];
const range = document.createRange();
for (const line of document.querySelectorAll('article div.highlight pre .book-line')) {
  const lineHeight = parseFloat(getComputedStyle(line.closest('pre')).lineHeight) || 20;
  if (line.getBoundingClientRect().height < 1.5 * lineHeight) continue;
  const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
  let rows = [], top = null, ink = null, ch = null;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      range.setStart(node, i); range.setEnd(node, i + 1);
      const r = range.getClientRects()[0];
      if (!r || r.width === 0) continue;
      if (ch === null) ch = r.width;
      if (ink === null && node.data[i] !== ' ') ink = r.left;
      if (top === null || r.top > top + lineHeight / 2) { rows.push(r.left); top = r.top; }
    }
  }
  out.push([line.textContent.trim().slice(0, 60), ink, rows, ch]);
}
return out;
"""


def test_wrapped_source_lines_keep_their_indentation_at_1400_px(server, browser):
    """At 1400 px a library-source line longer than the column wraps; every row after its first
    starts at least four columns right of the line's first character, never at column 0 (33
    blocks wrapped back to column 0, which reads as a dedent in Python)."""
    _desktop(browser)
    wrapped, problems = 0, []
    for page in WRAPPING_PAGES:
        _open(browser, server, page)
        for text, ink, rows, ch in browser.execute_script(WRAPPED_ROWS):
            wrapped += 1
            for row in rows[1:]:
                if row < ink + 3.5 * ch:
                    problems.append(
                        f"{page}: {text!r} continues {(row - ink) / ch:+.1f} columns from its start"
                    )
    assert wrapped, f"no wrapped source line on {WRAPPING_PAGES}: pick pages that have one"
    assert not problems, "\n".join(problems)


SCROLL_CUES = r"""
// Every box of the article that scrolls sideways: is it marked, and does it show a shadow?
const out = [];
for (const el of document.querySelectorAll('article *')) {
  const style = getComputedStyle(el);
  if (!['auto', 'scroll'].includes(style.overflowX) || el.clientWidth === 0) continue;
  if (el.scrollWidth <= el.clientWidth + 1) continue;
  out.push([el.tagName + ' ' + (el.textContent || '').trim().slice(0, 40),
            el.classList.contains('book-scrolls'), style.boxShadow !== 'none']);
}
return out;
"""


def test_a_box_that_scrolls_sideways_on_a_phone_shows_it(server, browser):
    """On a phone a box that scrolls sideways (2.9's equation stopped at "Mul", Fig. A.1's
    legend was off-screen) has a shadow on the edge where content is hidden."""
    problems, boxes = [], 0
    try:
        _phone(browser)
        for page in (
            "chapters/02_attention_layer/09_multi_head.html",
            "chapters/06_appendix_gpu/02_timing_memory.html",
        ):
            _open(browser, server, page)
            _wait(browser, MATH_FITTED, timeout=5)
            time.sleep(0.3)  # book.js marks the boxes after layout
            for what, marked, shadow in browser.execute_script(SCROLL_CUES):
                boxes += 1
                if not (marked and shadow):
                    problems.append(
                        f"{page}: {what!r} scrolls without a cue ({marked=}, {shadow=})"
                    )
    finally:
        _desktop(browser)
    assert boxes >= 4, f"only {boxes} boxes scroll on a phone: the test checks nothing"
    assert not problems, "\n".join(problems)


def test_printed_pdf_holds_the_folded_code(server, browser):
    """Chromium's print to PDF of two pages with folded ("Show code cell source") cells: the
    text of every folded cell is in the PDF (it printed as an empty box while the theme's
    fade-in animation ran)."""
    import base64
    import io

    import pypdf

    def squeeze(text: str) -> str:
        return re.sub(r"\s+", "", text)

    checked, missing = 0, []
    for page in (
        "chapters/02_attention_layer/09_multi_head.html",
        "chapters/05_vision/05_swin_windows.html",
    ):
        _open(browser, server, page)
        _wait(browser, MATHJAX_IDLE, timeout=30)
        lines = browser.execute_script(
            "return Array.from(document.querySelectorAll('article details .cell_input'))"
            ".flatMap(e => e.textContent.split('\\n').filter(l => l.trim().length > 25)"
            ".slice(0, 3))"
        )
        pdf = browser.execute_cdp_cmd("Page.printToPDF", {"printBackground": False})
        reader = pypdf.PdfReader(io.BytesIO(base64.b64decode(pdf["data"])))
        text = squeeze("\n".join(p.extract_text() for p in reader.pages))
        for line in lines:
            checked += 1
            if squeeze(line) not in text:
                missing.append(f"{page}: {line.strip()!r}")
    assert checked >= 6, f"only {checked} folded lines found: the test checks nothing"
    assert not missing, "folded code missing from the printed PDF:\n" + "\n".join(missing)


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
    _open(browser, server, landing)
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
            if "/_notebooks/" in spec:  # the public wheel, shipped with the site
                wheel = html_dir / "_notebooks" / spec.rsplit("/", 1)[-1]
                if not wheel.is_file():
                    problems.append(f"{rel}: {target.name} installs {spec}, not in the build")
            checked += 1
    assert checked, "no launch buttons found"
    assert not problems, "\n".join(problems)


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


ADDRESS_REPR = re.compile(r"&lt;[\w.]+(?: object)? at 0x[0-9a-f]+&gt;")


def test_no_output_shows_an_object_at_a_memory_address(html_dir):
    """A cell whose last line returns an object nobody wanted (``seed_everything(0)`` gives a
    generator) prints ``<torch._C.Generator at 0x7f…>``: noise to a reader, and it changes on
    every build. Assign it (``_ = ...``) or end the line with a semicolon."""
    found = []
    for page in _pages(html_dir):
        for match in ADDRESS_REPR.finditer(page.read_text(encoding="utf-8")):
            found.append(f"{page.relative_to(html_dir)}: {match.group(0)}")
    assert not found, "\n".join(found)


def test_each_chapter_numbers_its_first_section_n_1(html_dir):
    """A numbered heading on a chapter's landing page (e.g. "## Sections") takes N.1 and pushes
    the first section page to N.2; the landing page's headings stay unnumbered (a rubric)."""
    wrong, checked = [], 0
    for chapter in [p for p in _chapter_pages(html_dir) if p.parent.name == "chapters"]:
        own = re.escape(chapter.stem)  # the navigation entries of this chapter's own sections
        toc = re.compile(
            rf'"toctree-l2"><a class="reference internal" href="{own}/[^"]+">(\w+)\.(\d+)\.'
        )
        numbers = toc.findall(chapter.read_text(encoding="utf-8"))
        checked += bool(numbers)
        if numbers and numbers[0][1] != "1":
            wrong.append(f"{chapter.name}: first section is {'.'.join(numbers[0])}")
    assert checked, "no numbered sections found"
    assert not wrong, "\n".join(wrong)


def test_no_empty_index_page(html_dir):
    """The general index is built only if it has entries (an empty "Index" page was linked)."""
    index = html_dir / "genindex.html"
    if index.exists():
        assert re.search(r'<(td|li)[^>]*>\s*<a href="[^"]+#index-', index.read_text()), (
            "genindex.html is empty: add index entries or set html_use_index: false"
        )
    else:
        linked = [p.name for p in _pages(html_dir) if "genindex.html" in p.read_text()]
        assert not linked, f"pages link to a missing index: {linked[:5]}"


def _bib_keys() -> list[str]:
    text = (REPO / "book" / "references.bib").read_text(encoding="utf-8")
    return re.findall(r"^@\w+\{([^,\s]+),", text, flags=re.M)


def test_references_are_labelled_author_year_as_cited(html_dir):
    """The text cites author–year, so the list labels each paper the same way ("Vaswani et al.,
    2017"), not with alphabetic codes ("[VSP+17]"); no title shows raw TeX ("$O(n^2)$")."""
    page = (html_dir / "references.html").read_text(encoding="utf-8")
    labels = re.findall(r'<span class="label"><span class="fn-bracket">\[</span>(.*?)<', page)
    assert len(labels) >= len(_bib_keys()), f"{len(labels)} labels for {len(_bib_keys())} entries"
    coded = [label for label in labels if not re.fullmatch(r".+, \d{4}[a-z]?", label)]
    assert not coded, f"labels not author-year: {coded}"
    assert "$" not in re.sub(r"<script.*?</script>", "", page, flags=re.S), "raw TeX in a title"


def test_launch_notebooks_cite_author_year_not_raw_keys(html_dir):
    """The notebooks behind the launch buttons show citations as the book does ("(Vaswani et
    al., 2017)"), never as the BibTeX key ("(vaswani2017)")."""
    keys = _bib_keys()
    raw = re.compile(r"\b(" + "|".join(map(re.escape, keys)) + r")\b")
    notebooks = sorted((html_dir / "_notebooks").rglob("*.ipynb"))
    assert notebooks, "no launch notebooks in the build"
    found, cited = [], 0
    for notebook in notebooks:
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            text = "".join(cell["source"])
            cited += len(re.findall(r"et al\.,? \(?\d{4}", text))
            found += [f"{notebook.name}: {m}" for m in raw.findall(text)]
    assert cited, "no author-year citation in any launch notebook"
    assert not found, "raw citation keys:\n" + "\n".join(found[:20])


def test_the_appendix_is_lettered_not_a_chapter(html_dir):
    """The appendix and its sections are A, A.1, A.2 … (figures A.1 …), not chapter 6."""
    appendix = sorted(html_dir.glob("chapters/*appendix*.html"))
    if not appendix:
        pytest.skip("no appendix in this book")
    pages = [appendix[0], *sorted(appendix[0].with_suffix("").glob("*.html"))]
    wrong = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        title = re.search(r'<h1><span class="section-number">([^<]*)</span>', text)
        if not title or not re.fullmatch(r"A(\.\d+)*\. ", title.group(1)):
            wrong.append(f"{page.name}: title numbered {title and title.group(1)!r}")
        wrong += [f"{page.name}: {n}" for n in re.findall(r"Figure \d+\.\d+", text)]
    assert not wrong, "\n".join(wrong)
