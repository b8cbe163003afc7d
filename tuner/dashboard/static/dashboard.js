// TuneFarm dashboard: live tables and SVG charts. Served from the package; no dependencies.
// Everything from the database reaches the page through textContent, never as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2f6fde", "#d1495b", "#2a9d8f", "#e09f3e", "#7b5ea7", "#4c956c", "#c05299",
  "#3d5a80", "#9c6644", "#6c757d"];

function fmtSec(s) {
  if (s === null || s === undefined) return "-";
  if (s < 1e-6) return +(s * 1e9).toPrecision(3) + " ns";
  return s < 1e-3 ? +(s * 1e6).toPrecision(3) + " µs" : +(s * 1e3).toPrecision(4) + " ms";
}
function fmtX(x) { return x === null || x === undefined || !isFinite(x) ? "-" : x.toFixed(2) + "x"; }
function fmtDur(s) {
  if (s === null || s === undefined) return "-";
  s = Math.round(s);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + String(s % 60).padStart(2, "0") + " s";
  return Math.floor(s / 3600) + " h " + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + " min";
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
  if (!response.ok) throw new Error(url + ": HTTP " + response.status);
  return response.json();
}

function ticks(lo, hi, n) {
  const span = hi - lo || 1;
  const step = Math.pow(10, Math.floor(Math.log10(span / n)));
  const err = (n * step) / span;
  const mult = err <= 0.15 ? 10 : err <= 0.35 ? 5 : err <= 0.75 ? 2 : 1;
  const s = step * mult;
  const out = [];
  for (let v = Math.ceil(lo / s) * s; v <= hi + s * 1e-9; v += s) out.push(v);
  return out;
}

