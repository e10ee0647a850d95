// A DAG run's graph as SVG: each job a box coloured by its status in the run, placed in
// the column of its longest path from the root, with an arrow from each upstream.

import { s } from "./dom.js";

const BOX_W = 170;
const BOX_H = 40;
const COL_GAP = 70;
const ROW_GAP = 18;
const PAD = 12;

/** Column of each node: 0 for the root, else 1 + the largest column of its upstreams. */
export function columnsOf(nodes) {
  const column = new Map();
  // nodes come upstreams first (GET /api/dag-runs), so one pass settles every column
  for (const node of nodes) {
    const ups = node.upstreams.map((u) => column.get(u.job_id)).filter((c) => c !== undefined);
    column.set(node.job_id, ups.length ? 1 + Math.max(...ups) : 0);
  }
  return column;
}

/** The run's nodes, and first the upstreams outside them (another root of a dependent). */
export function withOtherRoots(nodes) {
  const inside = new Set(nodes.map((n) => n.job_id));
  const others = new Map();
  for (const node of nodes) {
    for (const upstream of node.upstreams) {
      if (!inside.has(upstream.job_id)) others.set(upstream.job_id, { ...upstream, upstreams: [] });
    }
  }
  return [...others.values(), ...nodes];
}

/** The SVG of a run's nodes; a click on a node opens its job. */
export function dagGraph(runNodes) {
  const nodes = withOtherRoots(runNodes);
  const column = columnsOf(nodes);
  const rows = new Map();
  const place = new Map();
  for (const node of nodes) {
    const c = column.get(node.job_id);
    const r = rows.get(c) || 0;
    rows.set(c, r + 1);
    place.set(node.job_id, {
      x: PAD + c * (BOX_W + COL_GAP),
      y: PAD + r * (BOX_H + ROW_GAP),
    });
  }
  const width = PAD * 2 + (Math.max(0, ...column.values()) + 1) * (BOX_W + COL_GAP) - COL_GAP;
  const height = PAD * 2 + Math.max(1, ...rows.values()) * (BOX_H + ROW_GAP) - ROW_GAP;
  const svg = s("svg", {
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    class: "dag",
    role: "img",
    "aria-label": "DAG run",
  });
  svg.append(
    s("defs", {},
      s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7,
        markerHeight: 7, orient: "auto-start-reverse" },
      s("path", { d: "M0,0L10,5L0,10z", class: "arrow" }))),
  );
  for (const node of nodes) {
    const to = place.get(node.job_id);
    for (const upstream of node.upstreams) {
      const from = place.get(upstream.job_id);
      if (!from) continue;
      const x1 = from.x + BOX_W;
      const y1 = from.y + BOX_H / 2;
      const x2 = to.x;
      const y2 = to.y + BOX_H / 2;
      const bend = (x2 - x1) / 2;
      svg.append(s("path", {
        d: `M${x1},${y1}C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`,
        class: "edge",
        "marker-end": "url(#arrow)",
      }));
    }
  }
  for (const node of nodes) {
    const { x, y } = place.get(node.job_id);
    const status = node.status || "WAITING";
    const label = node.job_id.length > 22 ? `${node.job_id.slice(0, 21)}…` : node.job_id;
    const tip = `${node.execution_id}: ${status}${node.reason ? ` (${node.reason})` : ""}`;
    const link = s("a", { href: `#/job/${encodeURIComponent(node.job_id)}`, class: "node",
      "data-job-id": node.job_id, "data-status": status },
    s("title", {}, tip),
    s("rect", { x, y, width: BOX_W, height: BOX_H, rx: 6, class: `box s-${status.toLowerCase()}` }),
    s("text", { x: x + 10, y: y + 16, class: "name" }, label),
    s("text", { x: x + 10, y: y + 32, class: "state" }, status));
    svg.append(link);
  }
  return svg;
}
