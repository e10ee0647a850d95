"""Single creates with an Idempotency-Key, against the real broker.

The keyed fast path answers repeats from this process's claims while the first create is
in flight or not yet read by the status view, and skips waiting for the view when the
records it has not read are all its own. These tests prove the contract still holds: a
repeat answers the first answer, another body is a conflict (also while the first is in
flight), concurrent repeats write one record, and a restarted or other API instance
answers from the record on Kafka.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from services.ingest.async_creates import AsyncCreates
from services.ingest.client import KafkronClient
from services.ingest.commands import job_id_for_key
from services.ingest.creates import encode_create, plan_create
from services.ingest.exceptions import JobConflictError, JobRequestError
from services.ingest.producer import partition_for_key
from services.ingest.settings import IngestSettings
from streams.codec import Codec
from streams.exceptions import KafkaDeliveryError
from tests.services.ingest.conftest import read_topic
from tests.services.ingest.test_ingest_api import Http, create, one_off, serving

pytestmark = pytest.mark.kafka


def records_of(settings: IngestSettings, job_id: str) -> int:
    records = read_topic(settings.kafka, f"{settings.kafka.namespace}jobs")
    return [m.key() for m in records].count(job_id.encode())


def post_all(http: Http, requests: list[tuple[dict[str, Any], str]]) -> list[Any]:
    """All requests at once on the app's loop: (status, body) in request order."""

    async def burst() -> list[Any]:
        answers = await asyncio.gather(
            *[
                http._client.post("/api/jobs", json=body, headers={"Idempotency-Key": key})
                for body, key in requests
            ]
        )
        return [(a.status_code, a.json()) for a in answers]

    return http.call(burst)


def test_repeats_answer_the_first_answer_before_and_after_the_view_read_it(
    ingest_settings: IngestSettings,
) -> None:
    body = one_off(payload={"order": 42})
    with serving(ingest_settings) as http:
        first = create(http, body, key="order-42")
        early = create(http, body, key="order-42")  # often still a claim in memory
        assert first.status_code == 201 and early.status_code == 200
        assert early.json() == first.json()
        job_id = first.json()["job_id"]
        assert job_id == job_id_for_key("default", "order-42")
        assert http.get(f"/api/jobs/{job_id}").status_code == 200  # the view read it
        late = create(http, body, key="order-42")
        assert late.status_code == 200 and late.json() == first.json()
        other = create(http, {**body, "payload": {"order": 43}}, key="order-42")
        assert other.status_code == 409 and "order-42" in other.json()["detail"]
    assert records_of(ingest_settings, job_id) == 1


def test_concurrent_repeats_write_once_and_other_bodies_conflict(
    ingest_settings: IngestSettings,
) -> None:
    """Twenty creates of one key at once, half with another body: one record, one 201,
    every same-body repeat the first answer, every other body 409."""
    body_a, body_b = one_off(payload={"v": "a"}), one_off(payload={"v": "b"})
    requests = [(body_a if i % 2 == 0 else body_b, "race") for i in range(20)]
    with serving(ingest_settings) as http:
        answers = post_all(http, requests)
    created = [i for i, (status, _) in enumerate(answers) if status == 201]
    assert len(created) == 1, answers
    winner = requests[created[0]][0]
    first = answers[created[0]][1]
    for (body, _), (status, answer) in zip(requests, answers, strict=True):
        if body is winner:
            assert status in (200, 201) and answer == first
        else:
            assert status == 409 and "race" in answer["detail"]
    assert records_of(ingest_settings, first["job_id"]) == 1


def test_another_body_is_a_conflict_while_the_first_is_in_flight(
    ingest_settings: IngestSettings,
) -> None:
    """The conflict answers before the first create is durable (it does not wait for it)."""
    body = one_off(payload={"v": 1})

    async def scenario(creates: AsyncCreates) -> tuple[bool, str]:
        first = asyncio.create_task(creates.create(body, "in-flight"))
        job_id = job_id_for_key("default", "in-flight")
        while True:  # until the first create has claimed its id and is being written
            claim = creates._own.get(job_id)
            if claim is not None and claim.answer is not None:
                break
            await asyncio.sleep(0)
        assert not claim.settled.done()
        with pytest.raises(JobConflictError) as conflict:
            await creates.create({**body, "payload": {"v": 2}}, "in-flight")
        in_flight = not first.done()
        repeat = await creates.create(body, "in-flight")
        receipt = await first
        assert repeat.created is False and receipt.created is True
        assert (repeat.job_id, repeat.next_run_at_ms) == (receipt.job_id, receipt.next_run_at_ms)
        return in_flight, str(conflict.value)

    with serving(ingest_settings) as http:
        in_flight, message = http.call(scenario, http.app.state.creates)
    assert in_flight, "the conflict waited for the first create to be durable"
    assert "in-flight" in message
    assert records_of(ingest_settings, job_id_for_key("default", "in-flight")) == 1


