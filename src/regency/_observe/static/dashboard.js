// The regency dashboard: plain JavaScript over the JSON API (/api/v1/...), refreshed every
// second. The token comes from the URL fragment (#token=...), never sent to the server in
// the URL; requests carry it as a bearer token.
"use strict";
const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
const COLORS = ["#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6"];
let treeFilter = "", logSearch = "", logProc = "";

async function api(path) {
  const r = await fetch("/api/v1/" + path, {headers: {Authorization: "Bearer " + token}});
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
  return r.json();
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k === null || k === undefined ? "" : String(k));
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function row(cls, cells, state) {
  const tr = el("tr", {class: cls});
  cells.forEach((c, i) => tr.append(el("td", i === 1 ? {class: state || ""} : {}, c)));
  return tr;
}

// The tree is drawn as a window: every row is in treeLines (filtered), but only those in
// view, and WINDOW_MARGIN either side, are in the document, between two spacer rows as tall
// as the rows left out. A job of a thousand actors then costs the browser a few dozen rows
// to lay out, at load and at each refresh. Rows are kept by key (host, proc or actor)
// between refreshes, and a refresh changes only the cells whose text changed.
const treeRows = new Map();
let treeLines = [];  // [{key, cls, cells, state}], every row of the tree, in order
let rowHeight = 0;  // measured on the first rows drawn
const WINDOW_MARGIN = 30;
const spacers = [el("tr", {class: "spacer"}), el("tr", {class: "spacer"})];
spacers.forEach(s => s.append(el("td", {colspan: "8"})));

function treeRow(key, cls, cells, state) {
  let tr = treeRows.get(key);
  if (!tr) {
    tr = row(cls, cells, state);
    treeRows.set(key, tr);
    return tr;
  }
  const tds = tr.children;
  for (let i = 0; i < cells.length; i++) {
    const text = cells[i] === null || cells[i] === undefined ? "" : String(cells[i]);
    if (tds[i].textContent !== text) tds[i].textContent = text;
  }
  if (tds[1].className !== (state || "")) tds[1].className = state || "";
  return tr;
}

function drawTreeWindow() {
  const box = document.getElementById("tree-scroll");
  const body = document.querySelector("#tree tbody");
  const h = rowHeight || 22;
  const first = Math.max(0, Math.floor(box.scrollTop / h) - WINDOW_MARGIN);
  const last = Math.min(treeLines.length,
                        first + Math.ceil((box.clientHeight || 600) / h) + 2 * WINDOW_MARGIN);
  const rows = [spacers[0]];
  for (let i = first; i < last; i++) {
    const l = treeLines[i];
    rows.push(treeRow(l.key, l.cls, l.cells, l.state));
  }
  rows.push(spacers[1]);
  spacers[0].style.height = (first * h) + "px";
  spacers[1].style.height = ((treeLines.length - last) * h) + "px";
  const shown = body.children;
  if (shown.length !== rows.length || rows.some((r, i) => shown[i] !== r)) {
    body.replaceChildren(...rows);
  }
  const live = new Set(rows);
  for (const [key, tr] of treeRows) if (!live.has(tr)) treeRows.delete(key);
  document.body.dataset.treeDrawn = first + "-" + last;
  if (!rowHeight && rows.length > 2) {  // measure once laid out, then draw to the right size
    requestAnimationFrame(() => {
      const measured = rows[1].getBoundingClientRect().height;
      if (measured > 0 && !rowHeight) {
        rowHeight = measured;
        if (Math.abs(measured - h) > 0.5) drawTreeWindow();
      }
    });
  }
}

let scrollPending = false;
document.getElementById("tree-scroll").addEventListener("scroll", () => {
  if (scrollPending) return;
  scrollPending = true;
  requestAnimationFrame(() => { scrollPending = false; drawTreeWindow(); });
});

function cause(report) {  // the one line of a failure report that says why
  if (!report) return "";
  const m = report.match(/cause:\s*(.*)/);
  return m ? m[1] : report.split("\n")[0];
}

