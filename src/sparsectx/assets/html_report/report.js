// The study report's script (sparsectx.report.html_report). A fragment naming an element (#table-main) opens the
// folded section it names. The item browser filters by model, benchmark and method; the URL fragment holds the
// filters (#bench=<benchmark>&method=<method key>[&model=<model>]): read on load and on every fragment change,
// rewritten when a filter is changed, so a filtered view can be bookmarked or shared.
(function () {
  "use strict";
  // Opens the <details> holding (or held by) the element the fragment names, then shows it.
  function openTarget() {
    const target = location.hash.length > 1 ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
    if (!target) {
      return;
    }
    for (let node = target; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") {
        node.open = true;
      }
    }
    const folded = target.querySelector("details");
    if (folded) {
      folded.open = true;
    }
    target.scrollIntoView();
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();

  const form = document.getElementById("item-filters");
  if (!form) {
    return;
  }
  const selects = Array.from(form.querySelectorAll("select"));
  const items = Array.from(document.querySelectorAll("article.item"));
  const count = document.getElementById("item-count");

  // Returns true when the fragment holds filters (a fragment without "=" is a section link such as #tables).
  function readFragment() {
    const fragment = location.hash.slice(1);
    if (!fragment.includes("=")) {
      return false;
    }
    const params = new URLSearchParams(fragment);
    for (const select of selects) {
      const value = params.get(select.name) || "";
      const known = Array.from(select.options).some((option) => option.value === value);
      select.value = known ? value : "";
    }
    return true;
  }

  function writeFragment() {
    const params = new URLSearchParams();
    for (const select of selects) {
      if (select.value) {
        params.set(select.name, select.value);
      }
    }
    const query = params.toString();
    history.replaceState(null, "", query ? "#" + query : location.pathname + location.search);
  }

  // Hides the items outside the chosen model and benchmark, and every answer row of another method; an item
  // left with no answer row under a method filter is hidden too.
  function apply() {
    const chosen = {};
    for (const select of selects) {
      if (select.value) {
        chosen[select.name] = select.value;
      }
    }
    let shown = 0;
    for (const item of items) {
      let rows = 0;
      for (const row of item.querySelectorAll("tr.output")) {
        const keep = !chosen.method || row.dataset.method === chosen.method;
        row.hidden = !keep;
        rows += keep ? 1 : 0;
      }
      const visible =
        (!chosen.model || item.dataset.model === chosen.model) &&
        (!chosen.bench || item.dataset.bench === chosen.bench) &&
        (!chosen.method || rows > 0);
      item.hidden = !visible;
      shown += visible ? 1 : 0;
    }
    const described = selects
      .filter((select) => select.value)
      .map((select) => select.dataset.label + " " + select.options[select.selectedIndex].text);
    count.textContent =
      shown + " of " + items.length + " items shown" + (described.length ? " (" + described.join(", ") + ")" : "");
  }

  form.addEventListener("change", function () {
    writeFragment();
    apply();
  });
  window.addEventListener("hashchange", function () {
    readFragment();
    apply();
  });
  const filtered = readFragment();
  apply();
  if (filtered) {
    document.getElementById("items").scrollIntoView();
  }
})();
