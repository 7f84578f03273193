// mlstream dashboard. Lives on the WebSocket feed /v1/ws (stats every
// second, backups, recoveries, top-k and distinct changes); polls GET
// /v1/jobs (jobs declared or removed) and /metrics (rejected counts, and
// shed counts from a service whose status lacks them) every few seconds;
// draws each job's last minutes from GET /v1/jobs/{job}/history once; samples
// predictions and join matches with short-lived subscriptions instead of
// taking every one. Reconnects by itself and says so. A service with
// tokens answers 401: the page then asks for a read token, keeps it in
// sessionStorage (this tab, until it closes), refuses an admin token (GET
// /v1/whoami names a token's scopes), and sends it as "Authorization:
// Bearer" on fetches and as the WebSocket subprotocol "bearer.<token>"
// (next to "mlstream"), since a browser cannot set headers on a WebSocket.
// Whether a job's stats are late is judged on the server's clock (the
// stats' sample times, the Date of polls), never the browser's. A
// cluster node's Cluster panel is cluster.js's.
"use strict";

const HISTORY = 600;        // chart points per series: ten minutes of stats
const TICKER = 10;          // rows of the prediction and match tickers
const SAMPLE_EVERY = 2000;  // ms between ticker samples
const SAMPLE_WAIT = 1500;   // ms a sample subscription stays open at most
const POLL_EVERY = 5000;    // ms between polls of /v1/jobs and /metrics
const BACKOFF_MAX = 2000;   // ms between reconnection attempts, at most
const SILENCE = 10000;      // ms without a message before the feed is deemed dead
const KEEP = 20;            // recoveries listed per job
const BACKUPS = 5;          // last backups listed per job
const TOKEN_KEY = "mlstream.token"; // sessionStorage key of the read token
const TOP_FEATURES = 10;    // rows of a model's top features
const TOP_EVERY = 5000;     // ms between fetches of a model's top features, at least

// The feed's state.
let connected = false;   // the feed is open
let everConnected = false;
let retryMs = 250;
let lostAt = 0;          // when the feed went down (0: up)
let reconnectedAt = 0;   // the last reconnection, for the banner
let lastMsgAt = 0;
// The server's clock, in ms: the newest sample time of a stats message or
// Date of a poll. feedOpenedServer is its reading at the first message
// after the feed (re)opened (0 until then).
let serverClock = 0;
let feedOpenedServer = 0;
let feed = null;
const restarted = new Set(); // jobs whose recovery the banner reports

const $ = (root, sel) => root.querySelector(sel);
const $$ = (root, sel) => [...root.querySelectorAll(sel)];
const isNum = x => typeof x === "number" && isFinite(x);
const fmt = (x, d = 3) => isNum(x) ? x.toFixed(d) : "–";
const int = x => isNum(x) ? Math.round(x).toLocaleString("en-US") : "–";
const clock = t => (t === undefined || t === null) ? "–" : new Date(t).toLocaleTimeString("en-GB");
const clockMs = t => isNum(t) ? clock(t) + "." + String(new Date(t).getMilliseconds()).padStart(3, "0") : "–";
function bytes(x) {
  if (!isNum(x)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(x) >= 1024 && i < units.length - 1) { x /= 1024; i++; }
  return (i ? x.toFixed(1) : String(Math.round(x))) + " " + units[i];
}
// pct formats a share (0.0123 -> "1.2%").
const pct = x => !isNum(x) ? "–" : (100 * x).toFixed(Math.abs(x) < 0.1 ? 1 : 0) + "%";
// ms formats a duration in milliseconds, as ms or s.
const dur = x => !isNum(x) ? "–" : x < 1000 ? x.toFixed(0) + " ms" : (x / 1000).toFixed(1) + " s";
// sig formats a value whose scale is unknown (divergences, join sums).
const sig = x => !isNum(x) ? "–" : Math.abs(x) >= 1000 ? int(x) : Number(x.toPrecision(3)).toString();

function set(root, field, text) {
  for (const e of $$(root, `[data-f="${field}"]`)) e.textContent = text;
}
function bar(root, name, frac) {
  const b = $(root, `[data-bar="${name}"]`);
  if (!b) return;
  const f = isNum(frac) ? Math.max(0, Math.min(1, frac)) : 0;
  b.firstElementChild.style.width = (100 * f).toFixed(1) + "%";
  b.classList.toggle("hot", f > 0.8);
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function row(cells, classes = []) {
  const tr = el("tr");
  cells.forEach((c, i) => {
    const td = el("td", classes[i] || "");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    tr.appendChild(td);
  });
  return tr;
}
// ratio renders "value / limit" with a small bar.
function ratio(value, limit, f = sig) {
  const box = el("span", "ratio");
  box.appendChild(el("span", "", f(value) + " / " + f(limit)));
  const b = el("span", "bar");
  b.appendChild(el("i"));
  const frac = isNum(value) && isNum(limit) && limit > 0 ? Math.min(1, value / limit) : 0;
  b.firstChild.style.width = (100 * frac).toFixed(1) + "%";
  b.classList.toggle("hot", frac > 0.8);
  box.appendChild(b);
  return box;
}
function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// ---- charts (uPlot) ----

const COLORS = ["#2563eb", "#9ca3af", "#d97706", "#15803d"];
const CHART_H = 190;
const AXIS_FONT = "12px system-ui, sans-serif";
// Tick steps of the time axis, in seconds: whole seconds and minutes, so
// ticks read as clock times and never as milliseconds.
const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
const MIN_SPAN_S = 10; // the time axis spans at least this, from the first point on
// Tick steps of bytes: powers of two, so ticks read 16 KiB, not 19.5 KiB.
const BYTE_INCRS = Array.from({ length: 51 }, (_, i) => 2 ** i);
// Tick steps of counts: whole numbers only.
const WHOLE_INCRS = [1, 2, 5].flatMap(m => [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12].map(p => m * p)).sort((a, b) => a - b);

// hhmm and hhmmss are local clock times of Unix seconds.
const hhmmss = t => new Date(t * 1000).toLocaleTimeString("en-GB");
const hhmm = t => hhmmss(t).slice(0, 5);

// tick formats a y tick with as many decimals as the tick step needs, so
// neighbouring ticks never read the same ("1,990" four times).
function tick(v, step, unit = "") {
  let d = 0; // the decimals of the step: 2.5 needs one
  while (d < 6 && isNum(step) && step > 0 && Math.abs(Math.round(step * 10 ** d) - step * 10 ** d) > 1e-6 * step * 10 ** d) d++;
  return v.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }) + unit;
}
// Tick formatters by what a scale measures.
const TICKS = {
  num: (v, step) => tick(v, step),
  pct: (v, step) => tick(100 * v, 100 * step, "%"),
  bytes: (v, step) => {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0, m = Math.max(Math.abs(v), step);
    while (m >= 1024 && i < units.length - 1) { m /= 1024; v /= 1024; step /= 1024; i++; }
    return tick(v, step, " " + units[i]);
  },
};

// yRange keeps a y axis from zooming onto noise: it spans at least a
// tenth of the values' magnitude, starts at 0 for quantities that do
// (zero), and stays within fixed bounds when the scale has them.
function yRange(min, max, sc) {
  if (sc.fixed) return sc.fixed;
  if (!isNum(min) || !isNum(max)) return [0, 1];
  let lo = sc.zero ? Math.min(0, min) : min, hi = max;
  const floor = Math.max(Math.abs(lo), Math.abs(hi)) * 0.1 || (sc.whole ? 10 : 1);
  if (hi - lo < floor) {
    const mid = (lo + hi) / 2;
    [lo, hi] = [mid - floor / 2, mid + floor / 2];
    if (sc.zero && min >= 0 && lo < 0) [lo, hi] = [0, hi - lo];
  }
  const pad = (hi - lo) * 0.05;
  return [sc.zero && lo >= 0 ? lo : lo - pad, hi + pad];
}

let measureCtx = null;
// textWidth measures tick labels, so that axes are as wide as their
// labels and none is clipped.
function textWidth(texts) {
  measureCtx = measureCtx || document.createElement("canvas").getContext("2d");
  measureCtx.font = AXIS_FONT;
  return Math.max(0, ...(texts || []).map(t => measureCtx.measureText(String(t)).width));
}

