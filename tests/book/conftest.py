"""Tests of the book: its sources' structure, the diagrams, page execution and (with Chromium) the
built pages in a browser. The browser tests load the pages `make book-smoke` built."""
