"""Disk trouble under the timer, the dag processor and the executor, on the real broker
(issue 20): state directories deleted or damaged while the services are stopped, and the
timer's filling up while it runs. Nothing is lost or doubled: every tick of the recurring
jobs, every one-off and every DAG run has exactly one final outcome on ``job-results``, and
each handler ran once; the executor's dedup still refuses a finished execution delivered
again. What kafkron does with each kind of damage is streams/state/damage.py.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from bench.fleet import (
    SERVICES,
    Fleet,
    Ledger,
    cron_every_second,
    executions,
    one_off,
    ticks,
    whole_second_ms,
)
from services.ingest.client import KafkronClient
from services.ingest.settings import IngestSettings
from streams.admin import ensure_topics
from streams.codec import RecordKind
from streams.settings import KafkaSettings
from streams.state.partition import PartitionStore
from streams.topics import Priority, TopicNames
from tests.small_filesystem import fill_up, small_filesystem
from tests.streams.store_damage_kit import FOUND_AT_OPEN, damage, table_files

from .executor.test_service_kit import CODEC, TopicReader, now_ms

pytestmark = pytest.mark.kafka

LEAD_MS = 2_000  # from the services serving to the first fire
SPAN_MS = 14_000  # the workload's fires: every second of it, and one-offs in it
RECURRING, ONE_OFFS = 5, 10


@pytest.fixture
def kafka(kafka_settings: KafkaSettings) -> KafkaSettings:
    """The test's namespace with 2 partitions (restores and rebalances stay short)."""
    settings = kafka_settings.model_copy(update={"partitions": 2})
    ensure_topics(settings)
    return settings


@pytest.fixture
def fleet(kafka: KafkaSettings, tmp_path: Path) -> Iterator[Fleet]:
    services = Fleet(kafka, tmp_path)
    yield services
    services.stop()


@pytest.fixture
def ledger(kafka: KafkaSettings) -> Iterator[Ledger]:
    results = Ledger(kafka)
    yield results
    results.close()