// Chart is a uPlot chart over time, created once its box is visible and
// resized with it; points are buffered meanwhile. series are
// [{label, scale, dash, color}]; scales maps each scale to {label (the
// axis title, with its unit), ticks (a TICKS name), zero, fixed, fmt
// (legend values)}.
class Chart {
  constructor(box, series, scales) {
    this.box = box;
    this.series = series;
    this.scales = scales;
    this.data = [[], ...series.map(() => [])];
    this.plot = null;
  }
  push(tsMs, ...ys) {
    const d = this.data;
    d[0].push(tsMs / 1000);
    ys.forEach((y, i) => d[i + 1].push(isNum(y) ? y : null));
    if (d[0].length > HISTORY) for (const s of d) s.shift();
    this.changed();
  }
  // prepend adds rows [tsMs, ...ys] from before the first point (the
  // service's history of the job), oldest first.
  prepend(rows) {
    const d = this.data, first = d[0].length ? d[0][0] : Infinity;
    const old = rows.filter(r => r[0] / 1000 < first).slice(-HISTORY);
    if (!old.length) return;
    d.forEach((s, i) => s.unshift(...old.map(r => i ? (isNum(r[i]) ? r[i] : null) : r[0] / 1000)));
    while (d[0].length > HISTORY) for (const s of d) s.shift();
    this.changed();
  }
  changed() {
    this.box.dataset.points = this.data[0].length;
    this.draw();
  }
  // gap marks a restart: lines do not join across it.
  gap(tsMs) {
    if (this.data[0].length) this.push(tsMs, ...this.series.map(() => null));
  }
  draw() {
    if (!this.plot) {
      if (!this.box.offsetParent || this.box.clientWidth === 0) return;
      this.create();
    }
    this.plot.setData(this.data);
  }
  // latest is the index of the newest point with a value of series i:
  // the legend shows it while the cursor is off the chart.
  latest(i) {
    const s = this.data[i];
    for (let k = s.length - 1; k >= 0; k--) if (s[k] !== null) return k;
    return -1;
  }
  // extent is the least and greatest value of the series on scale sc,
  // from the data itself: uPlot's own extent lags behind data that grows
  // in place.
  extent(sc) {
    let lo = Infinity, hi = -Infinity;
    this.series.forEach((s, i) => {
      if ((s.scale || "y") !== sc) return;
      for (const v of this.data[i + 1]) if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    });
    return lo <= hi ? [lo, hi] : [null, null];
  }
  create() {
    const names = [...new Set(this.series.map(s => s.scale || "y"))];
    const axes = [{
      label: "local time", labelSize: 16, labelFont: AXIS_FONT, font: AXIS_FONT, stroke: "#6b7280", grid: { stroke: "#eef0f3" },
      incrs: TIME_INCRS, space: 70, values: (u, vs, ai, space, incr) => vs.map(v => incr >= 60 ? hhmm(v) : hhmmss(v)),
    }];
    // The time axis starts at the first point (a new job's chart does not
    // open on empty minutes) and spans at least MIN_SPAN_S to the right:
    // from the data, since uPlot widens a single point to a day on either
    // side. The points' times are the server's.
    const xs = this.data[0];
    const scales = { x: { time: true, range: () => {
      const lo = xs.length ? xs[0] : Math.floor(serverClock / 1000), hi = xs.length ? xs[xs.length - 1] : lo;
      // A second to the right: the newest point is not cut in half.
      return [lo, Math.max(hi + 1, lo + MIN_SPAN_S)];
    } } };
    names.forEach((sc, i) => {
      const conf = this.scales[sc] || {};
      const ticks = TICKS[conf.ticks || "num"];
      scales[sc] = { range: () => yRange(...this.extent(sc), conf) };
      axes.push({
        scale: sc, incrs: conf.ticks === "bytes" ? BYTE_INCRS : conf.whole ? WHOLE_INCRS : undefined, side: i ? 1 : 3, label: conf.label, labelSize: 16, labelFont: AXIS_FONT, font: AXIS_FONT, gap: 4,
        stroke: "#6b7280", grid: { show: i === 0, stroke: "#eef0f3" },
        values: (u, vs, ai, space, incr) => vs.map(v => ticks(v, incr)),
        ticks: { size: 5 }, size: (u, values) => Math.ceil(textWidth(values)) + 5 + 4 + 8,
      });
    });
    const last = i => (u, v, si, idx) => {
      if (idx === null || idx === undefined) { const k = this.latest(i); v = k < 0 ? null : this.data[i][k]; }
      return v;
    };
    const opts = {
      width: this.box.clientWidth, height: CHART_H,
      scales,
      series: [{ label: "time", value: (u, v, si, idx) => { v = last(0)(u, v, si, idx); return v === null ? "no data yet" : hhmmss(v); } },
        ...this.series.map((s, i) => ({
          label: s.label, scale: s.scale || "y", stroke: s.color || COLORS[i], width: 2, dash: s.dash, spanGaps: false,
          // A markers-only series (drifts): no line, a dot at each value.
          ...(s.markers ? { paths: () => null, points: { show: true, size: 9, fill: s.color || COLORS[i] } } : {}),
          value: (u, v, si, idx) => { v = last(i + 1)(u, v, si, idx); return v === null ? "–" : ((this.scales[s.scale || "y"] || {}).fmt || sig)(v); },
        }))],
      axes,
      cursor: { drag: { x: false, y: false } },
      legend: { live: true },
    };
    this.plot = new uPlot(opts, this.data, this.box);
    this.box.uplot = this.plot; // for the browser tests
    new ResizeObserver(() => {
      const w = this.box.clientWidth;
      if (w > 0 && w !== this.plot.width) this.plot.setSize({ width: w, height: CHART_H });
    }).observe(this.box);
  }
}

// ---- jobs ----

const jobs = new Map(); // name -> JobView
// Kinds with a panel of their own; any other kind gets its status section
// (the fields it adds to the status) as a table.
const knownKinds = new Set(["logreg", "heavy_hitters", "distinct", "join"]);
// The engine's fields of a job status; the others are the kind's section.
const statusFields = new Set(["name", "kind", "input", "streams", "spec", "created", "accepted", "processed", "rates",
  "queue_depth", "queue_capacity", "latency", "partitions", "memory_estimate_bytes", "ft", "group", "shed",
  "held_back", "held_back_total", "held_back_ms", "elastic", "health"]);
const metricsCounts = { rejected: new Map(), shed: new Map() }; // from /metrics

class JobView {
  constructor(name, kind) {
    this.name = name;
    this.kind = kind || "";
    this.el = document.getElementById("job-tpl").content.firstElementChild.cloneNode(true);
    this.el.dataset.job = name;
    this.el.id = "job-" + name;
    this.el.dataset.kind = this.kind;
    $(this.el, ".name").textContent = name;
    $(this.el, ".kind").textContent = this.kind;
    this.item = document.getElementById("joblist-tpl").content.firstElementChild.cloneNode(true);
    this.item.dataset.job = name;
    this.item.dataset.kind = this.kind;
    $(this.item, ".name").textContent = name;
    $(this.item, ".name").href = "#job-" + encodeURIComponent(name);
    $(this.item, ".kind").textContent = this.kind;
    this.charts = {};
    this.recoveries = new Map(); // at -> report
    this.backups = [];
    this.status = null;
    this.statsAt = 0;  // the server's time of the last stats message
    this.polledAt = 0; // the server's time of the last poll of /v1/jobs that listed the job
    this.sampleBroken = {}; // type -> true when the feed refused it
    this.matchesSampled = false;
  }
  chart(name) {
    if (this.charts[name]) return this.charts[name];
    const box = $(this.el, `[data-chart="${name}"]`);
    const n = { ticks: "num", zero: true }, b = { ticks: "bytes", zero: true, fmt: bytes }, o = { ticks: "pct", zero: true, fmt: pct };
    const c = {
      rate: () => new Chart(box, [{ label: "events/s" }, { label: "queued", scale: "q" }],
        { y: { ...n, label: "events/s", fmt: sig }, q: { ...n, whole: true, label: "queued events", fmt: int } }),
      lat: () => new Chart(box, [{ label: "p50" }, { label: "p99", color: "#b91c1c" }], { y: { ...n, label: "latency, ms", fmt: x => sig(x) + " ms" } }),
      acc: () => new Chart(box, [{ label: "recent" }, { label: "whole run", dash: [5, 4] }, { label: "drift", markers: true, color: "#b91c1c" }],
        { y: { ticks: "num", fixed: [0, 1], label: "accuracy", fmt: x => fmt(x, 3) } }),
      loss: () => new Chart(box, [{ label: "recent" }, { label: "whole run", dash: [5, 4] }], { y: { ...n, label: "log loss", fmt: x => fmt(x, 3) } }),
      distinct: () => new Chart(box, [{ label: "estimate" }, { label: "lower", dash: [3, 3] }, { label: "upper", dash: [3, 3] }],
        { y: { ticks: "num", whole: true, label: "distinct values", fmt: int } }),
      join: () => new Chart(box, [{ label: "matches/s" }, { label: "state", scale: "b" }],
        { y: { ...n, label: "matches/s", fmt: sig }, b: { ...b, label: "state bytes" } }),
      backups: () => new Chart(box, [{ label: "backups" }, { label: "bytes", scale: "b" }],
        { y: { ...n, whole: true, label: "backups since start", fmt: int }, b: { ...b, label: "bytes written" } }),
      div: () => new Chart(box, [{ label: "divergence" }, { label: "θ", dash: [5, 4], color: "#b91c1c" }], { y: { ...n, label: "divergence", fmt: sig } }),
      group: () => new Chart(box, [{ label: "group size" }, { label: "overhead, last", scale: "o", color: "#d97706" },
        { label: "total", scale: "o", color: "#d97706", dash: [5, 4] }, { label: "low", scale: "o", color: "#9ca3af", dash: [2, 3] },
        { label: "high", scale: "o", color: "#b91c1c", dash: [2, 3] }], { y: { ...n, label: "group size, batches", fmt: sig }, o: { ...o, label: "coordination overhead" } }),
    }[name]();
    this.charts[name] = c;
    return c;
  }
  block(name, show) {
    const b = $(this.el, `[data-block="${name}"]`);
    if (b && b.hidden === show) {
      b.hidden = !show;
      if (show) for (const c of Object.values(this.charts)) c.draw();
    }
    return b;
  }

