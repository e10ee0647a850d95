"""Dedup entries carried by their index records (v3): one changelog record per commit and
partition, local-only entries, restores that expand the records, and a changelog mixed with
the previous per-entry format (v2) in both directions.

Real RocksDB on ``tmp_path``; the changelog is a recording producer, replayed through the
store's own expander the way a restore applies it (the round trip through a real changelog
topic and ``Recovery`` is in ``test_dedup_v3_kafka.py``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from services.executor.dedup import (
    DedupEntry,
    DedupStore,
    Progress,
    entries_index_key,
    index_key,
    written_at_ms,
)
from tests.services.executor.support import RecordingProducer, SettableClock

CHANGELOG = "ns.changelog.g.dedup"
PARTITION = 3
RETENTION_MS = 10_000
T0 = 1_700_000_000_000
DONE = DedupEntry(Progress.SUCCEEDED, 1, 0)
FAILED = DedupEntry(Progress.RETRY_SCHEDULED, 1, 0)


class Owner:
    """Successive dedup stores of one partition on one folder, sharing a clock and the
    changelog (a recording producer): each open is an executor version taking over."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.clock = SettableClock(T0)
        self.producer = RecordingProducer()
        self.dedup: DedupStore | None = None

    def open(
        self,
        *,
        entries_in_index: bool,
        retention_ms: int | None = RETENTION_MS,
        sweep_min_ids: int = 1_000,
    ) -> DedupStore:
        if self.dedup is not None:
            self.dedup.close()
        self.dedup = DedupStore(
            "g",
            self.folder,
            CHANGELOG,
            retention_ms=retention_ms,
            clock_ms=self.clock,
            entries_in_index=entries_in_index,
            sweep_min_ids=sweep_min_ids,
        )
        self.dedup.store.open_partition(PARTITION)
        return self.dedup

    @property
    def store(self) -> DedupStore:
        assert self.dedup is not None
        return self.dedup

    def commit(self, entries: dict[str, DedupEntry]) -> list[tuple[bytes | None, bytes | None]]:
        """Record and commit ``entries``; returns the changelog records of the commit."""
        before = len(self.producer.records)
        for execution_id, entry in entries.items():
            self.store.record(PARTITION, execution_id, entry)
        self.store.prepare(self.producer)  # type: ignore[arg-type]
        self.store.flush(self.producer)  # type: ignore[arg-type]
        return [(key, value) for _, key, value, _ in self.producer.records[before:]]

    def contents(self) -> dict[bytes, bytes]:
        return dict(self.store.store.partition(PARTITION).scan(b"", b"\xff", 10**6))

    def restored(self) -> dict[bytes, bytes]:
        """What a restore from the beginning of the changelog gives, now."""
        state: dict[bytes, bytes | None] = {}
        for _, key, value, _ in self.producer.records:
            assert key is not None
            expanded = self.store.expand_changelog_record(key, value)
            state.update([(key, value)] if expanded is None else expanded)
        return {k: v for k, v in state.items() if v is not None}

    def close(self) -> None:
        if self.dedup is not None:
            self.dedup.close()


def ids(prefix: str, n: int) -> dict[str, DedupEntry]:
    return {f"{prefix}-{i}@{T0}": DONE for i in range(n)}


def test_a_commit_writes_one_changelog_record_per_partition(tmp_path: Path) -> None:
    producer = RecordingProducer()
    clock = SettableClock(T0)
    dedup = DedupStore(
        "g", tmp_path, CHANGELOG, retention_ms=RETENTION_MS, clock_ms=clock, entries_in_index=True
    )
    for partition in (0, 5):
        dedup.store.open_partition(partition)
    for step in range(3):
        before = len(producer.records)
        for partition in (0, 5):
            for i in range(300):
                dedup.record(partition, f"job-{partition}-{step}-{i}@1", DONE)
        dedup.prepare(producer)  # type: ignore[arg-type]
        dedup.flush(producer)  # type: ignore[arg-type]
        records = producer.records[before:]
        keys = [(key, p) for _, key, _, p in records]
        expected = [(entries_index_key(T0 + step, 0), p) for p in (0, 5)]
        # the first commit also marks each partition's format (nothing of the old to index)
        assert [k for k in keys if k[0] != b"\x00format"] == expected
        assert len(records) == (4 if step == 0 else 2)
        clock.now_ms += 1
    for partition in (0, 5):
        assert all(
            dedup.lookup(partition, f"job-{partition}-{s}-{i}@1") == DONE
            for s in range(3)
            for i in range(300)
        )
        stored = dedup.store.partition(partition).get(f"job-{partition}-2-7@1".encode())
        assert stored is not None and written_at_ms(stored) == T0 + 2
    dedup.close()


