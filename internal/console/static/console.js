// The console's one script: when the server says something changed (server-sent
// events), fetch this page again and swap in its live region, as the server rendered
// and escaped it. Forms are outside the live regions, so nothing typed is lost.
(function () {
  "use strict";
  var main = document.querySelector("main[data-live]");
  if (!main || !window.EventSource || !window.fetch || !window.DOMParser) {
    return;
  }
  var state = document.getElementById("live-state");
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.redirected || !r.ok) { throw new Error("status " + r.status); }
        return r.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var now = document.querySelectorAll(".live-region");
        var next = fresh.querySelectorAll(".live-region");
        if (now.length === next.length) {
          for (var i = 0; i < now.length; i++) {
            now[i].replaceWith(document.adoptNode(next[i]));
          }
        }
        if (state) { state.textContent = "live, updated " + new Date().toLocaleTimeString(); }
      })
      .catch(function () { if (state) { state.textContent = "not updated: reload the page"; } })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  var es = new EventSource(main.getAttribute("data-live"));
  es.addEventListener("changed", refresh);
  es.addEventListener("ended", function () {
    es.close();
    if (state) { state.textContent = "logged out: reload the page"; }
  });
  es.onerror = function () { if (state) { state.textContent = "reconnecting…"; } };
  es.onopen = function () { if (state) { state.textContent = "live"; } };
})();
