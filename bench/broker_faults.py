"""Broker faults under load: a broker SIGKILLed mid-herd, mid-steady load and mid-submissions.

Run: ``.venv/bin/python -m bench.broker_faults [--brokers 3 --kill leader|controller]
[--herd 100000] [--steady-per-s 200] [--down-s 5]``.

It starts its own Kafka (one node, or a 3-node cluster: ``infra/cluster.py``) under
``.state/bench/`` on free ports, never the dev broker, creates the topics (replication 3 and
``min.insync.replicas`` 2 on a cluster), starts one timer and one executor and proves them
live (a canary per partition SUCCEEDED). Then:

1. through the bulk client: ``herd`` one-offs due at one instant T, and ``steady_per_s``
   one-offs a second due from T - 3 s for ``steady_s`` seconds; the timer has taken in every
   one before T (else the run stops and says so);
2. from T - 2 s on, a submitter creates ``live_batch`` one-offs every ``live_every_s`` (due
   1 s later), keeping which creates the client acknowledged, until the steady load ends;
3. at T + ``kill_after_s`` it SIGKILLs the target: the broker (one node, started again
   ``down_s`` later), or on a cluster the node leading most of the due partitions that is not
   the active controller (``leader``), or the active controller (``controller``), left down
   until every acknowledged create SUCCEEDED, then started again until its replicas are in
   sync;
4. it stops the services, reads the ledger (``bench/fault_ledger.py``) and checks that no
   acknowledged create was lost, every committed fire has exactly one final outcome, none
   was doubled, and the services ran through without a restart.

Figures: fires, lost, doubled, the stall (the longest gap between consecutive steady fires
from the kill on, and the latest fire), on one node the time from the broker answering again
to the first fire, and what each service logged about the broker.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from bench.cli import add_env_options, options_from_args
from bench.e2e_herd import (
    EXECUTOR_ENV,
    HANDLER,
    ExecutorChild,
    Intake,
    ResultLog,
    jobs_end_offsets,
    wait_for_intake,
    wait_until_serving,
)
from bench.fault_ledger import Ledger, read_ledger, written_job_ids
from bench.herd import ROOT, TimerProcess, now_ms
from infra.cluster import LocalCluster, replication_of
from infra.settings import BrokerSettings
from services.ingest.client import KafkronClient
from services.ingest.producer import partition_for_key
from services.ingest.settings import IngestSettings
from streams.admin import ensure_topics
from streams.exceptions import KafkronError
from streams.kafka.connection import broker_connection_log
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

PREFIX = "f-"
HERD, STEADY, LIVE = f"{PREFIX}h-", f"{PREFIX}s-", f"{PREFIX}l-"
KILLS = ("broker", "leader", "controller")
CONNECTION_LOGGER = "streams.kafka.connection"
SKIPPED_MARKERS = "Couldn't find leader endpoint for partitions"
"""What a broker's transaction coordinator logs when it drops the commit or abort markers of
a transaction for partitions it takes for deleted: on Kafka 4.3 and 4.4 also live partitions
that have no leader for a moment, as while a restarted single node's previous registration is
fenced (KAFKA-20734). The transaction then stays open in those partitions, or its aborted
records read as committed."""
NO_LEADER_STOP = "No leaders found"
"""Part of the error a service stops on when its restore asks for a partition's offsets with an
admin client whose metadata still holds a single node's fence window (every partition without
a leader for ~1.5 s of the restart): librdkafka's _NOENT "Failed to query partition leaders: No
leaders found", which ``streams/state/recovery.py`` does not retry. A kafkron defect, not
Kafka's: the service stops and its jobs wait for its restart (2 of 11 single-node runs of
2026-12-05, on Kafka 4.1.2 and 4.2.2)."""
LOGGED_BACK_WAIT_S = 30.0
"""How long a run waits, once the killed node is back, for each service to log it back. A
service's watcher asks a lost broker every second (``streams/kafka/connection.py``) with a
fresh admin client, 2 s connect and 2 s metadata timeouts: a few seconds on a loaded machine,
far less than this. A service that never logs it back still fails the run's check."""