function renderTree(tree) {
  const lines = [];
  const f = treeFilter.toLowerCase();
  const hit = (...xs) => !f || xs.some(x => String(x || "").toLowerCase().includes(f));
  const procSelect = document.getElementById("log-proc");
  const known = new Set([...procSelect.options].map(o => o.value));
  for (const h of tree.hosts) {
    lines.push({key: "h " + h.host, cls: "host",
                cells: ["host " + h.host, "", "", "", "", "", "", ""]});
    for (const p of h.procs) {
      if (!known.has(p.proc)) {
        procSelect.append(el("option", {value: p.proc}, p.mesh_name + " " + p.rank));
        known.add(p.proc);
      }
      const actors = p.actors.filter(a => hit(a.actor, a.name, a.class, a.state, p.mesh_name));
      if (!actors.length && !hit(p.proc, p.mesh_name, p.state)) continue;
      lines.push({key: "p " + p.proc, cls: "proc", state: p.state, cells: [
        p.mesh_name + " rank " + p.rank + "  " + p.proc, p.state, p.pid, p.cpu ?? "",
        p.rss ? (p.rss / 1048576).toFixed(1) : "", p.queue, p.rate, p.last_failure || ""]});
      for (const a of actors) {
        lines.push({key: "a " + a.actor, cls: "actor", state: a.state, cells: [
          a.name + a.rank + "  " + a.class, a.state, "", "", "", a.queue, a.rate,
          cause(a.failure)]});
      }
    }
  }
  treeLines = lines;
  document.body.dataset.treeRows = String(lines.length);
  drawTreeWindow();
}

function renderTimeline(calls, events, w) {
  const box = document.getElementById("timeline");
  const h = 160;
  const end = Math.max(0, ...calls.map(c => c.end_us), ...events.map(e => e.ts_us));
  const start = end - 10e6;
  const lanes = [...new Set(calls.map(c => c.proc))];
  const laneH = Math.max(8, Math.min(30, (h - 20) / Math.max(1, lanes.length)));
  const x = t => ((t - start) / 10e6) * w;
  const kids = [];
  for (const c of calls) {
    if (c.end_us < start) continue;
    const y = lanes.indexOf(c.proc) * laneH;
    kids.push(svg("rect", {x: x(c.start_us), y: y + 1, height: laneH - 2, class: "call",
      width: Math.max(1, x(c.end_us) - x(c.start_us)), fill: c.ok ? "#3366cc" : "#dc3912"}));
  }
  for (const e of events) {
    if (e.kind !== "failure" || e.ts_us < start) continue;
    kids.push(svg("line", {x1: x(e.ts_us), x2: x(e.ts_us), y1: 0, y2: h, class: "failure",
      stroke: "#b00020", "stroke-width": 2}));
  }
  box.replaceChildren(...kids);
}

function renderThroughput(t, w) {
  const box = document.getElementById("throughput");
  const h = 150;
  const max = Math.max(1, ...t.meshes.flatMap(m => m.per_second));
  const n = Math.max(1, t.seconds.length - 1);
  const legend = [];
  const kids = t.meshes.map((m, i) => {
    const color = COLORS[i % COLORS.length];
    legend.push(el("span", {style: "color:" + color}, m.name + " " +
      (m.per_second[m.per_second.length - 1] || 0) + "/s"));
    const pts = m.per_second.map((v, j) => (j / n) * w + "," + (h - (v / max) * (h - 10)));
    return svg("polyline", {points: pts.join(" "), fill: "none", stroke: color,
      "stroke-width": 2, class: "mesh-line"});
  });
  box.replaceChildren(...kids);
  document.getElementById("throughput-legend").replaceChildren(...legend);
}

function renderLogs(lines) {
  const pre = document.getElementById("logs");
  pre.textContent = lines.map(l => "[" + l.label + "] " + l.line).join("\n");
  // to the end at the next frame: reading scrollHeight now would lay the page out twice
  requestAnimationFrame(() => { pre.scrollTop = pre.scrollHeight; });
}

function renderEvents(events) {
  const body = document.querySelector("#events tbody");
  body.replaceChildren(...events.slice(-30).reverse().map(e => {
    const t = new Date(e.ts_us / 1000).toLocaleTimeString();
    return row("event " + e.kind, [t, e.kind, e.actor || e.proc, e.summary],
      e.kind === "failure" ? "failed" : "");
  }));
}

