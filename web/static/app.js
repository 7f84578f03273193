// mlstream dashboard: reads /v1/jobs once, then lives on the WebSocket feed
// (stats every second, predictions as they happen); reconnects by itself.
"use strict";
const jobs = new Map(); // name -> {el, acc: [], loss: [], ticker: []}
const HISTORY = 300, TICKER = 12;
const $ = (root, sel) => root.querySelector(sel);
const fmt = (x, d = 3) => (x === undefined || x === null) ? "–" : Number(x).toFixed(d);
const int = x => Math.round(x).toLocaleString("en-US");

function jobView(name, kind) {
  let j = jobs.get(name);
  if (j) return j;
  const main = document.getElementById("jobs");
  if (jobs.size === 0) main.innerHTML = "";
  const el = document.getElementById("job-tpl").content.firstElementChild.cloneNode(true);
  el.dataset.job = name;
  $(el, ".name").textContent = name;
  $(el, ".kind").textContent = kind || "";
  main.appendChild(el);
  j = { el, acc: [], loss: [], ticker: [] };
  jobs.set(name, j);
  return j;
}

function onStats(m) {
  const s = m.stats, j = jobView(m.job, s.kind);
  $(j.el, ".rate").textContent = int(s.rates.processed_per_s);
  $(j.el, ".depth").textContent = int(s.queue_depth);
  $(j.el, ".p50").textContent = fmt(s.latency.p50_ms, 2);
  $(j.el, ".p99").textContent = fmt(s.latency.p99_ms, 2);
  $(j.el, ".dropped").textContent = int(m.dropped);
  if (s.model) $(j.el, ".version").textContent = int(s.model.version);
  if (s.ft) onFT(j, s.ft);
  if (s.topk) renderTopK(j, s.topk);
  if (s.distinct) renderDistinct(j, s.distinct);
  if (s.metrics) {
    $(j.el, ".acc").textContent = fmt(s.metrics.recent.accuracy);
    $(j.el, ".auc").textContent = fmt(s.metrics.recent.auc);
    push(j.acc, [s.metrics.recent.accuracy, s.metrics.all.accuracy]);
    push(j.loss, [s.metrics.recent.log_loss, s.metrics.all.log_loss]);
    draw($(j.el, ".acc-chart"), j.acc);
    draw($(j.el, ".loss-chart"), j.loss);
  }
}

function renderTopK(j, t) {
  j.el.classList.add("no-model");
  const box = $(j.el, ".synopsis");
  box.innerHTML = "";
  const h = document.createElement("h3");
  h.textContent = "Top " + t.items.length + " (current window; any other item ≤ " + int(t.max_untracked) + "; late " + int(t.late) + ", dropped " + int(t.dropped) + ")";
  const table = document.createElement("table");
  table.innerHTML = "<thead><tr><th>item</th><th>estimate</th><th>lower</th><th>upper</th></tr></thead>";
  const body = document.createElement("tbody");
  for (const it of t.items) {
    const tr = document.createElement("tr");
    for (const v of [it.key, int(it.estimate), int(it.lower), int(it.upper)]) {
      const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  table.appendChild(body);
  box.append(h, table);
}

function renderDistinct(j, d) {
  j.el.classList.add("no-model");
  $(j.el, ".synopsis").innerHTML = "";
  const p = document.createElement("p");
  p.className = "big";
  p.textContent = int(d.estimate) + " distinct (± " + fmt(100 * d.std_error, 2) + "%, between " + int(d.lower) + " and " + int(d.upper) + ")";
  $(j.el, ".synopsis").appendChild(p);
}

function onFT(j, f) {
  $(j.el, ".ft-mode").textContent = "mode " + f.mode;
  $(j.el, ".ft-div").textContent = fmt(f.divergence, 2) + " / " + fmt(f.state_thresholds.theta, 2);
  $(j.el, ".ft-risk").textContent = int(f.worst_case.events) + " (max " + int(f.promise.events) + ")";
  const pending = f.partitions.reduce((a, p) => a + p.pending, 0);
  $(j.el, ".ft-pending").textContent = int(pending) + " / " + int(f.partition_thresholds.l * f.partitions.length);
  $(j.el, ".ft-backups").textContent = int(f.backups.full) + " + " + int(f.backups.delta);
  $(j.el, ".ft-bytes").textContent = int(f.backups.bytes);
  $(j.el, ".ft-failures").textContent = int(f.failures);
  if (f.recovery) onRecovery(j, f.recovery);
}

function onRecovery(j, r) {
  $(j.el, ".ft-recovery").textContent = r.clean
    ? "Restarted cleanly at " + new Date(r.at).toLocaleTimeString() + ": nothing lost."
    : "Recovered at " + new Date(r.at).toLocaleTimeString() + " after failure " + r.failures + ": " + int(r.lost) +
      " events lost (bound " + int(r.bound.events) + (r.within ? ", held" : ", EXCEEDED") + "), " + int(r.replayed) +
      " replayed, " + r.backups + " backups applied in " + fmt(r.duration_ms, 0) + " ms.";
}

function push(series, point) { series.push(point); if (series.length > HISTORY) series.shift(); }

function draw(canvas, series) {
  const ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  if (series.length < 2) return;
  let lo = Infinity, hi = -Infinity;
  for (const p of series) for (const v of p) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (hi - lo < 1e-6) { hi += 0.01; lo -= 0.01; }
  const pad = (hi - lo) * 0.1; lo -= pad; hi += pad;
  ctx.fillStyle = "#6b7280"; ctx.font = "11px sans-serif";
  ctx.fillText(hi.toFixed(3), 4, 12); ctx.fillText(lo.toFixed(3), 4, h - 4);
  for (let k = 0; k < 2; k++) {
    ctx.beginPath(); ctx.setLineDash(k ? [4, 3] : []);
    ctx.strokeStyle = k ? "#9ca3af" : "#2563eb"; ctx.lineWidth = 2;
    series.forEach((p, i) => {
      const x = 40 + (w - 44) * i / (HISTORY - 1), y = h - (p[k] - lo) / (hi - lo) * h;
      i ? ctx.lineTo(x, y) : ctx.moveTo(x, y);
    });
    ctx.stroke();
  }
}

function onPrediction(m) {
  const j = jobView(m.job);
  j.ticker.unshift(m);
  j.ticker.length = Math.min(j.ticker.length, TICKER);
}

function renderTickers() {
  for (const j of jobs.values()) {
    const body = $(j.el, ".ticker tbody");
    body.innerHTML = "";
    for (const m of j.ticker) {
      const tr = document.createElement("tr");
      for (const v of [m.key || "–", fmt(m.p), m.label ?? "–", m.model_version]) {
        const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }
}
setInterval(renderTickers, 500);

async function loadJobs() {
  const r = await fetch("/v1/jobs");
  const data = await r.json();
  for (const s of data.jobs) jobView(s.name, s.kind);
}

let retry = 500;
function connect() {
  const conn = document.getElementById("conn");
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws?types=stats,prediction,recovery");
  ws.onopen = () => { conn.textContent = "live"; conn.className = "badge on"; retry = 500; loadJobs().catch(() => {}); };
  ws.onmessage = ev => {
    const m = JSON.parse(ev.data);
    if (m.type === "stats") onStats(m);
    else if (m.type === "prediction") onPrediction(m);
    else if (m.type === "recovery") onRecovery(jobView(m.job), m.recovery);
  };
  ws.onclose = () => {
    conn.textContent = "reconnecting…"; conn.className = "badge off";
    setTimeout(connect, retry); retry = Math.min(retry * 2, 5000);
  };
}
connect();
