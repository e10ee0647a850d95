"""The herd end to end: N one-off jobs due at one instant, through ingest, timer and executor.

Run: ``.venv/bin/python -m bench.e2e_herd --bootstrap 127.0.0.1:9092 [--jobs 1000000]``
(``--jobs 100000`` for a quick run; ``--executors 2`` for more executor processes).

In one run on one broker: the raw pipe (``bench.pipe.measure_pipe``) for the same record
count; then one timer (``bench.herd.TimerProcess``) and ``--executors`` executor processes
(``python -m services.executor.main``) start, and a canary one-off per partition proves
both are live (each canary SUCCEEDED). N one-offs naming ``examples.noop`` go in through
the bulk client (``KafkronClient.submit_many``), due at one instant ``--lead-s`` ahead; the
timer must have taken in every one of them (its group's committed offsets on ``jobs`` at the
end) before the instant, else the run stops and says which lead to use. Without
``--lead-s`` a pilot load (jobs due in a day) measures the intake rate and the lead is
derived from it.

From the instant on, this process reads ``job-results`` ``read_committed`` (niced, so that
the reader takes CPU from the system under test as little as it can), and a sampler child
process polls the last stable offsets of ``due.normal`` and ``job-results`` every
``--sample-ms``: the first sample where every partition's LSO is past its last herd record
is when the last DueEvent, and the last SUCCEEDED, became visible (committed). Reports:
those two times, executions/s and their ratios to the same run's raw produce and consume,
start lateness (each SUCCEEDED's ``started_at_ms`` - ``scheduled_for_ms``) p50/p99/max, statuses,
duplicates (a SUCCEEDED seen twice for one execution id is a defect: printed loudly, exit
status 1), peak RSS and CPU per execution of the timer, the executors, the broker (when
local) and this reader. Every topic of the run is deleted at the end.

The pieces (``ExecutorChild``, ``ResultLog``, ``wait_until_serving``,
``submit_named_one_offs``) are shared with ``tests/services/test_e2e_herd.py``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from bench.cli import add_env_options, options_from_args
from bench.herd import (
    Profiler,
    TimerProcess,
    fresh_namespace,
    job_record,
    local_broker_pid,
    now_ms,
    percentile,
    process_cpu_s,
    produce_jobs,
)
from bench.pipe import PipeFigures, measure_pipe
from services.ingest.client import KafkronClient
from services.ingest.producer import partition_for_key
from services.ingest.settings import IngestSettings
from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

CODEC = Codec.from_directory()
HANDLER = "examples.noop"
HERD_PREFIX = "herd-"
TARGET_1M_S = 15.0  # issue 4: 1M one-offs at one instant all SUCCEEDED within 15 s
# The executor settings bench.execute uses for its no-op scenario.
EXECUTOR_ENV = {
    "KAFKRON_EXECUTOR_MAX_IN_FLIGHT": "1000",
    "KAFKRON_EXECUTOR_LANE_BUFFER_SIZE": "20000",
    "KAFKRON_EXECUTOR_CONSUME_BATCH_SIZE": "5000",
    "KAFKRON_EXECUTOR_COMMIT_INTERVAL_MS": "500",
}


QUIET_S = 1.0
"""How long no herd result may arrive before :meth:`ResultLog.wait_all_succeeded` decodes: the
executors commit every 0.5 s (``EXECUTOR_ENV``), so a second without results means they are
done or stalled (then the count falls short and the wait goes on)."""


class IntakeTooSlowError(RuntimeError):
    """The timer had not taken in every create when the jobs fell due: figures would lie."""


# Processes ---------------------------------------------------------------------------------


class ExecutorChild(TimerProcess):
    """One ``python -m services.executor.main`` child, with its own worker id and state dir.

    Shares the timer child's environment, start, signals, RSS and CPU probes (``TimerProcess``).
    """

    module = "services.executor.main"

    def __init__(self, settings: KafkaSettings, worker_id: str, log_dir: Path, **env: str):
        super().__init__(settings, worker_id, log_dir, KAFKRON_EXECUTOR_WORKER_ID=worker_id, **env)

    def summary(self) -> str:
        """The counters the executor logs when it stops, or '' before that."""
        lines = [line for line in self.log().splitlines() if " stopping: " in line]
        return lines[-1].split(" stopping: ", 1)[1] if lines else ""


# Creates -----------------------------------------------------------------------------------


def submit_named_one_offs(
    settings: KafkaSettings, job_ids: Sequence[str], run_at_ms: int, handler: str = HANDLER
) -> float:
    """Create one-offs naming ``handler`` through the bulk client; seconds until durable.

    (``bench.herd.submit_one_offs`` names ``bench.noop``, which executors do not register.)
    """
    started = time.monotonic()
    with KafkronClient(IngestSettings(kafka=settings)) as client:
        for start in range(0, len(job_ids), 50_000):
            batch = job_ids[start : start + 50_000]
            client.submit_many(
                [{"job_id": j, "handler": handler, "run_at": run_at_ms} for j in batch]
            )
    return time.monotonic() - started


def ids_on_every_partition(prefix: str, partitions: int) -> list[str]:
    """One job id per partition (``prefix`` + n), by the Java-compatible partitioner."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < partitions:
        job_id = f"{prefix}{n}"
        found.setdefault(partition_for_key(job_id.encode(), partitions), job_id)
        n += 1
    return [found[p] for p in range(partitions)]


