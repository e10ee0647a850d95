// Small helpers of the dashboard: building elements, calling the API, formatting times.
// Text from the API (job ids, payloads, errors) only ever becomes text nodes, never HTML.

const SVG_NS = "http://www.w3.org/2000/svg";

/** An element: h("a", {href: "#/jobs", class: "x"}, "text", child, [more]). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  return fill(el, attrs, children);
}

/** Replace the children of ``el`` (arrays flattened, null and false left out). */
export function put(el, ...children) {
  el.replaceChildren();
  return fill(el, {}, children);
}

/** An SVG element, like h. */
export function s(tag, attrs = {}, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

function fill(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// The API is at the dashboard's parent path: /ui/ -> /, also behind a proxy's prefix.
const API_ROOT = new URL("..", document.baseURI);
const TOKEN_KEY = "kafkron.token";

export class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === "string" ? detail : JSON.stringify(detail));
    this.status = status;
    this.detail = detail;
  }
}

/** Call the JSON API: api("api/jobs", {params: {...}, method: "POST"}) -> parsed body. */
export async function api(path, { params = {}, method = "GET" } = {}) {
  const url = new URL(path, API_ROOT);
  for (const [key, value] of Object.entries(params)) {
    for (const one of [value].flat()) {
      if (one !== null && one !== undefined && one !== "") url.searchParams.append(key, one);
    }
  }
  const headers = { accept: "application/json" };
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers.authorization = `Bearer ${token}`;
  const answer = await fetch(url, { method, headers });
  const body = await answer.json().catch(() => null);
  if (answer.status === 401) askForToken();
  if (!answer.ok) throw new ApiError(answer.status, body ? body.detail ?? body : answer.statusText);
  return body;
}

function askForToken() {
  if (document.getElementById("token-bar")) return;
  const input = h("input", { type: "password", placeholder: "API token", size: 32 });
  const bar = h(
    "form",
    { id: "token-bar", class: "notice" },
    "The API asks for a token: ",
    input,
    h("button", { type: "submit" }, "Use it"),
  );
  bar.addEventListener("submit", (event) => {
    event.preventDefault();
    localStorage.setItem(TOKEN_KEY, input.value.trim());
    bar.remove();
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  });
  document.body.prepend(bar);
}

/** What a failed call says, for the page. */
export function describeError(error) {
  if (!(error instanceof ApiError)) return String(error);
  const detail = Array.isArray(error.detail)
    ? error.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ")
    : error.message;
  return `${error.status}: ${detail}`;
}

/** ISO time as "2026-12-04 16:02:03Z"; "" for none. */
export function utc(value) {
  if (value === null || value === undefined) return "";
  const date = typeof value === "number" ? new Date(value) : new Date(value);
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** "in 3m 5s" / "12s ago" from an ISO time or epoch ms. */
export function relative(value, nowMs = Date.now()) {
  if (value === null || value === undefined) return "";
  const ms = (typeof value === "number" ? value : Date.parse(value)) - nowMs;
  const ahead = ms > 0;
  let left = Math.round(Math.abs(ms) / 1000);
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (left >= size) {
      parts.push(`${Math.floor(left / size)}${unit}`);
      left %= size;
    }
  }
  if (parts.length < 2 && (left || !parts.length)) parts.push(`${left}s`);
  const text = parts.slice(0, 2).join(" ");
  return ahead ? `in ${text}` : `${text} ago`;
}

/** A time cell: UTC with the relative time as a second line. */
export function when(value) {
  if (!value) return h("span", { class: "muted" }, "—");
  return h("span", { class: "when", title: value }, utc(value), h("small", {}, relative(value)));
}

/** A coloured status badge. */
export function badge(status) {
  if (!status) return h("span", { class: "muted" }, "—");
  return h("span", { class: `badge s-${status.toLowerCase()}` }, status);
}

/** Milliseconds for people: "850 ms", "2.4 s". */
export function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

/** Query parameters of the page's hash (#/jobs?status=PAUSED). */
export function hashParams() {
  const query = location.hash.split("?")[1] || "";
  return new URLSearchParams(query);
}

export function jobLink(jobId) {
  return h("a", { href: `#/job/${encodeURIComponent(jobId)}` }, jobId);
}
