"""Capacity: N far-future jobs on one timer: intake, memory, disk and restore-to-first-fire.

Run: ``.venv/bin/python -m bench.capacity [--jobs 10000000] [--bootstrap 127.0.0.1:9092]``
(quick: ``--jobs 1000000``; check ``df -h`` first: 10M needs several GB of disk).

In one run on one broker: the raw pipe (``bench.pipe.measure_pipe``); N one-offs due weeks
ahead are loaded into ``jobs`` with the bulk client (no timer running, so the rate is the
client's); then one timer takes them all in (time until its group committed the end of
``jobs``, records/s as a ratio to the raw consume, CPU per job); its RSS (peak and settled
after idling), the disk of its state dir and of this namespace's topics on the broker
(when the broker's data dir is local). Then the timer is restarted three times, each with a
sentinel job due at the restart instant: after a clean stop, after SIGKILL with the local
state kept, after SIGKILL with the state dir wiped (rebuilt from the changelogs), reporting
restart-to-first-fire, where the time went (group assignment, first and last partition
ready, restore), the changelog records replayed and the ``jobs`` records the timer consumed
after the restart.

The timer child counts the input records it consumes per topic (:class:`CountingTimerHooks`)
and logs the counts; the restore figures come from the runtime's own restore log lines.
Both are shared with ``tests/services/timer/test_restore_scale.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.cli import add_env_options
from bench.herd import (
    ROOT,
    DueReader,
    TimerProcess,
    fresh_namespace,
    job_record,
    now_ms,
    produce_jobs,
    submit_one_offs,
    wait_until_applied,
    wait_until_live,
)
from bench.pipe import measure_pipe
from services.ingest.producer import partition_for_key
from services.timer import service
from services.timer.settings import TimerSettings
from streams.processing import ProcessorContext
from streams.settings import KafkaSettings
from streams.topics import TopicNames

log = logging.getLogger(__name__)
COUNTS_MARK = "capacity counts "
ROCKSDB_MARK = "capacity rocksdb "
# RocksDB's own memory figures, summed over the open store partitions (default family).
ROCKSDB_PROPERTIES = (
    "rocksdb.size-all-mem-tables",
    "rocksdb.estimate-table-readers-mem",
    "rocksdb.block-cache-usage",
    "rocksdb.estimate-num-keys",
)
DAY_MS = 86_400_000
_LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"


# The counting timer child ----------------------------------------------------------------


class CountingTimerHooks(service.TimerHooks):
    """The timer's hooks, unchanged, plus a count of input records consumed per topic.

    The counts are logged (``capacity counts {...}``) at most twice a second from the
    punctuation, so a parent can read them even after a SIGKILL.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counts: Counter[str] = Counter()
        self._logged_at = 0.0
        self._rocksdb_logged_at = 0.0

    # Count where the runtime delivers records: in runs (``on_records``); overriding
    # ``on_record`` instead would put the timer back on the per-record path.
    def on_records(
        self, ctx: ProcessorContext, topic: str, partition: int, records: Sequence[Any]
    ) -> None:
        self.counts[topic] += len(records)
        super().on_records(ctx, topic, partition, records)

    def on_punctuate(self, ctx: ProcessorContext, partition: int, now_ms: int) -> None:
        super().on_punctuate(ctx, partition, now_ms)
        if time.monotonic() - self._logged_at >= 0.5:
            self._logged_at = time.monotonic()
            log.info("%s%s", COUNTS_MARK, json.dumps(dict(self.counts)))
        if time.monotonic() - self._rocksdb_logged_at >= 5.0:
            self._rocksdb_logged_at = time.monotonic()
            log.info("%s%s", ROCKSDB_MARK, json.dumps(rocksdb_memory(ctx)))


def rocksdb_memory(ctx: ProcessorContext) -> dict[str, int]:
    """ROCKSDB_PROPERTIES summed over every open partition of every store (a diagnostic:
    it reads the runtime's private store handles, so it reports nothing if they move)."""
    totals: Counter[str] = Counter()
    for store in getattr(ctx, "_stores", {}).values():
        for partition in store.partitions.values():
            db = getattr(partition, "_db", None)
            if db is None:
                continue
            totals["store_partitions"] += 1
            for name in ROCKSDB_PROPERTIES:
                totals[name.removeprefix("rocksdb.")] += db.property_int_value(name) or 0
    return dict(totals)


