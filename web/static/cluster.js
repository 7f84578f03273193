// mlstream dashboard, the Cluster panel (loaded after app.js, whose
// helpers it uses). A clustered node labels its metrics with node="…":
// the page asks GET /v1/cluster only then, every second, so that a
// single-node service never sees the request (nor the browser logs its
// 404). A 404 all the same (a service that stopped being clustered) hides
// the panel for good. Moves are the take-overs this node made, from the
// poll, merged with every node's failover messages from the feed.
"use strict";

const CLUSTER_EVERY = 1000; // ms between polls of /v1/cluster
const MOVES_SHOWN = 50;     // moves listed, newest first
// Owner colours, in the order the page first sees the nodes.
const NODE_COLORS = ["#2563eb", "#d97706", "#15803d", "#9333ea", "#0891b2", "#db2777", "#65a30d", "#7c2d12", "#4f46e5", "#0f766e"];

const clusterView = {
  mode: "",         // "": not known yet; "cluster"; "single"; "off" after a 404
  timer: 0,
  prev: null,       // {at, published} of the last poll, for the rate
  colors: new Map(), // node -> colour
  moves: new Map(),  // moveKey -> move
};
const clusterPanel = () => document.getElementById("cluster");

// clusterFromMetrics decides from /metrics whether the service is a
// cluster node (its metrics carry the label node).
function clusterFromMetrics(text) {
  const v = clusterView;
  if (v.mode === "cluster" || v.mode === "off") return;
  if (/^\w+\{(?:[^}]*,)?node="/m.test(text)) {
    v.mode = "cluster";
    pollCluster();
    return;
  }
  v.mode = "single";
  clusterPanel().dataset.mode = "single";
}

async function pollCluster() {
  const v = clusterView;
  clearTimeout(v.timer);
  if (v.mode !== "cluster") return;
  try {
    if (connected && !authWait) await fetchCluster();
  } catch (e) { /* a node going away: the next poll retries */ }
  if (v.mode === "cluster") v.timer = setTimeout(pollCluster, CLUSTER_EVERY);
}

async function fetchCluster() {
  const r = await apiFetch("/v1/cluster");
  if (r.status === 404) {
    clusterView.mode = "off";
    clusterPanel().hidden = true;
    clusterPanel().dataset.mode = "off";
    return;
  }
  if (!r.ok) return;
  const s = await r.json();
  if (s && typeof s === "object") renderCluster(s, serverNow(r));
}

// serverNow is the service's clock: last_seen and move times are its
// own. The Date header has whole seconds, so the browser's clock is used
// unless the two differ by more than that.
function serverNow(r) {
  const now = Date.now(), d = Date.parse(r.headers.get("Date") || "");
  return isNum(d) && Math.abs(d - now) > 1500 ? d : now;
}

// goDuration parses a Go duration ("3s", "1m30s", "500ms") into ms.
function goDuration(s) {
  const unit = { h: 3600e3, m: 60e3, s: 1e3, ms: 1, us: 1e-3, "µs": 1e-3, ns: 1e-6 };
  let ms = 0, any = false;
  for (const [, n, u] of String(s || "").matchAll(/([\d.]+)(h|ms|m|s|us|µs|ns)/g)) {
    ms += Number(n) * unit[u];
    any = true;
  }
  return any ? ms : NaN;
}

// isoMs is an RFC 3339 time in ms (Go writes nanoseconds; Date.parse
// wants at most milliseconds).
const isoMs = t => typeof t === "string" ? Date.parse(t.replace(/(\.\d{3})\d+/, "$1")) : NaN;

function nodeColor(name) {
  const c = clusterView.colors;
  if (!c.has(name)) c.set(name, NODE_COLORS[c.size % NODE_COLORS.length]);
  return c.get(name);
}

function swatch(name) {
  const e = el("i", "swatch");
  e.style.background = nodeColor(name);
  return e;
}

function renderCluster(s, now) {
  const p = clusterPanel(), cfg = s.config || {};
  const ttl = goDuration(cfg.lease_ttl);
  p.hidden = false;
  p.dataset.mode = "cluster";
  p.dataset.node = s.node || "";
  const nodes = Array.isArray(s.nodes) ? s.nodes : [], jobsList = Array.isArray(s.jobs) ? s.jobs : [];
  // Colours in name order, so that n1, n2, n3 read alike on every node.
  const names = new Set(nodes.map(n => n.name));
  for (const j of jobsList) for (const o of partsOf(j)) if (o.node) names.add(o.node);
  [...names].sort().forEach(nodeColor);
  set(p, "c_node", s.node || "–");
  set(p, "c_ttl", cfg.lease_ttl || "–");
  set(p, "c_config", `replicas ${cfg.replicas ?? "–"}, ${cfg.storage || "–"} storage, ${cfg.stream_groups ?? "–"} stream groups, retention ${cfg.retention_age || "–"} / ${bytes(cfg.retention_bytes)}, max lag ${int(cfg.max_lag)}`);
  clusterCounts(p, s.counts || {});
  clusterNodes(p, s.node, nodes, jobsList, ttl, now);
  clusterLegend(p, names);
  clusterJobs(p, s.node, jobsList, ttl);
  for (const m of Array.isArray(s.moves) ? s.moves : []) addMove({ ...m, at: isoMs(m.at) }, "poll");
  renderMoves();
}

