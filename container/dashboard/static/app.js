// The container dashboard: polls the JSON API every 2 s and renders with DOM nodes and textContent only
// (topic and group names are user input: never HTML). Charts are inline SVG. No build step, no dependencies.
"use strict";

const POLL_MS = 2000;
const PAGES = ["overview", "topics", "groups", "errors", "admin"];
const state = { page: "overview", session: { adminEnabled: false, user: null, csrf: null }, lastOk: 0 };

// ---- DOM helpers ------------------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, String(v));
    else node[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function table(headers, rows, cls) {
  const t = el("table", { class: cls || "" });
  t.append(el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const r of rows) body.append(r);
  t.append(body);
  return t;
}

function num(value, attrs) {
  return el("td", Object.assign({ class: "num" }, attrs || {}), fmt(value));
}

function fmt(n) {
  if (n === null || n === undefined) return "–";
  return typeof n === "number" ? n.toLocaleString("en-US") : String(n);
}

function human(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = bytes, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(1)) + " " + units[i];
}

function replace(id, ...nodes) {
  const target = document.getElementById(id);
  target.replaceChildren(...nodes);
}

async function api(path, options) {
  const resp = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body.error || resp.status + " " + resp.statusText);
  return body;
}

// ---- overview ---------------------------------------------------------------------------------------------

function sumMetric(brokers, name) {
  return brokers.reduce((acc, b) => acc + (b.metrics[name] || 0), 0);
}

function card(label, value, key) {
  return el("div", { class: "card" }, el("div", { class: "label" }, label),
    el("div", { class: "value", "data-card": key }, value));
}

function renderOverview(data) {
  const bs = data.brokers;
  replace("cards",
    card("Brokers", fmt(data.brokerCount), "brokers"),
    card("Messages in", fmt(sumMetric(bs, "rocketmq_messages_in_total")), "messages_in"),
    card("Messages out", fmt(sumMetric(bs, "rocketmq_messages_out_total")), "messages_out"),
    card("Errors", fmt(sumMetric(bs, "rocketmq_errors_total")), "errors"),
    card("Controller leader", data.controllerLeaders.length ? data.controllerLeaders.join(", ") : "– (not in HA mode)",
      "controller_leader"));
  const rows = bs.map((b) => {
    const m = b.metrics, ha = b.ha;
    const cell = (name) => num(m[name], { "data-broker": b.identity, "data-metric": name });
    const role = ha.role || b.configuredRole;
    const sss = ha.syncStateSet && ha.syncStateSet.length ? ha.syncStateSet.join(", ") : "–";
    const slaves = (ha.slaves || []).map((s) => el("tr", {}, el("td", {}, s.id), el("td", {}, s.state),
      num(s.ack), el("td", { class: s.lagBytes > 0 ? "num lag" : "num" }, human(s.lagBytes))));
    return el("tr", { "data-broker-row": b.identity },
      el("td", {}, b.identity), el("td", {}, b.addr),
      el("td", { class: "role-" + role, "data-role": b.identity }, role),
      el("td", { class: b.status === "running" ? "" : "bad" }, b.status, b.lastError ? el("div", { class: "bad" }, b.lastError) : null),
      num(ha.masterEpoch), el("td", { "data-sss": b.identity }, sss),
      cell("rocketmq_messages_in_total"), cell("rocketmq_messages_out_total"),
      el("td", { class: "num" }, human(m.rocketmq_bytes_in_total || 0)),
      cell("rocketmq_errors_total"), el("td", { class: "num" }, human(m.rocketmq_disk_usage_bytes || 0)),
      cell("rocketmq_commitlog_max_offset"), snapshotCell(b.identity, ha.metadataSnapshot),
      el("td", {}, slaves.length ? table(["slave", "state", "ack", "lag"], slaves, "inner")
        : (ha.masterHaAddr ? "master HA " + ha.masterHaAddr + (ha.connected ? " (connected)" : " (not connected)") : "–")));
  });
  renderTimers(data);
  renderPop(data);
  replace("brokers", table(["broker", "address", "role", "status", "epoch", "sync state set", "msgs in",
    "msgs out", "bytes in", "errors", "disk", "commit log max", "metadata snapshot", "replicas"], rows));
}

