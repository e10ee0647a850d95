"""DAG jobs nothing could run are refused at creation, on every create path (real broker)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from services.ingest.client import KafkronClient
from services.ingest.dag_checks import DagNode, check_upstreams
from services.ingest.exceptions import JobRequestError
from services.ingest.settings import IngestSettings
from streams.codec import RecordKind
from streams.records import Job, JobStatus
from tests.services.ingest.test_ingest_api import HOUR_MS, Http, create, http, now_ms, view_of
from tests.services.ingest.test_ingest_view import CODEC, T0, Feeder, eventually

pytestmark = pytest.mark.kafka

__all__ = ["http"]  # the API fixture of test_ingest_api

NIGHTLY = {"expression": "0 2 * * *", "timezone": "UTC"}


def root(job_id: str, **schedule: Any) -> dict[str, Any]:
    return {"handler": "etl.step", "job_id": job_id, **(schedule or {"cron": NIGHTLY})}


def dependent(*upstreams: str, **fields: Any) -> dict[str, Any]:
    return {"handler": "etl.step", "depends_on": list(upstreams), **fields}


def created(http: Http, body: dict[str, Any]) -> str:
    answer = create(http, body)
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["job_id"]
    return job_id


def feed_job(feeder: Feeder, job_id: str, version: int = 1, **fields: Any) -> None:
    """A Job record produced onto ``jobs`` around the API (a one-off unless ``fields`` give
    ``cron`` or ``depends_on``)."""
    if "cron" not in fields and "depends_on" not in fields:
        fields["run_at_ms"] = T0
    record = Job(job_id=job_id, version=version, handler="etl.step", created_at_ms=T0,
                 updated_at_ms=T0, **fields)  # fmt: skip
    feeder.send(feeder.names.jobs, job_id, CODEC.encode(RecordKind.JOB, record.to_avro()))


def refusal(answer: Any) -> str:
    """The one 422 error's message, which must name ``depends_on``."""
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "depends_on"]
    message: str = error["msg"]
    return message


def test_unknown_and_cancelled_upstreams_are_refused_naming_them(
    http: Http, ingest_settings: IngestSettings
) -> None:
    created(http, root("extract"))
    message = refusal(create(http, dependent("extract", "nope")))
    assert "'nope'" in message and "do not exist" in message and "'extract'" not in message
    # An upstream that is there but depends on a job that is not (written around the API).
    feeder = Feeder(ingest_settings)
    feed_job(feeder, "orphan", depends_on=["ghost"])
    feeder.flush()
    eventually(lambda: view_of(http).job("orphan") is not None)
    assert "'ghost' (upstream of 'orphan')" in refusal(create(http, dependent("orphan")))
    assert http.delete("/api/jobs/extract").status_code == 200
    # The checks see a cancel once the status view has read it (a create right after the
    # cancel may still find the job scheduled: README, "DAG jobs ... refused at creation").
    eventually(lambda: (view_of(http).job("extract") or {}).get("status") == "CANCELLED")
    message = refusal(create(http, dependent("extract")))
    assert "cancelled" in message and "'extract'" in message


def test_a_brand_new_upstream_counts_at_once(http: Http) -> None:
    for i in range(5):  # the view has not read the root yet: the API's own write answers
        upstream = created(http, root(f"fresh-{i}"))
        created(http, dependent(upstream))


@pytest.mark.parametrize(
    ("first", "second", "named"),
    [
        ({"cron": NIGHTLY}, {"cron": {"expression": "0 3 * * *"}}, "'0 3 * * *'"),
        ({"cron": NIGHTLY}, {"cron": {**NIGHTLY, "timezone": "Europe/Berlin"}}, "Europe/Berlin"),
        ({"run_at": 4_102_444_800_000}, {"run_at": 4_102_448_400_000}, "run_at 4102448400000"),
        ({"run_at": 4_102_444_800_000}, {"cron": NIGHTLY}, "run_at 4102444800000"),
    ],
    ids=["cron", "timezone", "run_at", "run_at-and-cron"],
)
def test_roots_on_different_schedules_are_refused_naming_them(
    http: Http, first: dict[str, Any], second: dict[str, Any], named: str
) -> None:
    created(http, root("a", **first))
    created(http, root("b", **second))
    message = refusal(create(http, dependent("a", "b")))
    assert "'a'" in message and "'b'" in message and named in message
    assert "do not share one schedule" in message