def test_a_restarted_or_other_api_answers_the_first_answer(
    ingest_settings: IngestSettings, tmp_path: Path
) -> None:
    """Claims live in memory only; the record on Kafka is what dedupes across restarts
    and instances: a restart (same view directory) and a new instance (empty view)."""
    body = one_off(payload={"restart": True})
    with serving(ingest_settings) as http:
        first = create(http, body, key="survives")
    for settings in (
        ingest_settings,
        ingest_settings.model_copy(update={"view_dir": tmp_path / "new-view"}),
    ):
        with serving(settings) as http:
            again = create(http, body, key="survives")
            other = create(http, one_off(payload={"restart": False}), key="survives")
        assert again.status_code == 200 and again.json() == first.json()
        assert other.status_code == 409
    assert first.status_code == 201
    assert records_of(ingest_settings, first.json()["job_id"]) == 1


def test_a_key_written_by_another_process_is_seen_at_once(
    ingest_settings: IngestSettings, tmp_path: Path
) -> None:
    """Between the API's own records on the partition lies one it did not write (another
    process's): the API waits for its view instead of trusting its own offsets."""
    body = one_off(payload={"elsewhere": 1})
    with serving(ingest_settings) as http:
        warm = [create(http, one_off(payload={"i": i}), key=f"warm-{i}") for i in range(20)]
        assert all(w.status_code == 201 for w in warm)
        other = ingest_settings.model_copy(update={"view_dir": tmp_path / "client-view"})
        with KafkronClient(other) as client:
            written = client.submit(body, idempotency_key="elsewhere")
        repeat = create(http, body, key="elsewhere")
        conflict = create(http, {**body, "payload": {"elsewhere": 2}}, key="elsewhere")
    assert repeat.status_code == 200 and repeat.json()["job_id"] == written.job_id
    assert conflict.status_code == 409
    assert records_of(ingest_settings, written.job_id) == 1


def test_a_create_stopped_while_writing_releases_its_claim(
    ingest_settings: IngestSettings,
) -> None:
    """A first create cancelled mid-write (its record may still land) never leaves a
    repeat waiting: the repeat gets a retryable 'may be written', and the key is free."""
    body = one_off(payload={"v": "cancelled"})
    job_id = job_id_for_key("default", "cancelled")

    async def scenario(creates: AsyncCreates) -> tuple[BaseException | None, bool]:
        first = asyncio.create_task(creates.create(body, "cancelled"))
        while True:
            claim = creates._own.get(job_id)
            if claim is not None and claim.answer is not None:
                break
            await asyncio.sleep(0)
        repeat = asyncio.create_task(creates.create(body, "cancelled"))
        await asyncio.sleep(0)
        first.cancel()
        try:
            await repeat
            error: BaseException | None = None
        except Exception as exc:
            error = exc
        released = creates._own.get(job_id) is None
        again = await creates.create(body, "cancelled")  # answers, never a conflict
        assert again.job_id == job_id
        return error, released

    with serving(ingest_settings) as http:
        error, released = http.call(scenario, http.app.state.creates)
    assert released
    assert isinstance(error, KafkaDeliveryError) and error.retryable, error