// timer messages per broker: pending by due time (cumulative counts, shown per band), fired, recalled, lateness
function renderTimers(data) {
  const bands = [["1", "≤ 1 s"], ["60", "≤ 1 min"], ["3600", "≤ 1 h"], ["86400", "≤ 1 d"], ["+Inf", "all"]];
  const rows = data.brokers.filter((b) => b.timers).map((b) => {
    const t = b.timers, due = t.pendingByDue || {};
    const late = (ms) => (ms < 0 ? "–" : ms === 1e12 ? "> 60 s" : "≤ " + fmt(ms) + " ms");
    return el("tr", { "data-timers": b.identity }, el("td", {}, b.identity),
      ...bands.map(([le]) => num(due[le], { "data-due": le })),
      num(t.fired, { "data-timer": "fired" }), num(t.rolled), num(t.recalled, { "data-timer": "recalled" }),
      num(t.refused), el("td", { class: "num" }, late(t.latenessP50Ms)), el("td", { class: "num" }, late(t.latenessP99Ms)));
  });
  replace("timers", rows.length ? table(["broker", ...bands.map(([, label]) => "pending " + label), "fired", "rolled",
    "recalled", "refused", "lateness p50", "lateness p99"], rows) : el("p", {}, "–"));
}

// POP consumption per broker and group: messages in flight, revive backlog (past their invisible time, not revived
// yet), retry backlog (waiting in the group's retry topic), and the broker's POP counters
function renderPop(data) {
  const rows = [];
  data.brokers.filter((b) => b.pop && (b.pop.active || b.pop.groups.length)).forEach((b) => {
    const p = b.pop;
    const groups = p.groups.length ? p.groups : [{ group: "–", inflight: 0, reviveBacklog: 0, retryBacklog: 0 }];
    groups.forEach((g) => rows.push(el("tr", { "data-pop-group": b.identity + "/" + g.group },
      el("td", {}, b.identity), el("td", {}, g.group), num(g.inflight, { "data-pop": "inflight" }),
      num(g.reviveBacklog, { "data-pop": "reviveBacklog" }), num(g.retryBacklog, { "data-pop": "retryBacklog" }),
      num(p.popped), num(p.acks), num(p.revived), num(p.dead_lettered), num(p.parked))));
  });
  replace("pop", rows.length ? table(["broker", "group", "in flight", "revive backlog", "retry backlog", "popped",
    "acked", "revived", "to DLQ", "parked polls"], rows) : el("p", {}, "–"));
}

// the gRPC endpoint (RocketMQ 5.x SDKs): its clients, and its requests by RPC and the proto's status code
function renderGrpc(data) {
  if (!data.enabled) { replace("grpc", el("p", {}, "not enabled (enableGrpcProxy=false)")); return; }
  const clients = data.clients.map((c) => el("tr", { "data-grpc-client": c.clientId }, el("td", {}, c.clientId),
    el("td", {}, c.type), el("td", {}, c.language + " " + c.version), el("td", {}, c.peer),
    el("td", {}, c.group || (c.topics || []).join(", ") || "–"), el("td", {}, c.telemetry ? "open" : "–"),
    num(c.idleSeconds)));
  const requests = data.requests.map((r) => el("tr", { "data-grpc-rpc": r.rpc + "/" + r.code },
    el("td", {}, r.rpc), el("td", {}, r.code), num(r.count)));
  const m = data.messages || {};
  replace("grpc", el("p", {}, "port " + data.port + " · sent " + fmt(m.sent || 0) + " · received " +
    fmt(m.received || 0) + " · acked " + fmt(m.acked || 0) + " · refused by ACL " + fmt(m.authRefused || 0)),
    clients.length ? table(["client", "type", "SDK", "address", "group / topics", "telemetry", "idle s"], clients)
      : el("p", {}, "no client connected"),
    requests.length ? table(["RPC", "status", "requests"], requests) : el("p", {}, "no request yet"));
}

// the latest metadata snapshot's commit-log position (records below it are covered; expiry keeps the rest)
function snapshotCell(identity, snap) {
  if (!snap) return el("td", { "data-snapshot": identity }, "–");
  if (snap.logOffset < 0) return el("td", { "data-snapshot": identity }, "none yet");
  return el("td", { class: "num", "data-snapshot": identity, title: new Date(snap.time).toISOString() },
    fmt(snap.logOffset));
}

// ---- charts -----------------------------------------------------------------------------------------------

function totals(history, series) {
  return history.t.map((_, i) => {
    let sum = null;
    for (const b of Object.values(history.brokers)) {
      const v = b[series][i];
      if (v !== null && v !== undefined) sum = (sum || 0) + v;
    }
    return sum;
  });
}

function svgNode(tag, attrs) {
  const n = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  return n;
}