def test_a_commit_of_many_entries_writes_chunks_under_the_size_limit(tmp_path: Path) -> None:
    owner = Owner(tmp_path)
    owner.open(entries_in_index=True)
    records = owner.commit(ids("herd", 2_500))
    assert [k for k, _ in records if k != b"\x00format"] == [
        entries_index_key(T0, c) for c in range(3)
    ]
    assert max(len(v or b"") for _, v in records) < 64_000
    assert owner.restored() == owner.contents()
    owner.close()


def test_the_sweep_deletes_locally_and_tombstones_only_the_index(tmp_path: Path) -> None:
    owner = Owner(tmp_path)
    dedup = owner.open(entries_in_index=True)
    old, fresh = ids("old", 40), ids("fresh", 40)
    owner.commit(old)
    owner.clock.now_ms = T0 + RETENTION_MS // 2
    owner.commit(fresh)
    owner.clock.now_ms = T0 + RETENTION_MS  # old ones are exactly RETENTION_MS old
    records = owner.commit({"trigger@1": DONE})
    assert records == [
        (entries_index_key(T0, 0), None),
        (entries_index_key(T0 + RETENTION_MS, 0), records[-1][1]),
    ]
    assert [e for e in old if dedup.lookup(PARTITION, e)] == []
    assert all(dedup.lookup(PARTITION, e) == DONE for e in fresh)
    assert owner.restored() == owner.contents()
    owner.close()


def test_a_sweep_that_produces_nothing_keeps_the_changelog_offset(tmp_path: Path) -> None:
    owner = Owner(tmp_path)
    dedup = DedupStore(
        "g", tmp_path, CHANGELOG, retention_ms=RETENTION_MS, clock_ms=owner.clock,
        sweep_min_ids=10, entries_in_index=True,
    )  # fmt: skip
    dedup.store.open_partition(PARTITION)
    owner.dedup = dedup
    old = ids("old", 35)
    owner.commit(old)
    offset = dedup.store.partition(PARTITION).changelog_offset()
    owner.clock.now_ms += RETENTION_MS
    assert owner.commit({}) == []  # ten ids deleted locally, the index record stays
    assert len([e for e in old if dedup.lookup(PARTITION, e)]) == 25
    assert dedup.store.partition(PARTITION).changelog_offset() == offset
    for _ in range(3):
        owner.commit({})
    assert [e for e in old if dedup.lookup(PARTITION, e)] == []
    assert owner.producer.records[-1][1:3] == (entries_index_key(T0, 0), None)
    owner.close()


def test_a_rewritten_entry_is_kept_until_its_own_record_expires(tmp_path: Path) -> None:
    owner = Owner(tmp_path)
    dedup = owner.open(entries_in_index=True)
    owner.commit({"job@1": FAILED})
    owner.clock.now_ms = T0 + RETENTION_MS - 1
    owner.commit({"job@1": DedupEntry(Progress.SUCCEEDED, 2, 0)})
    owner.clock.now_ms = T0 + RETENTION_MS + 1
    owner.commit({})
    assert dedup.lookup(PARTITION, "job@1") == DedupEntry(Progress.SUCCEEDED, 2, 0)
    assert owner.restored() == owner.contents()  # the later record wins
    owner.clock.now_ms = T0 + 2 * RETENTION_MS - 1
    owner.commit({})
    assert dedup.lookup(PARTITION, "job@1") is None
    assert owner.restored() == owner.contents()
    owner.close()


