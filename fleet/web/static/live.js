// Live rows: the server pushes changed cells (server-sent events); this only writes them in.
// `live` carries host rows; `live/gpus` the GPU rows of the hosts shown expanded.
"use strict";
(() => {
  const table = document.getElementById("overview");
  const conn = document.getElementById("conn");
  if (!table) return;
  const liveUrl = new URL("../live", document.currentScript.src);
  const gpuUrl = new URL("../live/gpus", document.currentScript.src);
  const template = document.getElementById("gpu-row");
  const hosts = new Map();
  const gpus = new Map(); // host name -> Map(GPU index -> row)
  for (const body of table.tBodies) {
    if (body.dataset.host === undefined) continue;
    hosts.set(body.dataset.host, body);
    const rows = new Map();
    for (const row of body.querySelectorAll("tr[data-gpu]")) rows.set(row.dataset.index, row);
    gpus.set(body.dataset.host, rows);
  }
  // Attributes of the row itself (styling); every other key names the cells marked data-c.
  const ROW_KEYS = new Set(["tone", "fresh", "hot"]);

  function cellsOf(row) {
    if (!row.fleetCells) {
      row.fleetCells = new Map();
      for (const el of row.querySelectorAll("[data-c]")) {
        const list = row.fleetCells.get(el.dataset.c) || [];
        list.push(el);
        row.fleetCells.set(el.dataset.c, list);
      }
    }
    return row.fleetCells;
  }

  function apply(target, row, delta) {
    const cells = cellsOf(row);
    for (const [key, value] of Object.entries(delta)) {
      if (ROW_KEYS.has(key)) { target.dataset[key] = value; continue; }
      for (const el of cells.get(key) || []) {
        if (el.tagName === "METER") el.value = Number.isFinite(Number(value)) ? Number(value) : 0;
        else if (el.textContent !== value) el.textContent = value;
      }
    }
  }

  function setConn(state, words) {
    if (!conn) return;
    conn.dataset.state = state;
    conn.textContent = words;
  }

  liveUrl.searchParams.set("v", table.dataset.version);
  const source = new EventSource(liveUrl);
  source.addEventListener("open", () => setConn("live", "live"));
  source.addEventListener("error", () => setConn("lost", "reconnecting…"));
  source.addEventListener("reload", () => window.location.reload());
  // Rows off screen keep their changes until they scroll into view: at 1,000 hosts the page
  // then writes a screenful of cells per update, not every changed cell.
  const onScreen = new Set();
  const pending = new Map();
  const watcher = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) { onScreen.delete(entry.target); continue; }
      onScreen.add(entry.target);
      const delta = pending.get(entry.target);
      if (delta) { pending.delete(entry.target); apply(entry.target, entry.target.rows[0], delta); }
    }
  }, { rootMargin: "200px" }) : null;
  if (watcher) for (const body of hosts.values()) watcher.observe(body);

  source.addEventListener("rows", (event) => {
    const frame = JSON.parse(event.data);
    for (const [name, delta] of Object.entries(frame.hosts)) {
      const body = hosts.get(name);
      if (!body) continue; // not on this page (filtered out)
      if (!watcher || onScreen.has(body)) apply(body, body.rows[0], delta);
      else pending.set(body, Object.assign(pending.get(body) || {}, delta));
    }
    table.dataset.version = String(frame.v);
    setConn("live", "live");
  });

  function gpuRow(name, index) {
    const rows = gpus.get(name);
    let row = rows.get(index);
    if (!row && template) {
      row = template.content.firstElementChild.cloneNode(true);
      row.dataset.gpu = `${name}:${index}`;
      row.dataset.index = index;
      hosts.get(name).appendChild(row);
      rows.set(index, row);
    }
    return row;
  }

  function removeGpu(name, index) { // the host no longer reports this GPU
    const rows = gpus.get(name);
    const row = rows.get(index);
    if (row) { row.remove(); rows.delete(index); }
  }

  let gpuSource = null;
  let reopenTimer = null;
  function followGpus() {
    if (gpuSource) gpuSource.close();
    gpuSource = null;
    const open = [...hosts.entries()].filter(([, body]) => body.classList.contains("open"));
    if (!open.length) return;
    const url = new URL(gpuUrl);
    if (open.length === hosts.size) url.searchParams.set("all", "1");
    else for (const [name] of open) url.searchParams.append("h", name);
    gpuSource = new EventSource(url);
    gpuSource.addEventListener("gpus", (event) => {
      const frame = JSON.parse(event.data);
      const whole = new Set(frame.whole || []);
      for (const [name, byIndex] of Object.entries(frame.hosts)) {
        if (!hosts.has(name)) continue;
        if (whole.has(name)) { // a (re)connected stream: rows of GPUs it does not list are gone
          for (const index of [...gpus.get(name).keys()]) {
            if (!(index in byIndex)) removeGpu(name, index);
          }
        }
        for (const [index, delta] of Object.entries(byIndex)) {
          if (delta === null) { removeGpu(name, index); continue; }
          const row = gpuRow(name, index);
          if (row) apply(row, row, delta);
        }
      }
      document.dispatchEvent(new CustomEvent("fleet:gpus", { detail: frame }));
    });
  }
  function refollowSoon() { // a burst of toggles opens one stream
    clearTimeout(reopenTimer);
    reopenTimer = setTimeout(followGpus, 50);
  }

  function expand(body, open) {
    body.classList.toggle("open", open);
    const button = body.querySelector("button.expand");
    if (button) button.setAttribute("aria-expanded", String(open));
  }
  table.addEventListener("click", (event) => {
    const button = event.target.closest("button.expand");
    if (!button) return;
    const body = button.closest("tbody");
    expand(body, !body.classList.contains("open"));
    refollowSoon();
  });
  const all = document.getElementById("expand-all");
  if (all) {
    all.addEventListener("click", () => {
      const open = all.getAttribute("aria-pressed") !== "true";
      all.setAttribute("aria-pressed", String(open));
      all.textContent = open ? "Hide GPUs" : "Show all GPUs";
      for (const body of hosts.values()) expand(body, open);
      refollowSoon();
    });
  }
  followGpus(); // the host page shows its GPUs from the start

  // Leaving the page closes its streams (a browser may keep a hidden page, and its
  // connections, for going back); coming back to such a page redraws it.
  window.addEventListener("pagehide", () => {
    source.close();
    if (gpuSource) gpuSource.close();
  });
  window.addEventListener("pageshow", (event) => {
    if (event.persisted) window.location.reload();
  });
})();