function lineChart(id, history, inSeries, outSeries, label) {
  const W = 460, H = 150, P = 34;
  const ins = totals(history, inSeries), outs = totals(history, outSeries);
  const max = Math.max(1, ...ins.filter((v) => v !== null), ...outs.filter((v) => v !== null));
  const svg = svgNode("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label });
  svg.append(svgNode("line", { x1: P, y1: H - 18, x2: W - 4, y2: H - 18, stroke: "#c5ccd6" }));
  const top = svgNode("text", { x: 2, y: 12, "font-size": 10, fill: "#5a6778" });
  top.textContent = label === "bytes" ? human(max) + "/s" : fmt(Math.round(max)) + "/s";
  svg.append(top);
  const n = Math.max(ins.length, 2);
  let points = 0;
  const path = (vals, color, dash) => {
    let d = "";
    vals.forEach((v, i) => {
      if (v === null) return;
      const x = P + (i * (W - P - 4)) / (n - 1), y = H - 18 - (v / max) * (H - 36);
      d += (d ? " L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
      svg.append(svgNode("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: 2, fill: color }));
      points++;
    });
    if (d) svg.append(svgNode("path", { d, fill: "none", stroke: color, "stroke-width": 2, "stroke-dasharray": dash }));
  };
  path(ins, "#1565c0", "none");
  path(outs, "#ef6c00", "6 4");
  svg.setAttribute("data-points", String(points));
  const last = (vals) => { for (let i = vals.length - 1; i >= 0; i--) if (vals[i] !== null) return vals[i]; return 0; };
  const fmtRate = (v) => (label === "bytes" ? human(Math.round(v)) : fmt(Math.round(v))) + "/s";
  replace(id, svg, el("div", { class: "legend" }, el("span", { class: "in" }, "━ in " + fmtRate(last(ins))), "  ",
    el("span", { class: "out" }, "┅ out " + fmtRate(last(outs))),
    el("span", { class: "muted" }, "  (last " + span(history.t.length * history.intervalS) + ")")));
}

function span(seconds) {
  return seconds < 120 ? Math.round(seconds) + " s" : Math.round(seconds / 60) + " min";
}

function renderHistory(history) {
  lineChart("chart-msgs", history, "rocketmq_messages_in_total", "rocketmq_messages_out_total", "messages");
  lineChart("chart-bytes", history, "rocketmq_bytes_in_total", "rocketmq_bytes_out_total", "bytes");
}

// ---- topics and groups ------------------------------------------------------------------------------------

function queueTable(queues, cols) {
  return table(cols.map((c) => c[0]), queues.map((q) => el("tr", {}, ...cols.map((c) => num(q[c[1]])))), "inner");
}

function deleteButton(broker, topic) {
  const b = el("button", { class: "danger admin-only", type: "button" }, "delete");
  b.addEventListener("click", async () => {
    if (!window.confirm(`Delete topic ${topic} on ${broker}?`)) return;
    try { await adminPost("/api/topic/delete", { broker, topic }); await refresh(); } catch (e) { window.alert(e.message); }
  });
  return b;
}

function renderTopics(data) {
  const showSystem = document.getElementById("show-system").checked;
  const select = document.getElementById("ct-broker");
  if (select.options.length !== data.brokers.length) {
    select.replaceChildren(...data.brokers.map((b) => el("option", { value: b.identity }, b.identity)));
  }
  const parts = [];
  for (const b of data.brokers) {
    parts.push(el("h3", {}, b.identity), b.error ? el("p", { class: "bad" }, b.error) : null);
    const rows = b.rows.filter((t) => showSystem || !(t.system || t.retryOrDlq)).map((t) => el("tr", { "data-topic": t.topic },
      el("td", {}, t.topic), num(t.readQueueNums), num(t.writeQueueNums), el("td", {}, t.perm === 6 ? "RW" : String(t.perm)),
      num(t.maxOffsetSum, { "data-topic-sum": t.topic, "data-broker": b.identity }),
      el("td", {}, queueTable(t.queues, [["queue", "queueId"], ["min", "minOffset"], ["max", "maxOffset"]])),
      el("td", {}, t.system ? null : deleteButton(b.identity, t.topic))));
    parts.push(rows.length ? table(["topic", "read q", "write q", "perm", "messages (Σ max offset)", "queues", ""], rows)
      : el("p", { class: "muted" }, "no topics"));
  }
  replace("topics", ...parts.filter((p) => p !== null));
}

function renderGroups(data) {
  const parts = [];
  for (const b of data.brokers) {
    parts.push(el("h3", {}, b.identity));
    if (b.error) parts.push(el("p", { class: "bad" }, b.error));
    const rows = b.rows.map((g) => el("tr", { "data-group": g.group + "@" + g.topic },
      el("td", {}, g.group), el("td", {}, g.topic), num(g.online),
      el("td", { class: g.lag > 0 ? "num lag" : "num", "data-lag": g.group + "@" + g.topic, "data-broker": b.identity },
        g.committed ? fmt(g.lag) : "–"),
      el("td", {}, g.committed ? queueTable(g.queues, [["queue", "queueId"], ["broker", "brokerOffset"],
        ["consumer", "consumerOffset"], ["lag", "lag"]]) : el("span", { class: "muted" }, "subscribed, nothing committed yet"))));
    parts.push(rows.length ? table(["group", "topic", "online", "lag", "queues"], rows)
      : el("p", { class: "muted" }, "no consumer groups"));
  }
  replace("groups", ...parts);
}

function renderErrors(data) {
  const rows = data.entries.map((e) => el("tr", {},
    el("td", {}, new Date(e.time * 1000).toISOString().replace("T", " ").slice(0, 19)),
    el("td", { class: "level-" + e.level }, e.level), el("td", {}, e.logger), el("td", { class: "message" }, e.message)));
  replace("errors", el("p", { class: "muted" }, `${fmt(data.total)} warnings and errors logged since start; the last ${rows.length}:`),
    rows.length ? table(["time (UTC)", "level", "logger", "message"], rows, "errlist") : el("p", {}, "none"));
}

// ---- session and admin ------------------------------------------------------------------------------------

function renderSession() {
  const s = state.session;
  document.body.classList.toggle("admin", Boolean(s.user));
  document.getElementById("whoami").textContent = s.user ? "admin: " + s.user : "read-only";
  document.getElementById("admin-notice").textContent = s.adminEnabled
    ? (s.user ? `Logged in as ${s.user}: topics can be created and deleted on the Topics page.`
      : "Read-only. Log in with an admin account (ACL accessKey / secretKey with admin: true) to create or delete topics.")
    : s.notice;
  document.getElementById("login").hidden = !s.adminEnabled || Boolean(s.user);
  document.getElementById("logout").hidden = !s.user;
}

async function adminPost(path, body) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": state.session.csrf || "" },
    body: JSON.stringify(body) });
}

function wireForms() {
  document.getElementById("login").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = document.getElementById("login-result");
    try {
      await api("/api/login", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ accessKey: document.getElementById("access-key").value,
          secretKey: document.getElementById("secret-key").value }) });
      out.textContent = ""; out.className = "result";
      document.getElementById("secret-key").value = "";
    } catch (e) { out.textContent = e.message; out.className = "result error"; }
    await loadSession();
  });
  document.getElementById("logout").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    await api("/api/logout", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
    await loadSession();
  });
  document.getElementById("create-topic").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = document.getElementById("ct-result");
    const topic = document.getElementById("ct-topic").value;
    try {
      await adminPost("/api/topic", { broker: document.getElementById("ct-broker").value, topic,
        queues: Number(document.getElementById("ct-queues").value) });
      out.textContent = `created ${topic}`; out.className = "result";
    } catch (e) { out.textContent = e.message; out.className = "result error"; }
    await refresh();
  });
  document.getElementById("show-system").addEventListener("change", () => refresh());
}

