"""The thundering herd: N one-off jobs due at one instant, one timer process, real Kafka.

Run: ``.venv/bin/python -m bench.herd --bootstrap 127.0.0.1:9092 [--jobs 1000000]``.

Measures, in one run on one broker: the raw pipe (``bench.pipe.measure_pipe``) for the same
record count; then submits N one-offs due ``--lead-s`` ahead (through
``KafkronClient.submit_many`` when ingest is importable, else raw encoded Job records),
starts one timer process and reads every DueEvent back ``read_committed`` (proving N
distinct execution ids). Reports the time from the instant until the last DueEvent was
emitted, until all were committed (the first poll of the due topics' last stable offsets,
every ``--lso-interval-ms``, past each partition's last DueEvent: ``bench.committed``; the
reader's consume rate does not bound it) and until the reader read the last one back; fire
lateness (emitted_at - fire_at and read back - fire_at) p50/p99/max, fires per second until
all committed and its ratio to raw produce, the timer's RSS, and the CPU time per fire of
the timer (per thread kind too), the broker (when local) and the reader.
``--profile x.svg`` runs py-spy on the timer during the fire phase. ``--baseline-root DIR
--repeat N`` alternates herds of this checkout's timer and DIR's (e.g. ``git archive HEAD |
tar -x -C DIR``), N each, after one raw pipe measurement.

The helpers (``submit_one_offs``, ``DueReader``, ``TimerProcess``, ``wait_until_live``) are
shared with the timer's broker tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Self

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.ab import add_ab_options, announced_runs, timer_sides
from bench.cli import add_env_options, options_from_args
from bench.committed import StableOffsetWatch, first_time_past
from bench.pipe import measure_pipe
from streams.admin import ensure_topics
from streams.codec import Codec, RecordKind
from streams.records import Job
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

ROOT = Path(__file__).resolve().parent.parent
CODEC = Codec.from_directory()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _job_template() -> dict[str, Any]:
    """A Job with the schema's defaults, from the record model, enum members as plain values
    (as a decoded record has them)."""
    job = Job(
        job_id="",
        version=1,
        handler="bench.noop",
        timeout_ms=60_000,
        created_at_ms=0,
        updated_at_ms=0,
    )
    return {k: v.value if isinstance(v, Enum) else v for k, v in job.to_avro().items()}


# Built once: ``Job(...).to_avro()`` per record costs ~8 us against ~1 us for a copy of
# this, and the herd pre-builds a million records.
_JOB_TEMPLATE = _job_template()
_JOB_CONTAINERS = [name for name, value in _JOB_TEMPLATE.items() if isinstance(value, dict | list)]


def job_record(job_id: str, created_ms: int, **fields: Any) -> dict[str, Any]:
    """An encodable Job dict with the schema's defaults; ``fields`` override them."""
    record = {**_JOB_TEMPLATE, "job_id": job_id}
    record["created_at_ms"] = record["updated_at_ms"] = created_ms
    for name in _JOB_CONTAINERS:  # fresh ones per record: callers may change theirs
        record[name] = record[name].copy()
    record.update(fields)
    return record


def produce_jobs(settings: KafkaSettings, records: Iterable[dict[str, Any]]) -> int:
    """Produce Job records to ``jobs`` keyed by job id (Java-compatible partitioner)."""
    producer = Producer(
        settings.client_config(
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "partitioner": "murmur2_random",
                "queue.buffering.max.messages": 1_000_000,
            }
        )
    )
    topic = TopicNames(settings.namespace).jobs
    count = 0
    for record in records:
        value = CODEC.encode(RecordKind.JOB, record)
        while True:
            try:
                producer.produce(topic, value, record["job_id"].encode())
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("jobs were not all delivered within 60 s")
    return count


def submit_one_offs(
    settings: KafkaSettings, job_ids: Sequence[str], run_at_ms: int, *, raw: bool = False
) -> str:
    """Create one-off jobs due at ``run_at_ms``; returns how ("ingest" or "raw")."""
    if not raw:
        try:
            from services.ingest.client import KafkronClient
            from services.ingest.settings import IngestSettings
        except ImportError:
            raw = True
    if raw:
        created = now_ms()
        produce_jobs(settings, (job_record(j, created, run_at_ms=run_at_ms) for j in job_ids))
        return "raw"
    with KafkronClient(IngestSettings(kafka=settings)) as client:
        for start in range(0, len(job_ids), 10_000):
            batch = job_ids[start : start + 10_000]
            client.submit_many(
                [{"job_id": j, "handler": "bench.noop", "run_at": run_at_ms} for j in batch]
            )
    return "ingest"