@dataclass(frozen=True)
class Intake:
    """How far the timer group's committed offsets on ``jobs`` are from given end offsets."""

    base: dict[int, int]  # end offsets before the load
    ends: dict[int, int]  # end offsets after it

    def applied(self, committed: dict[int, int]) -> int:
        return sum(
            max(0, min(committed.get(p, -1), end) - self.base.get(p, 0))
            for p, end in self.ends.items()
        )

    @property
    def total(self) -> int:
        return sum(end - self.base.get(p, 0) for p, end in self.ends.items())


def jobs_end_offsets(settings: KafkaSettings) -> dict[int, int]:
    topic = TopicNames(settings.namespace).jobs
    probe = Consumer(settings.client_config(**{"group.id": f"probe-{uuid.uuid4().hex[:6]}"}))
    try:
        return {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(settings.partitions)
        }
    finally:
        probe.close()


def timer_committed(settings: KafkaSettings, admin: AdminClient) -> dict[int, int]:
    """The timer group's committed offsets on ``jobs`` (-1 where none)."""
    topic = TopicNames(settings.namespace).jobs
    group = f"{settings.namespace}timer"
    request = [
        ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p) for p in range(settings.partitions)]
        )
    ]
    result = admin.list_consumer_group_offsets(request)[group].result()
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def wait_for_intake(settings: KafkaSettings, intake: Intake, deadline_ms: int) -> int:
    """Until the timer committed every create of ``intake``; returns when (epoch ms).

    Raises IntakeTooSlowError, with how many it had taken in, when ``deadline_ms`` passes.
    """
    admin = AdminClient(settings.client_config())
    while True:
        applied = intake.applied(timer_committed(settings, admin))
        if applied >= intake.total:
            return now_ms()
        if now_ms() >= deadline_ms:
            raise IntakeTooSlowError(
                f"the timer had taken in {applied:,} of {intake.total:,} creates"
            )
        time.sleep(0.1)


def measure_intake_per_s(settings: KafkaSettings, jobs: int) -> float:
    """Creates/s from submit to the timer's commit, for a pilot of jobs due in a day."""
    base = jobs_end_offsets(settings)
    ids = [f"pilot-{i:07d}" for i in range(jobs)]
    started = time.monotonic()
    submit_named_one_offs(settings, ids, now_ms() + 86_400_000)
    intake = Intake(base, jobs_end_offsets(settings))
    wait_for_intake(settings, intake, now_ms() + 600_000)
    return jobs / (time.monotonic() - started)


# Reading results ---------------------------------------------------------------------------


@dataclass
class Tally:
    """What the decoded results of the herd say."""

    statuses: Counter[str] = field(default_factory=Counter)
    succeeded: Counter[str] = field(default_factory=Counter)  # execution id -> SUCCEEDED seen
    succeeded_jobs: Counter[str] = field(default_factory=Counter)  # job id -> SUCCEEDED seen
    start_lateness_ms: list[int] = field(default_factory=list)
    first_started_ms: int = 0
    last_recorded_ms: int = 0  # the newest SUCCEEDED's recorded_at_ms (when produced)
    problems: list[dict[str, Any]] = field(default_factory=list)  # the first bad results

    def add(self, result: dict[str, Any]) -> None:
        """Count one result; start lateness from each SUCCEEDED's ``started_at_ms``.

        A run has a STARTED only if it still waited at a commit (a quick handler has none);
        its SUCCEEDED carries the same ``started_at_ms`` either way.
        """
        status = result["status"]
        self.statuses[status] += 1
        started = result["started_at_ms"]
        if started is not None:
            self.first_started_ms = min(self.first_started_ms or started, started)
        if status == "SUCCEEDED":
            self.start_lateness_ms.append(started - result["scheduled_for_ms"])
            self.succeeded[result["execution_id"]] += 1
            self.succeeded_jobs[result["job_id"]] += 1
            self.last_recorded_ms = max(self.last_recorded_ms, result["recorded_at_ms"])
        elif status != "STARTED" and len(self.problems) < 5:
            self.problems.append(result)

    def duplicates(self) -> dict[str, int]:
        """Execution ids with more than one SUCCEEDED: each one is a defect."""
        return {e: n for e, n in self.succeeded.items() if n > 1}


