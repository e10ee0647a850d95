"""The dashboard's reads and pages served by the real app on the real broker: live outcomes
from results the view read, a group's partitions, owners and lag, next fires, the job
search, the 422s naming bad parameters, and no page referring to another site."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from services.ingest.dashboard import CONTENT_SECURITY_POLICY, UI_DIR
from services.ingest.settings import IngestSettings
from streams.records import ExecutionStatus, Trigger
from streams.topics import Priority, TopicNames, due_topic_base
from tests.services.ingest.test_dashboard_parts import EXTERNAL
from tests.services.ingest.test_ingest_api import Http, create, locs, now_ms, serving, view_of
from tests.services.ingest.test_ingest_view import Feeder

pytestmark = pytest.mark.kafka


@pytest.fixture
def http(ingest_settings: IngestSettings) -> Any:
    with serving(ingest_settings) as client:
        yield client


def test_live_counts_the_outcomes_and_lateness_the_view_read(
    http: Http, ingest_settings: IngestSettings
) -> None:
    feeder = Feeder(ingest_settings)
    tick = (now_ms() // 1000 - 3) * 1000  # every record below lands 3 s ago
    for n, lateness_ms in enumerate((4, 9, 120)):
        feeder.result(f"ok{n}", tick, ExecutionStatus.SUCCEEDED, started_at_ms=tick + lateness_ms)
    feeder.result("dead", tick, ExecutionStatus.DEAD_LETTER, started_at_ms=tick + 2)
    feeder.result("skip", tick, ExecutionStatus.SKIPPED, reason="paused")
    feeder.result("started", tick, ExecutionStatus.STARTED, started_at_ms=tick + 1)
    feeder.result(  # a retry's start is no lateness
        "retry", tick, ExecutionStatus.SUCCEEDED, attempt=2, trigger=Trigger.RETRY,
        started_at_ms=tick + 900,
    )  # fmt: skip
    feeder.producer.flush(10)
    assert view_of(http).wait_until_caught_up(30)
    answer = http.get("/api/dashboard/live", params={"seconds": 60})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    window = body["window"]
    assert window["outcomes"] == {"succeeded": 4, "failed": 0, "dead_letter": 1, "other": 1}
    assert window["lateness_count"] == 4 and window["lateness_max_ms"] == 120
    assert window["lateness_p50_ms"] == 4 or window["lateness_p50_ms"] == 9
    second = tick // 1000 - body["from_s"]
    assert body["outcomes"]["succeeded"][second] == 4
    assert body["lateness_ms"]["max"][second] == 120
    assert len(body["outcomes"]["other"]) == 60


def test_partitions_show_a_groups_owner_committed_offset_and_lag(
    http: Http, ingest_settings: IngestSettings
) -> None:
    kafka = ingest_settings.kafka
    topic = TopicNames(kafka.namespace).name(due_topic_base(Priority.NORMAL))
    producer = Producer(kafka.client_config())
    for n in range(5):
        producer.produce(topic, f"v{n}".encode(), b"k", partition=0)
    producer.flush(10)
    member = f"probe-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        kafka.client_config(**{"group.id": f"{kafka.namespace}executor", "client.id": member,
                               "group.protocol": "consumer", "enable.auto.commit": False,
                               "auto.offset.reset": "earliest"})
    )  # fmt: skip
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        answer = http.get("/api/dashboard/partitions", params={"group": "executor"})
        assert answer.status_code == 200, answer.text
        (group,) = answer.json()["groups"]
        assert group["name"] == "executor" and group["state"] == "STABLE", group
        assert [m["client_id"] for m in group["members"]] == [member]
        rows = {(r["topic"], r["partition"]): r for r in group["partitions"]}
        assert rows[(topic, 0)] == {
            "topic": topic, "partition": 0, "owner": member, "committed": 2, "end": 5, "lag": 3,
        }  # fmt: skip
        assert all(r["owner"] == member for r in rows.values())
        everything = http.get("/api/dashboard/partitions").json()["groups"]
        assert [g["name"] for g in everything] == ["timer", "executor", "dag"]
        assert everything[0]["members"] == [] and everything[0]["partitions"] == []
    finally:
        consumer.close()


def test_next_fires_of_a_cron_job_and_a_404_for_an_unknown_one(http: Http) -> None:
    answer = create(http, {"handler": "reports.nightly", "cron": {"expression": "*/15 * * * * *"}})
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["job_id"]
    before = now_ms()
    fires = http.get(f"/api/dashboard/jobs/{job_id}/next-fires", params={"count": 3}).json()
    after = now_ms()
    ticks = [f["at_ms"] for f in fires["next_fires"]]
    assert len(ticks) == 3 and before < ticks[0] <= after + 15_000
    assert all(t % 15_000 == 0 for t in ticks)
    assert [b - a for a, b in itertools.pairwise(ticks)] == [15_000, 15_000]
    missing = http.get("/api/dashboard/jobs/no-such-job/next-fires")
    assert missing.status_code == 404 and "no-such-job" in missing.json()["detail"]


def test_jobs_are_searched_by_id_prefix_page_by_page(http: Http) -> None:
    stem = f"s{uuid.uuid4().hex[:6]}"
    for suffix in ("-a1", "-a2", "-a3", "-b1", "x"):
        body = {"job_id": f"{stem}{suffix}", "handler": "reports.nightly", "tenant": stem,
                "cron": {"expression": "0 3 * * *"}}  # fmt: skip
        assert create(http, body).status_code == 201
    assert view_of(http).wait_until_caught_up(30)
    found, cursor = [], None
    while True:
        params = {"id_prefix": f"{stem}-a", "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = http.get("/api/jobs", params=params).json()
        found.append([item["job_id"] for item in page["items"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert found == [[f"{stem}-a1", f"{stem}-a2"], [f"{stem}-a3"]]
    both = http.get("/api/jobs", params={"id_prefix": stem, "tenant": stem}).json()["items"]
    assert len(both) == 5


@pytest.mark.parametrize(
    ("url", "params", "loc"),
    [
        ("/api/dashboard/live", {"seconds": 0}, ["query", "seconds"]),
        ("/api/dashboard/live", {"seconds": 301}, ["query", "seconds"]),
        ("/api/dashboard/live", {"seconds": "many"}, ["query", "seconds"]),
        ("/api/dashboard/partitions", {"group": "api"}, ["query", "group"]),
        ("/api/dashboard/jobs/a/next-fires", {"count": 0}, ["query", "count"]),
        ("/api/dashboard/jobs/a/next-fires", {"count": 101}, ["query", "count"]),
        ("/api/dashboard/jobs/-bad/next-fires", {}, ["path", "job_id"]),
        ("/api/jobs", {"id_prefix": "has space"}, ["query", "id_prefix"]),
        ("/api/jobs", {"id_prefix": ""}, ["query", "id_prefix"]),
    ],
)
def test_bad_dashboard_parameters_answer_422_naming_them(
    http: Http, url: str, params: dict[str, Any], loc: list[str]
) -> None:
    assert locs(http.get(url, params=params)) == [loc]


def test_no_page_the_api_serves_refers_to_another_site(http: Http) -> None:
    pages = ["/docs", "/redoc", "/docs/oauth2-redirect", "/ui/"]
    pages += [f"/ui/{path.name}" for path in sorted(UI_DIR.iterdir())]
    for page in pages:
        answer = http.get(page)
        assert answer.status_code == 200, page
        kind = answer.headers["content-type"]
        if page.startswith("/ui/"):
            assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert kind.split(";")[0] in {
                "text/html", "text/css", "text/javascript", "application/javascript",
                "image/svg+xml",
            }, (page, kind)  # fmt: skip
        text = answer.text
        assert not EXTERNAL.search(text), page
        if kind.startswith("text/html"):
            assert "http://" not in text and "https://" not in text, page
    root = http.get("/")
    assert root.status_code == 307 and root.headers["location"].endswith("/ui/")
    paths = {getattr(route, "path", None) for route in http.app.routes}
    assert {"/docs", "/redoc", "/ui"} <= paths