def test_creates_of_one_loop_turn_answer_like_separate_requests(
    ingest_settings: IngestSettings,
) -> None:
    """Single creates started together share one create_many (create_batches); each still
    answers as it would alone: one record per key, the repeat the first answer, another
    body 409, a bad request 422, an unkeyed create its own job."""
    body_a, body_b = one_off(payload={"v": "a"}), one_off(payload={"v": "b"})
    requests: list[tuple[dict[str, Any], str | None]] = [
        (body_a, "turn-1"),
        (body_a, "turn-1"),
        (body_b, "turn-1"),
        (body_a, "turn-2"),
        (body_a, None),
        ({"run_at": "not a time"}, "turn-bad"),
    ]

    async def scenario(creates: AsyncCreates) -> list[Any]:
        return await asyncio.gather(
            *(creates.create(body, key) for body, key in requests), return_exceptions=True
        )

    with serving(ingest_settings) as http:
        answers = http.call(scenario, http.app.state.creates)
        again = create(http, body_a, key="turn-1")  # later, through HTTP
    first, repeat, conflict, other_key, unkeyed, bad = answers
    assert first.created and first.job_id == job_id_for_key("default", "turn-1")
    assert not repeat.created
    assert (repeat.job_id, repeat.next_run_at_ms) == (first.job_id, first.next_run_at_ms)
    assert isinstance(conflict, JobConflictError) and "turn-1" in str(conflict)
    assert other_key.created and other_key.job_id == job_id_for_key("default", "turn-2")
    assert unkeyed.created and unkeyed.job_id not in (first.job_id, other_key.job_id)
    assert isinstance(bad, JobRequestError)
    assert again.status_code == 200 and again.json()["job_id"] == first.job_id
    for job_id in (first.job_id, other_key.job_id, unkeyed.job_id):
        assert records_of(ingest_settings, job_id) == 1


def write_above_an_open_transaction(
    settings: IngestSettings, body: dict[str, Any], key: str
) -> tuple[str, Producer]:
    """Open a transaction on the key's ``jobs`` partition (as the timer does), then write
    the keyed create's record above it with a plain producer (another process, e.g. a Java
    producer of job commands: it does not wait for the transaction). Returns the job id and
    the transactional producer, whose transaction is still open."""
    job_id = job_id_for_key("default", key)
    jobs = f"{settings.kafka.namespace}jobs"
    partition = partition_for_key(job_id.encode(), settings.kafka.partitions)
    txn = Producer(settings.kafka.client_config(**{"transactional.id": f"t-{job_id}"}))
    txn.init_transactions()
    txn.begin_transaction()
    txn.produce(jobs, None, b"some-other-job", partition=partition)  # a tombstone
    assert txn.flush(10) == 0
    value, receipt = encode_create(
        plan_create(body, key), settings, Codec.from_directory(), time.time_ns() // 1000
    )
    assert receipt.job_id == job_id
    plain = Producer(settings.kafka.client_config(acks="all"))
    plain.produce(jobs, value, job_id.encode(), partition=partition)
    assert plain.flush(10) == 0
    return job_id, txn


def test_a_key_written_above_an_open_transaction_is_still_seen(
    ingest_settings: IngestSettings,
) -> None:
    """The timer writes to ``jobs`` in transactions. A create written while one is open on
    its partition lies above the last stable offset; a repeat with another body must still
    see it: it waits for the transaction to end, then answers 409."""
    body = one_off(payload={"txn": 1})
    job_id, txn = write_above_an_open_transaction(ingest_settings, body, "above-txn")
    with serving(ingest_settings) as http:
        commit = threading.Timer(1.5, txn.commit_transaction)
        commit.start()
        started = time.monotonic()
        conflict = create(http, {**body, "payload": {"txn": 2}}, key="above-txn")
        waited_s = time.monotonic() - started
        commit.join()
        repeat = create(http, body, key="above-txn")
    assert conflict.status_code == 409, conflict.text
    assert waited_s > 0.5  # it waited for the transaction, not for its own round trip
    assert repeat.status_code == 200 and repeat.json()["job_id"] == job_id
    assert records_of(ingest_settings, job_id) == 1


def test_the_client_library_also_sees_a_key_written_above_an_open_transaction(
    ingest_settings: IngestSettings, tmp_path: Path
) -> None:
    """The same for ``KafkronClient.submit`` (its own view, the blocking catch-up)."""
    body = one_off(payload={"txn": "client"})
    job_id, txn = write_above_an_open_transaction(ingest_settings, body, "client-above-txn")
    commit = threading.Timer(1.5, txn.commit_transaction)
    commit.start()
    try:
        settings = ingest_settings.model_copy(update={"view_dir": tmp_path / "client"})
        with KafkronClient(settings) as client, pytest.raises(JobConflictError):
            client.submit({**body, "payload": {"txn": "other"}}, idempotency_key="client-above-txn")
    finally:
        commit.join()
    assert records_of(ingest_settings, job_id) == 1
