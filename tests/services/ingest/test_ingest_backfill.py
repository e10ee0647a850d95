"""POST /api/jobs/{id}/backfill on the real broker: dry runs, the written record, and that
every other update clears it (the timer acts on a backfill once)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Message

from services.ingest.backfill import parse_backfill
from services.ingest.exceptions import JobRequestError
from services.ingest.settings import IngestSettings
from streams.codec import Codec, RecordKind
from streams.dead_letters import value_of
from streams.topics import TopicNames
from tests.services.ingest.conftest import read_topic
from tests.services.ingest.test_ingest_api import Http, create, iso, locs, serving

pytestmark = pytest.mark.kafka

CODEC = Codec.from_directory()
T = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR_MS = 3_600_000
HOURLY = {"handler": "reports.hourly", "cron": {"expression": "0 * * * *"}}


@pytest.fixture
def http(ingest_settings: IngestSettings) -> Iterator[Http]:
    with serving(ingest_settings.model_copy(update={"max_backfill_ticks": 24})) as client:
        yield client


def records_of(settings: IngestSettings, job_id: str) -> list[dict[str, Any]]:
    """Every Job record of ``job_id`` on ``jobs``, oldest first."""
    topic = TopicNames(settings.kafka.namespace).jobs
    found = [m for m in read_topic(settings.kafka, topic) if m.key() == job_id.encode()]
    found.sort(key=offset_of)
    return [CODEC.decode(RecordKind.JOB, value_of(m.value())) for m in found]


def offset_of(message: Message) -> int:
    offset = message.offset()
    assert offset is not None  # a consumed record has its offset
    return offset


def backfill(http: Http, job_id: str, **body: Any) -> Any:
    return http.post(f"/api/jobs/{job_id}/backfill", json=body)


def test_a_dry_run_lists_the_ticks_and_writes_nothing(
    http: Http, ingest_settings: IngestSettings
) -> None:
    job_id = create(http, HOURLY).json()["job_id"]
    answer = backfill(http, job_id, **{"from": T, "to": T + 5 * HOUR_MS, "dry_run": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    ticks = [T + h * HOUR_MS for h in range(6)]  # both ends included
    assert body["ticks"] == 6 and body["dry_run"] is True and body["written"] is False
    assert body["tick_times"] == [{"at": iso(t), "at_ms": t} for t in ticks]
    assert (body["from"], body["to"], body["rate"]) == (iso(T), iso(T + 5 * HOUR_MS), 50)
    # ISO-8601 with an offset, the window not on a tick: 01:00 and 02:00 only.
    start = datetime(2026, 1, 1, 1, 30, tzinfo=UTC).isoformat()
    shifted = backfill(
        http, job_id, **{"from": "2026-01-01T02:00:00+01:00", "to": start, "dry_run": True}
    ).json()
    assert [t["at_ms"] for t in shifted["tick_times"]] == [T + HOUR_MS]
    assert [r["backfill"] for r in records_of(ingest_settings, job_id)] == [None]


def test_the_written_record_carries_the_backfill_and_every_other_update_clears_it(
    http: Http, ingest_settings: IngestSettings
) -> None:
    job_id = create(http, HOURLY).json()["job_id"]
    client = http.app.state.client

    def asked() -> None:
        answer = backfill(http, job_id, **{"from": iso(T), "to": iso(T + 2 * HOUR_MS), "rate": 7})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["ticks"], body["written"], body["dry_run"]) == (3, True, False)
        assert "tick_times" not in body

    asked()
    assert http.post(f"/api/jobs/{job_id}/pause").status_code == 200
    asked()  # a paused job may be backfilled: the timer runs an explicit backfill
    assert http.post(f"/api/jobs/{job_id}/resume").status_code == 200
    asked()
    assert http.post(f"/api/jobs/{job_id}/trigger").status_code == 200
    request = parse_backfill({"from": T, "to": T, "rate": 1})
    plan = client.backfill(job_id, request)  # the client library writes the same record
    assert (plan.tick_count, plan.written) == (1, True)
    client.submit_many([{**HOURLY, "job_id": job_id}])  # a replace
    asked()
    assert http.delete(f"/api/jobs/{job_id}").status_code == 200
    records = records_of(ingest_settings, job_id)
    window = {"from_ms": T, "to_ms": T + 2 * HOUR_MS, "per_s": 7}
    kinds: list[dict[str, Any] | None] = []
    for record in records:
        fill = record["backfill"]
        if fill is None:
            kinds.append(None)
            continue
        assert fill["requested_at_ms"] == record["updated_at_ms"]
        kinds.append({k: fill[k] for k in ("from_ms", "to_ms", "per_s")})
    assert kinds == [
        None,  # create
        window,
        None,  # pause
        window,
        None,  # resume
        window,
        None,  # trigger
        {"from_ms": T, "to_ms": T, "per_s": 1},
        None,  # replace
        window,
        None,  # cancel
    ]
    assert [r["status"] for r in records][-1] == "CANCELLED"
    assert backfill(http, job_id, **{"from": T, "to": T}).status_code == 409


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"from": T + 1, "to": T}, ["body", "to"]),
        ({"from": T, "to": T + 24 * HOUR_MS}, ["body", "to"]),  # 25 ticks, 24 allowed
        ({"from": T, "to": T, "rate": 0}, ["body", "rate"]),
        ({"from": T, "to": T, "rate": 10_001}, ["body", "rate"]),
        ({"from": T}, ["body", "to"]),
        ({"from": "yesterday", "to": T}, ["body", "from"]),
        ({"from": T, "to": T, "dry_run": "maybe"}, ["body", "dry_run"]),
        ({"from": T, "to": T, "extra": 1}, ["body", "extra"]),
    ],
)
def test_bad_backfills_answer_422_naming_the_field(
    http: Http, body: dict[str, Any], loc: list[str]
) -> None:
    job_id = create(http, HOURLY).json()["job_id"]
    assert locs(backfill(http, job_id, **body)) == [loc]


def test_only_recurring_jobs_can_be_backfilled(http: Http) -> None:
    one_off = create(http, {"handler": "a.b", "run_at": "2100-01-01T00:00:00Z"}).json()["job_id"]
    refused = backfill(http, one_off, **{"from": T, "to": T})
    assert locs(refused) == [["path", "job_id"]]
    assert one_off in refused.json()["detail"][0]["msg"]
    wide = backfill(http, create(http, HOURLY).json()["job_id"], **{"from": T, "to": T + 10**9})
    assert "24 ticks" in wide.json()["detail"][0]["msg"]
    unknown = backfill(http, "never-created", **{"from": T, "to": T})
    assert unknown.status_code == 404 and "never-created" in unknown.json()["detail"]
    not_json = http.post(
        f"/api/jobs/{one_off}/backfill", content=b"{", headers={"content-type": "application/json"}
    )
    assert locs(not_json) == [["body"]]


def test_parse_backfill_names_fields_for_the_client_library() -> None:
    with pytest.raises(JobRequestError) as raised:
        parse_backfill({"from": T, "to": T, "rate": 0})
    assert [e["loc"] for e in raised.value.errors] == [["rate"]]
    assert parse_backfill({"from": "2026-01-01T00:00:00Z", "to": T}).from_ms == T