@dataclass
class DueReader:
    """Reads every due topic from the start, ``read_committed``; keeps raw values and arrival."""

    settings: KafkaSettings
    values: list[tuple[bytes, int]] = field(default_factory=list)  # (value, read at ms)
    kafka_ts_ms: list[int] = field(default_factory=list)  # record timestamps, like values

    def __post_init__(self) -> None:
        names = TopicNames(self.settings.namespace)
        self._consumer = Consumer(
            self.settings.client_config(
                **{
                    "group.id": f"due-reader-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "fetch.max.bytes": 52_428_800,
                }
            )
        )
        self._partitions = [
            (names.due(p), partition)
            for p in Priority
            for partition in range(self.settings.partitions)
        ]
        self._consumer.assign([TopicPartition(t, p, 0) for t, p in self._partitions])

    def poll(self, timeout_s: float = 0.02) -> int:
        """Read what is there; returns how many DueEvents arrived."""
        messages = self._consumer.consume(num_messages=50_000, timeout=timeout_s)
        read_ms = now_ms()
        got = 0
        for message in messages:
            value = message.value()
            if message.error() is None and value is not None:
                self.values.append((value, read_ms))
                self.kafka_ts_ms.append(message.timestamp()[1])
                got += 1
        return got

    def partitions(self) -> list[tuple[str, int]]:
        """Every due topic partition this reader reads."""
        return list(self._partitions)

    def last_offsets(self) -> dict[tuple[str, int], int]:
        """Per partition, the offset below the reader's position: its last record read, or
        the commit marker after it (-1: nothing read). The LSO is past it exactly when the
        transaction of the last record read is committed; asking once costs nothing per record.
        """
        positions = self._consumer.position([TopicPartition(t, p) for t, p in self._partitions])
        return {(tp.topic, tp.partition): max(tp.offset, 0) - 1 for tp in positions}

    def read_until(self, count: int, timeout_s: float) -> None:
        """Poll until ``count`` DueEvents were read in total, or raise TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while len(self.values) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(self.values)} of {count} DueEvents in {timeout_s}s")
            self.poll()

    def events(self) -> list[dict[str, Any]]:
        """Every DueEvent read, decoded, with ``read_at_ms`` and ``kafka_ts_ms`` added."""
        # Callers may clear ``values``; the timestamps of what is left are the newest ones.
        timestamps = self.kafka_ts_ms[len(self.kafka_ts_ms) - len(self.values) :]
        return [
            {**CODEC.decode(RecordKind.DUE_EVENT, v), "read_at_ms": t, "kafka_ts_ms": ts}
            for (v, t), ts in zip(self.values, timestamps, strict=True)
        ]

    def close(self) -> None:
        self._consumer.close()


class TimerProcess:
    """One ``python -m services.timer.main`` child with its own instance id and state dir."""

    module = "services.timer.main"  # what the child runs (``python -m``)
    root = ROOT  # the checkout it runs from (an older tree for an A/B: ``--baseline-root``)

    def __init__(
        self, settings: KafkaSettings, instance_id: str, log_dir: Path, **env: str
    ) -> None:
        self.settings, self.instance_id = settings, instance_id
        self.log_path = log_dir / f"{instance_id}.log"
        self.env = {
            **os.environ,
            "KAFKRON_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "KAFKRON_NAMESPACE": settings.namespace,
            "KAFKRON_PARTITIONS": str(settings.partitions),
            "KAFKRON_STATE_DIR": str(settings.state_dir / instance_id),
            "KAFKRON_TIMER_INSTANCE_ID": instance_id,
            # Several run at once (failover tests, executors): no default ports; a run
            # that scrapes them passes its own.
            "KAFKRON_TIMER_METRICS_PORT": "0",
            "KAFKRON_EXECUTOR_METRICS_PORT": "0",
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module],
                env={**self.env, "PYTHONPATH": str(self.root)},
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: no commit, no leave-group; the broker finds out by itself."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def peak_rss_mb(self) -> float:
        """Peak resident memory so far (VmHWM), in MiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_s(self) -> float:
        """CPU time (user + system) the process used so far, in seconds."""
        return process_cpu_s(self.pid)

    def rss_mb(self) -> float:
        """Resident memory now (VmRSS), in MiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Profiler:
    """``py-spy record`` attached to a running process until :meth:`stop` (SIGINT writes it)."""

    def __init__(self, pid: int, output: Path, *, native: bool = False, idle: bool = False) -> None:
        py_spy = Path(sys.executable).parent / "py-spy"
        command = [str(py_spy), "record", "--pid", str(pid), "--rate", "250", "-o", str(output)]
        if output.suffix != ".svg":
            command += ["--format", "speedscope" if output.suffix == ".json" else "raw"]
        command += ["--native"] if native else []
        command += ["--idle"] if idle else []  # waits too: where the wall-clock time goes
        self.output = output
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
        print(f"profile of the fire phase: {self.output}")


def local_broker_pid() -> int | None:
    """The pid of a Kafka broker running on this machine (``kafka.Kafka``), if any."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"kafka.Kafka\x00" in command:
                return int(entry.name)
    return None