@dataclass(frozen=True)
class FaultPlan:
    """One fault run: the cluster, the load, what is killed and when."""

    brokers: int = 1
    kill: str = "broker"  # one node: "broker"; a cluster: "leader" or "controller"
    herd: int = 10_000
    steady_per_s: int = 100
    steady_s: float = 20.0
    live_batch: int = 50
    live_every_s: float = 0.25
    lead_s: float = 10.0
    kill_after_s: float = 0.3
    down_s: float = 3.0
    partitions: int = 4
    heap_mb: int = 512
    deadline_s: float = 180.0
    stall_s: float = 30.0  # no create SUCCEEDED for this long: the rest counts as lost
    handler: str = HANDLER
    timer_env: dict[str, str] = field(default_factory=dict)
    executor_env: dict[str, str] = field(default_factory=dict)


@dataclass
class FaultFigures:
    """What one fault run saw."""

    plan: FaultPlan
    killed: int  # node id
    killed_was_controller: bool
    instant_ms: int
    kill_ms: int
    back_ms: int | None  # when the killed node answered again (one node: mid-run)
    in_sync_s: float | None  # a cluster: from its restart until every replica was in sync
    logged_back_s: float | None  # then until both services had logged it back (None: never)
    acknowledged: set[str]
    unacknowledged: set[str]
    succeeded_at_kill: int
    ledger: Ledger
    services_alive: dict[str, bool]
    service_logs: dict[str, str]
    orphans: dict[str, list[int]]  # partitions whose last stable offset stays below their end
    not_written: set[str]  # acknowledged creates missing from `jobs` (committed or not)
    skipped_markers: list[str]  # broker log lines: transaction markers dropped (KAFKA-20734)

    @property
    def pinned(self) -> list[str]:
        """The lost jobs on a partition number where a transaction nobody will end keeps
        read_committed readers (and the timer's restore) from the records after it."""
        partitions = {p for parts in self.orphans.values() for p in parts}
        count = self.plan.partitions
        return [
            job for job in self.lost
            if partition_for_key(job.split("@")[0].encode(), count) in partitions
        ]  # fmt: skip

    @property
    def lost(self) -> list[str]:
        return self.ledger.lost_creates(self.acknowledged) + self.ledger.unfinished_fires()

    def broker_lines(self, service: str) -> tuple[int, int, int]:
        """(lines 'broker ... does not answer', 'broker ... answers again', and librdkafka's
        own lines) the service logged."""
        return broker_lines(self.service_logs[service])

    def stopped_without_leader(self) -> list[str]:
        """The services that stopped on librdkafka's "No leaders found" (``NO_LEADER_STOP``)."""
        return [
            service for service, log in self.service_logs.items()
            if any("stops on" in line and NO_LEADER_STOP in line for line in log.splitlines())
        ]  # fmt: skip

    def doubled(self) -> tuple[set[str], set[str]]:
        """Executions with two outcomes or fires: (those a broker's failed abort of the
        transaction in flight at the kill would leave, on one node (KAFKA-20734), the rest).
        Both are defects; the split only says which way it went."""
        explained, rest = self.ledger.doubled_across(self.kill_ms)
        if self.plan.brokers > 1:
            return set(), explained | rest
        return explained, rest


def broker_lines(log: str) -> tuple[int, int, int]:
    """(lines 'broker ... does not answer', 'broker ... answers again', and librdkafka's own
    lines) in a service's log."""
    lines = log.splitlines()
    return (
        sum(CONNECTION_LOGGER in line and "does not answer" in line for line in lines),
        sum(CONNECTION_LOGGER in line and "answers again after" in line for line in lines),
        sum(" librdkafka: " in line for line in lines),
    )


