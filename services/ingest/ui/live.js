// Overview, live plots and partitions: GET /api/dashboard/live and /api/dashboard/partitions.

import { api, badge, describeError, duration, h, jobLink, put, when } from "./dom.js";
import { linePlot } from "./plots.js";

const OUTCOME_LINES = [
  ["succeeded", "succeeded", "c-ok"],
  ["failed", "failed (will retry)", "c-warn"],
  ["dead_letter", "dead letter", "c-bad"],
  ["other", "skipped, missed, cancelled", "c-other"],
];

function plotsOf(live) {
  const throughput = linePlot({
    title: "Outcomes per second",
    unit: "/s",
    lines: OUTCOME_LINES.map(([key, name, cls]) => ({ name, cls, values: live.outcomes[key] })),
  });
  const lateness = linePlot({
    title: "Start lateness (started − scheduled), first attempts",
    unit: " ms",
    lines: [ // the highest first, so that lower lines are drawn over it
      { name: "max", cls: "c-bad", values: live.lateness_ms.max },
      { name: "p99", cls: "c-warn", values: live.lateness_ms.p99 },
      { name: "p50", cls: "c-ok", values: live.lateness_ms.p50 },
    ],
  });
  return [throughput, lateness];
}

function liveFigures(live) {
  const w = live.window;
  const finished = Object.values(w.outcomes).reduce((a, b) => a + b, 0);
  const recent = OUTCOME_LINES.map(([key]) => live.outcomes[key].slice(-10))
    .flat()
    .reduce((a, b) => a + b, 0);
  return h(
    "div",
    { class: "figures" },
    figure("outcomes / s (last 10 s)", (recent / 10).toFixed(1)),
    figure(`outcomes (last ${Math.round(live.seconds / 60)} min)`, finished),
    figure("succeeded", w.outcomes.succeeded),
    figure("dead letters", w.outcomes.dead_letter, w.outcomes.dead_letter ? "bad" : ""),
    figure("lateness p50", duration(w.lateness_p50_ms)),
    figure("lateness p99", duration(w.lateness_p99_ms)),
    figure("lateness max", duration(w.lateness_max_ms)),
  );
}

function figure(label, value, cls = "") {
  return h("div", { class: `figure ${cls}` }, h("b", {}, String(value)), h("span", {}, label));
}

