"""The migration's refusals, rollback on a late write and resume, on the real broker, with an
old timer running (the migration needs one to apply its cut)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.fleet import Fleet, cron_every_second, one_off
from services.ingest.client import KafkronClient
from services.ingest.settings import IngestSettings
from streams.admin import ensure_topics
from streams.codec import Codec, RecordKind
from streams.migration.cutover import MigrationOptions, NamespaceMigration
from streams.migration.exceptions import MigrationRefusedError, MigrationRolledBackError
from streams.migration.jobs_topic import JobsWriter, end_offsets, read_range
from streams.migration.progress import MigrationState, Phase
from streams.settings import KafkaSettings
from streams.topics import TopicNames
from tests.services.executor.test_service_kit import now_ms

pytestmark = pytest.mark.kafka

CODEC = Codec.from_directory()
OPTIONS = MigrationOptions(cutover_in_s=30.0)


@pytest.fixture
def old(kafka_settings: KafkaSettings) -> KafkaSettings:
    settings = kafka_settings.model_copy(update={"partitions": 2})
    ensure_topics(settings)
    return settings


@pytest.fixture
def old_timer(old: KafkaSettings, tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(old, tmp_path, "old")
    fleet.start("timer")
    yield fleet
    fleet.stop()


def submit(old: KafkaSettings, tmp_path: Path, *requests: dict[str, object]) -> None:
    with KafkronClient(IngestSettings(kafka=old, view_dir=tmp_path / "view")) as client:
        client.submit_many(list(requests))


def latest_jobs(kafka: KafkaSettings) -> dict[str, dict[str, object]]:
    topic = TopicNames(kafka.namespace).jobs
    latest: dict[str, dict[str, object]] = {}
    for _, _, key, value in read_range(kafka, topic, {}, end_offsets(kafka, topic)):
        assert key is not None
        if value is None:
            latest.pop(key.decode(), None)
        else:
            latest[key.decode()] = CODEC.decode(RecordKind.JOB, value)
    return latest


def test_refusals_write_nothing(old: KafkaSettings, tmp_path: Path) -> None:
    migration = NamespaceMigration(old, tmp_path / "work")
    with pytest.raises(MigrationRefusedError, match="is the old one"):
        migration.start(old.namespace, 4, OPTIONS)
    with pytest.raises(MigrationRefusedError, match="no timer runs in"):
        migration.start(old.namespace + "v2.", 4, OPTIONS)
    assert end_offsets(old, TopicNames(old.namespace).jobs) == {0: 0, 1: 0}


def test_a_new_namespace_that_holds_jobs_is_refused(
    old: KafkaSettings, old_timer: Fleet, tmp_path: Path
) -> None:
    new = old.model_copy(update={"namespace": old.namespace + "v2.", "partitions": 4})
    ensure_topics(new)
    writer = JobsWriter(new, TopicNames(new.namespace).jobs)
    writer.write(b"someone", b"x")
    writer.flush()
    with pytest.raises(MigrationRefusedError, match="holds 1 records already"):
        NamespaceMigration(old, tmp_path / "work").start(new.namespace, 4, OPTIONS)


def test_a_job_written_to_the_old_namespace_meanwhile_rolls_the_migration_back(
    old: KafkaSettings, old_timer: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_ms = now_ms() + 60_000
    submit(old, tmp_path, cron_every_second("recurring", first_ms, first_ms + 600_000))
    read_snapshot = NamespaceMigration._take_snapshot

    def snapshot_then_a_late_write(self: NamespaceMigration) -> dict[int, int]:
        ends = read_snapshot(self)
        submit(old, tmp_path, one_off("written-meanwhile", first_ms))
        return ends

    monkeypatch.setattr(NamespaceMigration, "_take_snapshot", snapshot_then_a_late_write)
    new_namespace = old.namespace + "v2."
    with pytest.raises(MigrationRolledBackError, match=r"written-meanwhile.*stop every writer"):
        NamespaceMigration(old, tmp_path / "work").start(new_namespace, 4, OPTIONS)
    assert MigrationState.load(tmp_path / "work").phase is Phase.ROLLED_BACK
    new = old.model_copy(update={"namespace": new_namespace, "partitions": 4})
    assert latest_jobs(new) == {}
    recurring = latest_jobs(old)["recurring"]
    assert recurring["cron"]["end_ms"] == first_ms + 600_000  # type: ignore[index]


def test_a_migration_stopped_after_its_cut_resumes_and_copies_each_job_once(
    old: KafkaSettings, old_timer: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_ms = now_ms() + 60_000
    submit(
        old,
        tmp_path,
        cron_every_second("recurring", first_ms - 50_000, first_ms + 600_000),
        one_off("later", first_ms + 600_000),
        one_off("sooner", first_ms - 55_000),
    )
    work = tmp_path / "work"

    def stops(self: JobsWriter) -> None:
        raise KeyboardInterrupt  # as if the command were stopped after writing the copies

    new_namespace = old.namespace + "v2."
    migration = NamespaceMigration(old, work)
    original_flush = JobsWriter.flush
    monkeypatch.setattr(
        JobsWriter,
        "flush",
        lambda self, timeout_s=120.0: (stops if "v2." in self.topic else original_flush)(self),
    )
    with pytest.raises(KeyboardInterrupt):
        migration.start(new_namespace, 4, OPTIONS)
    assert MigrationState.load(work).phase is Phase.CUT_APPLIED
    monkeypatch.undo()
    report = NamespaceMigration(old, work).resume()
    assert report.state.phase is Phase.DONE and report.late_writes == []
    new = old.model_copy(update={"namespace": new_namespace, "partitions": 4})
    copied = latest_jobs(new)
    cutover_ms = report.state.cutover_ms
    assert set(copied) == {"recurring", "later"}  # "sooner" fires before the cut-over
    assert copied["recurring"]["cron"]["start_ms"] == cutover_ms  # type: ignore[index]
    assert latest_jobs(old)["recurring"]["cron"]["end_ms"] == cutover_ms  # type: ignore[index]
    assert "later" not in latest_jobs(old)
    # A second resume of a finished migration writes nothing.
    ends = end_offsets(new, TopicNames(new_namespace).jobs)
    assert NamespaceMigration(old, work).resume().state.phase is Phase.DONE
    assert end_offsets(new, TopicNames(new_namespace).jobs) == ends