def wait_logged_back(services: Sequence[TimerProcess], timeout_s: float) -> float | None:
    """Seconds until every service has logged each broker it lost as answering again (None:
    not within ``timeout_s``). Stopping the services as soon as the node's replicas are in
    sync cut that line off: the replicas can catch up in under a second, before a service's
    next ask (issue 20, the suite run of 2026-12-05 00:18)."""
    started = time.monotonic()
    while True:
        counts = [broker_lines(service.log())[:2] for service in services]
        if all(back >= lost for lost, back in counts):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            return None
        time.sleep(0.2)


def defects(f: FaultFigures) -> list[str]:
    """Every broken promise of the run, said plainly (empty: none)."""
    found = []
    if f.not_written:
        found.append(f"{len(f.not_written)} acknowledged creates are not on jobs at all")
    if f.lost:
        found.append(f"{len(f.lost)} lost (no final outcome): {f.lost[:5]}")
    doubled = set.union(*f.doubled())
    if doubled:
        found.append(f"{len(doubled)} executions with two outcomes or fires: {sorted(doubled)[:5]}")
    bad = {s: n for s, n in f.ledger.statuses.items() if s not in ("STARTED", "SUCCEEDED")}
    if bad:
        found.append(f"unexpected outcomes: {bad}")
    dead = [name for name, alive in f.services_alive.items() if not alive]
    if dead:
        found.append(f"services exited: {dead}")
    stopped = f.stopped_without_leader()
    if stopped:
        found.append(f"{stopped} stopped on '{NO_LEADER_STOP}'")
    if f.skipped_markers:
        first = f.skipped_markers[0]
        found.append(f"the broker dropped transaction markers (KAFKA-20734): {first}")
    return found


def skipped_markers(cluster: LocalCluster) -> list[str]:
    """The lines of every node's broker log (``server.log`` and its rolled files) saying that
    transaction markers were dropped for partitions taken for deleted."""
    return [
        line.strip()
        for node in cluster.nodes()
        for path in sorted(node.log_dir.glob("server.log*"))
        for line in path.read_text(errors="replace").splitlines()
        if SKIPPED_MARKERS in line
    ]


# The load -----------------------------------------------------------------------------------


def submit_one_offs(kafka: KafkaSettings, jobs: Sequence[tuple[str, int]], handler: str) -> None:
    """Create one-offs ``(job_id, run_at_ms)`` naming ``handler`` through the bulk client."""
    with KafkronClient(IngestSettings(kafka=kafka)) as client:
        for start in range(0, len(jobs), 50_000):
            client.submit_many(
                [
                    {"job_id": j, "handler": handler, "run_at": at}
                    for j, at in jobs[start : start + 50_000]
                ]
            )


def submit_load(kafka: KafkaSettings, plan: FaultPlan) -> int:
    """The herd and the steady load, taken in by the timer; returns the herd's instant."""
    instant_ms = now_ms() + int(plan.lead_s * 1000)
    herd = [(f"{HERD}{i:07d}", instant_ms) for i in range(plan.herd)]
    steady_start_ms, count = instant_ms - 3000, int(plan.steady_per_s * plan.steady_s)
    step_ms = 1000 / max(plan.steady_per_s, 1)
    steady = [(f"{STEADY}{i:07d}", steady_start_ms + int(i * step_ms)) for i in range(count)]
    base = jobs_end_offsets(kafka)
    submit_one_offs(kafka, [*herd, *steady], plan.handler)
    wait_for_intake(kafka, Intake(base, jobs_end_offsets(kafka)), instant_ms - 1000)
    return instant_ms


