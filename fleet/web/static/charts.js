// History charts of the host page: uPlot over the JSON the server put in #chart-data, then
// the live GPU stream's values as they come.
"use strict";
(() => {
  const holder = document.getElementById("charts");
  const dataEl = document.getElementById("chart-data");
  if (!holder || !dataEl || typeof uPlot === "undefined") return;
  const data = JSON.parse(dataEl.textContent);
  if (!data.gpus.length) return;
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  // One x axis for all GPUs: the union of their timestamps, gaps as null.
  const times = [...new Set(data.gpus.flatMap((gpu) => gpu.ts))].sort((a, b) => a - b);
  const position = new Map(times.map((t, i) => [t, i]));
  let points = 0;
  function column(gpu, key) {
    const values = new Array(times.length).fill(null);
    gpu.ts.forEach((t, i) => {
      values[position.get(t)] = gpu[key][i];
      if (gpu[key][i] !== null) points += 1;
    });
    return values;
  }
  const metrics = [["util", "Utilisation %"], ["temp", "Temperature °C"], ["mem_gib", "Memory used GiB"]];
  const columns = {};
  const charts = [];
  for (const [key, title] of metrics) {
    columns[key] = [times, ...data.gpus.map((gpu) => column(gpu, key))];
    const box = document.createElement("figure");
    box.className = "chart";
    box.setAttribute("aria-label", title);
    holder.appendChild(box);
    const width = Math.max(280, box.clientWidth);
    const options = {
      title, width, height: 220,
      scales: { x: { time: true, min: data.since, max: data.until } },
      series: [{}, ...data.gpus.map((gpu, i) => ({ label: gpu.label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false }))],
    };
    charts.push({ key, plot: new uPlot(options, columns[key], box) });
  }
  holder.dataset.points = String(points);

  // Live: each GPU frame of this host (fleet:gpus, from live.js) adds a point now, with the
  // newest value of every GPU; points older than the window fall off the left.
  const latest = new Map(data.gpus.map((gpu) => [String(gpu.index), { util: null, temp: null, mem_gib: null }]));
  const READ = { util: (d) => d.util_pct, temp: (d) => d.temp, mem_gib: (d) => d.mem };
  document.addEventListener("fleet:gpus", (event) => {
    const byIndex = event.detail.hosts[data.host];
    if (!byIndex) return;
    for (const [index, delta] of Object.entries(byIndex)) {
      const values = latest.get(index);
      if (!values) continue;
      if (delta === null) { // the host no longer reports this GPU: its lines stop here
        for (const key of Object.keys(READ)) values[key] = null;
        continue;
      }
      for (const [key, read] of Object.entries(READ)) {
        const text = read(delta);
        if (text !== undefined) values[key] = Number.isFinite(parseFloat(text)) ? parseFloat(text) : null;
      }
    }
    const now = Date.now() / 1000;
    times.push(now);
    let drop = 0;
    while (drop < times.length && times[drop] < now - data.span) drop += 1;
    times.splice(0, drop);
    for (const { key, plot } of charts) {
      const series = columns[key];
      data.gpus.forEach((gpu, i) => {
        const value = latest.get(String(gpu.index))[key];
        series[i + 1].push(value);
        series[i + 1].splice(0, drop);
        if (value !== null) points += 1;
      });
      series[0] = times;
      plot.setData(series, false);
      plot.setScale("x", { min: now - data.span, max: now });
    }
    holder.dataset.points = String(points);
  });
})();
