"""POST /api/jobs/batch and the async create path, against the real broker.

Every test reads its effects back (GET through the status view, or the ``jobs`` topic), so
an answer of 201 is proven durable, not just promised.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.ingest.batch import JobBatch
from services.ingest.settings import IngestSettings
from streams.codec import Codec, RecordKind
from streams.dead_letters import value_of
from tests.services.ingest.conftest import read_topic
from tests.services.ingest.test_ingest_api import Http, create, now_ms, one_off, serving

pytestmark = pytest.mark.kafka

HOUR_MS = 3_600_000


@pytest.fixture
def batch_settings(ingest_settings: IngestSettings) -> IngestSettings:
    return ingest_settings.model_copy(update={"max_payload_bytes": 2048, "max_batch_items": 10})


@pytest.fixture
def http(batch_settings: IngestSettings) -> Iterator[Http]:
    with serving(batch_settings) as client:
        yield client


def batch(http: Http, *items: object) -> list[dict[str, Any]]:  # JSON values
    response = http.post("/api/jobs/batch", json={"items": list(items)})
    assert response.status_code == 200, response.text
    answers: list[dict[str, Any]] = response.json()["items"]
    assert [a["index"] for a in answers] == list(range(len(items)))
    assert response.json()["failed"] == sum(1 for a in answers if a["status_code"] >= 400)
    return answers


def item(job: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    return {"job": job} if key is None else {"job": job, "idempotency_key": key}


def stored(http: Http, job_id: str) -> dict[str, Any]:
    response = http.get(f"/api/jobs/{job_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_batch_creates_every_item_durably(http: Http) -> None:
    run_at = now_ms() + HOUR_MS
    answers = batch(
        http,
        item({"handler": "reports.nightly", "run_at": run_at, "payload": {"n": 1}}),
        item({"handler": "reports.hourly", "cron": {"expression": "0 * * * *"}}),
        item({"handler": "reports.keyed", "run_at": run_at + 1}, key="batch-key-1"),
        item({"handler": "reports.named", "run_at": run_at + 2, "job_id": "named-job-1"}),
    )
    assert [a["status_code"] for a in answers] == [201, 201, 201, 201]
    assert answers[0]["next_run_at"].endswith("Z")
    assert answers[3]["job_id"] == "named-job-1"
    assert len({a["job_id"] for a in answers}) == 4
    for answer, handler in zip(
        answers,
        ["reports.nightly", "reports.hourly", "reports.keyed", "reports.named"],
        strict=True,
    ):
        job = stored(http, answer["job_id"])
        assert job["handler"] == handler
        assert job["next_run_at"] == answer["next_run_at"]
    assert stored(http, answers[0]["job_id"])["payload"] == {"n": 1}


def test_bad_items_answer_422_naming_index_and_field_and_never_block_the_others(
    http: Http,
) -> None:
    good = one_off()
    answers = batch(
        http,
        item(good),
        item(one_off(run_at=1_000)),
        item(one_off(handler="Not A Handler")),
        {"job": one_off(), "priority_please": "high"},
        "not an object",
        {"idempotency_key": "no-job"},
        item(one_off(payload="x" * 3000)),
        item({"handler": "x.y", "cron": {"expression": "0 25 * * *"}}),
        item(one_off(payload={"second": "good"})),
    )
    codes = [a["status_code"] for a in answers]
    assert codes == [201, 422, 422, 422, 422, 422, 422, 422, 201]
    locs = {a["index"]: [e["loc"] for e in a["detail"]] for a in answers if "detail" in a}
    assert locs[1] == [["body", "items", 1, "job", "run_at"]]
    assert locs[2] == [["body", "items", 2, "job", "handler"]]
    assert locs[3] == [["body", "items", 3, "priority_please"]]
    assert locs[4] == [["body", "items", 4]]
    assert locs[5] == [["body", "items", 5, "job"]]
    assert locs[6] == [["body", "items", 6, "job", "payload"]]
    assert locs[7] == [["body", "items", 7, "job", "cron", "expression"]]
    assert stored(http, answers[0]["job_id"])["handler"] == good["handler"]
    assert stored(http, answers[8]["job_id"])["payload"] == {"second": "good"}


def test_idempotency_keys_per_item(http: Http) -> None:
    body = one_off(payload={"k": 1})
    other = one_off(payload={"k": 2})
    first = batch(http, item(body, "key-a"), item(other, "key-b"))
    assert [a["status_code"] for a in first] == [201, 201]
    # Same key and body: the first answer (200); same key, another body: 409 for that item
    # only; a new key in the same batch is created.
    again = batch(http, item(body, "key-a"), item(body, "key-b"), item(body, "key-c"))
    assert [a["status_code"] for a in again] == [200, 409, 201]
    assert {k: again[0][k] for k in ("job_id", "status", "next_run_at")} == {
        k: first[0][k] for k in ("job_id", "status", "next_run_at")
    }
    assert "key-b" in again[1]["detail"]
    assert stored(http, first[1]["job_id"])["payload"] == {"k": 2}  # not overwritten
    # Within one batch: a repeated key answers like a repeated request.
    inner = batch(http, item(body, "key-d"), item(body, "key-d"), item(other, "key-d"))
    assert [a["status_code"] for a in inner] == [201, 200, 409]
    assert inner[0]["job_id"] == inner[1]["job_id"]


def test_a_key_used_by_a_single_create_is_the_same_key_in_a_batch(http: Http) -> None:
    body = {"handler": "reports.nightly", "cron": {"expression": "*/5 * * * *"}}
    single = create(http, body, key="shared-key")
    assert single.status_code == 201
    (answer,) = batch(http, item(body, "shared-key"))
    assert answer["status_code"] == 200
    assert answer["job_id"] == single.json()["job_id"]
    assert answer["next_run_at"] == single.json()["next_run_at"]
    repeat = create(http, body, key="shared-key")
    assert repeat.status_code == 200 and repeat.json() == single.json()


def test_a_key_is_exactly_once_across_api_instances(
    http: Http, batch_settings: IngestSettings, tmp_path: Path
) -> None:
    """Another instance (its own view) catches up with the job's partition before it
    answers: it returns the first answer and writes nothing."""
    body = one_off(payload={"instance": "a"})
    first = batch(http, item(body, "cross-instance"))[0]
    other_settings = batch_settings.model_copy(update={"view_dir": tmp_path / "other-view"})
    with serving(other_settings) as other:
        repeat = batch(other, item(body, "cross-instance"))[0]
        single = create(other, body, key="cross-instance")
    assert repeat["status_code"] == 200 and repeat["job_id"] == first["job_id"]
    assert single.status_code == 200 and single.json()["job_id"] == first["job_id"]
    records = read_topic(batch_settings.kafka, f"{batch_settings.kafka.namespace}jobs")
    assert [m.key() for m in records].count(first["job_id"].encode()) == 1


def test_size_limits_answer_413_naming_items(
    http: Http, ingest_settings: IngestSettings, tmp_path: Path
) -> None:
    too_many = http.post("/api/jobs/batch", json={"items": [item(one_off())] * 11})
    assert too_many.status_code == 413
    (error,) = too_many.json()["detail"]
    assert error["loc"] == ["body", "items"]
    assert error["ctx"] == {"max_length": 10}
    ten = batch(http, *[item(one_off(payload={"i": i})) for i in range(10)])
    assert [a["status_code"] for a in ten] == [201] * 10
    small = ingest_settings.model_copy(
        update={"max_batch_body_bytes": 1024, "view_dir": tmp_path / "tight-view"}
    )
    with serving(small) as tight:
        items = [item(one_off(payload="p" * 200))] * 10
        big = tight.post("/api/jobs/batch", json={"items": items})
    assert big.status_code == 413, big.text


def test_malformed_envelopes_answer_422(http: Http) -> None:
    def locs(response: Any) -> list[Any]:
        assert response.status_code == 422, response.text
        return [e["loc"] for e in response.json()["detail"]]

    assert locs(http.post("/api/jobs/batch", json=[item(one_off())])) == [["body"]]
    assert locs(http.post("/api/jobs/batch", json={"items": {"a": 1}})) == [["body", "items"]]
    assert locs(http.post("/api/jobs/batch", json={"items": [], "x": 1})) == [["body", "x"]]
    bad_json = http.post(
        "/api/jobs/batch", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert locs(bad_json) == [["body"]]
    empty = http.post("/api/jobs/batch", json={"items": []})
    assert empty.status_code == 200 and empty.json() == {"items": [], "failed": 0}


def test_an_item_the_producer_refuses_fails_alone(ingest_settings: IngestSettings) -> None:
    """A record over the producer's message.max.bytes (1 MB) is refused for its item only;
    the other items of the batch are written."""
    settings = ingest_settings.model_copy(update={"max_payload_bytes": 4 * 1024 * 1024})
    huge = base64.b64encode(os.urandom(1_200_000)).decode()
    with serving(settings) as http:
        answers = batch(
            http,
            item(one_off(payload={"before": 1})),
            item(one_off(payload_b64=huge)),
            item(one_off(payload={"after": 1})),
        )
        assert [a["status_code"] for a in answers] == [201, 500, 201]
        assert "MSG_SIZE_TOO_LARGE" in answers[1]["detail"]
        assert stored(http, answers[0]["job_id"])["payload"] == {"before": 1}
        assert stored(http, answers[2]["job_id"])["payload"] == {"after": 1}


def test_many_concurrent_keyed_creates_share_catch_ups(http: Http) -> None:
    """Concurrent keyed creates (coalesced ListOffsets rounds) each answer once, durably."""

    async def burst() -> list[Any]:
        client = http._client
        bodies = [one_off(payload={"i": i}) for i in range(40)]
        requests = [
            client.post("/api/jobs", json=b, headers={"Idempotency-Key": f"burst-{i}"})
            for i, b in enumerate(bodies)
        ]
        first = await asyncio.gather(*requests)
        repeats = await asyncio.gather(
            *[
                client.post("/api/jobs", json=b, headers={"Idempotency-Key": f"burst-{i}"})
                for i, b in enumerate(bodies)
            ]
        )
        return [(a.status_code, a.json(), b.status_code, b.json()) for a, b in zip(
            first, repeats, strict=True)]  # fmt: skip

    results = http.call(burst)
    assert [r[0] for r in results] == [201] * 40
    assert [r[2] for r in results] == [200] * 40
    assert all(r[1] == r[3] for r in results)
    assert len({r[1]["job_id"] for r in results}) == 40


def test_openapi_documents_both_create_endpoints(http: Http) -> None:
    schema = http.get("/openapi.json").json()
    create_op = schema["paths"]["/api/jobs"]["post"]
    assert create_op["parameters"][0]["name"] == "Idempotency-Key"
    assert create_op["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobCreate"
    }
    batch_op = schema["paths"]["/api/jobs/batch"]["post"]
    assert set(batch_op["responses"]) == {"200", "413", "422"}
    components = schema["components"]["schemas"]
    for name in ("JobCreate", "JobBatch", "BatchItem", "BatchAnswer", "CreatedJob"):
        assert name in components, name
    # The documented request shape is the one the endpoint takes.
    example = {"items": [item(one_off(), "k-1"), item(one_off())]}
    JobBatch.model_validate(example)
    assert batch(http, *example["items"])[0]["status_code"] == 201


def test_records_of_the_bulk_path_equal_the_pydantic_path(
    http: Http, batch_settings: IngestSettings
) -> None:
    """A plain one-off takes the bulk encoder; its Job record has every field a pydantic
    create writes (request hash and key aside, which only keyed creates need)."""
    run_at = now_ms() + HOUR_MS
    plain = batch(http, item({"handler": "a.b", "run_at": run_at, "payload": {"x": [1]}}))[0]
    keyed = batch(http, item({"handler": "a.b", "run_at": run_at, "payload": {"x": [1]}}, "k"))[0]
    codec = Codec.from_directory()
    records = {
        m.key(): codec.decode(RecordKind.JOB, value_of(m.value()))
        for m in read_topic(batch_settings.kafka, f"{batch_settings.kafka.namespace}jobs")
    }
    fast, slow = records[plain["job_id"].encode()], records[keyed["job_id"].encode()]
    assert slow["idempotency_key"] == "k" and slow["request_hash"]
    assert fast["idempotency_key"] is None and fast["request_hash"] is None
    ignored = {"job_id", "version", "created_at_ms", "updated_at_ms", "idempotency_key",
               "request_hash"}  # fmt: skip
    assert {k: v for k, v in fast.items() if k not in ignored} == {
        k: v for k, v in slow.items() if k not in ignored
    }