class LiveSubmitter:
    """Creates ``batch`` one-offs every ``every_s`` (due 1 s later) on a thread, keeping which
    creates the client acknowledged and which it refused (those may exist or not)."""

    def __init__(self, kafka: KafkaSettings, plan: FaultPlan) -> None:
        self._kafka, self._plan = kafka, plan
        self.acknowledged: set[str] = set()
        self.refused: set[str] = set()
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-submitter", daemon=True)

    def start(self) -> LiveSubmitter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=90)

    def _run(self) -> None:
        plan, n = self._plan, 0
        with KafkronClient(IngestSettings(kafka=self._kafka)) as client:
            while not self._stop.wait(plan.live_every_s):
                ids = [f"{LIVE}{i:07d}" for i in range(n, n + plan.live_batch)]
                n += plan.live_batch
                run_at = now_ms() + 1000
                try:
                    client.submit_many([{"job_id": j, "handler": plan.handler, "run_at": run_at}
                                        for j in ids])  # fmt: skip
                except KafkronError as exc:
                    self.refused.update(ids)
                    self.errors[type(exc).__name__] += 1
                else:
                    self.acknowledged.update(ids)


# The fault ----------------------------------------------------------------------------------


def leaders(kafka: KafkaSettings, topic: str) -> Counter[int]:
    """How many partitions of ``topic`` each node leads."""
    metadata = AdminClient(kafka.client_config()).list_topics(topic=topic, timeout=10)
    return Counter(p.leader for p in metadata.topics[topic].partitions.values())


def choose_target(cluster: LocalCluster, kafka: KafkaSettings, kill: str) -> int:
    """The node to kill: the only one, the active controller, or the node leading most of
    ``due.normal`` among those that are not the controller."""
    if kill == "broker":
        return cluster.nodes()[0].node_id
    controller = cluster.active_controller()
    if controller is None:
        raise KafkronError("no running node knows the active controller; is the cluster up?")
    if kill == "controller":
        return controller
    led = leaders(kafka, TopicNames(kafka.namespace).due(Priority.NORMAL))
    led.pop(controller, None)
    return led.most_common(1)[0][0]


def wait_in_sync(kafka: KafkaSettings, timeout_s: float) -> None:
    """Until every partition of every topic has all its replicas in sync."""
    admin = AdminClient(kafka.client_config())
    deadline = time.monotonic() + timeout_s
    while True:
        topics = admin.list_topics(timeout=10).topics.values()
        behind = [
            f"{t.topic}[{p.id}]"
            for t in topics
            for p in t.partitions.values()
            if len(p.isrs) < len(p.replicas)
        ]
        if not behind:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"replicas still out of sync after {timeout_s:.0f} s: {behind[:5]}")
        time.sleep(0.5)


@dataclass
class _Kill:
    """What :meth:`FaultRun._kill` did."""

    node: int
    was_controller: bool
    at_ms: int
    back_ms: int | None
    succeeded_before: int


