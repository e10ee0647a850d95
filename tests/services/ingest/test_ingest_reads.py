"""The read API on the real broker: job lists, execution histories, COMPLETED one-offs.

Results and dead letters are produced by a ``Feeder`` as the executor and the timer would
write them (``test_ingest_flow`` runs the real services).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from services.ingest.settings import IngestSettings
from streams.identity import execution_id
from streams.records import ExecutionStatus, Trigger
from tests.services.ingest.test_ingest_api import (
    HOUR_MS,
    Http,
    create,
    iso,
    locs,
    now_ms,
    serving,
    view_of,
)
from tests.services.ingest.test_ingest_view import Feeder

pytestmark = pytest.mark.kafka


@pytest.fixture
def http(ingest_settings: IngestSettings) -> Any:
    with serving(ingest_settings) as client:
        yield client


def caught_up(http: Http) -> None:
    assert view_of(http).wait_until_caught_up(30)


def pages(http: Http, limit: int, between: Any = None, **params: Any) -> list[list[str]]:
    """Every page of GET /api/jobs (ids per page), calling ``between()`` after each."""
    found: list[list[str]] = []
    cursor = None
    while True:
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        answer = http.get("/api/jobs", params=query)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        found.append([item["job_id"] for item in body["items"]])
        cursor = body["next_cursor"]
        if cursor is None:
            return found
        if between is not None:
            between()
        assert len(found) < 10_000, "the pages never end"


def bulk_jobs(count: int, **fields: Any) -> list[dict[str, Any]]:
    run_at = now_ms() + HOUR_MS
    return [{"handler": "reports.nightly", "run_at": run_at, **fields} for _ in range(count)]


def test_pages_over_10k_jobs_with_concurrent_creates_repeat_and_lose_nothing(
    http: Http,
) -> None:
    client = http.app.state.client
    tenant = f"t{uuid.uuid4().hex[:8]}"
    existing = set(client.submit_many(bulk_jobs(10_000, tenant=tenant)))
    caught_up(http)
    created_meanwhile: list[str] = []
    stop = threading.Event()

    def keep_creating() -> None:
        while not stop.is_set():
            created_meanwhile.extend(client.submit_many(bulk_jobs(50, tenant=tenant)))

    writer = threading.Thread(target=keep_creating)
    writer.start()
    try:
        seen = pages(http, 500, tenant=tenant)
        unfiltered = [i for page in pages(http, 333) for i in page]
    finally:
        stop.set()
        writer.join()
    flat = [i for page in seen for i in page]
    assert len(created_meanwhile) > 0
    assert len(flat) == len(set(flat)), "a job was listed twice"
    assert flat == sorted(flat), "pages are in job id order"
    assert existing <= set(flat), f"{len(existing - set(flat))} jobs were lost"
    assert set(flat) <= existing | set(created_meanwhile)
    assert len(unfiltered) == len(set(unfiltered)) and existing <= set(unfiltered)
    assert all(len(page) <= 500 for page in seen) and len(seen) >= 20


def test_filters_by_status_tenant_handler_and_labels(http: Http) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    cron = {"expression": "0 3 * * *"}
    bodies = {
        "a": {"handler": "etl.load", "cron": cron, "labels": {"team": "data", "env": "prod"}},
        "b": {"handler": "etl.load", "cron": cron, "labels": {"team": "data", "env": "dev"}},
        "c": {"handler": "etl.clean", "cron": cron, "labels": {"team": "web"}},
        "d": {"handler": "etl.load", "cron": cron, "labels": {"team": "data"}},
    }
    ids = {}
    for name, body in bodies.items():
        answer = create(http, {**body, "tenant": tenant})
        assert answer.status_code == 201, answer.text
        ids[name] = answer.json()["job_id"]
    assert http.post(f"/api/jobs/{ids['d']}/pause").status_code == 200
    assert http.delete(f"/api/jobs/{ids['b']}").status_code == 200
    caught_up(http)

    def listed(**params: Any) -> list[str]:
        return [i for page in pages(http, 1, tenant=tenant, **params) for i in page]

    def named(*names: str) -> list[str]:
        return sorted(ids[n] for n in names)

    assert listed() == named("a", "b", "c", "d")
    assert listed(handler="etl.load") == named("a", "b", "d")
    assert listed(label="team:data") == named("a", "b", "d")
    assert listed(label=["team:data", "env:prod"]) == named("a")
    assert listed(status="PAUSED") == named("d")
    assert listed(status="CANCELLED", handler="etl.load") == named("b")
    assert listed(status="SCHEDULED", label="team:data") == named("a")
    assert listed(label="team:none") == []
    item = http.get("/api/jobs", params={"tenant": tenant, "status": "PAUSED"}).json()["items"][0]
    assert (item["job_id"], item["status"], item["type"], item["labels"]) == (
        ids["d"], "PAUSED", "recurring", {"team": "data"},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"status": "DONE"}, ["query", "status"]),
        ({"label": "nocolon"}, ["query", "label"]),
        ({"label": ":v"}, ["query", "label"]),
        ({"tenant": "bad tenant"}, ["query", "tenant"]),
        ({"handler": "Not.A.Handler"}, ["query", "handler"]),
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": 501}, ["query", "limit"]),
        ({"cursor": "!!!"}, ["query", "cursor"]),
        ({"cursor": "__8"}, ["query", "cursor"]),  # base64 of bytes that are not UTF-8
    ],
)
def test_bad_list_parameters_answer_422_naming_them(
    http: Http, params: dict[str, Any], loc: list[str]
) -> None:
    assert locs(http.get("/api/jobs", params=params)) == [loc]


def test_a_one_off_whose_execution_ended_is_completed_with_its_outcome(
    http: Http, ingest_settings: IngestSettings
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    run_at = now_ms() + HOUR_MS
    ok, dead = (
        create(http, {"handler": "a.b", "run_at": run_at, "tenant": tenant}).json()["job_id"]
        for _ in range(2)
    )
    feeder = Feeder(ingest_settings)
    feeder.result(ok, run_at, ExecutionStatus.STARTED, worker_id="w1", started_at_ms=run_at)
    caught_up_after(http, feeder)
    assert http.get(f"/api/jobs/{ok}").json()["status"] == "SCHEDULED"  # running, not ended
    feeder.result(ok, run_at, ExecutionStatus.SUCCEEDED, finished_at_ms=run_at + 5)
    feeder.result(dead, run_at, ExecutionStatus.FAILED, error="boom", next_attempt_at_ms=run_at + 9)
    feeder.result(dead, run_at, ExecutionStatus.DEAD_LETTER, error="boom")
    feeder.result(dead, run_at + 60_000, ExecutionStatus.SUCCEEDED)  # a manual fire: not its own
    caught_up_after(http, feeder)
    job = http.get(f"/api/jobs/{ok}").json()
    assert (job["status"], job["outcome"], job["next_run_at"]) == ("COMPLETED", "SUCCEEDED", None)
    assert http.get(f"/api/jobs/{dead}").json()["outcome"] == "DEAD_LETTER"
    completed = http.get("/api/jobs", params={"tenant": tenant, "status": "COMPLETED"}).json()
    assert sorted(i["job_id"] for i in completed["items"]) == sorted([ok, dead])
    assert http.get("/api/jobs", params={"tenant": tenant, "status": "SCHEDULED"}).json() == {
        "items": [],
        "next_cursor": None,
    }
    # A replay of the dead execution makes the one-off scheduled again until it ends.
    replayed = Trigger.REPLAY
    feeder.result(
        dead, run_at, ExecutionStatus.STARTED, started_at_ms=run_at + 100, trigger=replayed
    )
    caught_up_after(http, feeder)
    assert http.get(f"/api/jobs/{dead}").json()["status"] == "SCHEDULED"
    feeder.result(
        dead, run_at, ExecutionStatus.SUCCEEDED, finished_at_ms=run_at + 200, trigger=replayed
    )
    caught_up_after(http, feeder)
    job = http.get(f"/api/jobs/{dead}").json()
    assert (job["status"], job["outcome"]) == ("COMPLETED", "SUCCEEDED")
    execution = http.get(f"/api/executions/{execution_id(dead, run_at)}").json()
    assert [(a["attempt"], a["status"], a["trigger"]) for a in execution["attempts"]] == [
        (1, "DEAD_LETTER", "SCHEDULE"),
        (1, "SUCCEEDED", "REPLAY"),
    ]
    assert execution["attempts"][0]["error"] == "boom"
    assert execution["attempts"][0]["next_attempt_at"] is None  # the dead letter's own


def caught_up_after(http: Http, feeder: Feeder) -> None:
    feeder.flush()
    caught_up(http)


def test_every_attempt_is_kept_and_executions_page_newest_first(
    ingest_settings: IngestSettings,
) -> None:
    settings = ingest_settings.model_copy(update={"executions_kept_per_job": 5})
    with serving(settings) as http:
        cron = {"expression": "* * * * *"}
        job_id = create(http, {"handler": "a.b", "cron": cron}).json()["job_id"]
        feeder = Feeder(settings)
        tick = 1_800_000_000_000
        feeder.result(job_id, tick, ExecutionStatus.STARTED, worker_id="w1", started_at_ms=tick)
        feeder.result(job_id, tick, ExecutionStatus.FAILED, error="e1", finished_at_ms=tick + 1,
                      next_attempt_at_ms=tick + 1000)  # fmt: skip
        feeder.result(job_id, tick, ExecutionStatus.STARTED, attempt=2, worker_id="w2",
                      started_at_ms=tick + 1000, trigger=Trigger.RETRY)  # fmt: skip
        feeder.result(job_id, tick, ExecutionStatus.TIMED_OUT, attempt=2, error="slow",
                      finished_at_ms=tick + 1500, next_attempt_at_ms=tick + 3000,
                      trigger=Trigger.RETRY)  # fmt: skip
        feeder.result(job_id, tick, ExecutionStatus.SUCCEEDED, attempt=3, worker_id="w1",
                      started_at_ms=tick + 3000, finished_at_ms=tick + 3100,
                      trigger=Trigger.RETRY)  # fmt: skip
        for minute in range(1, 7):  # 7 executions in all, 5 kept
            feeder.result(job_id, tick + minute * 60_000, ExecutionStatus.SUCCEEDED)
        caught_up_after(http, feeder)
        first = http.get(f"/api/executions/{execution_id(job_id, tick)}")
        assert first.status_code == 404, "the oldest executions were dropped"
        assert execution_id(job_id, tick) in first.json()["detail"]
        page = http.get(f"/api/jobs/{job_id}/executions", params={"limit": 2}).json()
        ticks = [e["scheduled_for"] for e in page["items"]]
        assert ticks == [iso(tick + 6 * 60_000), iso(tick + 5 * 60_000)]
        rest = http.get(
            f"/api/jobs/{job_id}/executions", params={"limit": 10, "cursor": page["next_cursor"]}
        ).json()
        assert [e["scheduled_for"] for e in rest["items"]] == [
            iso(tick + m * 60_000) for m in (4, 3, 2)
        ]
        assert rest["next_cursor"] is None

    roomy = ingest_settings.model_copy(update={"view_dir": settings.view_path.parent / "v2"})
    with serving(roomy) as http:  # a view keeping 100 executions a job
        caught_up(http)
        execution = http.get(f"/api/executions/{execution_id(job_id, tick)}").json()
        assert [(a["attempt"], a["status"], a["worker_id"], a["error"]) for a in
                execution["attempts"]] == [
            (1, "FAILED", "w1", "e1"), (2, "TIMED_OUT", "w2", "slow"), (3, "SUCCEEDED", "w1", None),
        ]  # fmt: skip
        assert execution["attempts"][0]["started_at"] == iso(tick)
        assert execution["attempts"][0]["next_attempt_at"] == iso(tick + 1000)
        assert execution["attempts"][1]["next_attempt_at"] == iso(tick + 3000)
        assert (execution["status"], execution["attempt"]) == ("SUCCEEDED", 3)
        job = http.get(f"/api/jobs/{job_id}").json()
        assert len(job["recent_executions"]) == 7
        assert job["recent_executions"][-1]["attempts"] == execution["attempts"]


def test_execution_reads_404_and_422_name_what_is_wrong(http: Http) -> None:
    missing = http.get("/api/executions/nope@123")
    assert missing.status_code == 404 and "nope@123" in missing.json()["detail"]
    assert http.get("/api/executions/not-an-id").status_code == 404
    assert http.get("/api/jobs/never/executions").status_code == 404
    job_id = create(http, {"handler": "a.b", "run_at": now_ms() + HOUR_MS}).json()["job_id"]
    bad = http.get(f"/api/jobs/{job_id}/executions", params={"cursor": "AA"})
    assert locs(bad) == [["query", "cursor"]]
    assert locs(http.get(f"/api/jobs/{job_id}/executions", params={"limit": 0})) == [
        ["query", "limit"]
    ]
    replay = http.post("/api/dead-letter/nope@123/replay")
    assert replay.status_code == 404 and "nope@123" in replay.json()["detail"]
