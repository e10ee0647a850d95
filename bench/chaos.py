"""A crash suite for kafkron's services: a seeded schedule of SIGKILLs and SIGSTOPs under a
herd and a cron workload, then the fire ledger.

Run: ``.venv/bin/python -m bench.chaos --seed N --duration-s S [--brokers 3]
[--timers 2 --executors 2 --dags 1] [--herd 2000]``.

It runs ``timers`` timers, ``executors`` executors and ``dags`` dag processors of a fresh
namespace as child processes (``bench/fleet.py``: fleets ``a``, ``b``... each with one
instance of a service), on the running broker (``--bootstrap``, default 127.0.0.1:9092), or
with ``--brokers 3`` on a 3-node cluster of its own (``infra/cluster.py``) whose nodes are
killed too. The workload, from the first tick on for ``duration_s``:

- ``cron_per_partition`` recurring jobs per partition firing every second (catch-up all,
  overlap allowed: every tick must end SUCCEEDED), their handler running ``handler_s``;
- a herd of ``herd`` one-offs due at one instant, ``herd_at`` of the way in;
- a DAG: a root every 2 s and two dependents of it.

Every handler is ``chaos.dedup`` (``bench/effects.py``): it logs each run and makes its effect
once per execution id. The schedule (``bench/chaos_schedule.py``, ``random.Random(seed)``)
SIGKILLs an instance and starts it again, or SIGSTOPs it past the group session timeout and
SIGCONTs it; a service that exits by itself is started again and counted. At the end every
fault is undone, the run waits for every expected fire's final outcome (quiescence), reads
the ledger (``bench/fault_ledger.py``: committed DueEvents and results) and checks:

- lost: an expected fire without a final outcome;
- doubled: a fire with two final outcomes, or an outcome of a fire nobody expected;
- a handler effect made twice for one execution id, or an outcome without an effect;
- reruns (counted, allowed): runs started for an execution that had one already;
- recovery per fault: the longest wait from tick to final outcome of the recurring and DAG
  fires scheduled from the fault until the next one (every partition has some, so the
  faulted instance's partitions are among them; under 1 s when nothing stalls);
- DueEvents committed twice (counted: the executor's dedup keeps them to one outcome).

It prints the schedule, a table of the faults and the figures, and exits 1 on any lost or
doubled fire (or doubled effect, or outcome other than SUCCEEDED).
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import signal
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from bench.chaos_schedule import KILL, Fault, ScheduleSpec, describe, make_schedule
from bench.effects import DEDUP_HANDLER, effects, now_ms
from bench.fault_ledger import Ledger, read_ledger
from bench.fleet import ROOT, Fleet, cron_every_second, ticks, whole_second_ms
from bench.fleet import Ledger as ResultsReader
from infra.cluster import LocalCluster, replication_of
from infra.settings import BrokerSettings
from services.ingest.client import KafkronClient
from services.ingest.producer import partition_for_key
from services.ingest.settings import IngestSettings
from services.readiness import group_probe, wait_until_ready
from streams.admin import ensure_topics
from streams.exceptions import KafkronError
from streams.identity import execution_id
from streams.settings import KafkaSettings

PREFIX = "c-"
CRON, HERD, DAG = f"{PREFIX}cron-", f"{PREFIX}herd-", f"{PREFIX}dag-"
FLEETS = "abcdefgh"


@dataclass(frozen=True)
class ChaosPlan:
    """One chaos run: the seed, the services, the workload."""

    seed: int = 1
    duration_s: float = 150.0
    timers: int = 2
    executors: int = 2
    dags: int = 1
    brokers: int = 1  # 1: the running broker at `bootstrap`; 3: a cluster of its own
    bootstrap: str = "127.0.0.1:9092"
    namespace: str = ""  # "": a fresh one, chaos<hex>.
    partitions: int = 4
    cron_per_partition: int = 2
    herd: int = 2_000
    herd_at: float = 0.3  # of the way into the workload
    handler_s: float = 0.2  # each cron and DAG run's length (runs in flight at a fault)
    lead_s: float = 3.0  # from the workload's submission to its first tick
    session_timeout_s: float = 6.0  # every service's group session (set in its env)
    settle_s: float = 180.0  # after the last fault: the longest wait for quiescence

    @property
    def herd_at_s(self) -> int:
        """The herd's instant, whole seconds after the first tick."""
        return round(self.herd_at * self.duration_s)

    def instances(self) -> dict[str, tuple[str, ...]]:
        """Fleet name -> the services it runs (fleet ``a`` runs one of each)."""
        counts = {"timer": self.timers, "dag": self.dags, "executor": self.executors}
        size = max(counts.values())
        return {FLEETS[i]: tuple(s for s, n in counts.items() if i < n) for i in range(size)}

    def targets(self) -> list[str]:
        return [f"{f}-{s}" for f, services in self.instances().items() for s in services]

    def schedule(self) -> list[Fault]:
        spec = ScheduleSpec(
            duration_s=self.duration_s,
            services=self.targets(),
            brokers=self.brokers if self.brokers > 1 else 0,
            herd_at_s=self.herd_at_s if self.herd else None,
            session_timeout_s=self.session_timeout_s,
        )
        return make_schedule(self.seed, spec)