// series: [{name, points: [[x, y], ...]}]; opts: {xLabel, yFormat, xEnd, step, dots}
function lineChart(container, series, opts) {
  container.textContent = "";
  const W = 560, H = 260, L = 70, R = 12, T = 10, B = 34;
  const withLegend = series.length > 1;
  const legendRows = withLegend ? Math.ceil(series.length / 2) : 0;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H + legendRows * 16}`, role: "img" });
  container.append(root);
  const pts = series.flatMap((s) => s.points);
  if (!pts.length) {
    root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "no timing yet"));
    return;
  }
  let x0 = Math.min(0, ...pts.map((p) => p[0]));
  let x1 = Math.max(opts.xEnd || 0, ...series.map((s) => s.end || 0), ...pts.map((p) => p[0]));
  if (x1 <= x0) x1 = x0 + 1;
  const ys = pts.map((p) => p[1]).filter((y) => y > 0);
  let y0 = Math.log10(Math.min(...ys)), y1 = Math.log10(Math.max(...ys));
  if (y1 - y0 < 0.2) { y0 -= 0.1; y1 += 0.1; }
  const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (Math.log10(y) - y0) / (y1 - y0)) * (H - T - B);
  for (const v of ticks(x0, x1, 6)) {
    root.append(svg("line", { x1: sx(v), x2: sx(v), y1: T, y2: H - B, class: "gridline" }));
    root.append(svg("text", { x: sx(v), y: H - B + 14, "text-anchor": "middle" }, +v.toPrecision(4)));
  }
  const yt = [];
  for (let e = Math.floor(y0); e <= Math.ceil(y1); e++) for (const m of [1, 2, 5]) {
    const v = m * Math.pow(10, e);
    if (Math.log10(v) >= y0 && Math.log10(v) <= y1) yt.push(v);
  }
  for (const v of yt) {
    root.append(svg("line", { x1: L, x2: W - R, y1: sy(v), y2: sy(v), class: "gridline" }));
    root.append(svg("text", { x: L - 6, y: sy(v) + 4, "text-anchor": "end" }, (opts.yFormat || fmtSec)(v)));
  }
  root.append(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
  root.append(svg("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
  root.append(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, opts.xLabel || ""));
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const color = s.color || COLORS[i % COLORS.length];
    if (opts.dots) {
      const g = svg("g", { fill: color, "fill-opacity": "0.55" });
      for (const [x, y] of s.points) g.append(svg("circle", { cx: sx(x), cy: sy(y), r: 2 }));
      root.append(g);
    } else {
      let d = "";
      s.points.forEach(([x, y], j) => {
        d += j === 0 ? `M${sx(x)},${sy(y)}` : `H${sx(x)}V${sy(y)}`;
      });
      const last = s.points[s.points.length - 1];
      const end = s.end !== undefined ? s.end : opts.xEnd || last[0];
      d += `H${sx(Math.max(last[0], end))}`;
      const path = svg("path", { d, fill: "none", stroke: color, "stroke-width": 2 });
      path.append(svg("title", {}, `${s.name}: best ${fmtSec(last[1])}`));
      root.append(path);
    }
    if (withLegend) {
      const lx = L + (i % 2) * 240, ly = H + 12 + Math.floor(i / 2) * 16;
      const g = svg("g", { class: "legend" });
      g.append(svg("rect", { x: lx, y: ly - 8, width: 10, height: 10, fill: color }));
      const label = s.name.length > 36 ? s.name.slice(0, 35) + "…" : s.name;
      g.append(svg("text", { x: lx + 14, y: ly + 1 }, label));
      root.append(g);
    }
  });
}

// ------------------------------------------------------------------------------- pages
function statusBadge(status) { return el("span", { class: "status " + status }, status); }

function jobRow(j) {
  const model = j.model ? el("a", { href: "/models/" + encodeURIComponent(j.model) }, j.model) : "-";
  const where = el("td", { class: "dev" }, j.device || "-");
  if (j.worker) where.append(" ", el("span", { class: "muted" }, "on " + j.worker));
  return el("tr", { "data-id": j.id },
    el("td", { class: "n" }, j.id),
    el("td", {}, el("a", { href: "/jobs/" + j.id }, j.name)),
    el("td", {}, model),
    el("td", {}, statusBadge(j.status)),
    el("td", { class: "n" }, `${j.trials} / ${j.budget}`),
    el("td", { class: "n" }, fmtDur(j.wall_sec)),
    el("td", { class: "n" }, j.kernels),
    el("td", { class: "n" }, fmtX(j.speedup)),
    el("td", {}, j.submitted_by || "-"),
    where);
}

function poll(fn) {
  const ms = Number(document.body.dataset.pollMs) || 2000;
  let busy = false;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try { await fn(); } catch (err) { console.warn("dashboard: " + err.message); } finally { busy = false; }
  };
  return setInterval(tick, ms);
}

function initJobs() {
  const body = document.querySelector("#jobs tbody");
  poll(async () => {
    const jobs = await getJSON("/api/jobs");
    if (!jobs.length) return;
    body.replaceChildren(...jobs.map(jobRow));
    document.getElementById("live").textContent = "live · " + new Date().toLocaleTimeString();
  });
}

function drawCurves(c) {
  const end = c.end;
  lineChart(document.getElementById("chart-model-time"),
    [{ name: "model", points: c.model.time }], { xLabel: "seconds since the job started", xEnd: end.sec });
  lineChart(document.getElementById("chart-model-trials"),
    [{ name: "model", points: c.model.trials }], { xLabel: "trials", xEnd: end.trials });
  lineChart(document.getElementById("chart-tasks-time"),
    c.tasks.map((t) => ({ name: t.name, points: t.time })), { xLabel: "seconds since the job started", xEnd: end.sec });
  lineChart(document.getElementById("chart-tasks-trials"),
    c.tasks.map((t) => ({ name: t.name, points: t.trials, end: t.trials_end })), { xLabel: "trials of the kernel" });
}

function kernelRow(k, targetKey) {
  return el("tr", {},
    el("td", {}, el("a", { href: `/workloads/${k.workload_id}?target=${targetKey}` }, k.kernel)),
    el("td", {}, k.bucket),
    el("td", { class: "n" }, k.trials), el("td", { class: "n" }, k.failed),
    el("td", { class: "n" }, fmtSec(k.default_sec)), el("td", { class: "n" }, fmtSec(k.best_sec)),
    el("td", { class: "n" }, k.gflops === null ? "-" : k.gflops.toFixed(1)),
    el("td", { class: "n" }, fmtX(k.speedup)), el("td", { class: "n" }, fmtSec(k.database_best_sec)),
    el("td", { class: "conv" }, convergedText(k)),
    el("td", { class: "n" }, k.expected_gain === null ? "—" : (k.expected_gain * 100).toFixed(1) + "%"));
}

function convergedText(k) {
  if (k.converged === null) return "—";
  if (!k.converged) return "no";
  return k.converged_at === null ? "yes" : `yes, at ${k.converged_at}`;
}

function drawPhases() {
  for (const p of document.querySelectorAll("#phases .phase")) {
    const total = Number(p.dataset.total) || 1;
    p.style.flex = `${Math.max(Number(p.dataset.sec) / total, 0.001)} 1 0`;
  }
}

async function initJob() {
  const head = document.getElementById("job");
  const id = head.dataset.id;
  drawPhases();
  drawCurves(await getJSON(`/api/jobs/${id}/curves`));
  if (head.dataset.status !== "running") return;
  const timer = poll(async () => {
    const [job, curves] = await Promise.all([getJSON(`/api/jobs/${id}`), getJSON(`/api/jobs/${id}/curves`)]);
    document.getElementById("job-status").replaceChildren(statusBadge(job.status));
    document.getElementById("job-trials").textContent = `${job.trials} / ${job.budget}`;
    document.getElementById("job-wall").textContent = fmtDur(job.wall_sec);
    document.getElementById("job-speedup").textContent = fmtX(job.speedup);
    if (job.kernels.length)
      document.querySelector("#kernels tbody").replaceChildren(...job.kernels.map((k) => kernelRow(k, job.target_key)));
    drawCurves(curves);
    head.dataset.status = job.status;
    if (job.status !== "running") clearInterval(timer);
  });
}

function initWorkload() {
  const points = JSON.parse(document.getElementById("timeline").textContent);
  lineChart(document.getElementById("chart-timeline"), [{ name: "records", points }],
    { xLabel: "record, in the order measured", dots: true });
}

function initCompare() {
  const data = document.getElementById("compare-curves");
  if (!data) return;
  const c = JSON.parse(data.textContent);
  const box = document.getElementById("compare");
  const name = (side) => `${side.toUpperCase()}: job #${box.dataset[side]}`;
  for (const axis of ["time", "trials"]) {
    const series = ["a", "b"].filter((s) => c[s]).map((s) => ({
      name: name(s), points: c[s][axis], end: c[s].end[axis === "time" ? "sec" : "trials"] }));
    lineChart(document.getElementById("chart-compare-" + axis), series,
      { xLabel: axis === "time" ? "seconds since the job started" : "trials" });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const init = { jobs: initJobs, job: initJob, workload: initWorkload, compare: initCompare }[document.body.dataset.page];
  if (init) Promise.resolve(init()).catch((err) => console.warn("dashboard: " + err.message));
});
