// protofed monitor: draws the snapshots the server pushes (/api/events). Read-only.
"use strict";

const STATES = ["starting", "running", "finished", "failed", "stopped", "dead", "stale",
                "missed", "left"];
const COLOURS = {starting: "#b0bec5", running: "#42a5f5", finished: "#66bb6a",
                 failed: "#e53935", stopped: "#ffa726", dead: "#212121", stale: "#ab47bc",
                 missed: "#fdd835", left: "#fdd835"};
const KIND_COLOURS = ["#1e88e5", "#e53935", "#43a047", "#8e24aa", "#fb8c00"];
const PAGE_SIZE = 25;
const SVG = "http://www.w3.org/2000/svg";
let latest = null;
let sortKey = "node", sortUp = true, page = 0;

function bytesText(count) {
  for (const [name, size] of [["GB", 1e9], ["MB", 1e6], ["KB", 1e3]]) {
    if (count >= size) {
      const value = count / size;
      return value.toFixed(value >= 100 ? 0 : value >= 10 ? 1 : 2) + " " + name;
    }
  }
  return count + " B";
}

function seconds(value) {
  if (value === null || value === undefined) return "-";
  if (value < 90) return value.toFixed(0) + " s";
  return (value / 60).toFixed(1) + " min";
}

function element(name, attributes, parent) {
  const made = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) made.setAttribute(key, value);
  if (parent) parent.appendChild(made);
  return made;
}

function drawSummary(s) {
  document.getElementById("run-id").textContent = s.run_id;
  const round = s.round === null ? "-" : s.round;
  document.getElementById("summary").textContent =
    `${s.algorithm} on ${s.topology} (${s.backend || "?"}), round ${round} of ${s.rounds_total}` +
    ` · elapsed ${seconds(s.elapsed_s)}` +
    (s.eta_s === null ? "" : ` · left about ${seconds(s.eta_s)}`) +
    (s.run_status ? ` · run ${s.run_status}` : "");
  document.title = `protofed ${s.run_id}: round ${round}/${s.rounds_total}`;
}

function drawGraph(s) {
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  const mode = document.getElementById("edge-mode").value;
  const value = e => mode === "last" ? e.last : e.bytes;
  const largest = Math.max(1, ...s.edges.map(value));
  // the last round's graph: only the edges that carried models or prototypes in it
  const edges = mode === "last" ? s.edges.filter(e => e.last > 0) : s.edges;
  const labelled = edges.length <= 30;
  // dense graphs get thinner, fainter lines, so the widths still read as widths
  const widest = 0.03 * Math.min(1, Math.sqrt(30 / Math.max(edges.length, 1)));
  const opacity = edges.length <= 30 ? 0.55 : edges.length <= 300 ? 0.35 : 0.12;
  for (const e of edges) {
    const [x1, y1] = s.positions[e.from], [x2, y2] = s.positions[e.to];
    const line = element("line", {x1, y1, x2, y2, class: "edge" + (e.limit ? " limited" : ""),
      "stroke-width": 0.002 + widest * value(e) / largest, "stroke-opacity": opacity,
      "data-from": e.from, "data-to": e.to, "data-bytes": e.bytes, "data-last": e.last}, svg);
    const limit = e.limit ? `, limited to ${(e.limit / 1e6).toFixed(3).replace(/\.?0+$/, "")} Mbit/s` : "";
    element("title", {}, line).textContent =
      `${e.from} → ${e.to}: ${bytesText(e.bytes)} in all, ${bytesText(e.last)} last round${limit}`;
    if (labelled && value(e) > 0) {
      // the label sits a third of the way from the sender: the two directions do not overlap
      const label = element("text", {x: x1 + (x2 - x1) * 0.33, y: y1 + (y2 - y1) * 0.33,
                                     class: "edge-label"}, svg);
      label.textContent = bytesText(value(e)) + (e.limit ? ` (${limit.slice(13)})` : "");
    }
  }
  const radius = Math.max(0.035, Math.min(0.09, 0.9 / s.nodes.length));
  for (const n of s.nodes) {
    const [x, y] = s.positions[n.node];
    const circle = element("circle", {cx: x, cy: y, r: radius, class: "node state-" + n.state,
                                      "data-node": n.node, "data-state": n.state}, svg);
    element("title", {}, circle).textContent =
      `node ${n.node}: ${n.state}, round ${n.round ?? "-"}, F1 ${n.f1 ?? "-"}` +
      (n.error ? ` (${n.error})` : "");
    if (s.nodes.length <= 40) {
      element("text", {x, y, class: "node-label"}, svg).textContent = n.node;
      if (n.f1 !== null) {
        element("text", {x, y: y + radius + 0.07, class: "node-f1"}, svg).textContent =
          n.f1.toFixed(2);
      }
    }
  }
  const counts = {};
  for (const n of s.nodes) counts[n.state] = (counts[n.state] || 0) + 1;
  document.getElementById("legend").innerHTML = STATES.filter(k => counts[k]).map(
    k => `<span><i style="background:${COLOURS[k]}"></i>${k} ${counts[k]}</span>`).join("");
}