// What each refresh cost (milliseconds): the API's answers, then drawing them; the last
// 120 are kept in window.regencyTimings for benchmarks/dashboard.py.
window.regencyTimings = [];
const REFRESH_MS = 1000;
let refreshing = null, again = false;

async function refresh() {
  if (refreshing) {  // one at a time: a refresh asked for meanwhile runs after this one
    again = true;
    return refreshing;
  }
  refreshing = refreshOnce();
  try {
    await refreshing;
  } finally {
    refreshing = null;
  }
  if (again) {
    again = false;
    return refresh();
  }
}

async function refreshOnce() {
  const began = performance.now();
  try {
    const q = "logs?limit=200" + (logSearch ? "&q=" + encodeURIComponent(logSearch) : "") +
      (logProc ? "&proc=" + encodeURIComponent(logProc) : "");
    const [summary, tree, calls, events, thr, logs] = await Promise.all([
      api("summary"), api("tree?log_tail=0"),
      api("calls?limit=2000&fields=start_us,end_us,proc,ok"), api("events?limit=300"),
      api("throughput?window_s=60"), api(q)]);
    const fetched = performance.now();
    document.getElementById("job").textContent = "job " + (summary.job.job || "?");
    const p = summary.procs, a = summary.actors;
    document.getElementById("summary").textContent =
      "procs " + JSON.stringify(p) + "  actors " + JSON.stringify(a) +
      "  failures " + summary.failures;
    // the plots' widths, read before anything changes: reading a size after the tree
    // changed would make the browser lay the whole page out there and then
    const widths = ["timeline", "throughput"].map(
      id => document.getElementById(id).clientWidth || 600);
    const parts = {};
    for (const [name, draw] of [["tree", () => renderTree(tree)],
                                ["timeline", () => renderTimeline(calls, events, widths[0])],
                                ["throughput", () => renderThroughput(thr, widths[1])],
                                ["logs", () => renderLogs(logs)],
                                ["events", () => renderEvents(events)]]) {
      const t = performance.now();
      draw();
      parts[name] = performance.now() - t;
    }
    const rendered = performance.now();
    document.getElementById("status").textContent =
      "updated " + new Date().toLocaleTimeString() + " in " + Math.round(rendered - began) +
      " ms";
    window.regencyTimings.push({fetch: fetched - began, render: rendered - fetched,
                                total: rendered - began, at: began, parts});
    if (window.regencyTimings.length > 120) window.regencyTimings.shift();
    if (!document.body.dataset.loaded) {  // time from navigation to the first full render
      // wait for the browser to lay out and paint what was drawn before taking the time
      await new Promise(done => requestAnimationFrame(() => setTimeout(done, 0)));
      document.body.dataset.firstRenderMs = String(Math.round(performance.now()));
    }
    document.body.dataset.loaded = "yes";
  } catch (err) {
    document.getElementById("status").textContent = "error: " + err.message;
  }
}

async function showStacks() {
  const pre = document.getElementById("stacks");
  const proc = document.getElementById("log-proc").value;
  if (!proc) {
    pre.textContent = "choose a proc in the list first";
    return;
  }
  pre.textContent = "asking " + proc + " for its stacks…";
  try {
    const r = await fetch("/api/v1/stack?proc=" + encodeURIComponent(proc),
                          {headers: {Authorization: "Bearer " + token}});
    const got = await r.json();
    pre.textContent = got.stacks || (got.error + ": " + got.message);
  } catch (err) {
    pre.textContent = "error: " + err.message;
  }
  pre.dataset.loaded = "yes";
}

async function loop() {  // every REFRESH_MS from the start of the last refresh, never two at once
  const began = performance.now();
  await refresh();
  setTimeout(loop, Math.max(0, REFRESH_MS - (performance.now() - began)));
}

document.getElementById("tree-filter").addEventListener("input", e => {
  treeFilter = e.target.value; refresh();
});
document.getElementById("log-search").addEventListener("input", e => {
  logSearch = e.target.value; refresh();
});
document.getElementById("log-proc").addEventListener("change", e => {
  logProc = e.target.value; refresh();
});
document.getElementById("stack-button").addEventListener("click", showStacks);
loop();
