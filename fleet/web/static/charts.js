// History charts of the host page: uPlot over the JSON the server put in #chart-data.
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
  for (const [key, title] of metrics) {
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
    new uPlot(options, [times, ...data.gpus.map((gpu) => column(gpu, key))], box);
  }
  holder.dataset.points = String(points);
})();
