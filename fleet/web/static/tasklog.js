// A task's log as it is written: `output` events carry text, `end` the task's final state.
"use strict";
(() => {
  const log = document.getElementById("log");
  const status = document.getElementById("log-status");
  if (!log) return;
  let ended = false;
  let opened = 0;
  const source = new EventSource(log.dataset.src);
  source.addEventListener("open", () => {
    opened += 1;
    if (opened > 1) log.textContent = ""; // the stream starts from the top again
    status.textContent = "streaming";
  });
  source.addEventListener("output", (event) => {
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.appendChild(document.createTextNode(JSON.parse(event.data)));
    if (atBottom) log.scrollTop = log.scrollHeight;
  });
  source.addEventListener("end", (event) => {
    const end = JSON.parse(event.data);
    ended = true;
    source.close();
    const exit = end.exit_code === null || end.exit_code === undefined ? "" : ` (exit ${end.exit_code})`;
    status.textContent = end.error ? `ended: ${end.error}` : `ended: ${end.state}${exit}`;
    const state = document.getElementById("task-state");
    if (state && !end.error) state.textContent = end.state;
    const endedAt = document.getElementById("task-ended");
    if (endedAt && end.ended) endedAt.textContent = end.ended;
  });
  source.addEventListener("error", () => {
    if (!ended) status.textContent = "reconnecting…";
  });
  // Leaving the page closes the stream; coming back to a kept page reads the log again.
  window.addEventListener("pagehide", () => source.close());
  window.addEventListener("pageshow", (event) => {
    if (event.persisted) window.location.reload();
  });
})();