@dataclass(frozen=True)
class Workload:
    """The job requests of a run and every fire they must make: execution id -> (job id,
    scheduled ms)."""

    requests: list[dict[str, Any]]
    expected: dict[str, tuple[str, int]]
    first_ms: int
    end_ms: int
    herd_ms: int


def cron_job_ids(partitions: int, per_partition: int) -> list[str]:
    """Job ids of recurring jobs, ``per_partition`` on each partition (so that every
    partition fires every second and a stall shows on each)."""
    found: list[str] = []
    count: Counter[int] = Counter()
    i = 0
    while len(found) < partitions * per_partition:
        job = f"{CRON}{i:03d}"
        partition = partition_for_key(job.encode(), partitions)
        if count[partition] < per_partition:
            count[partition] += 1
            found.append(job)
        i += 1
    return found


def build_workload(plan: ChaosPlan, first_ms: int) -> Workload:
    """Recurring jobs, a DAG and a herd over [first_ms, first_ms + duration)."""
    end_ms = first_ms + int(plan.duration_s * 1000)
    herd_ms = first_ms + plan.herd_at_s * 1000
    expected: dict[str, tuple[str, int]] = {}
    requests: list[dict[str, Any]] = []
    every_s = list(ticks(first_ms, end_ms, 1_000))
    for job in cron_job_ids(plan.partitions, plan.cron_per_partition):
        requests.append(cron_every_second(job, first_ms, end_ms, handler=DEDUP_HANDLER,
                                          payload=plan.handler_s))  # fmt: skip
        expected.update((execution_id(job, t), (job, t)) for t in every_s)
    root = cron_every_second(f"{DAG}root", first_ms, end_ms, handler=DEDUP_HANDLER,
                             payload=plan.handler_s)  # fmt: skip
    root["cron"]["expression"] = "*/2 * * * * *"
    requests.append(root)
    root_ticks = [t for t in every_s if t // 1_000 % 2 == 0]
    for job in (root["job_id"], f"{DAG}child-1", f"{DAG}child-2"):
        if job != root["job_id"]:
            requests.append({"job_id": job, "handler": DEDUP_HANDLER, "payload": plan.handler_s,
                             "depends_on": [root["job_id"]], "overlap": "allow"})  # fmt: skip
        expected.update((execution_id(job, t), (job, t)) for t in root_ticks)
    for i in range(plan.herd):
        job = f"{HERD}{i:06d}"
        requests.append({"job_id": job, "handler": DEDUP_HANDLER, "payload": 0,
                         "run_at": herd_ms})  # fmt: skip
        expected[execution_id(job, herd_ms)] = (job, herd_ms)
    return Workload(requests, expected, first_ms, end_ms, herd_ms)


@dataclass
class Applied:
    """A fault as it happened: when it began and ended (host ms), and its recovery."""

    fault: Fault
    at_ms: int
    end_ms: int | None = None
    recovery_ms: int | None = None


@dataclass
class ChaosFigures:
    """What one chaos run saw."""

    plan: ChaosPlan
    workload: Workload
    applied: list[Applied]
    ledger: Ledger
    runs: Counter[tuple[str, str]]  # (phase, execution id) -> lines of bench/effects.py
    self_exits: list[str] = field(default_factory=list)  # "<instance> exited <code> at t+s"
    settled_s: float = 0.0  # from the last fault's end to quiescence

    @property
    def lost(self) -> list[str]:
        return sorted(e for e in self.workload.expected if self.ledger.finals[e] == 0)

    @property
    def doubled(self) -> dict[str, int]:
        return self.ledger.doubled()

    @property
    def unexpected(self) -> list[str]:
        return sorted(e for e in self.ledger.finals if e not in self.workload.expected)

    @property
    def doubled_effects(self) -> dict[str, int]:
        return {e: n for (phase, e), n in self.runs.items() if phase == "effect" and n > 1}

    @property
    def without_effect(self) -> list[str]:
        """Executions with a final outcome but no effect."""
        return sorted(e for e in self.ledger.finals if self.runs[("effect", e)] == 0)

    @property
    def reruns(self) -> tuple[int, int]:
        """(runs started for an execution that had one already, executions run again)."""
        again = [n - 1 for (phase, _), n in self.runs.items() if phase == "start" and n > 1]
        return sum(again), len(again)

    @property
    def bad_statuses(self) -> dict[str, int]:
        return {s: n for s, n in self.ledger.statuses.items() if s not in ("STARTED", "SUCCEEDED")}

    def defects(self) -> list[str]:
        """Every broken promise of the run, said plainly (empty: none)."""
        found = []
        if self.lost:
            found.append(f"{len(self.lost)} lost (no final outcome): {self.lost[:5]}")
        if self.doubled:
            found.append(f"{len(self.doubled)} with 2+ final outcomes: {sorted(self.doubled)[:5]}")
        if self.unexpected:
            found.append(f"{len(self.unexpected)} outcomes of unexpected fires: "
                         f"{self.unexpected[:5]}")  # fmt: skip
        if self.doubled_effects:
            found.append(f"{len(self.doubled_effects)} effects made twice: "
                         f"{sorted(self.doubled_effects)[:5]}")  # fmt: skip
        if self.without_effect:
            found.append(f"{len(self.without_effect)} outcomes without an effect: "
                         f"{self.without_effect[:5]}")  # fmt: skip
        if self.bad_statuses:
            found.append(f"outcomes other than SUCCEEDED: {self.bad_statuses}")
        return found


def recovery_ms(ledger: Ledger, workload: Workload, at_ms: int, until_ms: int) -> int | None:
    """The longest wait, from its tick to its first final outcome, of the recurring and DAG
    fires scheduled in [at_ms, until_ms) (a fault's, until the next one): ~0.3 s (a DAG
    dependent's ~0.6 s) when nothing stalls, the stall when the faulted instance held
    partitions (None: no such fire)."""
    waits = [
        min(ledger.final_at_ms[execution]) - scheduled_ms
        for execution, (job, scheduled_ms) in workload.expected.items()
        if not job.startswith(HERD)
        and at_ms <= scheduled_ms < until_ms
        and execution in ledger.final_at_ms
    ]
    return max(waits, default=None)


class ChaosRun:
    """One run of a :class:`ChaosPlan`: its services, the workload, the faults, the ledger."""

    def __init__(self, plan: ChaosPlan, work_dir: Path, cluster: LocalCluster | None) -> None:
        self.plan, self.work_dir, self.cluster = plan, work_dir, cluster
        bootstrap, factor = plan.bootstrap, 1
        if cluster is not None:
            state = cluster.start()
            bootstrap, factor = state.bootstrap, replication_of(len(state.nodes))[0]
        self.kafka = KafkaSettings(
            bootstrap_servers=bootstrap,
            namespace=plan.namespace or f"chaos{uuid.uuid4().hex[:8]}.",
            partitions=plan.partitions,
            replication_factor=factor,
            state_dir=work_dir / "state",
        )
        session_ms = str(int(plan.session_timeout_s * 1000))
        self.env = {
            "KAFKRON_REPLICATION_FACTOR": str(factor),
            **{f"KAFKRON_{s}_SESSION_TIMEOUT_MS": session_ms for s in ("TIMER", "DAG", "EXECUTOR")},
        }
        self.fleets = {name: Fleet(self.kafka, work_dir, name) for name in plan.instances()}
        self.faulted: set[str] = set()  # instances under a fault now (not supervised)
        self.self_exits: list[str] = []
        self.started_ms = now_ms()

    def _instance(self, target: str) -> tuple[Fleet, str]:
        name, service = target.split("-", 1)
        return self.fleets[name], service

    def _broker(self, target: str) -> int:
        assert self.cluster is not None
        return self.cluster.nodes()[int(target.rsplit("-", 1)[1]) - 1].node_id

    def run(self) -> ChaosFigures:
        ensure_topics(self.kafka)
        schedule = self.plan.schedule()
        print(f"seed {self.plan.seed}: namespace {self.kafka.namespace}, schedule:")
        print(describe(schedule), flush=True)
        reader = ResultsReader(self.kafka)
        try:
            for name, services in self.plan.instances().items():
                self.fleets[name].start(*services, wait=False, **self.env)
            for name, services in self.plan.instances().items():
                wait_ready_apart(self.kafka, self.fleets[name], services)
            first_ms = whole_second_ms(now_ms() + int(self.plan.lead_s * 1000))
            workload = build_workload(self.plan, first_ms)
            view = IngestSettings(kafka=self.kafka, view_dir=self.work_dir / "view")
            with KafkronClient(view) as client:
                client.submit_many(workload.requests)
            print(f"workload: {len(workload.expected):,} fires from t+0 (in "
                  f"{(first_ms - now_ms()) / 1000:.1f} s)", flush=True)  # fmt: skip
            applied = self._apply(schedule, first_ms)
            self._supervise_until(workload.end_ms)
            settled_s = self._settle(reader, set(workload.expected))
        finally:
            for fleet in self.fleets.values():
                fleet.stop()
            reader.close()
        ledger = read_ledger(self.kafka, PREFIX)
        for item, until_ms in zip(
            applied, [*(a.at_ms for a in applied[1:]), workload.end_ms], strict=True
        ):
            item.recovery_ms = recovery_ms(ledger, workload, item.at_ms, until_ms)
        return ChaosFigures(
            plan=self.plan,
            workload=workload,
            applied=applied,
            ledger=ledger,
            runs=effects(self.work_dir / "effects.log"),
            self_exits=self.self_exits,
            settled_s=settled_s,
        )

    def _apply(self, schedule: list[Fault], first_ms: int) -> list[Applied]:
        """Begin and end every fault at its time (a late step runs at once)."""
        applied = [Applied(f, 0) for f in schedule]
        steps = sorted(
            [(f.at_s, 1, i) for i, f in enumerate(schedule)]
            + [(f.end_s, 0, i) for i, f in enumerate(schedule)]
        )  # at one instant, an end before a begin
        for at_s, begin, i in steps:
            self._supervise_until(first_ms + int(at_s * 1000))
            fault = schedule[i]
            if begin:
                applied[i].at_ms = now_ms()
                self._begin(fault)
            else:
                self._end(fault)
                applied[i].end_ms = now_ms()
            verb = "begin" if begin else "end  "
            print(f"  {verb} {fault.kind} {fault.target} at t+"
                  f"{(now_ms() - first_ms) / 1000:.2f} s", flush=True)  # fmt: skip
        return applied

    def _begin(self, fault: Fault) -> None:
        if fault.is_broker:
            assert self.cluster is not None
            self.cluster.node(self._broker(fault.target)).kill()
            return
        self.faulted.add(fault.target)
        fleet, service = self._instance(fault.target)
        if not fleet.alive(service):  # it exited by itself: the supervisor's to restart
            self.faulted.discard(fault.target)
            return
        if fault.kind == KILL:
            fleet.kill(service)
        else:
            fleet.pause(service)

    def _end(self, fault: Fault) -> None:
        if fault.is_broker:
            assert self.cluster is not None
            self.cluster.node(self._broker(fault.target)).start()
            return
        if fault.target not in self.faulted:
            return
        fleet, service = self._instance(fault.target)
        if fault.kind == KILL:
            fleet.start(service, wait=False, **self.env)
        elif fleet.alive(service):
            fleet.resume(service)
        self.faulted.discard(fault.target)

    def _supervise(self) -> None:
        """Start again any instance not under a fault that exited by itself."""
        for name, services in self.plan.instances().items():
            fleet = self.fleets[name]
            for service in services:
                target = f"{name}-{service}"
                if target in self.faulted or fleet.alive(service):
                    continue
                code = fleet.wait_exit(service, 5.0, kill_after=True)
                at_s = (now_ms() - self.started_ms) / 1000
                self.self_exits.append(f"{target} exited {code} at {at_s:.1f} s into the run")
                print(f"  ! {self.self_exits[-1]}; starting it again", flush=True)
                fleet.start(service, wait=False, **self.env)

    def _supervise_until(self, at_ms: int) -> None:
        while now_ms() < at_ms:
            self._supervise()
            time.sleep(min(0.2, max(0.0, (at_ms - now_ms()) / 1000)))

    def _settle(self, reader: ResultsReader, expected: set[str]) -> float:
        """Until every expected fire has a final outcome (then 3 s more: a late duplicate
        shows), or ``settle_s``; seconds it took."""
        started = time.monotonic()
        deadline = started + self.plan.settle_s
        while time.monotonic() < deadline and not expected <= set(reader.finals()):
            self._supervise_until(now_ms() + 500)
        settled = time.monotonic() - started
        self._supervise_until(now_ms() + 3_000)
        return settled


def wait_ready_apart(
    kafka: KafkaSettings, fleet: Fleet, services: tuple[str, ...], timeout_s: float = 90.0
) -> None:
    """Until each of ``services`` of ``fleet`` has partitions, probed from a child process:
    librdkafka 2.16 can abort the process that makes an admin request to a group coordinator
    of a busy cluster (``Assertion eonce->refcnt > 0``, confluentinc/librdkafka#4605, see
    services/readiness.py); it took a 3-broker chaos run down with it, leaving the cluster and
    the services running. A probe that aborts is started again."""
    members = {s: fleet.member(s) for s in services}
    deadline = time.monotonic() + timeout_s
    context = multiprocessing.get_context("spawn")
    while True:
        child = context.Process(target=_probe_ready, args=(kafka, members, timeout_s))
        child.start()
        child.join(timeout_s + 30)
        if child.exitcode == 0:
            return
        dead = [s for s in services if not fleet.alive(s)]
        if child.exitcode != -signal.SIGABRT or dead or time.monotonic() > deadline:
            child.kill()
            raise KafkronError(f"{sorted(members.values())} not ready (probe exit "
                               f"{child.exitcode}, exited: {dead})\n{fleet.logs()}")  # fmt: skip
        print("  ! the readiness probe aborted in librdkafka (#4605); probing again", flush=True)


def _probe_ready(kafka: KafkaSettings, members: dict[str, str], timeout_s: float) -> None:
    probes = {
        m: group_probe(kafka, f"{kafka.namespace}{service}", m) for service, m in members.items()
    }
    answers = wait_until_ready(probes, timeout_s, lambda: False)
    if not all(a.ready for a in answers.values()):
        raise SystemExit(f"not ready: {answers}")


# Report -------------------------------------------------------------------------------------


def _seconds(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f} s"


def recovery_summary(applied: list[Applied]) -> str:
    """Median and max recovery of the faults measured, by kind of target and fault."""
    groups: dict[str, list[int]] = {}
    for item in applied:
        if item.recovery_ms is not None:
            service = item.fault.target.split("-", 1)[1]
            kind = "broker" if item.fault.is_broker else service
            groups.setdefault(f"{item.fault.kind} {kind}", []).append(item.recovery_ms)
    return ", ".join(
        f"{key} {statistics.median(v) / 1000:.1f}/{max(v) / 1000:.1f} s (n={len(v)})"
        for key, v in sorted(groups.items())
    )


def report(f: ChaosFigures) -> str:
    """The fault table and the figures."""
    plan, first_ms = f.plan, f.workload.first_ms
    lines = [
        f"seed {plan.seed}: {plan.duration_s:.0f} s, {plan.timers} timers, {plan.executors} "
        f"executors, {plan.dags} dag processors, {plan.brokers} broker(s), "
        f"{plan.partitions} partitions; session {plan.session_timeout_s:.0f} s",
        f"{'fault':<22}{'at':>10}{'held':>10}{'recovery':>12}",
    ]
    for item in f.applied:
        held = None if item.end_ms is None else item.end_ms - item.at_ms
        lines.append(
            f"{item.fault.kind + ' ' + item.fault.target:<22}"
            f"{'t+' + _seconds(item.at_ms - first_ms):>10}{_seconds(held):>10}"
            f"{_seconds(item.recovery_ms):>12}"
        )
    kills = sum(i.fault.kind == KILL for i in f.applied)
    broker_kills = sum(i.fault.is_broker for i in f.applied)
    reruns, rerun_executions = f.reruns
    measured = [i.recovery_ms for i in f.applied if i.recovery_ms is not None]
    phases: Counter[str] = Counter()
    for (phase, _), n in f.runs.items():
        phases[phase] += n
    lines += [
        f"faults: {kills} kills ({broker_kills} of brokers), {len(f.applied) - kills} stops; "
        f"services that exited by themselves: {len(f.self_exits)} {f.self_exits}",
        f"fires expected {len(f.workload.expected):,} (herd {plan.herd:,} at t+"
        f"{(f.workload.herd_ms - first_ms) / 1000:.0f} s); final outcomes "
        f"{sum(f.ledger.finals.values()):,}; lost {len(f.lost)}, doubled {len(f.doubled)}, "
        f"unexpected {len(f.unexpected)}; DueEvents committed twice "
        f"{len(f.ledger.doubled_fires())}; outcomes {dict(f.ledger.statuses)}",
        f"effects (deduped by execution id): {phases['effect']:,} made, "
        f"{len(f.doubled_effects)} twice, {len(f.without_effect)} outcomes without; "
        f"reruns {reruns:,} (of {rerun_executions:,} executions), "
        f"{phases['deduped']:,} deduped",
        "recovery (longest tick -> outcome of the fires from the fault to the next): "
        + (
            f"median {statistics.median(measured) / 1000:.2f} s, max {max(measured) / 1000:.2f} s"
            f" over {len(measured)}; by kind (median/max) {recovery_summary(f.applied)}"
            if measured
            else "none measured"
        ),
        f"quiescence {f.settled_s:.1f} s after the workload's end",
    ]
    found = f.defects()
    lines.append("DEFECTS: " + "; ".join(found) if found else "no defect")
    return "\n".join(lines)


@contextmanager
def own_cluster(plan: ChaosPlan, work_dir: Path) -> Iterator[LocalCluster | None]:
    """With ``brokers`` > 1, a cluster of the run's own on free ports, stopped after."""
    if plan.brokers <= 1:
        yield None
        return
    cluster = LocalCluster(
        BrokerSettings(
            home=work_dir / "kafka", count=plan.brokers, port=0, controller_port=0,
            heap_mb=512, libs_dir=ROOT / ".state" / "kafka-libs",
        )
    )  # fmt: skip
    try:
        yield cluster
    finally:
        cluster.stop()


def run_chaos(plan: ChaosPlan, work_dir: Path, keep_topics: bool = True) -> ChaosFigures:
    """One chaos run (its own cluster with ``brokers`` > 1); without ``keep_topics`` its
    namespace's topics are deleted from the running broker afterwards."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with own_cluster(plan, work_dir) as cluster:
        run = ChaosRun(plan, work_dir, cluster)
        try:
            return run.run()
        finally:
            if cluster is None and not keep_topics:
                delete_topics(run.kafka)


def delete_topics(kafka: KafkaSettings) -> None:
    """Delete the namespace's topics (a long-lived broker keeps files open per partition)."""
    admin = AdminClient(kafka.client_config())
    names = [t for t in admin.list_topics(timeout=30).topics if t.startswith(kafka.namespace)]
    for future in (admin.delete_topics(names, operation_timeout=30) if names else {}).values():
        try:
            future.result()
        except KafkaException as exc:  # a cleanup failure does not change the run's figures
            print(f"could not delete topic: {exc}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration-s", type=float, default=150.0)
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    for name, default in (("timers", 2), ("executors", 2), ("dags", 1), ("herd", 2_000),
                          ("partitions", 4), ("cron-per-partition", 2)):  # fmt: skip
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--keep", action="store_true", help="keep the run's folder")
    args = parser.parse_args()
    fields = {k: v for k, v in vars(args).items() if k != "keep"}
    plan = ChaosPlan(**fields)
    work_dir = ROOT / ".state" / "bench" / f"chaos-{plan.seed}-{uuid.uuid4().hex[:6]}"
    ok = False
    try:
        figures = run_chaos(plan, work_dir, keep_topics=args.keep)
        print(report(figures))
        ok = not figures.defects()
    finally:
        if ok and not args.keep:
            shutil.rmtree(work_dir, ignore_errors=True)
        else:
            print(f"logs kept in {work_dir}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