def counting_timer_main() -> None:
    """``services.timer.main`` with :class:`CountingTimerHooks` (run by CountingTimerProcess)."""
    from services.timer import main

    service.TimerHooks = CountingTimerHooks  # type: ignore[misc]  # build_processor uses it
    # RestoreLog reads each store partition's restore and "partition N ready" lines, which
    # the runtime logs at DEBUG (its INFO line sums up a set of partitions).
    for name in ("streams.state.recovery", "streams.processor"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    main.main()


class CountingTimerProcess(TimerProcess):
    """A :class:`TimerProcess` running :func:`counting_timer_main`; ``started_ms`` is set."""

    started_ms = 0

    def start(self) -> CountingTimerProcess:
        self.started_ms = now_ms()
        code = "from bench.capacity import counting_timer_main; counting_timer_main()"
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code],
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return self

    def counts(self) -> dict[str, int]:
        """The input records consumed per topic, as last logged (empty before any log)."""
        found: dict[str, int] = {}
        for line in self.log().splitlines():
            if COUNTS_MARK in line:
                found = json.loads(line.split(COUNTS_MARK, 1)[1])
        return found

    def rocksdb_memory(self) -> dict[str, int]:
        """The child's last logged RocksDB memory figures (see :func:`rocksdb_memory`)."""
        found: dict[str, int] = {}
        for line in self.log().splitlines():
            if ROCKSDB_MARK in line:
                found = json.loads(line.split(ROCKSDB_MARK, 1)[1])
        return found


# What the timer's log says about a restore -----------------------------------------------


@dataclass(frozen=True)
class RestoreLog:
    """Restore figures of one timer run, from the runtime's log lines."""

    partitions_restored: int  # store partitions whose restore finished
    records_to_read: int  # sum of (end - start) over the store partitions restored
    records_applied: int  # changelog records replayed into RocksDB
    from_start: int  # store partitions restored from offset 0 (local state missing)
    assigned_ms: int | None  # first "assigned [...]" with partitions
    restored_ms: int | None  # last "restored ... records"
    ready: tuple[int, ...] = ()  # epoch ms of each "partition N ready", in log order

    @classmethod
    def parse(cls, text: str) -> RestoreLog:
        restored = applied = to_read = from_start = 0
        assigned_ms = restored_ms = None
        ready: list[int] = []
        for line in text.splitlines():
            if ": restoring offsets " in line:
                first, last = line.rsplit(" ", 1)[1].split("..")
                to_read += int(last) - int(first)
                from_start += int(first) == 0
            elif ": restored " in line and " records up to offset " in line:
                restored += 1
                applied += int(line.split(": restored ", 1)[1].split(" ", 1)[0])
                restored_ms = _line_ms(line)
            elif " assigned [" in line and " assigned []" not in line and assigned_ms is None:
                assigned_ms = _line_ms(line)
            elif " partition " in line and line.endswith(" ready"):
                ready.append(_line_ms(line))
        return cls(restored, to_read, applied, from_start, assigned_ms, restored_ms, tuple(ready))


def _line_ms(line: str) -> int:
    """Epoch ms of a log line stamped by logging's default asctime (local time)."""
    return int(datetime.strptime(line[:23], _LOG_TIME).timestamp() * 1000)


# Offsets, disk, loading ------------------------------------------------------------------


