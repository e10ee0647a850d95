// Line plots of per-second series, drawn as SVG (no library): one plot, several lines,
// gaps where a value is null, a y axis from 0 to a round maximum, x labelled in seconds ago.

import { h, s } from "./dom.js";

const WIDTH = 720;
const HEIGHT = 200;
const PAD = { left: 52, right: 12, top: 10, bottom: 24 };

/** A round axis maximum at or above ``value``: 1, 2, 5 x a power of ten. */
export function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) {
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

/**
 * An SVG plot: lines = [{name, values: [number|null], cls}], one value a second, the last
 * ``values.length`` seconds before now. ``unit`` follows the axis numbers ("/s", " ms").
 */
export function linePlot({ lines, unit = "", title = "" }) {
  const count = Math.max(1, ...lines.map((l) => l.values.length));
  const top = niceMax(Math.max(0, ...lines.flatMap((l) => l.values.filter((v) => v !== null))));
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (i) => PAD.left + (count === 1 ? plotW : (i / (count - 1)) * plotW);
  const y = (v) => PAD.top + plotH - (v / top) * plotH;
  const svg = s("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: "plot",
    role: "img",
    "aria-label": title,
  });
  for (let k = 0; k <= 4; k += 1) {
    const value = (top * k) / 4;
    svg.append(
      s("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value), class: "grid" }),
      s("text", { x: PAD.left - 6, y: y(value) + 4, class: "axis", "text-anchor": "end" },
        `${formatNumber(value)}${unit}`),
    );
  }
  const tickEvery = count > 120 ? 60 : count > 30 ? 15 : 5;
  for (let ago = 0; ago < count; ago += tickEvery) {
    const i = count - 1 - ago;
    svg.append(
      s("line", { x1: x(i), x2: x(i), y1: PAD.top, y2: PAD.top + plotH, class: "grid" }),
      s("text", { x: x(i), y: HEIGHT - 6, class: "axis", "text-anchor": "middle" },
        ago === 0 ? "now" : `-${ago >= 60 && ago % 60 === 0 ? `${ago / 60}m` : `${ago}s`}`),
    );
  }
  for (const line of lines) {
    let path = "";
    let open = false;
    line.values.forEach((value, i) => {
      if (value === null || value === undefined) {
        open = false;
        return;
      }
      path += `${open ? "L" : "M"}${x(i).toFixed(1)},${y(value).toFixed(1)}`;
      open = true;
    });
    if (path) svg.append(s("path", { d: path, class: `line ${line.cls}` }, s("title", {}, line.name)));
    line.values.forEach((value, i) => {
      const alone = (j) => j < 0 || j >= line.values.length || line.values[j] === null;
      if (value !== null && value !== undefined && alone(i - 1) && alone(i + 1)) {
        // a second with neighbours on neither side draws no line: a dot shows it
        svg.append(s("circle", { cx: x(i), cy: y(value), r: 2.5, class: `dot ${line.cls}` }));
      }
    });
  }
  const legend = h(
    "div",
    { class: "legend" },
    lines.map((l) => h("span", { class: `key ${l.cls}` }, l.name)),
  );
  return h("figure", { class: "plot-box" }, h("figcaption", {}, title), svg, legend);
}

function formatNumber(value) {
  if (value >= 1000) return `${(value / 1000).toFixed(value % 1000 ? 1 : 0)}k`;
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}
