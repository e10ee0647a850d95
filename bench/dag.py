"""Issue 17's benchmark: runs of the six-node DAG with no-op handlers, real Kafka.

Run: ``.venv/bin/python -m bench.dag [--runs 1000] [--rate 50] [--bootstrap HOST:PORT]``
(``--only paced`` or ``--only full`` for one phase; ``--profile DIR`` for py-spy stacks).

One timer, one dag processor and one executor run as child processes (``TimerProcess``,
``DagProcess``, ``ExecutorChild``, each with its service's defaults unless ``--timer-env``,
``--dag-env`` or ``--executor-env`` say otherwise) in a fresh namespace whose topics are
deleted at the end; a canary root and its dependent prove them serving. Each phase creates
``--runs`` copies of the design's DAG (``bench.dag_runs.SIX_NODES``, every copy its own
job-id prefix), whose two roots are one-offs with the same ``run_at_ms``:

1. **paced**: the copies' run_at ``1000 / --rate`` ms apart (50 runs/s by default). Headline:
   the delay from an upstream's SUCCEEDED being committed to its dependent's DueEvent being
   committed, for each dependent in each run: when the DueEvent ``D@K`` was first seen minus
   when the last of D's upstreams' SUCCEEDED ``U@K`` was first seen. Target: p99 <= 100 ms.
2. **full load**: every copy's roots due at one instant. Headline: node executions/s (all
   ``6 * runs``) from the first root DueEvent to the last publish SUCCEEDED, both committed,
   and runs/s. Target: >= 2,000 node executions/s.

Commit visibility is measured with one ``read_committed`` consumer on ``job-results``,
``dag-signals``, ``dag-releases`` and every due topic, read one record per ``poll`` so each
record gets the wall time it was first seen (a record reaches a read_committed fetch only
when its transaction commits; ``bench.committed``'s LSO sampling would add its ~20 ms
period). The record's Kafka timestamp (its producer's clock at ``produce``) splits each hop
into processing (input seen -> output produced) and commit wait (produced -> seen); the
hops are SUCCEEDED -> UPSTREAM_ENDED signal (the upstream's dag partition), signal -> RUN
release (the dependent's dag partition), release -> DueEvent (the timer); with the local
shortcut (one dag processor owns every partition) no signal is produced and the first two
are one: SUCCEEDED -> RUN release.

Baseline, the same run and broker: ``bench.pipe.measure_pipe`` (records/s produce and
consume) and the raw pipe's produce -> read_committed consume latency at a paced rate
(:func:`measure_pipe_latency`, same producer settings), plain and with a transaction per
record (each hop of a release is a transaction). Latencies are printed as ratios to those
p99 latencies, rates to the pipe's records/s. Every one of each phase's ``6 * runs``
executions must SUCCEED exactly once (and get one DueEvent); otherwise the run fails loudly
(exit status 1) and keeps the children's logs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench.cli import add_env_options, options_from_args
from bench.dag_runs import (
    SIX_NODES,
    DagProcess,
    DagWatch,
    ResultsReader,
    dag_jobs,
    wait_until_dag_serving,
)
from bench.e2e_herd import ExecutorChild, jobs_end_offsets
from bench.herd import (
    Profiler,
    TimerProcess,
    fresh_namespace,
    local_broker_pid,
    now_ms,
    percentile,
    process_cpu_s,
    produce_jobs,
)
from bench.pipe import PipeFigures, measure_pipe
from streams.identity import execution_id
from streams.settings import KafkaSettings
from streams.state.recovery import RESTORED_LINE, parse_partition_ranges
from streams.topics import TopicNames

HANDLER = "examples.noop"
TARGET_P99_MS = 100  # issue 17: at 50 runs/s
TARGET_EXECUTIONS_PER_S = 2_000  # issue 17: at full load
ROOTS = [node for node, upstreams in SIX_NODES.items() if not upstreams]
DEPENDENTS = [node for node, upstreams in SIX_NODES.items() if upstreams]
QUIET_S = 1.5  # after the last publish: the executor commits every 0.5 s, so a duplicate shows


@dataclass(frozen=True)
class DagBenchOptions:
    """One benchmark run: its load, the children's extra environment, where to profile."""

    runs: int = 1_000
    rate: float = 50.0
    partitions: int = 12
    lead_s: float = 8.0
    only: str = "both"
    pipe_records: int = 100_000
    timer_env: dict[str, str] = field(default_factory=dict)
    dag_env: dict[str, str] = field(default_factory=dict)
    executor_env: dict[str, str] = field(default_factory=dict)
    profile: Path | None = None


