// Scales a display equation that is wider than its column down to the column's width (not below
// 40 %), so that no equation scrolls sideways (MathJax 3 does not break lines). Runs once MathJax
// has typeset the page and again whenever the window is resized; sets window.bookMathFitted.
(function () {
  "use strict";
  function fit() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (el) {
      if (el.dataset.baseSize === undefined) el.dataset.baseSize = el.style.fontSize || "";
      var base = el.dataset.baseSize;
      el.style.fontSize = base;
      var box = el.clientWidth;
      var need = el.scrollWidth;
      if (box > 0 && need > box + 1) {
        var percent = /%$/.test(base) ? parseFloat(base) : 100;
        el.style.fontSize = Math.max(40, Math.floor((percent * box) / need)) + "%";
      }
    });
    window.bookMathFitted = true;
  }
  var timer = null;
  window.addEventListener("resize", function () {
    window.bookMathFitted = false;
    clearTimeout(timer);
    timer = setTimeout(fit, 100);
  });
  window.addEventListener("load", function () {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(fit);
    else fit();
  });
})();
