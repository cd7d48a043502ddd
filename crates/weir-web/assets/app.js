// The Weir dashboard: polls the REST API once a second and redraws. No framework, no
// network access beyond this server: everything is drawn as SVG here.
"use strict";

const NS = "http://www.w3.org/2000/svg";
let selected = decodeURIComponent((location.hash.match(/#\/jobs\/([0-9a-f]+)/) || [])[1] || "");
let updates = 0;

async function get(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmtCount(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(2) + " G";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + " k";
  return String(Math.round(n));
}
function fmtBytes(b) {
  if (b >= 1 << 30) return (b / (1 << 30)).toFixed(2) + " GiB";
  if (b >= 1 << 20) return (b / (1 << 20)).toFixed(1) + " MiB";
  if (b >= 1 << 10) return (b / (1 << 10)).toFixed(1) + " KiB";
  return b + " B";
}
function fmtDuration(ms) {
  if (ms < 1000) return ms + " ms";
  const s = Math.floor(ms / 1000);
  if (s < 60) return (ms / 1000).toFixed(1) + " s";
  const m = Math.floor(s / 60);
  return m < 60 ? m + " min " + (s % 60) + " s" : Math.floor(m / 60) + " h " + (m % 60) + " min";
}
function fmtTime(t) { return new Date(t).toLocaleTimeString(); }

function renderJobs(jobs) {
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren();
  for (const j of jobs) {
    const tr = document.createElement("tr");
    tr.dataset.jobId = j.jid;
    if (j.jid === selected) tr.className = "selected";
    for (const v of [j.jid.slice(0, 8), j.name, j.state, fmtDuration(j.duration), j.restarts]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.appendChild(td);
    }
    tr.onclick = () => { selected = j.jid; location.hash = "#/jobs/" + j.jid; refresh(); };
    body.appendChild(tr);
  }
}

// Vertices in columns by their distance from the sources.
function layout(plan) {
  const level = {};
  const byId = Object.fromEntries(plan.nodes.map((n) => [n.id, n]));
  const depth = (id, seen) => {
    if (level[id] !== undefined) return level[id];
    if (seen.has(id)) return 0;
    seen.add(id);
    const ins = byId[id].inputs || [];
    level[id] = ins.length ? 1 + Math.max(...ins.map((i) => depth(i.id, seen))) : 0;
    return level[id];
  };
  plan.nodes.forEach((n) => depth(n.id, new Set()));
  const rows = {};
  const pos = {};
  for (const n of plan.nodes) {
    const l = level[n.id];
    rows[l] = (rows[l] || 0) + 1;
    pos[n.id] = { x: 20 + l * 290, y: 20 + (rows[l] - 1) * 120 };
  }
  return pos;
}

function vertexClass(v) {
  if (v.status === "FINISHED") return "finished";
  if (v.backPressuredTimeMsPerSecond > 100) return "pressured";
  if (v.busyTimeMsPerSecond > 500) return "busy";
  return "idle";
}

function renderGraph(job) {
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  const defs = el("defs");
  const marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
  marker.appendChild(el("path", { d: "M0,0 L10,5 L0,10 z", fill: "#7d869a" }));
  defs.appendChild(marker);
  svg.appendChild(defs);
  const pos = layout(job.plan);
  const W = 240, H = 92;
  let maxX = 0, maxY = 0;
  for (const n of job.plan.nodes) {
    for (const input of n.inputs || []) {
      const a = pos[input.id], b = pos[n.id];
      const g = el("g", { class: "edge" });
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      g.appendChild(el("path", { d: `M${x1},${y1} C${x1 + 30},${y1} ${x2 - 30},${y2} ${x2},${y2}` }));
      g.appendChild(el("text", { x: (x1 + x2) / 2 - 20, y: (y1 + y2) / 2 - 4 }, input.ship_strategy));
      svg.appendChild(g);
    }
  }
  for (const v of job.vertices) {
    const p = pos[v.id];
    maxX = Math.max(maxX, p.x + W); maxY = Math.max(maxY, p.y + H);
    const g = el("g", { class: "vertex " + vertexClass(v), "data-vertex-id": v.id, transform: `translate(${p.x},${p.y})` });
    g.appendChild(el("rect", { width: W, height: H }));
    const name = v.name.length > 34 ? v.name.slice(0, 33) + "…" : v.name;
    g.appendChild(el("text", { x: 8, y: 17, class: "name" }, name));
    g.appendChild(el("title", {}, v.name));
    g.appendChild(el("text", { x: 8, y: 35 }, `parallelism ${v.parallelism} · ${v.status}`));
    g.appendChild(el("text", { x: 8, y: 52 }, `in ${fmtCount(v["records-in-per-second"])}/s · out ${fmtCount(v["records-out-per-second"])}/s`));
    g.appendChild(el("text", { x: 8, y: 69 }, `busy ${Math.round(v.busyTimeMsPerSecond / 10)}% · back-pressured ${Math.round(v.backPressuredTimeMsPerSecond / 10)}%`));
    g.appendChild(el("text", { x: 8, y: 86 }, `rows ${fmtCount(v.metrics["read-records"])} → ${fmtCount(v.metrics["write-records"])}`));
    svg.appendChild(g);
  }
  svg.setAttribute("viewBox", `0 0 ${maxX + 20} ${maxY + 20}`);
  svg.style.height = (maxY + 20) + "px";
}

function renderChart(id, series) {
  const svg = document.getElementById(id);
  svg.replaceChildren();
  const W = 520, H = 170, L = 48, B = 18;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const all = series.flatMap((s) => s.points.map((p) => p[1]));
  const t = series.flatMap((s) => s.points.map((p) => p[0]));
  if (!t.length) { svg.appendChild(el("text", { x: L, y: H / 2 }, "waiting for samples…")); return; }
  const maxV = Math.max(1, ...all), t0 = Math.min(...t), t1 = Math.max(t0 + 1000, ...t);
  const x = (v) => L + (v - t0) / (t1 - t0) * (W - L - 8);
  const y = (v) => H - B - v / maxV * (H - B - 8);
  svg.appendChild(el("line", { class: "axis", x1: L, y1: H - B, x2: W - 8, y2: H - B }));
  svg.appendChild(el("line", { class: "axis", x1: L, y1: 8, x2: L, y2: H - B }));
  svg.appendChild(el("text", { x: 2, y: 14 }, fmtCount(maxV)));
  svg.appendChild(el("text", { x: 2, y: H - B }, "0"));
  svg.appendChild(el("text", { x: L, y: H - 4 }, fmtTime(t0)));
  svg.appendChild(el("text", { x: W - 70, y: H - 4 }, fmtTime(t1)));
  for (const s of series) {
    svg.appendChild(el("polyline", { class: s.cls, points: s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ") }));
  }
}

function renderCheckpoints(c) {
  document.getElementById("checkpoint-counts").textContent =
    `(${c.counts.completed} completed, ${c.counts.failed} failed, ${c.counts.in_progress} in progress, ${c.counts.restored} restored)`;
  const body = document.querySelector("#checkpoints tbody");
  body.replaceChildren();
  for (const h of c.history.slice(0, 15)) {
    const tr = document.createElement("tr");
    const cells = [h.id, h.status, h.is_savepoint ? "savepoint" : "checkpoint", fmtTime(h.trigger_timestamp),
      fmtDuration(h.end_to_end_duration), fmtBytes(h.state_size), `${h.num_acknowledged_subtasks}/${h.num_subtasks}`];
    cells.forEach((v, i) => {
      const td = document.createElement("td");
      td.textContent = v;
      if (i === 1) td.className = h.status;
      if (h.failure_message && i === 1) td.title = h.failure_message;
      tr.appendChild(td);
    });
    body.appendChild(tr);
  }
}

function renderExceptions(e, job) {
  const ul = document.getElementById("exceptions");
  ul.replaceChildren();
  const entries = e.exceptionHistory.entries;
  if (!entries.length) {
    const li = document.createElement("li");
    li.textContent = "no failures";
    ul.appendChild(li);
  }
  for (const x of entries) {
    const li = document.createElement("li");
    li.textContent = `${fmtTime(x.timestamp)}  ${x.stacktrace}`;
    ul.appendChild(li);
  }
}

async function refresh() {
  try {
    const overview = await get("/jobs/overview");
    const jobs = overview.jobs;
    if (!jobs.some((j) => j.jid === selected)) {
      const running = jobs.filter((j) => j.state === "RUNNING" || j.state === "RESTARTING");
      selected = (running[running.length - 1] || jobs[jobs.length - 1] || {}).jid || "";
    }
    renderJobs(jobs);
    const section = document.getElementById("job");
    section.hidden = !selected;
    if (selected) {
      const base = "/jobs/" + selected;
      const [job, checkpoints, history, exceptions] = await Promise.all([
        get(base), get(base + "/checkpoints"), get(base + "/metrics-history"), get(base + "/exceptions"),
      ]);
      document.getElementById("job-id").textContent = job.jid;
      document.getElementById("job-state").textContent = job.state;
      document.getElementById("job-rows-in").textContent = job["rows-in"];
      document.getElementById("job-rows-out").textContent = job["rows-out"];
      const last = history.points[history.points.length - 1];
      document.getElementById("job-rate-in").textContent = last ? fmtCount(last["records-in-per-second"]) : "0";
      document.getElementById("job-lag").textContent =
        last && last["watermark-lag"] !== null ? fmtDuration(last["watermark-lag"]) : "–";
      document.getElementById("job-state-size").textContent = fmtBytes(job["state-size"]);
      document.getElementById("job-restarts").textContent = job.restarts;
      renderGraph(job);
      renderChart("chart-throughput", [
        { cls: "in", points: history.points.map((p) => [p.timestamp, p["records-in-per-second"]]) },
        { cls: "out", points: history.points.map((p) => [p.timestamp, p["records-out-per-second"]]) },
      ]);
      renderChart("chart-lag", [
        { cls: "lag", points: history.points.filter((p) => p["watermark-lag"] !== null).map((p) => [p.timestamp, p["watermark-lag"] / 1000]) },
      ]);
      renderCheckpoints(checkpoints);
      renderExceptions(exceptions, job);
    }
    updates += 1;
    const u = document.getElementById("updated");
    u.dataset.updates = String(updates);
    u.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("updated").textContent = "cannot reach the job: " + e.message;
  }
}

refresh();
setInterval(refresh, 1000);