def process_cpu_s(pid: int | None) -> float:
    """CPU time (user + system) of ``pid`` so far in seconds; NaN when unknown."""
    if pid is None:
        return float("nan")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_live(
    settings: KafkaSettings, reader: DueReader, timeout_s: float = 120.0, canaries: int = 32
) -> None:
    """Submit canary one-offs due now until every partition fired one (all owned and live)."""
    created = now_ms()
    ids = [f"canary-{uuid.uuid4().hex[:6]}-{i}" for i in range(canaries)]
    produce_jobs(settings, (job_record(j, created, run_at_ms=created) for j in ids))
    reader.read_until(len(reader.values) + canaries, timeout_s)


def wait_until_applied(settings: KafkaSettings, deadline_ms: int) -> int:
    """Wait until the timer group committed the end of ``jobs``; returns when (epoch ms)."""
    admin = AdminClient(settings.client_config())
    topic = TopicNames(settings.namespace).jobs
    partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
    probe = Consumer(settings.client_config(**{"group.id": f"probe-{uuid.uuid4().hex[:6]}"}))
    ends = {tp.partition: probe.get_watermark_offsets(tp, timeout=30)[1] for tp in partitions}
    probe.close()
    group = f"{settings.namespace}timer"
    while now_ms() < deadline_ms:
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        result = admin.list_consumer_group_offsets(request)[group].result()
        done = {tp.partition: tp.offset for tp in result.topic_partitions}
        if all(done.get(p, -1) >= end for p, end in ends.items()):
            return now_ms()
        time.sleep(0.2)
    raise TimeoutError("the timer did not apply every create in time")


