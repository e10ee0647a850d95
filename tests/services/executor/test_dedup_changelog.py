"""How the dedup store hands its changelog records to the producer at a commit: all of a
partition's records in one call, each on the changelog partition of its store partition.

Real RocksDB on ``tmp_path``; the producers are recording fakes (pure store logic). The
round trip through a real changelog topic is in ``test_dedup_expiry_kafka.py``.
"""

from __future__ import annotations

from pathlib import Path

from services.executor.dedup import DedupEntry, DedupStore, Progress

CHANGELOG = "ns.changelog.g.dedup"
DONE = DedupEntry(Progress.SUCCEEDED, 1, 0)
Record = tuple[str, bytes | None, bytes | None, int | None]


class ManyProducer:
    """A producer with ``produce`` and ``produce_many`` (TransactionalProducer's API)."""

    def __init__(self) -> None:
        self.calls: list[list[Record]] = []

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        self.calls.append([(topic, key, value, partition)])

    def produce_many(
        self, records: list[tuple[str, bytes | None, bytes | None]], partition: int | None = None
    ) -> None:
        self.calls.append([(topic, key, value, partition) for topic, key, value in records])

    @property
    def records(self) -> list[Record]:
        return [record for call in self.calls for record in call]

    def delivered_offset(self, topic: str, partition: int) -> int | None:
        mine = [r for r in self.records if r[0] == topic and r[3] == partition]
        return len(mine) - 1 if mine else None


class ChangelogProducer(ManyProducer):
    """One that also takes a store partition's changelog records in one call."""

    def produce_changelog(
        self, topic: str, partition: int, items: list[tuple[bytes, bytes | None]]
    ) -> None:
        self.calls.append([(topic, key, value, partition) for key, value in items])


def _commit(dedup: DedupStore, producer: ManyProducer, ids: dict[int, list[str]]) -> None:
    for partition, execution_ids in ids.items():
        for execution_id in execution_ids:
            dedup.record(partition, execution_id, DONE)
    dedup.prepare(producer)  # type: ignore[arg-type]
    dedup.flush(producer)  # type: ignore[arg-type]


def _check_one_call_per_partition(tmp_path: Path, producer: ManyProducer) -> None:
    dedup = DedupStore("g", tmp_path, CHANGELOG, retention_ms=None)
    ids = {p: [f"job-{p}-{i}@1" for i in range(5)] for p in (0, 2, 7)}
    for partition in ids:
        dedup.store.open_partition(partition)
    _commit(dedup, producer, ids)
    assert len(producer.calls) == len(ids)
    for call, (partition, execution_ids) in zip(producer.calls, sorted(ids.items()), strict=True):
        assert [(topic, key, p) for topic, key, _, p in call] == [
            (CHANGELOG, e.encode(), partition) for e in execution_ids
        ]
        assert all(value == DONE.encode() for _, _, value, _ in call)
    for partition, execution_ids in ids.items():  # flushed with their changelog offsets
        assert all(dedup.lookup(partition, e) == DONE for e in execution_ids)
        store = dedup.store.partition(partition)
        assert store.get(execution_ids[0].encode()) == DONE.encode()
    dedup.close()


def test_a_partitions_changelog_records_go_out_in_one_produce_changelog(tmp_path: Path) -> None:
    _check_one_call_per_partition(tmp_path, ChangelogProducer())


def test_a_producer_without_produce_changelog_gets_one_produce_per_key(tmp_path: Path) -> None:
    producer = ManyProducer()
    dedup = DedupStore("g", tmp_path, CHANGELOG, retention_ms=None)
    ids = {p: [f"job-{p}-{i}@1" for i in range(3)] for p in (0, 5)}
    for partition in ids:
        dedup.store.open_partition(partition)
    _commit(dedup, producer, ids)
    assert producer.calls == [
        [(CHANGELOG, e.encode(), DONE.encode(), partition)]
        for partition, execution_ids in sorted(ids.items())
        for e in execution_ids
    ]
    assert all(dedup.lookup(p, e) == DONE for p, es in ids.items() for e in es)
    dedup.close()


def test_expiring_entries_and_their_index_go_out_per_partition(tmp_path: Path) -> None:
    producer = ChangelogProducer()
    dedup = DedupStore("g", tmp_path, CHANGELOG, retention_ms=60_000, clock_ms=lambda: 10**12)
    for partition in (1, 4):
        dedup.store.open_partition(partition)
    _commit(dedup, producer, {1: ["a@1", "b@1"], 4: ["c@1"]})
    assert [{p for *_, p in call} for call in producer.calls] == [{1}, {4}]
    keys = [{key for _, key, _, _ in call} for call in producer.calls]
    assert {b"a@1", b"b@1"} < keys[0] and {b"c@1"} < keys[1]  # plus index and format keys
    assert dedup.lookup(1, "b@1") == DONE and dedup.lookup(4, "c@1") == DONE
    dedup.close()