class ResultLog:
    """Reads ``job-results`` ``read_committed`` from the start; decodes herd results lazily.

    Records keyed ``prefix``... are kept raw while polling (decoding 2 per execution would
    compete with the system under test) and decoded by :meth:`tally`; the rest (canaries)
    are decoded at once.
    """

    def __init__(self, settings: KafkaSettings, prefix: str = HERD_PREFIX) -> None:
        self.topic = TopicNames(settings.namespace).job_results
        self._prefix = prefix.encode()
        self._consumer = Consumer(
            settings.client_config(
                **{
                    "group.id": f"e2e-reader-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "fetch.max.bytes": 52_428_800,
                }
            )
        )
        self._consumer.assign(
            [TopicPartition(self.topic, p, 0) for p in range(settings.partitions)]
        )
        self.values: list[bytes] = []
        self.last_offsets: dict[int, int] = {}  # partition -> offset of its newest herd result
        self.others: list[dict[str, Any]] = []
        self.tally_of = Tally()
        self._tallied = 0

    def poll(self, timeout_s: float = 0.1) -> int:
        """Read what is there; returns how many herd results arrived."""
        got = 0
        prefix, values, last = self._prefix, self.values, self.last_offsets
        for message in self._consumer.consume(num_messages=50_000, timeout=timeout_s):
            value = message.value()
            if message.error() is not None or value is None:
                continue
            key = message.key()
            if key is not None and key.startswith(prefix):
                values.append(value)
                last[message.partition() or 0] = message.offset() or 0
                got += 1
            else:
                self.others.append(CODEC.decode(RecordKind.EXECUTION_RESULT, value))
        return got

    def tally(self) -> Tally:
        """Decode the herd results read since the last call into :attr:`tally_of`."""
        for value in self.values[self._tallied :]:
            self.tally_of.add(CODEC.decode(RecordKind.EXECUTION_RESULT, value))
        self._tallied = len(self.values)
        return self.tally_of

    def wait_all_succeeded(
        self,
        jobs: int,
        timeout_s: float,
        on_poll: Callable[[], None] = lambda: None,
        quiet_s: float = QUIET_S,
    ) -> Tally:
        """Poll until ``jobs`` herd executions SUCCEEDED; a TimeoutError says how many did not.

        Decodes only once ``jobs`` herd results are here and none came for ``quiet_s``: a
        SUCCEEDED each, and a STARTED for each run still waiting at a commit, so with STARTEDs
        the count is reached while SUCCEEDEDs still come, and decoding everything read so far
        then (~10 us a result) took the system under test's CPU in some runs (this reader at
        ~14 us per execution instead of ~2). The figures come from the results' own times and
        the LSO samples, so waiting here changes none of them.
        """
        deadline = time.monotonic() + timeout_s
        checked = arrived = time.monotonic()
        while True:
            if self.poll():
                arrived = time.monotonic()
            on_poll()
            now = time.monotonic()
            enough = len(self.values) >= jobs and now - arrived >= quiet_s
            if enough and now - checked > 0.5:
                checked = now
                if len(self.tally().succeeded) >= jobs:
                    return self.tally_of
            if now > deadline:
                done = self.tally()
                missing = jobs - len(done.succeeded)
                raise TimeoutError(
                    f"{missing:,} of {jobs:,} executions have no SUCCEEDED after {timeout_s:.0f} s "
                    f"(results read: {dict(done.statuses)}; first bad: {done.problems[:2]})"
                )

    def close(self) -> None:
        self._consumer.close()