  // update renders a JobStatus; chart says whether to add chart points
  // (stats messages do, polls do not, so every point is one second).
  update(s, ts, chart) {
    this.status = s;
    if (s.kind && s.kind !== this.kind) {
      this.kind = s.kind;
      this.el.dataset.kind = this.item.dataset.kind = s.kind;
      $(this.el, ".kind").textContent = $(this.item, ".kind").textContent = s.kind;
    }
    const created = s.created;
    if (chart && this.created && created && created !== this.created) {
      for (const c of Object.values(this.charts)) c.gap(ts - 1);
    }
    this.created = created || this.created;
    this.el.dataset.created = this.created || "";
    const e = this.el, rates = s.rates || {}, lat = s.latency || {};
    const streams = this.streams(s);
    if (streams.length) $(e, ".input").textContent = "← " + streams.join(" ⋈ ");
    for (const root of [e, this.item]) {
      set(root, "rate", int(rates.processed_per_s));
      set(root, "depth", int(s.queue_depth));
      set(root, "p99", fmt(lat.p99_ms, 2));
    }
    set(e, "accepted_rate", int(rates.accepted_per_s));
    set(e, "capacity", int(s.queue_capacity));
    set(e, "p50", fmt(lat.p50_ms, 2));
    set(e, "processed", int(s.processed));
    set(e, "stream", streams.join(", ") || "–");
    this.counts(s);
    if (chart) {
      this.chart("rate").push(ts, rates.processed_per_s, s.queue_depth);
      this.chart("lat").push(ts, lat.p50_ms, lat.p99_ms);
    }
    this.coordination(s, ts, chart);
    if (s.model || s.metrics) this.logreg(s, ts, chart);
    if (s.topk) this.topk(s.topk);
    if (s.distinct) this.distinct(s.distinct, ts, chart);
    if (s.join) this.join(s.join, ts, chart, s);
    if (s.kind && !knownKinds.has(s.kind)) this.section(s);
    if (s.ft) this.ft(s.ft, s, ts, chart);
    if (s.elastic) this.elastic(s.elastic);
    this.health();
  }

  // elastic shows the partition count, the last rescales, the autoscaler's
  // last decision and the skew. The block shows once a job was rescaled,
  // has an autoscaler or has more than one partition.
  elastic(x) {
    const auto = x.autoscale, last = Array.isArray(x.last) ? x.last : [];
    const e = this.block("elastic", !!(auto || last.length || x.partitions > 1));
    set(e, "el_parts", int(x.partitions));
    set(e, "el_max", int(auto ? auto.effective_max : x.max_partitions));
    set(e, "el_rescales", int(x.rescales));
    set(e, "el_gen", int(x.generation));
    set(e, "el_pause", last.length ? fmt(last[last.length - 1].pause_ms, 3) : "–");
    const sk = x.skew || {};
    set(e, "el_imbalance", isNum(sk.imbalance) && sk.imbalance > 0 ? fmt(sk.imbalance, 3) : "–");
    const hot = Array.isArray(sk.hot_keys) ? sk.hot_keys.slice(0, 5) : [];
    set(e, "el_hot", hot.length ? "hottest keys (sampled): " + hot.map(k => `${k.key} ≈${int(k.estimate)} → partition ${k.partition}`).join(", ") : "");
    const card = $(e, '[data-card="autoscale"]');
    card.hidden = !auto;
    if (auto) {
      const ds = Array.isArray(auto.decisions) ? auto.decisions : [];
      const d = ds[ds.length - 1];
      set(e, "el_note", `autoscale ${auto.min}–${auto.max}, target utilization ${fmt(auto.target_utilization, 2)}, cooldown ${auto.cooldown}`);
      set(e, "el_auto", d ? `${d.action} ${int(d.partitions)} → ${int(d.target)}` : "no decision yet");
      set(e, "el_auto_reason", d ? `last decision ${clock(Date.parse(d.at))}: ${d.reason}` + (d.error ? ` (failed: ${d.error})` : "") : "autoscaler");
    } else {
      set(e, "el_note", "rescaled with PATCH /v1/jobs/{job}");
    }
    fill($(e, "table.rescales tbody"), last.slice().reverse().map(r => row([clock(Date.parse(r.at)), `${int(r.from)} → ${int(r.to)}`,
      r.reason, fmt(r.pause_ms, 3), fmt(r.backup_ms, 3)], ["", "", "", "num", "num"])));
  }

  // streams are the job's inputs: one, or a join's two.
  streams(s) {
    return Array.isArray(s.streams) && s.streams.length ? s.streams : s.input ? [s.input] : [];
  }

  // counts shows rejected and shed: from the status when it has them,
  // else from /metrics (rejections are counted per stream). A job with
  // load shedding has shed in its status: the count, its share of the
  // events offered and what the kind drops.
  counts(s) {
    const s2 = s || this.status || {};
    const rej = isNum(s2.rejected) ? s2.rejected
      : this.streams(s2).reduce((n, st) => n + (metricsCounts.rejected.get(st) || 0), 0);
    const sh = s2.shed && typeof s2.shed === "object" ? s2.shed : null;
    const shed = sh && isNum(sh.shed) ? sh.shed : isNum(s2.shed) ? s2.shed : metricsCounts.shed.get(this.name);
    set(this.el, "rejected", isNum(rej) ? int(rej) : "0");
    set(this.el, "shed", isNum(shed) ? int(shed) : "0");
    set(this.el, "shed_frac", sh && isNum(sh.fraction) ? pct(sh.fraction) : "");
    let note = "shed";
    if (sh) {
      note = "shed of the events offered" + (sh.max_delay ? `, to keep queueing under ${sh.max_delay}` : "") + (sh.drops ? `; drops ${sh.drops}` : "");
      if (isNum(sh.extra_weight) && sh.extra_weight > 0) note += `; ${int(sh.extra_weight)} extra weight on the events kept`;
      if (isNum(sh.late) && sh.late > 0) note += `; ${int(sh.late)} of them shed late (accepted, then waited past max_delay/2)`;
      if (isNum(sh.overdue) && sh.overdue > 0) note += `; ${int(sh.overdue)} events served after waiting past ${sh.max_delay || "max_delay"}`;
    } else if (s2.group && !(shed > 0)) {
      note = "shed (load shedding off)"; // a service that reports shedding when on
    }
    set(this.el, "shed_note", note);
    const card = $(this.el, '[data-card="shed"]');
    card.classList.toggle("wide", !!sh);
    card.dataset.on = String(!!sh);
  }

  // coordination shows the group scheduling (size, mode, the overhead
  // against its bounds, per partition with drain rates) and the senders
  // held back; each part only when the status has it.
  coordination(s, ts, chart) {
    const e = this.el, g = s.group && typeof s.group === "object" ? s.group : null;
    if (g) {
      set(e, "group_size", sig(g.size));
      set(e, "group_mode", g.mode ? "(" + g.mode + ")" : "");
      set(e, "group_overhead", pct(g.overhead));
      set(e, "group_total", pct(g.total_overhead));
      set(e, "group_bounds", isNum(g.low) && isNum(g.high) ? `[${pct(g.low)}, ${pct(g.high)}]` : "–");
      set(e, "group_groups", isNum(g.groups) ? `(${int(g.groups)} groups measured)` : "");
      const trouble = healthReasons(s).find(r => r.code === "coordination");
      set(e, "group_note", trouble ? trouble.why : "");
      const state = x => !isNum(x) || !isNum(g.low) || !isNum(g.high) ? "" : x > g.high ? "high" : x < g.low ? "low" : "in";
      const why = { high: "above the bounds: an auto group grows", low: "below the bounds: an auto group shrinks (down to 1)", in: "within the bounds", "": "" };
      for (const [f, x] of [["group_overhead", g.overhead], ["group_total", g.total_overhead]]) {
        const t = $(e, `[data-f="${f}"]`);
        t.dataset.state = state(x);
        t.title = why[state(x)];
      }
      gauge($(e, '[data-gauge="overhead"]'), g, state(g.overhead));
      const fig = $(e, '[data-fig="group"]');
      if (fig.hidden) {
        fig.hidden = false;
        this.chart("group").draw();
      }
      if (chart) this.chart("group").push(ts, g.size, g.overhead, g.total_overhead, g.low, g.high);
    }
    const parts = Array.isArray(s.partitions) ? s.partitions : [];
    $(e, "details.coord").hidden = !parts.length;
    fill($(e, "table.groups tbody"), parts.map(p => {
      const pg = p.group || {};
      const over = el("span", "", pct(pg.overhead));
      if (isNum(pg.overhead) && isNum(pg.low) && isNum(pg.high)) over.dataset.state = pg.overhead > pg.high ? "high" : pg.overhead < pg.low ? "low" : "in";
      return row([String(p.partition ?? "–"), sig(pg.size) + (pg.mode === "fixed" ? " (fixed)" : ""), over, pct(pg.total_overhead),
        int(pg.groups), sig(p.drain_rate), int(p.queue_depth), int(p.held_back)], ["", "num", "num", "num", "num", "num", "num", "num"]);
    }));
    set(e, "held_back", isNum(s.held_back) ? int(s.held_back) : "–");
    set(e, "held_back_total", isNum(s.held_back_total) ? `${int(s.held_back_total)} times, ${dur(s.held_back_ms)} in all` : "–");
    const hb = $(e, '[data-f="held_back"]');
    hb.dataset.state = s.held_back > 0 ? "high" : "";
  }