def test_roots_are_found_through_dependents_and_the_same_schedule_is_accepted(
    http: Http,
) -> None:
    created(http, root("extract"))
    created(http, root("load-refs", cron={**NIGHTLY}))  # the same ticks, spelt alike
    join = created(http, dependent("extract", "load-refs", job_id="join"))
    created(http, root("late", cron={"expression": "0 4 * * *"}))
    message = refusal(create(http, dependent(join, "late")))
    assert "'extract' (upstream of 'join')" in message
    assert "'load-refs' (upstream of 'join')" in message and "'late'" in message
    run_at = now_ms() + HOUR_MS
    created(http, root("once-1", run_at=run_at))
    created(http, root("once-2", run_at=run_at))
    created(http, dependent("once-1", "once-2"))


def test_a_keyed_create_is_checked_too(http: Http) -> None:
    created(http, root("keyed-root"))
    answer = create(http, dependent("keyed-root", "missing"), key="dag-key-1")
    assert "'missing'" in refusal(answer)
    assert create(http, dependent("keyed-root"), key="dag-key-2").status_code == 201


def test_batch_items_may_name_earlier_items_only(http: Http) -> None:
    created(http, root("other", cron={"expression": "0 5 * * *"}))
    items = [
        {"job": root("batch-root")},
        {"job": dependent("batch-root")},  # a fresh id: the bulk encoder's path
        {"job": dependent("batch-later")},  # named before it is created
        {"job": root("batch-later")},
        {"job": dependent("batch-root", "other")},  # roots on two schedules
        {"job": dependent("batch-root"), "idempotency_key": "dag-batch-1"},
    ]
    answer = http.post("/api/jobs/batch", json={"items": items})
    assert answer.status_code == 200, answer.text
    codes = [item["status_code"] for item in answer.json()["items"]]
    assert codes == [201, 201, 422, 201, 422, 201]
    for index in (2, 4):
        (error,) = answer.json()["items"][index]["detail"]
        assert error["loc"] == ["body", "items", index, "job", "depends_on"]
    assert "'batch-later'" in answer.json()["items"][2]["detail"][0]["msg"]
    assert "'other'" in answer.json()["items"][4]["detail"][0]["msg"]


@pytest.fixture
def client(ingest_settings: IngestSettings) -> Iterator[KafkronClient]:
    with KafkronClient(ingest_settings) as client:
        yield client


def test_the_client_library_refuses_the_same_jobs(client: KafkronClient) -> None:
    client.submit(root("c-root"))
    with pytest.raises(JobRequestError) as refused:
        client.submit(dependent("c-root", "c-missing"))
    assert refused.value.errors[0]["loc"] == ["depends_on"]
    assert "'c-missing'" in refused.value.errors[0]["msg"]
    # submit_many: an upstream before its dependents counts; after them it does not.
    ids = client.submit_many([root("c-a"), dependent("c-a", job_id="c-b")])
    assert ids == ["c-a", "c-b"]
    with pytest.raises(JobRequestError) as refused:
        client.submit_many([dependent("c-later"), root("c-later")])
    assert [e["loc"] for e in refused.value.errors] == [[0, "depends_on"]]


def test_a_replacement_that_closes_a_cycle_is_refused(client: KafkronClient) -> None:
    """``submit_many`` replaces a job with an existing id: the one update that can change
    ``depends_on``, so the one way to make a cycle."""
    client.submit_many([root("loop-a"), dependent("loop-a", job_id="loop-b")])
    with pytest.raises(JobRequestError) as refused:
        client.submit_many([root("loop-a", depends_on=["loop-b"])])
    (error,) = refused.value.errors
    assert error["loc"] == [0, "depends_on"]
    assert "cycle: loop-a -> loop-b -> loop-a" in error["msg"]


# The walk itself, on in-memory jobs -------------------------------------------------------


def nodes(**jobs: tuple[str, ...] | str) -> dict[str, DagNode]:
    """Jobs by id: a tuple of upstreams, or a schedule text for a root."""
    scheduled = JobStatus.SCHEDULED.value
    return {
        name: DagNode(name, scheduled, spec, None)
        if isinstance(spec, tuple)
        else DagNode(name, scheduled, (), spec)
        for name, spec in jobs.items()
    }


def test_a_cycle_among_existing_upstreams_is_named() -> None:
    graph = nodes(r="cron x", a=("r", "b"), b=("c",), c=("a",))
    errors, unknown = check_upstreams(None, ["a"], graph.get)
    assert unknown == []
    assert [e["msg"] for e in errors] == [
        "depends_on makes a cycle: a -> b -> c -> a; a job can never run after itself"
    ]


def test_a_diamond_is_one_root_and_no_cycle() -> None:
    graph = nodes(r="cron x", a=("r",), b=("r",), c=("a", "b"))
    assert check_upstreams("d", ["c", "a"], graph.get) == ([], [])