def wait_until_serving(
    settings: KafkaSettings, results: ResultLog, timeout_s: float = 120.0, handler: str = HANDLER
) -> None:
    """A canary one-off per partition, due now, must SUCCEED: timer and executor are live."""
    tag = uuid.uuid4().hex[:6]
    ids = ids_on_every_partition(f"canary-{tag}-", settings.partitions)
    created = now_ms()
    produce_jobs(
        settings, (job_record(j, created, run_at_ms=created, handler=handler) for j in ids)
    )
    deadline = time.monotonic() + timeout_s
    wanted = set(ids)
    while wanted - {r["job_id"] for r in results.others if r["status"] == "SUCCEEDED"}:
        if time.monotonic() > deadline:
            seen = [(r["job_id"], r["status"]) for r in results.others]
            raise TimeoutError(
                f"canaries did not all succeed within {timeout_s:.0f} s: is the timer or the "
                f"executor stuck? results seen: {seen}"
            )
        results.poll()


# Commit visibility -------------------------------------------------------------------------

Samples = list[tuple[int, dict[tuple[str, int], int]]]  # (epoch ms after the answer, LSOs)


def sample_stable_offsets(
    config: dict[str, Any], partitions: list[tuple[str, int]], interval_s: float, conn: Connection
) -> None:
    """Child process: the last stable offsets of ``partitions`` every ``interval_s`` until told."""
    admin = AdminClient(config)
    latest = OffsetSpec.latest()
    request = {TopicPartition(t, p): latest for t, p in partitions}
    samples: Samples = []
    while not conn.poll(interval_s):
        try:
            futures = admin.list_offsets(
                request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=5
            )
            offsets = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        except Exception:  # a slow answer under load: skip this sample
            continue
        samples.append((now_ms(), offsets))
    conn.recv()
    conn.send(samples)
    conn.close()


class StableOffsetSampler:
    """Runs :func:`sample_stable_offsets` in a fresh interpreter (its own GIL and priority)."""

    def __init__(self, settings: KafkaSettings, topics: list[str], interval_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        partitions = [(t, p) for t in topics for p in range(settings.partitions)]
        self._process = context.Process(
            target=sample_stable_offsets,
            args=(settings.client_config(), partitions, interval_s, child),
            daemon=True,
        )
        self._process.start()
        child.close()

    def stop(self) -> Samples:
        """Stop sampling; returns the samples (a second call returns none)."""
        if self._conn.closed:
            return []
        samples: Samples = []
        try:
            self._conn.send("stop")
            if self._conn.poll(30):
                samples = self._conn.recv()
        except (OSError, EOFError):
            pass  # the child died: no samples
        finally:
            self._conn.close()
            self._process.join(10)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(10)
        return samples


def first_visible_ms(samples: Samples, targets: dict[tuple[str, int], int]) -> int | None:
    """When every (topic, partition) in ``targets`` first had its LSO past the target offset."""
    for at_ms, stable in samples:
        if all(stable.get(tp, -1) > offset for tp, offset in targets.items()):
            return at_ms
    return None


@dataclass
class DueScan:
    """The herd's DueEvents on ``due.normal``, read back after the run (keys only)."""

    count: int = 0
    distinct: int = 0
    last_offsets: dict[int, int] = field(default_factory=dict)
    last_emitted_ms: int = 0  # newest record timestamp (the timer's produce time)


def due_reader(settings: KafkaSettings, group_prefix: str, **config: Any) -> Consumer:
    """A consumer of ``due.normal`` that reads what the timers committed (read_committed),
    every partition from its start, under a group of its own that commits nothing;
    ``config`` adds librdkafka settings."""
    topic = TopicNames(settings.namespace).due(Priority.NORMAL)
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"{group_prefix}-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                **config,
            }
        )
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
    return consumer


def scan_due(settings: KafkaSettings, prefix: str = HERD_PREFIX) -> DueScan:
    consumer = due_reader(
        settings, "e2e-due", **{"enable.partition.eof": True, "fetch.max.bytes": 52_428_800}
    )
    scan, keys, at_eof = DueScan(), set[bytes](), set[int | None]()
    key_prefix = prefix.encode()
    deadline = time.monotonic() + 300
    while len(at_eof) < settings.partitions and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=50_000, timeout=0.5):
            if message.error() is not None:
                at_eof.add(message.partition())
                continue
            key = message.key()
            if key is not None and key.startswith(key_prefix):
                scan.count += 1
                keys.add(key)
                scan.last_offsets[message.partition() or 0] = message.offset() or 0
                scan.last_emitted_ms = max(scan.last_emitted_ms, message.timestamp()[1])
    consumer.close()
    scan.distinct = len(keys)
    return scan