// partsOf is a job's leases: its partitions, then its global unit.
function partsOf(j) {
  const ps = Array.isArray(j.partitions) ? j.partitions : [];
  return j.global ? [...ps, { ...j.global, global: true }] : ps;
}

// COUNTERS are the fields of the panel's cards: [data-f, counts key, format].
const COUNTERS = [["c_published", "published_messages", int], ["c_forwarded", "forwarded_outputs", int],
  ["c_views", "views_installed", int], ["c_takeovers", "takeovers", int], ["c_failovers", "failovers", int],
  ["c_backups", "backups", int], ["c_backup_bytes", "backup_bytes", bytes], ["c_unreadable", "unreadable_messages", int],
  ["c_stale", "stale_outputs", int], ["c_unowned", "unowned_outputs", int]];

// clusterCounts shows this node's counters and its publish rate since
// the last poll (timed by the browser's clock, which moves smoothly).
function clusterCounts(p, c) {
  const prev = clusterView.prev, now = Date.now();
  if (prev && isNum(c.published_messages) && isNum(prev.published) && now > prev.at) {
    set(p, "c_pub_rate", sig(Math.max(0, c.published_messages - prev.published) * 1000 / (now - prev.at)));
  }
  clusterView.prev = { at: now, published: c.published_messages };
  for (const [f, key, format] of COUNTERS) set(p, f, format(c[key]));
  $(p, '[data-f="c_unreadable"]').classList.toggle("bad-text", c.unreadable_messages > 0);
  $(p, '[data-f="c_stale"]').classList.toggle("bad-text", c.stale_outputs > 0);
}

// nodeURL is a node's own dashboard: its HTTP address, with this page's
// host when the node listens on every interface.
function nodeURL(addr) {
  let host = String(addr || "");
  const m = /^(.*):(\d+)$/.exec(host);
  if (m && ["", "0.0.0.0", "[::]", "::"].includes(m[1])) host = (location.hostname.includes(":") ? `[${location.hostname}]` : location.hostname) + ":" + m[2];
  return location.protocol + "//" + host + "/";
}

function clusterNodes(p, self, nodes, jobsList, ttl, now) {
  const owned = new Map();
  for (const j of jobsList) for (const o of partsOf(j)) if (o.node) owned.set(o.node, (owned.get(o.node) || 0) + 1);
  const rows = [...nodes].sort((a, b) => a.name < b.name ? -1 : 1).map(n => {
    const name = el("span", "node");
    name.append(swatch(n.name), el("b", "", n.name));
    if (n.name === self) name.append(" ", el("span", "badge ok", "this node"));
    const link = el("a", "", n.addr ? nodeURL(n.addr) : "–");
    if (n.addr) link.href = nodeURL(n.addr);
    const ago = now - isoMs(n.last_seen);
    const seen = el("span", "", isNum(ago) ? (Math.max(0, ago) / 1000).toFixed(1) + " s ago" : "–");
    if (ago > ttl) seen.className = "bad-text";
    const r = nodeRates(n);
    const tr = row([name, link, seen, clock(isoMs(n.started)), int(owned.get(n.name) || 0), sig(r.ingested_per_s), sig(r.processed_per_s), sig(r.forwarded_per_s)],
      ["", "", "num", "", "num", "num", "num", "num"]);
    tr.dataset.node = n.name;
    tr.dataset.ingested = String(r.ingested_per_s ?? "");
    tr.dataset.processed = String(r.processed_per_s ?? "");
    tr.dataset.forwarded = String(r.forwarded_per_s ?? "");
    tr.dataset.self = String(n.name === self);
    tr.dataset.seenMs = isNum(ago) ? String(Math.round(ago)) : "";
    return tr;
  });
  fill($(p, "table.nodes tbody"), rows);
}

// nodeRates is what a node publishes about itself every second (events
// ingested and processed by its partitions, outputs forwarded); empty
// when none came lately (the cells then show "–").
const nodeRates = n => n.rates && typeof n.rates === "object" ? n.rates : {};

function clusterLegend(p, names) {
  const items = [...names].sort().map(n => {
    const li = el("li");
    li.dataset.node = n;
    li.append(swatch(n), n);
    return li;
  });
  const marks = [["starting", "faded: this node is taking it over"], ["moving", "no owner (moving)"], ["old", "lease older than the TTL"]].map(([cls, text]) => {
    const li = el("li", cls, text);
    li.prepend(el("i", "swatch"));
    return li;
  });
  $(p, "ul.legend").replaceChildren(...items, ...marks);
}