  // section renders the status section of a kind this page has no panel
  // for: the fields the kind adds to the status, as a key/value table.
  section(s) {
    let b = $(this.el, '[data-block="section"]');
    if (!b) {
      b = el("div", "block");
      b.dataset.block = "section";
      b.append(el("h3", "", s.kind), el("div", "scroll"));
      const t = el("table", "section");
      t.append(el("thead"), el("tbody"));
      t.tHead.append(row(["field", "value"]));
      $(b, ".scroll").append(t);
      const ft = $(this.el, '[data-block="ft"]');
      this.el.insertBefore(b, ft);
    }
    const rows = Object.keys(s).filter(k => !statusFields.has(k)).sort().map(k => {
      const v = s[k];
      const text = v !== null && typeof v === "object" ? JSON.stringify(v) : String(v);
      return row([k, text.length > 300 ? text.slice(0, 300) + "…" : text], ["", "value"]);
    });
    b.hidden = !rows.length;
    fill($(b, "tbody"), rows);
  }

  logreg(s, ts, chart) {
    const e = this.block("logreg", true);
    const m = s.model || {}, all = (s.metrics || {}).all || {}, rec = (s.metrics || {}).recent || {};
    set(e, "version", int(m.version));
    set(e, "weights", int(m.nonzero_weights));
    set(e, "acc_recent", fmt(rec.accuracy));
    set(e, "acc_all", fmt(all.accuracy));
    set(e, "loss_recent", fmt(rec.log_loss));
    set(e, "loss_all", fmt(all.log_loss));
    set(e, "auc_recent", fmt(rec.auc));
    set(e, "labelled", int(all.count));
    this.decisions(e, all, rec, s.drift);
    this.delayedLabels(e, s.labels);
    this.topFeatures(e, m.version);
    const c = s.consistency && typeof s.consistency === "object" ? s.consistency : null;
    $(e, '[data-card="consistency"]').hidden = !c;
    if (c) {
      set(e, "consistency", (c.model || "–") + (c.model === "ssp" && isNum(c.staleness) ? " ≤ " + c.staleness : ""));
      const note = {
        async: "consistency: async, never waits",
        bsp: "consistency: bsp, every round waits for all busy partitions",
        ssp: `consistency: ssp, at most ${isNum(c.staleness) ? c.staleness : "?"} rounds ahead of the slowest`,
      }[c.model] || "consistency of model averaging";
      const spread = !isNum(c.min_round) || !isNum(c.max_round) ? ""
        : c.min_round === c.max_round ? `; round ${int(c.max_round)} on every partition`
        : `; rounds ${int(c.min_round)} (slowest) to ${int(c.max_round)} (fastest)`;
      const waits = isNum(c.waits) && (c.model !== "async" || c.waits > 0)
        ? `; waited ${int(c.waits)} times${isNum(c.waited_ms) ? ", " + dur(c.waited_ms) : ""}` : "";
      set(e, "consistency_note", note + spread + waits);
    }
    if (chart && s.metrics) {
      // A drift found since the last point is marked on the recent curve.
      const drifts = s.drift && isNum(s.drift.drifts) ? s.drift.drifts : 0;
      const drifted = isNum(this.lastDrifts) && drifts > this.lastDrifts;
      this.lastDrifts = drifts;
      this.chart("acc").push(ts, rec.accuracy, all.accuracy, drifted ? rec.accuracy : null);
      this.chart("loss").push(ts, rec.log_loss, all.log_loss);
    }
  }

  // decisions shows precision, recall and F1 at the threshold 0.5 and the
  // drifts found; their cards are added here, once, beside the others.
  decisions(e, all, rec, drift) {
    const cards = [["prf_recent", "precision / recall / F1, recent"], ["prf_all", "precision / recall / F1, whole run"],
      ["drifts", "drifts (Page-Hinkley, log loss)"]];
    const before = $(e, '[data-card="consistency"]');
    for (const [f, label] of cards) {
      if ($(e, `[data-f="${f}"]`)) continue;
      const card = el("div", "card"), b = el("b", "", "–");
      b.dataset.f = f;
      card.append(b, el("span", "", label));
      before.parentNode.insertBefore(card, before);
    }
    const prf = m => isNum(m.precision) ? `${fmt(m.precision, 2)} / ${fmt(m.recall, 2)} / ${fmt(m.f1, 2)}` : "–";
    set(e, "prf_recent", prf(rec));
    set(e, "prf_all", prf(all));
    set(e, "drifts", drift && isNum(drift.drifts) ? int(drift.drifts) : "–");
    this.calibration(e, rec);
  }

  // delayedLabels shows the predictions held for delayed labels and how
  // labels fared, once the job has held any: a card beside the others.
  delayedLabels(e, l) {
    let card = $(e, '[data-card="labels"]');
    if (!l || !(l.held > 0)) {
      if (card) card.hidden = true;
      return;
    }
    if (!card) {
      card = el("div", "card wide");
      card.dataset.card = "labels";
      const b = el("b", "", "–"), note = el("span", "", "");
      b.dataset.f = "labels_pending";
      note.dataset.f = "labels_note";
      card.append(b, note);
      const before = $(e, '[data-card="consistency"]');
      before.parentNode.insertBefore(card, before);
    }
    card.hidden = false;
    set(e, "labels_pending", `${int(l.pending)} held`);
    const lost = ["unknown", "expired", "evicted", "duplicates"].filter(k => l[k] > 0).map(k => `${int(l[k])} ${k}`);
    set(e, "labels_note", `delayed labels: ${int(l.joined)} of ${int(l.held)} joined` + (lost.length ? "; " + lost.join(", ") : "") +
      (isNum(l.pending_bytes) && isNum(l.pending_max_bytes) ? `; ${bytes(l.pending_bytes)} of ${bytes(l.pending_max_bytes)}` : ""));
  }

  // topFeatures lists the strongest weights by feature name (the model
  // query with ?top=), fetched again when the model's version changed and
  // TOP_EVERY passed: a query scans every weight.
  topFeatures(e, version) {
    const now = Date.now();
    // Only for jobs the service lists (polledAt): statuses alone may name
    // a job that has no query.
    if (!this.polledAt || this.topBusy || version === this.topVersion || now - (this.topAt || 0) < TOP_EVERY) return;
    this.topBusy = true;
    this.topAt = now;
    apiFetch("/v1/jobs/" + encodeURIComponent(this.name) + "/model?top=" + TOP_FEATURES)
      .then(r => r.ok ? r.json() : null)
      .then(v => {
        if (!v || !Array.isArray(v.top)) return;
        this.topVersion = version;
        const b = $(e, '[data-f="top_features"]');
        b.hidden = false;
        const big = Math.max(1e-12, ...v.top.map(w => Math.abs(w.weight)));
        fill($(b, "tbody"), v.top.map(w => {
          const names = (w.names || []).map(n => n.name + (isNum(n.count) && n.count > 0 ? ` (${int(n.count)})` : "")).join(", ");
          const bar = ratio(Math.abs(w.weight), big);
          bar.firstChild.textContent = (w.weight < 0 ? "−" : "+") + fmt(Math.abs(w.weight), 3);
          bar.lastChild.classList.remove("hot");
          bar.classList.add(w.weight < 0 ? "neg" : "pos");
          return row([names || `slot ${w.slot} (no name seen)`, bar, w.collision ? "collision" : ""], ["", "num", ""]);
        }));
        set(b, "top_note", `model version ${int(v.version)}; names sampled 1 event in ${int(v.names_sampled_every)}` +
          (v.untracked_names > 0 ? `; ${int(v.untracked_names)} names not recorded (names_slots full)` : ""));
      })
      .catch(() => {})
      .finally(() => { this.topBusy = false; });
  }

