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
// - Printing unfolds folded code and outputs (a closed <details> prints only its summary), and
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

  function markWideFigures() {
    document.querySelectorAll("article figure img").forEach(function (img) {
      var mark = function () {
        if (img.naturalWidth < WIDE_FIGURE) return;
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

  var unfolded = [];
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details:not([open])").forEach(function (details) {
      details.open = true;
      unfolded.push(details);
    });
  });
  window.addEventListener("afterprint", function () {
    unfolded.forEach(function (details) {
      details.open = false;
    });
    unfolded = [];
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
  });
  window.addEventListener("load", function () {
    // the copy buttons are added by sphinx-copybutton once the page has loaded
    setTimeout(nameButtons, 0);
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(untabInlineMath);
    else untabInlineMath();
  });
})();