def test_expired_entries_are_not_restored(tmp_path: Path) -> None:
    owner = Owner(tmp_path)
    dedup = owner.open(entries_in_index=True)
    owner.commit(ids("early", 5))
    owner.clock.now_ms = T0 + 100
    owner.commit(ids("late", 5))
    key = entries_index_key(T0, 0)
    value = dedup.store.partition(PARTITION).get(key)
    owner.clock.now_ms = T0 + RETENTION_MS  # early ones expired, nothing swept yet
    assert dedup.expand_changelog_record(key, value) is None  # only the record itself
    restored = owner.restored()
    assert key in restored and not any(k.startswith(b"early") for k in restored)
    assert {k for k in restored if k.startswith(b"late")} == {e.encode() for e in ids("late", 5)}
    assert dedup.expand_changelog_record(key, None) is None  # a tombstone stays one
    assert dedup.expand_changelog_record(b"early-1@1", DONE.encode_at(T0)) is None
    owner.close()
    forever = DedupStore("g", tmp_path, CHANGELOG, retention_ms=None, clock_ms=owner.clock)
    expanded = forever.expand_changelog_record(key, value)  # no retention: all restored
    assert expanded is not None and len(expanded) == 6
    forever.close()


def test_upgrading_tombstones_every_per_entry_record_it_supersedes(tmp_path: Path) -> None:
    owner = Owner(tmp_path)
    owner.open(entries_in_index=False)  # v2: a changelog record per entry
    legacy = {f"legacy-{i}@1": FAILED for i in range(30)}
    owner.commit(legacy)
    dedup = owner.open(entries_in_index=True)  # the upgrade takes the partition over
    owner.clock.now_ms += 1_000
    rewritten = {e: DONE for e in list(legacy)[:10]}  # retries that succeeded, in v3
    owner.commit({**rewritten, "new@1": DONE})
    assert all(dedup.lookup(PARTITION, e) == DONE for e in rewritten)
    assert owner.restored() == owner.contents()  # the v3 record comes after: it wins
    owner.clock.now_ms = T0 + RETENTION_MS  # the v2 record expired, the rewrites did not
    owner.commit({})
    assert [e for e in legacy if dedup.lookup(PARTITION, e) is not None] == list(rewritten)
    assert all(dedup.lookup(PARTITION, e) == DONE for e in rewritten)
    assert owner.restored() == owner.contents()
    owner.clock.now_ms += 3 * RETENTION_MS
    owner.commit({})
    owner.commit({})
    assert owner.contents().keys() == {b"\x00format"}
    last: dict[bytes | None, bytes | None] = {}
    for _, key, value, _ in owner.producer.records:
        last[key] = value
    assert [k for k, v in last.items() if v is not None] == [b"\x00format"]  # nothing leaks
    owner.close()


def test_entries_of_the_unindexed_format_are_moved_into_the_index(tmp_path: Path) -> None:
    owner = Owner(tmp_path)
    owner.open(entries_in_index=False, retention_ms=None)  # 13-byte entries, no index
    legacy = {f"legacy-{i}@1": DedupEntry(Progress.DEAD_LETTER, 3, i) for i in range(25)}
    owner.commit(legacy)
    dedup = owner.open(entries_in_index=True)
    records = owner.commit({"new@1": DONE})
    assert {k for k, v in records if v is None} == {e.encode() for e in legacy}
    assert all(dedup.lookup(PARTITION, e) == entry for e, entry in legacy.items())
    assert owner.restored() == owner.contents()
    owner.clock.now_ms += RETENTION_MS
    owner.commit({})
    assert [e for e in legacy if dedup.lookup(PARTITION, e)] == []
    assert owner.restored() == owner.contents()
    owner.close()