  // calibration is the recent window's table of predicted against
  // observed rates, folded under the cards.
  calibration(e, rec) {
    let d = $(e, '[data-f="calibration"]');
    if (!d) {
      d = el("details");
      d.dataset.f = "calibration";
      const table = el("table");
      table.append(el("thead"), el("tbody"));
      table.tHead.append(row(["predicted p", "events", "mean predicted", "observed rate"], ["", "num", "num", "num"]));
      const scroll = el("div", "scroll"); // narrow screens scroll the table, not the page
      scroll.append(table);
      d.append(el("summary", "", "calibration, recent window"), scroll);
      const cards = $(e, ".cards");
      cards.parentNode.insertBefore(d, cards.nextSibling);
    }
    const bins = Array.isArray(rec.calibration) ? rec.calibration : [];
    fill($(d, "tbody"), bins.map(b => row([`${fmt(b.lo, 1)}–${fmt(b.hi, 1)}`, int(b.count),
      b.count ? fmt(b.mean_predicted) : "–", b.count ? fmt(b.observed_rate) : "–"], ["", "num", "num", "num"])));
  }

  predictions(msgs) {
    const body = $(this.el, '[data-ticker="prediction"] tbody');
    fill(body, msgs.slice(-TICKER).reverse().map(m => {
      const pb = ratio(m.p, 1, x => fmt(x, 3));
      pb.firstChild.textContent = fmt(m.p, 3);
      pb.lastChild.classList.remove("hot");
      let label = m.label ?? "–";
      if (m.label === 0 || m.label === 1) label += (m.p >= 0.5) === (m.label === 1) ? " ✓" : " ✗";
      return row([clockMs(m.ts), m.key ?? "–", pb, label, int(m.model_version)]);
    }));
    set(this.el, "ticker_note", `(${msgs.length ? "sample at " + clock(Date.now()) : "none in the last sample"}, every ${SAMPLE_EVERY / 1000} s)`);
  }

  topk(t) {
    const e = this.block("topk", true);
    const items = t.items || [];
    set(e, "k", String(items.length));
    set(e, "topk_window", t.start ? `window ${clockMs(t.start)} – ${clockMs(t.end)} (event time)` : (t.window === "current" ? "whole stream" : t.window || ""));
    let note = `${int(t.total)} values counted; any item not listed occurs at most ${int(t.max_untracked)} times; late ${int(t.late)}, dropped ${int(t.dropped)}.`;
    if (t.shed > 0 || t.extra_weight > 0) {
      note += ` Load shedding dropped ${int(t.shed || 0)} events and counted those kept with ${int(t.extra_weight || 0)} extra weight: the bounds are widened by both.`;
    }
    set(e, "topk_note", note);
    const top = Math.max(1, ...items.map(it => it.upper || 0));
    fill($(e, "table.topk tbody"), items.map(it => {
      const r = el("span", "range");
      const inner = el("i");
      inner.style.left = (100 * (it.lower || 0) / top).toFixed(1) + "%";
      inner.style.width = Math.max(0.5, 100 * ((it.upper || 0) - (it.lower || 0)) / top).toFixed(1) + "%";
      const fillBar = el("b");
      fillBar.style.width = (100 * (it.lower || 0) / top).toFixed(1) + "%";
      r.append(fillBar, inner);
      return row([it.key, int(it.estimate), int(it.lower), int(it.upper), r], ["", "num", "num", "num", "range"]);
    }));
  }

  distinct(d, ts, chart) {
    const e = this.block("distinct", true);
    set(e, "distinct", int(d.estimate));
    set(e, "distinct_err", isNum(d.std_error) ? fmt(100 * d.std_error, 2) + "%" : "–");
    set(e, "distinct_low", int(d.lower));
    set(e, "distinct_high", int(d.upper));
    set(e, "distinct_window", d.start ? `window ${clockMs(d.start)} – ${clockMs(d.end)} (event time)` : "whole stream");
    set(e, "distinct_note", `late ${int(d.late)}, dropped ${int(d.dropped)}`);
    if (chart) this.chart("distinct").push(ts, d.estimate, d.lower, d.upper);
  }

  join(j, ts, chart, s = {}) {
    const e = this.block("join", true);
    set(e, "matches", int(j.matches));
    set(e, "match_rate", sig(j.match_rate));
    set(e, "state_tuples", int(j.state_tuples));
    set(e, "state_bytes", bytes(j.state_bytes) + (isNum(j.max_state_bytes) ? " / " + bytes(j.max_state_bytes) : ""));
    bar(e, "state", isNum(j.max_state_bytes) && j.max_state_bytes > 0 ? j.state_bytes / j.max_state_bytes : 0);
    const ev = evictedShare(j), nparts = (s.partitions || []).length;
    // max_state is split over the partitions: one whose share is full
    // evicts while the sum reads far from full.
    set(e, "state_note", "state of max_state" + (nparts > 1 ? `, split over ${nparts} partitions: a partition evicts when its share is full` : ""));
    $(e, '[data-bar="state"]').classList.toggle("hot", ev.evicted > 0 || $(e, '[data-bar="state"]').classList.contains("hot"));
    set(e, "evictions", int(ev.evicted) + (ev.share >= 0.001 ? ` (${pct(ev.share)} of seen)` : ""));
    set(e, "expired", int(j.expired));
    set(e, "late", int(j.late));
    set(e, "seen", int(j.seen) + (isNum(j.sampled) && j.sampled !== j.seen ? ` (${int(j.sampled)} sampled)` : ""));
    set(e, "join_lost", isNum(j.lost) ? sig(j.lost) : "0");
    const est = j.estimate || {};
    set(e, "join_window", isNum(est.window_start) ? `window ${clockMs(est.window_start)} – ${clockMs(est.window_end)}` : "");
    // Tuples evicted before their window closed took matches with them:
    // the estimate and low stand, and the high end allows for those
    // matches at the window's rate (an estimate, not a bound).
    const incomplete = est.complete === false;
    fill($(e, "table.estimates tbody"), ["count", "sum", "avg"].filter(k => est[k]).map(k =>
      row([k.toUpperCase(), sig(est[k].estimate), sig(est[k].low), incomplete ? sig(est[k].high) + " (with evicted)" : sig(est[k].high)], ["", "num", "num", "num"])));
    set(e, "join_note", joinNote(est, ev));
    if (chart) this.chart("join").push(ts, j.match_rate, j.state_bytes);
    // The sampled match feed is livelier; the status' recent list stands in.
    if (!this.matchesSampled && Array.isArray(j.recent)) this.matches(j.recent, "from the job's status");
  }

  matches(list, note) {
    fill($(this.el, '[data-ticker="match"] tbody'), list.slice(-TICKER).reverse().map(m => row([
      m.key ?? "–", clockMs(m.left_ts), clockMs(m.right_ts),
      isNum(m.left_ts) && isNum(m.right_ts) ? int(m.right_ts - m.left_ts) : "–", sig(m.left_value), sig(m.right_value),
    ], ["", "", "", "num", "num", "num"])));
    set(this.el, "match_note", "(" + note + ")");
  }

  ft(f, s, ts, chart) {
    const e = this.block("ft", true);
    const st = f.state_thresholds || {}, pt = f.partition_thresholds || {}, b = f.backups || {};
    const wc = f.worst_case || {}, pr = f.promise || {};
    const parts = f.partitions || [];
    set(e, "ft_mode", "mode " + (f.mode || "–") + (f.bounds ? ` · Θ ${sig(f.bounds.max_divergence)}, L ${int(f.bounds.max_pending)}, Γ ${int(f.bounds.max_unacked)}` : ""));
    // logreg's state is one unit (the global model); the other kinds keep
    // one unit per partition, each with its own θ, and report the sum.
    const units = Array.isArray(f.units) ? f.units : null;
    const n = units ? units.length : (s.kind === "logreg" ? 1 : Math.max(1, parts.length));
    const theta = isNum(st.theta) ? st.theta * n : undefined;
    set(e, "ft_div", sig(f.divergence) + " / " + sig(theta));
    set(e, "ft_div_label", n > 1 ? `state divergence, sum of ${n} partitions / ${n}·θ` : "state divergence / θ");
    bar(e, "div", theta > 0 ? f.divergence / theta : 0);
    set(e, "ft_risk", int(wc.events) + " / " + int(pr.events));
    bar(e, "risk", pr.events > 0 ? wc.events / pr.events : 0);
    set(e, "ft_state", sig(wc.state) + " / " + sig(pr.state));
    set(e, "ft_backups", int(b.full) + " + " + int(b.delta));
    set(e, "ft_bytes", bytes(b.bytes));
    set(e, "ft_kept", bytes(b.stored_bytes));
    set(e, "ft_last", b.last ? clock(Date.parse(b.last)) : "none yet");
    set(e, "ft_failures", int(f.failures));
    set(e, "ft_errors", int(b.errors));
    const queued = new Map((s.partitions || []).map(p => [p.partition, p.queue_depth]));
    const unitOf = new Map((units || []).map(u => [u.partition, u]));
    const rows = [];
    if (!units && n === 1) rows.push(row(["global model", ratio(f.divergence, st.theta), "", "", "", "", ""]));
    for (const p of parts) {
      const u = unitOf.get(p.partition);
      const div = u ? ratio(u.divergence, u.theta ?? st.theta) : n > 1 ? "in the sum above" : "in the global model";
      rows.push(row([String(p.partition), div, ratio(p.pending, pt.l, int), ratio(p.unacked, pt.gamma, int),
        int(queued.get(p.partition)), bytes(p.item_log_bytes), int(p.logged)], ["", "", "", "", "num", "num", "num"]));
    }
    fill($(e, "table.parts tbody"), rows);
    if (chart) {
      this.chart("backups").push(ts, (b.full || 0) + (b.delta || 0), b.bytes);
      this.chart("div").push(ts, f.divergence, theta);
    }
    for (const r of Array.isArray(f.recoveries) ? f.recoveries : []) this.recovery(r);
    if (f.recovery) this.recovery(f.recovery);
  }

