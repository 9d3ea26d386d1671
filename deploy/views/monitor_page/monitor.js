// protofed monitor: draws the snapshots the server pushes (/api/events). Read-only.
"use strict";

const STATES = ["starting", "running", "finished", "failed", "stopped", "dead", "stale",
                "missed", "left"];
const KIND_COLOURS = ["#1e88e5", "#e53935", "#43a047", "#8e24aa", "#fb8c00"];
const PAGE_SIZE = 25;
const SVG = "http://www.w3.org/2000/svg";
let latest = null;
let sortKey = "node", sortUp = true, page = 0;

const UNITS = [["GB", 1e9], ["MB", 1e6], ["KB", 1e3], ["B", 1]];

function bytesText(count) {
  for (const [name, size] of UNITS.slice(0, -1)) {
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
  // dense graphs get thinner, fainter lines, so the widths still read as widths
  const widest = 0.03 * Math.min(1, Math.sqrt(30 / Math.max(edges.length, 1)));
  const opacity = edges.length <= 30 ? 0.55 : edges.length <= 300 ? 0.35 : 0.12;
  for (const e of edges) {
    drawEdge(svg, s.positions, e, 0.002 + widest * value(e) / largest, opacity);
  }
  const radius = Math.max(0.035, Math.min(0.09, 0.9 / s.nodes.length));
  for (const n of s.nodes) drawNode(svg, s.positions[n.node], n, radius, s.nodes.length <= 40);
  if (edges.length <= 30) {
    // the largest first: when there is no room for every label, the smallest go without
    labelEdges(svg, s.positions, edges.filter(e => value(e) > 0)
      .sort((a, b) => value(b) - value(a)), value);
  }
  drawLegend(s.nodes);
}

function megabits(bits) {
  return (bits / 1e6).toFixed(3).replace(/\.?0+$/, "") + " Mbit/s";
}

function edgeTitle(e) {
  return `${e.from} → ${e.to}: ${bytesText(e.bytes)} in all, ${bytesText(e.last)} last round` +
    (e.limit ? `, limited to ${megabits(e.limit)}` : "");
}

function drawEdge(svg, positions, e, width, opacity) {
  const [x1, y1] = positions[e.from], [x2, y2] = positions[e.to];
  const line = element("line", {x1, y1, x2, y2, class: "edge" + (e.limit ? " limited" : ""),
    "stroke-width": width, "stroke-opacity": opacity,
    "data-from": e.from, "data-to": e.to, "data-bytes": e.bytes, "data-last": e.last}, svg);
  element("title", {}, line).textContent = edgeTitle(e);
}

function drawNode(svg, [x, y], n, radius, labelled) {
  const circle = element("circle", {cx: x, cy: y, r: radius, class: "node state-" + n.state,
                                    "data-node": n.node, "data-state": n.state}, svg);
  element("title", {}, circle).textContent =
    `node ${n.node}: ${n.state}, round ${n.round ?? "-"}, F1 ${n.f1 ?? "-"}` +
    (n.error ? ` (${n.error})` : "");
  if (!labelled) return;
  element("text", {x, y, class: "node-label"}, svg).textContent = n.node;
  if (n.f1 !== null) {
    element("text", {x, y: y + radius + 0.07, class: "node-f1"}, svg).textContent =
      n.f1.toFixed(2);
  }
}

// Where an edge's label may go, tried in turn: [share of the way from the sender, side of
// the line]. The receiver's half, as in the topology picture, so the labels of the two
// directions of a pair never meet; beside the line where on it there is no room.
const LABEL_SPOTS = [[0.65, 0], [0.65, 1], [0.65, -1], [0.55, 0], [0.75, 0],
                     [0.55, 1], [0.55, -1], [0.75, 1], [0.75, -1]];
const LABEL_GAP = 0.05;  // from the line to a label beside it, in the graph's units
const LABEL_PAD = 0.008;

function labelEdges(svg, positions, edges, value) {
  // what a label must not cover: the nodes, their F1 and the labels placed before it
  const taken = [...svg.querySelectorAll("circle, .node-f1")].map(e => e.getBBox());
  for (const e of edges) {
    const text = bytesText(value(e)) + (e.limit ? ` (${megabits(e.limit)})` : "");
    const box = placeLabel(svg, text, positions[e.from], positions[e.to], taken);
    if (box) {
      taken.push(box);
      element("title", {}, box.group).textContent = edgeTitle(e);
    }
  }
}

function placeLabel(svg, text, [x1, y1], [x2, y2], taken) {
  const group = element("g", {class: "edge-label"}, svg);
  const back = element("rect", {}, group);
  const label = element("text", {}, group);
  label.textContent = text;
  const length = Math.hypot(x2 - x1, y2 - y1) || 1;
  const [nx, ny] = [(y1 - y2) / length, (x2 - x1) / length];
  for (const [along, side] of LABEL_SPOTS) {
    label.setAttribute("x", x1 + (x2 - x1) * along + nx * side * LABEL_GAP);
    label.setAttribute("y", y1 + (y2 - y1) * along + ny * side * LABEL_GAP);
    const b = label.getBBox();
    const box = {x: b.x - LABEL_PAD, y: b.y - LABEL_PAD / 2,
                 width: b.width + 2 * LABEL_PAD, height: b.height + LABEL_PAD};
    if (!taken.some(other => overlaps(box, other))) {
      for (const key of ["x", "y", "width", "height"]) back.setAttribute(key, box[key]);
      return {...box, group};
    }
  }
  group.remove();  // no room: the edge's own title still says its bytes
  return null;
}

function overlaps(a, b) {
  return a.x < b.x + b.width && b.x < a.x + a.width &&
         a.y < b.y + b.height && b.y < a.y + a.height;
}

function drawLegend(nodes) {
  const counts = {};
  for (const n of nodes) counts[n.state] = (counts[n.state] || 0) + 1;
  document.getElementById("legend").innerHTML = STATES.filter(k => counts[k]).map(
    k => `<span><i class="state-${k}"></i>${k} ${counts[k]}</span>`).join("");
}

const CHART = {width: 420, height: 200, left: 50, right: 10, top: 10, bottom: 22};

// 1, 2 or 5 times a power of ten: about `count` steps over `span`
function niceStep(span, count) {
  const raw = span / count, power = 10 ** Math.floor(Math.log10(raw));
  return power * [1, 2, 5, 10].find(m => m * power >= raw * (1 - 1e-9));
}

function decimals(step) {
  return Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
}

function tickValues(top, step) {
  return Array.from({length: Math.floor(top / step + 1e-9) + 1}, (_, i) => i * step);
}

const F1_AXIS = {top: 1, step: 0.2, label: v => String(+v.toFixed(1))};

function bytesAxis(largest) {
  const [unit, size] = UNITS.find(([, size]) => largest >= size) ?? UNITS[UNITS.length - 1];
  const step = niceStep(largest / size, 4) * size;
  const places = decimals(step / size);
  return {top: Math.ceil(largest / step - 1e-9) * step, step,
          label: v => v === 0 ? "0" : `${+(v / size).toFixed(places)} ${unit}`};
}

function axes(svg, xs, yAxis) {
  const {width, height, left, right, top, bottom} = CHART;
  const maxX = Math.max(1, ...xs);
  const x = v => left + (width - left - right) * v / maxX;
  const y = v => height - bottom - (height - bottom - top) * v / yAxis.top;
  for (const v of tickValues(yAxis.top, yAxis.step)) {
    element("line", {x1: left, y1: y(v), x2: width - right, y2: y(v), class: "grid"}, svg);
    element("text", {x: left - 4, y: y(v), class: "tick-y"}, svg).textContent = yAxis.label(v);
  }
  for (const v of tickValues(maxX, Math.max(1, niceStep(maxX, 6)))) {
    element("line", {x1: x(v), y1: height - bottom, x2: x(v), y2: height - bottom + 3,
                     class: "axis"}, svg);
    element("text", {x: x(v), y: height - 6, class: "tick-x"}, svg).textContent = v;
  }
  element("line", {x1: left, y1: height - bottom, x2: width - right, y2: height - bottom,
                   class: "axis"}, svg);
  element("line", {x1: left, y1: top, x2: left, y2: height - bottom, class: "axis"}, svg);
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
  let [x, y] = axes(f1, rounds, F1_AXIS);
  for (const points of Object.values(s.per_round.f1)) {
    polyline(f1, points, x, y, {stroke: "#90a4ae", "stroke-width": 0.7});
  }
  polyline(f1, rounds.map((r, i) => [r, s.per_round.mean_f1[i]]), x, y,
           {stroke: "#1e88e5", "stroke-width": 2.5, id: "mean-f1"});
  const chart = document.getElementById("bytes-chart");
  chart.replaceChildren();
  const kinds = Object.entries(s.per_round.bytes_by_kind);
  [x, y] = axes(chart, rounds, bytesAxis(Math.max(1, ...kinds.flatMap(([, values]) => values))));
  kinds.forEach(([kind, values], i) => {
    polyline(chart, rounds.map((r, j) => [r, values[j]]), x, y,
             {stroke: KIND_COLOURS[i % KIND_COLOURS.length], "stroke-width": 2});
    element("text", {x: CHART.left + 15 + 90 * i, y: 22, "font-size": 10,
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
      if (i === 1) cell.className = "state-cell state-" + n.state;
    });
    if (n.error) row.title = n.error;
  }
  document.getElementById("page-info").textContent =
    `(${rows.length}; page ${page + 1} of ${pages}; click a header to sort)`;
  document.getElementById("pager").style.display = pages > 1 ? "block" : "none";
  const select = document.getElementById("log-node");
  if (select.options.length !== s.nodes.length) {
    select.replaceChildren(...s.nodes.map(n => new Option(n.node, n.node)));
    linkRecord();
  }
}

function link(name, text) {
  return `<a href="/files/${name}">${text}</a>`;
}

// the names come from the server's fixed list of the run's outputs: no markup in them
function drawDownloads(names) {
  const files = [], pictures = {};
  for (const name of names) {
    const picture = name.match(/^(\w+)\.(png|svg)$/);
    if (picture) (pictures[picture[1]] ??= []).push(link(name, picture[2]));
    else files.push(link(name, name));
  }
  const offered = [...files, ...Object.entries(pictures).map(
    ([picture, formats]) => `${picture} (${formats.join(", ")})`)];
  document.getElementById("downloads").innerHTML =
    offered.length ? "Download: " + offered.join(" · ") : "";
}

function linkRecord() {
  document.getElementById("node-record").href =
    `/files/node-${document.getElementById("log-node").value}.json`;
}

function draw(s) {
  latest = s;
  drawSummary(s);
  drawGraph(s);
  drawCharts(s);
  drawTable(s);
  drawDownloads(s.downloads);
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
document.getElementById("log-node").onchange = () => { linkRecord(); refreshLog(); };
setInterval(refreshLog, 2000);

const events = new EventSource("/api/events");
events.onmessage = message => draw(JSON.parse(message.data));
events.onerror = () => {
  document.getElementById("summary").textContent += " · (the monitor is not answering)";
};