function groupsSummary(body) {
  return h(
    "table",
    { class: "groups" },
    h("thead", {}, h("tr", {}, ["group", "state", "members", "partitions", "lag"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      body.groups.map((g) =>
        h(
          "tr",
          {},
          h("td", {}, h("a", { href: "#/partitions" }, g.name)),
          h("td", {}, badge(g.state), g.error ? h("small", { class: "bad" }, g.error) : null),
          h("td", {}, g.members.length),
          h("td", {}, g.partitions.length),
          h("td", { class: "num" }, g.total_lag),
        ),
      ),
    ),
  );
}

/** "#/": the live figures and plots, the groups and the newest dead letters. */
export async function overviewPage({ main, every }) {
  const figures = h("div");
  const plots = h("div", { class: "plots" });
  const groups = h("div");
  const dead = h("div");
  main.append(
    h("h1", {}, "Overview"),
    figures,
    plots,
    h("div", { class: "columns" },
      h("section", {}, h("h2", {}, "Services ", h("a", { href: "#/partitions", class: "more" }, "partitions →")), groups),
      h("section", {}, h("h2", {}, "Newest dead letters ", h("a", { href: "#/dead-letters", class: "more" }, "all →")), dead)),
  );
  const drawLive = async () => {
    try {
      const live = await api("api/dashboard/live");
      put(figures, liveFigures(live));
      put(plots, ...plotsOf(live));
    } catch (error) {
      put(figures, h("p", { class: "error" }, describeError(error)));
    }
  };
  const drawRest = async () => {
    try {
      put(groups, groupsSummary(await api("api/dashboard/partitions")));
    } catch (error) {
      put(groups, h("p", { class: "error" }, describeError(error)));
    }
    try {
      const body = await api("api/dead-letter", { params: { limit: 5 } });
      put(dead, 
        body.items.length
          ? h("ul", { class: "plain" }, body.items.map((d) =>
              h("li", {}, d.job_id ? jobLink(d.job_id) : d.kind, " ", h("small", { class: "muted" }, d.reason), " ", when(d.dead_at))))
          : h("p", { class: "muted" }, "none"),
      );
    } catch (error) {
      put(dead, h("p", { class: "error" }, describeError(error)));
    }
  };
  await Promise.all([drawLive(), drawRest()]);
  every(2000, drawLive);
  every(5000, drawRest);
}

/** "#/live": the plots over 1 or 5 minutes. */
export async function livePage({ main, every }) {
  let seconds = 300;
  const plots = h("div", { class: "plots" });
  const figures = h("div");
  const choose = (value) => {
    seconds = value;
    draw();
  };
  main.append(
    h("h1", {}, "Live"),
    h("p", { class: "muted" }, "From the results the API's status view reads; refreshed every 2 s. ",
      h("button", { type: "button", onclick: () => choose(60) }, "1 min"), " ",
      h("button", { type: "button", onclick: () => choose(300) }, "5 min")),
    figures,
    plots,
  );
  const draw = async () => {
    try {
      const live = await api("api/dashboard/live", { params: { seconds } });
      put(figures, liveFigures(live));
      put(plots, ...plotsOf(live));
    } catch (error) {
      put(plots, h("p", { class: "error" }, describeError(error)));
    }
  };
  await draw();
  every(2000, draw);
}

/** One group's partitions: a row per partition number, a column of lag per topic. */
function groupTable(group, namespace) {
  const topics = [...new Set(group.partitions.map((p) => p.topic))].sort();
  const numbers = [...new Set(group.partitions.map((p) => p.partition))].sort((a, b) => a - b);
  const cell = new Map(group.partitions.map((p) => [`${p.topic}/${p.partition}`, p]));
  const short = (topic) => (topic.startsWith(namespace) ? topic.slice(namespace.length) : topic);
  const rows = numbers.map((n) => {
    const here = topics.map((t) => cell.get(`${t}/${n}`)).filter(Boolean);
    const owners = [...new Set(here.map((p) => p.owner || "unassigned"))];
    return h(
      "tr",
      {},
      h("td", { class: "num" }, n),
      h("td", {}, owners.map((o) => h("div", { class: o === "unassigned" ? "muted" : "" }, o))),
      topics.map((t) => {
        const p = cell.get(`${t}/${n}`);
        if (!p) return h("td", { class: "muted num" }, "—");
        const tip = `committed ${p.committed ?? "none"}, end ${p.end ?? "?"}`;
        return h("td", { class: `num ${p.lag ? "lagging" : ""}`, title: tip }, p.lag ?? "?");
      }),
    );
  });
  return h(
    "section",
    { class: "group", "data-group": group.name },
    h("h2", {}, `${group.name} `, badge(group.state), h("small", { class: "muted" }, ` ${group.group_id}`)),
    group.error ? h("p", { class: "error" }, group.error) : null,
    h("p", {}, `${group.members.length} member(s): `,
      group.members.map((m) => h("code", { title: m.host }, `${m.client_id} (${m.partitions})`)).reduce((acc, el) => (acc.length ? [...acc, ", ", el] : [el]), []),
      ` · total lag ${group.total_lag}`),
    numbers.length
      ? h("table", {},
          h("thead", {}, h("tr", {}, h("th", {}, "partition"), h("th", {}, "owner"), topics.map((t) => h("th", { class: "num" }, `${short(t)} lag`)))),
          h("tbody", {}, rows))
      : h("p", { class: "muted" }, "No partitions: the service is not running, or has committed nothing yet."),
  );
}

/** "#/partitions": every service group's partitions, owners and lag. */
export async function partitionsPage({ main, every }) {
  const body = h("div");
  main.append(h("h1", {}, "Partitions"), h("p", { class: "muted" },
    "Owners are the members' client ids (a process's worker id); lag is the partition's end minus the group's committed offset. Refreshed every 5 s."), body);
  const draw = async () => {
    try {
      const answer = await api("api/dashboard/partitions");
      put(body, ...answer.groups.map((g) => groupTable(g, answer.namespace)));
    } catch (error) {
      put(body, h("p", { class: "error" }, describeError(error)));
    }
  };
  await draw();
  every(5000, draw);
}