class FaultRun:
    """One run of a :class:`FaultPlan` on a cluster: its services, the load and the kill."""

    def __init__(self, cluster: LocalCluster, plan: FaultPlan, work_dir: Path) -> None:
        self.cluster, self.plan, self.work_dir = cluster, plan, work_dir
        state = cluster.start()
        self.nodes = len(state.nodes)
        factor, _ = replication_of(self.nodes)
        self.kafka = KafkaSettings(
            bootstrap_servers=state.bootstrap,
            namespace=f"f{uuid.uuid4().hex[:8]}.",
            partitions=plan.partitions,
            replication_factor=factor,
            state_dir=work_dir / "state",
        )
        env = {"KAFKRON_REPLICATION_FACTOR": str(factor)}
        self.timer = TimerProcess(self.kafka, "faults-timer", work_dir, **env, **plan.timer_env)
        self.executor = ExecutorChild(
            self.kafka, "faults-executor", work_dir, **EXECUTOR_ENV, **env, **plan.executor_env
        )

    def run(self) -> FaultFigures:
        """Start the services, load, kill, wait until every acknowledged create SUCCEEDED,
        stop the services and read the ledger."""
        ensure_topics(self.kafka)
        # This process's own clients log a lost broker in one line too.
        with broker_connection_log(self.kafka):
            results = submitter = None
            try:
                self.timer.start()
                self.executor.start()
                results = ResultLog(self.kafka, prefix=PREFIX)
                wait_until_serving(self.kafka, results, handler=self.plan.handler)
                instant_ms = submit_load(self.kafka, self.plan)
                _sleep_until(instant_ms - 2000, results)
                submitter = LiveSubmitter(self.kafka, self.plan).start()
                kill = self._kill(instant_ms, results)
                _sleep_until(instant_ms + int(self.plan.steady_s * 1000) - 3000, results)
                submitter.stop()
                expected = _acknowledged(self.plan, submitter)
                missing = _wait_all_succeeded(
                    results, expected, self.plan.deadline_s, self.plan.stall_s
                )
                orphans = orphaned_partitions(self.kafka) if missing else {}
                in_sync_s = self._restore(kill) if self.nodes > 1 else None
                logged_back_s = wait_logged_back([self.timer, self.executor], LOGGED_BACK_WAIT_S)
                alive = {"timer": _alive(self.timer), "executor": _alive(self.executor)}
            finally:
                if submitter is not None:
                    submitter.stop()
                if results is not None:
                    results.close()
                self.executor.stop(timeout_s=30)  # then SIGKILL: a test's timeout must not
                self.timer.stop(timeout_s=30)  # leave them running
            return FaultFigures(
                plan=self.plan,
                killed=kill.node,
                killed_was_controller=kill.was_controller,
                instant_ms=instant_ms,
                kill_ms=kill.at_ms,
                back_ms=kill.back_ms,
                in_sync_s=in_sync_s,
                logged_back_s=logged_back_s,
                acknowledged=expected,
                unacknowledged=submitter.refused,
                succeeded_at_kill=kill.succeeded_before,
                ledger=read_ledger(self.kafka, PREFIX),
                services_alive=alive,
                service_logs={"timer": self.timer.log(), "executor": self.executor.log()},
                orphans=orphans,
                not_written=expected - written_job_ids(self.kafka, PREFIX),
                skipped_markers=skipped_markers(self.cluster),
            )

    def _kill(self, instant_ms: int, results: ResultLog) -> _Kill:
        """SIGKILL the target ``kill_after_s`` after the instant; one node is started again
        ``down_s`` later (``back_ms``: when it answered)."""
        _sleep_until(instant_ms + int(self.plan.kill_after_s * 1000), results)
        node = choose_target(self.cluster, self.kafka, self.plan.kill)
        was_controller = self.cluster.active_controller() == node
        succeeded = len(results.tally().succeeded)
        kill_ms = now_ms()
        self.cluster.node(node).kill()
        back_ms = None
        if self.nodes == 1:
            _sleep_until(kill_ms + int(self.plan.down_s * 1000), results)
            self.cluster.node(node).start()
            back_ms = now_ms()
        return _Kill(node, was_controller, kill_ms, back_ms, succeeded)

    def _restore(self, kill: _Kill) -> float:
        """Start the killed node of a cluster again; seconds until every replica is in sync."""
        started = time.monotonic()
        self.cluster.node(kill.node).start()
        kill.back_ms = now_ms()
        wait_in_sync(self.kafka, self.plan.deadline_s)
        return time.monotonic() - started


def run_faults(cluster: LocalCluster, plan: FaultPlan, work_dir: Path) -> FaultFigures:
    """One fault run (:class:`FaultRun`): the figures to check and report."""
    return FaultRun(cluster, plan, work_dir).run()


def _alive(process: TimerProcess) -> bool:
    return process.process is not None and process.process.poll() is None