# The raw pipe's latency --------------------------------------------------------------------


@dataclass(frozen=True)
class PipeLatency:
    """Produce -> first seen by a read_committed consumer, per record, paced (ms)."""

    records: int
    rate: float
    transactional: bool
    p50_ms: int
    p99_ms: int
    max_ms: int


def measure_pipe_latency(
    bootstrap: str, records: int, rate: float, partitions: int = 12, transactional: bool = False
) -> PipeLatency:
    """Produce ``records`` at ``rate``/s to a fresh topic (``measure_pipe``'s producer
    settings; ``transactional``: each record in its own transaction, as a commit hop of the
    services) while one read_committed consumer polls them; each record's latency is from
    just before its ``produce`` to its ``poll``. The topic is deleted after."""
    topic = f"bench.pipe-latency.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1)
    admin.create_topics([new])[topic].result()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            **({"transactional.id": f"bench-{topic}"} if transactional else {}),
        }
    )
    if transactional:
        producer.init_transactions(30)

    def send(value: bytes) -> None:
        if transactional:
            producer.begin_transaction()
        producer.produce(topic, value, value)
        if transactional:
            producer.commit_transaction(30)
        producer.poll(0)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    try:
        warm = 2 * partitions  # metadata, connections and the first fetches are not measured
        _pipe_round(send, consumer, warm, rate, 30.0)
        latencies = _pipe_round(send, consumer, records, rate, records / rate + 30)
        producer.flush(10)
    finally:
        consumer.close()
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result()
    late = sorted(latencies)
    p50, p99 = percentile(late, 0.5), percentile(late, 0.99)
    return PipeLatency(records, rate, transactional, p50, p99, late[-1])


