// Jobs: the list (GET /api/jobs with its filters and id_prefix search) and one job's page
// (definition, next fires, executions with every attempt, DAG runs).

import { api, badge, describeError, h, hashParams, jobLink, put, when } from "./dom.js";

const STATUSES = ["", "SCHEDULED", "PAUSED", "CANCELLED", "COMPLETED"];
const FILTERS = ["id_prefix", "status", "tenant", "handler", "label"];

function schedule(job) {
  if (job.cron) return h("code", { title: job.cron.timezone }, `${job.cron.expression} (${job.cron.timezone})`);
  if (job.run_at) return h("span", {}, "once at ", when(job.run_at));
  if (job.depends_on && job.depends_on.length) {
    return h("span", {}, "after ", job.depends_on.map((u, i) => [i ? ", " : "", jobLink(u)]));
  }
  return "";
}

function labels(map) {
  return Object.entries(map || {}).map(([k, v]) => h("span", { class: "label" }, `${k}:${v}`));
}

function filterForm(params) {
  const field = (name, attrs) => h("label", {}, name.replace("_", " "), h("input", { name, value: params.get(name) || "", ...attrs }));
  const status = h("select", { name: "status" }, STATUSES.map((s) => h("option", { value: s, selected: params.get("status") === s }, s || "any")));
  const form = h(
    "form",
    { class: "filters", id: "job-filters" },
    field("id_prefix", { placeholder: "job id starts with", size: 18 }),
    h("label", {}, "status", status),
    field("tenant", { placeholder: "tenant", size: 10 }),
    field("handler", { placeholder: "e.g. reports.nightly", size: 16 }),
    field("label", { placeholder: "key:value", size: 12 }),
    h("button", { type: "submit" }, "Search"),
    h("a", { href: "#/jobs", class: "more" }, "clear"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams();
    for (const name of FILTERS) {
      const value = new FormData(form).get(name);
      if (value) query.set(name, value.trim());
    }
    location.hash = `#/jobs?${query}`;
  });
  return form;
}

/** "#/jobs?status=&tenant=&handler=&label=&id_prefix=&cursor=": a page of jobs. */
export async function jobsPage({ main }) {
  const params = hashParams();
  main.append(h("h1", {}, "Jobs"), filterForm(params));
  const query = Object.fromEntries(FILTERS.map((n) => [n, params.get(n)]));
  let body;
  try {
    body = await api("api/jobs", { params: { ...query, cursor: params.get("cursor"), limit: 50 } });
  } catch (error) {
    main.append(h("p", { class: "error" }, describeError(error)));
    return;
  }
  if (!body.items.length) {
    main.append(h("p", { class: "muted" }, "No jobs match."));
    return;
  }
  main.append(
    h("table", { class: "jobs" },
      h("thead", {}, h("tr", {}, ["job", "status", "handler", "schedule", "next run", "last execution", "tenant / labels"].map((t) => h("th", {}, t)))),
      h("tbody", {}, body.items.map((job) => h("tr", { "data-job-id": job.job_id },
        h("td", {}, jobLink(job.job_id)),
        h("td", {}, badge(job.status), job.outcome ? [" ", badge(job.outcome)] : null),
        h("td", {}, h("code", {}, job.handler)),
        h("td", {}, schedule(job)),
        h("td", {}, when(job.next_run_at)),
        h("td", {}, job.last_execution ? [badge(job.last_execution.status), " ", when(job.last_execution.recorded_at)] : h("span", { class: "muted" }, "none")),
        h("td", {}, h("span", { class: "muted" }, job.tenant), " ", labels(job.labels)))))),
  );
  if (body.next_cursor) {
    const next = new URLSearchParams(params);
    next.set("cursor", body.next_cursor);
    main.append(h("p", {}, h("a", { href: `#/jobs?${next}`, class: "button" }, "Next page →")));
  }
}

function definition(job) {
  const rows = [
    ["handler", h("code", {}, job.handler)],
    ["type", job.type],
    ["schedule", schedule(job)],
    ["priority", job.priority],
    ["tenant", job.tenant],
    ["labels", labels(job.labels)],
    ["timeout", `${job.timeout_s} s`],
    ["retry", `${job.retry.max_attempts} attempts, backoff ${job.retry.initial_backoff_s} s ×${job.retry.multiplier} up to ${job.retry.max_backoff_s} s`],
    ["overlap / catch-up", `${job.overlap} / ${job.catchup} (${job.catchup_window_s} s)`],
    ["jitter", `${job.jitter_s} s`],
    ["version", job.version],
    ["created", when(job.created_at)],
    ["updated", when(job.updated_at)],
    ["payload", h("pre", {}, job.payload_b64 ? `base64: ${job.payload_b64}` : JSON.stringify(job.payload, null, 2))],
  ];
  return h("table", { class: "definition" }, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))));
}