  backup(m) {
    this.backups.unshift(m);
    this.backups.length = Math.min(this.backups.length, BACKUPS);
    fill($(this.el, "ol.backups"), this.backups.map(b => el("li", "",
      `${clockMs(b.ts)} ${b.full ? "full" : "delta"}${isNum(b.partition) ? " (partition " + b.partition + ")" : ""}: ${bytes(b.bytes)}, divergence ${sig(b.divergence)}`)));
  }

  // recoveryList is the recoveries seen, newest first.
  recoveryList() {
    return [...this.recoveries.values()].sort((a, b) => Date.parse(b.at) - Date.parse(a.at));
  }

  // recovery lists a recovery report once; it returns whether it was new.
  recovery(r) {
    if (!r || !r.at || this.recoveries.has(r.at)) return false;
    this.recoveries.set(r.at, r);
    fill($(this.el, "ol.recoveries"), this.recoveryList().slice(0, KEEP).map(recoveryItem));
    this.health();
    return true;
  }

  health() {
    const h = healthOf(this, connected);
    for (const root of [this.el, this.item]) {
      const b = $(root, ".health");
      b.textContent = h.text;
      b.className = "health badge " + h.level;
      b.title = h.why;
      root.dataset.health = h.level;
    }
  }
}

// gauge places the overhead of the last group (the thick mark) and the
// total (the thin one) on a scale with the band [low, high].
function gauge(box, g, state) {
  if (!box) return;
  const vals = [g.overhead, g.total_overhead, g.high].filter(isNum);
  const top = Math.min(1, Math.max(0.01, 1.25 * Math.max(2 * (g.high || 0), ...vals)));
  const at = x => (100 * Math.max(0, Math.min(1, x / top))).toFixed(1) + "%";
  const band = $(box, ".band"), last = $(box, "i.last"), total = $(box, "i.total");
  band.style.left = isNum(g.low) ? at(g.low) : "0";
  band.style.width = isNum(g.low) && isNum(g.high) ? (100 * Math.max(0, Math.min(1, g.high / top) - Math.min(1, g.low / top))).toFixed(1) + "%" : "0";
  last.hidden = !isNum(g.overhead);
  total.hidden = !isNum(g.total_overhead);
  if (isNum(g.overhead)) last.style.left = at(g.overhead);
  if (isNum(g.total_overhead)) total.style.left = at(g.total_overhead);
  last.dataset.state = state;
  box.title = `coordination overhead: last group ${pct(g.overhead)}, total ${pct(g.total_overhead)}, bounds [${pct(g.low)}, ${pct(g.high)}]; scale 0–${pct(top)}`;
}

// EVICT_WARN is the share of a join's tuples evicted for max_state past
// which its badge warns: its estimates are then well below the truth.
const EVICT_WARN = 0.01;

// evictedShare is how many of a join's tuples were evicted for max_state,
// and their share of the tuples seen.
function evictedShare(j) {
  const evicted = j.evicted ?? j.evictions;
  return { evicted, share: isNum(evicted) && j.seen > 0 ? evicted / j.seen : 0 };
}

// joinNote says how far a join's estimates can be trusted. ev is the
// job's evictions: a window that lost none can be exact while the job,
// evicting, cannot be trusted as a whole.
function joinNote(est, ev = {}) {
  const notes = [];
  if (isNum(est.confidence)) notes.push(`${fmt(100 * est.confidence, 0)}% intervals`);
  if (isNum(est.sample) && est.sample < 1) notes.push(`sample p = ${sig(est.sample)} (Ripple Join)`);
  if (est.complete === false || ev.evicted > 0) {
    notes.push(`incomplete: ${int(ev.evicted)} evicted for max_state (${pct(ev.share)} of the tuples seen)` +
      (est.complete === false ? ": this window's estimates are low and their high bounds unknown" : "; none could have matched in this window"));
  } else if (est.exact) {
    notes.push("exact: no sampling, eviction or loss");
  }
  if (isNum(est.widened) && est.widened > 1) notes.push(`widened ×${fmt(est.widened, 3)} for ${sig(est.lost_samples)} samples lost in crashes`);
  if (est.unbounded) notes.push("more samples may have been lost than the window has: the intervals say nothing");
  return notes.join("; ");
}

function recoveryItem(r) {
  const li = el("li", r.clean ? "clean" : r.within === false ? "bad" : "");
  const bound = r.bound || {};
  li.dataset.at = r.at;
  li.dataset.clean = String(!!r.clean);
  li.dataset.failures = String(r.failures ?? "");
  li.dataset.lost = String(r.lost ?? "");
  li.dataset.bound = String(bound.events ?? "");
  li.dataset.within = String(!!r.within);
  const when = clock(Date.parse(r.at));
  if (r.clean) {
    li.textContent = `${when}: clean restart after a graceful shutdown, nothing lost; ${int(r.backups)} backups applied in ${fmt(r.duration_ms, 0)} ms.`;
    return li;
  }
  const head = el("div");
  head.append(el("b", "", `${when}: recovered after failure ${int(r.failures)}: lost ${int(r.lost)} events`),
    el("span", r.within ? "ok-text" : "bad-text", ` (bound ${int(bound.events)}: ${r.within ? "held" : "EXCEEDED"})`));
  li.appendChild(head);
  li.appendChild(ratio(r.lost, bound.events, int));
  const ranges = [];
  (r.lost_ranges || []).forEach((rs, p) => (rs || []).forEach(([a, b]) => ranges.push(`p${p}: ${a}–${b}`)));
  const th = r.thresholds || {};
  li.appendChild(el("div", "muted",
    `state bound ${sig(bound.state)}, outputs ${int(bound.outputs)}; ${int(r.backups)} backups applied, ${int(r.replayed)} events replayed from item logs, in ${fmt(r.duration_ms, 0)} ms; ` +
    `thresholds now θ ${sig(th.theta)}, l ${int(th.l)}, γ ${int(th.gamma)}` +
    (ranges.length ? `; lost sequence numbers ${ranges.slice(0, 6).join(", ")}${ranges.length > 6 ? " …" : ""}` : "") +
    ((r.skipped || []).length ? `; damaged files passed over: ${r.skipped.length}` : "")));
  return li;
}

// healthOf says how a job does: bad when backups fail, a recovery lost
// more than its bound, or its stats stopped; busy when its queues fill or
// it falls behind its input; unknown while the feed is down.
function healthOf(j, live) {
  const s = j.status;
  if (!live) return { level: "unknown", text: "unknown", why: "the dashboard is not connected" };
  if (!s) return { level: "unknown", text: "waiting", why: "no stats yet" };
  const f = s.ft || {};
  const last = j.recoveryList()[0];
  if ((f.backups || {}).errors > 0) return { level: "bad", text: "backup errors", why: `${f.backups.errors} backups failed` };
  if (last && !last.clean && last.within === false) return { level: "bad", text: "loss over bound", why: "the last recovery lost more than its bound" };
  const late = statsLate(j);
  if (late) return late;
  const fill = s.queue_capacity > 0 ? s.queue_depth / s.queue_capacity : 0;
  if (fill > 0.5) return { level: "warn", text: "queue " + Math.round(100 * fill) + "% full", why: "the partition queues are over half full" };
  const r = s.rates || {};
  if (r.accepted_per_s > 100 && r.processed_per_s < 0.8 * r.accepted_per_s) return { level: "warn", text: "behind", why: "processing is slower than input" };
  // What the service judged (coordination past its bound, partitions
  // without an owner): every reason in the tooltip.
  const rs = healthReasons(s);
  if (rs.length) return { level: "warn", text: rs.map(r => r.text).join("; "), why: rs.map(r => r.why || r.text).join("\n") };
  const ev = s.join ? evictedShare(s.join) : { share: 0 };
  if (ev.share > EVICT_WARN) {
    return { level: "warn", text: `evicts ${pct(ev.share)}`, why: `${int(ev.evicted)} of ${int(s.join.seen)} tuples seen were evicted for max_state before their windows closed: the estimates are low; raise params.max_state or shorten params.within` };
  }
  return { level: "ok", text: "ok", why: "processing keeps up; backups work" };
}