def committed_offsets(settings: KafkaSettings, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition of ``topic`` (-1 when none)."""
    admin = AdminClient(settings.client_config())
    partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
    request = [ConsumerGroupTopicPartitions(group, partitions)]
    result = admin.list_consumer_group_offsets(request)[group].result()
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def end_offsets(settings: KafkaSettings, topic: str) -> dict[int, int]:
    """High watermark per partition of ``topic`` (transaction markers included)."""
    probe = Consumer(settings.client_config(**{"group.id": f"probe-{uuid.uuid4().hex[:6]}"}))
    try:
        return {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in range(settings.partitions)
        }
    finally:
        probe.close()


def changelog_topics(settings: KafkaSettings) -> list[str]:
    """The timer's store changelogs (``jobs`` and ``wheel``)."""
    group = TimerSettings(kafka=settings).group_id()
    names = TopicNames(settings.namespace)
    return [names.changelog(group, store) for store in (service.JOBS_STORE, service.WHEEL_STORE)]


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (0 when it does not exist)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # compaction removed it meanwhile
                total += os.stat(os.path.join(folder, name)).st_blocks * 512
    return total


def broker_topic_bytes(data_dir: Path, namespace: str) -> dict[str, int]:
    """Disk of each topic of ``namespace`` in a local broker's data dir (read only)."""
    sizes: Counter[str] = Counter()
    if data_dir.is_dir():
        for entry in data_dir.iterdir():
            if entry.name.startswith(namespace) and entry.is_dir():
                sizes[entry.name.rsplit("-", 1)[0]] += disk_bytes(entry)
    return dict(sizes)


def load_far_future(
    settings: KafkaSettings, jobs: int, first_run_at_ms: int, *, chunk: int = 100_000
) -> str:
    """Create ``jobs`` one-offs ``cap-<n>`` through the bulk client, a minute apart per chunk."""
    how = ""
    for start in range(0, jobs, chunk):
        ids = [f"cap-{i:08d}" for i in range(start, min(jobs, start + chunk))]
        how = submit_one_offs(settings, ids, first_run_at_ms + (start // chunk) * 60_000)
    return how


def sentinels(settings: KafkaSettings, tag: str, run_at_ms: int) -> list[str]:
    """Produce one one-off job per partition (as ingest writes them) due at ``run_at_ms``."""
    by_partition: dict[int, str] = {}
    n = 0
    while len(by_partition) < settings.partitions:
        job_id = f"sentinel-{tag}-{n}"
        by_partition.setdefault(partition_for_key(job_id.encode(), settings.partitions), job_id)
        n += 1
    ids = list(by_partition.values())
    produce_jobs(settings, [job_record(j, now_ms(), run_at_ms=run_at_ms) for j in ids])
    return ids


def read_fires_of(
    reader: DueReader, job_ids: list[str], timeout_s: float
) -> dict[str, dict[str, Any]]:
    """Poll until a DueEvent of each of ``job_ids`` was read; returns them by job id."""
    deadline = time.monotonic() + timeout_s
    wanted, found = set(job_ids), {}
    seen = len(reader.values)
    while time.monotonic() < deadline:
        reader.poll(0.05)
        if len(reader.values) > seen:
            seen = len(reader.values)
            found = {e["job_id"]: e for e in reader.events() if e["job_id"] in wanted}
            if len(found) == len(wanted):
                return found
    raise TimeoutError(f"{sorted(wanted - set(found))} did not fire within {timeout_s:.0f} s")


def wait_restored(timer: CountingTimerProcess, stores: int, timeout_s: float) -> RestoreLog:
    """Wait until ``stores`` store partitions logged a finished restore (or the timer died)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        restore = RestoreLog.parse(timer.log())
        if restore.partitions_restored >= stores:
            return restore
        if timer.process is not None and timer.process.poll() is not None:
            raise RuntimeError(f"the timer exited while restoring: {timer.log()[-3000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"restore not done in {timeout_s:.0f} s: {timer.log()[-3000:]}")


# The benchmark ---------------------------------------------------------------------------


def rocksdb_text(timer: CountingTimerProcess) -> str:
    """The child's last RocksDB memory figures, in MiB."""
    figures = timer.rocksdb_memory()
    if not figures:
        return "RocksDB figures not logged yet"
    return (
        f"memtables {_mib(figures.get('size-all-mem-tables', 0))}, table readers "
        f"{_mib(figures.get('estimate-table-readers-mem', 0))}, block cache "
        f"{_mib(figures.get('block-cache-usage', 0))} over {figures.get('store_partitions', 0)} "
        f"store partitions (~{figures.get('estimate-num-keys', 0):,} keys)"
    )


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


@dataclass
class Bench:
    """One capacity run's settings, timer and DueEvent reader."""

    settings: KafkaSettings
    jobs: int
    broker_data: Path
    timer_env: dict[str, str] = field(default_factory=dict)
    timer: CountingTimerProcess | None = None
    runs: int = 0

    @property
    def instance_dir(self) -> Path:
        return self.settings.state_dir / "cap-timer"

    def new_timer(self, run: str) -> CountingTimerProcess:
        self.runs += 1  # a folder per run: a repeated label must not append to a parsed log
        log_dir = self.settings.state_dir / f"logs-{self.runs}-{run}"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.timer = CountingTimerProcess(self.settings, "cap-timer", log_dir, **self.timer_env)
        return self.timer.start()

    def load(self) -> None:
        started = time.monotonic()
        how = load_far_future(self.settings, self.jobs, now_ms() + 30 * DAY_MS)
        load_s = time.monotonic() - started
        print(f"loaded {self.jobs:,} one-offs ({how}) in {load_s:.1f} s: "
              f"{self.jobs / load_s:,.0f} jobs/s (no timer running)")  # fmt: skip

    def intake(self, raw_consume_per_s: float, reader: DueReader, settle_s: float) -> None:
        timer = self.new_timer("intake")
        applied_ms = self.wait_applied(timer)
        cpu_s = timer.cpu_s()
        intake_s = (applied_ms - timer.started_ms) / 1000
        rate = self.jobs / intake_s
        print(f"timer took in {self.jobs:,} jobs in {intake_s:.1f} s from process start: "
              f"{rate:,.0f} records/s, ratio to raw consume {rate / raw_consume_per_s:.3f}; "
              f"CPU {cpu_s:.0f} s = {cpu_s / self.jobs * 1e6:.0f} us per job")  # fmt: skip
        wait_until_live(self.settings, reader)
        peak = timer.peak_rss_mb()
        time.sleep(settle_s)
        print(f"timer RSS: peak {peak:,.0f} MiB, settled {timer.rss_mb():,.0f} MiB "
              f"after {settle_s:.0f} s idle (target: <= 1.5 GB = 1,431 MiB)")  # fmt: skip
        print(f"  of which RocksDB, by its own count: {rocksdb_text(timer)}")
        self.report_disk()

    def wait_applied(self, timer: CountingTimerProcess) -> int:
        """When the timer group committed the end of ``jobs``; prints progress every minute."""
        jobs_topic, group = (
            TopicNames(self.settings.namespace).jobs,
            f"{self.settings.namespace}timer",
        )
        while True:
            try:
                return wait_until_applied(self.settings, now_ms() + 60_000)
            except TimeoutError:
                done = sum(
                    max(o, 0) for o in committed_offsets(self.settings, group, jobs_topic).values()
                )
                elapsed_s = (now_ms() - timer.started_ms) / 1000
                print(f"  ... {done:,} jobs taken in after {elapsed_s:.0f} s; RSS "
                      f"{timer.rss_mb():,.0f} MiB; {rocksdb_text(timer)}")  # fmt: skip
                if timer.process is not None and timer.process.poll() is not None:
                    raise RuntimeError(f"the timer exited: {timer.log()[-3000:]}") from None

    def report_disk(self) -> None:
        state = disk_bytes(self.instance_dir)
        print(f"disk: timer state dir {_mib(state)} ({state / self.jobs:.0f} B/job)")
        topics = broker_topic_bytes(self.broker_data, self.settings.namespace)
        if not topics:
            print(f"  broker topic data: not found under {self.broker_data} (remote broker?)")
        for topic, size in sorted(topics.items(), key=lambda kv: -kv[1]):
            if size:
                print(f"  broker {topic}: {_mib(size)} ({size / self.jobs:.0f} B/job)")
        total = sum(topics.values())
        print(f"  broker total for the namespace: {_mib(total)}")

    def restart(self, label: str, *, kill: bool, wipe: bool, reader: DueReader) -> None:
        assert self.timer is not None
        if kill:
            self.timer.kill()
        else:
            self.timer.stop(timeout_s=120)
        if wipe:
            shutil.rmtree(self.instance_dir)
        restart_ms = now_ms()
        ids = sentinels(self.settings, uuid.uuid4().hex[:6], restart_ms)
        timer = self.new_timer(label.replace(" ", "-").replace(",", ""))
        fires = read_fires_of(reader, ids, timeout_s=3600)
        restore = wait_restored(timer, 2 * self.settings.partitions, timeout_s=3600)
        time.sleep(1)  # one more counts line (and the last "partition N ready" line)
        restore = RestoreLog.parse(timer.log())
        jobs_read = timer.counts().get(TopicNames(self.settings.namespace).jobs, 0)
        emitted = sorted(e["emitted_at_ms"] for e in fires.values())

        def since(ms: int | None) -> str:
            return "?" if ms is None else f"{(ms - restart_ms) / 1000:.1f} s"

        print(f"restart after {label}: sentinels due at the restart (one per partition) "
              f"emitted {since(emitted[0])} (first) to {since(emitted[-1])} (last) after the "
              "restart (target: first fire <= 30 s)")  # fmt: skip
        ready = sorted(restore.ready)
        print(f"  partitions assigned {since(restore.assigned_ms)}; first partition ready "
              f"{since(ready[0] if ready else None)}, all {len(ready)} ready "
              f"{since(ready[-1] if ready else None)}")  # fmt: skip
        print(f"  every store restored "
              f"{since(restore.restored_ms)}; changelog records replayed "
              f"{restore.records_applied:,} ({restore.records_to_read:,} offsets read, "
              f"{restore.from_start} of {restore.partitions_restored} store partitions from "
              "offset 0)")  # fmt: skip
        print(f"  jobs records consumed after the restart: {jobs_read:,} ({len(ids)} are "
              f"sentinels); peak RSS {timer.peak_rss_mb():,.0f} MiB")  # fmt: skip

    def close(self) -> None:
        if self.timer is not None:
            self.timer.stop()


def run_capacity(args: argparse.Namespace) -> None:
    free = shutil.disk_usage(ROOT).free
    print(f"free disk under {ROOT}: {_mib(free)} (about 2 KB per job is needed)")
    if free < args.jobs * 2_000:
        print("  ** disk may be short for this run **")
    pipe = measure_pipe(args.bootstrap, min(args.jobs, args.pipe_records))
    print(f"raw pipe ({pipe.records:,} records): produce {pipe.produce_per_s:,.0f}/s, "
          f"consume {pipe.consume_per_s:,.0f}/s")  # fmt: skip
    with fresh_namespace(args.bootstrap, "cap", args.partitions) as settings:
        bench = Bench(settings, args.jobs, args.broker_data, args.timer_env)
        reader = None
        try:
            reader = DueReader(settings)
            bench.load()
            bench.intake(pipe.consume_per_s, reader, args.settle_s)
            if not args.no_restarts:
                bench.restart("clean stop, state kept", kill=False, wipe=False, reader=reader)
                bench.restart("SIGKILL, state kept", kill=True, wipe=False, reader=reader)
                for _ in range(args.wiped_restarts):
                    bench.restart("SIGKILL, state wiped", kill=True, wipe=True, reader=reader)
                bench.report_disk()
        finally:
            bench.close()
            if reader is not None:
                reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--pipe-records", type=int, default=1_000_000)
    parser.add_argument("--settle-s", type=float, default=15.0)
    parser.add_argument(
        "--broker-data", type=Path, default=ROOT / ".state" / "broker" / "data",
        help="the local broker's log dir, read to size this namespace's topics",
    )  # fmt: skip
    add_env_options(parser, "timer")
    parser.add_argument("--no-restarts", action="store_true", help="stop after the intake")
    parser.add_argument(
        "--wiped-restarts", type=int, default=1, metavar="N",
        help="repeat the restart with the state dir wiped N times (for a range)",
    )  # fmt: skip
    args = parser.parse_args()
    run_capacity(args)


if __name__ == "__main__":
    main()