# The run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class E2EOptions:
    """How one end-to-end herd runs."""

    jobs: int = 1_000_000
    executors: int = 1
    partitions: int = 12
    lead_s: float | None = None
    sample_ms: int = 50
    reader_nice: int = 10
    deadline_s: float | None = None
    profile_dir: Path | None = None  # py-spy the timer and executors from the instant on
    executor_env: dict[str, str] = field(default_factory=dict)
    timer_env: dict[str, str] = field(default_factory=dict)


@dataclass
class Usage:
    """CPU seconds (user + system) of the run's processes, sampled over time."""

    pids: dict[str, int | None]
    samples: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    def sample(self, min_gap_ms: int = 0) -> None:
        at_ms = now_ms()
        if self.samples and at_ms - self.samples[-1][0] < min_gap_ms:
            return
        self.samples.append((at_ms, {n: process_cpu_s(pid) for n, pid in self.pids.items()}))

    def between(self, start_ms: int, end_ms: int) -> dict[str, float]:
        """CPU used from the last sample at or before ``start_ms`` to the first at or after
        ``end_ms`` (the outermost samples when there are none)."""
        before = [s for s in self.samples if s[0] <= start_ms] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= end_ms] or self.samples[-1:]
        first, last = before[-1][1], after[0][1]
        return {name: last[name] - first[name] for name in self.pids}


@dataclass
class RunFigures:
    """Everything one end-to-end herd measured."""

    jobs: int
    instant_ms: int
    lead_s: float
    intake_spare_s: float  # how long before the instant the timer had taken in every create
    tally: Tally
    due: DueScan
    due_visible_ms: int | None
    succeeded_visible_ms: int | None
    usage: Usage
    rss_mb: dict[str, float]
    executor_summaries: list[str]
    sample_ms: int