function attemptsTable(execution) {
  return h("table", { class: "attempts" },
    h("tbody", {}, execution.attempts.map((a) => h("tr", { class: "attempt", "data-attempt": a.attempt, "data-status": a.status },
      h("td", {}, `#${a.attempt}`),
      h("td", {}, badge(a.status)),
      h("td", {}, a.trigger),
      h("td", {}, when(a.started_at || a.recorded_at)),
      h("td", { class: "muted" }, a.worker_id || ""),
      h("td", { class: "error-text" }, a.error || a.reason || "")))));
}

function executionsTable(items, dagRoot) {
  return h("table", { class: "executions" },
    h("thead", {}, h("tr", {}, ["scheduled for", "status", "attempts (oldest first)", dagRoot ? "DAG run" : null].map((t) => t && h("th", {}, t)))),
    h("tbody", {}, items.map((e) => h("tr", { "data-execution-id": e.execution_id, "data-status": e.status },
      h("td", {}, when(e.scheduled_for), h("small", { class: "muted" }, e.execution_id)),
      h("td", {}, badge(e.status)),
      h("td", {}, attemptsTable(e)),
      dagRoot ? h("td", {}, h("a", { href: `#/dag/${encodeURIComponent(dagRoot)}/${Date.parse(e.scheduled_for)}` }, "graph")) : null))));
}

/** The root of a dependent (first upstream, transitively), to draw its DAG runs. */
async function rootOf(job) {
  let current = job;
  for (let depth = 0; depth < 64 && current.depends_on.length; depth += 1) {
    current = await api(`api/jobs/${encodeURIComponent(current.depends_on[0])}`);
  }
  return current.depends_on.length ? null : current.job_id;
}

/** The job's id when it starts DAG runs (its newest run has more jobs than itself). */
async function rootWithDependents(job) {
  const newest = job.recent_executions[0];
  if (!newest) return null;
  const run = await api(`api/dag-runs/${encodeURIComponent(job.job_id)}/${Date.parse(newest.scheduled_for)}`).catch(() => null);
  return run && run.nodes.length > 1 ? job.job_id : null;
}

/** "#/job/<id>": one job's definition, next fires, executions and DAG runs. */
export async function jobPage({ main, every }, jobId) {
  const path = `api/jobs/${encodeURIComponent(jobId)}`;
  let job;
  try {
    job = await api(path);
  } catch (error) {
    main.append(h("h1", {}, jobId), h("p", { class: "error" }, describeError(error)));
    return;
  }
  const head = h("h1", {}, jobId, " ");
  const fires = h("div");
  const executions = h("div");
  const runs = h("div");
  const isDependent = job.depends_on.length > 0;
  const dagRoot = isDependent ? await rootOf(job).catch(() => null) : await rootWithDependents(job);
  main.append(head, h("div", { class: "columns" },
    h("section", {}, h("h2", {}, "Definition"), definition(job)),
    h("section", {}, h("h2", {}, "Next fires"), fires, runs)),
  h("h2", {}, "Executions ", h("small", { class: "muted" }, "newest first, each with every attempt")), executions);
  const draw = async () => {
    try {
      const [now, next, page] = await Promise.all([
        api(path),
        api(`api/dashboard/jobs/${encodeURIComponent(jobId)}/next-fires`, { params: { count: 5 } }),
        api(`${path}/executions`, { params: { limit: 25 } }),
      ]);
      put(head, jobId, " ", badge(now.status), now.outcome ? [" ", badge(now.outcome)] : null);
      put(fires, next.next_fires.length
        ? h("ol", { class: "plain" }, next.next_fires.map((f) => h("li", {}, when(f.at))))
        : h("p", { class: "muted" }, isDependent ? "Runs after its upstreams, once per DAG run." : `None (${now.status}).`));
      put(runs, ...dagRuns(now, dagRoot));
      put(executions, page.items.length
        ? executionsTable(page.items, dagRoot && !isDependent ? dagRoot : null)
        : h("p", { class: "muted" }, "No executions yet."));
    } catch (error) {
      put(executions, h("p", { class: "error" }, describeError(error)));
    }
  };
  await draw();
  every(2000, draw);
}

function dagRuns(job, root) {
  if (!job.dag_runs.length) return [];
  return [
    h("h2", {}, "DAG runs"),
    h("table", {}, h("tbody", {}, job.dag_runs.map((run) => h("tr", {},
      h("td", {}, root ? h("a", { href: `#/dag/${encodeURIComponent(root)}/${run.run_key_ms}` }, run.run_key) : run.run_key),
      h("td", {}, badge(run.status)),
      h("td", { class: "muted" }, `${run.succeeded.length} upstream(s) succeeded, ${run.awaited.length} awaited, ${run.failed.length} failed`))))),
  ];
}