// STATS_LATE is how long a job may go without a stats message (they come
// every second) while the feed is up, before its badge says so.
const STATS_LATE = 5000;

// statsLate says whether a job's stats stopped, on the server's clock:
// the browser's may run ahead (a throttled tab, a headless capture with
// virtual time) or behind. Counted from the job's last stats message or
// the feed's (re)opening, whichever is later, so a reconnection does not
// flash every job red. A job the poll of /v1/jobs still lists is late on
// the feed, not stalled.
function statsLate(j) {
  if (!j.statsAt || !feedOpenedServer) return null;
  const since = Math.max(j.statsAt, feedOpenedServer);
  if (serverClock - since <= STATS_LATE) return null;
  const ago = `no stats message for ${Math.round((serverClock - since) / 1000)} s of the service's time`;
  if (serverClock - j.polledAt <= 2 * POLL_EVERY) return { level: "warn", text: "stats late", why: ago + " on the feed; GET /v1/jobs still reports the job" };
  return { level: "bad", text: "no stats", why: ago };
}

// heard moves the server's clock on to t (ms), a time the server sent
// (a message may carry an older one: a recovery told to a new subscriber).
function heard(t) {
  if (!isNum(t)) return;
  serverClock = Math.max(serverClock, t);
  if (connected && !feedOpenedServer) feedOpenedServer = serverClock;
}

// healthReasons are the problems the service found in a job (its status's
// health): [] when ok or unsaid.
function healthReasons(s) {
  const h = s && s.health;
  return h && h.status !== "ok" && Array.isArray(h.reasons) ? h.reasons.filter(r => r && r.text) : [];
}

function jobView(name, kind) {
  let j = jobs.get(name);
  if (j) return j;
  j = new JobView(name, kind);
  jobs.set(name, j);
  document.getElementById("jobs").appendChild(j.el);
  document.getElementById("joblist").appendChild(j.item);
  document.querySelector("#overview .empty").hidden = true;
  return j;
}

// loadHistory draws a job's last minutes at once from the service's
// history of its stats (GET /v1/jobs/{job}/history), before the points
// the feed brought since. A service without the route answers 404: the
// charts then start empty.
async function loadHistory(j) {
  let r;
  try { r = await apiFetch("/v1/jobs/" + encodeURIComponent(j.name) + "/history"); } catch (e) { return; }
  if (!r.ok || jobs.get(j.name) !== j) return;
  const h = await r.json().catch(() => ({}));
  const pts = Array.isArray(h.points) ? h.points : [];
  if (!pts.length) return;
  j.chart("rate").prepend(pts.map(p => [p.ts, p.processed_per_s, p.queue_depth]));
  j.chart("lat").prepend(pts.map(p => [p.ts, p.p50_ms, p.p99_ms]));
  const g = (j.status || {}).group;
  if (g) j.chart("group").prepend(pts.map(p => [p.ts, p.group_size, p.overhead, p.total_overhead, g.low, g.high]));
  const ft = pts.filter(p => p.ft);
  if (ft.length) {
    j.chart("backups").prepend(ft.map(p => [p.ts, p.ft.backups, p.ft.backup_bytes]));
    j.chart("div").prepend(ft.map(p => [p.ts, p.ft.divergence, p.ft.theta]));
  }
  // The kind's own series, by the names the service gives them.
  const names = Array.isArray(h.series) ? h.series : [];
  const kindRows = (...cols) => {
    const at = cols.map(c => names.indexOf(c));
    return pts.filter(p => Array.isArray(p.kind)).map(p => [p.ts, ...at.map(i => i >= 0 ? p.kind[i] : null)]);
  };
  if (names.includes("accuracy_recent")) {
    j.chart("acc").prepend(kindRows("accuracy_recent", "accuracy_all"));
    j.chart("loss").prepend(kindRows("log_loss_recent", "log_loss_all"));
  }
  if (names.includes("estimate")) j.chart("distinct").prepend(kindRows("estimate", "lower", "upper"));
  if (names.includes("match_rate")) j.chart("join").prepend(kindRows("match_rate", "state_bytes"));
}

function removeJob(name) {
  const j = jobs.get(name);
  if (!j) return;
  j.el.remove();
  j.item.remove();
  jobs.delete(name);
  document.querySelector("#overview .empty").hidden = jobs.size > 0;
}

// ---- the token ----

// The token lives in sessionStorage: this tab keeps it across reloads and
// forgets it when closed. An older page kept it in localStorage, for
// ever: that copy is removed.
let token = (() => {
  try {
    localStorage.removeItem(TOKEN_KEY);
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch (e) { return ""; }
})();
let authWait = false;    // the service refused us: wait for a token

// apiFetch GETs a path with the token; a 401 or 403 asks for a token and
// throws.
async function apiFetch(path) {
  const r = await fetch(path, { headers: token ? { Authorization: "Bearer " + token } : {} });
  if (r.status === 401 || r.status === 403) {
    const body = await r.json().catch(() => ({}));
    askToken(r.status, body.error || "");
    throw new Error("not authorised");
  }
  return r;
}

function openWS(query) {
  return token ? new WebSocket(wsURL(query), ["mlstream", "bearer." + token]) : new WebSocket(wsURL(query));
}

// askToken shows the token form, says why (status: 401, 403 or "admin",
// an admin token the page refused), and stops the feed until a token
// comes.
function askToken(status, msg) {
  authWait = true;
  const f = document.getElementById("auth");
  $(f, ".msg").textContent = status === "admin"
    ? "That is an admin token: the dashboard refuses it, since any script on the page could read it and change or delete jobs with it. Enter a token with the read scope."
    : status === 403
      ? "The saved token may not read this service (" + msg + "). Enter a token with the read scope."
      : token ? "The service refused the saved token. Enter another one." : "This service needs a token with the read scope.";
  jobsNote("auth");
  $(f, ".forget").hidden = !token;
  if (f.hidden) {
    f.hidden = false;
    $(f, "input").focus();
  }
  setConn("auth", "needs a token");
  if (feed) feed.close();
}

// retry starts over with the token as it now is.
function retry() {
  authWait = false;
  document.getElementById("auth").hidden = true;
  setConn("connecting", "connecting…");
  pollJobs().catch(() => {});
  connect();
}

function saveToken(t) {
  token = t;
  try { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* storage off: this page only */ }
}

document.getElementById("auth").addEventListener("submit", async ev => {
  ev.preventDefault();
  const input = $(ev.target, "input");
  const t = input.value.trim();
  if (!t) return;
  input.value = "";
  const scopes = await tokenScopes(t);
  if (scopes && scopes.includes("admin")) {
    askToken("admin", "");
    return;
  }
  saveToken(t);
  retry();
});

// tokenScopes asks the service what token t may do (GET /v1/whoami): its
// scopes, or null when it does not say (a token it refuses is then
// refused by the next request, and the form says so).
async function tokenScopes(t) {
  try {
    const r = await fetch("/v1/whoami", { headers: { Authorization: "Bearer " + t } });
    if (!r.ok) return null;
    const b = await r.json();
    return Array.isArray(b.scopes) ? b.scopes : null;
  } catch (e) { return null; }
}

// jobsNote says why the job list is empty (shown only while it is):
// loading, a token needed, the service out of reach, or no jobs.
function jobsNote(why) {
  const p = document.querySelector("#overview .empty");
  const texts = {
    loading: ["Loading the jobs…"],
    auth: ["The jobs are hidden until a token with the read scope is entered above: this service needs one."],
    down: ["Cannot reach the service: its jobs show once it answers."],
    none: ["No jobs yet. Declare one with ", el("code", "", "PUT /v1/jobs/{name}"), "."],
  };
  if (p.dataset.why === why) return;
  p.dataset.why = why;
  p.replaceChildren(...texts[why]);
}
$(document, "#auth .forget").addEventListener("click", () => {
  saveToken("");
  retry();
});

// ---- polls ----

async function pollJobs() {
  const r = await apiFetch("/v1/jobs");
  if (!r.ok) return;
  // The Date of the answer: the server's clock, to the second.
  const at = Date.parse(r.headers.get("Date") || "");
  heard(at);
  const data = await r.json();
  jobsNote("none");
  const list = data.jobs || [];
  const names = new Set(list.map(s => s.name));
  for (const name of [...jobs.keys()]) if (!names.has(name)) removeJob(name);
  const ul = document.getElementById("joblist"), box = document.getElementById("jobs");
  let prev = null;
  for (const s of list) {
    const j = jobView(s.name, s.kind);
    j.polledAt = isNum(at) ? at : serverClock;
    // Once per job, and only for jobs the service lists.
    if (!j.historyAsked) {
      j.historyAsked = true;
      loadHistory(j);
    }
    // Keep the service's order, moving only what is out of place: a move
    // takes the element out of the page and puts it back, and whatever
    // holds it then (a selection, a browser's inspector) loses it.
    placeAfter(ul, j.item, prev && prev.item);
    placeAfter(box, j.el, prev && prev.el);
    prev = j;
    if (!j.statsAt) j.update(s, serverClock, false);
  }
}

// placeAfter puts el right after prev in parent (first when prev is
// null), unless it is there already.
function placeAfter(parent, el, prev) {
  const at = prev ? prev.nextElementSibling : parent.firstElementChild;
  if (at !== el) parent.insertBefore(el, at);
}

// parseMetrics reads the counters the feed lacks from Prometheus' text format.
function parseMetrics(text) {
  const rejected = new Map(), shed = new Map();
  for (const line of text.split("\n")) {
    const m = /^mlstream_events_(rejected|shed)_total\{([^}]*)\}\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const [, k, v] of m[2].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    const v = Number(m[3]);
    if (m[1] === "rejected") rejected.set(labels.stream, (rejected.get(labels.stream) || 0) + v);
    else shed.set(labels.job, (shed.get(labels.job) || 0) + v);
  }
  metricsCounts.rejected = rejected;
  metricsCounts.shed = shed;
  for (const j of jobs.values()) j.counts();
}