def _acknowledged(plan: FaultPlan, submitter: LiveSubmitter) -> set[str]:
    """Every create the client acknowledged: the herd, the steady load, the live ones."""
    herd = {f"{HERD}{i:07d}" for i in range(plan.herd)}
    steady = {f"{STEADY}{i:07d}" for i in range(int(plan.steady_per_s * plan.steady_s))}
    return herd | steady | submitter.acknowledged


def _sleep_until(at_ms: int, results: ResultLog) -> None:
    """Read results (so none piles up) until ``at_ms``."""
    while now_ms() < at_ms:
        results.poll(min(0.1, max(0.0, (at_ms - now_ms()) / 1000)))


def _wait_all_succeeded(
    results: ResultLog, expected: set[str], timeout_s: float, stall_s: float
) -> set[str]:
    """Until every job of ``expected`` SUCCEEDED (then 2 s more: a late duplicate shows), or
    none did for ``stall_s``, or ``timeout_s`` passed; returns those that did not."""
    deadline = time.monotonic() + timeout_s
    progress, missing = time.monotonic(), set(expected)
    while missing and time.monotonic() < deadline:
        results.poll(0.2)
        now_missing = expected - set(results.tally().succeeded_jobs)
        if len(now_missing) < len(missing):
            progress = time.monotonic()
        missing = now_missing
        if time.monotonic() - progress > stall_s:
            break
    quiet_until = time.monotonic() + 2.0
    while time.monotonic() < quiet_until:
        results.poll(0.2)
    return missing


def orphaned_partitions(kafka: KafkaSettings, wait_s: float = 5.0) -> dict[str, list[int]]:
    """The namespace's partitions whose last stable offset stays below their end for
    ``wait_s``: an open transaction that nobody will end (a broker restarted without writing
    its abort markers) holds every read_committed reader there."""
    admin = AdminClient(kafka.client_config())
    metadata = admin.list_topics(timeout=10).topics
    latest = OffsetSpec.latest()
    request = {
        TopicPartition(name, p): latest
        for name, topic in metadata.items()
        if name.startswith(kafka.namespace)
        for p in topic.partitions
    }

    def ends(isolation: IsolationLevel) -> dict[tuple[str, int], int]:
        futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=10)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    before = ends(IsolationLevel.READ_COMMITTED)
    time.sleep(wait_s)
    stable, high = ends(IsolationLevel.READ_COMMITTED), ends(IsolationLevel.READ_UNCOMMITTED)
    found: dict[str, list[int]] = {}
    for (topic, partition), offset in sorted(stable.items()):
        if offset == before[(topic, partition)] < high[(topic, partition)]:
            found.setdefault(topic, []).append(partition)
    return found


# Report -------------------------------------------------------------------------------------