async function loadSession() {
  state.session = await api("/api/session");
  renderSession();
}

// ---- routing and polling ----------------------------------------------------------------------------------

const LOADERS = {
  overview: async () => {
    renderOverview(await api("/api/overview")); renderHistory(await api("/api/history")); renderGrpc(await api("/api/grpc"));
  },
  topics: async () => renderTopics(await api("/api/topics")),
  groups: async () => renderGroups(await api("/api/groups")),
  errors: async () => renderErrors(await api("/api/errors")),
  admin: async () => loadSession(),
};

function show(page) {
  state.page = PAGES.includes(page) ? page : "overview";
  for (const p of PAGES) document.getElementById("page-" + p).classList.toggle("shown", p === state.page);
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === state.page);
}

async function refresh() {
  const live = document.getElementById("live");
  try {
    await LOADERS[state.page]();
    state.lastOk = Date.now();
    live.textContent = "live · " + new Date().toLocaleTimeString("en-GB");
    live.className = "live ok";
    document.body.dataset.loaded = state.page;
  } catch (e) {
    live.textContent = "update failed: " + e.message;
    live.className = "live stale";
  }
}

function start() {
  wireForms();
  show(location.hash.slice(1));
  window.addEventListener("hashchange", () => { show(location.hash.slice(1)); refresh(); });
  loadSession().catch(() => {}).then(refresh);
  window.setInterval(refresh, POLL_MS);
}

document.addEventListener("DOMContentLoaded", start);