def test_a_downgraded_writer_sweeps_v3_records_and_its_own(tmp_path: Path) -> None:
    owner = Owner(tmp_path)
    owner.open(entries_in_index=True)
    owner.commit({"a@1": FAILED, "b@1": DONE})
    dedup = owner.open(entries_in_index=False)  # v2 writes again (a rollback)
    owner.clock.now_ms += 1_000
    owner.commit({"a@1": DONE, "c@1": DONE})
    assert owner.restored() == owner.contents()
    owner.clock.now_ms = T0 + RETENTION_MS  # b expired; a's rewrite did not
    owner.commit({})
    assert [dedup.lookup(PARTITION, e) for e in ("a@1", "b@1", "c@1")] == [DONE, None, DONE]
    assert owner.restored() == owner.contents()
    owner.clock.now_ms += RETENTION_MS
    owner.commit({})
    assert owner.contents().keys() == {b"\x00format"}
    assert index_key(T0 + 1_000, 0) not in owner.restored()
    owner.close()


# Steps of a random history: commit these ids (index into IDS) with this outcome, move the
# clock by this many ms, and maybe switch the writer's format (a new executor version).
STEP = st.tuples(
    st.lists(st.tuples(st.integers(0, 11), st.sampled_from(list(Progress))), max_size=6),
    st.sampled_from([0, 1, 700, RETENTION_MS // 3, RETENTION_MS]),
    st.sampled_from([None, None, None, False, True]),
)
IDS = [f"job-{i}@1" for i in range(12)]


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(STEP, min_size=1, max_size=14),
    start_v3=st.booleans(),
    sweep_min_ids=st.sampled_from([1, 3, 1_000]),  # small: sweeps stop inside a record
)
def test_a_restore_at_any_commit_keeps_every_unexpired_entry(
    steps: list[tuple[list[tuple[int, Progress]], int, bool | None]],
    start_v3: bool,
    sweep_min_ids: int,
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="dedup-v3-"))
    owner = Owner(folder)
    try:
        owner.open(entries_in_index=start_v3, sweep_min_ids=sweep_min_ids)
        attempts: dict[str, int] = {}
        for writes, advance_ms, switch_to in steps:
            if switch_to is not None:
                owner.open(entries_in_index=switch_to, sweep_min_ids=sweep_min_ids)
            entries = {}
            for i, progress in writes:
                attempts[IDS[i]] = attempts.get(IDS[i], 0) + 1
                entries[IDS[i]] = DedupEntry(progress, attempts[IDS[i]], 0)
            owner.commit(entries)
            live, restored = owner.contents(), owner.restored()
            cutoff = owner.clock.now_ms - RETENTION_MS
            for key, raw in live.items():
                at_ms = written_at_ms(raw) if not key.startswith(b"\x00") else None
                if key.startswith(b"\x00") or (at_ms is not None and at_ms > cutoff):
                    assert restored.get(key) == raw, key  # never lost, never different
            for key, raw in restored.items():
                if key.startswith(b"\x00"):
                    assert live.get(key) == raw, key
                elif live.get(key) != raw:  # an older entry of an expired id: swept again
                    at_ms = written_at_ms(raw)
                    assert at_ms is not None and at_ms <= cutoff, key
                    live_at_ms = written_at_ms(live[key]) if key in live else None
                    assert live_at_ms is None or live_at_ms <= cutoff, key
            assert live.keys() - restored.keys() <= {  # gone on restore: only expired ids
                k
                for k, v in live.items()
                if not k.startswith(b"\x00") and (written_at_ms(v) or cutoff + 1) <= cutoff
            }
            owner.clock.now_ms += advance_ms
        owner.commit({"tick@1": DONE})  # a partition sweeps once written since it opened
        for _ in range(4):  # long after: everything goes, and no changelog record outlives it
            owner.clock.now_ms += 2 * RETENTION_MS
            for _ in range(30):
                owner.commit({})
        assert owner.contents().keys() <= {b"\x00format"}
        last = {key: value for _, key, value, _ in owner.producer.records}
        assert {k for k, v in last.items() if v is not None} <= {b"\x00format"}
    finally:
        owner.close()
        shutil.rmtree(folder)
