"""A timer holding 200K jobs restarts from its changelogs, never by rescanning ``jobs``.

One test, because loading the jobs is the expensive part: 200K one-offs due in 30 days go
in through the bulk client, one timer process takes them in, then it is restarted three
times (clean stop; SIGKILL with its local RocksDB kept; SIGKILL with its state dir wiped).
After each restart:

- ``jobs`` is not rescanned: the group's offsets on ``jobs`` were at the end before the
  restart, and the restarted timer consumes only the handful of records submitted after it
  (counted by the timer child's hook wrapper, ``bench.capacity.CountingTimerHooks``);
- the changelogs are read from the stored offsets: ~0 records replayed while the local state
  survives; with it wiped, every store partition restores from offset 0 and replays at least
  the 400K records the 200K jobs wrote (their state and their wheel entries);
- a new job due a few seconds ahead fires on time, and five of the 200K, moved near by a
  newer version, each fire exactly once across all restarts.

The size proves nothing by itself: the restore without rescan is proven by the records
counted above (6-12 ``jobs`` records read after a restart against 200K a rescan would read;
at most one transaction, 5,000, of changelog records replayed against the 400K of a full
restore), so 200K separates them as 1M did. At 1M the test took 69 s here, at 200K 48 s
(quiet; the rest is the restarts' fixed waits: a SIGKILLed member's session, the jobs due
4 s ahead). The timer at 10M jobs is ``bench.capacity``'s.

At the end the stopped timer's RocksDB is opened: it holds the 200K jobs' state and their
far-future wheel entries, minus the moved ones (whose old entries the restored state let
the timer delete).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.capacity import (
    DAY_MS,
    CountingTimerProcess,
    RestoreLog,
    changelog_topics,
    committed_offsets,
    end_offsets,
    load_far_future,
    wait_restored,
)
from bench.herd import DueReader, now_ms, submit_one_offs, wait_until_applied, wait_until_live
from services.timer import keys
from services.timer.service import JOBS_STORE, WHEEL_STORE
from services.timer.settings import TimerSettings
from streams.identity import execution_id
from streams.settings import KafkaSettings
from streams.state.partition import PartitionStore
from streams.topics import TopicNames

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

JOBS = 200_000
LOAD_CHUNK = 20_000  # jobs per bulk submission, each chunk due a minute after the last
INSTANCE = "scale-timer"
LEAD_MS = 4_000  # how far ahead the jobs submitted after a restart are due


@pytest.fixture
def reader(topics: KafkaSettings) -> Iterator[DueReader]:
    due_reader = DueReader(topics)
    yield due_reader
    due_reader.close()


class Restarts:
    """The timer under test, restarted in place (same instance id, transactional id, state)."""

    def __init__(self, settings: KafkaSettings, reader: DueReader, log_root: Path) -> None:
        self.settings, self.reader, self.log_root = settings, reader, log_root
        self.names = TopicNames(settings.namespace)
        self.group = TimerSettings(kafka=settings).group_id()
        self.timer: CountingTimerProcess | None = None
        self.runs = 0
        self.moved: list[tuple[str, int]] = []  # (job id, new run_at) of the jobs moved near

    def start(self) -> CountingTimerProcess:
        self.runs += 1
        log_dir = self.log_root / f"run-{self.runs}"
        log_dir.mkdir(parents=True)
        self.timer = CountingTimerProcess(self.settings, INSTANCE, log_dir).start()
        return self.timer

    @property
    def state_dir(self) -> Path:
        return self.settings.state_dir / INSTANCE

    def jobs_consumed(self) -> int:
        assert self.timer is not None
        time.sleep(1.0)  # the child logs its counts twice a second
        return self.timer.counts().get(self.names.jobs, 0)

    def wait_restored(self) -> RestoreLog:
        assert self.timer is not None
        return wait_restored(self.timer, 2 * self.settings.partitions, timeout_s=600)

    def stop(self, *, kill: bool) -> None:
        assert self.timer is not None
        if kill:
            self.timer.kill()
        else:
            self.timer.stop(timeout_s=120)
            assert self.timer.process is not None
            assert self.timer.process.returncode == 0, self.timer.log()[-3000:]

    def check_fires_after_restart(self, round_no: int) -> None:
        """A new job and five of the loaded ones moved near: each fires on time, once."""
        due_ms = now_ms() + LEAD_MS
        fresh = f"fresh-{round_no}"
        moved = [f"cap-{(round_no * 100_003 + i * 7_919) % JOBS:08d}" for i in range(5)]
        submit_one_offs(self.settings, [fresh, *moved], due_ms)
        self.moved += [(job_id, due_ms) for job_id in moved]
        wanted = {execution_id(j, due_ms) for j in [fresh, *moved]}
        deadline = time.monotonic() + LEAD_MS / 1000 + 60
        while not wanted <= {e["execution_id"] for e in self.reader.events()}:
            assert time.monotonic() < deadline, "the jobs due after the restart did not fire"
            self.reader.poll(0.05)
        [event] = [e for e in self.reader.events() if e["job_id"] == fresh]
        late_ms = event["emitted_at_ms"] - event["fire_at_ms"]
        print(f"  fresh job fired {late_ms} ms after its time")
        assert event["fire_at_ms"] == due_ms and late_ms < 1_000  # a shared 2-core box

    def changelog_ends(self) -> int:
        return sum(
            sum(end_offsets(self.settings, t).values()) for t in changelog_topics(self.settings)
        )

    def assert_jobs_committed_to_the_end(self) -> None:
        ends = end_offsets(self.settings, self.names.jobs)
        assert committed_offsets(self.settings, self.group, self.names.jobs) == ends


@pytest.mark.timeout(1800)
def test_a_restart_with_200k_jobs_restores_from_the_changelog_without_rescanning_jobs(
    topics: KafkaSettings, reader: DueReader, tmp_path: Path
) -> None:
    restarts = Restarts(topics, reader, tmp_path / "logs")
    started = time.monotonic()
    load_far_future(topics, JOBS, now_ms() + 30 * DAY_MS, chunk=LOAD_CHUNK)
    print(f"\nloaded {JOBS:,} jobs in {time.monotonic() - started:.0f} s")
    try:
        timer = restarts.start()
        wait_until_applied(topics, now_ms() + 900_000)
        wait_until_live(topics, reader)
        print(f"timer took them in {(now_ms() - timer.started_ms) / 1000:.0f} s")
        assert restarts.jobs_consumed() >= JOBS
        written = restarts.changelog_ends()
        assert written >= 2 * JOBS  # every job's state and its wheel entry

        cases = [("clean stop", False, False), ("SIGKILL", True, False), ("wiped", True, True)]
        for round_no, (label, kill, wipe) in enumerate(cases, start=1):
            restarts.stop(kill=kill)
            restarts.assert_jobs_committed_to_the_end()
            if wipe:
                shutil.rmtree(restarts.state_dir)
            timer = restarts.start()
            restore = restarts.wait_restored()
            restore_s = (restore.restored_ms or 0) / 1000 - timer.started_ms / 1000
            print(f"{label}: restored {restore.records_applied:,} changelog records "
                  f"({restore.from_start} store partitions from 0) {restore_s:.1f} s after the "
                  "start")  # fmt: skip
            restarts.check_fires_after_restart(round_no)
            consumed = restarts.jobs_consumed()
            print(f"  jobs records consumed after the restart: {consumed}")
            assert 6 <= consumed <= 12  # the 6 submitted (x2 if a transaction was retried)
            if wipe:
                assert restore.from_start == 2 * topics.partitions
                assert restore.records_applied >= 2 * JOBS
            else:
                assert restore.from_start == 0
                # A SIGKILL may land between a commit and its RocksDB write: one transaction.
                assert restore.records_applied <= (0 if not kill else 5_000)
        time.sleep(2)  # a repeated fire would be read by now
        reader.poll(0.5)
        restarts.stop(kill=False)
    finally:
        if restarts.timer is not None:
            restarts.timer.stop()
    fired = Counter(e["execution_id"] for e in reader.events() if e["job_id"].startswith("cap-"))
    assert fired == Counter(execution_id(j, due) for j, due in restarts.moved)
    _assert_store_holds_the_jobs(topics, restarts)


def _assert_store_holds_the_jobs(settings: KafkaSettings, restarts: Restarts) -> None:
    """The stopped timer's RocksDB: every job's state; far-future entries except the moved."""
    group_dir = restarts.state_dir / restarts.group
    states = far_entries = 0
    moved = {job_id.encode() for job_id, _ in restarts.moved}
    horizon = keys.pack_ms(now_ms() + DAY_MS)
    for partition in range(settings.partitions):
        jobs = PartitionStore(group_dir / JOBS_STORE / str(partition), partition, "-")
        wheel = PartitionStore(group_dir / WHEEL_STORE / str(partition), partition, "-")
        try:
            states += sum(1 for k, _ in jobs.scan(b"cap-", b"cap.", 2 * JOBS))
            for key, _ in wheel.scan(horizon, b"\xff" * 8, 2 * JOBS):
                parsed = keys.parse_key(key)
                assert parsed.job_id not in moved, f"{parsed} should have been moved"
                far_entries += parsed.job_id.startswith(b"cap-")
        finally:
            jobs.close()
            wheel.close()
    assert states == JOBS
    assert far_entries == JOBS - len(moved)
