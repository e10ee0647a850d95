// "#/dag/<root>/<run_key_ms>": one DAG run's graph (GET /api/dag-runs/{root}/{run_key_ms}),
// the root's recent runs to choose from, and a form to pick a root.

import { dagGraph } from "./dag.js";
import { api, badge, describeError, h, put, utc } from "./dom.js";

const LEGEND = ["SUCCEEDED", "STARTED", "FAILED", "WAITING", "DEAD_LETTER", "UPSTREAM_FAILED", "SKIPPED", "MISSED"];

function rootForm(root) {
  const input = h("input", { name: "root", value: root || "", placeholder: "root job id", size: 24 });
  const form = h("form", { class: "filters" }, h("label", {}, "root job", input), h("button", { type: "submit" }, "Show runs"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (input.value.trim()) location.hash = `#/dag/${encodeURIComponent(input.value.trim())}`;
  });
  return form;
}

export async function dagPage({ main, every }, root, runKey) {
  main.append(h("h1", {}, "DAG runs"), rootForm(root));
  if (!root) {
    main.append(h("p", { class: "muted" }, "A DAG run is named by its root job and the tick that started it. Open a root job (one without depends_on) to choose a run, or a dependent's page for its recent runs."));
    return;
  }
  let executions;
  try {
    executions = await api(`api/jobs/${encodeURIComponent(root)}/executions`, { params: { limit: 20 } });
  } catch (error) {
    main.append(h("p", { class: "error" }, describeError(error)));
    return;
  }
  const keys = executions.items.map((e) => Date.parse(e.scheduled_for));
  const chosen = runKey ? Number(runKey) : keys[0];
  if (chosen === undefined) {
    main.append(h("p", { class: "muted" }, `${root} has not run yet.`));
    return;
  }
  main.append(h("div", { class: "runs" }, "runs of ", h("code", {}, root), ": ",
    keys.map((k) => h("a", { href: `#/dag/${encodeURIComponent(root)}/${k}`, class: k === chosen ? "chip active" : "chip" }, utc(k)))));
  const graph = h("div", { class: "graph" });
  const legend = h("p", { class: "legend" }, LEGEND.map((s) => [badge(s), " "]));
  main.append(h("h2", {}, `Run ${utc(chosen)}`), graph, legend);
  const draw = async () => {
    try {
      const run = await api(`api/dag-runs/${encodeURIComponent(root)}/${chosen}`);
      put(graph, dagGraph(run.nodes), run.truncated ? h("p", { class: "muted" }, "(more jobs than shown)") : null);
    } catch (error) {
      put(graph, h("p", { class: "error" }, describeError(error)));
    }
  };
  await draw();
  every(2000, draw);
}
