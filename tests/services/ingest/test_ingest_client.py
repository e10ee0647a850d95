"""The client library against the real broker: what lands on ``jobs``, where, and commands."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from services.ingest.client import KafkronClient
from services.ingest.commands import request_hash, submit_record
from services.ingest.exceptions import JobConflictError, JobNotFoundError, JobRequestError
from services.ingest.producer import CommandProducer, murmur2, partition_for_key
from services.ingest.settings import IngestSettings
from services.ingest.validation import parse_job_create
from streams.codec import Codec, RecordKind
from streams.exceptions import KafkaDeliveryError
from streams.settings import KafkaSettings
from streams.topics import TopicNames
from tests.services.ingest.conftest import read_topic

pytestmark = pytest.mark.kafka

CODEC = Codec.from_directory()
HOUR_MS = 3_600_000


@pytest.fixture
def now_us() -> int:
    return time.time_ns() // 1000


@pytest.fixture
def client(ingest_settings: IngestSettings, now_us: int) -> Iterator[KafkronClient]:
    with KafkronClient(ingest_settings, clock_us=lambda: now_us) as client:
        yield client


def one_off(now_us: int, **fields: Any) -> dict[str, Any]:
    return {"handler": "reports.nightly", "run_at": now_us // 1000 + HOUR_MS, **fields}


def jobs_records(settings: IngestSettings) -> list[tuple[bytes, int, dict[str, Any]]]:
    topic = TopicNames(settings.kafka.namespace).jobs
    return [
        (m.key() or b"", m.partition() or 0, CODEC.decode(RecordKind.JOB, m.value() or b""))
        for m in read_topic(settings.kafka, topic)
    ]


def test_murmur2_matches_java_test_vectors() -> None:
    # From Kafka's UtilsTest.testMurmur2.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_submit_writes_the_exact_record_keyed_by_job_id_on_its_murmur2_partition(
    client: KafkronClient, ingest_settings: IngestSettings, now_us: int
) -> None:
    request = one_off(now_us, payload={"report": "sales"}, labels={"team": "data"})
    receipt = client.submit(request)
    assert receipt.status == "SCHEDULED"
    assert receipt.next_run_at_ms == request["run_at"]
    assert receipt.created
    create = parse_job_create(request)
    expected = submit_record(
        create,
        job_id=receipt.job_id,
        now_us=now_us,
        retry_defaults=ingest_settings.default_retry,
        hash_of_request=request_hash(create),
    )
    [(key, partition, record)] = jobs_records(ingest_settings)
    assert key == receipt.job_id.encode()
    assert partition == partition_for_key(key, 4)
    assert record == expected


def test_submit_many_writes_every_job_on_its_partition(
    client: KafkronClient, ingest_settings: IngestSettings, now_us: int
) -> None:
    requests = [one_off(now_us, job_id=f"bulk-{i}", payload={"i": i}) for i in range(400)]
    requests += [one_off(now_us, payload={"i": i, "s": "zoë"}) for i in range(400, 480)]
    requests += [
        one_off(now_us, run_at=None, cron={"expression": f"{i % 60} * * * *"}, priority="low")
        for i in range(480, 500)
    ]
    ids = client.submit_many(requests)
    assert ids[:400] == [f"bulk-{i}" for i in range(400)]
    assert len(set(ids)) == 500
    written = jobs_records(ingest_settings)
    assert sorted(r["job_id"] for _, _, r in written) == sorted(ids)
    index_of = {job_id: i for i, job_id in enumerate(ids)}
    partitions = set()
    for key, partition, record in written:
        i = index_of[record["job_id"]]
        expected = submit_record(
            parse_job_create(requests[i]),
            job_id=ids[i],
            now_us=now_us + i,  # one clock tick per job of the batch
            retry_defaults=ingest_settings.default_retry,
        )
        assert record == expected
        assert key == record["job_id"].encode()
        assert partition == partition_for_key(key, 4)
        partitions.add(partition)
    assert partitions == {0, 1, 2, 3}


def test_submit_many_writes_nothing_when_one_request_is_invalid(
    client: KafkronClient, ingest_settings: IngestSettings, now_us: int
) -> None:
    requests = [one_off(now_us) for _ in range(10)]
    requests[7] = one_off(now_us, timeout_s=-1)
    with pytest.raises(JobRequestError) as caught:
        client.submit_many(requests)
    assert [e["loc"] for e in caught.value.errors] == [[7, "timeout_s"]]
    assert jobs_records(ingest_settings) == []


def test_submit_many_refuses_batches_over_the_limit(
    ingest_settings: IngestSettings, now_us: int
) -> None:
    settings = ingest_settings.model_copy(update={"max_jobs_per_batch": 3})
    with KafkronClient(settings) as client, pytest.raises(JobRequestError, match="at most 3"):
        client.submit_many([one_off(now_us)] * 4)


def test_idempotent_submit_returns_the_first_answer_and_refuses_another_body(
    client: KafkronClient, ingest_settings: IngestSettings, now_us: int
) -> None:
    request = one_off(now_us)
    first = client.submit(request, idempotency_key="order-42")
    again = client.submit(request, idempotency_key="order-42")
    assert again.job_id == first.job_id
    assert (again.status, again.next_run_at_ms) == (first.status, first.next_run_at_ms)
    assert not again.created
    with pytest.raises(JobConflictError, match="order-42"):
        client.submit(one_off(now_us, handler="reports.other"), idempotency_key="order-42")
    assert len(jobs_records(ingest_settings)) == 1


def test_explicit_job_id_that_exists_is_a_conflict_unless_the_same_request(
    client: KafkronClient, now_us: int
) -> None:
    request = one_off(now_us, job_id="nightly")
    assert client.submit(request).created
    assert not client.submit(request).created
    with pytest.raises(JobConflictError, match="already exists"):
        client.submit(one_off(now_us, job_id="nightly", payload=1))


def test_commands_without_the_api_use_a_private_view(
    client: KafkronClient, ingest_settings: IngestSettings, now_us: int
) -> None:
    job_id = client.submit(one_off(now_us)).job_id
    clock = iter(range(now_us + 1, now_us + 100))
    client._clock_us = lambda: next(clock)
    assert client.pause(job_id).status == "PAUSED"
    assert not client.pause(job_id).changed
    assert client.resume(job_id).status == "SCHEDULED"
    triggered = client.trigger_now(job_id)
    assert triggered.manual_fire_at_ms is not None
    cancelled = client.cancel(job_id)
    assert (cancelled.status, cancelled.changed) == ("CANCELLED", True)
    repeat = client.cancel(job_id)
    assert (repeat.status, repeat.changed) == ("CANCELLED", False)
    with pytest.raises(JobConflictError, match="CANCELLED"):
        client.trigger_now(job_id)
    records = [r for _, _, r in jobs_records(ingest_settings)]
    assert [r["status"] for r in records] == [
        "SCHEDULED",
        "PAUSED",
        "SCHEDULED",
        "SCHEDULED",
        "CANCELLED",
    ]
    versions = [r["version"] for r in records]
    assert versions == sorted(set(versions))
    assert ingest_settings.view_path.is_dir()


def test_command_on_an_unknown_job(client: KafkronClient) -> None:
    with pytest.raises(JobNotFoundError):
        client.cancel("no-such-job")


def test_first_delivery_error_is_raised(kafka_settings: KafkaSettings) -> None:
    topic = f"{kafka_settings.namespace}tiny"
    admin = AdminClient(kafka_settings.client_config())
    new = NewTopic(
        topic, num_partitions=1, replication_factor=1, config={"max.message.bytes": "2000"}
    )
    admin.create_topics([new])[topic].result()
    producer = CommandProducer(kafka_settings, delivery_timeout_s=10)
    try:
        producer.send(topic, b"k", b"small")
        with pytest.raises(KafkaDeliveryError, match="MSG_SIZE_TOO_LARGE"):
            producer.send_many(topic, [(b"a", b"ok"), (b"b", os.urandom(50_000)), (b"c", b"ok")])
    finally:
        producer.close()


def test_send_bulk_raises_a_delivery_error_of_a_record_amid_good_ones(
    kafka_settings: KafkaSettings,
) -> None:
    topic = f"{kafka_settings.namespace}small-bulk"
    admin = AdminClient(kafka_settings.client_config())
    new = NewTopic(
        topic, num_partitions=1, replication_factor=1, config={"max.message.bytes": "20000"}
    )
    admin.create_topics([new])[topic].result()
    producer = CommandProducer(kafka_settings, delivery_timeout_s=10)
    try:
        good = [(f"k{i}".encode(), b"ok") for i in range(300)]
        assert producer.send_bulk(topic, good).offsets == {0: 299}
        with pytest.raises(KafkaDeliveryError, match="MSG_SIZE_TOO_LARGE"):
            producer.send_bulk(topic, [*good, (b"big", os.urandom(50_000)), *good])
    finally:
        producer.close()


def test_submit_many_remembers_the_last_offset_of_each_partition(
    client: KafkronClient, ingest_settings: IngestSettings, now_us: int
) -> None:
    ids = client.submit_many([one_off(now_us, payload={"i": i}) for i in range(200)])
    topic = TopicNames(ingest_settings.kafka.namespace).jobs
    next_offsets: dict[int, int] = {}
    for message in read_topic(ingest_settings.kafka, topic):
        partition, offset = message.partition() or 0, message.offset() or 0
        next_offsets[partition] = max(next_offsets.get(partition, 0), offset + 1)
    assert len(next_offsets) == 4
    for job_id in ids:
        partition = partition_for_key(job_id.encode(), 4)
        assert client.written_through(job_id) == {(topic, partition): next_offsets[partition]}