def _pipe_round(
    send: Callable[[bytes], None], consumer: Consumer, records: int, rate: float, timeout_s: float
) -> list[int]:
    tag = uuid.uuid4().hex[:6]
    sent_ns: dict[bytes, int] = {}
    latencies: list[int] = []
    start_ns, gap_ns = time.time_ns(), int(1e9 / rate)
    deadline = time.monotonic() + timeout_s
    while len(latencies) < records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"raw pipe: {len(latencies)} of {records} records read back")
        sent = len(sent_ns)
        if sent < records and time.time_ns() >= start_ns + sent * gap_ns:
            value = f"{tag}-{sent}".encode()
            sent_ns[value] = time.time_ns()
            send(value)
            continue
        wait_s = (start_ns + sent * gap_ns - time.time_ns()) / 1e9 if sent < records else 0.05
        message = consumer.poll(min(max(wait_s, 0.0), 0.05))
        got = message.value() if message is not None and message.error() is None else None
        if got is not None and got in sent_ns:
            latencies.append((time.time_ns() - sent_ns[got]) // 1_000_000)
    return latencies


# The cluster and one phase -----------------------------------------------------------------


class Cluster:
    """The timer, the dag processor and the executor, each a child process."""

    def __init__(self, settings: KafkaSettings, options: DagBenchOptions) -> None:
        log_dir = settings.state_dir
        self.timer = TimerProcess(settings, "dag-bench-timer", log_dir, **options.timer_env)
        self.dag = DagProcess(settings, "dag-bench-dag-0", log_dir, **options.dag_env)
        self.executor = ExecutorChild(
            settings, "dag-bench-executor", log_dir, **options.executor_env
        )
        self.processes: dict[str, TimerProcess] = {
            "timer": self.timer,
            "dag": self.dag,
            "executor": self.executor,
        }

    def start(self, settings: KafkaSettings, timeout_s: float = 120.0) -> None:
        """Start the three; once the timer's and the dag processor's partitions are all
        ready (their logs say so), a canary root and its dependent must SUCCEED.

        Waiting for ready first matters: a dag processor that reads the canary root's result
        before the dependent's Job (both in its first fetch) never learns it had a dependent.
        """
        for process in self.processes.values():
            process.start()
        deadline = time.monotonic() + timeout_s
        for process in (self.timer, self.dag):
            while _ready_partitions(process) < settings.partitions:
                exited = process.process is not None and process.process.poll() is not None
                if exited or time.monotonic() > deadline:
                    raise RuntimeError(f"{process.instance_id} not ready: see {process.log_path}")
                time.sleep(0.1)
        reader = ResultsReader(settings)
        try:
            wait_until_dag_serving(settings, reader, HANDLER)
        finally:
            reader.close()

    def cpu_s(self) -> dict[str, float]:
        pids = {name: p.pid for name, p in self.processes.items()}
        pids.update(broker=local_broker_pid() or -1, reader=os.getpid())
        return {name: process_cpu_s(pid if pid > 0 else None) for name, pid in pids.items()}

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            process.stop(timeout_s=30)


def _ready_partitions(process: TimerProcess) -> int:
    """How many partitions a processor child logged restored: its INFO line per set of
    partitions (``restored partitions 0-3, 7 in 0.29 s: ...``, ``streams.state.recovery``);
    a partition is ready once restored."""
    restored: set[int] = set()
    for line in process.log().splitlines():
        found = RESTORED_LINE.search(line)
        if found:
            restored.update(parse_partition_ranges(found.group(1)))
    return len(restored)


@dataclass(frozen=True)
class Phase:
    """``runs`` copies of the DAG named ``prefix``NNNN-node; copy i's roots due at
    ``first_run_at_ms + i * spacing_ms`` (rounded to ms)."""

    name: str
    prefix: str
    runs: int
    spacing_ms: float

    def copies(self, first_run_at_ms: int) -> list[tuple[str, int]]:
        """(job-id prefix, run key) of each copy."""
        return [
            (f"{self.prefix}{i:04d}-", first_run_at_ms + round(i * self.spacing_ms))
            for i in range(self.runs)
        ]


@dataclass
class PhaseRun:
    """What one phase read back, and when it ran."""

    phase: Phase
    copies: list[tuple[str, int]]
    results: list[tuple[dict[str, Any], int, int]]
    signals: list[tuple[dict[str, Any], int, int]]
    releases: list[tuple[dict[str, Any], int, int]]
    due: list[tuple[dict[str, Any], int, int]]
    cpu_s: dict[str, float]
    error: str | None = None


def run_phase(
    settings: KafkaSettings,
    cluster: Cluster,
    watch: DagWatch,
    phase: Phase,
    options: DagBenchOptions,
) -> PhaseRun:
    """Create the phase's copies, wait until they ran (or the deadline), read them back."""
    created_ms = now_ms()
    first_run_at_ms = created_ms + int(options.lead_s * 1000)
    copies = phase.copies(first_run_at_ms)
    records = [r for p, key in copies for r in dag_jobs(p, {"run_at_ms": key}, HANDLER, created_ms)]
    produce_jobs(settings, records)
    _wait_until_taken_in(settings, first_run_at_ms - 500)
    watch.poll_until(lambda: now_ms() >= first_run_at_ms - 300, options.lead_s + 5, "the lead")
    publishes = [execution_id(p + "publish", key) for p, key in copies]
    profilers = _profilers(cluster, options.profile, phase.name)
    cpu_before = cluster.cpu_s()
    error = None
    try:
        deadline_s = phase.runs * phase.spacing_ms / 1000 + 120
        watch.poll_until(
            lambda: watch.succeeded.issuperset(publishes), deadline_s, "every publish SUCCEEDED"
        )
    except TimeoutError as exc:
        error = str(exc)
    finally:
        cpu_after = cluster.cpu_s()
        for profiler in profilers:
            profiler.stop()
    watch.poll_for(QUIET_S)
    cpu_s = {name: cpu_after[name] - cpu_before[name] for name in cpu_before}
    kinds = ("result", "signal", "release", "due")
    results, signals, releases, due = (watch.decoded(kind, phase.prefix) for kind in kinds)
    return PhaseRun(phase, copies, results, signals, releases, due, cpu_s, error)


def _wait_until_taken_in(settings: KafkaSettings, deadline_ms: int) -> None:
    """The timer and the dag processor committed the end of ``jobs`` (then a moment for the
    dag processor's EDGE_ADDED signals), or a RuntimeError says to lengthen the lead."""
    admin = AdminClient(settings.client_config())
    ends = jobs_end_offsets(settings)
    topic = TopicNames(settings.namespace).jobs
    partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
    for group in (f"{settings.namespace}timer", f"{settings.namespace}dag"):
        while True:
            request = [ConsumerGroupTopicPartitions(group, partitions)]
            result = admin.list_consumer_group_offsets(request)[group].result()
            committed = {tp.partition: tp.offset for tp in result.topic_partitions}
            if all(committed.get(p, -1) >= end for p, end in ends.items()):
                break
            if now_ms() > deadline_ms:
                raise RuntimeError(f"{group} had not taken in the jobs in time: raise --lead-s")
            time.sleep(0.1)
    time.sleep(0.3)


def _profilers(cluster: Cluster, directory: Path | None, phase: str) -> list[Profiler]:
    if directory is None:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    return [
        Profiler(p.pid, directory / f"{name}-{phase}.txt") for name, p in cluster.processes.items()
    ]


# Figures -----------------------------------------------------------------------------------

Hops = dict[str, list[int]]


def first_seen(
    rows: Iterable[tuple[dict[str, Any], int, int]], key: Callable[[dict[str, Any]], Any]
) -> dict[Any, tuple[int, int]]:
    """key(record) -> (first seen ms, its Kafka timestamp)."""
    found: dict[Any, tuple[int, int]] = {}
    for record, seen, produced in rows:
        k = key(record)
        if k not in found or seen < found[k][0]:
            found[k] = (seen, produced)
    return found


def release_delays(run: PhaseRun) -> Hops:
    """Per dependent and run: SUCCEEDED of its last upstream -> its DueEvent, both first seen,
    and that delay split into hops (processing: input seen -> output's Kafka timestamp;
    commit: output's timestamp -> seen)."""
    succeeded = first_seen(
        (r for r in run.results if r[0]["status"] == "SUCCEEDED"), lambda r: r["execution_id"]
    )
    signals = first_seen(
        (s for s in run.signals if s[0]["kind"] == "UPSTREAM_ENDED"),
        lambda s: (s["dependent_job_id"], s["upstream_execution_id"]),
    )
    releases = first_seen(
        (r for r in run.releases if r[0]["verdict"] == "RUN"),
        lambda r: execution_id(r["job_id"], r["run_key_ms"]),
    )
    due = first_seen(run.due, lambda d: d["execution_id"])
    hops: Hops = {name: [] for name in _HOP_NAMES}
    for prefix, key in run.copies:
        for node in DEPENDENTS:
            execution = execution_id(prefix + node, key)
            ups = [execution_id(prefix + u, key) for u in SIX_NODES[node]]
            if execution not in due or not all(u in succeeded for u in ups):
                continue
            last_up = max(ups, key=lambda u: succeeded[u][0])
            t0 = succeeded[last_up][0]
            hops["total"].append(due[execution][0] - t0)
            signal, release = signals.get((prefix + node, last_up)), releases.get(execution)
            if release is None:
                continue
            if signal is None:  # counted in the same transaction (the local shortcut)
                hops["dag: SUCCEEDED seen -> RUN release produced (local)"].append(release[1] - t0)
            else:
                hops["dag: SUCCEEDED seen -> signal produced"].append(signal[1] - t0)
                hops["dag: signal produced -> seen"].append(signal[0] - signal[1])
                hops["dag: signal seen -> RUN release produced"].append(release[1] - signal[0])
            hops["dag: release produced -> seen"].append(release[0] - release[1])
            hops["timer: release seen -> DueEvent produced"].append(due[execution][1] - release[0])
            hops["timer: DueEvent produced -> seen"].append(due[execution][0] - due[execution][1])
    return hops


_HOP_NAMES = (
    "total",
    "dag: SUCCEEDED seen -> signal produced",
    "dag: signal produced -> seen",
    "dag: signal seen -> RUN release produced",
    "dag: SUCCEEDED seen -> RUN release produced (local)",
    "dag: release produced -> seen",
    "timer: release seen -> DueEvent produced",
    "timer: DueEvent produced -> seen",
)


def check(run: PhaseRun) -> list[str]:
    """Defects: an execution without exactly one SUCCEEDED or one DueEvent, other outcomes."""
    wanted = {execution_id(p + node, key) for p, key in run.copies for node in SIX_NODES}
    succeeded = Counter(r["execution_id"] for r, _, _ in run.results if r["status"] == "SUCCEEDED")
    due = Counter(d["execution_id"] for d, _, _ in run.due)
    other = Counter(
        r["status"] for r, _, _ in run.results if r["status"] not in ("STARTED", "SUCCEEDED")
    )
    problems = []
    if run.error:
        problems.append(run.error)
    never = sorted(wanted - set(succeeded))
    if never:
        by_node = Counter(e.split("@")[0].split("-", 2)[2] for e in never)
        problems.append(f"{len(never):,} executions never SUCCEEDED (by node {dict(by_node)})")
    twice = {e: n for e, n in succeeded.items() if n > 1}
    if twice:
        problems.append(f"{len(twice):,} executions SUCCEEDED more than once: {list(twice)[:5]}")
    repeated = {e: n for e, n in due.items() if n > 1}
    if repeated:
        problems.append(f"{len(repeated):,} executions got several DueEvents: {list(repeated)[:5]}")
    if other:
        problems.append(f"unexpected outcomes {dict(other)}")
    stray = set(succeeded) - wanted
    if stray:
        problems.append(f"{len(stray)} SUCCEEDED executions not of the phase: {list(stray)[:5]}")
    return problems


def spread(values: list[int]) -> str:
    late = sorted(values)
    if not late:
        return "none"
    return f"p50 {percentile(late, 0.5)}, p99 {percentile(late, 0.99)}, max {late[-1]} ms"


def report_paced(run: PhaseRun, plain: PipeLatency, transactional: PipeLatency) -> None:
    hops = release_delays(run)
    total = sorted(hops["total"])
    rate = 1000 / run.phase.spacing_ms
    print(f"\npaced: {run.phase.runs:,} runs started at {rate:g} runs/s")
    if not total:
        print("  no dependent's delay could be measured")
        return
    p50, p99, worst = percentile(total, 0.5), percentile(total, 0.99), total[-1]
    met = "met" if p99 <= TARGET_P99_MS else "NOT met"
    pipe, txn = plain.p99_ms or 1, transactional.p99_ms or 1
    print(f"  {'figure':46} {'value':>10}  {'/ pipe p99':>10}  {'/ txn p99':>9}  target")
    for label, value in (("p50", p50), ("p99", p99), ("max", worst)):
        target = f"p99 <= {TARGET_P99_MS} ms: {met}" if label == "p99" else ""
        name = f"SUCCEEDED committed -> DueEvent committed {label}"
        print(f"  {name:46} {value:>7} ms  {value / pipe:>10.1f}  {value / txn:>9.1f}  {target}")
    print(f"  ({len(total):,} dependent runs; where it goes, first seen -> first seen:)")
    print_hops(hops)
    negative = sum(1 for v in total if v < 0)
    if negative:
        print(f"  !!!!! {negative} DueEvents seen before their upstream's SUCCEEDED")
    print_cpu(run)


def report_full(run: PhaseRun, pipe: PipeFigures) -> None:
    roots = {execution_id(p + r, key) for p, key in run.copies for r in ROOTS}
    publishes = {execution_id(p + "publish", key) for p, key in run.copies}
    root_due = [seen for d, seen, _ in run.due if d["execution_id"] in roots]
    published = first_seen(
        (r for r in run.results if r[0]["status"] == "SUCCEEDED"), lambda r: r["execution_id"]
    )
    done = [published[e][0] for e in publishes if e in published]
    print(f"\nfull load: {run.phase.runs:,} runs' roots due at one instant")
    if not root_due or not done:
        print("  not measured: no root DueEvent or no publish SUCCEEDED seen")
        return
    instant_ms = run.copies[0][1]
    window_s = max(max(done) - min(root_due), 1) / 1000
    executions = len(SIX_NODES) * run.phase.runs
    per_s, runs_per_s = executions / window_s, run.phase.runs / window_s
    met = "met" if per_s >= TARGET_EXECUTIONS_PER_S else "NOT met"
    print(f"  {'figure':46} {'value':>10}  {'/ produce':>10}  {'/ consume':>9}  target")
    for name, value, target in (
        ("node executions/s", per_s, f">= {TARGET_EXECUTIONS_PER_S:,}/s: {met}"),
        ("runs/s", runs_per_s, ""),
    ):
        produce, consume = value / pipe.produce_per_s, value / pipe.consume_per_s
        print(f"  {name:46} {value:>10,.0f}  {produce:>10.4f}  {consume:>9.4f}  {target}")
    print(
        f"  first root DueEvent committed {(min(root_due) - instant_ms) / 1000:+.2f} s from the "
        f"instant (fire-ahead), last publish SUCCEEDED committed "
        f"{(max(done) - instant_ms) / 1000:+.2f} s; from the instant: "
        f"{executions / max((max(done) - instant_ms) / 1000, 0.001):,.0f} executions/s"
    )
    hops = release_delays(run)
    print(f"  SUCCEEDED committed -> DueEvent committed under full load: {spread(hops['total'])}")
    print_hops(hops)
    print_timeline(run, instant_ms, published)
    print_cpu(run)


def node_depths() -> dict[str, int]:
    """Each node's depth: 0 for a root, else one more than its deepest upstream."""
    depths: dict[str, int] = {}
    for node, upstreams in SIX_NODES.items():  # in dependency order
        depths[node] = 1 + max((depths[u] for u in upstreams), default=-1)
    return depths


def print_timeline(run: PhaseRun, instant_ms: int, done: dict[Any, tuple[int, int]]) -> None:
    """Per depth of the DAG: when its first and last DueEvent and SUCCEEDED (``done``, from
    :func:`first_seen`) were first seen (committed), in ms from the instant; the gaps show
    which stage a full load waits on."""
    depths = node_depths()
    node_of = {execution_id(p + n, key): n for p, key in run.copies for n in SIX_NODES}
    due = first_seen(run.due, lambda d: d["execution_id"])
    print("  timeline, ms from the instant (first - last seen, committed):")
    for depth in sorted(set(depths.values())):
        nodes = sorted(n for n, d in depths.items() if d == depth)
        mine = [e for e, n in node_of.items() if depths[n] == depth]
        due_ms = sorted(due[e][0] - instant_ms for e in mine if e in due)
        done_ms = sorted(done[e][0] - instant_ms for e in mine if e in done)
        if not due_ms or not done_ms:
            continue
        print(
            f"    depth {depth} ({', '.join(nodes)}): DueEvent {due_ms[0]:,} - {due_ms[-1]:,}, "
            f"SUCCEEDED {done_ms[0]:,} - {done_ms[-1]:,}"
        )


def print_hops(hops: Hops) -> None:
    for name in _HOP_NAMES[1:]:
        print(f"    {name:44} {spread(hops[name])}")


def print_cpu(run: PhaseRun) -> None:
    executions = len(SIX_NODES) * run.phase.runs
    shares = ", ".join(f"{n} {s / executions * 1e6:.0f}" for n, s in run.cpu_s.items())
    print(f"  CPU us per node execution: {shares}")


# The run -----------------------------------------------------------------------------------


def run_bench(options: DagBenchOptions, bootstrap: str) -> bool:
    """Baseline, then the phases in a fresh namespace; prints the figures. False on a defect."""
    pipe = measure_pipe(bootstrap, options.pipe_records, partitions=options.partitions)
    rate = 6 * options.rate  # node executions/s of the paced phase
    latencies = (
        measure_pipe_latency(bootstrap, max(300, int(rate * 3)), rate, options.partitions),
        measure_pipe_latency(bootstrap, 300, 100, options.partitions, transactional=True),
    )
    phases = []
    if options.only in ("both", "paced"):
        phases.append(Phase("paced", "paced-", options.runs, 1000 / options.rate))
    if options.only in ("both", "full"):
        phases.append(Phase("full", "full-", options.runs, 0.0))
    runs: list[PhaseRun] = []
    with fresh_namespace(bootstrap, "dag", options.partitions, remove_state=False) as settings:
        cluster = Cluster(settings, options)
        watch = DagWatch(settings)
        try:
            cluster.start(settings)
            print("timer, dag processor and executor serving (a canary DAG run SUCCEEDED)")
            for phase in phases:
                runs.append(run_phase(settings, cluster, watch, phase, options))
                print(f"{phase.name} phase done", flush=True)
        finally:
            watch.close()
            cluster.stop()
        ok = _report(options, pipe, latencies, runs)
        if ok:
            shutil.rmtree(settings.state_dir, ignore_errors=True)
        else:
            print(f"logs kept in {settings.state_dir}")
    return ok


def _report(
    options: DagBenchOptions,
    pipe: PipeFigures,
    latencies: tuple[PipeLatency, PipeLatency],
    runs: list[PhaseRun],
) -> bool:
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"\nbench.dag: {options.runs:,} runs of the six-node DAG ({HANDLER}), one timer + one "
        f"dag processor + one executor, {options.partitions} partitions; load {load}"
    )
    print(
        f"raw pipe (same run): {pipe.records:,} records, produce {pipe.produce_per_s:,.0f}/s, "
        f"consume {pipe.consume_per_s:,.0f}/s"
    )
    for latency in latencies:
        how = "a transaction per record" if latency.transactional else "plain"
        print(
            f"  produce -> read_committed consume latency, {how}, {latency.rate:g} records/s: "
            f"p50 {latency.p50_ms}, p99 {latency.p99_ms}, max {latency.max_ms} ms"
        )
    print(
        "commit visibility: first seen by one read_committed consumer polling one record at a "
        "time (not LSO sampling)"
    )
    ok = True
    for run in runs:
        if run.phase.name == "paced":
            report_paced(run, *latencies)
        else:
            report_full(run, pipe)
        problems = check(run)
        for problem in problems:
            print(f"  !!!!! DEFECT ({run.phase.name}): {problem}")
        if not problems:
            print(f"  every one of {6 * run.phase.runs:,} executions SUCCEEDED exactly once")
        ok = ok and not problems
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1_000, help="DAG runs per phase")
    parser.add_argument("--rate", type=float, default=50.0, help="paced: runs started per second")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--lead-s", type=float, default=8.0, help="creates -> first roots due")
    parser.add_argument("--only", choices=("both", "paced", "full"), default="both")
    parser.add_argument("--pipe-records", type=int, default=100_000, help="raw pipe records")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy stacks to this dir")
    add_env_options(parser, "timer", "dag", "executor")
    args = parser.parse_args()
    options = options_from_args(DagBenchOptions, args)
    sys.exit(0 if run_bench(options, args.bootstrap) else 1)


if __name__ == "__main__":
    main()