async function pollMetrics() {
  const r = await apiFetch("/metrics");
  if (!r.ok) return;
  const text = await r.text();
  parseMetrics(text);
  clusterFromMetrics(text);
}

function poll() {
  if (!connected) return;
  pollJobs().catch(() => {});
  pollMetrics().catch(() => {});
}
setInterval(poll, POLL_EVERY);

// ---- sampled tickers ----

function wsURL(query) {
  return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws?" + query;
}

// sample subscribes to one job's messages of one type, keeps the first n
// (or what came within SAMPLE_WAIT) and unsubscribes: a ticker costs the
// service a short burst every few seconds, not every message. refused says
// the connection closed before it opened (the service refused the type);
// one still opening when the time is up (a busy service) is not refused.
function sample(job, type, n) {
  return new Promise(resolve => {
    const ws = openWS("jobs=" + encodeURIComponent(job) + "&types=" + type);
    const got = [];
    let opened = false, done = false;
    const finish = refused => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      ws.onmessage = ws.onclose = ws.onerror = null;
      if (ws.readyState <= WebSocket.OPEN) ws.close();
      resolve({ ok: opened, refused: refused && !opened, msgs: got });
    };
    const timer = setTimeout(() => finish(false), SAMPLE_WAIT);
    ws.onopen = () => { opened = true; };
    ws.onmessage = ev => {
      got.push(JSON.parse(ev.data));
      if (got.length >= n) finish(false);
    };
    ws.onclose = ws.onerror = () => finish(true);
  });
}

async function sampleTickers() {
  for (const j of [...jobs.values()]) {
    if (!connected || document.hidden) return;
    const s = j.status || {};
    const wants = [];
    if (s.model || s.metrics || j.kind === "logreg") wants.push("prediction");
    if (s.join || j.kind === "join") wants.push("match");
    for (const type of wants) {
      if (j.sampleBroken[type]) continue;
      const { ok, refused, msgs } = await sample(j.name, type, TICKER);
      if (!jobs.has(j.name)) break;
      if (!ok) {
        // A feed that refuses the type (an older service) is not asked
        // again; one too busy to open in time is, next round.
        if (refused && connected) j.sampleBroken[type] = true;
        continue;
      }
      if (type === "prediction") j.predictions(msgs);
      else if (msgs.length) {
        j.matchesSampled = true;
        j.matches(msgs.map(m => m.match || m), "sampled from the feed at " + clock(Date.now()));
      }
    }
  }
}

async function tickerLoop() {
  try { await sampleTickers(); } catch (e) { /* the next round retries */ }
  setTimeout(tickerLoop, SAMPLE_EVERY);
}

// ---- the feed ----


function setConn(state, text) {
  const c = document.getElementById("conn");
  c.dataset.state = state;
  c.textContent = text;
  c.className = "badge " + (state === "live" ? "on" : "off");
}

function banner(text, kind) {
  const b = document.getElementById("banner");
  $(b, ".text").textContent = text;
  b.dataset.kind = kind;
  b.hidden = false;
}
$(document, "#banner .close").onclick = () => { document.getElementById("banner").hidden = true; };

function reconnectText() {
  const down = ((reconnectedAt - lostAt) / 1000).toFixed(1);
  let t = `Reconnected at ${clock(reconnectedAt)} after ${down} s offline.`;
  const parts = [];
  for (const name of restarted) {
    const j = jobs.get(name);
    const r = j && j.recoveryList()[0];
    if (!r) continue;
    parts.push(r.clean ? `${name}: clean restart, nothing lost`
      : `${name}: recovered, lost ${int(r.lost)} events (bound ${int((r.bound || {}).events)}, ${r.within ? "held" : "EXCEEDED"})`);
  }
  if (parts.length) t += " The service restarted: " + parts.join("; ") + ".";
  return t;
}

function onMessage(m) {
  if (typeof m.job !== "string") return;
  heard(m.ts);
  if (m.type === "failover") {
    clusterFailover(m);
    return;
  }
  const j = jobView(m.job, m.stats && m.stats.kind);
  switch (m.type) {
  case "stats":
    j.statsAt = isNum(m.ts) ? m.ts : serverClock;
    j.update(m.stats || {}, isNum(m.ts) ? m.ts : Date.now(), true);
    set(j.el, "dropped", int(m.dropped));
    break;
  case "recovery":
    if (j.recovery(m.recovery) && lostAt && Date.parse(m.recovery.at) >= lostAt - 1000) {
      // A recovery that happened while we were away: the service restarted.
      restarted.add(m.job);
      for (const c of Object.values(j.charts)) c.gap(Date.parse(m.recovery.at));
      if (reconnectedAt) banner(reconnectText(), "reconnected");
    }
    break;
  case "backup":
    j.backup(m);
    break;
  case "rescale":
    // Shown at once; the next status has it in full.
    if (m.rescale && j.status && j.status.elastic) {
      const x = j.status.elastic;
      x.last = (Array.isArray(x.last) ? x.last : []).concat([m.rescale]).slice(-10);
      x.partitions = m.rescale.to;
      j.elastic(x);
    }
    break;
  case "topk":
    if (m.topk) j.topk(m.topk);
    break;
  case "distinct":
    if (m.distinct) j.distinct(m.distinct, m.ts, false);
    break;
  }
}

function connect() {
  if (authWait || feed) return;
  const ws = openWS("types=stats,backup,recovery,topk,distinct,failover,rescale");
  feed = ws;
  let opened = false;
  ws.onopen = () => {
    opened = true;
    connected = true;
    feedOpenedServer = 0; // set by the first message
    retryMs = 250;
    lastMsgAt = Date.now();
    setConn("live", "live");
    for (const j of jobs.values()) j.sampleBroken = {};
    if (everConnected && lostAt) {
      reconnectedAt = Date.now();
      banner(reconnectText(), "reconnected");
    }
    everConnected = true;
    poll();
  };
  ws.onmessage = ev => {
    lastMsgAt = Date.now();
    document.getElementById("last").textContent = "updated " + clock(lastMsgAt);
    onMessage(JSON.parse(ev.data));
  };
  ws.onclose = () => {
    if (feed !== ws) return;
    feed = null;
    // A refused handshake looks like any failure to the page: ask a plain
    // request whether it was the token.
    if (!opened && !authWait) apiFetch("/v1/jobs").catch(() => {});
    if (connected || !lostAt) {
      lostAt = Date.now();
      reconnectedAt = 0;
      restarted.clear();
    }
    connected = false;
    if (authWait) return;
    if (!everConnected && !jobs.size) jobsNote("down");
    setConn("reconnecting", (everConnected ? "offline since " + clock(lostAt) : "cannot reach the service") + ", reconnecting…");
    for (const j of jobs.values()) j.health();
    setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, BACKOFF_MAX);
  };
}

// A feed that went silent (a half-open connection) is replaced.
setInterval(() => {
  if (connected && feed && Date.now() - lastMsgAt > SILENCE) feed.close();
  for (const j of jobs.values()) j.health();
}, 1000);

pollJobs().catch(() => {});
connect();
tickerLoop();
