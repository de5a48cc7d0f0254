// Shrinks a display equation that is wider than its column towards the column's width, to no
// less than 85 % (MathJax 3 does not break lines; smaller is unreadable on a phone): what is still
// too wide scrolls inside its own box (the theme makes the equation's container a scroll box).
// Runs once MathJax has typeset the page and again whenever the window is resized; sets
// window.bookMathFitted.
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
        var fitted = Math.floor((percent * box) / need);
        el.style.fontSize = Math.max(Math.ceil(0.85 * percent), fitted) + "%";
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
