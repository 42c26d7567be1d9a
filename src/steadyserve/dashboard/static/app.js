// SteadyServe dashboard: polls the controller's JSON and draws it. No build step.
"use strict";

const REFRESH_MS = 1000;
const COLORS = ["#2f7de1", "#e8590c", "#2b8a3e", "#9c36b5", "#c92a2a", "#1098ad", "#5c940d"];
const NONE_COLOR = "#868e96";

// Data calls carry the session cookie the one-time link of `steady dashboard` set
// (HttpOnly: this script never sees it). Without one, say how to get a link.
async function getJSON(path) {
  const response = await fetch(path, { cache: "no-store", credentials: "same-origin" });
  if (response.status === 401) {
    throw new Error("not signed in: run `steady dashboard` for a new link");
  }
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]
  ));
}

function age(seconds) {
  if (seconds < 60) return Math.round(seconds) + "s";
  if (seconds < 3600) return Math.floor(seconds / 60) + "m " + Math.round(seconds % 60) + "s";
  return Math.floor(seconds / 3600) + "h " + Math.floor((seconds % 3600) / 60) + "m";
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString();
}

function colorOf(version) {
  return version === "none" ? NONE_COLOR : COLORS[(parseInt(version, 10) - 1) % COLORS.length];
}

function label(version) {
  return version === "none" ? "LB itself" : "v" + version;
}

function fmt(value, digits) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

// One card per service; created once, its parts replaced on each refresh.
const cards = new Map();

function card(name) {
  let entry = cards.get(name);
  if (!entry) {
    const root = document.createElement("section");
    root.className = "service";
    root.dataset.service = name;
    root.innerHTML = `
      <h2></h2><div class="meta"></div>
      <div class="update-box"></div>
      <h3>Traffic by version (last 15 min)</h3>
      <table class="rates"></table>
      <div class="charts">
        <div class="chart" data-chart="rps"><h4>Requests / s</h4></div>
        <div class="chart" data-chart="errors"><h4>5xx responses / s</h4></div>
        <div class="chart" data-chart="latency"><h4>Latency p50 (solid) / p99 (dashed), ms</h4></div>
      </div>
      <h3>Replicas</h3><table class="replicas"></table>`;
    document.getElementById("services").appendChild(root);
    // null, not "": a service with no traffic yet has the key "" and still needs charts.
    entry = { root, charts: {}, versionsKey: null };
    cards.set(name, entry);
  }
  return entry;
}

function renderService(svc) {
  const { root } = card(svc.name);
  root.querySelector("h2").innerHTML =
    `${esc(svc.name)} <span class="badge ${esc(svc.status)}">${esc(svc.status)}</span>`;
  const versions = svc.active_versions.map((v) => "v" + v).join(", ") || "–";
  root.querySelector(".meta").innerHTML = `
    <span>endpoint <b>${esc(svc.endpoint ?? "none (a pool takes jobs)")}</b></span>
    <span>version <b>v${esc(svc.version)}</b></span>
    <span>serving <b class="serving">${esc(versions)}</b></span>
    <span>replicas <b>${svc.ready_replicas}/${svc.total_replicas}</b> ready (target ${svc.target_replicas})</span>
    <span>up ${age(svc.uptime_s)}</span>`;
  root.querySelector(".update-box").innerHTML = renderUpdate(svc.update);
  const rows = svc.replicas.map((r) => `
    <tr data-replica="${r.id}"><td>${r.id}</td><td>v${r.version}</td>
    <td><span class="badge ${esc(r.status)}">${esc(r.status)}</span>${drainingNote(r.draining)}</td>
    <td>${esc(r.node)}</td><td>${esc(r.port ?? "")}</td><td>${age(r.age_s)}</td></tr>`);
  root.querySelector(".replicas").innerHTML =
    "<tr><th>ID</th><th>VERSION</th><th>STATE</th><th>NODE</th><th>PORT</th><th>AGE</th></tr>" +
    (rows.join("") || '<tr><td colspan="6" class="muted">no replicas</td></tr>');
}

// A draining replica finishes its in-flight requests (long streams) before it stops.
function drainingNote(d) {
  if (!d) return "";
  return ` <span class="muted">draining: ${d.in_flight} in flight, ${age(d.waited_s)} of ${age(d.limit_s)}</span>`;
}

function renderUpdate(update) {
  if (!update) return "";
  const pct = (n) => update.target ? Math.min(100, (100 * n) / update.target) : 0;
  const plan = update.plan.map((line) => `<li>${esc(line)}</li>`).join("");
  const events = update.events.slice().reverse().map((e) =>
    `<div>${clock(e.time)} ${e.replica ? "replica " + e.replica + " " : ""}` +
    `${esc(e.from || "")}${e.from ? " → " : ""}${esc(e.to)}: ${esc(e.reason)}</div>`).join("");
  const when = update.in_progress
    ? `running for ${age(Date.now() / 1000 - update.started_at)}`
    : `finished ${clock(update.finished_at || update.started_at)}`;
  return `
    <div class="update ${update.in_progress ? "" : "done"}" data-update-status="${esc(update.status)}">
      <h3>${update.in_progress ? "Update in progress" : "Last update"}:
        ${esc(update.mode)} v${update.from_version} → v${update.to_version}
        <span class="badge ${esc(update.status)}">${esc(update.status)}</span>
        <span class="muted">${when}</span></h3>
      <div class="progress">
        <span>old v${update.from_version} ready <b class="old-ready">${update.old_ready}</b>
          <span class="bar old"><span style="width:${pct(update.old_ready)}%"></span></span></span>
        <span>new v${update.to_version} ready <b class="new-ready">${update.new_ready}</b>/${update.target}
          <span class="bar new"><span style="width:${pct(update.new_ready)}%"></span></span></span>
      </div>
      ${update.message ? `<div class="muted">${esc(update.message)}</div>` : ""}
      ${renderShadow(update.shadow)}
      <ol class="plan">${plan}</ol>
      <div class="events">${events || '<span class="muted">no events yet</span>'}</div>
    </div>`;
}

