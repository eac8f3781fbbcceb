/* Live metrics page: polls the dashboard's JSON snapshot and redraws uPlot charts in place. */
(function () {
  "use strict";

  const root = document.getElementById("dashboard");
  const pollMs = Number(root.dataset.pollMs) || 2000;
  const batchMinutes = Math.round((Number(root.dataset.batchS) || 300) / 60);
  // Exposed for people poking at the page in devtools, and for the browser test.
  const state = { charts: {}, cards: {}, updates: 0, failures: 0, lastData: null, lastError: "" };
  window.dashboard = state;

  const COLORS = { p50: "#417690", p95: "#e69f00", p99: "#ba2121", queue: "#d55e00", compute: "#0072b2",
                   ok: "#417690", error: "#ba2121", depth: "#0072b2", max: "#ba2121",
                   overloaded: "#e69f00", unavailable: "#6a3d9a", timeout: "#ba2121", bars: "#79aec8" };

  const CHARTS = [
    // Alarming colours first, so a calm line is drawn over them while they sit at zero.
    { id: "rps", title: "Requests per second", series: [
      { key: "errors", label: "errors", color: COLORS.error, fmt: "int" },
      { key: "rps", label: "answered", color: COLORS.ok, fill: "rgba(65,118,144,0.15)", fmt: "int" }] },
    { id: "latency", title: "End-to-end latency (ms)", dots: true, series: [
      { key: "total_p50", label: "p50", color: COLORS.p50 },
      { key: "total_p95", label: "p95", color: COLORS.p95 },
      { key: "total_p99", label: "p99", color: COLORS.p99 }] },
    { id: "split", title: "Queue vs compute (ms)", dots: true, series: [
      { key: "queue_p50", label: "queue p50", color: COLORS.queue, dash: [2, 3] },
      { key: "queue_p95", label: "p95", color: COLORS.queue, dash: [6, 3] },
      { key: "queue_p99", label: "p99", color: COLORS.queue },
      { key: "compute_p50", label: "compute p50", color: COLORS.compute, dash: [2, 3] },
      { key: "compute_p95", label: "p95", color: COLORS.compute, dash: [6, 3] },
      { key: "compute_p99", label: "p99", color: COLORS.compute }] },
    { id: "batch", title: "Requests by batch size (last " + batchMinutes + " min)", bars: true },
    { id: "depth", title: "Queue depth vs max_queue_size", series: [
      { key: "depth", label: "queued", color: COLORS.depth, fill: "rgba(0,114,178,0.12)", gaps: true, fmt: "int" },
      { key: "max", label: "max_queue_size", color: COLORS.max, dash: [6, 4], fmt: "int" }] },
    { id: "rejected", title: "Rejections and timeouts per second", series: [
      { key: "timeout", label: "timeout", color: COLORS.timeout, fmt: "int" },
      { key: "unavailable", label: "unavailable", color: COLORS.unavailable, fmt: "int" },
      { key: "overloaded", label: "overloaded", color: COLORS.overloaded, fmt: "int" }] },
  ];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (name === "text") node.textContent = value;
      else node.setAttribute(name, value);
    }
    for (const child of children) if (child != null) node.append(child);
    return node;
  }

  function fmtMs(v) {
    if (v == null) return "–";
    return v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : String(Math.round(v));
  }

  function fmtValue(kind) {
    return (u, v) => (v == null ? "–" : kind === "int" ? String(Math.round(v)) : fmtMs(v));
  }

  function cssVar(name, fallback) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
  }

  function axes() {
    const fg = cssVar("--body-quiet-color", "#666");
    const grid = cssVar("--hairline-color", "#e8e8e8");
    const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    return [{ ...axis }, { ...axis, size: 48 }];
  }

  function yRange(u, min, max) {
    return [0, Math.max(1, (max || 0) * 1.1)];
  }

  function clock(u, splits) {
    return splits.map((t) => new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit",
                                                                      second: "2-digit" }));
  }

  function lineOptions(def, width) {
    const ax = axes();
    ax[0].values = clock;  // one short line per tick: the page is about the last two minutes
    return {
      width, height: 170, legend: { live: true }, cursor: { points: { size: 6 } },
      scales: { x: { time: true }, y: { range: yRange } },
      axes: ax,
      series: [{}].concat(def.series.map((s) => ({
        label: s.label, stroke: s.color, width: 1.5, dash: s.dash, fill: s.fill, spanGaps: !!s.gaps,
        // Latency has no value in a second without traffic: dots keep lone seconds visible.
        points: def.dots ? { show: true, size: 3, fill: s.color } : { show: false }, value: fmtValue(s.fmt),
      }))),
    };
  }

  function barOptions(labels, width) {
    const ax = axes();
    ax[0].splits = () => labels.map((_, i) => i);
    ax[0].values = (u, splits) => splits.map((i) => labels[i] ?? "");
    return {
      width, height: 170, legend: { live: true }, cursor: { points: { show: false } },
      scales: { x: { time: false, range: () => [-0.5, labels.length - 0.5] }, y: { range: yRange } },
      axes: ax,
      series: [{ label: "batch size", value: (u, i) => (i == null ? "–" : labels[i]) }, {
        label: "requests", stroke: COLORS.ok, fill: COLORS.bars, width: 1,
        paths: uPlot.paths.bars({ size: [0.7, 64] }), points: { show: false }, value: fmtValue("int"),
      }],
    };
  }

  function chartWidth(cell) {
    return Math.max(240, cell.clientWidth - 16);
  }

  function cardId(task) {
    return "task-" + task.model + "--" + task.task;
  }

  function buildCard(task) {
    const stats = el("dl", { class: "dash-stats" });
    const badge = el("span", { class: "dash-badge" });
    const error = el("p", { class: "dash-error" });
    const grid = el("div", { class: "dash-grid" });
    const card = el("section", { class: "dash-section dash-task", id: cardId(task), "data-model": task.model },
      el("h2", {}, el("span", { class: "dash-model", text: task.model }), " / ",
        el("span", { class: "dash-taskname", text: task.task }),
        el("span", { class: "dash-pipeline", text: task.pipeline }), badge),
      error, stats, grid);
    const cells = {};
    for (const def of CHARTS) {
      const cell = el("div", { class: "dash-chart", "data-chart": def.id }, el("h3", { text: def.title }));
      grid.append(cell);
      cells[def.id] = cell;
    }
    document.getElementById("dash-tasks").append(card);
    return { card, stats, badge, error, cells, batchLabels: null };
  }

  function stat(label, value, title) {
    return el("div", { class: "dash-stat", title: title || "" }, el("dt", { text: label }), el("dd", { text: value }));
  }

  function updateCard(key, task, info) {
    const s = task.summary;
    const lat = s.latency_ms;
    info.badge.textContent = task.state;
    info.badge.className = "dash-badge dash-state-" + task.state;
    info.error.textContent = task.error || "";
    info.error.hidden = !task.error;
    info.stats.replaceChildren(
      stat("req/s", s.rps.toFixed(2), "answered per second over the last " + s.seconds + " s"),
      stat("answered (all web processes)", String(task.port_requests.total) + " (" + task.port_requests.errors +
        " errors)", "since the server started, every web process on this port (the /metrics counters)"),
      stat("p50 / p95 / p99", [lat.total.p50, lat.total.p95, lat.total.p99].map(fmtMs).join(" / ") + " ms"),
      stat("queue p95", fmtMs(lat.queue.p95) + " ms"),
      stat("compute p95", fmtMs(lat.compute.p95) + " ms"),
      stat("queued", task.queue_depth + " / " + task.max_queue_size, "items waiting / max_queue_size"),
      ...(task.version ? [stat("version", task.version, "live version, a switch in progress, a canary or shadow")] : []),
      stat("errors", String(s.errors), "last " + s.seconds + " s"),
      stat("cache hits", String(s.cache_hits || 0), "answered from the response cache, last " + s.seconds + " s"),
      stat("overloaded / unavailable / timeout",
        [s.rejected.overloaded, s.rejected.unavailable, s.rejected.timeout].join(" / "), "last " + s.seconds + " s"),
      ...(task.media ? [stat("media files / MB", task.media.items + " / " + (task.media.bytes / 1048576).toFixed(2),
        "images or clips accepted by this web process since it started")] : []),
    );
    const charts = state.charts[key] || (state.charts[key] = {});
    const series = Object.assign({}, task.series, { max: task.series.t.map(() => task.max_queue_size) });
    for (const def of CHARTS) {
      const cell = info.cells[def.id];
      if (def.bars) {
        const labels = task.summary.batch_sizes.labels;
        const data = [labels.map((_, i) => i), task.summary.batch_sizes.counts];
        if (!charts.batch || info.batchLabels !== labels.join()) {
          if (charts.batch) charts.batch.destroy();
          charts.batch = new uPlot(barOptions(labels, chartWidth(cell)), data, cell);
          info.batchLabels = labels.join();
        } else {
          charts.batch.setData(data);
        }
        continue;
      }
      const data = [series.t].concat(def.series.map((s) => series[s.key]));
      if (!charts[def.id]) charts[def.id] = new uPlot(lineOptions(def, chartWidth(cell)), data, cell);
      else charts[def.id].setData(data);
    }
  }

  function ago(seconds) {
    return seconds < 60 ? seconds.toFixed(1) + " s ago" : Math.round(seconds / 60) + " min ago";
  }

  function renderWorkers(workers) {
    document.getElementById("dash-workers-count").textContent = "(" + workers.length + " alive)";
    const body = document.querySelector("#dash-workers tbody");
    if (!workers.length) {
      body.replaceChildren(el("tr", {}, el("td", { colspan: "7", class: "dash-error", text:
        "No live worker: start one with `manage.py runworker inference`." })));
      return;
    }
    body.replaceChildren(...workers.map((w) => el("tr", {},
      el("td", { text: w.host }), el("td", { text: String(w.pid) }), el("td", { text: w.device }),
      el("td", {}, ...w.models.map((m) => el("span", {
        class: "dash-badge dash-state-" + m.state, title: m.error || m.device || "", text: m.name + ": " + m.state + (m.version ? " (v" + m.version + ")" : ""),
      }))),
      el("td", { text: String(w.queued) }),
      el("td", { text: ago(w.age_s) + (w.draining ? " (draining)" : ""), title: w.last_seen }),
      el("td", { text: new Date(w.started_at).toLocaleString() }))));
  }

  function render(data) {
    document.getElementById("dash-web").textContent = "this web process (" + data.web.host + ":" + data.web.pid +
      (data.web.processes > 1 ? "), one of " + data.web.processes + " on this port" : ")");
    renderWorkers(data.workers);
    const seen = new Set();
    for (const task of data.tasks) {
      const key = task.model + "/" + task.task;
      seen.add(key);
      const info = state.cards[key] || (state.cards[key] = buildCard(task));
      updateCard(key, task, info);
    }
    for (const key of Object.keys(state.cards)) {
      if (seen.has(key)) continue;
      Object.values(state.charts[key] || {}).forEach((c) => c.destroy());
      state.cards[key].card.remove();
      delete state.cards[key];
      delete state.charts[key];
    }
    if (!data.tasks.length) {
      document.getElementById("dash-tasks").replaceChildren(el("p", { text: "No model is registered yet." }));
    }
  }

  function setStatus(text, isError) {
    const node = document.getElementById("dash-status");
    node.textContent = text;
    node.className = "dash-status" + (isError ? " errornote" : "");
  }

  async function tick() {
    try {
      const response = await fetch(root.dataset.url, { credentials: "same-origin", cache: "no-store",
                                                        headers: { Accept: "application/json" } });
      if (response.status === 403) throw new Error("your session ended: log in again at /admin/login/");
      if (!response.ok) throw new Error("HTTP " + response.status);
      const data = await response.json();
      render(data);
      state.lastData = data;
      state.updates += 1;
      setStatus("Updated " + new Date(data.now * 1000).toLocaleTimeString() + " · " + data.workers_alive +
                " live worker(s) · " + data.tasks.length + " model task(s)", false);
    } catch (error) {
      state.failures += 1;
      state.lastError = String(error.message || error);
      setStatus("Could not refresh: " + state.lastError + " (retrying)", true);
    } finally {
      setTimeout(tick, pollMs);
    }
  }

  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      for (const [key, charts] of Object.entries(state.charts)) {
        for (const [id, chart] of Object.entries(charts)) {
          const cell = state.cards[key].cells[id];
          chart.setSize({ width: chartWidth(cell), height: 170 });
        }
      }
    }, 150);
  });

  tick();
})();
