// Live rows: the server pushes changed cells (server-sent events); this only writes them in.
"use strict";
(() => {
  const table = document.getElementById("overview");
  const conn = document.getElementById("conn");
  if (!table) return;
  const liveUrl = new URL("../live", document.currentScript.src);
  liveUrl.searchParams.set("v", table.dataset.version);
  const hosts = new Map();
  const gpus = new Map();
  for (const body of table.tBodies) {
    if (body.dataset.host !== undefined) hosts.set(body.dataset.host, body);
  }
  for (const row of table.querySelectorAll("tr[data-gpu]")) gpus.set(row.dataset.gpu, row);
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

  const source = new EventSource(liveUrl);
  source.addEventListener("open", () => setConn("live", "live"));
  source.addEventListener("error", () => setConn("lost", "reconnecting…"));
  source.addEventListener("reload", () => window.location.reload());
  source.addEventListener("rows", (event) => {
    const frame = JSON.parse(event.data);
    for (const [name, delta] of Object.entries(frame.hosts)) {
      const body = hosts.get(name);
      if (body) apply(body, body.rows[0], delta);
    }
    for (const [key, delta] of Object.entries(frame.gpus)) {
      const row = gpus.get(key);
      if (row) apply(row, row, delta);
    }
    table.dataset.version = String(frame.v);
    setConn("live", "live");
  });

  function expand(body, open) {
    body.classList.toggle("open", open);
    const button = body.querySelector("button.expand");
    if (button) button.setAttribute("aria-expanded", String(open));
  }
  table.addEventListener("click", (event) => {
    const button = event.target.closest("button.expand");
    if (button) expand(button.closest("tbody"), !button.closest("tbody").classList.contains("open"));
  });
  const all = document.getElementById("expand-all");
  if (all) {
    all.addEventListener("click", () => {
      const open = all.getAttribute("aria-pressed") !== "true";
      all.setAttribute("aria-pressed", String(open));
      all.textContent = open ? "Hide GPUs" : "Show all GPUs";
      for (const body of hosts.values()) expand(body, open);
    });
  }
})();
