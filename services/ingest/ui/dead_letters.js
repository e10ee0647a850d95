// Dead letters (GET /api/dead-letter) with a Replay button per dead execution
// (POST /api/dead-letter/{id}/replay), which then follows the execution until the replay
// ends (GET /api/executions/{id}).

import { api, badge, describeError, h, hashParams, jobLink, put, when } from "./dom.js";

const FINAL = new Set(["SUCCEEDED", "DEAD_LETTER", "SKIPPED", "MISSED", "CANCELLED", "UPSTREAM_FAILED"]);

/** The execution's state now: its newest attempt's status and trigger. */
async function stateOf(executionId) {
  const execution = await api(`api/executions/${encodeURIComponent(executionId)}`);
  return { status: execution.status, trigger: execution.trigger, attempts: execution.attempts.length };
}

function showState(cell, state) {
  put(cell, badge(state.status), state.trigger === "REPLAY" ? h("small", { class: "muted" }, " replayed") : null);
  cell.dataset.status = state.status;
  cell.dataset.trigger = state.trigger;
}

/** Replay, then poll until an attempt of the replay round ends in a final status. */
async function replay(button, cell, executionId) {
  button.disabled = true;
  const before = await stateOf(executionId).catch(() => ({ attempts: 0 }));
  try {
    const answer = await api(`api/dead-letter/${encodeURIComponent(executionId)}/replay`, { method: "POST" });
    put(cell, h("span", { class: "muted" }, `replaying (attempt ${answer.attempt}, ${answer.trigger})…`));
  } catch (error) {
    put(cell, h("span", { class: "error" }, describeError(error)));
    button.disabled = false;
    return;
  }
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    await new Promise((done) => setTimeout(done, 500));
    if (!cell.isConnected) return; // the page was left
    const state = await stateOf(executionId).catch(() => null);
    if (state && state.trigger === "REPLAY" && state.attempts > before.attempts) {
      showState(cell, state);
      if (FINAL.has(state.status)) {
        button.disabled = false;
        return;
      }
    }
  }
  cell.append(h("small", { class: "error" }, " no final status within 2 minutes"));
  button.disabled = false;
}

function row(item) {
  const now = h("td", { class: "now" }, h("span", { class: "muted" }, "…"));
  const replayable = item.kind === "EXECUTION" && item.execution_id;
  const button = replayable ? h("button", { type: "button", class: "replay" }, "Replay") : null;
  if (button) button.addEventListener("click", () => replay(button, now, item.execution_id));
  if (replayable) {
    stateOf(item.execution_id).then((state) => showState(now, state), () => put(now, h("span", { class: "muted" }, "not in view")));
  } else {
    put(now, h("span", { class: "muted" }, "—"));
  }
  return h("tr", { class: "dead-letter", "data-execution-id": item.execution_id || "" },
    h("td", {}, when(item.dead_at)),
    h("td", {}, item.job_id ? jobLink(item.job_id) : h("span", { class: "muted" }, item.kind), h("small", { class: "muted" }, item.execution_id || `${item.source_topic}[${item.source_partition}]@${item.source_offset}`)),
    h("td", {}, h("code", {}, item.handler || "")),
    h("td", { class: "num" }, item.attempts ?? ""),
    h("td", {}, item.reason, item.last_error ? h("div", { class: "error-text" }, item.last_error) : null),
    now,
    h("td", {}, button));
}

/** "#/dead-letters?cursor=": dead executions and records, newest first. */
export async function deadLettersPage({ main }) {
  const params = hashParams();
  main.append(h("h1", {}, "Dead letters"), h("p", { class: "muted" },
    "A replay runs the execution again (attempt 1, trigger REPLAY, the same execution id); the row follows it to its end."));
  let body;
  try {
    body = await api("api/dead-letter", { params: { cursor: params.get("cursor"), limit: 50 } });
  } catch (error) {
    main.append(h("p", { class: "error" }, describeError(error)));
    return;
  }
  if (!body.items.length) {
    main.append(h("p", { class: "muted" }, "No dead letters."));
    return;
  }
  main.append(h("table", { class: "dead-letters" },
    h("thead", {}, h("tr", {}, ["dead at", "job / execution", "handler", "attempts", "reason", "status now", ""].map((t) => h("th", {}, t)))),
    h("tbody", {}, body.items.map(row))));
  if (body.next_cursor) {
    main.append(h("p", {}, h("a", { class: "button", href: `#/dead-letters?cursor=${encodeURIComponent(body.next_cursor)}` }, "Older →")));
  }
}