function axes(svg, xs, top) {
  const width = 420, height = 200, left = 45, bottom = 20;
  const maxX = Math.max(1, ...xs);
  const x = v => left + (width - left - 10) * v / maxX;
  const y = v => height - bottom - (height - bottom - 10) * v / (top || 1);
  element("line", {x1: left, y1: height - bottom, x2: width - 10, y2: height - bottom,
                   stroke: "#999"}, svg);
  element("line", {x1: left, y1: 10, x2: left, y2: height - bottom, stroke: "#999"}, svg);
  element("text", {x: left - 4, y: 14, "text-anchor": "end", "font-size": 10}, svg)
    .textContent = top >= 1000 ? bytesText(top) : top.toFixed(2);
  element("text", {x: width - 10, y: height - 5, "text-anchor": "end", "font-size": 10}, svg)
    .textContent = "round " + maxX;
  return [x, y];
}

function polyline(svg, points, x, y, attributes) {
  if (!points.length) return;
  element("polyline", {points: points.map(([a, b]) => `${x(a)},${y(b)}`).join(" "),
                       fill: "none", ...attributes}, svg);
}

function drawCharts(s) {
  const f1 = document.getElementById("f1-chart");
  f1.replaceChildren();
  const rounds = s.per_round.rounds;
  let [x, y] = axes(f1, rounds, 1);
  for (const points of Object.values(s.per_round.f1)) {
    polyline(f1, points, x, y, {stroke: "#90a4ae", "stroke-width": 0.7});
  }
  polyline(f1, rounds.map((r, i) => [r, s.per_round.mean_f1[i]]), x, y,
           {stroke: "#1e88e5", "stroke-width": 2.5, id: "mean-f1"});
  const chart = document.getElementById("bytes-chart");
  chart.replaceChildren();
  const kinds = Object.entries(s.per_round.bytes_by_kind);
  const top = Math.max(1, ...kinds.flatMap(([, values]) => values));
  [x, y] = axes(chart, rounds, top);
  kinds.forEach(([kind, values], i) => {
    polyline(chart, rounds.map((r, j) => [r, values[j]]), x, y,
             {stroke: KIND_COLOURS[i % KIND_COLOURS.length], "stroke-width": 2});
    element("text", {x: 60 + 90 * i, y: 22, "font-size": 10,
                     fill: KIND_COLOURS[i % KIND_COLOURS.length]}, chart).textContent = kind;
  });
}

function drawTable(s) {
  const rows = [...s.nodes].sort((a, b) => {
    const u = a[sortKey] ?? -1, v = b[sortKey] ?? -1;
    return (u < v ? -1 : u > v ? 1 : a.node - b.node) * (sortUp ? 1 : -1);
  });
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
  page = Math.min(page, pages - 1);
  const body = document.querySelector("#nodes tbody");
  body.replaceChildren();
  for (const n of rows.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE)) {
    const row = body.insertRow();
    row.dataset.node = n.node;
    const cells = [n.node, n.state, n.round ?? "-", n.f1 ?? "-", n.accuracy ?? "-",
                   n.bytes_sent.toLocaleString("en"), n.bytes_received.toLocaleString("en"),
                   `${n.out}/${n.in}`];
    cells.forEach((text, i) => {
      const cell = row.insertCell();
      cell.textContent = text;
      if (i === 1) { cell.className = "state-cell"; cell.style.color = COLOURS[n.state]; }
    });
    if (n.error) row.title = n.error;
  }
  document.getElementById("page-info").textContent =
    `(${rows.length}; page ${page + 1} of ${pages}; click a header to sort)`;
  document.getElementById("pager").style.display = pages > 1 ? "block" : "none";
  const select = document.getElementById("log-node");
  if (select.options.length !== s.nodes.length) {
    select.replaceChildren(...s.nodes.map(n => new Option(n.node, n.node)));
  }
  document.getElementById("downloads").innerHTML = "Download: " +
    ["rounds.csv", "summary.json", "federation.json", "topology.png", "f1_per_round.png"]
      .map(name => `<a href="/files/${name}">${name}</a>`).join(" · ");
}

function draw(s) {
  latest = s;
  drawSummary(s);
  drawGraph(s);
  drawCharts(s);
  drawTable(s);
}

async function refreshLog() {
  const node = document.getElementById("log-node").value;
  if (node === "") return;
  const answer = await fetch(`/api/log/${node}`);
  document.getElementById("log").textContent = await answer.text();
}

document.querySelectorAll("#nodes th").forEach(th => th.addEventListener("click", () => {
  sortUp = sortKey === th.dataset.key ? !sortUp : true;
  sortKey = th.dataset.key;
  if (latest) drawTable(latest);
}));
document.getElementById("prev").onclick = () => { page = Math.max(0, page - 1); drawTable(latest); };
document.getElementById("next").onclick = () => { page += 1; drawTable(latest); };
document.getElementById("edge-mode").onchange = () => latest && drawGraph(latest);
document.getElementById("log-node").onchange = refreshLog;
setInterval(refreshLog, 2000);

const events = new EventSource("/api/events");
events.onmessage = message => draw(JSON.parse(message.data));
events.onerror = () => {
  document.getElementById("summary").textContent += " · (the monitor is not answering)";
};