def percentile(sorted_values: Sequence[int], fraction: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


@dataclass(frozen=True)
class HerdOptions:
    """What one herd run does besides firing: where to profile, extra timer settings."""

    lead_s: float | None = None
    partitions: int = 12
    raw: bool = False
    profile: Path | None = None
    native: bool = False
    idle: bool = False
    keep_log: Path | None = None
    timer_env: dict[str, str] = field(default_factory=dict)
    timer_root: Path = ROOT  # whose timer runs: this checkout or a baseline tree
    label: str = ""  # printed before the figures (e.g. "baseline ")
    lso_interval_ms: int = 20


def bench_settings(bootstrap: str, prefix: str, partitions: int) -> KafkaSettings:
    """Settings of one benchmark run: a fresh namespace ``<prefix><hex>.`` on ``bootstrap``
    and its own state dir under ``.state/bench`` (created)."""
    namespace = f"{prefix}{uuid.uuid4().hex[:6]}."
    state_dir = ROOT / ".state" / "bench" / namespace.rstrip(".")
    state_dir.mkdir(parents=True, exist_ok=True)
    return KafkaSettings(
        bootstrap_servers=bootstrap,
        namespace=namespace,
        partitions=partitions,
        state_dir=state_dir,
    )


def run_herd(
    bootstrap: str, jobs: int, options: HerdOptions, raw_produce_per_s: float | None = None
) -> None:
    """One herd in a fresh namespace (deleted after); measures the raw pipe unless given."""
    if raw_produce_per_s is None:
        pipe = measure_pipe(bootstrap, jobs)
        print(f"raw pipe: produce {pipe.produce_per_s:,.0f}/s, consume {pipe.consume_per_s:,.0f}/s")
        raw_produce_per_s = pipe.produce_per_s
    with fresh_namespace(bootstrap, "herd", options.partitions) as settings:
        reader = DueReader(settings)
        try:
            _fire_herd(settings, reader, jobs, options, raw_produce_per_s)
        finally:
            reader.close()


def _fire_herd(
    settings: KafkaSettings,
    reader: DueReader,
    jobs: int,
    options: HerdOptions,
    raw_produce_per_s: float,
) -> None:
    from bench.execute import thread_cpu_seconds  # bench.execute imports this module

    timer = TimerProcess(settings, "herd-timer-0", settings.state_dir, **options.timer_env)
    timer.root = options.timer_root
    timer.start()
    profiler: Profiler | None = None
    watch: StableOffsetWatch | None = None
    try:
        wait_until_live(settings, reader)
        started_with = len(reader.values)
        ids = [f"herd-{i:07d}" for i in range(jobs)]
        # The timer must apply every create before the instant: ~30K creates/s here (bench.intake).
        lead_s = options.lead_s if options.lead_s is not None else 8 + jobs * 60e-6
        lead_ms = int(lead_s * 1000)
        instant_ms = now_ms() + lead_ms
        submitted_at = time.monotonic()
        how = submit_one_offs(settings, ids, instant_ms, raw=options.raw)
        submit_s = time.monotonic() - submitted_at
        print(f"submitted {jobs:,} one-offs ({how}) in {submit_s:.1f}s, due in {lead_ms} ms")
        applied_ms = wait_until_applied(settings, instant_ms + 600_000)
        print(
            f"timer applied every create {(instant_ms - applied_ms) / 1000:.1f} s before the "
            f"instant (creates/s into the timer: {jobs / (time.monotonic() - submitted_at):,.0f})"
            + ("  ** LATE: fire figures include create lag **" if applied_ms > instant_ms else "")
        )
        settled_rss_mb = timer.rss_mb()
        time.sleep(max(0.0, (instant_ms - now_ms() - 100) / 1000))
        watch = StableOffsetWatch(
            settings.bootstrap_servers, reader.partitions(), options.lso_interval_ms
        ).start()
        if options.profile is not None:
            profiler = Profiler(
                timer.pid, options.profile, native=options.native, idle=options.idle
            )
        broker = local_broker_pid()
        cpu_before_s = timer.cpu_s(), process_cpu_s(broker), process_cpu_s(os.getpid())
        threads_before_s = thread_cpu_seconds(timer.pid)
        reader.read_until(started_with + jobs, timeout_s=lead_ms / 1000 + 600)
        cpu_after_s = timer.cpu_s(), process_cpu_s(broker), process_cpu_s(os.getpid())
        threads_after_s = thread_cpu_seconds(timer.pid)
        watch.stop()
        fire_cpu_s, broker_cpu_s, reader_cpu_s = (
            after - before for after, before in zip(cpu_after_s, cpu_before_s, strict=True)
        )
        rss_mb = timer.peak_rss_mb()
    finally:
        if watch is not None:
            watch.stop()
        if profiler is not None:
            profiler.stop()
        timer.stop()
        if options.keep_log is not None:
            shutil.copy(timer.log_path, options.keep_log)
    events = [e for e in reader.events() if e["job_id"].startswith("herd-")]
    committed_ms = first_time_past(watch.polls, reader.last_offsets())
    label = options.label
    print(f"{label}herd of {jobs:,} (timer from {options.timer_root}), load {_load()}")
    report(events, jobs, instant_ms, raw_produce_per_s, rss_mb, committed_ms, label)
    if committed_ms is not None:
        before = [p.at_ms for p in watch.polls if p.at_ms < committed_ms]
        since_ms = committed_ms - before[-1] if before else 0
        print(f"  (the poll before that one was answered {since_ms} ms earlier)")
    median_gap_ms, max_gap_ms = watch.intervals_ms()
    print(
        f"  LSO polls: {len(watch.polls)} (every {median_gap_ms} ms median, {max_gap_ms} ms max, "
        f"{watch.failures} failed), their CPU {watch.cpu_s:.3f} s "
        f"({watch.cpu_s / max(len(watch.polls), 1) * 1e3:.2f} ms a poll, in its own process "
        "with its librdkafka threads; not in the reader's CPU below)"
    )
    print(f"  timer RSS with every job applied, before the instant: {settled_rss_mb:.0f} MiB")
    by_thread = {
        kind: (seconds - threads_before_s.get(kind, 0.0)) / jobs * 1e6
        for kind, seconds in threads_after_s.items()
    }
    threads = ", ".join(f"{k} {v:.2f}" for k, v in sorted(by_thread.items(), key=lambda i: -i[1]))
    print(
        f"  {label}timer CPU during the fire phase: {fire_cpu_s:.2f} s "
        f"({fire_cpu_s / jobs * 1e6:.2f} us per fire, incl. its librdkafka threads: {threads}); "
        f"broker {broker_cpu_s / jobs * 1e6:.1f} us, this reader {reader_cpu_s / jobs * 1e6:.1f} us"
    )


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def report(
    events: list[dict[str, Any]],
    jobs: int,
    instant_ms: int,
    raw_produce_per_s: float,
    rss: float,
    committed_ms: int | None = None,
    label: str = "",
) -> None:
    """Print the fire figures; rates count until all committed (the LSO when known)."""
    ids = {e["execution_id"] for e in events}
    lateness = sorted(e["emitted_at_ms"] - e["fire_at_ms"] for e in events)
    read_lateness = sorted(e["read_at_ms"] - e["fire_at_ms"] for e in events)
    first_emit = min(e["emitted_at_ms"] for e in events)
    last_emit = max(e["emitted_at_ms"] for e in events)
    last_read = max(e["read_at_ms"] for e in events)
    drain_s = max(last_emit - first_emit, 1) / 1000
    # A fire counts once its transaction committed: fires are produced ahead of their commit,
    # so emitted_at alone overstates the rate. The broker's LSO says when (the reader's
    # read-back is later by its own consume rate); without it, the read-back is the bound.
    read_s = max(last_read - instant_ms, 1) / 1000
    committed_s = max(committed_ms - instant_ms, 1) / 1000 if committed_ms is not None else read_s
    committed_per_s = jobs / committed_s
    print(f"DueEvents: {len(events):,} read, {len(ids):,} distinct execution ids of {jobs:,}")
    print(f"  {label}instant -> last emitted: {(last_emit - instant_ms) / 1000:.2f} s")
    if committed_ms is not None:
        print(f"  {label}instant -> all committed (LSO): {committed_s:.2f} s")
    else:
        print("  instant -> all committed (LSO): not seen (no LSO poll past the last records)")
    print(f"  instant -> last read back by the reader (read_committed): {read_s:.2f} s")
    print(f"  fires/s (first to last emit): {jobs / drain_s:,.0f}")
    print(f"  {label}fires/s (instant to all committed): {committed_per_s:,.0f}")
    print(
        f"  lateness emitted-fire_at ms: p50 {percentile(lateness, 0.5)}, "
        f"p99 {percentile(lateness, 0.99)}, max {lateness[-1]}"
    )
    print(
        f"  lateness read-fire_at ms:    p50 {percentile(read_lateness, 0.5)}, "
        f"p99 {percentile(read_lateness, 0.99)}, max {read_lateness[-1]}"
    )
    print(f"  timer peak RSS: {rss:.0f} MiB")
    print(
        f"  {label}ratio to raw produce/s: committed {committed_per_s / raw_produce_per_s:.2f}, "
        f"emitted {jobs / drain_s / raw_produce_per_s:.2f}, "
        f"read back {jobs / read_s / raw_produce_per_s:.2f}"
    )


@contextmanager
def fresh_namespace(
    bootstrap: str, prefix: str, partitions: int, *, remove_state: bool = True
) -> Iterator[KafkaSettings]:
    """A run's own namespace (:func:`bench_settings`) with its topics created; deleted at the
    end, also on an error, and its state dir with it unless ``remove_state`` is false."""
    settings = bench_settings(bootstrap, prefix, partitions)
    try:
        ensure_topics(settings)
        yield settings
    finally:
        delete_namespace(bootstrap, settings.namespace)
        if remove_state:
            shutil.rmtree(settings.state_dir, ignore_errors=True)


def delete_namespace(bootstrap: str, namespace: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(namespace)]
    if topics:
        for future in admin.delete_topics(topics).values():
            try:
                future.result()
            except Exception as exc:
                print(f"could not delete a bench topic: {exc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--lead-s", type=float, default=None)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--raw", action="store_true", help="produce Job records, skip ingest")
    parser.add_argument(
        "--profile", type=Path, default=None, help="py-spy the timer's fire phase to this .svg"
    )
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames)")
    parser.add_argument("--idle", action="store_true", help="py-spy --idle (waits too)")
    parser.add_argument("--keep-log", type=Path, default=None, help="copy the timer log here")
    add_env_options(parser, "timer")
    add_ab_options(parser, "timer", "herds")
    parser.add_argument(
        "--lso-interval-ms", type=int, default=20, help="how often the due topics' LSOs are polled"
    )
    args = parser.parse_args()
    options = options_from_args(HerdOptions, args)
    sides = timer_sides(options, args.baseline_root)
    pipe = measure_pipe(args.bootstrap, args.jobs)
    print(f"raw pipe: produce {pipe.produce_per_s:,.0f}/s, consume {pipe.consume_per_s:,.0f}/s")
    for side in announced_runs(sides, args.repeat):
        run_herd(args.bootstrap, args.jobs, side, pipe.produce_per_s)


if __name__ == "__main__":
    main()
