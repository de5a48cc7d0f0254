// The book's fixes to its themes (issue 25), once the page is loaded:
//
// - The menu and "Contents" buttons. pydata-sphinx-theme 0.17.1 (and sphinx-book-theme 1.3.0)
//   wire only the first .primary-toggle / .secondary-toggle of the page, by querySelector: the
//   header's, which sphinx-book-theme hides; the buttons a reader sees (in the article's header)
//   did nothing. A click on any other toggle is passed to the first one, which carries both
//   themes' handlers (a drawer on a phone, a collapsing sidebar on a desktop).
// - Inline formulas are not Tab stops (MathJax puts every formula in the tab order; a page of
//   36 formulas took 36 presses to pass). Display equations stay focusable.
// - A figure much wider than a phone's column (an architecture diagram, four heatmaps in a row)
//   is marked .book-wide-figure: on a phone book.css shows it larger, scrolling in its own box,
//   rather than shrunk until its labels cannot be read.
// - Buttons without a name get one (the copy buttons, the navigation's expand arrows).
// - Library sources (which wrap at desktop widths) continue a wrapped line deeper than it starts.
// - A box that scrolls sideways (code, an equation, a table, a wide figure) shows a shadow on the
//   side where content is hidden; a figure is not shrunk below 85 % of its size on a phone.
// - Printing unfolds folded code and outputs, scales wide equations to the page (a closed <details> prints only its summary), and
//   folds them back afterwards; the title the theme prints gets the page's section number.
(function () {
  "use strict";

  function wireToggles(selector) {
    var toggles = document.querySelectorAll(selector);
    var wired = toggles[0];
    if (!wired) return;
    Array.prototype.slice.call(toggles, 1).forEach(function (button) {
      button.addEventListener("click", function (event) {
        event.preventDefault();
        event.stopPropagation();
        wired.click();
      });
    });
  }

  function nameButtons() {
    document.querySelectorAll("button.copybtn").forEach(function (button) {
      if (!button.getAttribute("aria-label")) button.setAttribute("aria-label", "Copy the code");
    });
    document.querySelectorAll(".bd-sidebar-primary details > summary").forEach(function (summary) {
      var link = summary.parentElement.parentElement.querySelector(":scope > a");
      var title = link ? link.textContent.trim() : "this chapter";
      if (!summary.getAttribute("aria-label")) {
        summary.setAttribute("aria-label", "Show or hide the sections of " + title);
      }
    });
  }

  var WIDE_FIGURE = 560; // CSS px: wider than 1.5 phone columns
  var SMALLEST_FIGURE = 0.85; // a figure is not shown below 85 % of its size (12 px ticks: 10 px)

  function markWideFigures() {
    document.querySelectorAll("article figure img").forEach(function (img) {
      var mark = function () {
        var column = img.closest("figure").parentElement.clientWidth || window.innerWidth;
        var tooSmall = img.naturalWidth * SMALLEST_FIGURE > column;
        if (img.naturalWidth < WIDE_FIGURE && !tooSmall) return;
        img.style.setProperty("--book-natural-width", img.naturalWidth + "px");
        img.closest("figure").classList.add("book-wide-figure");
      };
      if (img.complete) mark();
      else img.addEventListener("load", mark);
    });
  }

  function untabInlineMath() {
    document.querySelectorAll('mjx-container:not([display="true"])').forEach(function (el) {
      if (el.getAttribute("tabindex") !== "-1") el.setAttribute("tabindex", "-1");
    });
    window.bookInlineMathUntabbed = true;
  }

  function numberPrintedTitle() {
    var printed = document.querySelector("#jb-print-docs-body h1");
    var number = document.querySelector(".bd-article h1 .section-number");
    if (printed && number && !printed.querySelector(".section-number")) {
      printed.insertBefore(number.cloneNode(true), printed.firstChild);
    }
  }

  // Library sources wrap at desktop widths: each line becomes a .book-line span whose
  // --book-indent is its number of leading spaces (book.css indents its continuation lines).
  // Pygments' spans are flat, so a line is the nodes between two newlines; the text is unchanged.
  function hangSourceLines() {
    document.querySelectorAll("div.highlight pre").forEach(function (pre) {
      if (pre.closest(".cell_input, .cell_output") || pre.dataset.bookLines) return;
      pre.dataset.bookLines = "1";
      var pieces = [];
      Array.prototype.slice.call(pre.childNodes).forEach(function (node) {
        var text = node.textContent;
        if (text.indexOf("\n") < 0) {
          pieces.push(node);
          return;
        }
        text.split("\n").forEach(function (part, i) {
          if (i > 0) pieces.push("\n");
          if (!part) return;
          if (node.nodeType === 3) pieces.push(document.createTextNode(part));
          else {
            var copy = node.cloneNode(false);
            copy.textContent = part;
            pieces.push(copy);
          }
        });
      });
      var out = document.createDocumentFragment();
      var line = null;
      pieces.forEach(function (piece) {
        if (piece === "\n") {
          out.appendChild(document.createTextNode("\n"));
          line = null;
          return;
        }
        if (!line) {
          line = document.createElement("span");
          line.className = "book-line";
          out.appendChild(line);
        }
        line.appendChild(piece);
      });
      out.querySelectorAll(".book-line").forEach(function (span) {
        var indent = /^ */.exec(span.textContent)[0].length;
        if (indent) span.style.setProperty("--book-indent", indent);
      });
      pre.textContent = "";
      pre.appendChild(out);
    });
    window.bookSourceLinesHung = true;
  }

  // A box that scrolls sideways gets a shadow on the side where content is hidden.
  var SCROLLERS =
    'div.highlight pre, .cell_output pre, mjx-container[display="true"], .math-wrapper, ' +
    ".pst-scrollable-table-container, figure.book-wide-figure, .table-wrapper";

  function markScrollers() {
    document.querySelectorAll(SCROLLERS).forEach(function (box) {
      var update = function () {
        var hidden = box.scrollWidth - box.clientWidth;
        box.classList.toggle("book-scrolls", hidden > 1 && box.scrollLeft < hidden - 1);
        box.classList.toggle("book-scrolls-left", hidden > 1 && box.scrollLeft > 1);
      };
      if (!box.dataset.bookScroll) {
        box.dataset.bookScroll = "1";
        box.addEventListener("scroll", update, { passive: true });
      }
      update();
    });
    window.bookScrollersMarked = true;
  }

  // Printing: a display equation wider than the printed column is scaled down to fit it
  // (MathJax 3 does not break lines), and put back afterwards.
  var PRINT_COLUMN = 640; // CSS px: A4 or Letter at 96 dpi, less the margins
  var printScaled = [];
  function fitEquationsForPrint() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (el) {
      var math = el.querySelector("mjx-math") || el;
      var need = math.scrollWidth || math.getBoundingClientRect().width;
      var column = Math.min(PRINT_COLUMN, el.parentElement.clientWidth || PRINT_COLUMN);
      if (need > column) {
        printScaled.push([el, el.style.fontSize]);
        var base = parseFloat(el.style.fontSize) || 100;
        el.style.fontSize = Math.floor((base * column) / need) + "%";
      }
    });
  }

  var unfolded = [];
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details:not([open])").forEach(function (details) {
      details.open = true;
      unfolded.push(details);
    });
    fitEquationsForPrint();
  });
  window.addEventListener("afterprint", function () {
    unfolded.forEach(function (details) {
      details.open = false;
    });
    unfolded = [];
    printScaled.forEach(function (pair) {
      pair[0].style.fontSize = pair[1];
    });
    printScaled = [];
  });

  function ready(callback) {
    if (document.readyState !== "loading") callback();
    else document.addEventListener("DOMContentLoaded", callback);
  }

  ready(function () {
    wireToggles(".primary-toggle");
    wireToggles(".secondary-toggle");
    numberPrintedTitle();
    markWideFigures();
    hangSourceLines();
  });
  window.addEventListener("load", function () {
    // the copy buttons are added by sphinx-copybutton once the page has loaded
    setTimeout(nameButtons, 0);
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(untabInlineMath);
    else untabInlineMath();
    // after fit-math.js has sized the equations and the figures have loaded
    setTimeout(markScrollers, 300);
  });
  var rescan = null;
  window.addEventListener("resize", function () {
    clearTimeout(rescan);
    rescan = setTimeout(markScrollers, 300);
  });
})();