def submit_workload(
    kafka: KafkaSettings, view_dir: Path, first_ms: int, later: int = 0
) -> set[str]:
    """Recurring jobs every second, one-offs and a DAG (a root every 2 s and its dependent)
    over [first_ms, first_ms + SPAN_MS), and ``later`` one-offs an hour on (filling the
    timer's stores); returns the execution ids expected within the test."""
    end_ms = first_ms + SPAN_MS
    requests: list[dict[str, Any]] = [
        cron_every_second(f"every-second-{i}", first_ms, end_ms) for i in range(RECURRING)
    ]
    expected = set().union(
        *(executions(r["job_id"], ticks(first_ms, end_ms, 1_000)) for r in requests)
    )
    for i in range(ONE_OFFS):
        run_at_ms = first_ms + 500 + i * (SPAN_MS // ONE_OFFS)
        requests.append(one_off(f"one-off-{i}", run_at_ms))
        expected |= executions(f"one-off-{i}", [run_at_ms])
    root = cron_every_second("dag-root", first_ms, end_ms)
    root["cron"]["expression"] = "*/2 * * * * *"
    requests.append(root)
    child = {"job_id": "dag-child", "handler": "tests.effect", "payload": 0,
             "depends_on": ["dag-root"], "overlap": "allow"}  # fmt: skip
    requests.append(child)
    requests += [one_off(f"zz-later-{i:05d}", first_ms + 3_600_000) for i in range(later)]
    root_ticks = [t for t in ticks(first_ms, end_ms, 1_000) if t // 1_000 % 2 == 0]
    expected |= executions("dag-root", root_ticks) | executions("dag-child", root_ticks)
    with KafkronClient(IngestSettings(kafka=kafka, view_dir=view_dir)) as client:
        client.submit_many(requests)
    return expected


def wait_until(at_ms: int) -> None:
    time.sleep(max(0.0, (at_ms - now_ms()) / 1000))


def assert_each_once(
    fleet: Fleet,
    ledger: Ledger,
    finals: Counter[str],
    expected: set[str],
    reruns: bool = False,
) -> None:
    """Each expected execution has one final outcome, SUCCEEDED, and its handler ran once
    (with ``reruns``, at least once: an executor that stops on an error runs again what it
    ran since its last commit, with the same execution id)."""
    missing = expected - set(finals)
    doubled = {e: n for e, n in finals.items() if n > 1}
    unexpected = set(finals) - expected
    assert not missing and not doubled and not unexpected, (
        f"missing {sorted(missing)[:5]} ({len(missing)}), doubled {doubled}, "
        f"unexpected {sorted(unexpected)[:5]}\n{fleet.logs()}"
    )
    not_succeeded = {
        e: outcomes for e, outcomes in ledger.final_statuses().items() if outcomes != ["SUCCEEDED"]
    }
    assert not not_succeeded, not_succeeded
    runs = fleet.effects()
    ran = {e: runs[("start", e)] for e in expected}
    wrong = {e: n for e, n in ran.items() if n < 1 or (n > 1 and not reruns)}
    assert not wrong, wrong


def succeeded_due_event(kafka: KafkaSettings, finals: Counter[str]) -> tuple[bytes, bytes]:
    """Key and value of the DueEvent of an execution that SUCCEEDED already."""
    reader = TopicReader(kafka, [TopicNames("").due(Priority.NORMAL)])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            reader.poll(0.2)
            for _, _, _, key, value in reader.records:
                event = CODEC.decode(RecordKind.DUE_EVENT, value)
                if finals[event["execution_id"]] == 1 and key is not None:
                    return key, value
        raise AssertionError("no DueEvent of a finished execution found")
    finally:
        reader.close()


def produce_again(kafka: KafkaSettings, key: bytes, value: bytes) -> None:
    producer = Producer(kafka.client_config(partitioner="murmur2_random"))
    producer.produce(TopicNames(kafka.namespace).due(Priority.NORMAL), value, key)
    assert producer.flush(30) == 0


def test_deleted_state_directories_are_rebuilt_from_the_changelogs(
    kafka: KafkaSettings, fleet: Fleet, ledger: Ledger, tmp_path: Path
) -> None:
    fleet.start()
    first_ms = whole_second_ms(now_ms() + LEAD_MS)
    expected = submit_workload(kafka, tmp_path / "view", first_ms)
    wait_until(first_ms + 5_000)
    fleet.stop()
    before = ledger.finals()
    assert len(before) >= 10, fleet.logs()  # the stores hold something to rebuild
    key, finished = succeeded_due_event(kafka, before)
    for service in SERVICES:
        assert fleet.partition_dirs(service), service
        fleet.delete_state(service)
    fleet.start()
    produce_again(kafka, key, finished)  # the dedup store must know it, rebuilt
    finals = ledger.wait_for(expected, timeout_s=45)
    fleet.stop()
    assert_each_once(fleet, ledger, finals, expected)
    assert fleet.exit_codes == {s: [0, 0] for s in SERVICES}, fleet.logs()
    # The rebuilds read records, from the changelogs' beginnings (the stores were new).
    for service in ("timer", "dag"):
        second_run = fleet.log(service).split("--- start")[-1]
        assert "restored partition" in second_run and " records" in second_run, second_run


def test_damaged_state_directories_are_moved_aside_and_rebuilt(
    kafka: KafkaSettings, fleet: Fleet, ledger: Ledger, tmp_path: Path
) -> None:
    damaged: dict[Path, str] = {}
    fleet.start()
    first_ms = whole_second_ms(now_ms() + LEAD_MS)
    expected = submit_workload(kafka, tmp_path / "view", first_ms, later=4_000)
    wait_until(first_ms + 5_000)
    fleet.stop()
    dirs = [d for s in SERVICES for d in fleet.partition_dirs(s)]
    # The timer's job states fill many data blocks: a read of one that is due meets one.
    bad_blocks = [d for d in dirs if d.parent.name in ("jobs", "wheel") and d.name == "0"]
    for i, directory in enumerate(dirs):
        how = "sst-garbage" if directory in bad_blocks else FOUND_AT_OPEN[i % len(FOUND_AT_OPEN)]
        if how.startswith("sst"):  # as a full memtable would have been: to table files
            store = PartitionStore(directory, 0, "-")
            store.flush()
            store.close()
            if not table_files(directory):  # an empty store: nothing to flush
                how = "manifest-truncated"
        damage(directory, how, seed=i)
        damaged[directory] = how
    # A bad data block is found when a read meets it (maybe before the service has its
    # partitions): that service stops, saying so, and its restart (a supervisor's job)
    # rebuilds the store.
    fleet.start(wait=False)
    deadline = time.monotonic() + 45
    while not expected <= set(ledger.finals()) and time.monotonic() < deadline:
        for service in SERVICES:
            if not fleet.alive(service):
                assert fleet.wait_exit(service, 5) != 0
                assert "is damaged" in fleet.log(service), fleet.log(service)
                fleet.start(service, wait=False)
        time.sleep(0.5)
    finals = ledger.wait_for(expected, timeout_s=5)
    fleet.stop()
    assert_each_once(fleet, ledger, finals, expected)
    moved = {d for d in damaged if list(d.parent.glob(f"{d.name}.damaged-*"))}
    assert moved == set(damaged), sorted(str(d) for d in set(damaged) - moved)
    logged = "\n".join(fleet.log(s) for s in SERVICES)
    for directory in moved:
        assert f"in {directory} is damaged" in logged, directory
    # The bad data blocks were met while running: the timer stopped, saying what to do,
    # and its restart rebuilt the store.
    assert 1 in fleet.exit_codes["timer"], (fleet.exit_codes, fleet.log("timer"))
    assert "restart the service" in fleet.log("timer")


@pytest.mark.parametrize("service", ["timer", "executor"])
def test_a_full_disk_stops_the_service_and_it_resumes_after_space_is_freed(
    kafka: KafkaSettings, fleet: Fleet, ledger: Ledger, tmp_path: Path, service: str
) -> None:
    with small_filesystem(fleet.state_dir(service), 16) as disk:
        try:
            fleet.start()
            first_ms = whole_second_ms(now_ms() + LEAD_MS)
            expected = submit_workload(kafka, tmp_path / "view", first_ms)
            wait_until(first_ms + 4_000)
            assert ledger.finals(), fleet.logs()
            filler = fill_up(disk)
            code = fleet.wait_exit(service, timeout_s=20)
            assert code not in (None, 0), fleet.log(service)
            said = fleet.log(service).splitlines()[-1]
            assert said.startswith("kafkron: the disk holding the store") and "is full" in said
            assert "Free space on that disk" in said and "restart the service" in said, said
            filler.unlink()
            fleet.start(service)
            finals = ledger.wait_for(expected, timeout_s=45)
            fleet.stop()
        finally:
            fleet.stop()
    assert_each_once(fleet, ledger, finals, expected, reruns=service == "executor")
    assert fleet.exit_codes[service] == [1, 0], fleet.exit_codes