def report(f: FaultFigures) -> str:
    """The figures, one fact a line."""
    ledger, plan = f.ledger, f.plan
    explained, doubled = f.doubled()
    gap_ms, gap_at = ledger.longest_fire_gap_ms(STEADY, f.kill_ms - 2000)
    role = " (the active controller)" if f.killed_was_controller else ""
    lines = [
        f"{plan.brokers} broker(s); killed node {f.killed}{role} "
        f"{(f.kill_ms - f.instant_ms) / 1000:.1f} s after the herd's instant, when "
        f"{f.succeeded_at_kill:,} of {plan.herd:,} herd jobs had SUCCEEDED (committed)",
        f"load: herd {plan.herd:,}, steady {plan.steady_per_s}/s for {plan.steady_s:.0f} s, "
        f"live creates {len(f.acknowledged) - plan.herd - int(plan.steady_per_s * plan.steady_s):,}"
        f" acknowledged, {len(f.unacknowledged):,} refused",
        f"fires (committed DueEvents): {len(ledger.fires):,} of {len(ledger.fire_counts()):,} "
        f"executions; lost {len(f.lost)}, doubled {len(explained) + len(doubled)} "
        f"({len(explained)} by the broker's failed abort, KAFKA-20734); outcomes "
        f"{dict(ledger.statuses)}",
        f"stall: longest gap between steady fires from 2 s before the kill {gap_ms / 1000:.2f} s"
        f" (from {(gap_at - f.kill_ms) / 1000:+.2f} s after the kill); latest fire "
        f"{ledger.max_lateness_ms(PREFIX) / 1000:.2f} s after its time",
    ]
    if f.back_ms is not None and plan.brokers == 1:
        first = ledger.first_fire_after_ms(f.back_ms)
        after = "none" if first is None else f"{(first - f.back_ms) / 1000:.2f} s"
        lines.append(
            f"broker down {(f.back_ms - f.kill_ms) / 1000:.1f} s (kill to answering again); "
            f"broker back -> first fire {after}"
        )
    if f.in_sync_s is not None:
        lines.append(f"killed node restarted: every replica in sync {f.in_sync_s:.1f} s later")
    waited = "never" if f.logged_back_s is None else f"{f.logged_back_s:.1f} s later"
    lines.append(f"both services had logged the node back: {waited}")
    for service in f.service_logs:
        lost, back, rdkafka = f.broker_lines(service)
        lines.append(
            f"{service} log: {lost} 'does not answer', {back} 'answers again', {rdkafka} "
            f"librdkafka lines; ran through: {f.services_alive[service]}"
        )
    lines.append(f"transaction markers the broker dropped (KAFKA-20734): {len(f.skipped_markers)}")
    if f.orphans:
        lines.append(
            f"{len(f.pinned)} lost jobs behind transactions the broker left open (KAFKA-20734):"
            f" partitions {f.orphans}"
        )
    found = defects(f)
    lines.append("DEFECTS: " + "; ".join(found) if found else "no defect")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1)
    parser.add_argument("--kill", choices=KILLS, default=None, help="default: broker / leader")
    for name, default in (("herd", 100_000), ("steady-per-s", 200), ("partitions", 12)):
        parser.add_argument(f"--{name}", type=int, default=default)
    for name, seconds in (("steady-s", 30.0), ("down-s", 5.0), ("lead-s", 25.0)):
        parser.add_argument(f"--{name}", type=float, default=seconds)
    parser.add_argument("--keep", action="store_true", help="keep the run's folder")
    parser.add_argument(
        "--kafka-version", default=BrokerSettings().kafka_version,
        help="the Kafka of the run's own broker (fetched once into .state/kafka-libs/<version>)",
    )  # fmt: skip
    parser.add_argument(
        "--broker-property", action="append", default=[], metavar="NAME=VALUE",
        help="a broker property after infra/server.properties, replacing its key, e.g. "
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=15000; repeatable",
    )  # fmt: skip
    add_env_options(parser, "timer", "executor")
    args = parser.parse_args()
    properties = dict(item.partition("=")[::2] for item in args.broker_property)
    kill = args.kill or ("broker" if args.brokers == 1 else "leader")
    plan = options_from_args(FaultPlan, args, kill=kill)
    work_dir = ROOT / ".state" / "bench" / f"faults-{uuid.uuid4().hex[:6]}"
    work_dir.mkdir(parents=True)
    cluster = LocalCluster(
        BrokerSettings(
            home=work_dir / "kafka", count=plan.brokers, port=0, controller_port=0,
            heap_mb=plan.heap_mb, libs_dir=ROOT / ".state" / "kafka-libs",
            kafka_version=args.kafka_version, extra_properties=properties,
        )
    )  # fmt: skip
    print(f"Kafka {args.kafka_version}, broker properties {properties or 'as infra sets them'}")
    ok = False
    try:
        figures = run_faults(cluster, plan, work_dir)
        print(report(figures))
        ok = not defects(figures)
    finally:
        cluster.stop()
        if ok and not args.keep:
            shutil.rmtree(work_dir, ignore_errors=True)
        else:
            print(f"logs kept in {work_dir}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
