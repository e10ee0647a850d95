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
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal

from services.ingest.async_creates import AsyncCreates
from services.ingest.client import KafkronClient
from services.ingest.commands import job_id_for_key
from services.ingest.exceptions import JobConflictError
from services.ingest.settings import IngestSettings
from streams.exceptions import KafkaDeliveryError
from tests.services.ingest.conftest import read_topic
from tests.services.ingest.test_ingest_api import Http, create, one_off
from tests.services.ingest.test_ingest_batch import start_http

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

    return http._portal.call(burst)


def test_repeats_answer_the_first_answer_before_and_after_the_view_read_it(
    ingest_settings: IngestSettings,
) -> None:
    body = one_off(payload={"order": 42})
    with start_blocking_portal() as portal:
        http = start_http(ingest_settings, portal)
        try:
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
        finally:
            http.stop()
    assert records_of(ingest_settings, job_id) == 1


def test_concurrent_repeats_write_once_and_other_bodies_conflict(
    ingest_settings: IngestSettings,
) -> None:
    """Twenty creates of one key at once, half with another body: one record, one 201,
    every same-body repeat the first answer, every other body 409."""
    body_a, body_b = one_off(payload={"v": "a"}), one_off(payload={"v": "b"})
    requests = [(body_a if i % 2 == 0 else body_b, "race") for i in range(20)]
    with start_blocking_portal() as portal:
        http = start_http(ingest_settings, portal)
        try:
            answers = post_all(http, requests)
        finally:
            http.stop()
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

    with start_blocking_portal() as portal:
        http = start_http(ingest_settings, portal)
        try:
            in_flight, message = portal.call(scenario, http.app.state.creates)
        finally:
            http.stop()
    assert in_flight, "the conflict waited for the first create to be durable"
    assert "in-flight" in message
    assert records_of(ingest_settings, job_id_for_key("default", "in-flight")) == 1


def test_a_restarted_or_other_api_answers_the_first_answer(
    ingest_settings: IngestSettings, tmp_path: Path
) -> None:
    """Claims live in memory only; the record on Kafka is what dedupes across restarts
    and instances: a restart (same view directory) and a new instance (empty view)."""
    body = one_off(payload={"restart": True})
    with start_blocking_portal() as portal:
        http = start_http(ingest_settings, portal)
        try:
            first = create(http, body, key="survives")
        finally:
            http.stop()
        for settings in (
            ingest_settings,
            ingest_settings.model_copy(update={"view_dir": tmp_path / "new-view"}),
        ):
            http = start_http(settings, portal)
            try:
                again = create(http, body, key="survives")
                other = create(http, one_off(payload={"restart": False}), key="survives")
            finally:
                http.stop()
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
    with start_blocking_portal() as portal:
        http = start_http(ingest_settings, portal)
        try:
            warm = [create(http, one_off(payload={"i": i}), key=f"warm-{i}") for i in range(20)]
            assert all(w.status_code == 201 for w in warm)
            other = ingest_settings.model_copy(update={"view_dir": tmp_path / "client-view"})
            with KafkronClient(other) as client:
                written = client.submit(body, idempotency_key="elsewhere")
            repeat = create(http, body, key="elsewhere")
            conflict = create(http, {**body, "payload": {"elsewhere": 2}}, key="elsewhere")
        finally:
            http.stop()
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

    with start_blocking_portal() as portal:
        http = start_http(ingest_settings, portal)
        try:
            error, released = portal.call(scenario, http.app.state.creates)
        finally:
            http.stop()
    assert released
    assert isinstance(error, KafkaDeliveryError) and error.retryable, error