def choose_lead_s(settings: KafkaSettings, options: E2EOptions) -> float:
    if options.lead_s is not None:
        return options.lead_s
    pilot = min(max(options.jobs // 10, 10_000), 50_000)
    rate = measure_intake_per_s(settings, pilot)
    lead_s = 5 + 1.5 * options.jobs / rate
    print(f"pilot: {pilot:,} creates taken in at {rate:,.0f}/s -> lead {lead_s:.1f} s", flush=True)
    return lead_s


def run_e2e(settings: KafkaSettings, options: E2EOptions) -> RunFigures:
    """Start a timer and the executors, prove them live, then fire and measure the herd."""
    log_dir = settings.state_dir
    timer = TimerProcess(settings, "e2e-timer-0", log_dir, **options.timer_env)
    executors = [
        ExecutorChild(
            settings, f"e2e-executor-{i}", log_dir, **{**EXECUTOR_ENV, **options.executor_env}
        )
        for i in range(options.executors)
    ]
    names = TopicNames(settings.namespace)
    sampler: StableOffsetSampler | None = None
    results: ResultLog | None = None
    try:
        timer.start()
        for executor in executors:
            executor.start()
        sampler = StableOffsetSampler(
            settings, [names.due(Priority.NORMAL), names.job_results], options.sample_ms / 1000
        )
        os.setpriority(os.PRIO_PROCESS, 0, options.reader_nice)  # this thread and its children
        results = ResultLog(settings)
        wait_until_serving(settings, results)
        print("timer and executor(s) live: a canary per partition SUCCEEDED", flush=True)
        return _fire(settings, options, timer, executors, sampler, results)
    finally:
        if results is not None:
            results.close()
        if sampler is not None:
            sampler.stop()
        for process in [*executors, timer]:
            process.stop(timeout_s=60)


def _fire(
    settings: KafkaSettings,
    options: E2EOptions,
    timer: TimerProcess,
    executors: list[ExecutorChild],
    sampler: StableOffsetSampler,
    results: ResultLog,
) -> RunFigures:
    lead_s = choose_lead_s(settings, options)
    ids = [f"{HERD_PREFIX}{i:07d}" for i in range(options.jobs)]
    base = jobs_end_offsets(settings)
    instant_ms = now_ms() + int(lead_s * 1000)
    submit_s = submit_named_one_offs(settings, ids, instant_ms)
    print(f"submitted {options.jobs:,} one-offs in {submit_s:.1f} s (bulk client)", flush=True)
    try:
        applied_ms = wait_for_intake(settings, Intake(base, jobs_end_offsets(settings)), instant_ms)
    except IntakeTooSlowError as exc:
        raise IntakeTooSlowError(
            f"{exc} when they fell due ({lead_s:.1f} s after submitting began): the fire "
            f"figures would include create lag. Rerun with a longer --lead-s (e.g. "
            f"{2 * lead_s + 10:.0f})."
        ) from None
    print(
        f"timer took in every create {(instant_ms - applied_ms) / 1000:.1f} s before the instant",
        flush=True,
    )
    pids: dict[str, int | None] = {
        "timer": timer.pid,
        **{e.instance_id: e.pid for e in executors},
        "broker": local_broker_pid(),
        "reader": os.getpid(),
    }
    usage = Usage(pids)
    time.sleep(max(0.0, (instant_ms - now_ms() - 100) / 1000))
    usage.sample()
    profilers: list[Profiler] = []
    if options.profile_dir is not None:
        directory = options.profile_dir  # collapsed stacks, one file per process
        profilers = [
            Profiler(p.pid, directory / f"{p.instance_id}.txt") for p in [timer, *executors]
        ]
    deadline_s = options.deadline_s or max(180.0, options.jobs / 2000)
    try:
        tally = results.wait_all_succeeded(options.jobs, deadline_s, usage.sample)
    finally:
        usage.sample()
        for profiler in profilers:
            profiler.stop()
    rss_mb = {p.instance_id: p.peak_rss_mb() for p in [timer, *executors]}
    results.poll(1.0)  # late duplicates, if any
    tally = results.tally()
    for process in [*executors, timer]:
        process.stop(timeout_s=60)
    samples = sampler.stop()
    due = scan_due(settings)
    due_topic = TopicNames(settings.namespace).due(Priority.NORMAL)
    due_targets = {(due_topic, p): o for p, o in due.last_offsets.items()}
    result_targets = {(results.topic, p): o for p, o in results.last_offsets.items()}
    return RunFigures(
        jobs=options.jobs,
        instant_ms=instant_ms,
        lead_s=lead_s,
        intake_spare_s=(instant_ms - applied_ms) / 1000,
        tally=tally,
        due=due,
        due_visible_ms=first_visible_ms(samples, due_targets),
        succeeded_visible_ms=first_visible_ms(samples, result_targets),
        usage=usage,
        rss_mb=rss_mb,
        executor_summaries=[e.summary() for e in executors],
        sample_ms=options.sample_ms,
    )


# Report ------------------------------------------------------------------------------------


def seconds_after(instant_ms: int, at_ms: int | None) -> str:
    return "n/a (no sample saw it)" if at_ms is None else f"{(at_ms - instant_ms) / 1000:.2f} s"


def report(f: RunFigures, pipe: PipeFigures) -> bool:
    """Print the figures; returns False when a defect showed (duplicates, missing, failed)."""
    t, jobs = f.tally, f.jobs
    done_ms = f.succeeded_visible_ms or t.last_recorded_ms
    total_s = max(done_ms - f.instant_ms, 1) / 1000
    per_s = jobs / total_s
    late = sorted(t.start_lateness_ms)
    print(
        f"\nend-to-end herd: {jobs:,} one-offs due at one instant ({f.lead_s:.1f} s lead; the "
        f"timer had taken in every create {f.intake_spare_s:.1f} s before it)"
    )
    print(
        f"  raw pipe this run: produce {pipe.produce_per_s:,.0f}/s, "
        f"consume {pipe.consume_per_s:,.0f}/s"
    )
    print(
        f"  DueEvents: {f.due.count:,} ({f.due.distinct:,} distinct jobs); instant -> last "
        f"emitted {seconds_after(f.instant_ms, f.due.last_emitted_ms)}, -> last committed "
        f"{seconds_after(f.instant_ms, f.due_visible_ms)}"
    )
    print(
        f"  instant -> last SUCCEEDED recorded {seconds_after(f.instant_ms, t.last_recorded_ms)}"
        f", -> last SUCCEEDED committed {seconds_after(f.instant_ms, f.succeeded_visible_ms)}"
        f" (LSO sampled every {f.sample_ms} ms)"
    )
    print(
        f"  executions/s, instant -> last SUCCEEDED committed: {per_s:,.0f}; ratio to raw "
        f"produce {per_s / pipe.produce_per_s:.3f}, to raw consume {per_s / pipe.consume_per_s:.3f}"
    )
    if t.first_started_ms:
        started_s = max(done_ms - t.first_started_ms, 1) / 1000
        print(f"  executions/s, first start -> last SUCCEEDED committed: {jobs / started_s:,.0f}")
    if late:
        print(
            f"  start lateness (started_at - scheduled_for) ms: p50 {percentile(late, 0.5)}, "
            f"p99 {percentile(late, 0.99)}, max {late[-1]}"
        )
    print(f"  results: {dict(t.statuses)}")
    print("  peak RSS MiB: " + ", ".join(f"{n} {mb:.0f}" for n, mb in f.rss_mb.items()))
    print_cpu(f)
    for summary in f.executor_summaries:
        print(f"  executor: {summary}")
    if jobs == 1_000_000:
        verdict = "met" if total_s <= TARGET_1M_S else "NOT met"
        print(
            f"  target (1M all SUCCEEDED within {TARGET_1M_S:.0f} s): {verdict} ({total_s:.2f} s)"
        )
    return check(t, jobs)


def print_cpu(f: RunFigures) -> None:
    """CPU per execution of each process: while the timer fired, then until all succeeded."""
    fired_ms = f.due_visible_ms or f.due.last_emitted_ms
    done_ms = f.succeeded_visible_ms or f.tally.last_recorded_ms
    windows = [
        ("instant -> last DueEvent committed", f.instant_ms, fired_ms),
        ("-> last SUCCEEDED committed", fired_ms, done_ms),
        ("both", f.instant_ms, done_ms),
    ]
    print("  CPU us per execution (user + system, sampled at each read of results):")
    for label, start_ms, end_ms in windows:
        used = f.usage.between(start_ms, end_ms)
        shares = ", ".join(f"{n} {s / f.jobs * 1e6:.1f}" for n, s in used.items())
        print(f"    {label}: {shares}")


def check(t: Tally, jobs: int) -> bool:
    """Loud lines for every defect: duplicates, missing SUCCEEDED, failed outcomes."""
    ok = True
    duplicates = t.duplicates()
    if duplicates:
        ok = False
        sample = list(duplicates.items())[:10]
        print(f"\n!!!!! DEFECT: {len(duplicates):,} executions SUCCEEDED more than once: {sample}")
    if len(t.succeeded) != jobs:
        ok = False
        print(f"\n!!!!! DEFECT: {jobs - len(t.succeeded):,} of {jobs:,} executions never SUCCEEDED")
    bad = {s: n for s, n in t.statuses.items() if s not in ("STARTED", "SUCCEEDED")}
    if bad:
        ok = False
        print(f"\n!!!!! unexpected outcomes {bad}; first ones: {t.problems}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--executors", type=int, default=1)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--lead-s", type=float, default=None, help="default: from a pilot load")
    parser.add_argument("--sample-ms", type=int, default=50, help="LSO sampling interval")
    parser.add_argument("--reader-nice", type=int, default=10, help="niceness of this reader")
    parser.add_argument("--deadline-s", type=float, default=None)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy stacks here")
    parser.add_argument("--skip-pipe", action="store_true", help="no raw pipe baseline")
    add_env_options(parser, "timer", "executor")
    args = parser.parse_args()
    options = options_from_args(E2EOptions, args, profile_dir=args.profile)
    if args.skip_pipe:
        pipe = PipeFigures(0, float("nan"), float("nan"))
    else:
        pipe = measure_pipe(args.bootstrap, args.jobs, partitions=args.partitions)
        print(
            f"raw pipe: produce {pipe.produce_per_s:,.0f}/s, consume {pipe.consume_per_s:,.0f}/s",
            flush=True,
        )
    sys.exit(0 if run_and_report(args.bootstrap, options, pipe) else 1)


def run_and_report(bootstrap: str, options: E2EOptions, pipe: PipeFigures) -> bool:
    ok = False
    with fresh_namespace(bootstrap, "e2e", options.partitions, remove_state=False) as settings:
        try:
            ok = report(run_e2e(settings, options), pipe)
        except IntakeTooSlowError as exc:
            print(f"\nSTOPPED: {exc}")
        finally:
            if ok:
                shutil.rmtree(settings.state_dir, ignore_errors=True)
            else:
                print(f"logs kept in {settings.state_dir}")
    return ok


if __name__ == "__main__":
    main()