function clusterJobs(p, self, jobsList, ttl) {
  const boxes = jobsList.map(j => {
    const box = el("div", "cjob");
    box.dataset.job = j.job;
    const h = el("h4", "", j.job + " ");
    if (j.model_version) h.append(el("small", "muted", `model version ${int(j.model_version)} `));
    if (j.lost_deltas) h.append(el("small", "bad-text", `${int(j.lost_deltas)} deltas lost`));
    const grid = el("div", "pgrid");
    grid.append(...partsOf(j).map(o => partCell(o, self, ttl)));
    box.append(h, grid, ownsLine(self, j));
    return box;
  });
  $(p, ".cjobs").replaceChildren(...boxes);
}

// ownsLine says which of a job's leases this node holds, with their lag.
function ownsLine(self, j) {
  const mine = partsOf(j).filter(o => o.node === self);
  const lag = o => isNum(o.lag) ? ` (lag ${int(o.lag)})` : o.global ? "" : " (taking over)";
  const ps = mine.filter(o => !o.global), g = mine.find(o => o.global);
  const what = [ps.length ? `partition${ps.length > 1 ? "s" : ""} ${ps.map(o => o.partition + lag(o)).join(", ")}` : "",
    g ? "the global unit" + lag(g) : ""].filter(Boolean).join(" and ");
  const owns = el("p", "owns muted", `${self} owns ${what || "none of its partitions"}`);
  owns.dataset.own = mine.map(o => o.global ? "global" : o.partition).join(",");
  return owns;
}

// partCell is one lease: its owner's colour, the owner and the lease's
// age; "old" once the age passes the lease TTL (the owner stopped
// renewing), "moving" while nobody holds it, "starting" while this node
// holds the lease but does not serve the partition yet (restoring its
// state; the status has a lag only for partitions this node serves).
function partCell(o, self, ttl) {
  const c = el("div", "pcell");
  const starting = o.node === self && !o.global && !isNum(o.lag);
  const state = !o.node ? "moving" : o.lease_age_ms > ttl ? "old" : starting ? "starting" : "ok";
  c.dataset.partition = o.global ? "global" : String(o.partition);
  c.dataset.node = o.node || "";
  c.dataset.state = state;
  if (o.node) c.style.setProperty("--node", nodeColor(o.node));
  c.append(el("b", "", o.global ? "global" : "p" + o.partition), el("span", "", o.node || "moving"),
    el("small", "", !o.node ? "–" : starting ? "taking over" : dur(o.lease_age_ms)));
  c.title = [o.global ? "global unit" : "partition " + o.partition, o.node ? "owner " + o.node : "no owner", o.token ? "token " + o.token : "",
    o.since ? "since " + o.since : "", "lease age " + dur(o.lease_age_ms), isNum(o.lag) ? "lag " + int(o.lag) + " events" : "",
    { old: "older than the lease TTL", starting: "this node holds the lease and is restoring the partition" }[state]].filter(Boolean).join("\n");
  return c;
}

// ---- moves ----

const moveKey = m => `${m.job}/${m.partition ?? "global"}/${m.to}/${m.token}`;

// addMove keeps a move; the feed's and the poll's copies of one are one.
function addMove(m, source) {
  const k = moveKey(m), had = clusterView.moves.get(k);
  clusterView.moves.set(k, { ...m, source: had ? had.source : source });
  if (clusterView.moves.size > 2 * MOVES_SHOWN) {
    for (const old of newestMoves().slice(MOVES_SHOWN)) clusterView.moves.delete(moveKey(old));
  }
}

const newestMoves = () => [...clusterView.moves.values()].sort((a, b) => (b.at || 0) - (a.at || 0));

// clusterFailover takes a failover message of the feed.
function clusterFailover(m) {
  if (!m.failover || typeof m.failover !== "object") return;
  addMove({ ...m.failover, job: m.job, at: isNum(m.ts) ? m.ts : Date.now() }, "feed");
  if (clusterView.mode === "cluster") renderMoves();
}

// moveKind names a move as the node's counters count it: a failover
// comes from another node that stopped renewing; a move without a
// previous node is a first owner, or (with a previous write) the same
// node taking back a lease it lost.
function moveKind(m) {
  if (m.graceful) return "graceful";
  if (m.from) return "failover";
  return m.since_last_write_ms > 0 ? "taken back" : "first owner";
}

function renderMoves() {
  const p = clusterPanel(), list = newestMoves().slice(0, MOVES_SHOWN);
  const rows = list.map(m => {
    const kind = moveKind(m);
    const how = el("span", "badge " + ({ graceful: "ok", failover: "warn" }[kind] || "unknown"), kind);
    const lost = el("span", m.lost > 0 ? "bad-text" : "", int(m.lost));
    const tr = row([clockMs(m.at), m.job, m.partition ?? "global", `${m.from || "–"} → ${m.to || "–"}`, how,
      dur(m.took_ms), kind === "first owner" ? "–" : dur(m.since_last_write_ms), int(m.replay_from), lost], ["", "", "num", "", "", "num", "num", "num", "num"]);
    Object.assign(tr.dataset, { job: m.job, partition: String(m.partition ?? "global"), from: m.from || "", to: m.to || "",
      graceful: String(!!m.graceful), how: kind, source: m.source });
    return tr;
  });
  fill($(p, "table.moves tbody"), rows);
  $(p, ".moves-none").hidden = rows.length > 0;
}