// A shadow step: what was mirrored and compared, the verdict, the top differing paths.
function renderShadow(shadow) {
  if (!shadow) return "";
  const top = (shadow.top_paths || []).map((t) =>
    `<li><code>${esc(t.key)}</code>: ${t.answers} answers, e.g. <code>${esc(t.example)}</code></li>`).join("");
  const noise = (shadow.noise || []).map((k) => `<code>${esc(k)}</code>`).join(", ");
  return `
    <div class="shadow" data-shadow-outcome="${esc(shadow.outcome)}">
      shadow ${shadow.mirror}%: <b class="shadow-mirrored">${shadow.mirrored}</b> mirrored,
      ${shadow.dropped} dropped, <b class="shadow-compared">${shadow.compared}</b> compared,
      <b class="shadow-differed">${shadow.differed}</b> differ (${(100 * shadow.rate).toFixed(2)}%)
      <span class="badge">${esc(shadow.outcome)}</span>
      <div class="muted">${esc(shadow.reason)}</div>
      ${top ? `<ul class="shadow-paths">${top}</ul>` : ""}
      ${noise ? `<div class="muted">noise (ignored): ${noise}</div>` : ""}
    </div>`;
}

function renderRates(name, series) {
  const { root } = card(name);
  const versions = Object.keys(series.versions);
  const last = (column) => {
    for (let i = column.length - 1; i >= 0; i--) if (column[i] !== null) return column[i];
    return null;
  };
  const rows = versions.map((v) => {
    const s = series.versions[v];
    const rps = s.rps.length ? s.rps[s.rps.length - 1] : null;
    return `<tr data-version="${esc(v)}"><td><span class="swatch" style="background:${colorOf(v)}"></span>${esc(label(v))}</td>
      <td class="num rps">${fmt(rps, 1)}</td><td class="num">${fmt(last(s.errors), 2)}</td>
      <td class="num">${fmt(last(s.p50), 2)}</td><td class="num">${fmt(last(s.p99), 2)}</td></tr>`;
  });
  root.querySelector(".rates").innerHTML =
    '<tr><th>VERSION</th><th class="num">REQ/S</th><th class="num">5XX/S</th>' +
    '<th class="num">P50 MS</th><th class="num">P99 MS</th></tr>' +
    (rows.join("") || '<tr><td colspan="5" class="muted">no requests through its endpoint yet' +
      " (calls through handles go replica to replica and are not counted here)</td></tr>");
  drawCharts(name, series, versions);
}

function drawCharts(name, series, versions) {
  const entry = card(name);
  const key = versions.join(",");
  const width = (el) => Math.max(240, el.clientWidth - 4);
  const specs = {
    rps: versions.map((v) => ({ v, column: "rps", dash: null })),
    errors: versions.map((v) => ({ v, column: "errors", dash: null })),
    latency: versions.flatMap((v) => [
      { v, column: "p50", dash: null },
      { v, column: "p99", dash: [6, 4] },
    ]),
  };
  if (key !== entry.versionsKey) {
    for (const chart of Object.values(entry.charts)) chart.destroy();
    entry.charts = {};
    entry.versionsKey = key;
    for (const [chartName, lines] of Object.entries(specs)) {
      const el = entry.root.querySelector(`[data-chart="${chartName}"]`);
      entry.charts[chartName] = new uPlot({
        width: width(el),
        height: 170,
        legend: { show: true },
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: true } },
        axes: [{}, { size: 50 }],
        series: [{}, ...lines.map((l) => ({
          label: label(l.v) + (chartName === "latency" ? " " + l.column : ""),
          stroke: colorOf(l.v),
          width: 2,
          dash: l.dash || undefined,
          spanGaps: false,
        }))],
      }, [[]], el);
    }
  }
  for (const [chartName, lines] of Object.entries(specs)) {
    const data = [series.time, ...lines.map((l) => series.versions[l.v][l.column])];
    entry.charts[chartName].setData(data);
  }
}

async function refresh() {
  try {
    const [state, series] = await Promise.all([
      getJSON("/api/v1/dashboard"),
      getJSON("/api/v1/dashboard/timeseries"),
    ]);
    const names = new Set(state.services.map((s) => s.name));
    for (const [name, entry] of cards) {
      if (!names.has(name)) { entry.root.remove(); cards.delete(name); }
    }
    if (!state.services.length) {
      document.getElementById("services").innerHTML =
        '<p class="muted">No services. Start one with <code>steady up service.yaml</code>.</p>';
    } else {
      const placeholder = document.querySelector("#services > p");
      if (placeholder) placeholder.remove();
    }
    for (const svc of state.services) {
      renderService(svc);
      renderRates(svc.name, series.services[svc.name] || { time: [], versions: {} });
    }
    const conn = document.getElementById("conn");
    conn.textContent = "updated " + clock(state.time);
    // How many refreshes drew every card: the browser test waits on it.
    conn.dataset.refreshes = String(parseInt(conn.dataset.refreshes || "0", 10) + 1);
  } catch (err) {
    document.getElementById("conn").textContent = "controller unreachable: " + err.message;
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
