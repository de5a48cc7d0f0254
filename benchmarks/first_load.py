"""Bytes a reader's browser loads to show a page of the built book (issue 17: <= 3 MB).

Serves the built HTML on localhost, opens the page in headless Chromium with an empty cache,
waits until MathJax has typeset and the web fonts are loaded, and sums the decoded size of the
document and of every resource the browser fetched for it (CSS, JavaScript, fonts, images), as
the browser's Resource Timing API reports them. Also lists the ``.map`` files shipped in the
build (browsers load them only when the developer tools are open).

    .venv/bin/python benchmarks/first_load.py                      # book/_build/html, index.html
    .venv/bin/python benchmarks/first_load.py /tmp/other/_build/html \\
        --page intro.html --page chapters/02_attention_layer.html
"""

from __future__ import annotations

import argparse
import functools
import http.server
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIMIT = 3_000_000

#: Resolves with [document bytes, [[url, bytes, type], ...]] once math and fonts are done.
MEASURE = """
const done = arguments[arguments.length - 1];
const mj = (window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve();
mj.then(() => document.fonts.ready).then(() => setTimeout(() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource').map(
    r => [r.name, r.decodedBodySize || r.encodedBodySize || 0, r.initiatorType]);
  done([nav ? nav.decodedBodySize : document.documentElement.outerHTML.length, res]);
}, 500));
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_Quiet, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/"


def chromium(width: int = 1400, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--no-first-run", f"--window-size={width},{height}",
        f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(
        service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options
    )
    driver.set_script_timeout(60)
    return driver


def first_load(driver, url: str) -> tuple[int, list[tuple[str, int, str]]]:
    """(total bytes, [(resource, bytes, kind)]) for one page, with the browser cache cleared."""
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    driver.get(url)
    deadline = time.monotonic() + 30
    while driver.execute_script("return document.readyState") != "complete":
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    document, resources = driver.execute_async_script(MEASURE)
    resources = [(name, int(size), kind) for name, size, kind in resources]
    return int(document) + sum(size for _, size, _ in resources), resources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", nargs="?", type=Path, default=REPO / "book/_build/html")
    parser.add_argument("--page", action="append", default=None, help="page(s) to load")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every resource")
    args = parser.parse_args(argv)
    pages = args.page or ["index.html"]
    index = args.html / "index.html"  # Jupyter Book's index.html only redirects to the root page
    refresh = re.search(r'http-equiv="Refresh"[^>]*url=([^"]+)"', index.read_text())
    pages = [refresh.group(1) if p == "index.html" and refresh else p for p in pages]
    maps = sorted(args.html.rglob("*.map"))
    print(f"{args.html}: {len(maps)} .map files, {sum(p.stat().st_size for p in maps):,} bytes")
    httpd, base = serve(args.html)
    driver = chromium()
    worst = 0
    try:
        for page in pages:
            total, resources = first_load(driver, base + page)
            worst = max(worst, total)
            verdict = "ok" if total <= LIMIT else "OVER"
            print(f"{page:<44} {total:>12,} bytes  ({len(resources)} resources)  "
                  f"target <= {LIMIT:,}: {verdict}")  # fmt: skip
            if args.verbose:
                for name, size, kind in sorted(resources, key=lambda r: -r[1]):
                    print(f"    {size:>10,}  {kind:<10} {name.removeprefix(base)}")
    finally:
        driver.quit()
        httpd.shutdown()
    return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    raise SystemExit(main())
